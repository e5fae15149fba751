package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestBenchSmall runs the whole bench on a tiny geometry and checks that
// every row is measured and the ratios printed.
func TestBenchSmall(t *testing.T) {
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import h5py, hdf5plugin, bitshuffle, numpy").Run(); err != nil {
		t.Skipf("%s lacks h5py, hdf5plugin, bitshuffle or numpy (Debian python3-h5py, python3-hdf5plugin, bitshuffle): %v", python, err)
	}
	t.Setenv("H5INGEST_TEST_AS_COMMAND", "1") // the rows run this test binary as h5ingest
	dir := t.TempDir()
	// Something of the user's in --dir, which the bench must leave alone.
	mine := filepath.Join(dir, "scan-0001.h5")
	if err := os.WriteFile(mine, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	fl := benchFlags{frames: 6, unique: 3, dir: dir, python: python, backend: "cpu", threads: 2, chips: "3x2", chipSize: "32x16"}
	if err := fl.validate(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runBench(&out, io.Discard, &fl); err != nil {
		t.Fatal(err)
	}
	table := out.String()
	for _, row := range []string{"h5ingest replay -> HDF5", "reference: h5py", "ceiling: C bitshuffle+LZ4, 2 threads", "1 thread", "writer alone",
		benchShuffledRow} {
		line := lineWith(table, row)
		if line == "" {
			t.Fatalf("no row %q in\n%s", row, table)
		}
		f := strings.Fields(line)
		// frames/s, GB/s, time, ratio, RSS: the last five columns.
		for _, v := range f[len(f)-5:] {
			if x, err := strconv.ParseFloat(v, 64); err != nil || x < 0 {
				t.Errorf("row %q: column %q is not a measurement", row, v)
			}
		}
		if rss, _ := strconv.ParseFloat(f[len(f)-1], 64); rss <= 0 {
			t.Errorf("row %q: peak RSS %s MiB", row, f[len(f)-1])
		}
	}
	if !regexp.MustCompile(`ours / reference  \d+\.\d\d`).MatchString(table) ||
		!regexp.MustCompile(`ours / ceiling    \d+\.\d\d`).MatchString(table) ||
		!regexp.MustCompile(`transpose on the backend / ours  \d+\.\d\d`).MatchString(table) {
		t.Errorf("ratios missing from\n%s", table)
	}
	if b, err := os.ReadFile(mine); err != nil || string(b) != "data" {
		t.Errorf("bench touched a file of --dir: %q, %v", b, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 1 {
		t.Errorf("bench left %v in --dir, want only %s", left, mine)
	}
}

// lineWith returns the first line of s that contains sub.
func lineWith(s, sub string) string {
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			return line
		}
	}
	return ""
}

func TestBenchFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"--frames", "0"}, {"--unique", "0"}, {"--threads", "0"}} {
		if code := run(append([]string{"bench"}, args...)); code != exitUsage {
			t.Errorf("bench %v: exit status %d, want %d", args, code, exitUsage)
		}
	}
}

// TestBenchGeometryErrors checks that a geometry the simulator refuses is
// a usage error before bench makes any file.
func TestBenchGeometryErrors(t *testing.T) {
	for _, tt := range []struct{ chips, chipSize, want string }{
		{"0x0", "256x256", `--chips "0x0": want two whole numbers from 1 to 255`},
		{"6x6", "256", `--chip-size "256": want two whole numbers from 1 to 65535`},
		{"6x6", "60x60", "--chips 6x6 --chip-size 60x60: bitplane chip width 60: must be a multiple of 8"},
		{"255x255", "65528x65528", "more than a header's payload_size holds"},
	} {
		fl := benchFlags{frames: 10, unique: 5, threads: 1, chips: tt.chips, chipSize: tt.chipSize}
		if err := fl.validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("--chips %s --chip-size %s: %v, want an error containing %q", tt.chips, tt.chipSize, err, tt.want)
		}
	}
	fl := benchFlags{frames: 10, unique: 5, threads: 1, chips: "6x6", chipSize: "256x256"}
	if err := fl.validate(); err != nil {
		t.Errorf("the Pi-mega geometry: %v", err)
	}
}
