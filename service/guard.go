package service

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// guard refuses, before any operation sees it, a request that the service
// must not serve, in this order:
//
//   - a Host that is neither the address the request came in on (with
//     localhost, 127.0.0.1 and [::1] for one another on loopback) nor a name
//     of Config.AllowHosts: a page whose name was made to point at the
//     service (DNS rebinding), 403;
//   - an Origin other than the service's own: a request a web page sent,
//     403;
//   - a request under /v1/ without the token, when the service has one,
//     401, and the same for the status page's image (/preview.png) from
//     a client off loopback (/openapi.json, the status page and /metrics
//     stay open);
//   - a request other than GET and HEAD with a body not declared
//     application/json (a page can send text/plain and forms across
//     origins without asking first), 415. A request with no body and no
//     Content-Type at all (curl -X POST, Python's requests.post(url),
//     what SIMPLON's clients send to stop) carries nothing to declare:
//     a page can send one too, but the Origin and Host checks above
//     refuse it.
//
// So no web page can arm, stop or cancel a scan, with or without the
// token.
func (s *Service) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r) {
			refuse(w, http.StatusForbidden, fmt.Sprintf("Host %q is not the address this service listens on, nor a name its operator allowed (serve --allow-host)", r.Host))
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
			refuse(w, http.StatusForbidden, fmt.Sprintf("Origin %q: this service takes no request a web page of another origin sends", o))
			return
		}
		if s.cfg.Token != "" && s.needsToken(r) && !s.tokenGiven(r.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="h5ingest"`)
			refuse(w, http.StatusUnauthorized, "this request needs the service's token: Authorization: Bearer TOKEN")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !noBody(r) {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				refuse(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: a %s request needs Content-Type: application/json", r.Header.Get("Content-Type"), r.Method))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// needsToken reports whether a request needs the token, where the
// service has one: every request under /v1/, and the status page's image
// from a client off loopback. The page itself stays open, so that an
// operator sees the state anywhere; its image, like every image of a
// scan, is the scan's data.
func (s *Service) needsToken(r *http.Request) bool {
	switch {
	case r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/"):
		return true
	case r.URL.Path == "/preview.png":
		return !fromLoopback(r)
	}
	return false
}

// fromLoopback reports whether a request came from this machine's
// loopback.
func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// noBody reports whether a request carries no body and names no
// Content-Type: no Content-Length or a zero one, not chunked, and no
// Content-Type header at all, not even an empty one.
func noBody(r *http.Request) bool {
	_, typed := r.Header["Content-Type"]
	return !typed && r.ContentLength == 0 && len(r.TransferEncoding) == 0
}

// documentGuard states in the OpenAPI document what the guard does to
// every operation under /v1/, registered by whichever part of the
// service: each needs the token (when the service has one) and may be
// answered 401 and 403, and each but GET 415.
func (s *Service) documentGuard() {
	oapi := s.api.OpenAPI()
	errSchema := oapi.Components.Schemas.Schema(reflect.TypeFor[huma.ErrorModel](), true, "Error")
	for path, item := range oapi.Paths {
		if !strings.HasPrefix(path, "/v1/") {
			continue
		}
		for _, op := range []*huma.Operation{item.Get, item.Head, item.Post, item.Put, item.Patch, item.Delete} {
			if op == nil {
				continue
			}
			op.Security = token
			codes := []int{http.StatusUnauthorized, http.StatusForbidden}
			if op.Method != http.MethodGet && op.Method != http.MethodHead {
				codes = append(codes, http.StatusUnsupportedMediaType)
			}
			for _, code := range codes {
				op.Responses[strconv.Itoa(code)] = &huma.Response{
					Description: http.StatusText(code),
					Content:     map[string]*huma.MediaType{"application/problem+json": {Schema: errSchema}},
				}
			}
		}
	}
}

// refuse answers a refused request with an error as the API's operations
// give them (application/problem+json).
func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(huma.NewError(status, msg))
}

// tokenGiven reports whether an Authorization header carries the token:
// the scheme Bearer in any case (RFC 7235), compared in constant time.
func (s *Service) tokenGiven(header string) bool {
	scheme, cred, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimLeft(cred, " ")), []byte(s.cfg.Token)) == 1
}

// hostAllowed reports whether the request's Host names the service: the
// address and port the connection came in on (on loopback, localhost,
// 127.0.0.1 or [::1] with that port), or a name of Config.AllowHosts with
// any port.
func (s *Service) hostAllowed(r *http.Request) bool {
	host, port := splitHost(r.Host)
	for _, name := range s.cfg.AllowHosts {
		if strings.EqualFold(host, name) {
			return true
		}
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	if !ok || port != strconv.Itoa(local.Port) {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.Equal(local.IP) || ip.IsLoopback() && local.IP.IsLoopback()
	}
	return strings.EqualFold(host, "localhost") && local.IP.IsLoopback()
}

// splitHost splits a Host header into its host, without brackets, and
// its port, "80" where it gives none.
func splitHost(hostport string) (host, port string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return h, p
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), "80"
}

// sameOrigin reports whether the Origin header origin is the service's
// own: a page served from the Host the request names.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && strings.EqualFold(u.Host, host)
}
