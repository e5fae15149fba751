package scan

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"

	"h5ingest/receive"
)

// session is the receiving of one scan from a detector, written once for
// acquire (one module, or several senders on one listener) and for serve
// (one module, or several, each on a listener of its own): on each
// listener it accepts the senders of its modules, checks each hello and
// runs the module's scan into its file, one backend decoding them all;
// once the wait ends (every module connected, the connect timeout, a
// stop) it gives every module that never connected a file with every
// frame missing, notes why, waits for the scans and finishes their files
// and the master.
type session struct {
	a   *Acquisition
	sig *Stopper
	ls  []receive.Listener
	// modules are, by listener, the places in the scan's files of the
	// modules whose senders it takes.
	modules [][]int
	// hellos, where set (serve's listeners of one module each), say by
	// listener whether a sender passed the hello check after the
	// listener stopped (lateHello).
	hellos []*lateHello
	// masterFirst writes the master, where the files have one and the
	// plan is known, as the first module connects (acquire's), rather
	// than only once every module's file is closed.
	masterFirst bool
	// shown is told of the first module's scan, once it runs; started of
	// the scans so far, each time one starts. Either may be nil.
	shown   func(*Module)
	started func([]*Module)

	ctx    context.Context // the modules' pipelines
	cancel context.CancelFunc
	runs   *moduleRuns
	lates  []lateModules // by listener
	closed []func()      // run at close, last first

	mu        sync.Mutex
	connected int
	rec       *lockedRecorder
	failed    error // a module's scan that could not start
	waits     []error
	refusals  []string // why senders were refused, each once, the first few
	refusedN  int      // senders refused in all
}

// run receives the scan through the listeners and returns what it did
// and the worst of its modules' results. No file is written where no
// module connected.
func (s *session) run() (res Result, err error) {
	a := s.a
	o := &a.o
	defer s.close()
	s.ctx, s.cancel = context.WithCancel(s.sig.run)
	s.closed = append(s.closed, s.cancel)
	for _, l := range s.ls {
		s.closed = append(s.closed, func() { l.Close() })
		s.sig.addListener(l)
	}
	// One backend decodes every module: on a GPU one context, whose
	// streams the modules share, rather than contexts it time-slices.
	backend, err := openBackend(o.Stages, o.Profile, o.Log)
	if err != nil {
		return res, err
	}
	s.closed = append(s.closed, func() { backend.Close() })
	mo := o.Options
	mo.Backend = backend
	n := len(o.Files.Modules)
	s.runs = &moduleRuns{o: mo, obs: o.Observer, scanID: o.ScanID, scans: make([]*Module, n), errs: make([]error, n)}
	s.closed = append(s.closed, s.runs.abort)
	s.lates, s.waits = make([]lateModules, len(s.ls)), make([]error, len(s.ls))
	s.waiting()

	var wg sync.WaitGroup
	for i := range s.ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.receive(i)
		}()
	}
	wg.Wait()
	if s.failed != nil {
		if s.started != nil { // a module's scan that could not start fails them all
			s.started(nil)
		}
		return res, s.failed
	}
	if s.connected == 0 {
		err := s.waits[0]
		if errors.Is(err, ErrIncomplete) {
			err = Incomplete(fmt.Errorf("%w: no file written", err))
		}
		return res, err
	}
	absent, err := s.fillAbsent()
	if err != nil {
		return res, err
	}
	if len(absent) > 0 && a.o.Draining != nil {
		a.o.Draining()
	}
	s.runs.wg.Wait()
	refused, never := s.noteAbsent(&res, absent)
	s.runs.finished = true
	err = finishModules(&res, o.Files, mo, s.runs.scans, s.runs.errs)
	for i, scan := range s.runs.scans { // the capture keeps the files' start and end times
		s.rec.stamp(o.Files.Modules[i].Module.ID, scan)
	}
	res.Notes = append(res.Notes, s.refusalNotes()...)
	res.Notes = append(res.Notes, s.rec.finish()...)
	return res, explain(err, refused, never)
}

// maxRefusals bounds the reasons a scan's notes keep of the senders it
// refused: a flood of impostors cannot grow them.
const maxRefusals = 8

// refused notes a sender refused (another module's, another format's, a
// second for a module): the scan's notes say so, its frames are in no
// file.
func (s *session) refused(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refusedN++
	if why := err.Error(); len(s.refusals) < maxRefusals && !slices.Contains(s.refusals, why) {
		s.refusals = append(s.refusals, why)
	}
}

// refusalNotes returns a warning for each reason senders were refused.
func (s *session) refusalNotes() []Note {
	s.mu.Lock()
	defer s.mu.Unlock()
	var notes []Note
	for _, why := range s.refusals {
		notes = append(notes, Note{Kind: Warning, Text: "a sender was refused, its frames in no file: " + why})
	}
	if n := s.refusedN - len(s.refusals); n > 0 {
		notes = append(notes, Note{Kind: Warning, Text: fmt.Sprintf("%d more senders were refused for one of those reasons (the log has each)", n)})
	}
	return notes
}

// close gives back what run took, last first, its pipelines cancelled
// first where they still run (a run that failed).
func (s *session) close() {
	if s.cancel != nil {
		s.cancel()
	}
	for _, f := range slices.Backward(s.closed) {
		f()
	}
}

// waiting logs and notes where the session waits for the detector.
func (s *session) waiting() {
	var addrs []string
	for _, l := range s.ls {
		addrs = append(addrs, l.Addr())
	}
	ids := make([]int, len(s.a.o.Files.Modules))
	for i, f := range s.a.o.Files.Modules {
		ids[i] = f.Module.ID
	}
	s.a.o.Log.Info("waiting for the detector", zap.Ints("modules", ids), zap.Strings("addresses", addrs),
		zap.String("provider", s.a.o.Profile.Source.Provider))
	s.a.waiting(strings.Join(addrs, ", "))
}

// log returns the logger of listener i's senders.
func (s *session) log(i int) *zap.Logger {
	if len(s.ls) == 1 {
		return s.a.o.Log
	}
	return s.a.o.Log.With(zap.Int("module", s.a.o.Files.Modules[s.modules[i][0]].Module.ID))
}

// receive accepts listener i's senders until each of its modules has
// connected or the wait ends; a sender whose handshake was under way when
// it ended is taken (after a stop, stopped at once: the frames in its
// ring are written), any later one is refused at its hello.
func (s *session) receive(i int) {
	l, log, late := s.ls[i], s.log(i), &s.lates[i]
	for got := 0; got < len(s.modules[i]); got++ {
		stream, err := acceptSender(s.sig, l, log, late, s.refused)
		if err != nil && (got > 0 || s.sig.signal() != nil) {
			l.Stop(stoppedReason)
			if p := late.pending(l, log); p != nil {
				stream, err = p, nil
			} else if got > 0 {
				log.Warn("not every module connected", zap.Int("connected", got), zap.Int("modules", len(s.modules[i])), zap.Error(err))
			}
		}
		if err != nil {
			s.waits[i] = err
			return
		}
		if err := s.begin(stream, log); err != nil {
			stream.Close()
			s.mu.Lock()
			s.failed = errors.Join(s.failed, err)
			s.mu.Unlock()
			s.cancel()
			s.sig.Request(StopRequest{}) // the other listeners wait no more
			return
		}
	}
}

// begin runs the scan of a sender's module: the first to connect makes
// the master (acquire's, where the plan is known) and the --record
// capture, so that a scan interrupted while it waits leaves no file.
func (s *session) begin(stream receive.Stream, log *zap.Logger) error {
	o := &s.a.o
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = append(s.closed, func() { stream.Close() })
	s.sig.add(stream)
	hello := stream.Module()
	log.Info("module connected", zap.Uint16("module", hello.ID), zap.String("mode", hello.Mode),
		zap.Stringer("format", hello.Format), zap.Uint64("frames", hello.Frames))
	if n := o.Plan.Frames(); n > 0 && hello.Frames > 0 && hello.Frames != uint64(n) {
		log.Warn("the detector's frame count is not the plan's", zap.Uint64("detector", hello.Frames), zap.Int("plan", n))
	}
	if s.connected == 0 {
		if s.masterFirst && o.Files.Master != "" && o.Plan.Frames() > 0 {
			if err := writeMaster(o.Files, o.Stages, o.Profile, o.Plan, o.Format, o.User, o.Plan.Frames()); err != nil {
				return err
			}
		}
		rec, closeRec, err := s.a.openRecord(hello)
		if err != nil {
			return err
		}
		s.rec, s.runs.rec = rec, rec
		s.closed = append(s.closed, closeRec)
	}
	if s.rec != nil {
		stream.Record(s.rec)
	}
	if err := s.runs.start(s.ctx, o.Files, int(hello.ID), hello.Format, stream); err != nil {
		return fmt.Errorf("module %d: %w", hello.ID, err)
	}
	s.connected++
	if s.started != nil {
		s.started(slices.Clone(s.runs.scans))
	}
	if s.shown != nil && s.connected == 1 {
		i := slices.IndexFunc(s.runs.scans, func(m *Module) bool { return m != nil })
		s.shown(s.runs.scans[i])
	}
	return nil
}

// fillAbsent gives each module that never connected a file with every
// frame missing, and watches its listener for senders that come while the
// others drain: they are refused at their hello (the stop's reason) and
// named in the result. It returns the places of those modules.
func (s *session) fillAbsent() ([]int, error) {
	o := &s.a.o
	var absent []int
	s.mu.Lock()
	for i, f := range o.Files.Modules {
		if s.runs.scans[i] != nil {
			continue
		}
		absent = append(absent, i)
		if err := s.runs.start(s.ctx, o.Files, f.Module.ID, o.Format, emptySource{}); err != nil {
			s.mu.Unlock()
			s.cancel()
			return nil, fmt.Errorf("module %d: %w", f.Module.ID, err)
		}
	}
	if s.started != nil {
		s.started(slices.Clone(s.runs.scans))
	}
	s.mu.Unlock()
	for i, l := range s.ls {
		if !s.hasAbsent(i, absent) {
			continue
		}
		l.Stop(stoppedReason) // where the connect timeout, not a stop, ended its wait
		if s.hellos != nil {
			s.hellos[i].stopped.Store(true)
		}
		s.lates[i].watch(l, s.log(i))
	}
	return absent, nil
}

// hasAbsent reports whether listener i takes a module of absent.
func (s *session) hasAbsent(i int, absent []int) bool {
	return slices.ContainsFunc(s.modules[i], func(m int) bool { return slices.Contains(absent, m) })
}

// noteAbsent notes on res, for each module that never connected, whether
// its sender came after the stop and was refused or never came, and
// returns the ids of each kind.
func (s *session) noteAbsent(res *Result, absent []int) (refused, never []string) {
	o := &s.a.o
	late := map[uint16]bool{}
	seen := map[int]bool{} // by place: a hello passed the check after the listener stopped
	for i, l := range s.ls {
		if !s.hasAbsent(i, absent) {
			continue
		}
		s.lates[i].end()
		if p := s.lates[i].pending(l, s.log(i)); p != nil { // a handshake that beat the stop: too late all the same
			p.Close()
		}
		for id, r := range s.lates[i].end() {
			late[id] = late[id] || r
		}
		if s.hellos != nil && s.hellos[i].seen.Load() {
			for _, m := range s.modules[i] {
				seen[m] = true
			}
		}
	}
	for _, i := range absent {
		f := o.Files.Modules[i]
		id := f.Module.ID
		if late[uint16(id)] || seen[i] {
			if !late[uint16(id)] { // refused as the scan ended: the listener's word came too late
				o.Log.Warn("module connected after the stop and was refused", zap.Int("module", id))
			}
			refused = append(refused, strconv.Itoa(id))
			res.Notes = append(res.Notes, Note{Kind: Refused, Text: fmt.Sprintf("module %d connected after the stop and was refused: its frames are recorded missing in %s", id, f.Path)})
			continue
		}
		never = append(never, strconv.Itoa(id))
		res.Notes = append(res.Notes, Note{Kind: NeverConnected, Text: fmt.Sprintf("module %d never connected: its frames are recorded missing", id)})
	}
	return refused, never
}

// explain makes a scan that otherwise ended well, or only incomplete,
// incomplete for the modules refused after the stop or never connected,
// saying which.
func explain(err error, refused, never []string) error {
	if len(refused)+len(never) == 0 || err != nil && !errors.Is(err, ErrIncomplete) {
		return err
	}
	var why []string
	if len(refused) > 0 {
		why = append(why, fmt.Sprintf("module %s connected after the stop and was refused", strings.Join(refused, ", ")))
	}
	if len(never) > 0 {
		why = append(why, fmt.Sprintf("module %s never connected", strings.Join(never, ", ")))
	}
	whose := "its file"
	if len(refused)+len(never) > 1 {
		whose = "their files"
	}
	return Incomplete(fmt.Errorf("%s: every frame of %s is recorded missing", strings.Join(why, "; "), whose))
}
