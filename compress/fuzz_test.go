package compress

import (
	"bytes"
	"testing"

	"github.com/pierrec/lz4/v4"

	"h5ingest/compress/internal/clz4"
)

// fuzzDecode checks that the codec's decoder never panics, and that what it
// accepts encodes and decodes back to the same chunk.
func fuzzDecode(f *testing.F, name string) {
	for _, es := range []int{2, 4} {
		c := mustNew(f, name, es)
		for _, n := range []int{0, 7, 8, 100, 5005} {
			enc, err := c.Encode(nil, lowCounts(n, es, uint64(n)))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(enc)
		}
	}
	c := mustNew(f, name, 4)
	f.Fuzz(func(t *testing.T, src []byte) {
		dec, err := c.Decode(nil, src)
		if err != nil {
			return
		}
		enc, err := c.Encode(nil, dec)
		if err != nil {
			t.Fatalf("decoded chunk does not encode: %v", err)
		}
		again, err := c.Decode(nil, enc)
		if err != nil || !bytes.Equal(again, dec) {
			t.Fatalf("decoded chunk does not round-trip: %v", err)
		}
	})
}

func FuzzDecodeBSLZ4(f *testing.F)   { fuzzDecode(f, "bslz4") }
func FuzzDecodeBSZstd(f *testing.F)  { fuzzDecode(f, "bszstd") }
func FuzzDecodeLZ4(f *testing.F)     { fuzzDecode(f, "lz4") }
func FuzzDecodeDeflate(f *testing.F) { fuzzDecode(f, "deflate") }

// FuzzLZ4BlockAgainstC holds the LZ4 block compressor and decoder to the
// C library on any input: a block under 64 KiB compresses to the C
// library's bytes; the C decoder reads back what fastLZ4 wrote, and the
// codec's decoder what the C library wrote, byte for byte.
func FuzzLZ4BlockAgainstC(f *testing.F) {
	if !clz4.Available {
		f.Skip("built without cgo: the C LZ4 library is not linked")
	}
	for _, b := range lz4TestBlocks() {
		if len(b) < 10000 {
			f.Add(b)
		}
	}
	var c fastLZ4
	f.Fuzz(func(t *testing.T, src []byte) {
		ours := c.compress(make([]byte, 0, lz4.CompressBlockBound(len(src))), src)
		theirs, err := clz4.Compress(src, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(src) < 64<<10 && !bytes.Equal(ours, theirs) {
			t.Fatalf("%d bytes: fastLZ4 made %d bytes, the C library %d", len(src), len(ours), len(theirs))
		}
		back, err := clz4.Decompress(ours, len(src))
		if err != nil || !bytes.Equal(back, src) {
			t.Fatalf("%d bytes: the C library does not read back fastLZ4's block: %v", len(src), err)
		}
		got := make([]byte, len(src))
		if err := uncompressLZ4(got, theirs); err != nil || !bytes.Equal(got, src) {
			t.Fatalf("%d bytes: the codec's decoder does not read back the C library's block: %v", len(src), err)
		}
	})
}
