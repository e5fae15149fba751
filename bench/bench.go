// Package bench times h5ingest against the writer most facilities use
// today and against the fastest the same compression can go, on the same
// frames: replay of a simulated Pi-mega scan to bitshuffle-LZ4 HDF5 (with
// one worker, every core, the bit transpose on the backend, and to a disk
// with fsync), h5py + hdf5plugin as users run them (and with one OpenMP
// thread), the C bitshuffle + LZ4 library with no I/O (all threads and
// one), and h5ingest's writer alone. Rows run as processes of their own,
// in interleaved rounds (every row once a round, in the same order), so
// that a machine whose speed drifts weighs on every row alike; each row
// shows its best and median round and their spread, and the ratios divide
// best by best and median by median. "h5ingest bench" runs it.
package bench

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/source/capture"
	"h5ingest/writer"
)

// benchScripts are the Python programs of the reference and ceiling rows,
// run with the Debian Python that has h5py, hdf5plugin and bitshuffle.
//
//go:embed scripts/*.py
var benchScripts embed.FS

// Config sets up a bench run.
type Config struct {
	Self     string // the h5ingest executable the rows run
	Frames   int    // frames each row processes
	Unique   int    // distinct simulated frames the scan cycles through (at most Frames)
	Rounds   int    // interleaved rounds: every row runs once in each
	Dir      string // directory in which a new folder holds the capture and the files
	DiskDir  string // directory on a disk for the disk row; "": no such row
	Keep     bool   // keep the folders afterwards
	Python   string // Python with h5py, hdf5plugin, numpy and bitshuffle
	Backend  string // decode backend of the replay rows
	Threads  int    // OpenMP threads of the ceiling row
	Workers  []int  // compression worker counts of the replay rows (GOMAXPROCS)
	Chips    string // chips per module, CXxCY
	ChipSize string // pixels per chip, WxH
}

// Validate reports the first setting that is out of range: counts below
// 1, or a geometry that no 24-bit bitplane frame has. Unique above Frames
// is lowered to Frames.
func (c *Config) Validate() error {
	for _, n := range []struct {
		name string
		v    int
	}{{"frames", c.Frames}, {"unique", c.Unique}, {"rounds", c.Rounds}, {"threads", c.Threads}} {
		if n.v < 1 {
			return fmt.Errorf("%s %d: want at least 1", n.name, n.v)
		}
	}
	if len(c.Workers) == 0 {
		return errors.New("workers: want at least one count")
	}
	c.Unique = min(c.Unique, c.Frames)
	g, err := frame.ParseGeometry(c.Chips, c.ChipSize)
	if err != nil {
		return err
	}
	if err := frame.Usual(g, frame.Bitplane).Validate(); err != nil {
		return fmt.Errorf("chips %s, chip size %s: %w", c.Chips, c.ChipSize, err)
	}
	return nil
}

// ParseWorkers parses worker counts, comma-separated, each 1 to 4096;
// a count given twice counts once.
func ParseWorkers(s string) ([]int, error) {
	var workers []int
	for w := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 || n > 4096 {
			return nil, fmt.Errorf("%q: want counts from 1 to 4096, comma-separated", s)
		}
		if !slices.Contains(workers, n) {
			workers = append(workers, n)
		}
	}
	return workers, nil
}

// DefaultWorkers returns the worker counts of a run on this machine, as
// ParseWorkers reads them: 1 and the number of cores.
func DefaultWorkers() string {
	if n := runtime.NumCPU(); n > 1 {
		return "1," + strconv.Itoa(n)
	}
	return "1"
}

// DefaultDir returns /dev/shm where there is one, so that the files
// live in memory, else the temporary directory.
func DefaultDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// DefaultDiskDir returns the temporary directory if it is not in memory
// (tmpfs, ramfs), else the working directory if that is not, else "".
func DefaultDiskDir() string {
	for _, d := range []string{os.TempDir(), "."} {
		if !inMemory(d) {
			return d
		}
	}
	return ""
}

// inMemory reports whether dir is on a file system held in memory.
func inMemory(dir string) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return true // unusable: not a disk to measure
	}
	const tmpfsMagic, ramfsMagic = 0x01021994, 0x858458f6
	return st.Type == tmpfsMagic || st.Type == ramfsMagic
}

// row is one row of the table: what it processed and its rounds.
type row struct {
	name    string
	frames  int
	workers int       // the replay's compression workers, for the scaling table; 0: not a row of it
	bytes   int64     // decoded image bytes processed per round
	stored  int64     // compressed bytes produced (last round)
	secs    []float64 // time on the clock, one per round
	pipe    []float64 // a replay's pipeline time (first frame in to last chunk written), one per round
	maxRSS  int64     // peak resident set of the row's processes, bytes
}

// best returns the row's fastest round's time.
func (r *row) best() float64 { return slices.Min(r.secs) }

// median returns the row's median round's time.
func (r *row) median() float64 { return median(r.secs) }

// median returns the median of secs, which is not empty.
func median(secs []float64) float64 {
	s := slices.Sorted(slices.Values(secs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// spread returns the slowest round's time over the fastest's, minus one.
func (r *row) spread() float64 { return slices.Max(r.secs)/r.best() - 1 }

// fps returns frames per second at the given time.
func (r *row) fps(secs float64) float64 { return float64(r.frames) / secs }

// benchFiles are the paths a bench run uses.
type benchFiles struct {
	unique, capture, decoded, ours, disk, reference, written string
}

func newBenchFiles(dir, diskDir string) benchFiles {
	p := func(name string) string { return filepath.Join(dir, name) }
	f := benchFiles{
		unique:    p("unique.pmcap"),
		capture:   p("scan.pmcap"),
		decoded:   p("decoded.h5"),
		ours:      p("ours.h5"),
		reference: p("reference.h5"),
		written:   p("written.h5"),
	}
	if diskDir != "" {
		f.disk = filepath.Join(diskDir, "ours.h5")
	}
	return f
}

// The rows' names, as the table prints them (those with a count of
// workers or threads go on with it).
const (
	RowOurs       = "h5ingest replay -> HDF5 bslz4"
	RowOneWorker  = "h5ingest replay, GOMAXPROCS=1 (1 worker)"
	RowShuffled   = "h5ingest replay, transpose on the backend"
	RowDisk       = "h5ingest replay, to disk + fsync"
	RowReference  = "reference: h5py + hdf5plugin bslz4, defaults"
	RowReference1 = "h5py + hdf5plugin, OMP_NUM_THREADS=1"
	RowCeiling    = "ceiling: C bitshuffle+LZ4"
	RowC1         = "C bitshuffle+LZ4, 1 thread, no I/O"
	RowWriter     = "h5ingest writer alone, chunks precompressed"
	RowRoCE       = "h5ingest acquire over roce (fake NIC), front end at full pace, 32 slots: frames stored ok"
)

// benchStep is one row's measurement: it runs one round and returns what
// it measured.
type benchStep struct {
	name    string
	run     func() (measure, error)
	imports []string // the Python modules the row needs, if it runs Python
	workers int      // a replay's compression workers, for the scaling table; 0: not a row of it
}

// measure is what one round of a row measured.
type measure struct {
	secs   float64 // time on the clock
	pipe   float64 // a replay's pipeline time, from its summary; 0 for other rows
	stored int64   // compressed bytes produced
	rss    int64   // the process's peak RSS, bytes
}

// Run prepares the scan, runs every row in interleaved rounds and prints
// the table to out; progress goes to logw.
func Run(out, logw io.Writer, fl *Config) error {
	self := fl.Self
	if err := os.MkdirAll(fl.Dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	// A folder of its own: --dir may hold other files, or another bench.
	dir, err := os.MkdirTemp(fl.Dir, "h5ingest-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if !fl.Keep {
		defer os.RemoveAll(dir)
	}
	diskDir := ""
	if fl.DiskDir != "" {
		if diskDir, err = os.MkdirTemp(fl.DiskDir, "h5ingest-bench-"); err != nil {
			return fmt.Errorf("bench: --disk-dir: %w", err)
		}
		if !fl.Keep {
			defer os.RemoveAll(diskDir)
		}
	}
	files := newBenchFiles(dir, diskDir)
	for _, name := range []string{"reference.py", "ceiling.py"} {
		b, err := benchScripts.ReadFile("scripts/" + name)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	fmt.Fprintf(logw, "bench: files in %s (%s)\n", dir, describeFS(dir))
	if diskDir != "" {
		fmt.Fprintf(logw, "bench: the disk row's file in %s (%s)\n", diskDir, describeFS(diskDir))
	}

	fmt.Fprintf(logw, "bench: simulating %d frames\n", fl.Unique)
	// Projections only: the Python rows read back the first --unique
	// frames, which must be the frames the replay rows cycle through.
	if _, err := benchRun(self, nil, "simulate", "--scene", "tomo", "--darks", "0", "--flats", "0", "--projections", strconv.Itoa(fl.Unique),
		"--chips", fl.Chips, "--chip-size", fl.ChipSize, "-o", files.unique, "--overwrite"); err != nil {
		return err
	}
	// A process of its own: this one must stay small, as a child's peak
	// RSS starts from its parent's (the exec records the parent's
	// high-water mark, the address space being shared until then).
	if _, err := benchRun(self, nil, "bench", "cycle", files.unique, files.capture, strconv.Itoa(fl.Frames)); err != nil {
		return err
	}
	format, err := capture.ScanFormat(files.capture)
	if err != nil {
		return err
	}
	fmt.Fprintf(logw, "bench: decoding the %d frames for the Python rows\n", fl.Unique)
	if _, err := benchRun(self, nil, "replay", files.unique, "-o", files.decoded, "--backend", fl.Backend,
		"--compression", "none", "--projections", strconv.Itoa(fl.Unique), "--overwrite"); err != nil {
		return err
	}
	os.Remove(files.unique)
	// The writer row's chunks: the replay's own file.
	if _, err := benchRun(self, nil, "replay", files.capture, "-o", files.ours, "--backend", fl.Backend,
		"--compression", "bslz4", "--projections", strconv.Itoa(fl.Frames), "--overwrite"); err != nil {
		return err
	}

	steps := benchSteps(self, dir, fl, files, format)
	// The Python rows need modules a machine may lack (h5py and
	// hdf5plugin, the C bitshuffle library's module): a row whose modules
	// do not import is left out, and the table says why, rather than the
	// whole bench failing.
	if python, ok := pythonWithNumpy(fl.Python, SystemPython); ok && python != fl.Python {
		fmt.Fprintf(logw, "bench: %s cannot import numpy: the Python rows run with %s\n", fl.Python, python)
		fl.Python = python
	}
	var notRun []string
	steps, notRun = dropUnimportable(steps, fl.Python)
	for _, s := range notRun {
		fmt.Fprintf(logw, "bench: not run: %s\n", s)
	}
	rows := make([]row, len(steps))
	n, image := fl.Frames, int64(format.ImageSize())
	for i, s := range steps {
		rows[i] = row{name: s.name, frames: n, workers: s.workers, bytes: int64(n) * image}
	}
	for round := range fl.Rounds {
		for i, s := range steps {
			fmt.Fprintf(logw, "bench: round %d/%d: %s\n", round+1, fl.Rounds, s.name)
			m, err := s.run()
			if err != nil {
				return err
			}
			rows[i].secs = append(rows[i].secs, m.secs)
			if m.pipe > 0 {
				rows[i].pipe = append(rows[i].pipe, m.pipe)
			}
			rows[i].stored = m.stored
			rows[i].maxRSS = max(rows[i].maxRSS, m.rss)
		}
	}
	printBench(out, fl, format, rows)
	if len(notRun) > 0 {
		fmt.Fprintln(out, "\nrows not run (their Python modules do not import):")
		for _, s := range notRun {
			fmt.Fprintf(out, "  %s\n", s)
		}
	}
	return nil
}

// dropUnimportable returns the steps whose Python modules import with
// python, and for each other step a line naming the row and the reason.
// Each distinct list of modules is tried once.
func dropUnimportable(steps []benchStep, python string) (kept []benchStep, notRun []string) {
	reasons := map[string]string{}
	for _, s := range steps {
		if len(s.imports) == 0 {
			kept = append(kept, s)
			continue
		}
		mods := strings.Join(s.imports, ", ")
		reason, tried := reasons[mods]
		if !tried {
			reason = importProblem(python, s.imports)
			reasons[mods] = reason
		}
		if reason == "" {
			kept = append(kept, s)
		} else {
			notRun = append(notRun, fmt.Sprintf("%s: %s", s.name, reason))
		}
	}
	return kept, notRun
}

// SystemPython is the distribution's Python, where Debian's h5py,
// hdf5plugin and bitshuffle are; a python3 first on the PATH (a virtual
// environment, a pyenv shim) may lack them.
const SystemPython = "/usr/bin/python3"

// pythonWithNumpy returns the first of the Pythons that imports numpy, and
// whether one did; given none, the first.
func pythonWithNumpy(pythons ...string) (string, bool) {
	for _, p := range pythons {
		if importProblem(p, []string{"numpy"}) == "" {
			return p, true
		}
	}
	return pythons[0], false
}

// importProblem returns "" if python imports every module, else why not:
// the Python that cannot start, or the import's error.
func importProblem(python string, modules []string) string {
	cmd := exec.Command(python, "-c", "import "+strings.Join(modules, ", "))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err == nil {
		return ""
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return fmt.Sprintf("%s cannot run: %v", python, err)
	}
	// The last line of a traceback is the error itself.
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		last = err.Error()
	}
	return fmt.Sprintf("%s: import %s: %s", python, strings.Join(modules, ", "), last)
}

// The modules the Python rows' scripts import (scripts/*.py).
var (
	referenceImports = []string{"numpy", "h5py", "hdf5plugin"}
	ceilingImports   = []string{"numpy", "h5py", "bitshuffle"}
)

// benchSteps returns the rows of the table in the order each round runs
// them.
func benchSteps(self, dir string, fl *Config, files benchFiles, format frame.Format) []benchStep {
	nstr := strconv.Itoa(fl.Frames)
	cores := runtime.NumCPU()
	replay := func(out string, sync bool, env []string, more ...string) func() (measure, error) {
		return func() (measure, error) {
			args := append([]string{"replay", files.capture, "-o", out, "--backend", fl.Backend,
				"--compression", "bslz4", "--projections", nstr, "--overwrite"}, more...)
			start := time.Now()
			res, err := benchRun(self, env, args...)
			if err != nil {
				return measure{}, err
			}
			m := measure{secs: res.seconds, rss: res.maxRSS}
			if m.pipe, err = pipelineTime(res.stdout); err != nil {
				return measure{}, err
			}
			if sync {
				// The file and its directory entry reach the device
				// before the clock stops.
				if err := syncFile(out); err != nil {
					return measure{}, err
				}
				m.secs = time.Since(start).Seconds()
			}
			m.stored = fileSize(out)
			os.Remove(out)
			return m, nil
		}
	}
	python := func(env []string, out string, args ...string) func() (measure, error) {
		return func() (measure, error) {
			res, err := benchRun(fl.Python, env, args...)
			if err != nil {
				return measure{}, err
			}
			if out != "" {
				os.Remove(out)
			}
			var r struct{ Seconds, Stored float64 }
			if err := json.Unmarshal(res.stdout, &r); err != nil {
				return measure{}, fmt.Errorf("bench: %s %s: output %q: %w", fl.Python, args[0], res.stdout, err)
			}
			return measure{secs: r.Seconds, stored: int64(r.Stored), rss: res.maxRSS}, nil
		}
	}
	script := func(name string) string { return filepath.Join(dir, name) }
	omp := func(t int) []string { return []string{"OMP_NUM_THREADS=" + strconv.Itoa(t)} }
	replayOut := filepath.Join(dir, "replay.h5")

	steps := []benchStep{{name: fmt.Sprintf("%s, %s (one per core)", RowOurs, workers(cores)), run: replay(replayOut, false, nil), workers: cores}}
	for _, w := range fl.Workers {
		if w != cores {
			steps = append(steps, benchStep{name: fmt.Sprintf("h5ingest replay, GOMAXPROCS=%d (%s)", w, workers(w)),
				run: replay(replayOut, false, []string{"GOMAXPROCS=" + strconv.Itoa(w)}), workers: w})
		}
	}
	steps = append(steps, benchStep{name: RowShuffled, run: replay(replayOut, false, nil, "--backend-shuffle")})
	if files.disk != "" {
		steps = append(steps, benchStep{name: RowDisk, run: replay(files.disk, true, nil)})
	}
	steps = append(steps,
		// The user's own environment, OpenMP settings included.
		benchStep{name: RowReference, run: python(nil, files.reference, script("reference.py"), files.decoded, files.reference, nstr), imports: referenceImports},
		benchStep{name: RowReference1, run: python(omp(1), files.reference, script("reference.py"), files.decoded, files.reference, nstr), imports: referenceImports},
		// OpenMP's threads spin while they wait, as installed: on a quiet
		// machine that is the fastest (OMP_WAIT_POLICY=passive took 1.5
		// to 2.5 times as long), but whenever another process wants a
		// core 2 threads can run many times slower than 1, hence the
		// ratio to the faster C row as well.
		benchStep{name: fmt.Sprintf("%s, %d threads, no I/O", RowCeiling, fl.Threads), run: python(omp(fl.Threads), "", script("ceiling.py"), files.decoded, nstr), imports: ceilingImports},
		benchStep{name: RowC1, run: python(omp(1), "", script("ceiling.py"), files.decoded, nstr), imports: ceilingImports},
		benchStep{name: RowRoCE, run: func() (measure, error) { return roceRound(self, dir, fl, format, files.capture, replayOut) }},
		benchStep{name: RowWriter, run: func() (measure, error) {
			res, err := benchRun(self, nil, "bench", "write-chunks", files.ours, files.written, strconv.Itoa(fl.Unique), nstr)
			if err != nil {
				return measure{}, err
			}
			size := fileSize(files.written)
			os.Remove(files.written)
			var r struct{ Seconds float64 }
			if err := json.Unmarshal(res.stdout, &r); err != nil {
				return measure{}, fmt.Errorf("bench write-chunks: output %q: %w", res.stdout, err)
			}
			return measure{secs: r.Seconds, stored: size, rss: res.maxRSS}, nil
		}},
	)
	return steps
}

// pipelineRe finds the pipeline's own time in a replay's summary.
var pipelineRe = regexp.MustCompile(`(?m)^  pipeline time +([0-9.e+-]+) s,`)

// pipelineTime returns the pipeline time a replay's summary gives: from
// the first frame in to the last chunk written, without the process's
// start, the file's creation and close; of several modules the longest.
func pipelineTime(summary []byte) (float64, error) {
	var secs float64
	for _, m := range pipelineRe.FindAllSubmatch(summary, -1) {
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			return 0, fmt.Errorf("bench: replay's pipeline time %q: %w", m[1], err)
		}
		secs = max(secs, v)
	}
	if secs <= 0 {
		return 0, fmt.Errorf("bench: replay's summary gives no pipeline time:\n%s", tail(summary, 2000))
	}
	return secs, nil
}

// syncFile flushes the file at path and its directory to the device.
func syncFile(path string) error {
	for _, p := range []string{path, filepath.Dir(path)} {
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("bench: fsync: %w", err)
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("bench: fsync %s: %w", p, err)
		}
	}
	return nil
}

// findRow returns the first row whose name starts with prefix, or nil.
func findRow(rows []row, prefix string) *row {
	for i := range rows {
		if strings.HasPrefix(rows[i].name, prefix) {
			return &rows[i]
		}
	}
	return nil
}

// moduleFPS is the frame rate of one Pi-mega module.
const moduleFPS = 1000

// printBench prints the table, the ratios of the first row to the others
// (best over best, median over median) and what the per-core rate means
// for one module.
func printBench(out io.Writer, fl *Config, format frame.Format, rows []row) {
	fmt.Fprintf(out, "h5ingest bench: %d frames (%d distinct, cycled), %v, tomography scene\n",
		fl.Frames, fl.Unique, format)
	fmt.Fprintf(out, "decoded frame %d x %d x %d bytes; files in %s (%s); %d CPUs; decode backend %s; %d interleaved rounds; Python %s\n",
		format.Height(), format.Width(), format.PixelSize(), fl.Dir, describeFS(fl.Dir), runtime.NumCPU(), fl.Backend, fl.Rounds, fl.Python)
	// The replay rows run this binary on this machine: they choose as
	// this process does.
	fmt.Fprintf(out, "CPU decode instructions: %s (where the cpu backend decodes)\n", gpu.CPUInstructions())
	for _, d := range gpu.CPUDecodePaths() {
		fmt.Fprintf(out, "  %s\n", d)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\tbest frames/s\tmedian frames/s\tspread\tmedian GB/s\tratio\tpeak RSS MiB\t")
	for i := range rows {
		r := &rows[i]
		ratio := 0.0
		if r.stored > 0 {
			ratio = float64(r.bytes) / float64(r.stored)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.0f%%\t%.2f\t%.2f\t%.0f\t\n", r.name, r.fps(r.best()), r.fps(r.median()),
			100*r.spread(), float64(r.bytes)/r.median()/1e9, ratio, float64(r.maxRSS)/(1<<20))
	}
	tw.Flush()
	ours := &rows[0]
	// A ratio of rates is the inverse ratio of times.
	ratio := func(label string, num, den *row) {
		if num != nil && den != nil {
			fmt.Fprintf(out, "%-36s median %.2f  best %.2f\n", label, den.median()/num.median(), den.best()/num.best())
		}
	}
	fmt.Fprintln(out)
	ratio("ours / reference (defaults)", ours, findRow(rows, RowReference))
	ratio("ours / reference (1 OpenMP thread)", ours, findRow(rows, RowReference1))
	ceiling, oneThread := findRow(rows, RowCeiling), findRow(rows, RowC1)
	ratio("ours / ceiling", ours, ceiling)
	if ceiling != nil && oneThread != nil {
		// A machine whose cores are not all free can make the threads
		// of the ceiling wait for each other, and one thread faster.
		fmt.Fprintf(out, "%-36s median %.2f  best %.2f\n", "ours / the faster C row",
			min(ceiling.median(), oneThread.median())/ours.median(), min(ceiling.best(), oneThread.best())/ours.best())
	}
	ratio("transpose on the backend / ours", findRow(rows, RowShuffled), ours)
	ratio("to disk + fsync / to memory", findRow(rows, RowDisk), ours)
	printScaling(out, format, rows)
	fmt.Fprintln(out, "\nratios: of rates, median round over median round and best over best. spread: the slowest")
	fmt.Fprintln(out, "round's time over the fastest's, minus one. GB/s: decoded image bytes (1e9) per second.")
	fmt.Fprintln(out, "ratio: decoded over stored bytes. Replay is timed as its whole process (start, capture read,")
	fmt.Fprintln(out, "decode, CRCs, compress, write, close; the disk row also the fsync); the Python rows time")
	fmt.Fprintln(out, "their write or compress loop only, with the frames already in memory. Pipeline time: the")
	fmt.Fprintln(out, "replay's own, from its first frame in to its last chunk written (its summary's line).")
}

// printScaling prints, for the replay rows of each count of workers, the
// frames per second of the whole process and of the pipeline's own time
// (median rounds), per core (the cores the workers can use: at most the
// machine's), and per core against the fewest workers' (of linear); then
// the same on one line, and the cores one module needs.
func printScaling(out io.Writer, format frame.Format, rows []row) {
	var scale []*row
	for i := range rows {
		if r := &rows[i]; r.workers > 0 && len(r.pipe) > 0 {
			scale = append(scale, r)
		}
	}
	if len(scale) == 0 {
		return
	}
	slices.SortFunc(scale, func(a, b *row) int { return a.workers - b.workers })
	pipeFPS := func(r *row) float64 { return float64(r.frames) / median(r.pipe) }
	// Workers past the machine's cores share them.
	coresOf := func(r *row) float64 { return float64(min(r.workers, runtime.NumCPU())) }
	base := scale[0]
	basePerCore := pipeFPS(base) / coresOf(base)
	fmt.Fprintln(out, "\nscaling, median rounds; pipeline: first frame in to last chunk written, without the process's start and close:")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workers\tprocess frames/s\tpipeline frames/s\tper core\tof linear\t")
	line := "scaling (pipeline time, median rounds):"
	for i, r := range scale {
		fps := pipeFPS(r)
		perCore := fps / coresOf(r)
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%.1f\t%.0f%%\t\n", r.workers, r.fps(r.median()), fps, perCore, 100*perCore/basePerCore)
		if i > 0 {
			line += ";"
		}
		line += fmt.Sprintf(" %s %.1f frames/s, %.1f per core (%.0f%%)", workers(r.workers), fps, perCore, 100*perCore/basePerCore)
	}
	tw.Flush()
	fmt.Fprintln(out, line)
	most := scale[len(scale)-1]
	payload := float64(format.PayloadSize()) * moduleFPS / 1e9
	fmt.Fprintf(out, "one module at %d frames/s (%.2f GB/s of payload) needs %.1f cores at the per-core rate of %s, %.1f at that of %s\n",
		moduleFPS, payload, moduleFPS/basePerCore, workers(base.workers), moduleFPS/(pipeFPS(most)/coresOf(most)), workers(most.workers))
}

// benchResult is what a row's process left: its standard output, wall
// time and peak RSS.
type benchResult struct {
	stdout  []byte
	seconds float64
	maxRSS  int64
}

// benchRun runs name with args and extra environment variables, and
// returns its output, wall time and peak RSS.
func benchRun(name string, env []string, args ...string) (benchResult, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	secs := time.Since(start).Seconds()
	if err != nil {
		return benchResult{}, fmt.Errorf("bench: %s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, tail(stderr.Bytes(), 2000))
	}
	var rss int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rss = ru.Maxrss << 10 // kilobytes on Linux
	}
	return benchResult{stdout: stdout.Bytes(), seconds: secs, maxRSS: rss}, nil
}

// tail returns the last n bytes of b as a string.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// fileSize returns the size of the file at path, or 0.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// describeFS names the kind of file system dir is on.
func describeFS(dir string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return "unknown file system"
	}
	const tmpfsMagic = 0x01021994
	if st.Type == tmpfsMagic {
		return "tmpfs, memory"
	}
	return fmt.Sprintf("file system type %#x, page cache", st.Type)
}

// Cycle writes a capture of n frames to dst, cycling through the
// frames of src renumbered 0 to n-1, and returns their format.
func Cycle(src, dst string, n int) (frame.Format, error) {
	r, err := capture.Open(src)
	if err != nil {
		return frame.Format{}, err
	}
	defer r.Close()
	type record struct {
		h       frame.Header
		payload []byte
	}
	var recs []record
	for {
		h, payload, err := r.Next(nil)
		if errors.Is(err, io.ErrShortBuffer) {
			h, payload, err = r.Next(make([]byte, h.PayloadSize))
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return frame.Format{}, err
		}
		recs = append(recs, record{h, payload})
	}
	if len(recs) == 0 {
		return frame.Format{}, fmt.Errorf("bench: capture %s holds no frame", src)
	}
	f, err := os.Create(dst)
	if err != nil {
		return frame.Format{}, fmt.Errorf("bench: %w", err)
	}
	defer f.Close()
	w, err := capture.NewWriter(f, r.Metadata())
	if err != nil {
		return frame.Format{}, err
	}
	period := recs[len(recs)-1].h.Timestamp - recs[0].h.Timestamp + 1_000_000
	for i := range n {
		rec := recs[i%len(recs)]
		h := rec.h
		h.FrameNumber = uint64(i)
		h.Timestamp += uint64(i/len(recs)) * period
		if err := w.WriteFrame(&h, rec.payload); err != nil {
			return frame.Format{}, err
		}
	}
	if err := w.Close(); err != nil {
		return frame.Format{}, err
	}
	if err := f.Close(); err != nil {
		return frame.Format{}, fmt.Errorf("bench: %w", err)
	}
	return recs[0].h.Format, nil
}

// WriteChunks reads the first k chunks and records of the file from, then
// writes n frames cycling through them to the file to, in the layout
// layouts names after from's, and returns how long that took, file
// creation and close included: the writer row, in a process of its own.
func WriteChunks(from, to string, k, n int, layouts func(name string) (writer.Layout, bool)) (float64, error) {
	r, err := writer.Open(from)
	if err != nil {
		return 0, err
	}
	k = min(k, r.Frames)
	chunks := make([][]byte, k)
	for i := range chunks {
		if chunks[i], _, err = r.ReadChunk(i, nil); err != nil {
			r.Close()
			return 0, err
		}
	}
	records, err := r.Records()
	if err != nil {
		r.Close()
		return 0, err
	}
	layout, ok := layouts(r.Layout)
	if !ok {
		r.Close()
		return 0, fmt.Errorf("%s: layout %s is not registered", from, r.Layout)
	}
	opts := writer.Options{
		Path: to, Overwrite: true, Layout: layout, Frames: n,
		Height: r.Height, Width: r.Width, ElemSize: r.ElemSize, Filters: r.Filters,
	}
	if err := r.Close(); err != nil {
		return 0, err
	}
	if len(opts.Filters) == 0 {
		codec, err := compress.New("bslz4", opts.ElemSize, 0)
		if err != nil {
			return 0, err
		}
		opts.Filters = codec.Filters()
	}
	start := time.Now()
	w, err := writer.Create(opts)
	if err != nil {
		return 0, err
	}
	for i := range n {
		if err := w.WriteChunk(i, 0, chunks[i%k]); err != nil {
			w.Close()
			return 0, err
		}
		if err := w.SetRecord(i, records[i%k]); err != nil {
			w.Close()
			return 0, err
		}
	}
	if err := w.Close(); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}

// workers says n workers.
func workers(n int) string {
	if n == 1 {
		return "1 worker"
	}
	return strconv.Itoa(n) + " workers"
}

// okRe finds the frames stored ok in a scan's summary.
var okRe = regexp.MustCompile(`(?m)^  ok +(\d+)$`)

// roceRound runs one round of the roce row: acquire --transport roce
// into a ring of 32 slots, and the front end's emulator writing the
// capture at full pace, never waiting, both on the fake NIC (a meeting
// directory of their own). A front end faster than the pipeline overruns
// frames: the row counts the frames stored ok per second of the
// pipeline's time, its time scaled so that the table's frames/s are those.
func roceRound(self, dir string, fl *Config, format frame.Format, capture, out string) (measure, error) {
	meet, err := os.MkdirTemp(dir, "roce")
	if err != nil {
		return measure{}, err
	}
	defer os.RemoveAll(meet)
	params, fe := filepath.Join(meet, "rdma.json"), filepath.Join(meet, "front-end.json")
	// acquire's detector is the capture's, which replay reads from it.
	env := append(os.Environ(), "H5INGEST_TEST_FAKE_VERBS="+meet,
		"H5INGEST_DETECTOR_CHIPS_X="+strconv.Itoa(format.ChipsX), "H5INGEST_DETECTOR_CHIPS_Y="+strconv.Itoa(format.ChipsY),
		"H5INGEST_DETECTOR_CHIP_WIDTH="+strconv.Itoa(format.ChipWidth), "H5INGEST_DETECTOR_CHIP_HEIGHT="+strconv.Itoa(format.ChipHeight),
		"H5INGEST_DETECTOR_ENCODING="+format.Encoding.String(), "H5INGEST_DETECTOR_BIT_DEPTH="+strconv.Itoa(format.BitDepth),
		"H5INGEST_DETECTOR_CODING="+format.Coding.String())
	acq := exec.Command(self, "acquire", "--transport", "roce", "--rdma-params", params, "--front-end", fe,
		"-o", out, "--overwrite", "--backend", fl.Backend, "--compression", "bslz4", "--projections", strconv.Itoa(fl.Frames),
		"--slots", "32", "--idle-timeout", "5s")
	acq.Env = env
	var stdout, stderr bytes.Buffer
	acq.Stdout, acq.Stderr = &stdout, &stderr
	if err := acq.Start(); err != nil {
		return measure{}, err
	}
	if _, err := benchRun(self, []string{"H5INGEST_TEST_FAKE_VERBS=" + meet}, "send", capture, "--transport", "roce",
		"--rdma-params", params, "--front-end", fe, "--timeout", "60s"); err != nil {
		acq.Process.Kill()
		acq.Wait()
		return measure{}, err
	}
	err = acq.Wait()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 3) { // 3: incomplete, frames overrun
		return measure{}, fmt.Errorf("bench: acquire over roce: %w\n%s", err, tail(stderr.Bytes(), 2000))
	}
	m := okRe.FindSubmatch(stdout.Bytes())
	if m == nil {
		return measure{}, fmt.Errorf("bench: acquire over roce: no ok count in its summary:\n%s", tail(stdout.Bytes(), 2000))
	}
	ok, _ := strconv.Atoi(string(m[1]))
	pipe, err := pipelineTime(stdout.Bytes())
	if err != nil {
		return measure{}, err
	}
	if ok == 0 {
		return measure{}, fmt.Errorf("bench: acquire over roce stored no frame ok:\n%s", tail(stdout.Bytes(), 2000))
	}
	var rss int64
	if ru, isRU := acq.ProcessState.SysUsage().(*syscall.Rusage); isRU {
		rss = ru.Maxrss << 10
	}
	size := fileSize(out)
	os.Remove(out)
	secs := pipe * float64(fl.Frames) / float64(ok)
	return measure{secs: secs, pipe: secs, stored: size, rss: rss}, nil
}
