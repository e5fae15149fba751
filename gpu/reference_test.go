package gpu

import (
	"encoding/binary"

	"h5ingest/frame"
)

// This file holds a reference decoder written straight from the text of
// spec/frames.md, one pixel at a time, for the fast decoders to be held to.
// It shares nothing with them, nor with package frame's LFSR tables.

// refLFSR returns the code -> count map of a Medipix3 counter of 6 or 12
// bits, by stepping the counter as the spec describes.
func refLFSR(bits int) map[uint32]uint32 {
	mask := uint32(1)<<bits - 1
	bit := func(code uint32, i int) uint32 { return code >> i & 1 }
	counts := make(map[uint32]uint32, 1<<bits)
	code := uint32(0)
	for count := uint32(0); count <= mask; count++ {
		counts[code] = count
		var f uint32
		if bits == 12 {
			f = bit(code, 0) ^ bit(code, 3) ^ bit(code, 5) ^ bit(code, 11)
			if code&0x7FF == 0 { // b0..b10 all zero
				f ^= 1
			}
		} else {
			f = bit(code, 0) ^ bit(code, 5)
			if code&0x1F == 0 { // b0..b4 all zero
				f ^= 1
			}
		}
		code = (code<<1 | f) & mask
	}
	return counts
}

var refLFSR12, refLFSR6 = refLFSR(12), refLFSR(6)

// refCode returns the counter code of pixel (r, c) of a chip block.
func refCode(f frame.Format, chip []byte, r, c int) uint32 {
	n := r*f.ChipWidth + c // pixel index in chip order
	switch f.Encoding {
	case frame.Bitplane:
		planeBytes := f.ChipWidth / 8
		row := chip[r*f.BitDepth*planeBytes:]
		var code uint32
		for p := range f.BitDepth { // most significant plane first
			b := row[p*planeBytes+c/8]
			code = code<<1 | uint32(b>>(7-c%8)&1)
		}
		return code
	case frame.Packed12:
		b := chip[3*(n/2):]
		if n%2 == 0 {
			return uint32(b[0]) | uint32(b[1]&0x0F)<<8
		}
		return uint32(b[1]>>4) | uint32(b[2])<<4
	case frame.Packed24:
		b := chip[3*n:]
		return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
	case frame.U16LE:
		return uint32(binary.LittleEndian.Uint16(chip[2*n:]))
	case frame.U32LE:
		return binary.LittleEndian.Uint32(chip[4*n:])
	}
	panic("unknown encoding")
}

// refCount returns the count a counter code stands for.
func refCount(f frame.Format, code uint32) uint32 {
	if f.Coding != frame.LFSR {
		return code
	}
	switch f.BitDepth {
	case 6:
		return refLFSR6[code]
	case 12:
		return refLFSR12[code]
	case 24:
		return refLFSR12[code>>12]<<12 | refLFSR12[code&0xFFF]
	}
	return code // 1-bit: the code is the count
}

// refDecode decodes a payload of format f into a new image.
func refDecode(f frame.Format, payload []byte, o frame.Orientation) []byte {
	img := make([]byte, f.ImageSize())
	chipBytes := f.ChipPayloadSize()
	for k := range f.Chips() {
		chip := payload[k*chipBytes : (k+1)*chipBytes]
		for r := range f.ChipHeight {
			for c := range f.ChipWidth {
				count := refCount(f, refCode(f, chip, r, c))
				i := f.PixelIndex(k, r, c, o.Rotated(k))
				if f.PixelSize() == 2 {
					binary.LittleEndian.PutUint16(img[2*i:], uint16(count))
				} else {
					binary.LittleEndian.PutUint32(img[4*i:], count)
				}
			}
		}
	}
	return img
}

// imageBytes returns an image of counts as a decoder writes it.
func imageBytes(f frame.Format, counts []uint32) []byte {
	img := make([]byte, 0, f.ImageSize())
	for _, v := range counts {
		if f.PixelSize() == 2 {
			img = binary.LittleEndian.AppendUint16(img, uint16(v))
		} else {
			img = binary.LittleEndian.AppendUint32(img, v)
		}
	}
	return img
}
