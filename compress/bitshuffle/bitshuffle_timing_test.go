package bitshuffle

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// frame returns a width x width frame of elemSize-byte little-endian pixels
// with low photon counts (mean about 3) and a bright square, the typical
// content of a detector frame.
func frame(width, elemSize int) []byte {
	rng := rand.New(rand.NewPCG(42, 7))
	b := make([]byte, width*width*elemSize)
	for y := range width {
		for x := range width {
			v := uint64(poisson(rng, 3))
			if x > width/3 && x < width/2 && y > width/3 && y < width/2 {
				v = uint64(poisson(rng, 3)) * 1000
			}
			for j := range elemSize {
				b[(y*width+x)*elemSize+j] = byte(v >> (8 * j))
			}
		}
	}
	return b
}

// poisson draws from a Poisson distribution of the given mean (Knuth).
func poisson(rng *rand.Rand, mean float64) int {
	l, k, p := 1.0, 0, 1.0
	for i := 0.0; i < mean; i++ {
		l /= 2.718281828459045
	}
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

func BenchmarkShuffle(b *testing.B) {
	for _, es := range []int{2, 4} {
		src := frame(1536, es)
		dst := make([]byte, 0, len(src))
		b.Run(fmt.Sprintf("shuffle/uint%d", 8*es), func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := AppendShuffle(dst, src, es, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
		shuffled, _ := AppendShuffle(nil, src, es, 0)
		b.Run(fmt.Sprintf("unshuffle/uint%d", 8*es), func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := AppendUnshuffle(dst, shuffled, es, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
