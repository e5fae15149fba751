package writer

import (
	"encoding/json"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

// TestScanMetadata writes a scan's experiment, program and user metadata
// in both layouts and reads them back with h5py.
func TestScanMetadata(t *testing.T) {
	python := pythonWith(t, "h5py")
	user := map[string]any{
		"operator": "ana", "proposal": float64(20261234), "cooled": true,
		"stage": map[string]any{"x_mm": 1.5, "motor": "smx"}, "rois": []any{1, 2, 3},
	}
	for _, tc := range []struct{ layout, entry string }{{LayoutNXtomo, "entry"}, {LayoutCXI, "entry_1"}} {
		t.Run(tc.layout, func(t *testing.T) {
			o := testOptions(t.TempDir(), tc.layout, pipeNone)
			o.ExperimentID = "20261234"
			o.Version = "1.2.3"
			o.Configuration = "output:\n  compression: none\n"
			o.UserMetadata = user
			writeTestFile(t, o, pipeNone)
			out, err := exec.Command(python, "-c", `
import sys, json, h5py
e = h5py.File(sys.argv[1], "r")[sys.argv[2]]
def walk(g):
    out = {}
    for k, v in g.items():
        if isinstance(v, h5py.Group):
            out[k] = {"NX_class": v.attrs["NX_class"].decode() if isinstance(v.attrs["NX_class"], bytes) else v.attrs["NX_class"], **walk(v)}
        else:
            x = v[()]
            out[k] = x.decode() if isinstance(x, bytes) else x.item()
    return out
p = e["program_name"]
s = lambda x: x.decode() if isinstance(x, bytes) else x
print(json.dumps({"experiment": s(e["experiment_identifier"][()]), "program": s(p[()]),
    "version": s(p.attrs["version"]), "configuration": s(p.attrs["configuration"]),
    "user": walk(e["user_metadata"]), "class": s(e["user_metadata"].attrs["NX_class"])}))
`, o.Path, tc.entry).CombinedOutput()
			if err != nil {
				t.Fatalf("h5py: %v\n%s", err, out)
			}
			var got struct {
				Experiment, Program, Version, Configuration, Class string
				User                                               map[string]any
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if got.Experiment != "20261234" || got.Program != "h5ingest" || got.Version != "1.2.3" ||
				!strings.Contains(got.Configuration, "compression: none") || got.Class != "NXcollection" {
				t.Errorf("read back %+v", got)
			}
			u := got.User
			stage, _ := u["stage"].(map[string]any)
			if u["operator"] != "ana" || u["proposal"] != float64(20261234) || u["cooled"] != float64(1) ||
				u["rois"] != "[1,2,3]" || stage["NX_class"] != "NXcollection" || stage["x_mm"] != 1.5 || stage["motor"] != "smx" {
				t.Errorf("user metadata read back as %v", u)
			}
		})
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
		{[]string{"energy_kev=12.4", "operator=ana", "flag=true", "geom={\"d\":1}", "note=", "eq=a=b", "nul=null"},
			map[string]any{"energy_kev": 12.4, "operator": "ana", "flag": true, "geom": map[string]any{"d": 1.0}, "note": "",
				"eq": "a=b", "nul": "null"}, ""},
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
