package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"h5ingest/pipeline"
)

// progressReporter prints a long job's progress while it runs (replay's
// and acquire's pipelines, simulate, verify): on a terminal one line
// redrawn in place, drawn once more at the end; otherwise a plain line
// at each tick, a few seconds apart, for a log.
type progressReporter struct {
	w        io.Writer
	terminal bool
	tick     <-chan time.Time
	line     func(terminal bool) string // the job's state, now
	stop     chan struct{}
	done     chan struct{}
}

// stderrTerminal reports whether standard error is a terminal.
var stderrTerminal = func() bool { return term.IsTerminal(int(os.Stderr.Fd())) }

// Report intervals: on a terminal, often enough to look alive; in a log,
// seldom enough to read.
const (
	terminalEvery = 200 * time.Millisecond
	logEvery      = 5 * time.Second
)

// startReport reports what line says on standard error until the
// function it returns is called.
func startReport(line func(terminal bool) string) (stop func()) {
	terminal := stderrTerminal()
	every := logEvery
	if terminal {
		every = terminalEvery
	}
	t := time.NewTicker(every)
	r := newProgressReporter(os.Stderr, terminal, t.C, line)
	return func() {
		r.Stop()
		t.Stop()
	}
}

// newProgressReporter starts reporting what line says to w at each tick.
func newProgressReporter(w io.Writer, terminal bool, tick <-chan time.Time, line func(terminal bool) string) *progressReporter {
	r := &progressReporter{w: w, terminal: terminal, tick: tick, line: line, stop: make(chan struct{}), done: make(chan struct{})}
	go r.run()
	return r
}

// startProgress starts reporting p's progress on standard error, until the
// function it returns is called (scan.Options.Progress).
func startProgress(p *pipeline.Pipeline, planned int) (stop func()) {
	return startReport(func(terminal bool) string { return pipelineLine(p.Progress(), planned, terminal) })
}

func (r *progressReporter) run() {
	defer close(r.done)
	for {
		select {
		case <-r.stop:
			if r.terminal {
				fmt.Fprintf(r.w, "\r%s\n", r.line(true))
			}
			return
		case <-r.tick:
			if r.terminal {
				fmt.Fprintf(r.w, "\r%s", r.line(true))
			} else {
				fmt.Fprintln(r.w, r.line(false))
			}
		}
	}
}

// Stop ends the reports, drawing the last state on a terminal.
func (r *progressReporter) Stop() {
	close(r.stop)
	<-r.done
}

// pipelineLine renders one progress line of a scan's pipeline.
func pipelineLine(p pipeline.Progress, planned int, terminal bool) string {
	secs := p.Elapsed.Seconds()
	var fps, mbps float64
	if secs > 0 {
		fps = float64(p.Written) / secs
		mbps = float64(p.ImageBytes) / secs / 1e6
	}
	problems := p.CRCMismatch + p.Rejected + p.Duplicate + p.OutOfRange + p.NotFrame + p.Overflow
	return fmt.Sprintf("frames %s  %.0f frames/s  %.0f MB/s  ratio %.2f  problems %d",
		count(p.Written, planned, terminal), fps, mbps, p.Ratio(), problems)
}

// count renders done of total (total 0: not known), with a bar on a
// terminal.
func count(done, total int, terminal bool) string {
	if total <= 0 {
		return fmt.Sprintf("%d", done)
	}
	s := fmt.Sprintf("%d/%d", done, total)
	if terminal {
		s = bar(done, total, 20) + " " + s
	}
	return s
}

// bar renders a progress bar of width cells.
func bar(done, total, width int) string {
	n := width
	if total > 0 && done < total {
		n = done * width / total
	}
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}
