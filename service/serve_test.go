package service

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		path, want, err string
	}{
		{"", "", ""},
		{write("good", "  0123456789abcdef  \nsecond line\n"), "0123456789abcdef", ""},
		{write("short", "0123456789abcde\n"), "", "the token has 15 characters, want 16 or more"},
		{write("empty", ""), "", "the token has 0 characters"},
		{filepath.Join(dir, "absent"), "", "no such file"},
	} {
		got, err := ReadToken(tc.path)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ReadToken(%s) = %q, %v; want %q", tc.path, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ReadToken(%s): error %v, want one saying %q", tc.path, err, tc.err)
		}
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
