package service

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// fakeLinks are links that take the front end's ends given.
type fakeLinks struct {
	got     []byte
	cleared bool
}

func (l *fakeLinks) ClearPeers() error { l.got, l.cleared = nil, true; return nil }

func (l *fakeLinks) Params() any {
	return map[string]any{"nonce": "n1", "modules": []any{map[string]any{"module": 0, "qpn": 17}}}
}

func (l *fakeLinks) SetPeers(data []byte) error {
	if strings.Contains(string(data), `"module":9`) {
		return errors.New("no queue pair for module 9")
	}
	l.got = data
	return nil
}

// fixedLinks refuse every front end's end, as a profile that gives them.
type fixedLinks struct{ fakeLinks }

func (fixedLinks) SetPeers([]byte) error { return ErrPeersFixed }

func (fixedLinks) ClearPeers() error { return ErrPeersFixed }

// TestRDMA checks GET and PUT /v1/rdma: shown where serve set up links,
// 404 where it did not; a PUT taken only with the service's token, never
// where the profile fixes the front end's ends, and a body that is not
// ends refused with 422.
func TestRDMA(t *testing.T) {
	const token = "0123456789abcdef-token"
	body := []byte(`{"modules":[{"module":0,"gid":"fe80::1","qpn":7,"psn":1}]}`)
	for _, tc := range []struct {
		name  string
		links Links
		token string
		get   int
		put   []byte
		want  int
	}{
		{"no links", nil, token, http.StatusNotFound, body, http.StatusNotFound},
		{"taken", &fakeLinks{}, token, http.StatusOK, body, http.StatusNoContent},
		{"no token", &fakeLinks{}, "", http.StatusOK, body, http.StatusForbidden},
		{"fixed by the profile", &fixedLinks{}, token, http.StatusOK, body, http.StatusForbidden},
		{"not JSON", &fakeLinks{}, token, http.StatusOK, []byte("bad"), http.StatusBadRequest},
		{"no modules", &fakeLinks{}, token, http.StatusOK, []byte(`{"modules":[]}`), http.StatusUnprocessableEntity},
		{"a QPN beyond 24 bits", &fakeLinks{}, token, http.StatusOK, []byte(`{"modules":[{"module":0,"gid":"fe80::1","qpn":16777216,"psn":1}]}`), http.StatusUnprocessableEntity},
		{"an unknown key", &fakeLinks{}, token, http.StatusOK, []byte(`{"modules":[{"module":0,"gid":"fe80::1","qpn":7,"psn":1,"rkey":3}]}`), http.StatusUnprocessableEntity},
		{"refused by the links", &fakeLinks{}, token, http.StatusOK, []byte(`{"modules":[{"module":9,"gid":"fe80::1","qpn":7,"psn":1}]}`), http.StatusUnprocessableEntity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newTestService(t, &fakeRunner{}, Config{Token: tc.token, Links: tc.links})
			code, got := c.do("GET", "/v1/rdma", nil)
			if code != tc.get || code == http.StatusOK && got["nonce"] != "n1" {
				t.Errorf("GET: %d %v, want %d", code, got, tc.get)
			}
			if code, got := c.do("PUT", "/v1/rdma", tc.put); code != tc.want {
				t.Errorf("PUT: %d %v, want %d", code, got, tc.want)
			}
			if l, ok := tc.links.(*fakeLinks); ok && (tc.want == http.StatusNoContent) != (len(l.got) > 0) {
				t.Errorf("the links got %q after a PUT answered %d", l.got, tc.want)
			}
			// DELETE: as a PUT of good ends is answered, where it can be.
			wantDel := tc.want
			if tc.want == http.StatusUnprocessableEntity || tc.want == http.StatusBadRequest {
				wantDel = http.StatusNoContent
			}
			if code, got := c.do("DELETE", "/v1/rdma", nil); code != wantDel {
				t.Errorf("DELETE: %d %v, want %d", code, got, wantDel)
			}
			if l, ok := tc.links.(*fakeLinks); ok && l.cleared != (wantDel == http.StatusNoContent) {
				t.Errorf("the links cleared %v after a DELETE answered %d", l.cleared, wantDel)
			}
		})
	}
}
