package fabric

import (
	"errors"
	"fmt"
	"h5ingest/source/fabric/internal/fi"
	"time"
)

// ErrDisconnected is wrapped by errors for a connection the peer closed or
// lost before the end of the scan.
var ErrDisconnected = errors.New("peer disconnected")

// ErrTimeout is wrapped by errors for a peer that did not connect, answer,
// or send in time.
var ErrTimeout = errors.New("timed out")

// Completion contexts: the kind of buffer in the high bits, its index in
// the low ones.
const (
	ctxCtrl  = 1 << 32 // a control message buffer
	ctxSlot  = 2 << 32 // a frame slot (receiver) or frame buffer (sender)
	ctxIndex = 1<<32 - 1
)

// conn is the libfabric side of one connection: a domain of its own, an
// event queue, completion queues for transmits and receives, the
// endpoint, and a region of control message buffers.
type conn struct {
	info   *fi.Info
	dom    *fi.Domain
	eq     *fi.EventQueue
	tx, rx *fi.CompletionQueue
	ep     *fi.Endpoint

	ctrlMem *fi.Memory
	ctrlMR  *fi.MemoryRegion
	ctrl    int // control buffers in ctrlMem

	comp [fi.MaxBatch]fi.Completion
	// quit, where set, ends the waits of a handshake when closed: the
	// listener is closing.
	quit <-chan struct{}
}

// errListenerClosed ends a handshake whose listener closed.
var errListenerClosed = errors.New("the listener is closed")

// quitting reports whether c's quit channel is closed.
func (c *conn) quitting() bool {
	select {
	case <-c.quit:
		return true
	default:
		return false
	}
}

// openConn opens the objects of a connection described by info on fab,
// with ctrl control buffers of ctrlSize bytes.
func openConn(fab *fi.Fabric, info *fi.Info, ctrl int) (c *conn, err error) {
	c = &conn{info: info, ctrl: ctrl}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	if c.dom, err = fi.OpenDomain(fab, info); err != nil {
		return nil, err
	}
	if c.eq, err = fi.OpenEventQueue(fab); err != nil {
		return nil, err
	}
	if c.tx, err = fi.OpenCompletionQueue(c.dom, info.TxSize()); err != nil {
		return nil, err
	}
	if c.rx, err = fi.OpenCompletionQueue(c.dom, info.RxSize()); err != nil {
		return nil, err
	}
	if c.ep, err = fi.OpenEndpoint(c.dom, info, c.eq, c.tx, c.rx); err != nil {
		return nil, err
	}
	if c.ctrlMem, err = fi.Alloc((ctrl + scratchBuffers) * ctrlSize); err != nil {
		return nil, err
	}
	if c.ctrlMR, err = fi.Register(c.dom, c.ctrlMem.Bytes()); err != nil {
		return nil, err
	}
	return c, nil
}

// ctrlBuf returns control buffer i.
func (c *conn) ctrlBuf(i int) []byte {
	return c.ctrlMem.Bytes()[i*ctrlSize : (i+1)*ctrlSize : (i+1)*ctrlSize]
}

// scratchBuffers is how many buffers past the control buffers hold
// messages being injected: fi_inject may not be given Go memory that holds
// pointers, and these keep the hot path free of allocations.
const scratchBuffers = 2

// scratch returns scratch buffer k, of n bytes.
func (c *conn) scratch(k, n int) []byte {
	return c.ctrlBuf(c.ctrl + k)[:n]
}

// postCtrl posts a receive into control buffer i.
func (c *conn) postCtrl(i int) error {
	return c.ep.Recv(c.ctrlBuf(i), c.ctrlMR, ctxCtrl|uint64(i))
}

// waitEvent waits up to timeout for connection event kind.
func (c *conn) waitEvent(kind uint32, timeout time.Duration, what string) error {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%s: no answer in %v: %w", what, timeout, ErrTimeout)
		}
		if c.quitting() {
			return fmt.Errorf("%s: %w", what, errListenerClosed)
		}
		ev, ok, err := c.eq.Read(min(left, 100*time.Millisecond))
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !ok {
			continue
		}
		if ev.Info != nil {
			ev.Info.Close()
		}
		switch ev.Kind {
		case kind:
			return nil
		case fi.EventShutdown:
			return fmt.Errorf("%s: %w", what, ErrDisconnected)
		}
	}
}

// shutDown reports whether the peer has closed the connection, without
// waiting.
func (c *conn) shutDown() bool {
	ev, ok, err := c.eq.Read(0)
	if err != nil {
		return true
	}
	if ok && ev.Info != nil {
		ev.Info.Close()
	}
	return ok && ev.Kind == fi.EventShutdown
}

// inject sends a small message, retrying while the transmit queue is full
// (up to a second).
func (c *conn) inject(b []byte) error {
	deadline := time.Now().Add(time.Second)
	for {
		err := c.ep.Inject(b)
		var fe *fi.Error
		if err == nil || !errors.As(err, &fe) || !fe.Temporary() || time.Now().After(deadline) {
			return err
		}
		var comp [1]fi.Completion
		c.tx.Read(comp[:], time.Millisecond) // drives the provider's progress
	}
}

// sendCtrl sends msg (at most ctrlSize bytes) from control buffer i and
// waits up to timeout for it to complete.
func (c *conn) sendCtrl(i int, msg []byte, timeout time.Duration) error {
	b := c.ctrlBuf(i)[:len(msg)]
	copy(b, msg)
	if err := c.ep.Send(b, c.ctrlMR, ctxCtrl|uint64(i)); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		n, err := c.tx.Read(c.comp[:1], 10*time.Millisecond)
		if err != nil {
			return err
		}
		if n == 1 && c.comp[0].Context == ctxCtrl|uint64(i) {
			return nil
		}
	}
	return fmt.Errorf("send %s message: not completed in %v: %w", msgNames[msg[6]], timeout, ErrTimeout)
}

// close shuts the connection down and closes everything it opened, the
// info included.
func (c *conn) close() error {
	var errs []error
	if c.ep != nil {
		errs = append(errs, c.ep.Close())
	}
	if c.ctrlMR != nil {
		errs = append(errs, c.ctrlMR.Close())
	}
	if c.ctrlMem != nil {
		errs = append(errs, c.ctrlMem.Free())
	}
	for _, q := range []*fi.CompletionQueue{c.tx, c.rx} {
		if q != nil {
			errs = append(errs, q.Close())
		}
	}
	if c.eq != nil {
		errs = append(errs, c.eq.Close())
	}
	if c.dom != nil {
		errs = append(errs, c.dom.Close())
	}
	if c.info != nil {
		errs = append(errs, c.info.Close())
	}
	return errors.Join(errs...)
}
