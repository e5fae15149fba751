package main

import (
	"context"
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

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/source/capture"
	"h5ingest/source/fabric"
	"h5ingest/writer"
)

// acquireFlags are the flags of acquire beyond the scan's.
type acquireFlags struct {
	scan   scanFlags
	listen string
	record string
	module int // --module: the one module to take; -1 for every module
	// onScan, where set, is told of the scan once it is set up, before
	// its first frame: the scan service follows its progress.
	onScan func(*scanRun)
	// observe, where set, shows the scan instead of the --metrics and
	// --report of scan: the scan service's page and metrics.
	observe *observeFlags
}

func newAcquireCmd() *cobra.Command {
	var f acquireFlags
	cmd := &cobra.Command{
		Use:   "acquire --listen ADDR:PORT -o OUT.h5",
		Short: "Receive a scan from a detector module over RDMA (libfabric) and write it to HDF5",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return acquire(cmd.Context(), &f)
		},
	}
	f.scan.register(cmd.Flags())
	fs := cmd.Flags()
	d := config.Default()
	fs.StringVar(&f.listen, "listen", "", fmt.Sprintf("address to listen on, ADDR:PORT (default: the profile's source.address and source.port, %s:%d)", d.Source.Address, d.Source.Port))
	fs.String("provider", d.Source.Provider, "libfabric provider: verbs (RoCE, InfiniBand) or tcp")
	f.scan.bindKey("provider", "source.provider")
	fs.Int("slots", d.Source.RingSlots, "frame slots in the receive ring: frames the detector may have in flight")
	f.scan.bindKey("slots", "source.ring_slots")
	fs.Duration("connect-timeout", d.Source.ConnectTimeout, "how long to wait for the detector to connect")
	f.scan.bindKey("connect-timeout", "source.connect_timeout")
	fs.Duration("idle-timeout", d.Source.IdleTimeout, "how long a silence mid-scan ends it")
	f.scan.bindKey("idle-timeout", "source.idle_timeout")
	fs.String("output-dir", d.Output.Directory, "directory for the output file, named by --name (instead of -o)")
	f.scan.bindKey("output-dir", "output.directory")
	fs.String("name", d.Output.Template, "output file name template in --output-dir: {scan} scan id, {date} YYYYMMDD, {module} module id")
	f.scan.bindKey("name", "output.template")
	fs.StringVar(&f.record, "record", "", "also keep every frame as it arrived in this capture file (.pmcap)")
	fs.IntVar(&f.module, "module", -1, "take this module's stream only (a receiver per module); default: every module of the profile")
	return cmd
}

func acquire(ctx context.Context, f *acquireFlags) error {
	s := &f.scan
	if s.output != "" && s.fs.Changed("output-dir") {
		return usageError(errors.New("give -o or --output-dir, not both"))
	}
	profile, plan, err := s.load()
	if err != nil {
		return err
	}
	setup, err := newAcquireSetup(f, profile, plan)
	if err != nil {
		return err
	}
	if err := setup.pre.run(); err != nil {
		return err
	}
	// The files are this scan's from now on, while it waits for the
	// detector: another scan of them is refused, not this one later.
	release, err := holdFiles(setup.files, f.record)
	if err != nil {
		return err
	}
	defer release()
	log, err := s.logger()
	if err != nil {
		return err
	}
	defer log.Sync()
	// The status page is up while the detector is awaited.
	if _, err := s.observe.start(log); err != nil {
		return err
	}
	defer s.observe.stopUnused()
	sig := catchInterrupts(ctx, profile.Source.ConnectTimeout)
	defer sig.stop()
	if len(setup.files.modules) > 1 {
		return acquireModules(sig, f, profile, plan, setup.files, setup.cfg, log)
	}
	_, err = acquireOne(sig, f, profile, plan, setup.files, setup.cfg, log)
	return err
}

// acquireSetup is what an acquire settles before it listens: the files it
// writes, the receiver's configuration and the pre-scan checks.
type acquireSetup struct {
	files scanFiles
	cfg   fabric.Config
	pre   preScan
}

// newAcquireSetup returns the setup of an acquire of profile and plan.
// Its errors are usage errors.
func newAcquireSetup(f *acquireFlags, profile config.Profile, plan plan.Plan) (acquireSetup, error) {
	s := &f.scan
	files, err := s.scanFiles(profile, time.Now())
	if err != nil {
		return acquireSetup{}, err
	}
	if f.module >= 0 {
		if files, err = files.only(f.module); err != nil {
			return acquireSetup{}, err
		}
	}
	src := profile.Source
	addr := f.listen
	if addr == "" {
		addr = net.JoinHostPort(src.Address, strconv.Itoa(src.Port))
	}
	cfg := fabric.Config{
		Provider: src.Provider, Addr: addr, Slots: src.RingSlots,
		ConnectTimeout: src.ConnectTimeout, IdleTimeout: src.IdleTimeout,
		MaxRingBytes: int64(src.RingMaxBytes),
	}
	mode, err := fabric.ParseMode(src.Mode)
	if err != nil {
		return acquireSetup{}, usageError(fmt.Errorf("key source.mode: %w", err))
	}
	format, err := profile.Detector.Format()
	if err != nil {
		return acquireSetup{}, usageError(err)
	}
	if ring := int64(src.RingSlots) * int64(frame.HeaderSize+format.PayloadSize()); ring > int64(src.RingMaxBytes) {
		return acquireSetup{}, usageError(fmt.Errorf("keys source.ring_slots and source.ring_max_bytes: a ring of %d slots of %d-byte frames takes %d bytes, more than the %d allowed",
			src.RingSlots, frame.HeaderSize+format.PayloadSize(), ring, src.RingMaxBytes))
	}
	cfg.Check = senderCheck(files, mode, format)
	if err := cfg.Validate(); err != nil {
		return acquireSetup{}, usageError(err)
	}
	if err := recordClash(f.record, files); err != nil {
		return acquireSetup{}, usageError(err)
	}
	pre := acquireChecks(files, profile, plan, src.Provider, addr)
	pre.record = f.record
	return acquireSetup{files: files, cfg: cfg, pre: pre}, nil
}

// acquireOne receives the scan of one module, the only one of files, and
// returns the scan written (nil where none began) with the command's
// result.
func acquireOne(sig *interrupts, f *acquireFlags, profile config.Profile, plan plan.Plan, files scanFiles, cfg fabric.Config, log *zap.Logger) (*scanRun, error) {
	s := &f.scan
	src := profile.Source
	out := files.modules[0].path

	l, err := fabric.Listen(cfg)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	log.Info("waiting for the detector", zap.Stringer("address", l.Addr()), zap.String("provider", src.Provider))
	stream, err := acceptSender(sig, l, log)
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	sig.add(stream)
	hello := stream.Hello()
	log.Info("detector connected", zap.Uint16("module", hello.Module), zap.Stringer("mode", hello.Mode),
		zap.Stringer("format", hello.Format), zap.Uint64("frames", hello.Frames))
	if plan.Frames() > 0 && hello.Frames > 0 && hello.Frames != uint64(plan.Frames()) {
		log.Warn("the detector's frame count is not the plan's", zap.Uint64("detector", hello.Frames), zap.Int("plan", plan.Frames()))
	}

	rec, closeRec, err := openRecord(f, profile, plan, log)
	if err != nil {
		return nil, err
	}
	defer closeRec()
	if rec != nil {
		stream.Record(rec)
	}

	scan, err := newScan(out, profile, plan, hello.Format, s.user, nil, log)
	if err != nil {
		return nil, err
	}
	defer scan.abort()
	if f.onScan != nil {
		f.onScan(scan)
	}
	obs := &s.observe
	if f.observe != nil {
		obs = f.observe
	}
	if err := scan.observe(obs, s.scanID, int(hello.Module)); err != nil {
		return scan, err
	}
	if err := scan.openLive(s.scanID, int(hello.Module)); err != nil {
		return scan, err
	}
	scan.stream = stream
	srcErr := scan.run(sig.run, stream)
	st := stream.Stats()
	log.Info("stream ended", zap.Uint64("frames", st.Frames), zap.Uint64("bytes", st.Bytes),
		zap.Duration("held_back", st.HeldBack), zap.Duration("sender_held_back", st.SenderHeldBack), zap.NamedError("reason", srcErr))
	rec.finish()
	return scan, scan.finish(srcErr)
}

// recordClash refuses a --record capture named as one of the scan's
// files, their temporary names or their lock files: the capture and the
// file would be written over each other.
func recordClash(record string, files scanFiles) error {
	if record == "" {
		return nil
	}
	rec, err := filepath.Abs(record)
	if err != nil {
		return fmt.Errorf("--record %s: %w", record, err)
	}
	paths := []string{files.master}
	for _, m := range files.modules {
		paths = append(paths, m.path)
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
func holdFiles(files scanFiles, record string) (func(), error) {
	var holds []*writer.Held
	release := func() {
		for _, h := range holds {
			h.Release()
		}
	}
	paths := []string{files.master, record}
	for _, m := range files.modules {
		paths = append(paths, m.path)
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
func acceptSender(sig *interrupts, l *fabric.Listener, log *zap.Logger) (*fabric.Stream, error) {
	for {
		stream, err := l.Accept(sig.wait)
		switch {
		case errors.Is(err, fabric.ErrRefused):
			log.Warn("sender refused", zap.Error(err))
			continue
		case err != nil && sig.wait.Err() != nil && sig.signal() != nil:
			return nil, &exitError{code: exitIncomplete,
				err: fmt.Errorf("interrupted (%v) while waiting for the detector on %s: no file written", sig.signal(), l.Addr())}
		}
		return stream, err
	}
}

// interrupts turns SIGINT and SIGTERM into a scan's orderly end: the first
// stops the waiting for senders and makes every stream take no frame that
// arrives later, while the frames already received are still decoded and
// written; a second stops the pipelines at once (their backlog is then
// recorded missing).
type interrupts struct {
	wait context.Context // waiting for senders: done on the first signal or at the connect timeout
	run  context.Context // the pipelines: done on the second signal

	cancelWait, cancelRun context.CancelFunc
	ch                    chan os.Signal
	done                  chan struct{}
	exited                sync.WaitGroup

	mu      sync.Mutex
	sig     os.Signal
	streams []*fabric.Stream
}

// catchInterrupts starts catching SIGINT and SIGTERM; stop ends it.
func catchInterrupts(ctx context.Context, connectTimeout time.Duration) *interrupts {
	i := newInterrupts(ctx, connectTimeout)
	signal.Notify(i.ch, os.Interrupt, syscall.SIGTERM)
	return i
}

// newInterrupts returns the interruptions of a scan that only request
// makes: a scan the scan service runs, whose stop is a request.
func newInterrupts(ctx context.Context, connectTimeout time.Duration) *interrupts {
	i := &interrupts{ch: make(chan os.Signal, 2), done: make(chan struct{})}
	i.run, i.cancelRun = context.WithCancel(ctx)
	i.wait, i.cancelWait = context.WithTimeout(i.run, connectTimeout)
	i.exited.Add(1)
	go i.loop()
	return i
}

// request interrupts the scan as a first signal would: no more frames, the
// frames received written. Only the first request counts.
func (i *interrupts) request(why os.Signal) {
	i.mu.Lock()
	first := i.sig == nil
	i.mu.Unlock()
	if first {
		select {
		case i.ch <- why:
		default:
		}
	}
}

// stopRequest is the interruption a stop request makes.
type stopRequest struct{}

func (stopRequest) Signal()        {}
func (stopRequest) String() string { return "stop requested" }

func (i *interrupts) loop() {
	defer i.exited.Done()
	for n := 0; ; n++ {
		select {
		case <-i.done:
			return
		case s := <-i.ch:
			if n > 0 {
				fmt.Fprintf(os.Stderr, "h5ingest: %v again: stopping at once; frames not yet written are recorded missing\n", s)
				i.cancelRun()
				continue
			}
			i.mu.Lock()
			i.sig = s
			streams := slices.Clone(i.streams)
			i.mu.Unlock()
			if len(streams) > 0 {
				fmt.Fprintf(os.Stderr, "h5ingest: interrupted (%v): taking no more frames, writing those received (signal again to stop at once)\n", s)
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
func (i *interrupts) cause(s os.Signal) error {
	return fmt.Errorf("interrupted (%v): %w", s, context.Canceled)
}

// add makes a stream stop on the first signal, at once where it came
// already.
func (i *interrupts) add(s *fabric.Stream) {
	i.mu.Lock()
	i.streams = append(i.streams, s)
	sig := i.sig
	i.mu.Unlock()
	if sig != nil {
		s.Stop(i.cause(sig))
	}
}

// signal returns the first signal caught, or nil.
func (i *interrupts) signal() os.Signal {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.sig
}

// stop stops catching signals.
func (i *interrupts) stop() {
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
func openRecord(f *acquireFlags, profile config.Profile, pl plan.Plan, log *zap.Logger) (*lockedRecorder, func(), error) {
	if f.record == "" {
		return nil, func() {}, nil
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if !profile.Output.Overwrite {
		flags |= os.O_EXCL
	}
	file, err := os.OpenFile(f.record, flags, 0o666)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, nil, fmt.Errorf("record: capture file %s exists (give --overwrite to replace it)", f.record)
		}
		return nil, nil, fmt.Errorf("record: %w", err)
	}
	name := f.scan.profile
	if name == "" {
		name = profile.Name
	}
	meta, err := scanMetadata("acquire", name, profile, pl, time.Now())
	if err != nil {
		file.Close()
		return nil, nil, fmt.Errorf("record %s: %w", f.record, err)
	}
	w, err := capture.NewWriter(file, meta)
	if err != nil {
		file.Close()
		return nil, nil, fmt.Errorf("record %s: %w", f.record, err)
	}
	return &lockedRecorder{w: w, path: f.record, log: log}, func() { file.Close() }, nil
}

// lockedRecorder is a capture writer that several streams record into,
// interleaving their frames as they arrive. A failed write stops the
// recording with a warning, never the scan: the capture is cut there.
type lockedRecorder struct {
	mu     sync.Mutex
	w      *capture.Writer
	path   string
	log    *zap.Logger
	failed error
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

// finish flushes the capture and says where a failed recording stopped.
// It does nothing on a nil recorder.
func (r *lockedRecorder) finish() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed == nil {
		if err := r.w.Close(); err != nil {
			r.fail(err)
		}
	}
	if r.failed != nil {
		fmt.Fprintf(os.Stderr, "h5ingest: warning: --record stopped (%v): %s is cut short, with at most %d whole frames; the scan's file is not affected\n",
			r.failed, r.path, r.w.Records())
	}
}

// acquireChecks returns the pre-scan checks of an acquire writing files.
func acquireChecks(files scanFiles, profile config.Profile, plan plan.Plan, provider, addr string) preScan {
	pre := preScan{master: files.master, frames: plan.Frames(), provider: provider, addr: addr, profile: profile}
	if format, err := profile.Detector.Format(); err == nil {
		pre.frameBytes = format.ImageSize()
	}
	for _, m := range files.modules {
		pre.files = append(pre.files, m.path)
	}
	return pre
}

// acquireModules receives the modules of files at once, one connection
// each on one listener, into a pipeline and a file per module, and writes
// the master file (when files has one) once the first module says the
// frame format. A module that never connects gets a file with every frame
// missing.
func acquireModules(sig *interrupts, f *acquireFlags, profile config.Profile, plan plan.Plan, files scanFiles, cfg fabric.Config, log *zap.Logger) error {
	ctx, cancel := context.WithCancel(sig.run)
	defer cancel()
	l, err := fabric.Listen(cfg)
	if err != nil {
		return err
	}
	defer l.Close()

	// One backend decodes every module: on a GPU one context, whose
	// streams the modules share, rather than contexts the GPU time-slices.
	backend, err := openBackend(profile, log)
	if err != nil {
		return err
	}
	defer backend.Close()
	m := &moduleRuns{flags: &f.scan, backend: backend, scans: make([]*scanRun, len(files.modules)), errs: make([]error, len(files.modules))}
	defer m.abort()
	log.Info("waiting for the detector's modules", zap.Stringer("address", l.Addr()), zap.Int("modules", len(files.modules)))
	format, _ := profile.Detector.Format() // acquire checked it; senders' hellos are held to it
	var rec *lockedRecorder
	for connected := 0; connected < len(files.modules); {
		stream, err := acceptSender(sig, l, log)
		if err != nil {
			if connected == 0 {
				return err
			}
			log.Warn("not every module connected", zap.Error(err))
			break
		}
		defer stream.Close()
		sig.add(stream)
		hello := stream.Hello()
		log.Info("module connected", zap.Uint16("module", hello.Module), zap.Stringer("format", hello.Format))
		if connected == 0 {
			if files.master != "" && plan.Frames() > 0 {
				if err := writeMaster(files, profile, plan, format, f.scan.user, plan.Frames()); err != nil {
					cancel()
					return err
				}
			}
			// The capture is made once a module connected: an acquire
			// interrupted while it waits leaves no file.
			var closeRec func()
			if rec, closeRec, err = openRecord(f, profile, plan, log); err != nil {
				cancel()
				return err
			}
			defer closeRec()
		}
		if rec != nil {
			stream.Record(rec)
		}
		if err := m.start(ctx, files, int(hello.Module), profile, plan, hello.Format, stream, log); err != nil {
			cancel()
			return err
		}
		connected++
	}
	for i, fm := range files.modules {
		if m.scans[i] == nil {
			fmt.Fprintf(os.Stderr, "h5ingest: module %d never connected: its frames are recorded missing\n", fm.module.ID)
			if err := m.start(ctx, files, fm.module.ID, profile, plan, format, emptySource{}, log); err != nil {
				cancel()
				return err
			}
		}
	}
	m.wg.Wait()
	rec.finish()
	m.finished = true
	return finishModules(files, profile, plan, format, f.scan.user, m.scans, m.errs)
}

// senderCheck refuses a sender of a module the scan does not take, one
// delivering frames in another mode than the profile's source.mode, or one
// announcing another frame format than the profile's detector (or frames
// larger than it), whose ring would not be the one the profile sized.
func senderCheck(files scanFiles, mode fabric.Mode, format frame.Format) func(fabric.Hello) error {
	var ids []string
	want := map[uint16]bool{}
	for _, m := range files.modules {
		want[uint16(m.module.ID)] = true
		ids = append(ids, strconv.Itoa(m.module.ID))
	}
	size := frame.HeaderSize + format.PayloadSize()
	return func(h fabric.Hello) error {
		switch {
		case !want[h.Module]:
			return fmt.Errorf("module %d is not one this receiver takes (modules %s)", h.Module, strings.Join(ids, ", "))
		case h.Mode != mode:
			return fmt.Errorf("mode %v: this receiver takes %v (profile key source.mode)", h.Mode, mode)
		case h.Format != format:
			return fmt.Errorf("frame format %v: this receiver expects %v (profile keys detector.*)", h.Format, format)
		case h.FrameSize() > size:
			return fmt.Errorf("frames of up to %d bytes: this receiver's frames are %d bytes (profile keys detector.*)", h.FrameSize(), size)
		}
		return nil
	}
}

// moduleRuns are the scans of the modules of an acquire, running.
type moduleRuns struct {
	flags    *scanFlags // --metrics and --report show every module
	wg       sync.WaitGroup
	backend  gpu.Backend // decodes every module's frames
	scans    []*scanRun  // by the module's place in the scan's files
	errs     []error     // what stopped each scan's source
	finished bool
}

// start creates module id's scan and runs it from src in the background.
func (m *moduleRuns) start(ctx context.Context, files scanFiles, id int, profile config.Profile, plan plan.Plan,
	format frame.Format, src pipeline.Source, log *zap.Logger) error {
	i := slices.IndexFunc(files.modules, func(f scanFile) bool { return f.module.ID == id })
	scan, err := newScan(files.modules[i].path, profile, plan, format, m.flags.user, m.backend, log.With(zap.Int("module", id)))
	if err != nil {
		return err
	}
	scan.quiet = slices.ContainsFunc(m.scans, func(s *scanRun) bool { return s != nil })
	scan.stream, _ = src.(*fabric.Stream)
	m.scans[i] = scan
	if err := scan.observe(&m.flags.observe, m.flags.scanID, id); err != nil {
		return err
	}
	if err := scan.openLive(m.flags.scanID, id); err != nil {
		return err
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.errs[i] = scan.run(ctx, src)
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
			s.abort()
		}
	}
}
