package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/source/capture"
)

func newReplayCmd() *cobra.Command {
	var s scanFlags
	var fps float64
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "replay CAPTURE... -o OUT.h5",
		Short: "Turn a capture file (or one per module) into an HDF5 file, through the acquisition pipeline",
		Long: `Replay a capture file through the acquisition pipeline into HDF5, as acquire would
have written the scan. A capture may hold several modules' frames, interleaved; or
give one capture per module (for a profile of several modules, such as
pimega-540d): the frames of all are read in turn and each module's go to its file.
Without plan flags, the plan the (first) capture records is used.`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !(fps >= 0) || math.IsInf(fps, 1) {
				return usageError(fmt.Errorf("--fps %g: want a rate above 0, or 0 for as fast as possible", fps))
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			return replay(cmd.Context(), args, &s, fps)
		},
	}
	s.register(cmd.Flags())
	cmd.Flags().Float64Var(&fps, "fps", 0, "replay at this many frames per second (of each capture), as a detector would send them (0: as fast as possible)")
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

func replay(ctx context.Context, paths []string, s *scanFlags, fps float64) error {
	profile, plan, err := s.load()
	if err != nil {
		return err
	}
	log, err := s.logger()
	if err != nil {
		return err
	}
	defer log.Sync()
	// The status server and the report directory are checked before any
	// file is created.
	if _, err := s.observe.start(log); err != nil {
		return err
	}
	defer s.observe.stopUnused()
	var format frame.Format
	var srcs []*capture.Source
	for i, path := range paths {
		r, f, err := openCapture(path)
		if err != nil {
			return err
		}
		defer r.Close()
		if i == 0 {
			format = f
		} else if f != format {
			return fmt.Errorf("capture %s holds frames of %v, capture %s of %v: one scan has one format", path, f, paths[0], format)
		}
		if plan.Frames() == 0 {
			recorded, ok, err := capturePlan(r.Metadata())
			if err != nil {
				return fmt.Errorf("capture %s: %w", path, err)
			}
			if ok {
				plan = recorded
				fmt.Fprintf(os.Stderr, "h5ingest: no plan given: using the plan recorded in %s: %v\n", path, plan)
			}
		}
		src := capture.NewSource(r, format.PayloadSize())
		if fps > 0 {
			src.Interval = time.Duration(float64(time.Second) / fps)
		}
		srcs = append(srcs, src)
	}
	var src pipeline.Source = srcs[0]
	if len(srcs) > 1 {
		src = newCaptureSources(srcs)
	}
	rp := &replayRun{s: s, paths: paths, profile: profile, plan: plan, format: format, src: src, log: log}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(profile.Detector.Modules) > 1 {
		return rp.modules(ctx)
	}
	return rp.module(ctx)
}

// replayRun is one replay: a capture, and the profile and plan it is
// written with.
type replayRun struct {
	s       *scanFlags
	paths   []string // the captures
	profile config.Profile
	plan    plan.Plan
	format  frame.Format
	src     pipeline.Source // the captures' frames, each capture's in turn
	log     *zap.Logger
}

// preScan returns the checks before a replay into files; frames are the
// plan's, or the capture's (per module) when there is no plan.
func (rp *replayRun) preScan(files []string, modules int) preScan {
	pre := preScan{files: files, frames: rp.plan.Frames(), frameBytes: rp.format.ImageSize(), profile: rp.profile, spaceWarns: true}
	if pre.frames == 0 {
		for _, path := range rp.paths {
			pre.frames += captureFrames(path, rp.format)
		}
		pre.frames /= modules
	}
	return pre
}

// module replays a capture of one module into its file.
func (rp *replayRun) module(ctx context.Context) error {
	s, profile := rp.s, rp.profile
	out, err := s.outputPath(profile, profile.Detector.Modules[0].ID)
	if err != nil {
		return err
	}
	if err := rp.preScan([]string{out}, 1).run(); err != nil {
		return err
	}
	scan, err := newScan(out, profile, rp.plan, rp.format, s.user, nil, rp.log)
	if err != nil {
		return err
	}
	defer scan.abort()
	if err := scan.observe(&s.observe, s.scanID, profile.Detector.Modules[0].ID); err != nil {
		return err
	}
	if err := scan.openLive(s.scanID, profile.Detector.Modules[0].ID); err != nil {
		return err
	}
	src := &oneModule{Source: rp.src, id: uint16(profile.Detector.Modules[0].ID)}
	srcErr := scan.run(ctx, src)
	if errors.Is(srcErr, capture.ErrTruncated) {
		rp.log.Warn("capture cut short", zap.Error(srcErr))
	}
	if src.other > 0 {
		fmt.Fprintf(os.Stderr, "h5ingest: %d frames of modules other than the profile's module %d (detector.modules) were dropped\n",
			src.other, src.id)
		if scan.pipeline.Progress().Written == 0 {
			fmt.Fprintf(os.Stderr, "h5ingest: to replay module %d of this capture, give a profile listing it, e.g. H5INGEST_DETECTOR_MODULES=\"[{id: %d}]\"\n",
				src.first, src.first)
		}
	}
	return scan.finish(srcErr)
}

// oneModule is the source of one module's frames in a capture that may
// hold several modules' frames, told apart by their module_id: frames of
// other modules are released and counted, never taken for this module's.
type oneModule struct {
	pipeline.Source
	id    uint16
	other int    // frames of other modules dropped
	first uint16 // the module of the first of them
}

// ReadIntoHost passes a backend's page-locked memory on to the capture
// (pipeline.HostBufferSource).
func (s *oneModule) ReadIntoHost(host gpu.HostAllocator) func() {
	if bs, ok := s.Source.(pipeline.HostBufferSource); ok {
		return bs.ReadIntoHost(host)
	}
	return func() {}
}

// Next returns the module's next frame.
func (s *oneModule) Next(ctx context.Context) (*pipeline.Frame, error) {
	for {
		f, err := s.Source.Next(ctx)
		if err != nil || f.Header.ModuleID == s.id {
			return f, err
		}
		if s.other == 0 {
			s.first = f.Header.ModuleID
		}
		s.other++
		s.Source.Release(f)
	}
}

// modules replays a capture of several modules' interleaved frames: each
// module's frames go through a pipeline of their own into the module's
// file, and the master file shows the array.
func (rp *replayRun) modules(ctx context.Context) error {
	s, profile, plan, format := rp.s, rp.profile, rp.plan, rp.format
	files, err := s.scanFiles(profile, time.Now())
	if err != nil {
		return err
	}
	pre := rp.preScan(nil, len(files.modules))
	pre.master = files.master
	ids := make([]uint16, len(files.modules))
	for i, m := range files.modules {
		pre.files = append(pre.files, m.path)
		ids[i] = uint16(m.module.ID)
	}
	if err := pre.run(); err != nil {
		return err
	}
	if plan.Frames() > 0 {
		if err := writeMaster(files, profile, plan, format, s.user, plan.Frames()); err != nil {
			return err
		}
	}
	// One backend decodes every module: on a GPU one context, whose
	// streams the modules share, rather than contexts the GPU time-slices.
	backend, err := openBackend(profile, rp.log)
	if err != nil {
		return err
	}
	defer backend.Close()
	scans, err := newModuleScans(files, profile, plan, format, s.user, backend, rp.log)
	if err != nil {
		return err
	}
	for i, scan := range scans {
		defer scan.abort()
		if err := scan.observe(&s.observe, s.scanID, files.modules[i].module.ID); err != nil {
			return err
		}
		if err := scan.openLive(s.scanID, files.modules[i].module.ID); err != nil {
			return err
		}
	}
	d := pipeline.NewDemux(rp.src, ids, demuxDepth)
	srcErrs := make([]error, len(scans))
	var wg sync.WaitGroup
	for i, scan := range scans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := d.Module(ids[i])
			srcErrs[i] = scan.run(ctx, m)
			m.Close()
		}()
	}
	if err := d.Run(ctx); errors.Is(err, capture.ErrTruncated) {
		rp.log.Warn("capture cut short", zap.Error(err))
	}
	wg.Wait()
	if n := d.Unknown(); n > 0 {
		fmt.Fprintf(os.Stderr, "h5ingest: %d frames of modules the profile does not list (detector.modules) were dropped\n", n)
	}
	return finishModules(files, profile, plan, format, s.user, scans, srcErrs)
}

// captureSources reads several captures (one per module) as one source:
// a frame of each in turn, as a detector's modules send them, until every
// capture has ended. A capture that cannot be read on ends alone; its
// error comes after the frames of the others.
type captureSources struct {
	srcs  []*capture.Source
	next  int    // the source to read next
	ended []bool // by source
	err   error  // the first error of a source, other than its end

	mu    sync.Mutex
	owner map[*pipeline.Frame]*capture.Source // frames out, by the source that gave them
}

func newCaptureSources(srcs []*capture.Source) *captureSources {
	return &captureSources{srcs: srcs, ended: make([]bool, len(srcs)), owner: map[*pipeline.Frame]*capture.Source{}}
}

// Next returns the next frame of the next capture that has one.
func (c *captureSources) Next(ctx context.Context) (*pipeline.Frame, error) {
	for range 2 * len(c.srcs) {
		i := c.next
		c.next = (c.next + 1) % len(c.srcs)
		if c.ended[i] {
			continue
		}
		f, err := c.srcs[i].Next(ctx)
		switch {
		case err == nil:
			c.mu.Lock()
			c.owner[f] = c.srcs[i]
			c.mu.Unlock()
			return f, nil
		case ctx.Err() != nil:
			return nil, err
		case !errors.Is(err, io.EOF) && c.err == nil:
			c.err = err
		}
		c.ended[i] = true
	}
	if c.err != nil {
		return nil, c.err
	}
	return nil, io.EOF
}

// Release gives f back to the capture it came from. It is safe to call
// from several goroutines.
func (c *captureSources) Release(f *pipeline.Frame) {
	c.mu.Lock()
	src := c.owner[f]
	delete(c.owner, f)
	c.mu.Unlock()
	if src != nil {
		src.Release(f)
	}
}

// demuxDepth is how many frames of one module may wait for its pipeline
// while the capture is read on for the others.
const demuxDepth = 8

// captureFrames estimates the frames in a capture of format from its
// size; 0 when it cannot be read.
func captureFrames(path string, format frame.Format) int {
	info, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return int(info.Size() / (frame.HeaderSize + int64(format.PayloadSize())))
}

// openCapture opens a capture for replay and returns it with the format of
// its scan; the reader accepts payloads as large as the format's.
func openCapture(path string) (*capture.Reader, frame.Format, error) {
	format, err := captureFormat(path)
	if err != nil {
		return nil, frame.Format{}, err
	}
	r, err := capture.Open(path)
	if err != nil {
		return nil, frame.Format{}, err
	}
	r.SetMaxPayload(max(capture.DefaultMaxPayload, int64(format.PayloadSize())))
	return r, format, nil
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
