package frame

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseGeometry parses a module's chip grid as a command line spells it:
// chips "CXxCY" (each 1 to 255, such as 6x6) and chipSize "WxH" (each 1 to
// 65535, such as 256x256). The error names the part that is wrong.
func ParseGeometry(chips, chipSize string) (Geometry, error) {
	var g Geometry
	var err error
	if g.ChipsX, g.ChipsY, err = parsePair(chips, 255, "6x6"); err != nil {
		return g, fmt.Errorf("chips %q: %w", chips, err)
	}
	if g.ChipWidth, g.ChipHeight, err = parsePair(chipSize, 65535, "256x256"); err != nil {
		return g, fmt.Errorf("chip size %q: %w", chipSize, err)
	}
	return g, nil
}

// parsePair parses "AxB" with both sides 1 to max; example is one for
// messages.
func parsePair(s string, max int, example string) (int, int, error) {
	a, b, ok := strings.Cut(s, "x")
	x, err1 := strconv.Atoi(a)
	y, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || x < 1 || y < 1 || x > max || y > max {
		return 0, 0, fmt.Errorf("want two whole numbers from 1 to %d joined by x, such as %s", max, example)
	}
	return x, y, nil
}

// ParseOrientation parses the chip orientations of a module of geometry
// g: empty (every chip upright), a comma list of 0 or 180 per chip, or
// "alternate-rows" (every other chip row turned by 180 degrees, the first
// upright).
func ParseOrientation(s string, g Geometry) (Orientation, error) {
	switch s {
	case "":
		return nil, nil
	case "alternate-rows":
		o := make(Orientation, g.Chips())
		for k := range o {
			if k/g.ChipsX%2 == 1 {
				o[k] = 180
			}
		}
		return o, nil
	}
	var o Orientation
	for _, f := range strings.Split(s, ",") {
		deg, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q: want 0 or 180 per chip, or alternate-rows", f)
		}
		o = append(o, deg)
	}
	if err := o.Validate(g.Chips()); err != nil {
		return nil, err
	}
	return o, nil
}

// Usual returns the format of frames of geometry g in encoding e with the
// counter depth and coding that encoding usually carries: 24-bit LFSR
// counters in bit planes (Medipix3RX), and binary counters as wide as the
// encoding's pixels otherwise.
func Usual(g Geometry, e Encoding) Format {
	f := Format{Geometry: g, Encoding: e, Coding: Binary}
	switch e {
	case Bitplane:
		f.BitDepth, f.Coding = 24, LFSR
	case Packed12:
		f.BitDepth = 12
	case Packed24:
		f.BitDepth = 24
	case U16LE:
		f.BitDepth = 16
	case U32LE:
		f.BitDepth = 32
	}
	return f
}
