package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeProfile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "beamline.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDefaults(t *testing.T) {
	p, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "default" || p.Detector.PixelSize != 55e-6 || len(p.Detector.ChipOrientation) != 0 {
		t.Errorf("defaults = %+v", p)
	}
}

func TestLayering(t *testing.T) {
	path := writeProfile(t, `
name: tomo-b
description: tomography at beamline B
detector:
  chip_orientation: [0, 180, 0, 180]
  distance_m: 0.35
`)
	tests := []struct {
		name     string
		env      map[string]string
		distance float64
		orient   []int
		title    string
	}{
		{"file over defaults", nil, 0.35, []int{0, 180, 0, 180}, "tomo-b"},
		{"environment over file", map[string]string{
			"H5INGEST_DETECTOR_DISTANCE_M":      "2.5",
			"H5INGEST_DETECTOR_CHIP_ORIENTATION": "[180, 180, 0, 0]",
			"H5INGEST_NAME":                      "override",
		}, 2.5, []int{180, 180, 0, 0}, "override"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			p, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if p.Detector.Distance != tt.distance || !slices.Equal(p.Detector.ChipOrientation, tt.orient) || p.Name != tt.title {
				t.Errorf("got %+v", p)
			}
			if p.Detector.PixelSize != 55e-6 {
				t.Errorf("pixel size %g, want the default 55e-6", p.Detector.PixelSize)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name, text string
		env        map[string]string
		want       string // substring of the error, after the file name
	}{
		{"unknown key", "detector:\n  pixel_sise_m: 1e-4\n", nil,
			`unknown key "detector.pixel_sise_m" (known keys: name, description, detector.chip_orientation, detector.pixel_size_m, detector.distance_m)`},
		{"unknown section", "writer:\n  x: 1\n", nil, `unknown key "writer.x"`},
		{"wrong type", "detector:\n  distance_m: far\n", nil, "key detector.distance_m: "},
		{"wrong list type", "detector:\n  chip_orientation: flipped\n", nil, "key detector.chip_orientation"},
		{"orientation", "detector:\n  chip_orientation: [0, 90]\n", nil, "key detector.chip_orientation[1]: 90 degrees, want 0 or 180"},
		{"pixel size", "detector:\n  pixel_size_m: 0\n", nil, "key detector.pixel_size_m: 0, want a pitch in metres above 0 and below 0.01"},
		{"distance", "detector:\n  distance_m: -1\n", nil, "key detector.distance_m: -1, want metres from 0 to 1000"},
		{"not yaml", "detector: [unclosed\n", nil, "not valid YAML"},
		{"bad environment", "name: x\n", map[string]string{"H5INGEST_DETECTOR_DISTANCE_M": "near"}, "key detector.distance_m: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			path := writeProfile(t, tt.text)
			_, err := Load(path)
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.HasPrefix(err.Error(), "profile "+path+": ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\nwant it to name %s and contain %q", err, path, tt.want)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestKeysCoverProfile(t *testing.T) {
	// Every key of the built-in defaults is documented in Keys, and back.
	var flat []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok {
				walk(prefix+k+".", sub)
				continue
			}
			flat = append(flat, prefix+k)
		}
	}
	walk("", toMap(Default()))
	slices.Sort(flat)
	var names []string
	for _, k := range Keys {
		names = append(names, k.Name)
	}
	slices.Sort(names)
	if !slices.Equal(flat, names) {
		t.Errorf("defaults have keys %v, Keys documents %v", flat, names)
	}
}
