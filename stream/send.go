package stream

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// sender is a stream's ZeroMQ side: the PUSH socket in a context of its
// own, so that closing it can wait for what is queued to be written out
// (and frees everything the socket used), and a goroutine that follows
// the consumers' connections through the socket's monitor. Only the
// sending goroutine of the stream that has it uses the socket.
//
// A socket bound to the port its address names stays bound when its
// stream is closed, for the next stream of that address (the next
// scan's), as a detector's stays bound from one series to the next: a
// consumer connected to it stays connected, and gets the next series'
// start and every image of it, rather than reconnecting while the first
// images go out. One bound to a port ZeroMQ chose (tcp://host:*) is
// closed with its stream: nobody could reconnect to it.
type sender struct {
	ctx      *zmq.Context
	sock     *zmq.Socket
	endpoint string
	kept     bool      // bound until the process ends, for the address's next stream
	busy     bool      // a stream has it; guarded by bound's mutex
	opened   time.Time // when it was bound

	peers    atomic.Int32  // consumers connected, as the monitor says
	mu       sync.Mutex    // guards changed
	changed  chan struct{} // closed, and replaced, when peers changes
	watching chan struct{} // closed when the monitor's goroutine has ended

	timeout time.Duration // the socket's send timeout as last set
}

// bound holds the sockets kept between streams, by address.
var bound = struct {
	sync.Mutex
	m map[string]*sender
}{m: map[string]*sender{}}

// take returns the socket of a stream of address: the one an earlier
// stream of address kept bound, or a new one.
func take(address string) (*sender, error) {
	bound.Lock()
	defer bound.Unlock()
	if n := bound.m[address]; n != nil {
		if n.busy {
			return nil, fmt.Errorf("stream: bind %s: the stream of another scan is bound there", address)
		}
		n.busy = true
		return n, nil
	}
	n, err := listen(address)
	if err != nil && yieldPort(address) {
		n, err = listen(address)
	}
	if err != nil {
		return nil, err
	}
	n.busy = true
	if n.kept {
		bound.m[address] = n
	}
	return n, nil
}

// CloseKept closes the sockets kept bound between streams that no stream
// has, each with up to linger for ZeroMQ to write out what it still holds
// for its consumers (a series' end message): a command calls it before
// its process exits, so that the end of its last series is not lost with
// the process. A stream that has its socket keeps it.
func CloseKept(linger time.Duration) {
	bound.Lock()
	var idle []*sender
	for a, n := range bound.m {
		if !n.busy {
			delete(bound.m, a)
			idle = append(idle, n)
		}
	}
	bound.Unlock()
	for _, n := range idle {
		n.close(linger)
	}
}

// yieldPort closes the sockets kept for other addresses of address's
// port (tcp://*:31001 and tcp://0.0.0.0:31001, say) that no stream has,
// so that address can bind it, and reports whether there were any.
// bound's mutex is held.
func yieldPort(address string) bool {
	i := strings.LastIndexByte(address, ':')
	if i < 0 {
		return false
	}
	port, yielded := address[i:], false
	for a, n := range bound.m {
		if !n.busy && strings.HasSuffix(a, port) {
			delete(bound.m, a)
			n.close(0)
			yielded = true
		}
	}
	return yielded
}

// release ends a stream's use of n: a kept socket waits, bound, for the
// next stream of its address, with what ZeroMQ holds still queued for its
// consumers; another is closed, with up to linger for ZeroMQ to write out
// what it holds.
func (n *sender) release(linger time.Duration) {
	if !n.kept {
		n.close(linger)
		return
	}
	bound.Lock()
	n.busy = false
	bound.Unlock()
}

// keeps says whether a socket bound to address stays bound between
// streams: unless ZeroMQ chooses its port (tcp://host:* or :0).
func keeps(address string) bool {
	return !strings.HasSuffix(address, ":*") && !strings.HasSuffix(address, ":0")
}

// monitors numbers the inproc endpoints of the monitors.
var monitors atomic.Uint64

// listen binds a PUSH socket to address in a context of its own, and
// follows its consumers as they come and go.
func listen(address string) (*sender, error) {
	ctx, err := zmq.NewContext()
	if err != nil {
		return nil, fmt.Errorf("stream: context: %w", err)
	}
	n := &sender{ctx: ctx, kept: keeps(address), opened: time.Now(), changed: make(chan struct{})}
	fail := func(what string, err error) (*sender, error) {
		n.close(0)
		return nil, fmt.Errorf("stream: %s: %w", what, err)
	}
	if n.sock, err = ctx.NewSocket(zmq.PUSH); err != nil {
		return fail("socket", err)
	}
	// One message waits inside ZeroMQ: the queue here is what bounds
	// memory and decides what is dropped, and the end of the scan knows
	// that the messages before the last have left.
	if err := n.sock.SetSndhwm(1); err != nil {
		return fail("socket options", err)
	}
	if err := n.sock.SetLinger(0); err != nil {
		return fail("socket options", err)
	}
	// The monitor first, so that no consumer connects unseen.
	mon := fmt.Sprintf("inproc://h5ingest-stream-monitor-%d", monitors.Add(1))
	if err := n.sock.Monitor(mon, zmq.EVENT_ACCEPTED|zmq.EVENT_DISCONNECTED); err != nil {
		return fail("monitor", err)
	}
	pair, err := ctx.NewSocket(zmq.PAIR)
	if err != nil {
		return fail("monitor", err)
	}
	if err := pair.Connect(mon); err != nil {
		pair.Close()
		return fail("monitor", err)
	}
	n.watching = make(chan struct{})
	go n.watch(pair)
	if err := n.sock.Bind(address); err != nil {
		return fail("bind "+address, err)
	}
	if n.endpoint, err = n.sock.GetLastEndpoint(); err != nil {
		n.endpoint = address
	}
	return n, nil
}

// watch counts the consumers connected as the monitor reports them, until
// the context ends.
func (n *sender) watch(mon *zmq.Socket) {
	defer close(n.watching)
	defer mon.Close()
	for {
		ev, _, _, err := mon.RecvEvent(0)
		if err != nil {
			return // the context is ending
		}
		d := int32(0)
		switch ev {
		case zmq.EVENT_ACCEPTED:
			d = 1
		case zmq.EVENT_DISCONNECTED:
			d = -1
		case zmq.EVENT_MONITOR_STOPPED:
			return
		}
		n.mu.Lock()
		n.peers.Store(max(n.peers.Load()+d, 0))
		close(n.changed)
		n.changed = make(chan struct{})
		n.mu.Unlock()
	}
}

// consumers returns how many consumers are connected.
func (n *sender) consumers() int { return int(n.peers.Load()) }

// change returns a channel closed when the consumers connected next change.
func (n *sender) change() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changed
}

// awaitConsumer waits until a consumer is connected or until.
func (n *sender) awaitConsumer(until time.Time) {
	for {
		ch := n.change()
		wait := time.Until(until)
		if n.consumers() > 0 || wait <= 0 {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
}

// errNoConsumer is a message that found no consumer connected.
var errNoConsumer = errors.New("no consumer connected")

// errTimeout is a message that no consumer took in time.
var errTimeout = errors.New("no consumer took it in time")

// put hands msg to ZeroMQ, waiting until deadline for a consumer to make
// room. With quick set (the scan has ended) it does not wait where no
// consumer is connected, once a consumer waiting for the stream to bind
// has had the time to connect.
func (n *sender) put(msg []byte, deadline time.Time, quick bool) error {
	_, err := n.sock.SendBytes(msg, zmq.DONTWAIT)
	if !again(err) {
		return err
	}
	for {
		now := time.Now()
		if quick && n.consumers() == 0 && now.Sub(n.opened) >= connectGrace {
			return errNoConsumer
		}
		wait := deadline.Sub(now)
		if wait <= 0 {
			if n.consumers() == 0 {
				return errNoConsumer
			}
			return errTimeout
		}
		// Block in ZeroMQ, which wakes as soon as there is room, for a
		// short while at a time to see consumers come and go. (Setting
		// the timeout allocates: it is set only when it changes.)
		if t := max(min(wait, putSlice).Round(time.Millisecond), time.Millisecond); t != n.timeout {
			if err := n.sock.SetSndtimeo(t); err != nil {
				return err
			}
			n.timeout = t
		}
		if _, err = n.sock.SendBytes(msg, 0); !again(err) {
			return err
		}
	}
}

// handedOn waits until deadline for ZeroMQ's queue to pass on the last
// message put: the socket takes another message once a connection has
// taken the one it holds (it holds one, SetSndhwm), and a connection takes
// a message once it has written what came before to the system.
func (n *sender) handedOn(deadline time.Time) error {
	p := zmq.NewPoller()
	p.Add(n.sock, zmq.POLLOUT)
	for {
		if n.consumers() == 0 {
			return errNoConsumer
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return errTimeout
		}
		polled, err := p.Poll(min(wait, putSlice))
		if err != nil {
			return err
		}
		if len(polled) > 0 {
			return nil
		}
	}
}

// connectGrace is how long a consumer started before the stream may take
// to connect: ZeroMQ retries a connection every 100 ms by default.
const connectGrace = 300 * time.Millisecond

// putSlice is how long put blocks in ZeroMQ at a time.
const putSlice = 50 * time.Millisecond

// again says whether err is ZeroMQ's "try again": no room for now.
func again(err error) bool { return err != nil && zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN) }

// close closes the socket and ends the context, letting ZeroMQ write out
// what is queued for up to linger.
func (n *sender) close(linger time.Duration) {
	if n.sock != nil {
		n.sock.SetLinger(max(linger, 0))
		n.sock.Close()
	}
	n.ctx.Term() // returns once the queue is written out, or the linger has passed; the monitor's goroutine ends
	if n.watching != nil {
		<-n.watching
	}
}

// send runs on its own goroutine, the only one that uses the socket once
// Open has returned: it sends the start message once a consumer is
// there, every queued image, and at the end the end message, then gives
// the socket back.
func (s *Stream) send(start []byte) {
	defer close(s.done)
	n := s.net
	started := false
	lastImage := false // the last message ZeroMQ took is an image
	// Until the start message has gone out, try it every so often: a
	// consumer that connects gets it before any image.
	retry := time.NewTicker(startRetry)
	defer retry.Stop()
	for {
		var img *image
		var ok bool
		select {
		case img, ok = <-s.queue:
		case <-retry.C:
			if !started && n.consumers() > 0 {
				_, err := n.sock.SendBytes(start, zmq.DONTWAIT)
				started = err == nil
			}
			if started {
				retry.Stop()
			}
			continue
		}
		if !ok {
			break
		}
		now := time.Now()
		deadline, quick := now.Add(s.cfg.SendTimeout), false
		if d := s.deadline.Load(); d != 0 {
			// The scan has ended: the images share the linger with the
			// end message, which keeps a quarter of it.
			deadline, quick = time.Unix(0, d).Add(-s.cfg.Linger/4), true
		}
		err := errTimeout
		if !started || now.Before(deadline) {
			err = nil
			if !started {
				if err = n.put(start, deadline, quick); err == nil {
					started = true
				}
			}
			if err == nil {
				err = n.put(s.imageMessage(img), deadline, quick)
			}
		}
		switch {
		case err == nil:
			s.sent.Add(1)
			lastImage = true
		case errors.Is(err, errNoConsumer):
			s.noConsumer.Add(1)
		case quick:
			s.undelivered.Add(1)
		default:
			s.slow.Add(1)
		}
		s.free <- img
	}
	s.closeErr = s.end(start, started, lastImage)
}

// startRetry is how often the start message is tried until a consumer
// takes it.
const startRetry = 20 * time.Millisecond

// end sends the end of the series with the counts, within what is left
// of the linger, gives the socket back and reports what was not
// delivered. The end is delivered once a connected consumer's connection
// has taken it from ZeroMQ's queue: every image counted sent has then
// gone the same way before it.
func (s *Stream) end(start []byte, started, lastImage bool) error {
	n := s.net
	deadline := time.Unix(0, s.deadline.Load())
	// A consumer waiting for the stream to bind has the time to connect.
	if grace := n.opened.Add(connectGrace); grace.Before(deadline) {
		n.awaitConsumer(grace)
	} else {
		n.awaitConsumer(deadline)
	}
	err := errNoConsumer
	put := false // ZeroMQ took the end
	if n.consumers() > 0 {
		err = nil
		if !started {
			err = n.put(start, deadline, true)
		}
		if err == nil {
			var end []byte
			if end, err = endMessage(s.uniqueID, s.number, s.Stats()); err != nil {
				n.release(0)
				return err
			}
			if err = n.put(end, deadline, true); err == nil {
				put = true
				err = n.handedOn(deadline)
			}
		}
	}
	if err == nil {
		// The connection writes the end out as it took it: a socket that
		// closes gives it the moment it needs.
		n.release(max(time.Until(deadline), putSlice))
		s.endDelivered.Store(true)
		return nil
	}
	if !n.kept && !put && lastImage && !errors.Is(err, errNoConsumer) {
		// ZeroMQ's queue, full, held the last image: it goes with the
		// socket, now.
		s.sent.Add(^uint64(0))
		s.undelivered.Add(1)
	}
	n.release(0)
	return s.endError(err, put && n.kept)
}

// endError says why the end of series was not delivered; queued says
// that it waits for the consumer in ZeroMQ's queue of a socket that stays
// bound.
func (s *Stream) endError(err error, queued bool) error {
	if errors.Is(err, errNoConsumer) {
		return fmt.Errorf("stream %s: no consumer connected: the end of series was not sent", s.endpoint)
	}
	if errors.Is(err, errTimeout) && queued {
		return fmt.Errorf("stream %s: the consumer did not take the end of series within the linger (%v); it stays queued for it", s.endpoint, s.cfg.Linger)
	}
	if errors.Is(err, errTimeout) {
		return fmt.Errorf("stream %s: the consumer did not take the end of series within the linger (%v)", s.endpoint, s.cfg.Linger)
	}
	return fmt.Errorf("stream %s: end of series: %w", s.endpoint, err)
}
