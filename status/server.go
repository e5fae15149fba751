package status

import (
	"bytes"
	"context"
	"embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"h5ingest/instrument"
	"h5ingest/preview"
)

//go:embed page.html
var page embed.FS

// PreviewSide bounds the longer side, in pixels, of the frame in the
// preview.
const PreviewSide = 320

// previewWanted is how long after a look at the page or the preview the
// decode stage keeps copying images for the preview.
const previewWanted = 5 * time.Second

// Server serves the status of running scans over HTTP:
//
//	/             the status page (HTML, updating itself)
//	/status.json  {"scans": [Status, ...]}, one per module, and the
//	              service's status where it shows one (ShowService)
//	/preview.png  the latest frame kept for the preview (?module=N; default the first)
//	/metrics      the registry in the Prometheus text format
//
// Previews are rendered on request, at most once per image kept, never by
// the pipeline.
type Server struct {
	reg prometheus.Gatherer
	mux *http.ServeMux
	ln  net.Listener // nil for a server of NewServer
	srv *http.Server

	mu       sync.Mutex
	monitors []*Monitor
	previews map[*Monitor]*renderedPreview
	service  func(trusted bool) any   // the service's status, for /status.json; nil for none
	trust    func(*http.Request) bool // who may see the images and the service's paths; nil: everyone
}

// renderedPreview is a monitor's last rendered preview.
type renderedPreview struct {
	mu    sync.Mutex // held while rendering
	seq   uint64
	png   []byte
	small []byte    // block means of the preview image, uint32
	when  time.Time // of the last rendering
}

// Listen starts serving on addr (host:port; port 0 picks one) with the
// metrics of reg.
func Listen(addr string, reg prometheus.Gatherer) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("status server: %w", err)
	}
	s := NewServer(reg)
	s.ln = ln
	s.srv = &http.Server{Handler: s.mux, ReadHeaderTimeout: 5 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// NewServer returns a server with the metrics of reg that listens nowhere:
// its Handler serves the page, /status.json, /preview.png and /metrics
// beside another server's handlers (the scan service's).
func NewServer(reg prometheus.Gatherer) *Server {
	s := &Server{reg: reg, previews: map[*Monitor]*renderedPreview{}, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /{$}", s.servePage)
	s.mux.HandleFunc("GET /status.json", s.serveStatus)
	s.mux.HandleFunc("GET /preview.png", s.servePreview)
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	return s
}

// ShowService makes /status.json carry, as "service", what status
// returns for a request trust trusts or not, and /preview.png answer only
// a request trust trusts (401 otherwise, and /status.json says so in
// "preview_allowed"): the scan service's status beside its scans' (h5ingest
// serve), which off loopback shows paths and images only with its
// token. Call it before serving.
func (s *Server) ShowService(status func(trusted bool) any, trust func(*http.Request) bool) {
	s.mu.Lock()
	s.service, s.trust = status, trust
	s.mu.Unlock()
}

// trusted reports whether r may see images and paths.
func (s *Server) trusted(r *http.Request) bool {
	s.mu.Lock()
	trust := s.trust
	s.mu.Unlock()
	return trust == nil || trust(r)
}

// Handler returns the server's handler.
func (s *Server) Handler() http.Handler { return s.mux }

// Addr returns the address the server listens on; nil for a server of
// NewServer.
func (s *Server) Addr() net.Addr {
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Remove makes the server show m's scan no more.
func (s *Server) Remove(m *Monitor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.monitors = slices.DeleteFunc(s.monitors, func(x *Monitor) bool { return x == m })
	delete(s.previews, m)
}

// Add makes the server show m's scan.
func (s *Server) Add(m *Monitor) {
	s.mu.Lock()
	s.monitors = append(s.monitors, m)
	s.previews[m] = &renderedPreview{}
	s.mu.Unlock()
}

// Close stops the server, letting requests in progress finish for up to a
// second.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return s.srv.Close()
}

func (s *Server) list() []*Monitor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Monitor(nil), s.monitors...)
}

func (s *Server) servePage(w http.ResponseWriter, r *http.Request) {
	b, _ := page.ReadFile("page.html")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}

func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	var out struct {
		Scans          []Status `json:"scans"`
		Service        any      `json:"service,omitempty"` // the scan service's status (ShowService)
		PreviewAllowed bool     `json:"preview_allowed"`   // /preview.png answers this reader
	}
	trusted := s.trusted(r)
	out.Scans, out.PreviewAllowed = []Status{}, trusted
	for _, m := range s.list() {
		st := m.Status()
		if !trusted {
			st.Scan.Output = ""
		}
		out.Scans = append(out.Scans, st)
		if m.stages != nil && trusted {
			m.stages.Preview.WantUntil(time.Now().Add(previewWanted))
		}
	}
	s.mu.Lock()
	service := s.service
	s.mu.Unlock()
	if service != nil {
		out.Service = service(trusted)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(out)
}

func (s *Server) servePreview(w http.ResponseWriter, r *http.Request) {
	if !s.trusted(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="h5ingest"`)
		http.Error(w, "off loopback, a scan's image needs the service's token: Authorization: Bearer TOKEN", http.StatusUnauthorized)
		return
	}
	ms := s.list()
	var m *Monitor
	if q := r.URL.Query().Get("module"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil {
			http.Error(w, "module: want a number", http.StatusBadRequest)
			return
		}
		for _, c := range ms {
			if c.scan.Module == n {
				m = c
			}
		}
	} else if len(ms) > 0 {
		m = ms[0]
	}
	if m == nil || m.stages == nil {
		http.Error(w, "no such scan", http.StatusNotFound)
		return
	}
	m.stages.Preview.WantUntil(time.Now().Add(previewWanted))
	s.mu.Lock()
	rp := s.previews[m]
	s.mu.Unlock()
	b, err := rp.render(m)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if b == nil {
		http.Error(w, "no frame decoded yet", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}

// render returns the PNG of m's latest preview image, rendering it if it is
// new; nil when there is none yet.
func (rp *renderedPreview) render(m *Monitor) ([]byte, error) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	p := m.stages.Preview
	if seq, _ := p.Seq(); seq == rp.seq || time.Since(rp.when) < minRenderInterval {
		return rp.png, nil
	}
	var img instrument.PreviewImage
	p.View(func(latest instrument.PreviewImage) {
		img = latest
		f := img.Format
		if img.Seq > 0 {
			rp.small = shrink(rp.small[:0], img.Image, f.Height(), f.Width(), f.PixelSize(), PreviewSide)
		}
	})
	if img.Seq == 0 {
		return nil, nil
	}
	f := img.Format
	step := (max(f.Height(), f.Width()) + PreviewSide - 1) / PreviewSide
	h, w := (f.Height()+step-1)/step, (f.Width()+step-1)/step
	pic, err := preview.Render(preview.Frame{Data: rp.small, Height: h, Width: w, ElemSize: 4},
		preview.Options{ColorBar: true})
	if err != nil {
		return nil, fmt.Errorf("preview of frame %d: %w", img.Number, err)
	}
	var b bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&b, pic); err != nil {
		return nil, fmt.Errorf("preview of frame %d: %w", img.Number, err)
	}
	rp.seq, rp.png, rp.when = img.Seq, b.Bytes(), time.Now()
	return rp.png, nil
}

// minRenderInterval bounds how often a preview is rendered, however many
// pages ask for it.
const minRenderInterval = 2 * time.Second

// shrink appends to dst the means of step x step blocks of a frame of
// h x w pixels of elem bytes, step chosen so that the longer side fits
// maxSide, as little-endian uint32 counts. It is the costly part of a
// preview, done here in integers so that rendering stays cheap.
func shrink(dst, data []byte, h, w, elem, maxSide int) []byte {
	step := (max(h, w) + maxSide - 1) / maxSide
	sh, sw := (h+step-1)/step, (w+step-1)/step
	sums := make([]uint64, sw)
	for by := range sh {
		clear(sums)
		y1 := min((by+1)*step, h)
		for y := by * step; y < y1; y++ {
			row := data[y*w*elem : (y+1)*w*elem]
			if elem == 2 {
				for x := range w {
					sums[x/step] += uint64(binary.LittleEndian.Uint16(row[2*x:]))
				}
			} else {
				for x := range w {
					sums[x/step] += uint64(binary.LittleEndian.Uint32(row[4*x:]))
				}
			}
		}
		for bx := range sw {
			n := uint64((y1 - by*step) * (min((bx+1)*step, w) - bx*step))
			dst = binary.LittleEndian.AppendUint32(dst, uint32(sums[bx]/n))
		}
	}
	return dst
}
