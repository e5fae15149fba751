package writer

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"h5ingest/frame"
)

// TestFlushAfterPause writes a few frames and then nothing, as a scan
// pausing between its flats and its projections does: within a few flush
// intervals, with no further call, a reader following the file (and a
// copy of the file as a crash leaves it, recovered) sees every frame
// written, records included. Before, only a later chunk flushed them.
func TestFlushAfterPause(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frames int // 0: extendible
	}{{"planned", testFrames}, {"extendible", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			o := testOptions(dir, LayoutNXtomo, pipeNone)
			o.Frames = tc.frames
			o.FlushInterval = 50 * time.Millisecond
			w, err := Create(o)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			const written = 3
			for i := range written {
				if err := w.WriteChunk(i, 0, pattern(i, o.Height, o.Width, o.ElemSize)); err != nil {
					t.Fatal(err)
				}
				if err := w.SetRecord(i, testRecord(i)); err != nil {
					t.Fatal(err)
				}
			}
			part := TempName(o.Path)
			var seen int
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if seen = recordsIn(t, part, written); seen == written {
					break
				}
			}
			if seen != written {
				t.Fatalf("a reader following the file 5 s after the last write sees %d of the %d frames written", seen, written)
			}
			// The file as a crash now would leave it.
			crash := filepath.Join(t.TempDir(), ".crashed.h5.part")
			copyFile(t, part, crash)
			final, err := Recover(crash)
			if err != nil {
				t.Fatal(err)
			}
			if got := recordsIn(t, final, written); got != written {
				t.Errorf("recovered after the pause: %d of the %d frames written", got, written)
			}
		})
	}
}

// recordsIn returns how many of the first n frames of the file at path
// have the record and the chunk they were written with; 0 when it cannot
// be read.
func recordsIn(t *testing.T, path string, n int) int {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		return 0
	}
	defer r.Close()
	recs, err := r.Records()
	if err != nil || len(recs) < n {
		return 0
	}
	good := 0
	for i := range n {
		want := testRecord(i)
		if recs[i] != want || want.Status == frame.StatusMissing {
			continue
		}
		if data, _, err := r.ReadChunk(i, nil); err == nil && len(data) > 0 {
			good++
		}
	}
	return good
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAppearedKeepsPart puts a file at a scan's final name while the scan
// writes: Close leaves that file as it is and returns an *AppearedError
// naming the .part, which keeps every frame, and Name says the file is
// the .part. A scan that closes normally is named by its final name.
func TestAppearedKeepsPart(t *testing.T) {
	o := testOptions(t.TempDir(), LayoutNXtomo, pipeNone)
	w, err := Create(o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range o.Frames {
		if err := w.WriteChunk(i, 0, pattern(i, o.Height, o.Width, o.ElemSize)); err != nil {
			t.Fatal(err)
		}
		if err := w.SetRecord(i, testRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(o.Path, []byte("another file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = w.Close()
	var ap *AppearedError
	if !errors.As(err, &ap) || ap.Temp != TempName(o.Path) || ap.Path != o.Path || !strings.Contains(err.Error(), TempName(o.Path)) {
		t.Fatalf("Close with a file at the final name: %v, want an AppearedError naming %s", err, TempName(o.Path))
	}
	if got := w.Name(); got != TempName(o.Path) {
		t.Errorf("Name after the final name was taken: %s, want %s", got, TempName(o.Path))
	}
	if b, err := os.ReadFile(o.Path); err != nil || string(b) != "another file\n" {
		t.Errorf("the other file holds %q (%v), want it untouched", b, err)
	}
	if got := recordsIn(t, TempName(o.Path), o.Frames); got != o.Frames {
		t.Errorf("%s holds %d frames as written, want %d", TempName(o.Path), got, o.Frames)
	}
	o2 := testOptions(t.TempDir(), LayoutNXtomo, pipeNone)
	w2, err := Create(o2)
	if err != nil {
		t.Fatal(err)
	}
	if got := w2.Name(); got != TempName(o2.Path) {
		t.Errorf("Name while writing: %s, want %s", got, TempName(o2.Path))
	}
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
	if got := w2.Name(); got != o2.Path {
		t.Errorf("Name after Close: %s, want %s", got, o2.Path)
	}
}
