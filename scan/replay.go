package scan

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/source/capture"
)

// ReplayOptions set up a replay: the scan in one or more captures (one
// per module, or one holding every module's frames) written as acquire
// would have written it.
type ReplayOptions struct {
	Options           // the scan of each module; Format is the captures'
	Files    Files    // the scan's files
	Captures []string // capture files, read in turn
	// FPS, when positive, paces each capture as a detector at that rate
	// would send its frames.
	FPS      float64
	ScanID   string    // names the scan on the status page and the live stream
	Observer *Observer // shows the scans; nil: none
}

// Replay writes the scan of the captures into its files and returns what
// it did, with the worst of its modules' results: nil when every planned
// frame is good, ErrIncomplete when some are not (the result's notes say
// why), a failure otherwise, with what was finished before it. Without a
// plan in o.Plan, the plan the first capture records is used (o.Notify is
// told). ctx ends it early: the files keep the frames written. Pre-scan
// checks that fail return a *ChecksError, before any file is written.
func Replay(ctx context.Context, o ReplayOptions) (Result, error) {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Observer == nil {
		o.Observer = &Observer{}
	}
	open, err := recordings(o.Stages, o.Profile)
	if err != nil {
		return Result{}, err
	}
	paths, plan := o.Captures, o.Plan
	var format frame.Format
	var srcs []*capture.Source
	times := map[int]capture.ScanTime{}
	orient := orientationSource{from: "the profile"}
	for i, path := range paths {
		r, f, err := open(path)
		if err != nil {
			return Result{}, unreadable(err, "capture unreadable", "a capture file")
		}
		defer r.Close()
		if err := liveTimes(times, path, r.Metadata()); err != nil {
			return Result{}, fmt.Errorf("capture %s: %w", path, err)
		}
		if i == 0 {
			format = f
		} else if f != format {
			return Result{}, fmt.Errorf("capture %s holds frames of %v, capture %s of %v: one scan has one format", path, f, paths[0], format)
		}
		if err := orient.take(&o, path, r.Metadata(), format); err != nil {
			return Result{}, fmt.Errorf("capture %s: %w", path, err)
		}
		if plan.Frames() == 0 {
			recorded, ok, err := CapturePlan(r.Metadata())
			if err != nil {
				return Result{}, fmt.Errorf("capture %s: %w", path, err)
			}
			if ok {
				plan = recorded
				tell(o.Notify, Note{Kind: Info, Text: fmt.Sprintf("no plan given: using the plan recorded in %s: %v", path, plan)})
			}
		} else if recorded, ok, err := CapturePlan(r.Metadata()); err == nil && ok && recorded.String() != plan.String() {
			// A profile's plan (a beamline's usual scan) may not be the
			// scan captured: its frames beyond the capture's are missing.
			tell(o.Notify, Note{Kind: Warning, Text: fmt.Sprintf("capture %s records the plan %v; the replay writes the plan given, %v", path, recorded, plan)})
		}
		src := capture.NewSource(r, format.PayloadSize())
		if o.FPS > 0 {
			src.Interval = time.Duration(float64(time.Second) / o.FPS)
		}
		srcs = append(srcs, src)
	}
	var src pipeline.Source = srcs[0]
	if len(srcs) > 1 {
		src = capture.NewSources(srcs)
	}
	o.Plan, o.Format = plan, format
	rp := &replayRun{o: o, src: src, times: times}
	return rp.run(ctx)
}

// orientationSource says where a replay's chip orientation comes from.
type orientationSource struct {
	from string // "the profile", or the capture it was taken from
}

// take gives a replay the chip orientation that the capture at path
// records (captureOrientation), where the profile sets none: the chips of
// a module are turned as they were when it was captured, not left as they
// came off the detector. Where the profile (or an earlier capture) gives
// one that differs, it stands, and o.Notify is warned: a replay may mend
// an orientation captured wrong. A recorded orientation that does not fit
// the frames, or does not parse, is an error where the profile gives
// none, else a warning.
func (s *orientationSource) take(o *ReplayOptions, path string, meta capture.Metadata, f frame.Format) error {
	degrees, ok, err := captureOrientation(meta)
	if err == nil && !ok {
		return nil
	}
	recorded := frame.Orientation(degrees)
	d := &o.Profile.Detector
	if len(recorded) == 0 {
		recorded = nil // all at 0 degrees
	} else if err == nil {
		err = recorded.Validate(f.Chips())
	}
	if err != nil { // one that does not parse is as wrong as one that does not fit
		err = fmt.Errorf("the chip orientation it records: %w (the frames are %v)", err, f.Geometry)
		if len(d.ChipOrientation) == 0 {
			return fmt.Errorf("%w; give the detector's in the profile (detector.chip_orientation)", err)
		}
		tell(o.Notify, Note{Kind: Warning, Text: fmt.Sprintf("capture %s: %v: the chips are turned as %s says", path, err, s.from)})
		return nil
	}
	if len(d.ChipOrientation) == 0 && s.from == "the profile" {
		s.from = "capture " + path
		if slices.Contains(degrees, 180) {
			d.ChipOrientation = degrees
			tell(o.Notify, Note{Kind: Info, Text: fmt.Sprintf("no chip orientation in the profile: using the one recorded in %s: %v", path, degrees)})
		}
		return nil
	}
	given := d.Orientation()
	if given.Validate(f.Chips()) != nil {
		return nil // the profile's own does not fit the frames: the replay's checks say so
	}
	if !slices.Equal(showOrientation(given, f.Chips()), showOrientation(recorded, f.Chips())) {
		tell(o.Notify, Note{Kind: Warning, Text: fmt.Sprintf("capture %s records the chip orientation %v, %s gives %v: the chips are turned as %s says",
			path, showOrientation(recorded, f.Chips()), s.from, showOrientation(given, f.Chips()), s.from)})
	}
	return nil
}

// showOrientation writes o for a note: every chip's degrees.
func showOrientation(o frame.Orientation, chips int) []int {
	deg := make([]int, chips)
	for k := range deg {
		if o.Rotated(k) {
			deg[k] = 180
		}
	}
	return deg
}

// liveTimes adds to times the start and end of each module's live scan
// that the capture at path records (capture.KeyScanTimes), for a replay
// to write the same. A module whose end it lacks (its acquire was
// killed) ended when its last frame arrived: when the capture was last
// written.
func liveTimes(times map[int]capture.ScanTime, path string, meta capture.Metadata) error {
	var recorded []capture.ScanTime
	if _, err := meta.Get(capture.KeyScanTimes, &recorded); err != nil {
		return err
	}
	for _, t := range recorded {
		if t.Start.IsZero() {
			continue
		}
		if t.End.IsZero() {
			info, err := os.Stat(path)
			if err != nil {
				return err
			}
			t.End = info.ModTime()
		}
		times[t.Module] = t
	}
	return nil
}

// replayRun is one replay: a capture, and the profile and plan it is
// written with.
type replayRun struct {
	o     ReplayOptions
	src   pipeline.Source          // the captures' frames, each capture's in turn
	times map[int]capture.ScanTime // the live scan's times, by module
}

// preScan returns the checks before a replay into files; frames are the
// plan's, or the capture's (per module) when there is no plan.
func (rp *replayRun) checks(files Files) Checks {
	o := &rp.o
	pre := Checks{Master: files.Master, Frames: o.Plan.Frames(), FrameBytes: o.Format.ImageSize(), Profile: o.Profile, Stages: o.Stages, SpaceWarns: true}
	if pre.Frames == 0 {
		for _, path := range o.Captures {
			pre.Frames += captureFrames(path, o.Format)
		}
		pre.Frames /= len(files.Modules)
	}
	for _, m := range files.Modules {
		pre.Files = append(pre.Files, m.Path)
	}
	return pre
}

// run replays the captures: each module's frames, told apart by their
// module_id, go through a pipeline of their own into the module's file
// (frames of modules the profile does not list are dropped and counted),
// and the master file of several modules shows the array.
func (rp *replayRun) run(ctx context.Context) (Result, error) {
	var res Result
	o := &rp.o
	profile, plan, format, files := o.Profile, o.Plan, o.Format, o.Files
	ids := make([]uint16, len(files.Modules))
	for i, m := range files.Modules {
		ids[i] = uint16(m.Module.ID)
	}
	if err := rp.checks(files).Run(o.Notify); err != nil {
		return res, err
	}
	if files.Master != "" && plan.Frames() > 0 {
		if err := writeMaster(files, o.Stages, profile, plan, format, o.User, plan.Frames()); err != nil {
			return res, err
		}
	}
	// One backend decodes every module: on a GPU one context, whose
	// streams the modules share, rather than contexts the GPU time-slices.
	backend, err := openBackend(o.Stages, profile, o.Log)
	if err != nil {
		return res, err
	}
	defer backend.Close()
	mo := o.Options
	mo.Backend = backend
	scans, err := openModules(files, mo, rp.times)
	if err != nil {
		return res, err
	}
	for i, scan := range scans {
		defer scan.Abort()
		if err := scan.Observe(o.Observer, o.ScanID, files.Modules[i].Module.ID); err != nil {
			return res, err
		}
		if err := scan.openLive(o.ScanID, files.Modules[i].Module.ID); err != nil {
			return res, err
		}
	}
	depth := demuxDepth
	if len(ids) == 1 { // no other module's pipeline to keep reading for
		depth = 1
	}
	d := pipeline.NewDemux(rp.src, ids, depth)
	srcErrs := make([]error, len(scans))
	var wg sync.WaitGroup
	for i, scan := range scans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := d.Module(ids[i])
			srcErrs[i] = scan.Run(ctx, m)
			m.Close()
		}()
	}
	if err := d.Run(ctx); errors.Is(err, capture.ErrTruncated) {
		o.Log.Warn("capture cut short", zap.Error(err))
	}
	wg.Wait()
	res.Notes = rp.dropped(d, scans)
	err = finishModules(&res, files, mo, scans, srcErrs)
	return res, err
}

// dropped says how many frames of modules the profile does not list were
// dropped; where a one-module replay wrote none, it says how to replay
// the module the capture holds.
func (rp *replayRun) dropped(d *pipeline.Demux, scans []*Module) []Note {
	n, first := d.Unknown()
	files := rp.o.Files
	switch {
	case n == 0:
		return nil
	case len(files.Modules) > 1:
		return []Note{{Kind: Dropped, Text: fmt.Sprintf("%d frames of modules the profile does not list (detector.modules) were dropped", n)}}
	}
	notes := []Note{{Kind: Dropped, Text: fmt.Sprintf("%d frames of modules other than the profile's module %d (detector.modules) were dropped",
		n, files.Modules[0].Module.ID)}}
	if scans[0].pipeline.Progress().Written == 0 {
		notes = append(notes, Note{Kind: Dropped, Text: fmt.Sprintf("to replay module %d of this capture, give a profile listing it, e.g. H5INGEST_DETECTOR_MODULES=\"[{id: %d}]\"",
			first, first)})
	}
	return notes
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
