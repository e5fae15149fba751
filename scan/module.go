package scan

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/instrument"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/receive"
	"h5ingest/registry"
	"h5ingest/source/capture"
	"h5ingest/stream"
	"h5ingest/version"
	"h5ingest/writer"
)

// Options set up the scan of one module.
type Options struct {
	Profile config.Profile // merged: the defaults, the profile and the command line
	Plan    plan.Plan
	Format  frame.Format   // the frames' format, as the profile or the sender says
	User    map[string]any // free-form metadata for the files (writer.Options.UserMetadata)
	// Backend decodes the frames; the caller closes it after the scan.
	// Nil: the scan opens the profile's backend and closes it itself.
	Backend gpu.Backend
	Log     *zap.Logger // nil: none
	// Notify, where set, is told what the scan has to say while it runs,
	// before it returns its Result: a warning before its first frame, a
	// plan taken from a capture, where it waits for the detector. Calls
	// come from one goroutine at a time.
	Notify func(Note)
	// Progress, where set, reports the progress of a scan as it runs; the
	// function it returns stops the report. A module's scan beside
	// others (Quiet) reports none.
	Progress func(p *pipeline.Pipeline, planned int) (stop func())
	Quiet    bool
	// Stages makes the stages the profile names: the codec, the backend,
	// the layout and the processors (stock registers
	// h5ingest's own).
	Stages *registry.Registry
	// StartTime and EndTime, where not zero, are what the file records
	// as the scan's start and end, rather than the clock's when it opens
	// and closes: a replay's are the live scan's its capture kept.
	StartTime, EndTime time.Time
}

// Module is the scan of one module being written: its pipeline and its
// file.
type Module struct {
	output   string
	planned  int
	report   func(p *pipeline.Pipeline, planned int) (stop func())
	file     *writer.Writer
	pipeline *pipeline.Pipeline
	// closeBackend closes the scan's own decode backend; it does nothing
	// where the scan shares one with other modules' scans.
	closeBackend func()
	log          *zap.Logger
	progress     pipeline.Progress
	closed       bool
	ran          bool // Run was called: the file holds what the scan received
	// stream, for an acquire, is the detector's connection, whose counts
	// follow the summary.
	stream statser
	// link is stream where its front end never waits, once Run has it,
	// for the service's counts from another goroutine.
	link atomic.Pointer[statser]

	// watch holds the counters of every stage, shown by observe.
	watch *scanWatch

	// liveSetup, where the profile asks for a live stream, opens live,
	// which every chunk written is offered to.
	liveSetup *liveSetup
	live      *stream.Stream
	// procs are the scan's processor stages, closed when it ends.
	procs *processing
}

// electronVolt is one eV in joules, for CXI's photon energy.
const electronVolt = 1.602176634e-19

// Open creates the output file at path and the pipeline for the scan of
// one module, as o says. Close it with Finish, or Abort where Finish is
// not reached.
func Open(path string, o Options) (*Module, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	profile, plan, format, user, shared, log := o.Profile, o.Plan, o.Format, o.User, o.Backend, o.Log
	orient := profile.Detector.Orientation()
	if err := orient.Validate(format.Chips()); err != nil {
		return nil, Usage(fmt.Errorf("profile key detector.chip_orientation: %w (the frames are %v)", err, format.Geometry))
	}
	out := profile.Output
	st, err := makeStages(o.Stages, profile, format)
	if err != nil {
		return nil, err
	}
	newCodec := st.newCodec
	codec, err := newCodec()
	if err != nil {
		return nil, Usage(fmt.Errorf("key output.compression: %w", err))
	}
	backend, closeBackend := shared, func() {}
	if shared == nil {
		if backend, err = openBackend(o.Stages, profile, log); err != nil {
			return nil, err
		}
		closeBackend = func() { backend.Close() }
	}
	procs, err := startProcessors(o.Stages, profile, plan, format)
	if err != nil {
		closeBackend()
		return nil, err
	}
	opts := fileOptions(path, st.layout, profile, plan, format, user)
	opts.Filters = codec.Filters()
	opts.FlushInterval = out.FlushInterval
	opts.Extra = procs.extras
	opts.StartTime, opts.EndTime = o.StartTime, o.EndTime
	file, err := writer.Create(opts)
	if err != nil {
		procs.close()
		closeBackend()
		return nil, err
	}
	procs.bind(file)
	watch := newScanWatch()
	backend, newCodec = watch.wrap(backend, newCodec)
	newProcessor := watch.stages.NewProcessor(procs.newProcessor())
	batch := o.Stages.Batch(backend) // the frames per Decode its registry entry says
	p, err := pipeline.New(pipeline.Config{
		Format:         format,
		Frames:         plan.Frames(),
		Backend:        backend,
		Fallback:       watch.fallback(fallbackBackend(o.Stages, profile, backend.Name(), log)),
		NewCodec:       newCodec,
		NewProcessor:   newProcessor,
		Batch:          batch,
		DropWhenFull:   profile.Source.DropWhenFull,
		MaxFrameGap:    profile.Source.MaxFrameGap,
		MissingGap:     profile.Source.RingSlots,
		BackendShuffle: out.BackendShuffle,
		Log:            log,
	})
	if err != nil {
		procs.close()
		file.Close()
		closeBackend()
		return nil, err
	}
	watch.describe(p, path, plan, format, backend.Name(), out.Compression)
	watch.scan.RingSlots = profile.Source.RingSlots
	log.Info("scan started", zap.String("output", path), zap.Stringer("format", format),
		zap.Stringer("plan", plan), zap.String("backend", backend.Name()), zap.String("compression", out.Compression),
		zap.Bool("backend_shuffle", out.BackendShuffle))
	m := &Module{output: path, planned: plan.Frames(), file: file, pipeline: p,
		closeBackend: closeBackend, log: log, watch: watch, procs: procs,
		liveSetup: newLiveSetup(o.Stages, profile, plan, format, path, user, codec.Bound(format.ImageSize()))}
	if !o.Quiet {
		m.report = o.Progress
	}
	return m, nil
}

// fileOptions returns the options of a scan's file at path (or of its
// master file) from the profile and the plan, without the compression.
func fileOptions(path string, layout writer.Layout, profile config.Profile, plan plan.Plan, format frame.Format, user map[string]any) writer.Options {
	opts := writer.Options{
		Path:      path,
		Overwrite: profile.Output.Overwrite,
		Layout:    layout,
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
	// The profile was validated: its mode and group are good.
	if mode, gid, err := profile.Output.Access(); err == nil && (mode != 0 || gid >= 0) {
		opts.Access = &writer.Access{Mode: mode, GID: gid}
	}
	if plan.Frames() > 0 {
		opts.ImageKey = plan.ImageKeys()
		opts.RotationAngle = plan.Angles()
		opts.Translation = plan.Positions
	}
	return opts
}

// LinkStats returns what the module's link has received, where its
// front end never waits for the receiver (a RoCE front end: its overruns,
// gaps and ring fill); false otherwise, or before Run. It may be called
// from any goroutine while the scan runs.
func (r *Module) LinkStats() (receive.Stats, bool) {
	p := r.link.Load()
	if p == nil {
		return receive.Stats{}, false
	}
	return (*p).Stats(), true
}

// Path returns the module's file: the name it was opened under, and once
// Finish has closed it, the name it was closed under (its temporary name
// where the final one could not be taken).
func (r *Module) Path() string { return r.output }

// Progress returns what the scan has done so far, from its pipeline; it
// may be called from any goroutine while the scan runs.
func (r *Module) Progress() pipeline.Progress { return r.pipeline.Progress() }

// FinalProgress returns what the scan did, as Run counted it when it
// returned (frames discarded at a cancel included); zero before. Call it
// once Run has returned.
func (r *Module) FinalProgress() pipeline.Progress { return r.progress }

// Preview returns the keeper of the scan's latest decoded image, which a
// look at the running scan asks for (Preview.WantUntil).
func (r *Module) Preview() *instrument.Preview { return r.watch.stages.Preview }

// Run moves the frames of src into the file, reporting progress unless
// the scan is quiet (a module's scan beside others). Its error is what
// stopped src early, for Finish.
func (r *Module) Run(ctx context.Context, src pipeline.Source) error {
	r.ran = true
	if st, ok := src.(statser); ok {
		r.stream = st
		if st.Stats().Uncredited {
			r.link.Store(&st)
		}
	}
	sink := r.procs.sink(fileSink{r.file})
	if r.live != nil { // after the file: a chunk is streamed once it is stored
		sink = r.live.Sink(sink)
	}
	src, sink = r.watch.start(src, sink)
	defer r.watch.stop()
	stop := func() {}
	if r.report != nil {
		stop = r.report(r.pipeline, r.planned)
	}
	progress, err := r.pipeline.Run(ctx, src, sink)
	stop()
	if r.stream != nil {
		// Frames the source took off the wire that the pipeline never
		// read: the scan was cancelled (or its file failed) first.
		st := r.stream.Stats()
		if n := int(st.Frames-st.Undelivered) - progress.Received - progress.NotFrame; n > 0 {
			r.pipeline.Discard(n)
			progress.Discarded += n
			r.log.Warn("frames discarded: they arrived, but the scan ended before it could write them; they are recorded missing",
				zap.Int("count", n), zap.NamedError("reason", cmp.Or(context.Cause(ctx), err)))
		}
	}
	r.progress = progress
	return err
}

// Finish closes the file under its final name, given what stopped the
// scan's source (Run's error), and returns the scan's summary (without
// its Module, which the caller knows) and its result: nil when every
// planned frame is good, ErrIncomplete when some are not (the summary's
// notes say why), a failure when the file could not be finished.
func (r *Module) Finish(srcErr error) (Summary, error) {
	r.closed = true
	var notes []Note
	note := func(kind NoteKind, format string, args ...any) {
		notes = append(notes, Note{Kind: kind, Text: fmt.Sprintf(format, args...)})
	}
	if err := r.procs.close(); err != nil { // before the file: a stage may write to it as it closes
		r.log.Warn("processor stage failed", zap.Error(err))
		note(Failed, "%v", err)
	}
	closeErr := r.file.Close()
	r.output = r.file.Name() // the .part, where its final name could not be taken
	r.closeBackend()
	sum := Summary{Path: r.output, Frames: r.pipeline.Frames(), Progress: r.progress}
	var liveErr error
	sum.Live, liveErr = r.closeLive()
	if liveErr != nil {
		note(Warning, "%v", liveErr)
	}
	if fell, name := r.pipeline.FellBack(); fell {
		note(Warning, "the decode backend lost its device mid-scan: the frames from then on were decoded by the %s backend, none lost (the file's configuration names the backend the scan began with)", name)
	}
	sum.Series = r.procs.series
	for _, err := range r.procs.seriesErrs {
		note(Warning, "%v", err)
	}
	if r.stream != nil {
		st := r.stream.Stats()
		sum.Received = &st
	}
	var err error
	sum.Stages, sum.Report, err = r.watch.finish(outcome(srcErr, r.progress))
	if err != nil {
		note(Failed, "%v", err)
	}
	done := func(err error) (Summary, error) {
		sum.Notes = notes
		return sum, err
	}
	if closeErr != nil {
		return done(fmt.Errorf("finish %s: %w", r.output, closeErr))
	}
	if srcErr != nil && !errors.Is(srcErr, capture.ErrTruncated) && !errors.Is(srcErr, context.Canceled) {
		note(SourceStopped, "source stopped early: %v", srcErr)
		return done(ErrIncomplete)
	}
	if n := r.progress.OutOfRange; n > 0 {
		which, where := r.beyond()
		note(Beyond, "%d frames beyond the scan were rejected (%s) and are in no file%s", n, which, where)
	}
	if srcErr != nil || r.progress.Problems() > 0 {
		switch {
		case errors.Is(srcErr, context.Canceled):
			note(Interrupted, "interrupted: %s holds the frames received before", r.output)
		case srcErr != nil:
			note(SourceStopped, "%v", srcErr)
		}
		return done(ErrIncomplete)
	}
	if r.pipeline.Frames() == 0 {
		note(NoFrame, "no frame arrived and no plan gave a count: %s holds no frame", r.output)
		return done(ErrIncomplete)
	}
	return done(nil)
}

// Times returns what the module's file records as the scan's start and
// end; the end is zero until Finish has closed the file.
func (r *Module) Times() (start, end time.Time) { return r.file.Times() }

// beyond says, for the line about frames beyond the scan, which they were
// and where else they may be.
func (r *Module) beyond() (which, where string) {
	if r.planned > 0 {
		return fmt.Sprintf("frame numbers %d and above, past the plan's %d frames", r.planned, r.planned),
			"; a capture of the scan keeps them, and a replay of it with a longer plan writes them"
	}
	return "frame numbers more than source.max_frame_gap beyond the highest received", ""
}

// Abort finishes a scan that Finish did not: the file keeps what it has.
// A scan refused before it ran (a stream port taken) leaves no file.
func (r *Module) Abort() {
	if !r.closed {
		r.closeLive()
		r.watch.close()
		if err := r.procs.close(); err != nil {
			r.log.Warn("processor stage failed", zap.Error(err))
		}
		if r.ran {
			r.file.Close()
		} else if err := r.file.Discard(); err != nil {
			r.log.Warn("scan refused before its first frame: its file could not be removed", zap.Error(err))
		}
		r.closeBackend()
	}
}

// fileSink adapts the HDF5 writer to the pipeline's Sink.
type fileSink struct{ w *writer.Writer }

func (s fileSink) WriteChunk(n int, chunk []byte) error { return s.w.WriteChunk(n, 0, chunk) }

func (s fileSink) SetRecord(n int, r frame.Record) error {
	return s.w.SetRecord(n, r)
}

// openModules creates the scan of every module in files, each with its
// own file and pipeline, all decoding with o.Backend; only the first
// reports progress. A module in times gets the start and end it holds.
func openModules(files Files, o Options, times map[int]capture.ScanTime) ([]*Module, error) {
	var scans []*Module
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	for i, m := range files.Modules {
		mo := o
		mo.Log, mo.Quiet = log.With(zap.Int("module", m.Module.ID)), o.Quiet || i > 0
		if t, ok := times[m.Module.ID]; ok {
			mo.StartTime, mo.EndTime = t.Start, t.End
		}
		scan, err := Open(m.Path, mo)
		if err != nil {
			for _, s := range scans {
				s.Abort()
			}
			return nil, err
		}
		scans = append(scans, scan)
	}
	return scans, nil
}

// finishModules finishes the scans of a multi-module scan (scans[i] of
// files.Modules[i]), given what stopped each one's source, and writes the
// master file (where the scan's length was not known before), or brings
// the one written before the frames up to date with the module files'
// times. It adds the modules' summaries and the master's to res, and
// returns the worst of the results: a failure, ErrIncomplete when any
// module misses frames, or nil.
func finishModules(res *Result, files Files, o Options, scans []*Module, srcErrs []error) error {
	var worst error
	profile, plan, format := o.Profile, o.Plan, o.Format
	frames := plan.Frames()
	for i, scan := range scans {
		sum, err := scan.Finish(srcErrs[i])
		sum.Module = files.Modules[i].Module.ID
		res.Modules = append(res.Modules, sum)
		worst = worse(worst, err)
		frames = max(frames, scan.pipeline.Frames())
	}
	if files.Master == "" {
		return worst
	}
	if plan.Frames() == 0 && frames == 0 {
		return worse(worst, errors.New("no frame of any module arrived: no master file written"))
	}
	var notes []Note
	if plan.Frames() == 0 {
		for i, scan := range scans {
			if n := scan.pipeline.Frames(); n < frames {
				notes = append(notes, Note{Kind: Short, Text: fmt.Sprintf("module %d has %d of the scan's %d frames; the master shows the rest missing",
					files.Modules[i].Module.ID, n, frames)})
				worst = worse(worst, ErrIncomplete)
			}
		}
	}
	// Written now, or brought up to date: the module files' times are the scan's.
	warnings, err := finishMaster(files, o.Stages, profile, plan, format, o.User, cmp.Or(plan.Frames(), frames))
	notes = append(notes, warnings...)
	if err != nil { // no master: its notes are the scan's
		res.Notes = append(res.Notes, notes...)
		return worse(worst, err)
	}
	h, w := ArraySize(profile, format)
	res.Master = &MasterResult{Path: files.Master, Modules: len(files.Modules), Frames: frames, Height: h, Width: w, Notes: notes}
	return worst
}

// emptySource is the source of a module that never sent: it ends at
// once, so that the module's file records every planned frame missing.
type emptySource struct{}

// Next implements pipeline.Source: the end at once.
func (emptySource) Next(context.Context) (*pipeline.Frame, error) { return nil, io.EOF }

// Release implements pipeline.Source.
func (emptySource) Release(*pipeline.Frame) {}

// profileYAML returns the merged profile as a profile file would hold it,
// for the files to keep how the scan was set up.
func profileYAML(p config.Profile) string {
	b, err := yaml.Marshal(p.Values())
	if err != nil {
		return ""
	}
	return string(b)
}
