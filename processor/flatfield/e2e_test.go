package flatfield_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/scan"
	"h5ingest/source/capture"
	"h5ingest/source/sim"
	"h5ingest/stock"
)

// TestReplayMatchesNumpy replays a simulated tomography scan with a
// profile that names flatfield with options, then has numpy compute the
// same correction from the raw frames of the file, read with h5py: the
// previews match it, frames that are no projection read NaN, and verify
// passes (the raw frames are stored unchanged).
func TestReplayMatchesNumpy(t *testing.T) {
	const py = "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import h5py, hdf5plugin, numpy").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import h5py, hdf5plugin and numpy: %v %s", py, err, out)
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name    string
		format  frame.Format
		options string
		bin     int
		lo, hi  float64
	}{
		{"24-bit/bin2", frame.Format{Geometry: frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16},
			Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}, "bin: 2, max: 1.5", 2, 0, 1.5},
		{"12-bit/bin3", frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 32, ChipHeight: 16},
			Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR}, "bin: 3, dataset: /processed/flat", 3, 0, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := sim.DefaultConfig()
			cfg.Format, cfg.Plan, cfg.Seed = c.format, plan.Tomo(4, 5, 12, 0, 180), 7
			capPath := filepath.Join(dir, c.name[:6]+".pmcap")
			s, err := sim.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.Create(capPath)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.WriteCapture(f, capture.Metadata{Profile: "test"}); err != nil {
				t.Fatal(err)
			}
			f.Close()

			reg := registry.New()
			if err := stock.Register(reg); err != nil {
				t.Fatal(err)
			}
			profPath := filepath.Join(dir, "ff.yaml")
			text := "name: ff\noutput:\n  processors: [{name: flatfield, " + c.options + "}]\n"
			if err := os.WriteFile(profPath, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			p, err := config.Load(profPath, reg.Names())
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, c.name[:6]+".h5")
			files, err := scan.NewFiles(p, scan.Names{Output: out})
			if err != nil {
				t.Fatal(err)
			}
			var errs bytes.Buffer
			err = scan.Replay(context.Background(), scan.ReplayOptions{
				Options: scan.Options{Profile: p, Stages: reg, Errs: &errs}, Files: files, Captures: []string{capPath}})
			if err != nil {
				t.Fatalf("replay: %v\n%s", err, errs.String())
			}
			if strings.Contains(errs.String(), "processor") {
				t.Errorf("replay warned: %s", errs.String())
			}
			if _, err := scan.Verify(context.Background(), reg, out, scan.DefaultVerifyStall); err != nil {
				t.Fatalf("verify: %v", err)
			}
			dataset := "/flatfield/preview"
			if strings.Contains(c.options, "dataset") {
				dataset = "/processed/flat"
			}
			script := `
import sys, h5py, hdf5plugin, numpy as np
path, dset, b, lo, hi = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
f = h5py.File(path, "r")
raw = f["/entry/instrument/detector/data"][()].astype(np.float64)
keys = f["/entry/instrument/detector/image_key"][()]
got = f[dset][()]
first = int(np.argmax(keys == 0))
ref = keys[:first]
dark = raw[:first][ref == 2].mean(axis=0) if (ref == 2).any() else np.zeros(raw.shape[1:])
flat = raw[:first][ref == 1].mean(axis=0)
den = flat - dark
ok = den > 0
n, h, w = raw.shape
oh, ow = h // b, w // b
assert got.dtype == np.float32 and got.shape == (n, oh, ow), (got.dtype, got.shape)
worst = 0.0
for i in range(n):
    if keys[i] != 0:
        assert np.isnan(got[i]).all(), "frame %d (key %d) has a preview" % (i, keys[i])
        continue
    c = np.where(ok, (raw[i] - dark) / np.where(ok, den, 1), 0.0)
    c = np.clip(c, lo, hi)[:oh * b, :ow * b].reshape(oh, b, ow, b).mean(axis=(1, 3))
    assert np.allclose(got[i], c, rtol=1e-5, atol=1e-5), "frame %d: max diff %g" % (i, np.abs(got[i] - c).max())
    worst = max(worst, float(np.abs(got[i] - c).max()))
    assert c.std() > 0.01, "frame %d: a flat preview proves nothing" % i
print("ok", worst)
`
			cmd := exec.Command(py, "-c", script, out, dataset, strconv.Itoa(c.bin), fmt.Sprint(c.lo), fmt.Sprint(c.hi))
			res, err := cmd.CombinedOutput()
			if err != nil || !strings.HasPrefix(string(res), "ok") {
				t.Fatalf("numpy check: %v\n%s", err, res)
			}
			t.Logf("numpy: %s", strings.TrimSpace(string(res)))
		})
	}
}
