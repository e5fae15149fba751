// Package frame implements the raw detector frame format, version 1: the
// 64-byte header, the chip geometry, the payload encodings and the counter
// codings that a detector (or the simulator, or a capture file) delivers.
//
// The package encodes payloads the way a detector does; decoding them into
// images is the job of the decode backends in package gpu.
//
// Package frame is part of h5ingest's facility API; see docs/extending.md.
package frame

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"strings"
)

// Encoding says how pixel counters are laid out in a payload.
type Encoding uint8

// The payload encodings of format version 1.
const (
	Bitplane Encoding = 1 // chip rows of bit planes, most significant plane first
	Packed12 Encoding = 2 // two 12-bit pixels in three bytes
	Packed24 Encoding = 3 // three bytes per pixel, little-endian
	U16LE    Encoding = 4 // two bytes per pixel, little-endian
	U32LE    Encoding = 5 // four bytes per pixel, little-endian
)

var encodingNames = [...]string{
	Bitplane: "bitplane",
	Packed12: "packed12",
	Packed24: "packed24",
	U16LE:    "u16le",
	U32LE:    "u32le",
}

// Encodings lists every encoding of format version 1, in code order.
var Encodings = []Encoding{Bitplane, Packed12, Packed24, U16LE, U32LE}

// String returns the encoding's name as profiles and flags spell it.
func (e Encoding) String() string {
	if e >= Bitplane && e <= U32LE {
		return encodingNames[e]
	}
	return fmt.Sprintf("encoding(%d)", uint8(e))
}

// ParseEncoding returns the encoding with the given name.
func ParseEncoding(name string) (Encoding, error) {
	for _, e := range Encodings {
		if encodingNames[e] == name {
			return e, nil
		}
	}
	return 0, fmt.Errorf("unknown encoding %q (want one of %s)", name, strings.Join(encodingNames[1:], ", "))
}

// Coding says how a counter's bits relate to its count.
type Coding uint8

// The counter codings of format version 1.
const (
	Binary Coding = 0 // the code is the count
	LFSR   Coding = 1 // Medipix3 pseudo-random counter codes (bitplane only)
)

// String returns the coding's name as profiles and flags spell it.
func (c Coding) String() string {
	switch c {
	case Binary:
		return "binary"
	case LFSR:
		return "lfsr"
	}
	return fmt.Sprintf("coding(%d)", uint8(c))
}

// ParseCoding returns the coding with the given name.
func ParseCoding(name string) (Coding, error) {
	switch name {
	case "binary":
		return Binary, nil
	case "lfsr":
		return LFSR, nil
	}
	return 0, fmt.Errorf("unknown counter coding %q (want binary or lfsr)", name)
}

// Geometry is a module's grid of chips.
type Geometry struct {
	ChipsX     int // chips per module row
	ChipsY     int // chips per module column
	ChipWidth  int // pixels per chip row
	ChipHeight int // pixels per chip column
}

// PiMega is one Pi-mega module: 6 x 6 Medipix3RX chips of 256 x 256 pixels.
var PiMega = Geometry{ChipsX: 6, ChipsY: 6, ChipWidth: 256, ChipHeight: 256}

// Width returns the module image width in pixels.
func (g Geometry) Width() int { return g.ChipsX * g.ChipWidth }

// Height returns the module image height in pixels.
func (g Geometry) Height() int { return g.ChipsY * g.ChipHeight }

// Chips returns the number of chips in the module.
func (g Geometry) Chips() int { return g.ChipsX * g.ChipsY }

// ChipPixels returns the number of pixels of one chip.
func (g Geometry) ChipPixels() int { return g.ChipWidth * g.ChipHeight }

// Pixels returns the number of pixels of the module image.
func (g Geometry) Pixels() int { return g.Chips() * g.ChipPixels() }

// String returns the geometry as "CXxCY chips of WxH".
func (g Geometry) String() string {
	return fmt.Sprintf("%dx%d chips of %dx%d", g.ChipsX, g.ChipsY, g.ChipWidth, g.ChipHeight)
}

// Validate reports whether the geometry fits the header's fields.
func (g Geometry) Validate() error {
	switch {
	case g.ChipsX < 1 || g.ChipsX > 255 || g.ChipsY < 1 || g.ChipsY > 255:
		return fmt.Errorf("chip grid %dx%d: each side must be 1 to 255 chips", g.ChipsX, g.ChipsY)
	case g.ChipWidth < 1 || g.ChipWidth > 65535 || g.ChipHeight < 1 || g.ChipHeight > 65535:
		return fmt.Errorf("chip size %dx%d: each side must be 1 to 65535 pixels", g.ChipWidth, g.ChipHeight)
	}
	return nil
}

// Format is everything needed to decode a payload: the chip geometry, the
// encoding, the counter depth and the counter coding.
type Format struct {
	Geometry
	Encoding Encoding
	BitDepth int
	Coding   Coding
}

// Validate reports whether the format is one that version 1 defines.
func (f Format) Validate() error {
	if err := f.Geometry.Validate(); err != nil {
		return err
	}
	switch f.Encoding {
	case Bitplane:
		switch f.BitDepth {
		case 1, 6, 12, 24:
		default:
			return fmt.Errorf("bitplane bit depth %d: want 1, 6, 12 or 24", f.BitDepth)
		}
		if f.ChipWidth%8 != 0 {
			return fmt.Errorf("bitplane chip width %d: must be a multiple of 8", f.ChipWidth)
		}
	case Packed12:
		if f.BitDepth != 12 {
			return fmt.Errorf("packed12 bit depth %d: want 12", f.BitDepth)
		}
		if f.ChipPixels()%2 != 0 {
			return fmt.Errorf("packed12 chip of %d pixels: must be even", f.ChipPixels())
		}
	case Packed24:
		if f.BitDepth != 24 {
			return fmt.Errorf("packed24 bit depth %d: want 24", f.BitDepth)
		}
	case U16LE:
		if f.BitDepth != 16 {
			return fmt.Errorf("u16le bit depth %d: want 16", f.BitDepth)
		}
	case U32LE:
		if f.BitDepth != 32 {
			return fmt.Errorf("u32le bit depth %d: want 32", f.BitDepth)
		}
	default:
		return fmt.Errorf("unknown encoding %d", uint8(f.Encoding))
	}
	switch f.Coding {
	case Binary:
	case LFSR:
		if f.Encoding != Bitplane {
			return fmt.Errorf("lfsr coding with %v: only bitplane payloads carry counter codes", f.Encoding)
		}
	default:
		return fmt.Errorf("unknown counter coding %d", uint8(f.Coding))
	}
	if n := f.PayloadSize(); n > MaxPayloadSize {
		return fmt.Errorf("%v: payload of %d bytes: %w (%d)", f.Geometry, n, ErrPayloadTooLarge, MaxPayloadSize)
	}
	return nil
}

// MaxPayloadSize is the largest payload a frame header can describe: its
// payload_size field is 32 bits wide.
const MaxPayloadSize = math.MaxUint32

// ErrPayloadTooLarge reports a format whose payload is above MaxPayloadSize.
var ErrPayloadTooLarge = errors.New("more than a header's payload_size holds")

// ChipPayloadSize returns the payload bytes of one chip. The format must be valid.
func (f Format) ChipPayloadSize() int {
	n := f.ChipPixels()
	switch f.Encoding {
	case Bitplane:
		return f.BitDepth * n / 8
	case Packed12:
		return n / 2 * 3
	case Packed24:
		return n * 3
	case U16LE:
		return n * 2
	}
	return n * 4
}

// PayloadSize returns the payload bytes of one frame. The format must be valid.
func (f Format) PayloadSize() int { return f.Chips() * f.ChipPayloadSize() }

// PixelSize returns the bytes per pixel of the decoded image: 2 where the
// counters have at most 16 bits, else 4.
func (f Format) PixelSize() int {
	if f.BitDepth <= 16 {
		return 2
	}
	return 4
}

// ImageSize returns the bytes of one decoded image.
func (f Format) ImageSize() int { return f.Pixels() * f.PixelSize() }

// MaxCount returns the largest count a counter of the format holds.
func (f Format) MaxCount() uint32 {
	if f.BitDepth >= 32 {
		return 1<<32 - 1
	}
	return 1<<f.BitDepth - 1
}

// String describes the format in one line.
func (f Format) String() string {
	return fmt.Sprintf("%v, %v %d-bit %v", f.Geometry, f.Encoding, f.BitDepth, f.Coding)
}

// castagnoli is the CRC-32C table shared by the package.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC-32C (Castagnoli) of b.
func Checksum(b []byte) uint32 { return update(0, b) }

// UpdateChecksum returns the CRC-32C of the bytes summed into crc followed by b.
func UpdateChecksum(crc uint32, b []byte) uint32 { return update(crc, b) }
