package stream

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"
)

// sender is a stream's ZeroMQ side: a context of its own, so that closing
// it can wait for what is queued to be written out (and frees everything
// the scan's stream used), the PUSH socket, and a monitor of the
// consumers' connections. Only the sending goroutine uses it once Open
// has returned.
type sender struct {
	ctx      *zmq.Context
	sock     *zmq.Socket
	mon      *zmq.Socket // PAIR: the PUSH socket's connection events
	endpoint string

	peers   int // consumers connected, as the monitor said
	watched time.Time
	opened  time.Time
	timeout time.Duration // the socket's send timeout as last set
}

// monitors numbers the inproc endpoints of the monitors.
var monitors atomic.Uint64

// listen binds a PUSH socket to address in a context of its own, and
// watches its consumers come and go.
func listen(address string) (*sender, error) {
	ctx, err := zmq.NewContext()
	if err != nil {
		return nil, fmt.Errorf("stream: context: %w", err)
	}
	n := &sender{ctx: ctx, opened: time.Now()}
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
	if err := n.sock.Bind(address); err != nil {
		return fail("bind "+address, err)
	}
	if n.endpoint, err = n.sock.GetLastEndpoint(); err != nil {
		n.endpoint = address
	}
	mon := fmt.Sprintf("inproc://h5ingest-stream-monitor-%d", monitors.Add(1))
	if err := n.sock.Monitor(mon, zmq.EVENT_ACCEPTED|zmq.EVENT_DISCONNECTED); err != nil {
		return fail("monitor", err)
	}
	if n.mon, err = ctx.NewSocket(zmq.PAIR); err != nil {
		return fail("monitor", err)
	}
	if err := n.mon.Connect(mon); err != nil {
		return fail("monitor", err)
	}
	return n, nil
}

// consumers returns how many consumers are connected, reading the
// monitor's events at most every watchEvery unless now is zero.
func (n *sender) consumers(now time.Time) int {
	if !now.IsZero() && now.Sub(n.watched) < watchEvery {
		return n.peers
	}
	n.watched = now
	for {
		ev, _, _, err := n.mon.RecvEvent(zmq.DONTWAIT)
		if err != nil {
			return n.peers
		}
		switch ev {
		case zmq.EVENT_ACCEPTED:
			n.peers++
		case zmq.EVENT_DISCONNECTED:
			n.peers = max(n.peers-1, 0)
		}
	}
}

// watchEvery is how often a sender that sends freely reads the monitor.
const watchEvery = 100 * time.Millisecond

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
		if quick && n.consumers(now) == 0 && now.Sub(n.opened) >= connectGrace {
			return errNoConsumer
		}
		wait := deadline.Sub(now)
		if wait <= 0 {
			if n.consumers(time.Time{}) == 0 {
				return errNoConsumer
			}
			return errTimeout
		}
		// Block in ZeroMQ, which wakes as soon as there is room, for a
		// short while at a time to see consumers come and go. (Setting
		// the timeout allocates: it is set only when it changes.)
		if t := min(wait, putSlice).Round(time.Millisecond); t != n.timeout && t > 0 {
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

// connectGrace is how long a consumer started before the stream may take
// to connect: ZeroMQ retries a connection every 100 ms by default.
const connectGrace = 300 * time.Millisecond

// putSlice is how long put blocks in ZeroMQ at a time.
const putSlice = 50 * time.Millisecond

// again says whether err is ZeroMQ's "try again": no room for now.
func again(err error) bool { return err != nil && zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN) }

// close closes the sockets and ends the context, letting ZeroMQ write out
// what is queued for up to linger; it returns whether all of it was
// written before then.
func (n *sender) close(linger time.Duration) (flushed bool) {
	if n.sock != nil {
		n.sock.Monitor("", 0)
		n.sock.SetLinger(max(linger, 0))
		n.sock.Close()
	}
	if n.mon != nil {
		n.mon.Close()
	}
	start := time.Now()
	n.ctx.Term() // returns once the queue is written out, or the linger has passed
	return time.Since(start) < linger
}

// send runs on its own goroutine, the only one that uses the socket once
// Open has returned: it sends the start message once a consumer is
// there, every queued image, and at the end the end message, then closes
// the socket.
func (s *Stream) send(start []byte) {
	defer close(s.done)
	n := s.net
	started := false
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
			if !started {
				s.peers.Store(int32(n.consumers(time.Time{})))
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
		s.peers.Store(int32(n.consumers(now)))
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
		case errors.Is(err, errNoConsumer):
			s.noConsumer.Add(1)
		case quick:
			s.undelivered.Add(1)
		default:
			s.slow.Add(1)
		}
		s.free <- img
	}
	s.closeErr = s.end(start, started)
}

// startRetry is how often the start message is tried until a consumer
// takes it.
const startRetry = 20 * time.Millisecond

// end sends the end of the series with the counts, within what is left
// of the linger, closes the socket and reports what was not delivered.
func (s *Stream) end(start []byte, started bool) error {
	n := s.net
	deadline := time.Unix(0, s.deadline.Load())
	// A consumer waiting for the stream to bind has the time to connect.
	for n.consumers(time.Time{}) == 0 && time.Since(n.opened) < connectGrace && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	err := errNoConsumer
	if n.peers > 0 {
		err = nil
		if !started {
			err = n.put(start, deadline, true)
		}
		if err == nil {
			var end []byte
			if end, err = endMessage(s.uniqueID, s.number, s.Stats()); err != nil {
				n.close(0)
				return err
			}
			err = n.put(end, deadline, true)
		}
	}
	if err != nil {
		n.close(0) // what ZeroMQ holds goes now: nobody takes it
		if s.sent.Load() > 0 && !errors.Is(err, errNoConsumer) {
			// The last image may have been in ZeroMQ's queue still.
			s.sent.Add(^uint64(0))
			s.undelivered.Add(1)
		}
		return s.endError(err)
	}
	if !n.close(time.Until(deadline)) {
		if s.sent.Load() > 0 {
			s.sent.Add(^uint64(0))
			s.undelivered.Add(1)
		}
		return s.endError(errTimeout)
	}
	s.endDelivered.Store(true)
	return nil
}

// endError says why the end of series was not delivered.
func (s *Stream) endError(err error) error {
	if errors.Is(err, errNoConsumer) {
		return fmt.Errorf("stream %s: no consumer connected: the end of series was not sent", s.endpoint)
	}
	if errors.Is(err, errTimeout) {
		return fmt.Errorf("stream %s: the consumer did not take the end of series within the linger (%v)", s.endpoint, s.cfg.Linger)
	}
	return fmt.Errorf("stream %s: end of series: %w", s.endpoint, err)
}
