package serve

import (
	"context"
	"errors"
	"fmt"
	"h5ingest/config"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/receive"
	"h5ingest/registry"
	"h5ingest/scan"
	"h5ingest/service"
	"h5ingest/writer"
	"io/fs"
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
//
// A request reaches only what the operator allowed: its profile is a
// built-in one or a file of Profiles; it sets only the keys of
// service.Overrides over it; its files go to the profile's output
// directory, or to one under DataRoot it names; and it never replaces a
// file, whatever the profile says of output.overwrite.
type Runner struct {
	// Profiles is the directory of the profile files a request may name,
	// besides the built-in profiles; "" for none.
	Profiles string
	// DataRoot is the directory under which a request may choose its
	// output directory (output.directory); "" for none: the profile's
	// directory stands. CreateDirs lets a request's directory be created.
	DataRoot   string
	CreateDirs bool
	// ModuleIDs are the detector modules this node receives, in a profile
	// of several (see nodeFiles); none where profiles have one.
	ModuleIDs []int
	// Stream is every scan's live stream, over the profile's; "" for the
	// profile's (none where it has none).
	Stream   string
	Log      *zap.Logger
	Observer *scan.Observer     // the status page and metrics every scan shows on (scan.NewServingObserver)
	Stages   *registry.Registry // the stages a request's profile may name
	GPU      *GPUGuard          // what a scan does once the GPU is lost (serve --on-gpu-lost); nil: its profile's backend stands
	// Station is the links set up at start-up (OpenStation) of a source
	// whose links are static; scans of that source listen through it.
	Station       receive.Station
	stationSource string // the source.transport Station serves
}

// Prepare loads the request's profile with its overrides, plan and
// metadata on top, runs acquire's pre-scan checks, and takes what the
// scan needs from its arming: its files' locks and the detector's port,
// listened on from now, so that nothing that opens later (a storm of
// HTTP clients) can keep the detector out. ctx is checked between the
// steps; Release gives back what it took.
func (r *Runner) Prepare(ctx context.Context, req service.ArmRequest) (service.Scan, error) {
	if r.Stages == nil {
		return nil, errNoRegistry
	}
	refuse := func(err error) error { return &service.RefusedError{Reasons: []string{requestReason(err)}} }
	// The API's schema allows only one path element in each; checked
	// again here, whatever decoded the request.
	if err := config.CheckScanID(req.ScanID); err != nil {
		return nil, refuse(fmt.Errorf("scan_id: %w", err))
	}
	if req.Output != "" && !onePathElement(req.Output) {
		return nil, refuse(fmt.Errorf("output %q: want one file name in the output directory: no / or \\, and not . or .. alone", req.Output))
	}
	profile, pl, err := r.load(req)
	if err == nil { // the backend: once the GPU is lost, as serve --on-gpu-lost says
		profile, err = r.GPU.profile(req.ScanID, profile, r.Stages)
	}
	if err != nil {
		return nil, refuse(err)
	}
	user, err := userMetadata(req.UserMetadata)
	if err != nil {
		return nil, refuse(err)
	}
	names := scan.Names{ScanID: req.ScanID}
	if req.Output != "" {
		names.Output = filepath.Join(profile.Output.Directory, req.Output)
	}
	files, err := scan.NewFiles(profile, names)
	if err == nil {
		files, err = r.nodeFiles(req.Profile, profile, files)
	}
	var addr string // module K's port: source.port plus K's index
	if err == nil {
		addr, err = moduleListenAddr(profile, files)
	}
	if err != nil {
		return nil, refuse(err)
	}
	log := r.Log.With(zap.String("scan", req.ScanID))
	open, err := r.stationOpen(profile)
	if err != nil {
		return nil, refuse(err)
	}
	format, _ := profile.Detector.Format() // NewAcquisition checks it
	s := &serveScan{profile: profile, files: files, plan: pl, log: log, stages: r.Stages}
	a, err := scan.NewAcquisition(scan.AcquireOptions{
		Options: scan.Options{Profile: profile, Plan: pl, Format: format, User: user, Log: log, Stages: r.Stages},
		Files:   files, Listen: addr, ScanID: req.ScanID, Observer: r.Observer, Open: open,
		OnScan: s.view.shown, OnModules: s.view.started, Draining: modulesDraining,
	})
	if err != nil {
		return nil, refuse(err)
	}
	s.a = a
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The checks' warnings (the readers' of the codec) go to the log.
	if err := a.Checks().Run(func(n scan.Note) { logNotes(log, scan.Result{Notes: []scan.Note{n}}) }); err != nil {
		var failed *scan.ChecksError
		if !errors.As(err, &failed) {
			return nil, refuse(err)
		}
		reasons := make([]string, len(failed.Failures))
		for i, e := range failed.Failures {
			reasons[i] = requestReason(e)
		}
		return nil, &service.RefusedError{Reasons: reasons}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The files are this scan's from its arming: another scan of them is
	// refused, not this one once the detector sent.
	release, err := a.Hold()
	if err != nil {
		return nil, refuse(err)
	}
	r.Observer.Armed(req.ScanID) // the page and /metrics show this scan, not the last, from its arming
	if len(files.Modules) > 1 {
		return armNode(s, release)
	}
	if err := a.Listen(); err != nil {
		release()
		return nil, refuse(err)
	}
	s.release = sync.OnceFunc(func() { a.Close(); release() })
	return s, nil
}

// onePathElement reports whether name is one element of a path, the
// same on every system: not empty, not . or .., without a separator or
// NUL.
func onePathElement(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\\\x00")
}

// requestReason says why a request was refused, in the request's terms
// where the command's would name its flags.
func requestReason(err error) string {
	var exists *scan.ExistsError
	switch {
	case errors.As(err, &exists) && exists.Temp != "":
		return fmt.Sprintf("%s exists: the temporary file of a scan to %s that did not finish; no request replaces a file: give the scan another scan_id or output", exists.Temp, exists.Path)
	case errors.As(err, &exists):
		return fmt.Sprintf("%s %s exists, and no request replaces a file: give the scan another scan_id or output", exists.What, exists.Path)
	}
	return scan.Explain(err).Error()
}

// load returns the profile a request asks for: a built-in profile or a
// file of --profiles, with the request's overrides, plan and metadata as
// the layer the command line is elsewhere, each named as the request
// field that gave it.
func (r *Runner) load(req service.ArmRequest) (config.Profile, plan.Plan, error) {
	ref := req.Profile
	if !slices.Contains(config.BuiltinNames(), ref) {
		if r.Profiles == "" || strings.ContainsAny(ref, `/\`) || ref == "." || ref == ".." {
			return config.Profile{}, plan.Plan{}, fmt.Errorf("profile %q: not a built-in profile (h5ingest profiles list)%s", ref, profilesHint(r.Profiles))
		}
		ref = r.profilePath(ref) // name, name.yaml or name.yml
		if fi, err := os.Stat(ref); err != nil || !fi.Mode().IsRegular() {
			return config.Profile{}, plan.Plan{}, fmt.Errorf("profile %q: neither built in nor a file of the profiles directory", req.Profile)
		}
	}
	flags := map[string]config.FlagValue{
		// Never from a request, whatever the profile says.
		"output.overwrite": {Value: false, From: "the scan service, which never replaces a file,"},
	}
	if r.Stream != "" {
		flags["stream.address"] = config.FlagValue{Value: r.Stream, From: "the scan service's live stream"}
	}
	set := func(key, field string, v any) { flags[key] = config.FlagValue{Value: v, From: "request " + field} }
	requestDir := false
	for _, k := range req.Overrides.Keys() {
		v := k.Value
		if k.Key == "output.directory" {
			dir, err := r.outputDir(v.(string))
			if err != nil {
				return config.Profile{}, plan.Plan{}, fmt.Errorf("%s: %w", k.Field, err)
			}
			v, requestDir = dir, true
		}
		set(k.Key, k.Field, v)
	}
	if p := req.Plan; p != nil {
		set("plan.darks", "plan.darks", p.Darks)
		set("plan.flats", "plan.flats", p.Flats)
		set("plan.projections", "plan.projections", p.Projections)
		set("plan.sequence", "plan.sequence", p.Sequence)
		// An angle given, 0 included, is the request's.
		if p.AngleStart != nil {
			set("plan.angle_start", "plan.angle_start", *p.AngleStart)
		}
		if p.AngleEnd != nil {
			set("plan.angle_end", "plan.angle_end", *p.AngleEnd)
		}
	}
	for _, m := range []struct{ key, field, v string }{
		{"metadata.title", "title", req.Title}, {"metadata.sample", "sample", req.Sample},
		{"metadata.experiment_identifier", "experiment_identifier", req.ExperimentID},
	} {
		if m.v != "" {
			set(m.key, m.field, m.v)
		}
	}
	p, _, err := config.LoadLayers(config.Layers{Profile: ref, Flags: flags, Names: r.Stages.Names()})
	if err != nil {
		return config.Profile{}, plan.Plan{}, err
	}
	// With a data root, a profile's relative directory (every built-in
	// profile's is ".") lies under it, not in serve's working directory.
	if r.DataRoot != "" && !requestDir && !filepath.IsAbs(p.Output.Directory) {
		dir, err := r.outputDir(p.Output.Directory)
		if err != nil {
			return config.Profile{}, plan.Plan{}, fmt.Errorf("output.directory %q of profile %s: %w", p.Output.Directory, req.Profile, err)
		}
		p.Output.Directory = dir
	}
	pl, err := p.Plan.Plan()
	return p, pl, err
}

// outputDir returns the directory a request's output.directory names,
// symbolic links resolved: dir from the data root, or an absolute path
// within it. A directory that does not exist is created where CreateDirs
// allows; one outside the data root, or reached through a link that
// leads out of it, is refused.
func (r *Runner) outputDir(dir string) (string, error) {
	if r.DataRoot == "" {
		return "", errors.New("this serve takes no output directory from a request (it has no data root): the profile's directory stands")
	}
	root, err := filepath.EvalSymlinks(r.DataRoot)
	if err != nil {
		return "", fmt.Errorf("the data root: %w", err)
	}
	path := dir
	if !filepath.IsAbs(path) {
		path = filepath.Join(root, path)
	}
	path = filepath.Clean(path)
	// Lexically first, so that nothing is created outside.
	if !within(root, path) && !within(filepath.Clean(r.DataRoot), path) {
		return "", fmt.Errorf("%q is not under the data root %s", dir, r.DataRoot)
	}
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) {
		if !r.CreateDirs {
			return "", fmt.Errorf("%q does not exist under the data root %s, and this serve creates no directory", dir, r.DataRoot)
		}
		real, err = r.createDir(root, path)
	}
	if err != nil {
		return "", err
	}
	if !within(root, real) {
		return "", fmt.Errorf("%q leads out of the data root %s (to %s, through a symbolic link)", dir, r.DataRoot, real)
	}
	if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%q is not a directory", dir)
	}
	return real, nil
}

// createDir creates path, which lies lexically under the data root root,
// from its deepest existing parent, once that parent, links resolved, is
// found to lie under root too; it returns the directory made.
func (r *Runner) createDir(root, path string) (string, error) {
	parent, rest := path, ""
	for {
		if _, err := os.Lstat(parent); err == nil {
			break
		}
		rest = filepath.Join(filepath.Base(parent), rest)
		parent = filepath.Dir(parent)
	}
	real, err := filepath.EvalSymlinks(parent)
	if err != nil {
		return "", err
	}
	if !within(root, real) {
		return "", fmt.Errorf("%s leads out of the data root %s (to %s, through a symbolic link)", parent, r.DataRoot, real)
	}
	made := filepath.Join(real, rest)
	if err := os.MkdirAll(made, 0o755); err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(made)
}

// within reports whether path is root or lies under it (both clean).
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// profilesHint says where profile files may come from.
func profilesHint(dir string) string {
	if dir == "" {
		return "; this serve takes no profile files"
	}
	return fmt.Sprintf(" nor a file name in %s", dir)
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
	a       *scan.Acquisition
	profile config.Profile
	files   scan.Files
	plan    plan.Plan
	log     *zap.Logger
	stages  *registry.Registry
	release func() // gives up the files' locks and the detector's port, held from the arming; once

	mu      sync.Mutex
	sig     *scan.Stopper
	stopped bool

	view scanView // its rates, latest image and storage, as the service shows them
}

// Planned returns the frames the scan's plan holds for the module (0:
// not known), which the service counts pending from the arming.
func (s *serveScan) Planned() int { return s.plan.Frames() }

// Release gives back the files' locks and the detector's port of a scan
// that will not run.
func (s *serveScan) Release() { s.release() }

// Stop drains the scan as a first Ctrl-C drains an acquire.
func (s *serveScan) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	s.log.Info("stop requested: the scan takes no more frames, writes those that arrived and records the rest missing")
	if s.sig != nil {
		s.sig.Request(scan.StopRequest{})
	}
}

// CancelWrite bounds how long a cancelled scan of the service goes on
// writing the frames that had arrived (those in its ring) before it
// closes its file; the frames still unwritten then are discarded,
// counted (Counts.Discarded) and logged at warning level. A ring holds a
// second or two of a module's frames.
var CancelWrite = 5 * time.Second

// cancel ends the scan for a cancel request: it takes no more frames (a
// stop, unless one came before) and writes those that arrived, for up to
// CancelWrite; then it stops at once. It returns what ends the wait.
func (s *serveScan) cancel(sig *scan.Stopper) (stop func() bool) {
	s.mu.Lock()
	first := !s.stopped
	s.stopped = true
	s.mu.Unlock()
	s.log.Warn("cancel requested: the scan takes no more frames and closes its file with those that arrived", zap.Duration("cancel_write", CancelWrite))
	if first {
		sig.Request(CancelRequest{})
	}
	return time.AfterFunc(CancelWrite, func() { sig.Request(CancelRequest{}) }).Stop
}

// CancelRequest is the interruption a cancel request makes, as a signal.
type CancelRequest struct{}

// Signal implements os.Signal.
func (CancelRequest) Signal() {}

// String implements os.Signal.
func (CancelRequest) String() string { return "cancel requested" }

// progressInterval is how often a running scan reports its progress.
const progressInterval = 250 * time.Millisecond

// reportEvery calls report every interval on a goroutine of its own until
// the stop it returns is called, which waits for the goroutine to end.
func reportEvery(interval time.Duration, report func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				report()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// Run acquires the scan, reporting its progress a few times a second, and
// verifies its file. Cancelling ctx cancels the scan (see CancelWrite): it
// ends Cancelled, without an error unless the file failed.
func (s *serveScan) Run(ctx context.Context, rep service.Reporter) service.Result {
	defer s.release()
	mr, _ := rep.(service.ModuleReporter)
	rep = s.view.reporting(rep)
	defer s.view.end()
	sig, end := s.begin(ctx)
	defer end()

	stopReports := reportEvery(progressInterval, func() {
		if m := s.view.current(); m != nil { // the detector has connected
			s.progress(rep, mr, m, serviceCounts(m.Progress()))
		}
	})
	done, err := s.a.Run(sig)
	logNotes(s.log, done)
	stopReports()
	mod := s.view.current()

	if d := writer.Detail(err); d != "" {
		s.log.Debug("hdf5 error stack", zap.String("stack", d))
	}
	err = scan.ExplainAt(err, filepath.Dir(s.files.Modules[0].Path))
	res := result(ctx.Err() != nil, mod != nil, err)
	res.Notes = serviceNotes(done)
	if mod == nil { // no detector connected: no file
		n := s.Planned()
		res.Counts = service.Counts{Planned: n, Missing: n}
		rep.Progress(res.Counts)
		return res
	}
	res.Counts = serviceCounts(mod.FinalProgress())
	s.progress(rep, mr, mod, res.Counts)
	file := service.File{Path: mod.Path(), Module: s.files.Modules[0].Module.ID}
	switch verr := verifyPath(s.stages, mod.Path()); {
	case verr == nil, errors.Is(verr, scan.ErrIncomplete):
		file.Verified = true
	default:
		file.Error = verr.Error()
	}
	rep.FileFinalised(file)
	res.Files = []service.File{file}
	return res
}

// progress reports the scan's counts c, with its module's to mr where its
// link has counts of its own (a front end that never waits).
func (s *serveScan) progress(rep service.Reporter, mr service.ModuleReporter, m *scan.Module, c service.Counts) {
	if link := linkCounts(m); link != nil && mr != nil {
		mr.ModuleProgress([]service.ModuleCounts{{Module: s.files.Modules[0].Module.ID, Counts: c, Link: link}})
	}
	rep.Progress(c)
}

// linkCounts returns what module m's link received, as the service
// counts it, where its front end never waits for the receiver; nil
// otherwise, or before its Run.
func linkCounts(m *scan.Module) *service.LinkCounts {
	st, ok := m.LinkStats()
	if !ok {
		return nil
	}
	c := &service.LinkCounts{Received: int(st.Frames), Overrun: int(st.Overrun), Gaps: int(st.Gaps), Damaged: int(st.Damaged),
		Disordered: int(st.Disordered), RingSlots: st.RingSlots}
	if st.RingSlots > 0 {
		c.RingFill = float64(st.RingUsed) / float64(st.RingSlots)
	}
	return c
}

// result returns how a scan of the service ended, from whether it was
// cancelled, whether a detector connected (a file was written) and the
// acquire's error: a cancelled scan is Cancelled with no error, unless
// its file failed; an incomplete one says why where the acquire did.
func result(cancelled, connected bool, err error) service.Result {
	failed := err != nil && !errors.Is(err, scan.ErrIncomplete)
	switch {
	case failed:
		res := service.Result{State: service.Failed, Error: err.Error()}
		if oe := (*scan.OperatorError)(nil); errors.As(err, &oe) {
			res.ErrorKind, res.Remedy = oe.Kind, oe.Remedy
		}
		return res
	case cancelled:
		return service.Result{State: service.Cancelled}
	case !connected && err != nil: // stopped while waiting for the detector
		return service.Result{State: service.Cancelled, Error: err.Error()}
	case !connected:
		return service.Result{State: service.Failed, Error: "no detector connected"}
	case err == nil:
		return service.Result{State: service.Done}
	case err == scan.ErrIncomplete:
		return service.Result{State: service.Incomplete}
	}
	return service.Result{State: service.Incomplete, Error: err.Error()}
}

// logNotes logs the notes of a scan's result at warning level, each with
// its kind and, where it is a module's, the module: the service's scans
// say in its log what a command's say on the terminal.
func logNotes(log *zap.Logger, res scan.Result) {
	for _, n := range res.Notes {
		log.Warn("scan note", zap.Stringer("kind", n.Kind), zap.String("note", n.Text))
	}
	for _, m := range res.Modules {
		for _, n := range m.Notes {
			log.Warn("scan note", zap.Int("module", m.Module), zap.Stringer("kind", n.Kind), zap.String("note", n.Text))
		}
	}
	if res.Master != nil {
		for _, n := range res.Master.Notes {
			log.Warn("scan note", zap.String("master", res.Master.Path), zap.Stringer("kind", n.Kind), zap.String("note", n.Text))
		}
	}
}

// serviceNotes returns the notes of a scan's result as the service
// shows them: the scan's, each module's with its id, the master's.
func serviceNotes(res scan.Result) []service.Note {
	var notes []service.Note
	add := func(module *int, ns []scan.Note) {
		for _, n := range ns {
			notes = append(notes, service.Note{Kind: n.Kind.String(), Module: module, Text: n.Text})
		}
	}
	add(nil, res.Notes)
	for _, m := range res.Modules {
		add(&m.Module, m.Notes)
	}
	if res.Master != nil {
		add(nil, res.Master.Notes)
	}
	return notes
}

// serviceCounts returns a pipeline's progress as the service counts it:
// rejected as the file records it (a frame of the plan that could not be
// decoded), so that ok, crc_mismatch, rejected and missing add up to the
// plan, as the file's records, the summary and /metrics have them;
// frames beyond the plan are dropped with the duplicates.
func serviceCounts(p pipeline.Progress) service.Counts {
	return service.Counts{
		Planned: p.Planned, Received: p.Received, Written: p.Written, OK: p.OK,
		Pending: p.Pending, Missing: p.Missing,
		CRCMismatch: p.CRCMismatch, Rejected: p.Rejected,
		Dropped: p.Duplicate + p.Overflow + p.OutOfRange, Discarded: p.Discarded,
	}
}
