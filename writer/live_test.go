package writer

import (
	"os/exec"
	"strings"
	"testing"
	"unsafe"
)

// TestMasterVirtual places two module files side by side in a master file
// with a virtual dataset whose sources are other files, as a multi-module
// master file does.
func TestMasterVirtual(t *testing.T) {
	dir := t.TempDir()
	var modules []Options
	for _, name := range []string{"module0", "module1"} {
		o := testOptions(dir, LayoutCXI, pipeDeflate)
		o.Path = dir + "/" + name + ".h5"
		writeTestFile(t, o, pipeDeflate, 3)
		modules = append(modules, o)
	}
	master := dir + "/master.h5"
	f, err := createFile(master, false)
	if err != nil {
		t.Fatal(err)
	}
	var fill uint32
	p, err := newDCPL(nil, kindU16, unsafe.Pointer(&fill))
	if err != nil {
		t.Fatal(err)
	}
	n, h, w := uint64(testFrames), uint64(testH), uint64(testW)
	vDims := []uint64{n, h, 2 * w}
	src := []uint64{n, h, w}
	for i, m := range modules {
		// Relative names resolve against the master file's directory.
		err := p.setVirtual(vDims, vDims, []uint64{0, 0, uint64(i) * w}, "module"+string(rune('0'+i))+".h5", cxiStack,
			src, src, []uint64{0, 0, 0}, src)
		if err != nil {
			t.Fatalf("map %s: %v", m.Path, err)
		}
	}
	d, err := createDataset(f, "data", kindU16, 0, vDims, vDims, p)
	if err != nil {
		t.Fatal(err)
	}
	p.close()
	closeID(d)
	if err := closeID(f); err != nil {
		t.Fatal(err)
	}
	python := pythonWith(t, "h5py", "numpy")
	script := `
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as m, h5py.File(sys.argv[2], "r") as a, h5py.File(sys.argv[3], "r") as b:
    v = m["data"][...]
    s = "/entry_1/instrument_1/detector_1/data"
    assert v.shape == (6, 16, 48), v.shape
    assert np.array_equal(v[:, :, :24], a[s][...])
    assert np.array_equal(v[:, :, 24:], b[s][...])
    assert v[2].any() and not v[3].any()
print("ok")
`
	out, err := exec.Command(python, "-c", script, master, modules[0].Path, modules[1].Path).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Errorf("h5py reading the master file: %v\n%s", err, out)
	}
}

// TestReaderFollows opens an extendible scan with Open while it is written.
func TestReaderFollows(t *testing.T) {
	o := testOptions(t.TempDir(), LayoutCXI, pipeNone)
	o.Frames = 0
	wr, err := Create(o)
	if err != nil {
		t.Fatal(err)
	}
	defer wr.Close()
	write := func(from, to int) {
		for i := from; i < to; i++ {
			if err := wr.WriteChunk(i, 0, pattern(i, testH, testW, 2)); err != nil {
				t.Fatal(err)
			}
			if err := wr.SetRecord(i, testRecord(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := wr.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	write(0, 2)
	r, err := Open(TempName(o.Path))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.SWMR || r.Frames != 2 {
		t.Fatalf("SWMR %v, %d frames; want SWMR and 2", r.SWMR, r.Frames)
	}
	write(2, 5)
	if err := r.Refresh(); err != nil {
		t.Fatal(err)
	}
	recs, err := r.Records()
	if err != nil {
		t.Fatal(err)
	}
	if r.Frames != 5 || len(recs) != 5 || recs[4] != testRecord(4) {
		t.Errorf("after Refresh: %d frames, records %v", r.Frames, recs)
	}
}
