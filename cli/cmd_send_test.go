package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"h5ingest/scan/scantest"
	"h5ingest/writer"
)

// TestSendNoReceiver sends to a port where nothing listens: after
// --timeout, send says in plain words that nothing listens there and
// nothing was sent, exit status 1; before it, that it waits for a
// receiver, and where, until an interrupt ends the wait.
func TestSendNoReceiver(t *testing.T) {
	t.Parallel()
	src := simulateBacklog(t, 2)
	addr := scantest.FreeAddr(t)
	code, _, stderr := runProcess(t, "send", src, "--to", addr, "--timeout", "1s")
	for _, want := range []string{"no receiver at " + addr + " answered in 1s: nothing listens there", "nothing sent"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("send lacks %q:\n%s", want, stderr)
		}
	}
	if code != exitFailure {
		t.Errorf("exit status %d after the timeout, want %d", code, exitFailure)
	}

	waiting := startProc(t, "send", src, "--to", addr, "--timeout", "10m")
	waiting.waitStderr(t, "waiting for a receiver at "+addr+" (up to 10m0s)")
	waiting.cmd.Process.Signal(os.Interrupt)
	code = waiting.wait(t, time.Minute) // a real hang only: the timeout is 10 minutes
	if want := "interrupted while waiting for a receiver at " + addr + ": nothing sent"; code != exitFailure || !strings.Contains(waiting.stderr.String(), want) {
		t.Errorf("send interrupted while waiting: exit status %d, want %d saying %q:\n%s", code, exitFailure, want, waiting.stderr.String())
	}
}

// TestSendReceiverStops sends a scan to an acquire whose ring is full
// behind a slow pipeline, and stops the acquire (SIGTERM): send ends
// saying the receiver stopped the scan, the frames it sent and those the
// receiver confirmed (gave their slot back for), exit status 1. The
// confirmed ones are frames acquire received and wrote; the others, at
// most a ring of them, were in its ring or on their way: acquire received
// at least the confirmed and at most the sent. In both modes: write (a
// slot's credit) and send (a receive's).
func TestSendReceiverStops(t *testing.T) {
	t.Parallel()
	const n = 60
	src := simulateBacklog(t, n)
	for _, mode := range []string{"write", "send"} {
		t.Run(mode, func(t *testing.T) {
			sendReceiverStops(t, src, n, mode)
		})
	}
}

func sendReceiverStops(t *testing.T, src string, n int, mode string) {
	dir := t.TempDir()
	out, rec, addr := filepath.Join(dir, "scan.h5"), filepath.Join(dir, "scan.pmcap"), scantest.FreeAddr(t)
	env := append(backlogEnv(t, src), "H5INGEST_SOURCE_MODE="+mode)
	acq := startProcEnv(t, env, append([]string{"acquire", "--listen", addr, "-o", out, "--record", rec, "--projections", strconv.Itoa(n),
		"--slots", strconv.Itoa(backlogSlots), "--connect-timeout", "30s", "--idle-timeout", "20s"}, backlogPipeline()...)...)
	sender := startProc(t, "send", src, "--to", addr, "--timeout", "30s", "--mode", mode)
	acq.waitForFile(t, writer.TempName(out))
	waitForSize(t, rec, frameBytes(t, src, n)*int64(backlogSlots+4), 20*time.Second)
	acq.cmd.Process.Signal(syscall.SIGTERM)
	if code := acq.wait(t, 120*time.Second); code != exitIncomplete {
		t.Errorf("acquire: exit status %d, want %d\n%s", code, exitIncomplete, acq.stderr.String())
	}
	code := sender.wait(t, 60*time.Second)
	msg := sender.stderr.String()
	received := scantest.SummaryCount(t, acq.stdout.String(), "received")
	ok := scantest.SummaryCount(t, acq.stdout.String(), "ok")
	var sent, confirmed int
	if m := regexp.MustCompile(`the receiver stopped the scan and closed the connection: sent (\d+) frames; the receiver confirmed (\d+) \(the other (\d+) `).FindStringSubmatch(msg); m != nil {
		sent, _ = strconv.Atoi(m[1])
		confirmed, _ = strconv.Atoi(m[2])
		if other, _ := strconv.Atoi(m[3]); other != sent-confirmed {
			t.Errorf("send says %d sent, %d confirmed and %d others", sent, confirmed, other)
		}
	} else if m := regexp.MustCompile(`the receiver stopped the scan after (\d+) frames, every one it confirmed`).FindStringSubmatch(msg); m != nil {
		sent, _ = strconv.Atoi(m[1])
		confirmed = sent
	} else {
		t.Fatalf("send: exit status %d, want %d saying the receiver stopped the scan, and the frames it confirmed:\n%s", code, exitFailure, msg)
	}
	if code != exitFailure {
		t.Errorf("send: exit status %d, want %d", code, exitFailure)
	}
	if confirmed > received || received > sent || sent >= n || received-confirmed > backlogSlots || ok != received {
		t.Errorf("send says %d sent, %d confirmed; acquire received %d (ok %d) of %d, with a ring of %d", sent, confirmed, received, ok, n, backlogSlots)
	}
	if want := fmt.Sprintf("%d sent, %d confirmed by the receiver", sent, confirmed); !strings.Contains(sender.stdout.String(), want) {
		t.Errorf("send's summary lacks %q:\n%s", want, sender.stdout.String())
	}
	t.Logf("send: %s; acquire received %d", strings.TrimSpace(msg), received)
}
