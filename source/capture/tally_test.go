package capture

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"h5ingest/frame"
)

// TestTally counts a capture of two modules with a repeated frame, absent
// numbers and a header that does not match its payload, whole and cut
// short.
func TestTally(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	put := func(i int, module uint16, f frame.Format) {
		h, p := testFrame(t, testFormat, i)
		h.ModuleID, h.Format = module, f
		if err := w.WriteFrame(&h, p); err != nil {
			t.Fatal(err)
		}
	}
	other := testFormat
	other.BitDepth = 24 // the payload stays 12-bit: the header does not check out
	for _, i := range []int{4, 0, 1, 1} {
		put(i, 3, testFormat)
	}
	put(7, 9, testFormat)
	put(8, 9, other)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "scan.pmcap")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.Tally()
	if err != nil {
		t.Fatal(err)
	}
	if got.Records != 6 || !slices.Equal(got.IDs(), []uint16{3, 9}) {
		t.Fatalf("%d records of modules %v, want 6 of 3 and 9", got.Records, got.IDs())
	}
	m := got.Modules[3]
	if m.Records != 4 || m.First != 0 || m.Last != 4 || m.Copies() != 1 || m.Absent() != 2 ||
		m.Start != 0 || m.End != 4e6 || m.BadHeaders != 0 || !slices.Equal(m.Formats, []frame.Format{testFormat}) {
		t.Errorf("module 3: %+v, copies %d, absent %d", *m, m.Copies(), m.Absent())
	}
	if m := got.Modules[9]; m.Records != 2 || m.BadHeaders != 1 || len(m.Formats) != 1 || m.Absent() != 0 {
		t.Errorf("module 9: %+v", *m)
	}

	// Cut in the last record: the tally counts the whole ones and says why
	// it stopped.
	cut := filepath.Join(t.TempDir(), "cut.pmcap")
	if err := os.WriteFile(cut, buf.Bytes()[:buf.Len()-10], 0o644); err != nil {
		t.Fatal(err)
	}
	rc, err := Open(cut)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err = rc.Tally()
	if !errors.Is(err, ErrTruncated) || got.Records != 5 {
		t.Errorf("cut capture: %d records, %v; want 5 and ErrTruncated", got.Records, err)
	}
}

func TestSniff(t *testing.T) {
	dir := t.TempDir()
	good, _ := writeCapture(t, testFormat, 1)
	files := map[string][]byte{"scan.pmcap": good, "scan.h5": []byte("\x89HDF\r\n\x1a\n"), "short": good[:3]}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want bool
	}{{"scan.pmcap", true}, {"scan.h5", false}, {"short", false}, {"absent", false}, {"pipe", false}, {".", false}} {
		if got := Sniff(filepath.Join(dir, tc.name)); got != tc.want {
			t.Errorf("Sniff(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
