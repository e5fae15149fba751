package service

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// rawRequest sends the request text as it is to addr and returns the
// status code and body of the answer.
func rawRequest(t *testing.T, addr, text string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, text); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// browserPost is the request a browser sends for a page's
// fetch(url, {method: "POST", mode: "no-cors", body: JSON.stringify(...)}):
// text/plain, the page's Origin, no Authorization.
func browserPost(host, path, origin, body string) string {
	return "POST " + path + " HTTP/1.1\r\n" +
		"Host: " + host + "\r\n" +
		"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n" +
		"Accept: */*\r\n" +
		"Accept-Language: en-US,en;q=0.5\r\n" +
		"Referer: " + origin + "/\r\n" +
		"Content-Type: text/plain;charset=UTF-8\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n", len(body)) +
		"Origin: " + origin + "\r\n" +
		"Connection: close\r\n" +
		"Sec-Fetch-Dest: empty\r\n" +
		"Sec-Fetch-Mode: no-cors\r\n" +
		"Sec-Fetch-Site: cross-site\r\n" +
		"\r\n" + body
}

// noCORS makes a browserPost the request of a no-cors fetch with no
// body: no Content-Type, Content-Length 0.
func noCORS(req string) string {
	return strings.Replace(req, "Content-Type: text/plain;charset=UTF-8\r\n", "", 1)
}

// TestWebPageCannotChangeAnything sends what a web page can make a
// browser send, to a service with and without a token: a no-cors fetch
// from a foreign origin, the same from a page whose name was rebound to
// the service's address (a foreign Host, and an Origin that matches it),
// a same-origin-looking request with the wrong Content-Type. None arms,
// stops or cancels a scan; the control system's own requests still work.
func TestWebPageCannotChangeAnything(t *testing.T) {
	for _, token := range []string{"", "0123456789abcdef"} {
		t.Run(fmt.Sprintf("token=%v", token != ""), func(t *testing.T) {
			r := &fakeRunner{planned: 1000, tick: 10 * time.Millisecond}
			_, c := newTestService(t, r, Config{Token: token})
			u, _ := url.Parse(c.base)
			addr, port := u.Host, u.Port()
			body := `{"profile":"default","scan_id":"evil"}`
			type probe struct {
				name, text string
				want       int
			}
			probes := func(path string) []probe {
				auth := ""
				if token != "" {
					auth = "Authorization: Bearer " + token + "\r\n"
				}
				// A page that knows the token (it leaked) still cannot
				// send it without CORS; these add it anyway.
				withAuth := func(req string) string { return strings.Replace(req, "\r\n", "\r\n"+auth, 1) }
				return []probe{
					{"no-cors fetch, foreign origin", browserPost(addr, path, "http://evil.example", body), http.StatusForbidden},
					{"no-cors fetch with the token", withAuth(browserPost(addr, path, "http://evil.example", body)), http.StatusForbidden},
					{"null origin", withAuth(browserPost(addr, path, "null", body)), http.StatusForbidden},
					{"rebound name", withAuth(browserPost("evil.example:"+port, path, "http://evil.example:"+port, body)), http.StatusForbidden},
					{"rebound name, no port", withAuth(browserPost("evil.example", path, "http://evil.example", body)), http.StatusForbidden},
					{"own origin, text/plain", withAuth(browserPost(addr, path, "http://"+addr, body)), http.StatusUnsupportedMediaType},
					{"no body, foreign origin", withAuth(noCORS(browserPost(addr, path, "http://evil.example", ""))), http.StatusForbidden},
					{"no body, rebound name", withAuth(noCORS(browserPost("evil.example:"+port, path, "http://evil.example:"+port, ""))), http.StatusForbidden},
					{"own origin, empty text/plain", withAuth(browserPost(addr, path, "http://"+addr, "")), http.StatusUnsupportedMediaType},
					{"form", withAuth(strings.Replace(browserPost(addr, path, "http://"+addr, "a=b"), "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", 1)), http.StatusUnsupportedMediaType},
					{"another port of loopback", withAuth(browserPost("127.0.0.1:1", path, "http://127.0.0.1:1", body)), http.StatusForbidden},
				}
			}
			for _, p := range probes("/v1/scans") {
				if code, got := rawRequest(t, addr, p.text); code != p.want {
					t.Errorf("arm, %s: %d %s, want %d", p.name, code, got, p.want)
				}
			}
			if len(r.prepared) != 0 {
				t.Fatalf("a web page's request reached the runner: %+v", r.prepared)
			}
			if code, st := c.do("POST", "/v1/scans", arm("x")); code != http.StatusCreated {
				t.Fatalf("the control system's arm: %d %v", code, st)
			}
			for _, op := range []string{"stop", "cancel"} {
				for _, p := range probes("/v1/scans/x/" + op) {
					if code, got := rawRequest(t, addr, p.text); code != p.want {
						t.Errorf("%s, %s: %d %s, want %d", op, p.name, code, got, p.want)
					}
				}
			}
			if r.scans[0].stopped.Load() {
				t.Error("a web page stopped the scan")
			}
			if _, st := c.do("GET", "/v1/scans/x", nil); st["state"] != "armed" && st["state"] != "running" {
				t.Errorf("after the web page's requests: %v", st)
			}
			if code, st := c.do("POST", "/v1/scans/x/cancel", nil); code != http.StatusAccepted {
				t.Errorf("the control system's cancel: %d %v", code, st)
			}
		})
	}
}

// TestHostNames: the service answers the names of the address a request
// came in on (on loopback, localhost, 127.0.0.1 and [::1] with its port)
// and the names the operator allowed, and nothing else: not even a GET,
// so that a rebound page cannot read the scans either.
func TestHostNames(t *testing.T) {
	r := &fakeRunner{planned: 1, tick: time.Millisecond}
	_, c := newTestService(t, r, Config{AllowHosts: []string{"beamline-node", "BL7.example.org"}})
	u, _ := url.Parse(c.base)
	addr, port := u.Host, u.Port()
	for host, want := range map[string]int{
		addr:                             http.StatusOK,
		"localhost:" + port:              http.StatusOK,
		"LOCALHOST:" + port:              http.StatusOK,
		"[::1]:" + port:                  http.StatusOK,
		"127.0.0.1:" + port:              http.StatusOK,
		"beamline-node:" + port:          http.StatusOK,
		"beamline-node":                  http.StatusOK,
		"bl7.example.org:443":            http.StatusOK,
		"localhost":                      http.StatusForbidden, // port 80, not the service's
		"127.0.0.1:1":                    http.StatusForbidden,
		"evil.example:" + port:           http.StatusForbidden,
		"beamline-node.evil.example":     http.StatusForbidden,
		"10.1.2.3:" + port:               http.StatusForbidden,
		"localhost.evil.example:" + port: http.StatusForbidden,
	} {
		code, body := rawRequest(t, addr, "GET /v1/scans HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		if code != want {
			t.Errorf("Host %s: %d %s, want %d", host, code, body, want)
		}
	}
}

// TestTokenGuardsEveryRead: with a token, every request under /v1/ needs
// it, reads and the event stream too, in any case of the scheme; the
// OpenAPI document and what the command adds beside the API (the status
// page, /metrics) stay open.
func TestTokenGuardsEveryRead(t *testing.T) {
	r := &fakeRunner{planned: 1000, tick: 10 * time.Millisecond}
	s, c := newTestService(t, r, Config{Token: "0123456789abcdef"})
	s.Handle("/metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "up 1\n") }))
	if code, _ := c.do("POST", "/v1/scans", arm("a")); code != http.StatusCreated {
		t.Fatal(code)
	}
	defer c.do("POST", "/v1/scans/a/cancel", nil)
	get := func(path, auth string) int {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/v1/scans", "/v1/scans/a", "/v1/scans/a/wait?timeout=0", "/v1/scans/a/files", "/v1/events", "/v1/scans/nope", "/v1/anything"} {
		for _, auth := range []string{"", "Bearer 0123456789abcdeX", "Bearer 0123456789abcde", "Basic MDEyMzQ1Njc4OWFiY2RlZg==", "0123456789abcdef", "Bearer"} {
			if code := get(path, auth); code != http.StatusUnauthorized {
				t.Errorf("GET %s with %q: %d, want 401", path, auth, code)
			}
		}
	}
	for _, auth := range []string{"Bearer 0123456789abcdef", "bearer 0123456789abcdef", "BEARER 0123456789abcdef", "bEaReR  0123456789abcdef"} {
		if code := get("/v1/scans/a", auth); code != http.StatusOK {
			t.Errorf("GET with %q: %d, want 200", auth, code)
		}
	}
	for _, path := range []string{"/openapi.json", "/metrics"} {
		if code := get(path, ""); code != http.StatusOK {
			t.Errorf("GET %s without the token: %d, want 200 (open)", path, code)
		}
	}
}

// TestConnectionCaps serves with at most 4 connections, 2 per client
// address, and opens connections that send nothing (as a client that
// never finishes its request, or an event stream nobody reads, holds
// one): one beyond a cap takes the place of the oldest idle one of its
// client, or of the client that holds the most, which the service
// closes; the new one is served. Each connection here has had one request
// answered, so it is idle between requests, as a keep-alive client's is.
func TestConnectionCaps(t *testing.T) {
	r := &fakeRunner{planned: 1, tick: time.Millisecond}
	s := New(r, Config{MaxConns: 4, MaxConnsPerClient: 2})
	addr := serveLoopback(t, s)
	// closed reports whether the service closed c within a second.
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(make([]byte, 1))
		return err == io.EOF
	}
	// answered reports whether a request on c gets an answer.
	answered := func(c net.Conn) bool {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET /openapi.json HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	// dial connects from address from and has one request answered: the
	// connections go idle in the order dialled.
	dial := func(from string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if !answered(c) {
			t.Fatalf("a connection from %s within the caps got no answer", from)
		}
		return c
	}
	a1, a2 := dial("127.0.0.1"), dial("127.0.0.1")
	a3 := dial("127.0.0.1")
	if !closed(a1) {
		t.Error("a third connection from one address did not take the place of the oldest")
	}
	b1, b2 := dial("127.0.0.2"), dial("127.0.0.2")
	c1 := dial("127.0.0.3")
	if !closed(a2) {
		t.Error("a fifth connection in all did not take the place of the oldest idle one")
	}
	for i, c := range []net.Conn{a3, b1, b2, c1} {
		if !answered(c) {
			t.Errorf("connection %d within the caps got no answer", i)
		}
		c.Close()
	}
	a1.Close()
	a2.Close()
}

// TestEventClientThatStopsReading: an event stream whose client reads
// nothing is dropped once a write blocks past the write deadline, and
// its connection given back: with room for one connection, a new client
// gets in.
func TestEventClientThatStopsReading(t *testing.T) {
	r := &fakeRunner{planned: 1, tick: time.Millisecond}
	s := New(r, Config{MaxConns: 1, MaxConnsPerClient: 1})
	addr := serveLoopback(t, s)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	io.WriteString(c, "GET /v1/events HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	subscribed := func() int {
		s.events.mu.Lock()
		defer s.events.mu.Unlock()
		return len(s.events.subs)
	}
	for deadline := time.Now().Add(5 * time.Second); subscribed() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the event stream never subscribed")
		}
	}
	// Events of 64 KiB until the socket's buffers are full; the client
	// reads none.
	big := Status{ScanID: "x", Error: strings.Repeat("x", 64<<10)}
	start := time.Now()
	var dropped time.Duration
	for time.Since(start) < 30*time.Second {
		s.events.publish(ProgressEvent(big))
		time.Sleep(20 * time.Millisecond)
		probe, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		probe.SetDeadline(time.Now().Add(2 * time.Second))
		io.WriteString(probe, "GET /openapi.json HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(probe), nil)
		probe.Close()
		if err == nil && resp.StatusCode == http.StatusOK {
			dropped = time.Since(start)
			break
		}
	}
	if dropped == 0 {
		t.Fatal("the client that reads nothing still holds its connection after 30 s")
	}
	t.Logf("dropped after %v", dropped.Round(time.Millisecond))
}

// TestBodylessCommands: stop and cancel sent as curl -X POST URL and
// Python's requests.post(url) send them (no body, and no Content-Type;
// curl no Content-Length either, requests Content-Length: 0) are taken,
// with and without a token; a body-less request that names a
// Content-Type other than JSON, even an empty one, or whose body is
// chunked, is still refused.
func TestBodylessCommands(t *testing.T) {
	// The requests as curl 7.88 and requests 2.34 send them.
	curl := func(host, path string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n"
	}
	requests := func(host, path string) string {
		return "POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nUser-Agent: python-requests/2.34.2\r\n" +
			"Accept-Encoding: gzip, deflate\r\nAccept: */*\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"
	}
	with := func(header string, req func(host, path string) string) func(host, path string) string {
		return func(host, path string) string {
			return strings.Replace(req(host, path), "\r\n", "\r\n"+header+"\r\n", 1)
		}
	}
	for _, token := range []string{"", "0123456789abcdef"} {
		auth := func(req func(host, path string) string) func(host, path string) string {
			if token == "" {
				return req
			}
			return with("Authorization: Bearer "+token, req)
		}
		for _, tc := range []struct {
			name string
			req  func(host, path string) string
			want int
		}{
			{"curl", auth(curl), http.StatusAccepted},
			{"requests", auth(requests), http.StatusAccepted},
			{"requests, empty Content-Type", auth(with("Content-Type:", requests)), http.StatusUnsupportedMediaType},
			{"requests, text/plain", auth(with("Content-Type: text/plain", requests)), http.StatusUnsupportedMediaType},
			{"curl, chunked", auth(with("Transfer-Encoding: chunked", func(host, path string) string { return curl(host, path) + "0\r\n\r\n" })), http.StatusUnsupportedMediaType},
			{"curl, foreign Origin", auth(with("Origin: http://evil.example", curl)), http.StatusForbidden},
		} {
			for _, op := range []string{"stop", "cancel"} {
				t.Run(fmt.Sprintf("token=%v/%s/%s", token != "", tc.name, op), func(t *testing.T) {
					r := &fakeRunner{planned: 1000, tick: 10 * time.Millisecond}
					_, c := newTestService(t, r, Config{Token: token})
					if code, st := c.do("POST", "/v1/scans", arm("b")); code != http.StatusCreated {
						t.Fatalf("arm: %d %v", code, st)
					}
					defer c.do("POST", "/v1/scans/b/cancel", nil)
					addr := strings.TrimPrefix(c.base, "http://")
					code, body := rawRequest(t, addr, tc.req(addr, "/v1/scans/b/"+op))
					if code != tc.want {
						t.Fatalf("%d %s, want %d", code, body, tc.want)
					}
					if tc.want != http.StatusAccepted {
						if _, st := c.do("GET", "/v1/scans/b", nil); r.scans[0].stopped.Load() || (st["state"] != "armed" && st["state"] != "running") {
							t.Errorf("a refused %s reached the scan: %v", op, st["state"])
						}
						return
					}
					_, st := c.do("GET", "/v1/scans/b/wait?timeout=10", nil)
					if want := map[string]string{"stop": "incomplete", "cancel": "cancelled"}[op]; st["state"] != want {
						t.Errorf("after the %s: %v, want %s", op, st["state"], want)
					}
				})
			}
		}
	}
}

// TestStatusImageNeedsTheTokenOffLoopback: the status page's image
// (/preview.png, beside the API) is a scan's data as every image under
// /v1/ is: with a token, a client off loopback must carry it; on
// loopback, where the page shows it, it needs none. The page itself
// stays open.
func TestStatusImageNeedsTheTokenOffLoopback(t *testing.T) {
	const token = "0123456789abcdef"
	s := New(&fakeRunner{}, Config{Token: token})
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "served") })
	s.Handle("/preview.png", ok)
	s.Handle("/{$}", ok)
	for _, tc := range []struct {
		local, remote, path, auth string
		want                      int
	}{
		{"127.0.0.1", "127.0.0.1", "/preview.png", "", http.StatusOK},
		{"127.0.0.1", "127.0.0.2", "/preview.png?module=1", "", http.StatusOK},
		{"::1", "::1", "/preview.png", "", http.StatusOK},
		{"192.0.2.5", "192.0.2.9", "/preview.png", "", http.StatusUnauthorized},
		{"192.0.2.5", "192.0.2.9", "/preview.png?module=0", "Bearer 0123456789abcdeX", http.StatusUnauthorized},
		{"192.0.2.5", "192.0.2.9", "/preview.png", "Bearer " + token, http.StatusOK},
		{"2001:db8::5", "2001:db8::9", "/preview.png", "", http.StatusUnauthorized},
		{"192.0.2.5", "192.0.2.9", "/", "", http.StatusOK},
	} {
		local := &net.TCPAddr{IP: net.ParseIP(tc.local), Port: 8642}
		req := httptest.NewRequest("GET", "http://"+local.String()+tc.path, nil)
		req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, local))
		req.RemoteAddr = net.JoinHostPort(tc.remote, "50000")
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		if w.Code != tc.want {
			t.Errorf("GET %s from %s to %s with %q: %d %s, want %d", tc.path, tc.remote, tc.local, tc.auth, w.Code, w.Body, tc.want)
		}
	}
}
