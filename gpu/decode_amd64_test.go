package gpu

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestBitplane24AVX2MatchesPortable cross-checks the AVX2 gather with the
// portable decoder for both codings, both orientations and chip widths
// around its 32-pixel groups (widths it cannot take fall back).
func TestBitplane24AVX2MatchesPortable(t *testing.T) {
	if !useAVX2 {
		t.Skip("CPU has no AVX2: the assembly gather never runs here")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, w := range []int{8, 32, 64, 96, 256, 512} {
		row := make([]byte, 3*w)
		for i := range row {
			row[i] = byte(rng.Uint32())
		}
		scratch := make([]uint32, w)
		for _, lfsr := range []bool{false, true} {
			for _, rotated := range []bool{false, true} {
				want := make([]byte, 4*w)
				bitplane24(want, row, lfsr, rotated)
				got := make([]byte, 4*w)
				ok := bitplane24Fast(got, row, lfsr, rotated, scratch)
				if ok != (w%32 == 0) {
					t.Fatalf("width %d: fast path ran %v, want %v", w, ok, w%32 == 0)
				}
				if ok && !bytes.Equal(got, want) {
					t.Fatalf("width %d lfsr %v rotated %v: AVX2 gather differs from the portable decoder", w, lfsr, rotated)
				}
			}
		}
	}
}
