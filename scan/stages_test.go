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
	stages := scantest.Stages(t)
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

// TestCodecEntryWithoutRead: the older form of a facility's codec entry,
// no filter and no Read, whose codec writes a plugin's filter, is refused
// before any file is made, with a line saying what the entry must add;
// verify would find no codec to read its files.
func TestCodecEntryWithoutRead(t *testing.T) {
	stages := scantest.Stages(t)
	if err := stages.AddCodec(registry.Codec{Name: "oldform", Doc: "the older form of an entry",
		New: func(elemSize, _ int) (compress.Codec, error) {
			return plugin{compress.Filter{ID: 32015, Optional: true}}, nil
		}}); err != nil {
		t.Fatal(err)
	}
	p := testProfile(t, stages, scantest.SmallFormat, map[string]any{"output.compression": "oldform"})
	_, err := makeStages(stages, p, scantest.SmallFormat)
	if err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "Filter: 32015 and a Read") {
		t.Errorf("makeStages: %v, want a usage error saying to add Filter: 32015 and a Read", err)
	}
}

// plugin is a codec that stores chunks as they are under one plugin's
// filter id, as a facility's codec of the older form did.
type plugin struct{ f compress.Filter }

func (p plugin) Encode(dst, src []byte) ([]byte, error) { return append(dst, src...), nil }
func (p plugin) Decode(dst, src []byte) ([]byte, error) { return append(dst, src...), nil }
func (p plugin) Filters() []compress.Filter             { return []compress.Filter{p.f} }
func (p plugin) Bound(n int) int                        { return n }
