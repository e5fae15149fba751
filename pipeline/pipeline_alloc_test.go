package pipeline

import (
	"context"
	"io"
	"testing"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/gpu"
)

// cycleSource hands out n frames built beforehand from a few distinct
// payloads, without allocating.
type cycleSource struct {
	frames []Frame
	next   int
}

func newCycleSource(distinct []*Frame, n int) *cycleSource {
	s := &cycleSource{frames: make([]Frame, n)}
	for i := range s.frames {
		f := *distinct[i%len(distinct)]
		f.Header.FrameNumber = uint64(i)
		s.frames[i] = f
	}
	return s
}

func (s *cycleSource) Next(ctx context.Context) (*Frame, error) {
	if s.next == len(s.frames) {
		return nil, io.EOF
	}
	s.next++
	return &s.frames[s.next-1], nil
}

func (s *cycleSource) Release(*Frame) {}

// countSink counts what it is given and keeps nothing.
type countSink struct{ chunks, records int }

func (s *countSink) WriteChunk(int, []byte) error      { s.chunks++; return nil }
func (s *countSink) SetRecord(int, frame.Record) error { s.records++; return nil }

// TestPipelineSteadyStateAllocs checks that a frame through decode,
// compression and the sink allocates nothing once the pipeline runs: the
// allocations of a run of 2n frames and of n frames differ by ~0 per frame.
func TestPipelineSteadyStateAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the pipeline many times")
	}
	backend, err := gpu.New("cpu", gpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	// Bands of whole blocks: the backend compresses them.
	inBands := frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 64, ChipHeight: 64},
		Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	for _, tc := range []struct {
		name    string
		f       frame.Format
		shuffle bool
		apart   bool
		proc    func() (Processor, error)
	}{
		{"backend-shuffle=false", testFormat, false, false, nil},
		{"backend-shuffle=true", testFormat, true, false, nil},
		{"processor", testFormat, false, false, func() (Processor, error) { return invert{}, nil }},
		{"compressed on the backend", inBands, false, false, nil},
		{"compressed after the decode", inBands, false, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			distinct := []*Frame{testFrame(t, tc.f, 0), testFrame(t, tc.f, 1), testFrame(t, tc.f, 2)}
			cfg := Config{
				Format: tc.f, Backend: backend, BackendShuffle: tc.shuffle, DecodeThenCompress: tc.apart, NewProcessor: tc.proc,
				NewCodec: func() (compress.Codec, error) { return compress.New("bslz4", tc.f.PixelSize(), 0) },
			}
			testSteadyStateAllocs(t, cfg, distinct)
		})
	}
}

func testSteadyStateAllocs(t *testing.T, cfg Config, distinct []*Frame) {
	allocs := func(n int) float64 {
		return testing.AllocsPerRun(20, func() {
			cfg.Frames = n
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			src := newCycleSource(distinct, n)
			sink := &countSink{}
			if _, err := p.Run(context.Background(), src, sink); err != nil {
				t.Fatal(err)
			}
			if sink.chunks != n {
				t.Fatalf("%d chunks written, want %d", sink.chunks, n)
			}
		})
	}
	const n = 200
	// What a run allocates once (slots, channels, goroutines, the source's
	// frame list) cancels out in the difference.
	perFrame := (allocs(2*n) - allocs(n)) / n
	t.Logf("%.3f allocations per frame", perFrame)
	if perFrame > 0.05 {
		t.Errorf("%.2f allocations per frame in the steady state, want ~0", perFrame)
	}
}
