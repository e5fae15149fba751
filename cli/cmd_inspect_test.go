package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"h5ingest/scan"
	"h5ingest/writer"
)

// TestInspectPNG checks that --png says what the picture cannot show (a
// frame never written, or received damaged), and that its flags are
// checked.
func TestInspectPNG(t *testing.T) {
	path, _ := simulate(t, "--frames", "4", "--missing", "1", "--corrupt", "2")
	dir := t.TempDir()
	out := filepath.Join(dir, "scan.h5")
	if code, stdout := runCaptured(t, "replay", path, "-o", out); code != exitIncomplete {
		t.Fatalf("replay exit status %d\n%s", code, stdout)
	}
	pic := filepath.Join(dir, "frame.png")
	tests := []struct {
		args []string
		code int
		note string // on stderr; "" for none
	}{
		{[]string{"--png", "0", "-o", pic}, exitOK, ""},
		{[]string{"--png", "1", "-o", pic}, exitOK, "frame 1 of " + out + " is missing: it was never written, the picture shows the fill value 0\n"},
		{[]string{"--png", "2", "-o", pic, "--max-side", "8"}, exitOK, "frame 2 of " + out + " has a payload CRC mismatch"},
		{[]string{"--png", "0", "-o", pic, "--max-side", "-1"}, exitUsage, "--max-side -1"},
		{[]string{"-o", pic}, exitUsage, "-o and --max-side go with --png FRAME"},
	}
	for _, tt := range tests {
		code, _, stderr := runProcess(t, append([]string{"inspect", out}, tt.args...)...)
		if code != tt.code || (tt.note == "") != (stderr == "") || !strings.Contains(stderr, tt.note) {
			t.Errorf("inspect %v: exit status %d, stderr %q; want status %d and %q", tt.args, code, stderr, tt.code, tt.note)
		}
	}
}

// TestInspectPNGOfMaster checks that a master file's frame is the whole
// array: each module's image at its offset, zeros in the gaps and where a
// module's file is absent, which is said.
func TestInspectPNGOfMaster(t *testing.T) {
	paths, _ := simulateModules(t)
	profile := arrayProfile(t)
	dir := t.TempDir()
	master := filepath.Join(dir, "scan.h5")
	if code, stdout := runCaptured(t, append([]string{"replay", interleave(t, paths), "--profile", profile, "-o", master}, arrayPlan...)...); code != exitOK {
		t.Fatalf("replay exit status %d\n%s", code, stdout)
	}
	if err := os.Remove(filepath.Join(dir, "scan_m2.h5")); err != nil {
		t.Fatal(err)
	}
	r, err := writer.Open(master)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const n = 3
	fr, err := scan.ReadImage(stages, master, n)
	if err != nil {
		t.Fatal(err)
	}
	img := fr.Data
	absent := scan.ImageNote{Kind: scan.ModuleFileAbsent, Path: filepath.Join(dir, "scan_m2.h5"), Frame: n, Module: 2}
	if !slices.Contains(fr.Notes, absent) {
		t.Errorf("notes %+v lack %+v", fr.Notes, absent)
	}
	es := r.ElemSize
	want := make([]byte, len(img))
	for _, m := range r.Modules {
		if m.ID == 2 {
			continue
		}
		file := filepath.Join(dir, m.File)
		mf, err := scan.ReadImage(stages, file, n)
		if err != nil {
			t.Fatal(err)
		}
		mod := mf.Data
		for y := range m.Height {
			at := ((m.Y+y)*r.Width + m.X) * es
			copy(want[at:], mod[y*m.Width*es:(y+1)*m.Width*es])
		}
	}
	if bytes.Count(want, []byte{0}) == len(want) {
		t.Fatal("the modules' images are all zero: nothing to compare")
	}
	if !bytes.Equal(img, want) {
		t.Error("the array image is not each module's image at its offset, zeros elsewhere")
	}
	pic := filepath.Join(dir, "array.png")
	if code, _, stderr := runProcess(t, "inspect", master, "--png", "3", "-o", pic); code != exitOK || !strings.Contains(stderr, "module 2's file") {
		t.Errorf("inspect --png of a master: exit status %d\n%s", code, stderr)
	}
	if _, err := os.Stat(pic); err != nil {
		t.Error(err)
	}
}

// TestInspectFaultTable checks what inspect says of a scan replayed from a
// capture holding every kind of fault the simulator makes, of a detector
// with chips turned: the frames missing and corrupt, the bitshuffle
// filter's values and the plan. The file itself, record by record and
// read with h5py: scan.TestReplayFaultTable.
func TestInspectFaultTable(t *testing.T) {
	orient := "0,180,0,180,180,0"
	path, _ := simulate(t, "--darks", "2", "--flats", "2", "--projections", "12",
		"--orientation", orient, "--missing", "3", "--duplicate", "5", "--reorder", "7", "--corrupt", "9")
	profile := filepath.Join(t.TempDir(), "beamline.yaml")
	text := "detector:\n  chips_x: 3\n  chips_y: 2\n  chip_width: 32\n  chip_height: 16\n  chip_orientation: [" + orient + "]\n"
	if err := os.WriteFile(profile, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "scan.h5")
	if code, stdout := runCaptured(t, "replay", path, "-o", out, "--profile", profile,
		"--darks", "2", "--flats", "2", "--projections", "12"); code != exitIncomplete {
		t.Fatalf("replay exit status %d, want %d (frames missing and corrupt)\n%s", code, exitIncomplete, stdout)
	}
	code, stdout := runCaptured(t, "inspect", out)
	if code != exitOK || !strings.Contains(stdout, "problems      missing frame 3; crc mismatch frame 9\n") ||
		!strings.Contains(stdout, "bitshuffle (filter 32008: 0 5 4 0 2)") ||
		!strings.Contains(stdout, "2 darks, 2 flats, 12 projections at 0 to 165 degrees") {
		t.Errorf("inspect exit status %d:\n%s", code, stdout)
	}
}
