package plan

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestTomo(t *testing.T) {
	tests := []struct {
		name   string
		plan   Plan
		keys   []int8
		angles []float64
	}{
		{"darks flats projections", Tomo(2, 1, 4, 0, 180),
			[]int8{2, 2, 1, 0, 0, 0, 0},
			[]float64{0, 0, 0, 0, 45, 90, 135}},
		{"projections only", Tomo(0, 0, 3, 10, 40),
			[]int8{0, 0, 0},
			[]float64{10, 20, 30}},
		{"flats before and after", Plan{Steps: []Step{{FlatField, 1}, {Projection, 2}, {FlatField, 1}}, AngleStart: -90, AngleEnd: 90},
			[]int8{1, 0, 0, 1},
			[]float64{-90, -90, 0, -90}},
		{"empty", Tomo(0, 0, 0, 0, 180), []int8{}, []float64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.plan.Validate(); err != nil {
				t.Fatal(err)
			}
			if n := tt.plan.Frames(); n != len(tt.keys) {
				t.Errorf("Frames = %d, want %d", n, len(tt.keys))
			}
			if got := tt.plan.ImageKeys(); !slices.Equal(got, tt.keys) {
				t.Errorf("ImageKeys = %v, want %v", got, tt.keys)
			}
			if got := tt.plan.Angles(); !slices.Equal(got, tt.angles) {
				t.Errorf("Angles = %v, want %v", got, tt.angles)
			}
		})
	}
	if got, want := Tomo(10, 5, 180, 0, 180).String(), "10 darks, 5 flats, 180 projections over 0..180 degrees"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	for _, bad := range []Plan{
		{Steps: []Step{{Projection, -1}}},
		{Steps: []Step{{Invalid, 3}}},
		{Steps: []Step{{Projection, MaxFrames + 1}}},
		{Steps: []Step{{DarkField, 10}, {Projection, MaxFrames - 5}}},
		{Steps: []Step{{DarkField, 1}, {Projection, math.MaxInt}}}, // a sum that would wrap
	} {
		if bad.Validate() == nil {
			t.Errorf("plan %+v accepted", bad)
		}
	}
	if err := (Plan{Steps: []Step{{DarkField, 10}, {Projection, MaxFrames - 10}}}).Validate(); err != nil {
		t.Errorf("a plan of MaxFrames frames: %v", err)
	}
}

func TestParseSequence(t *testing.T) {
	steps, err := ParseSequence("flats:2, darks:1,projections:30,flats:0")
	if err != nil {
		t.Fatal(err)
	}
	want := []Step{{FlatField, 2}, {DarkField, 1}, {Projection, 30}, {FlatField, 0}}
	if !slices.Equal(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
	for _, bad := range []string{"", "whites:3", "darks", "darks:-1", "darks:1.5", "darks:01", "projections:3,"} {
		if _, err := ParseSequence(bad); err == nil {
			t.Errorf("ParseSequence(%q) succeeded", bad)
		}
	}
}

func TestReadPositions(t *testing.T) {
	text := "# scan 42\nx,y,z\n1e-6, 2e-6\n\n3e-6,4e-6,5e-6\n"
	pos, err := ReadPositions(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := [][3]float64{{1e-6, 2e-6, 0}, {3e-6, 4e-6, 5e-6}}
	if !slices.Equal(pos, want) {
		t.Errorf("positions %v, want %v", pos, want)
	}
	bad := []struct{ text, want string }{
		{"1,2\n3\n", "line 2: 1 fields, want x,y or x,y,z in metres"},
		{"1,2\nx,y\n", `line 2: "x" is not a position in metres`},
		{"1,2,3,4\n", "line 1: 4 fields"},
		{"1,NaN\n", `line 1: "NaN" is not a position in metres`},
		{"x,y\nx,y\n", `line 2: "x" is not a position in metres`},
		{"# nothing\n", "no positions"},
	}
	for _, tt := range bad {
		_, err := ReadPositions(strings.NewReader(tt.text))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ReadPositions(%q): error %v, want %q", tt.text, err, tt.want)
		}
	}
}

// TestValidateAngles: a plan whose angles, or the rotation between them,
// are not finite is refused, so that no file records NaN or infinite
// angles; angles near the largest float64 whose difference is finite
// give finite angles.
func TestValidateAngles(t *testing.T) {
	for _, tc := range []struct {
		name       string
		start, end float64
		ok         bool
	}{
		{"ordinary", 0, 180, true},
		{"near the largest, close", 1.7e308, 1.79e308, true},
		{"a rotation of 1e308", -0.5e308, 0.5e308, true},
		{"largest to zero", -math.MaxFloat64, 0, true},
		{"both signs of the largest", -1.7e308, 1.7e308, false},
		{"downward overflow", 1.7e308, -1.7e308, false},
		{"largest to lowest", math.MaxFloat64, -math.MaxFloat64, false},
		{"NaN start", math.NaN(), 180, false},
		{"infinite end", 0, math.Inf(1), false},
	} {
		p := Tomo(0, 0, 5, tc.start, tc.end)
		err := p.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: %g to %g: %v, want ok %v", tc.name, tc.start, tc.end, err, tc.ok)
		}
		if err != nil {
			continue
		}
		for i, a := range p.Angles() {
			if math.IsNaN(a) || math.IsInf(a, 0) {
				t.Errorf("%s: angle %d is %g", tc.name, i, a)
			}
		}
	}
}
