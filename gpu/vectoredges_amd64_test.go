package gpu

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"h5ingest/frame"
)

// vectorEdgeWidths are chip widths at and beside every vector step of the
// decodes: 8-pixel bitplane bytes, the AVX2 groups of 8, 16 and 32 pixels,
// the AVX-512 ones of 16, 32, 64, 128 and 256, rows of a few pixels.
var vectorEdgeWidths = []int{1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40, 47, 48, 49,
	63, 64, 65, 72, 96, 127, 128, 129, 136, 192, 200, 255, 256, 257, 264, 384, 511, 512, 513, 520, 600}

// TestCPUDecodeAtVectorEdges decodes frames of every encoding, depth and
// coding through the cpu backend on every path this CPU has, and on the
// AVX-512 one without AVX2 (what GODEBUG=cpu.avx2=off gives on such a
// CPU), and holds each to the reference decoder: chip widths at every
// vector edge, chips 1 to 11 rows tall (bands of a few rows), one chip or
// 3 x 2 at random orientations, 1 to 4 workers. The payload ends where a
// page no one may read begins, and the image sits at an odd address
// between bytes that must stay as they were.
func TestCPUDecodeAtVectorEdges(t *testing.T) {
	paths := decodePaths()
	if cpuHasGFNI {
		paths = append(paths, decodePath{"avx512-without-avx2", false, true})
	}
	const gap = 67
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			p.use(t)
			rng := rand.New(rand.NewPCG(41, 42))
			frames := 0
			for _, f := range testFormats() {
				for _, w := range vectorEdgeWidths {
					for _, g := range []frame.Geometry{{ChipsX: 1, ChipsY: 1, ChipHeight: 1}, {ChipsX: 3, ChipsY: 2, ChipHeight: 2}, {ChipsX: 1, ChipsY: 1, ChipHeight: 3}, {ChipsX: 3, ChipsY: 2, ChipHeight: 11}} {
						g.ChipWidth = w
						f.Geometry = g
						if f.Validate() != nil {
							continue // bitplane chips of a width not a multiple of 8, odd packed12 chips
						}
						o := make(frame.Orientation, g.Chips())
						for k := range o {
							o[k] = 180 * rng.IntN(2)
						}
						payload := guardedBytes(t, f.PayloadSize())
						for i := range payload {
							payload[i] = byte(rng.Uint32())
						}
						frames++
						be := newBackend(t, "cpu", Options{Orientation: o, Workers: 1 + frames%4})
						buf := bytes.Repeat([]byte{0xA5}, f.ImageSize()+2*gap)
						job := newJob(f, frames, payload)
						job.Image = buf[gap : gap+f.ImageSize()]
						jobs := []Job{job}
						if err := be.Decode(jobs); err != nil {
							t.Fatal(err)
						}
						name := fmt.Sprintf("%v, chips at %v, %d workers", f, o, 1+frames%4)
						want := refDecode(f, payload, o)
						checkJob(t, name, &jobs[0], want)
						if bytes.Count(buf[:gap], []byte{0xA5}) != gap || bytes.Count(buf[gap+len(want):], []byte{0xA5}) != gap {
							t.Fatalf("%s: bytes beside the image written", name)
						}
					}
				}
			}
			if frames < 1000 {
				t.Fatalf("%d frames decoded: the geometries were not made", frames)
			}
		})
	}
}
