package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestLockFileLinkReplacesNothing: a scan's lock file (.NAME.h5.lock) that
// is a symbolic link to a file elsewhere, planted in the output directory
// before the scan, must not lead the scan to truncate and write that file:
// a scan replaces no file, through a link or not.
func TestLockFileLinkReplacesNothing(t *testing.T) {
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "4")
	dir, elsewhere := t.TempDir(), t.TempDir()
	victim := filepath.Join(elsewhere, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "x.h5")
	if err := os.Symlink(victim, filepath.Join(dir, ".x.h5.lock")); err != nil {
		t.Fatal(err)
	}
	code, text := runCaptured(t, "replay", capPath, "-o", out)
	if b, _ := os.ReadFile(victim); !bytes.Equal(b, []byte("precious\n")) {
		t.Errorf("replay to %s (exit status %d) with its lock file a link to %s: that file now holds %d bytes beginning %q, want it untouched\n%s",
			out, code, victim, len(b), b[:min(len(b), 16)], text)
	}
}
