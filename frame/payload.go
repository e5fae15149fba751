package frame

import (
	"encoding/binary"
	"fmt"
)

// Orientation gives each chip's rotation in the module image, 0 or 180
// degrees, in chip-major order (chip k = cy*ChipsX + cx). A nil Orientation
// leaves every chip at 0.
type Orientation []int

// Validate reports whether o fits a module of the given number of chips.
func (o Orientation) Validate(chips int) error {
	if o == nil {
		return nil
	}
	if len(o) != chips {
		return fmt.Errorf("chip orientation lists %d chips, the module has %d", len(o), chips)
	}
	for k, deg := range o {
		if deg != 0 && deg != 180 {
			return fmt.Errorf("chip %d orientation %d: want 0 or 180", k, deg)
		}
	}
	return nil
}

// Rotated reports whether chip k is turned by 180 degrees.
func (o Orientation) Rotated(k int) bool { return o != nil && o[k] == 180 }

// PixelIndex returns the row-major image index of pixel (r, c) of chip k,
// in the chip's own readout frame.
func (g Geometry) PixelIndex(k, r, c int, rotated bool) int {
	cy, cx := k/g.ChipsX, k%g.ChipsX
	if rotated {
		r, c = g.ChipHeight-1-r, g.ChipWidth-1-c
	}
	return (cy*g.ChipHeight+r)*g.Width() + cx*g.ChipWidth + c
}

// AppendPayload appends the payload a detector of format f sends for an
// image of counts (row-major, f.Height() x f.Width()), with chips placed as
// o says. Counts above f.MaxCount are an error: a real counter saturates or
// wraps, and the caller decides which.
func (f Format) AppendPayload(dst []byte, counts []uint32, o Orientation) ([]byte, error) {
	if err := f.Validate(); err != nil {
		return dst, err
	}
	if err := o.Validate(f.Chips()); err != nil {
		return dst, err
	}
	if len(counts) != f.Pixels() {
		return dst, fmt.Errorf("image of %d pixels, format needs %d", len(counts), f.Pixels())
	}
	max := f.MaxCount()
	chip := make([]uint32, f.ChipPixels())
	for k := range f.Chips() {
		rot := o.Rotated(k)
		for r := range f.ChipHeight {
			for c := range f.ChipWidth {
				v := counts[f.PixelIndex(k, r, c, rot)]
				if v > max {
					return dst, fmt.Errorf("count %d at chip %d pixel (%d, %d) exceeds %d-bit counter", v, k, r, c, f.BitDepth)
				}
				chip[r*f.ChipWidth+c] = f.CounterCode(v)
			}
		}
		dst = f.appendChip(dst, chip)
	}
	return dst, nil
}

// appendChip appends one chip's counter codes, in the chip's readout order,
// in f's encoding.
func (f Format) appendChip(dst []byte, codes []uint32) []byte {
	switch f.Encoding {
	case Bitplane:
		for r := 0; r < len(codes); r += f.ChipWidth {
			row := codes[r : r+f.ChipWidth]
			for p := f.BitDepth - 1; p >= 0; p-- {
				for c := 0; c < len(row); c += 8 {
					var b byte
					for i := range 8 {
						b |= byte(row[c+i]>>p&1) << (7 - i)
					}
					dst = append(dst, b)
				}
			}
		}
	case Packed12:
		for i := 0; i < len(codes); i += 2 {
			p0, p1 := codes[i], codes[i+1]
			dst = append(dst, byte(p0), byte(p0>>8&0x0F|p1<<4), byte(p1>>4))
		}
	case Packed24:
		for _, v := range codes {
			dst = append(dst, byte(v), byte(v>>8), byte(v>>16))
		}
	case U16LE:
		for _, v := range codes {
			dst = binary.LittleEndian.AppendUint16(dst, uint16(v))
		}
	case U32LE:
		for _, v := range codes {
			dst = binary.LittleEndian.AppendUint32(dst, v)
		}
	}
	return dst
}
