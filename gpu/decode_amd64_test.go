package gpu

import (
	"bytes"
	"math/rand/v2"
	"slices"
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

// TestLFSR24AVX2MatchesPortable cross-checks the gathers with the portable
// look-up at lengths around the 8-code groups, on codes of any count and
// on codes of counts under 4096 (the high half code 0, its look-up
// skipped), mixed within a group too.
func TestLFSR24AVX2MatchesPortable(t *testing.T) {
	if !useAVX2 {
		t.Skip("CPU has no AVX2: the assembly look-up never runs here")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 255, 256, 1536, 4099} {
		for _, kind := range []string{"any", "low", "mixed"} {
			codes := make([]uint32, n)
			for i := range codes {
				codes[i] = rng.Uint32() & 0xFFFFFF
				if kind == "low" || kind == "mixed" && rng.IntN(8) != 0 {
					codes[i] &= 0xFFF
				}
			}
			if n >= 2 {
				codes[0], codes[n-1] = 0xFFF, 0 // the table's two ends
			}
			want := slices.Clone(codes)
			lfsr24(want)
			got := slices.Clone(codes)
			lfsr24Fast(got)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%d %s codes: code %06x gives %d, want %d", n, kind, codes[i], got[i], want[i])
				}
			}
		}
	}
}

// BenchmarkLFSR24 times the look-up of a Pi-mega chip row's codes, the
// portable loop beside the AVX2 gathers, for counts of any size and for
// counts under 4096 (a frame at a short exposure).
func BenchmarkLFSR24(b *testing.B) {
	for _, counts := range []string{"any", "under4096"} {
		rng := rand.New(rand.NewPCG(1, 2))
		codes := make([]uint32, 1536)
		for i := range codes {
			codes[i] = rng.Uint32() & 0xFFFFFF
			if counts == "under4096" {
				codes[i] &= 0xFFF
			}
		}
		work := make([]uint32, len(codes))
		for _, bc := range []struct {
			name string
			f    func([]uint32)
			ok   bool
		}{{"portable", lfsr24, true}, {"avx2", lfsr24Fast, useAVX2}} {
			b.Run(counts+"/"+bc.name, func(b *testing.B) {
				if !bc.ok {
					b.Skip("no AVX2")
				}
				b.SetBytes(int64(4 * len(codes)))
				b.ReportAllocs()
				for b.Loop() {
					copy(work, codes)
					bc.f(work)
				}
			})
		}
	}
}
