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
	f := h.Format
	b[34] = byte(f.Encoding)
	b[35] = narrow8(f.BitDepth)
	b[36] = narrow8(f.ChipsX)
	b[37] = narrow8(f.ChipsY)
	binary.LittleEndian.PutUint16(b[38:], narrow16(f.ChipWidth))
	binary.LittleEndian.PutUint16(b[40:], narrow16(f.ChipHeight))
	b[42] = byte(f.Coding)
	binary.LittleEndian.PutUint32(b[44:], h.Flags)
	binary.LittleEndian.PutUint32(b[60:], Checksum(b[:60]))
}

func narrow8(v int) byte {
	if v < 0 || v > 0xFF {
		panic(fmt.Sprintf("frame: header field %d does not fit a byte", v))
	}
	return byte(v)
}

func narrow16(v int) uint16 {
	if v < 0 || v > 0xFFFF {
		panic(fmt.Sprintf("frame: header field %d does not fit 16 bits", v))
	}
	return uint16(v)
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
		Format: Format{
			Geometry: Geometry{
				ChipsX:     int(b[36]),
				ChipsY:     int(b[37]),
				ChipWidth:  int(binary.LittleEndian.Uint16(b[38:])),
				ChipHeight: int(binary.LittleEndian.Uint16(b[40:])),
			},
			Encoding: Encoding(b[34]),
			BitDepth: int(b[35]),
			Coding:   Coding(b[42]),
		},
		Flags: binary.LittleEndian.Uint32(b[44:]),
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
