package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/gpu"
)

// invert is a Processor that inverts every bit of the image in place.
type invert struct{}

func (invert) Process(_ int, _ frame.Format, image []byte) error {
	for i := range image {
		image[i] ^= 0xff
	}
	return nil
}

// failing is a Processor that fails on the frames of fail and inverts the
// others; calls counts the images it saw.
type failing struct {
	fail  map[int]bool
	calls *atomic.Int64
}

func (p failing) Process(n int, f frame.Format, image []byte) error {
	p.calls.Add(1)
	if p.fail[n] {
		return fmt.Errorf("no flat field for frame %d", n)
	}
	return invert{}.Process(n, f, image)
}

// TestProcessor runs frames through a processor stage that changes every
// image and fails on two frames: the stored chunks are the processed
// images, each record's data CRC is that of the image stored and its raw
// CRC that of the payload received, and the frames it failed on are not
// written but recorded missing.
func TestProcessor(t *testing.T) {
	const frames = 12
	backend, err := gpu.New("cpu", gpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	var calls atomic.Int64
	fail := map[int]bool{3: true, 8: true}
	made := 0
	p, err := New(Config{
		Format: testFormat, Frames: frames, Backend: backend, Workers: 2,
		NewCodec: func() (compress.Codec, error) { return compress.New("bslz4", testFormat.PixelSize(), 0) },
		NewProcessor: func() (Processor, error) {
			made++
			return failing{fail, &calls}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	src := &sliceSource{frames: testFrames(t, testFormat, frames)}
	payloadCRC := payloadCRCs(src.frames)
	sink := newMemSink()
	progress, err := p.Run(context.Background(), src, sink)
	if err != nil {
		t.Fatal(err)
	}
	if made != 2 || calls.Load() != frames {
		t.Errorf("%d processors made, %d images processed; want one per worker (2), %d", made, calls.Load(), frames)
	}
	if progress.OK != frames-2 || progress.Missing != 2 || progress.Written != frames-2 {
		t.Errorf("counts %+v, written %d; want %d ok and written, 2 missing", progress.Counts, progress.Written, frames-2)
	}
	codec, _ := compress.New("bslz4", testFormat.PixelSize(), 0)
	for n := range frames {
		rec, chunk := sink.records[n], sink.chunks[n]
		if fail[n] {
			if rec.Status != frame.StatusMissing || chunk != nil {
				t.Errorf("frame %d: status %d, chunk %v; want missing and no chunk", n, rec.Status, chunk != nil)
			}
			continue
		}
		img, err := codec.Decode(nil, chunk)
		if err != nil {
			t.Fatalf("frame %d: %v", n, err)
		}
		_, want := testImage(testFormat, uint64(n))
		invert{}.Process(n, testFormat, want)
		if !slices.Equal(img, want) {
			t.Errorf("frame %d: stored image is not the processed one", n)
		}
		if rec.Status != frame.StatusOK || rec.DataCRC != frame.Checksum(want) || rec.RawCRC != payloadCRC[n] {
			t.Errorf("frame %d: record %+v; want ok, data CRC %08x (processed), raw CRC %08x (received)",
				n, rec, frame.Checksum(want), payloadCRC[n])
		}
	}
}

// TestProcessorRefused checks the setups a processor cannot work in: a
// processor that cannot be made fails the run before any frame, and the
// bit transpose on the backend leaves no decoded image to process.
func TestProcessorRefused(t *testing.T) {
	backend, err := gpu.New("cpu", gpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	newCodec := func() (compress.Codec, error) { return compress.New("bslz4", testFormat.PixelSize(), 0) }
	if _, err := New(Config{Format: testFormat, Backend: backend, NewCodec: newCodec, BackendShuffle: true,
		NewProcessor: func() (Processor, error) { return invert{}, nil }}); err == nil {
		t.Error("a processor with the backend's bit transpose: no error")
	}
	p, err := New(Config{Format: testFormat, Frames: 2, Backend: backend, NewCodec: newCodec,
		NewProcessor: func() (Processor, error) { return nil, errors.New("flat field file missing") }})
	if err != nil {
		t.Fatal(err)
	}
	src := &sliceSource{frames: []*Frame{testFrame(t, testFormat, 0)}}
	if _, err := p.Run(context.Background(), src, newMemSink()); err == nil || err.Error() != "make processor: flat field file missing" {
		t.Errorf("run with a processor that cannot be made: %v", err)
	}
}

// panicky is a Processor that panics on the frames of bad and inverts the
// others; seen records the frames it was given.
type panicky struct {
	bad  map[int]bool
	mu   *sync.Mutex
	seen map[int]bool
}

func (p panicky) Process(n int, f frame.Format, image []byte) error {
	p.mu.Lock()
	p.seen[n] = true
	p.mu.Unlock()
	if p.bad[n] {
		panic(fmt.Sprintf("index out of range at frame %d", n))
	}
	return invert{}.Process(n, f, image)
}

// TestProcessorPanicsAndDamage: a processor that panics on a frame costs
// that frame (recorded missing, no chunk), not the scan; a frame received
// with a payload CRC mismatch is stored as received without reaching the
// processor, so that no damaged frame enters a processor's state; every
// other frame is processed.
func TestProcessorPanicsAndDamage(t *testing.T) {
	const frames = 12
	backend, err := gpu.New("cpu", gpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	proc := panicky{bad: map[int]bool{5: true}, mu: &sync.Mutex{}, seen: map[int]bool{}}
	p, err := New(Config{
		Format: testFormat, Frames: frames, Backend: backend, Workers: 2,
		NewCodec:     func() (compress.Codec, error) { return compress.New("bslz4", testFormat.PixelSize(), 0) },
		NewProcessor: func() (Processor, error) { return proc, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	const damaged = 7
	src := &sliceSource{}
	for n := range uint64(frames) {
		f := testFrame(t, testFormat, n)
		if n == damaged {
			f.Payload[0] ^= 0x01 // the CRC in the header no longer matches
		}
		src.frames = append(src.frames, f)
	}
	sink := newMemSink()
	progress, err := p.Run(context.Background(), src, sink)
	if err != nil {
		t.Fatal(err)
	}
	if progress.OK != frames-2 || progress.Missing != 1 || progress.CRCMismatch != 1 {
		t.Errorf("counts %+v; want %d ok, 1 missing (the panic), 1 CRC mismatch", progress.Counts, frames-2)
	}
	if rec := sink.records[5]; rec.Status != frame.StatusMissing || sink.chunks[5] != nil {
		t.Errorf("frame 5 (the processor panicked): status %d, chunk %v; want missing, no chunk", rec.Status, sink.chunks[5] != nil)
	}
	if proc.seen[damaged] {
		t.Errorf("the processor was given frame %d, received damaged", damaged)
	}
	if rec := sink.records[damaged]; rec.Status != frame.StatusCRCMismatch || sink.chunks[damaged] == nil {
		t.Errorf("frame %d (damaged): status %d, chunk %v; want CRC mismatch, stored as received", damaged, rec.Status, sink.chunks[damaged] != nil)
	}
	for n := range frames {
		if n != damaged && !proc.seen[n] {
			t.Errorf("frame %d never reached the processor", n)
		}
	}
}
