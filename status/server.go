package status

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"h5ingest/metrics"
	"h5ingest/preview"
)

//go:embed page.html
var page embed.FS

// PreviewSide is the longer side, in pixels, of the frame in the preview.
const PreviewSide = 384

// Server serves the status of running scans over HTTP:
//
//	/             the status page (HTML, updating itself)
//	/status.json  {"scans": [Status, ...]}, one per module
//	/preview.png  the latest frame kept for the preview (?module=N; default the first)
//	/metrics      the registry in the Prometheus text format
//
// Previews are rendered on request, at most once per image kept, never by
// the pipeline.
type Server struct {
	reg *metrics.Registry
	ln  net.Listener
	srv *http.Server

	mu       sync.Mutex
	monitors []*Monitor
	previews map[*Monitor]*renderedPreview
}

// renderedPreview is a monitor's last rendered preview.
type renderedPreview struct {
	mu  sync.Mutex // held while rendering
	seq uint64
	png []byte
	buf []byte // the image copied out of the preview
}

// Listen starts serving on addr (host:port; port 0 picks one) with the
// metrics of reg.
func Listen(addr string, reg *metrics.Registry) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("status server: %w", err)
	}
	s := &Server{reg: reg, ln: ln, previews: map[*Monitor]*renderedPreview{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.servePage)
	mux.HandleFunc("GET /status.json", s.serveStatus)
	mux.HandleFunc("GET /preview.png", s.servePreview)
	mux.Handle("GET /metrics", reg)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

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
		Scans []Status `json:"scans"`
	}
	out.Scans = []Status{}
	for _, m := range s.list() {
		out.Scans = append(out.Scans, m.Status())
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(out)
}

func (s *Server) servePreview(w http.ResponseWriter, r *http.Request) {
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
	if seq, _ := p.Seq(); seq == rp.seq {
		return rp.png, nil
	}
	img := p.Latest(rp.buf)
	rp.buf = img.Image
	f := img.Format
	pic, err := preview.Render(preview.Frame{Data: img.Image, Height: f.Height(), Width: f.Width(), ElemSize: f.PixelSize()},
		preview.Options{MaxSide: PreviewSide, ColorBar: true})
	if err != nil {
		return nil, fmt.Errorf("preview of frame %d: %w", img.Number, err)
	}
	var b bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(&b, pic); err != nil {
		return nil, fmt.Errorf("preview of frame %d: %w", img.Number, err)
	}
	rp.seq, rp.png = img.Seq, b.Bytes()
	return rp.png, nil
}
