package sim

import (
	"slices"

	"h5ingest/frame"
)

// Payloads are encoded by frame.Format.AppendPayload, the reference, except
// bitplane payloads, the common case, which appendBitplane encodes several
// times faster (its tests compare the two byte for byte).

// Counter code tables, count -> code, taken from package frame.
var (
	lfsr12Code = codeTable(12)
	lfsr6Code  = codeTable(6)
)

func codeTable(bits int) []uint32 {
	f := frame.Format{Encoding: frame.Bitplane, BitDepth: bits, Coding: frame.LFSR}
	t := make([]uint32, 1<<bits)
	for count := range t {
		t[count] = f.CounterCode(uint32(count))
	}
	return t
}

// appendPayload appends the payload of counts, an image of format f with
// chips turned as o says, to dst. Counts must not exceed f.MaxCount.
// scratch holds a chip row of codes between calls.
func appendPayload(dst []byte, f frame.Format, o frame.Orientation, counts []uint32, scratch *[]uint32) ([]byte, error) {
	if f.Encoding != frame.Bitplane {
		return f.AppendPayload(dst, counts, o)
	}
	return appendBitplane(dst, f, o, counts, scratch), nil
}

// appendBitplane is the fast bitplane encoder. Eight pixels' codes become
// each bit plane's byte by 8x8 bit-matrix transposes, one per 8 bits of
// counter depth.
func appendBitplane(dst []byte, f frame.Format, o frame.Orientation, counts []uint32, scratch *[]uint32) []byte {
	cw, ch, depth := f.ChipWidth, f.ChipHeight, f.BitDepth
	w8 := cw / 8
	rowBytes := depth * w8
	n := len(dst)
	dst = slices.Grow(dst, f.PayloadSize())[:n+f.PayloadSize()]
	out := dst[n:]
	if cap(*scratch) < cw {
		*scratch = make([]uint32, cw)
	}
	codes := (*scratch)[:cw]
	width := f.Width()
	for k := range f.Chips() {
		cy, cx := k/f.ChipsX, k%f.ChipsX
		rot := o.Rotated(k)
		for r := range ch {
			y := cy*ch + r
			if rot {
				y = cy*ch + ch - 1 - r
			}
			src := counts[y*width+cx*cw : y*width+cx*cw+cw]
			fillCodes(codes, src, rot, f)
			row := out[(k*ch+r)*rowBytes : (k*ch+r+1)*rowBytes]
			planeRow(row, codes, depth, w8)
		}
	}
	return dst
}

// fillCodes writes the counter codes of a chip row's counts, in readout
// order (reversed for a chip turned by 180 degrees).
func fillCodes(codes, src []uint32, rev bool, f frame.Format) {
	codes = codes[:len(src)]
	if rev {
		for c, v := range src {
			codes[len(src)-1-c] = v
		}
		src = codes
	}
	if f.Coding != frame.LFSR {
		copy(codes, src)
		return
	}
	switch f.BitDepth {
	case 24:
		for c, v := range src {
			codes[c] = lfsr12Code[v>>12&0xFFF]<<12 | lfsr12Code[v&0xFFF]
		}
	case 12:
		for c, v := range src {
			codes[c] = lfsr12Code[v&0xFFF]
		}
	case 6:
		for c, v := range src {
			codes[c] = lfsr6Code[v&0x3F]
		}
	default:
		copy(codes, src)
	}
}

// planeRow writes a chip row of codes as depth bit planes, most significant
// plane first, each w8 bytes with column c at bit 7-c%8 of byte c/8.
func planeRow(row []byte, codes []uint32, depth, w8 int) {
	for g := range w8 {
		c := codes[g*8 : g*8+8 : g*8+8]
		for sh := 0; sh < depth; sh += 8 {
			// Pixel q's 8 bits from bit sh go to byte 7-q of x; after the
			// transpose, byte b holds bit sh+b of each pixel, pixel q at
			// bit 7-q: the plane byte as the readout sends it.
			x := uint64(byte(c[0]>>sh))<<56 | uint64(byte(c[1]>>sh))<<48 |
				uint64(byte(c[2]>>sh))<<40 | uint64(byte(c[3]>>sh))<<32 |
				uint64(byte(c[4]>>sh))<<24 | uint64(byte(c[5]>>sh))<<16 |
				uint64(byte(c[6]>>sh))<<8 | uint64(byte(c[7]>>sh))
			if x != 0 {
				x = transpose8(x)
			}
			for b := range min(8, depth-sh) {
				row[(depth-1-sh-b)*w8+g] = byte(x >> (8 * b))
			}
		}
	}
}

// transpose8 transposes the 8x8 bit matrix x, whose row i is byte i and
// column j bit j of that byte.
func transpose8(x uint64) uint64 {
	t := (x ^ x>>7) & 0x00AA00AA00AA00AA
	x ^= t ^ t<<7
	t = (x ^ x>>14) & 0x0000CCCC0000CCCC
	x ^= t ^ t<<14
	t = (x ^ x>>28) & 0x00000000F0F0F0F0
	x ^= t ^ t<<28
	return x
}
