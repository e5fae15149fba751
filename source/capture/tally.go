package capture

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"

	"h5ingest/frame"
)

// Sniff reports whether the file at path is a regular file that starts
// like a capture file. It does not open anything else: opening a named
// pipe would wait for a writer.
func Sniff(path string) bool {
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [len(Magic)]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && bytes.Equal(magic[:], Magic[:])
}

// Tally is what a capture holds, counted.
type Tally struct {
	Records int                     // records read
	Modules map[uint16]*ModuleTally // by module id
}

// IDs returns the ids of the modules the capture holds, in order.
func (t Tally) IDs() []uint16 {
	ids := make([]uint16, 0, len(t.Modules))
	for id := range t.Modules {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// ModuleTally is what a capture holds of one module.
type ModuleTally struct {
	Records     int            // records of the module
	First, Last uint64         // lowest and highest frame number
	Start, End  uint64         // earliest and latest timestamp, ns
	Formats     []frame.Format // formats of the records whose header checks out, first seen first
	BadHeaders  int            // records whose header does not check out (size, encoding)
	seen        map[uint64]bool
}

// Copies returns how many records repeat a frame number seen before.
func (m *ModuleTally) Copies() int { return m.Records - len(m.seen) }

// Absent returns how many frame numbers from First to Last no record has.
func (m *ModuleTally) Absent() uint64 { return m.Last - m.First + 1 - uint64(len(m.seen)) }

// add counts the record of header h.
func (m *ModuleTally) add(h frame.Header) {
	if m.Records == 0 {
		m.First, m.Last, m.Start, m.End = h.FrameNumber, h.FrameNumber, h.Timestamp, h.Timestamp
	}
	m.Records++
	m.seen[h.FrameNumber] = true
	m.First, m.Last = min(m.First, h.FrameNumber), max(m.Last, h.FrameNumber)
	m.Start, m.End = min(m.Start, h.Timestamp), max(m.End, h.Timestamp)
	if h.Check() != nil {
		m.BadHeaders++
	} else if !slices.Contains(m.Formats, h.Format) {
		m.Formats = append(m.Formats, h.Format)
	}
}

// Tally reads every record left and counts them by module. The error is
// what stopped the reading before the end (a capture cut short wraps
// ErrTruncated); the tally counts the records up to there.
func (cr *Reader) Tally() (Tally, error) {
	t := Tally{Modules: map[uint16]*ModuleTally{}}
	var buf []byte
	for {
		h, _, err := cr.Next(buf)
		if errors.Is(err, io.ErrShortBuffer) {
			buf = make([]byte, h.PayloadSize)
			h, _, err = cr.Next(buf)
		}
		if errors.Is(err, io.EOF) {
			return t, nil
		}
		if err != nil {
			return t, err
		}
		t.Records++
		m := t.Modules[h.ModuleID]
		if m == nil {
			m = &ModuleTally{seen: map[uint64]bool{}}
			t.Modules[h.ModuleID] = m
		}
		m.add(h)
	}
}
