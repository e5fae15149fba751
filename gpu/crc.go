package gpu

// CRC-32C combination.
//
// A CRC register is linear over GF(2): appending n bytes to a message
// multiplies its register by x^(8n) modulo the CRC polynomial P. With the
// initial value and final xor both 0xFFFFFFFF, the conditioning of the two
// parts cancels, so
//
//	CRC(A‖B) = (CRC(A) · x^(8·len(B)) mod P) ⊕ CRC(B).
//
// Polynomials are held in the reflected bit order of the CRC itself: bit 31
// is the coefficient of x^0, bit 0 that of x^31.

// castagnoliPoly is the CRC-32C polynomial, reflected.
const castagnoliPoly = 0x82F63B78

// xPow2n[k] is x^(2^k) mod P, reflected.
var xPow2n = makeXPow2n()

func makeXPow2n() (t [64]uint32) {
	t[0] = 1 << 30 // x^1
	for k := 1; k < len(t); k++ {
		t[k] = mulModP(t[k-1], t[k-1])
	}
	return t
}

// mulModP returns a·b mod P for reflected polynomials a and b.
func mulModP(a, b uint32) uint32 {
	var p uint32
	for i := 31; i >= 0; i-- {
		// Bit i of a is the coefficient of x^(31-i); b holds b·x^(31-i) mod P.
		p ^= b & -(a >> i & 1)
		b = b>>1 ^ castagnoliPoly&-(b&1)
	}
	return p
}

// CRC32CCombiner appends a fixed number of bytes to a CRC-32C: it holds
// x^(8n) mod P for its length n. Making one costs up to 64 polynomial
// products; applying it costs one. Use it to fold many pieces of equal size.
type CRC32CCombiner uint32

// NewCRC32CCombiner returns the combiner for pieces of n bytes. n <= 0 gives
// the combiner for empty pieces.
func NewCRC32CCombiner(n int64) CRC32CCombiner {
	op := uint32(1 << 31) // x^0
	// x^(8n) = product of x^(2^(k+3)) over the set bits k of n.
	for k := 3; n > 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			op = mulModP(xPow2n[k], op)
		}
	}
	return CRC32CCombiner(op)
}

// Combine returns the CRC-32C of A‖B given crc1 = CRC-32C(A) and
// crc2 = CRC-32C(B), where B has the combiner's length.
func (c CRC32CCombiner) Combine(crc1, crc2 uint32) uint32 {
	return mulModP(uint32(c), crc1) ^ crc2
}

// CRC32CCombine returns the CRC-32C of A‖B given crc1 = CRC-32C(A),
// crc2 = CRC-32C(B) and len2 = len(B). Only the length of B is needed. For
// many pieces of one size, NewCRC32CCombiner is cheaper.
func CRC32CCombine(crc1, crc2 uint32, len2 int64) uint32 {
	return NewCRC32CCombiner(len2).Combine(crc1, crc2)
}
