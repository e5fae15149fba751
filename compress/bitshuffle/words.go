package bitshuffle

import (
	"encoding/binary"
	"math/bits"
)

// This file holds the word-wide transpose for element sizes 1, 2, 4 and 8.
//
// A run of 64 elements of s bytes is 8s little-endian 64-bit words; the bit
// at address a = 8s*m + b (element m, bit b of the element) sits in word
// a>>6, bit a&63. Its transposed address is 64*b + m: row b, bit m. Both
// are 6+log2(8s) address bits, so the transpose is a permutation of address
// bits. Each round swaps one word-index bit with one in-word bit, which is a
// masked swap between pairs of words; six rounds bring the six element bits
// into the in-word positions in order, and leave the row bits as the word
// index in some order, which the plan's row table undoes when storing.

// round is one masked swap between the words whose indices differ by dist:
// the bits of the lower word with in-word bit c set trade places with the
// bits of the upper word with in-word bit c clear, shift = 1<<c.
type round struct {
	dist  int
	shift uint
	mask  uint64
}

// wordPlan is the transpose of 64 elements of one element size.
type wordPlan struct {
	words  int       // words per 64 elements: 8 * element size
	rounds [6]round  // in shuffle order; unshuffle runs them backwards
	row    [64]uint8 // row[w] is the bit row that word w holds at the end
}

// inWordMasks[c] selects the bits whose in-word index has bit c clear.
var inWordMasks = [6]uint64{
	0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F,
	0x00FF00FF00FF00FF, 0x0000FFFF0000FFFF, 0x00000000FFFFFFFF,
}

// wordPlans holds the plans for element sizes 1, 2, 4 and 8 in that order.
var wordPlans = [4]wordPlan{newWordPlan(1), newWordPlan(2), newWordPlan(4), newWordPlan(8)}

// wordPlanFor returns the plan for elemSize, or nil if the word-wide
// transpose does not handle that size.
func wordPlanFor(elemSize int) *wordPlan {
	switch elemSize {
	case 1, 2, 4, 8:
		return &wordPlans[bits.TrailingZeros(uint(elemSize))]
	}
	return nil
}

// newWordPlan works out the rounds and the row table for elemSize (1, 2, 4
// or 8) by following where each address bit goes.
func newWordPlan(elemSize int) wordPlan {
	e := bits.TrailingZeros(uint(elemSize))
	rowBits := 3 + e // bits of the row (bit-in-element) index; also word-index bits
	// Labels: 0..rowBits-1 are row bits, 8+x is element bit x.
	var label [12]int
	for i := range rowBits {
		label[i] = i
	}
	for x := range 6 {
		label[rowBits+x] = 8 + x
	}
	p := wordPlan{words: 8 * elemSize}
	for i, c := 0, 5; c >= 0; i, c = i+1, c-1 {
		w := ((c-(3-e))%rowBits + rowBits) % rowBits
		p.rounds[i] = round{dist: 1 << w, shift: 1 << c, mask: inWordMasks[c]}
		label[c], label[6+w] = label[6+w], label[c]
	}
	for c := range 6 {
		if label[c] != 8+c {
			panic("bitshuffle: word plan leaves element bits out of order")
		}
	}
	for w := range p.words {
		r := 0
		for t := range rowBits {
			if w>>t&1 != 0 {
				r |= 1 << label[6+t]
			}
		}
		p.row[w] = uint8(r)
	}
	return p
}

// apply runs the round on the first n words of a.
func (r round) apply(a *[64]uint64, n int) {
	for base := 0; base < n; base += 2 * r.dist {
		for i := base; i < base+r.dist; i++ {
			x, y := a[i&63], a[(i+r.dist)&63]
			t := ((x >> r.shift) ^ y) & r.mask
			a[(i+r.dist)&63] = y ^ t
			a[i&63] = x ^ (t << r.shift)
		}
	}
}

// shuffle transposes elements [0, done) of a block of n elements in runs of
// 64; done must be a multiple of 64.
func (p *wordPlan) shuffle(dst, src []byte, n, done int) {
	rowBytes := n / 8
	runBytes := 8 * p.words
	var a [64]uint64
	for q := 0; q < done/64; q++ {
		in := src[q*runBytes : (q+1)*runBytes]
		for w := range p.words {
			a[w] = binary.LittleEndian.Uint64(in[8*w:])
		}
		for _, r := range p.rounds {
			r.apply(&a, p.words)
		}
		for w := range p.words {
			binary.LittleEndian.PutUint64(dst[int(p.row[w])*rowBytes+8*q:], a[w])
		}
	}
}

// unshuffle inverts shuffle.
func (p *wordPlan) unshuffle(dst, src []byte, n, done int) {
	rowBytes := n / 8
	runBytes := 8 * p.words
	var a [64]uint64
	for q := 0; q < done/64; q++ {
		for w := range p.words {
			a[w] = binary.LittleEndian.Uint64(src[int(p.row[w])*rowBytes+8*q:])
		}
		for i := len(p.rounds) - 1; i >= 0; i-- {
			p.rounds[i].apply(&a, p.words)
		}
		out := dst[q*runBytes : (q+1)*runBytes]
		for w := range p.words {
			binary.LittleEndian.PutUint64(out[8*w:], a[w])
		}
	}
}
