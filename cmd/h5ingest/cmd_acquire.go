package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/gpu"
	"h5ingest/ingest"
	"h5ingest/ingest/capture"
	"h5ingest/ingest/fabric"
	"h5ingest/ingest/frame"
	"h5ingest/plan"
)

// acquireFlags are the flags of acquire beyond the scan's.
type acquireFlags struct {
	scan   scanFlags
	listen string
	record string
	module int // --module: the one module to take; -1 for every module
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
	files, err := s.scanFiles(profile, time.Now())
	if err != nil {
		return err
	}
	if s.fs.Changed("module") {
		if files, err = files.only(f.module); err != nil {
			return err
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
	}
	mode, err := fabric.ParseMode(src.Mode)
	if err != nil {
		return usageError(fmt.Errorf("key source.mode: %w", err))
	}
	cfg.Check = senderCheck(files, mode)
	if err := cfg.Validate(); err != nil {
		return usageError(err)
	}
	pre := acquireChecks(files, profile, plan, src.Provider, addr)
	pre.record = f.record
	if err := pre.run(); err != nil {
		return err
	}
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
	if len(profile.Detector.Modules) > 1 {
		return acquireModules(ctx, f, profile, plan, files, cfg, log)
	}
	out := files.modules[0].path

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := fabric.Listen(cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	log.Info("waiting for the detector", zap.Stringer("address", l.Addr()), zap.String("provider", src.Provider))
	stream, err := l.Accept(ctx)
	for errors.Is(err, fabric.ErrProtocol) {
		log.Warn("sender refused", zap.Error(err))
		stream, err = l.Accept(ctx)
	}
	if err != nil {
		return err
	}
	defer stream.Close()
	hello := stream.Hello()
	log.Info("detector connected", zap.Uint16("module", hello.Module), zap.Stringer("mode", hello.Mode),
		zap.Stringer("format", hello.Format), zap.Uint64("frames", hello.Frames))
	if plan.Frames() > 0 && hello.Frames > 0 && hello.Frames != uint64(plan.Frames()) {
		log.Warn("the detector's frame count is not the plan's", zap.Uint64("detector", hello.Frames), zap.Int("plan", plan.Frames()))
	}

	rec, closeRec, err := openRecord(f, profile, plan)
	if err != nil {
		return err
	}
	defer closeRec()
	if rec != nil {
		stream.Record(rec)
	}

	scan, err := newScan(out, profile, plan, hello.Format, nil, log)
	if err != nil {
		return err
	}
	defer scan.abort()
	if err := scan.observe(&s.observe, s.scanID, int(hello.Module)); err != nil {
		return err
	}
	scan.stream = stream
	srcErr := scan.run(ctx, stream)
	st := stream.Stats()
	log.Info("stream ended", zap.Uint64("frames", st.Frames), zap.Uint64("bytes", st.Bytes),
		zap.Duration("held_back", st.HeldBack), zap.Duration("sender_held_back", st.SenderHeldBack), zap.NamedError("reason", srcErr))
	if rec != nil {
		if err := rec.Close(); err != nil {
			log.Error("record failed", zap.String("file", f.record), zap.Error(err))
		}
	}
	return scan.finish(srcErr)
}

// openRecord opens the --record capture, if one is asked for; its
// writer is safe to share between the streams of several modules. An
// existing file is replaced only when the profile says overwrite. The
// capture records the profile as --profile named it, or the built-in
// profile's name, and what a replay needs to write the scan's file: the
// plan, the merged profile, the geometry (scanMetadata).
func openRecord(f *acquireFlags, profile config.Profile, pl plan.Plan) (*lockedRecorder, func(), error) {
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
	return &lockedRecorder{w: w}, func() { file.Close() }, nil
}

// lockedRecorder is a capture writer that several streams record into,
// interleaving their frames as they arrive.
type lockedRecorder struct {
	mu sync.Mutex
	w  *capture.Writer
}

// WriteRecord appends one frame as it arrived.
func (r *lockedRecorder) WriteRecord(rec []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.WriteRecord(rec)
}

// Close flushes the capture.
func (r *lockedRecorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.Close()
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
func acquireModules(ctx context.Context, f *acquireFlags, profile config.Profile, plan plan.Plan, files scanFiles, cfg fabric.Config, log *zap.Logger) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l, err := fabric.Listen(cfg)
	if err != nil {
		return err
	}
	defer l.Close()
	rec, closeRec, err := openRecord(f, profile, plan)
	if err != nil {
		return err
	}
	defer closeRec()

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
	var format frame.Format
	for connected := 0; connected < len(files.modules); {
		stream, err := l.Accept(ctx)
		if errors.Is(err, fabric.ErrProtocol) {
			log.Warn("sender refused", zap.Error(err))
			continue
		}
		if err != nil {
			if connected == 0 {
				return err
			}
			log.Warn("not every module connected", zap.Error(err))
			break
		}
		defer stream.Close()
		hello := stream.Hello()
		log.Info("module connected", zap.Uint16("module", hello.Module), zap.Stringer("format", hello.Format))
		if connected == 0 {
			format = hello.Format
			if files.master != "" && plan.Frames() > 0 {
				if err := writeMaster(files, profile, plan, format, plan.Frames()); err != nil {
					cancel()
					return err
				}
			}
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
	if rec != nil {
		if err := rec.Close(); err != nil {
			log.Error("record failed", zap.String("file", f.record), zap.Error(err))
		}
	}
	m.finished = true
	return finishModules(files, profile, plan, format, m.scans, m.errs)
}

// senderCheck refuses a sender of a module the scan does not take, or one
// delivering frames in another mode than the profile's source.mode.
func senderCheck(files scanFiles, mode fabric.Mode) func(fabric.Hello) error {
	var ids []string
	want := map[uint16]bool{}
	for _, m := range files.modules {
		want[uint16(m.module.ID)] = true
		ids = append(ids, strconv.Itoa(m.module.ID))
	}
	return func(h fabric.Hello) error {
		if !want[h.Module] {
			return fmt.Errorf("module %d is not one this receiver takes (modules %s)", h.Module, strings.Join(ids, ", "))
		}
		if h.Mode != mode {
			return fmt.Errorf("mode %v: this receiver takes %v (profile key source.mode)", h.Mode, mode)
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
	format frame.Format, src ingest.Source, log *zap.Logger) error {
	i := slices.IndexFunc(files.modules, func(f scanFile) bool { return f.module.ID == id })
	scan, err := newScan(files.modules[i].path, profile, plan, format, m.backend, log.With(zap.Int("module", id)))
	if err != nil {
		return err
	}
	scan.quiet = slices.ContainsFunc(m.scans, func(s *scanRun) bool { return s != nil })
	scan.stream, _ = src.(*fabric.Stream)
	m.scans[i] = scan
	if err := scan.observe(&m.flags.observe, m.flags.scanID, id); err != nil {
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
