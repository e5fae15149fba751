package main

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
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"h5ingest/compress"
	"h5ingest/ingest/capture"
	"h5ingest/ingest/frame"
	"h5ingest/writer"
)

// benchScripts are the Python programs of the reference and ceiling rows,
// run with the Debian Python that has h5py, hdf5plugin and bitshuffle.
//
//go:embed bench/*.py
var benchScripts embed.FS

// benchFlags are the flags of h5ingest bench.
type benchFlags struct {
	frames   int
	unique   int
	dir      string
	keep     bool
	python   string
	backend  string
	threads  int
	chips    string
	chipSize string
}

func newBenchCmd() *cobra.Command {
	var fl benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Compare replay to HDF5 with h5py + hdf5plugin and the C bitshuffle library, on the same frames",
		Long: `bench simulates a Pi-mega tomography scan (24-bit LFSR bitplane frames) and
times, on the same frames in one run:

  - h5ingest replay of the scan's capture to a bitshuffle-LZ4 HDF5 file,
    and with the bit transpose on the decode backend (--backend-shuffle,
    profile key output.backend_shuffle): each twice, in the order plain,
    transposed, transposed, plain, and each row the mean of its two;
  - the reference: h5py + hdf5plugin writing the decoded frames through the
    HDF5 filter pipeline, one chunk per frame;
  - the ceiling: the C bitshuffle + LZ4 library compressing the decoded
    frames on every core, with no I/O (and on one core, for scale);
  - our HDF5 writer alone, storing chunks compressed beforehand.

Every row runs as a process of its own, so that its peak RSS can be read.
The scan cycles through --unique simulated frames, renumbered, so that long
scans need no long simulation. Files go to a new folder in --dir, by default
on /dev/shm (memory), so that no disk is measured; the folder is removed at
the end unless --keep, and nothing else in --dir is touched.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := fl.validate(); err != nil {
				return usageError(err)
			}
			return runBench(cmd.OutOrStdout(), cmd.ErrOrStderr(), &fl)
		},
	}
	f := cmd.Flags()
	f.IntVar(&fl.frames, "frames", 1000, "frames each row processes")
	f.IntVar(&fl.unique, "unique", 50, "distinct simulated frames the scan cycles through")
	f.StringVar(&fl.dir, "dir", defaultBenchDir(), "directory in which a new folder holds the capture and the output files")
	f.BoolVar(&fl.keep, "keep", false, "keep that folder afterwards")
	f.StringVar(&fl.python, "python", "/usr/bin/python3", "Python with h5py, hdf5plugin, numpy and bitshuffle")
	f.StringVar(&fl.backend, "backend", "cpu", "decode backend of the replay row: auto, cpu or cuda")
	f.IntVar(&fl.threads, "threads", runtime.NumCPU(), "OpenMP threads of the ceiling row")
	f.StringVar(&fl.chips, "chips", "6x6", "chips per module, CXxCY (Pi-mega: 6x6)")
	f.StringVar(&fl.chipSize, "chip-size", "256x256", "pixels per chip, WxH (Medipix3RX: 256x256)")
	cmd.AddCommand(newBenchWriteCmd(), newBenchCycleCmd())
	return cmd
}

func (fl *benchFlags) validate() error {
	switch {
	case fl.frames < 1:
		return fmt.Errorf("--frames %d: want at least 1", fl.frames)
	case fl.unique < 1:
		return fmt.Errorf("--unique %d: want at least 1", fl.unique)
	case fl.threads < 1:
		return fmt.Errorf("--threads %d: want at least 1", fl.threads)
	}
	// The frames are 24-bit LFSR bitplane frames of the geometry.
	f := frame.Format{Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	var err error
	if f.ChipsX, f.ChipsY, err = parseSize(fl.chips, 255, "6x6"); err != nil {
		return fmt.Errorf("--chips %q: %w", fl.chips, err)
	}
	if f.ChipWidth, f.ChipHeight, err = parseSize(fl.chipSize, 65535, "256x256"); err != nil {
		return fmt.Errorf("--chip-size %q: %w", fl.chipSize, err)
	}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("--chips %s --chip-size %s: %w", fl.chips, fl.chipSize, err)
	}
	fl.unique = min(fl.unique, fl.frames)
	return nil
}

// defaultBenchDir returns /dev/shm where there is one, so that the files
// live in memory, else the temporary directory.
func defaultBenchDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// benchRow is one measured row of the table.
type benchRow struct {
	name    string
	frames  int
	bytes   int64   // decoded image bytes processed
	stored  int64   // compressed bytes produced
	seconds float64 // time on the clock
	maxRSS  int64   // peak resident set of the row's process, bytes
}

func (r benchRow) gbps() float64 { return float64(r.bytes) / r.seconds / 1e9 }

// benchFiles are the paths a bench run uses.
type benchFiles struct {
	unique, capture, decoded, ours, reference, written string
}

func newBenchFiles(dir string) benchFiles {
	p := func(name string) string { return filepath.Join(dir, name) }
	return benchFiles{
		unique:    p("unique.pmcap"),
		capture:   p("scan.pmcap"),
		decoded:   p("decoded.h5"),
		ours:      p("ours.h5"),
		reference: p("reference.h5"),
		written:   p("written.h5"),
	}
}

// runBench prepares the scan, runs every row and prints the table to out;
// progress goes to logw.
func runBench(out, logw io.Writer, fl *benchFlags) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: find own executable: %w", err)
	}
	if err := os.MkdirAll(fl.dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	// A folder of its own: --dir may hold other files, or another bench.
	dir, err := os.MkdirTemp(fl.dir, "h5ingest-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if !fl.keep {
		defer os.RemoveAll(dir)
	}
	files := newBenchFiles(dir)
	for _, name := range []string{"reference.py", "ceiling.py"} {
		b, err := benchScripts.ReadFile("bench/" + name)
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	fmt.Fprintf(logw, "bench: files in %s (%s)\n", dir, describeFS(dir))

	fmt.Fprintf(logw, "bench: simulating %d frames\n", fl.unique)
	if _, err := benchRun(self, nil, "simulate", "--scene", "tomo", "--frames", strconv.Itoa(fl.unique),
		"--chips", fl.chips, "--chip-size", fl.chipSize, "-o", files.unique, "--overwrite"); err != nil {
		return err
	}
	// A process of its own: this one must stay small, as a child's peak
	// RSS starts from its parent's (the exec records the parent's
	// high-water mark, the address space being shared until then).
	if _, err := benchRun(self, nil, "bench", "cycle", files.unique, files.capture, strconv.Itoa(fl.frames)); err != nil {
		return err
	}
	format, err := captureFormat(files.capture)
	if err != nil {
		return err
	}
	fmt.Fprintf(logw, "bench: decoding the %d frames for the Python rows\n", fl.unique)
	if _, err := benchRun(self, nil, "replay", files.unique, "-o", files.decoded, "--backend", fl.backend,
		"--compression", "none", "--projections", strconv.Itoa(fl.unique), "--overwrite"); err != nil {
		return err
	}
	os.Remove(files.unique)

	n, image := fl.frames, int64(format.ImageSize())
	rows := make([]benchRow, 0, 6)
	row := func(name string, timed func() (float64, int64, int64, error)) (benchRow, error) {
		fmt.Fprintf(logw, "bench: %s\n", name)
		secs, stored, rss, err := timed()
		return benchRow{name: name, frames: n, bytes: int64(n) * image, stored: stored, seconds: secs, maxRSS: rss}, err
	}
	measure := func(name string, timed func() (float64, int64, int64, error)) error {
		r, err := row(name, timed)
		if err == nil {
			rows = append(rows, r)
		}
		return err
	}
	python := func(env []string, args ...string) func() (float64, int64, int64, error) {
		return func() (float64, int64, int64, error) {
			res, err := benchRun(fl.python, env, args...)
			if err != nil {
				return 0, 0, 0, err
			}
			var r struct{ Seconds, Stored float64 }
			if err := json.Unmarshal(res.stdout, &r); err != nil {
				return 0, 0, 0, fmt.Errorf("bench: %s %s: output %q: %w", fl.python, args[0], res.stdout, err)
			}
			return r.Seconds, int64(r.Stored), res.maxRSS, nil
		}
	}
	script := func(name string) string { return filepath.Join(dir, name) }
	omp := func(t int) []string { return []string{"OMP_NUM_THREADS=" + strconv.Itoa(t)} }
	nstr := strconv.Itoa(n)

	replay := func(more ...string) func() (float64, int64, int64, error) {
		return func() (float64, int64, int64, error) {
			args := append([]string{"replay", files.capture, "-o", files.ours, "--backend", fl.backend,
				"--compression", "bslz4", "--projections", nstr, "--overwrite"}, more...)
			res, err := benchRun(self, nil, args...)
			if err != nil {
				return 0, 0, 0, err
			}
			return res.seconds, fileSize(files.ours), res.maxRSS, nil
		}
	}
	// The two replays run twice each, in the order plain, transposed,
	// transposed, plain, and each row is the mean of its two runs: a
	// machine whose speed drifts over the runs, or that favours a run's
	// place, weighs on both alike. Both write the same file, which the
	// writer row reuses.
	var runs [4]benchRow
	for i, transpose := range []bool{false, true, true, false} {
		name, more := "h5ingest replay -> HDF5 bslz4", []string(nil)
		if transpose {
			name, more = benchShuffledRow, []string{"--backend-shuffle"}
		}
		var err error
		if runs[i], err = row(name, replay(more...)); err != nil {
			return err
		}
	}
	rows = append(rows, meanRow(runs[0], runs[3]))
	shuffled := meanRow(runs[1], runs[2])
	os.Remove(files.capture)
	steps := []struct {
		name  string
		timed func() (float64, int64, int64, error)
	}{
		{"reference: h5py + hdf5plugin bslz4", python(omp(1), script("reference.py"), files.decoded, files.reference, nstr)},
		{fmt.Sprintf("ceiling: C bitshuffle+LZ4, %d threads, no I/O", fl.threads), python(omp(fl.threads), script("ceiling.py"), files.decoded, nstr)},
		{"C bitshuffle+LZ4, 1 thread, no I/O", python(omp(1), script("ceiling.py"), files.decoded, nstr)},
		{"h5ingest writer alone, chunks precompressed", func() (float64, int64, int64, error) {
			res, err := benchRun(self, nil, "bench", "write-chunks", files.ours, files.written, strconv.Itoa(fl.unique), nstr)
			if err != nil {
				return 0, 0, 0, err
			}
			var r struct{ Seconds float64 }
			if err := json.Unmarshal(res.stdout, &r); err != nil {
				return 0, 0, 0, fmt.Errorf("bench write-chunks: output %q: %w", res.stdout, err)
			}
			return r.Seconds, fileSize(files.written), res.maxRSS, nil
		}},
	}
	for _, s := range steps {
		if err := measure(s.name, s.timed); err != nil {
			return err
		}
		os.Remove(files.reference)
		os.Remove(files.written)
	}
	rows = append(rows, shuffled)
	printBench(out, fl, format, files, rows)
	return nil
}

// meanRow returns the row of two runs of one thing: their mean time and the
// larger peak RSS.
func meanRow(a, b benchRow) benchRow {
	a.seconds = (a.seconds + b.seconds) / 2
	a.maxRSS = max(a.maxRSS, b.maxRSS)
	return a
}

// benchShuffledRow names the replay row with the bit transpose on the
// decode backend.
const benchShuffledRow = "h5ingest replay, transpose on the backend"

// printBench prints the table and the ratios of the first row to the
// reference and ceiling rows.
func printBench(out io.Writer, fl *benchFlags, format frame.Format, files benchFiles, rows []benchRow) {
	fmt.Fprintf(out, "h5ingest bench: %d frames (%d distinct, cycled), %v, tomography scene\n",
		fl.frames, fl.unique, format)
	fmt.Fprintf(out, "decoded frame %d x %d x %d bytes; files in %s (%s); %d CPUs; decode backend %s\n\n",
		format.Height(), format.Width(), format.PixelSize(), fl.dir, describeFS(fl.dir), runtime.NumCPU(), fl.backend)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\tframes/s\tGB/s\ttime s\tratio\tpeak RSS MiB\t")
	for _, r := range rows {
		ratio := 0.0
		if r.stored > 0 {
			ratio = float64(r.bytes) / float64(r.stored)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.2f\t%.2f\t%.2f\t%.0f\t\n",
			r.name, float64(r.frames)/r.seconds, r.gbps(), r.seconds, ratio, float64(r.maxRSS)/(1<<20))
	}
	tw.Flush()
	if len(rows) >= 3 {
		ours, ref, ceil := rows[0], rows[1], rows[2]
		fmt.Fprintf(out, "\nours / reference  %.2f\nours / ceiling    %.2f\n", ours.gbps()/ref.gbps(), ours.gbps()/ceil.gbps())
	}
	if last := rows[len(rows)-1]; len(rows) >= 2 && last.name == benchShuffledRow {
		fmt.Fprintf(out, "transpose on the backend / ours  %.2f\n", last.gbps()/rows[0].gbps())
	}
	fmt.Fprintln(out, "\nGB/s: decoded image bytes (1e9) per second. ratio: decoded over stored bytes.")
	fmt.Fprintln(out, "Replay is timed as its whole process (capture read, decode, CRCs, compress, write, close);")
	fmt.Fprintln(out, "the Python rows time their write or compress loop only and hold the distinct frames in memory.")
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

// cycleCapture writes a capture of n frames to dst, cycling through the
// frames of src renumbered 0 to n-1, and returns their format.
func cycleCapture(src, dst string, n int) (frame.Format, error) {
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

// newBenchCycleCmd is the hidden process that writes the bench's capture.
func newBenchCycleCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "cycle FROM.pmcap TO.pmcap FRAMES",
		Short:  "Write a capture of FRAMES frames cycling through those of another",
		Hidden: true,
		Args:   usageArgs(cobra.ExactArgs(3)),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[2])
			if err != nil || n < 1 {
				return usageError(fmt.Errorf("FRAMES %q: want a count of at least 1", args[2]))
			}
			_, err = cycleCapture(args[0], args[1], n)
			return err
		},
	}
}

// newBenchWriteCmd is the hidden process behind the writer row: it reads
// the first chunks of a file, then times writing n frames of them, cycled,
// to a new file of the same layout.
func newBenchWriteCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "write-chunks FROM.h5 TO.h5 CHUNKS FRAMES",
		Short:  "Time the HDF5 writer alone on chunks compressed beforehand",
		Hidden: true,
		Args:   usageArgs(cobra.ExactArgs(4)),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err1 := strconv.Atoi(args[2])
			n, err2 := strconv.Atoi(args[3])
			if err := errors.Join(err1, err2); err != nil || k < 1 || n < 1 {
				return usageError(fmt.Errorf("CHUNKS %q and FRAMES %q: want counts of at least 1", args[2], args[3]))
			}
			secs, err := benchWrite(args[0], args[1], k, n)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]float64{"seconds": secs})
		},
	}
}

// benchWrite reads the first k chunks and records of the file from, then
// writes n frames cycling through them to the file to and returns how long
// that took, file creation and close included.
func benchWrite(from, to string, k, n int) (float64, error) {
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
	opts := writer.Options{
		Path: to, Overwrite: true, Layout: r.Layout, Frames: n,
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
