package scan

import (
	"errors"
	"strings"
	"testing"

	"h5ingest/compress"
	"h5ingest/registry"
	"h5ingest/scan/scantest"
)

// TestCodecReadsItsOwn: a scan whose codec's entry cannot read back the
// filters the codec writes is refused before any file is made, naming
// the codec; h5ingest's own codecs all read theirs.
func TestCodecReadsItsOwn(t *testing.T) {
	stages := testStages(t)
	if err := stages.AddCodec(registry.Codec{Name: "blind", Doc: "writes what it cannot read",
		New:    func(elemSize, _ int) (compress.Codec, error) { return compress.New("deflate", elemSize, 1) },
		Filter: compress.FilterDeflate,
		Read: func([]compress.Filter, int) (compress.Codec, error) {
			return nil, errors.New("unknown filter values")
		}}); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, e := range stages.Entries() {
		if e.Kind != "codec" {
			continue
		}
		checked++
		p := testProfile(t, stages, scantest.SmallFormat, map[string]any{"output.compression": e.Name})
		_, err := makeStages(stages, p, scantest.SmallFormat)
		switch {
		case e.Name == "blind" && (err == nil || !strings.Contains(err.Error(), "codec blind cannot read back the filters it writes")):
			t.Errorf("codec blind: %v, want it refused", err)
		case e.Name != "blind" && err != nil:
			t.Errorf("codec %s: %v", e.Name, err)
		}
	}
	if checked < 2 {
		t.Errorf("%d codecs checked, want h5ingest's and blind", checked)
	}
}
