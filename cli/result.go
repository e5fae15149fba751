package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"h5ingest/scan"
	"h5ingest/stream"
	"h5ingest/writer"

	"go.uber.org/zap"
)

// printNote prints a scan's note as one line on w: a warning as
// "h5ingest: warning: ...", any other note as "h5ingest: ...".
func printNote(w io.Writer, n scan.Note) {
	if n.Kind == scan.Warning {
		fmt.Fprintf(w, "h5ingest: warning: %s\n", n.Text)
		return
	}
	fmt.Fprintf(w, "h5ingest: %s\n", n.Text)
}

// printResult prints what a scan did: the notes about the whole scan on
// errs, then each module's summary on out followed by its notes on errs,
// then the master's notes and its line.
func printResult(out, errs io.Writer, res scan.Result) {
	for _, n := range res.Notes {
		printNote(errs, n)
	}
	for _, m := range res.Modules {
		printSummary(out, m)
		for _, n := range m.Notes {
			printNote(errs, n)
		}
	}
	if m := res.Master; m != nil {
		for _, n := range m.Notes {
			printNote(errs, n)
		}
		fmt.Fprintf(out, "%s\n  master          %d modules, %d frames of %d x %d\n", m.Path, m.Modules, m.Frames, m.Height, m.Width)
	}
}

// printSummary prints the table a person reads at the end of the scan of
// a module.
func printSummary(w io.Writer, s scan.Summary) {
	p := s.Progress
	secs := p.Elapsed.Seconds()
	rate := func(v float64) float64 {
		if secs == 0 {
			return 0
		}
		return v / secs
	}
	fmt.Fprintf(w, "%s\n", s.Path)
	fmt.Fprintf(w, "  frames          %d in the scan, %d written\n", s.Frames, p.Written)
	fmt.Fprintf(w, "  ok              %d\n", p.OK)
	fmt.Fprintf(w, "  missing         %d\n", p.Missing)
	if p.Discarded > 0 {
		fmt.Fprintf(w, "  discarded       %d arrived but not written: the scan was stopped at once, before it could write them (recorded missing)\n", p.Discarded)
	}
	fmt.Fprintf(w, "  crc mismatch    %d\n", p.CRCMismatch)
	fmt.Fprintf(w, "  rejected        %d\n", p.Rejected)
	fmt.Fprintf(w, "  duplicates      %d dropped\n", p.Duplicate)
	fmt.Fprintf(w, "  out of range    %d rejected (beyond the scan, not written)\n", p.OutOfRange)
	if p.Overflow > 0 {
		fmt.Fprintf(w, "  pipeline full   %d dropped (recorded missing)\n", p.Overflow)
	}
	fmt.Fprintf(w, "  time            %.2f s, %.1f frames/s\n", secs, rate(float64(p.Written)))
	if a := p.Active.Seconds(); a > 0 {
		fmt.Fprintf(w, "  pipeline time   %.4g s, %.1f frames/s, first frame in to last chunk written\n", a, float64(p.Written)/a)
	}
	fmt.Fprintf(w, "  throughput      %.0f MB/s raw in, %.0f MB/s decoded, %.0f MB/s stored\n",
		rate(float64(p.RawBytes))/1e6, rate(float64(p.ImageBytes))/1e6, rate(float64(p.StoredBytes))/1e6)
	fmt.Fprintf(w, "  compression     %.2f\n", p.Ratio())
	if l := s.Live; l != nil {
		fmt.Fprintf(w, "  stream          %d images sent, %d dropped (%s), %d thinned\n", l.Sent, l.Dropped, droppedWhy(l.Stats), l.Thinned)
		end := "delivered"
		if !l.Ended {
			end = "not delivered"
		}
		fmt.Fprintf(w, "  stream end      %s\n", end)
	}
	for _, l := range s.Series { // a processor's own series: flatfield's previews
		end := "end delivered"
		if !l.Ended {
			end = "end not delivered"
		}
		fmt.Fprintf(w, "  %-15s %d images sent, %d dropped (%s), %s\n", l.Name, l.Sent, l.Dropped, leftOut(l.Stats), end)
	}
	if r := s.Received; r != nil && r.Uncredited {
		fmt.Fprintf(w, "  received        %d frames, %d bytes; %d skipped by the front end, %d out of order, %d slots without a whole frame\n",
			r.Frames, r.Bytes, r.Gaps, r.Disordered, r.Damaged)
		fmt.Fprintf(w, "  overrun         %d (recorded missing)\n", r.Overrun)
	} else if r != nil {
		fmt.Fprintf(w, "  received        %d frames, %d bytes; ring full (sender held back) %v\n",
			r.Frames, r.Bytes, r.HeldBack.Round(time.Microsecond))
	}
	if st := s.Stages; st != nil {
		ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 }
		fmt.Fprintf(w, "  stages          decode %.2f ms/batch, compress %.2f ms/frame, write %.2f ms/frame\n",
			ms(st.Decode), ms(st.Compress), ms(st.Write))
	}
	if s.Report != "" {
		fmt.Fprintf(w, "  report          %s\n", s.Report)
	}
}

// droppedWhy says why a stream's images were left out, for the summary.
func droppedWhy(st stream.Stats) string {
	if st.Dropped == 0 {
		return "none left out"
	}
	return leftOut(st) + ": in the file, not the stream"
}

// leftOut says how many of a stream's images were left out, and why.
func leftOut(st stream.Stats) string {
	if st.Dropped == 0 {
		return "none left out"
	}
	var why []string
	for _, c := range []struct {
		n    uint64
		what string
	}{
		{st.NoConsumer, "no consumer connected"},
		{st.Slow, "the consumer was slower than the scan"},
		{st.OutOfOrder, "came after their turn"},
		{st.Undelivered, "not delivered within stream.linger"},
	} {
		if c.n > 0 {
			why = append(why, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return strings.Join(why, ", ")
}

// scanDone prints what a scan did, the summaries on standard output and
// the notes on standard error, and returns its error; pre-scan checks
// that failed are printed one a line, and leave scan.ErrChecks, which
// Run does not print again.
func scanDone(log *zap.Logger, res scan.Result, err error) error {
	if d := writer.Detail(err); d != "" {
		// The command line has the cause and remedy in one line; HDF5's
		// whole error stack is for the debug log.
		log.Debug("hdf5 error stack", zap.String("stack", d))
	}
	printResult(os.Stdout, os.Stderr, res)
	return checksFailed(os.Stderr, err)
}

// checksFailed prints each failure of pre-scan checks that failed on w
// and returns scan.ErrChecks in their place; any other err it returns as
// it is.
func checksFailed(w io.Writer, err error) error {
	var failed *scan.ChecksError
	if !errors.As(err, &failed) {
		return err
	}
	for _, f := range failed.Failures {
		fmt.Fprintf(w, "h5ingest: pre-scan check: %v\n", scan.Explain(f))
	}
	return scan.ErrChecks
}
