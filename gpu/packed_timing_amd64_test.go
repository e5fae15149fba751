package gpu

import (
	"math/rand/v2"
	"testing"

	"h5ingest/frame"
)

// BenchmarkDecodeRowsByPath is BenchmarkDecodeRows for packed12, packed24,
// u16le and u32le on every decode path the CPU has, the portable one
// first: one Pi-mega frame per call, every other chip at 180 degrees as
// piMegaOrientation turns them, decoding alone on one goroutine.
func BenchmarkDecodeRowsByPath(b *testing.B) {
	rng := rand.New(rand.NewPCG(2, 3))
	for _, f := range piMegaFormats() {
		if f.Encoding == frame.Bitplane {
			continue
		}
		job := newJob(f, 0, randomBytes(rng, f.PayloadSize()))
		p, err := makePlan(&job, piMegaOrientation, 1)
		if err != nil {
			b.Fatal(err)
		}
		counts := make([]uint32, f.ChipWidth)
		w, pix := f.ChipWidth, f.PixelSize()
		for _, path := range append([]decodePath{portablePath}, vectorPaths(b)...) {
			b.Run(formatName(f)+"/"+path.name, func(b *testing.B) {
				path.use(b)
				b.SetBytes(int64(f.PayloadSize()))
				b.ReportAllocs()
				for b.Loop() {
					for k := range f.Chips() {
						chip := job.Payload[k*p.chipBytes : (k+1)*p.chipBytes]
						rot := p.rot.Rotated(k)
						for r := range f.ChipHeight {
							off := f.PixelIndex(k, r, 0, false) * pix
							p.decodeRow(job.Image[off:off+w*pix], chip, r, rot, counts)
						}
					}
				}
			})
		}
	}
}
