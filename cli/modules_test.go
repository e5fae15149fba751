package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"h5ingest/frame"
	"h5ingest/scan/scantest"
	"h5ingest/source/sim"
)

// TestSimulateModules simulates the test array's four modules into one
// interleaved capture (simulate --modules) and replays it with the array's
// profile: each module's file holds its own frames, and the master shows
// the array as the simulator made it.
func TestSimulateModules(t *testing.T) {
	path := filepath.Join(t.TempDir(), "array.pmcap")
	args := append([]string{"simulate", "-o", path, "--seed", "11", "--modules", "0,1,2,3"}, smallScan...)
	if code := run(append(args, arrayPlan...)); code != exitOK {
		t.Fatalf("simulate exit status %d", code)
	}
	truths, err := sim.ReadTruths(captureMetadata(t, path))
	if err != nil || len(truths) != len(arrayModules) {
		t.Fatalf("%d truths, %v: want one per module", len(truths), err)
	}
	for i, tr := range truths {
		if int(tr.Module) != arrayModules[i].id || tr.Seed != 11+uint64(tr.Module) {
			t.Errorf("truth %d: module %d seed %d", i, tr.Module, tr.Seed)
		}
	}
	var modules []uint16
	for _, rec := range scantest.CaptureRecords(t, path) {
		h, err := frame.ParseHeader(rec)
		if err != nil {
			t.Fatal(err)
		}
		modules = append(modules, h.ModuleID)
	}
	if want := "[0 1 2 3 0 1 2 3"; !strings.HasPrefix(fmt.Sprint(modules), want) || len(modules) != 4*5 {
		t.Errorf("records of modules %v, want the four interleaved, 5 frames each", modules)
	}
	master := filepath.Join(t.TempDir(), "scan.h5")
	code, stdout := runCaptured(t, "replay", path, "--profile", arrayProfile(t), "-o", master)
	if code != exitOK {
		t.Fatalf("replay exit status %d\n%s", code, stdout)
	}
	checkArray(t, master, truths)
}

// TestReplayCapturePerModule replays one capture per module of the test
// array (as receivers, one per module, record them) into the array's
// files. A capture cut short ends alone: the other modules' frames are all
// written, and the scan exits with status 3.
func TestReplayCapturePerModule(t *testing.T) {
	t.Parallel()
	paths, truths := simulateModules(t)
	profile := arrayProfile(t)
	dir := t.TempDir()
	master := filepath.Join(dir, "scan.h5")
	code, stdout, stderr := runProcess(t, append(append([]string{"replay"}, paths...), "--profile", profile, "-o", master)...)
	if code != exitOK {
		t.Fatalf("replay exit status %d\n%s%s", code, stdout, stderr)
	}
	checkArray(t, master, truths)

	// Module 2's capture cut inside its last frame.
	cut := filepath.Join(t.TempDir(), "m2cut.pmcap")
	b, err := os.ReadFile(paths[2])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cut, b[:len(b)-100], 0o644); err != nil {
		t.Fatal(err)
	}
	withCut := []string{paths[0], paths[1], cut, paths[3]}
	out := filepath.Join(t.TempDir(), "cut.h5")
	code, stdout, stderr = runProcess(t, append(append([]string{"replay"}, withCut...), "--profile", profile, "-o", out)...)
	if code != exitIncomplete || !strings.Contains(stderr, "capture cut short") {
		t.Fatalf("replay with a cut capture: exit status %d, want %d\n%s%s", code, exitIncomplete, stdout, stderr)
	}
	for i, m := range arrayModules {
		recs, _ := readFile(t, filepath.Join(filepath.Dir(out), fmt.Sprintf("cut_m%d.h5", m.id)))
		for n, rec := range recs {
			want := uint8(frame.StatusOK)
			if m.id == 2 && n == len(recs)-1 {
				want = frame.StatusMissing
			}
			if rec.Status != want || (want == frame.StatusOK && rec.DataCRC != truths[i].DataCRC[n]) {
				t.Errorf("module %d frame %d: status %d, want %d", m.id, n, rec.Status, want)
			}
		}
	}
	// Captures of two formats are not one scan.
	other, _ := simulate(t, "--frames", "5", "--bit-depth", "12", "--encoding", "packed12")
	if code, _, stderr := runProcess(t, "replay", paths[0], other, "--profile", profile, "-o", filepath.Join(t.TempDir(), "x.h5")); code != exitFailure ||
		!strings.Contains(stderr, "one scan has one format") {
		t.Errorf("replay of two formats: exit status %d\n%s", code, stderr)
	}
}
