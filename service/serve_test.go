package service

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadToken: a token file is a regular file of one line, printable
// ASCII; a UTF-8 byte order mark before it is dropped; a file that is no
// regular file (a named pipe, /dev/zero, a directory) is refused at once,
// never waited on or read without end, and a long one is refused.
func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, want, err string
	}{
		{"", "", ""},
		{write("good", "  0123456789abcdef  \nsecond line\n"), "0123456789abcdef", ""},
		{write("crlf", "0123456789abcdef\r\n"), "0123456789abcdef", ""},
		{write("bom", "\uFEFF0123456789abcdef\n"), "0123456789abcdef", ""},
		{write("utf16", "\xff\xfe0\x001\x002\x003\x004\x005\x006\x007\x008\x00"), "", "the token holds U+FFFD at byte 0: write it in printable ASCII"},
		{write("inner space", "0123456789 abcdef\n"), "", "the token holds U+0020 at byte 10"},
		{write("nbsp", "01234567\u00a089abcdef\n"), "", "the token holds U+00A0 at byte 8"},
		{write("short", "0123456789abcde\n"), "", "the token has 15 characters, want 16 or more"},
		{write("empty", ""), "", "the token has 0 characters"},
		{write("long", strings.Repeat("0123456789abcdef", 300)), "", "longer than 4096 bytes"},
		{filepath.Join(dir, "absent"), "", "no such file"},
		{fifo, "", "a named pipe, not a regular file"},
		{"/dev/zero", "", "a character device, not a regular file"},
		{dir, "", "a directory, not a regular file"},
	} {
		type result struct {
			token string
			err   error
		}
		done := make(chan result, 1)
		go func() {
			got, err := ReadToken(tc.path)
			done <- result{got, err}
		}()
		var res result
		select {
		case res = <-done:
		case <-time.After(time.Minute):
			t.Fatalf("ReadToken(%s) hangs", tc.path)
		}
		got, err := res.token, res.err
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ReadToken(%s) = %q, %v; want %q", tc.path, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ReadToken(%s): error %v, want one saying %q", tc.path, err, tc.err)
		}
	}
}

// TestCheckAddr: without a token, serve listens only on loopback: an
// address, or a name every address of which is loopback; a name that
// resolves to another address too, or not at all, is refused. With a
// token, any address, and any name but one of loopback and other
// addresses at once: serve would listen on one of them (Go's listen takes
// the first), out of the other machines' reach where that is loopback.
func TestCheckAddr(t *testing.T) {
	names := map[string][]netip.Addr{
		"localhost":    {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")},
		"loop6":        {netip.MustParseAddr("::1")},
		"rebound-host": {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("192.0.2.7")},
		"beamline":     {netip.MustParseAddr("192.0.2.7")},
		"two-nics":     {netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("10.0.0.7")},
		"mapped":       {netip.MustParseAddr("::ffff:127.0.0.1")},
		"none":         {},
	}
	lookup := func(ctx context.Context, network, host string) ([]netip.Addr, error) {
		ips, ok := names[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return ips, nil
	}
	for _, tc := range []struct {
		addr string
		err  string // without a token; "" for none
		tok  string // with a token; "" for none
	}{
		{"127.0.0.1:8080", "", ""}, {"[::1]:8080", "", ""}, {"127.0.0.2:8080", "", ""}, {"[::ffff:127.0.0.1]:8080", "", ""},
		{"localhost:8080", "", ""}, {"loop6:8080", "", ""}, {"mapped:8080", "", ""},
		{"0.0.0.0:8080", "is not loopback", ""}, {"10.1.2.3:8080", "is not loopback", ""}, {":8080", "is not loopback", ""}, {"[::]:8080", "is not loopback", ""},
		{"rebound-host:8080", "rebound-host resolves to [127.0.0.1 192.0.2.7], not only loopback", "serve listens on one address of a name"},
		{"beamline:8080", "not only loopback", ""},
		{"two-nics:8080", "not only loopback", ""},
		{"nowhere:8080", "no such host", "no such host"},
		{"none:8080", "resolves to no address", "resolves to no address"},
		{"8080", "missing port", "missing port"},
	} {
		err := checkAddr(tc.addr, "", lookup)
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s without a token: %v, want %q", tc.addr, err, tc.err)
		}
		err = checkAddr(tc.addr, "0123456789abcdef", lookup)
		if (err == nil) != (tc.tok == "") || err != nil && !strings.Contains(err.Error(), tc.tok) {
			t.Errorf("%s with a token: %v, want %q", tc.addr, err, tc.tok)
		}
	}
	// The machine's own resolver: localhost is loopback here.
	if err := CheckAddr("localhost:8080", ""); err != nil {
		t.Errorf("localhost on this machine: %v", err)
	}
}

// TestServeDrainsAtTheEnd serves a scan, then ends the context (as
// SIGTERM does): the service arms no more, the running scan goes on to
// its plan, neither stopped nor cancelled, and the server stops
// listening once it has ended.
func TestServeDrainsAtTheEnd(t *testing.T) {
	r := &fakeRunner{planned: 40, tick: 5 * time.Millisecond}
	s := New(r, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, time.Minute) }()
	c := client{t: t, base: "http://" + ln.Addr().String()}
	if code, st := c.do("POST", "/v1/scans", arm("x")); code != http.StatusCreated {
		t.Fatalf("arm: %d %v", code, st)
	}
	for {
		if _, st := c.do("GET", "/v1/scans/x", nil); st["state"] == "running" {
			break
		}
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Serve did not return after its context ended")
	}
	if r.scans[0].stopped.Load() {
		t.Error("the running scan was stopped, not left to reach its plan")
	}
	j, _ := s.find("x")
	if st := j.snapshot(); st.State != Done || st.Counts.OK != 40 {
		t.Errorf("the scan ended %s with %d ok, want done with 40", st.State, st.Counts.OK)
	}
	if _, err := http.Get(c.base + "/v1/scans"); err == nil {
		t.Error("the server still answers after Serve returned")
	}
}

// serveLoopback serves s on a free loopback port until the test ends, and
// returns its address.
func serveLoopback(t *testing.T, s *Service) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() { cancel(); <-served })
	return ln.Addr().String()
}
