package status

import (
	"encoding/json"
	"image/png"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/instrument"
	"h5ingest/pipeline"
)

var testFormat = frame.Format{
	Geometry: frame.Geometry{ChipsX: 2, ChipsY: 1, ChipWidth: 16, ChipHeight: 8},
	Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR,
}

// fakeProgress is a pipeline's progress that a test moves on.
type fakeProgress struct {
	mu sync.Mutex
	p  pipeline.Progress
}

func (f *fakeProgress) get() pipeline.Progress {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.p
}

func (f *fakeProgress) set(written, crc int) {
	f.mu.Lock()
	f.p.Planned, f.p.Written, f.p.Received, f.p.OK, f.p.CRCMismatch = 100, written, written, written-crc, crc
	f.p.Missing = 100 - written
	f.p.RawBytes = int64(written) * 1000
	f.mu.Unlock()
}

type nopBackend struct{}

func (nopBackend) Name() string { return "nop" }
func (nopBackend) Close() error { return nil }
func (nopBackend) Decode(batch []gpu.Job) error {
	for i := range batch {
		for k := range batch[i].Image {
			batch[i].Image[k] = byte(k)
		}
	}
	return nil
}

func getJSON(t *testing.T, url string) []Status {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Scans []Status }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Scans
}

func TestServerAndReport(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := instrument.New()
	if err := st.Register(reg, 2); err != nil {
		t.Fatal(err)
	}
	st.Preview.Enable(time.Nanosecond)
	var fp fakeProgress
	m := NewMonitor(Scan{ID: "s7", Module: 2, Output: "/x/s7.h5", Plan: "100 projections", Planned: 100}, fp.get, st)
	srv, err := Listen("127.0.0.1:0", reg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.Add(m)
	base := "http://" + srv.Addr().String()

	if s := getJSON(t, base+"/status.json"); len(s) != 1 || s[0].State != "starting" {
		t.Fatalf("before Start: %+v", s)
	}
	resp, err := http.Get(base + "/preview.png")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("preview before any frame: %s, want 404", resp.Status)
	}

	m.Start()
	fp.set(10, 0)
	time.Sleep(1100 * time.Millisecond) // one sample
	fp.set(30, 1)
	s := getJSON(t, base+"/status.json")[0]
	if s.State != "running" || s.Written != 30 || s.CRCMismatch != 1 || s.Frames != 100 || s.Scan.ID != "s7" {
		t.Errorf("running: %+v", s)
	}
	if s.FrameRate <= 0 || s.FrameRate > 30/0.5 {
		t.Errorf("frame rate %v after 20 frames in the last second", s.FrameRate)
	}

	b := st.Backend(nopBackend{})
	jobs := []gpu.Job{{Header: frame.Header{Format: testFormat, FrameNumber: 9}, Image: make([]byte, testFormat.ImageSize())}}
	b.Decode(jobs)
	resp, err = http.Get(base + "/preview.png?module=2")
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(resp.Body)
	resp.Body.Close()
	if err != nil || img.Bounds().Dy() < testFormat.Height() {
		t.Errorf("preview: %v", err)
	}
	resp, err = http.Get(base + "/preview.png?module=5")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("preview of an unknown module: %s", resp.Status)
	}
	for path, want := range map[string]string{"/": "status.json", "/metrics": `h5ingest_decode_frames_total{module="2"} 1`} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		var sb strings.Builder
		buf := make([]byte, 1<<16)
		for {
			n, err := resp.Body.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		if !strings.Contains(sb.String(), want) {
			t.Errorf("%s lacks %q", path, want)
		}
	}

	fp.set(100, 1)
	m.Stop()
	s = getJSON(t, base+"/status.json")[0]
	if s.State != "finished" || s.Written != 100 {
		t.Errorf("finished: %+v", s)
	}
	var sb strings.Builder
	r := Report{Command: "h5ingest replay x", Started: time.Now().Add(-2 * time.Second), Ended: time.Now(), Outcome: "incomplete: 1 crc", Monitors: []*Monitor{m}}
	if err := r.WriteHTML(&sb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<polyline", "/x/s7.h5", "100 projections", "incomplete: 1 crc", "decode, per batch"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

func TestNiceStep(t *testing.T) {
	for v, want := range map[float64]float64{0: 1, 0.7: 1, 1: 1, 1.1: 2, 3: 5, 7: 10, 23: 50, 140: 200} {
		if got := niceStep(v); got != want {
			t.Errorf("niceStep(%v) = %v, want %v", v, got, want)
		}
	}
}
