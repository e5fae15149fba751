package frame

// CRC-32C by folding with carry-less multiplication.
//
// A message is a polynomial over GF(2), its first bit (bit 0 of byte 0:
// the CRC is bit-reflected) the highest power. Its CRC, with the
// conditioning taken out, is M·x^32 mod P. Folding replaces a 128-bit
// piece A of the message, lo its first 64 bits and hi the next, by
//
//	W = clmul(lo, k(D+63)) ⊕ clmul(hi, k(D−1))
//
// which is congruent modulo P to A moved D bits further on, to where it
// is added to the message there. k(e) is x^e mod P with the coefficient
// of x^i at bit 63−i, so that a carry-less product of two reflected
// values is itself reflected, one bit short, and the k's one power short
// makes up for it. Folding the whole message into its last 128 bits
// leaves a piece congruent to it, whose CRC-32C (the SSE4.2 instruction,
// from 0) is the message's.

// crcPoly is the CRC-32C polynomial P, x^32 included, in the usual order.
const crcPoly = 1<<32 | 0x1EDC6F41

// xPowMod returns x^e mod P, the coefficient of x^i at bit i.
func xPowMod(e int) uint64 {
	r := uint64(1)
	for range e {
		r <<= 1
		if r&(1<<32) != 0 {
			r ^= crcPoly
		}
	}
	return r
}

// foldConst returns k(e): x^e mod P with the coefficient of x^i at bit
// 63−i.
func foldConst(e int) uint64 {
	r := xPowMod(e)
	var k uint64
	for i := range 32 {
		k |= (r >> i & 1) << (63 - i)
	}
	return k
}

// foldConsts are the constants of crc32cFold: the pair (low, high) that
// folds 128 bits forward by 2048 bits (the main loop: four 512-bit
// accumulators, 256 bytes a turn), by 512 bits (one accumulator into the
// next), and by 384, 256 and 128 bits (the last accumulator's 128-bit
// lanes into its last), then a zero pair for that last lane.
var foldConsts = func() (c [16]uint64) {
	for i, d := range []int{2048, 512, 384, 256, 128} {
		c[2*i], c[2*i+1] = foldConst(d+63), foldConst(d-1)
	}
	return c
}()
