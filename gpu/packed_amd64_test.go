package gpu

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"h5ingest/frame"
)

// byteEncodings are the encodings the vector decodes of packed_amd64.s
// take, with each path's vector step in pixels (0: a copy, not decoded
// at 0 degrees).
var byteEncodings = []struct {
	enc          frame.Encoding
	depth        int
	avx2, avx512 int
}{
	{frame.Packed12, 12, 16, 32},
	{frame.Packed24, 24, 8, 16},
	{frame.U16LE, 16, 16, 32},
	{frame.U32LE, 32, 8, 16},
}

// TestPackedVectorMatchesPortable decodes rows of every byte-aligned
// encoding with each vector path the CPU has and with the portable one,
// for chip widths 1 to 300 and 511, 512 and 1024 (vectors and tails), both
// orientations, rows that start on a packed12 pair and inside one (odd
// widths), over random bytes. The chip block ends (or, for odd widths,
// begins) at a page no one may read, so that a read past it faults, and
// the image row is framed
// by bytes that must stay as they were. It also checks that the vectors
// took every whole step of the row.
func TestPackedVectorMatchesPortable(t *testing.T) {
	paths := decodePaths()[1:] // the vector paths this CPU has
	if len(paths) == 0 {
		t.Skip("CPU has no AVX2: only the portable decode runs here")
	}
	rng := rand.New(rand.NewPCG(33, 12))
	widths := []int{511, 512, 1024}
	for w := 1; w <= 300; w++ {
		widths = append(widths, w)
	}
	const guard = 64
	for _, e := range byteEncodings {
		for _, w := range widths {
			f := frame.Format{
				Geometry: frame.Geometry{ChipsX: 1, ChipsY: 1, ChipWidth: w, ChipHeight: 2},
				Encoding: e.enc, BitDepth: e.depth,
			}
			if err := f.Validate(); err != nil {
				t.Fatalf("%v: %v", f, err)
			}
			// The chip's bytes end at a page no one may read, or for odd
			// widths begin at one.
			guarded := guardedBytes
			if w%2 == 1 {
				guarded = guardedAfter
			}
			chip := guarded(t, f.ChipPayloadSize())
			for i := range chip {
				chip[i] = byte(rng.Uint32())
			}
			p := plan{f: f, pix: f.PixelSize()}
			counts := make([]uint32, w)
			rowBytes := w * p.pix
			for r := range 2 {
				for _, rotated := range []bool{false, true} {
					portablePath.use(t)
					want := make([]byte, rowBytes)
					p.decodeRow(want, chip, r, rotated, counts)
					for _, path := range paths {
						path.use(t)
						buf := bytes.Repeat([]byte{0xA5}, rowBytes+2*guard)
						p.decodeRow(buf[guard:guard+rowBytes], chip, r, rotated, counts)
						name := fmt.Sprintf("%s %v width %d row %d rotated %v", path.name, e.enc, w, r, rotated)
						if !bytes.Equal(buf[guard:guard+rowBytes], want) {
							t.Fatalf("%s: row differs from the portable decoder", name)
						}
						if bytes.Count(buf[:guard], []byte{0xA5}) != guard || bytes.Count(buf[guard+rowBytes:], []byte{0xA5}) != guard {
							t.Fatalf("%s: bytes beside the row written", name)
						}
						if got, want := vectorPixels(p, chip, r, rotated), vectorWant(e.avx2, e.avx512, path, w, r, e.enc); got != want {
							t.Fatalf("%s: vectors took %d pixels, want %d", name, got, want)
						}
					}
				}
			}
		}
	}
}

// vectorPixels returns how many pixels of readout row r the vector path
// decodes, by running it into a scratch row.
func vectorPixels(p plan, chip []byte, r int, rotated bool) int {
	w := p.f.ChipWidth
	dst := make([]byte, w*p.pix)
	switch p.f.Encoding {
	case frame.Packed12:
		head := min(r*w%2, w)
		return packed12Vector(pixelSpan(dst, 2, head, w, rotated), chip[3*((r*w+head)/2):], rotated)
	case frame.Packed24:
		return packed24Vector(dst, chip[3*r*w:], rotated)
	case frame.U16LE:
		return reverse16Vector(dst, chip[2*r*w:])
	default:
		return reverse32Vector(dst, chip[4*r*w:])
	}
}

// vectorWant returns how many pixels of readout row r of a chip w pixels
// wide the vectors should take on path: every whole step, after the first
// pixel for a packed12 row that starts inside a pair.
func vectorWant(avx2, avx512 int, path decodePath, w, r int, enc frame.Encoding) int {
	step := avx2
	if path.gfni {
		step = avx512
	}
	n := w
	if enc == frame.Packed12 {
		n -= min(r*w%2, w)
	}
	return n / step * step
}

// TestDecodePathsNameByteEncodings checks the names the backend gives the
// decode of packed12, packed24, u16le and u32le for each choice of flags.
func TestDecodePathsNameByteEncodings(t *testing.T) {
	for _, c := range []struct {
		path           decodePath
		packed, little string
	}{
		{portablePath, "portable Go", "memmove (portable Go for chips at 180 degrees)"},
		{avx2Path, "AVX2", "memmove (AVX2 for chips at 180 degrees)"},
		{avx512Path, "AVX-512 VBMI", "memmove (AVX-512 VBMI for chips at 180 degrees)"},
	} {
		c.path.use(t)
		got := map[string]string{}
		for _, d := range CPUDecodePaths() {
			got[d.Encodings] = d.Instructions
		}
		if got["packed12, packed24"] != c.packed || got["u16le, u32le"] != c.little {
			t.Errorf("%s: packed %q, little-endian %q, want %q, %q", c.path.name,
				got["packed12, packed24"], got["u16le, u32le"], c.packed, c.little)
		}
	}
}
