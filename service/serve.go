package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// MinTokenLength bounds how short a token may be.
const MinTokenLength = 16

// ReadToken reads the token in the file at path: its first line, trimmed,
// of at least MinTokenLength characters. An empty path gives no token.
func ReadToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	token, _, _ := strings.Cut(string(b), "\n")
	token = strings.TrimSpace(token)
	if len(token) < MinTokenLength {
		return "", fmt.Errorf("token file %s: the token has %d characters, want %d or more", path, len(token), MinTokenLength)
	}
	return token, nil
}

// The server's timeouts: a client has ReadHeaderTimeout to send a
// request's head, and a connection idle between requests for IdleTimeout
// is closed. Neither the whole request nor the response has a timeout,
// which would end the long polls of wait (up to ten minutes) and the
// event stream; but each event of /v1/events must be written within
// eventWriteTimeout (5 s), so that a client that stops reading is
// dropped, and the connections are capped, a new one taking the place of
// the oldest that serves no control request (see limitListener).
const (
	ReadHeaderTimeout = 2 * time.Second
	IdleTimeout       = time.Minute
)

// Serve serves the service's API on ln until ctx ends; then it drains the
// running scan for up to drain (see Drain) and shuts the server down. It
// holds at most Config.MaxConns connections open, Config.MaxConnsPerClient
// from one client address: a connection beyond them takes the place of
// the oldest that serves no control request, and only where there is none
// is answered 503. It returns an error when serving fails, and Drain's
// when the drain timed out and cancelled the scan (wrapping
// ErrDrainTimeout).
func (s *Service) Serve(ctx context.Context, ln net.Listener, drain time.Duration) error {
	ln = newLimitListener(ln, s.cfg.MaxConns, s.cfg.MaxConnsPerClient)
	srv := &http.Server{Handler: s.hold(s.Handler()), ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout: IdleTimeout, MaxHeaderBytes: maxBody, ConnContext: withConn}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	drained := s.Drain(drain)
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("serve: shut down: %w", err)
	}
	return drained
}
