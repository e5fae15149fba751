package cli

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"h5ingest/plan"
	"h5ingest/scan/scantest"
	"h5ingest/source/capture"
	"h5ingest/version"
	"h5ingest/writer"
)

// smallProfileEnv sets the profile's detector to the smallScan geometry.
func smallProfileEnv(t *testing.T) {
	for k, v := range map[string]string{"CHIPS_X": "3", "CHIPS_Y": "2", "CHIP_WIDTH": "32", "CHIP_HEIGHT": "16"} {
		t.Setenv("H5INGEST_DETECTOR_"+k, v)
	}
}

// withoutPlanField rewrites a simulated capture without its plan field, as
// captures were written before there was one: the plan is then in the
// simulation's ground truth alone.
func withoutPlanField(t *testing.T, path string) string {
	t.Helper()
	meta := captureMetadata(t, path)
	delete(meta.Extra, capture.KeyPlan)
	out := filepath.Join(t.TempDir(), "old.pmcap")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := capture.NewWriter(f, meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range scantest.CaptureRecords(t, path) {
		if err := w.WriteRecord(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReplayUsesCapturePlan replays a simulated scan of darks, flats and
// projections with no plan flags: replay takes the plan the capture
// records (or, in an older capture, its ground truth's), says so, and
// dxchange reads the darks, flats, projections and angles the scan had.
// It used to write every frame as a projection at 0 degrees.
func TestReplayUsesCapturePlan(t *testing.T) {
	t.Parallel()
	path, truth := simulate(t, "--darks", "2", "--flats", "3", "--projections", "10", "--angle-start", "10", "--angle-end", "100")
	for _, c := range []struct{ name, path string }{{"plan field", path}, {"ground truth only", withoutPlanField(t, path)}} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "scan.h5")
			code, stdout, stderr := runProcess(t, "replay", c.path, "-o", out)
			if code != exitOK {
				t.Fatalf("exit status %d\n%s%s", code, stdout, stderr)
			}
			want := "h5ingest: no plan given: using the plan recorded in " + c.path + ": 2 darks, 3 flats, 10 projections over 10..100 degrees\n"
			if !strings.Contains(stderr, want) {
				t.Errorf("standard error lacks %q:\n%s", want, stderr)
			}
			scantest.CrossCheck(t, out, writer.LayoutNXtomo, truth, make([]uint8, truth.Frames), true)
		})
	}
	// A plan given on the command line is the plan.
	out := filepath.Join(t.TempDir(), "given.h5")
	code, _, stderr := runProcess(t, "replay", path, "-o", out, "--projections", "15")
	if code != exitOK || strings.Contains(stderr, "using the plan recorded") {
		t.Errorf("replay with --projections: exit status %d\n%s", code, stderr)
	}
}

// TestRecordKeepsScan acquires a scan with --record and a plan of darks,
// flats and projections: the capture's metadata holds the plan, the merged
// profile, the detector's geometry and the h5ingest version, and a replay
// of it with no plan flags writes the scan acquire wrote, as dxchange reads
// it.
func TestRecordKeepsScan(t *testing.T) {
	smallProfileEnv(t)
	planFlags := []string{"--darks", "2", "--flats", "2", "--projections", "8", "--angle-end", "360"}
	sent, truth := simulate(t, append([]string{"--angle-end", "360"}, planFlags[:6]...)...)
	dir := t.TempDir()
	addr := scantest.FreeAddr(t)
	rec := filepath.Join(dir, "s1.pmcap")
	done := startAcquire(append([]string{"--listen", addr, "--output-dir", dir, "--scan-id", "s1", "--backend", "cpu",
		"--record", rec, "--connect-timeout", "20s", "--compression", "lz4"}, planFlags...)...)
	if code := run([]string{"send", sent, "--to", addr, "--timeout", "20s"}); code != exitOK {
		t.Fatalf("send exit status %d", code)
	}
	if code := <-done; code != exitOK {
		t.Fatalf("acquire exit status %d", code)
	}
	meta := captureMetadata(t, rec)
	var got struct {
		version  string
		plan     plan.Plan
		values   map[string]any
		geometry capture.Geometry
	}
	for key, v := range map[string]any{capture.KeyVersion: &got.version, capture.KeyPlan: &got.plan,
		capture.KeyProfileValues: &got.values, capture.KeyGeometry: &got.geometry} {
		if ok, err := meta.Get(key, v); !ok || err != nil {
			t.Errorf("metadata field %q: present %v, %v", key, ok, err)
		}
	}
	if got.version != version.String() || !strings.HasSuffix(meta.Software, version.String()) {
		t.Errorf("version %q, software %q: want %s", got.version, meta.Software, version.String())
	}
	if want := plan.Tomo(2, 2, 8, 0, 360); !reflect.DeepEqual(got.plan, want) {
		t.Errorf("plan %+v, want %+v", got.plan, want)
	}
	section := func(name string) map[string]any { m, _ := got.values[name].(map[string]any); return m }
	if section("output")["compression"] != "lz4" || section("detector")["chips_x"] != float64(3) ||
		section("source")["idle_timeout"] != "10s" || got.values["name"] != "default" {
		t.Errorf("merged profile %v", got.values)
	}
	if g := got.geometry; g.Format != truth.Format || len(g.Modules) != 1 || g.PixelSize != 55e-6 {
		t.Errorf("geometry %+v, want the format %+v of one module", g, truth.Format)
	}
	out := filepath.Join(dir, "again.h5")
	code, stdout, stderr := runProcess(t, "replay", rec, "-o", out)
	if code != exitOK || !strings.Contains(stderr, "using the plan recorded in "+rec+": 2 darks, 2 flats, 8 projections over 0..360 degrees") {
		t.Fatalf("replay of the record: exit status %d\n%s%s", code, stdout, stderr)
	}
	scantest.CrossCheck(t, out, writer.LayoutNXtomo, truth, make([]uint8, truth.Frames), true)
	scantest.CrossCheck(t, filepath.Join(dir, "s1.h5"), writer.LayoutNXtomo, truth, make([]uint8, truth.Frames), true)
}
