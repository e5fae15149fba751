package instrument

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"h5ingest/compress"
	"h5ingest/compress/bitshuffle"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/pipeline"
	"h5ingest/source/capture"
)

var testFormat = frame.Format{
	Geometry: frame.Geometry{ChipsX: 1, ChipsY: 1, ChipWidth: 8, ChipHeight: 4},
	Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR,
}

// fakeSource hands out n frames of a fixed payload, then io.EOF.
type fakeSource struct {
	f        pipeline.Frame
	n        int
	released int
}

func (s *fakeSource) Next(context.Context) (*pipeline.Frame, error) {
	if s.n == 0 {
		return nil, io.EOF
	}
	s.n--
	return &s.f, nil
}

func (s *fakeSource) Release(*pipeline.Frame) { s.released++ }

// fakeBackend fills each image with its frame number; frames whose number
// is odd fail.
type fakeBackend struct{ calls int }

func (b *fakeBackend) Name() string { return "fake" }
func (b *fakeBackend) Close() error { return nil }
func (b *fakeBackend) Decode(batch []gpu.Job) error {
	b.calls++
	for i := range batch {
		j := &batch[i]
		if j.Header.FrameNumber%2 == 1 {
			j.Err = errors.New("odd")
			continue
		}
		for k := range j.Image {
			j.Image[k] = byte(j.Header.FrameNumber)
		}
	}
	return nil
}

// allocBackend is a fakeBackend with a host allocator.
type allocBackend struct{ fakeBackend }

func (allocBackend) AllocHost(n int) ([]byte, error) { return make([]byte, n), nil }
func (allocBackend) FreeHost([]byte) error           { return nil }
func (allocBackend) RegisterHost([]byte) error       { return nil }
func (allocBackend) UnregisterHost([]byte) error     { return nil }

// deviceBackend is an allocBackend that reserves device buffers.
type deviceBackend struct{ allocBackend }

func (deviceBackend) Reserve(frame.Format, int, int, bool) (func(), error) { return func() {}, nil }

// reserveBackend reserves device buffers but allocates no host memory.
type reserveBackend struct{ fakeBackend }

func (reserveBackend) Reserve(frame.Format, int, int, bool) (func(), error) { return func() {}, nil }

// ringSource is a fakeSource whose payloads lie in memory it names.
type ringSource struct {
	fakeSource
	ring []byte
}

func (s *ringSource) HostMemory() [][]byte { return [][]byte{s.ring} }

// countSink counts what it is given.
type countSink struct{ chunks, records int }

func (s *countSink) WriteChunk(int, []byte) error      { s.chunks++; return nil }
func (s *countSink) SetRecord(int, frame.Record) error { s.records++; return nil }

func TestStagesCount(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := New()
	if err := st.Register(reg, 3); err != nil {
		t.Fatal(err)
	}

	fs := &fakeSource{f: pipeline.Frame{Payload: make([]byte, 100)}, n: 5}
	src := st.Source(fs)
	var held []*pipeline.Frame
	for {
		f, err := src.Next(context.Background())
		if err != nil {
			break
		}
		held = append(held, f)
	}
	src.Release(held[0])
	if Value(st.SourceFrames) != 5 || Value(st.SourceBytes) != 500 || Value(st.SourceInFlight) != 4 || fs.released != 1 {
		t.Errorf("source: frames %g bytes %g in flight %g released %d; want 5, 500, 4, 1",
			Value(st.SourceFrames), Value(st.SourceBytes), Value(st.SourceInFlight), fs.released)
	}
	if n := Snapshot(st.SourceWait).Count; n != 6 {
		t.Errorf("%d Next calls timed, want 6", n)
	}

	if _, ok := src.(pipeline.HostMemorySource); ok {
		t.Error("the wrapper claims host memory its source lacks")
	}
	ring := &ringSource{ring: make([]byte, 64)}
	if m, ok := st.Source(ring).(pipeline.HostMemorySource); !ok || len(m.HostMemory()) != 1 || &m.HostMemory()[0][0] != &ring.ring[0] {
		t.Error("the wrapper hides its source's host memory")
	}
	if _, ok := src.(pipeline.HostBufferSource); ok {
		t.Error("the wrapper claims host buffers its source lacks")
	}
	if _, ok := st.Source(&capture.Source{}).(pipeline.HostBufferSource); !ok {
		t.Error("the wrapper hides its source's host buffers")
	}

	b := st.Backend(&fakeBackend{})
	if _, ok := b.(gpu.HostAllocator); ok {
		t.Error("the wrapper claims a host allocator its backend lacks")
	}
	if _, ok := st.Backend(&allocBackend{}).(gpu.HostAllocator); !ok {
		t.Error("the wrapper hides its backend's host allocator")
	}
	if _, ok := b.(gpu.Reserver); ok {
		t.Error("the wrapper claims a reservation its backend lacks")
	}
	for _, inner := range []gpu.Backend{&deviceBackend{}, &reserveBackend{}} {
		w := st.Backend(inner)
		_, host := inner.(gpu.HostAllocator)
		if _, ok := w.(gpu.Reserver); !ok {
			t.Errorf("the wrapper of %T hides its backend's Reserve", inner)
		}
		if _, ok := w.(gpu.HostAllocator); ok != host {
			t.Errorf("the wrapper of %T: host allocator %v, want %v", inner, ok, host)
		}
	}
	jobs := make([]gpu.Job, 3)
	for i := range jobs {
		jobs[i] = gpu.Job{Header: frame.Header{FrameNumber: uint64(i), Format: testFormat}, Payload: make([]byte, 10), Image: make([]byte, testFormat.ImageSize())}
	}
	if err := b.Decode(jobs); err != nil {
		t.Fatal(err)
	}
	if Value(st.DecodeFrames) != 2 || Value(st.DecodeErrors) != 1 || Value(st.DecodeBytes) != 30 || Snapshot(st.DecodeSeconds).Count != 1 {
		t.Errorf("decode: frames %g errors %g bytes %g; want 2, 1, 30", Value(st.DecodeFrames), Value(st.DecodeErrors), Value(st.DecodeBytes))
	}

	newCodec := st.NewCodec(func() (compress.Codec, error) { return compress.New("none", 2, 0) })
	c, err := newCodec()
	if err != nil {
		t.Fatal(err)
	}
	dst := []byte("prefix")
	out, err := c.Encode(dst, make([]byte, 64))
	if err != nil {
		t.Fatal(err)
	}
	if Value(st.CompressIn) != 64 || Value(st.CompressOut) != float64(len(out)-len(dst)) {
		t.Errorf("compress: in %g out %g, want 64 and %d", Value(st.CompressIn), Value(st.CompressOut), len(out)-len(dst))
	}

	cs := &countSink{}
	sink := st.Sink(cs)
	sink.WriteChunk(0, make([]byte, 7))
	sink.SetRecord(0, frame.Record{Status: frame.StatusOK})
	sink.SetRecord(1, frame.Record{Status: frame.StatusMissing})
	sink.SetRecord(2, frame.Record{Status: frame.StatusMissing})
	sink.SetRecord(3, frame.Record{Status: frame.StatusRejected})
	if cs.chunks != 1 || cs.records != 4 || Value(st.WriteBytes) != 7 {
		t.Errorf("sink: %d chunks, %d records, %g bytes counted", cs.chunks, cs.records, Value(st.WriteBytes))
	}

	var sb strings.Builder
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&sb, mf); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{
		`h5ingest_records_total{module="3",status="ok"} 1`,
		`h5ingest_records_total{module="3",status="missing"} 2`,
		`h5ingest_records_total{module="3",status="crc_mismatch"} 0`,
		`h5ingest_records_total{module="3",status="rejected"} 1`,
		`h5ingest_source_frames_in_flight{module="3"} 4`,
		`h5ingest_decode_batch_seconds_count{module="3"} 1`,
		`h5ingest_write_frames_total{module="3"} 1`,
	} {
		if !strings.Contains(sb.String(), want+"\n") {
			t.Errorf("scrape lacks %s", want)
		}
	}
}

func TestWrappersAllocateNothing(t *testing.T) {
	st := New()
	st.Preview.Enable(PreviewInterval)
	fs := &fakeSource{f: pipeline.Frame{Payload: make([]byte, 100)}, n: 1 << 30}
	src := st.Source(fs)
	b := st.Backend(&fakeBackend{})
	c, _ := st.NewCodec(func() (compress.Codec, error) { return compress.New("none", 2, 0) })()
	ps, _ := st.NewCodec(func() (compress.Codec, error) { return compress.New("bslz4", 2, 0) })()
	sink := st.Sink(&countSink{})
	jobs := []gpu.Job{
		// The preview keeps the first: a transposed image, which it undoes.
		{Header: frame.Header{Format: testFormat}, Payload: make([]byte, 10), Image: make([]byte, testFormat.ImageSize()), ShuffleBlock: 8},
		{Header: frame.Header{Format: testFormat}, Payload: make([]byte, 10), Image: make([]byte, testFormat.ImageSize())},
	}
	chunk := make([]byte, 0, 1024)
	b.Decode(jobs) // the preview's first copy allocates its buffer
	n := testing.AllocsPerRun(1000, func() {
		f, _ := src.Next(context.Background())
		b.Decode(jobs)
		chunk, _ = ps.(compress.Preshuffled).EncodeShuffled(chunk[:0], jobs[0].Image)
		chunk, _ = c.Encode(chunk[:0], jobs[1].Image)
		sink.WriteChunk(0, chunk)
		sink.SetRecord(0, frame.Record{})
		src.Release(f)
	})
	if n != 0 {
		t.Errorf("%g allocations per frame through the wrappers", n)
	}
}

func TestPreview(t *testing.T) {
	p := NewPreview(time.Hour)
	job := func(n uint64, err error) gpu.Job {
		img := make([]byte, testFormat.ImageSize())
		for i := range img {
			img[i] = byte(n)
		}
		return gpu.Job{Header: frame.Header{FrameNumber: n, Format: testFormat}, Image: img, Err: err}
	}
	if got := p.Latest(nil); got.Seq != 0 || len(got.Image) != 0 {
		t.Fatalf("an empty preview gives %+v", got)
	}
	now := time.Now()
	off := NewPreview(0)
	off.offer([]gpu.Job{job(2, nil)}, now)
	if seq, _ := off.Seq(); seq != 0 {
		t.Error("a preview not enabled kept an image")
	}
	p.offer([]gpu.Job{job(1, errors.New("bad")), job(2, nil)}, now)
	got := p.Latest(nil)
	if got.Seq != 1 || got.Number != 2 || got.Format != testFormat || len(got.Image) != testFormat.ImageSize() || got.Image[0] != 2 {
		t.Fatalf("after the first batch: seq %d frame %d, %d bytes", got.Seq, got.Number, len(got.Image))
	}
	p.offer([]gpu.Job{job(4, nil)}, now.Add(time.Minute)) // not due yet
	if got := p.Latest(nil); got.Number != 2 {
		t.Errorf("kept frame %d before the interval passed", got.Number)
	}
	p.mu.Lock() // a reader holds the image: the decoder must not wait
	done := make(chan struct{})
	go func() { p.offer([]gpu.Job{job(6, nil)}, now.Add(2*time.Hour)); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("offer waited for a reader")
	}
	p.mu.Unlock()
	p.offer([]gpu.Job{job(8, nil)}, now.Add(4*time.Hour))
	if got := p.Latest(nil); got.Number != 8 || got.Seq != 2 {
		t.Errorf("frame %d seq %d, want 8 and 2", got.Number, got.Seq)
	}
}

// TestCodecKeepsPreshuffled checks that a counted codec offers the
// pre-transposed path exactly where the codec it wraps does, and counts
// chunks encoded either way.
func TestCodecKeepsPreshuffled(t *testing.T) {
	for _, name := range compress.Names() {
		st := New()
		inner, err := compress.New(name, 4, 0)
		if err != nil {
			t.Fatal(err)
		}
		c, err := st.NewCodec(func() (compress.Codec, error) { return compress.New(name, 4, 0) })()
		if err != nil {
			t.Fatal(err)
		}
		_, want := inner.(compress.Preshuffled)
		ps, got := c.(compress.Preshuffled)
		if got != want {
			t.Errorf("%s: counted codec implements Preshuffled: %v, the codec: %v", name, got, want)
		}
		if !got {
			continue
		}
		if ps.BlockElems() != inner.(compress.Preshuffled).BlockElems() {
			t.Errorf("%s: block %d, the codec's %d", name, ps.BlockElems(), inner.(compress.Preshuffled).BlockElems())
		}
		src := make([]byte, 4*4096)
		if _, err := ps.EncodeShuffled(nil, src); err != nil {
			t.Fatal(err)
		}
		if _, err := ps.Encode(nil, src); err != nil {
			t.Fatal(err)
		}
		if n := Value(st.CompressFrames); n != 2 {
			t.Errorf("%s: %g chunks counted, want 2", name, n)
		}
		if n := Value(st.CompressIn); n != float64(2*len(src)) {
			t.Errorf("%s: %g bytes in counted, want %d", name, n, 2*len(src))
		}
	}
}

// TestPreviewUndoesShuffle checks that an image the backend transposed for
// the codec is kept as pixels.
func TestPreviewUndoesShuffle(t *testing.T) {
	img := make([]byte, testFormat.ImageSize())
	for i := range img {
		img[i] = byte(i * 7)
	}
	const block = 16
	shuffled, err := bitshuffle.AppendShuffle(nil, img, testFormat.PixelSize(), block)
	if err != nil {
		t.Fatal(err)
	}
	p := NewPreview(time.Hour)
	p.offer([]gpu.Job{{Header: frame.Header{FrameNumber: 3, Format: testFormat}, Image: shuffled, ShuffleBlock: block}}, time.Now())
	if got := p.Latest(nil); !bytes.Equal(got.Image, img) {
		t.Error("preview of a transposed image differs from the image")
	}
}

func TestHistogramSnapshot(t *testing.T) {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Buckets: []float64{1, 2, 4, 8}})
	for _, v := range []float64{0.5, 1.5, 1.5, 3, 3, 3, 100} {
		h.Observe(v)
	}
	s := Snapshot(h)
	if s.Count != 7 || s.Sum != 112.5 {
		t.Errorf("count %d sum %g, want 7 and 112.5", s.Count, s.Sum)
	}
	for q, want := range map[float64]float64{0: 1, 0.1: 1, 0.4: 2, 0.5: 4, 0.85: 4, 1: 8} {
		if got := s.Quantile(q); got != want {
			t.Errorf("quantile %g = %g, want %g", q, got, want)
		}
	}
	if got := s.Mean(); got != 112.5/7 {
		t.Errorf("mean %g", got)
	}
	if (HistogramSnapshot{}).Quantile(0.5) != 0 {
		t.Error("quantile of nothing is not 0")
	}
}

func TestRegisterTwiceFails(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := New()
	if err := st.Register(reg, 1); err != nil {
		t.Fatal(err)
	}
	if err := st.Register(reg, 1); err == nil {
		t.Error("the same module's metrics registered twice without an error")
	}
	if err := New().Register(reg, 2); err != nil {
		t.Errorf("a second module: %v", err)
	}
}

// failOdd is a processor that fails on odd frames.
type failOdd struct{}

func (failOdd) Process(n int, _ frame.Format, _ []byte) error {
	if n%2 == 1 {
		return errors.New("odd")
	}
	return nil
}

func TestProcessorCounted(t *testing.T) {
	s := New()
	if s.NewProcessor(nil) != nil {
		t.Error("no processor stage: a maker all the same")
	}
	p, err := s.NewProcessor(func() (pipeline.Processor, error) { return failOdd{}, nil })()
	if err != nil {
		t.Fatal(err)
	}
	for n := range 5 {
		if err := p.Process(n, frame.Format{}, nil); (err != nil) != (n%2 == 1) {
			t.Errorf("frame %d: %v, want the processor's result", n, err)
		}
	}
	if Value(s.ProcessFrames) != 5 || Value(s.ProcessErrors) != 2 || Snapshot(s.ProcessSeconds).Count != 5 {
		t.Errorf("frames %v errors %v timed %d; want 5, 2, 5", Value(s.ProcessFrames), Value(s.ProcessErrors), Snapshot(s.ProcessSeconds).Count)
	}
}

// TestBackendCompressCounted checks that a counted cpu backend still
// compresses as it decodes (gpu.Compressor), with counted codecs that
// still compress blocks apart (compress.BlockEncoder), and that the chunks
// it makes count as compressed, once each.
func TestBackendCompressCounted(t *testing.T) {
	st := New()
	cpu, err := gpu.New("cpu", gpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	b := st.Backend(cpu)
	if _, ok := b.(gpu.Compressor); !ok {
		t.Fatal("counted cpu backend is no gpu.Compressor")
	}
	newCodec := st.NewCodec(func() (compress.Codec, error) { return compress.New("bslz4", 4, 0) })
	c, err := newCodec()
	if err != nil {
		t.Fatal(err)
	}
	be, ok := c.(compress.BlockEncoder)
	if !ok {
		t.Fatal("counted bslz4 is no compress.BlockEncoder")
	}
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 64, ChipHeight: 64}, Encoding: frame.U32LE, BitDepth: 32}
	payload := make([]byte, f.PayloadSize())
	comp := &gpu.Compression{BlockElems: be.BlockElems(), NewEncoder: func() (gpu.ChunkEncoder, error) {
		c, err := newCodec()
		return c.(compress.BlockEncoder), err
	}}
	jobs := []gpu.Job{{
		Header:  frame.Header{PayloadSize: uint32(len(payload)), Format: f},
		Payload: payload, Image: make([]byte, f.ImageSize()),
		Compress: comp, Chunk: make([]byte, 0, be.Bound(f.ImageSize())),
	}}
	if err := b.Decode(jobs); err != nil {
		t.Fatal(err)
	}
	if !jobs[0].Compressed {
		t.Fatalf("not compressed: %v", jobs[0].CompressErr)
	}
	ref, err := compress.New("bslz4", 4, 0) // counts nothing
	if err != nil {
		t.Fatal(err)
	}
	want, err := ref.Encode(nil, jobs[0].Image[:f.ImageSize()])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(jobs[0].Chunk, want) {
		t.Error("chunk differs from Encode's")
	}
	if n := Value(st.CompressFrames); n != 1 {
		t.Errorf("%g chunks counted, want 1", n)
	}
	if n := Value(st.CompressIn); n != float64(f.ImageSize()) {
		t.Errorf("%g bytes in counted, want %d", n, f.ImageSize())
	}
	if n := Value(st.CompressOut); n != float64(len(want)) {
		t.Errorf("%g bytes out counted, want %d", n, len(want))
	}
}

// TestPreviewKeepsDiscardedImages checks that a counted backend has the
// image decoded of a frame whose caller wants only the chunk
// (gpu.Job.DiscardImage) when the preview is due to keep one, and keeps it;
// and leaves the image discarded when it is not due.
func TestPreviewKeepsDiscardedImages(t *testing.T) {
	st := New()
	st.Preview.Enable(time.Hour)
	cpu, err := gpu.New("cpu", gpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	b := st.Backend(cpu)
	codec, err := compress.New("bslz4", 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	be := codec.(compress.BlockEncoder)
	comp := &gpu.Compression{BlockElems: be.BlockElems(), NewEncoder: func() (gpu.ChunkEncoder, error) {
		c, err := compress.New("bslz4", 4, 0)
		return c.(compress.BlockEncoder), err
	}}
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 64, ChipHeight: 64}, Encoding: frame.U32LE, BitDepth: 32}
	payload := make([]byte, f.PayloadSize())
	for i := range payload {
		payload[i] = byte(i % 251)
	}
	decode := func() gpu.Job {
		jobs := []gpu.Job{{
			Header:  frame.Header{FrameNumber: 4, PayloadSize: uint32(len(payload)), Format: f},
			Payload: payload, Image: make([]byte, f.ImageSize()),
			Compress: comp, Chunk: make([]byte, 0, be.Bound(f.ImageSize())), DiscardImage: true,
		}}
		if err := b.Decode(jobs); err != nil {
			t.Fatal(err)
		}
		if !jobs[0].Compressed {
			t.Fatalf("not compressed: %v", jobs[0].CompressErr)
		}
		return jobs[0]
	}
	plain := []gpu.Job{{
		Header:  frame.Header{FrameNumber: 4, PayloadSize: uint32(len(payload)), Format: f},
		Payload: payload, Image: make([]byte, f.ImageSize()),
	}}
	if err := cpu.Decode(plain); err != nil {
		t.Fatal(err)
	}
	want := plain[0].Image
	j := decode() // the first is due
	if j.DiscardImage || !bytes.Equal(j.Image, want) {
		t.Errorf("due: image discarded %v, decoded %v", j.DiscardImage, bytes.Equal(j.Image, want))
	}
	if got := st.Preview.Latest(nil); got.Seq != 1 || !bytes.Equal(got.Image, want) {
		t.Errorf("preview kept %d images, the frame's %v", got.Seq, bytes.Equal(got.Image, want))
	}
	j = decode() // the next in an hour
	if !j.DiscardImage || bytes.Equal(j.Image, want) {
		t.Errorf("not due: image discarded %v, decoded %v", j.DiscardImage, bytes.Equal(j.Image, want))
	}
	if got := st.Preview.Latest(nil); got.Seq != 1 {
		t.Errorf("preview kept %d images, want 1", got.Seq)
	}
}
