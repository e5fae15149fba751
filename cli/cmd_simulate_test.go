package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/scan/scantest"
	"h5ingest/source/capture"
	"h5ingest/source/sim"
)

// readSimulated returns the truth and the frame numbers, in order, of a
// simulated capture.
func readSimulated(t *testing.T, path string) (*sim.Truth, []frame.Header) {
	t.Helper()
	truth := scantest.Truth(t, path)
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var hs []frame.Header
	buf := make([]byte, 1<<20)
	for {
		h, p, err := r.Next(buf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if (h.PayloadCRC == frame.Checksum(p)) == slices.Contains(truth.Faults.Corrupt, int(h.FrameNumber)) {
			t.Errorf("frame %d: payload CRC match does not follow the corrupt list %v", h.FrameNumber, truth.Faults.Corrupt)
		}
		hs = append(hs, h)
	}
	return truth, hs
}

func TestSimulateTomo(t *testing.T) {
	out := filepath.Join(t.TempDir(), "scan.pmcap")
	args := []string{"simulate", "--scene", "tomo", "-o", out, "--darks", "2", "--flats", "3", "--projections", "5",
		"--angle-start", "0", "--angle-end", "90", "--chips", "2x1", "--chip-size", "16x8",
		"--encoding", "bitplane", "--bit-depth", "12", "--coding", "lfsr", "--orientation", "0,180",
		"--module", "2", "--fps", "500", "--seed", "7",
		"--missing", "1", "--duplicate", "4", "--reorder", "6", "--corrupt", "8,9"}
	if code := run(args); code != exitOK {
		t.Fatalf("simulate exit status %d", code)
	}
	truth, hs := readSimulated(t, out)
	if truth.Frames != 10 || truth.Plan == nil || !reflect.DeepEqual(*truth.Plan, plan.Tomo(2, 3, 5, 0, 90)) {
		t.Errorf("truth: %d frames, plan %+v", truth.Frames, truth.Plan)
	}
	if truth.Seed != 7 || truth.Module != 2 || !slices.Equal(truth.Orientation, []int{0, 180}) || truth.RotationAngle[7] != 36 {
		t.Errorf("truth: seed %d module %d orientation %v angle of frame 7 %v", truth.Seed, truth.Module, truth.Orientation, truth.RotationAngle[7])
	}
	want := frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 1, ChipWidth: 16, ChipHeight: 8},
		Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR}
	var order []int
	for _, h := range hs {
		order = append(order, int(h.FrameNumber))
		if h.Format != want || h.ModuleID != 2 || h.Timestamp != h.FrameNumber*2_000_000 {
			t.Errorf("frame %d: format %v module %d timestamp %d", h.FrameNumber, h.Format, h.ModuleID, h.Timestamp)
		}
	}
	if wantOrder := []int{0, 2, 3, 4, 4, 5, 7, 6, 8, 9}; !slices.Equal(order, wantOrder) {
		t.Errorf("frames written %v, want %v", order, wantOrder)
	}

	// The output exists: refused without --overwrite, replaced with it.
	if code := run(args); code != exitUsage {
		t.Errorf("second run without --overwrite: exit status %d, want %d", code, exitUsage)
	}
	if code := run(append(args, "--overwrite", "--seed", "8")); code != exitOK {
		t.Errorf("run with --overwrite: exit status %d", code)
	}
	if truth, _ := readSimulated(t, out); truth.Seed != 8 {
		t.Errorf("after --overwrite the capture has seed %d, want 8", truth.Seed)
	}
}

func TestSimulateDefaults(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args   []string
		frames int
		format frame.Format
	}{
		{[]string{"--scene", "cdi", "--frames", "3", "--chips", "1x1", "--chip-size", "64x64"}, 3,
			frame.Format{Geometry: frame.Geometry{ChipsX: 1, ChipsY: 1, ChipWidth: 64, ChipHeight: 64}, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}},
		{[]string{"--frames", "4", "--chips", "1x2", "--chip-size", "8x4", "--encoding", "u16le"}, 4,
			frame.Format{Geometry: frame.Geometry{ChipsX: 1, ChipsY: 2, ChipWidth: 8, ChipHeight: 4}, Encoding: frame.U16LE, BitDepth: 16}},
		{[]string{"--frames", "2", "--chips", "2x2", "--chip-size", "8x2", "--encoding", "packed12", "--orientation", "alternate-rows", "--corrupt", "0.5"}, 2,
			frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 8, ChipHeight: 2}, Encoding: frame.Packed12, BitDepth: 12}},
	}
	for i, tt := range tests {
		out := filepath.Join(dir, string(rune('a'+i))+".pmcap")
		if code := run(append([]string{"simulate", "-o", out}, tt.args...)); code != exitOK {
			t.Fatalf("%v: exit status %d", tt.args, code)
		}
		truth, hs := readSimulated(t, out)
		if truth.Frames != tt.frames || len(hs) != tt.frames {
			t.Errorf("%v: %d frames planned, %d written; want %d", tt.args, truth.Frames, len(hs), tt.frames)
		}
		if hs[0].Format != tt.format {
			t.Errorf("%v: format %v, want %v", tt.args, hs[0].Format, tt.format)
		}
		if i == 2 && !slices.Equal(truth.Orientation, []int{0, 0, 180, 180}) {
			t.Errorf("alternate-rows: orientation %v", truth.Orientation)
		}
	}
}

func TestSimulateUsageErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.pmcap")
	tests := [][]string{
		{},                       // no output
		{"--scene", "mri"},       // unknown scene
		{"--frames", "-1"},       // negative
		{"--frames", "0"},        // no frames
		{"--frames", "10000001"}, // more than a scan may hold
		{"--chips", "6by6"},      // bad geometry
		{"--chip-size", "0x8"},   // bad geometry
		{"--encoding", "jpeg"},   // unknown encoding
		{"--bit-depth", "7"},     // bad depth for bitplane
		{"--coding", "gray"},     // unknown coding
		{"--encoding", "u16le", "--coding", "lfsr"}, // lfsr only for bitplane
		{"--orientation", "90"},                     // wrong angle and count
		{"--orientation", "0,180"},                  // wrong count for 36 chips
		{"--fps", "0"},
		{"--missing", "1000"},                    // beyond the scan
		{"--corrupt", "1.5"},                     // rate above 1
		{"--reorder", "a,b"},                     // not numbers
		{"--frames", "5", "--darks", "2"},        // both plan and frames
		{"--scene", "cdi", "--projections", "3"}, // plan flags for cdi
		{"--no-such-flag"},
		// A payload no frame header can describe.
		{"--chips", "255x255", "--chip-size", "65528x65528"},
	}
	for _, extra := range tests {
		args := []string{"simulate", "--frames", "1", "--chips", "1x1", "--chip-size", "8x8"}
		if len(extra) == 0 {
			args = []string{"simulate"}
		} else {
			args = append(args, "-o", out)
			args = append(args, extra...)
		}
		if code := run(args); code != exitUsage {
			t.Errorf("%v: exit status %d, want %d", extra, code, exitUsage)
		}
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused command left %s behind", out)
	}
}

// TestSimulateSequence simulates flats before and after the projections
// and replays the capture with the same sequence.
func TestSimulateSequence(t *testing.T) {
	path, truth := simulate(t, "--sequence", "flats:2,darks:1,projections:4,flats:2")
	if want := []int{1, 1, 2, 0, 0, 0, 0, 1, 1}; !slices.Equal(truth.ImageKey, want) {
		t.Errorf("image keys %v, want %v", truth.ImageKey, want)
	}
	out := filepath.Join(t.TempDir(), "scan.h5")
	if code, stdout := runCaptured(t, "replay", path, "-o", out, "--sequence", "flats:2,darks:1,projections:4,flats:2"); code != exitOK {
		t.Fatalf("replay exit status %d\n%s", code, stdout)
	}
	scantest.CrossCheck(t, out, "nxtomo", truth, scantest.ExpectedStatus(truth), true)
	for _, bad := range [][]string{{"--sequence", "flats:x"}, {"--sequence", "darks:1", "--darks", "2"}} {
		if code := run(append([]string{"simulate", "-o", filepath.Join(t.TempDir(), "x.pmcap")}, bad...)); code != exitUsage {
			t.Errorf("simulate %v: exit status %d, want %d", bad, code, exitUsage)
		}
	}
}
