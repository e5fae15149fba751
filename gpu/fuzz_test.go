package gpu

import (
	"bytes"
	"strings"
	"testing"

	"h5ingest/frame"
)

// FuzzDecode decodes arbitrary payload bytes in arbitrary formats and chip
// orientations. Decode must never panic; a format the spec does not allow
// must give the job an error; any other must match the reference decoder.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("\x00\xff\x5a"), uint8(frame.Bitplane), uint8(24), uint8(1), uint8(2), uint8(1), uint16(8), uint16(3), uint8(3))
	f.Add([]byte("\x12\x34\x56\x78"), uint8(frame.Packed12), uint8(12), uint8(0), uint8(2), uint8(2), uint16(3), uint16(2), uint8(1))
	f.Add([]byte{1}, uint8(frame.Bitplane), uint8(13), uint8(0), uint8(1), uint8(1), uint16(8), uint16(1), uint8(0))
	// Chips of 256 and 512 pixels a row, 24- and 12-bit: the widths the
	// AVX-512 gathers take, checked against the reference as every other.
	f.Add([]byte("\x9e\x37\x79\xb9\x7f\x4a\x7c\x15"), uint8(frame.Bitplane), uint8(24), uint8(frame.LFSR), uint8(2), uint8(1), uint16(256), uint16(3), uint8(2))
	f.Add([]byte("\x01\x00\x00\x80\xff"), uint8(frame.Bitplane), uint8(24), uint8(0), uint8(1), uint8(2), uint16(512), uint16(2), uint8(1))
	f.Add([]byte("\x9e\x37\x79\xb9\x7f\x4a\x7c\x15"), uint8(frame.Bitplane), uint8(12), uint8(frame.LFSR), uint8(2), uint8(1), uint16(256), uint16(3), uint8(2))
	f.Add([]byte("\x01\x00\x00\x80\xff"), uint8(frame.Bitplane), uint8(12), uint8(0), uint8(1), uint8(2), uint16(512), uint16(2), uint8(1))
	// packed12, packed24, u16le and u32le chips of 256 pixels a row (whole
	// vectors) and of 259 (a tail, and packed12 rows that start inside a
	// pair), some at 180 degrees: the vector decodes and their tails.
	f.Add([]byte("\x9e\x37\x79\xb9\x7f\x4a\x7c"), uint8(frame.Packed12), uint8(12), uint8(0), uint8(2), uint8(1), uint16(256), uint16(3), uint8(2))
	f.Add([]byte("\x9e\x37\x79\xb9\x7f\x4a\x7c"), uint8(frame.Packed12), uint8(12), uint8(0), uint8(2), uint8(1), uint16(259), uint16(2), uint8(1))
	f.Add([]byte("\x01\x00\x80\xff\x5a"), uint8(frame.Packed24), uint8(24), uint8(0), uint8(2), uint8(1), uint16(256), uint16(3), uint8(1))
	f.Add([]byte("\x01\x00\x80\xff\x5a"), uint8(frame.Packed24), uint8(24), uint8(0), uint8(1), uint8(2), uint16(259), uint16(2), uint8(2))
	f.Add([]byte("\x12\x34\x56"), uint8(frame.U16LE), uint8(16), uint8(0), uint8(2), uint8(1), uint16(256), uint16(3), uint8(2))
	f.Add([]byte("\x12\x34\x56"), uint8(frame.U16LE), uint8(16), uint8(0), uint8(2), uint8(1), uint16(259), uint16(2), uint8(3))
	f.Add([]byte("\x12\x34\x56\x78\x9a"), uint8(frame.U32LE), uint8(32), uint8(0), uint8(1), uint8(2), uint16(256), uint16(3), uint8(1))
	f.Add([]byte("\x12\x34\x56\x78\x9a"), uint8(frame.U32LE), uint8(32), uint8(0), uint8(2), uint8(1), uint16(259), uint16(2), uint8(2))
	// 6- and 1-bit chips of 256 pixels a row, which the AVX-512 decoders
	// take, and widths the AVX2 ones take with a tail (12-bit chips of 104
	// pixels, 6-bit of 200, 1-bit of 72), at both orientations; the
	// seeds' lengths do not divide a row's bytes, so that rows differ.
	f.Add([]byte("\x9e\x37\x79\xb9\x7f"), uint8(frame.Bitplane), uint8(6), uint8(frame.LFSR), uint8(2), uint8(1), uint16(256), uint16(3), uint8(2))
	f.Add([]byte("\x01\x00\x00\x80\xff"), uint8(frame.Bitplane), uint8(6), uint8(0), uint8(1), uint8(2), uint16(256), uint16(2), uint8(1))
	f.Add([]byte("\x9e\x37\x79\xb9\x7f"), uint8(frame.Bitplane), uint8(1), uint8(0), uint8(2), uint8(2), uint16(256), uint16(3), uint8(6))
	f.Add([]byte("\xc3\x5a\x01\x99\x42"), uint8(frame.Bitplane), uint8(12), uint8(frame.LFSR), uint8(3), uint8(1), uint16(104), uint16(4), uint8(5))
	f.Add([]byte("\x0f\xf0\x33\xa5\x01\x7f\xee"), uint8(frame.Bitplane), uint8(6), uint8(frame.LFSR), uint8(2), uint8(2), uint16(200), uint16(3), uint8(9))
	f.Add([]byte("\x80\x01\x7e\xd4"), uint8(frame.Bitplane), uint8(1), uint8(frame.LFSR), uint8(3), uint8(1), uint16(72), uint16(5), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, enc, depth, coding, chipsX, chipsY uint8, w, h uint16, rot uint8) {
		fm := frame.Format{
			Geometry: frame.Geometry{ChipsX: int(chipsX), ChipsY: int(chipsY), ChipWidth: int(w), ChipHeight: int(h)},
			Encoding: frame.Encoding(enc), BitDepth: int(depth), Coding: frame.Coding(coding),
		}
		valid := fm.Validate() == nil
		if valid && fm.Pixels() > 1<<14 {
			return // keep each run short
		}
		var o frame.Orientation
		if rot != 0 && fm.Geometry.Validate() == nil && fm.Chips() <= 64 {
			o = make(frame.Orientation, fm.Chips())
			for k := range o {
				if (rot>>(k%8))&1 != 0 {
					o[k] = 180
				}
			}
		}
		size := len(data)
		if valid {
			size = fm.PayloadSize()
		}
		payload := make([]byte, size)
		if len(data) > 0 {
			for i := range payload {
				payload[i] = data[i%len(data)]
			}
		}
		imageSize := 64
		if valid {
			imageSize = fm.ImageSize()
		}
		job := Job{
			Header:  frame.Header{FrameNumber: 9, PayloadSize: uint32(size), Format: fm},
			Payload: payload,
			Image:   make([]byte, imageSize),
		}
		be, err := New("cpu", Options{Orientation: o, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer be.Close()
		batch := []Job{job}
		if err := be.Decode(batch); err != nil {
			t.Fatal(err)
		}
		j := &batch[0]
		if !valid {
			if j.Err == nil || !strings.Contains(j.Err.Error(), "frame 9:") {
				t.Fatalf("format %v: error %v, want one naming frame 9", fm, j.Err)
			}
			return
		}
		if j.Err != nil {
			t.Fatalf("format %v: %v", fm, j.Err)
		}
		want := refDecode(fm, payload, o)
		if !bytes.Equal(j.Image, want) {
			t.Fatalf("format %v, orientation %v: image differs from the reference", fm, o)
		}
		if j.RawCRC != frame.Checksum(payload) || j.DataCRC != frame.Checksum(want) {
			t.Fatalf("format %v: CRCs %08x, %08x, want %08x, %08x", fm, j.RawCRC, j.DataCRC,
				frame.Checksum(payload), frame.Checksum(want))
		}
	})
}
