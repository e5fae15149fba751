package frame

import (
	"slices"
	"strings"
	"testing"
)

func TestParseGeometry(t *testing.T) {
	for _, tc := range []struct {
		chips, size string
		want        Geometry
		err         string
	}{
		{"6x6", "256x256", PiMega, ""},
		{"3x2", "32x16", Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16}, ""},
		{"255x1", "65535x1", Geometry{ChipsX: 255, ChipsY: 1, ChipWidth: 65535, ChipHeight: 1}, ""},
		{"0x0", "256x256", Geometry{}, `chips "0x0": want two whole numbers from 1 to 255`},
		{"256x1", "256x256", Geometry{}, `chips "256x1"`},
		{"6x6", "256", Geometry{}, `chip size "256": want two whole numbers from 1 to 65535`},
		{"6x6", "65536x1", Geometry{}, `chip size "65536x1"`},
		{"6*6", "256x256", Geometry{}, `chips "6*6"`},
		{"6x", "256x256", Geometry{}, `chips "6x"`},
	} {
		g, err := ParseGeometry(tc.chips, tc.size)
		switch {
		case tc.err == "" && (err != nil || g != tc.want):
			t.Errorf("ParseGeometry(%q, %q) = %v, %v; want %v", tc.chips, tc.size, g, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseGeometry(%q, %q): error %v, want one saying %q", tc.chips, tc.size, err, tc.err)
		}
	}
}

func TestParseOrientation(t *testing.T) {
	g := Geometry{ChipsX: 2, ChipsY: 3, ChipWidth: 8, ChipHeight: 8}
	for _, tc := range []struct {
		in   string
		want Orientation
		err  string
	}{
		{"", nil, ""},
		{"alternate-rows", Orientation{0, 0, 180, 180, 0, 0}, ""},
		{"0,180,0,180,0,180", Orientation{0, 180, 0, 180, 0, 180}, ""},
		{" 0, 0,0,0,0,180", Orientation{0, 0, 0, 0, 0, 180}, ""},
		{"0,90,0,0,0,0", nil, "90"},
		{"0,0", nil, "6"},
		{"up", nil, `"up": want 0 or 180 per chip`},
	} {
		o, err := ParseOrientation(tc.in, g)
		switch {
		case tc.err == "" && (err != nil || !slices.Equal(o, tc.want)):
			t.Errorf("ParseOrientation(%q) = %v, %v; want %v", tc.in, o, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseOrientation(%q): error %v, want one saying %q", tc.in, err, tc.err)
		}
	}
}

func TestUsual(t *testing.T) {
	for _, e := range Encodings {
		f := Usual(PiMega, e)
		if err := f.Validate(); err != nil {
			t.Errorf("Usual(%v): %v", e, err)
		}
		if (f.Coding == LFSR) != (e == Bitplane) {
			t.Errorf("Usual(%v) coding %v, want LFSR for bitplane only", e, f.Coding)
		}
	}
	if f := Usual(PiMega, Packed12); f.BitDepth != 12 {
		t.Errorf("Usual(packed12) depth %d, want 12", f.BitDepth)
	}
}
