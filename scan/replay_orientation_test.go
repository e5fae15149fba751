package scan

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/scan/scantest"
	"h5ingest/source/capture"
	"h5ingest/source/sim"
)

// TestReplayCapturedOrientationHostile replays captures whose recorded
// chip orientation lies or does not parse, and captures of one scan that
// record different ones: each replay fails with an error naming the
// profile key, or writes the frames turned as its note or warning says.
func TestReplayCapturedOrientationHostile(t *testing.T) {
	t.Parallel()
	turned := []any{0, 180, 0, 180, 180, 0}
	cfg := simScan(scantest.SmallFormat, 6)
	cfg.Orientation = frame.Orientation{0, 180, 0, 180, 180, 0}
	path, truth := scantest.Simulate(t, cfg)
	recs := scantest.CaptureRecords(t, path)
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	simulated := r.Metadata()
	r.Close()
	// withGeometry writes the simulated frames recs[from:to] to a capture
	// that keeps the simulator's truth and records geometry as raw JSON
	// (none: no geometry).
	withGeometry := func(t *testing.T, geometry string, from, to int) string {
		meta := simulated
		meta.Extra = map[string]json.RawMessage{}
		for k, v := range simulated.Extra {
			meta.Extra[k] = v
		}
		if geometry != "" {
			meta.Extra[capture.KeyGeometry] = json.RawMessage(geometry)
		}
		c := filepath.Join(t.TempDir(), fmt.Sprintf("frames%d-%d.pmcap", from, to-1))
		scantest.WriteCaptureMeta(t, c, meta, recs[from:to])
		return c
	}
	huge := `{"chip_orientation":[180` + strings.Repeat(",180", 99999) + `]}`
	stages := scantest.Stages(t)
	for _, c := range []struct {
		name     string
		captures func(t *testing.T) []string
		profile  map[string]any
		truth    int    // frames whose data CRC is the simulator's
		says     string // in the notes, or the error
		fails    bool
	}{
		{"a list of strings, none in the profile", func(t *testing.T) []string { return []string{withGeometry(t, `{"chip_orientation":"x"}`, 0, 6)} }, nil,
			0, "the chip orientation it records: metadata field \"geometry\": json: cannot unmarshal string", true},
		{"a list of strings, the profile's", func(t *testing.T) []string { return []string{withGeometry(t, `{"chip_orientation":"x"}`, 0, 6)} },
			map[string]any{"detector.chip_orientation": turned}, 6, "cannot unmarshal string", false},
		{"degrees of 1e30, the profile's", func(t *testing.T) []string { return []string{withGeometry(t, `{"chip_orientation":[1e30]}`, 0, 6)} },
			map[string]any{"detector.chip_orientation": turned}, 6, "cannot unmarshal number 1e30", false},
		{"180.0, none in the profile", func(t *testing.T) []string {
			return []string{withGeometry(t, `{"chip_orientation":[0,180.0,0,180,180,0]}`, 0, 6)}
		}, nil, 0, "cannot unmarshal number 180.0", true},
		{"-180, none in the profile", func(t *testing.T) []string {
			return []string{withGeometry(t, `{"chip_orientation":[0,-180,0,180,180,0]}`, 0, 6)}
		}, nil, 0, "chip 1 orientation -180: want 0 or 180", true},
		{"100000 chips, none in the profile", func(t *testing.T) []string { return []string{withGeometry(t, huge, 0, 6)} }, nil,
			0, "chip orientation lists 100000 chips, the module has 6", true},
		{"the profile's does not fit the frames", func(t *testing.T) []string { return []string{path} },
			map[string]any{"detector.chips_x": 6, "detector.chips_y": 6, "detector.chip_orientation": all180(36)},
			0, "profile key detector.chip_orientation: chip orientation lists 36 chips, the module has 6", true},
		{"geometry all 0, truth turned", func(t *testing.T) []string { return []string{withGeometry(t, `{}`, 0, 6)} }, nil, 0, "", false},
		{"the first capture's turned, the second's not", func(t *testing.T) []string {
			return []string{withGeometry(t, "", 0, 3), withGeometry(t, `{"chip_orientation":[0,0,0,0,0,0]}`, 3, 6)}
		}, nil, 6, "records the chip orientation [0 0 0 0 0 0], capture ", false},
		{"the first capture's not turned, the second's turned", func(t *testing.T) []string {
			return []string{withGeometry(t, `{}`, 0, 3), withGeometry(t, "", 3, 6)}
		}, nil, 0, "records the chip orientation [0 180 0 180 180 0], capture ", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := testProfile(t, stages, scantest.SmallFormat, c.profile)
			out := filepath.Join(t.TempDir(), "scan.h5")
			r := replayInto(t, context.Background(), p, stages, plan.Tomo(0, 0, 6, 0, 180), out, c.captures(t)...)
			checkOrientationReplay(t, r, out, truth, c.fails, c.says, c.truth)
		})
	}
}

// checkOrientationReplay checks the replay r of 6 frames into out: where
// it fails, an error saying says and naming the profile key, no warning
// before it and no file; else notes saying says (nothing of the
// orientation where says is empty) and same of the 6 frames the image
// the detector saw, as truth records it.
func checkOrientationReplay(t *testing.T, r replayed, out string, truth *sim.Truth, fails bool, says string, same int) {
	t.Helper()
	if fails {
		if r.err == nil || !strings.Contains(r.err.Error(), says) || !strings.Contains(r.err.Error(), "detector.chip_orientation") {
			t.Fatalf("replay: %v, want an error saying %q and naming the profile key", r.err, says)
		}
		if strings.Contains(r.errs, "warning") {
			t.Errorf("replay warned %q before its error", r.errs)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("replay that failed wrote %s", out)
		}
		return
	}
	if r.err != nil {
		t.Fatalf("replay: %v\n%s", r.err, r.said())
	}
	if says != "" && !strings.Contains(r.said(), says) {
		t.Errorf("replay said %q, want %q", r.said(), says)
	}
	if says == "" && strings.Contains(r.said(), "orientation") {
		t.Errorf("replay said %q, want nothing of the orientation", r.said())
	}
	got, frames := scantest.TruthFrames(t, out, truth)
	if frames != 6 || got != same {
		t.Errorf("%d of %d frames equal to the detector's image, want %d of 6", got, frames, same)
	}
}

// all180 returns a chip orientation of n chips, every one at 180 degrees.
func all180(n int) []any {
	o := make([]any, n)
	for k := range o {
		o[k] = 180
	}
	return o
}
