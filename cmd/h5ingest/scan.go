package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.yaml.in/yaml/v3"

	"h5ingest/compress"
	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/source/capture"
	"h5ingest/source/fabric"
	"h5ingest/stream"
	"h5ingest/version"
	"h5ingest/writer"
)

// scanFlags are the flags that every command writing a scan shares. Most
// set a profile key: given on the command line they are the top layer over
// the profile, the environment and the defaults.
type scanFlags struct {
	profile  string
	output   string
	scanID   string
	logLevel string
	observe  observeFlags // --metrics, --report
	meta     []string     // --meta KEY=VALUE
	// user is the --meta pairs, as the files keep them (load sets it).
	user map[string]any

	fs   *pflag.FlagSet
	keys map[string]string // flag name -> profile key
}

// register defines the scan flags on fs; their defaults are the built-in
// profile defaults.
func (s *scanFlags) register(fs *pflag.FlagSet) {
	d := config.Default()
	s.fs = fs
	s.keys = map[string]string{}
	key := func(flag, key string) { s.keys[flag] = key }
	fs.StringVar(&s.profile, "profile", "", "beamline profile: a YAML file, or a built-in profile's name (see h5ingest profiles list)")
	fs.StringVarP(&s.output, "output", "o", "", "HDF5 file to write (default: the profile's output.directory and output.template)")
	fs.StringVar(&s.scanID, "scan-id", "", "scan id, for the profile's file name template")
	fs.StringVar(&s.logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	s.observe.register(fs)
	key("metrics", "status.address")
	fs.String("backend", d.Backend, "decode backend: auto, cpu or cuda")
	key("backend", "backend")
	fs.String("compression", d.Output.Compression, "chunk compression: bslz4, bszstd, lz4, deflate or none")
	key("compression", "output.compression")
	fs.Int("level", d.Output.Level, "compression level for bszstd and deflate (0: the codec's default)")
	key("level", "output.level")
	fs.String("layout", d.Output.Layout, "file layout: nxtomo or cxi")
	key("layout", "output.layout")
	fs.Bool("overwrite", d.Output.Overwrite, "replace an existing output file")
	key("overwrite", "output.overwrite")
	fs.Bool("backend-shuffle", d.Output.BackendShuffle, "do the bit transpose of bslz4 and bszstd on the decode backend (the GPU with cuda); the files do not change")
	key("backend-shuffle", "output.backend_shuffle")
	fs.Duration("flush", d.Output.FlushInterval, "how often readers following the file see new frames")
	key("flush", "output.flush_interval")
	fs.Int("darks", d.Plan.Darks, "dark fields at the start of the scan")
	key("darks", "plan.darks")
	fs.Int("flats", d.Plan.Flats, "flat fields after the darks")
	key("flats", "plan.flats")
	fs.Int("projections", d.Plan.Projections, "projections after the flats (no plan at all: every frame is a projection)")
	key("projections", "plan.projections")
	fs.String("sequence", d.Plan.Sequence, `frames in order as kind:count, e.g. "flats:20,darks:10,projections:1800,flats:20"`)
	key("sequence", "plan.sequence")
	fs.String("positions", d.Plan.Positions, "CSV file of scan positions, x,y[,z] in metres, one line per frame (ptychography; CXI translations)")
	key("positions", "plan.positions")
	fs.String("title", d.Metadata.Title, "the scan's title in its files (/entry/title); default: the profile's description")
	key("title", "metadata.title")
	fs.String("sample", d.Metadata.Sample, "the sample's name in the scan's files (/entry/sample/name)")
	key("sample", "metadata.sample")
	fs.String("experiment-id", d.Metadata.ExperimentID, "the proposal or experiment the scan belongs to (/entry/experiment_identifier)")
	key("experiment-id", "metadata.experiment_identifier")
	fs.StringArrayVar(&s.meta, "meta", nil, "KEY=VALUE kept in the scan's files under /entry/user_metadata; a VALUE that is JSON (a number, true, an object) is kept as such; repeatable")
	fs.String("stream", d.Stream.Address, "also send the scan's images to online analysis as DECTRIS Stream V2 on a ZeroMQ PUSH socket bound to tcp://HOST:PORT")
	key("stream", "stream.address")
	fs.Bool("drop-when-full", d.Source.DropWhenFull, "never hold the detector back: frames arriving while the pipeline is full are dropped, counted and recorded missing")
	key("drop-when-full", "source.drop_when_full")
	fs.Float64("angle-start", d.Plan.AngleStart, "rotation angle of the first projection, degrees")
	key("angle-start", "plan.angle_start")
	fs.Float64("angle-end", d.Plan.AngleEnd, "rotation angle the projections stop short of, degrees")
	key("angle-end", "plan.angle_end")
}

// logger returns the command's logger; with --scan-id every line names
// the scan.
func (s *scanFlags) logger() (*zap.Logger, error) {
	log, err := newLogger(s.logLevel)
	if err != nil || s.scanID == "" {
		return log, err
	}
	return log.With(zap.String("scan", s.scanID)), nil
}

// bindKey makes a command's own flag set a profile key too.
func (s *scanFlags) bindKey(flag, key string) { s.keys[flag] = key }

// load returns the profile layered with the flags given on the command
// line, and the scan plan it holds. Errors are usage errors.
func (s *scanFlags) load() (config.Profile, plan.Plan, error) {
	flags := map[string]config.FlagValue{}
	var err error
	s.fs.Visit(func(f *pflag.Flag) {
		key, ok := s.keys[f.Name]
		if !ok || err != nil {
			return
		}
		var v any
		if v, err = typedValue(s.fs, f); err == nil {
			flags[key] = config.FlagValue{Flag: "--" + f.Name, Value: v}
		}
	})
	if err != nil {
		return config.Profile{}, plan.Plan{}, usageError(err)
	}
	if s.scanID != "" {
		if err := config.CheckScanID(s.scanID); err != nil {
			return config.Profile{}, plan.Plan{}, usageError(fmt.Errorf("--scan-id: %w", err))
		}
	}
	// Counts on the command line replace a profile's sequence.
	for _, name := range []string{"darks", "flats", "projections"} {
		if _, given := flags["plan."+name]; given {
			if _, seq := flags["plan.sequence"]; !seq {
				flags["plan.sequence"] = config.FlagValue{Flag: "--" + name, Value: ""}
			}
		}
	}
	p, _, err := config.LoadLayers(config.Layers{Profile: s.profile, Flags: flags})
	if err != nil {
		return config.Profile{}, plan.Plan{}, usageError(err)
	}
	pl, err := p.Plan.Plan()
	if err != nil {
		return config.Profile{}, plan.Plan{}, usageError(err)
	}
	s.observe.metrics = p.Status.Address
	if s.user, err = parseMeta(s.meta); err != nil {
		return config.Profile{}, plan.Plan{}, usageError(err)
	}
	return p, pl, nil
}

// parseMeta turns --meta KEY=VALUE pairs into the user metadata a file
// keeps: a VALUE that parses as JSON keeps its type, any other is text.
func parseMeta(pairs []string) (map[string]any, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := map[string]any{}
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--meta %q: want KEY=VALUE", kv)
		}
		if err := writer.CheckMetadataKey(k); err != nil {
			return nil, fmt.Errorf("--meta %q: %w", kv, err)
		}
		var x any
		if err := json.Unmarshal([]byte(v), &x); err != nil || x == nil {
			x = v
		}
		m[k] = x
	}
	return m, nil
}

// profileYAML returns the merged profile as a profile file would hold it,
// for the files to keep how the scan was set up.
func profileYAML(p config.Profile) string {
	b, err := yaml.Marshal(p.Values())
	if err != nil {
		return ""
	}
	return string(b)
}

// typedValue returns a flag's value with its Go type.
func typedValue(fs *pflag.FlagSet, f *pflag.Flag) (any, error) {
	switch f.Value.Type() {
	case "string":
		return fs.GetString(f.Name)
	case "int":
		return fs.GetInt(f.Name)
	case "bool":
		return fs.GetBool(f.Name)
	case "duration":
		return fs.GetDuration(f.Name)
	case "float64":
		return fs.GetFloat64(f.Name)
	}
	return nil, fmt.Errorf("--%s: flags of type %s cannot set a profile key", f.Name, f.Value.Type())
}

// outputPath returns the file a scan of module writes: -o, or the profile's
// directory and template.
func (s *scanFlags) outputPath(p config.Profile, module int) (string, error) {
	if s.output != "" {
		return s.output, nil
	}
	if s.scanID == "" {
		return "", usageError(errors.New("no output file: give -o FILE.h5, or --scan-id ID for the profile's output.template"))
	}
	name, err := p.Output.FileName(s.scanID, module, time.Now())
	if err != nil {
		return "", usageError(fmt.Errorf("--scan-id: %w", err))
	}
	return name, nil
}

// scanRun is one scan being written: the pipeline and its file.
type scanRun struct {
	output   string
	planned  int
	file     *writer.Writer
	pipeline *pipeline.Pipeline
	// closeBackend closes the scan's own decode backend; it does nothing
	// where the scan shares one with other modules' scans.
	closeBackend func()
	log          *zap.Logger
	progress     pipeline.Progress
	closed       bool
	quiet        bool // no progress report
	// stream, for an acquire, is the detector's connection, whose counts
	// follow the summary.
	stream *fabric.Stream

	// watch holds the counters of every stage, shown by observe.
	watch *scanWatch

	// liveSetup, where the profile asks for a live stream, opens live,
	// which every chunk written is offered to.
	liveSetup *liveSetup
	live      *stream.Stream
}

// gpuBatch is the frames per decode call on a GPU, which overlaps one
// call's copies with another's kernels; to be tuned on the hardware.
const gpuBatch = 4

// electronVolt is one eV in joules, for CXI's photon energy.
const electronVolt = 1.602176634e-19

// openBackend opens the profile's decode backend.
func openBackend(profile config.Profile, log *zap.Logger) (gpu.Backend, error) {
	backend, err := gpu.New(profile.Backend, gpu.Options{
		Orientation: profile.Detector.Orientation(),
		Logger:      slog.New(zapslog.NewHandler(log.Core())),
	})
	if err != nil {
		return nil, usageError(fmt.Errorf("key backend: %w", err))
	}
	return backend, nil
}

// newScan creates the output file at path and the pipeline for a scan of
// format, as the profile says. It decodes with shared, a backend the
// caller closes after the scan, or where shared is nil with a backend of
// its own.
func newScan(path string, profile config.Profile, plan plan.Plan, format frame.Format, user map[string]any, shared gpu.Backend, log *zap.Logger) (*scanRun, error) {
	orient := profile.Detector.Orientation()
	if err := orient.Validate(format.Chips()); err != nil {
		return nil, usageError(fmt.Errorf("profile key detector.chip_orientation: %w (the frames are %v)", err, format.Geometry))
	}
	out := profile.Output
	newCodec := func() (compress.Codec, error) { return compress.New(out.Compression, format.PixelSize(), out.Level) }
	codec, err := newCodec()
	if err != nil {
		return nil, usageError(fmt.Errorf("key output.compression: %w", err))
	}
	backend, closeBackend := shared, func() {}
	if shared == nil {
		if backend, err = openBackend(profile, log); err != nil {
			return nil, err
		}
		closeBackend = func() { backend.Close() }
	}
	opts := fileOptions(path, profile, plan, format, user)
	opts.Filters = codec.Filters()
	opts.FlushInterval = out.FlushInterval
	file, err := writer.Create(opts)
	if err != nil {
		closeBackend()
		return nil, err
	}
	watch := newScanWatch()
	backend, newCodec = watch.wrap(backend, newCodec)
	batch := 1 // the CPU backend splits each frame over every core
	if backend.Name() == "cuda" {
		batch = gpuBatch
	}
	p, err := pipeline.New(pipeline.Config{
		Format:         format,
		Frames:         plan.Frames(),
		Backend:        backend,
		NewCodec:       newCodec,
		Batch:          batch,
		DropWhenFull:   profile.Source.DropWhenFull,
		MaxFrameGap:    profile.Source.MaxFrameGap,
		BackendShuffle: out.BackendShuffle,
		Log:            log,
	})
	if err != nil {
		file.Close()
		closeBackend()
		return nil, err
	}
	watch.describe(p, path, plan, format, backend.Name(), out.Compression)
	log.Info("scan started", zap.String("output", path), zap.Stringer("format", format),
		zap.Stringer("plan", plan), zap.String("backend", backend.Name()), zap.String("compression", out.Compression),
		zap.Bool("backend_shuffle", out.BackendShuffle))
	return &scanRun{output: path, planned: plan.Frames(), file: file, pipeline: p, closeBackend: closeBackend, log: log, watch: watch,
		liveSetup: newLiveSetup(profile, plan, format, path, user, codec.Bound(format.ImageSize()))}, nil
}

// fileOptions returns the options of a scan's file at path (or of its
// master file) from the profile and the plan, without the compression.
func fileOptions(path string, profile config.Profile, plan plan.Plan, format frame.Format, user map[string]any) writer.Options {
	opts := writer.Options{
		Path:      path,
		Overwrite: profile.Output.Overwrite,
		Layout:    profile.Output.Layout,
		Frames:    plan.Frames(),
		Height:    format.Height(),
		Width:     format.Width(),
		ElemSize:  format.PixelSize(),
		Title:     cmp.Or(profile.Metadata.Title, profile.Description),
		PixelSize: profile.Detector.PixelSize,
		Distance:  profile.Detector.Distance,
		Energy:    profile.Detector.Energy * electronVolt,
		Creator:   "h5ingest " + version.String(),

		SampleName:    profile.Metadata.Sample,
		ExperimentID:  profile.Metadata.ExperimentID,
		UserMetadata:  user,
		Version:       version.String(),
		Configuration: profileYAML(profile),
	}
	if plan.Frames() > 0 {
		opts.ImageKey = plan.ImageKeys()
		opts.RotationAngle = plan.Angles()
		opts.Translation = plan.Positions
	}
	return opts
}

// run moves the frames of src into the file, reporting progress unless
// the scan is quiet (a module's scan beside others).
func (r *scanRun) run(ctx context.Context, src pipeline.Source) error {
	var sink pipeline.Sink = fileSink{r.file}
	if r.live != nil { // after the file: a chunk is streamed once it is stored
		sink = r.live.Sink(sink)
	}
	src, sink = r.watch.start(src, sink)
	defer r.watch.stop()
	if r.quiet {
		progress, err := r.pipeline.Run(ctx, src, sink)
		r.progress = progress
		return err
	}
	rep := startProgress(r.pipeline, r.planned)
	progress, err := r.pipeline.Run(ctx, src, sink)
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
	r.closeBackend()
	printSummary(os.Stdout, r.output, r.progress, r.pipeline.Frames())
	r.closeLive(os.Stdout)
	if r.stream != nil {
		st := r.stream.Stats()
		fmt.Fprintf(os.Stdout, "  received        %d frames, %d bytes; ring full (sender held back) %v\n",
			st.Frames, st.Bytes, st.HeldBack.Round(time.Microsecond))
	}
	if err := r.watch.finish(os.Stdout, outcome(srcErr, r.progress)); err != nil {
		fmt.Fprintf(os.Stderr, "h5ingest: %v\n", err)
	}
	if closeErr != nil {
		return fmt.Errorf("finish %s: %w", r.output, closeErr)
	}
	if srcErr != nil && !errors.Is(srcErr, capture.ErrTruncated) && !errors.Is(srcErr, context.Canceled) {
		fmt.Fprintf(os.Stderr, "h5ingest: source stopped early: %v\n", srcErr)
		return &exitError{code: exitIncomplete}
	}
	if n := r.progress.OutOfRange; n > 0 {
		which, where := r.beyond()
		fmt.Fprintf(os.Stderr, "h5ingest: %d frames beyond the scan were rejected (%s) and are in no file%s\n", n, which, where)
	}
	if srcErr != nil || r.progress.Problems() > 0 {
		switch {
		case errors.Is(srcErr, context.Canceled):
			fmt.Fprintf(os.Stderr, "h5ingest: interrupted: %s holds the frames received before\n", r.output)
		case srcErr != nil:
			fmt.Fprintf(os.Stderr, "h5ingest: %v\n", srcErr)
		}
		return &exitError{code: exitIncomplete}
	}
	if r.pipeline.Frames() == 0 {
		fmt.Fprintf(os.Stderr, "h5ingest: no frame arrived and no plan gave a count: %s holds no frame\n", r.output)
		return &exitError{code: exitIncomplete}
	}
	return nil
}

// beyond says, for the line about frames beyond the scan, which they were
// and where else they may be.
func (r *scanRun) beyond() (which, where string) {
	if r.planned > 0 {
		return fmt.Sprintf("frame numbers %d and above, past the plan's %d frames", r.planned, r.planned),
			"; a capture of the scan keeps them, and a replay of it with a longer plan writes them"
	}
	return "frame numbers more than source.max_frame_gap beyond the highest received", ""
}

// abort finishes a scan that finish did not: the file keeps what it has.
func (r *scanRun) abort() {
	if !r.closed {
		r.closeLive(io.Discard)
		r.watch.close()
		r.file.Close()
		r.closeBackend()
	}
}

// fileSink adapts the HDF5 writer to the pipeline's Sink.
type fileSink struct{ w *writer.Writer }

func (s fileSink) WriteChunk(n int, chunk []byte) error { return s.w.WriteChunk(n, 0, chunk) }

func (s fileSink) SetRecord(n int, r frame.Record) error {
	return s.w.SetRecord(n, frame.Record(r))
}

// printSummary prints the table a person reads at the end of a scan.
func printSummary(w io.Writer, path string, p pipeline.Progress, frames int) {
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
	fmt.Fprintf(w, "  out of range    %d rejected (beyond the scan, not written)\n", p.OutOfRange)
	if p.Overflow > 0 {
		fmt.Fprintf(w, "  pipeline full   %d dropped (recorded missing)\n", p.Overflow)
	}
	fmt.Fprintf(w, "  time            %.2f s, %.1f frames/s\n", secs, rate(float64(p.Written)))
	fmt.Fprintf(w, "  throughput      %.0f MB/s raw in, %.0f MB/s decoded, %.0f MB/s stored\n",
		rate(float64(p.RawBytes))/1e6, rate(float64(p.ImageBytes))/1e6, rate(float64(p.StoredBytes))/1e6)
	fmt.Fprintf(w, "  compression     %.2f\n", p.Ratio())
}

// newModuleScans creates the scan of every module in files, each with its
// own file and pipeline, all decoding with backend; only the first reports
// progress.
func newModuleScans(files scanFiles, profile config.Profile, plan plan.Plan, format frame.Format, user map[string]any, backend gpu.Backend, log *zap.Logger) ([]*scanRun, error) {
	var scans []*scanRun
	for i, m := range files.modules {
		scan, err := newScan(m.path, profile, plan, format, user, backend, log.With(zap.Int("module", m.module.ID)))
		if err != nil {
			for _, s := range scans {
				s.abort()
			}
			return nil, err
		}
		scan.quiet = i > 0
		scans = append(scans, scan)
	}
	return scans, nil
}

// finishModules finishes the scans of a multi-module scan (scans[i] of
// files.modules[i]; nil for a module that has no file), given what
// stopped each one's source, and writes the master file if the scan's
// length was not known before. It returns the worst of the results:
// a failure, exit status 3 when any module misses frames, or nil.
func finishModules(files scanFiles, profile config.Profile, plan plan.Plan, format frame.Format, user map[string]any, scans []*scanRun, srcErrs []error) error {
	var worst error
	frames := plan.Frames()
	for i, scan := range scans {
		worst = worse(worst, scan.finish(srcErrs[i]))
		frames = max(frames, scan.pipeline.Frames())
	}
	if files.master == "" {
		return worst
	}
	if plan.Frames() == 0 {
		if frames == 0 {
			return worse(worst, errors.New("no frame of any module arrived: no master file written"))
		}
		for i, scan := range scans {
			if n := scan.pipeline.Frames(); n < frames {
				fmt.Fprintf(os.Stderr, "h5ingest: module %d has %d of the scan's %d frames; the master shows the rest missing\n",
					files.modules[i].module.ID, n, frames)
				worst = worse(worst, &exitError{code: exitIncomplete})
			}
		}
		if err := writeMaster(files, profile, plan, format, user, frames); err != nil {
			return worse(worst, err)
		}
	}
	fmt.Fprintf(os.Stdout, "%s\n  master          %d modules, %d frames of %d x %d\n", files.master, len(files.modules), frames,
		arrayHeight(profile, format), arrayWidth(profile, format))
	return worst
}

// worse returns the worse of two command results: any failure outranks
// exit status 3 (frames missing), which outranks nil.
func worse(a, b error) error {
	rank := func(err error) int {
		var ee *exitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee) && ee.code == exitIncomplete:
			return 1
		}
		return 2
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// emptySource is the source of a module that never sent: it ends at once,
// so that the module's file records every planned frame missing.
type emptySource struct{}

func (emptySource) Next(context.Context) (*pipeline.Frame, error) { return nil, io.EOF }
func (emptySource) Release(*pipeline.Frame)                       {}
