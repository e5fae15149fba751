package writer

import (
	"encoding/json"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestScanMetadata writes a scan's experiment, program and user metadata
// in both layouts and reads them back with h5py, each value with the
// type h5py gives it, and with Reader.Metadata.
func TestScanMetadata(t *testing.T) {
	python := pythonWith(t, "h5py")
	user := map[string]any{
		"operator": "ana", "proposal": 20261234, "energy_kev": 12.4, "cooled": true, "warm": false,
		"stage": map[string]any{"x_mm": 1.5, "motor": "smx", "turns": json.Number("3")},
		"rois":  []any{1, 2, 3}, "big": uint64(1) << 63,
	}
	for _, tc := range []struct{ layout, entry, sample string }{
		{LayoutNXtomo, "entry", "sample"}, {LayoutCXI, "entry_1", "sample_1"},
	} {
		t.Run(tc.layout, func(t *testing.T) {
			o := testOptions(t.TempDir(), tc.layout, pipeNone)
			o.ExperimentID = "20261234"
			o.Version = "1.2.3"
			o.Configuration = "output:\n  compression: none\n"
			o.UserMetadata = user
			writeTestFile(t, o, pipeNone)
			out, err := exec.Command(python, "-c", `
import sys, json, h5py, numpy
e = h5py.File(sys.argv[1], "r")[sys.argv[2]]
s = lambda x: x.decode() if isinstance(x, bytes) else x
def walk(g):
    out = {}
    for k, v in g.items():
        if isinstance(v, h5py.Group):
            out[k] = {"NX_class": s(v.attrs["NX_class"]), **walk(v)}
        else:
            x = v[()]
            out[k] = [s(x), "str"] if isinstance(x, bytes) else [x.item(), v.dtype.kind]
    return out
p = e["program_name"]
print(json.dumps({"experiment": s(e["experiment_identifier"][()]), "program": s(p[()]),
    "version": s(p.attrs["version"]), "configuration": s(p.attrs["configuration"]),
    "sample": s(e[sys.argv[3] + "/name"][()]),
    "user": walk(e["user_metadata"]), "class": s(e["user_metadata"].attrs["NX_class"])}))
`, o.Path, tc.entry, tc.sample).CombinedOutput()
			if err != nil {
				t.Fatalf("h5py: %v\n%s", err, out)
			}
			var got struct {
				Experiment, Program, Version, Configuration, Class, Sample string
				User                                                       map[string]any
			}
			dec := json.NewDecoder(strings.NewReader(string(out)))
			dec.UseNumber()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if got.Experiment != "20261234" || got.Program != "h5ingest" || got.Version != "1.2.3" || got.Sample != "test sample" ||
				!strings.Contains(got.Configuration, "compression: none") || got.Class != "NXcollection" {
				t.Errorf("read back %+v", got)
			}
			// Each value as h5py reads it: [value, numpy's kind of type].
			want := map[string]any{
				"operator":   []any{"ana", "str"},
				"proposal":   []any{json.Number("20261234"), "i"},
				"energy_kev": []any{json.Number("12.4"), "f"},
				"cooled":     []any{true, "b"},
				"warm":       []any{false, "b"},
				"rois":       []any{"[1,2,3]", "str"},
				"big":        []any{json.Number("9223372036854775808"), "u"},
				"stage": map[string]any{"NX_class": "NXcollection", "x_mm": []any{json.Number("1.5"), "f"},
					"motor": []any{"smx", "str"}, "turns": []any{json.Number("3"), "i"}},
			}
			if !reflect.DeepEqual(got.User, want) {
				t.Errorf("user metadata read by h5py as\n%v\nwant\n%v", got.User, want)
			}
			r, err := Open(o.Path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			m, err := r.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			wantMeta := Metadata{Title: "test scan", SampleName: "test sample", ExperimentID: "20261234",
				UserMetadata: map[string]any{"operator": "ana", "proposal": int64(20261234), "energy_kev": 12.4,
					"cooled": true, "warm": false, "rois": "[1,2,3]", "big": uint64(1) << 63,
					"stage": map[string]any{"x_mm": 1.5, "motor": "smx", "turns": int64(3)}},
				StartTime: o.StartTime}
			if !reflect.DeepEqual(m.UserMetadata, wantMeta.UserMetadata) || !m.StartTime.Equal(o.StartTime) ||
				m.EndTime.Before(time.Now().Add(-time.Minute)) {
				t.Errorf("Metadata() = %+v, want %+v, ending now", m, wantMeta)
			}
			wantMeta.EndTime = m.EndTime
			if !m.Equal(wantMeta) || !m.Equal(Metadata{Title: "test scan", SampleName: "test sample", ExperimentID: "20261234",
				UserMetadata: user, StartTime: o.StartTime, EndTime: m.EndTime}) {
				t.Errorf("Metadata() = %+v is not Equal to what was written", m)
			}
		})
	}
}

// TestMetadataEqual checks that Equal tells apart metadata that a file
// keeps apart, and no other.
func TestMetadataEqual(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 1500, time.UTC)
	base := Metadata{Title: "t", SampleName: "s", ExperimentID: "e", StartTime: t0, EndTime: t0.Add(time.Hour),
		UserMetadata: map[string]any{"n": 1, "a": []any{1, "x"}}}
	for _, tc := range []struct {
		name  string
		edit  func(*Metadata)
		equal bool
	}{
		{"same", func(*Metadata) {}, true},
		{"int64 for int, text for array", func(m *Metadata) { m.UserMetadata = map[string]any{"n": int64(1), "a": `[1,"x"]`} }, true},
		{"time within a microsecond", func(m *Metadata) { m.StartTime = t0.Add(-500) }, true},
		{"title", func(m *Metadata) { m.Title = "u" }, false},
		{"sample", func(m *Metadata) { m.SampleName = "" }, false},
		{"experiment", func(m *Metadata) { m.ExperimentID = "f" }, false},
		{"start", func(m *Metadata) { m.StartTime = t0.Add(time.Millisecond) }, false},
		{"no end", func(m *Metadata) { m.EndTime = time.Time{} }, false},
		{"float for int", func(m *Metadata) { m.UserMetadata = map[string]any{"n": 1.0, "a": `[1,"x"]`} }, false},
		{"no user metadata", func(m *Metadata) { m.UserMetadata = nil }, false},
	} {
		m := base
		tc.edit(&m)
		if got := base.Equal(m); got != tc.equal {
			t.Errorf("%s: Equal = %v, want %v", tc.name, got, tc.equal)
		}
	}
	if !(Metadata{}).Equal(Metadata{UserMetadata: map[string]any{}}) {
		t.Error("nil and empty user metadata differ")
	}
}

func TestScanMetadataBadKey(t *testing.T) {
	for _, key := range []string{"a/b", "", "."} {
		o := testOptions(t.TempDir(), LayoutNXtomo, pipeNone)
		o.UserMetadata = map[string]any{key: "x"}
		if w, err := Create(o); err == nil {
			w.Close()
			t.Errorf("user metadata key %q accepted", key)
		}
	}
}

func TestParseMetadata(t *testing.T) {
	for _, tc := range []struct {
		pairs []string
		want  map[string]any
		err   string
	}{
		{nil, nil, ""},
		{[]string{"energy_kev=12.4", "operator=ana", "flag=true", "off=false", "geom={\"d\":1,\"e\":2.5}", "note=", "eq=a=b", "nul=null"},
			map[string]any{"energy_kev": 12.4, "operator": "ana", "flag": true, "off": false,
				"geom": map[string]any{"d": int64(1), "e": 2.5}, "note": "", "eq": "a=b", "nul": "null"}, ""},
		// Whole numbers within 64 bits are integers; other numbers floats;
		// what is not one JSON value is text, as given.
		{[]string{"proposal=20261234", "neg=-7", "exp=1e3", "frac=2.0", "max=18446744073709551615",
			"huge=123456789012345678901234", "zeros=0042", "plus=+5", "word=abc", "quoted=\"123\"", "two=1 2",
			"rois=[1, 2.5, \"x\"]", "space= 5 "},
			map[string]any{"proposal": int64(20261234), "neg": int64(-7), "exp": 1000.0, "frac": 2.0, "max": uint64(18446744073709551615),
				"huge": "123456789012345678901234", "zeros": "0042", "plus": "+5", "word": "abc", "quoted": "123", "two": "1 2",
				"rois": `[1,2.5,"x"]`, "space": int64(5)}, ""},
		{[]string{"x"}, nil, `"x": want KEY=VALUE`},
		{[]string{"a/b=1"}, nil, `"a/b=1": user metadata key "a/b"`},
		{[]string{"=1"}, nil, `"=1": user metadata key ""`},
		{[]string{".=1"}, nil, `user metadata key "."`},
	} {
		got, err := ParseMetadata(tc.pairs)
		switch {
		case tc.err == "" && (err != nil || !reflect.DeepEqual(got, tc.want)):
			t.Errorf("ParseMetadata(%q) = %v, %v; want %v", tc.pairs, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseMetadata(%q): error %v, want one saying %q", tc.pairs, err, tc.err)
		}
	}
}

// TestScanTimes checks that a file records the start and end it is given,
// for both layouts, and its own clock's where none is given; and that
// Times says what was recorded.
func TestScanTimes(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	end := start.Add(90*time.Second + 654321*time.Microsecond)
	for _, layout := range []string{LayoutNXtomo, LayoutCXI} {
		for _, tc := range []struct {
			name string
			end  time.Time
		}{{"given", end}, {"at close", time.Time{}}} {
			t.Run(layout+"/"+tc.name, func(t *testing.T) {
				o := testOptions(t.TempDir(), layout, pipeNone)
				o.StartTime, o.EndTime = start, tc.end
				w, err := Create(o)
				if err != nil {
					t.Fatal(err)
				}
				if s, e := w.Times(); !s.Equal(start) || !e.IsZero() {
					t.Errorf("Times before Close = %v, %v; want %v and none", s, e, start)
				}
				before := time.Now()
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				s, e := w.Times()
				if tc.end.IsZero() {
					if e.Before(before) || e.After(time.Now()) {
						t.Errorf("end %v, want the clock's at Close (after %v)", e, before)
					}
				} else if !e.Equal(tc.end) {
					t.Errorf("end %v, want %v", e, tc.end)
				}
				r, err := Open(o.Path)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				m, err := r.Metadata()
				if err != nil {
					t.Fatal(err)
				}
				// The file keeps microseconds.
				if !m.StartTime.Equal(s.Truncate(time.Microsecond)) || !m.EndTime.Equal(e.Truncate(time.Microsecond)) {
					t.Errorf("file records %v to %v; Times says %v to %v", m.StartTime, m.EndTime, s, e)
				}
			})
		}
	}
}
