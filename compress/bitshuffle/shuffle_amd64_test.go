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
