package gpu

import (
	"encoding/binary"

	"h5ingest/ingest/frame"
)

// This file holds the CPU decoders of one chip row: from a row of payload
// to the row's counts (decodeRow), and from counts to image pixels (emit).
// They are written for speed: word-wide bit operations and table look-ups,
// no function calls per pixel.

// LFSR code -> count tables, shared read-only with package frame.
var (
	lfsr12 = (*[4096]uint16)(frame.LFSRCountTable(12))
	lfsr6  = (*[64]uint16)(frame.LFSRCountTable(6))
)

// spread[b] holds the 8 bits of b, most significant first, one per byte:
// byte i (little-endian) is bit 7-i of b. A bitplane byte carries one bit
// of 8 neighbouring pixels; spread turns it into 8 one-bit lanes, so that
// shifting and or-ing the spreads of several planes builds 8 codes at once.
var spread = makeSpread()

func makeSpread() (t [256]uint64) {
	for b := range t {
		for i := range 8 {
			t[b] |= uint64(b>>(7-i)&1) << (8 * i)
		}
	}
	return t
}

// planes8 returns the 8-bit code parts of 8 pixels from 8 consecutive
// planes: byte i of the result is pixel i's bits, first plane most
// significant. p holds the first plane's byte; planes are s bytes apart.
func planes8(row []byte, p, s int) uint64 {
	_ = row[p+7*s]
	return spread[row[p]]<<7 | spread[row[p+s]]<<6 |
		spread[row[p+2*s]]<<5 | spread[row[p+3*s]]<<4 |
		spread[row[p+4*s]]<<3 | spread[row[p+5*s]]<<2 |
		spread[row[p+6*s]]<<1 | spread[row[p+7*s]]
}

// planes6 is planes8 for 6 planes: 6-bit parts.
func planes6(row []byte, p, s int) uint64 {
	_ = row[p+5*s]
	return spread[row[p]]<<5 | spread[row[p+s]]<<4 |
		spread[row[p+2*s]]<<3 | spread[row[p+3*s]]<<2 |
		spread[row[p+4*s]]<<1 | spread[row[p+5*s]]
}

// planes4 is planes8 for 4 planes: 4-bit parts.
func planes4(row []byte, p, s int) uint64 {
	_ = row[p+3*s]
	return spread[row[p]]<<3 | spread[row[p+s]]<<2 |
		spread[row[p+2*s]]<<1 | spread[row[p+3*s]]
}

// bitplane24 decodes one row of 24 planes into counts.
func bitplane24(counts []uint32, row []byte, lfsr bool) {
	s := len(counts) / 8
	for g := range s {
		hi, mid, lo := planes8(row, g, s), planes8(row, g+8*s, s), planes8(row, g+16*s, s)
		out := counts[8*g : 8*g+8]
		if lfsr {
			for i := range out {
				h, m, l := uint32(uint8(hi>>(8*i))), uint32(uint8(mid>>(8*i))), uint32(uint8(lo>>(8*i)))
				out[i] = uint32(lfsr12[(h<<4|m>>4)&0xFFF])<<12 | uint32(lfsr12[(m<<8|l)&0xFFF])
			}
			continue
		}
		for i := range out {
			out[i] = uint32(uint8(hi>>(8*i)))<<16 | uint32(uint8(mid>>(8*i)))<<8 | uint32(uint8(lo>>(8*i)))
		}
	}
}

// bitplane12 decodes one row of 12 planes into counts.
func bitplane12(counts []uint32, row []byte, lfsr bool) {
	s := len(counts) / 8
	for g := range s {
		hi, lo := planes8(row, g, s), planes4(row, g+8*s, s)
		out := counts[8*g : 8*g+8]
		if lfsr {
			for i := range out {
				out[i] = uint32(lfsr12[(uint32(uint8(hi>>(8*i)))<<4|uint32(uint8(lo>>(8*i))))&0xFFF])
			}
			continue
		}
		for i := range out {
			out[i] = uint32(uint8(hi>>(8*i)))<<4 | uint32(uint8(lo>>(8*i)))
		}
	}
}

// bitplane6 decodes one row of 6 planes into counts.
func bitplane6(counts []uint32, row []byte, lfsr bool) {
	s := len(counts) / 8
	for g := range s {
		x := planes6(row, g, s)
		out := counts[8*g : 8*g+8]
		if lfsr {
			for i := range out {
				out[i] = uint32(lfsr6[uint8(x>>(8*i))&0x3F])
			}
			continue
		}
		for i := range out {
			out[i] = uint32(uint8(x >> (8 * i)))
		}
	}
}

// bitplane1 decodes one row of a single plane into counts.
func bitplane1(counts []uint32, row []byte) {
	for g, b := range row[:len(counts)/8] {
		x := spread[b]
		out := counts[8*g : 8*g+8]
		for i := range out {
			out[i] = uint32(uint8(x >> (8 * i)))
		}
	}
}

// packed12 decodes pixels [p0, p0+len(counts)) of a packed12 chip block.
// p0 may be odd: a row of odd width starts inside a pair.
func packed12(counts []uint32, chip []byte, p0 int) {
	if len(counts) == 0 {
		return
	}
	if p0%2 == 1 {
		b := chip[3*(p0/2):]
		counts[0] = uint32(b[1])>>4 | uint32(b[2])<<4
		counts, p0 = counts[1:], p0+1
	}
	src := chip[3*(p0/2):]
	n := len(counts) / 2
	src = src[:3*n]
	for q := range n {
		b := src[3*q : 3*q+3]
		counts[2*q] = uint32(b[0]) | uint32(b[1]&0x0F)<<8
		counts[2*q+1] = uint32(b[1])>>4 | uint32(b[2])<<4
	}
	if len(counts)%2 == 1 {
		b := chip[3*((p0+len(counts))/2):]
		counts[len(counts)-1] = uint32(b[0]) | uint32(b[1]&0x0F)<<8
	}
}

// packed24 decodes three-byte little-endian pixels.
func packed24(counts []uint32, src []byte) {
	src = src[:3*len(counts)]
	for c := range counts {
		b := src[3*c : 3*c+3]
		counts[c] = uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
	}
}

// u16le decodes two-byte little-endian pixels.
func u16le(counts []uint32, src []byte) {
	src = src[:2*len(counts)]
	for c := range counts {
		counts[c] = uint32(binary.LittleEndian.Uint16(src[2*c:]))
	}
}

// u32le decodes four-byte little-endian pixels.
func u32le(counts []uint32, src []byte) {
	src = src[:4*len(counts)]
	for c := range counts {
		counts[c] = binary.LittleEndian.Uint32(src[4*c:])
	}
}

// emit16 writes counts as uint16 pixels, left to right or, for a rotated
// chip, right to left.
func emit16(dst []byte, counts []uint32, rotated bool) {
	dst = dst[:2*len(counts)]
	if rotated {
		last := len(counts) - 1
		for c, v := range counts {
			binary.LittleEndian.PutUint16(dst[2*(last-c):], uint16(v))
		}
		return
	}
	for c, v := range counts {
		binary.LittleEndian.PutUint16(dst[2*c:], uint16(v))
	}
}

// emit32 writes counts as uint32 pixels, left to right or, for a rotated
// chip, right to left.
func emit32(dst []byte, counts []uint32, rotated bool) {
	dst = dst[:4*len(counts)]
	if rotated {
		last := len(counts) - 1
		for c, v := range counts {
			binary.LittleEndian.PutUint32(dst[4*(last-c):], v)
		}
		return
	}
	for c, v := range counts {
		binary.LittleEndian.PutUint32(dst[4*c:], v)
	}
}
