package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"h5ingest/compress"
	"h5ingest/config"
	"h5ingest/gpu"
	"h5ingest/ingest"
	"h5ingest/ingest/capture"
	"h5ingest/ingest/frame"
	"h5ingest/writer"
)

// scanFlags are the flags that every command writing a scan shares.
type scanFlags struct {
	profile     string
	output      string
	backend     string
	compression string
	level       int
	layout      string
	overwrite   bool
	flush       time.Duration
	logLevel    string

	darks, flats, projections int
	angleStart, angleEnd      float64
}

func (s *scanFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&s.profile, "profile", "", "beamline profile (YAML)")
	fs.StringVarP(&s.output, "output", "o", "", "HDF5 file to write (required)")
	fs.StringVar(&s.backend, "backend", "auto", "decode backend: auto, cpu or cuda")
	fs.StringVar(&s.compression, "compression", "bslz4", "chunk compression: bslz4, bszstd, lz4, deflate or none")
	fs.IntVar(&s.level, "level", 0, "compression level for bszstd and deflate (0: the codec's default)")
	fs.StringVar(&s.layout, "layout", writer.LayoutNXtomo, "file layout: nxtomo or cxi")
	fs.BoolVar(&s.overwrite, "overwrite", false, "replace an existing output file")
	fs.DurationVar(&s.flush, "flush", writer.DefaultFlushInterval, "how often readers following the file see new frames")
	fs.StringVar(&s.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	fs.IntVar(&s.darks, "darks", 0, "dark fields at the start of the scan")
	fs.IntVar(&s.flats, "flats", 0, "flat fields after the darks")
	fs.IntVar(&s.projections, "projections", 0, "projections after the flats (0 with no darks or flats: every frame is a projection)")
	fs.Float64Var(&s.angleStart, "angle-start", 0, "rotation angle of the first projection, degrees")
	fs.Float64Var(&s.angleEnd, "angle-end", 180, "rotation angle the projections stop short of, degrees")
}

// plan returns the scan plan the flags give; a plan of no frames means the
// scan's length is not known in advance.
func (s *scanFlags) plan() (config.Plan, error) {
	for _, f := range []struct {
		name string
		n    int
	}{{"--darks", s.darks}, {"--flats", s.flats}, {"--projections", s.projections}} {
		if f.n < 0 {
			return config.Plan{}, usageError(fmt.Errorf("%s %d: want 0 or more frames", f.name, f.n))
		}
	}
	if (s.darks > 0 || s.flats > 0) && s.projections == 0 {
		return config.Plan{}, usageError(errors.New("--darks and --flats need --projections"))
	}
	return config.TomoPlan(s.darks, s.flats, s.projections, s.angleStart, s.angleEnd), nil
}

func newReplayCmd() *cobra.Command {
	var s scanFlags
	var fps float64
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "replay CAPTURE -o OUT.h5",
		Short: "Turn a capture file into an HDF5 file, through the acquisition pipeline",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if fps < 0 {
				return usageError(fmt.Errorf("--fps %g: want a rate above 0, or 0 for as fast as possible", fps))
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			return replay(cmd.Context(), args[0], &s, fps)
		},
	}
	s.register(cmd.Flags())
	cmd.Flags().Float64Var(&fps, "fps", 0, "replay at this many frames per second, as a detector would send them (0: as fast as possible)")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the replay to this file (read it with go tool pprof)")
	return cmd
}

// startCPUProfile starts writing a CPU profile to path and returns the
// function that stops it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func replay(ctx context.Context, path string, s *scanFlags, fps float64) error {
	if s.output == "" {
		return usageError(errors.New("no output file: give -o FILE.h5"))
	}
	if s.layout != writer.LayoutNXtomo && s.layout != writer.LayoutCXI {
		return usageError(fmt.Errorf("--layout %q: want %s or %s", s.layout, writer.LayoutNXtomo, writer.LayoutCXI))
	}
	profile, err := config.Load(s.profile)
	if err != nil {
		return usageError(err)
	}
	plan, err := s.plan()
	if err != nil {
		return err
	}
	log, err := newLogger(s.logLevel)
	if err != nil {
		return err
	}
	defer log.Sync()

	format, err := captureFormat(path)
	if err != nil {
		return err
	}
	r, err := capture.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	r.SetMaxPayload(max(capture.DefaultMaxPayload, int64(format.PayloadSize())))

	scan, err := newScan(s, profile, plan, format, log)
	if err != nil {
		return err
	}
	defer scan.abort()

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	src := ingest.NewCaptureSource(r, format.PayloadSize())
	if fps > 0 {
		src.Interval = time.Duration(float64(time.Second) / fps)
	}
	srcErr := scan.run(ctx, src)
	if errors.Is(srcErr, capture.ErrTruncated) {
		log.Warn("capture cut short", zap.Error(srcErr))
	}
	return scan.finish(srcErr)
}

// captureFormat returns the frame format of the scan in a capture: that of
// its first frame whose header checks out.
func captureFormat(path string) (frame.Format, error) {
	r, err := capture.Open(path)
	if err != nil {
		return frame.Format{}, err
	}
	defer r.Close()
	var skip []byte
	for range maxFormatProbe {
		h, _, err := r.Next(nil)
		switch {
		case errors.Is(err, io.ErrShortBuffer):
			if h.Check() == nil {
				return h.Format, nil
			}
			skip = slices.Grow(skip[:0], int(h.PayloadSize))[:h.PayloadSize]
			if _, _, err := r.Next(skip); err != nil {
				return frame.Format{}, err
			}
		case errors.Is(err, io.EOF):
			return frame.Format{}, fmt.Errorf("capture %s holds no usable frame", path)
		case err != nil:
			return frame.Format{}, err
		}
	}
	return frame.Format{}, fmt.Errorf("capture %s: none of its first %d frames has a usable format", path, maxFormatProbe)
}

// maxFormatProbe is how many frames captureFormat reads to find the scan's
// format.
const maxFormatProbe = 64

// scanRun is one scan being written: the pipeline and its file.
type scanRun struct {
	s        *scanFlags
	planned  int
	file     *writer.Writer
	pipeline *ingest.Pipeline
	backend  gpu.Backend
	log      *zap.Logger
	progress ingest.Progress
	closed   bool
}

// newScan creates the output file and the pipeline for a scan of format.
func newScan(s *scanFlags, profile config.Profile, plan config.Plan, format frame.Format, log *zap.Logger) (*scanRun, error) {
	orient := frame.Orientation(profile.Detector.ChipOrientation)
	if len(orient) == 0 {
		orient = nil
	}
	if err := orient.Validate(format.Chips()); err != nil {
		return nil, usageError(fmt.Errorf("profile key detector.chip_orientation: %w", err))
	}
	codec, err := compress.New(s.compression, format.PixelSize(), s.level)
	if err != nil {
		return nil, usageError(fmt.Errorf("--compression: %w", err))
	}
	backend, err := gpu.New(s.backend, gpu.Options{Orientation: orient})
	if err != nil {
		return nil, usageError(fmt.Errorf("--backend: %w", err))
	}
	opts := writer.Options{
		Path:          s.output,
		Overwrite:     s.overwrite,
		Layout:        s.layout,
		Frames:        plan.Frames(),
		Height:        format.Height(),
		Width:         format.Width(),
		ElemSize:      format.PixelSize(),
		Filters:       codec.Filters(),
		FlushInterval: s.flush,
		Title:         profile.Description,
		PixelSize:     profile.Detector.PixelSize,
		Distance:      profile.Detector.Distance,
	}
	if plan.Frames() > 0 {
		opts.ImageKey = plan.ImageKeys()
		opts.RotationAngle = plan.Angles()
	}
	file, err := writer.Create(opts)
	if err != nil {
		backend.Close()
		return nil, err
	}
	p, err := ingest.New(ingest.Config{
		Format:  format,
		Frames:  plan.Frames(),
		Backend: backend,
		NewCodec: func() (compress.Codec, error) {
			return compress.New(s.compression, format.PixelSize(), s.level)
		},
		Log: log,
	})
	if err != nil {
		file.Close()
		backend.Close()
		return nil, err
	}
	log.Info("scan started", zap.String("output", s.output), zap.Stringer("format", format),
		zap.Stringer("plan", plan), zap.String("backend", backend.Name()), zap.String("compression", s.compression))
	return &scanRun{s: s, planned: plan.Frames(), file: file, pipeline: p, backend: backend, log: log}, nil
}

// run moves the frames of src into the file, reporting progress.
func (r *scanRun) run(ctx context.Context, src ingest.Source) error {
	rep := startProgress(r.pipeline, r.planned)
	progress, err := r.pipeline.Run(ctx, src, fileSink{r.file})
	rep.Stop()
	r.progress = progress
	return err
}

// finish closes the file under its final name and turns the outcome into
// the command's result: nil when every planned frame is good, exit status 3
// when some are not, a failure when the file could not be finished.
func (r *scanRun) finish(srcErr error) error {
	r.closed = true
	closeErr := r.file.Close()
	r.backend.Close()
	printSummary(os.Stdout, r.s.output, r.progress, r.pipeline.Frames())
	if closeErr != nil {
		return fmt.Errorf("finish %s: %w", r.s.output, closeErr)
	}
	if srcErr != nil && !errors.Is(srcErr, capture.ErrTruncated) && !errors.Is(srcErr, context.Canceled) {
		fmt.Fprintf(os.Stderr, "h5ingest: source stopped early: %v\n", srcErr)
		return &exitError{code: exitIncomplete}
	}
	if srcErr != nil || r.progress.Problems() > 0 {
		if srcErr != nil {
			fmt.Fprintf(os.Stderr, "h5ingest: %v\n", srcErr)
		}
		return &exitError{code: exitIncomplete}
	}
	return nil
}

// abort finishes a scan that finish did not: the file keeps what it has.
func (r *scanRun) abort() {
	if !r.closed {
		r.file.Close()
		r.backend.Close()
	}
}

// fileSink adapts the HDF5 writer to the pipeline's Sink.
type fileSink struct{ w *writer.Writer }

func (s fileSink) WriteChunk(n int, chunk []byte) error { return s.w.WriteChunk(n, 0, chunk) }

func (s fileSink) SetRecord(n int, r ingest.Record) error {
	return s.w.SetRecord(n, writer.Record(r))
}

// printSummary prints the table a person reads at the end of a scan.
func printSummary(w io.Writer, path string, p ingest.Progress, frames int) {
	secs := p.Elapsed.Seconds()
	rate := func(v float64) float64 {
		if secs == 0 {
			return 0
		}
		return v / secs
	}
	fmt.Fprintf(w, "%s\n", path)
	fmt.Fprintf(w, "  frames          %d in the scan, %d written\n", frames, p.Written)
	fmt.Fprintf(w, "  ok              %d\n", p.OK)
	fmt.Fprintf(w, "  missing         %d\n", p.Missing)
	fmt.Fprintf(w, "  crc mismatch    %d\n", p.CRCMismatch)
	fmt.Fprintf(w, "  rejected        %d\n", p.Rejected)
	fmt.Fprintf(w, "  duplicates      %d dropped\n", p.Duplicate)
	fmt.Fprintf(w, "  out of range    %d dropped\n", p.OutOfRange)
	fmt.Fprintf(w, "  time            %.2f s, %.1f frames/s\n", secs, rate(float64(p.Written)))
	fmt.Fprintf(w, "  throughput      %.0f MB/s raw in, %.0f MB/s decoded, %.0f MB/s stored\n",
		rate(float64(p.RawBytes))/1e6, rate(float64(p.ImageBytes))/1e6, rate(float64(p.StoredBytes))/1e6)
	fmt.Fprintf(w, "  compression     %.2f\n", p.Ratio())
}
