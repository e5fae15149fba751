package compress

import (
	"bytes"
	"testing"
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
