package compress_test

import (
	"fmt"
	"testing"

	"h5ingest/compress"
	"h5ingest/compress/compresstest"
)

// TestCodecsConform runs the conformance suite on every codec, at every
// element size a detector's frames have.
func TestCodecsConform(t *testing.T) {
	for _, name := range compress.Names() {
		for _, es := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/uint%d", name, 8*es), func(t *testing.T) {
				c, err := compress.New(name, es, 0)
				if err != nil {
					t.Fatal(err)
				}
				compresstest.Codec(t, c, es, compress.FromFilters)
			})
		}
	}
}
