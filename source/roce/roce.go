// Package roce receives detector frames as a Pi-mega front end (an FPGA)
// sends them: over a RoCE queue pair set up statically from numbers
// exchanged out of band (no connection manager), each frame written with
// RDMA WRITE WITH IMMEDIATE into one registered ring of slots, and no
// credits: the front end writes round-robin whatever the receiver does.
//
// Per module the receiver creates the queue pair, its completion queue and
// the ring, writes its end (GID, QPN, PSN, the ring's address and rkey) to
// a parameter file, takes the front end's end from the profile or from the
// front end's own file, and moves the queue pair to ready-to-receive. A
// goroutine per module keeps receives posted and drains the completion
// queue apart from the pipeline, so that the front end never meets an
// empty receive queue and the completion queue never overflows.
//
// Without credits a frame may be written over while the pipeline reads
// it. A frame n is stored ok only if, after the last read of its slot, a
// fresh poll of the completion queue shows no completion for a frame at
// or beyond n + slots - write_guard (Stream.Intact); otherwise it is
// recorded missing and counted as overrun.
//
// The verbs themselves are a table (package internal/verbs): libibverbs,
// opened at run time, or a fake NIC in software for tests and machines
// without RDMA, selected by H5INGEST_TEST_FAKE_VERBS. Send is the front
// end's emulator, for tests and for the first contact with hardware.
package roce

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"h5ingest/frame"
	"h5ingest/receive"
	"h5ingest/source/roce/internal/verbs"
)

// ErrTimeout is wrapped by errors for a front end that did not answer or
// write in time.
var ErrTimeout = receive.ErrTimeout

// ErrNoDevice is wrapped by Open's error where the machine has no such
// RDMA device.
var ErrNoDevice = verbs.ErrNoDevice

// Immediate modes: what a write's immediate data says.
const (
	ImmediateFrame = "frame" // the frame number
	ImmediateSlot  = "slot"  // the slot index
)

// Header modes: what the front end writes into a slot.
const (
	HeaderFrame = "frame" // h5ingest's frame header, then the payload
	HeaderNone  = "none"  // the payload alone
)

// minInFlight is how many frames a pipeline holds between taking a frame
// and its last read where the setup does not say (receive.Setup.InFlight):
// the least a pipeline holds, on two cores. A ring must be deeper than the
// pipeline's frames in flight plus the guard, or every frame would be
// overrun as soon as the pipeline fills.
const minInFlight = 4

// Config is how a receiver sets up its queue pairs.
type Config struct {
	Device     string
	Port       int
	GIDIndex   int
	QPType     verbs.QPType
	MTU        int
	Slots      int
	WriteGuard int
	Immediate  string
	Header     string
	Format     frame.Format
	Modules    []int
	// FrontEnds are the front end's ends by module, from the profile;
	// nil: wait for FrontEndFile.
	FrontEnds      map[int]FrontEndPort
	ParamsFile     string // where the receiver writes its ends; "" for none
	FrontEndFile   string // where the front end's ends are read from
	ConnectTimeout time.Duration
	IdleTimeout    time.Duration
	// Frames is the scan's plan: the stream ends once frame Frames-1 (or
	// the Frames-th write) has come; 0: at the idle timeout.
	Frames uint64
	Check  func(receive.Module) error
	Log    *zap.Logger
}

// SlotSize returns the bytes of one slot: a frame (with its header unless
// Header is none), rounded up to 64.
func (c *Config) SlotSize() int {
	n := c.Format.PayloadSize()
	if c.Header != HeaderNone {
		n += frame.HeaderSize
	}
	return (n + 63) &^ 63
}

// ConfigOf returns the configuration a scan's setup asks for, or what is
// wrong with the profile's keys.
func ConfigOf(s receive.Setup) (Config, error) {
	src := s.Source
	c := Config{Device: src.Device, Port: src.DevicePort, GIDIndex: src.GIDIndex, MTU: src.MTU,
		Slots: src.RingSlots, WriteGuard: src.WriteGuard, Immediate: src.Immediate, Header: src.FrameHeader,
		Format: s.Format, Modules: s.Modules, ParamsFile: s.ParamsFile, FrontEndFile: s.PeerFile,
		ConnectTimeout: src.ConnectTimeout, IdleTimeout: src.IdleTimeout, Frames: uint64(s.Frames), Check: s.Check, Log: s.Log}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	inFlight := s.InFlight
	if inFlight <= 0 {
		inFlight = minInFlight
	}
	switch strings.ToLower(src.QPType) {
	case "rc":
		c.QPType = verbs.RC
	case "uc":
		c.QPType = verbs.UC
	default:
		return c, fmt.Errorf("key source.qp_type: %q, want rc or uc", src.QPType)
	}
	switch {
	case c.Immediate != ImmediateFrame && c.Immediate != ImmediateSlot:
		return c, fmt.Errorf("key source.immediate: %q, want frame or slot", c.Immediate)
	case c.Header != HeaderFrame && c.Header != HeaderNone:
		return c, fmt.Errorf("key source.frame_header: %q, want frame or none", c.Header)
	case c.Immediate == ImmediateSlot && c.Header == HeaderNone:
		return c, errors.New("keys source.immediate slot and source.frame_header none: nothing would say a frame's number; give the frame number in the immediate (immediate: frame) or a header (frame_header: frame)")
	case c.QPType == verbs.UC && c.Header == HeaderNone:
		return c, errors.New("keys source.qp_type uc and source.frame_header none: over UC a write lost mid-message leaves its bytes and no completion, and without a header nothing could tell the frame was not whole; use rc, or frames with headers")
	case c.MTU != 256 && c.MTU != 512 && c.MTU != 1024 && c.MTU != 2048 && c.MTU != 4096:
		return c, fmt.Errorf("key source.mtu: %d, want 256, 512, 1024, 2048 or 4096", c.MTU)
	case c.Slots <= c.WriteGuard+inFlight:
		return c, fmt.Errorf("keys source.ring_slots and source.write_guard: a ring of %d slots is not deeper than the guard (%d) plus the frames the pipeline holds in flight on this machine (%d: one per core and two decodes' batches): every frame could be written over while it is read; want ring_slots %d or more",
			c.Slots, c.WriteGuard, inFlight, c.WriteGuard+inFlight+1)
	case int64(c.Slots)*int64(c.SlotSize()) > int64(src.RingMaxBytes):
		return c, fmt.Errorf("keys source.ring_slots and source.ring_max_bytes: a ring of %d slots of %d bytes takes %d bytes, more than the %d allowed",
			c.Slots, c.SlotSize(), int64(c.Slots)*int64(c.SlotSize()), src.RingMaxBytes)
	}
	if len(src.FrontEnd) > 0 {
		c.FrontEnds = map[int]FrontEndPort{}
		for _, fe := range src.FrontEnd {
			p := FrontEndPort{Module: fe.Module, GID: fe.GID, QPN: uint32(fe.QPN), PSN: uint32(fe.PSN), MAC: fe.MAC}
			if fe.QPN < 0 || fe.PSN < 0 {
				return c, fmt.Errorf("key source.front_end: module %d: QPN %d, PSN %d: want 0 or more", fe.Module, fe.QPN, fe.PSN)
			}
			if _, err := p.peer(); err != nil {
				return c, fmt.Errorf("key source.front_end: %w", err)
			}
			if _, dup := c.FrontEnds[fe.Module]; dup {
				return c, fmt.Errorf("key source.front_end: module %d given twice", fe.Module)
			}
			c.FrontEnds[fe.Module] = p
		}
		for _, m := range c.Modules {
			if _, ok := c.FrontEnds[m]; !ok {
				return c, fmt.Errorf("key source.front_end: no entry for module %d", m)
			}
		}
	}
	if sameFile(c.ParamsFile, c.FrontEndFile) {
		return c, fmt.Errorf("--rdma-params and --front-end name one file, %s: the receiver would read its own end as the front end's; give each end a file of its own", c.ParamsFile)
	}
	switch {
	case s.ProfileOnly:
	case c.ParamsFile == "":
		return c, errors.New("--rdma-params FILE: the front end learns the ring's address, its rkey and the queue pairs' numbers, new at each run, from no other place")
	case c.FrontEnds == nil && c.FrontEndFile == "":
		return c, errors.New("the front end's GID, QPN and PSN: give them in the profile (source.front_end) or name the front end's file (--front-end FILE)")
	}
	return c, nil
}

// sameFile reports whether paths a and b, both given, name one file: the
// same path, or the same file through a link.
func sameFile(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if absA, err := filepath.Abs(a); err == nil {
		if absB, err := filepath.Abs(b); err == nil && absA == absB {
			return true
		}
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// Check refuses a setup Open could not work with.
func Check(s receive.Setup) error {
	_, err := ConfigOf(s)
	return err
}

// station is the device and the queue pairs, completion queues and rings
// of a receiver's modules, set up once: acquire's for one scan, serve's
// for every scan it runs (kept). A Listener is one scan's use of it.
type station struct {
	cfg  Config
	dev  verbs.Device
	kept bool // the links outlive the scans (OpenStation)

	mu        sync.Mutex
	nonce     string    // this scan's, or this run's
	streams   []*Stream // by module, in cfg.Modules order
	params    Params
	frontEnds map[int]FrontEndPort // the front end's ends, where given (the profile's, or PUT)
	closed    bool
	writeMu   sync.Mutex // one write of the parameter file at a time
	linkMu    sync.Mutex // one bringing up of links at a time
}

// newStation opens the device, creates each module's queue pair,
// completion queue and ring, and writes the parameter file.
func newStation(cfg Config, kept bool) (_ *station, err error) {
	dev, err := verbs.Open(cfg.Device, cfg.Port, cfg.GIDIndex)
	if err != nil {
		return nil, fmt.Errorf("open the RDMA device: %w", err)
	}
	st := &station{cfg: cfg, dev: dev, kept: kept, nonce: newNonce(), frontEnds: cfg.FrontEnds}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	port := dev.Port()
	if port.State != "" && port.State != "ACTIVE" {
		cfg.Log.Warn("RDMA port not active", zap.String("device", port.Device), zap.Int("port", port.Num), zap.String("state", port.State))
	}
	st.params = Params{Version: ParamsVersion, Nonce: st.nonce}
	for _, m := range cfg.Modules {
		s, err := newStream(st, m)
		if err != nil {
			return nil, fmt.Errorf("module %d: %w", m, err)
		}
		st.streams = append(st.streams, s)
		st.params.Modules = append(st.params.Modules, s.params())
	}
	if err := st.writeParams(); err != nil {
		return nil, err
	}
	return st, nil
}

// Listener is one scan's use of the receiver's queue pairs, one per
// module it takes, set up and waiting for the front end's writes.
type Listener struct {
	st      *station
	streams []*Stream
	check   func(receive.Module) error
	own     bool // closing the listener closes the station: acquire's

	mu      sync.Mutex
	taken   []bool // by stream: an Accept took (or refused) it
	stopped string
	closed  bool
}

// Open sets up the queue pairs a scan's setup asks for: the source that
// source.transport roce names.
func Open(s receive.Setup) (receive.Listener, error) {
	cfg, err := ConfigOf(s)
	if err != nil {
		return nil, err
	}
	l, err := Listen(cfg)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Listen opens the device, creates each module's queue pair, completion
// queue and ring, writes the parameter file, and brings every queue pair
// whose front end is known to ready-to-receive.
func Listen(cfg Config) (*Listener, error) {
	st, err := newStation(cfg, false)
	if err != nil {
		return nil, err
	}
	l := st.listener(st.streams, cfg.Check, true)
	if cfg.FrontEnds != nil {
		if err := st.link(context.Background(), time.Now().Add(cfg.ConnectTimeout), st.streams); err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// listener returns a scan's listener of streams.
func (st *station) listener(streams []*Stream, check func(receive.Module) error, own bool) *Listener {
	return &Listener{st: st, streams: streams, check: check, own: own, taken: make([]bool, len(streams))}
}

// Nonce returns the nonce the parameter file carries now: the run's, or
// the scan's.
func (l *Listener) Nonce() string {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	return l.st.nonce
}

// Params returns the receiver's end of every queue pair, as the parameter
// file has it.
func (l *Listener) Params() Params { return l.st.paramsNow() }

func (st *station) paramsNow() Params {
	st.mu.Lock()
	defer st.mu.Unlock()
	p := st.params
	p.Modules = slices.Clone(p.Modules)
	return p
}

// writeParams writes the parameter file as the station has it now. The
// writes are one at a time, each of a copy taken under the lock, so that
// the file always ends as the last change left it.
func (st *station) writeParams() error {
	if st.cfg.ParamsFile == "" {
		return nil
	}
	st.writeMu.Lock()
	defer st.writeMu.Unlock()
	st.mu.Lock()
	closed := st.closed
	st.mu.Unlock()
	if closed {
		return nil // the file is removed, or about to be
	}
	return writeJSON(st.cfg.ParamsFile, st.paramsNow())
}

// moduleReady marks module's queue pair ready to receive in the parameter
// file, its scan's pipeline taking frames: the front end writes from then
// on, so that no frame comes before the scan can take it. The file says
// ready once every module's is.
func (st *station) moduleReady(module int) error {
	st.mu.Lock()
	all := true
	for i := range st.params.Modules {
		m := &st.params.Modules[i]
		if m.Module == module {
			m.Ready = true
		}
		all = all && m.Ready
	}
	st.params.Ready = all
	nonce := st.nonce
	st.mu.Unlock()
	st.cfg.Log.Info("queue pair ready to receive", zap.Int("module", module), zap.String("nonce", nonce), zap.String("params", st.cfg.ParamsFile))
	return st.writeParams()
}

// moduleEnded marks module's queue pair not ready in the parameter file,
// its scan ended: no scan takes its frames until the next says ready.
func (st *station) moduleEnded(module int) error {
	st.mu.Lock()
	changed := false
	for i := range st.params.Modules {
		if m := &st.params.Modules[i]; m.Module == module && m.Ready {
			m.Ready, changed = false, true
		}
	}
	changed = changed || st.params.Ready
	st.params.Ready = false
	st.mu.Unlock()
	if !changed {
		return nil
	}
	return st.writeParams()
}

// Addr says where the receiver waits: the device, port and GID.
func (l *Listener) Addr() string { return l.st.addr() }

func (st *station) addr() string {
	p := st.dev.Port()
	return fmt.Sprintf("%s port %d GID %v (index %d)", p.Device, p.Num, p.GID, p.GIDIndex)
}

// link brings the queue pairs of streams to ready-to-receive toward their
// front end's ends: those given (the profile's, or a control system's),
// else those of the front end's file answering the nonce, waited for
// until deadline. A queue pair linked to another end already is brought
// up afresh toward the new one.
func (st *station) link(ctx context.Context, deadline time.Time, streams []*Stream) error {
	st.linkMu.Lock()
	defer st.linkMu.Unlock()
	st.mu.Lock()
	given := st.frontEnds
	st.mu.Unlock()
	ends := given
	if ends == nil {
		var err error
		if ends, err = st.awaitFrontEnd(ctx, deadline, streams); err != nil {
			return err
		}
	}
	for _, s := range streams {
		fe, ok := ends[s.module]
		if !ok {
			return fmt.Errorf("no front end's end for module %d", s.module)
		}
		if err := s.connect(fe); err != nil {
			return err
		}
	}
	return nil
}

// peersFrom says whence the front end's ends came, for messages: the
// profile, a control system (SetPeers, serve's PUT /v1/rdma: kept for
// every scan after), or the front end's file.
func (st *station) peersFrom() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch st.givenBy() {
	case givenByProfile:
		return "the profile's source.front_end"
	case givenByRequest:
		return "given by a control system (SetPeers, PUT /v1/rdma), kept for every scan since"
	}
	return "from " + st.cfg.FrontEndFile
}

// Who gave the front end's ends for every scan (View.FrontEndFrom).
const (
	givenByProfile = "profile" // source.front_end
	givenByRequest = "request" // SetPeers, PUT /v1/rdma
)

// givenBy says who gave the front end's ends for every scan: the
// profile, a request, or "" where each scan reads them from the front
// end's file. st.mu is held.
func (st *station) givenBy() string {
	switch {
	case st.cfg.FrontEnds != nil:
		return givenByProfile
	case st.frontEnds != nil:
		return givenByRequest
	}
	return ""
}

// peersFixed refuses a change to the front end's ends where the profile
// gives them.
func (st *station) peersFixed() error {
	if st.cfg.FrontEnds != nil {
		return fmt.Errorf("%w: the profile gives source.front_end", receive.ErrPeersFixed)
	}
	return nil
}

// awaitFrontEnd waits for the front end's file answering the nonce with
// an entry for each of streams, and returns its ends by module.
func (st *station) awaitFrontEnd(ctx context.Context, deadline time.Time, streams []*Stream) (map[int]FrontEndPort, error) {
	var fe FrontEndParams
	st.mu.Lock()
	nonce := st.nonce
	st.mu.Unlock()
	err := waitFile(ctx, st.cfg.FrontEndFile, deadline, &fe, func() error {
		st.mu.Lock()
		nonce = st.nonce
		st.mu.Unlock()
		if fe.Nonce != nonce {
			return fmt.Errorf("it answers nonce %q, another run's", fe.Nonce)
		}
		for _, s := range streams {
			if !slices.ContainsFunc(fe.Modules, func(p FrontEndPort) bool { return p.Module == s.module }) {
				return fmt.Errorf("no entry for module %d yet", s.module)
			}
		}
		return nil
	})
	if errors.Is(err, ErrTimeout) {
		return nil, fmt.Errorf("no front end answered in %s within %v (this run's nonce %s; %s): %w", st.cfg.FrontEndFile, st.cfg.ConnectTimeout, nonce, st.waitedOn(streams), err)
	}
	if err != nil {
		return nil, err
	}
	ends := map[int]FrontEndPort{}
	for _, p := range fe.Modules {
		ends[p.Module] = p
	}
	return ends, nil
}

// waitedOn names the queue pairs waited on, for the timeout's message.
func (st *station) waitedOn(streams []*Stream) string {
	var b []string
	gid := st.dev.Port().GID
	for _, s := range streams {
		b = append(b, fmt.Sprintf("module %d QPN %d (%#x)", s.module, s.qp.Num(), s.qp.Num()))
	}
	return strings.Join(b, ", ") + fmt.Sprintf(" on GID %v", gid)
}

// Accept returns the next module's stream once its queue pair is ready to
// receive from the front end: at once where the front end's end is given
// (the profile's, or a control system's), else once the front end's file
// answers, within the connect timeout (an error wrapping ErrTimeout that
// names the file, the nonce and the queue pairs waited on). The parameter
// file says ready for the module only when its stream's first Next comes:
// the front end writes once the scan can take its frames.
func (l *Listener) Accept(ctx context.Context) (receive.Stream, error) {
	deadline := time.Now().Add(l.st.cfg.ConnectTimeout)
	if err := l.st.link(ctx, deadline, l.streams); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range l.streams {
		if l.taken[i] {
			continue
		}
		l.taken[i] = true
		if l.stopped != "" {
			return nil, fmt.Errorf("%w: %w", receive.ErrRefused, &receive.StoppedError{Module: uint16(s.module), Reason: l.stopped})
		}
		if l.check != nil {
			if err := l.check(s.Module()); err != nil {
				return nil, fmt.Errorf("%w: %w", receive.ErrRefused, err)
			}
		}
		return s, nil
	}
	return nil, fmt.Errorf("every module's stream is taken: %w", ErrTimeout)
}

// Stop makes Accept refuse every module not yet taken, with reason.
func (l *Listener) Stop(reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped == "" {
		l.stopped = reason
	}
}

// Close closes the queue pairs of modules no Accept took (a station's
// end their scan, and stay), and an acquire's device once every stream
// is closed.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	var left []*Stream
	for i, s := range l.streams {
		if !l.taken[i] {
			left = append(left, s)
		}
	}
	l.mu.Unlock()
	var errs []error
	for _, s := range left {
		errs = append(errs, s.Close())
	}
	if l.own {
		errs = append(errs, l.st.close())
	}
	return errors.Join(errs...)
}

// close marks the station closed, removes its parameter file and closes
// the device once every stream is closed.
func (st *station) close() error {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil
	}
	st.closed = true
	nonce, streams := st.nonce, st.streams
	st.mu.Unlock()
	var errs []error
	if st.kept {
		// Serve's streams are freed with the station.
		for _, s := range streams {
			s.mu.Lock()
			s.closed = true
			s.mu.Unlock()
			errs = append(errs, s.free())
		}
	}
	if st.cfg.ParamsFile != "" {
		// The file names queue pairs that are gone: a front end must not
		// meet it again. A file another receiver wrote since is its own.
		// No write of the file is under way (or comes) meanwhile.
		st.writeMu.Lock()
		defer st.writeMu.Unlock()
		var p Params
		if readJSON(st.cfg.ParamsFile, &p) == nil && p.Nonce == nonce {
			if err := os.Remove(st.cfg.ParamsFile); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, st.release())
	return errors.Join(errs...)
}

// release closes the device once the station is closed and every stream
// with it.
func (st *station) release() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.closed || st.dev == nil {
		return nil
	}
	for _, s := range st.streams {
		if !s.isClosed() {
			return nil
		}
	}
	dev := st.dev
	st.dev = nil
	return dev.Close()
}
