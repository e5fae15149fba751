package cli

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/scan"
	"h5ingest/source/sim"
	"h5ingest/version"
)

// simulateFlags holds the command line of h5ingest simulate.
type simulateFlags struct {
	scene, output                        string
	frames                               int
	darks, flats, projections            int
	sequence                             string
	angleStart, angleEnd                 float64
	chips, chipSize                      string
	encoding, coding, orientation        string
	bitDepth                             int
	module                               uint16
	modules                              string
	fps                                  float64
	seed                                 uint64
	missing, duplicate, reorder, corrupt string
	overwrite                            bool
}

func newSimulateCmd() *cobra.Command {
	var fl simulateFlags
	cmd := &cobra.Command{
		Use:   "simulate --scene tomo|cdi -o FILE.pmcap",
		Short: "Write a simulated scan to a capture file",
		Long: `Simulate the frames a Pi-mega detector sends during a scan and write them to a
capture file (.pmcap), with the ground truth (plan, format, faults and the
CRC-32C of every frame's image) in its metadata.

For tomography, --darks, --flats and --projections give the plan (darks,
then flats, then projections from --angle-start to --angle-end); --frames
alone means that many projections. For CDI, --frames is the frame count.
Faults take a comma list of frame numbers or a rate such as 0.01.

--modules 0,1,2,3 simulates the modules of an array (such as the profile
pimega-540d's) and writes their frames interleaved, frame 0 of each module,
then frame 1 of each, as the modules send them; module K's images come from
seed + K, and the ground truth of each module is in the metadata.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := fl.config(cmd)
			if err != nil {
				return scan.Usage(err)
			}
			ids, err := fl.moduleIDs(cmd)
			if err != nil {
				return scan.Usage(err)
			}
			return runSimulate(cmd, cfg, ids, fl.output, fl.overwrite)
		},
	}
	f := cmd.Flags()
	def := sim.DefaultConfig()
	f.StringVar(&fl.scene, "scene", string(def.Scene), "what the detector sees: tomo or cdi")
	f.StringVarP(&fl.output, "output", "o", "", "capture file to write (required)")
	f.IntVar(&fl.frames, "frames", 0, "projections (tomo) or frames (cdi); default 100 unless the plan flags are given")
	f.IntVar(&fl.darks, "darks", def.Plan.Count(plan.DarkField), "tomo: dark fields before the flats")
	f.IntVar(&fl.flats, "flats", def.Plan.Count(plan.FlatField), "tomo: flat fields before the projections")
	f.IntVar(&fl.projections, "projections", def.Plan.Count(plan.Projection), "tomo: projections")
	f.Float64Var(&fl.angleStart, "angle-start", def.Plan.AngleStart, "tomo: angle of the first projection, degrees")
	f.Float64Var(&fl.angleEnd, "angle-end", def.Plan.AngleEnd, "tomo: end of the angle range, degrees (not reached)")
	f.StringVar(&fl.sequence, "sequence", "", `tomo: frames in order as kind:count, e.g. "flats:5,darks:5,projections:90,flats:5" (instead of --darks, --flats, --projections)`)
	f.StringVar(&fl.chips, "chips", "6x6", "chips per module, COLUMNSxROWS")
	f.StringVar(&fl.chipSize, "chip-size", "256x256", "pixels per chip, WIDTHxHEIGHT")
	f.StringVar(&fl.encoding, "encoding", def.Format.Encoding.String(), "payload encoding: bitplane, packed12, packed24, u16le or u32le")
	f.IntVar(&fl.bitDepth, "bit-depth", 0, "counter bits (default: 24 for bitplane and packed24, 12 packed12, 16 u16le, 32 u32le)")
	f.StringVar(&fl.coding, "coding", "", "counter coding: binary or lfsr (default: lfsr for bitplane, else binary)")
	f.StringVar(&fl.orientation, "orientation", "", "chip orientations: a comma list of 0 or 180 per chip, or alternate-rows (default all 0)")
	f.Uint16Var(&fl.module, "module", 0, "module id in every frame header")
	f.StringVar(&fl.modules, "modules", "", "simulate several modules, a comma list of ids such as 0,1,2,3 (pimega-540d), their frames interleaved (instead of --module)")
	f.Float64Var(&fl.fps, "fps", def.FPS, "frame rate for the timestamps, frames per second")
	f.Uint64Var(&fl.seed, "seed", def.Seed, "seed of every random choice")
	f.StringVar(&fl.missing, "missing", "", "frames never written: list or rate")
	f.StringVar(&fl.duplicate, "duplicate", "", "frames written twice: list or rate")
	f.StringVar(&fl.reorder, "reorder", "", "frames swapped with the next one: list or rate")
	f.StringVar(&fl.corrupt, "corrupt", "", "frames whose payload is damaged after its CRC: list or rate")
	f.BoolVar(&fl.overwrite, "overwrite", false, "replace an existing output file")
	return cmd
}

// config turns the flags into a simulator configuration. Its errors name
// the flag and what it allows.
func (fl *simulateFlags) config(cmd *cobra.Command) (sim.Config, error) {
	cfg := sim.DefaultConfig()
	if fl.output == "" {
		return cfg, errors.New("--output (-o) is required")
	}
	changed := cmd.Flags().Changed
	switch sim.Scene(fl.scene) {
	case sim.Tomo, sim.CDI:
		cfg.Scene = sim.Scene(fl.scene)
	default:
		return cfg, fmt.Errorf("--scene %q: want tomo or cdi", fl.scene)
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"frames", fl.frames}, {"darks", fl.darks}, {"flats", fl.flats}, {"projections", fl.projections}} {
		if n.v < 0 {
			return cfg, fmt.Errorf("--%s %d: must not be negative", n.name, n.v)
		}
	}
	if err := fl.plan(&cfg, changed); err != nil {
		return cfg, err
	}
	if cfg.NumFrames() < 1 {
		return cfg, errors.New("the scan has no frames: give --frames or a plan with at least one frame")
	}
	var err error
	if cfg.Format, err = fl.format(changed); err != nil {
		return cfg, err
	}
	if cfg.Orientation, err = frame.ParseOrientation(fl.orientation, cfg.Format.Geometry); err != nil {
		return cfg, fmt.Errorf("--orientation: %w", err)
	}
	if !(fl.fps > 0) {
		return cfg, fmt.Errorf("--fps %v: must be positive", fl.fps)
	}
	cfg.Module, cfg.FPS, cfg.Seed = fl.module, fl.fps, fl.seed
	if err := fl.faults(&cfg); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// plan sets the scan's plan (tomo) or frame count (cdi) from the flags.
func (fl *simulateFlags) plan(cfg *sim.Config, changed func(string) bool) error {
	givenPlan := changed("darks") || changed("flats") || changed("projections") || changed("sequence")
	cfg.Plan = plan.Tomo(fl.darks, fl.flats, fl.projections, fl.angleStart, fl.angleEnd)
	if changed("sequence") {
		if changed("darks") || changed("flats") || changed("projections") {
			return errors.New("--sequence with --darks, --flats or --projections: give one or the other")
		}
		steps, err := plan.ParseSequence(fl.sequence)
		if err != nil {
			return fmt.Errorf("--sequence: %w", err)
		}
		cfg.Plan.Steps = steps
	}
	switch {
	case cfg.Scene == sim.Tomo && changed("frames") && givenPlan:
		return errors.New("--frames with --darks, --flats or --projections: give the plan or --frames, not both")
	case cfg.Scene == sim.Tomo && changed("frames"):
		cfg.Plan = plan.Tomo(0, 0, fl.frames, fl.angleStart, fl.angleEnd)
	case cfg.Scene == sim.CDI && givenPlan:
		return errors.New("--darks, --flats and --projections are for --scene tomo; give --frames for cdi")
	case cfg.Scene == sim.CDI && changed("frames"):
		cfg.Frames = fl.frames
	}
	if changed("frames") {
		if fl.frames > plan.MaxFrames {
			return fmt.Errorf("--frames %d: %w", fl.frames, plan.ErrTooLong)
		}
	} else if err := cfg.Plan.Validate(); err != nil {
		return fmt.Errorf("--darks, --flats, --projections or --sequence: %w", err)
	}
	return nil
}

// faults sets the faults the flags ask for.
func (fl *simulateFlags) faults(cfg *sim.Config) error {
	var err error
	for _, fault := range []struct {
		name string
		v    string
		dst  *sim.FaultSpec
	}{{"missing", fl.missing, &cfg.Missing}, {"duplicate", fl.duplicate, &cfg.Duplicate},
		{"reorder", fl.reorder, &cfg.Reorder}, {"corrupt", fl.corrupt, &cfg.Corrupt}} {
		if *fault.dst, err = sim.ParseFault(fault.v, cfg.NumFrames()); err != nil {
			return fmt.Errorf("--%s %q: %w", fault.name, fault.v, err)
		}
	}
	return nil
}

// moduleIDs returns the modules to simulate: --modules, or --module alone.
func (fl *simulateFlags) moduleIDs(cmd *cobra.Command) ([]uint16, error) {
	if !cmd.Flags().Changed("modules") {
		return []uint16{fl.module}, nil
	}
	if cmd.Flags().Changed("module") {
		return nil, errors.New("--module with --modules: give one or the other")
	}
	ids, err := sim.ParseModules(fl.modules)
	if err != nil {
		return nil, fmt.Errorf("--modules %q: %w", fl.modules, err)
	}
	return ids, nil
}

// format builds the frame format from the geometry and encoding flags.
func (fl *simulateFlags) format(changed func(string) bool) (frame.Format, error) {
	g, err := frame.ParseGeometry(fl.chips, fl.chipSize)
	if err != nil {
		return frame.Format{}, err
	}
	enc, err := frame.ParseEncoding(fl.encoding)
	if err != nil {
		return frame.Format{}, fmt.Errorf("--encoding: %w", err)
	}
	f := frame.Usual(g, enc)
	if changed("bit-depth") {
		f.BitDepth = fl.bitDepth
	}
	if fl.coding != "" {
		if f.Coding, err = frame.ParseCoding(fl.coding); err != nil {
			return f, fmt.Errorf("--coding: %w", err)
		}
	}
	if err := f.Validate(); err != nil {
		return f, fmt.Errorf("--encoding %s --bit-depth %d --coding %s --chip-size %s: %w",
			f.Encoding, f.BitDepth, f.Coding, fl.chipSize, err)
	}
	return f, nil
}

// runSimulate writes the scan of the modules ids and prints one summary
// line.
func runSimulate(cmd *cobra.Command, cfg sim.Config, ids []uint16, path string, overwrite bool) error {
	start := time.Now()
	// About what the capture will hold: every frame of every module once.
	size := int64(cfg.NumFrames()) * int64(len(ids)) * (frame.HeaderSize + int64(cfg.Format.PayloadSize()))
	stop := startReport(simulateLine(path, size, start))
	st, err := sim.WriteFile(path, cfg, ids, overwrite, "h5ingest simulate "+version.String())
	stop()
	if errors.Is(err, os.ErrExist) {
		return scan.Usage(fmt.Errorf("%s exists: give --overwrite to replace it", path))
	}
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	scene := string(cfg.Scene)
	if len(ids) > 1 {
		scene += fmt.Sprintf(", %d modules interleaved", len(ids))
	}
	fmt.Fprintf(cmd.OutOrStdout(), "simulated %s: %d frames (%d records, %d overflowed) of %v, %d bytes in %.2f s (%.1f frames/s, %.0f MB/s) to %s\n",
		scene, st.Frames, st.Records, st.Overflow, cfg.Format, st.Bytes, secs, float64(st.Frames)/secs, float64(st.Bytes)/secs/1e6, path)
	return nil
}

// simulateLine returns, as a progress line, how much of the capture at
// path, of about size bytes, a simulate begun at start has written.
func simulateLine(path string, size int64, start time.Time) func(terminal bool) string {
	return func(terminal bool) string {
		var written int64
		if info, err := os.Stat(path); err == nil {
			written = info.Size()
		}
		var mbps float64
		if secs := time.Since(start).Seconds(); secs > 0 {
			mbps = float64(written) / secs / 1e6
		}
		s := fmt.Sprintf("%.0f/%.0f MB", float64(written)/1e6, float64(size)/1e6)
		if terminal {
			s = bar(int(min(written, size)/1024), int(size/1024), 20) + " " + s
		}
		return fmt.Sprintf("simulate: written %s  %.0f MB/s", s, mbps)
	}
}
