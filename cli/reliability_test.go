package cli

// Fault injection that needs the command: a port already taken, a
// profile that does not load (the exit status and message a user sees);
// and the helpers that run h5ingest as a process of its own. The faults
// of the sender, the disk, the output directory and the capture, and what
// a scan leaves open, are tested through the library (scan/e2e_*_test.go).
// docs/reliability.md lists every fault with its test.

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"h5ingest/scan/scantest"
	"h5ingest/writer"
)

// runProcess runs h5ingest as a process of its own and returns its exit
// status and what it printed on standard output and standard error.
func runProcess(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := command(args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	if strings.Contains(errOut.String(), "panic:") {
		t.Fatalf("h5ingest %v panicked:\n%s", args, errOut.String())
	}
	return code, out.String(), errOut.String()
}

// waitExit returns what done delivers, failing the test after d.
func waitExit(t *testing.T, done <-chan int, d time.Duration) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(d):
		t.Fatalf("acquire did not stop within %v", d)
		return 0
	}
}

// TestAcquirePortInUse listens where another program already does.
func TestAcquirePortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out := filepath.Join(t.TempDir(), "busy.h5")
	// A connect timeout far beyond the wait: an acquire that waited for a
	// sender instead would meet the wait's bound, a minute.
	acq := startProc(t, "acquire", "--listen", l.Addr().String(), "-o", out, "--connect-timeout", "10m")
	code := acq.wait(t, time.Minute)
	if stderr := acq.stderr.String(); code != exitFailure || !strings.Contains(stderr, l.Addr().String()) || strings.Contains(stderr, "waiting for") {
		t.Errorf("acquire on a busy port: exit status %d, want %d with a message naming %s, without waiting for a sender:\n%s",
			code, exitFailure, l.Addr(), stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed acquire left an output file")
	}
}

// TestProfileFaults gives replay and acquire profiles that are missing or
// malformed: exit status 2, with a message that names the file.
func TestProfileFaults(t *testing.T) {
	path, _ := simulate(t, "--frames", "1")
	dir := t.TempDir()
	profiles := map[string]string{
		"missing":        "",
		"not yaml":       "detector: [chips_x: 3\n",
		"tab indented":   "detector:\n\tchips_x: 3\n",
		"wrong type":     "detector:\n  chips_x: many\n",
		"not a map":      "- just\n- a list\n",
		"binary garbage": "\x00\xff\xfe PMCAP001 \x01\x02",
		"negative":       "source:\n  ring_slots: -4\n",
	}
	for name, text := range profiles {
		file := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
		if name != "missing" {
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		out := filepath.Join(dir, "x.h5")
		for _, args := range [][]string{
			{"replay", path, "-o", out, "--profile", file},
			{"acquire", "--listen", "127.0.0.1:1", "-o", out, "--profile", file},
		} {
			code, _, stderr := runProcess(t, args...)
			if code != exitUsage || !strings.Contains(stderr, file) {
				t.Errorf("%s profile, %s: exit status %d, want %d naming the file:\n%s", name, args[0], code, exitUsage, stderr)
			}
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%s profile: an output file was written", name)
		}
	}
}

// startPaced starts a replay of frames paced at 20 frames/s into dir (80
// frames is four seconds, so that what a test does while it writes comes
// in time on a loaded machine) and waits until its file has flushed
// frames. It returns the process, its standard error, the capture and the
// output file.
func startPaced(t *testing.T, dir string, frames int) (*exec.Cmd, *bytes.Buffer, string, string) {
	t.Helper()
	n := strconv.Itoa(frames)
	capture, _ := simulate(t, "--frames", n)
	out := filepath.Join(dir, "scan.h5")
	cmd := command("replay", capture, "-o", out, "--projections", n, "--fps", "20", "--flush", "100ms")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for scantest.OKFrames(writer.TempName(out)) < 3 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the paced replay wrote nothing:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd, &stderr, capture, out
}

// exitCode waits for cmd and returns its exit status.
func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	return statusOf(t, cmd.Wait())
}

// statusOf returns the exit status a process's Wait error says.
func statusOf(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}
