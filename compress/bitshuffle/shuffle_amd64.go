package bitshuffle

import "golang.org/x/sys/cpu"

// useAVX2 says whether the AVX2 transpose of 4-byte elements runs; it is
// set once from the CPU's features (and by tests, to cross-check).
var useAVX2 = cpu.X86.HasAVX2

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
	if elemSize != 4 || !useAVX2 || n < 32 {
		return 0
	}
	groups := n / 32
	_ = src[groups*128-1]
	_ = dst[31*(n/8)+4*groups-1]
	shuffle4AVX2(&dst[0], &src[0], n/8, groups)
	return groups * 32
}
