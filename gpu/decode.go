package gpu

import (
	"encoding/binary"
	"math/bits"

	"h5ingest/frame"
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

// Gathering by look-up measured faster than transposing 8x8 bit matrices of
// 64 pixels x 8 planes with word-wide swaps (1.13 against 1.05 GB/s of
// 24-bit payload per core on the development machine), so it is the only
// gather kept.

// planes4 returns the 4-bit code parts of 8 pixels from 4 consecutive
// planes: byte i of the result is pixel i's bits, first plane most
// significant. p indexes the first plane's byte; planes are s bytes apart.
// Wider parts are built from it, as it is small enough to be inlined.
func planes4(row []byte, p, s int) uint64 {
	_ = row[p+3*s]
	return spread[row[p]]<<3 | spread[row[p+s]]<<2 |
		spread[row[p+2*s]]<<1 | spread[row[p+3*s]]
}

// place returns where, in units of 8 pixels, pixel group g of a chip row of
// s groups lands, and the group's lanes in image order: a chip at 180
// degrees puts the group at the mirrored place, its pixels reversed.
func place(g, s int, rotated bool, x uint64) (int, uint64) {
	if rotated {
		return s - 1 - g, bits.ReverseBytes64(x)
	}
	return g, x
}

// The bitplane decoders below decode one chip row of planes (row) into one
// chip-wide piece of an image row (dst), reversed for a chip at 180
// degrees. Each takes 8 pixels at a time: one byte of every plane.

// bitplane24 decodes 24 planes into uint32 pixels.
func bitplane24(dst, row []byte, lfsr, rotated bool) {
	s := len(row) / 24
	for g := range s {
		hi := planes4(row, g, s)<<4 | planes4(row, g+4*s, s)
		mid := planes4(row, g+8*s, s)<<4 | planes4(row, g+12*s, s)
		lo := planes4(row, g+16*s, s)<<4 | planes4(row, g+20*s, s)
		at, hi := place(g, s, rotated, hi)
		_, mid = place(g, s, rotated, mid)
		_, lo = place(g, s, rotated, lo)
		out := (*[32]byte)(dst[32*at:])
		if lfsr {
			for i := range 8 {
				h, m, l := uint32(uint8(hi>>(8*i))), uint32(uint8(mid>>(8*i))), uint32(uint8(lo>>(8*i)))
				v := uint32(lfsr12[(h<<4|m>>4)&0xFFF])<<12 | uint32(lfsr12[(m<<8|l)&0xFFF])
				binary.LittleEndian.PutUint32(out[4*i:], v)
			}
			continue
		}
		for i := range 8 {
			v := uint32(uint8(hi>>(8*i)))<<16 | uint32(uint8(mid>>(8*i)))<<8 | uint32(uint8(lo>>(8*i)))
			binary.LittleEndian.PutUint32(out[4*i:], v)
		}
	}
}

// lfsr24 turns 24-bit LFSR codes into counts, in place: the counter is two
// 12-bit LFSRs, high and low.
func lfsr24(codes []uint32) {
	for i, c := range codes {
		codes[i] = uint32(lfsr12[c>>12&0xFFF])<<12 | uint32(lfsr12[c&0xFFF])
	}
}

// bitplane12 decodes 12 planes into uint16 pixels.
func bitplane12(dst, row []byte, lfsr, rotated bool) {
	s := len(row) / 12
	for g := range s {
		hi := planes4(row, g, s)<<4 | planes4(row, g+4*s, s)
		lo := planes4(row, g+8*s, s)
		at, hi := place(g, s, rotated, hi)
		_, lo = place(g, s, rotated, lo)
		out := (*[16]byte)(dst[16*at:])
		if lfsr {
			for i := range 8 {
				v := lfsr12[(uint32(uint8(hi>>(8*i)))<<4|uint32(uint8(lo>>(8*i))))&0xFFF]
				binary.LittleEndian.PutUint16(out[2*i:], v)
			}
			continue
		}
		for i := range 8 {
			binary.LittleEndian.PutUint16(out[2*i:], uint16(uint8(hi>>(8*i)))<<4|uint16(uint8(lo>>(8*i))))
		}
	}
}

// bitplane6 decodes 6 planes into uint16 pixels.
func bitplane6(dst, row []byte, lfsr, rotated bool) {
	s := len(row) / 6
	for g := range s {
		x := planes4(row, g, s)<<2 | spread[row[g+4*s]]<<1 | spread[row[g+5*s]]
		at, x := place(g, s, rotated, x)
		out := (*[16]byte)(dst[16*at:])
		if lfsr {
			for i := range 8 {
				binary.LittleEndian.PutUint16(out[2*i:], lfsr6[uint8(x>>(8*i))&0x3F])
			}
			continue
		}
		for i := range 8 {
			binary.LittleEndian.PutUint16(out[2*i:], uint16(uint8(x>>(8*i))))
		}
	}
}

// bitplane1 decodes a single plane into uint16 pixels.
func bitplane1(dst, row []byte, rotated bool) {
	s := len(row)
	for g, b := range row {
		at, x := place(g, s, rotated, spread[b])
		// Widen the 8 one-byte lanes to 16 bits: lanes 0-3, then 4-7.
		lo, hi := x&0xFFFFFFFF, x>>32
		lo = (lo | lo<<16) & 0x0000FFFF0000FFFF
		lo = (lo | lo<<8) & 0x00FF00FF00FF00FF
		hi = (hi | hi<<16) & 0x0000FFFF0000FFFF
		hi = (hi | hi<<8) & 0x00FF00FF00FF00FF
		out := (*[16]byte)(dst[16*at:])
		binary.LittleEndian.PutUint64(out[:8], lo)
		binary.LittleEndian.PutUint64(out[8:], hi)
	}
}

// bitplaneSmall decodes a chip row of 12, 6 or 1 planes into uint16
// pixels with the portable decoder of that depth.
func bitplaneSmall(dst, row []byte, depth int, lfsr, rotated bool) {
	switch depth {
	case 12:
		bitplane12(dst, row, lfsr, rotated)
	case 6:
		bitplane6(dst, row, lfsr, rotated)
	default:
		bitplane1(dst, row, rotated)
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
