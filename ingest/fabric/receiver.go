package fabric

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"
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
	// IdleTimeout bounds the silence between frames once a scan runs.
	IdleTimeout time.Duration
	// Check, when set, vets a sender's hello before its slots are made: an
	// error refuses the connection with the error's text.
	Check func(Hello) error
}

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
	case c.ConnectTimeout <= 0 || c.IdleTimeout <= 0:
		return errors.New("timeouts must be positive")
	}
	return nil
}

// Listener accepts senders, one connection per detector module, on one
// address. Accept is called from one goroutine at a time; Close from any.
type Listener struct {
	cfg  Config
	info *Info
	fab  *Fabric
	eq   *EventQueue
	pep  *PassiveEndpoint
	addr netip.AddrPort

	mu         sync.Mutex
	modules    map[uint16]bool // modules connected so far
	streams    int             // streams open on fab
	fabClosing bool            // Close ran: the last stream closes fab
}

// Listen opens a listener for cfg.
func Listen(cfg Config) (_ *Listener, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	l := &Listener{cfg: cfg, modules: map[uint16]bool{}}
	defer func() {
		if err != nil {
			l.Close()
			err = fmt.Errorf("listen on %s with provider %s: %w", cfg.Addr, cfg.Provider, err)
		}
	}()
	if l.info, err = GetInfo(cfg.Provider, cfg.Addr, true); err != nil {
		return nil, err
	}
	if n := l.info.RxSize() - 4; cfg.Slots > n {
		return nil, fmt.Errorf("%d slots: the provider's receive queue holds %d", cfg.Slots, n)
	}
	if l.fab, err = OpenFabric(l.info); err != nil {
		return nil, err
	}
	if l.eq, err = OpenEventQueue(l.fab); err != nil {
		return nil, err
	}
	if l.pep, err = ListenPassive(l.fab, l.info, l.eq); err != nil {
		return nil, err
	}
	if l.addr, err = l.pep.Addr(); err != nil {
		return nil, err
	}
	return l, nil
}

// Addr returns the address the listener listens on.
func (l *Listener) Addr() netip.AddrPort { return l.addr }

// Accept waits for a sender to connect, up to the configured connect
// timeout, runs the control exchange, and returns the connection's Stream.
// A sender whose hello is malformed or refused gets a refusal message and
// Accept returns the reason, wrapping ErrProtocol.
func (l *Listener) Accept(ctx context.Context) (*Stream, error) {
	deadline := time.Now().Add(l.cfg.ConnectTimeout)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("wait for a sender on %s: none in %v: %w", l.addr, l.cfg.ConnectTimeout, ErrTimeout)
		}
		ev, ok, err := l.eq.Read(min(left, 100*time.Millisecond))
		if err != nil {
			return nil, fmt.Errorf("wait for a sender on %s: %w", l.addr, err)
		}
		if !ok {
			continue
		}
		if ev.Kind != EventConnReq {
			if ev.Info != nil {
				ev.Info.Close()
			}
			continue
		}
		s, err := l.accept(ev.Info)
		if err != nil {
			return nil, fmt.Errorf("accept on %s: %w", l.addr, err)
		}
		return s, nil
	}
}

// ctrlBuffers returns how many control buffers a connection with slots
// slots needs: one per slot's frame message, and a few for the end.
func ctrlBuffers(slots int) int { return slots + 4 }

// accept runs the control exchange with the sender of req.
func (l *Listener) accept(req *Info) (*Stream, error) {
	c, err := openConn(l.fab, req, ctrlBuffers(l.cfg.Slots)+2)
	if err != nil {
		l.pep.Reject(req)
		req.Close()
		return nil, err
	}
	l.mu.Lock()
	l.streams++
	l.mu.Unlock()
	s := &Stream{c: c, l: l, cfg: l.cfg}
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
	if err := c.waitEvent(EventConnected, l.cfg.ConnectTimeout, "connect"); err != nil {
		return nil, err
	}
	b, err := s.waitCtrl(l.cfg.ConnectTimeout, "hello")
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
	dup := l.modules[h.Module]
	l.modules[h.Module] = true
	l.mu.Unlock()
	if dup {
		err := fmt.Errorf("%w: module %d is already connected", ErrProtocol, h.Module)
		s.refuse(RefuseModule, err.Error())
		return nil, err
	}
	s.module = true
	if err := s.makeRing(); err != nil {
		s.refuse(RefuseResources, err.Error())
		return nil, err
	}
	msg := appendAccept(make([]byte, 0, acceptSize), &Accept{
		Slots: uint32(len(s.frames)), SlotSize: uint32(s.slotSize), Addr: s.ringMR.Addr, Key: s.ringMR.Key,
	})
	if err := c.sendCtrl(s.sendBuf(), msg, l.cfg.ConnectTimeout); err != nil {
		return nil, err
	}
	s.idle = time.Now()
	ok = true
	return s, nil
}

// Close stops listening. Streams already accepted go on.
func (l *Listener) Close() error {
	var errs []error
	if l.pep != nil {
		errs = append(errs, l.pep.Close())
	}
	if l.eq != nil {
		errs = append(errs, l.eq.Close())
	}
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
