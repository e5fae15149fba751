package scan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/receive"
	"h5ingest/source/capture"
	"h5ingest/writer"
)

// AcquireOptions set up an acquire: the scan of a detector's modules,
// received over libfabric as they send.
type AcquireOptions struct {
	Options        // the scan of each module; Format is the profile's detector's
	Files   Files  // the scan's files (Files.Only for one module of several)
	Listen  string // ADDR:PORT to listen on; "": the profile's source.address and source.port
	// Record, where set, is a capture file that keeps every frame as it
	// arrived; ProfileName is the profile as the user named it, which the
	// capture records.
	Record, ProfileName string
	ScanID              string    // names the scan on the status page and the live stream
	Observer            *Observer // shows the scans; nil: none
	// ParamsFile and PeerFile, where set, are where a source set up out
	// of band (roce) writes its end of each module's link, and reads the
	// sender's (receive.Setup).
	ParamsFile, PeerFile string
	// Open, where set, opens the receiver in place of the source's
	// Listen, and checks the setup itself: a scan of serve's Station.
	Open func(receive.Setup) (receive.Listener, error)
	// OnScan, where set, is told of the scan of the first module to
	// connect once it is set up, before its first frame: the scan service
	// shows its rates and latest image.
	OnScan func(*Module)
	// OnModules, where set, is told of the modules' scans, by their place
	// in Files.Modules (nil where none has started), each time one starts
	// and once more when those that never connected have their files; it
	// is told nil where a module's scan could not start, which fails the
	// whole scan. The scan service counts each module's frames by them.
	OnModules func([]*Module)
	// Draining, where set, runs once the wait for senders has ended with
	// some module absent, while the modules that connected drain and the
	// absent ones' ports refuse late senders: the drain lasts at least as
	// long as it runs.
	Draining func()
}

// Acquisition is an acquire set up, before it listens: its files, the
// receiver's configuration and the pre-scan checks.
type Acquisition struct {
	o      AcquireOptions
	setup  receive.Setup
	checks Checks
	// open opens the receiver: the Listen of the source that
	// source.transport names.
	open      func(receive.Setup) (receive.Listener, error)
	addressed bool // the source listens on an address (registry.Source.Addressed)

	mu sync.Mutex
	l  receive.Listener // opened by Listen, until Run takes it over
	// each, where ListenEach opened them, are a listener per module, by
	// its place in the files, until Run takes them over; late says of
	// each whether a sender came after it stopped.
	each     []receive.Listener
	late     []*lateHello
	eachMode bool // ListenEach ran: Run receives through each
}

// NewAcquisition sets up an acquire as o says. Its errors wrap ErrUsage:
// the profile, the files or the receiver's settings disagree.
func NewAcquisition(o AcquireOptions) (*Acquisition, error) {
	profile, files := o.Profile, o.Files
	src := profile.Source
	addr := o.Listen
	if addr == "" {
		addr = net.JoinHostPort(src.Address, strconv.Itoa(src.Port))
	}
	format, err := profile.Detector.Format()
	if err != nil {
		return nil, Usage(err)
	}
	setup := receive.Setup{Source: src, Format: format, Addr: addr, Check: senderCheck(files, format), Log: o.Log,
		Frames: o.Plan.Frames(), ParamsFile: o.ParamsFile, PeerFile: o.PeerFile, InFlight: inFlight(o.Stages, profile)}
	for _, m := range files.Modules {
		setup.Modules = append(setup.Modules, m.Module.ID)
	}
	entry, err := listenerOf(o.Stages, profile)
	if err != nil {
		return nil, err
	}
	open := entry.Listen
	if o.Open != nil {
		open = o.Open
	} else if entry.Check != nil {
		if err := entry.Check(setup); err != nil {
			return nil, Usage(err)
		}
	}
	if err := recordClash(o.Record, files); err != nil {
		return nil, Usage(err)
	}
	if !entry.Addressed {
		addr = "" // no address, provider or libfabric ring to check
	}
	checks := acquireChecks(files, profile, o.Plan, src.Provider, addr)
	checks.Record, checks.Stages = o.Record, o.Stages
	o.Format = format
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Observer == nil {
		o.Observer = &Observer{}
	}
	return &Acquisition{o: o, setup: setup, checks: checks, open: open, addressed: entry.Addressed}, nil
}

// Checks returns the acquire's pre-scan checks.
func (a *Acquisition) Checks() Checks { return a.checks }

// Hold takes the locks of the scan's files and its capture, so that
// another scan of them is refused from now on, not this one later; the
// function it returns gives back those no file took over.
func (a *Acquisition) Hold() (release func(), err error) { return holdFiles(a.o.Files, a.o.Record) }

// Listen opens the detector's listener now, ahead of Run, which takes it
// over: the scan service listens from the arming, so that the port, and
// the descriptors a listener needs, are the scan's before anything else
// can take them. Close closes it where Run never ran.
func (a *Acquisition) Listen() error {
	l, err := a.listen(a.setup)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.l != nil {
		a.l.Close()
	}
	a.l = l
	return nil
}

// Close closes the listeners Listen or ListenEach opened, unless Run
// took them over.
func (a *Acquisition) Close() {
	a.mu.Lock()
	ls := a.each
	if a.l != nil {
		ls = append(ls, a.l)
	}
	a.l, a.each = nil, nil
	a.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
}

// listener returns the listener Listen opened, or a new one.
func (a *Acquisition) listener() (receive.Listener, error) {
	a.mu.Lock()
	l := a.l
	a.l = nil
	a.mu.Unlock()
	if l != nil {
		return l, nil
	}
	return a.listen(a.setup)
}

// listen opens a receiver's listener with the source's Listen, saying so
// where the process has run out of descriptors.
func (a *Acquisition) listen(setup receive.Setup) (receive.Listener, error) {
	l, err := a.open(setup)
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		return nil, fmt.Errorf("listen for the detector on %s: too many open files (the process has none left to open: raise its limit, ulimit -n, or close what holds them): %w", setup.Addr, err)
	}
	return l, err
}

// waiting tells Notify, where set, that the acquire waits on addr: for
// which modules, with which provider.
func (a *Acquisition) waiting(addr string) {
	ids := make([]string, len(a.o.Files.Modules))
	for i, m := range a.o.Files.Modules {
		ids[i] = strconv.Itoa(m.Module.ID)
	}
	which := "module " + strings.Join(ids, "")
	if len(ids) > 1 {
		which = "modules " + strings.Join(ids, ",")
	}
	how := ""
	if a.addressed {
		how = fmt.Sprintf(" (provider %s)", a.o.Profile.Source.Provider)
	}
	tell(a.o.Notify, Note{Kind: Waiting, Text: fmt.Sprintf("waiting for %s on %s%s", which, addr, how)})
}

// Run listens for the detector and writes the scan: one module, or every
// module of the files at once, each sender into its module's file as it
// connects (a session). stop ends it early (Stopper). It returns what the
// scan did, with the worst of its modules' results: nil when every planned
// frame is good, ErrIncomplete when some are not (the result's notes say
// why), a failure otherwise, with what was finished before it. A module
// that never connects gets a file with every frame missing; where none
// connects, no file is written.
//
// Where ListenEach opened a listener per module, Run takes a sender on
// each at once, and writes the master, where the files have one, once
// every module's file is closed.
func (a *Acquisition) Run(stop *Stopper) (Result, error) {
	a.mu.Lock()
	each, late, eachMode := a.each, a.late, a.eachMode
	a.each = nil
	a.mu.Unlock()
	if eachMode {
		if each == nil {
			return Result{}, errors.New("the scan's listeners were given back before it ran")
		}
		places := make([][]int, len(each))
		for i := range each {
			places[i] = []int{i}
		}
		s := &session{a: a, sig: stop, ls: each, modules: places, hellos: late, shown: a.o.OnScan, started: a.o.OnModules}
		return s.run()
	}
	l, err := a.listener()
	if err != nil {
		return Result{}, err
	}
	all := make([]int, len(a.o.Files.Modules))
	for i := range all {
		all[i] = i
	}
	s := &session{a: a, sig: stop, ls: []receive.Listener{l}, modules: [][]int{all}, masterFirst: true, shown: a.o.OnScan, started: a.o.OnModules}
	return s.run()
}

// recordClash refuses a --record capture named as one of the scan's
// files, their temporary names or their lock files: the capture and the
// file would be written over each other.
func recordClash(record string, files Files) error {
	if record == "" {
		return nil
	}
	rec, err := filepath.Abs(record)
	if err != nil {
		return fmt.Errorf("--record %s: %w", record, err)
	}
	paths := []string{files.Master}
	for _, m := range files.Modules {
		paths = append(paths, m.Path)
	}
	for _, p := range paths {
		if p == "" {
			continue
		}
		for _, name := range []string{p, writer.TempName(p), writer.LockName(p)} {
			if abs, err := filepath.Abs(name); err == nil && abs == rec {
				return fmt.Errorf("--record %s: that is the scan's file %s (or its temporary or lock file): give the capture a name of its own", record, p)
			}
		}
	}
	return nil
}

// holdFiles takes the locks of the scan's output files and of its
// --record capture (see writer.Hold) and returns what gives back those no
// file took over: two scans never write one capture either.
func holdFiles(files Files, record string) (func(), error) {
	var holds []*writer.Held
	release := func() {
		for _, h := range holds {
			h.Release()
		}
	}
	paths := []string{files.Master, record}
	for _, m := range files.Modules {
		paths = append(paths, m.Path)
	}
	for _, p := range paths {
		if p == "" {
			continue
		}
		h, err := writer.Hold(p)
		if err != nil {
			release()
			return nil, fmt.Errorf("pre-scan check: %w", err)
		}
		holds = append(holds, h)
	}
	return release, nil
}

// acceptSender waits for a sender whose handshake succeeds, logging the
// peers refused meanwhile (a bad peer never ends the wait), until the
// connect timeout or an interruption.
//
// A wait that times out while the process had run out of descriptors
// says so: a sender may have tried, and could not be taken. A sender
// refused because the scan had stopped is noted in late, where not nil;
// any other is told to refused, where not nil.
func acceptSender(sig *Stopper, l receive.Listener, log *zap.Logger, late *lateModules, refused func(error)) (receive.Stream, error) {
	var starved error // the last refusal for want of descriptors
	watch := watchDescriptors()
	defer watch.Stop()
	for {
		stream, err := l.Accept(sig.wait)
		switch {
		case late != nil && late.note(err, log):
			continue
		case errors.Is(err, receive.ErrRefused):
			log.Warn("sender refused", zap.Error(err))
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				starved = err
			}
			if refused != nil {
				refused(err)
			}
			continue
		case err != nil && sig.wait.Err() != nil && sig.signal() != nil:
			return nil, Incomplete(fmt.Errorf("interrupted (%v) while waiting for the detector on %s", sig.signal(), l.Addr()))
		case errors.Is(err, receive.ErrTimeout) && (starved != nil || watch.Stop()):
			return nil, fmt.Errorf("too many open files: the process ran out of descriptors while it waited for the detector, so a sender that connected could not be taken (raise its limit, ulimit -n, or close what holds them): %w", err)
		}
		return stream, err
	}
}

// Stopper ends an acquire in order: the first request (a person's Ctrl-C,
// SIGTERM, a stop request to the scan service) stops the waiting for
// senders and makes every stream take no frame that arrives later, while
// the frames already received are still decoded and written; a second
// stops the pipelines at once (their backlog is then recorded missing).
type Stopper struct {
	wait context.Context // waiting for senders: done on the first signal or at the connect timeout
	run  context.Context // the pipelines: done on the second signal

	cancelWait, cancelRun context.CancelFunc
	ch                    chan os.Signal
	done                  chan struct{}
	exited                sync.WaitGroup

	notify func(Note)

	mu        sync.Mutex
	sig       os.Signal
	streams   []receive.Stream
	listeners []receive.Listener
}

// stoppedReason is what a sender that connects after the first request
// is told.
const stoppedReason = "the scan has stopped"

// Notify makes the signals sigs requests (SIGINT and SIGTERM, for a
// command), until Close.
func (i *Stopper) Notify(sigs ...os.Signal) { signal.Notify(i.ch, sigs...) }

// NewStopper returns the stopper of an acquire under ctx (cancelling ctx
// stops it at once) whose wait for the detector ends at connectTimeout.
// notify, where not nil, is told of each request as it takes effect (a
// note of kind Interrupted), from the stopper's goroutine. Close it after
// the acquire.
func NewStopper(ctx context.Context, connectTimeout time.Duration, notify func(Note)) *Stopper {
	i := &Stopper{ch: make(chan os.Signal, 2), done: make(chan struct{}), notify: notify}
	i.run, i.cancelRun = context.WithCancel(ctx)
	i.wait, i.cancelWait = context.WithTimeout(i.run, connectTimeout)
	i.exited.Add(1)
	go i.loop()
	return i
}

// Request interrupts the scan as a signal would: the first request takes
// no more frames and writes those received, a second stops at once; why
// says what asked (a signal, StopRequest). Requests beyond the second are
// dropped.
func (i *Stopper) Request(why os.Signal) {
	select {
	case i.ch <- why:
	default:
	}
}

// StopRequest is the interruption a stop request makes, as a signal.
type StopRequest struct{}

// Signal implements os.Signal.
func (StopRequest) Signal() {}

// String implements os.Signal.
func (StopRequest) String() string { return "stop requested" }

func (i *Stopper) loop() {
	defer i.exited.Done()
	for n := 0; ; n++ {
		select {
		case <-i.done:
			return
		case s := <-i.ch:
			if n > 0 {
				tell(i.notify, Note{Kind: Interrupted, Text: fmt.Sprintf("%v again: stopping at once; frames not yet written are recorded missing", s)})
				i.cancelRun()
				continue
			}
			i.mu.Lock()
			i.sig = s
			streams := slices.Clone(i.streams)
			for _, l := range i.listeners {
				go l.Stop(stoppedReason)
			}
			i.mu.Unlock()
			if len(streams) > 0 {
				tell(i.notify, Note{Kind: Interrupted, Text: fmt.Sprintf("interrupted (%v): taking no more frames, writing those received (signal again to stop at once)", s)})
			}
			for _, st := range streams {
				st.Stop(i.cause(s))
			}
			i.cancelWait()
		}
	}
}

// cause is what a stream stopped by signal s ends with: an interruption,
// which the summary reports as such.
func (i *Stopper) cause(s os.Signal) error {
	return fmt.Errorf("interrupted (%v): %w", s, context.Canceled)
}

// add makes a stream stop on the first signal, at once where it came
// already.
func (i *Stopper) add(s receive.Stream) {
	i.mu.Lock()
	i.streams = append(i.streams, s)
	sig := i.sig
	i.mu.Unlock()
	if sig != nil {
		s.Stop(i.cause(sig))
	}
}

// addListener makes the listener refuse, from the first signal on, every
// sender at its hello: the scan has stopped.
func (i *Stopper) addListener(l receive.Listener) {
	i.mu.Lock()
	i.listeners = append(i.listeners, l)
	sig := i.sig
	i.mu.Unlock()
	if sig != nil {
		go l.Stop(stoppedReason)
	}
}

// signal returns the first signal caught, or nil.
func (i *Stopper) signal() os.Signal {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.sig
}

// Close stops the stopper and its catching of signals.
func (i *Stopper) Close() {
	signal.Stop(i.ch)
	close(i.done)
	i.exited.Wait()
	i.cancelWait()
	i.cancelRun()
}

// openRecord opens the --record capture, if one is asked for; its
// writer is safe to share between the streams of several modules. An
// existing file is replaced only when the profile says overwrite. The
// capture records the profile as --profile named it, or the built-in
// profile's name, and what a replay needs to write the scan's file: the
// plan, the merged profile, the geometry (scanMetadata).
func (a *Acquisition) openRecord(first receive.Module) (*lockedRecorder, func(), error) {
	o := &a.o
	profile, pl, log := o.Profile, o.Plan, o.Log
	if o.Record == "" {
		return nil, func() {}, nil
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if !profile.Output.Overwrite {
		flags |= os.O_EXCL
	}
	file, err := os.OpenFile(o.Record, flags, 0o666)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, nil, fmt.Errorf("record: capture file %s exists (give --overwrite to replace it)", o.Record)
		}
		return nil, nil, fmt.Errorf("record: %w", err)
	}
	name := o.ProfileName
	if name == "" {
		name = profile.Name
	}
	meta, err := captureMetadata("acquire", name, profile, pl, time.Now())
	if err != nil {
		file.Close()
		return nil, nil, fmt.Errorf("record %s: %w", o.Record, err)
	}
	if first.HeadersWritten {
		if meta.Extra == nil {
			meta.Extra = map[string]json.RawMessage{}
		}
		meta.Extra[headersKey] = json.RawMessage(headersWritten)
	}
	// Room for each module's start and end (capture.KeyScanTimes),
	// written as its file is made and closed.
	times := make([]capture.ScanTime, len(o.Files.Modules))
	for i, m := range o.Files.Modules {
		times[i] = capture.WidestScanTime(m.Module.ID)
	}
	if err := meta.Set(capture.KeyScanTimes, times); err != nil {
		file.Close()
		return nil, nil, fmt.Errorf("record %s: %w", o.Record, err)
	}
	w, err := capture.NewWriter(file, meta)
	if err != nil {
		file.Close()
		return nil, nil, fmt.Errorf("record %s: %w", o.Record, err)
	}
	for i, m := range o.Files.Modules {
		times[i] = capture.ScanTime{Module: m.Module.ID}
	}
	r := &lockedRecorder{w: w, path: o.Record, log: log, meta: meta, times: times}
	if err := r.rewrite(); err != nil {
		file.Close()
		return nil, nil, fmt.Errorf("record %s: %w", o.Record, err)
	}
	return r, func() { file.Close() }, nil
}

// headersKey and headersWritten mark a capture whose frame headers the
// receiver wrote, for a sender of bare payloads.
const (
	headersKey     = "frame_headers"
	headersWritten = `"written by the receiver: the sender wrote bare payloads; frame numbers are its immediate data, timestamps the receiver's clock, payload CRCs those of the bytes it read"`
)

// lockedRecorder is a capture writer that several streams record into,
// interleaving their frames as they arrive. A failed write stops the
// recording with a warning, never the scan: the capture is cut there.
type lockedRecorder struct {
	mu     sync.Mutex
	w      *capture.Writer
	path   string
	log    *zap.Logger
	failed error
	meta   capture.Metadata
	times  []capture.ScanTime // the modules' files' times, in meta
}

// stamp records in the capture's metadata the times that module id's
// file records (Module.Times): its start once it is made, its end once
// it is closed, so that a replay writes the same. It does nothing on a
// nil recorder or one that failed; a failed rewrite stops the recording.
func (r *lockedRecorder) stamp(id int, scan *Module) {
	if r == nil || scan == nil {
		return
	}
	start, end := scan.Times()
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.IndexFunc(r.times, func(t capture.ScanTime) bool { return t.Module == id })
	if r.failed != nil || i < 0 {
		return
	}
	r.times[i].Start, r.times[i].End = start.UTC(), end.UTC()
	if err := r.rewrite(); err != nil {
		r.fail(err)
	}
}

// rewrite writes the metadata again, with the times as they stand, in
// the room NewWriter left (openRecord).
func (r *lockedRecorder) rewrite() error {
	if err := r.meta.Set(capture.KeyScanTimes, r.times); err != nil {
		return err
	}
	return r.w.RewriteMetadata(r.meta)
}

// WriteRecord appends one frame as it arrived.
func (r *lockedRecorder) WriteRecord(rec []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed != nil {
		return r.failed
	}
	if err := r.w.WriteRecord(rec); err != nil {
		r.fail(err)
		return err
	}
	return nil
}

// fail stops the recording; r.mu is held.
func (r *lockedRecorder) fail(err error) {
	r.failed = err
	r.log.Warn("recording stopped, the scan goes on: the capture is cut here",
		zap.String("file", r.path), zap.Int64("frames_before", r.w.Records()), zap.Error(err))
}

// finish flushes the capture and returns a warning that says where a
// failed recording stopped. It does nothing on a nil recorder.
func (r *lockedRecorder) finish() []Note {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed == nil {
		if err := r.w.Close(); err != nil {
			r.fail(err)
		}
	}
	if r.failed == nil {
		return nil
	}
	return []Note{{Kind: Warning, Text: fmt.Sprintf("--record stopped (%v): %s is cut short, with at most %d whole frames; the scan's file is not affected",
		r.failed, r.path, r.w.Records())}}
}

// acquireChecks returns the pre-scan checks of an acquire writing files.
func acquireChecks(files Files, profile config.Profile, plan plan.Plan, provider, addr string) Checks {
	pre := Checks{Master: files.Master, Frames: plan.Frames(), Provider: provider, Addr: addr, Profile: profile}
	if format, err := profile.Detector.Format(); err == nil {
		pre.FrameBytes = format.ImageSize()
	}
	for _, m := range files.Modules {
		pre.Files = append(pre.Files, m.Path)
	}
	return pre
}

// lateModules takes the senders of a multi-module acquire that come after
// its stop: those whose handshake was under way are taken, the later ones
// refused (the listener's Stop) and remembered for the summary.
type lateModules struct {
	mu      sync.Mutex
	refused map[uint16]bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// pending returns a sender whose handshake finished before the
// listener's Stop and that Accept has not returned yet; nil when there is
// none. Senders refused meanwhile are noted.
func (lm *lateModules) pending(l receive.Listener, log *zap.Logger) receive.Stream {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for {
		stream, err := l.Accept(done)
		switch {
		case err == nil:
			return stream
		case lm.note(err, log):
		case errors.Is(err, receive.ErrRefused):
			log.Warn("sender refused", zap.Error(err))
		default:
			return nil // none left
		}
	}
}

// note remembers a sender refused because the scan had stopped, and says
// whether err was one.
func (lm *lateModules) note(err error, log *zap.Logger) bool {
	var late *receive.StoppedError
	if !errors.As(err, &late) {
		return false
	}
	log.Warn("module connected after the stop and was refused", zap.Uint16("module", late.Module))
	lm.mu.Lock()
	defer lm.mu.Unlock()
	if lm.refused == nil {
		lm.refused = map[uint16]bool{}
	}
	lm.refused[late.Module] = true
	return true
}

// watch takes the listener's handshakes in the background until end,
// noting the senders refused.
func (lm *lateModules) watch(l receive.Listener, log *zap.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	lm.cancel, lm.done = cancel, make(chan struct{})
	go func() {
		defer close(lm.done)
		for ctx.Err() == nil {
			stream, err := l.Accept(ctx)
			switch {
			case stream != nil: // a handshake that beat the stop: too late all the same
				stream.Close()
			case err == nil, lm.note(err, log):
			case errors.Is(err, receive.ErrRefused):
				log.Warn("sender refused", zap.Error(err))
			case errors.Is(err, receive.ErrTimeout):
			default:
				return
			}
		}
	}()
}

// end stops watching and returns the modules refused after the stop.
func (lm *lateModules) end() map[uint16]bool {
	if lm.cancel != nil {
		lm.cancel()
		<-lm.done
	}
	lm.mu.Lock()
	defer lm.mu.Unlock()
	return lm.refused
}

// senderCheck refuses a sender of a module the scan does not take, or one
// announcing another frame format than the profile's detector, whose ring
// would not be the one the profile sized.
func senderCheck(files Files, format frame.Format) func(receive.Module) error {
	var ids []string
	want := map[uint16]bool{}
	for _, m := range files.Modules {
		want[uint16(m.Module.ID)] = true
		ids = append(ids, strconv.Itoa(m.Module.ID))
	}
	return func(m receive.Module) error {
		switch {
		case !want[m.ID]:
			return fmt.Errorf("module %d is not one this receiver takes (modules %s)", m.ID, strings.Join(ids, ", "))
		case m.Format != format:
			return fmt.Errorf("frame format %v: this receiver expects %v (profile keys detector.*)", m.Format, format)
		}
		return nil
	}
}

// moduleRuns are the scans of the modules of an acquire, running.
type moduleRuns struct {
	o        Options   // every module's scan; its Backend decodes them all
	obs      *Observer // shows every module
	scanID   string
	wg       sync.WaitGroup
	scans    []*Module // by the module's place in the scan's files
	errs     []error   // what stopped each scan's source
	finished bool
	rec      *lockedRecorder // the --record capture; nil for none
}

// start creates module id's scan and runs it from src in the background.
func (m *moduleRuns) start(ctx context.Context, files Files, id int, format frame.Format, src pipeline.Source) error {
	i := slices.IndexFunc(files.Modules, func(f File) bool { return f.Module.ID == id })
	o := m.o
	o.Format, o.Log = format, o.Log.With(zap.Int("module", id))
	o.Quiet = o.Quiet || slices.ContainsFunc(m.scans, func(s *Module) bool { return s != nil })
	scan, err := Open(files.Modules[i].Path, o)
	if err != nil {
		return err
	}
	m.scans[i] = scan
	if err := scan.Observe(m.obs, m.scanID, id); err != nil {
		return err
	}
	if err := scan.openLive(m.scanID, id); err != nil {
		return err
	}
	m.rec.stamp(id, scan)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.errs[i] = scan.Run(ctx, src)
		if st, ok := src.(receive.Stream); ok {
			stats := st.Stats()
			o.Log.Info("stream ended", zap.Uint64("frames", stats.Frames), zap.Uint64("bytes", stats.Bytes),
				zap.Duration("held_back", stats.HeldBack), zap.Duration("sender_held_back", stats.SenderHeldBack), zap.NamedError("reason", m.errs[i]))
		}
	}()
	return nil
}

// abort waits for the scans still running (their context is cancelled
// first) and closes the files that finish did not.
func (m *moduleRuns) abort() {
	m.wg.Wait()
	if m.finished {
		return
	}
	for _, s := range m.scans {
		if s != nil {
			s.Abort()
		}
	}
}
