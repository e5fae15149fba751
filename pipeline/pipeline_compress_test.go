package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/gpu"
)

// compressCounter is a backend that compresses (the cpu backend), counting
// the chunks it made.
type compressCounter struct {
	gpu.Backend
	chunks atomic.Int64
}

func (b *compressCounter) CompressesChunks() {}

func (b *compressCounter) Decode(batch []gpu.Job) error {
	err := b.Backend.Decode(batch)
	for i := range batch {
		if batch[i].Compressed {
			b.chunks.Add(1)
		}
	}
	return err
}

// TestPipelineBackendCompress checks that with the cpu backend compressing
// each band as it decodes it the sink gets the same chunks and records,
// byte for byte, as with compression after the decode: for both bitshuffle
// codecs, a frame whose bands hold whole blocks (compressed on the
// backend) and one whose bands cut blocks (compressed by the workers),
// with a frame of a bad payload CRC and one of another format among them;
// and that a processor keeps compression on the workers.
func TestPipelineBackendCompress(t *testing.T) {
	const frames = 8
	for _, c := range []struct {
		f         frame.Format
		onBackend bool
	}{
		{frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 64, ChipHeight: 64},
			Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}, true}, // bands of 4 blocks
		{testFormat, false}, // 512 pixels: one partial block
	} {
		for _, codec := range []string{"bslz4", "bszstd"} {
			for _, proc := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/%s/processor=%v", c.f, codec, proc), func(t *testing.T) {
					run := func(apart bool) (*memSink, int64) {
						cpu, err := gpu.New("cpu", gpu.Options{Workers: 2})
						if err != nil {
							t.Fatal(err)
						}
						defer cpu.Close()
						be := &compressCounter{Backend: cpu}
						cfg := Config{
							Format: c.f, Frames: frames, Backend: be, DecodeThenCompress: apart,
							NewCodec: func() (compress.Codec, error) { return compress.New(codec, c.f.PixelSize(), 0) },
						}
						if proc {
							cfg.NewProcessor = func() (Processor, error) { return invert{}, nil }
						}
						p, err := New(cfg)
						if err != nil {
							t.Fatal(err)
						}
						src := &sliceSource{}
						for n := range frames {
							fr := testFrame(t, c.f, uint64(n))
							switch n {
							case 2:
								fr.Header.PayloadCRC ^= 1 // stored, recorded a CRC mismatch
							case 5:
								fr = testFrame(t, testFormat2(c.f), uint64(n)) // rejected
							}
							src.frames = append(src.frames, fr)
						}
						sink := newMemSink()
						if _, err := p.Run(context.Background(), src, sink); err != nil {
							t.Fatal(err)
						}
						return sink, be.chunks.Load()
					}
					want, n := run(true)
					if n != 0 {
						t.Fatalf("%d chunks made by the backend with DecodeThenCompress", n)
					}
					got, n := run(false)
					wantN := int64(0)
					if c.onBackend && !proc {
						wantN = frames - 1
					}
					if n != wantN {
						t.Errorf("%d chunks made by the backend, want %d", n, wantN)
					}
					if len(got.chunks) != frames-1 {
						t.Fatalf("%d chunks, want %d", len(got.chunks), frames-1)
					}
					if !maps.EqualFunc(got.chunks, want.chunks, bytes.Equal) {
						t.Error("chunks differ from those compressed after the decode")
					}
					if !maps.Equal(got.records, want.records) {
						t.Errorf("records %v, want %v", got.records, want.records)
					}
					if s := got.records[2].Status; s != frame.StatusCRCMismatch {
						t.Errorf("frame 2 recorded %v, want a CRC mismatch", s)
					}
					if s := got.records[5].Status; s != frame.StatusRejected {
						t.Errorf("frame 5 recorded %v, want rejected", s)
					}
				})
			}
		}
	}
}

// testFormat2 returns a bitplane format other than f, of the same
// geometry: the other coding.
func testFormat2(f frame.Format) frame.Format {
	f.Coding = frame.LFSR - f.Coding
	return f
}

// intactOrder is a source whose frames may be written over
// (OverwritingSource), keeping the order of its Intact calls, where roce's
// --record keeps each frame.
type intactOrder struct {
	sliceSource
	mu    sync.Mutex
	order []uint64
}

func (s *intactOrder) Intact(f *Frame) bool {
	s.mu.Lock()
	s.order = append(s.order, f.Header.FrameNumber)
	s.mu.Unlock()
	return true
}

// TestPipelineBackendCompressKeepsOrder checks that with compression on
// the backend a source whose frames may be written over sees its Intact
// calls in the order its frames came, as without.
func TestPipelineBackendCompressKeepsOrder(t *testing.T) {
	const frames = 60
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 64, ChipHeight: 64},
		Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	cpu, err := gpu.New("cpu", gpu.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer cpu.Close()
	be := &compressCounter{Backend: cpu}
	p, err := New(Config{
		Format: f, Frames: frames, Backend: be, Workers: 2,
		NewCodec: func() (compress.Codec, error) { return compress.New("bslz4", f.PixelSize(), 0) },
	})
	if err != nil {
		t.Fatal(err)
	}
	src := &intactOrder{}
	for n := range frames {
		src.frames = append(src.frames, testFrame(t, f, uint64(n)))
	}
	if _, err := p.Run(context.Background(), src, newMemSink()); err != nil {
		t.Fatal(err)
	}
	if n := be.chunks.Load(); n != frames {
		t.Errorf("%d chunks made by the backend, want %d", n, frames)
	}
	if !slices.IsSorted(src.order) || len(src.order) != frames {
		t.Errorf("Intact called for frames %v, want 0 to %d in order", src.order, frames-1)
	}
}
