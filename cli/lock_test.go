package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"h5ingest/scan/scantest"
	"h5ingest/writer"
)

// TestTwoScansOneFile runs a paced replay (four seconds of frames) and,
// while it writes, a second replay of the same file with --overwrite and
// an acquire of it with --overwrite, each a process of its own: both are
// refused with exit status 1, naming the file and the first scan's
// process, the acquire in its pre-scan check before it listens, and the
// first scan's file completes and verifies with every frame.
func TestTwoScansOneFile(t *testing.T) {
	t.Parallel()
	first, firstErr, capture, out := startPaced(t, t.TempDir(), 80)
	pid := strconv.Itoa(first.Process.Pid)
	part, err := os.Stat(writer.TempName(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"replay", capture, "-o", out, "--projections", "80", "--overwrite"},
		{"acquire", "--listen", scantest.FreeAddr(t), "--provider", "tcp", "-o", out, "--projections", "80", "--overwrite", "--connect-timeout", "5s"},
	} {
		start := time.Now()
		code, stdout, stderr := runProcess(t, args...)
		if code != exitFailure || !strings.Contains(stderr, out+" is being written by another scan (process "+pid) {
			t.Errorf("%s of a file another scan writes: exit status %d, want %d naming %s and process %s:\n%s%s",
				args[0], code, exitFailure, out, pid, stdout, stderr)
		}
		// Its pre-scan check runs before it listens for a detector.
		if args[0] == "acquire" && (!strings.Contains(stderr, "pre-scan check") || strings.Contains(stderr, "wait for a sender")) {
			t.Errorf("acquire was not refused by its pre-scan check (after %v):\n%s", time.Since(start), stderr)
		}
	}
	// The refused scans left the first one's file alone: the same file,
	// not truncated.
	if now, err := os.Stat(writer.TempName(out)); err != nil || !os.SameFile(now, part) || now.Size() < part.Size() {
		t.Errorf("the running scan's temporary file was replaced or truncated (%v)", err)
	}
	if code := exitCode(t, first); code != exitOK {
		t.Fatalf("the first scan: exit status %d, want 0:\n%s", code, firstErr.String())
	}
	code, stdout, _ := runProcess(t, "verify", out)
	if code != exitOK || !strings.Contains(stdout, "80 chunks verified") {
		t.Errorf("verify of the first scan's file: exit status %d, want 0 with 80 chunks:\n%s", code, stdout)
	}
	if _, err := os.Lstat(writer.LockName(out)); !os.IsNotExist(err) {
		t.Errorf("lock file after the scan: %v", err)
	}
}

// TestTwoScansOneArray runs a paced replay of a four-module scan (a file
// per module and a master) and, while it writes, a second one of the same
// master name with --overwrite: refused naming a module file and the first
// scan's process; the first scan's files complete and verify.
func TestTwoScansOneArray(t *testing.T) {
	t.Parallel()
	paths, _ := simulateModules(t)
	capturePath := interleave(t, paths)
	profile := arrayProfile(t)
	master := filepath.Join(t.TempDir(), "scan.h5")
	args := append([]string{"replay", capturePath, "--profile", profile, "-o", master, "--fps", "5", "--flush", "100ms"}, arrayPlan...)
	first := command(args...)
	var firstErr bytes.Buffer
	first.Stderr = &firstErr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	module0 := filepath.Join(filepath.Dir(master), "scan_m0.h5")
	deadline := time.Now().Add(20 * time.Second)
	for scantest.OKFrames(writer.TempName(module0)) < 1 {
		if time.Now().After(deadline) {
			first.Process.Kill()
			t.Fatalf("the paced replay wrote nothing:\n%s", firstErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, stdout, stderr := runProcess(t, append(args[:len(args):len(args)], "--overwrite")...)
	if code != exitFailure || !strings.Contains(stderr, "is being written by another scan (process "+strconv.Itoa(first.Process.Pid)) ||
		!strings.Contains(stderr, "scan_m0.h5") {
		t.Errorf("second scan of the array: exit status %d, want %d naming a module file and process %d:\n%s%s",
			code, exitFailure, first.Process.Pid, stdout, stderr)
	}
	if code := exitCode(t, first); code != exitOK {
		t.Fatalf("the first scan: exit status %d, want 0:\n%s", code, firstErr.String())
	}
	if code, stdout, _ := runProcess(t, "verify", master); code != exitOK {
		t.Errorf("verify of the first scan's master: exit status %d\n%s", code, stdout)
	}
}

// TestAcquireHoldsItsFileWhileWaiting starts an acquire, which passes its
// pre-scan check and waits for the detector, then, while it waits, a
// replay of the same file with --overwrite, a process of its own. The
// acquire took the file's lock before it waits, so the replay is refused
// (exit 1, naming the acquire's process), and the detector that connects
// next gets its whole scan written. The acquire used to check the lock
// and take it only once the detector connected: the replay wrote the
// file, and the acquire then failed with exit status 1, after the
// detector had sent its frames into nothing and leaving an empty --record
// capture. A second acquire recording into the same --record capture is
// refused the same way (two acquires used to write one capture at once).
func TestAcquireHoldsItsFileWhileWaiting(t *testing.T) {
	smallDetector(t)
	capture, _ := simulate(t, "--frames", "20")
	dir := t.TempDir()
	out, rec := filepath.Join(dir, "scan.h5"), filepath.Join(dir, "scan.pmcap")
	addr := scantest.FreeAddr(t)
	acq := startProc(t, "acquire", "--listen", addr, "-o", out, "--record", rec, "--projections", "20",
		"--connect-timeout", "60s", "--idle-timeout", "20s")
	// Waiting for the detector: its lock taken, or (before) its checks passed long ago.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(writer.LockName(out)); err == nil {
			break
		}
	}
	time.Sleep(200 * time.Millisecond)
	code, stdout, stderr := runProcess(t, "replay", capture, "-o", out, "--projections", "20", "--overwrite")
	pid := strconv.Itoa(acq.cmd.Process.Pid)
	if code != exitFailure || !strings.Contains(stderr, out+" is being written by another scan (process "+pid) {
		t.Errorf("replay of the file an acquire waits to write: exit status %d, want %d naming process %s:\n%s%s",
			code, exitFailure, pid, stdout, stderr)
	}
	// Another acquire, of another file, recording into the same capture.
	code, stdout, stderr = runProcess(t, "acquire", "--listen", scantest.FreeAddr(t), "-o", filepath.Join(t.TempDir(), "other.h5"),
		"--record", rec, "--overwrite", "--projections", "20", "--connect-timeout", "5s")
	if code != exitFailure || !strings.Contains(stderr, rec+" is being written by another scan (process "+pid) {
		t.Errorf("acquire recording into the capture another acquire records: exit status %d, want %d naming process %s:\n%s%s",
			code, exitFailure, pid, stdout, stderr)
	}
	if code, stdout, stderr := runProcess(t, "send", capture, "--to", addr, "--timeout", "20s"); code != exitOK {
		t.Errorf("send: exit status %d, want 0:\n%s%s", code, stdout, stderr)
	}
	if code := acq.wait(t, 60*time.Second); code != exitOK {
		t.Fatalf("acquire: exit status %d, want 0:\n%s%s", code, acq.stdout.String(), acq.stderr.String())
	}
	if code, stdout, _ := runProcess(t, "verify", out); code != exitOK || !strings.Contains(stdout, "20 chunks verified") {
		t.Errorf("verify of the acquired file: exit status %d, want 0 with 20 chunks:\n%s", code, stdout)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("files in the output directory: %v, want the scan and its capture", entries)
	}
	if code, stdout, _ := runProcess(t, "inspect", rec); code != exitOK || !strings.Contains(stdout, "20 frames, frame numbers 0 to 19") {
		t.Errorf("inspect of the capture: exit status %d, want 0 with the 20 frames:\n%s", code, stdout)
	}
}
