package scan

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"h5ingest/plan"
	"h5ingest/scan/scantest"
)

// TestReplayMissingCapture replays a capture that is not there: the
// error says so, not that the output directory is gone.
func TestReplayMissingCapture(t *testing.T) {
	t.Parallel()
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.SmallFormat, nil)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pmcap")
	r := replayInto(t, context.Background(), p, stages, plan.Tomo(0, 0, 6, 0, 180), filepath.Join(dir, "scan.h5"), missing)
	if r.err == nil {
		t.Fatal("replay of a missing capture: no error")
	}
	if msg := Explain(r.err).Error(); !strings.HasPrefix(msg, "capture unreadable: ") || !strings.Contains(msg, missing) || strings.Contains(msg, "directory gone") {
		t.Errorf("replay of a missing capture said %q, want it named as a capture unreadable", msg)
	}
}

// TestReadMissingFile checks that inspect and verify of a file that is not
// there say that the file is unreadable, not that the output directory is
// gone.
func TestReadMissingFile(t *testing.T) {
	t.Parallel()
	stages := scantest.Stages(t)
	missing := filepath.Join(t.TempDir(), "missing.h5")
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"inspect", func() error { _, err := Inspect(stages, missing); return err }},
		{"verify", func() error { _, err := Verify(context.Background(), stages, missing, time.Minute); return err }},
	} {
		err := c.run()
		if err == nil {
			t.Fatalf("%s of a missing file: no error", c.name)
		}
		if msg := Explain(err).Error(); !strings.HasPrefix(msg, "file unreadable: ") || !strings.Contains(msg, missing) || strings.Contains(msg, "directory gone") {
			t.Errorf("%s of a missing file said %q, want it named as a file unreadable", c.name, msg)
		}
	}
}
