package pipeline_test

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/source/sim"
)

// piMegaFrames returns n distinct Pi-mega projections of the simulator's
// tomography scene, 24-bit LFSR bitplane payloads as the detector sends
// them.
func piMegaFrames(b *testing.B, n int) []*pipeline.Frame {
	cfg := sim.DefaultConfig()
	cfg.Plan = plan.Tomo(0, 0, n, 0, 180)
	scan, err := sim.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	f := cfg.Format
	var frames []*pipeline.Frame
	var counts []uint32
	for i := range n {
		counts, _ = scan.Image(i, counts)
		payload, err := f.AppendPayload(nil, counts, nil)
		if err != nil {
			b.Fatal(err)
		}
		frames = append(frames, &pipeline.Frame{
			Header: frame.Header{FrameNumber: uint64(i), PayloadSize: uint32(len(payload)),
				PayloadCRC: frame.Checksum(payload), Format: f},
			Payload: payload,
		})
	}
	return frames
}

// BenchmarkPipeline runs Pi-mega frames from memory through decode and
// bitshuffle-LZ4 compression into a sink that keeps nothing: the pipeline
// without capture reading or HDF5 writing, so that its test binary runs on
// a GPU machine with only the NVIDIA driver. Every backend that opens is
// measured (cuda is skipped without a GPU), with the bit transpose in the
// codec and on the backend (Config.BackendShuffle), and payloads from two
// sources: Go memory (source=go), which a device's driver stages, and a
// ring of mapped memory the pipeline page-locks as it does a receiver's
// (source=ring). The clock runs from the end of the pipeline's setup
// (buffers allocated, page-locked and reserved; Pipeline.SetupTime) to
// its end. It reports frames/s and GB/s of raw payload beside one
// module's 7.08 GB/s at 1000 frames/s, and the setup's milliseconds.
func BenchmarkPipeline(b *testing.B) {
	const frames = 64
	distinct := piMegaFrames(b, 8)
	f := distinct[0].Header.Format
	ring := newRingFrames(b, distinct)
	sources := []struct {
		name string
		make func() pipeline.Source
	}{
		{"go", func() pipeline.Source { return pipeline.NewCycleSource(distinct, frames) }},
		{"ring", func() pipeline.Source {
			return &ringCycleSource{pipeline.NewCycleSource(ring.frames, frames), ring.mem}
		}},
	}
	for _, name := range []string{"cpu", "cuda"} {
		backend, err := gpu.New(name, gpu.Options{})
		if err != nil {
			b.Logf("%s: %v", name, err)
			continue
		}
		batch := 1 // the CPU backend splits a frame over every core
		if name == "cuda" {
			batch = 4 // as h5ingest runs it: copies of one call overlap another's kernels
		}
		for _, src := range sources {
			for _, shuffle := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/source=%s/backend-shuffle=%v", name, src.name, shuffle), func(b *testing.B) {
					b.SetBytes(int64(frames * f.PayloadSize()))
					var elapsed, setup time.Duration
					for b.Loop() {
						p, err := pipeline.New(pipeline.Config{
							Format: f, Frames: frames, Backend: backend, Batch: batch, BackendShuffle: shuffle,
							NewCodec: func() (compress.Codec, error) { return compress.New("bslz4", f.PixelSize(), 0) },
						})
						if err != nil {
							b.Fatal(err)
						}
						sink := &pipeline.CountSink{}
						prog, err := p.Run(context.Background(), src.make(), sink)
						if err != nil {
							b.Fatal(err)
						}
						if sink.Chunks() != frames {
							b.Fatalf("%d chunks, want %d", sink.Chunks(), frames)
						}
						elapsed += prog.Elapsed - p.SetupTime()
						setup += p.SetupTime()
					}
					fps := float64(b.N*frames) / elapsed.Seconds()
					b.ReportMetric(fps, "frames/s")
					b.ReportMetric(fps*float64(f.PayloadSize())/1e9, "GB/s")
					b.ReportMetric(7.077888, "module-GB/s")
					b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "cpus")
					b.ReportMetric(float64(setup.Milliseconds())/float64(b.N), "setup-ms")
				})
			}
		}
		backend.Close()
	}
}

// ringFrames are frames whose payloads lie in one mapping outside the Go
// heap, as a receiver's ring holds them.
type ringFrames struct {
	mem    []byte
	frames []*pipeline.Frame
}

func newRingFrames(b *testing.B, distinct []*pipeline.Frame) *ringFrames {
	n := 0
	for _, f := range distinct {
		n += len(f.Payload)
	}
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { syscall.Munmap(mem) })
	r := &ringFrames{mem: mem}
	off := 0
	for _, f := range distinct {
		g := *f
		g.Payload = mem[off : off+copy(mem[off:], f.Payload)]
		off += len(f.Payload)
		r.frames = append(r.frames, &g)
	}
	return r
}

// ringCycleSource is a cycleSource over ring frames, naming the ring as a
// receiver's stream does (pipeline.HostMemorySource), so that a device backend's
// pipeline page-locks it.
type ringCycleSource struct {
	*pipeline.CycleSource
	mem []byte
}

func (s *ringCycleSource) HostMemory() [][]byte { return [][]byte{s.mem} }
