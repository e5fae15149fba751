package writer

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"h5ingest/frame"
)

// masterOptions returns a master of three testH x testW modules in a
// 2 x 2 array with its bottom right corner empty: modules 0 and 1 on the
// top row, module 7 bottom left.
func masterOptions(dir, layout string) MasterOptions {
	o := MasterOptions{Options: testOptions(dir, layout, pipeNone)}
	o.Path = filepath.Join(dir, "scan_master.h5")
	o.Height, o.Width = 2*testH, 2*testW
	for _, m := range []struct{ id, x, y int }{{0, 0, 0}, {1, testW, 0}, {7, 0, testH}} {
		o.Modules = append(o.Modules, MasterModule{ID: m.id, File: "scan_m" + string(rune('0'+m.id)) + ".h5",
			X: m.x, Y: m.y, Height: testH, Width: testW})
	}
	return o
}

// TestMaster writes a master ahead of its module files, writes two of the
// three, and reads the array and the records through the master, with
// this package's Reader and with h5py.
func TestMaster(t *testing.T) {
	for _, layout := range []string{LayoutNXtomo, LayoutCXI} {
		t.Run(layout, func(t *testing.T) {
			dir := t.TempDir()
			mo := masterOptions(dir, layout)
			if err := CreateMaster(mo); err != nil {
				t.Fatal(err)
			}
			// Module 7's file never appears; module 1 misses frame 3.
			for i, skip := range [][]int{nil, {3}} {
				o := testOptions(dir, layout, pipeDeflate)
				o.Path = filepath.Join(dir, mo.Modules[i].File)
				writeTestFile(t, o, pipeDeflate, skip...)
			}
			r, err := Open(mo.Path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.Layout != layout || r.Frames != testFrames || r.Height != 2*testH || r.Width != 2*testW {
				t.Errorf("master %s %dx%dx%d, want %s %dx%dx%d", r.Layout, r.Frames, r.Height, r.Width,
					layout, testFrames, 2*testH, 2*testW)
			}
			if !slices.Equal(r.Modules, mo.Modules) {
				t.Errorf("modules %+v, want %+v", r.Modules, mo.Modules)
			}
			if p := r.MissingPaths(); len(p) != 0 {
				t.Errorf("master lacks %v", p)
			}
			if _, err := r.Records(); !errors.Is(err, ErrMaster) || !strings.Contains(err.Error(), "7 (scan_m7.h5)") {
				t.Errorf("Records of a master: %v, want ErrMaster naming the modules", err)
			}
			if _, _, err := r.ReadChunk(0, nil); !errors.Is(err, ErrMaster) {
				t.Errorf("ReadChunk of a master: %v, want ErrMaster", err)
			}
			for _, tt := range []struct {
				id   int
				want []frame.Record
			}{
				{0, wantRecords(testFrames)},
				{1, wantRecords(testFrames, 3)},
				{7, wantRecords(testFrames, 0, 1, 2, 3, 4, 5)},
			} {
				got, err := r.ModuleRecords(tt.id)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, tt.want) {
					t.Errorf("module %d records %v, want %v", tt.id, got, tt.want)
				}
			}
			if _, err := r.ModuleRecords(2); err == nil {
				t.Error("records of module 2, which the master does not have: no error")
			}
			pyCheckMaster(t, mo.Path, layout)
		})
	}
}

// pyCheckMaster has h5py read the master written by TestMaster.
func pyCheckMaster(t *testing.T, master, layout string) {
	t.Helper()
	python := pythonWith(t, "h5py", "numpy")
	script := `
import sys, os, h5py, numpy as np
master, layout, h, w = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
d = os.path.dirname(master)
det = "/entry/instrument/detector" if layout == "nxtomo" else "/entry_1/instrument_1/detector_1"
with h5py.File(master, "r") as m, h5py.File(d + "/scan_m0.h5", "r") as a, h5py.File(d + "/scan_m1.h5", "r") as b:
    v = m[det + "/data"][...]
    assert v.shape == (6, 2 * h, 2 * w), v.shape
    assert np.array_equal(v[:, :h, :w], a[det + "/data"][...])
    assert np.array_equal(v[:, :h, w:], b[det + "/data"][...])
    assert v[:, :h, :w].any() and v[2, :h, w:].any() and not v[3, :h, w:].any()
    assert not v[:, h:, :].any(), "the absent module and the gap read as the fill value 0"
    st = m[det + "/frame_status"][...]
    assert st.shape == (6, 3), st.shape
    assert list(m[det + "/module_ids"][...]) == [0, 1, 7]
    assert st[:, 0].tolist() == [0, 0, 0, 0, 2, 0], st
    assert st[:, 1].tolist() == [0, 0, 0, 1, 2, 0], st
    assert st[:, 2].tolist() == [1] * 6, st
    assert m[det + "/module_1/frame_status"][...].tolist() == [0, 0, 0, 1, 2, 0]
    assert np.array_equal(m[det + "/module_0/data_crc32c"][...], a[det + "/data_crc32c"][...])
    if layout == "nxtomo":
        assert np.array_equal(m["/exchange/data"][...], v[2:]), "exchange view of the master's stack"
        assert np.array_equal(m["/exchange/data_dark"][...], v[:1])
        assert np.array_equal(m["/entry/data/data"][...], v)
print("ok")
`
	out, err := exec.Command(python, "-c", script, master, layout, "16", "24").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Errorf("h5py reading the master: %v\n%s", err, out)
	}
}

func TestMasterOptionErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		edit func(*MasterOptions)
		want string
	}{
		{"no frames", func(o *MasterOptions) { o.Frames, o.ImageKey, o.RotationAngle = 0, nil, nil }, "needs the scan's length"},
		{"no modules", func(o *MasterOptions) { o.Modules = nil }, "no modules"},
		{"twice", func(o *MasterOptions) { o.Modules[1].ID = 0 }, "module 0 listed twice"},
		{"no file", func(o *MasterOptions) { o.Modules[2].File = "" }, "module 7 has no file name"},
		{"outside", func(o *MasterOptions) { o.Modules[1].X++ }, "module 1 at (x 25, y 0) of 16x24 pixels is outside the 32x48 array"},
		{"size", func(o *MasterOptions) { o.Modules[0].Height = 0 }, "module 0: size 0x24 is not positive"},
		{"layout", func(o *MasterOptions) { o.Layout = nil }, `no layout`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := masterOptions(dir, LayoutNXtomo)
			tt.edit(&o)
			err := CreateMaster(o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("CreateMaster: %v, want an error containing %q", err, tt.want)
			}
		})
	}
	o := masterOptions(dir, LayoutNXtomo)
	if err := CreateMaster(o); err != nil {
		t.Fatal(err)
	}
	if err := CreateMaster(o); !errors.Is(err, ErrExists) {
		t.Errorf("second CreateMaster without Overwrite: %v, want ErrExists", err)
	}
	o.Overwrite = true
	if err := CreateMaster(o); err != nil {
		t.Errorf("CreateMaster with Overwrite: %v", err)
	}
}

// TestMasterTimes writes a master after its modules, with the scan's
// start and end, and one without an end: h5py reads the scan's times in
// the entry, and the master's own writing in the root's file_time.
func TestMasterTimes(t *testing.T) {
	python := pythonWith(t, "h5py")
	start := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	end := start.Add(90 * time.Second)
	for _, tc := range []struct {
		layout, entry string
		end           time.Time
	}{{LayoutNXtomo, "entry", end}, {LayoutCXI, "entry_1", end}, {LayoutNXtomo, "entry", time.Time{}}} {
		mo := masterOptions(t.TempDir(), tc.layout)
		mo.StartTime, mo.EndTime = start, tc.end
		before := time.Now()
		if err := CreateMaster(mo); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(python, "-c", `
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    e = f[sys.argv[2]]
    print(e["start_time"][()].decode(), e["end_time"][()].decode(), f.attrs["file_time"])
`, mo.Path, tc.entry).CombinedOutput()
		if err != nil {
			t.Fatalf("h5py: %v\n%s", err, out)
		}
		got := strings.Fields(string(out))
		if len(got) != 3 {
			t.Fatalf("h5py read %q", out)
		}
		fileTime, err1 := time.Parse(time.RFC3339Nano, got[2])
		endTime, err2 := time.Parse(time.RFC3339Nano, got[1])
		wantEnd := tc.end.Equal(endTime)
		if tc.end.IsZero() { // the master's writing
			wantEnd = !endTime.Before(fileTime)
		}
		if got[0] != "2026-03-01T12:00:00.123456Z" || !wantEnd || err1 != nil || err2 != nil ||
			fileTime.Before(before.Truncate(time.Microsecond)) {
			t.Errorf("%s, end %v: start_time, end_time, file_time = %q; want the scan's start and end, written after %v",
				tc.layout, tc.end, got, before)
		}
	}
}

// writeFile writes a file as o says holding n whole frames, each
// its test pattern and record.
func writeFile(t *testing.T, o Options, n int) {
	t.Helper()
	w, err := Create(o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := w.WriteChunk(i, 0, pipeNone.encode(t, pattern(i, o.Height, o.Width, o.ElemSize), o.ElemSize)); err != nil {
			t.Fatal(err)
		}
		if err := w.SetRecord(i, testRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMasterShortModule reads through a master of 6 frames the records of
// module files that hold 4: one of fixed length (a plan of 4 frames) and
// one extendible that stopped after 4. Frames past a file's end, and every
// frame of the absent module 7, read as missing.
func TestMasterShortModule(t *testing.T) {
	const short = 4
	dir := t.TempDir()
	mo := masterOptions(dir, LayoutNXtomo)
	if err := CreateMaster(mo); err != nil {
		t.Fatal(err)
	}
	o := testOptions(dir, LayoutNXtomo, pipeNone)
	o.Path = filepath.Join(dir, mo.Modules[0].File)
	o.Frames, o.ImageKey, o.RotationAngle = short, o.ImageKey[:short], o.RotationAngle[:short]
	writeTestFile(t, o, pipeNone)
	o = testOptions(dir, LayoutNXtomo, pipeNone)
	o.Path = filepath.Join(dir, mo.Modules[1].File)
	o.Frames = 0
	writeFile(t, o, short)
	r, err := Open(mo.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	want := wantRecords(testFrames, 4, 5)
	for _, tt := range []struct {
		id   int
		want []frame.Record
	}{{0, want}, {1, want}, {7, wantRecords(testFrames, 0, 1, 2, 3, 4, 5)}} {
		got, err := r.ModuleRecords(tt.id)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("module %d records %v, want %v", tt.id, got, tt.want)
		}
	}
	python := pythonWith(t, "h5py", "numpy")
	out, err := exec.Command(python, "-c", `
import sys, h5py
det = "/entry/instrument/detector"
with h5py.File(sys.argv[1], "r") as m:
    st = m[det + "/frame_status"][...]
    assert st.shape == (6, 3), st.shape
    assert st.T.tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 1, 1], [1] * 6], st.T
    ts = m[det + "/timestamp"][...]
    assert ts[4:].tolist() == [[0, 0, 0]] * 2 and ts[3, :2].tolist() == [4000000] * 2, ts
    for k in (0, 1):
        assert m[det + "/module_%d/frame_status" % k][...].tolist() == [0, 0, 0, 0, 1, 1], k
        assert m[det + "/module_%d/timestamp" % k][4:].tolist() == [0, 0], k
    assert m[det + "/data"].shape == (6, 32, 48)
    assert not m[det + "/data"][4:].any()
    assert m[det + "/image_key"][...].tolist() == [2, 1, 0, 0, 0, 0]
    assert m["/entry/sample/rotation_angle"][...].tolist() == [0, 0, 0, 45, 90, 135]
print("ok")
`, mo.Path).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Errorf("h5py reading a master of short module files: %v\n%s", err, out)
	}
}

// TestFrameStatusFill checks that frame_status's fill value is missing in
// files of fixed length and extendible ones alike, so that no reader sees
// ok for a frame the writer has no record of.
func TestFrameStatusFill(t *testing.T) {
	python := pythonWith(t, "h5py")
	for _, frames := range []int{testFrames, 0} {
		o := testOptions(t.TempDir(), LayoutNXtomo, pipeNone)
		o.Frames = frames
		writeTestFile(t, o, pipeNone)
		out, err := exec.Command(python, "-c", `
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    print(f["/entry/instrument/detector/frame_status"].fillvalue)
`, o.Path).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "1" {
			t.Errorf("%d frames: frame_status fill value %q (%v), want 1 (missing)", frames, out, err)
		}
	}
}

// TestMasterLongModule reads a master of 6 frames whose module 0 file,
// written without a plan, holds 8: the master's virtual datasets follow
// it (libhdf5 shows 8 frames), but Reader keeps the scan's 6 where the
// master pins them, and ModuleRecords gives 6 records.
func TestMasterLongModule(t *testing.T) {
	dir := t.TempDir()
	mo := masterOptions(dir, LayoutNXtomo)
	if err := CreateMaster(mo); err != nil {
		t.Fatal(err)
	}
	o := testOptions(dir, LayoutNXtomo, pipeNone)
	o.Path = filepath.Join(dir, mo.Modules[0].File)
	o.Frames = 0
	writeFile(t, o, testFrames+2)
	r, err := Open(mo.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Frames != testFrames {
		t.Errorf("master of %d frames read as %d", testFrames, r.Frames)
	}
	got, err := r.ModuleRecords(0)
	if err != nil {
		t.Fatal(err)
	}
	if want := wantRecords(testFrames); !slices.Equal(got, want) {
		t.Errorf("module 0 records %v, want %v", got, want)
	}
}
