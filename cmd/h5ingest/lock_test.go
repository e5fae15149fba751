package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"h5ingest/writer"
)

// TestTwoScansOneFile runs a paced replay (two seconds of frames) and,
// while it writes, a second replay of the same file with --overwrite and
// an acquire of it with --overwrite, each a process of its own: both are
// refused with exit status 1, naming the file and the first scan's
// process, the acquire in its pre-scan check before it listens, and the
// first scan's file completes and verifies with every frame.
func TestTwoScansOneFile(t *testing.T) {
	dir := t.TempDir()
	first, firstErr, out := startPaced(t, dir)
	part, err := os.ReadFile(writer.TempName(out))
	if err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(first.Process.Pid)
	capture, _ := simulate(t, "--frames", "40")
	for _, args := range [][]string{
		{"replay", capture, "-o", out, "--projections", "40", "--overwrite"},
		{"acquire", "--listen", freeAddr(t), "--provider", "tcp", "-o", out, "--projections", "40", "--overwrite", "--connect-timeout", "30s"},
	} {
		start := time.Now()
		code, stdout, stderr := runProcess(t, args...)
		if code != exitFailure || !strings.Contains(stderr, out+" is being written by another scan (process "+pid) {
			t.Errorf("%s of a file another scan writes: exit status %d, want %d naming %s and process %s:\n%s%s",
				args[0], code, exitFailure, out, pid, stdout, stderr)
		}
		if args[0] == "acquire" && (!strings.Contains(stderr, "pre-scan check") || time.Since(start) > 20*time.Second) {
			t.Errorf("acquire was not refused by its pre-scan check at once (%v):\n%s", time.Since(start), stderr)
		}
	}
	// The refused scans left the first one's file alone: it only grew.
	if now, err := os.ReadFile(writer.TempName(out)); err != nil || len(now) < len(part) || !bytes.Equal(now[:8], part[:8]) {
		t.Errorf("the running scan's temporary file was replaced (%v)", err)
	}
	if code := exitCode(t, first); code != exitOK {
		t.Fatalf("the first scan: exit status %d, want 0:\n%s", code, firstErr.String())
	}
	code, stdout, _ := runProcess(t, "verify", out)
	if code != exitOK || !strings.Contains(stdout, "40 chunks verified") {
		t.Errorf("verify of the first scan's file: exit status %d, want 0 with 40 chunks:\n%s", code, stdout)
	}
	if _, err := os.Lstat(writer.LockName(out)); !os.IsNotExist(err) {
		t.Errorf("lock file after the scan: %v", err)
	}
}
