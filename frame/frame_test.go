package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestChecksumCheckValue(t *testing.T) {
	if got := Checksum([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("CRC-32C(123456789) = %08x, want e3069283", got)
	}
	if got := UpdateChecksum(Checksum([]byte("12345")), []byte("6789")); got != 0xE3069283 {
		t.Fatalf("CRC-32C in two parts = %08x, want e3069283", got)
	}
}

func TestLFSRSequences(t *testing.T) {
	tests := []struct {
		bits  int
		codes []uint32 // counts 0..10
		last  uint32   // code of the largest count
	}{
		{12, []uint32{0x000, 0x001, 0x003, 0x007, 0x00F, 0x01E, 0x03D, 0x07B, 0x0F7, 0x1EE, 0x3DC}, 0x800},
		{6, []uint32{0x00, 0x01, 0x03, 0x07, 0x0F, 0x1F, 0x3F, 0x3E, 0x3D, 0x3A, 0x35}, 0x20},
	}
	for _, tt := range tests {
		f := Format{Encoding: Bitplane, BitDepth: tt.bits, Coding: LFSR}
		for count, want := range tt.codes {
			if got := f.CounterCode(uint32(count)); got != want {
				t.Errorf("%d-bit: code of count %d = %#x, want %#x", tt.bits, count, got, want)
			}
		}
		if got := f.CounterCode(f.MaxCount()); got != tt.last {
			t.Errorf("%d-bit: code of count %d = %#x, want %#x", tt.bits, f.MaxCount(), got, tt.last)
		}
		// The sequence visits every code once: decoding inverts encoding.
		seen := make(map[uint32]bool)
		for count := range f.MaxCount() + 1 {
			code := f.CounterCode(count)
			if seen[code] {
				t.Fatalf("%d-bit: code %#x repeats at count %d", tt.bits, code, count)
			}
			seen[code] = true
			if back := f.CounterCount(code); back != count {
				t.Fatalf("%d-bit: count of code %#x = %d, want %d", tt.bits, code, back, count)
			}
		}
	}
}

func TestLFSR24ChainsTwelveBitCounters(t *testing.T) {
	f := Format{Encoding: Bitplane, BitDepth: 24, Coding: LFSR}
	for _, count := range []uint32{0, 1, 4095, 4096, 4097, 1 << 23, 1<<24 - 1} {
		code := f.CounterCode(count)
		hi, lo := lfsr12.Code[count>>12], lfsr12.Code[count&0xFFF]
		if want := uint32(hi)<<12 | uint32(lo); code != want {
			t.Errorf("code of %d = %#x, want %#x", count, code, want)
		}
		if back := f.CounterCount(code); back != count {
			t.Errorf("count of %#x = %d, want %d", code, back, count)
		}
	}
}

func validFormats() []Format {
	g := Geometry{ChipsX: 2, ChipsY: 3, ChipWidth: 16, ChipHeight: 8}
	return []Format{
		{g, Bitplane, 1, Binary},
		{g, Bitplane, 6, Binary},
		{g, Bitplane, 6, LFSR},
		{g, Bitplane, 12, Binary},
		{g, Bitplane, 12, LFSR},
		{g, Bitplane, 24, Binary},
		{g, Bitplane, 24, LFSR},
		{g, Packed12, 12, Binary},
		{g, Packed24, 24, Binary},
		{g, U16LE, 16, Binary},
		{g, U32LE, 32, Binary},
	}
}

func TestFormatSizes(t *testing.T) {
	pimega := Format{PiMega, Bitplane, 24, LFSR}
	if err := pimega.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := pimega.PayloadSize(); got != 7_077_888 {
		t.Errorf("Pi-mega 24-bit bitplane payload = %d bytes, want 7077888", got)
	}
	if got := pimega.ImageSize(); got != 1536*1536*4 {
		t.Errorf("Pi-mega image = %d bytes, want %d", got, 1536*1536*4)
	}
	tests := []struct {
		f         Format
		chipBytes int
		pixelSize int
	}{
		{validFormats()[0], 16 * 8 / 8, 2},
		{validFormats()[2], 6 * 16 * 8 / 8, 2},
		{validFormats()[4], 12 * 16 * 8 / 8, 2},
		{validFormats()[6], 24 * 16 * 8 / 8, 4},
		{validFormats()[7], 16 * 8 * 3 / 2, 2},
		{validFormats()[8], 16 * 8 * 3, 4},
		{validFormats()[9], 16 * 8 * 2, 2},
		{validFormats()[10], 16 * 8 * 4, 4},
	}
	for _, tt := range tests {
		if got := tt.f.ChipPayloadSize(); got != tt.chipBytes {
			t.Errorf("%v: chip payload %d, want %d", tt.f, got, tt.chipBytes)
		}
		if got := tt.f.PayloadSize(); got != 6*tt.chipBytes {
			t.Errorf("%v: payload %d, want %d", tt.f, got, 6*tt.chipBytes)
		}
		if got := tt.f.PixelSize(); got != tt.pixelSize {
			t.Errorf("%v: pixel size %d, want %d", tt.f, got, tt.pixelSize)
		}
	}
}

func TestFormatValidate(t *testing.T) {
	g := Geometry{ChipsX: 1, ChipsY: 1, ChipWidth: 8, ChipHeight: 1}
	for _, f := range validFormats() {
		if err := f.Validate(); err != nil {
			t.Errorf("%v: %v", f, err)
		}
	}
	bad := []struct {
		f    Format
		want string
	}{
		{Format{g, Bitplane, 16, Binary}, "bitplane bit depth 16: want 1, 6, 12 or 24"},
		{Format{Geometry{1, 1, 12, 1}, Bitplane, 12, Binary}, "bitplane chip width 12: must be a multiple of 8"},
		{Format{Geometry{1, 1, 3, 1}, Packed12, 12, Binary}, "packed12 chip of 3 pixels: must be even"},
		{Format{g, Packed12, 24, Binary}, "packed12 bit depth 24: want 12"},
		{Format{g, Packed24, 12, Binary}, "packed24 bit depth 12: want 24"},
		{Format{g, U16LE, 12, Binary}, "u16le bit depth 12: want 16"},
		{Format{g, U32LE, 24, Binary}, "u32le bit depth 24: want 32"},
		{Format{g, 9, 12, Binary}, "unknown encoding 9"},
		{Format{g, Bitplane, 12, 2}, "unknown counter coding 2"},
		{Format{g, U16LE, 16, LFSR}, "lfsr coding with u16le: only bitplane payloads carry counter codes"},
		{Format{Geometry{0, 1, 8, 1}, U16LE, 16, Binary}, "chip grid 0x1: each side must be 1 to 255 chips"},
		{Format{Geometry{1, 1, 8, 0}, U16LE, 16, Binary}, "chip size 8x0: each side must be 1 to 65535 pixels"},
		{Format{Geometry{255, 255, 65528, 65528}, Bitplane, 24, LFSR},
			"255x255 chips of 65528x65528: payload of 837636206788800 bytes: more than a header's payload_size holds (4294967295)"},
		{Format{Geometry{128, 128, 256, 256}, U32LE, 32, Binary},
			"128x128 chips of 256x256: payload of 4294967296 bytes: more than a header's payload_size holds (4294967295)"},
	}
	for _, tt := range bad {
		err := tt.f.Validate()
		if err == nil || err.Error() != tt.want {
			t.Errorf("%v: error %v, want %q", tt.f, err, tt.want)
		}
	}
}

func TestParseNames(t *testing.T) {
	for _, e := range Encodings {
		got, err := ParseEncoding(e.String())
		if err != nil || got != e {
			t.Errorf("ParseEncoding(%q) = %v, %v", e.String(), got, err)
		}
	}
	if _, err := ParseEncoding("gray"); err == nil {
		t.Error("ParseEncoding(gray) succeeded")
	}
	for _, c := range []Coding{Binary, LFSR} {
		got, err := ParseCoding(c.String())
		if err != nil || got != c {
			t.Errorf("ParseCoding(%q) = %v, %v", c.String(), got, err)
		}
	}
	if _, err := ParseCoding("gray"); err == nil {
		t.Error("ParseCoding(gray) succeeded")
	}
}

func sampleHeader() Header {
	return Header{
		FrameNumber: 0x0102030405060708,
		Timestamp:   1_700_000_000_123_456_789,
		PayloadSize: 7_077_888,
		PayloadCRC:  0xDEADBEEF,
		ModuleID:    3,
		Format:      Format{PiMega, Bitplane, 24, LFSR},
		Flags:       FlagOverflow,
	}
}

func TestHeaderLayout(t *testing.T) {
	h := sampleHeader()
	var b [HeaderSize]byte
	h.Put(b[:])
	le := binary.LittleEndian
	fields := []struct {
		name string
		got  uint64
		want uint64
	}{
		{"magic", uint64(le.Uint32(b[0:])), uint64(le.Uint32([]byte("PMF1")))},
		{"version", uint64(le.Uint16(b[4:])), 1},
		{"header_size", uint64(le.Uint16(b[6:])), 64},
		{"frame_number", le.Uint64(b[8:]), h.FrameNumber},
		{"timestamp_ns", le.Uint64(b[16:]), h.Timestamp},
		{"payload_size", uint64(le.Uint32(b[24:])), 7_077_888},
		{"payload_crc", uint64(le.Uint32(b[28:])), 0xDEADBEEF},
		{"module_id", uint64(le.Uint16(b[32:])), 3},
		{"encoding", uint64(b[34]), 1},
		{"bit_depth", uint64(b[35]), 24},
		{"chips_x", uint64(b[36]), 6},
		{"chips_y", uint64(b[37]), 6},
		{"chip_width", uint64(le.Uint16(b[38:])), 256},
		{"chip_height", uint64(le.Uint16(b[40:])), 256},
		{"coding", uint64(b[42]), 1},
		{"reserved", uint64(b[43]), 0},
		{"flags", uint64(le.Uint32(b[44:])), 1},
		{"header_crc", uint64(le.Uint32(b[60:])), uint64(Checksum(b[:60]))},
	}
	for _, f := range fields {
		if f.got != f.want {
			t.Errorf("%s = %#x, want %#x", f.name, f.got, f.want)
		}
	}
	if !slices.Equal(b[48:60], make([]byte, 12)) {
		t.Errorf("reserved bytes 48..59 = % x, want zeros", b[48:60])
	}
	got, err := ParseHeader(b[:])
	if err != nil {
		t.Fatal(err)
	}
	if got != h {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, h)
	}
	if err := got.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
}

// TestHeaderRules checks every header rule of the bad-frame table: what is
// not a frame at all, and what is a frame to reject.
func TestHeaderRules(t *testing.T) {
	le := binary.LittleEndian
	tests := []struct {
		name    string
		mangle  func(b []byte)
		recrc   bool  // recompute the header CRC after mangling
		wantErr error // nil: the header is good
	}{
		{"good", func(b []byte) {}, false, nil},
		{"magic", func(b []byte) { b[3] = '2' }, true, ErrNotFrame},
		{"version", func(b []byte) { le.PutUint16(b[4:], 2) }, true, ErrNotFrame},
		{"header_size", func(b []byte) { le.PutUint16(b[6:], 128) }, true, ErrNotFrame},
		{"header_crc", func(b []byte) { b[8] ^= 1 }, false, ErrNotFrame},
		{"payload_size", func(b []byte) { le.PutUint32(b[24:], 7_077_887) }, true, ErrRejected},
		{"unknown encoding", func(b []byte) { b[34] = 6 }, true, ErrRejected},
		{"depth for encoding", func(b []byte) { b[35] = 16 }, true, ErrRejected},
		{"unknown coding", func(b []byte) { b[42] = 7 }, true, ErrRejected},
		{"geometry", func(b []byte) { le.PutUint16(b[38:], 128) }, true, ErrRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := sampleHeader()
			var b [HeaderSize]byte
			h.Put(b[:])
			tt.mangle(b[:])
			if tt.recrc {
				le.PutUint32(b[60:], Checksum(b[:60]))
			}
			got, err := ParseHeader(b[:])
			if err == nil {
				err = got.Check()
			}
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
		})
	}
	if _, err := ParseHeader(make([]byte, 10)); !errors.Is(err, ErrNotFrame) {
		t.Errorf("short header: error %v, want ErrNotFrame", err)
	}
}

// TestBitplaneGolden checks the bitplane layout by hand on one 8 x 2 chip.
func TestBitplaneGolden(t *testing.T) {
	f := Format{Geometry{1, 1, 8, 2}, Bitplane, 6, Binary}
	// Row 0: counts 0..7; row 1: 63, 0, 0, 0, 0, 0, 0, 32.
	counts := []uint32{0, 1, 2, 3, 4, 5, 6, 7, 63, 0, 0, 0, 0, 0, 0, 32}
	got, err := f.AppendPayload(nil, counts, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		// Row 0, planes bit 5 .. bit 0; column 0 is the byte's MSB.
		0x00, 0x00, 0x00, 0x0F, 0x33, 0x55,
		// Row 1: column 0 has every bit, column 7 only bit 5.
		0x81, 0x80, 0x80, 0x80, 0x80, 0x80,
	}
	if !slices.Equal(got, want) {
		t.Errorf("payload % x\n   want % x", got, want)
	}
}

func TestPackedGolden(t *testing.T) {
	g := Geometry{1, 1, 2, 1}
	tests := []struct {
		f      Format
		counts []uint32
		want   []byte
	}{
		{Format{g, Packed12, 12, Binary}, []uint32{0xABC, 0x123}, []byte{0xBC, 0x3A, 0x12}},
		{Format{g, Packed24, 24, Binary}, []uint32{0xABCDEF, 1}, []byte{0xEF, 0xCD, 0xAB, 1, 0, 0}},
		{Format{g, U16LE, 16, Binary}, []uint32{0xABCD, 2}, []byte{0xCD, 0xAB, 2, 0}},
		{Format{g, U32LE, 32, Binary}, []uint32{0x89ABCDEF, 3}, []byte{0xEF, 0xCD, 0xAB, 0x89, 3, 0, 0, 0}},
	}
	for _, tt := range tests {
		got, err := tt.f.AppendPayload(nil, tt.counts, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%v: % x, want % x", tt.f.Encoding, got, tt.want)
		}
	}
}

func TestOrientation(t *testing.T) {
	g := Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 8, ChipHeight: 4}
	tests := []struct {
		k, r, c int
		rot     bool
		want    int
	}{
		{0, 0, 0, false, 0},
		{1, 0, 0, false, 8},
		{2, 0, 0, false, 4 * 16},
		{3, 3, 7, false, 7*16 + 15},
		{0, 0, 0, true, 3*16 + 7},
		{3, 0, 0, true, 7*16 + 15},
		{3, 3, 7, true, 4*16 + 8},
	}
	for _, tt := range tests {
		if got := g.PixelIndex(tt.k, tt.r, tt.c, tt.rot); got != tt.want {
			t.Errorf("PixelIndex(%d, %d, %d, %v) = %d, want %d", tt.k, tt.r, tt.c, tt.rot, got, tt.want)
		}
	}
	// A rotated chip's payload is the same chip's payload read backwards
	// pixel by pixel: check with u16le, one pixel per two bytes.
	f := Format{g, U16LE, 16, Binary}
	counts := make([]uint32, f.Pixels())
	for i := range counts {
		counts[i] = uint32(i)
	}
	plain, _ := f.AppendPayload(nil, counts, nil)
	turned, err := f.AppendPayload(nil, counts, Orientation{0, 180, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	chip := f.ChipPayloadSize()
	for i := 0; i < chip; i += 2 {
		j := chip - 2 - i
		if !slices.Equal(turned[chip+i:chip+i+2], plain[chip+j:chip+j+2]) {
			t.Fatalf("rotated chip 1 pixel %d differs from plain pixel %d", i/2, j/2)
		}
	}
	if !slices.Equal(turned[:chip], plain[:chip]) || !slices.Equal(turned[2*chip:], plain[2*chip:]) {
		t.Error("rotating chip 1 changed other chips")
	}
	for _, o := range []Orientation{{0, 0, 0}, {0, 90, 0, 0}} {
		if err := o.Validate(4); err == nil {
			t.Errorf("Orientation %v accepted", o)
		}
	}
}

func TestAppendPayloadErrors(t *testing.T) {
	f := Format{Geometry{1, 1, 8, 1}, Bitplane, 6, LFSR}
	if _, err := f.AppendPayload(nil, make([]uint32, 7), nil); err == nil {
		t.Error("short image accepted")
	}
	counts := make([]uint32, 8)
	counts[3] = 64
	if _, err := f.AppendPayload(nil, counts, nil); err == nil {
		t.Error("count 64 accepted by a 6-bit counter")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, f := range validFormats() {
		counts := make([]uint32, f.Pixels())
		for i := range counts {
			counts[i] = r.Uint32() & f.MaxCount()
		}
		p, err := f.AppendPayload(nil, counts, nil)
		if err != nil {
			t.Fatalf("%v: %v", f, err)
		}
		if len(p) != f.PayloadSize() {
			t.Errorf("%v: payload %d bytes, want %d", f, len(p), f.PayloadSize())
		}
	}
}

// TestPutFormat checks that a format packs and unpacks to itself, and that
// a field too large (or negative) for its bytes is an error that leaves
// the bytes as they were, where a cast would have truncated it into
// another format.
func TestPutFormat(t *testing.T) {
	f := Format{Geometry: Geometry{ChipsX: 6, ChipsY: 6, ChipWidth: 256, ChipHeight: 65535}, Encoding: Bitplane, BitDepth: 24, Coding: LFSR}
	b := make([]byte, FormatSize)
	if err := PutFormat(b, f); err != nil {
		t.Fatal(err)
	}
	if got := ParseFormat(b); got != f {
		t.Errorf("ParseFormat(PutFormat(%v)) = %v", f, got)
	}
	for _, tt := range []struct {
		edit func(*Format)
		want string
	}{
		{func(f *Format) { f.ChipsX = 256 }, "chips x 256"},
		{func(f *Format) { f.ChipsY = -1 }, "chips y -1"},
		{func(f *Format) { f.BitDepth = 256 + 24 }, "bit depth 280"},
		{func(f *Format) { f.ChipWidth = 1 << 16 }, "chip width 65536"},
		{func(f *Format) { f.ChipHeight = 1<<16 + 256 }, "chip height 65792"},
	} {
		g := f
		tt.edit(&g)
		before := append([]byte(nil), b...)
		if err := PutFormat(b, g); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("PutFormat(%+v) = %v, want an error naming %q", g, err, tt.want)
		}
		if !bytes.Equal(b, before) {
			t.Errorf("PutFormat(%+v) failed but wrote % x", g, b)
		}
	}
}
