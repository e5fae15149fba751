package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"h5ingest/compress"
	"h5ingest/config"
	"h5ingest/scan/scantest"
	"h5ingest/writer"
)

func TestProfilesCommand(t *testing.T) {
	code, out := runCaptured(t, "profiles", "list")
	if code != exitOK {
		t.Fatalf("profiles list: exit status %d", code)
	}
	for _, name := range []string{"default", "pimega-135d-tomo", "pimega-135d-cdi", "pimega-540d"} {
		if !strings.Contains(out, name) {
			t.Errorf("profiles list lacks %s:\n%s", name, out)
		}
		// Every built-in profile passes check.
		if code, out := runCaptured(t, "profiles", "check", name); code != exitOK {
			t.Errorf("profiles check %s: exit status %d\n%s", name, code, out)
		}
	}

	file := filepath.Join(t.TempDir(), "b.yaml")
	if err := os.WriteFile(file, []byte("name: b\noutput:\n  compression: lz4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("H5INGEST_DETECTOR_DISTANCE_M", "0.25")
	code, out = runCaptured(t, "profiles", "show", file)
	if code != exitOK {
		t.Fatalf("profiles show: exit status %d", code)
	}
	for _, line := range []string{
		`output.compression +"lz4" +# profile ` + regexp.QuoteMeta(file),
		`detector.distance_m +0.25 +# environment H5INGEST_DETECTOR_DISTANCE_M`,
		`output.layout +"nxtomo" +# default`,
	} {
		if !regexp.MustCompile(line).MatchString(out) {
			t.Errorf("profiles show lacks a line like %q:\n%s", line, out)
		}
	}
	if n := strings.Count(out, "\n"); n != len(config.Keys) {
		t.Errorf("profiles show printed %d lines for %d keys", n, len(config.Keys))
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("output:\n  compresion: lz4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"profiles", "check", bad}, {"profiles", "show", "no-such-profile"}, {"profiles", "check"}} {
		if code, _ := runCaptured(t, args...); code != exitUsage {
			t.Errorf("%v: exit status %d, want %d", args, code, exitUsage)
		}
	}
}

// TestReplayUsesProfile runs replay with settings from a profile, then with
// flags over it.
func TestReplayUsesProfile(t *testing.T) {
	path, _ := simulate(t, "--frames", "7")
	dir := t.TempDir()
	profile := filepath.Join(t.TempDir(), "beamline.yaml")
	text := `name: b
detector:
  chips_x: 3
  chips_y: 2
  chip_width: 32
  chip_height: 16
output:
  directory: ` + dir + `
  template: "{scan}_m{module}.h5"
  compression: lz4
plan:
  sequence: "flats:1,darks:1,projections:4,flats:1"
  angle_end: 90
`
	if err := os.WriteFile(profile, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args   []string
		file   string
		keys   []int8
		filter int
	}{
		{[]string{"--scan-id", "s1"}, "s1_m0.h5", []int8{1, 2, 0, 0, 0, 0, 1}, compress.FilterLZ4},
		{[]string{"--scan-id", "s2", "--projections", "7", "--compression", "bslz4"}, "s2_m0.h5", []int8{0, 0, 0, 0, 0, 0, 0}, compress.FilterBitshuffle},
		{[]string{"-o", filepath.Join(dir, "named.h5"), "--sequence", "darks:2,projections:5"}, "named.h5", []int8{2, 2, 0, 0, 0, 0, 0}, compress.FilterLZ4},
	}
	for _, tt := range tests {
		args := append([]string{"replay", path, "--profile", profile}, tt.args...)
		if code, out := runCaptured(t, args...); code != exitOK {
			t.Fatalf("%v: exit status %d\n%s", tt.args, code, out)
		}
		r, err := writer.Open(filepath.Join(dir, tt.file))
		if err != nil {
			t.Fatal(err)
		}
		keys, err := r.ImageKey()
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(keys, tt.keys) || r.Filters[0].ID != tt.filter {
			t.Errorf("%v: image keys %v, filter %d; want %v, %d", tt.args, keys, r.Filters[0].ID, tt.keys, tt.filter)
		}
	}
	if code, _ := runCaptured(t, "replay", path, "--profile", profile); code != exitUsage {
		t.Errorf("replay with neither -o nor --scan-id: exit status %d, want %d", code, exitUsage)
	}
}

// TestReplayPositions writes a CDI scan's positions into the CXI
// translations, read back by h5py.
func TestReplayPositions(t *testing.T) {
	path, truth := simulate(t, "--scene", "cdi", "--frames", "4")
	csv := filepath.Join(t.TempDir(), "positions.csv")
	positions := [][3]float64{{0, 0, 0}, {1e-6, 0, 0}, {1e-6, 1e-6, 0}, {0, 1e-6, 2e-7}}
	text := "x,y,z\n"
	for _, p := range positions {
		text += fmt.Sprintf("%g,%g,%g\n", p[0], p[1], p[2])
	}
	if err := os.WriteFile(csv, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "cdi.h5")
	if code, stdout := runCaptured(t, "replay", path, "-o", out, "--layout", "cxi", "--positions", csv); code != exitOK {
		t.Fatalf("replay exit status %d\n%s", code, stdout)
	}
	r, err := writer.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Translation()
	r.Close()
	if err != nil || !slices.Equal(got, positions) {
		t.Errorf("translations %v, %v; want %v", got, err, positions)
	}
	scantest.CrossCheckWith(t, out, writer.LayoutCXI, truth, scantest.ExpectedStatus(truth), false, map[string]any{"translation": positions})
	if code, _ := runCaptured(t, "replay", path, "-o", out, "--overwrite", "--layout", "cxi", "--positions", csv, "--projections", "3"); code != exitUsage {
		t.Errorf("replay with 4 positions for 3 frames: exit status %d, want %d", code, exitUsage)
	}
}

// TestProfilesShowYAMLRoundTrip saves profiles show --yaml of every
// built-in profile, and of a file with the environment over it, to a
// file: profiles check passes it, and it loads as the profile shown.
func TestProfilesShowYAMLRoundTrip(t *testing.T) {
	dir := t.TempDir()
	mine := filepath.Join(dir, "mine.yaml")
	if err := os.WriteFile(mine, []byte("name: mine\ndetector:\n  modules: [{id: 2, x: 0, y: 0}]\noutput:\n  compression: lz4\n  flush_interval: 1500ms\n  processors: [{name: flatfield, to: stream}]\nsource:\n  idle_timeout: 3s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ref := range append(config.BuiltinNames(), mine) {
		t.Run(filepath.Base(ref), func(t *testing.T) {
			if ref == mine {
				t.Setenv("H5INGEST_DETECTOR_DISTANCE_M", "0.25")
			}
			code, out := runCaptured(t, "profiles", "show", ref, "--yaml")
			if code != exitOK {
				t.Fatalf("profiles show --yaml: exit status %d\n%s", code, out)
			}
			saved := filepath.Join(dir, filepath.Base(ref)+".saved.yaml")
			if err := os.WriteFile(saved, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			if code, out := runCaptured(t, "profiles", "check", saved); code != exitOK {
				t.Fatalf("profiles check of what show --yaml printed: exit status %d\n%s", code, out)
			}
			want, err := config.Load(ref, stages.Names())
			if err != nil {
				t.Fatal(err)
			}
			got, err := config.Load(saved, stages.Names())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("show --yaml loads as\n%+v\nwant\n%+v\n%s", got, want, out)
			}
			if ref == mine && !strings.Contains(out, "distance_m: 0.25 # environment H5INGEST_DETECTOR_DISTANCE_M") {
				t.Errorf("show --yaml does not say the environment set detector.distance_m:\n%s", out)
			}
		})
	}
}

// TestProfilesCheckNamesTheLine checks that profiles check of a broken
// profile names the file and the line, as editors read it (FILE:LINE:),
// and what is wrong there.
func TestProfilesCheckNamesTheLine(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int
		want       string
	}{
		{"indent", "output:\n  compression: lz4\n   level: 3\n", 3, "not valid YAML: mapping values are not allowed"},
		{"tab", "output:\n\tcompression: lz4\n", 2, "not valid YAML: found character that cannot start any token"},
		{"repeated key", "name: x\noutput:\n  level: 3\n  level: 4\n", 4, `mapping key "level" already defined at line 3`},
		{"unclosed quote", "name: x\ndescription: \"open\nplan:\n  darks: 1\n", 2, "not valid YAML: found unexpected end of stream"},
		{"unknown key", "name: x\noutput:\n  compresion: lz4\n", 3, `unknown key "output.compresion"`},
		{"scalar for a section", "name: x\noutput: 5\n", 2, `unknown key "output"`},
		{"wrong type", "name: x\noutput:\n  level: abc\n", 3, "key output.level: expected type 'int'"},
		{"out of range", "name: x\ndetector:\n  distance_m: -1\n", 3, "key detector.distance_m: -1, want metres"},
		{"unknown codec", "name: x\n\noutput:\n  layout: cxi\n  compression: nosuch\n", 5, `key output.compression: "nosuch", want one of`},
		{"list entry", "name: x\ndetector:\n  modules:\n    - {id: 0, x: 0, y: 0}\n    - {id: 1, x: 0, y: 0, z: 3}\n", 5, "detector.modules"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "broken.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := runProcess(t, "profiles", "check", path)
			prefix := fmt.Sprintf("profile %s:%d: ", path, tc.line)
			if code != exitUsage || !strings.Contains(stderr, prefix) || !strings.Contains(stderr, tc.want) {
				t.Errorf("profiles check: exit status %d, %q; want %d and %q ... %q", code, stderr, exitUsage, prefix, tc.want)
			}
		})
	}
}
