package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBszstdWarning: choosing bszstd, on the command line or in a profile,
// prints a warning naming the readers that cannot read the files (Debian
// 12's bitshuffle, older than 0.4) and what they do, once, where the scan
// starts and in profiles check; bslz4 prints none.
func TestBszstdWarning(t *testing.T) {
	capture, _ := simulate(t, "--frames", "2")
	dir := t.TempDir()
	profile := filepath.Join(dir, "zstd.yaml")
	if err := os.WriteFile(profile, []byte("name: zstd\noutput:\n  compression: bszstd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		warn bool
	}{
		{[]string{"replay", capture, "-o", filepath.Join(dir, "a.h5"), "--compression", "bszstd"}, true},
		{[]string{"replay", capture, "-o", filepath.Join(dir, "b.h5"), "--profile", profile}, true},
		{[]string{"profiles", "check", profile}, true},
		{[]string{"replay", capture, "-o", filepath.Join(dir, "c.h5"), "--compression", "bslz4"}, false},
		{[]string{"profiles", "check", "default"}, false},
	} {
		code, stdout, stderr := runProcess(t, tt.args...)
		if code != exitOK {
			t.Errorf("%v: exit status %d\n%s%s", tt.args, code, stdout, stderr)
		}
		n := strings.Count(stderr, "warning: bszstd")
		switch {
		case tt.warn && (n != 1 || !strings.Contains(stderr, "bitshuffle older than 0.4") || !strings.Contains(stderr, "Debian 12") ||
			!strings.Contains(stderr, "wrong pixels")):
			t.Errorf("%v: want one warning naming the readers that cannot read bszstd, got:\n%s", tt.args, stderr)
		case !tt.warn && strings.Contains(stderr, "warning"):
			t.Errorf("%v: unexpected warning:\n%s", tt.args, stderr)
		}
	}
}
