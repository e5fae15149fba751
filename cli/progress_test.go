package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestProgressReporter drives a reporter tick by tick: on a terminal it
// redraws one line in place and draws the last state once more at the
// end; otherwise it writes a plain line at each tick and nothing at the
// end.
func TestProgressReporter(t *testing.T) {
	for _, tc := range []struct {
		terminal bool
		want     string
	}{
		{true, "\rstate 1 (terminal)\rstate 2 (terminal)\rstate 3 (terminal)\n"},
		{false, "state 1\nstate 2\n"},
	} {
		t.Run(fmt.Sprint("terminal=", tc.terminal), func(t *testing.T) {
			var out strings.Builder
			tick := make(chan time.Time) // unbuffered: a send returns once the reporter took the tick
			n := 0
			r := newProgressReporter(&out, tc.terminal, tick, func(terminal bool) string {
				n++
				if terminal {
					return fmt.Sprintf("state %d (terminal)", n)
				}
				return fmt.Sprintf("state %d", n)
			})
			tick <- time.Now()
			tick <- time.Now()
			r.Stop() // returns once the reporter has written all it will
			if out.String() != tc.want {
				t.Errorf("reported %q, want %q", out.String(), tc.want)
			}
		})
	}
}

// captureStderr runs f with standard error going to a pipe, and
// returns what f wrote there.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = wr
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(rd)
		done <- b
	}()
	defer func() {
		os.Stderr = old
	}()
	f()
	wr.Close()
	return string(<-done)
}

// TestSimulateVerifyProgress checks that simulate and verify show their
// progress as replay does: on a terminal a line redrawn in place, whose
// last state, drawn at the end, is the whole job done; in a log no
// redrawing.
func TestSimulateVerifyProgress(t *testing.T) {
	dir := t.TempDir()
	capture, h5 := filepath.Join(dir, "scan.pmcap"), filepath.Join(dir, "scan.h5")
	for _, tc := range []struct {
		terminal bool
		last     []string // what the last line must match, per command; nil: no progress line
	}{
		{true, []string{
			`\rsimulate: written \[#{20}\] \d+/\d+ MB  \d+ MB/s\n`,
			`\rframes \[#{20}\] 12/12  `,
			`\rverify: frames \[#{20}\] 12/12 read  \d+ frames/s\n`,
		}},
		{false, nil},
	} {
		t.Run(fmt.Sprint("terminal=", tc.terminal), func(t *testing.T) {
			old := stderrTerminal
			stderrTerminal = func() bool { return tc.terminal }
			t.Cleanup(func() { stderrTerminal = old })
			for i, args := range [][]string{
				append([]string{"simulate", "-o", capture, "--overwrite", "--darks", "1", "--flats", "1", "--projections", "10"}, smallScan...),
				{"replay", capture, "-o", h5, "--overwrite"},
				{"verify", h5},
			} {
				var code int
				stderr := captureStderr(t, func() { code = run(args) })
				if code != exitOK {
					t.Fatalf("%s: exit status %d\n%s", args[0], code, stderr)
				}
				if tc.last == nil {
					if strings.Contains(stderr, "\r") {
						t.Errorf("%s redraws a line where standard error is no terminal:\n%q", args[0], stderr)
					}
					continue
				}
				if !regexp.MustCompile(tc.last[i]).MatchString(stderr) {
					t.Errorf("%s: standard error %q lacks a last progress line like %q", args[0], stderr, tc.last[i])
				}
			}
		})
	}
}
