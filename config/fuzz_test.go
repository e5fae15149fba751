package config

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzLoad feeds arbitrary text to LoadLayers as a profile file: it must
// return a profile or an error that names the file, never panic, and a
// profile it accepts must give a plan or an error.
func FuzzLoad(f *testing.F) {
	for _, name := range BuiltinNames() {
		text, _ := BuiltinText(name)
		f.Add(string(text))
	}
	f.Add("detector:\n  chips_x: 3\n  chip_orientation: [0, 180]\n")
	f.Add("plan:\n  sequence: \"flats:2,darks:1,projections:5\"\n")
	f.Add("output:\n  flush_interval: 1ms\n  template: \"{scan}_{module}_{date}.h5\"\n")
	f.Add("source:\n  ring_slots: -1\n")
	f.Add("detector: [\n")
	f.Add("a: &x [*x]\n")
	f.Fuzz(func(t *testing.T, text string) {
		file := filepath.Join(t.TempDir(), "fuzz.yaml")
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		p, _, err := LoadLayers(Layers{Profile: file, Names: testNames})
		if err != nil {
			if !strings.Contains(err.Error(), file) && !strings.Contains(err.Error(), "H5INGEST_") {
				t.Fatalf("error does not name the profile: %v", err)
			}
			return
		}
		if _, err := p.Plan.Plan(); err == nil {
			if name, err := p.Output.FileName("scan", 0, time.Unix(0, 0)); err == nil && path.Dir(name) != path.Clean(p.Output.Directory) {
				t.Errorf("file %s is not in output.directory %s", name, p.Output.Directory)
			}
		}
	})
}
