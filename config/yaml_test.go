package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestErrorLines checks the line a profile file's error names: the
// line of the key it sets, through sections and list entries, as
// LoadLayers prints it (FILE:LINE:).
func TestErrorLines(t *testing.T) {
	const text = "name: x\n\ndetector:\n  Distance_M: -1\n  modules:\n    - {id: 0, x: 0, y: 0}\n    -\n      id: 1\n      x: 1536\n      y: 0\noutput:\n  level: 3\n"
	doc, err := parseDoc([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		line int
	}{
		{"name", 1},
		{"detector.distance_m", 4},
		{"detector.modules", 5},
		{"detector.modules[0].x", 6},
		{"detector.modules[1].x", 9},
		{"detector.modules[5].x", 5}, // no such entry: the list
		{"output.level", 12},
		{"output.layout", 11}, // not in the file: its section
		{"plan.darks", 0},
	} {
		if got := doc.line(tc.key); got != tc.line {
			t.Errorf("line of %s = %d, want %d", tc.key, got, tc.line)
		}
	}
	path := writeProfile(t, text)
	if _, err := Load(path, testNames); err == nil || !strings.HasPrefix(err.Error(), "profile "+path+":4: key detector.distance_m: ") {
		t.Errorf("Load: %v, want the error at line 4", err)
	}
}

// TestYAMLRoundTrip checks that a profile written by YAML loads as the
// same profile, for every built-in profile.
func TestYAMLRoundTrip(t *testing.T) {
	for _, name := range BuiltinNames() {
		p, sources, err := LoadLayers(Layers{Profile: name, Names: testNames})
		if err != nil {
			t.Fatal(err)
		}
		b, err := p.YAML(sources)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Load(writeProfile(t, string(b)), testNames)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		if !reflect.DeepEqual(got, p) {
			t.Errorf("%s: YAML loads as\n%+v\nwant\n%+v", name, got, p)
		}
	}
}

// TestFileAccess checks the keys of the files' mode and group: octal
// digits as written, quoted or not, with or without a leading 0 or 0o
// (YAML would read an unquoted 440 as the number 440, mode 0670); a group
// by name or id; anything else refused, naming the key as written.
func TestFileAccess(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		mode os.FileMode
		gid  int
		want string // error; "" for none
	}{
		{"name: x\n", 0, -1, ""},
		{"output:\n  file_mode: \"0640\"\n", 0o640, -1, ""},
		{"output:\n  file_mode: 0644\n", 0o644, -1, ""},
		{"output:\n  file_mode: \"0o640\"\n", 0o640, -1, ""},
		{"output:\n  file_mode: 640\n", 0o640, -1, ""},
		{"output:\n  file_mode: 440\n", 0o440, -1, ""},
		{"output:\n  file_mode: 400\n", 0o400, -1, ""},
		{"output:\n  file_mode: 0o600\n", 0o600, -1, ""},
		{"output:\n  file_mode: 0999\n", 0, -1, "key output.file_mode: \"0999\", want permission bits in octal"},
		{"output:\n  file_mode: \"0999\"\n", 0, -1, "key output.file_mode"},
		{"output:\n  file_mode: \"04755\"\n", 0, -1, "key output.file_mode"},
		{"output:\n  file_mode: \"0\"\n", 0, -1, "key output.file_mode"},
		{"output:\n  file_group: root\n", 0, 0, ""},
		{"output:\n  file_group: \"0\"\n", 0, 0, ""},
		{"output:\n  file_group: no-such-group-here\n", 0, -1, "key output.file_group: \"no-such-group-here\": no such group"},
		{"output:\n  file_group: \"987654\"\n", 0, -1, "key output.file_group: \"987654\": no group of that id"},
	} {
		p, err := Load(writeProfile(t, tc.yaml), testNames)
		if tc.want != "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.yaml, err)
			continue
		}
		if mode, gid, err := p.Output.Access(); mode != tc.mode || gid != tc.gid || err != nil {
			t.Errorf("%q: Access() = %v, %d, %v; want %v, %d", tc.yaml, mode, gid, err, tc.mode, tc.gid)
		}
	}
}

// TestFileModeFromEnvironment: the environment's file mode is its octal
// digits as written, as a profile's is: 440 is mode 0440, not the
// decimal number 440 (mode 0670, group-writable).
func TestFileModeFromEnvironment(t *testing.T) {
	for _, tc := range []struct {
		env  string
		mode os.FileMode
	}{{"440", 0o440}, {"0640", 0o640}, {"644", 0o644}, {"0o600", 0o600}} {
		t.Setenv("H5INGEST_OUTPUT_FILE_MODE", tc.env)
		p, err := Load(writeProfile(t, "name: x\n"), testNames)
		if err != nil {
			t.Fatalf("%s: %v", tc.env, err)
		}
		if mode, _, err := p.Output.Access(); mode != tc.mode || err != nil {
			t.Errorf("H5INGEST_OUTPUT_FILE_MODE=%s: mode %v, %v; want %v", tc.env, mode, err, tc.mode)
		}
	}
}
