package gpu

// This file holds the decode of one chip row of the byte-aligned encodings
// (packed12, packed24, and u16le and u32le of a chip at 180 degrees): the
// widest vector path the CPU has (packed12Vector, packed24Vector,
// reverse16Vector, reverse32Vector: assembly on amd64, none elsewhere)
// takes as many of the row's pixels as fill its vectors, straight into the
// image row; the portable decoders of decode.go take the pixels it leaves,
// through the counts scratch.

// pixelSpan returns the bytes of dst, a chip-wide piece of an image row of
// pix-byte pixels, where pixels [i0, i1) of the chip's readout row land:
// the same places for a chip at 0 degrees, the mirrored ones at 180.
func pixelSpan(dst []byte, pix, i0, i1 int, rotated bool) []byte {
	if rotated {
		w := len(dst) / pix
		return dst[pix*(w-i1) : pix*(w-i0)]
	}
	return dst[pix*i0 : pix*i1]
}

// decodePacked12 decodes the readout row of len(dst)/2 pixels that starts
// at pixel p0 of a packed12 chip block into dst, 16-bit pixels, reversed
// for a rotated chip. counts is scratch of the row's width.
func decodePacked12(dst, chip []byte, p0 int, rotated bool, counts []uint32) {
	w := len(dst) / 2
	head := min(p0%2, w) // a row of a chip of odd width may start inside a pair
	n := packed12Vector(pixelSpan(dst, 2, head, w, rotated), chip[3*((p0+head)/2):], rotated)
	for _, s := range [2][2]int{{0, head}, {head + n, w}} {
		if s[0] == s[1] {
			continue
		}
		c := counts[:s[1]-s[0]]
		packed12(c, chip, p0+s[0])
		emit16(pixelSpan(dst, 2, s[0], s[1], rotated), c, rotated)
	}
}

// decodePacked24 decodes the readout row of len(dst)/4 pixels at the start
// of src, three-byte pixels, into dst, 32-bit pixels, reversed for a
// rotated chip. counts is scratch of the row's width.
func decodePacked24(dst, src []byte, rotated bool, counts []uint32) {
	w := len(dst) / 4
	n := packed24Vector(dst, src, rotated)
	if n == w {
		return
	}
	c := counts[:w-n]
	packed24(c, src[3*n:])
	emit32(pixelSpan(dst, 4, n, w, rotated), c, rotated)
}

// decodeU16LE decodes the readout row of len(dst)/2 pixels at the start of
// src into dst: a copy, or for a rotated chip the pixels reversed.
func decodeU16LE(dst, src []byte, rotated bool, counts []uint32) {
	if !rotated {
		copy(dst, src[:len(dst)])
		return
	}
	w := len(dst) / 2
	n := reverse16Vector(dst, src)
	if n == w {
		return
	}
	c := counts[:w-n]
	u16le(c, src[2*n:])
	emit16(dst[:2*(w-n)], c, true)
}

// decodeU32LE is decodeU16LE for four-byte pixels.
func decodeU32LE(dst, src []byte, rotated bool, counts []uint32) {
	if !rotated {
		copy(dst, src[:len(dst)])
		return
	}
	w := len(dst) / 4
	n := reverse32Vector(dst, src)
	if n == w {
		return
	}
	c := counts[:w-n]
	u32le(c, src[4*n:])
	emit32(dst[:4*(w-n)], c, true)
}
