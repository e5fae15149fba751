package config

import (
	"encoding/json"
	"errors"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// testNames are the stages of h5ingest's own registry (stock),
// which these tests cannot import: it imports this package.
var testNames = Names{
	Transports: []string{"fabric"},
	Backends:   []string{"auto", "cpu", "cuda"},
	Codecs:     []string{"bslz4", "bszstd", "lz4", "deflate", "none"},
	Layouts:    []string{"nxtomo", "cxi"},
	CodecInfo: map[string]CodecInfo{
		"bslz4":   {Transpose: true, Stream: true},
		"bszstd":  {MinLevel: 1, MaxLevel: 22, Transpose: true},
		"lz4":     {Stream: true},
		"deflate": {MinLevel: 1, MaxLevel: 9},
		"none":    {Stream: true},
	},
	Transposers: []string{"auto", "cpu", "cuda"},
}

func writeProfile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "beamline.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDefaults(t *testing.T) {
	p, sources, err := LoadLayers(Layers{Names: testNames})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "default" || p.Detector.PixelSize != 55e-6 || len(p.Detector.ChipOrientation) != 0 ||
		p.Output.Compression != "bslz4" || p.Source.IdleTimeout != 10*time.Second || len(p.Detector.Modules) != 1 {
		t.Errorf("defaults = %+v", p)
	}
	for _, k := range Keys {
		if sources[k.Name] != FromDefault {
			t.Errorf("source of %s = %q, want default", k.Name, sources[k.Name])
		}
	}
}

func TestLayering(t *testing.T) {
	path := writeProfile(t, `
name: tomo-b
description: tomography at beamline B
detector:
  chips_x: 2
  chips_y: 2
  chip_orientation: [0, 180, 0, 180]
  distance_m: 0.35
output:
  compression: lz4
  flush_interval: 250ms
`)
	tests := []struct {
		name     string
		env      map[string]string
		flags    map[string]FlagValue
		distance float64
		orient   []int
		title    string
		codec    string
		sources  map[string]string
	}{
		{"file over defaults", nil, nil, 0.35, []int{0, 180, 0, 180}, "tomo-b", "lz4",
			map[string]string{"detector.distance_m": "profile " + path, "detector.pixel_size_m": FromDefault}},
		{"environment over file", map[string]string{
			"H5INGEST_DETECTOR_DISTANCE_M":       "2.5",
			"H5INGEST_DETECTOR_CHIP_ORIENTATION": "[180, 180, 0, 0]",
			"H5INGEST_NAME":                      "override",
		}, nil, 2.5, []int{180, 180, 0, 0}, "override", "lz4",
			map[string]string{"detector.distance_m": "environment H5INGEST_DETECTOR_DISTANCE_M"}},
		{"flags over environment", map[string]string{"H5INGEST_OUTPUT_COMPRESSION": "deflate"},
			map[string]FlagValue{"output.compression": {Flag: "--compression", Value: "none"}}, 0.35, []int{0, 180, 0, 180}, "tomo-b", "none",
			map[string]string{"output.compression": "flag --compression"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			p, sources, err := LoadLayers(Layers{Profile: path, Flags: tt.flags, Names: testNames})
			if err != nil {
				t.Fatal(err)
			}
			if p.Detector.Distance != tt.distance || !slices.Equal(p.Detector.ChipOrientation, tt.orient) ||
				p.Name != tt.title || p.Output.Compression != tt.codec {
				t.Errorf("got %+v", p)
			}
			if p.Detector.PixelSize != 55e-6 || p.Output.FlushInterval != 250*time.Millisecond {
				t.Errorf("pixel size %g, flush %v", p.Detector.PixelSize, p.Output.FlushInterval)
			}
			for k, want := range tt.sources {
				if sources[k] != want {
					t.Errorf("source of %s = %q, want %q", k, sources[k], want)
				}
			}
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name, text string
		env        map[string]string
		flags      map[string]FlagValue
		from       string // where the error says the value came from; "" means the profile file
		want       string
	}{
		{"unknown key", "detector:\n  pixel_sise_m: 1e-4\n", nil, nil, "",
			`unknown key "detector.pixel_sise_m" (known keys in detector: detector.model, detector.modules,`},
		{"unknown section", "writer:\n  x: 1\n", nil, nil, "", `unknown key "writer.x" (known sections and keys: name, description, detector, source, backend, output, plan, status, stream, metadata)`},
		{"stream address", "stream:\n  address: 127.0.0.1:31001\n", nil, nil, "", `key stream.address: "127.0.0.1:31001", want tcp://HOST:PORT`},
		{"stream port", "stream:\n  address: tcp://127.0.0.1:0\n", nil, nil, "", `key stream.address: "tcp://127.0.0.1:0", want a port of 1 to 65534`},
		{"stream of bszstd", "stream:\n  address: tcp://127.0.0.1:31001\noutput:\n  compression: bszstd\n", nil, nil, "",
			"key stream.address: set with output.compression bszstd, which Stream V2 cannot carry: want bslz4, lz4 or none"},
		{"stream every", "stream:\n  every: 0\n", nil, nil, "", "key stream.every: 0, want 1 or more"},
		{"duration without unit", "source:\n  connect_timeout: 30\n", nil, nil, "", "key source.connect_timeout: 30, want a duration with its unit, such as 5s or 200ms"},
		{"stream queue", "stream:\n  queue: 5000\n", nil, nil, "", "key stream.queue: 5000, want 1 to 1024"},
		{"status address", "status:\n  address: \"localhost:http\"\n", nil, nil, "", `key status.address: "localhost:http", want [HOST]:PORT or PORT with a port of 0 to 65535`},
		{"wrong type", "detector:\n  distance_m: far\n", nil, nil, "", "key detector.distance_m: "},
		{"wrong list type", "detector:\n  chip_orientation: flipped\n", nil, nil, "", "key detector.chip_orientation"},
		{"unknown module field", "detector:\n  modules: [{id: 0, xx: 4}]\n", nil, nil, "", "key detector.modules[0]: "},
		{"orientation", "detector:\n  chips_x: 2\n  chips_y: 1\n  chip_orientation: [0, 90]\n", nil, nil, "",
			"key detector.chip_orientation[1]: 90 degrees, want 0 or 180"},
		{"orientation count", "detector:\n  chip_orientation: [0, 180]\n", nil, nil, "",
			"key detector.chip_orientation: 2 chips listed, the module has 36 (chips_x x chips_y)"},
		{"pixel size", "detector:\n  pixel_size_m: 0\n", nil, nil, "", "key detector.pixel_size_m: 0, want a pitch in metres above 0 and below 0.01"},
		{"distance", "detector:\n  distance_m: -1\n", nil, nil, "", "key detector.distance_m: -1, want metres from 0 to 1000"},
		{"encoding", "detector:\n  encoding: gray\n", nil, nil, "", `key detector.encoding: unknown encoding "gray"`},
		{"depth", "detector:\n  bit_depth: 16\n", nil, nil, "", "key detector.bit_depth: bitplane bit depth 16: want 1, 6, 12 or 24"},
		{"overlapping modules", "detector:\n  modules: [{id: 0, x: 0, y: 0}, {id: 1, x: 10, y: 0}]\n", nil, nil, "",
			"key detector.modules[1]: at (10, 0) overlaps detector.modules[0] at (0, 0): a module is 1536 x 1536 pixels"},
		{"frame too large", "detector:\n  chips_x: 255\n  chips_y: 255\n  chip_width: 65528\n  chip_height: 65528\n", nil, nil, "",
			"key detector.chips_x: 255x255 chips of 65528x65528: payload of"},
		{"duplicate module", "detector:\n  modules: [{id: 1}, {id: 1, x: 1536}]\n", nil, nil, "", "key detector.modules[1]: id 1 listed twice"},
		{"port", "source:\n  port: 70000\n", nil, nil, "", "key source.port: 70000, want 1 to 65535"},
		{"timeout", "source:\n  idle_timeout: 0s\n", nil, nil, "", "key source.idle_timeout: 0s, want a duration above 0"},
		{"timeout text", "source:\n  idle_timeout: soon\n", nil, nil, "", "key source.idle_timeout: "},
		{"mode", "source:\n  mode: push\n", nil, nil, "", `key source.mode: "push", want one of write, send`},
		{"backend", "backend: fpga\n", nil, nil, "", `key backend: "fpga", want one of auto, cpu, cuda`},
		{"layout", "output:\n  layout: nexus\n", nil, nil, "", `key output.layout: "nexus", want one of nxtomo, cxi`},
		{"compression", "output:\n  compression: zip\n", nil, nil, "", `key output.compression: "zip", want one of bslz4, bszstd, lz4, deflate, none`},
		{"template", "output:\n  template: scan.nxs\n", nil, nil, "", `key output.template: "scan.nxs", want a file name ending in .h5, without /`},
		{"deflate level", "output:\n  compression: deflate\n  level: 12\n", nil, nil, "", "key output.level: 12 with deflate, want 0 (default) or 1 to 9"},
		{"level of a codec without", "output:\n  compression: bslz4\n  level: 3\n", nil, nil, "", "key output.level: 3 with bslz4, which takes no level: want 0"},
		{"zstd level", "output:\n  compression: bszstd\n  level: 30\n", nil, nil, "", "key output.level: 30 with bszstd, want 0 (default) or 1 to 22"},
		{"backend shuffle", "output:\n  compression: lz4\n  backend_shuffle: true\n", nil, nil, "",
			"key output.backend_shuffle: true with compression lz4, which has no bit transpose: want bslz4 or bszstd, or false"},
		{"backend shuffle flag", "output:\n  compression: deflate\n", nil, map[string]FlagValue{"output.backend_shuffle": {Flag: "--backend-shuffle", Value: true}},
			"flag --backend-shuffle", "key output.backend_shuffle: true with compression deflate"},
		{"plan", "plan:\n  darks: 3\n", nil, nil, "", "key plan.projections: 0 with darks or flats, want the projections too"},
		{"sequence", "plan:\n  sequence: \"darks:3,whites:4\"\n", nil, nil, "", `key plan.sequence: "whites:4": want kind:count`},
		{"angles", "plan:\n  angle_end: .inf\n", nil, nil, "", "key plan.angle_start: angles 0 to +Inf: must be finite (with plan.angle_end)"},
		{"angles whose rotation overflows", "name: x\n", nil, map[string]FlagValue{
			"plan.angle_start": {Value: -1.7e308, From: "request plan.angle_start"}, "plan.angle_end": {Value: 1.7e308, From: "request plan.angle_end"},
			"plan.projections": {Value: 3, From: "request plan.projections"}},
			"request plan.angle_start", "key plan.angle_start: angles -1.7e+308 to 1.7e+308: the rotation between them is not a finite number of degrees (with plan.angle_end)"},
		{"not yaml", "detector: [unclosed\n", nil, nil, "", "not valid YAML"},
		{"fraction", "plan:\n  darks: 1.5\n  projections: 10\n", nil, nil, "", "key plan.darks: 1.5, want a whole number"},
		{"fraction port", "source:\n  port: 7100.9\n", nil, nil, "", "key source.port: 7100.9, want a whole number"},
		{"fraction environment", "name: x\n", map[string]string{"H5INGEST_PLAN_FLATS": "2.5"}, nil,
			"environment H5INGEST_PLAN_FLATS", "key plan.flats: 2.5, want a whole number"},
		{"plan too long", "plan:\n  projections: 1000000000\n", nil, nil, "", "key plan.projections: plan step 1: 1000000000 frames: more than the 10000000 frames one scan may hold"},
		{"sequence too long", "plan:\n  sequence: \"darks:10,projections:9999999\"\n", nil, nil, "", "key plan.sequence: plan step 2: 9999999 frames: more than"},
		{"misspelt environment", "name: x\n", map[string]string{"H5INGEST_DETECTOR_DISTANCE": "0.5"}, nil,
			"environment H5INGEST_DETECTOR_DISTANCE", "no such key (known in its section: H5INGEST_DETECTOR_MODEL, "},
		{"unknown environment section", "name: x\n", map[string]string{"H5INGEST_WRITER_LEVEL": "3"}, nil,
			"environment H5INGEST_WRITER_LEVEL", "no such key (known sections: NAME, DESCRIPTION, BACKEND,"},
		{"bad environment", "name: x\n", map[string]string{"H5INGEST_DETECTOR_DISTANCE_M": "near"}, nil,
			"environment H5INGEST_DETECTOR_DISTANCE_M", "key detector.distance_m: "},
		{"bad flag", "name: x\n", nil, map[string]FlagValue{"output.layout": {Flag: "--layout", Value: "nexus"}},
			"flag --layout", `key output.layout: "nexus", want one of nxtomo, cxi`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			path := writeProfile(t, tt.text)
			_, _, err := LoadLayers(Layers{Profile: path, Flags: tt.flags, Names: testNames})
			if err == nil {
				t.Fatal("loaded")
			}
			from := tt.from
			if from == "" {
				from = "profile " + path
			}
			// A profile file's errors name the line too, FILE:LINE: (see
			// TestErrorLines).
			if !regexp.MustCompile(`^`+regexp.QuoteMeta(from)+`(:\d+)?: `).MatchString(err.Error()) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\nwant it to start with %q and contain %q", err, from, tt.want)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), testNames); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Load("pimega-9000", testNames); err == nil || !strings.Contains(err.Error(), "no built-in profile of that name (built in: default, pimega-135d-cdi") {
		t.Errorf("unknown built-in: %v", err)
	}
}

func TestBuiltinProfiles(t *testing.T) {
	names := BuiltinNames()
	for _, want := range []string{"default", "pimega-135d-tomo", "pimega-135d-cdi", "pimega-540d"} {
		if !slices.Contains(names, want) {
			t.Errorf("built-in profiles %v lack %s", names, want)
		}
	}
	for _, name := range names {
		p, sources, err := LoadLayers(Layers{Profile: name, Names: testNames})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if p.Name != name || sources["name"] != "profile "+name+" (built in)" {
			t.Errorf("%s: name %q from %q", name, p.Name, sources["name"])
		}
	}
	p, err := Load("pimega-540d", testNames)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Detector.ModuleIDs(); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("540D modules %v", got)
	}
	plan, err := p.Plan.Plan()
	if err != nil || plan.Frames() != 2040 {
		t.Errorf("540D plan %v, %v", plan, err)
	}
	tomo, err := Load("pimega-135d-tomo", testNames)
	if err != nil {
		t.Fatal(err)
	}
	plan, err = tomo.Plan.Plan()
	if err != nil || plan.String() != "20 darks, 20 flats, 2000 projections, 20 flats over 0..180 degrees" {
		t.Errorf("135D tomography plan %v, %v", plan, err)
	}
}

func TestFileName(t *testing.T) {
	o := Output{Directory: "/data/b", Template: "{scan}_{date}_m{module}.h5"}
	got, err := o.FileName("s042", 3, time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	if want := "/data/b/s042_20261122_m3.h5"; got != want || err != nil {
		t.Errorf("FileName = %q, %v, want %q", got, err, want)
	}
	// A scan id cannot take the file out of the output directory.
	for _, id := range []string{"../x", "..", ".", "a/b", "/etc/x", "x/../../y", "a..b", "nul\x00"} {
		if name, err := o.FileName(id, 0, time.Now()); !errors.Is(err, ErrScanID) {
			t.Errorf("scan id %q: %q, %v, want ErrScanID", id, name, err)
		}
	}
	for _, id := range []string{"s-1_b.2", ".hidden", "a b"} {
		if name, err := o.FileName(id, 0, time.Now()); err != nil || path.Dir(name) != "/data/b" {
			t.Errorf("scan id %q: %q, %v, want a file in /data/b", id, name, err)
		}
	}
}

func TestKeysCoverProfile(t *testing.T) {
	// Every key of the built-in defaults is documented in Keys, and back.
	var flat []string
	for k := range flatten(toMap(Default())) {
		flat = append(flat, k)
	}
	slices.Sort(flat)
	var names []string
	for _, k := range Keys {
		names = append(names, k.Name)
	}
	slices.Sort(names)
	if !slices.Equal(flat, names) {
		t.Errorf("defaults have keys %v,\nKeys documents %v", flat, names)
	}
}

// TestDocsListEveryKey keeps docs/profiles.md in step with the schema.
func TestDocsListEveryKey(t *testing.T) {
	doc, err := os.ReadFile("../docs/profiles.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys {
		if !strings.Contains(string(doc), "| `"+k.Name+"` |") {
			t.Errorf("docs/profiles.md has no row for %s", k.Name)
		}
	}
}

func TestPlanPositions(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "pos.csv")
	if err := os.WriteFile(csv, []byte("x,y\n0,0\n1e-6,0\n2e-6,1e-6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(writeProfile(t, "plan:\n  positions: "+csv+"\n"), testNames)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := p.Plan.Plan()
	if err != nil {
		t.Fatal(err)
	}
	if pl.Frames() != 3 || len(pl.Positions) != 3 || pl.Positions[2] != [3]float64{2e-6, 1e-6, 0} {
		t.Errorf("plan %+v: want 3 frames at the positions", pl)
	}
	for _, tt := range []struct{ text, want string }{
		{"plan:\n  positions: " + csv + "\n  projections: 5\n", "key plan.positions: 3 positions in " + csv + " for a plan of 5 frames"},
		{"plan:\n  positions: " + filepath.Join(dir, "none.csv") + "\n", "key plan.positions: open " + filepath.Join(dir, "none.csv")},
	} {
		if _, err := Load(writeProfile(t, tt.text), testNames); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("error %v, want %q", err, tt.want)
		}
	}
}

// TestEnvTestVariables checks that the test suite's own variables
// (H5INGEST_TEST_*), which name no key, do not stop a profile loading.
func TestEnvTestVariables(t *testing.T) {
	t.Setenv("H5INGEST_TEST_AS_COMMAND", "1")
	t.Setenv("H5INGEST_OUTPUT_LEVEL", "0")
	if _, _, err := LoadLayers(Layers{Profile: "default", Names: testNames}); err != nil {
		t.Errorf("with H5INGEST_TEST_AS_COMMAND set: %v", err)
	}
}

// TestValuesLoadAgain checks that a profile's Values, written as a file
// (JSON, which YAML reads), load as the same profile: what a capture
// records of the profile a scan ran with is a profile again.
func TestValuesLoadAgain(t *testing.T) {
	for _, name := range BuiltinNames() {
		p, err := Load(name, testNames)
		if err != nil {
			t.Fatal(err)
		}
		p.Source.IdleTimeout = 1500 * time.Millisecond
		js, err := json.Marshal(p.Values())
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "again.yaml")
		if err := os.WriteFile(file, js, 0o644); err != nil {
			t.Fatal(err)
		}
		again, err := Load(file, testNames)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, js)
		}
		if !reflect.DeepEqual(again, p) {
			t.Errorf("%s: loads again as\n%+v\nwant\n%+v", name, again, p)
		}
	}
}

// TestText checks that every key of a profile has its value as text, in
// the form profiles show prints.
func TestText(t *testing.T) {
	p := Default()
	p.Detector.Modules = []Module{{ID: 0, X: 0, Y: 0}, {ID: 1, X: 1536, Y: 0}}
	p.Detector.ChipOrientation = []int{0, 180}
	p.Output.FlushInterval = 1500 * time.Millisecond
	p.Description = `a "quoted" one`
	got := p.Text()
	for _, k := range Keys {
		if _, ok := got[k.Name]; !ok {
			t.Errorf("key %s has no text", k.Name)
		}
	}
	for key, want := range map[string]string{
		"detector.modules":          "[{id: 0, x: 0, y: 0}, {id: 1, x: 1536, y: 0}]",
		"detector.chip_orientation": "[0, 180]",
		"output.flush_interval":     "1.5s",
		"description":               `"a \"quoted\" one"`,
		"detector.chips_x":          "6",
	} {
		if got[key] != want {
			t.Errorf("%s = %s, want %s", key, got[key], want)
		}
	}
}
