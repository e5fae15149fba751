package scan

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"h5ingest/frame"
)

// TestInspectReportOfMaster inspects the master of TestVerifyReportOfMaster:
// each module's place and frames, the absent one said to be absent.
func TestInspectReportOfMaster(t *testing.T) {
	dir := t.TempDir()
	master := writeTestMaster(t, dir, 4, 0)
	rep, err := Inspect(stockStages(), master)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Path != master || rep.File != nil || rep.Capture != nil || rep.Master == nil {
		t.Fatalf("report %+v, want a master's", rep)
	}
	s := rep.Master
	if s.Layout != "nxtomo" || s.Frames != 4 || s.Height != 2 || s.Width != 6 || s.ElemSize != 2 || len(s.Modules) != 3 {
		t.Fatalf("master %+v, want nxtomo, 4 x 2 x 6 of 2 bytes, 3 modules", s)
	}
	want := []struct {
		id, x  int
		absent bool
		counts frame.Counts
	}{{0, 0, false, frame.Counts{OK: 4}}, {1, 2, false, frame.Counts{OK: 4}}, {7, 4, true, frame.Counts{}}}
	for i, w := range want {
		m := s.Modules[i]
		if m.ID != w.id || m.X != w.x || m.Absent != w.absent || m.Counts != w.counts {
			t.Errorf("module %d: %+v, want id %d at x %d, absent %v, %v", i, m, w.id, w.x, w.absent, w.counts)
		}
	}
}

// TestReadImageNotes reads frames of a module's file and of a master and
// checks the notes on what each image cannot show, and the pixels.
func TestReadImageNotes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "one.h5")
	writeTestFile(t, file, okFrame, missingFrame, damagedFrame)
	master := writeTestMaster(t, dir, 4, 1)
	zero := make([]byte, 8)
	for _, tt := range []struct {
		name  string
		path  string
		n     int
		notes []ImageNote
		data  []byte // nil: not checked
	}{
		{"ok", file, 0, nil, fileImage(0)},
		{"missing", file, 1, []ImageNote{{Kind: FrameNotWritten, Path: file, Frame: 1, Status: frame.StatusMissing}}, zero},
		{"damaged", file, 2, []ImageNote{{Kind: FrameDamaged, Path: file, Frame: 2, Status: frame.StatusCRCMismatch}}, fileImage(2)},
		{"master", master, 1, []ImageNote{{Kind: ModuleFileAbsent, Path: testModuleFile(dir, 7), Frame: 1, Module: 7}}, nil},
		{"master, a module file shorter", master, 3, []ImageNote{
			{Kind: ModuleFileShort, Path: testModuleFile(dir, 1), Frame: 3, Module: 1, Frames: 3},
			{Kind: ModuleFileAbsent, Path: testModuleFile(dir, 7), Frame: 3, Module: 7}}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			im, err := ReadImage(stockStages(), tt.path, tt.n)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(im.Notes, tt.notes) {
				t.Errorf("notes %+v, want %+v", im.Notes, tt.notes)
			}
			if tt.data != nil && !bytes.Equal(im.Data, tt.data) {
				t.Errorf("pixels %v, want %v", im.Data, tt.data)
			}
		})
	}
	im, err := ReadImage(stockStages(), master, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The array's rows: module 0's, module 1's, then module 7's zeros.
	want := slices.Concat(fileImage(1)[:4], fileImage(1)[:4], zero[:4], fileImage(1)[4:], fileImage(1)[4:], zero[4:])
	if im.Height != 2 || im.Width != 6 || !bytes.Equal(im.Data, want) {
		t.Errorf("the array's frame 1: %d x %d %v, want 2 x 6 %v", im.Height, im.Width, im.Data, want)
	}
	_, err = ReadImage(stockStages(), file, 3)
	if fe := (*FrameRangeError)(nil); !errors.Is(err, ErrUsage) || !errors.As(err, &fe) || *fe != (FrameRangeError{Frame: 3, Frames: 3}) {
		t.Errorf("frame 3 of a file of 3: %v, want a usage error saying it has 3", err)
	}
}
