package writer

import (
	"encoding/binary"
	"math"
	"os/exec"
	"strings"
	"testing"
)

// TestExtra writes a float32 dataset beside the stack of both layouts and
// reads it back with h5py: the frames written hold their values, the
// others NaN, and the frame stack is as before.
func TestExtra(t *testing.T) {
	python := pythonWith(t, "h5py", "numpy")
	for _, layout := range []string{LayoutNXtomo, LayoutCXI} {
		t.Run(layout, func(t *testing.T) {
			o := testOptions(t.TempDir(), layout, pipeNone)
			o.Extra = []Extra{{Path: "/flatfield/preview", Height: 3, Width: 2}}
			w, err := Create(o)
			if err != nil {
				t.Fatal(err)
			}
			data := make([]byte, 3*2*4)
			for i := range 6 {
				binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(float32(i)+0.5))
			}
			if err := w.WriteExtra(0, 3, data); err != nil {
				t.Fatal(err)
			}
			if allocs := testing.AllocsPerRun(20, func() { w.WriteExtra(0, 4, data) }); allocs != 0 {
				t.Errorf("WriteExtra: %v allocations a call, want 0", allocs)
			}
			for _, bad := range []struct {
				i, frame int
				data     []byte
			}{{1, 0, data}, {0, testFrames, data}, {0, -1, data}, {0, 0, data[:4]}} {
				if err := w.WriteExtra(bad.i, bad.frame, bad.data); err == nil {
					t.Errorf("WriteExtra(%d, %d, %d bytes): no error", bad.i, bad.frame, len(bad.data))
				}
			}
			for i := range testFrames {
				if err := w.WriteChunk(i, 0, pattern(i, o.Height, o.Width, o.ElemSize)); err != nil {
					t.Fatal(err)
				}
				w.SetRecord(i, testRecord(i))
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			script := `
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
d = f["/flatfield/preview"]
assert d.dtype == np.float32 and d.shape == (int(sys.argv[2]), 3, 2), (d.dtype, d.shape)
assert np.array_equal(d[3], np.arange(6, dtype=np.float32).reshape(3, 2) + 0.5), d[3]
assert np.array_equal(d[4], d[3])
assert np.isnan(d[0]).all() and np.isnan(d[5]).all()
print("ok")
`
			out, err := exec.Command(python, "-c", script, o.Path, "6").CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "ok" {
				t.Fatalf("h5py: %v\n%s", err, out)
			}
		})
	}
}

// TestExtraRefused checks the extras a file cannot hold.
func TestExtraRefused(t *testing.T) {
	for _, c := range []struct {
		name   string
		frames int
		extra  Extra
	}{
		{"unknown length", 0, Extra{Path: "/p", Height: 1, Width: 1}},
		{"no path", testFrames, Extra{Path: "/", Height: 1, Width: 1}},
		{"no size", testFrames, Extra{Path: "/p", Height: 0, Width: 1}},
		{"layout's object", testFrames, Extra{Path: "/entry", Height: 1, Width: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := testOptions(t.TempDir(), LayoutNXtomo, pipeNone)
			o.Frames = c.frames
			if c.frames == 0 {
				o.ImageKey, o.RotationAngle = nil, nil
			}
			o.Extra = []Extra{c.extra}
			if w, err := Create(o); err == nil {
				w.Close()
				t.Fatalf("Create with extra %+v: no error", c.extra)
			}
		})
	}
}
