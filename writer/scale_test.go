package writer

import (
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// writeFrames writes a file of n tiny frames with no plan (the stack
// grows), leaving every seventh frame unwritten, and returns its path.
func writeFrames(t *testing.T, dir string, n int) string {
	t.Helper()
	o := testOptions(dir, LayoutNXtomo, pipeNone)
	o.Path = filepath.Join(dir, "frames.h5")
	o.Frames, o.Height, o.Width = 0, 2, 2
	o.ImageKey, o.RotationAngle = nil, nil
	w, err := Create(o)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 2*2*2)
	for i := range n {
		if i%7 == 3 {
			continue
		}
		chunk[0] = byte(i)
		if err := w.WriteChunk(i, 0, chunk); err != nil {
			t.Fatal(err)
		}
	}
	// The last frame is written, so the stack's length is n.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return o.Path
}

// readEvery reads every frame's chunk of the file at path and returns how
// long it took and how many chunks were absent.
func readEvery(t *testing.T, path string) (time.Duration, int) {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start := time.Now()
	absent := 0
	var buf []byte
	for i := range r.Frames {
		data, _, err := r.ReadChunk(i, buf[:0])
		switch {
		case errors.Is(err, ErrNoChunk):
			absent++
		case err != nil:
			t.Fatal(err)
		case data[0] != byte(i):
			t.Fatalf("frame %d: chunk of frame %d", i, data[0])
		}
		buf = data
	}
	return time.Since(start), absent
}

// TestReadChunkLinear reads every chunk of files of n and 8n frames, with
// chunks missing among them: no lookup walks the whole chunk index (which
// made verify quadratic: 16,000 frames took 38 s), and the time grows about
// as the frames do, not as their square (64 times).
func TestReadChunkLinear(t *testing.T) {
	const n = 1500
	small := writeFrames(t, t.TempDir(), n-1)
	large := writeFrames(t, t.TempDir(), 8*n-1)
	before := slowLookups.Load()
	var ts, tl time.Duration
	for range 3 { // interleaved; the best of three of each
		d, absent := readEvery(t, small)
		if want := (n - 1 + 3) / 7; absent != want {
			t.Errorf("%d chunks absent of %d frames, want %d", absent, n-1, want)
		}
		if ts == 0 || d < ts {
			ts = d
		}
		if d, _ = readEvery(t, large); tl == 0 || d < tl {
			tl = d
		}
	}
	if slow := slowLookups.Load() - before; slow != 0 {
		t.Errorf("%d chunk lookups walked the whole chunk index", slow)
	}
	t.Logf("read every chunk: %d frames %v, %d frames %v (ratio %.1f)", n-1, ts, 8*n-1, tl, float64(tl)/float64(ts))
	if tl > 24*ts && tl > 200*time.Millisecond {
		t.Errorf("reading 8 times the frames took %.0f times as long (%v, %v): quadratic", float64(tl)/float64(ts), ts, tl)
	}
}

// TestLibverBounds checks that files are written in the HDF5 1.10 format
// at both bounds, so that a build against a newer libhdf5 still writes
// files that HDF5 1.10 reads.
func TestLibverBounds(t *testing.T) {
	o := testOptions(t.TempDir(), LayoutCXI, pipeNone)
	w, err := Create(o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	low, high, err := libverBounds(w.file)
	if err != nil {
		t.Fatal(err)
	}
	if low != libverV110 || high != libverV110 {
		t.Errorf("library version bounds %d to %d, want %d (1.10) to %d", low, high, libverV110, libverV110)
	}
}
