package compress

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/pierrec/lz4/v4"
)

// lz4TestBlocks returns blocks of the kinds a bitshuffled frame holds and
// the format's edge cases: empty, shorter than the match limit, all zero,
// random, sparse, repeating with long and short periods.
func lz4TestBlocks() [][]byte {
	rng := rand.New(rand.NewPCG(9, 10))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	sparse := func(n int, every int) []byte {
		b := make([]byte, n)
		for i := range b {
			if rng.IntN(every) == 0 {
				b[i] = byte(rng.Uint32())
			}
		}
		return b
	}
	period := func(n, p int) []byte {
		b := random(p)
		out := make([]byte, n)
		for i := range out {
			out[i] = b[i%p]
		}
		return out
	}
	blocks := [][]byte{nil, {1}, random(12), random(13), make([]byte, 13), make([]byte, 8192)}
	for _, n := range []int{17, 100, 255, 256, 270, 8192, 70000} {
		blocks = append(blocks, random(n), sparse(n, 3), sparse(n, 40), period(n, 3), period(n, 300), make([]byte, n))
	}
	half := append(make([]byte, 4096), random(4096)...)
	return append(blocks, half, append(random(4096), make([]byte, 4096)...))
}

// TestFastLZ4RoundTrip decodes every block fastLZ4 makes with pierrec/lz4's
// decoder, one compressor reused across blocks as the codec does.
func TestFastLZ4RoundTrip(t *testing.T) {
	var c fastLZ4
	for round := range 2 {
		for i, src := range lz4TestBlocks() {
			dst := make([]byte, 3, 3+lz4.CompressBlockBound(len(src)))
			out := c.compress(dst, src)
			if !bytes.Equal(out[:3], dst[:3]) {
				t.Fatalf("round %d block %d: prefix overwritten", round, i)
			}
			got := make([]byte, len(src))
			n, err := lz4.UncompressBlock(out[3:], got)
			if err != nil || n != len(src) || !bytes.Equal(got, src) {
				t.Fatalf("round %d block %d (%d bytes): decoded %d bytes, err %v, equal %v",
					round, i, len(src), n, err, bytes.Equal(got[:max(n, 0)], src[:max(n, 0)]))
			}
		}
	}
}

// TestFastLZ4TableWraps checks blocks stay decodable when the table's base
// wraps around.
func TestFastLZ4TableWraps(t *testing.T) {
	var c fastLZ4
	c.base = 1<<32 - 5000
	for i, src := range lz4TestBlocks() {
		out := c.compress(make([]byte, 0, lz4.CompressBlockBound(len(src))), src)
		got := make([]byte, len(src))
		if n, err := lz4.UncompressBlock(out, got); err != nil || n != len(src) || !bytes.Equal(got, src) {
			t.Fatalf("block %d: decoded %d bytes, err %v", i, n, err)
		}
	}
}
