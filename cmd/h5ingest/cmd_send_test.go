package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"h5ingest/writer"
)

// TestSendNoReceiver sends to a port where nothing listens: send says
// that it waits for a receiver, then, after --timeout, in plain words that
// nothing listens there and nothing was sent; exit status 1.
func TestSendNoReceiver(t *testing.T) {
	src := simulateBacklog(t, 2)
	addr := freeAddr(t)
	start := time.Now()
	code, _, stderr := runProcess(t, "send", src, "--to", addr, "--timeout", "1s")
	for _, want := range []string{"waiting for a receiver at " + addr + " (up to 1s)",
		"no receiver at " + addr + " answered in 1s: nothing listens there", "nothing sent"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("send lacks %q:\n%s", want, stderr)
		}
	}
	if code != exitFailure || time.Since(start) > 30*time.Second {
		t.Errorf("exit status %d after %v, want %d soon after the timeout", code, time.Since(start), exitFailure)
	}
}

// TestSendReceiverStops sends a scan to an acquire whose ring is full
// behind a slow pipeline, and stops the acquire (SIGTERM): send ends
// saying the receiver stopped the scan after the frames it delivered, as
// many as acquire received or more (those it sent into the stopped ring),
// exit status 1.
func TestSendReceiverStops(t *testing.T) {
	const n = 60
	src := simulateBacklog(t, n)
	dir := t.TempDir()
	out, rec, addr := filepath.Join(dir, "scan.h5"), filepath.Join(dir, "scan.pmcap"), freeAddr(t)
	acq := startProc(t, append([]string{"acquire", "--listen", addr, "-o", out, "--record", rec, "--projections", strconv.Itoa(n),
		"--slots", strconv.Itoa(backlogSlots), "--connect-timeout", "30s", "--idle-timeout", "20s"}, backlogPipeline()...)...)
	sender := startProc(t, "send", src, "--to", addr, "--timeout", "30s")
	acq.waitForFile(t, writer.TempName(out))
	waitForSize(t, rec, frameBytes(t, src, n)*int64(backlogSlots+4), 20*time.Second)
	acq.cmd.Process.Signal(syscall.SIGTERM)
	if code := acq.wait(t, 120*time.Second); code != exitIncomplete {
		t.Errorf("acquire: exit status %d, want %d\n%s", code, exitIncomplete, acq.stderr.String())
	}
	code := sender.wait(t, 60*time.Second)
	msg := sender.stderr.String()
	m := regexp.MustCompile(`the receiver stopped the scan after (\d+) frames`).FindStringSubmatch(msg)
	received := summaryCount(t, acq.stdout.String(), "received")
	if code != exitFailure || m == nil {
		t.Fatalf("send: exit status %d, want %d saying the receiver stopped the scan:\n%s", code, exitFailure, msg)
	}
	if sent, _ := strconv.Atoi(m[1]); sent < received || sent >= n {
		t.Errorf("send says %d frames, acquire received %d of %d", sent, received, n)
	}
	t.Logf("send: %s", strings.TrimSpace(msg))
}
