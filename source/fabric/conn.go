package fabric

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"h5ingest/receive"
	"h5ingest/source/fabric/internal/fi"
)

// ErrDisconnected is wrapped by errors for a connection the peer closed or
// lost before the end of the scan.
var ErrDisconnected = errors.New("peer disconnected")

// ErrTimeout is wrapped by errors for a peer that did not connect, answer,
// or send in time.
var ErrTimeout = receive.ErrTimeout

// Completion contexts: the kind of buffer in the high bits, its index in
// the low ones.
const (
	ctxCtrl  = 1 << 32 // a control message buffer
	ctxSlot  = 2 << 32 // a frame slot (receiver) or frame buffer (sender)
	ctxSmall = 3 << 32 // a buffer a small message is sent from (sendSmall)
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

	// What the provider allows, read from info when the connection opens:
	// the largest message fi_inject takes (verbs: the NIC's inline size,
	// which may be 0) and the largest message of all.
	injectSize int
	maxMsg     uint64

	comp [fi.MaxBatch]fi.Completion

	// Transmit completions are read under txMu (the receiver returns
	// credits from any goroutine), into txComp. Those of small messages
	// free their buffers (smallFree, under smallMu); txDone, where set,
	// takes every other (the sender's frame buffers).
	txMu    sync.Mutex
	txComp  [fi.MaxBatch]fi.Completion
	txDone  func(fi.Completion)
	smallMu sync.Mutex
	small   []int // control buffers free to send a small message from
	// sentFromBuffers counts the small messages sent with fi_send, not
	// injected.
	sentFromBuffers atomic.Uint64

	// sendErr, where set (tests), fails the small messages it returns an
	// error for, as a provider would.
	sendErr func(typ uint16) error
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
// with ctrl control buffers of ctrlSize bytes. The connection has a
// domain of its own, which it closes with everything registered in it:
// the verbs provider caches registrations per domain, by address, and a
// cache that outlived a ring could hand a later ring's registration the
// pages of an unmapped one (docs/protocol.md).
func openConn(fab *fi.Fabric, info *fi.Info, ctrl int) (_ *conn, err error) {
	c := &conn{info: info, ctrl: ctrl, injectSize: info.InjectSize(), maxMsg: info.MaxMessage()}
	defer func() {
		if err != nil {
			c.info = nil // still the caller's, which rejects the request and closes it
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
	if c.ctrlMem, err = fi.Alloc((ctrl + scratchBuffers + smallBuffers) * ctrlSize); err != nil {
		return nil, err
	}
	if c.ctrlMR, err = fi.Register(c.dom, c.ctrlMem, fi.AccessSend|fi.AccessRecv); err != nil {
		return nil, err
	}
	for k := range smallBuffers {
		c.small = append(c.small, ctrl+scratchBuffers+k)
	}
	return c, nil
}

// ctrlBuf returns control buffer i.
func (c *conn) ctrlBuf(i int) []byte {
	return c.ctrlMem.Bytes()[i*ctrlSize : (i+1)*ctrlSize : (i+1)*ctrlSize]
}

// scratchBuffers is how many buffers past the control buffers hold
// messages being built: fi_inject may not be given Go memory that holds
// pointers, and these keep the hot path free of allocations. Buffer 0 is
// the receiver's credits' and the sender's frame and end messages'; 1 the
// receiver's bye.
const scratchBuffers = 2

// smallBuffers is how many buffers past the scratch ones small messages
// are sent from where the provider cannot inject them.
const smallBuffers = 16

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

// errNoSmallBuffer is postSmall's answer while every small-message
// buffer is in flight: temporary, like a full transmit queue.
var errNoSmallBuffer = &fi.Error{Op: "send a control message", Code: syscall.EAGAIN, Text: "every control send buffer is in flight"}

// postSmall posts a small message (credit, frame, end, bye: at most
// ctrlSize bytes) once. Where the provider injects that many bytes it is
// injected, and msg may be reused at once; otherwise (verbs on a NIC with
// a smaller inline size, or none) it is copied into one of the
// connection's registered buffers and sent with fi_send, and the buffer
// is free again when the send completes. A full queue, or no buffer free,
// is a temporary *fi.Error.
func (c *conn) postSmall(msg []byte) error {
	if c.sendErr != nil {
		if err := c.sendErr(binary.LittleEndian.Uint16(msg[6:])); err != nil {
			return err
		}
	}
	if len(msg) <= c.injectSize {
		return c.ep.Inject(msg)
	}
	c.smallMu.Lock()
	if len(c.small) == 0 {
		c.smallMu.Unlock()
		return errNoSmallBuffer
	}
	i := c.small[len(c.small)-1]
	c.small = c.small[:len(c.small)-1]
	c.smallMu.Unlock()
	b := c.ctrlBuf(i)[:len(msg)]
	copy(b, msg)
	if err := c.ep.Send(b, c.ctrlMR, ctxSmall|uint64(i)); err != nil {
		c.freeSmall(i)
		return err
	}
	c.sentFromBuffers.Add(1)
	return nil
}

func (c *conn) freeSmall(i int) {
	c.smallMu.Lock()
	c.small = append(c.small, i)
	c.smallMu.Unlock()
}

// sendSmall posts a small message (postSmall), retrying while the
// transmit queue is full or every buffer is in flight, up to a second,
// and reading transmit completions meanwhile.
func (c *conn) sendSmall(msg []byte) error {
	deadline := time.Now().Add(time.Second)
	for {
		err := c.postSmall(msg)
		var fe *fi.Error
		if err == nil || !errors.As(err, &fe) || !fe.Temporary() || time.Now().After(deadline) {
			return err
		}
		if _, _, err := c.readTx(time.Millisecond, 0); err != nil {
			return err
		}
	}
}

// readTx reads the transmit completions there are, waiting up to wait for
// the first, and returns how many it read and whether one had context
// want (0: none wanted). A small message's completion frees its buffer;
// every other goes to txDone, where set.
func (c *conn) readTx(wait time.Duration, want uint64) (n int, found bool, err error) {
	c.txMu.Lock()
	defer c.txMu.Unlock()
	n, err = c.tx.Read(c.txComp[:], wait)
	for _, comp := range c.txComp[:n] {
		switch {
		case comp.Context&^ctxIndex == ctxSmall:
			c.freeSmall(int(comp.Context & ctxIndex))
		case want != 0 && comp.Context == want:
			found = true
		case c.txDone != nil:
			c.txDone(comp)
		}
	}
	var ce *fi.CompletionError
	if errors.As(err, &ce) && ce.Context&^ctxIndex == ctxSmall {
		c.freeSmall(int(ce.Context & ctxIndex))
	}
	return n, found, err
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
		_, done, err := c.readTx(10*time.Millisecond, ctxCtrl|uint64(i))
		if err != nil {
			return err
		}
		if done {
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
	if c.ctrlMem != nil {
		// After the domain: see openConn.
		errs = append(errs, c.ctrlMem.Free())
	}
	if c.info != nil {
		errs = append(errs, c.info.Close())
	}
	return errors.Join(errs...)
}
