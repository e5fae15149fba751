package ingest

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"h5ingest/compress"
	"h5ingest/gpu"
	"h5ingest/ingest/frame"
	"h5ingest/ingest/sim"
	"h5ingest/plan"
)

// piMegaFrames returns n distinct Pi-mega projections of the simulator's
// tomography scene, 24-bit LFSR bitplane payloads as the detector sends
// them.
func piMegaFrames(b *testing.B, n int) []*Frame {
	cfg := sim.DefaultConfig()
	cfg.Plan = plan.Tomo(0, 0, n, 0, 180)
	scan, err := sim.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	f := cfg.Format
	var frames []*Frame
	var counts []uint32
	for i := range n {
		counts, _ = scan.Image(i, counts)
		payload, err := f.AppendPayload(nil, counts, nil)
		if err != nil {
			b.Fatal(err)
		}
		frames = append(frames, &Frame{
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
// codec and on the backend (Config.BackendShuffle). It reports frames/s
// and GB/s of raw payload beside one module's 7.08 GB/s at 1000 frames/s.
func BenchmarkPipeline(b *testing.B) {
	const frames = 64
	distinct := piMegaFrames(b, 8)
	f := distinct[0].Header.Format
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
		for _, shuffle := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/backend-shuffle=%v", name, shuffle), func(b *testing.B) {
				b.SetBytes(int64(frames * f.PayloadSize()))
				var elapsed time.Duration
				for b.Loop() {
					p, err := New(Config{
						Format: f, Frames: frames, Backend: backend, Batch: batch, BackendShuffle: shuffle,
						NewCodec: func() (compress.Codec, error) { return compress.New("bslz4", f.PixelSize(), 0) },
					})
					if err != nil {
						b.Fatal(err)
					}
					sink := &countSink{}
					prog, err := p.Run(context.Background(), newCycleSource(distinct, frames), sink)
					if err != nil {
						b.Fatal(err)
					}
					if sink.chunks != frames {
						b.Fatalf("%d chunks, want %d", sink.chunks, frames)
					}
					elapsed += prog.Elapsed
				}
				fps := float64(b.N*frames) / elapsed.Seconds()
				b.ReportMetric(fps, "frames/s")
				b.ReportMetric(fps*float64(f.PayloadSize())/1e9, "GB/s")
				b.ReportMetric(7.077888, "module-GB/s")
				b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "cpus")
			})
		}
		backend.Close()
	}
}
