package bitshuffle

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

// refShuffleBlock is the transpose straight from its definition, one bit at
// a time: output bit r*N+i is bit r of element i.
func refShuffleBlock(src []byte, elemSize int) []byte {
	n := len(src) / elemSize
	dst := make([]byte, len(src))
	for i := range n {
		for r := range 8 * elemSize {
			bit := src[i*elemSize+r/8] >> (r % 8) & 1
			o := r*n + i
			dst[o/8] |= bit << (o % 8)
		}
	}
	return dst
}

// refShuffleChunk splits a chunk as the filter does and shuffles each block
// with refShuffleBlock.
func refShuffleChunk(src []byte, elemSize, blockElems int) []byte {
	full, partial, _ := Split(len(src)/elemSize, blockElems)
	var out []byte
	off := 0
	for range full {
		out = append(out, refShuffleBlock(src[off:off+blockElems*elemSize], elemSize)...)
		off += blockElems * elemSize
	}
	out = append(out, refShuffleBlock(src[off:off+partial*elemSize], elemSize)...)
	off += partial * elemSize
	return append(out, src[off:]...)
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func TestDefaultBlockSize(t *testing.T) {
	tests := []struct{ elemSize, want int }{
		{1, 8192}, {2, 4096}, {3, 2728}, {4, 2048}, {8, 1024}, {16, 512}, {64, 128}, {128, 128}, {1000, 128},
	}
	for _, tt := range tests {
		if got := DefaultBlockSize(tt.elemSize); got != tt.want {
			t.Errorf("DefaultBlockSize(%d) = %d, want %d", tt.elemSize, got, tt.want)
		}
	}
}

func TestSplit(t *testing.T) {
	tests := []struct{ n, block, full, partial, rest int }{
		{0, 2048, 0, 0, 0},
		{7, 2048, 0, 0, 7},
		{8, 2048, 0, 8, 0},
		{2048, 2048, 1, 0, 0},
		{5000, 2048, 2, 904, 0},
		{5005, 2048, 2, 904, 5},
		{1536 * 1536, 2048, 1152, 0, 0},
	}
	for _, tt := range tests {
		full, partial, rest := Split(tt.n, tt.block)
		if full != tt.full || partial != tt.partial || rest != tt.rest {
			t.Errorf("Split(%d, %d) = %d, %d, %d, want %d, %d, %d",
				tt.n, tt.block, full, partial, rest, tt.full, tt.partial, tt.rest)
		}
	}
}

func TestWorkedExamples(t *testing.T) {
	tests := []struct {
		name     string
		src      []byte
		elemSize int
		want     string
	}{
		{"uint32 0..7", le32(0, 1, 2, 3, 4, 5, 6, 7), 4, "aaccf0" + zeros(29)},
		{"uint16 1..8", le16(1, 2, 3, 4, 5, 6, 7, 8), 2, "55667880" + zeros(12)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, f := range blockFuncs {
				dst := make([]byte, len(tt.src))
				f.shuffle(dst, tt.src, tt.elemSize)
				if got := hex.EncodeToString(dst); got != tt.want {
					t.Errorf("%s: got %s, want %s", f.name, got, tt.want)
				}
				back := make([]byte, len(dst))
				f.unshuffle(back, dst, tt.elemSize)
				if !bytes.Equal(back, tt.src) {
					t.Errorf("%s: unshuffle gives %x, want %x", f.name, back, tt.src)
				}
			}
		})
	}
}

func le32(v ...uint32) []byte {
	var b []byte
	for _, x := range v {
		b = append(b, byte(x), byte(x>>8), byte(x>>16), byte(x>>24))
	}
	return b
}

func le16(v ...uint16) []byte {
	var b []byte
	for _, x := range v {
		b = append(b, byte(x), byte(x>>8))
	}
	return b
}

func zeros(n int) string { return hex.EncodeToString(make([]byte, n)) }

// blockFuncs are the transposes under test: the public ones, which use the
// word-wide path where it applies, and the byte-gather path alone.
var blockFuncs = []struct {
	name      string
	shuffle   func(dst, src []byte, elemSize int)
	unshuffle func(dst, src []byte, elemSize int)
}{
	{"ShuffleBlock", ShuffleBlock, UnshuffleBlock},
	{"groups", func(dst, src []byte, es int) { shuffleGroups(dst, src, es, len(src)/es, 0) },
		func(dst, src []byte, es int) { unshuffleGroups(dst, src, es, len(src)/es, 0) }},
}

func TestShuffleBlockMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, es := range []int{1, 2, 3, 4, 5, 8, 12, 16} {
		for _, n := range []int{8, 16, 56, 64, 72, 120, 128, 136, 904, 1024, 2048} {
			src := randomBytes(rng, n*es)
			want := refShuffleBlock(src, es)
			for _, f := range blockFuncs {
				dst := make([]byte, len(src))
				f.shuffle(dst, src, es)
				if !bytes.Equal(dst, want) {
					t.Fatalf("%s elemSize %d n %d: differs from the reference", f.name, es, n)
				}
				back := make([]byte, len(src))
				f.unshuffle(back, dst, es)
				if !bytes.Equal(back, src) {
					t.Fatalf("%s elemSize %d n %d: unshuffle does not invert", f.name, es, n)
				}
			}
		}
	}
}

func TestAppendShuffleMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, es := range []int{1, 2, 4, 8, 3} {
		for _, n := range []int{0, 7, 8, 9, 2048, 5000, 5005, 8192 + 13} {
			for _, block := range []int{0, 64, 2048} {
				src := randomBytes(rng, n*es)
				be := block
				if be == 0 {
					be = DefaultBlockSize(es)
				}
				want := refShuffleChunk(src, es, be)
				prefix := []byte("pre")
				got, err := AppendShuffle(prefix, src, es, block)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got[:3], prefix) || !bytes.Equal(got[3:], want) {
					t.Fatalf("elemSize %d n %d block %d: AppendShuffle differs from the reference", es, n, block)
				}
				back, err := AppendUnshuffle(nil, got[3:], es, block)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(back, src) {
					t.Fatalf("elemSize %d n %d block %d: AppendUnshuffle does not invert", es, n, block)
				}
			}
		}
	}
}

func TestAppendShuffleErrors(t *testing.T) {
	tests := []struct {
		name                string
		n, elemSize, blockN int
	}{
		{"partial element", 7, 2, 0},
		{"zero element size", 8, 0, 0},
		{"block not multiple of 8", 64, 4, 12},
		{"negative block", 64, 4, -8},
	}
	for _, tt := range tests {
		if _, err := AppendShuffle(nil, make([]byte, tt.n), tt.elemSize, tt.blockN); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
}

func TestShuffleBlockPanics(t *testing.T) {
	tests := []struct {
		name          string
		dstN, srcN, s int
	}{
		{"not 8 elements", 12, 12, 4},
		{"short dst", 31, 32, 4},
	}
	for _, tt := range tests {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tt.name)
				}
			}()
			ShuffleBlock(make([]byte, tt.dstN), make([]byte, tt.srcN), tt.s)
		}()
	}
}

func TestZeroAllocs(t *testing.T) {
	src := randomBytes(rand.New(rand.NewPCG(5, 6)), 5005*4)
	dst := make([]byte, 0, len(src))
	back := make([]byte, 0, len(src))
	allocs := testing.AllocsPerRun(10, func() {
		out, _ := AppendShuffle(dst, src, 4, 0)
		back, _ = AppendUnshuffle(back[:0], out, 4, 0)
	})
	if allocs != 0 {
		t.Errorf("AppendShuffle+AppendUnshuffle: %v allocations per run, want 0", allocs)
	}
}
