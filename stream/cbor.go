package stream

import (
	"encoding/binary"
	"math"
)

// The image message is the one message sent per frame, so it is encoded
// by these append-style helpers into the image's own buffer, around the
// chunk the sink copied there: nothing is allocated per image, and the
// chunk is copied once. The start and end
// messages, which carry free-form user metadata, go through
// fxamacker/cbor. Every message is checked in the tests by a decoder that
// follows DECTRIS's reference parser (stream2_parser_test.go), and by
// fxamacker's and Python cbor2's decoders.

// CBOR major types (RFC 8949, section 3.1).
const (
	majorUint  = 0
	majorBytes = 2
	majorText  = 3
	majorArray = 4
	majorMap   = 5
	majorTag   = 6
)

// CBOR tags this package writes.
const (
	tagSelfDescribed = 55799 // self-described CBOR (RFC 8949, 3.4.6): d9 d9 f7
	tagDateTime      = 0     // RFC 3339 date/time text (RFC 8949, 3.4.1)
	tagMultiDim      = 40    // multi-dimensional array, row-major (RFC 8746, 3.1.1)
	tagUint8         = 64    // typed array of uint8 (RFC 8746, 2)
	tagUint16LE      = 69    // typed array of little-endian uint16
	tagUint32LE      = 70    // typed array of little-endian uint32
	tagFloat32LE     = 85    // typed array of little-endian IEEE 754 binary32
	tagCompressed    = 56500 // DECTRIS compressed byte string: [algorithm, modifier, bytes]
)

// appendHead appends the head of a data item of major type major and
// argument n, in its shortest form.
func appendHead(b []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(b, m|byte(n))
	case n <= math.MaxUint8:
		return append(b, m|24, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, m|25), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, m|26), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, m|27), n)
}

func appendUint(b []byte, n uint64) []byte { return appendHead(b, majorUint, n) }

func appendText(b []byte, s string) []byte {
	return append(appendHead(b, majorText, uint64(len(s))), s...)
}

// appendFloat appends v as a double-precision float.
func appendFloat(b []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, 0xfb), math.Float64bits(v))
}

// appendSelfDescribed appends the self-described CBOR tag that begins
// every Stream V2 message: DECTRIS's parser refuses a message without it.
func appendSelfDescribed(b []byte) []byte { return appendHead(b, majorTag, tagSelfDescribed) }

// appendRational appends num/den as Stream V2's Rational: an array of two
// unsigned integers.
func appendRational(b []byte, num, den uint64) []byte {
	return appendUint(appendUint(appendHead(b, majorArray, 2), num), den)
}
