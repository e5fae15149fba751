package scan

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"h5ingest/config"
	"h5ingest/pipeline"
	"h5ingest/receive"
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
func (r *Runner) nodeFiles(name string, profile config.Profile, files Files) (Files, error) {
	mods := profile.Detector.Modules
	if len(mods) > 1 && len(r.ModuleIDs) == 0 {
		return Files{}, fmt.Errorf("profile %s has %d modules, and this serve receives none in particular: its operator names the modules it receives (serve --modules)", name, len(mods))
	}
	if len(r.ModuleIDs) == 0 {
		return files, nil
	}
	if len(r.ModuleIDs) == 1 {
		return files.Only(r.ModuleIDs[0])
	}
	node := Files{Master: files.Master}
	for _, id := range r.ModuleIDs {
		one, err := files.Only(id)
		if err != nil {
			return Files{}, err
		}
		node.Modules = append(node.Modules, one.Modules[0])
	}
	if len(node.Modules) < len(files.Modules) {
		node.Master = "" // h5ingest master writes it, where every module file is seen
	}
	return node, nil
}

// moduleListenAddr returns the address the receiver of the first module of
// files listens on (ModuleAddr).
func moduleListenAddr(profile config.Profile, files Files) (string, error) {
	if len(files.Modules) == 0 {
		return "", errors.New("the scan has no module")
	}
	return ModuleAddr(profile, files.Modules[0].Module.ID)
}

// ModuleAddr returns the address the receiver of module id listens on in
// a serve: the profile's source.address and source.port, the port plus
// the module's index in detector.modules where the profile lists several.
func ModuleAddr(profile config.Profile, id int) (string, error) {
	src := profile.Source
	i := slices.IndexFunc(profile.Detector.Modules, func(m config.Module) bool { return m.ID == id })
	if i < 0 {
		return "", fmt.Errorf("module %d is not one of the profile's detector.modules", id)
	}
	port := src.Port + i
	if port > 65535 {
		return "", fmt.Errorf("module %d listens on source.port %d plus its index %d, past port 65535: lower source.port", id, src.Port, i)
	}
	return net.JoinHostPort(src.Address, strconv.Itoa(port)), nil
}

// armNode returns the scan of a serve that receives several modules,
// listening from now on each module's port (ModuleAddr); release gives
// back the files' locks. A port that cannot be listened on refuses the
// arm, with every listener opened closed.
func (r *Runner) armNode(a *Acquisition, profile config.Profile, files Files, release func()) (service.Scan, error) {
	var ls []receive.Listener
	closeAll := func() {
		for _, l := range ls {
			l.Close()
		}
	}
	late := make([]*lateHello, len(files.Modules))
	for i, f := range files.Modules {
		late[i] = &lateHello{}
		setup, err := a.moduleSetup(profile, f.Module.ID, late[i])
		if err == nil {
			var l receive.Listener
			if l, err = a.listen(setup); err == nil {
				ls = append(ls, l)
			}
		}
		if err != nil {
			closeAll()
			release()
			return nil, &service.RefusedError{Reasons: []string{fmt.Sprintf("module %d: %v", f.Module.ID, err)}}
		}
	}
	var mu sync.Mutex
	taken := false // Run took the listeners over
	s := &serveScan{a: a, profile: profile, files: files}
	s.release = sync.OnceFunc(func() {
		mu.Lock()
		if !taken {
			closeAll()
		}
		mu.Unlock()
		release()
	})
	return &nodeScan{serveScan: s, late: late, take: func() []receive.Listener {
		mu.Lock()
		defer mu.Unlock()
		if taken {
			return nil
		}
		taken = true
		return ls
	}}, nil
}

// lateHello tells whether module's sender said hello after its
// listener was stopped, and so was refused: the hello check sees it before
// the sender is told, where the listener's Accept may learn of it only
// after the scan has ended.
type lateHello struct {
	stopped atomic.Bool // the listener refuses every hello from now on
	seen    atomic.Bool // a hello of the module came since, and passed the checks
}

// moduleSetup returns the receiver setup of module id alone: on its own
// port, refusing any other module's sender. A hello that passes its checks
// after late.stopped is noted in late.
func (a *Acquisition) moduleSetup(profile config.Profile, id int, late *lateHello) (receive.Setup, error) {
	addr, err := ModuleAddr(profile, id)
	if err != nil {
		return receive.Setup{}, err
	}
	setup := a.setup
	setup.Addr, setup.Modules = addr, []int{id}
	check := a.setup.Check
	setup.Check = func(h receive.Module) error {
		if int(h.ID) != id {
			return fmt.Errorf("module %d sent to the port of module %d (%s): module K sends to source.port plus K's index in the profile's detector.modules", h.ID, id, addr)
		}
		if err := check(h); err != nil {
			return err
		}
		if late.stopped.Load() {
			late.seen.Store(true)
		}
		return nil
	}
	return setup, nil
}

// nodeScan is a scan of a serve that receives several modules: a
// listener, a connection, a pipeline and a file per module, one backend
// decoding them all, and the master file where the serve takes every
// module. It stops, cancels, releases and shows its storage and latest
// image (its first module's) as a scan of one module does.
type nodeScan struct {
	*serveScan
	take func() []receive.Listener // the listeners opened at the arming, once
	late []*lateHello              // by the module's place in the scan's files
}

// Planned returns the frames the plan holds for every module of the
// scan.
func (s *nodeScan) Planned() int { return s.a.o.Plan.Frames() * len(s.files.Modules) }

// Run receives every module of the scan, reporting its progress (the sum
// of the modules', each module's to a service.ModuleReporter, and the
// rates of all to a service.RateReporter) a few times a second, then verifies each file and the master. A module whose sender
// never connects gets a file with every frame missing, and the scan ends
// incomplete.
func (s *nodeScan) Run(ctx context.Context, rep service.Reporter) service.Result {
	defer s.release()
	ls := s.take()
	mr, _ := rep.(service.ModuleReporter)
	rr, _ := rep.(service.RateReporter)
	defer s.view.end() // the latest image, the first module's; rates are the modules' sum, here
	sig, end := s.begin(ctx)
	defer end()

	n := &nodeRun{a: s.a, ids: make([]int, len(s.files.Modules)), late: s.late}
	for i, f := range s.files.Modules {
		n.ids[i] = f.Module.ID
	}
	progressDone := make(chan struct{})
	var progressWG sync.WaitGroup
	progressWG.Add(1)
	go func() {
		defer progressWG.Done()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		var meter rateMeter
		for {
			select {
			case <-progressDone:
				return
			case <-t.C:
				if rr != nil {
					rr.Rates(meter.add(n.sum(func(m *Module) pipeline.Progress { return m.pipeline.Progress() }), time.Now()))
				}
				s.report(rep, mr, n.counts(s.a.o.Plan.Frames(), func(m *Module) service.Counts { return serviceCounts(m.pipeline.Progress()) }))
			}
		}
	}()
	scans, err := n.receive(sig, ls, s.view.shown)
	close(progressDone)
	progressWG.Wait()

	connected := slices.ContainsFunc(scans, func(m *Module) bool { return m != nil })
	res := result(ctx.Err() != nil, connected, err)
	res.Notes = serviceNotes(n.result)
	if !connected { // no module connected: no file
		planned := s.Planned()
		res.Counts = service.Counts{Planned: planned, Missing: planned}
		rep.Progress(res.Counts)
		return res
	}
	if rr != nil {
		rr.Rates(averageRates(n.sum(func(m *Module) pipeline.Progress { return m.progress })))
	}
	res.Counts = s.report(rep, mr, n.counts(s.a.o.Plan.Frames(), func(m *Module) service.Counts { return serviceCounts(m.progress) }))
	for i, f := range s.files.Modules {
		if scans[i] != nil {
			// Its .part where a file appeared at its final name.
			res.Files = append(res.Files, s.finalised(rep, scans[i].output, f.Module.ID))
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
func (s *serveScan) begin(ctx context.Context) (sig *Stopper, end func()) {
	sig = NewStopper(context.Background(), s.profile.Source.ConnectTimeout, nil)
	s.mu.Lock()
	s.sig = sig
	if s.stopped {
		sig.Request(StopRequest{})
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
func (s *serveScan) cancelling(ctx context.Context, sig *Stopper) (stop func()) {
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
	switch err := verifyPath(s.a.o.Stages, path); {
	case err == nil, errors.Is(err, ErrIncomplete):
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

// nodeRun is the receiving of the modules of a nodeScan.
type nodeRun struct {
	a    *Acquisition
	ids  []int        // the modules, in the order of the scan's files
	late []*lateHello // likewise

	mu    sync.Mutex
	scans []*Module // by the module's place in the scan's files, as they start

	result Result // what the scan did, once receive has returned
}

// counts returns each module's counts, by of its scan, or all planned
// frames pending (planned each) where its scan has not started.
func (n *nodeRun) counts(planned int, by func(*Module) service.Counts) []service.ModuleCounts {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]service.ModuleCounts, len(n.ids))
	for i, id := range n.ids {
		out[i] = service.ModuleCounts{Module: id, Counts: service.Counts{Planned: planned, Pending: planned}}
		if i < len(n.scans) && n.scans[i] != nil {
			out[i].Counts = by(n.scans[i])
			out[i].Link = n.scans[i].linkCounts()
		}
	}
	return out
}

// sum returns what rates are measured from of the modules' progress, by
// of each scan started: frames and bytes summed, the longest elapsed.
func (n *nodeRun) sum(by func(*Module) pipeline.Progress) pipeline.Progress {
	n.mu.Lock()
	defer n.mu.Unlock()
	var sum pipeline.Progress
	for _, m := range n.scans {
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

// receive takes a sender on each module's listener at once, each module
// into its pipeline and file as it connects (shown is told of the first),
// until every module has connected or the wait ends (the connect timeout,
// a stop): a session of a listener per module. It returns the modules'
// scans (all nil where none connected) and the worst of their results.
func (n *nodeRun) receive(sig *Stopper, ls []receive.Listener, shown func(*Module)) ([]*Module, error) {
	if len(ls) != len(n.ids) {
		for _, l := range ls {
			l.Close()
		}
		return nil, errors.New("the scan's listeners were given back before it ran")
	}
	places := make([][]int, len(ls))
	for i := range ls {
		places[i] = []int{i}
	}
	var scans []*Module
	s := &session{a: n.a, sig: sig, ls: ls, modules: places, hellos: n.late, shown: shown, started: func(m []*Module) {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.scans, scans = m, m
	}}
	res, err := s.run()
	n.result = res
	logNotes(n.a.o.Log, res)
	if scans == nil || s.failed != nil { // a module's scan that could not start fails them all
		scans = make([]*Module, len(ls))
	}
	return scans, err
}
