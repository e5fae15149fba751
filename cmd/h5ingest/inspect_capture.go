package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"h5ingest/frame"
	"h5ingest/scan"
	"h5ingest/source/capture"
)

// isCapture reports whether the file at path starts like a capture file.
func isCapture(path string) bool {
	// Opening a named pipe would wait for a writer.
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [len(capture.Magic)]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && bytes.Equal(magic[:], capture.Magic[:])
}

// captureModule is what a capture holds of one module.
type captureModule struct {
	records  int
	numbers  map[uint64]bool // frame numbers seen
	lo, hi   uint64
	formats  []frame.Format
	bad      int // records whose header does not check out (size, encoding)
	tsLo     uint64
	tsHi     uint64
	payloads int64
}

// add counts one record of the module.
func (m *captureModule) add(h frame.Header, payload []byte) {
	m.records++
	m.numbers[h.FrameNumber] = true
	m.lo, m.hi = min(m.lo, h.FrameNumber), max(m.hi, h.FrameNumber)
	m.tsLo, m.tsHi = min(m.tsLo, h.Timestamp), max(m.tsHi, h.Timestamp)
	m.payloads += int64(len(payload))
	if h.Check() != nil {
		m.bad++
	} else if !slices.Contains(m.formats, h.Format) {
		m.formats = append(m.formats, h.Format)
	}
}

// tally reads every record of r and counts them by module; readErr is
// what stopped the reading before the end.
func tally(r *capture.Reader) (modules map[uint16]*captureModule, total int, readErr error) {
	modules = map[uint16]*captureModule{}
	var buf []byte
	for {
		h, payload, err := r.Next(buf)
		if errors.Is(err, io.ErrShortBuffer) {
			buf = make([]byte, h.PayloadSize)
			h, payload, err = r.Next(buf)
		}
		if errors.Is(err, io.EOF) {
			return modules, total, nil
		}
		if err != nil {
			return modules, total, err
		}
		total++
		m := modules[h.ModuleID]
		if m == nil {
			m = &captureModule{numbers: map[uint64]bool{}, lo: h.FrameNumber, hi: h.FrameNumber, tsLo: h.Timestamp, tsHi: h.Timestamp}
			modules[h.ModuleID] = m
		}
		m.add(h, payload)
	}
}

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
	modules, total, readErr := tally(r)
	info, _ := os.Stat(path)
	size := int64(0)
	if info != nil {
		size = info.Size()
	}
	fmt.Fprintf(out, "  records       %s of %s, %s\n", plural(total, "frame"), plural(len(modules), "module"), scan.FormatBytes(size))
	ids := make([]uint16, 0, len(modules))
	for id := range modules {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		m := modules[id]
		line := fmt.Sprintf("  module %-6d %s, frame numbers %d to %d", id, plural(m.records, "frame"), m.lo, m.hi)
		if dups := m.records - len(m.numbers); dups > 0 {
			line += fmt.Sprintf(" (%s of a number seen before)", plural(dups, "copy"))
		}
		if gaps := m.hi - m.lo + 1 - uint64(len(m.numbers)); gaps > 0 {
			line += fmt.Sprintf(", %d of them absent", gaps)
		}
		for _, f := range m.formats {
			line += fmt.Sprintf(", %v", f)
		}
		if m.bad > 0 {
			line += fmt.Sprintf(", %d with a header that does not match its payload", m.bad)
		}
		if span := float64(m.tsHi-m.tsLo) / 1e9; span > 0 && m.records > 1 {
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
