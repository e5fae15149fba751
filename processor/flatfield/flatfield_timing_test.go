package flatfield

import (
	"fmt"
	"testing"

	"h5ingest/frame"
	"h5ingest/plan"
)

// BenchmarkProjection times one projection's preview on a Pi-mega module
// (1536 x 1536 pixels), once the reference is made, per pixel size and
// bin.
func BenchmarkProjection(b *testing.B) {
	for _, depth := range []int{12, 24} {
		f := frame.Format{Geometry: frame.PiMega, Encoding: frame.Bitplane, BitDepth: depth, Coding: frame.LFSR}
		keys := plan.Tomo(1, 1, 1, 0, 180).ImageKeys()
		images := scene(f, keys)
		for _, bin := range []int{1, 4} {
			b.Run(fmt.Sprintf("%dbit/bin%d", depth, bin), func(b *testing.B) {
				o := DefaultOptions()
				o.Bin = bin
				st, out := start(b, f, o, keys)
				out.discard = true
				p, _ := st.Processor()
				for n, img := range images {
					p.Process(n, f, img)
				}
				b.SetBytes(int64(f.ImageSize()))
				b.ReportAllocs()
				for b.Loop() {
					p.Process(2, f, images[2])
				}
			})
		}
	}
}
