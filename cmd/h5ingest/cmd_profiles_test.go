package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"h5ingest/config"
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
