// Package bitshuffle implements the bit transpose of the bitshuffle HDF5
// filter (registered filter id 32008): within each block of N elements, N a
// multiple of 8, bit r of element i moves to bit r*N+i of the block's output,
// bits counted least significant first within each byte.
//
// A chunk is split the way the filter splits it (see Split): full blocks,
// then one partial block of a multiple of 8 elements, then the last n%8
// elements copied verbatim.
//
// Two transposes are compiled everywhere. A word-wide one handles element
// sizes 1, 2, 4 and 8 on runs of 64 elements, doing the transpose as six
// rounds of masked swaps on 64-bit words (words.go, generated into
// words_gen.go); a byte-gather one built on the 8x8 bit-matrix transpose
// handles every other element size and the tail of a block that is not a
// multiple of 64 elements. On amd64 (features checked once, at start),
// assembly transposes (shuffle_amd64.s) take 4-byte blocks in ShuffleBlock
// instead of the word-wide one: with AVX-512 VBMI and GFNI the groups of
// 256 elements, with AVX2 the groups of 32 (left); the byte-gather one does
// the rest. All give the same bytes for every input.
package bitshuffle

import "fmt"

const (
	// targetBlockBytes, blockMultiple and minBlockElems give the filter's
	// default block size rule; they must never change, old data depends on
	// them.
	targetBlockBytes = 8192
	blockMultiple    = 8
	minBlockElems    = 128
)

// DefaultBlockSize returns the block size, in elements, that the filter uses
// when a dataset's block size is 0: about 8 KiB, a multiple of 8, at least
// 128 elements. elemSize must be positive.
func DefaultBlockSize(elemSize int) int {
	n := targetBlockBytes / elemSize / blockMultiple * blockMultiple
	return max(n, minBlockElems)
}

// CheckBlockSize reports whether blockElems is a usable block size: positive
// and a multiple of 8.
func CheckBlockSize(blockElems int) error {
	if blockElems <= 0 || blockElems%blockMultiple != 0 {
		return fmt.Errorf("bitshuffle: block size %d elements is not a positive multiple of 8", blockElems)
	}
	return nil
}

// Split returns how the filter divides a chunk of n elements with blocks of
// blockElems elements: full blocks, one partial block of partial elements (a
// multiple of 8, possibly 0) and rest trailing elements (n%8) that are copied
// verbatim. blockElems must be a positive multiple of 8.
func Split(n, blockElems int) (full, partial, rest int) {
	full = n / blockElems
	left := n % blockElems
	rest = left % blockMultiple
	return full, left - rest, rest
}

// ShuffleBlock bit-transposes one block: src holds N elements of elemSize
// bytes, N a multiple of 8, and dst receives the N*elemSize transposed
// bytes. dst and src must not overlap. It panics if len(src) is not a
// multiple of 8*elemSize or dst is shorter than src.
func ShuffleBlock(dst, src []byte, elemSize int) {
	n := checkBlock(dst, src, elemSize)
	dst = dst[:len(src)]
	done := shuffleFast(dst, src, elemSize, n)
	if f, ok := wordFuncsFor(elemSize); ok && done == 0 {
		done = n &^ 63
		f.shuffle(dst, src, n/8, done/64)
	}
	shuffleGroups(dst, src, elemSize, n, done)
}

// UnshuffleBlock inverts ShuffleBlock: src holds one transposed block of N
// elements of elemSize bytes and dst receives the elements. dst and src must
// not overlap. It panics under the same conditions as ShuffleBlock.
func UnshuffleBlock(dst, src []byte, elemSize int) {
	n := checkBlock(dst, src, elemSize)
	dst = dst[:len(src)]
	done := 0
	if f, ok := wordFuncsFor(elemSize); ok {
		done = n &^ 63
		f.unshuffle(dst, src, n/8, done/64)
	}
	unshuffleGroups(dst, src, elemSize, n, done)
}

// checkBlock validates the arguments of a block transpose and returns the
// number of elements.
func checkBlock(dst, src []byte, elemSize int) int {
	if elemSize <= 0 || len(src)%(blockMultiple*elemSize) != 0 {
		panic(fmt.Sprintf("bitshuffle: block of %d bytes is not a multiple of 8 elements of %d bytes", len(src), elemSize))
	}
	if len(dst) < len(src) {
		panic(fmt.Sprintf("bitshuffle: dst of %d bytes is shorter than the %d-byte block", len(dst), len(src)))
	}
	return len(src) / elemSize
}

// AppendShuffle appends the uncompressed bitshuffle filter form of the chunk
// src (filter 32008 with compression 0: same size, no header) to dst and
// returns the extended buffer. blockElems is the block size in elements, 0
// for DefaultBlockSize(elemSize).
func AppendShuffle(dst, src []byte, elemSize, blockElems int) ([]byte, error) {
	return appendChunk(dst, src, elemSize, blockElems, ShuffleBlock)
}

// AppendUnshuffle appends the chunk that the uncompressed bitshuffle filter
// form src decodes to, and returns the extended buffer. blockElems must be
// the block size the chunk was shuffled with (0 for the default).
func AppendUnshuffle(dst, src []byte, elemSize, blockElems int) ([]byte, error) {
	return appendChunk(dst, src, elemSize, blockElems, UnshuffleBlock)
}

// appendChunk applies the block function f to each block of src as the
// filter splits it and appends the result to dst.
func appendChunk(dst, src []byte, elemSize, blockElems int, f func(dst, src []byte, elemSize int)) ([]byte, error) {
	if elemSize <= 0 {
		return dst, fmt.Errorf("bitshuffle: element size %d is not positive", elemSize)
	}
	if len(src)%elemSize != 0 {
		return dst, fmt.Errorf("bitshuffle: chunk of %d bytes is not a whole number of %d-byte elements", len(src), elemSize)
	}
	if blockElems == 0 {
		blockElems = DefaultBlockSize(elemSize)
	}
	if err := CheckBlockSize(blockElems); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = grow(dst, len(src))
	out := dst[start:]
	full, partial, _ := Split(len(src)/elemSize, blockElems)
	blockBytes := blockElems * elemSize
	off := 0
	for range full {
		f(out[off:off+blockBytes], src[off:off+blockBytes], elemSize)
		off += blockBytes
	}
	if partial > 0 {
		end := off + partial*elemSize
		f(out[off:end], src[off:end], elemSize)
		off = end
	}
	copy(out[off:], src[off:])
	return dst, nil
}

// grow extends b by n bytes, reallocating only when its capacity is short.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), len(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}
