package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	src := &sliceSource{}
	for n := range uint64(frames) {
		src.frames = append(src.frames, testFrame(t, testFormat, n))
	}
	payloadCRC := map[int]uint32{}
	for _, f := range src.frames {
		payloadCRC[int(f.Header.FrameNumber)] = f.Header.PayloadCRC
	}
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
