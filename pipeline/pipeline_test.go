package pipeline

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/gpu"
)

var testFormat = frame.Format{
	Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 16, ChipHeight: 8},
	Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR,
}

// testImage returns the counts of frame n and its little-endian image bytes.
func testImage(f frame.Format, n uint64) ([]uint32, []byte) {
	r := rand.New(rand.NewPCG(n, 7))
	counts := make([]uint32, f.Pixels())
	img := make([]byte, 0, f.ImageSize())
	for i := range counts {
		counts[i] = r.Uint32N(f.MaxCount() + 1)
		if f.PixelSize() == 2 {
			img = binary.LittleEndian.AppendUint16(img, uint16(counts[i]))
		} else {
			img = binary.LittleEndian.AppendUint32(img, counts[i])
		}
	}
	return counts, img
}

// testFrame builds frame n of format f as a detector sends it.
func testFrame(t *testing.T, f frame.Format, n uint64) *Frame {
	t.Helper()
	counts, _ := testImage(f, n)
	payload, err := f.AppendPayload(nil, counts, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &Frame{
		Header: frame.Header{
			FrameNumber: n, Timestamp: 1000 + n, PayloadSize: uint32(len(payload)),
			PayloadCRC: frame.Checksum(payload), Format: f,
		},
		Payload: payload,
	}
}

// testFrames builds frames 0 to n-1 of format f, as testFrame does.
func testFrames(t *testing.T, f frame.Format, n int) []*Frame {
	t.Helper()
	frames := make([]*Frame, n)
	for i := range frames {
		frames[i] = testFrame(t, f, uint64(i))
	}
	return frames
}

// payloadCRCs returns the payload CRC each of frames was sent with, by
// frame number: what a sink's records must give as their raw CRCs, read
// before a run takes the frames.
func payloadCRCs(frames []*Frame) map[int]uint32 {
	crcs := make(map[int]uint32, len(frames))
	for _, f := range frames {
		crcs[int(f.Header.FrameNumber)] = f.Header.PayloadCRC
	}
	return crcs
}

// sliceSource hands out a fixed list of frames, then err (io.EOF if nil).
type sliceSource struct {
	frames   []*Frame
	err      error
	mu       sync.Mutex
	released int
}

func (s *sliceSource) Next(ctx context.Context) (*Frame, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(s.frames) == 0 {
		if s.err != nil {
			return nil, s.err
		}
		return nil, io.EOF
	}
	f := s.frames[0]
	s.frames = s.frames[1:]
	return f, nil
}

func (s *sliceSource) Release(*Frame) {
	s.mu.Lock()
	s.released++
	s.mu.Unlock()
}

// memSink keeps chunks and records in memory.
type memSink struct {
	chunks  map[int][]byte
	records map[int]frame.Record
	failAt  int // WriteChunk of this frame fails; -1 never
}

func newMemSink() *memSink {
	return &memSink{chunks: map[int][]byte{}, records: map[int]frame.Record{}, failAt: -1}
}

func (s *memSink) WriteChunk(n int, chunk []byte) error {
	if n == s.failAt {
		return errors.New("disk full")
	}
	if _, ok := s.chunks[n]; ok {
		return errors.New("chunk written twice")
	}
	s.chunks[n] = slices.Clone(chunk)
	return nil
}

func (s *memSink) SetRecord(n int, r frame.Record) error {
	s.records[n] = r
	return nil
}

func newTestPipeline(t *testing.T, frames int, codec string) *Pipeline {
	t.Helper()
	backend, err := gpu.New("cpu", gpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backend.Close() })
	p, err := New(Config{
		Format:   testFormat,
		Frames:   frames,
		Backend:  backend,
		NewCodec: func() (compress.Codec, error) { return compress.New(codec, testFormat.PixelSize(), 0) },
		Batch:    3,
		Slots:    5,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPipelineFaults runs the receiver's bad-frame table end to end.
func TestPipelineFaults(t *testing.T) {
	corrupt := func(f *Frame) *Frame { f.Payload[3] ^= 0x10; return f }
	resize := func(f *Frame) *Frame { f.Header.PayloadSize--; f.Payload = f.Payload[:len(f.Payload)-1]; return f }
	// A payload shorter than its header says, as a fabric slot holds one
	// whose message was cut: the header itself is whole.
	short := func(f *Frame) *Frame { f.Payload = f.Payload[:len(f.Payload)-1]; return f }
	long := func(f *Frame) *Frame { f.Payload = append(f.Payload, 0); return f }
	otherFormat := func(f *Frame) *Frame {
		g := testFormat
		g.Coding = frame.Binary
		f.Header.Format = g
		return f
	}
	const N = 8
	tests := []struct {
		name   string
		order  []uint64                    // frame numbers sent, in order
		mangle map[int]func(*Frame) *Frame // by position in order
		status map[int]uint8               // expected non-OK statuses by frame number
		counts Counts
	}{
		{
			name:   "all good, in order",
			order:  []uint64{0, 1, 2, 3, 4, 5, 6, 7},
			counts: Counts{Planned: N, Received: N, OK: N},
		},
		{
			name:   "reordered, missing, duplicate, out of range",
			order:  []uint64{1, 0, 2, 2, 4, 3, 9, 7, 6},
			status: map[int]uint8{5: frame.StatusMissing},
			counts: Counts{Planned: N, Received: 9, OK: 7, Duplicate: 1, OutOfRange: 1, Missing: 1},
		},
		{
			name:   "corrupt payload is written and flagged",
			order:  []uint64{0, 1, 2, 3, 4, 5, 6, 7},
			mangle: map[int]func(*Frame) *Frame{2: corrupt},
			status: map[int]uint8{2: frame.StatusCRCMismatch},
			counts: Counts{Planned: N, Received: N, OK: 7, CRCMismatch: 1},
		},
		{
			name:   "rejected frames",
			order:  []uint64{0, 1, 2, 3, 4, 5, 6, 7},
			mangle: map[int]func(*Frame) *Frame{1: resize, 3: long, 4: short, 6: otherFormat},
			status: map[int]uint8{1: frame.StatusRejected, 3: frame.StatusRejected, 4: frame.StatusRejected, 6: frame.StatusRejected},
			counts: Counts{Planned: N, Received: N, OK: 4, Rejected: 4},
		},
	}
	for _, codec := range []string{"none", "bslz4"} {
		for _, tt := range tests {
			t.Run(codec+"/"+tt.name, func(t *testing.T) {
				src := &sliceSource{}
				raw := map[int]uint32{} // CRC of each frame's first copy as sent
				for i, n := range tt.order {
					f := testFrame(t, testFormat, n)
					if m := tt.mangle[i]; m != nil {
						f = m(f)
					}
					src.frames = append(src.frames, f)
					if _, ok := raw[int(n)]; !ok {
						raw[int(n)] = frame.Checksum(f.Payload)
					}
				}
				sent := len(src.frames)
				sink := newMemSink()
				p := newTestPipeline(t, N, codec)
				progress, err := p.Run(context.Background(), src, sink)
				if err != nil {
					t.Fatal(err)
				}
				if progress.Counts != tt.counts {
					t.Errorf("counts\n got %+v\nwant %+v", progress.Counts, tt.counts)
				}
				if src.released != sent {
					t.Errorf("%d frames released, %d sent", src.released, sent)
				}
				checkOutput(t, sink, codec, N, tt.status)
				for n, rec := range sink.records {
					if rec.Status != frame.StatusMissing && rec.RawCRC != raw[n] {
						t.Errorf("frame %d (status %d): raw CRC %08x, the payload as sent has %08x", n, rec.Status, rec.RawCRC, raw[n])
					}
				}
			})
		}
	}
}

// checkOutput checks every record and chunk against the frames' images.
func checkOutput(t *testing.T, sink *memSink, codecName string, frames int, status map[int]uint8) {
	t.Helper()
	codec, err := compress.New(codecName, testFormat.PixelSize(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(sink.records); got != frames {
		t.Errorf("%d records, want %d", got, frames)
	}
	for n := range frames {
		want := uint8(frame.StatusOK)
		if s, ok := status[n]; ok {
			want = s
		}
		rec := sink.records[n]
		if rec.Status != want {
			t.Errorf("frame %d: status %d, want %d", n, rec.Status, want)
		}
		chunk, written := sink.chunks[n]
		if written != (want == frame.StatusOK || want == frame.StatusCRCMismatch) {
			t.Errorf("frame %d (status %d): chunk written = %v", n, want, written)
			continue
		}
		if !written {
			continue
		}
		img, err := codec.Decode(nil, chunk)
		if err != nil {
			t.Fatalf("frame %d: %v", n, err)
		}
		_, wantImg := testImage(testFormat, uint64(n))
		if want == frame.StatusOK && !slices.Equal(img, wantImg) {
			t.Errorf("frame %d: decoded image differs", n)
		}
		if rec.DataCRC != frame.Checksum(img) {
			t.Errorf("frame %d: data CRC %08x, image has %08x", n, rec.DataCRC, frame.Checksum(img))
		}
		if rec.Timestamp != 1000+uint64(n) {
			t.Errorf("frame %d: timestamp %d", n, rec.Timestamp)
		}
	}
}

func TestPipelineSourceError(t *testing.T) {
	src := &sliceSource{err: errors.New("connection reset"), frames: testFrames(t, testFormat, 3)}
	sink := newMemSink()
	p := newTestPipeline(t, 6, "none")
	progress, err := p.Run(context.Background(), src, sink)
	if err == nil || err.Error() != "connection reset" {
		t.Fatalf("error %v, want the source's", err)
	}
	if progress.OK != 3 || progress.Missing != 3 {
		t.Errorf("counts %+v, want 3 ok and 3 missing", progress.Counts)
	}
	checkOutput(t, sink, "none", 6, map[int]uint8{3: 1, 4: 1, 5: 1})
}

func TestPipelineSinkError(t *testing.T) {
	src := &sliceSource{frames: testFrames(t, testFormat, 20)}
	sink := newMemSink()
	sink.failAt = 4
	p := newTestPipeline(t, 20, "none")
	done := make(chan error)
	go func() {
		_, err := p.Run(context.Background(), src, sink)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || err.Error() != "write frame 4: disk full" {
			t.Fatalf("error %v, want the sink's, with the frame", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pipeline did not stop after the sink failed")
	}
	if got := slices.Sorted(maps.Keys(sink.chunks)); slices.Contains(got, 4) {
		t.Errorf("chunks %v hold the failed frame", got)
	}
}

func TestPipelineCancel(t *testing.T) {
	src := &sliceSource{frames: testFrames(t, testFormat, 4)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sink := newMemSink()
	p := newTestPipeline(t, 4, "none")
	progress, err := p.Run(ctx, src, sink)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if len(sink.records) != 4 || progress.Missing != 4 {
		t.Errorf("records %d, counts %+v: every frame should be recorded missing", len(sink.records), progress.Counts)
	}
}

func TestPipelineUnknownLength(t *testing.T) {
	src := &sliceSource{}
	for _, n := range []uint64{0, 1, 3} {
		src.frames = append(src.frames, testFrame(t, testFormat, n))
	}
	sink := newMemSink()
	p := newTestPipeline(t, 0, "none")
	if _, err := p.Run(context.Background(), src, sink); err != nil {
		t.Fatal(err)
	}
	if p.Frames() != 4 {
		t.Errorf("Frames = %d, want 4", p.Frames())
	}
	checkOutput(t, sink, "none", 4, map[int]uint8{2: frame.StatusMissing})
}

// TestPipelineDropWhenFull feeds a slow pipeline faster than it writes,
// without back-pressure: the frames that find no slot are dropped, counted
// and recorded missing; every other frame arrives intact.
func TestPipelineDropWhenFull(t *testing.T) {
	const n = 40
	src := &sliceSource{frames: testFrames(t, testFormat, n)}
	src.frames = append(src.frames, testFrame(t, testFormat, 3)) // a duplicate stays a duplicate
	backend, err := gpu.New("cpu", gpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	p, err := New(Config{
		Format: testFormat, Frames: n, Backend: backend, Batch: 1, Slots: 2, DropWhenFull: true,
		NewCodec: func() (compress.Codec, error) { return compress.New("none", testFormat.PixelSize(), 0) },
	})
	if err != nil {
		t.Fatal(err)
	}
	sink := slowSink{memSink: newMemSink(), delay: 5 * time.Millisecond}
	progress, err := p.Run(context.Background(), src, sink)
	if err != nil {
		t.Fatal(err)
	}
	c := progress.Counts
	if c.Overflow == 0 || c.OK == 0 || c.OK+c.Overflow != n || c.Missing != c.Overflow || c.Received != n+1 {
		t.Fatalf("counts %+v: want some frames ok and the rest dropped as overflow, recorded missing", c)
	}
	status := map[int]uint8{}
	for i := range n {
		if _, ok := sink.chunks[i]; !ok {
			status[i] = frame.StatusMissing
		}
	}
	if len(status) != c.Overflow {
		t.Errorf("%d frames without a chunk, %d counted as overflow", len(status), c.Overflow)
	}
	checkOutput(t, sink.memSink, "none", n, status)
	if src.released != n+1 {
		t.Errorf("%d frames released of %d", src.released, n+1)
	}
}

// TestPipelineBackendShuffle checks that with the transpose moved to the
// backend the sink gets the same chunks and records, byte for byte, for
// every bitshuffle codec and for images of full blocks, a partial block and
// leftover pixels; and that a codec without a bitshuffle stage is refused.
func TestPipelineBackendShuffle(t *testing.T) {
	formats := []frame.Format{
		testFormat, // 512 pixels: one partial block
		{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 64, ChipHeight: 64},
			Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}, // 8 full blocks
		{Geometry: frame.Geometry{ChipsX: 3, ChipsY: 1, ChipWidth: 5, ChipHeight: 3},
			Encoding: frame.U16LE, BitDepth: 16}, // 45 pixels: a partial block and 5 left over
	}
	run := func(t *testing.T, f frame.Format, codec string, shuffle bool) (*memSink, error) {
		backend, err := gpu.New("cpu", gpu.Options{Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer backend.Close()
		p, err := New(Config{
			Format: f, Frames: 6, Backend: backend, Batch: 2, BackendShuffle: shuffle,
			NewCodec: func() (compress.Codec, error) { return compress.New(codec, f.PixelSize(), 0) },
		})
		if err != nil {
			t.Fatal(err)
		}
		src := &sliceSource{frames: testFrames(t, f, 6)}
		sink := newMemSink()
		_, err = p.Run(context.Background(), src, sink)
		return sink, err
	}
	for _, f := range formats {
		for _, codec := range []string{"bslz4", "bszstd"} {
			t.Run(fmt.Sprintf("%v/%s", f, codec), func(t *testing.T) {
				want, err := run(t, f, codec, false)
				if err != nil {
					t.Fatal(err)
				}
				got, err := run(t, f, codec, true)
				if err != nil {
					t.Fatal(err)
				}
				if len(got.chunks) != 6 {
					t.Fatalf("%d chunks, want 6", len(got.chunks))
				}
				if !maps.EqualFunc(got.chunks, want.chunks, bytes.Equal) {
					t.Error("chunks differ from those of the codec's own transpose")
				}
				if !maps.Equal(got.records, want.records) {
					t.Errorf("records %v, want %v", got.records, want.records)
				}
			})
		}
	}
	if _, err := run(t, testFormat, "lz4", true); err == nil || !strings.Contains(err.Error(), "bitshuffle") {
		t.Errorf("backend shuffle with lz4: error %v, want one naming the bitshuffle codecs", err)
	}
}

// hostBackend is the CPU backend offering host memory as a device backend
// does, keeping count of what it hands out and gets back, of what it
// page-locks, and of the image buffers and payloads Decode is given that
// are not in its memory.
type hostBackend struct {
	gpu.Backend
	failAfter int  // AllocHost fails once this many buffers are out; 0 never
	noLock    bool // RegisterHost fails

	mu        sync.Mutex
	out       map[*byte]bool
	allocs    int
	foreign   int      // images not from AllocHost
	locked    [][]byte // registered memory
	registers int
	unlocked  int // payloads outside registered memory
}

func (b *hostBackend) RegisterHost(m []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.noLock {
		return errors.New("locked memory limit reached")
	}
	b.registers++
	b.locked = append(b.locked, m)
	return nil
}

func (b *hostBackend) UnregisterHost(m []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.IndexFunc(b.locked, func(l []byte) bool { return &l[0] == &m[0] && len(l) == len(m) })
	if i < 0 {
		return errors.New("not registered")
	}
	b.locked = slices.Delete(b.locked, i, i+1)
	return nil
}

// inLocked reports whether p lies in registered memory.
func (b *hostBackend) inLocked(p []byte) bool {
	start := uintptr(unsafe.Pointer(&p[0]))
	for _, m := range b.locked {
		base := uintptr(unsafe.Pointer(&m[0]))
		if start >= base && start+uintptr(len(p)) <= base+uintptr(len(m)) {
			return true
		}
	}
	return false
}

func (b *hostBackend) AllocHost(n int) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failAfter > 0 && b.allocs == b.failAfter {
		return nil, errors.New("locked memory limit reached")
	}
	b.allocs++
	buf := make([]byte, n)
	b.out[&buf[0]] = true
	return buf, nil
}

func (b *hostBackend) FreeHost(buf []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.out[&buf[0]] {
		return errors.New("not allocated here")
	}
	delete(b.out, &buf[0])
	return nil
}

func (b *hostBackend) Decode(jobs []gpu.Job) error {
	b.mu.Lock()
	for _, j := range jobs {
		if !b.out[&j.Image[0]] {
			b.foreign++
		}
		if !b.inLocked(j.Payload) {
			b.unlocked++
		}
	}
	b.mu.Unlock()
	return b.Backend.Decode(jobs)
}

// ringSource hands out frames whose payloads lie in one region of memory,
// as a receiver's ring does (HostMemorySource).
type ringSource struct {
	sliceSource
	ring []byte
}

func newRingSource(t *testing.T, frames int) *ringSource {
	s := &ringSource{}
	for n := range frames {
		s.frames = append(s.frames, testFrame(t, testFormat, uint64(n)))
		s.ring = append(s.ring, s.frames[n].Payload...)
	}
	off := 0
	for _, f := range s.frames {
		f.Payload = s.ring[off : off+len(f.Payload)]
		off += len(f.Payload)
	}
	return s
}

func (s *ringSource) HostMemory() [][]byte { return [][]byte{s.ring} }

// TestPipelineHostMemory checks that the slots' images come from a backend
// that allocates host memory and the source's memory is page-locked for the
// scan, all given back at the end; and that a backend refusing memory part
// way leaves the pipeline on ordinary memory, the frames all written.
func TestPipelineHostMemory(t *testing.T) {
	for _, tt := range []struct {
		name      string
		failAfter int
		noLock    bool
		allocs    int  // buffers the backend hands out
		foreign   bool // images in Go memory
		registers int  // regions the backend locks
	}{
		{"page-locked", 0, false, 4, false, 1},
		{"refused", 2, true, 2, true, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cpu, err := gpu.New("cpu", gpu.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer cpu.Close()
			be := &hostBackend{Backend: cpu, failAfter: tt.failAfter, noLock: tt.noLock, out: map[*byte]bool{}}
			p, err := New(Config{
				Format: testFormat, Frames: 8, Backend: be, Slots: 4,
				NewCodec: func() (compress.Codec, error) { return compress.New("bslz4", testFormat.PixelSize(), 0) },
			})
			if err != nil {
				t.Fatal(err)
			}
			src := newRingSource(t, 8)
			sink := newMemSink()
			if _, err := p.Run(context.Background(), src, sink); err != nil {
				t.Fatal(err)
			}
			if len(sink.chunks) != 8 {
				t.Errorf("%d chunks written, want 8", len(sink.chunks))
			}
			if len(be.out) != 0 {
				t.Errorf("%d page-locked buffers not given back", len(be.out))
			}
			if be.allocs != tt.allocs {
				t.Errorf("%d buffers allocated, want %d", be.allocs, tt.allocs)
			}
			if (be.foreign > 0) != tt.foreign {
				t.Errorf("%d decodes into Go memory; want some: %v", be.foreign, tt.foreign)
			}
			if (be.unlocked > 0) != tt.noLock || be.registers != tt.registers {
				t.Errorf("%d payloads outside locked memory, %d registrations; backend refusing to lock: %v",
					be.unlocked, be.registers, tt.noLock)
			}
			if len(be.locked) != 0 {
				t.Errorf("%d regions left page-locked", len(be.locked))
			}
		})
	}
}

// TestPipelineStrayFrameNumberNoPlan sends, in a scan without a plan, good
// frames with corrupt frame numbers among them (2^24-1 was accepted once
// and grew the scan to 16.7 million records): they are rejected as out of
// range, logged, and the scan holds the good frames alone, with memory for
// them alone. The source is always ready, so the frames queue up behind the
// pipeline's slots (a backlog), with and without drop-when-full.
func TestPipelineStrayFrameNumberNoPlan(t *testing.T) {
	const good = 40
	stray := []uint64{1<<24 - 1, DefaultMaxFrameGap + good, 1 << 40, 1 << 63, 1<<64 - 1}
	for _, drop := range []bool{false, true} {
		t.Run(fmt.Sprintf("drop-when-full=%v", drop), func(t *testing.T) {
			backend, err := gpu.New("cpu", gpu.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer backend.Close()
			obs, logs := observer.New(zapcore.WarnLevel)
			p, err := New(Config{
				Format: testFormat, Backend: backend, Batch: 2, Slots: 3, DropWhenFull: drop,
				NewCodec: func() (compress.Codec, error) { return compress.New("bslz4", testFormat.PixelSize(), 0) },
				Log:      zap.New(obs),
			})
			if err != nil {
				t.Fatal(err)
			}
			src := &sliceSource{}
			for n := range uint64(good) {
				src.frames = append(src.frames, testFrame(t, testFormat, n))
				if n%8 == 3 {
					f := testFrame(t, testFormat, n)
					f.Header.FrameNumber = stray[n/8]
					src.frames = append(src.frames, f)
				}
			}
			sink := newMemSink()
			progress, err := p.Run(context.Background(), src, sink)
			if err != nil {
				t.Fatal(err)
			}
			if p.Frames() != good || len(sink.records) != good {
				t.Errorf("the scan holds %d frames and %d records, want the %d good ones", p.Frames(), len(sink.records), good)
			}
			if progress.OutOfRange != len(stray) || progress.Problems() < len(stray) {
				t.Errorf("counts %+v: want %d out of range", progress.Counts, len(stray))
			}
			if !drop {
				if progress.OK != good || len(sink.chunks) != good {
					t.Errorf("%d ok, %d chunks: want every good frame", progress.OK, len(sink.chunks))
				}
				checkOutput(t, sink, "bslz4", good, nil)
			}
			var logged bool
			for _, e := range logs.All() {
				m := e.ContextMap()
				if e.Message == "frame rejected" && m["reason"] == "out of range" {
					logged = m["count"] == int64(len(stray)) && m["last"] == uint64(1<<64-1)
				}
			}
			if !logged {
				t.Errorf("no log line counting the %d frames out of range up to 2^64-1: %v", len(stray), logs.AllUntimed())
			}
		})
	}
}

// timedSource is a sliceSource that notes when it handed out its first
// frame.
type timedSource struct {
	sliceSource
	first time.Time
}

func (s *timedSource) Next(ctx context.Context) (*Frame, error) {
	f, err := s.sliceSource.Next(ctx)
	if err == nil && s.first.IsZero() {
		s.first = time.Now()
	}
	return f, err
}

// TestPipelineActive checks the pipeline's own time, Progress.Active: from
// the first frame taken to the last chunk written, so within the time
// from the source's first frame to Run's return, and without the set-up
// that Elapsed holds; and 0 for a scan that wrote no chunk.
func TestPipelineActive(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frames int
	}{{"frames written", 6}, {"no frame", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestPipeline(t, tc.frames, "bslz4")
			src := &timedSource{}
			for n := range tc.frames {
				src.frames = append(src.frames, testFrame(t, testFormat, uint64(n)))
			}
			prog, err := p.Run(context.Background(), src, newMemSink())
			end := time.Now()
			if err != nil {
				t.Fatal(err)
			}
			if tc.frames == 0 {
				if prog.Active != 0 {
					t.Errorf("Active %v with no chunk written, want 0", prog.Active)
				}
				return
			}
			if prog.Active <= 0 || prog.Active > end.Sub(src.first) {
				t.Errorf("Active %v, want above 0 and within the %v from the first frame to Run's return", prog.Active, end.Sub(src.first))
			}
			if limit := prog.Elapsed - p.SetupTime(); prog.Active > limit {
				t.Errorf("Active %v, more than Elapsed %v less the set-up %v", prog.Active, prog.Elapsed, p.SetupTime())
			}
		})
	}
}
