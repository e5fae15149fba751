package bitshuffle

//go:generate go run gen_words.go

// This file holds the word-wide transpose for element sizes 1, 2, 4 and 8.
//
// A run of 64 elements of s bytes is 8s little-endian 64-bit words; the bit
// at address a = 8s*m + b (element m, bit b of the element) sits in word
// a>>6, bit a&63. Its transposed address is 64*b + m: row b, bit m. Both
// are 6+log2(8s) address bits, so the transpose is a permutation of address
// bits. Each round swaps one word-index bit with one in-word bit, which is a
// masked swap between pairs of words; six rounds bring the six element bits
// into the in-word positions in order and leave the row bits as the word
// index in some order, which the store undoes. gen_words.go works out the
// rounds and writes them out unrolled, one variable per word, in
// words_gen.go.

// wordFunc transposes runs of 64 elements (or inverts that): src and dst
// hold blocks of rowBytes*8 elements, and runs*64 elements are done.
type wordFunc func(dst, src []byte, rowBytes, runs int)

// wordFuncs are the word-wide transposes, picked by element size.
type wordFuncs struct {
	shuffle, unshuffle wordFunc
}

// wordFuncsFor returns the word-wide transposes for elemSize, or false if
// there are none for that size.
func wordFuncsFor(elemSize int) (wordFuncs, bool) {
	switch elemSize {
	case 1:
		return wordFuncs{shuffleWords1, unshuffleWords1}, true
	case 2:
		return wordFuncs{shuffleWords2, unshuffleWords2}, true
	case 4:
		return wordFuncs{shuffleWords4, unshuffleWords4}, true
	case 8:
		return wordFuncs{shuffleWords8, unshuffleWords8}, true
	}
	return wordFuncs{}, false
}
