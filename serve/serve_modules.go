package serve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"h5ingest/config"
	"h5ingest/pipeline"
	"h5ingest/scan"
	"h5ingest/service"
)

// A serve receives the modules its operator names (serve --modules) in
// one process: one API, one arm for all of them, one decode backend, a
// listener per module and a file per module. Module K of a profile of
// several modules listens on the profile's source.port plus K's index in
// its detector.modules, whichever modules the serve takes, so that the
// serves of one host, each with modules of its own, never share a port.
// A serve that takes every module of the profile writes the master file
// when the scan ends; one that takes some leaves it to h5ingest master.

// nodeFiles returns the files of a scan that this serve writes, of all
// the profile's: a profile of one module has its file (the serve's
// module, where it names one, must be that one); of a profile of several,
// the files of the serve's modules, with the master where they are every
// module of the profile.
func (r *Runner) nodeFiles(name string, profile config.Profile, files scan.Files) (scan.Files, error) {
	mods := profile.Detector.Modules
	if len(mods) > 1 && len(r.ModuleIDs) == 0 {
		return scan.Files{}, fmt.Errorf("profile %s has %d modules, and this serve receives none in particular: its operator names the modules it receives (serve --modules)", name, len(mods))
	}
	if len(r.ModuleIDs) == 0 {
		return files, nil
	}
	if len(r.ModuleIDs) == 1 {
		return files.Only(r.ModuleIDs[0])
	}
	node := scan.Files{Master: files.Master}
	for _, id := range r.ModuleIDs {
		one, err := files.Only(id)
		if err != nil {
			return scan.Files{}, err
		}
		node.Modules = append(node.Modules, one.Modules[0])
	}
	if len(node.Modules) < len(files.Modules) {
		node.Master = "" // h5ingest master writes it, where every module file is seen
	}
	return node, nil
}

// moduleListenAddr returns the address the receiver of the first module of
// files listens on (scan.ModuleAddr).
func moduleListenAddr(profile config.Profile, files scan.Files) (string, error) {
	if len(files.Modules) == 0 {
		return "", errors.New("the scan has no module")
	}
	return scan.ModuleAddr(profile, files.Modules[0].Module.ID)
}

// armNode returns the scan s of a serve that receives several modules,
// listening from now on each module's port (scan.ModuleAddr); release gives
// back the files' locks. A port that cannot be listened on refuses the
// arm, with every listener opened closed.
func armNode(s *serveScan, release func()) (service.Scan, error) {
	if err := s.a.ListenEach(); err != nil {
		release()
		return nil, &service.RefusedError{Reasons: []string{err.Error()}}
	}
	s.release = sync.OnceFunc(func() { s.a.Close(); release() })
	return &nodeScan{serveScan: s}, nil
}

// nodeScan is a scan of a serve that receives several modules: a
// listener, a connection, a pipeline and a file per module, one backend
// decoding them all, and the master file where the serve takes every
// module. It stops, cancels, releases and shows its storage and latest
// image (its first module's) as a scan of one module does.
type nodeScan struct{ *serveScan }

// Planned returns the frames the plan holds for every module of the
// scan.
func (s *nodeScan) Planned() int { return s.plan.Frames() * len(s.files.Modules) }

// Run receives every module of the scan, reporting its progress (the sum
// of the modules', each module's to a service.ModuleReporter, and the
// rates of all to a service.RateReporter) a few times a second, then verifies each file and the master. A module whose sender
// never connects gets a file with every frame missing, and the scan ends
// incomplete.
func (s *nodeScan) Run(ctx context.Context, rep service.Reporter) service.Result {
	defer s.release()
	mr, _ := rep.(service.ModuleReporter)
	rr, _ := rep.(service.RateReporter)
	defer s.view.end() // the latest image, the first module's; rates are the modules' sum, here
	sig, end := s.begin(ctx)
	defer end()

	ids := make([]int, len(s.files.Modules))
	for i, f := range s.files.Modules {
		ids[i] = f.Module.ID
	}
	planned := s.plan.Frames()
	var meter rateMeter
	stopReports := reportEvery(progressInterval, func() {
		scans := s.view.modules()
		if rr != nil {
			rr.Rates(meter.add(sumProgress(scans, (*scan.Module).Progress), time.Now()))
		}
		s.report(rep, mr, moduleCounts(ids, planned, scans, func(m *scan.Module) service.Counts { return serviceCounts(m.Progress()) }))
	})
	done, err := s.a.Run(sig)
	logNotes(s.log, done)
	stopReports()

	scans := s.view.modules()
	if len(scans) != len(ids) { // none started, or a module's scan that could not start failed them all
		scans = make([]*scan.Module, len(ids))
	}
	connected := slices.ContainsFunc(scans, func(m *scan.Module) bool { return m != nil })
	res := result(ctx.Err() != nil, connected, err)
	res.Notes = serviceNotes(done)
	if !connected { // no module connected: no file
		planned := s.Planned()
		res.Counts = service.Counts{Planned: planned, Missing: planned}
		rep.Progress(res.Counts)
		return res
	}
	if rr != nil {
		rr.Rates(averageRates(sumProgress(scans, (*scan.Module).FinalProgress)))
	}
	res.Counts = s.report(rep, mr, moduleCounts(ids, planned, scans, func(m *scan.Module) service.Counts { return serviceCounts(m.FinalProgress()) }))
	for i, f := range s.files.Modules {
		if scans[i] != nil {
			// Its .part where a file appeared at its final name.
			res.Files = append(res.Files, s.finalised(rep, scans[i].Path(), f.Module.ID))
		}
	}
	if s.files.Master != "" && fileExists(s.files.Master) {
		res.Files = append(res.Files, s.finalised(rep, s.files.Master, -1))
	}
	return res
}

// begin opens the scan's stopper, applies a stop asked before Run, and
// makes the cancelling of ctx cancel the scan until end is called, which
// then closes the stopper.
func (s *serveScan) begin(ctx context.Context) (sig *scan.Stopper, end func()) {
	sig = scan.NewStopper(context.Background(), s.profile.Source.ConnectTimeout, nil)
	s.mu.Lock()
	s.sig = sig
	if s.stopped {
		sig.Request(scan.StopRequest{})
	}
	s.mu.Unlock()
	stopCancel := s.cancelling(ctx, sig)
	return sig, func() {
		stopCancel()
		sig.Close()
	}
}

// cancelling makes the cancelling of ctx cancel the scan (see
// CancelWrite), until the function it returns is called.
func (s *serveScan) cancelling(ctx context.Context, sig *scan.Stopper) (stop func()) {
	var (
		mu    sync.Mutex
		timer func() bool
	)
	stopCancel := context.AfterFunc(ctx, func() {
		t := s.cancel(sig)
		mu.Lock()
		timer = t
		mu.Unlock()
	})
	return func() {
		stopCancel()
		mu.Lock()
		defer mu.Unlock()
		if timer != nil {
			timer()
		}
	}
}

// report reports counts, the sum of the modules', with each module's to
// mr where it is not nil, and returns the sum.
func (s *nodeScan) report(rep service.Reporter, mr service.ModuleReporter, mods []service.ModuleCounts) service.Counts {
	var sum service.Counts
	for _, m := range mods {
		sum = addCounts(sum, m.Counts)
	}
	if mr != nil {
		mr.ModuleProgress(mods)
	}
	rep.Progress(sum)
	return sum
}

// finalised verifies the file at path, of module (-1: the master),
// reports it and returns it.
func (s *nodeScan) finalised(rep service.Reporter, path string, module int) service.File {
	file := service.File{Path: path, Module: module}
	switch err := verifyPath(s.stages, path); {
	case err == nil, errors.Is(err, scan.ErrIncomplete):
		file.Verified = true
	default:
		file.Error = err.Error()
	}
	rep.FileFinalised(file)
	return file
}

// addCounts returns the sum of two scans' counts.
func addCounts(a, b service.Counts) service.Counts {
	return service.Counts{
		Planned: a.Planned + b.Planned, Received: a.Received + b.Received, Written: a.Written + b.Written,
		OK: a.OK + b.OK, Pending: a.Pending + b.Pending, Missing: a.Missing + b.Missing,
		CRCMismatch: a.CRCMismatch + b.CRCMismatch, Rejected: a.Rejected + b.Rejected,
		Dropped: a.Dropped + b.Dropped, Discarded: a.Discarded + b.Discarded,
	}
}

// modulesDraining, where a test sets it, runs while the modules that
// connected drain and the ports of those that did not are watched for
// late senders: it holds the drain open for as long as it runs.
var modulesDraining func()

// moduleCounts returns each module's counts (ids, in the order of the
// scan's files), by of its scan, or all planned frames pending (planned
// each) where its scan has not started.
func moduleCounts(ids []int, planned int, scans []*scan.Module, by func(*scan.Module) service.Counts) []service.ModuleCounts {
	out := make([]service.ModuleCounts, len(ids))
	for i, id := range ids {
		out[i] = service.ModuleCounts{Module: id, Counts: service.Counts{Planned: planned, Pending: planned}}
		if i < len(scans) && scans[i] != nil {
			out[i].Counts = by(scans[i])
			out[i].Link = linkCounts(scans[i])
		}
	}
	return out
}

// sumProgress returns what rates are measured from of the modules'
// progress, by of each scan started: frames and bytes summed, the
// longest elapsed.
func sumProgress(scans []*scan.Module, by func(*scan.Module) pipeline.Progress) pipeline.Progress {
	var sum pipeline.Progress
	for _, m := range scans {
		if m == nil {
			continue
		}
		p := by(m)
		sum.Received += p.Received
		sum.Written += p.Written
		sum.RawBytes += p.RawBytes
		sum.StoredBytes += p.StoredBytes
		sum.Elapsed = max(sum.Elapsed, p.Elapsed)
	}
	return sum
}
