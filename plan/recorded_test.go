package plan

import "testing"

func TestRecorded(t *testing.T) {
	p := Tomo(2, 3, 4, 0, 180)
	for _, tc := range []struct {
		name   string
		keys   []int8
		angles []float64
		want   string
	}{
		{"plan", p.ImageKeys(), p.Angles(), "2 darks, 3 flats, 4 projections at 0 to 135 degrees"},
		{"no rotation", []int8{Projection, Projection, Projection}, []float64{7, 7, 7}, "0 darks, 0 flats, 3 projections all at 7 degrees (no rotation recorded)"},
		{"descending", []int8{DarkField, Projection, Projection}, []float64{99, 30, -10}, "1 darks, 0 flats, 2 projections at -10 to 30 degrees"},
		{"short angles", []int8{Projection, Projection, Invalid}, []float64{5}, "0 darks, 0 flats, 2 projections all at 5 degrees (no rotation recorded)"},
		{"none", nil, nil, "0 darks, 0 flats, 0 projections at 0 to 0 degrees"},
	} {
		if got := Recorded(tc.keys, tc.angles); got != tc.want {
			t.Errorf("%s: Recorded = %q, want %q", tc.name, got, tc.want)
		}
	}
}
