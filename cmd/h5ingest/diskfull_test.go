package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestReplayDiskFullNoPlan replays scans without a plan (the file grows
// with the frames) onto tmpfs file systems that fill at different points,
// uncompressed and compressed: the command fails saying the disk is full;
// plain h5py (not a SWMR reader) opens the file; the file records as many
// frames, ok and missing, as the summary says; and verify finds every
// record and chunk in agreement. Before, the summary said "30 ok" where the
// file recorded all 30 missing, or the file had no records and did not
// open in plain h5py.
func TestReplayDiskFullNoPlan(t *testing.T) {
	py := python(t, "h5py", "numpy")
	path, _ := simulate(t, "--chips", "3x2", "--chip-size", "256x256", "--frames", "30")
	for _, tt := range []struct{ size, compression string }{
		{"3m", "none"}, {"6m", "none"}, {"9m", "none"}, {"2m", "bslz4"}, {"3m", "bslz4"},
	} {
		t.Run(tt.size+"/"+tt.compression, func(t *testing.T) {
			dir := mountTmpfs(t, "size="+tt.size)
			out := filepath.Join(dir, "full.h5")
			code, stdout, stderr := runProcess(t, "replay", path, "-o", out, "--compression", tt.compression)
			if code != exitFailure || !strings.Contains(stderr, "No space left on device") {
				t.Fatalf("exit status %d, want %d saying the disk is full:\n%s%s", code, exitFailure, stdout, stderr)
			}
			b, err := exec.Command(py, "-c", `import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    s = f["/entry/instrument/detector/frame_status"][:]
    print(len(s), int((s == 0).sum()), int((s == 1).sum()))`, out).CombinedOutput()
			if err != nil {
				t.Fatalf("plain h5py does not open the file: %v\n%s", err, b)
			}
			var frames, ok, missing int
			if _, err := fmt.Sscan(string(b), &frames, &ok, &missing); err != nil {
				t.Fatalf("h5py printed %q: %v", b, err)
			}
			m := regexp.MustCompile(`frames +(\d+) in the scan`).FindStringSubmatch(stdout)
			if m == nil || m[1] != strconv.Itoa(frames) || summaryCount(t, stdout, "ok") != ok || summaryCount(t, stdout, "missing") != missing {
				t.Errorf("the file records %d frames, %d ok, %d missing; the summary says:\n%s", frames, ok, missing, stdout)
			}
			if ok+missing != frames || ok == 30 {
				t.Errorf("the file records %d frames, %d ok, %d missing", frames, ok, missing)
			}
			code, vout, _ := runProcess(t, "verify", out)
			if code != exitIncomplete || strings.Contains(vout, "BAD") || !strings.Contains(vout, strconv.Itoa(ok)+" chunks verified") {
				t.Errorf("verify: exit status %d, want %d with %d chunks verified:\n%s", code, exitIncomplete, ok, vout)
			}
		})
	}
}
