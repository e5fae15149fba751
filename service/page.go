package service

import (
	"net"
	"net/http"
)

// What the service shows beside its API, on the status page of the
// command that serves it (h5ingest serve): its state for the page and
// for /metrics, told apart from what only the control system may see.

// State returns the service's state as GET /v1/status names it.
func (s *Service) State() State {
	s.mu.Lock()
	cur, closing := s.current, s.closing
	var last *job
	if n := len(s.ended); n > 0 {
		last = s.jobs[s.ended[n-1]]
	}
	s.mu.Unlock()
	var c, l *Status
	if cur != nil {
		st := cur.snapshot()
		c = &st
	}
	if last != nil {
		st := last.snapshot()
		l = &st
	}
	return serviceState(c, l, closing)
}

// Status returns the service's status as GET /v1/status answers it; for
// a reader that is not trusted (Trusted), without paths, errors' text,
// notes' text or metadata: a failed scan's error is its kind and remedy
// alone. It may wait a bounded time for the free space (a hung mount).
func (s *Service) Status(trusted bool) ServiceStatus {
	st := s.serviceStatus(s.started, s.storage)
	if trusted {
		return st
	}
	for _, sc := range []**Status{&st.Scan, &st.LastScan} {
		if *sc != nil {
			c := redacted(**sc)
			*sc = &c
		}
	}
	if st.LastError != nil {
		st.LastError = &LastError{ScanID: st.LastError.ScanID, At: st.LastError.At, Error: "the scan failed"}
		if st.LastScan != nil && st.LastScan.ScanID == st.LastError.ScanID && st.LastScan.ErrorKind != "" {
			st.LastError.Error = st.LastScan.ErrorKind + "; " + st.LastScan.Remedy
		}
	}
	if st.Storage != nil {
		st.Storage = &Storage{FreeBytes: st.Storage.FreeBytes}
	}
	return st
}

// redacted returns a scan's status without its paths, error text and
// notes' text.
func redacted(st Status) Status {
	st.Files = []File{}
	if st.Error != "" {
		st.Error = "the scan failed"
		if st.ErrorKind != "" {
			st.Error = st.ErrorKind + "; " + st.Remedy
		}
	}
	notes := make([]Note, len(st.Notes))
	for i, n := range st.Notes {
		notes[i] = Note{Kind: n.Kind, Module: n.Module}
	}
	st.Notes = notes
	return st
}

// Trusted reports whether r may see what only the control system sees
// (paths, errors, images): it carries the service's token, or comes from
// loopback.
func (s *Service) Trusted(r *http.Request) bool {
	if s.cfg.Token != "" && s.tokenGiven(r.Header.Get("Authorization")) {
		return true
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
