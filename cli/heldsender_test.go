package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/scan/scantest"
	"h5ingest/source/capture"
	"h5ingest/source/fabric"
)

// A held sender is a detector module that the test paces: a process of
// its own (so that the test can kill it as a detector dies) that sends a
// capture's frames over the tcp provider only when the test asks, so that
// a scan stands still, mid-way, for as long as the test reads it.
//
// The test binary runs as one where heldSenderEnv is set (TestMain), with
// the capture and the receiver's address as arguments. Each line it reads
// on standard input is a count of frames to send next; once they are
// posted it prints "sent N" (N frames in all) on standard output. At the
// end of its input it sends the rest, ends the scan and prints
// "sent N, done".
const heldSenderEnv = "H5INGEST_TEST_HELD_SENDER"

// runHeldSender is the held sender's process; it returns its exit status.
func runHeldSender(args []string) int {
	if err := heldSend(args); err != nil {
		fmt.Fprintln(os.Stderr, "held sender:", err)
		return exitFailure
	}
	return exitOK
}

func heldSend(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("want a capture and an address, got %q", args)
	}
	r, format, err := capture.OpenScan(args[0])
	if err != nil {
		return err
	}
	defer r.Close()
	ctx := context.Background()
	s, err := fabric.DialWait(ctx, fabric.SenderConfig{Provider: "tcp", Addr: args[1], Timeout: time.Minute,
		Hello: fabric.Hello{Mode: fabric.ModeWrite, Format: format}})
	if err != nil {
		return err
	}
	sent := 0
	// send posts up to n frames, fewer where the capture ends first.
	send := func(n int) (ended bool, err error) {
		for range n {
			buf, err := s.Buffer(ctx)
			if err != nil {
				return false, err
			}
			h, payload, err := r.Next(buf[frame.HeaderSize:])
			if errors.Is(err, io.EOF) {
				return true, nil
			}
			if err != nil {
				return false, err
			}
			h.Put(buf)
			if err := s.Post(frame.HeaderSize + len(payload)); err != nil {
				return false, err
			}
			sent++
		}
		return false, nil
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		n, err := strconv.Atoi(in.Text())
		if err != nil {
			return fmt.Errorf("a count of frames to send, not %q", in.Text())
		}
		if _, err := send(n); err != nil {
			s.Abort()
			return err
		}
		fmt.Printf("sent %d\n", sent)
	}
	for {
		ended, err := send(1)
		if err != nil {
			s.Abort()
			return err
		}
		if ended {
			break
		}
	}
	if _, err := s.Close(ctx); err != nil {
		return err
	}
	fmt.Printf("sent %d, done\n", sent)
	return nil
}

// heldSender is the test's side of a held sender process.
type heldSender struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  <-chan string // what it prints, a line at a time; closed at its end
	stderr scantest.Buffer
}

// startHeldSender starts a held sender of the capture at path to the
// receiver at addr; it sends nothing until asked. It is killed at the end
// of the test where it still runs.
func startHeldSender(t *testing.T, path, addr string) *heldSender {
	t.Helper()
	h := &heldSender{cmd: command(path, addr)}
	h.cmd.Env = append(h.cmd.Env, heldSenderEnv+"=1")
	h.cmd.Stderr = &h.stderr
	var err error
	if h.in, err = h.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h.lines = lines(out)
	t.Cleanup(h.kill)
	return h
}

// lines returns the lines r gives, on a channel closed at r's end.
func lines(r io.Reader) <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		for sc := bufio.NewScanner(r); sc.Scan(); {
			ch <- sc.Text()
		}
	}()
	return ch
}

// lineBound is how long a test waits for a process's next line: a bound
// on a hang, never reached by a process that works.
const lineBound = 2 * time.Minute

// nextLine returns the next line of ch, from what, failing the test where
// ch ends first or lineBound passes; stderr is what says why.
func nextLine(t *testing.T, ch <-chan string, what string, stderr fmt.Stringer) string {
	t.Helper()
	select {
	case line, ok := <-ch:
		if !ok {
			t.Fatalf("%s ended:\n%s", what, stderr)
		}
		return line
	case <-time.After(lineBound):
		t.Fatalf("%s said nothing for %v:\n%s", what, lineBound, stderr)
		return ""
	}
}

// send has the sender post n frames more, and waits until it has.
func (h *heldSender) send(t *testing.T, n int) {
	t.Helper()
	if _, err := fmt.Fprintln(h.in, n); err != nil {
		t.Fatalf("held sender: %v\n%s", err, h.stderr.String())
	}
	h.expect(t, "sent ")
}

// finish has the sender send the rest of its capture and end the scan,
// and waits for it to exit.
func (h *heldSender) finish(t *testing.T) {
	t.Helper()
	h.in.Close()
	h.expect(t, "done")
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("held sender: %v\n%s", err, h.stderr.String())
	}
}

// expect waits for the sender's next line, failing the test where it
// does not contain text.
func (h *heldSender) expect(t *testing.T, text string) {
	t.Helper()
	if line := nextLine(t, h.lines, "the held sender", &h.stderr); !strings.Contains(line, text) {
		t.Fatalf("held sender said %q, want %q:\n%s", line, text, h.stderr.String())
	}
}

// kill kills the sender, as a detector module dies, where it still runs.
func (h *heldSender) kill() {
	if h.cmd.ProcessState == nil {
		h.cmd.Process.Kill()
		h.cmd.Wait()
	}
}
