package compress

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/pierrec/lz4/v4"

	"h5ingest/compress/bitshuffle"
	"h5ingest/compress/internal/clz4"
)

// tomoFrame returns a 1536x1536 frame of uint32 pixels like a flat-field
// corrected tomography projection: counts of about 1200 to 3100 varying
// across the frame, with Poisson noise (normal approximation), so that
// the low 9 or so bit planes are noise and the top 20 are zero.
func tomoFrame() []byte {
	const width = 1536
	rng := rand.New(rand.NewPCG(3, 5))
	b := make([]byte, width*width*4)
	for y := range width {
		for x := range width {
			mean := 2300 + 800*math.Sin(float64(x)/300)*math.Cos(float64(y)/200)
			v := uint32(max(0, mean+math.Sqrt(mean)*rng.NormFloat64()))
			b[(y*width+x)*4], b[(y*width+x)*4+1], b[(y*width+x)*4+2], b[(y*width+x)*4+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		}
	}
	return b
}

// shuffledBlocks returns the 8 KiB bitshuffle blocks of a frame of 4-byte
// pixels.
func shuffledBlocks(tb testing.TB, frame []byte) [][]byte {
	s, err := bitshuffle.AppendShuffle(nil, frame, 4, 0)
	if err != nil {
		tb.Fatal(err)
	}
	const bs = 8192
	var blocks [][]byte
	for off := 0; off+bs <= len(s); off += bs {
		blocks = append(blocks, s[off:off+bs])
	}
	return blocks
}

// BenchmarkLZ4Blocks times the block compressor alone, the faster-skipping
// parse of before (ref), the C library's (fast) and the C library's at
// acceleration 8 (bslz4 level -8) in one run, on the bitshuffle blocks of a tomography frame
// and of a low-count frame, and reports the compression ratio of each.
func BenchmarkLZ4Blocks(b *testing.B) {
	frames := []struct {
		name  string
		frame func() []byte
	}{{"tomo", tomoFrame}, {"lowcount", func() []byte { return detectorFrame(4) }}}
	for _, fr := range frames {
		blocks := shuffledBlocks(b, fr.frame())
		total := len(blocks) * len(blocks[0])
		out := make([]byte, 0, lz4.CompressBlockBound(8192))
		for _, impl := range []struct {
			name string
			c    func(dst, src []byte) []byte
		}{
			{"ref", new(refLZ4).compress},
			{"fast", new(fastLZ4).compress},
			{"fast-accel8", (&fastLZ4{accel: 8}).compress},
		} {
			b.Run(fmt.Sprintf("%s/%s", fr.name, impl.name), func(b *testing.B) {
				b.SetBytes(int64(total))
				b.ReportAllocs()
				stored := 0
				for b.Loop() {
					stored = 0
					for _, blk := range blocks {
						stored += len(impl.c(out, blk))
					}
				}
				b.ReportMetric(float64(total)/float64(stored), "ratio")
			})
		}
	}
}

// TestMatchEndTwins checks matchEnd (AVX2 where the CPU has it) against
// the pure-Go loop and a byte-by-byte count, for every end and first
// difference around the 8, 32 and 64-byte steps, and offsets from 1 (a
// run of one byte) to beyond a step.
func TestMatchEndTwins(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, off := range []int{1, 2, 3, 4, 7, 8, 31, 32, 33, 64, 100} {
		for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 95, 96, 127, 128, 129, 200, 1000} {
			for _, diff := range []int{0, 1, 7, 8, 31, 32, 33, 63, 64, 65, 96, 128, 199, 999, -1} {
				if diff >= n {
					continue
				}
				// A run of zeros at offset off, then n bytes matching
				// off bytes back but for a difference at diff.
				src := make([]byte, off+n)
				if diff >= 0 {
					src[off+diff] = byte(1 + rng.IntN(255))
				}
				want := off
				for want < len(src) && src[want] == src[want-off] {
					want++
				}
				if got := matchEndGo(src, off, off); got != want {
					t.Fatalf("off %d n %d diff %d: matchEndGo %d, want %d", off, n, diff, got, want)
				}
				if got := matchEnd(src, off, off); got != want {
					t.Fatalf("off %d n %d diff %d (AVX2 %v): matchEnd %d, want %d", off, n, diff, useAVX2, got, want)
				}
			}
		}
	}
}

// TestFastLZ4MatchesC checks that, for blocks under 64 KiB, fastLZ4 makes
// the very bytes the C library's LZ4_compress_default makes (and
// LZ4_compress_fast at the accelerations of bslz4's negative levels), with
// the assembly probe loop and AVX2 comparison and without, one compressor
// reused across blocks as the codec uses it: a file stores exactly what
// the C filter would.
func TestFastLZ4MatchesC(t *testing.T) {
	if !clz4.Available {
		t.Skip("built without cgo: the C LZ4 library is not linked")
	}
	blocks := append(lz4TestBlocks(), shuffledBlocks(t, tomoFrame())[:300]...)
	blocks = append(blocks, shuffledBlocks(t, detectorFrame(4))[500:800]...)
	savedSearch := useSearchAsm
	defer func() { useSearchAsm = savedSearch }()
	for _, accel := range []int{0, 1, 2, 3, 8, MaxLZ4Acceleration} {
		for _, avx := range []bool{false, true} {
			if avx && !useAVX2 {
				continue
			}
			saved := useAVX2
			useAVX2 = avx
			// The assembly probe loop where there is one, with the AVX2
			// comparison; the Go one without.
			useSearchAsm = avx && savedSearch
			fast := fastLZ4{accel: accel}
			for i, src := range blocks {
				if len(src) >= 64<<10 {
					continue // the C library parses such blocks otherwise
				}
				want, err := clz4.Compress(src, max(accel, 1))
				if err != nil {
					t.Fatal(err)
				}
				got := fast.compress(make([]byte, 0, lz4.CompressBlockBound(len(src))), src)
				if !bytes.Equal(got, want) {
					useAVX2 = saved
					t.Fatalf("acceleration %d, AVX2 %v, block %d (%d bytes): %d bytes, want the C library's %d",
						accel, avx, i, len(src), len(got), len(want))
				}
			}
			useAVX2 = saved
		}
	}
}
