package sim

import (
	"slices"
	"strings"
	"testing"
)

func TestParseFault(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want FaultSpec
		err  string
	}{
		{"", FaultSpec{}, ""},
		{"  ", FaultSpec{}, ""},
		{"0.01", FaultSpec{Rate: 0.01}, ""},
		{"1.0", FaultSpec{Rate: 1}, ""},
		{"1e-3", FaultSpec{Rate: 0.001}, ""},
		{"3,8, 0", FaultSpec{Frames: []int{3, 8, 0}}, ""},
		{"9", FaultSpec{Frames: []int{9}}, ""},
		{"10", FaultSpec{}, `frame "10": want frame numbers from 0 to 9`},
		{"-1", FaultSpec{}, `frame "-1"`},
		{"1.5", FaultSpec{}, "want a rate from 0 to 1"},
		{"x.y", FaultSpec{}, "want a rate from 0 to 1"},
		{"3,,4", FaultSpec{}, `frame ""`},
	} {
		got, err := ParseFault(tc.in, 10)
		switch {
		case tc.err == "" && (err != nil || got.Rate != tc.want.Rate || !slices.Equal(got.Frames, tc.want.Frames)):
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseFault(%q): error %v, want one saying %q", tc.in, err, tc.err)
		}
	}
}

func TestParseModules(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []uint16
		err  string
	}{
		{"0,1,2,3", []uint16{0, 1, 2, 3}, ""},
		{" 7", []uint16{7}, ""},
		{"65535,0", []uint16{65535, 0}, ""},
		{"0,0", nil, "module 0 listed twice"},
		{"65536", nil, `"65536" is not a module id`},
		{"a,b", nil, `"a" is not a module id`},
		{"", nil, `"" is not a module id`},
	} {
		got, err := ParseModules(tc.in)
		switch {
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("ParseModules(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseModules(%q): error %v, want one saying %q", tc.in, err, tc.err)
		}
	}
}
