package compress

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"h5ingest/compress/bitshuffle"
)

// detectorFrame returns a 1536x1536 Pi-mega frame of elemSize-byte
// little-endian pixels: Poisson photon counts of mean 3 with a bright
// square of mean 3000 (saturating uint16 stays in range).
func detectorFrame(elemSize int) []byte {
	const width = 1536
	rng := rand.New(rand.NewPCG(42, 7))
	b := make([]byte, width*width*elemSize)
	for y := range width {
		for x := range width {
			v := poisson(rng, 3)
			if x > width/3 && x < width/2 && y > width/3 && y < width/2 {
				v *= 1000
			}
			for j := range elemSize {
				b[(y*width+x)*elemSize+j] = byte(v >> (8 * j))
			}
		}
	}
	return b
}

// poisson draws from a Poisson distribution of a small mean (Knuth).
func poisson(rng *rand.Rand, mean float64) uint64 {
	l, p := math.Exp(-mean), 1.0
	for k := uint64(0); ; k++ {
		p *= rng.Float64()
		if p <= l {
			return k
		}
	}
}

// TestWriteBenchFrame writes the benchmark frame for tools/bench-codecs
// when H5INGEST_TEST_BENCH_FRAME names a file.
func TestWriteBenchFrame(t *testing.T) {
	name := os.Getenv("H5INGEST_TEST_BENCH_FRAME")
	if name == "" {
		t.Skip("H5INGEST_TEST_BENCH_FRAME not set; tools/bench-codecs/run.sh sets it")
	}
	writeFile(t, name, detectorFrame(4))
}

func BenchmarkCodecs(b *testing.B) {
	frames := map[int][]byte{}
	frame := func(es int) []byte {
		if frames[es] == nil {
			frames[es] = detectorFrame(es)
		}
		return frames[es]
	}
	for _, es := range []int{4, 2} {
		for _, name := range Names() {
			b.Run(fmt.Sprintf("encode/%s/uint%d", name, 8*es), func(b *testing.B) {
				src := frame(es)
				c := mustNew(b, name, es)
				enc := make([]byte, 0, c.Bound(len(src)))
				var stored []byte
				b.SetBytes(int64(len(src)))
				b.ReportAllocs()
				for b.Loop() {
					var err error
					if stored, err = c.Encode(enc, src); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(src))/float64(len(stored)), "ratio")
			})
			b.Run(fmt.Sprintf("encode-shuffled/%s/uint%d", name, 8*es), func(b *testing.B) {
				// What compression costs once a decode backend has done the
				// transpose (gpu.Job.ShuffleBlock): the block compressor alone.
				c, ok := mustNew(b, name, es).(Preshuffled)
				if !ok {
					b.Skipf("%s has no bitshuffle stage", name)
				}
				src, err := bitshuffle.AppendShuffle(nil, frame(es), es, c.BlockElems())
				if err != nil {
					b.Fatal(err)
				}
				enc := make([]byte, 0, c.Bound(len(src)))
				b.SetBytes(int64(len(src)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := c.EncodeShuffled(enc, src); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("decode/%s/uint%d", name, 8*es), func(b *testing.B) {
				src := frame(es)
				c := mustNew(b, name, es)
				stored, err := c.Encode(nil, src)
				if err != nil {
					b.Fatal(err)
				}
				dec := make([]byte, 0, len(src))
				b.SetBytes(int64(len(src)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := c.Decode(dec, stored); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
