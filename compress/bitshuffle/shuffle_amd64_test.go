package bitshuffle

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestShuffleAVX2MatchesPortable cross-checks the assembly transpose with
// the portable one at sizes around its 32-element groups.
func TestShuffleAVX2MatchesPortable(t *testing.T) {
	if !useAVX2 {
		t.Skip("CPU has no AVX2: the assembly transpose never runs here")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{8, 24, 32, 40, 56, 64, 96, 200, 1000, 1024, 2040, 2048, 4096} {
		src := randomBytes(rng, 4*n)
		fast := make([]byte, len(src))
		ShuffleBlock(fast, src, 4)
		useAVX2 = false
		portable := make([]byte, len(src))
		ShuffleBlock(portable, src, 4)
		useAVX2 = true
		if !bytes.Equal(fast, portable) {
			t.Fatalf("n %d: AVX2 transpose differs from the portable one", n)
		}
		if !bytes.Equal(fast, refShuffleBlock(src, 4)) {
			t.Fatalf("n %d: AVX2 transpose differs from the reference", n)
		}
	}
}

// TestShuffleGFNIMatchesPortable cross-checks the AVX-512 transpose, with
// and without the AVX2 one after it, against the portable one and the
// reference at sizes around its 256-element groups.
func TestShuffleGFNIMatchesPortable(t *testing.T) {
	if !useGFNI {
		t.Skip("CPU lacks AVX-512 VBMI or GFNI: the AVX-512 transpose never runs here")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	defer func(g, a bool) { useGFNI, useAVX2 = g, a }(useGFNI, useAVX2)
	for _, n := range []int{8, 32, 64, 248, 256, 264, 288, 480, 504, 512, 520, 768, 1000, 1024, 2016, 2040, 2048, 2056, 4096} {
		src := randomBytes(rng, 4*n)
		want := refShuffleBlock(src, 4)
		for _, mode := range []struct{ gfni, avx2 bool }{{true, true}, {true, false}, {false, true}, {false, false}} {
			useGFNI, useAVX2 = mode.gfni, mode.avx2
			got := make([]byte, len(src))
			ShuffleBlock(got, src, 4)
			if !bytes.Equal(got, want) {
				t.Fatalf("n %d, AVX-512 %v, AVX2 %v: transpose differs from the reference", n, mode.gfni, mode.avx2)
			}
		}
	}
}

// BenchmarkShuffleImpl times the transposes of 4-byte blocks one against
// the other in one run: AVX-512 (GFNI), AVX2 and portable.
func BenchmarkShuffleImpl(b *testing.B) {
	src := frame(1536, 4)
	dst := make([]byte, 0, len(src))
	defer func(g, a bool) { useGFNI, useAVX2 = g, a }(useGFNI, useAVX2)
	for _, mode := range []struct {
		name       string
		gfni, avx2 bool
	}{{"avx512-gfni", true, true}, {"avx2", false, true}, {"portable", false, false}} {
		if (mode.gfni && !cpuGFNI) || (mode.avx2 && !cpuAVX2) {
			continue
		}
		b.Run(mode.name, func(b *testing.B) {
			useGFNI, useAVX2 = mode.gfni, mode.avx2
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := AppendShuffle(dst, src, 4, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// cpuGFNI and cpuAVX2 are the CPU's own answers, kept from tests that
// switch the transposes off.
var cpuGFNI, cpuAVX2 = useGFNI, useAVX2
