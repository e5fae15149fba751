package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// MinTokenLength bounds how short a token may be.
const MinTokenLength = 16

// maxTokenFile bounds a token file: it holds one line.
const maxTokenFile = 4096

// ReadToken reads the token in the file at path: its first line, trimmed,
// of at least MinTokenLength characters, each printable ASCII (what every
// client sends in a header as it is). A UTF-8 byte order mark before it,
// which some editors write, is dropped. The file must be a regular file
// of at most 4 KiB: a named pipe, a device (/dev/zero) or a directory is
// refused at once, never waited on or read without end. An empty path
// gives no token.
func ReadToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	// Not blocking: opening a named pipe would wait for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("token file %s: a %s, not a regular file: write the token in a file", path, fileKind(fi.Mode()))
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if len(b) > maxTokenFile {
		return "", fmt.Errorf("token file %s: longer than %d bytes: it holds one line, the token", path, maxTokenFile)
	}
	b = bytes.TrimPrefix(b, []byte("\uFEFF")) // a UTF-8 byte order mark
	token, _, _ := strings.Cut(string(b), "\n")
	token = strings.TrimSpace(token)
	if i := strings.IndexFunc(token, func(r rune) bool { return r < '!' || r > '~' }); i >= 0 {
		r, _ := utf8.DecodeRuneInString(token[i:])
		return "", fmt.Errorf("token file %s: the token holds %U at byte %d: write it in printable ASCII, as clients send it (a file saved as UTF-16 holds NULs)", path, r, i)
	}
	if len(token) < MinTokenLength {
		return "", fmt.Errorf("token file %s: the token has %d characters, want %d or more", path, len(token), MinTokenLength)
	}
	return token, nil
}

// fileKind names the kind of file of a mode that is not a regular file.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeSocket != 0:
		return "socket"
	}
	return "special file"
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
