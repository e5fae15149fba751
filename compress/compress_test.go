package compress

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/pierrec/lz4/v4"

	"h5ingest/compress/bitshuffle"
)

// lowCounts returns n elements of elemSize bytes holding small photon
// counts, the typical content of a detector frame.
func lowCounts(n, elemSize int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 11))
	b := make([]byte, n*elemSize)
	for i := range n {
		v := uint64(rng.IntN(6))
		if rng.IntN(50) == 0 {
			v = rng.Uint64()
		}
		for j := range elemSize {
			b[i*elemSize+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// noise returns n random bytes, which no codec can compress.
func noise(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 12))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func mustNew(t testing.TB, name string, elemSize int) Codec {
	t.Helper()
	c, err := New(name, elemSize, 0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRoundTrip is the conformance suite every codec must pass: encoding
// appends to dst, stays within Bound, and decodes back to the input.
func TestRoundTrip(t *testing.T) {
	lengths := []int{0, 7, 8, 2048 * 4, 5000, 5005, 1536 * 1536}
	for _, name := range Names() {
		for _, es := range []int{1, 2, 4, 8} {
			for _, n := range lengths {
				if n == 1536*1536 && (es == 1 || es == 8) {
					continue // the full frame is tested at the detector's sizes
				}
				for _, data := range []struct {
					kind string
					src  []byte
				}{
					{"counts", lowCounts(n, es, uint64(n))},
					{"noise", noise(n*es, uint64(n))},
				} {
					t.Run(fmt.Sprintf("%s/uint%d/%d/%s", name, 8*es, n, data.kind), func(t *testing.T) {
						roundTrip(t, mustNew(t, name, es), data.src)
					})
				}
			}
		}
	}
}

func roundTrip(t *testing.T, c Codec, src []byte) {
	t.Helper()
	prefix := []byte("prefix")
	enc, err := c.Encode(slices.Clone(prefix), src)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(enc, prefix) {
		t.Fatal("Encode did not keep dst's contents")
	}
	stored := enc[len(prefix):]
	if len(stored) > c.Bound(len(src)) {
		t.Errorf("stored size %d exceeds Bound(%d) = %d", len(stored), len(src), c.Bound(len(src)))
	}
	dec, err := c.Decode(slices.Clone(prefix), stored)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(dec, prefix) {
		t.Fatal("Decode did not keep dst's contents")
	}
	if !bytes.Equal(dec[len(prefix):], src) {
		t.Fatalf("decoded %d bytes differ from the %d-byte input", len(dec)-len(prefix), len(src))
	}
}

func TestEncodeRejectsPartialElement(t *testing.T) {
	for _, name := range []string{"bslz4", "bszstd", "deflate"} {
		if _, err := mustNew(t, name, 4).Encode(nil, make([]byte, 10)); err == nil {
			t.Errorf("%s: no error for a 10-byte chunk of 4-byte elements", name)
		}
	}
}

func TestHeaders(t *testing.T) {
	frame32 := lowCounts(1536*1536, 4, 1)
	frame16 := lowCounts(1536*1536, 2, 1)
	tests := []struct {
		name, codec string
		elemSize    int
		src         []byte
		want        string
	}{
		{"bslz4 uint32 frame", "bslz4", 4, frame32, "0000000000900000" + "00002000"},
		{"bslz4 uint16 frame", "bslz4", 2, frame16, "0000000000480000" + "00002000"},
		{"bslz4 7 uint32", "bslz4", 4, frame32[:28], "000000000000001c" + "00002000"},
		{"bszstd uint32 frame", "bszstd", 4, frame32, "0000000000900000" + "00002000"},
		{"lz4 uint32 frame", "lz4", 4, frame32, "0000000000900000" + "00900000"},
		{"lz4 100 bytes", "lz4", 4, frame32[:100], "0000000000000064" + "00000064"},
	}
	for _, tt := range tests {
		enc, err := mustNew(t, tt.codec, tt.elemSize).Encode(nil, tt.src)
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(enc[:12]); got != tt.want {
			t.Errorf("%s: header %s, want %s", tt.name, got, tt.want)
		}
	}
}

// blockLengths walks a bitshuffle chunk with nblocks blocks and returns the
// bytes after the last block.
func blockLengths(t *testing.T, enc []byte, nblocks int) []byte {
	t.Helper()
	p := enc[12:]
	for i := range nblocks {
		if len(p) < 4 {
			t.Fatalf("block %d: chunk ends early", i)
		}
		n := binary.BigEndian.Uint32(p)
		p = p[4+n:]
	}
	return p
}

func TestBitshuffleLayout(t *testing.T) {
	tests := []struct {
		name     string
		n        int
		blocks   int
		leftover int
	}{
		{"7 elements", 7, 0, 28},
		{"8 elements", 8, 1, 0},
		{"one frame", 1536 * 1536, 1152, 0},
		{"5000 elements", 5000, 3, 0},
		{"5005 elements", 5005, 3, 20},
	}
	for _, name := range []string{"bslz4", "bszstd"} {
		for _, tt := range tests {
			src := lowCounts(tt.n, 4, 3)
			enc, err := mustNew(t, name, 4).Encode(nil, src)
			if err != nil {
				t.Fatal(err)
			}
			rest := blockLengths(t, enc, tt.blocks)
			if !bytes.Equal(rest, src[len(src)-tt.leftover:]) {
				t.Errorf("%s %s: %d bytes after the blocks, want the last %d input bytes", name, tt.name, len(rest), tt.leftover)
			}
		}
	}
}

func TestBitshuffleLZ4WorkedExample(t *testing.T) {
	src := make([]byte, 32)
	for i := range 8 {
		binary.LittleEndian.PutUint32(src[4*i:], uint32(i))
	}
	enc, err := mustNew(t, "bslz4", 4).Encode(nil, src)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.BigEndian.Uint32(enc[12:])
	if int(n) != len(enc)-16 {
		t.Fatalf("block length %d, chunk has %d bytes after it", n, len(enc)-16)
	}
	blk := make([]byte, 32)
	if m, err := lz4.UncompressBlock(enc[16:], blk); err != nil || m != 32 {
		t.Fatalf("LZ4 block: %d bytes, %v", m, err)
	}
	if got, want := hex.EncodeToString(blk), "aaccf0"+strings.Repeat("00", 29); got != want {
		t.Errorf("transposed block %s, want %s", got, want)
	}
}

func TestLZ4StoresIncompressibleBlocksRaw(t *testing.T) {
	src := noise(100000, 9)
	c, err := newLZ4(30000)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := c.Encode(nil, src)
	if err != nil {
		t.Fatal(err)
	}
	if want := "00000000000186a0" + "00007530"; hex.EncodeToString(enc[:12]) != want {
		t.Errorf("header %x, want %s", enc[:12], want)
	}
	p := enc[12:]
	for i, size := range []int{30000, 30000, 30000, 10000} {
		if n := int(binary.BigEndian.Uint32(p)); n != size {
			t.Fatalf("block %d stored with length %d, want raw %d", i, n, size)
		}
		if !bytes.Equal(p[4:4+size], src[30000*i:30000*i+size]) {
			t.Fatalf("block %d is not the raw input", i)
		}
		p = p[4+size:]
	}
	if len(p) != 0 {
		t.Errorf("%d bytes after the last block", len(p))
	}
}

func TestFilters(t *testing.T) {
	tests := []struct {
		codec string
		level int
		want  string
	}{
		{"bslz4", 0, "[{32008 bitshuffle true [0 5 4 0 2]}]"},
		{"bszstd", 0, "[{32008 bitshuffle true [0 5 4 0 3 3]}]"},
		{"bszstd", 9, "[{32008 bitshuffle true [0 5 4 0 3 9]}]"},
		{"bszstd", -5, "[{32008 bitshuffle true [0 5 4 0 3 4294967291]}]"},
		{"lz4", 0, "[{32004 lz4 true [0]}]"},
		{"deflate", 0, "[{2 shuffle false [4]} {1 deflate false [6]}]"},
		{"deflate", 1, "[{2 shuffle false [4]} {1 deflate false [1]}]"},
		{"none", 0, "[]"},
	}
	for _, tt := range tests {
		c, err := New(tt.codec, 4, tt.level)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(fields(c.Filters())); got != tt.want {
			t.Errorf("%s level %d: Filters() = %s, want %s", tt.codec, tt.level, got, tt.want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name            string
		elemSize, level int
	}{
		{"zip", 4, 0},
		{"bslz4", 0, 0},
		{"bslz4", 4, 3},
		{"lz4", 4, 1},
		{"none", 4, 1},
		{"bszstd", 4, 23},
		{"deflate", 4, 10},
		{"deflate", 4, -1},
	}
	for _, tt := range tests {
		if _, err := New(tt.name, tt.elemSize, tt.level); err == nil {
			t.Errorf("New(%q, %d, %d): no error", tt.name, tt.elemSize, tt.level)
		}
	}
}

func TestFromFilters(t *testing.T) {
	src := lowCounts(5005, 4, 5)
	for _, name := range Names() {
		c := mustNew(t, name, 4)
		enc, err := c.Encode(nil, src)
		if err != nil {
			t.Fatal(err)
		}
		r, err := FromFilters(c.Filters(), 4)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if fmt.Sprint(fields(r.Filters())) != fmt.Sprint(fields(c.Filters())) {
			t.Errorf("%s: FromFilters gives %v, want %v", name, r.Filters(), c.Filters())
		}
		dec, err := r.Decode(nil, enc)
		if err != nil || !bytes.Equal(dec, src) {
			t.Errorf("%s: codec from filters does not decode the chunk: %v", name, err)
		}
	}
}

func TestFromFiltersVariants(t *testing.T) {
	tests := []struct {
		name    string
		filters []Filter
		want    string // Filters() of the result, or "error"
	}{
		{"bitshuffle as h5py stores it", []Filter{{ID: 32008, Values: []uint32{0, 3, 4, 0, 2}}}, "[{32008 bitshuffle true [0 5 4 0 2]}]"},
		{"bitshuffle block 1024", []Filter{{ID: 32008, Values: []uint32{0, 3, 4, 1024, 2}}}, "[{32008 bitshuffle true [0 5 4 1024 2]}]"},
		{"bitshuffle zstd no level", []Filter{{ID: 32008, Values: []uint32{0, 3, 4, 0, 3}}}, "[{32008 bitshuffle true [0 5 4 0 3 3]}]"},
		{"lz4 no values", []Filter{{ID: 32004}}, "[{32004 lz4 true [0]}]"},
		{"lz4 block", []Filter{{ID: 32004, Values: []uint32{1 << 20, 0}}}, "[{32004 lz4 true [1048576]}]"},
		{"gzip+shuffle", []Filter{{ID: 2, Values: []uint32{4}}, {ID: 1, Values: []uint32{4}}}, "[{2 shuffle false [4]} {1 deflate false [4]}]"},
		{"bitshuffle short values", []Filter{{ID: 32008, Values: []uint32{0, 3}}}, "error"},
		{"bitshuffle element size mismatch", []Filter{{ID: 32008, Values: []uint32{0, 3, 2, 0, 2}}}, "error"},
		{"bitshuffle no compression", []Filter{{ID: 32008, Values: []uint32{0, 3, 4, 0, 0}}}, "error"},
		{"bitshuffle block not multiple of 8", []Filter{{ID: 32008, Values: []uint32{0, 3, 4, 12, 2}}}, "error"},
		{"lz4 block too large", []Filter{{ID: 32004, Values: []uint32{0x7F000000}}}, "error"},
		{"shuffle element size mismatch", []Filter{{ID: 2, Values: []uint32{2}}, {ID: 1, Values: []uint32{4}}}, "error"},
		{"deflate alone", []Filter{{ID: 1, Values: []uint32{4}}}, "error"},
		{"unknown filter", []Filter{{ID: 32001}}, "error"},
	}
	for _, tt := range tests {
		c, err := FromFilters(tt.filters, 4)
		got := "error"
		if err == nil {
			got = fmt.Sprint(fields(c.Filters()))
		}
		if got != tt.want {
			t.Errorf("%s: got %s (%v), want %s", tt.name, got, err, tt.want)
		}
	}
}

// TestDecodeRejectsTruncation checks that every proper prefix of a valid
// chunk is an error, not a panic or a short chunk.
func TestDecodeRejectsTruncation(t *testing.T) {
	src := lowCounts(5005, 4, 8)
	for _, name := range []string{"bslz4", "bszstd", "lz4", "deflate"} {
		c := mustNew(t, name, 4)
		enc, err := c.Encode(nil, src)
		if err != nil {
			t.Fatal(err)
		}
		for n := range len(enc) {
			if _, err := c.Decode(nil, enc[:n]); err == nil {
				t.Fatalf("%s: no error for the first %d of %d bytes", name, n, len(enc))
			}
		}
		if _, err := c.Decode(nil, append(enc, 0)); err == nil {
			t.Errorf("%s: no error for a trailing byte", name)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	src := lowCounts(5005, 4, 8)
	encoded := map[string][]byte{}
	for _, name := range []string{"bslz4", "bszstd", "lz4"} {
		enc, err := mustNew(t, name, 4).Encode(nil, src)
		if err != nil {
			t.Fatal(err)
		}
		encoded[name] = enc
	}
	edit := func(name string, f func(b []byte)) []byte {
		b := slices.Clone(encoded[name])
		f(b)
		return b
	}
	tests := []struct {
		name, codec string
		src         []byte
		want        string
	}{
		{"short header", "bslz4", []byte{0, 0, 0}, "12-byte header"},
		{"size not whole elements", "bslz4", edit("bslz4", func(b []byte) { b[7]++ }), "whole number"},
		{"block not multiple of 8 elements", "bslz4", edit("bslz4", func(b []byte) { b[11] = 4 }), "multiple of 8"},
		{"huge size", "bslz4", edit("bslz4", func(b []byte) { b[2] = 1 }), "4 GiB"},
		{"size larger than blocks", "bslz4", edit("bslz4", func(b []byte) { b[6] = 0x80 }), fmt.Sprintf("bslz4 block 3 at offset %d: 0 bytes cannot decode", len(encoded["bslz4"])-4*(5005%8))}, // the end of the blocks: the last 5 elements are stored raw
		{"block length past end", "bslz4", edit("bslz4", func(b []byte) { b[12] = 0x7f }), "block 0 at offset 12: length"},
		{"wrong block size", "bslz4", edit("bslz4", func(b []byte) { b[10] = 0x10 }), "cannot decode to a 4096-byte block"},
		{"corrupt lz4", "bslz4", edit("bslz4", func(b []byte) { clear(b[16:40]) }), "bslz4 block 0 at offset 12: lz4"},
		{"corrupt zstd", "bszstd", edit("bszstd", func(b []byte) { b[16] = 0 }), "bszstd block 0 at offset 12: zstd"},
		{"lz4 negative block", "lz4", edit("lz4", func(b []byte) { b[8] = 0x80 }), "not positive"},
		{"lz4 length past end", "lz4", edit("lz4", func(b []byte) { b[12] = 0x10 }), "past the end"},
		{"lz4 wrong decoded size", "lz4", edit("lz4", func(b []byte) { b[7]-- }), "lz4"},
	}
	for _, tt := range tests {
		dst := []byte("keep")
		got, err := mustNew(t, tt.codec, 4).Decode(dst, tt.src)
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %q does not mention %q", tt.name, err, tt.want)
		}
		if string(got) != "keep" {
			t.Errorf("%s: dst changed to %d bytes on error", tt.name, len(got))
		}
	}
}

func TestZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	for _, name := range Names() {
		for _, es := range []int{2, 4} {
			c := mustNew(t, name, es)
			src := lowCounts(100_000+5, es, 4)
			enc := make([]byte, 0, c.Bound(len(src)))
			dec := make([]byte, 0, len(src))
			stored, err := c.Encode(enc, src)
			if err != nil {
				t.Fatal(err)
			}
			c.Decode(dec, stored) // warm up: scratch buffers grow once
			encAllocs := testing.AllocsPerRun(5, func() { c.Encode(enc, src) })
			decAllocs := testing.AllocsPerRun(5, func() { c.Decode(dec, stored) })
			if name == "deflate" {
				// The standard library's inflater allocates a table for
				// each dynamic Huffman block; decoding serves verify only.
				decAllocs = 0
			}
			if encAllocs != 0 || decAllocs != 0 {
				t.Errorf("%s uint%d: %v allocations per Encode, %v per Decode, want 0", name, 8*es, encAllocs, decAllocs)
			}
		}
	}
}

func TestFilterName(t *testing.T) {
	for id, want := range map[int]string{1: "deflate", 2: "shuffle", 32004: "lz4", 32008: "bitshuffle", 307: "filter 307"} {
		if got := FilterName(id); got != want {
			t.Errorf("FilterName(%d) = %q, want %q", id, got, want)
		}
	}
}

// TestEncodeShuffled checks that the bitshuffle codecs store a chunk given
// already transposed exactly as they store it given plain, for every
// element size, block size and chunk shape (full blocks, a partial block,
// leftover elements), and that the other codecs do not claim to take one.
func TestEncodeShuffled(t *testing.T) {
	for _, name := range Names() {
		c := mustNew(t, name, 4)
		_, ok := c.(Preshuffled)
		if want := strings.HasPrefix(name, "bs"); ok != want {
			t.Errorf("%s: implements Preshuffled: %v, want %v", name, ok, want)
		}
	}
	type codecCase struct {
		name  string
		codec func(es int) (Codec, error)
	}
	codecs := []codecCase{
		{"bslz4", func(es int) (Codec, error) { return New("bslz4", es, 0) }},
		{"bszstd", func(es int) (Codec, error) { return New("bszstd", es, 0) }},
		{"bslz4/block64", func(es int) (Codec, error) {
			return FromFilters([]Filter{{ID: FilterBitshuffle, Values: []uint32{0, 5, uint32(es), 64, bitshuffleLZ4}}}, es)
		}},
	}
	for _, cc := range codecs {
		for _, es := range []int{1, 2, 4, 8} {
			for _, n := range []int{0, 7, 8, 2048 * 4, 5000, 5005} {
				t.Run(fmt.Sprintf("%s/uint%d/%d", cc.name, 8*es, n), func(t *testing.T) {
					c, err := cc.codec(es)
					if err != nil {
						t.Fatal(err)
					}
					p := c.(Preshuffled)
					src := lowCounts(n, es, uint64(n+es))
					want, err := p.Encode([]byte("x"), src)
					if err != nil {
						t.Fatal(err)
					}
					shuffled, err := bitshuffle.AppendShuffle(nil, src, es, p.BlockElems())
					if err != nil {
						t.Fatal(err)
					}
					before := slices.Clone(shuffled)
					got, err := p.EncodeShuffled([]byte("x"), shuffled)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Errorf("EncodeShuffled gives %d bytes, Encode %d: they differ", len(got), len(want))
					}
					if !bytes.Equal(shuffled, before) {
						t.Error("EncodeShuffled changed its input")
					}
				})
			}
		}
	}
}

func TestEncodeShuffledZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	p := mustNew(t, "bslz4", 4).(Preshuffled)
	src, err := bitshuffle.AppendShuffle(nil, lowCounts(100_000+5, 4, 4), 4, p.BlockElems())
	if err != nil {
		t.Fatal(err)
	}
	enc := make([]byte, 0, p.Bound(len(src)))
	if allocs := testing.AllocsPerRun(5, func() { p.EncodeShuffled(enc, src) }); allocs != 0 {
		t.Errorf("%v allocations per EncodeShuffled, want 0", allocs)
	}
}

func TestFilterString(t *testing.T) {
	for _, tc := range []struct {
		f    Filter
		want string
	}{
		{Filter{ID: FilterBitshuffle, Name: "bitshuffle", Values: []uint32{0, 4, 4, 0, 2}}, "bitshuffle (filter 32008: 0 4 4 0 2)"},
		{Filter{ID: FilterDeflate, Values: []uint32{6}}, "deflate (filter 1: 6)"},
		{Filter{ID: 307}, "filter 307 (filter 307)"},
	} {
		if got := tc.f.String(); got != tc.want {
			t.Errorf("%+v: String() = %q, want %q", tc.f, got, tc.want)
		}
	}
}

// filterFields is a Filter without its String method, so that it prints
// its fields.
type filterFields Filter

// fields returns the filters as filterFields.
func fields(fs []Filter) []filterFields {
	out := make([]filterFields, len(fs))
	for i, f := range fs {
		out[i] = filterFields(f)
	}
	return out
}
