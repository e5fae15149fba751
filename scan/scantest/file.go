package scantest

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/source/sim"
	"h5ingest/writer"
)

// Records returns the per-frame records of the scan's file at path.
func Records(t testing.TB, path string) []frame.Record {
	t.Helper()
	r, err := writer.OpenPlain(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recs, err := r.Records()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return recs
}

// Statuses returns how many frames of the file at path are recorded with
// each status.
func Statuses(t testing.TB, path string) map[uint8]int {
	t.Helper()
	n := map[uint8]int{}
	for _, rec := range Records(t, path) {
		n[rec.Status]++
	}
	return n
}

// TruthFrames returns how many frames the file at path records as ok with
// the data CRC the simulator computed for them (the image the detector
// saw), and how many frames it records.
func TruthFrames(t testing.TB, path string, truth *sim.Truth) (same, frames int) {
	t.Helper()
	recs := Records(t, path)
	for n, rec := range recs {
		if rec.Status == frame.StatusOK && n < len(truth.DataCRC) && rec.DataCRC == truth.DataCRC[n] {
			same++
		}
	}
	return same, len(recs)
}

// OKFrames returns how many frames the file at path records as ok so
// far, or 0 while it cannot be read: a test polls it to see a scan that
// is being written make progress.
func OKFrames(path string) int {
	r, err := writer.Open(path)
	if err != nil {
		return 0
	}
	defer r.Close()
	recs, err := r.Records()
	if err != nil {
		return 0
	}
	n := 0
	for _, rec := range recs {
		if rec.Status == frame.StatusOK {
			n++
		}
	}
	return n
}

// CheckTruth returns the frame statuses the file at path records and how
// many are ok, and checks every ok frame against the truth: it has a
// chunk, and the data CRC the simulator computed for it.
func CheckTruth(t testing.TB, path string, truth *sim.Truth) (status []uint8, ok int) {
	t.Helper()
	r, err := writer.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recs, err := r.Records()
	if err != nil {
		t.Fatal(err)
	}
	for n, rec := range recs {
		status = append(status, rec.Status)
		if rec.Status != frame.StatusOK {
			continue
		}
		ok++
		if n >= len(truth.DataCRC) {
			t.Errorf("frame %d recorded ok: the simulation has %d frames", n, len(truth.DataCRC))
			continue
		}
		if rec.DataCRC != truth.DataCRC[n] {
			t.Errorf("frame %d: data CRC %08x, truth %08x", n, rec.DataCRC, truth.DataCRC[n])
		}
		if _, _, err := r.ReadChunk(n, nil); err != nil {
			t.Errorf("frame %d recorded ok: %v", n, err)
		}
	}
	return status, ok
}

// WriteFrames writes a file of n frames of 2 x 2 pixels of 16 bits with
// no plan, uncompressed, each with a record whose data CRC is right,
// except the frames missing reports (nil: none), recorded missing. It
// returns how many frames are ok.
func WriteFrames(t testing.TB, path string, n int, missing func(i int) bool) (ok int) {
	t.Helper()
	// No filters: the chunks are stored as they are.
	w, err := writer.Create(writer.Options{Path: path, Layout: writer.NXtomo{}, Height: 2, Width: 2, ElemSize: 2,
		FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	img := make([]byte, 8)
	for i := range n {
		if missing != nil && missing(i) {
			if err := w.SetRecord(i, frame.Record{Status: frame.StatusMissing}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		img[0], img[1] = byte(i), byte(i>>8)
		if err := w.WriteChunk(i, 0, img); err != nil {
			t.Fatal(err)
		}
		if err := w.SetRecord(i, frame.Record{Timestamp: uint64(i), DataCRC: frame.Checksum(img)}); err != nil {
			t.Fatal(err)
		}
		ok++
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return ok
}

// SummaryCount returns the number a line of a scan's summary shows, such
// as "  received  N frames" or "  ok  N" for label "received" or "ok".
func SummaryCount(t testing.TB, summary, label string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(label) + ` +(\d+)`).FindStringSubmatch(summary)
	if m == nil {
		t.Fatalf("no %q line in the summary:\n%s", label, summary)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
