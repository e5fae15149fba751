package extend_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"h5ingest/compress/compresstest"
	"h5ingest/config"
	"h5ingest/examples/extend"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/pipeline/pipelinetest"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/scan"
	"h5ingest/stock"
	"h5ingest/writer"
	"h5ingest/writer/writertest"
)

// extendStages returns h5ingest's own stages with package extend's
// beside them, as a facility's program registers them.
func extendStages(t *testing.T) *registry.Registry {
	t.Helper()
	stages := registry.New()
	if err := stock.Register(stages); err != nil {
		t.Fatal(err)
	}
	if err := extend.Register(stages, 100); err != nil {
		t.Fatal(err)
	}
	return stages
}

// replayWith replays a simulated scan under the profile text with the
// stages of package extend registered, and returns the file's path.
func replayWith(t *testing.T, text string) string {
	t.Helper()
	dir := t.TempDir()
	stages := extendStages(t)
	path := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := config.Load(path, stages.Names())
	if err != nil {
		t.Fatal(err)
	}
	captured := filepath.Join(dir, "scan.pmcap")
	if err := simulate(captured, plan.Tomo(2, 2, 8, 0, 180)); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "scan.h5")
	files, err := scan.NewFiles(p, scan.Names{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if err := scan.Replay(context.Background(), scan.ReplayOptions{Options: scan.Options{Profile: p, Stages: stages}, Files: files, Captures: []string{captured}}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestThresholdChangesTheFile checks that the example's figure is the
// processor's doing: the same scan without it has pixels below the
// threshold.
func TestThresholdChangesTheFile(t *testing.T) {
	out := replayWith(t, "backend: cpu\noutput:\n  layout: flat\n")
	r, err := writer.OpenPlain(out)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if n := below(r, 100); n == 0 {
		t.Error("without the threshold processor no pixel is below the threshold: the example proves nothing")
	}
}

// TestFlatLayoutReaders opens the flat layout's file in h5py, following
// the NeXus default attributes to the frame stack as NeXus readers do.
func TestFlatLayoutReaders(t *testing.T) {
	if exec.Command("/usr/bin/python3", "-c", "import h5py, hdf5plugin").Run() != nil {
		t.Skip("h5py and hdf5plugin are not installed")
	}
	out := replayWith(t, profile)
	script := `import sys, h5py
f = h5py.File(sys.argv[1], "r")
e = f[f.attrs["default"]]
d = e[e.attrs["default"]]
s = d[d.attrs["signal"]]
print(e.attrs["NX_class"], d.attrs["NX_class"], s.shape, int(d["frame_status"][:].max()))`
	got, err := exec.Command("/usr/bin/python3", "-c", script, out).CombinedOutput()
	if err != nil {
		t.Fatalf("h5py: %v\n%s", err, got)
	}
	if want := "NXentry NXdata (12, 32, 96) 0"; strings.TrimSpace(string(got)) != want {
		t.Errorf("h5py read %q, want %q", strings.TrimSpace(string(got)), want)
	}
}

// TestUnregisteredNamesRefused checks that a profile naming the
// example's stages is refused by a registry without them.
func TestUnregisteredNamesRefused(t *testing.T) {
	stages := registry.New()
	if err := stock.Register(stages); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(path, stages.Names()); err == nil || !strings.Contains(err.Error(), "flat") {
		t.Errorf("a profile naming unregistered stages: %v", err)
	}
	if err := extend.Register(stages, 1); err != nil {
		t.Fatal(err)
	}
	if err := extend.Register(stages, 1); err == nil {
		t.Error("the same names registered twice: no error")
	}
}

// TestConformance runs h5ingest's conformance suites on the stages of
// package extend, one line each.
func TestConformance(t *testing.T) {
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16}, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	pipelinetest.Processor(t, func() (pipeline.Processor, error) { return extend.NewThreshold(f, 100) }, f)
	writertest.Layout(t, extend.Flat{})
	stages := registry.New()
	if err := extend.Register(stages, 100); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"deflate-max", "zstd"} {
		c, _ := stages.Codec(name)
		codec, err := c.New(4, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) { compresstest.Codec(t, codec, 4, stages.ReadCodec) })
	}
}
