package gpu

import "fmt"

// The vector decodes of the byte-aligned encodings: packed12 and packed24,
// and the reverse of the little-endian ones for a chip at 180 degrees
// (reverseVBMI, reverseAVX2: one byte, word or dword permute a vector).
// The packed decodes take groups of pixels that fill one vector of image
// pixels: each loads the group's bytes (a masked 48-byte load with
// AVX-512, two 16-byte lane loads with AVX2, never a byte past them),
// moves each pixel's bytes into its 16- or 32-bit lane with one byte
// permute (VPERMB, or VPSHUFB within 128-bit lanes), and for packed12
// drops the neighbour's nibble with a multiply and a shift. The permutes
// of a chip at 180 degrees put the pixels in reverse order, and its groups
// are stored from the end of the row backwards, so a rotated chip costs
// nothing more.

// packedInstructions names the widest decode of packed12 and packed24,
// and of the reverse of u16le and u32le rows of chips at 180 degrees.
func packedInstructions() string {
	switch {
	case useGFNI:
		return "AVX-512 VBMI"
	case useAVX2:
		return "AVX2"
	}
	return "portable Go"
}

// packedShuffle is what a vector decode needs for one encoding, vector
// width and orientation.
type packedShuffle struct {
	// perm gives, for each byte of the vector of image pixels, the byte
	// of the loaded group it takes: an index into the whole vector for
	// VPERMB, into the 128-bit lane for VPSHUFB. Bytes above a pixel's
	// own (the top byte of a packed24 pixel) take a zero.
	perm [64]byte
	// mul is, for packed12, what each 16-bit lane is multiplied by before
	// a shift right by 4: 16 for a pixel that starts a pair (its bits
	// 12-15 are the next pixel's and are shifted out), 1 for the second.
	mul [32]uint16
	// lane0 and lane1 are where in the group's bytes AVX2 loads its two
	// 128-bit lanes from.
	lane0, lane1 int
}

// The shuffles, by orientation (0 for 0 degrees, 1 for 180).
var (
	packed12x512 = [2]packedShuffle{makeShuffle(64, 2, false), makeShuffle(64, 2, true)}
	packed12x256 = [2]packedShuffle{makeShuffle(32, 2, false), makeShuffle(32, 2, true)}
	packed24x512 = [2]packedShuffle{makeShuffle(64, 4, false), makeShuffle(64, 4, true)}
	packed24x256 = [2]packedShuffle{makeShuffle(32, 4, false), makeShuffle(32, 4, true)}
)

// makeShuffle makes the shuffle of a vector of vec bytes (64 for AVX-512,
// 32 for AVX2) of size-byte image pixels: packed12 for 2, packed24 for 4.
func makeShuffle(vec, size int, rotated bool) packedShuffle {
	var s packedShuffle
	laneBytes, base, zero := vec, [2]int{}, byte(63) // a masked load leaves bytes 48-63 zero
	if vec == 32 {
		// Lane 0 holds the group's bytes 0-15 and lane 1 its bytes 8-23,
		// or the other way round for a rotated chip, whose first lane
		// takes the group's last pixels.
		laneBytes, base, zero = 16, [2]int{0, 8}, 0x80 // VPSHUFB zeroes for bit 7
		if rotated {
			base = [2]int{8, 0}
		}
		s.lane0, s.lane1 = base[0], base[1]
	}
	pixels := vec / size
	for e := range pixels {
		q := e // the group's pixel in lane e
		if rotated {
			q = pixels - 1 - e
		}
		at, n := 3*q, 3 // packed24
		if size == 2 {
			at, n = 3*(q/2)+q%2, 2
			s.mul[e] = 1
			if q%2 == 0 {
				s.mul[e] = 16
			}
		}
		lane := e * size / laneBytes
		for k := range size {
			i := e*size + k
			if k >= n {
				s.perm[i] = zero
				continue
			}
			j := at + k - base[lane]
			if j < 0 || j >= laneBytes || vec == 64 && j >= 48 {
				panic(fmt.Sprintf("gpu: shuffle of %d-byte vectors, %d-byte pixels: pixel %d's byte %d out of its lane", vec, size, q, k))
			}
			s.perm[i] = byte(j)
		}
	}
	return s
}

// shuffleIndex returns 1 for a rotated chip, 0 otherwise: the index of
// its shuffle.
func shuffleIndex(rotated bool) int {
	if rotated {
		return 1
	}
	return 0
}

// vectorSpan returns where in dst a vector decode stores its first group
// of groupBytes of image, and how far on it stores each next one: from
// the start of dst onwards, or for a rotated chip from the end backwards.
func vectorSpan(dst []byte, groupBytes int, rotated bool) (at, step int) {
	if rotated {
		return len(dst) - groupBytes, -groupBytes
	}
	return 0, groupBytes
}

// packed12Vector decodes the first pixels of src, packed12 starting on a
// pair, into dst, 16-bit pixels, with the widest vectors the CPU has, as
// many as fill whole vectors and dst holds; a rotated chip's go to the end
// of dst in reverse order. It returns how many it decoded: 0 without
// vectors.
func packed12Vector(dst, src []byte, rotated bool) int {
	n := len(dst) / 2
	switch {
	case useGFNI:
		n &^= 31
	case useAVX2:
		n &^= 15
	default:
		return 0
	}
	if n == 0 {
		return 0
	}
	_ = src[3*n/2-1]
	dst = pixelSpan(dst, 2, 0, n, rotated)
	if useGFNI {
		s := &packed12x512[shuffleIndex(rotated)]
		at, step := vectorSpan(dst, 64, rotated)
		packed12AVX512(&dst[at], &src[0], n/32, step, &s.perm, &s.mul)
		return n
	}
	s := &packed12x256[shuffleIndex(rotated)]
	at, step := vectorSpan(dst, 32, rotated)
	packed12AVX2(&dst[at], &src[0], n/16, step, s.lane0, s.lane1, &s.perm, &s.mul)
	return n
}

// packed24Vector is packed12Vector for packed24 into 32-bit pixels.
func packed24Vector(dst, src []byte, rotated bool) int {
	n := len(dst) / 4
	switch {
	case useGFNI:
		n &^= 15
	case useAVX2:
		n &^= 7
	default:
		return 0
	}
	if n == 0 {
		return 0
	}
	_ = src[3*n-1]
	dst = pixelSpan(dst, 4, 0, n, rotated)
	if useGFNI {
		s := &packed24x512[shuffleIndex(rotated)]
		at, step := vectorSpan(dst, 64, rotated)
		packed24AVX512(&dst[at], &src[0], n/16, step, &s.perm)
		return n
	}
	s := &packed24x256[shuffleIndex(rotated)]
	at, step := vectorSpan(dst, 32, rotated)
	packed24AVX2(&dst[at], &src[0], n/8, step, s.lane0, s.lane1, &s.perm)
	return n
}

// reverse16Vector writes the first 16-bit pixels of src to the end of dst
// in reverse order, as many as fill whole vectors and dst holds, and
// returns how many: 0 without vectors.
func reverse16Vector(dst, src []byte) int {
	return reverseVector(dst, src, 2)
}

// reverse32Vector is reverse16Vector for 32-bit pixels.
func reverse32Vector(dst, src []byte) int {
	return reverseVector(dst, src, 4)
}

func reverseVector(dst, src []byte, pix int) int {
	vec := 0
	switch {
	case useGFNI:
		vec = 64
	case useAVX2:
		vec = 32
	default:
		return 0
	}
	b := len(dst) / vec * vec
	if b == 0 {
		return 0
	}
	_ = src[b-1]
	if vec == 64 {
		reverseVBMI(&dst[len(dst)-b], &src[0], b/64, &reverse512[pix/4])
	} else {
		reverseAVX2(&dst[len(dst)-b], &src[0], b/32, pix == 2)
	}
	return b / pix
}

// reverse512 are the VPERMB indices that reverse the 16-bit pixels of a
// vector, then its 32-bit ones.
var reverse512 = [2][64]byte{makeReverse(2), makeReverse(4)}

// makeReverse returns the byte indices that put the pix-byte pixels of a
// 64-byte vector in reverse order.
func makeReverse(pix int) (perm [64]byte) {
	for i := range perm {
		perm[i] = byte((64/pix-1-i/pix)*pix + i%pix)
	}
	return perm
}

// reverseVBMI writes the vectors*64 bytes at src to dst, each vector's
// bytes permuted by perm, the first vector of src to the last of dst.
//
//go:noescape
func reverseVBMI(dst, src *byte, vectors int, perm *[64]byte)

// packed12AVX512 decodes groups*32 packed12 pixels at src, 48 bytes a
// group, into 16-bit pixels: each group's 64 bytes at dst, the next
// group's dstStep bytes on. perm and mul are a packedShuffle's.
//
//go:noescape
func packed12AVX512(dst, src *byte, groups, dstStep int, perm *[64]byte, mul *[32]uint16)

// packed12AVX2 is packed12AVX512 with AVX2: groups of 16 pixels, 24
// bytes, loaded into the two 128-bit lanes from lane0 and lane1 bytes into
// the group.
//
//go:noescape
func packed12AVX2(dst, src *byte, groups, dstStep, lane0, lane1 int, perm *[64]byte, mul *[32]uint16)

// packed24AVX512 decodes groups*16 packed24 pixels at src, 48 bytes a
// group, into 32-bit pixels: each group's 64 bytes at dst, the next
// group's dstStep bytes on.
//
//go:noescape
func packed24AVX512(dst, src *byte, groups, dstStep int, perm *[64]byte)

// packed24AVX2 is packed24AVX512 with AVX2: groups of 8 pixels, 24 bytes,
// loaded as packed12AVX2 loads them.
//
//go:noescape
func packed24AVX2(dst, src *byte, groups, dstStep, lane0, lane1 int, perm *[64]byte)

// reverseAVX2 is reverseVBMI with AVX2: vectors*32 bytes, the 32-bit (or,
// with words, 16-bit) pixels of each in reverse order.
//
//go:noescape
func reverseAVX2(dst, src *byte, vectors int, words bool)
