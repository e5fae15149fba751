package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"h5ingest/frame"
	"h5ingest/gpu"
)

// TestBenchRowStatistics checks best, median and spread on rounds whose
// answers are known, odd and even in number.
func TestBenchRowStatistics(t *testing.T) {
	for _, tt := range []struct {
		secs                 []float64
		best, median, spread float64
	}{
		{[]float64{3, 1, 2}, 1, 2, 2},
		{[]float64{4, 2, 8, 2}, 2, 3, 3},
		{[]float64{5}, 5, 5, 0},
	} {
		r := row{frames: 10, secs: tt.secs}
		if r.best() != tt.best || r.median() != tt.median || r.spread() != tt.spread {
			t.Errorf("rounds %v: best %g median %g spread %g, want %g %g %g", tt.secs, r.best(), r.median(), r.spread(), tt.best, tt.median, tt.spread)
		}
	}
}

func TestParseWorkers(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		ok   bool
	}{
		{"1,2", []int{1, 2}, true},
		{" 4, 1 ,4", []int{4, 1}, true},
		{"4096", []int{4096}, true},
		{"0", nil, false},
		{"4097", nil, false},
		{"1,x", nil, false},
		{"", nil, false},
	} {
		got, err := ParseWorkers(tc.in)
		if (err == nil) != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("ParseWorkers(%q) = %v, %v", tc.in, got, err)
		}
	}
	if w, err := ParseWorkers(DefaultWorkers()); err != nil || w[0] != 1 {
		t.Errorf("the default workers %q: %v, %v", DefaultWorkers(), w, err)
	}
}

func TestValidate(t *testing.T) {
	good := Config{Frames: 10, Unique: 50, Rounds: 5, Threads: 1, Workers: []int{1}, Chips: "6x6", ChipSize: "256x256"}
	c := good
	if err := c.Validate(); err != nil || c.Unique != 10 {
		t.Errorf("Pi-mega: %v, unique %d (want lowered to the 10 frames)", err, c.Unique)
	}
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.Frames = 0 }, "frames 0"},
		{func(c *Config) { c.Unique = 0 }, "unique 0"},
		{func(c *Config) { c.Rounds = 0 }, "rounds 0"},
		{func(c *Config) { c.Threads = 0 }, "threads 0"},
		{func(c *Config) { c.Workers = nil }, "workers"},
		{func(c *Config) { c.Chips = "0x0" }, `chips "0x0"`},
		{func(c *Config) { c.ChipSize = "60x60" }, "must be a multiple of 8"},
	} {
		c := good
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", c, err, tc.want)
		}
	}
}

// TestDropUnimportable checks that a Python row whose modules do not
// import, or whose Python cannot start, is left out with the reason, and
// that the other rows stay, in order.
func TestDropUnimportable(t *testing.T) {
	steps := []benchStep{
		{name: "ours"},
		{name: "missing module", imports: []string{"sys", "h5ingest_no_such_module"}},
		{name: "same modules", imports: []string{"sys", "h5ingest_no_such_module"}},
		{name: "present", imports: []string{"sys", "json"}},
		{name: "writer"},
	}
	names := func(s []benchStep) (n []string) {
		for _, x := range s {
			n = append(n, x.name)
		}
		return n
	}
	for _, tc := range []struct {
		python string
		kept   []string
		say    string
	}{
		{"/usr/bin/python3", []string{"ours", "present", "writer"}, "No module named 'h5ingest_no_such_module'"},
		{"/nonexistent/python3", []string{"ours", "writer"}, "/nonexistent/python3 cannot run"},
	} {
		if _, err := exec.LookPath(tc.python); err != nil && !strings.HasPrefix(tc.python, "/nonexistent") {
			t.Skipf("needs %s", tc.python)
		}
		kept, notRun := dropUnimportable(steps, tc.python)
		if !slices.Equal(names(kept), tc.kept) {
			t.Errorf("%s: kept %v, want %v", tc.python, names(kept), tc.kept)
		}
		if want := len(steps) - len(tc.kept); len(notRun) != want {
			t.Errorf("%s: %d rows not run, want %d: %q", tc.python, len(notRun), want, notRun)
		}
		for _, s := range notRun {
			if !strings.Contains(s, tc.say) {
				t.Errorf("%s: %q does not say %q", tc.python, s, tc.say)
			}
		}
	}
}

// TestPythonWithNumpy checks which Python the rows run with: the one given
// where it imports numpy, else the next that does (the system's, where a
// python3 first on the PATH lacks it), else the one given, whose rows the
// table then lists as not run.
func TestPythonWithNumpy(t *testing.T) {
	dir := t.TempDir()
	fake := func(name, script string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bare := fake("bare", "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'numpy'\" >&2\nexit 1\n")
	full := fake("full", "#!/bin/sh\nexit 0\n")
	for _, tc := range []struct {
		pythons []string
		want    string
		ok      bool
	}{
		{[]string{full, bare}, full, true},
		{[]string{bare, full}, full, true},
		{[]string{bare, "/nonexistent/python3", full}, full, true},
		{[]string{bare, "/nonexistent/python3"}, bare, false},
	} {
		got, ok := pythonWithNumpy(tc.pythons...)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%v: %s, %v; want %s, %v", tc.pythons, got, ok, tc.want, tc.ok)
		}
	}
}

// TestPipelineTime checks the pipeline time read from a replay's summary:
// the longest of several modules; and an error for a summary without one.
func TestPipelineTime(t *testing.T) {
	one := "/d/a.h5\n  time            2.00 s, 100.0 frames/s\n  pipeline time   1.25 s, 160.0 frames/s, first frame in to last chunk written\n"
	two := one + "/d/b.h5\n  pipeline time   1.5 s, 133.3 frames/s, first frame in to last chunk written\n"
	for _, tc := range []struct {
		summary string
		want    float64
		ok      bool
	}{{one, 1.25, true}, {two, 1.5, true}, {"/d/a.h5\n  time            2.00 s, 100.0 frames/s\n", 0, false}} {
		got, err := pipelineTime([]byte(tc.summary))
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("%q: %g, %v; want %g, ok %v", tc.summary, got, err, tc.want, tc.ok)
		}
	}
}

// TestPrintBenchNamesDecodeInstructions checks that the table says which
// instructions the CPU decode of the replay rows uses, and prints the
// ratios of ours to the reference and the ceiling from the same rounds.
func TestPrintBenchNamesDecodeInstructions(t *testing.T) {
	fl := &Config{Frames: 10, Unique: 10, Rounds: 2, Dir: t.TempDir(), Backend: "cpu"}
	format := frame.Usual(frame.PiMega, frame.Bitplane)
	rows := []row{
		{name: RowOurs + ", 2 workers (one per core)", frames: 10, bytes: 100, stored: 50, secs: []float64{1, 2}},
		{name: RowReference, frames: 10, bytes: 100, stored: 50, secs: []float64{2, 4}},
		{name: RowCeiling + ", 2 threads, no I/O", frames: 10, bytes: 100, stored: 50, secs: []float64{0.5, 1}},
	}
	var out strings.Builder
	printBench(&out, fl, format, rows)
	for _, want := range []string{
		"CPU decode instructions: " + gpu.CPUInstructions(),
		"\n  " + gpu.CPUDecodePaths()[0].String() + "\n",
		"ours / reference (defaults)          median 2.00  best 2.00",
		"ours / ceiling                       median 0.50  best 0.50",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table does not say %q:\n%s", want, out.String())
		}
	}
}
