package gpu

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"h5ingest/frame"
)

// decodePath is a set of the CPU features the decoders are chosen by.
type decodePath struct {
	name       string
	avx2, gfni bool
}

// The decode paths a CPU may have, with the flags that choose them.
var (
	portablePath = decodePath{"portable", false, false}
	avx2Path     = decodePath{"avx2", true, false}
	avx512Path   = decodePath{"avx512", true, true}
)

// The features the CPU has, whatever the tests set the flags to.
var cpuHasAVX2, cpuHasGFNI = useAVX2, useGFNI

// decodePaths returns the paths this CPU can run: portable Go, then the
// vector ones, widest last.
func decodePaths() []decodePath {
	ps := []decodePath{portablePath}
	if cpuHasAVX2 {
		ps = append(ps, avx2Path)
	}
	if cpuHasGFNI {
		ps = append(ps, avx512Path)
	}
	return ps
}

// use sets the features of path p for the rest of test or benchmark tb.
func (p decodePath) use(tb testing.TB) {
	savedAVX2, savedGFNI := useAVX2, useGFNI
	tb.Cleanup(func() { useAVX2, useGFNI = savedAVX2, savedGFNI })
	useAVX2, useGFNI = p.avx2, p.gfni
}

// bandRuns says whether bitplaneBand takes a chip of depth bits, w pixels
// wide, on path p.
func bandRuns(p decodePath, depth, w int, rotated bool) bool {
	switch {
	case depth == 12 && p.gfni && w%256 == 0:
		return !rotated // rotated ones go row by row (bitplane12Fast)
	case depth == 6 && p.gfni && w%128 == 0, depth == 1 && p.gfni && w%64 == 0:
		return true
	}
	return p.avx2 && w >= 32
}

// TestBitplaneBandMatchesPortable cross-checks the vector decode of bands
// of 12-, 6- and 1-bit chip rows, on every path this CPU has (and that
// portable Go declines them), with the
// portable decoders row by row: random planes, both codings, both
// orientations, chip widths of 8 to 520 pixels (the AVX2 decoders' 32-pixel
// groups with every tail, the AVX-512 ones' 64 and 128), bands that start
// past the chip's first row, and image rows wider than the chip (the bytes
// beside the chip's pieces must stay as they were), the chip's bytes
// between pages no one may read. One row with a stride
// of its own width is bitplaneRow, as decodeRow calls it.
func TestBitplaneBandMatchesPortable(t *testing.T) {
	if !useAVX2 {
		t.Log("CPU has no AVX2: only the portable decode runs here")
	}
	const chipRows = 6
	for _, p := range decodePaths() {
		t.Run(p.name, func(t *testing.T) {
			p.use(t)
			for _, depth := range []int{12, 6, 1} {
				rng := rand.New(rand.NewPCG(21, uint64(depth)))
				for w := 8; w <= 520; w += 8 {
					rowBytes := depth * w / 8
					// The chip's bytes end at a page no one may read, then
					// begin at one: a read past either end faults.
					for _, chip := range [][]byte{guardedBytes(t, chipRows*rowBytes), guardedAfter(t, chipRows*rowBytes)} {
						for i := range chip {
							chip[i] = byte(rng.Uint32())
						}
						for _, lfsr := range []bool{false, true} {
							for _, rotated := range []bool{false, true} {
								name := fmt.Sprintf("%d-bit width %d lfsr %v rotated %v", depth, w, lfsr, rotated)
								checkBand(t, name, chip, depth, w, lfsr, rotated, bandRuns(p, depth, w, rotated))
							}
						}
					}
				}
			}
		})
	}
}

// checkBand decodes bands of chip with bitplaneBand and checks them, and
// whether it ran, against the portable decoders.
func checkBand(t *testing.T, name string, chip []byte, depth, w int, lfsr, rotated, runs bool) {
	t.Helper()
	const gap = 68
	rowBytes := depth * w / 8
	rows := len(chip) / rowBytes
	for _, band := range [][2]int{{0, 1}, {0, rows}, {2, 5}, {rows - 1, rows}} {
		r0, r1 := band[0], band[1]
		stride := 2*w + gap
		got := bytes.Repeat([]byte{0xA5}, (r1-r0)*stride)
		ran := bitplaneBand(got, stride, chip, r0, r1, w, depth, lfsr, rotated)
		if ran != runs {
			t.Fatalf("%s rows [%d, %d): band decode ran %v, want %v", name, r0, r1, ran, runs)
		}
		if !ran {
			continue
		}
		for r := r0; r < r1; r++ {
			y := r - r0
			if rotated {
				y = r1 - 1 - r
			}
			want := make([]byte, 2*w)
			bitplaneSmall(want, chip[r*rowBytes:(r+1)*rowBytes], depth, lfsr, rotated)
			line := got[y*stride : (y+1)*stride]
			if !bytes.Equal(line[:2*w], want) {
				t.Fatalf("%s rows [%d, %d): readout row %d differs from the portable decoder:\n got %x\nwant %x",
					name, r0, r1, r, line[:2*w], want)
			}
			if !bytes.Equal(line[2*w:], bytes.Repeat([]byte{0xA5}, gap)) {
				t.Fatalf("%s rows [%d, %d): bytes beside the chip's piece of image row %d written", name, r0, r1, y)
			}
		}
	}
	row := chip[rowBytes : 2*rowBytes]
	want := make([]byte, 2*w)
	bitplaneSmall(want, row, depth, lfsr, rotated)
	got := make([]byte, 2*w)
	if ran := bitplaneRow(got, row, depth, lfsr, rotated); ran != runs || ran && !bytes.Equal(got, want) {
		t.Fatalf("%s: one row (ran %v, want %v) differs from the portable decoder", name, ran, runs)
	}
}

// TestBitplaneBandAllocs checks that the band decode allocates nothing, on
// every path, its portable tails (chips 200 pixels wide) included.
func TestBitplaneBandAllocs(t *testing.T) {
	const w, rows = 200, 4
	for _, p := range decodePaths() {
		t.Run(p.name, func(t *testing.T) {
			p.use(t)
			for _, depth := range []int{12, 6, 1} {
				chip := make([]byte, rows*depth*w/8)
				dst := make([]byte, rows*2*w)
				for _, rotated := range []bool{false, true} {
					allocs := testing.AllocsPerRun(20, func() {
						bitplaneBand(dst, 2*w, chip, 0, rows, w, depth, true, rotated)
					})
					if allocs != 0 {
						t.Errorf("%d-bit, rotated %v: %v allocations a band, want 0", depth, rotated, allocs)
					}
				}
			}
		})
	}
}

// TestCPUBitplanePathsMatchReference decodes bitplane frames of every depth
// and coding with the cpu backend on every path this CPU has, each chip
// width in turn taken by AVX-512, by AVX2 with a portable tail, or by
// neither, chips at 0 and 180 degrees and a mix, and holds the image and
// its CRCs to the reference decoder's.
func TestCPUBitplanePathsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	geometries := []frame.Geometry{
		{ChipsX: 2, ChipsY: 2, ChipWidth: 256, ChipHeight: 6},
		{ChipsX: 3, ChipsY: 1, ChipWidth: 200, ChipHeight: 5},
		{ChipsX: 1, ChipsY: 2, ChipWidth: 64, ChipHeight: 7},
		{ChipsX: 2, ChipsY: 1, ChipWidth: 24, ChipHeight: 3},
	}
	for _, p := range decodePaths() {
		t.Run(p.name, func(t *testing.T) {
			p.use(t)
			for _, g := range geometries {
				for _, depth := range []int{24, 12, 6, 1} {
					for _, coding := range []frame.Coding{frame.Binary, frame.LFSR} {
						f := frame.Format{Geometry: g, Encoding: frame.Bitplane, BitDepth: depth, Coding: coding}
						payload := randomBytes(rng, f.PayloadSize())
						for name, o := range testOrientations(g) {
							be := newBackend(t, "cpu", Options{Orientation: o, Workers: 2})
							batch := []Job{newJob(f, 1, payload)}
							if err := be.Decode(batch); err != nil || batch[0].Err != nil {
								t.Fatalf("%v %s: %v, %v", f, name, err, batch[0].Err)
							}
							want := refDecode(f, payload, o)
							j := &batch[0]
							if !bytes.Equal(j.Image[:len(want)], want) {
								t.Fatalf("%v, chips %s: image differs from the reference decoder", f, name)
							}
							if !bytes.Equal(j.Image[len(want):], bytes.Repeat([]byte{0xA5}, len(j.Image)-len(want))) {
								t.Fatalf("%v, chips %s: bytes past the image written", f, name)
							}
							if j.DataCRC != frame.Checksum(want) {
								t.Fatalf("%v, chips %s: data CRC %08x, want %08x", f, name, j.DataCRC, frame.Checksum(want))
							}
						}
					}
				}
			}
		})
	}
}
