package bitshuffle

// This file holds the byte-gather transpose: for every group of 8 elements
// and every byte j of the element size it gathers byte j of the 8 elements
// into one 64-bit word, transposes that 8x8 bit matrix, and scatters the 8
// result bytes to bit rows 8j..8j+7. It works for any element size and is
// the path for the tail of a block that is not a multiple of 64 elements.

// transpose8 transposes the 8x8 bit matrix held in x, row m in byte m and
// column k in bit k (least significant first): on return, bit m of byte k
// holds what was bit k of byte m.
func transpose8(x uint64) uint64 {
	t := (x ^ (x >> 7)) & 0x00AA00AA00AA00AA
	x ^= t ^ (t << 7)
	t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCC
	x ^= t ^ (t << 14)
	t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0
	x ^= t ^ (t << 28)
	return x
}

// shuffleGroups transposes the groups of 8 elements from element index from
// up to n of a block of n elements.
func shuffleGroups(dst, src []byte, elemSize, n, from int) {
	rowBytes := n / 8
	for g := from / 8; g < rowBytes; g++ {
		in := src[g*8*elemSize : (g+1)*8*elemSize]
		for j := range elemSize {
			var x uint64
			for m := range 8 {
				x |= uint64(in[m*elemSize+j]) << (8 * m)
			}
			x = transpose8(x)
			out := dst[8*j*rowBytes+g:]
			for k := range 8 {
				out[k*rowBytes] = byte(x >> (8 * k))
			}
		}
	}
}

// unshuffleGroups inverts shuffleGroups.
func unshuffleGroups(dst, src []byte, elemSize, n, from int) {
	rowBytes := n / 8
	for g := from / 8; g < rowBytes; g++ {
		out := dst[g*8*elemSize : (g+1)*8*elemSize]
		for j := range elemSize {
			in := src[8*j*rowBytes+g:]
			var x uint64
			for k := range 8 {
				x |= uint64(in[k*rowBytes]) << (8 * k)
			}
			x = transpose8(x)
			for m := range 8 {
				out[m*elemSize+j] = byte(x >> (8 * m))
			}
		}
	}
}
