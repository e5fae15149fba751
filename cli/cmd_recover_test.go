package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"h5ingest/scan/scantest"
	"h5ingest/writer"
)

// TestRecoverKilledScan kills a scan's writer (SIGKILL) mid-scan: its
// .part file opens only as a SWMR reader; recover clears its flags, gives
// it its final name and verifies it (exit status 3, the frames after the
// last flush missing), and plain h5py, not a SWMR reader, then opens it
// and reads as many ok frames as verify counts.
func TestRecoverKilledScan(t *testing.T) {
	t.Parallel()
	py := scantest.Python(t, "h5py", "numpy")
	dir := t.TempDir()
	scan, _, _, out := startPaced(t, dir, 40)
	if err := scan.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	scan.Wait()
	part := writer.TempName(out)
	plain := func(path string) (string, error) {
		b, err := exec.Command(py, "-c", `import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    s = f["/entry/instrument/detector/frame_status"][:]
    print(len(s), int((s == 0).sum()))`, path).CombinedOutput()
		return string(b), err
	}
	if msg, err := plain(part); err == nil {
		t.Logf("plain h5py opens a killed writer's file without recover: %s", msg)
	}
	code, stdout, stderr := runProcess(t, "recover", part)
	m := regexp.MustCompile(`40 frames, (\d+) chunks verified; ok (\d+), missing (\d+)`).FindStringSubmatch(stdout)
	if code != exitIncomplete || m == nil || m[3] == "0" || !strings.Contains(stdout, "recovered .scan.h5.part as "+out) {
		t.Fatalf("recover: exit status %d, want %d, verified with frames missing:\n%s%s", code, exitIncomplete, stdout, stderr)
	}
	for _, gone := range []string{part, writer.LockName(out)} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s after recover: %v", filepath.Base(gone), err)
		}
	}
	msg, err := plain(out)
	if err != nil {
		t.Fatalf("plain h5py does not open the recovered file: %v\n%s", err, msg)
	}
	if want := "40 " + m[2]; strings.TrimSpace(msg) != want {
		t.Errorf("plain h5py reads %q (frames, ok), verify %q", strings.TrimSpace(msg), want)
	}
	if code, _, stderr := runProcess(t, "recover", part); code != exitFailure {
		t.Errorf("recover of a file already recovered: exit status %d, want %d\n%s", code, exitFailure, stderr)
	}
}

// TestRecoverRefusesRunningScan runs recover on the .part file of a scan
// that is still writing (its detector held mid-scan): refused, naming the
// scan's process, and the scan completes untouched.
func TestRecoverRefusesRunningScan(t *testing.T) {
	t.Parallel()
	path, _ := simulate(t, "--frames", "80")
	out := filepath.Join(t.TempDir(), "scan.h5")
	acq, sender := heldAcquire(t, path, out, 80)
	sender.send(t, 3)
	code, _, stderr := runProcess(t, "recover", writer.TempName(out))
	if code != exitFailure || !strings.Contains(stderr, "is being written by another scan (process "+strconv.Itoa(acq.cmd.Process.Pid)) {
		t.Errorf("recover of a running scan's file: exit status %d, want %d naming process %d:\n%s", code, exitFailure, acq.cmd.Process.Pid, stderr)
	}
	sender.finish(t)
	if code := acq.wait(t, time.Minute); code != exitOK {
		t.Fatalf("the scan: exit status %d, want 0:\n%s", code, acq.stderr.String())
	}
	if code, stdout, _ := runProcess(t, "verify", out); code != exitOK {
		t.Errorf("verify of the scan: exit status %d\n%s", code, stdout)
	}
}

// TestRecoverLeavesDamagedPart runs the command on an empty .part: exit
// status 1, saying it was left as it was, and the .part is still there
// with no final name beside it.
func TestRecoverLeavesDamagedPart(t *testing.T) {
	out := filepath.Join(t.TempDir(), "scan.h5")
	part := writer.TempName(out)
	if err := os.WriteFile(part, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runProcess(t, "recover", part)
	if code != exitFailure || !strings.Contains(stderr, "left as it was") {
		t.Errorf("recover of an empty .part: exit status %d, want %d saying it was left as it was:\n%s%s", code, exitFailure, stdout, stderr)
	}
	if _, err := os.Stat(part); err != nil {
		t.Errorf("the .part after a refused recover: %v", err)
	}
	if _, err := os.Lstat(out); !os.IsNotExist(err) {
		t.Errorf("a final name after a refused recover: %v", err)
	}
}
