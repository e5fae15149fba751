package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"h5ingest/source/sim"
)

// strayCapture writes a capture of frames good frames, without a plan in
// its metadata, among which 5 carry corrupt frame numbers (2^24-1, 20000,
// 2^40, 2^63, 2^64-1), and returns it with the good frames' truth.
func strayCapture(t *testing.T, frames int) (string, *sim.Truth) {
	t.Helper()
	path, truth := simulate(t, "--frames", strconv.Itoa(frames))
	var stream [][]byte
	stray := []uint64{1<<24 - 1, 20_000, 1 << 40, 1 << 63, 1<<64 - 1}
	for n, rec := range records(t, path) {
		stream = append(stream, rec)
		if n%5 == 2 {
			bad := bytes.Clone(rec)
			binary.LittleEndian.PutUint64(bad[8:], stray[n/5])
			stream = append(stream, resealed(bad))
		}
	}
	in := filepath.Join(t.TempDir(), "stray.pmcap")
	writeRecords(t, in, stream) // metadata without a plan
	return in, truth
}

// TestReplayStrayFrameNumberNoPlan replays, without a plan, a capture of
// good frames among which a few carry corrupt frame numbers (2^24-1 was
// accepted once: 16.7 million records, 3 GB of memory, an 840 MB file):
// they are rejected as out of range, exit status 3, the file holds the good
// frames alone, all ok, and memory and file stay small.
func TestReplayStrayFrameNumberNoPlan(t *testing.T) {
	const frames = 24
	in, truth := strayCapture(t, frames)
	dir := t.TempDir()
	out := filepath.Join(dir, "stray.h5")
	cmd := command("replay", in, "-o", out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != exitIncomplete {
		t.Fatalf("exit status %d (%v), want %d\n%s%s", code, err, exitIncomplete, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "out of range    5 rejected") {
		t.Errorf("summary does not count the 5 stray frames:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "source.max_frame_gap") {
		t.Errorf("standard error does not say why the frames were rejected:\n%s", stderr.String())
	}
	status, ok := statuses(t, out, truth)
	if len(status) != frames || ok != frames {
		t.Errorf("file holds %d frames, %d ok: want the %d good frames, all ok", len(status), ok, frames)
	}
	info, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() > 4<<20 {
		t.Errorf("file of %d bytes for %d small frames", info.Size(), frames)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > 400<<10 { // KiB
		t.Errorf("replay peaked at %d MiB of memory for %d small frames", ru.Maxrss>>10, frames)
	}
}

// runIn runs h5ingest as a process with extra environment variables and
// returns its exit status, standard error and how long it took.
func runIn(t *testing.T, env []string, args ...string) (int, string, time.Duration) {
	t.Helper()
	cmd := command(args...)
	cmd.Env = append(cmd.Env, env...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	start := time.Now()
	_ = cmd.Run() // the exit status is checked by the caller
	return cmd.ProcessState.ExitCode(), errOut.String(), time.Since(start)
}

// TestScanIDStaysInOutputDir gives every command that names files from a
// scan id (replay and acquire of one module and of several, master) scan
// ids that would leave output.directory: each is refused with exit status
// 2 before any file is made. A scan id whose file name (with its
// temporary name .NAME.part) is too long for the file system fails the
// pre-scan check, exit status 1, before acquire listens for the detector.
func TestScanIDStaysInOutputDir(t *testing.T) {
	capturePath, _ := simulate(t, "--frames", "3")
	array := arrayProfile(t)
	commands := []struct {
		name string
		args func(addr string) []string
	}{
		{"replay", func(string) []string { return []string{"replay", capturePath} }},
		{"replay modules", func(string) []string { return []string{"replay", capturePath, "--profile", array} }},
		{"acquire", func(addr string) []string {
			return []string{"acquire", "--listen", addr, "--connect-timeout", "20s", "--backend", "cpu"}
		}},
		{"acquire modules", func(addr string) []string {
			return []string{"acquire", "--profile", array, "--listen", addr, "--connect-timeout", "20s", "--backend", "cpu"}
		}},
		{"master", func(string) []string { return []string{"master", "--profile", array, "--projections", "3"} }},
	}
	long := strings.Repeat("s", 249) // s…s.h5 is 252 bytes, .s…s.h5.part 258
	for _, c := range commands {
		for _, id := range []string{"../x", "a/../../x", "..", "sub/x", long} {
			name := c.name + " " + id
			if id == long {
				name = c.name + " long"
			}
			t.Run(name, func(t *testing.T) {
				root := t.TempDir()
				out := filepath.Join(root, "out")
				if err := os.Mkdir(out, 0o755); err != nil {
					t.Fatal(err)
				}
				args := append(c.args(freeAddr(t)), "--scan-id", id)
				code, stderr, took := runIn(t, []string{"H5INGEST_OUTPUT_DIRECTORY=" + out}, args...)
				want, says := exitUsage, "--scan-id"
				if id == long {
					want, says = exitFailure, "pre-scan check: "
					if c.name == "master" {
						says = "master file "
					}
				}
				if code != want || !strings.Contains(stderr, says) {
					t.Errorf("exit status %d, want %d with %q:\n%s", code, want, says, stderr)
				}
				if took > 10*time.Second {
					t.Errorf("took %v: waited for a detector", took)
				}
				var made []string
				filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
					if p != root && p != out {
						made = append(made, p)
					}
					return nil
				})
				if len(made) > 0 {
					t.Errorf("files made: %v", made)
				}
			})
		}
	}
}

// TestAcquireFramesBeyondPlan sends a detector's 12 frames to an acquire
// whose plan has 8, with a ring of 2 slots so that frames wait for the
// pipeline: the 4 frames beyond the plan are rejected, exit status 3 (it
// used to be 0), and the --record capture keeps all 12.
func TestAcquireFramesBeyondPlan(t *testing.T) {
	smallProfileEnv(t)
	sent, truth := simulate(t, "--frames", "12")
	dir := t.TempDir()
	addr := freeAddr(t)
	rec := filepath.Join(dir, "s2.pmcap")
	done := startAcquire("--listen", addr, "--output-dir", dir, "--scan-id", "s2", "--backend", "cpu", "--slots", "2",
		"--record", rec, "--connect-timeout", "20s", "--projections", "8")
	code, stdout := runCaptured(t, "send", sent, "--to", addr, "--timeout", "20s")
	if code != exitOK {
		t.Fatalf("send exit status %d\n%s", code, stdout)
	}
	if code := waitExit(t, done, 30*time.Second); code != exitIncomplete {
		t.Fatalf("acquire exit status %d, want %d", code, exitIncomplete)
	}
	status, ok := statuses(t, filepath.Join(dir, "s2.h5"), truth)
	if len(status) != 8 || ok != 8 {
		t.Errorf("file holds %d frames, %d ok: want the 8 planned, all ok", len(status), ok)
	}
	if got := len(records(t, rec)); got != 12 {
		t.Errorf("the capture holds %d frames, want all 12 that arrived", got)
	}
}

// TestAcquireStrayFrameNumberNoPlan has a detector send, to an acquire
// without a plan, good frames among which 5 carry corrupt frame numbers,
// through a ring of 2 slots: they are rejected as out of range, exit
// status 3, and the file holds the good frames alone, all ok.
func TestAcquireStrayFrameNumberNoPlan(t *testing.T) {
	smallProfileEnv(t)
	const frames = 24
	sent, truth := strayCapture(t, frames)
	dir := t.TempDir()
	addr := freeAddr(t)
	done := startAcquire("--listen", addr, "--output-dir", dir, "--scan-id", "s3", "--backend", "cpu", "--slots", "2",
		"--connect-timeout", "20s")
	if code, stdout := runCaptured(t, "send", sent, "--to", addr, "--timeout", "20s"); code != exitOK {
		t.Fatalf("send exit status %d\n%s", code, stdout)
	}
	if code := waitExit(t, done, 30*time.Second); code != exitIncomplete {
		t.Fatalf("acquire exit status %d, want %d", code, exitIncomplete)
	}
	status, ok := statuses(t, filepath.Join(dir, "s3.h5"), truth)
	if len(status) != frames || ok != frames {
		t.Errorf("file holds %d frames, %d ok: want the %d good frames, all ok", len(status), ok, frames)
	}
}

// TestAcquireRecordIsTheOutput gives acquire's --record the name of the
// scan's file, its temporary name or its lock file, in a directory of its
// own, with and without --overwrite: a usage error (exit 2) before it
// listens, and no file made. Acquire used to take the detector, make the
// capture under the file's name and then fail with exit status 1 ("exists"),
// the detector's frames sent into nothing and an empty file left; with
// --overwrite the scan's file would have replaced the capture.
func TestAcquireRecordIsTheOutput(t *testing.T) {
	for _, overwrite := range []bool{false, true} {
		dir := t.TempDir()
		out := filepath.Join(dir, "scan.h5")
		for _, rec := range []string{out, filepath.Join(dir, ".", "scan.h5"), filepath.Join(dir, ".scan.h5.part"), filepath.Join(dir, ".scan.h5.lock")} {
			args := []string{"acquire", "--listen", freeAddr(t), "-o", out, "--record", rec, "--connect-timeout", "5s"}
			if overwrite {
				args = append(args, "--overwrite")
			}
			code, stdout, stderr := runProcess(t, args...)
			if code != exitUsage || !strings.Contains(stderr, "give the capture a name of its own") || strings.Contains(stderr, "wait for a sender") {
				t.Errorf("acquire --record %s (overwrite %v): exit status %d, want %d before listening:\n%s%s", rec, overwrite, code, exitUsage, stdout, stderr)
			}
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("files left: %v", entries)
		}
	}
}
