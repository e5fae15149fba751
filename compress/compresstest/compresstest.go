// Package compresstest is the conformance suite of chunk codecs: a new
// compress.Codec, a facility's own or h5ingest's, runs it with one line,
//
//	compresstest.Codec(t, codec, elemSize, stages.ReadCodec)
//
// and it checks what the pipeline and the file's readers count on. The
// reader is how h5ingest reads a file's filter pipeline back: a
// registry's ReadCodec, which finds any registered codec by its filter,
// or compress.FromFilters for h5ingest's own codecs alone.
//
// Package compresstest is part of h5ingest's facility API; see
// docs/extending.md.
package compresstest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"h5ingest/compress"
)

// Codec checks c, a codec for elements of elemSize bytes: for images of
// many lengths (empty, one element, around the 8 KiB blocks bitshuffle
// codecs work in) and contents (sparse photon counts, all zeros, noise no
// codec compresses), Encode appends to dst and stays within Bound, Decode
// gives the image back, and a reader that knows only the file's filter
// pipeline (read of c.Filters()) decodes the chunk too.
func Codec(t *testing.T, c compress.Codec, elemSize int, read Reader) {
	t.Helper()
	reader, err := read(c.Filters(), elemSize)
	if err != nil {
		t.Fatalf("no reader decodes the filters %v: %v", c.Filters(), err)
	}
	for _, n := range []int{0, 1, 7, 8, 8192 / elemSize, 8192/elemSize + 1, 5005, 256 * 256} {
		for _, kind := range []string{"counts", "zeros", "noise"} {
			t.Run(fmt.Sprintf("%d/%s", n, kind), func(t *testing.T) {
				src := image(kind, n, elemSize)
				chunk := roundTrip(t, c, src)
				got, err := reader.Decode(nil, chunk)
				if err != nil || !bytes.Equal(got, src) {
					t.Errorf("the filters' reader decoded %d bytes (%v), want the %d-byte image", len(got), err, len(src))
				}
			})
		}
	}
}

// Reader returns a codec that decodes the chunks of a dataset of the
// filter pipeline filters and elemSize-byte pixels, as a file's reader
// does: registry.Registry.ReadCodec, compress.FromFilters.
type Reader func(filters []compress.Filter, elemSize int) (compress.Codec, error)

// roundTrip encodes src after a prefix in dst, checks Bound and the
// prefix, decodes it back and returns the chunk.
func roundTrip(t *testing.T, c compress.Codec, src []byte) []byte {
	t.Helper()
	prefix := []byte("prefix")
	enc, err := c.Encode(slices.Clone(prefix), src)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	if !bytes.HasPrefix(enc, prefix) {
		t.Fatal("Encode did not keep dst's contents")
	}
	chunk := enc[len(prefix):]
	if len(chunk) > c.Bound(len(src)) {
		t.Errorf("chunk of %d bytes exceeds Bound(%d) = %d", len(chunk), len(src), c.Bound(len(src)))
	}
	dec, err := c.Decode(slices.Clone(prefix), chunk)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !bytes.HasPrefix(dec, prefix) || !bytes.Equal(dec[len(prefix):], src) {
		t.Fatalf("decoded %d bytes, want the %d-byte image after dst's contents", len(dec)-len(prefix), len(src))
	}
	return chunk
}

// image returns n elements of elemSize bytes of a kind of content.
func image(kind string, n, elemSize int) []byte {
	b := make([]byte, n*elemSize)
	rng := rand.New(rand.NewPCG(uint64(n), uint64(elemSize)))
	switch kind {
	case "counts": // a photon-counting frame: mostly 0 to 3, a few bright pixels
		for i := 0; i < n; i++ {
			v := uint64(rng.IntN(4))
			if rng.IntN(100) == 0 {
				v = rng.Uint64() >> uint(64-8*elemSize)
			}
			for j := range elemSize {
				b[i*elemSize+j] = byte(v >> (8 * j))
			}
		}
	case "noise":
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	}
	return b
}
