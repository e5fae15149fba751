package scan

import (
	"context"
	"errors"
	"fmt"
	"h5ingest/config"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/service"
	"h5ingest/writer"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Runner prepares the scans a scan service (package service) arms:
// acquires of the node's module.
type Runner struct {
	// Profiles is the directory of the profile files a request may name,
	// besides the built-in profiles; "" for none.
	Profiles string
	// Module is the detector module this node receives, in a profile of
	// several; -1 where profiles have one.
	Module int
	// Stream is every scan's live stream, unless its request sets
	// stream.address; "" for none.
	Stream   string
	Log      *zap.Logger
	Observer *Observer          // the status page and metrics every scan shows on (NewServingObserver)
	Stages   *registry.Registry // the stages a request's profile may name
}

// Prepare loads the request's profile with its overrides, plan and
// metadata on top, and runs acquire's pre-scan checks.
func (r *Runner) Prepare(req service.ArmRequest) (service.Scan, error) {
	if r.Stages == nil {
		return nil, errNoRegistry
	}
	profile, pl, err := r.load(req)
	if err != nil {
		return nil, &service.RefusedError{Reasons: []string{err.Error()}}
	}
	user, err := userMetadata(req.UserMetadata)
	if err != nil {
		return nil, &service.RefusedError{Reasons: []string{err.Error()}}
	}
	if len(profile.Detector.Modules) > 1 && r.Module < 0 {
		return nil, &service.RefusedError{Reasons: []string{fmt.Sprintf(
			"profile %s has %d modules: a serve receives one (--module N), one serve per module node", req.Profile, len(profile.Detector.Modules))}}
	}
	names := Names{ScanID: req.ScanID}
	if req.Output != "" {
		names.Output = filepath.Join(profile.Output.Directory, req.Output)
	}
	files, err := NewFiles(profile, names)
	if err == nil && r.Module >= 0 {
		files, err = files.Only(r.Module)
	}
	if err != nil {
		return nil, &service.RefusedError{Reasons: []string{err.Error()}}
	}
	log := r.Log.With(zap.String("scan", req.ScanID))
	format, _ := profile.Detector.Format() // NewAcquisition checks it
	a, err := NewAcquisition(AcquireOptions{
		Options: Options{Profile: profile, Plan: pl, Format: format, User: user, Log: log, Stages: r.Stages},
		Files:   files, ScanID: req.ScanID, Observer: r.Observer,
	})
	if err != nil {
		return nil, &service.RefusedError{Reasons: []string{err.Error()}}
	}
	if fails := a.Checks().Failures(io.Discard); len(fails) > 0 {
		reasons := make([]string, len(fails))
		for i, e := range fails {
			reasons[i] = e.Error()
		}
		return nil, &service.RefusedError{Reasons: reasons}
	}
	// The files are this scan's from its arming: another scan of them is
	// refused, not this one once the detector sent.
	release, err := a.Hold()
	if err != nil {
		return nil, &service.RefusedError{Reasons: []string{err.Error()}}
	}
	return &serveScan{a: a, profile: profile, files: files, release: release}, nil
}

// load returns the profile a request asks for: a built-in profile or a
// file of --profiles, with the request's overrides, plan and metadata as
// the layer the command line is elsewhere.
func (r *Runner) load(req service.ArmRequest) (config.Profile, plan.Plan, error) {
	ref := req.Profile
	if !slices.Contains(config.BuiltinNames(), ref) {
		if r.Profiles == "" || strings.ContainsAny(ref, `/\`) || ref == "." || ref == ".." {
			return config.Profile{}, plan.Plan{}, fmt.Errorf("profile %q: not a built-in profile (h5ingest profiles list)%s", ref, profilesHint(r.Profiles))
		}
		ref = r.profilePath(ref) // name, name.yaml or name.yml
		if _, err := os.Stat(ref); err != nil {
			return config.Profile{}, plan.Plan{}, fmt.Errorf("profile %q: neither built in nor a file of the profiles directory", req.Profile)
		}
	}
	flags := map[string]config.FlagValue{}
	set := func(key string, v any) { flags[key] = config.FlagValue{Flag: "request " + key, Value: v} }
	if r.Stream != "" {
		set("stream.address", r.Stream)
	}
	for k, v := range req.Overrides {
		set(k, jsonValue(v))
	}
	if p := req.Plan; p != nil {
		set("plan.darks", p.Darks)
		set("plan.flats", p.Flats)
		set("plan.projections", p.Projections)
		set("plan.sequence", p.Sequence)
		if p.AngleStart != 0 || p.AngleEnd != 0 {
			set("plan.angle_start", p.AngleStart)
			set("plan.angle_end", p.AngleEnd)
		}
	}
	for key, v := range map[string]string{"metadata.title": req.Title, "metadata.sample": req.Sample, "metadata.experiment_identifier": req.ExperimentID} {
		if v != "" {
			set(key, v)
		}
	}
	p, _, err := config.LoadLayers(config.Layers{Profile: ref, Flags: flags, Names: r.Stages.Names()})
	if err != nil {
		return config.Profile{}, plan.Plan{}, err
	}
	pl, err := p.Plan.Plan()
	return p, pl, err
}

// profilesHint says where profile files may come from.
func profilesHint(dir string) string {
	if dir == "" {
		return "; this serve takes no profile files (--profiles DIR)"
	}
	return fmt.Sprintf(" nor a file name in %s", dir)
}

// jsonValue turns a JSON number that is whole into an int, as a profile
// file's integer would decode.
func jsonValue(v any) any {
	if x, ok := v.(float64); ok && x == math.Trunc(x) && math.Abs(x) < 1<<53 {
		return int(x)
	}
	return v
}

// userMetadata checks the keys of the request's user metadata, nested
// objects' too, before anything is written.
func userMetadata(m map[string]any) (map[string]any, error) {
	var check func(m map[string]any) error
	check = func(m map[string]any) error {
		for k, v := range m {
			if err := writer.CheckMetadataKey(k); err != nil {
				return fmt.Errorf("user_metadata: %w", err)
			}
			if sub, ok := v.(map[string]any); ok {
				if err := check(sub); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return m, check(m)
}

// serveScan is one armed scan of the service: an acquire of the node's
// module.
type serveScan struct {
	a       *Acquisition
	profile config.Profile
	files   Files
	release func() // gives up the files' locks, held from the arming

	mu      sync.Mutex
	sig     *Stopper
	stopped bool

	view scanView // its rates, latest image and storage, as the service shows them
}

// Planned returns the frames the scan's plan holds for the module (0:
// not known), which the service counts pending from the arming.
func (s *serveScan) Planned() int { return s.a.o.Plan.Frames() }

// Stop drains the scan as a first Ctrl-C drains an acquire.
func (s *serveScan) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	if s.sig != nil {
		s.sig.Request(StopRequest{})
	}
}

// Run acquires the scan, reporting its progress a few times a second, and
// verifies its file.
func (s *serveScan) Run(ctx context.Context, rep service.Reporter) service.Result {
	defer s.release()
	rep = s.view.reporting(rep)
	defer s.view.end()
	sig := NewStopper(ctx, s.profile.Source.ConnectTimeout, nil)
	defer sig.Close()
	s.mu.Lock()
	s.sig = sig
	if s.stopped {
		sig.Request(StopRequest{})
	}
	s.mu.Unlock()

	var scan *Module
	progressDone := make(chan struct{})
	var progressWG sync.WaitGroup
	s.a.o.OnScan = func(r *Module) {
		scan = r
		s.view.shown(r)
		progressWG.Add(1)
		go func() {
			defer progressWG.Done()
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-progressDone:
					return
				case <-t.C:
					rep.Progress(serviceCounts(r.pipeline.Progress(), r.pipeline.Frames()))
				}
			}
		}()
	}
	_, err := s.a.One(sig)
	close(progressDone)
	progressWG.Wait()

	res := service.Result{State: service.Done}
	switch {
	case ctx.Err() != nil:
		res.State = service.Cancelled
	case err == nil:
	case errors.Is(err, ErrIncomplete):
		res.State = service.Incomplete
	default:
		res.State = service.Failed
	}
	if err != nil && !errors.Is(err, ErrIncomplete) || err != nil && err != ErrIncomplete {
		res.Error = err.Error()
	}
	if scan == nil { // no detector connected: no file
		switch {
		case res.State == service.Incomplete: // stopped while waiting
			res.State = service.Cancelled
		case res.State == service.Done:
			res.State = service.Failed
		}
		if res.Error == "" {
			res.Error = "no detector connected"
		}
		return res
	}
	res.Counts = serviceCounts(scan.progress, scan.pipeline.Frames())
	rep.Progress(res.Counts)
	file := service.File{Path: scan.output, Module: s.files.Modules[0].Module.ID}
	switch verr := verifyPath(scan.output); {
	case verr == nil, errors.Is(verr, ErrIncomplete):
		file.Verified = true
	default:
		file.Error = verr.Error()
	}
	rep.FileFinalised(file)
	res.Files = []service.File{file}
	return res
}

// serviceCounts returns a pipeline's progress as the service counts it.
func serviceCounts(p pipeline.Progress, frames int) service.Counts {
	return service.Counts{
		Planned: frames, Received: p.Received, Written: p.Written, OK: p.OK, Missing: p.Missing,
		CRCMismatch: p.CRCMismatch, Rejected: p.Rejected + p.OutOfRange,
		Dropped: p.Duplicate + p.Overflow,
	}
}
