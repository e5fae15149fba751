package service

import (
	"net"
	"strconv"
	"sync"
	"time"
)

// limitListener caps the connections a server holds open: at most max in
// all and maxPer from one client address. A connection beyond either is
// answered 503 and closed as soon as it is accepted, so that clients that
// open connections and never close them (a page of event streams nobody
// reads, a descriptor storm) cost the process no descriptor for long, and
// leave room for the control system and the detector.
type limitListener struct {
	net.Listener
	max, maxPer int

	mu    sync.Mutex
	total int
	per   map[string]int // open connections by client address
}

func newLimitListener(l net.Listener, max, maxPer int) *limitListener {
	return &limitListener{Listener: l, max: max, maxPer: maxPer, per: map[string]int{}}
}

// tooMany is what a connection beyond the caps is told before it is
// closed.
var tooMany = func() []byte {
	body := "too many connections to the scan service at once: close some first\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// Accept returns the next connection within the caps.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client := clientAddr(c.RemoteAddr())
		l.mu.Lock()
		ok := l.total < l.max && l.per[client] < l.maxPer
		if ok {
			l.total++
			l.per[client]++
		}
		l.mu.Unlock()
		if ok {
			return &limitedConn{Conn: c, l: l, client: client}, nil
		}
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		c.Write(tooMany)
		c.Close()
	}
}

func (l *limitListener) release(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.per[client]--; l.per[client] <= 0 {
		delete(l.per, client)
	}
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
	once   sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.client) })
	return err
}
