package scan

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/writer"
)

// fileFrame is a frame of a file that writeTestFile writes: its recorded
// status, whether it has a chunk, and whether its record's CRC is wrong.
type fileFrame struct {
	status uint8
	chunk  bool
	badCRC bool
}

// Frames of writeTestFile: ok, missing, and the two ways a writer leaves a
// frame it received damaged or stopped at.
var (
	okFrame       = fileFrame{status: frame.StatusOK, chunk: true}
	missingFrame  = fileFrame{status: frame.StatusMissing}
	damagedFrame  = fileFrame{status: frame.StatusCRCMismatch, chunk: true}
	unrecorded    = fileFrame{status: frame.StatusMissing, chunk: true}
	badCRCFrame   = fileFrame{status: frame.StatusOK, chunk: true, badCRC: true}
	chunklessOK   = fileFrame{status: frame.StatusOK}
	rejectedChunk = fileFrame{status: frame.StatusRejected, chunk: true}
)

// fileImage is the image writeTestFile writes as frame i: 2 x 2 pixels of 16
// bits.
func fileImage(i int) []byte { return []byte{byte(i + 1), 0, 0, byte(i + 1), 7, 0, 0, 0} }

// writeTestFile writes a module's file of frames at path, uncompressed, with
// no plan.
func writeTestFile(t *testing.T, path string, frames ...fileFrame) {
	t.Helper()
	codec, err := compress.New("none", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := writer.Create(writer.Options{Path: path, Layout: writer.NXtomo{}, Frames: len(frames), Height: 2, Width: 2, ElemSize: 2,
		Filters: codec.Filters(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		img := fileImage(i)
		if f.chunk {
			if err := w.WriteChunk(i, 0, img); err != nil {
				t.Fatal(err)
			}
		}
		rec := frame.Record{Status: f.status, Timestamp: uint64(i) * 1e6, DataCRC: frame.Checksum(img)}
		if f.badCRC {
			rec.DataCRC++
		}
		if err := w.SetRecord(i, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyReport verifies files with each kind of frame a file can hold
// and checks the report: the frames counted, the chunks checked, each bad
// chunk or record found at its frame, the chunks without a record, and
// the result.
func TestVerifyReport(t *testing.T) {
	for _, tt := range []struct {
		name       string
		frames     []fileFrame
		checked    int
		counts     frame.Counts
		bad        []Finding // Detail: its beginning
		unrecorded []int
		err        error // nil, ErrIncomplete or errBad
	}{
		{"good", []fileFrame{okFrame, okFrame, okFrame}, 3, frame.Counts{OK: 3}, nil, nil, nil},
		{"missing and damaged", []fileFrame{okFrame, missingFrame, damagedFrame}, 2, frame.Counts{OK: 1, Missing: 1, CRCMismatch: 1}, nil, nil, ErrIncomplete},
		{"a chunk damaged on disk", []fileFrame{okFrame, okFrame, badCRCFrame, okFrame}, 4, frame.Counts{OK: 4},
			[]Finding{{2, "data CRC "}}, nil, errBad},
		{"chunks without a record", []fileFrame{okFrame, unrecorded, okFrame, unrecorded}, 2, frame.Counts{OK: 2, Missing: 2},
			nil, []int{1, 3}, ErrIncomplete},
		{"records that contradict the chunks", []fileFrame{rejectedChunk, okFrame, chunklessOK}, 1, frame.Counts{OK: 2, Rejected: 1},
			[]Finding{{0, "recorded with status 3 but has a chunk"}, {2, "recorded as written (status 0) but has no chunk"}}, nil, errBad},
		{"no frame", nil, 0, frame.Counts{}, nil, nil, ErrIncomplete},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "scan.h5")
			writeTestFile(t, path, tt.frames...)
			rep, err := Verify(context.Background(), stockStages(), path, DefaultVerifyStall)
			if !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Errorf("verify: %v, want %v", err, tt.err)
			}
			if rep == nil {
				t.Fatal("no report")
			}
			if rep.Path != path || rep.Frames != len(tt.frames) || rep.Checked != tt.checked || rep.Counts != tt.counts || rep.Modules != nil {
				t.Errorf("report %s: %d frames, %d checked, %v, modules %v; want %s: %d, %d, %v, none",
					rep.Path, rep.Frames, rep.Checked, rep.Counts, rep.Modules, path, len(tt.frames), tt.checked, tt.counts)
			}
			match := func(got, want Finding) bool {
				return got.Frame == want.Frame && strings.HasPrefix(got.Detail, want.Detail)
			}
			if !slices.EqualFunc(rep.Bad, tt.bad, match) {
				t.Errorf("findings %q, want %q", rep.Bad, tt.bad)
			}
			if !slices.Equal(rep.Unrecorded, tt.unrecorded) {
				t.Errorf("frames with a chunk but no record %v, want %v", rep.Unrecorded, tt.unrecorded)
			}
		})
	}
}

// TestFindingString checks how a finding reads: at its frame, or the
// layout's alone.
func TestFindingString(t *testing.T) {
	for _, tt := range []struct {
		f    Finding
		want string
	}{
		{Finding{3, "data CRC 00000001, recorded 00000002"}, "frame 3: data CRC 00000001, recorded 00000002"},
		{Finding{-1, "layout nxtomo: /entry/data/data is missing"}, "layout nxtomo: /entry/data/data is missing"},
	} {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("%#v reads %q, want %q", tt.f, got, tt.want)
		}
	}
}

// writeTestMaster writes, in dir, a master of frames frames of 2 x 2
// pixel modules 0, 1 and 7 side by side, and the files of module 0
// (frames frames, good) and module 1 (short frames fewer, the last damaged
// on disk); module 7's file is absent. It returns the master's path.
func writeTestMaster(t *testing.T, dir string, frames, short int) string {
	t.Helper()
	o := writer.MasterOptions{Options: writer.Options{Path: filepath.Join(dir, "scan.h5"), Layout: writer.NXtomo{},
		Frames: frames, Height: 2, Width: 6, ElemSize: 2, FlushInterval: time.Hour}}
	for i, id := range []int{0, 1, 7} {
		o.Modules = append(o.Modules, writer.MasterModule{ID: id, File: filepath.Base(testModuleFile(dir, id)), X: 2 * i, Height: 2, Width: 2})
	}
	if err := writer.CreateMaster(o); err != nil {
		t.Fatal(err)
	}
	good := make([]fileFrame, frames)
	for i := range good {
		good[i] = okFrame
	}
	writeTestFile(t, testModuleFile(dir, 0), good...)
	n := frames - short
	writeTestFile(t, testModuleFile(dir, 1), append(good[:n-1:n-1], badCRCFrame)...)
	return o.Path
}

// testModuleFile returns the path of module id's file of writeTestMaster.
func testModuleFile(dir string, id int) string {
	return filepath.Join(dir, "scan_m"+string(rune('0'+id))+".h5")
}

// TestVerifyReportOfMaster verifies a master whose first module file is
// good, whose second has a damaged chunk and whose third is absent: the
// report has each module's, the damaged frame among the second's
// findings and the third's reason, and the master fails.
func TestVerifyReportOfMaster(t *testing.T) {
	dir := t.TempDir()
	master := writeTestMaster(t, dir, 4, 0)
	rep, err := Verify(context.Background(), stockStages(), master, DefaultVerifyStall)
	if !errors.Is(err, errBad) || errors.Is(err, ErrIncomplete) {
		t.Errorf("verify of a master with a bad module file and one absent: %v, want the first failure, the bad chunk's", err)
	}
	if rep == nil || rep.Path != master || len(rep.Modules) != 3 {
		t.Fatalf("report %+v, want one of 3 modules", rep)
	}
	m0, m1, m7 := rep.Modules[0], rep.Modules[1], rep.Modules[2]
	if m0.ID != 0 || m0.Path != testModuleFile(dir, 0) || m0.Err != nil || m0.Report == nil || m0.Report.Checked != 4 || m0.Report.Counts.OK != 4 {
		t.Errorf("module 0: %+v, want its good file of 4 frames checked", m0)
	}
	if m1.ID != 1 || m1.Report == nil || !errors.Is(m1.Err, errBad) || len(m1.Report.Bad) != 1 || m1.Report.Bad[0].Frame != 3 || m1.Report.Checked != 4 {
		t.Errorf("module 1: %+v, want frame 3 found bad among 4 chunks checked", m1)
	}
	if m7.ID != 7 || m7.Report != nil || !errors.Is(m7.Err, os.ErrNotExist) || m7.Path != testModuleFile(dir, 7) {
		t.Errorf("module 7: %+v, want no report, its file not existing", m7)
	}
}
