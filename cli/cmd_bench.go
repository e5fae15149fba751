package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"h5ingest/bench"
	"h5ingest/registry"
	"h5ingest/scan"
	"h5ingest/writer"
	"os"
	"runtime"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// benchFlags are the flags of h5ingest bench.
type benchFlags struct {
	cfg     bench.Config
	workers string // comma-separated, parsed into cfg.Workers
}

func newBenchCmd(stages *registry.Registry) *cobra.Command {
	var fl benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Compare replay to HDF5 with h5py + hdf5plugin and the C bitshuffle library, on the same frames",
		Long: `bench simulates a Pi-mega tomography scan (24-bit LFSR bitplane frames) and
times, on the same frames, in --rounds interleaved rounds (every row once
per round, in the same order, so that a machine whose speed drifts weighs
on every row alike):

  - h5ingest replay of the scan's capture to a bitshuffle-LZ4 HDF5 file,
    one compression worker per core; then with GOMAXPROCS set to each
    other count of --workers (one core's rate shows how it scales); with
    the bit transpose on the decode backend (--backend-shuffle); and to a
    file in --disk-dir, flushed to the device (fsync) before the clock
    stops, beside the same replay to memory;
  - the reference: h5py + hdf5plugin writing the decoded frames through the
    HDF5 filter pipeline, one chunk per frame, as a user runs them (h5py's
    default chunk cache, the filter's OpenMP threads as installed), and
    again with one OpenMP thread;
  - the ceiling: the C bitshuffle + LZ4 library compressing the decoded
    frames on every core, with no I/O, and on one core (whichever is
    faster gets a ratio too: on a machine whose cores are not all free,
    the OpenMP threads wait for each other);
  - our HDF5 writer alone, storing chunks compressed beforehand.

Each row shows its best and median round and the spread of its rounds;
the ratios divide best by best and median by median. Every row runs as a
process of its own, so that its peak RSS can be read. The scan cycles
through --unique simulated frames, renumbered, so that long scans need no
long simulation. Files go to a new folder in --dir, by default on
/dev/shm (memory), so that no disk is measured but in the disk row; the
folders are removed at the end unless --keep, and nothing else in --dir or
--disk-dir is touched.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := fl.validate(); err != nil {
				return scan.Usage(err)
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("bench: find own executable: %w", err)
			}
			fl.cfg.Self = self
			return bench.Run(cmd.OutOrStdout(), cmd.ErrOrStderr(), &fl.cfg)
		},
	}
	fl.register(cmd.Flags(), stages.ReferenceBackend())
	cmd.AddCommand(newBenchWriteCmd(stages), newBenchCycleCmd())
	return cmd
}

// register defines the flags on f; backend is the default of --backend,
// the registry's reference backend.
func (fl *benchFlags) register(f *pflag.FlagSet, backend string) {
	c := &fl.cfg
	f.IntVar(&c.Frames, "frames", 200, "frames each row processes")
	f.IntVar(&c.Unique, "unique", 50, "distinct simulated frames the scan cycles through")
	f.IntVar(&c.Rounds, "rounds", 5, "interleaved rounds: every row runs once in each")
	f.StringVar(&c.Dir, "dir", bench.DefaultDir(), "directory in which a new folder holds the capture and the output files")
	f.StringVar(&c.DiskDir, "disk-dir", bench.DefaultDiskDir(), `directory on a disk for the row that writes to disk ("": no such row)`)
	f.BoolVar(&c.Keep, "keep", false, "keep those folders afterwards")
	f.StringVar(&c.Python, "python", bench.SystemPython, "Python with h5py, hdf5plugin, numpy and bitshuffle (where it cannot import numpy, "+bench.SystemPython+" is tried)")
	f.StringVar(&c.Backend, "backend", backend, "decode backend of the replay rows: auto, cpu or cuda")
	f.IntVar(&c.Threads, "threads", runtime.NumCPU(), "OpenMP threads of the ceiling row")
	f.StringVar(&fl.workers, "workers", bench.DefaultWorkers(), "compression worker counts of the replay rows, comma-separated (each a GOMAXPROCS)")
	f.StringVar(&c.Chips, "chips", "6x6", "chips per module, CXxCY (Pi-mega: 6x6)")
	f.StringVar(&c.ChipSize, "chip-size", "256x256", "pixels per chip, WxH (Medipix3RX: 256x256)")
}

// validate parses --workers and checks the configuration.
func (fl *benchFlags) validate() (err error) {
	if fl.workers == "" {
		fl.workers = bench.DefaultWorkers()
	}
	if fl.cfg.Workers, err = bench.ParseWorkers(fl.workers); err != nil {
		return fmt.Errorf("--workers %w", err)
	}
	return fl.cfg.Validate()
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
				return scan.Usage(fmt.Errorf("FRAMES %q: want a count of at least 1", args[2]))
			}
			_, err = bench.Cycle(args[0], args[1], n)
			return err
		},
	}
}

// newBenchWriteCmd is the hidden process behind the writer row: it reads
// the first chunks of a file, then times writing n frames of them, cycled,
// to a new file of the same layout.
func newBenchWriteCmd(stages *registry.Registry) *cobra.Command {
	return &cobra.Command{
		Use:    "write-chunks FROM.h5 TO.h5 CHUNKS FRAMES",
		Short:  "Time the HDF5 writer alone on chunks compressed beforehand",
		Hidden: true,
		Args:   usageArgs(cobra.ExactArgs(4)),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err1 := strconv.Atoi(args[2])
			n, err2 := strconv.Atoi(args[3])
			if err := errors.Join(err1, err2); err != nil || k < 1 || n < 1 {
				return scan.Usage(fmt.Errorf("CHUNKS %q and FRAMES %q: want counts of at least 1", args[2], args[3]))
			}
			secs, err := bench.WriteChunks(args[0], args[1], k, n, func(name string) (writer.Layout, bool) { return layoutNamed(stages, name) })
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]float64{"seconds": secs})
		},
	}
}

// layoutNamed returns a new layout of the command's registry by name.
func layoutNamed(stages *registry.Registry, name string) (writer.Layout, bool) {
	l, ok := stages.Layout(name)
	if !ok {
		return nil, false
	}
	return l.New(), true
}
