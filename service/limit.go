package service

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// limitListener caps the connections a server holds open: at most max in
// all and maxPer from one client address, so that clients that open
// connections and never close them (a page of event streams nobody
// reads, a descriptor storm) cannot take the process's descriptors from
// the detector.
//
// A full cap does not lock the control system out: a new connection
// beyond it takes the place of one that serves no control request, of
// the same client where that client is at its cap, else of the client
// that holds the most places. Of that client's connections, those
// between requests, or still sending their first request's head after
// freshGrace, go first, oldest first; then those serving a long request
// (the event stream, wait) or a request without the service's token
// (from off loopback, where the service has none); then those that have
// not sent a request yet, oldest first; then those between requests that
// the control system used. Where only connections accepted within
// freshGrace could make way, none of which has yet said what it is, the
// new connection waits up to freshWait for a place or for one of them to
// say, as a flood's requests are answered and its connections closed: so
// a flood of new connections from the control system's own address does
// not close a control request whose head is still unread. It waits on a
// goroutine of its own (at most maxWaiting at once; beyond them a
// connection makes way at once), never holding up the connections
// accepted after it. Only where every place serves a control request is
// the new connection refused: it is answered 503 once its request's head
// is read (or after a second), so that its client sees why.
type limitListener struct {
	net.Listener
	max, maxPer int
	grace       time.Duration // freshGrace; longer in tests that must not see it pass

	mu       sync.Mutex
	changed  *sync.Cond // on mu: a place was given back or a connection's state changed
	conns    map[*limitedConn]struct{}
	per      map[string]int // open connections by client address
	refusing chan struct{}  // places for connections being refused
	waiting  chan struct{}  // places for connections waiting for a place

	start     sync.Once
	accepted  chan accepted // the connections placed, and the errors of the listener's Accept
	done      chan struct{} // closed once the listener's Accept failed for good
	err       error         // that failure; set before done is closed
	closeOnce sync.Once
	closing   chan struct{} // closed by Close
}

// maxWaiting bounds the connections that wait for a place at once.
const maxWaiting = 16

// accepted is a connection placed, or an error of the listener's Accept.
type accepted struct {
	c   *limitedConn
	err error
}

func newLimitListener(l net.Listener, max, maxPer int) *limitListener {
	ll := &limitListener{Listener: l, max: max, maxPer: maxPer, grace: freshGrace, conns: map[*limitedConn]struct{}{},
		per: map[string]int{}, refusing: make(chan struct{}, 16), waiting: make(chan struct{}, maxWaiting),
		accepted: make(chan accepted), done: make(chan struct{}), closing: make(chan struct{})}
	ll.changed = sync.NewCond(&ll.mu)
	return ll
}

// The states of a connection, as the handler marks them (hold).
const (
	connFresh     int32 = iota // accepted, its first request's head not read yet
	connIdle                   // between requests, or sending a later request's head
	connRequest                // serving a request that may make way
	connTrusted                // between requests, after one of the control system's
	connProtected              // serving a control request
)

// freshGrace is how long a new connection ranks as fresh, after the
// connections serving requests that may make way; a client on a loaded
// machine sends its request's head well within it, and a connection that
// sends none by then ranks with the idle ones. freshWait is how long a
// connection beyond the caps waits where only fresh ones could make way.
const (
	freshGrace = 100 * time.Millisecond
	freshWait  = 50 * time.Millisecond
)

// The order in which connections make way, first to last (rank).
const (
	rankIdle    = iota // between requests, or fresh past the grace
	rankRequest        // serving a request that may make way
	rankFresh          // accepted within the grace, no request yet
	rankTrusted        // between requests, after one of the control system's
)

// rank returns c's place in the order in which connections make way, at
// now; a connection serving a control request makes way for none and is
// never asked.
func (c *limitedConn) rank(now time.Time) int {
	switch st := c.state.Load(); {
	case st == connFresh && now.Sub(c.since) >= c.l.grace, st == connIdle:
		return rankIdle
	case st == connRequest:
		return rankRequest
	case st == connFresh:
		return rankFresh
	default:
		return rankTrusted
	}
}

// tooMany is what a connection beyond the caps is told before it is
// closed.
var tooMany = func() []byte {
	body := "too many connections to the scan service at once: close some first\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// Accept returns the next connection placed within the caps.
func (l *limitListener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.acceptAll() })
	select {
	case a := <-l.accepted:
		if a.err != nil {
			return nil, a.err
		}
		return a.c, nil
	case <-l.done:
		return nil, l.err
	}
}

// acceptAll takes the listener's connections and places each, until the
// listener fails for good (closed). Its other errors (too many open
// files) go to Accept, whose server backs off before it asks again.
func (l *limitListener) acceptAll() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) {
				select {
				case l.accepted <- accepted{err: err}:
					continue
				case <-l.closing:
				}
			}
			l.err = err
			close(l.done)
			return
		}
		if lc := l.place(c, false); lc != nil {
			l.deliver(lc)
		}
	}
}

// deliver hands lc to Accept, or closes it where the listener is closed.
func (l *limitListener) deliver(lc *limitedConn) {
	select {
	case l.accepted <- accepted{c: lc}:
	case <-l.closing:
		lc.Close()
	}
}

// Close closes the listener; the connections waiting for a place are
// closed too.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.closing) })
	return l.Listener.Close()
}

// place finds c a place within the caps, making way for it where they
// are reached, and returns it as a limitedConn; it returns nil where c
// was refused, or went to wait for a place on a goroutine of its own
// (which delivers it). waiter says the caller is that goroutine.
func (l *limitListener) place(c net.Conn, waiter bool) *limitedConn {
	client := clientAddr(c.RemoteAddr())
	wait := time.Now().Add(freshWait)
	for {
		l.mu.Lock()
		var victim *limitedConn
		switch {
		case l.per[client] >= l.maxPer:
			victim = l.victim(client)
		case len(l.conns) >= l.max:
			victim = l.victim("")
		default:
			lc := &limitedConn{Conn: c, l: l, client: client, since: time.Now()}
			l.conns[lc] = struct{}{}
			l.per[client]++
			l.mu.Unlock()
			return lc
		}
		if now := time.Now(); victim != nil && victim.rank(now) == rankFresh && now.Before(wait) {
			if waiter { // for a place, or for a fresh one to say what it is
				l.waitChange(wait)
				l.mu.Unlock()
				continue
			}
			select {
			case l.waiting <- struct{}{}:
				l.mu.Unlock()
				go func() {
					defer func() { <-l.waiting }()
					if lc := l.place(c, true); lc != nil {
						l.deliver(lc)
					}
				}()
				return nil
			default: // as many wait as may: c makes way at once
			}
		}
		l.mu.Unlock()
		if victim == nil {
			l.refuse(c)
			return nil
		}
		victim.Close() // gives its place back
	}
}

// victim returns the connection that makes way for a new one of client
// ("" for any client): one of the client that holds the most places, so
// that a flood from some addresses does not take the place of another's
// connection that is still sending its request; of its connections the
// first in the order of rank. It returns nil where every one serves a
// control request. l.mu is held.
func (l *limitListener) victim(client string) *limitedConn {
	var best *limitedConn
	now := time.Now()
	better := func(c *limitedConn) bool {
		if n, m := l.per[c.client], l.per[best.client]; n != m {
			return n > m
		}
		if cr, br := c.rank(now), best.rank(now); cr != br {
			return cr < br
		}
		return c.since.Before(best.since)
	}
	for c := range l.conns {
		if client != "" && c.client != client || c.state.Load() == connProtected {
			continue
		}
		if best == nil || better(c) {
			best = c
		}
	}
	return best
}

// waitChange waits, with l.mu held, until a connection gives its place
// back or changes its state, or until deadline.
func (l *limitListener) waitChange(deadline time.Time) {
	t := time.AfterFunc(time.Until(deadline), func() {
		l.mu.Lock()
		l.changed.Broadcast()
		l.mu.Unlock()
	})
	l.changed.Wait()
	t.Stop()
}

// refuse answers c 503 after reading its request's head, for at most a
// second, and closes it; where many are being refused at once, it closes
// c at once.
func (l *limitListener) refuse(c net.Conn) {
	select {
	case l.refusing <- struct{}{}:
	default:
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.refusing }()
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		r := bufio.NewReaderSize(c, 4096)
		for read := 0; read < maxBody; {
			line, err := r.ReadSlice('\n')
			read += len(line)
			if err != nil && err != bufio.ErrBufferFull {
				break
			}
			if err == nil && strings.TrimRight(string(line), "\r\n") == "" {
				break
			}
		}
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		c.Write(tooMany)
	}()
}

func (l *limitListener) release(c *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.conns, c)
	if l.per[c.client]--; l.per[c.client] <= 0 {
		delete(l.per, c.client)
	}
	l.changed.Broadcast()
}

// clientAddr returns the address a connection came from, without its
// port.
func clientAddr(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// limitedConn gives its place back once closed.
type limitedConn struct {
	net.Conn
	l      *limitListener
	client string
	state  atomic.Int32 // connFresh, connIdle, connRequest, connTrusted or connProtected
	since  time.Time    // accepted or last marked; under l.mu
	once   sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}

// mark sets the connection's state, and makes it the newest of its
// state.
func (c *limitedConn) mark(state int32) {
	c.l.mu.Lock()
	c.state.Store(state)
	c.since = time.Now()
	c.l.changed.Broadcast()
	c.l.mu.Unlock()
}

// connKey is the context key of the connection a request came on.
type connKey struct{}

// withConn is the server's ConnContext: it keeps the connection in the
// context of its requests, for hold.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// hold marks a request's connection, while the request is served, as one
// that may be made way for or, for a control request, one that may not: a
// request of the control system (with the service's token; without a
// token, from loopback) that is not a long one (the event stream, wait).
// Between requests, a connection the control system used makes way after
// the others.
func (s *Service) hold(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := r.Context().Value(connKey{}).(*limitedConn)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		state, after := connRequest, connIdle
		if s.controlSystem(r) {
			after = connTrusted
			if !long(r) {
				state = connProtected
			}
		}
		c.mark(state)
		defer c.mark(after)
		next.ServeHTTP(w, r)
	})
}

// controlSystem reports whether r comes from the control system: it
// carries the service's token, or, where the service has none, it comes
// from loopback.
func (s *Service) controlSystem(r *http.Request) bool {
	if s.cfg.Token != "" {
		return s.tokenGiven(r.Header.Get("Authorization"))
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// long reports whether r may last as long as its client likes: the event
// stream, or a wait.
func long(r *http.Request) bool {
	return r.URL.Path == "/v1/events" || strings.HasSuffix(r.URL.Path, "/wait")
}
