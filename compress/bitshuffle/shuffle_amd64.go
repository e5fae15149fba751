package bitshuffle

import "golang.org/x/sys/cpu"

// useAVX2 says whether the AVX2 transpose of 4-byte elements runs, and
// useGFNI whether the AVX-512 one does (on groups of 256 elements, the
// AVX2 one taking groups of 32 left after them); they are set once from
// the CPU's features (and by tests, to cross-check).
var (
	useAVX2 = cpu.X86.HasAVX2
	useGFNI = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL &&
		cpu.X86.HasAVX512VBMI && cpu.X86.HasAVX512GFNI
)

// shuffle4GFNI transposes groups*256 elements of 4 bytes from src into the
// bit rows of a block whose rows are rowBytes long, starting at row byte 0.
// For each run of 64 elements it gathers each byte of the elements into
// one vector (VPERMB, then a 4x4 transpose of 128-bit lanes) and
// transposes its 8x8 bit matrices with VGF2P8AFFINEQB; four runs' planes
// are interleaved so that each row gets 32 bytes in one store.
//
//go:noescape
func shuffle4GFNI(dst, src *byte, rowBytes, groups int)

// shuffle4AVX2 transposes groups*32 elements of 4 bytes from src into the
// bit rows of a block whose rows are rowBytes long, starting at row byte 0.
// For each group of 32 elements it gathers each byte of the elements into
// one vector and takes the 8 bit rows of that byte with VPMOVMSKB, 4 row
// bytes at a time.
//
//go:noescape
func shuffle4AVX2(dst, src *byte, rowBytes, groups int)

// shuffleFast transposes as many elements of the block as the assembly
// transpose handles and returns how many that is. n is the block's element
// count.
func shuffleFast(dst, src []byte, elemSize, n int) int {
	if elemSize != 4 || n < 32 {
		return 0
	}
	done := 0
	if useGFNI && n >= 256 {
		groups := n / 256
		_ = src[groups*1024-1]
		_ = dst[31*(n/8)+32*groups-1]
		shuffle4GFNI(&dst[0], &src[0], n/8, groups)
		done = groups * 256
	}
	if useAVX2 && n-done >= 32 {
		// The elements left, from row byte done/8.
		groups := (n - done) / 32
		_ = src[done*4+groups*128-1]
		_ = dst[31*(n/8)+done/8+4*groups-1]
		shuffle4AVX2(&dst[done/8], &src[done*4], n/8, groups)
		done += groups * 32
	}
	return done
}
