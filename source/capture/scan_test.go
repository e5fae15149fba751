package capture

import (
	"testing"

	"h5ingest/frame"
)

func TestFormatInfoRoundTrip(t *testing.T) {
	for _, f := range []frame.Format{
		{Geometry: frame.PiMega, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR},
		{Geometry: frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16}, Encoding: frame.Packed12, BitDepth: 12, Coding: frame.Binary},
	} {
		m := Metadata{}
		if err := m.Set(KeyGeometry, Geometry{Format: NewFormatInfo(f), Modules: []Module{{ID: 1, X: 2, Y: 3}}}); err != nil {
			t.Fatal(err)
		}
		var g Geometry
		if ok, err := m.Get(KeyGeometry, &g); !ok || err != nil {
			t.Fatalf("get geometry: %v, %v", ok, err)
		}
		got, err := g.Format.Format()
		if err != nil || got != f || g.Modules[0] != (Module{ID: 1, X: 2, Y: 3}) {
			t.Errorf("%v: back as %v, %v, modules %v", f, got, err, g.Modules)
		}
	}
	if _, err := (FormatInfo{Encoding: "zip"}).Format(); err == nil {
		t.Error("an unknown encoding gave a format")
	}
}
