package service

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConnectionFloodLeavesControl: clients from several addresses keep
// the connection cap full with idle connections, slowloris heads that
// never end, and event streams that carry the token but are never read,
// re-opening what the service closes. The control system, with the
// token (or, where the service has none, on loopback, as the flood is
// too), must still arm, cancel and list scans: every one of its requests
// is answered, none 503.
func TestConnectionFloodLeavesControl(t *testing.T) {
	for _, token := range []string{"0123456789abcdef0123", ""} {
		t.Run(fmt.Sprintf("token %t", token != ""), func(t *testing.T) { floodControl(t, token) })
	}
}

func floodControl(t *testing.T, token string) {
	r := &fakeRunner{planned: 100000, tick: 10 * time.Millisecond}
	s := New(r, Config{Token: token, MaxConns: 12, MaxConnsPerClient: 4})
	addr := serveLoopback(t, s)

	stop := make(chan struct{})
	var flood sync.WaitGroup
	var opened [3]atomic.Int64
	for i, kind := range []string{"idle", "slowloris", "events"} {
		for _, from := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
			flood.Add(1)
			go func() {
				defer flood.Done()
				var held []net.Conn
				defer func() {
					for _, c := range held {
						c.Close()
					}
				}()
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: time.Second}
				for {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
					c, err := d.Dial("tcp", addr)
					if err != nil {
						continue
					}
					opened[i].Add(1)
					switch kind {
					case "slowloris":
						io.WriteString(c, "GET /v1/scans HTTP/1.1\r\nHost: "+addr+"\r\nX-a: ")
					case "events":
						c.(*net.TCPConn).SetReadBuffer(4096)
						io.WriteString(c, "GET /v1/events HTTP/1.1\r\nHost: "+addr+"\r\nAuthorization: Bearer "+token+"\r\n\r\n")
					}
					if held = append(held, c); len(held) > 8 {
						held[0].Close()
						held = held[1:]
					}
				}
			}()
		}
	}
	defer func() { close(stop); flood.Wait() }()
	time.Sleep(500 * time.Millisecond) // the cap is full

	do := func(method, path, body string) (int, error) {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if method == "POST" {
			req.Header.Set("Content-Type", "application/json")
		}
		cl := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := cl.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	answered := 0
	for i := range 10 {
		id := fmt.Sprint("f", i)
		for _, q := range []struct {
			method, path, body string
			want               int
		}{
			{"POST", "/v1/scans", `{"profile":"default","scan_id":"` + id + `","plan":{"projections":3}}`, http.StatusCreated},
			{"GET", "/v1/scans/" + id, "", http.StatusOK},
			{"POST", "/v1/scans/" + id + "/cancel", "{}", http.StatusAccepted},
		} {
			code, err := do(q.method, q.path, q.body)
			if err != nil || code != q.want {
				t.Errorf("%s %s under the flood: %d %v, want %d", q.method, q.path, code, err, q.want)
				continue
			}
			answered++
		}
		// The cancelled scan ends before the next is armed.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			s.mu.Lock()
			idle := s.current == nil
			s.mu.Unlock()
			if idle {
				break
			}
		}
	}
	t.Logf("%d of 30 control requests answered; the flood opened %d idle, %d slowloris and %d event stream connections",
		answered, opened[0].Load(), opened[1].Load(), opened[2].Load())
}

// cappedListener listens on a loopback port with the caps total and
// perClient, accepting until the test ends, and returns a dial that connects
// from address from and gives the connection and the listener's side of
// it, or nil where the listener took none within 2 s.
func cappedListener(t *testing.T, total, perClient int) func(from string) (net.Conn, *limitedConn) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(raw, total, perClient)
	l.grace = time.Hour // a connection is fresh until the test says it is not, however slow the machine
	t.Cleanup(func() { l.Close() })
	addr := raw.Addr().String()
	accepted := make(chan *limitedConn, 2*total+2)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c.(*limitedConn)
		}
	}()
	return func(from string) (net.Conn, *limitedConn) {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-accepted:
			return c, s
		case <-time.After(2 * time.Second):
			return c, nil
		}
	}
}

// TestConnectionCapsMakeWay: a connection beyond the cap of its client
// takes the place of that client's oldest idle one; one beyond the total
// cap that of the oldest idle one of any client; a connection serving a
// control request makes way for none, and where every one does, a new
// connection is answered 503 once it has sent its request's head.
func TestConnectionCapsMakeWay(t *testing.T) {
	dial := cappedListener(t, 3, 2)
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF
	}
	a1, sa1 := dial("127.0.0.1")
	a2, sa2 := dial("127.0.0.1")
	sa2.mark(connProtected)
	a3, sa3 := dial("127.0.0.1") // a1 makes way; a2 serves a control request
	if sa3 == nil || !closed(a1) {
		t.Fatal("a third connection from one address did not take the place of its oldest idle one")
	}
	if a2.SetReadDeadline(time.Now().Add(100 * time.Millisecond)); closed(a2) {
		t.Error("a connection serving a control request was closed")
	}
	_ = sa1
	b1, sb1 := dial("127.0.0.2") // three in all: a2, a3, b1
	sb1.mark(connRequest)
	c1, sc1 := dial("127.0.0.3") // a3 (idle) makes way before b1 (a request)
	if sc1 == nil || !closed(a3) {
		t.Fatal("a connection beyond the total cap did not take the place of the oldest idle one")
	}
	for _, s := range []*limitedConn{sa3, sb1, sc1} {
		s.mark(connProtected)
	}
	sb1.mark(connProtected)
	sc1.mark(connProtected)
	d, sd := dial("127.0.0.4")
	if sd != nil {
		t.Fatal("a connection was accepted where every place serves a control request")
	}
	io.WriteString(d, "GET /v1/scans HTTP/1.1\r\nHost: x\r\n\r\n")
	d.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(d), nil)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("the refused connection: %v %v, want 503", resp, err)
	}
	for _, c := range []net.Conn{a2, b1, c1, d} {
		c.Close()
	}
}

// TestConnectionCapsKeepTheControlSystems: where every client holds as
// many places, an idle connection the control system used makes way
// after an idle one it did not, though older.
func TestConnectionCapsKeepTheControlSystems(t *testing.T) {
	dial := cappedListener(t, 2, 2)
	control, sc := dial("127.0.0.1")
	defer control.Close()
	if sc == nil {
		t.Fatal("the first connection was not accepted")
	}
	sc.mark(connProtected)
	sc.mark(connTrusted) // its request answered
	other, _ := dial("127.0.0.2")
	defer other.Close()
	late, _ := dial("127.0.0.3")
	defer late.Close()
	for _, c := range []net.Conn{control, other} {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	}
	if _, err := other.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the idle connection of another client: %v, want closed", err)
	}
	if _, err := control.Read(make([]byte, 1)); err == io.EOF {
		t.Error("the control system's idle connection made way first")
	}
}

// TestConnectionCapsFreshConnections: of a client's connections, one
// serving a request that may make way goes before those that have sent no
// request yet, and of those the oldest first; one that has sent no
// request within freshGrace makes way before them all, as an idle one
// does. Where only fresh connections could make way, the new one waits
// freshWait for one of them to say what it is (TestTokenlessFloodLeavesControl)
// before the oldest makes way.
func TestConnectionCapsFreshConnections(t *testing.T) {
	dial := cappedListener(t, 10, 3)
	closed := func(c net.Conn, wait time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(wait))
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF
	}
	a1, s1 := dial("127.0.0.1")
	a2, s2 := dial("127.0.0.1")
	a3, s3 := dial("127.0.0.1")
	s2.mark(connRequest)
	a4, s4 := dial("127.0.0.1") // a2 serves a request that may make way
	if s4 == nil || !closed(a2, time.Second) {
		t.Fatal("a new connection did not take the place of the one serving a request")
	}
	if closed(a1, 50*time.Millisecond) || closed(a3, 50*time.Millisecond) {
		t.Fatal("a fresh connection made way before the one serving a request")
	}
	s3.l.mu.Lock()
	s3.since = s3.since.Add(-s3.l.grace) // a3 has sent nothing for the grace
	s3.l.mu.Unlock()
	a5, s5 := dial("127.0.0.1")
	if s5 == nil || !closed(a3, time.Second) {
		t.Fatal("a connection silent past freshGrace did not make way first")
	}
	a6, s6 := dial("127.0.0.1") // only fresh ones: a1, a4, a5; a1 the oldest
	if s6 == nil || !closed(a1, time.Second) {
		t.Fatal("where only fresh connections could make way, the oldest did not")
	}
	if closed(a4, 50*time.Millisecond) || closed(a5, 50*time.Millisecond) {
		t.Error("a newer fresh connection made way before the oldest")
	}
	_ = s1
	for _, c := range []net.Conn{a4, a5, a6} {
		c.Close()
	}
}

// TestTokenlessFloodLeavesControl floods the service from the control
// system's own address with new connections whose requests carry no
// token (each answered 401 and closed), from 16 clients as fast as they
// can, while the control system sends 30 requests with the token, each
// on a new connection. A new connection beyond the caps waits for a
// fresh one to say what it is before it closes it, so at least 27 are
// answered (30 of 30 on a quiet machine; under -race beside two busy
// loops one was once closed, when the server had not read its head
// within the wait). Before the wait, a control connection whose head was
// not read yet made way for the flood: 16 to 21 of 30 were answered.
func TestTokenlessFloodLeavesControl(t *testing.T) {
	const token = "0123456789abcdef0123"
	r := &fakeRunner{planned: 1, tick: time.Millisecond}
	s := New(r, Config{Token: token, MaxConns: 12, MaxConnsPerClient: 4})
	addr := serveLoopback(t, s)
	stop := make(chan struct{})
	var flood sync.WaitGroup
	var refused atomic.Int64
	for range 16 {
		flood.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					continue
				}
				c.SetDeadline(time.Now().Add(2 * time.Second))
				io.WriteString(c, "GET /v1/status HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
				if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil && resp.StatusCode == http.StatusUnauthorized {
					refused.Add(1)
				}
				c.Close()
			}
		})
	}
	defer func() { close(stop); flood.Wait() }()
	for refused.Load() < 100 { // the flood is under way
		runtime.Gosched()
	}
	cl := http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	answered := 0
	var lost []string
	for range 30 {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := cl.Do(req)
		if err != nil {
			lost = append(lost, err.Error())
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			lost = append(lost, resp.Status)
			continue
		}
		answered++
	}
	if answered < 27 {
		t.Errorf("%d of 30 control requests answered under the flood, want 27 or more; the others: %q", answered, lost)
	}
	t.Logf("%d of 30 control requests answered; %d flood requests refused 401", answered, refused.Load())
}

// TestSilentFloodDoesNotHoldAccept floods the service, at its default
// caps, from one address with 200 new connections a second that send
// nothing: every place the address may hold is fresh, so each new
// connection waits for one of them to say what it is. That wait is its
// own: the control system's 30 requests from another address, each on a
// new connection, are all answered, none after more than 2 s. When the
// wait held the listener's Accept, the listen queue grew and each answer
// came later than the last (0.29 s to 1.57 s over six requests in a
// hostile pass).
func TestSilentFloodDoesNotHoldAccept(t *testing.T) {
	const token = "0123456789abcdef0123"
	r := &fakeRunner{planned: 1, tick: time.Millisecond}
	s := New(r, Config{Token: token})
	addr := serveLoopback(t, s)
	stop := make(chan struct{})
	var flood sync.WaitGroup
	var opened atomic.Int64
	flood.Go(func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: time.Second}
		tick := time.NewTicker(5 * time.Millisecond) // the flood's pace, not a wait of the test's
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if c, err := d.Dial("tcp", addr); err == nil {
				opened.Add(1)
				held = append(held, c)
			}
		}
	})
	defer func() { close(stop); flood.Wait() }()
	for opened.Load() < 100 { // the flood has filled the address's places
		runtime.Gosched()
	}
	cl := http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var slowest time.Duration
	for range 30 {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		start := time.Now()
		resp, err := cl.Do(req)
		took := time.Since(start)
		slowest = max(slowest, took)
		if err != nil {
			t.Errorf("a control request under the flood: %v after %v", err, took)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || took > 2*time.Second {
			t.Errorf("a control request under the flood: %d after %v, want 200 within 2 s", resp.StatusCode, took)
		}
	}
	t.Logf("the slowest of 30 control requests took %v; the flood opened %d connections", slowest, opened.Load())
}
