package scan

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInspect summarises a replayed file, its capture and the capture cut
// short.
func TestInspect(t *testing.T) {
	src := simulate(t, smallFormat, 6)
	stages := testStages(t)
	p := testProfile(t, stages, smallFormat, map[string]any{"plan.darks": 1, "plan.flats": 1, "plan.projections": 4})
	pl, err := p.Plan.Plan()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "scan.h5")
	files, err := NewFiles(p, Names{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Replay(context.Background(), ReplayOptions{Options: Options{Profile: p, Plan: pl, Stages: stages}, Files: files, Captures: []string{src}}); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Inspect(&b, stockStages(), out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"layout        nxtomo", "stack         6 x 32 x 96 uint32", "bitshuffle (filter 32008:",
		"frames        ok 6, missing 0, crc mismatch 0, rejected 0", "plan          1 darks, 1 flats, 4 projections at 0 to",
		"time span"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, b.String())
		}
	}

	b.Reset()
	if err := Inspect(&b, stockStages(), src); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "records       6 frames of 1 module") || !strings.Contains(b.String(), "module 0      6 frames, frame numbers 0 to 5") {
		t.Errorf("the capture's summary:\n%s", b.String())
	}
	info, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(src, info.Size()-100); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := Inspect(&b, stockStages(), src); !errors.Is(err, ErrIncomplete) || !strings.Contains(b.String(), "5 frames") || !strings.Contains(b.String(), "cut short") {
		t.Errorf("a cut capture: %v\n%s", err, b.String())
	}
}
