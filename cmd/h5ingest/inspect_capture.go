package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"h5ingest/scan"
	"h5ingest/source/capture"
)

// printCaptureHeader prints who wrote the capture at path, when, and the
// plan it records.
func printCaptureHeader(out io.Writer, path string, meta capture.Metadata) {
	fmt.Fprintf(out, "%s\n", path)
	fmt.Fprintf(out, "  capture       written by %s at %s, profile %q\n", orUnknown(meta.Software), orUnknown(meta.Created), meta.Profile)
	if p, ok, err := scan.CapturePlan(meta); err != nil {
		fmt.Fprintf(out, "  plan          unreadable: %v\n", err)
	} else if ok {
		fmt.Fprintf(out, "  plan          %v\n", p)
	} else {
		fmt.Fprintf(out, "  plan          none recorded\n")
	}
}

// inspectCapture summarises a capture file: who wrote it and when, the
// plan it records, and per module the frames it holds, their numbers and
// formats. A capture that cannot be read to its end is summarised up to
// there, with the reason, and exit status 3.
func inspectCapture(out io.Writer, path string) error {
	r, err := capture.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	printCaptureHeader(out, path, r.Metadata())
	tally, readErr := r.Tally()
	size := int64(0)
	if info, err := os.Stat(path); err == nil {
		size = info.Size()
	}
	fmt.Fprintf(out, "  records       %s of %s, %s\n", plural(tally.Records, "frame"), plural(len(tally.Modules), "module"), scan.FormatBytes(size))
	for _, id := range tally.IDs() {
		m := tally.Modules[id]
		line := fmt.Sprintf("  module %-6d %s, frame numbers %d to %d", id, plural(m.Records, "frame"), m.First, m.Last)
		if n := m.Copies(); n > 0 {
			line += fmt.Sprintf(" (%s of a number seen before)", plural(n, "copy"))
		}
		if n := m.Absent(); n > 0 {
			line += fmt.Sprintf(", %d of them absent", n)
		}
		for _, f := range m.Formats {
			line += fmt.Sprintf(", %v", f)
		}
		if m.BadHeaders > 0 {
			line += fmt.Sprintf(", %d with a header that does not match its payload", m.BadHeaders)
		}
		if span := float64(m.End-m.Start) / 1e9; span > 0 && m.Records > 1 {
			line += fmt.Sprintf(", %.3f s of detector time", span)
		}
		fmt.Fprintln(out, line)
	}
	if readErr != nil {
		what := "unreadable"
		if errors.Is(readErr, capture.ErrTruncated) {
			what = "cut short"
		}
		fmt.Fprintf(out, "  %-13s %v\n", what, readErr)
		return scan.ErrIncomplete
	}
	return nil
}

// plural returns n and the noun, in the plural unless n is 1.
func plural(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case noun == "copy":
		return fmt.Sprintf("%d copies", n)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// orUnknown returns s, or "(not recorded)" where it is empty.
func orUnknown(s string) string {
	if s == "" {
		return "(not recorded)"
	}
	return s
}
