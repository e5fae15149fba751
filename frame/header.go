package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderSize is the size of a frame header in bytes.
const HeaderSize = 64

// Version is the frame format version this package reads and writes.
const Version = 1

// Magic is the first four bytes of every frame.
var Magic = [4]byte{'P', 'M', 'F', '1'}

// FlagOverflow is set in Header.Flags when a counter overflowed in the frame.
const FlagOverflow = 1 << 0

// Frame status values, as recorded per frame in the output file.
const (
	StatusOK          = 0 // decoded and written
	StatusMissing     = 1 // never received
	StatusCRCMismatch = 2 // payload CRC mismatch; decoded and written all the same
	StatusRejected    = 3 // header inconsistent with its payload; not written
)

// Record is what a scan keeps about one frame, whatever became of it: the
// per-frame record of the output file.
type Record struct {
	Timestamp uint64 // detector clock, ns; 0 where missing
	RawCRC    uint32 // CRC-32C of the payload as received, rejected frames' too
	DataCRC   uint32 // CRC-32C of the decoded image's little-endian bytes
	Status    uint8  // StatusOK, StatusMissing, StatusCRCMismatch or StatusRejected
}

// ErrNotFrame is wrapped by errors for bytes that are not a frame header:
// wrong magic, version, header size or header CRC. On a stream it means the
// framing is lost.
var ErrNotFrame = errors.New("not a frame header")

// ErrRejected is wrapped by errors for a well-formed header whose payload
// cannot be decoded: a size that does not match the format, or an unknown
// encoding or coding. Such a frame is recorded with StatusRejected.
var ErrRejected = errors.New("frame rejected")

// Header is a decoded frame header.
type Header struct {
	FrameNumber uint64 // 0-based index within the scan, per module
	Timestamp   uint64 // detector clock, nanoseconds
	PayloadSize uint32 // bytes of payload after the header
	PayloadCRC  uint32 // CRC-32C of the payload
	ModuleID    uint16 // module of a multi-module detector, 0-based
	Format      Format // geometry, encoding, depth and coding
	Flags       uint32 // FlagOverflow, other bits 0
}

// Put writes h into b[:HeaderSize], computing the header CRC. It panics if b
// is shorter than HeaderSize, or if the format's fields do not fit the
// header (call Format.Validate first).
func (h *Header) Put(b []byte) {
	b = b[:HeaderSize]
	clear(b)
	copy(b[0:4], Magic[:])
	binary.LittleEndian.PutUint16(b[4:], Version)
	binary.LittleEndian.PutUint16(b[6:], HeaderSize)
	binary.LittleEndian.PutUint64(b[8:], h.FrameNumber)
	binary.LittleEndian.PutUint64(b[16:], h.Timestamp)
	binary.LittleEndian.PutUint32(b[24:], h.PayloadSize)
	binary.LittleEndian.PutUint32(b[28:], h.PayloadCRC)
	binary.LittleEndian.PutUint16(b[32:], h.ModuleID)
	if err := PutFormat(b[34:], h.Format); err != nil {
		panic("frame: header: " + err.Error())
	}
	binary.LittleEndian.PutUint32(b[44:], h.Flags)
	binary.LittleEndian.PutUint32(b[60:], Checksum(b[:60]))
}

// FormatSize is the size of a Format packed by PutFormat: encoding u8,
// bit depth u8, chips x u8, chips y u8, chip width u16, chip height u16,
// coding u8, little-endian. A frame header holds it at offset 34, and the
// wire protocol's hello (docs/protocol.md) at offset 20.
const FormatSize = 9

// PutFormat packs f into b[:FormatSize]. A field that does not fit its
// bytes (a depth or a chip count above 255, a chip side above 65535, a
// negative one) is an error, and b is left as it was: nothing is
// truncated. It panics if b is shorter than FormatSize.
func PutFormat(b []byte, f Format) error {
	_ = b[FormatSize-1]
	for _, v := range []struct {
		name       string
		value, max int
	}{
		{"bit depth", f.BitDepth, 0xFF},
		{"chips x", f.ChipsX, 0xFF},
		{"chips y", f.ChipsY, 0xFF},
		{"chip width", f.ChipWidth, 0xFFFF},
		{"chip height", f.ChipHeight, 0xFFFF},
	} {
		if v.value < 0 || v.value > v.max {
			return fmt.Errorf("format: %s %d does not fit its field (0 to %d)", v.name, v.value, v.max)
		}
	}
	b[0] = byte(f.Encoding)
	b[1] = byte(f.BitDepth)
	b[2] = byte(f.ChipsX)
	b[3] = byte(f.ChipsY)
	binary.LittleEndian.PutUint16(b[4:], uint16(f.ChipWidth))
	binary.LittleEndian.PutUint16(b[6:], uint16(f.ChipHeight))
	b[8] = byte(f.Coding)
	return nil
}

// ParseFormat unpacks a Format that PutFormat packed at the start of b. It
// does not validate it (see Format.Validate). It panics if b is shorter
// than FormatSize.
func ParseFormat(b []byte) Format {
	_ = b[FormatSize-1]
	return Format{
		Geometry: Geometry{
			ChipsX:     int(b[2]),
			ChipsY:     int(b[3]),
			ChipWidth:  int(binary.LittleEndian.Uint16(b[4:])),
			ChipHeight: int(binary.LittleEndian.Uint16(b[6:])),
		},
		Encoding: Encoding(b[0]),
		BitDepth: int(b[1]),
		Coding:   Coding(b[8]),
	}
}

// AppendHeader appends h, encoded, to dst.
func AppendHeader(dst []byte, h *Header) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, HeaderSize)...)
	h.Put(dst[n:])
	return dst
}

// ParseHeader decodes the header at the start of b. It checks the magic,
// version, header size and header CRC, and returns an error wrapping
// ErrNotFrame when any is wrong. It does not check the payload's size
// against the format: see Header.Check.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, fmt.Errorf("%w: %d bytes, want %d", ErrNotFrame, len(b), HeaderSize)
	}
	b = b[:HeaderSize]
	if [4]byte(b[0:4]) != Magic {
		return Header{}, fmt.Errorf("%w: magic % x, want % x", ErrNotFrame, b[0:4], Magic[:])
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != Version {
		return Header{}, fmt.Errorf("%w: version %d, want %d", ErrNotFrame, v, Version)
	}
	if n := binary.LittleEndian.Uint16(b[6:]); n != HeaderSize {
		return Header{}, fmt.Errorf("%w: header size %d, want %d", ErrNotFrame, n, HeaderSize)
	}
	if got, want := binary.LittleEndian.Uint32(b[60:]), Checksum(b[:60]); got != want {
		return Header{}, fmt.Errorf("%w: header CRC %08x, computed %08x", ErrNotFrame, got, want)
	}
	return Header{
		FrameNumber: binary.LittleEndian.Uint64(b[8:]),
		Timestamp:   binary.LittleEndian.Uint64(b[16:]),
		PayloadSize: binary.LittleEndian.Uint32(b[24:]),
		PayloadCRC:  binary.LittleEndian.Uint32(b[28:]),
		ModuleID:    binary.LittleEndian.Uint16(b[32:]),
		Format:      ParseFormat(b[34:]),
		Flags:       binary.LittleEndian.Uint32(b[44:]),
	}, nil
}

// Check reports whether the header describes a payload that can be decoded:
// a known encoding, depth and coding, and a payload size that matches them.
// Errors wrap ErrRejected.
func (h *Header) Check() error {
	if err := h.Format.Validate(); err != nil {
		return fmt.Errorf("%w: frame %d: %w", ErrRejected, h.FrameNumber, err)
	}
	if want := h.Format.PayloadSize(); int64(h.PayloadSize) != int64(want) {
		return fmt.Errorf("%w: frame %d: payload of %d bytes, %v needs %d",
			ErrRejected, h.FrameNumber, h.PayloadSize, h.Format, want)
	}
	return nil
}
