package extend_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"example.org/beamline/extend"

	"h5ingest/registry"
	"h5ingest/scan"
	"h5ingest/stock"
	"h5ingest/writer"
)

// TestZstdEndToEnd replays a scan with the example's zstd codec, of a
// filter h5ingest's own codecs do not know (32015), at a level h5ingest's
// own zstd codec refuses, and reads the file back as h5ingest does:
// verify proves it, inspect names the codec (and reads the plan from the
// flat layout's columns), the image reader decodes a
// frame as the uncompressed file holds it, and h5py with hdf5plugin
// reads it too. A program without the codec registered refuses the file
// saying which filter it lacks.
func TestZstdEndToEnd(t *testing.T) {
	out := replayWith(t, "backend: cpu\noutput:\n  layout: flat\n  compression: zstd\n  level: -5\n")
	plain := replayWith(t, "backend: cpu\noutput:\n  layout: flat\n  compression: none\n")
	stages := extendStages(t)

	r, err := writer.OpenPlain(out)
	if err != nil {
		t.Fatal(err)
	}
	filters := r.Filters
	r.Close()
	if len(filters) != 1 || filters[0].ID != extend.FilterZstd || int32(filters[0].Values[0]) != -5 {
		t.Fatalf("the file's filters %v, want zstd (32015) at level -5", filters)
	}

	v, err := scan.Verify(context.Background(), stages, out, time.Minute)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if v.Checked != 12 || len(v.Bad) != 0 {
		t.Errorf("verify checked %d chunks, found %v; want 12, none bad", v.Checked, v.Bad)
	}
	in, err := scan.Inspect(stages, out)
	if err != nil {
		t.Fatal(err)
	}
	if f := in.File; f == nil || f.Codec != "zstd" || len(f.Filters) != 1 || f.Filters[0].String() != "zstd (filter 32015: 4294967291)" ||
		!strings.HasPrefix(f.Plan, "2 darks, 2 flats, 8 projections") {
		t.Errorf("inspect says %+v, want the zstd codec of filter 32015 at level -5 and the plan", f)
	}
	for _, n := range []int{0, 5, 11} {
		got, err := scan.ReadImage(stages, out, n)
		if err != nil {
			t.Fatal(err)
		}
		want, err := scan.ReadImage(stages, plain, n)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Data, want.Data) {
			t.Errorf("frame %d of the zstd file differs from the uncompressed file's", n)
		}
	}

	own := registry.New()
	if err := stock.Register(own); err != nil {
		t.Fatal(err)
	}
	_, err = scan.Verify(context.Background(), own, out, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "no registered codec reads the filter pipeline [32015]") {
		t.Errorf("verify without the codec registered: %v", err)
	}
	if _, err := scan.ReadImage(own, out, 0); err == nil {
		t.Error("the image reader without the codec registered decoded a zstd frame")
	}

	t.Run("h5py", func(t *testing.T) {
		if exec.Command("/usr/bin/python3", "-c", "import h5py, hdf5plugin; assert h5py.h5z.filter_avail(32015)").Run() != nil {
			t.Skip("no h5py with a zstd filter (hdf5plugin from PyPI has one, Debian 12's has not): no cross-check")
		}
		script := `import sys, h5py, hdf5plugin, numpy
	a = h5py.File(sys.argv[1], "r")["/entry/data/data"][:]
	b = h5py.File(sys.argv[2], "r")["/entry/data/data"][:]
	print(a.shape, numpy.array_equal(a, b))`
		got, err := exec.Command("/usr/bin/python3", "-c", script, out, plain).CombinedOutput()
		if err != nil {
			t.Fatalf("h5py: %v\n%s", err, got)
		}
		if want := "(12, 32, 96) True"; strings.TrimSpace(string(got)) != want {
			t.Errorf("h5py with hdf5plugin read %q, want %q", strings.TrimSpace(string(got)), want)
		}
	})
}
