package fabric

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"h5ingest/receive"
	"h5ingest/source/fabric/internal/fi"
)

// Config sets up a Listener.
type Config struct {
	Provider string // libfabric provider: "tcp" or "verbs"
	Addr     string // host:port to listen on; port 0 picks a free one
	// Slots is the ring of frame slots per connection: the most frames a
	// sender may have in flight before it waits for credits.
	Slots int
	// ConnectTimeout bounds the wait for a sender in Accept.
	ConnectTimeout time.Duration
	// HandshakeTimeout bounds one peer's handshake, from its connection
	// request to the accept message: a peer that connects and stays
	// silent is dropped after it. 0 means DefaultHandshakeTimeout; it is
	// never longer than ConnectTimeout.
	HandshakeTimeout time.Duration
	// IdleTimeout bounds the silence between frames once a scan runs.
	IdleTimeout time.Duration
	// MaxRingBytes bounds one connection's ring: a hello whose frames
	// would make a ring of Slots slots larger than this is refused
	// (RefuseResources) before any memory is taken. 0 means
	// DefaultMaxRingBytes.
	MaxRingBytes int64
	// Check, when set, vets a sender's hello before its slots are made: an
	// error refuses the connection (RefuseScan) with the error's text.
	Check func(Hello) error

	fake    func(*fi.Info)         // tests: changes what the provider says of each connection
	sendErr func(typ uint16) error // tests: fails the small messages it returns an error for
}

// DefaultHandshakeTimeout is the handshake timeout of a Config that sets
// none.
const DefaultHandshakeTimeout = 5 * time.Second

// DefaultMaxRingBytes is the ring limit of a Config that sets none: 4 GiB.
const DefaultMaxRingBytes = 4 << 30

// DefaultConfig returns a configuration for the tcp provider on addr.
func DefaultConfig(addr string) Config {
	return Config{Provider: "tcp", Addr: addr, Slots: 16, ConnectTimeout: time.Minute, IdleTimeout: 10 * time.Second}
}

// Validate reports a configuration that cannot work.
func (c *Config) Validate() error {
	switch {
	case c.Provider == "":
		return errors.New("no provider: want tcp or verbs")
	case c.Slots < 1 || c.Slots > maxSlots:
		return fmt.Errorf("%d slots: want 1 to %d", c.Slots, maxSlots)
	case c.ConnectTimeout <= 0 || c.IdleTimeout <= 0 || c.HandshakeTimeout < 0:
		return errors.New("timeouts must be positive")
	case c.MaxRingBytes < 0:
		return fmt.Errorf("ring limit of %d bytes: want 0 (the default) or more", c.MaxRingBytes)
	}
	return nil
}

// handshakeTimeout returns the bound of one handshake.
func (c *Config) handshakeTimeout() time.Duration {
	d := c.HandshakeTimeout
	if d == 0 {
		d = DefaultHandshakeTimeout
	}
	return min(d, c.ConnectTimeout)
}

// maxRingBytes returns the ring limit.
func (c *Config) maxRingBytes() int64 {
	if c.MaxRingBytes == 0 {
		return DefaultMaxRingBytes
	}
	return c.MaxRingBytes
}

// ErrRefused is wrapped by Accept's errors for a peer whose handshake
// failed: one that closed, stayed silent past the handshake timeout, sent
// no valid hello, or was refused. Such a peer never stops the listener nor
// delays another: Accept's caller logs the error and calls Accept again.
var ErrRefused = receive.ErrRefused

// Listener accepts senders, one connection per detector module, on one
// address. Accept is called from one goroutine at a time; Close from any.
type Listener struct {
	cfg  Config
	info *fi.Info
	fab  *fi.Fabric
	eq   *fi.EventQueue
	pep  *fi.PassiveEndpoint
	addr netip.AddrPort

	mu         sync.Mutex
	modules    map[uint16]bool        // modules connected so far
	streams    int                    // streams open on fab
	peers      map[netip.AddrPort]int // the peers of the streams open, by address (see orphans)
	fabClosing bool                   // Close ran: the last stream closes fab
	stopped    string                 // Stop's reason: every hello from now on is refused with it
	done       []handshake            // finished handshakes Accept has not returned
	closed     bool

	ready      chan struct{} // a handshake finished
	quit       chan struct{} // closed by Close: stop listening and handshaking
	listening  sync.WaitGroup
	handshakes sync.WaitGroup
	admitting  sync.WaitGroup // handshakes whose module was taken, until Accept may return them
}

// handshake is the outcome of one peer's handshake.
type handshake struct {
	s   *Stream
	err error
}

// Listen opens a listener for cfg.
func Listen(cfg Config) (_ *Listener, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	l := &Listener{cfg: cfg, modules: map[uint16]bool{}, ready: make(chan struct{}, 1), quit: make(chan struct{})}
	defer func() {
		if err != nil {
			l.Close()
			err = fmt.Errorf("listen on %s with provider %s: %w", cfg.Addr, cfg.Provider, err)
		}
	}()
	if l.info, err = fi.GetInfo(cfg.Provider, cfg.Addr, true); err != nil {
		return nil, err
	}
	if n := l.info.RxSize() - 4; cfg.Slots > n {
		return nil, fmt.Errorf("%d slots: the provider's receive queue holds %d", cfg.Slots, n)
	}
	if l.fab, err = fi.OpenFabric(l.info); err != nil {
		return nil, err
	}
	if l.eq, err = fi.OpenEventQueue(l.fab); err != nil {
		return nil, err
	}
	if l.pep, err = fi.ListenPassive(l.fab, l.info, l.eq); err != nil {
		return nil, err
	}
	if l.addr, err = l.pep.Addr(); err != nil {
		return nil, err
	}
	l.listening.Add(1)
	go l.listen()
	return l, nil
}

// listen takes connection requests until Close, and runs each peer's
// handshake in a goroutine of its own, so that a slow or silent peer
// delays no other.
func (l *Listener) listen() {
	defer l.listening.Done()
	for {
		select {
		case <-l.quit:
			return
		default:
		}
		ev, ok, err := l.eq.Read(50 * time.Millisecond)
		if err != nil {
			// A failed connection request: the peer's, not the listener's.
			l.finished(handshake{err: fmt.Errorf("%w: connection request: %w", ErrRefused, err)})
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !ok {
			continue
		}
		if ev.Kind != fi.EventConnReq {
			if ev.Info != nil {
				ev.Info.Close()
			}
			continue
		}
		l.handshakes.Add(1)
		go func() {
			defer l.handshakes.Done()
			s, admitted, err := l.accept(ev.Info)
			if err != nil {
				err = fmt.Errorf("%w: %w", ErrRefused, err)
			}
			l.finished(handshake{s: s, err: err})
			if admitted {
				l.admitting.Done()
			}
		}()
	}
}

// finished hands a handshake's outcome to Accept; after Close, its stream
// is closed.
func (l *Listener) finished(h handshake) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		if h.s != nil {
			h.s.Close()
		}
		return
	}
	l.done = append(l.done, h)
	l.mu.Unlock()
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// Addr returns the address the listener listens on.
func (l *Listener) Addr() netip.AddrPort { return l.addr }

// Accept waits for a sender to connect, up to the configured connect
// timeout (or ctx's deadline, where sooner), and returns the connection's Stream once its control exchange
// is done. Handshakes run concurrently, each bounded by the handshake
// timeout. A peer whose handshake fails (it closed, stayed silent, sent a
// malformed or refused hello: the sender gets a refusal message where it
// can) makes Accept return an error wrapping ErrRefused, and ErrProtocol
// where the peer broke the protocol; the listener goes on and the caller
// may call Accept again.
func (l *Listener) Accept(ctx context.Context) (*Stream, error) {
	timer := time.NewTimer(l.cfg.ConnectTimeout)
	defer timer.Stop()
	for {
		l.mu.Lock()
		var h handshake
		ok := len(l.done) > 0
		if ok {
			h = l.done[0]
			l.done = l.done[1:]
		}
		closed := l.closed
		l.mu.Unlock()
		switch {
		case ok && h.err != nil:
			return nil, fmt.Errorf("accept on %s: %w", l.addr, h.err)
		case ok:
			return h.s, nil
		case closed:
			return nil, fmt.Errorf("wait for a sender on %s: the listener is closed", l.addr)
		}
		select {
		case <-l.ready:
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("wait for a sender on %s: none in %v: %w", l.addr, l.cfg.ConnectTimeout, receive.ErrNoSender)
		case <-timer.C:
			return nil, fmt.Errorf("wait for a sender on %s: none in %v: %w", l.addr, l.cfg.ConnectTimeout, receive.ErrNoSender)
		}
	}
}

// ctrlBuffers returns how many control buffers a connection with slots
// slots needs: one per slot's frame message, and a few for the end.
func ctrlBuffers(slots int) int { return slots + 4 }

// StoppedError is wrapped by Accept's error for a sender that connected
// after Stop: it was refused at its hello with Stop's reason.
type StoppedError = receive.StoppedError

// Stop refuses, from now on, every sender at its hello with reason, which
// the sender's Dial returns in its *RefusedError (a scan that has stopped
// takes no module that connects late). It waits for the handshakes that
// got past their hello before: once it returns, Accept returns them (even
// with a done context) before anything else. It may be called from any
// goroutine, more than once; the first reason counts.
func (l *Listener) Stop(reason string) {
	l.mu.Lock()
	if l.stopped == "" {
		l.stopped = reason
	}
	l.mu.Unlock()
	l.admitting.Wait()
}

// accept runs the control exchange with the sender of req; admitted says
// its module was taken (l.admitting counts it until its outcome is queued
// for Accept).
func (l *Listener) accept(req *fi.Info) (_ *Stream, admitted bool, _ error) {
	s, err := l.handshake(req, &admitted)
	return s, admitted, err
}

// handshake runs the control exchange with the sender of req, setting
// *admitted once its module is taken.
func (l *Listener) handshake(req *fi.Info, admitted *bool) (*Stream, error) {
	if l.cfg.fake != nil {
		l.cfg.fake(req)
	}
	c, err := openConn(l.fab, req, ctrlBuffers(l.cfg.Slots)+2)
	if err != nil {
		l.pep.Reject(req)
		req.Close()
		return nil, err
	}
	c.quit = l.quit
	c.sendErr = l.cfg.sendErr
	deadline := time.Now().Add(l.cfg.handshakeTimeout())
	peer := req.DestAddr()
	s := &Stream{c: c, l: l, cfg: l.cfg, peer: netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())}
	l.mu.Lock()
	l.streams++
	if l.peers == nil {
		l.peers = map[netip.AddrPort]int{}
	}
	l.peers[s.peer]++
	l.mu.Unlock()
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	// The hello is the only message before the slots: one buffer for it.
	if err := c.postCtrl(s.sendBuf() - 1); err != nil {
		return nil, err
	}
	if err := c.ep.Accept(); err != nil {
		return nil, err
	}
	if err := c.waitEvent(fi.EventConnected, time.Until(deadline), "connect"); err != nil {
		return nil, err
	}
	b, err := s.waitCtrl(time.Until(deadline), "hello")
	if err != nil {
		return nil, err
	}
	h, err := ParseHello(b)
	if err != nil {
		code := uint32(RefuseMalformed)
		switch {
		case isMessage(b) && len(b) >= 6 && b[4] != ProtoVersion:
			code = RefuseVersion
		case errors.Is(err, errFormat):
			code = RefuseFormat
		}
		s.refuse(code, err.Error())
		return nil, err
	}
	s.hello = h
	if l.cfg.Check != nil {
		if err := l.cfg.Check(h); err != nil {
			s.refuse(RefuseScan, err.Error())
			return nil, fmt.Errorf("%w: module %d refused: %w", ErrProtocol, h.Module, err)
		}
	}
	l.mu.Lock()
	stopped := l.stopped
	dup := l.modules[h.Module]
	if stopped == "" {
		l.modules[h.Module] = true
		l.admitting.Add(1)
		*admitted = true
	}
	l.mu.Unlock()
	if stopped != "" {
		s.refuse(RefuseScan, stopped)
		return nil, &StoppedError{Module: h.Module, Reason: stopped}
	}
	if dup {
		err := fmt.Errorf("%w: module %d is already connected", ErrProtocol, h.Module)
		s.refuse(RefuseModule, err.Error())
		return nil, err
	}
	s.module = true
	if n, limit := int64(l.cfg.Slots)*int64(slotSize(h)), l.cfg.maxRingBytes(); n > limit {
		err := fmt.Errorf("%w: module %d: a ring of %d slots of %d bytes would take %d bytes, more than the receiver's limit of %d",
			ErrProtocol, h.Module, l.cfg.Slots, slotSize(h), n, limit)
		s.refuse(RefuseResources, err.Error())
		return nil, err
	}
	if n := slotSize(h); uint64(n) > c.maxMsg {
		err := fmt.Errorf("%w: module %d: slots of %d bytes for its frames, but provider %s carries messages of at most %d bytes (max_msg_size)",
			ErrProtocol, h.Module, n, c.info.Provider(), c.maxMsg)
		s.refuse(RefuseMessageSize, err.Error())
		return nil, err
	}
	if err := s.makeRing(); err != nil {
		s.refuse(RefuseResources, err.Error())
		return nil, err
	}
	msg := appendAccept(make([]byte, 0, acceptSize), &Accept{
		Slots: uint32(len(s.frames)), SlotSize: uint32(s.slotSize), Addr: s.ringMR.Addr, Key: s.ringMR.Key,
	})
	if err := c.sendCtrl(s.sendBuf(), msg, max(time.Until(deadline), 100*time.Millisecond)); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// Close stops listening and ends the handshakes under way; streams that
// Accept has not returned are closed. Streams already accepted go on.
func (l *Listener) Close() error {
	l.mu.Lock()
	already := l.closed
	l.closed = true
	pending := l.done
	l.done = nil
	l.mu.Unlock()
	if already {
		return nil
	}
	close(l.quit)
	l.listening.Wait()
	l.handshakes.Wait()
	for _, h := range pending {
		if h.s != nil {
			h.s.Close()
		}
	}
	var errs []error
	if l.pep != nil {
		errs = append(errs, l.pep.Close())
	}
	if l.eq != nil {
		errs = append(errs, l.eq.Close())
	}
	// The sockets the provider accepted and forgot (see orphans), once
	// its poll set, with the event queue, is gone: nothing closes them
	// any more, so their descriptors cannot be reused meanwhile. (No
	// listener of the process opens on the same port before Close
	// returns: its sockets would look the same.)
	l.mu.Lock()
	left := orphans(l.addr, l.peers)
	l.mu.Unlock()
	closeOrphans(left)
	if l.fab != nil {
		// Streams hold their own domains on this fabric; the last closer
		// closes it (see Stream.Close).
		l.mu.Lock()
		l.fabClosing = true
		closeFab := l.streams == 0
		l.mu.Unlock()
		if closeFab {
			errs = append(errs, l.fab.Close())
		}
	}
	if l.info != nil {
		errs = append(errs, l.info.Close())
	}
	return errors.Join(errs...)
}
