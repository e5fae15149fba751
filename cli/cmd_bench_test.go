package cli

import (
	"bytes"
	"fmt"
	"h5ingest/bench"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
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
	disk := t.TempDir()
	fl := benchFlags{cfg: bench.Config{Frames: 6, Unique: 3, Rounds: 2, Dir: dir, DiskDir: disk, Python: python, Backend: "cpu", Threads: 2,
		Chips: "3x2", ChipSize: "32x16"}, workers: "1,2,3"}
	if err := fl.validate(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fl.cfg.Self = self
	if err := bench.Run(&out, io.Discard, &fl.cfg); err != nil {
		t.Fatal(err)
	}
	table := out.String()
	rows := []string{bench.RowOurs, bench.RowOneWorker, bench.RowShuffled, bench.RowDisk, bench.RowReference, bench.RowReference1,
		"ceiling: C bitshuffle+LZ4, 2 threads", "C bitshuffle+LZ4, 1 thread", bench.RowWriter, bench.RowRoCE}
	for _, w := range []int{2, 3} { // the cores, or GOMAXPROCS
		if w != runtime.NumCPU() {
			rows = append(rows, fmt.Sprintf("h5ingest replay, GOMAXPROCS=%d (%d workers)", w, w))
		}
	}
	for _, row := range rows {
		line := lineWith(table, row)
		if line == "" {
			t.Fatalf("no row %q in\n%s", row, table)
		}
		f := strings.Fields(line)
		// best and median frames/s, spread, GB/s, ratio, RSS: the last six columns.
		for _, v := range f[len(f)-6:] {
			if x, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64); err != nil || x < 0 {
				t.Errorf("row %q: column %q is not a measurement", row, v)
			}
		}
		if best, _ := strconv.ParseFloat(f[len(f)-6], 64); best < must(strconv.ParseFloat(f[len(f)-5], 64)) {
			t.Errorf("row %q: best round slower than the median: %s", row, line)
		}
		if rss, _ := strconv.ParseFloat(f[len(f)-1], 64); rss <= 0 {
			t.Errorf("row %q: peak RSS %s MiB", row, f[len(f)-1])
		}
	}
	for _, ratio := range []string{"ours / reference (defaults)", "ours / reference (1 OpenMP thread)", "ours / ceiling", "ours / the faster C row",
		"transpose on the backend / ours", "to disk + fsync / to memory"} {
		if !regexp.MustCompile(regexp.QuoteMeta(ratio) + ` +median \d+\.\d\d  best \d+\.\d\d\n`).MatchString(table) {
			t.Errorf("ratio %q missing from\n%s", ratio, table)
		}
	}
	scaling := `scaling \(pipeline time, median rounds\): 1 worker \d+\.\d frames/s, \d+\.\d per core \(100%\)`
	for _, w := range []int{2, 3} {
		scaling += fmt.Sprintf(`; %d workers \d+\.\d frames/s, \d+\.\d per core \(\d+%%\)`, w)
	}
	for _, want := range []string{scaling + "\n",
		`(?m)^ +1 +\d+\.\d +\d+\.\d +\d+\.\d +100%$`, `(?m)^ +3 +\d+\.\d +\d+\.\d +\d+\.\d +\d+%$`,
		`one module at 1000 frames/s \(\d+\.\d\d GB/s of payload\) needs \d+\.\d cores at the per-core rate of 1 worker, \d+\.\d at that of 3 workers`} {
		if !regexp.MustCompile(want).MatchString(table) {
			t.Errorf("no line %q in\n%s", want, table)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(disk, "*")); len(left) != 0 {
		t.Errorf("bench left %v in --disk-dir", left)
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

// must returns v, and panics on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestBenchFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"--frames", "0"}, {"--unique", "0"}, {"--threads", "0"}, {"--rounds", "0"},
		{"--workers", "0"}, {"--workers", "1,x"}} {
		if code := run(append([]string{"bench"}, args...)); code != exitUsage {
			t.Errorf("bench %v: exit status %d, want %d", args, code, exitUsage)
		}
	}
}

// TestBenchGeometryErrors checks that a geometry the simulator refuses is
// a usage error before bench makes any file.
func TestBenchGeometryErrors(t *testing.T) {
	for _, tt := range []struct{ chips, chipSize, want string }{
		{"0x0", "256x256", `chips "0x0": want two whole numbers from 1 to 255`},
		{"6x6", "256", `chip size "256": want two whole numbers from 1 to 65535`},
		{"6x6", "60x60", "chips 6x6, chip size 60x60: bitplane chip width 60: must be a multiple of 8"},
		{"255x255", "65528x65528", "more than a header's payload_size holds"},
	} {
		fl := benchFlags{cfg: bench.Config{Frames: 10, Unique: 5, Rounds: 5, Threads: 1, Chips: tt.chips, ChipSize: tt.chipSize}}
		if err := fl.validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("--chips %s --chip-size %s: %v, want an error containing %q", tt.chips, tt.chipSize, err, tt.want)
		}
	}
	fl := benchFlags{cfg: bench.Config{Frames: 10, Unique: 5, Rounds: 5, Threads: 1, Chips: "6x6", ChipSize: "256x256"}}
	if err := fl.validate(); err != nil {
		t.Errorf("the Pi-mega geometry: %v", err)
	}
}
