package cli

// Faults of acquire that need processes: a send process killed while the
// receiver's ring is full, Ctrl-C and SIGTERM (once, twice, while waiting
// for the detector, with two modules); and send's word when it cannot keep
// --fps. Their library-level twins, and the other faults of acquire, are
// in scan/e2e_*_test.go. docs/reliability.md lists each with its test.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/scan/scantest"
	"h5ingest/source/fabric"
	"h5ingest/writer"
)

// backlogScan is a scan whose frames the pipeline takes far more slowly
// than a sender on loopback sends them: Pi-mega-sized chips, compressed
// with deflate (tens of MB/s, against the sender's GB/s).
var backlogScan = []string{"--chips", "3x2", "--chip-size", "256x256"}

// backlogPipeline returns the acquire flags that make the pipeline slow,
// though not so slow under the race detector that draining takes minutes.
func backlogPipeline() []string {
	level := "7"
	if scantest.Race {
		level = "1"
	}
	return []string{"--compression", "deflate", "--level", level, "--backend", "cpu"}
}

// simulateBacklog simulates n frames of backlogScan; backlogEnv makes an
// acquire's detector expect them.
func simulateBacklog(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "big.pmcap")
	args := append([]string{"simulate", "-o", path, "--seed", "5", "--frames", strconv.Itoa(n)}, backlogScan...)
	if code := run(args); code != exitOK {
		t.Fatalf("simulate: exit status %d", code)
	}
	return path
}

// backlogEnv returns the environment of an acquire child process whose
// detector is that of the capture src (simulateBacklog's), so that the
// test need not set it for the whole process and can run in parallel.
func backlogEnv(t *testing.T, src string) []string {
	t.Helper()
	return formatEnv(scantest.Config(t, scantest.Truth(t, src)).Format)
}

// proc is an h5ingest child process with its output, which the test
// may read while the process runs.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr scantest.Buffer
}

// startProc starts h5ingest with args as a child process.
func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	return startProcEnv(t, nil, args...)
}

// startProcEnv is startProc with env added to the child's environment.
func startProcEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: command(args...)}
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

// wait waits up to d for the process and returns its exit status.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		return statusOf(t, err)
	case <-time.After(d):
		p.cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not end within %v\n%s%s", p.cmd.Args[1:], d, p.stdout.String(), p.stderr.String())
		return 0
	}
}

// waitStderr waits for p to say text on standard error. It fails the
// test where a minute passes first: p hangs, or ended without saying it.
func (p *proc) waitStderr(t *testing.T, text string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(p.stderr.String(), text); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			p.cmd.Process.Kill()
			p.cmd.Wait()
			t.Fatalf("%v never said %q:\n%s%s", p.cmd.Args[1:], text, p.stdout.String(), p.stderr.String())
		}
	}
}

// waitForFile waits up to 20 s for path to exist, while p runs.
func (p *proc) waitForFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			p.cmd.Process.Kill()
			p.cmd.Wait()
			t.Fatalf("%s never appeared; %v says:\n%s%s", path, p.cmd.Args[1:], p.stdout.String(), p.stderr.String())
		}
	}
}

// heldBack returns the ring-full time the summary's received line shows.
func heldBack(t *testing.T, stdout string) time.Duration {
	t.Helper()
	m := regexp.MustCompile(`sender held back\) (\S+)`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no held-back time in the summary:\n%s", stdout)
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// backlogSlots is the ring of the backlog tests.
const backlogSlots = 16

// backlogRun is what one acquire with a backlog ended with.
type backlogRun struct {
	code                    int
	received, ok, recorded  int
	heldBack                time.Duration
	stdout, stderr, senderE string
}

// acquireWithBacklog receives n frames of src from a send child process
// into a slow pipeline with a ring of backlogSlots slots, so that the ring fills; once
// the scan has run for a moment, end ends it: "kill" kills the sender
// (SIGKILL), "interrupt" and "terminate" signal acquire. It checks that
// what acquire received is what its file holds and what --record kept.
func acquireWithBacklog(t *testing.T, src string, n int, end string) backlogRun {
	t.Helper()
	dir := t.TempDir()
	out, rec, addr := filepath.Join(dir, "scan.h5"), filepath.Join(dir, "scan.pmcap"), scantest.FreeAddr(t)
	acq := startProcEnv(t, backlogEnv(t, src), append([]string{"acquire", "--listen", addr, "-o", out, "--record", rec, "--projections", strconv.Itoa(n),
		"--slots", strconv.Itoa(backlogSlots), "--connect-timeout", "30s", "--idle-timeout", "20s"}, backlogPipeline()...)...)
	sender := startProc(t, "send", src, "--to", addr, "--timeout", "30s")
	acq.waitForFile(t, writer.TempName(out)) // the detector connected
	// The ring fills at once and the pipeline takes a few frames: wait
	// until the capture holds more frames than the ring has slots (on a
	// loaded machine the sender takes a while), then half a second more.
	waitForSize(t, rec, frameBytes(t, src, n)*int64(backlogSlots+4), 20*time.Second)
	time.Sleep(500 * time.Millisecond)
	switch end {
	case "kill":
		sender.cmd.Process.Kill()
	case "interrupt":
		acq.cmd.Process.Signal(os.Interrupt)
	case "terminate":
		acq.cmd.Process.Signal(syscall.SIGTERM)
	}
	r := backlogRun{code: acq.wait(t, 120*time.Second)}
	sender.cmd.Process.Kill()
	sender.wait(t, 10*time.Second)
	r.stdout, r.stderr, r.senderE = acq.stdout.String(), acq.stderr.String(), sender.stderr.String()
	if strings.Contains(r.stderr, "panic:") {
		t.Fatalf("acquire panicked:\n%s", r.stderr)
	}
	r.received = scantest.SummaryCount(t, r.stdout, "received")
	r.heldBack = heldBack(t, r.stdout)
	status := scantest.Statuses(t, out)
	r.ok = status[frame.StatusOK]
	if r.ok != scantest.SummaryCount(t, r.stdout, "ok") {
		t.Errorf("the summary says %d ok, the file holds %d", scantest.SummaryCount(t, r.stdout, "ok"), r.ok)
	}
	if r.received != r.ok {
		t.Errorf("received %d frames, the file holds %d ok (%v): every frame that arrived must be written", r.received, r.ok, status)
	}
	if status[frame.StatusMissing] != n-r.ok {
		t.Errorf("%d missing of %d with %d ok: want the rest missing (%v)", status[frame.StatusMissing], n, r.ok, status)
	}
	got := scantest.CaptureRecords(t, rec)
	r.recorded = len(got)
	want := scantest.CaptureRecords(t, src)
	if len(got) != r.received {
		t.Errorf("--record kept %d frames, %d arrived", len(got), r.received)
	}
	for i := range min(len(got), len(want)) {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("recorded frame %d is not the one sent", i)
			break
		}
	}
	// A backlog there was: the ring filled (the sender waited), and the
	// scan ended before the last frame. Under the race detector the sender
	// too is slow, and may not fill the ring: the counts above still hold.
	if (r.heldBack == 0 || r.received < backlogSlots || r.received >= n) && !scantest.Race {
		t.Errorf("no backlog to drain: received %d of %d, ring full for %v", r.received, n, r.heldBack)
	}
	return r
}

// TestAcquireDrainsBacklogSenderKilled kills the sender (SIGKILL of a send
// process) while the receiver's ring is full: every frame that arrived is
// decoded and written, and recorded; the rest are missing; exit 3. Set
// KILL_RUNS to repeat it (each run logs received vs written).
func TestAcquireDrainsBacklogSenderKilled(t *testing.T) {
	t.Parallel()
	const n = 60
	src := simulateBacklog(t, n)
	runs := 1
	if v, err := strconv.Atoi(os.Getenv("KILL_RUNS")); err == nil && v > 0 {
		runs = v
	}
	for i := range runs {
		r := acquireWithBacklog(t, src, n, "kill")
		t.Logf("run %d: received %d, written ok %d, recorded %d, ring full %v", i+1, r.received, r.ok, r.recorded, r.heldBack)
		if r.code != exitIncomplete || !strings.Contains(r.stderr, "peer disconnected") {
			t.Errorf("run %d: exit status %d, want %d naming the disconnection:\n%s", i+1, r.code, exitIncomplete, r.stderr)
		}
	}
}

// TestAcquireDrainsBacklogOnSignal interrupts acquire (Ctrl-C, SIGTERM)
// while the ring is full: it takes no new frame, writes every frame
// received, says so truly, and exits 3.
func TestAcquireDrainsBacklogOnSignal(t *testing.T) {
	t.Parallel()
	const n = 60
	src := simulateBacklog(t, n)
	for _, tt := range []struct{ end, name string }{{"interrupt", "interrupt"}, {"terminate", "terminated"}} {
		t.Run(tt.end, func(t *testing.T) {
			r := acquireWithBacklog(t, src, n, tt.end)
			t.Logf("received %d, written ok %d, recorded %d, ring full %v", r.received, r.ok, r.recorded, r.heldBack)
			if r.code != exitIncomplete {
				t.Errorf("exit status %d, want %d:\n%s", r.code, exitIncomplete, r.stderr)
			}
			if !strings.Contains(r.stderr, "interrupted ("+tt.name+")") || !strings.Contains(r.stderr, "holds the frames received before") {
				t.Errorf("acquire says:\n%s", r.stderr)
			}
		})
	}
}

// TestAcquireInterruptedWhileWaiting signals acquire once it says it
// waits for the detector, before any connected: it ends with a clear
// message, exit 3 (interrupted), long before its connect timeout, and
// leaves no file, not even the --record capture.
func TestAcquireInterruptedWhileWaiting(t *testing.T) {
	t.Parallel()
	for _, sig := range []os.Signal{syscall.SIGTERM, os.Interrupt} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			acq := startProc(t, "acquire", "--listen", scantest.FreeAddr(t), "-o", filepath.Join(dir, "scan.h5"),
				"--record", filepath.Join(dir, "scan.pmcap"), "--connect-timeout", "10m")
			acq.waitStderr(t, "waiting for module 0 on")
			acq.cmd.Process.Signal(sig)
			code := acq.wait(t, time.Minute) // a real hang only: the connect timeout is 10 minutes
			if code != exitIncomplete || !strings.Contains(acq.stderr.String(), "interrupted ("+sig.String()+") while waiting for the detector") {
				t.Errorf("exit status %d, want %d with a message:\n%s", code, exitIncomplete, acq.stderr.String())
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("files left behind: %v", entries)
			}
		})
	}
}

// TestSendSaysWhenPaceNotKept checks send's line when it falls behind
// --fps, and its silence when it keeps it.
func TestSendSaysWhenPaceNotKept(t *testing.T) {
	t.Parallel()
	tests := []struct {
		fps  float64
		st   fabric.SendStats
		want string
	}{
		{100, fabric.SendStats{Frames: 101, Sending: time.Second}, ""},
		{100, fabric.SendStats{Frames: 51, Sending: time.Second}, "could not keep --fps 100: sent 51 frames at 50.0 frames/s; the sender itself"},
		{100, fabric.SendStats{Frames: 51, Sending: time.Second, HeldBack: 500 * time.Millisecond}, "the receiver held it back 500ms"},
		{0, fabric.SendStats{Frames: 51, Sending: time.Second}, ""},
		{100, fabric.SendStats{Frames: 1}, ""},
	}
	for _, tt := range tests {
		var b bytes.Buffer
		warnPace(&b, tt.fps, tt.st)
		if got := b.String(); (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("fps %g, %+v: %q, want %q", tt.fps, tt.st, got, tt.want)
		}
	}
	// End to end: 20 Pi-mega-sized frames asked at 100000 a second.
	src := simulateBacklog(t, 20)
	addr := scantest.FreeAddr(t)
	acq := startProcEnv(t, backlogEnv(t, src), "acquire", "--listen", addr, "-o", filepath.Join(t.TempDir(), "scan.h5"), "--projections", "20", "--connect-timeout", "30s")
	code, _, stderr := runProcess(t, "send", src, "--to", addr, "--fps", "100000", "--timeout", "30s")
	if code != exitOK || !strings.Contains(stderr, "could not keep --fps 100000") {
		t.Errorf("send: exit status %d:\n%s", code, stderr)
	}
	if code := acq.wait(t, 30*time.Second); code != exitOK {
		t.Errorf("acquire exit status %d:\n%s", code, acq.stderr.String())
	}
}

// TestAcquireSecondSignalStopsAtOnce sends Ctrl-C twice while the ring is
// full: the second stops the pipeline at once (its backlog is recorded
// missing), says so, exits 3, and the file is finished with a record for
// every frame.
func TestAcquireSecondSignalStopsAtOnce(t *testing.T) {
	t.Parallel()
	const n = 60
	src := simulateBacklog(t, n)
	dir := t.TempDir()
	out, addr := filepath.Join(dir, "scan.h5"), scantest.FreeAddr(t)
	acq := startProcEnv(t, backlogEnv(t, src), append([]string{"acquire", "--listen", addr, "-o", out, "--projections", strconv.Itoa(n),
		"--slots", strconv.Itoa(backlogSlots), "--connect-timeout", "30s"}, backlogPipeline()...)...)
	sender := startProc(t, "send", src, "--to", addr, "--timeout", "30s")
	acq.waitForFile(t, writer.TempName(out))
	time.Sleep(500 * time.Millisecond)
	acq.cmd.Process.Signal(os.Interrupt)
	time.Sleep(100 * time.Millisecond)
	acq.cmd.Process.Signal(os.Interrupt)
	code := acq.wait(t, 120*time.Second)
	sender.cmd.Process.Kill()
	sender.wait(t, 10*time.Second)
	if msg := acq.stderr.String(); code != exitIncomplete || !strings.Contains(msg, "interrupt again: stopping at once") {
		t.Errorf("exit status %d, want %d saying it stops at once:\n%s", code, exitIncomplete, msg)
	}
	st := scantest.Statuses(t, out)
	received := scantest.SummaryCount(t, acq.stdout.String(), "received")
	if st[frame.StatusOK]+st[frame.StatusMissing] != n || st[frame.StatusOK] > received {
		t.Errorf("the file holds %v after receiving %d: want %d records, ok or missing, at most the received ok", st, received, n)
	}
	t.Logf("received %d, written ok %d", received, st[frame.StatusOK])
}

// TestAcquireModulesDrainOnSignal sends SIGTERM to an acquire of two
// modules whose rings are full: each module's file holds every frame its
// stream received.
func TestAcquireModulesDrainOnSignal(t *testing.T) {
	t.Parallel()
	const n = 40
	profile := filepath.Join(t.TempDir(), "two.yaml")
	text := "detector:\n  chips_x: 3\n  chips_y: 2\n  chip_width: 256\n  chip_height: 256\n  modules:\n" +
		"    - {id: 0, x: 0, y: 0}\n    - {id: 1, x: 800, y: 0}\n" +
		"output:\n  template: \"{scan}_mod{module}.h5\"\n"
	if err := os.WriteFile(profile, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for m := range 2 {
		path := filepath.Join(t.TempDir(), "big.pmcap")
		args := append([]string{"simulate", "-o", path, "--seed", strconv.Itoa(7 + m), "--frames", strconv.Itoa(n), "--module", strconv.Itoa(m)}, backlogScan...)
		if code := run(args); code != exitOK {
			t.Fatalf("simulate: exit status %d", code)
		}
		paths = append(paths, path)
	}
	dir, addr := t.TempDir(), scantest.FreeAddr(t)
	acq := startProc(t, append([]string{"acquire", "--profile", profile, "--listen", addr, "--output-dir", dir, "--scan-id", "two",
		"--projections", strconv.Itoa(n), "--slots", strconv.Itoa(backlogSlots), "--connect-timeout", "30s"}, backlogPipeline()...)...)
	for m, p := range paths {
		startProc(t, "send", p, "--to", addr, "--module", strconv.Itoa(m), "--timeout", "30s")
	}
	for m := range 2 {
		acq.waitForFile(t, writer.TempName(filepath.Join(dir, fmt.Sprintf("two_mod%d.h5", m))))
	}
	time.Sleep(500 * time.Millisecond)
	acq.cmd.Process.Signal(syscall.SIGTERM)
	code := acq.wait(t, 120*time.Second)
	if code != exitIncomplete || !strings.Contains(acq.stderr.String(), "interrupted (terminated)") {
		t.Errorf("exit status %d, want %d:\n%s", code, exitIncomplete, acq.stderr.String())
	}
	// The summary has a block per module file: its path, then its lines.
	stdout := acq.stdout.String()
	for m := range 2 {
		path := filepath.Join(dir, fmt.Sprintf("two_mod%d.h5", m))
		i := strings.Index(stdout, path+"\n")
		if i < 0 {
			t.Fatalf("no summary for %s:\n%s", path, stdout)
		}
		block := stdout[i:]
		if j := strings.Index(block[len(path)+1:], "\n/"); j >= 0 {
			block = block[:len(path)+1+j]
		}
		received, ok := scantest.SummaryCount(t, block, "received"), scantest.Statuses(t, path)[frame.StatusOK]
		t.Logf("module %d: received %d, written ok %d", m, received, ok)
		if received != ok || (received >= n && !scantest.Race) {
			t.Errorf("module %d: received %d of %d, the file holds %d ok", m, received, n, ok)
		}
	}
}

// frameBytes returns the mean size of a frame record of the capture at
// path, which holds n frames.
func frameBytes(t *testing.T, path string, n int) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size() / int64(n)
}

// waitForSize waits until the file at path holds size bytes, for at most
// limit.
func waitForSize(t *testing.T, path string, size int64, limit time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if info, err := os.Stat(path); err == nil && info.Size() >= size {
			return
		}
	}
	t.Logf("%s did not reach %d bytes in %v", path, size, limit)
}
