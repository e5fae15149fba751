package extend_test

import (
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"example.org/beamline/extend"

	"h5ingest/compress/compresstest"
	"h5ingest/config"
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
	if err := extend.Register(stages); err != nil {
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
	if _, err := scan.Replay(context.Background(), scan.ReplayOptions{Options: scan.Options{Profile: p, Stages: stages}, Files: files, Captures: []string{captured}}); err != nil {
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
	if n := below(r, threshold); n == 0 {
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
	if err := extend.Register(stages); err != nil {
		t.Fatal(err)
	}
	if err := extend.Register(stages); err == nil {
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
	if err := extend.Register(stages); err != nil {
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

// TestThresholdOptions checks the threshold processor's option from the
// profile to the pixels: the entry's min decoded by the registry, the
// default where it sets none, a threshold below 1 or not a number
// refused where the profile is checked, and one the scan's pixels cannot
// reach refused when the stage starts.
func TestThresholdOptions(t *testing.T) {
	bits24 := frame.Format{Geometry: frame.Geometry{ChipsX: 1, ChipsY: 1, ChipWidth: 4, ChipHeight: 1}, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	bits12 := bits24
	bits12.Encoding, bits12.BitDepth, bits12.Coding = frame.Packed12, 12, frame.Binary
	tests := []struct {
		name    string
		entry   string // output.processors' entry
		format  frame.Format
		pixels  []uint32 // the image, processed
		want    []uint32
		wantErr string
		atStart bool // the error comes when the stage starts, not when the profile is checked
	}{
		{"min set", "{name: threshold, min: 1500}", bits24, []uint32{0, 1499, 1500, 70000}, []uint32{0, 0, 1500, 70000}, "", false},
		{"the default", "threshold", bits24, []uint32{99, 100, 1499, 7}, []uint32{0, 100, 1499, 0}, "", false},
		{"16-bit pixels", "{name: threshold, min: 4095}", bits12, []uint32{4094, 4095, 1, 0}, []uint32{0, 4095, 0, 0}, "", false},
		{"zero", "{name: threshold, min: 0}", bits24, nil, nil, "key output.processors[0]: processor threshold: min: 0, want 1 or more", false},
		{"negative", "{name: threshold, min: -3}", bits24, nil, nil, "key output.processors[0]: processor threshold: min: -3, want 1 or more", false},
		{"above the counter", "{name: threshold, min: 4096}", bits12, nil, nil, "processor threshold: min: 4096, want 1 to 4095, the counts of a 12-bit pixel", true},
		{"not a number", "{name: threshold, min: high}", bits24, nil, nil, "output.processors[0].min", false},
		{"unknown option", "{name: threshold, max: 3}", bits24, nil, nil, "output.processors[0].max: unknown option of processor threshold (it knows min)", false},
	}
	stages := extendStages(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.yaml")
			if err := os.WriteFile(path, []byte("output:\n  processors: ["+tt.entry+"]\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			p, err := config.Load(path, stages.Names())
			if tt.wantErr != "" && !tt.atStart {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("profile check: %v, want an error saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("profile check: %v", err)
			}
			st, err := stages.StartProcessor(0, p.Output.Processors[0], pipeline.Scan{Format: tt.format})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			proc, err := st.Processor()
			if err != nil {
				t.Fatal(err)
			}
			size := tt.format.PixelSize()
			img := make([]byte, size*len(tt.pixels))
			for i, v := range tt.pixels {
				put(img[i*size:], size, v)
			}
			if err := proc.Process(0, tt.format, img); err != nil {
				t.Fatal(err)
			}
			for i, w := range tt.want {
				if got := get(img[i*size:], size); got != w {
					t.Errorf("pixel %d: %d after the threshold, want %d", i, got, w)
				}
			}
		})
	}
}

// put stores v as a little-endian pixel of size bytes.
func put(b []byte, size int, v uint32) {
	if size == 2 {
		binary.LittleEndian.PutUint16(b, uint16(v))
		return
	}
	binary.LittleEndian.PutUint32(b, v)
}

// get reads a little-endian pixel of size bytes.
func get(b []byte, size int) uint32 {
	if size == 2 {
		return uint32(binary.LittleEndian.Uint16(b))
	}
	return binary.LittleEndian.Uint32(b)
}
