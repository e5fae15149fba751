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

// progressReporter prints a pipeline's progress while it runs: one line
// redrawn in place on a terminal, plain periodic lines otherwise.
type progressReporter struct {
	w        io.Writer
	terminal bool
	every    time.Duration
	planned  int
	stop     chan struct{}
	done     chan struct{}
}

// startProgress starts reporting p's progress on standard error, until the
// function it returns is called (scan.Options.Progress).
func startProgress(p *pipeline.Pipeline, planned int) (stop func()) {
	r := &progressReporter{
		w:        os.Stderr,
		terminal: term.IsTerminal(int(os.Stderr.Fd())),
		planned:  planned,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	r.every = 5 * time.Second
	if r.terminal {
		r.every = 200 * time.Millisecond
	}
	go r.run(p)
	return r.Stop
}

func (r *progressReporter) run(p *pipeline.Pipeline) {
	defer close(r.done)
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			if r.terminal {
				fmt.Fprintf(r.w, "\r%s\n", r.line(p.Progress()))
			}
			return
		case <-t.C:
			if r.terminal {
				fmt.Fprintf(r.w, "\r%s", r.line(p.Progress()))
			} else {
				fmt.Fprintln(r.w, r.line(p.Progress()))
			}
		}
	}
}

// Stop ends the reports, drawing the last state on a terminal.
func (r *progressReporter) Stop() {
	close(r.stop)
	<-r.done
}

// line renders one progress line.
func (r *progressReporter) line(p pipeline.Progress) string {
	secs := p.Elapsed.Seconds()
	var fps, mbps float64
	if secs > 0 {
		fps = float64(p.Written) / secs
		mbps = float64(p.ImageBytes) / secs / 1e6
	}
	frames := fmt.Sprintf("%d", p.Written)
	if r.planned > 0 {
		frames = fmt.Sprintf("%d/%d", p.Written, r.planned)
		if r.terminal {
			frames = bar(p.Written, r.planned, 20) + " " + frames
		}
	}
	problems := p.CRCMismatch + p.Rejected + p.Duplicate + p.OutOfRange + p.NotFrame + p.Overflow
	return fmt.Sprintf("frames %s  %.0f frames/s  %.0f MB/s  ratio %.2f  problems %d",
		frames, fps, mbps, p.Ratio(), problems)
}

// bar renders a progress bar of width cells.
func bar(done, total, width int) string {
	n := width
	if total > 0 && done < total {
		n = done * width / total
	}
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}
