package scan

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/writer"
)

// TestInspectMasterShortModule inspects a master of 4 frames whose module
// 1 file holds 3: the frame past its end counts missing, never ok.
func TestInspectMasterShortModule(t *testing.T) {
	master := writeTestMaster(t, t.TempDir(), 4, 1)
	rep, err := Inspect(stockStages(), master)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Master == nil || len(rep.Master.Modules) != 3 {
		t.Fatalf("report %+v, want a master's of 3 modules", rep)
	}
	for i, want := range []frame.Counts{{OK: 4}, {OK: 3, Missing: 1}, {}} {
		if got := rep.Master.Modules[i].Counts; got != want {
			t.Errorf("module %d: %v, want %v", rep.Master.Modules[i].ID, got, want)
		}
	}
}

// TestVerifyMasterShortModule verifies a master of 4 frames whose module
// files are all good but module 1's holds 3 frames: the master is
// incomplete, and module 1's outcome says how many frames its file holds.
func TestVerifyMasterShortModule(t *testing.T) {
	dir := t.TempDir()
	o := writer.MasterOptions{Options: writer.Options{Path: filepath.Join(dir, "scan.h5"), Layout: writer.NXtomo{},
		Frames: 4, Height: 2, Width: 6, ElemSize: 2, FlushInterval: time.Hour}}
	for i, id := range []int{0, 1, 7} {
		o.Modules = append(o.Modules, writer.MasterModule{ID: id, File: filepath.Base(testModuleFile(dir, id)), X: 2 * i, Height: 2, Width: 2})
	}
	if err := writer.CreateMaster(o); err != nil {
		t.Fatal(err)
	}
	good := []fileFrame{okFrame, okFrame, okFrame, okFrame}
	writeTestFile(t, testModuleFile(dir, 0), good...)
	writeTestFile(t, testModuleFile(dir, 1), good[:3]...)
	writeTestFile(t, testModuleFile(dir, 7), good...)
	rep, err := Verify(context.Background(), stockStages(), o.Path, DefaultVerifyStall)
	if !errors.Is(err, ErrIncomplete) {
		t.Errorf("verify of a master with a short module file: %v, want ErrIncomplete", err)
	}
	if rep == nil || len(rep.Modules) != 3 {
		t.Fatalf("report %+v, want 3 modules", rep)
	}
	for i, m := range rep.Modules {
		if i == 1 {
			if !errors.Is(m.Err, ErrIncomplete) || !strings.Contains(m.Err.Error(), "holds 3 of the master's 4 frames") {
				t.Errorf("module 1: %v, want incomplete, 3 of the master's 4 frames", m.Err)
			}
		} else if m.Err != nil {
			t.Errorf("module %d: %v, want good", m.ID, m.Err)
		}
	}
}
