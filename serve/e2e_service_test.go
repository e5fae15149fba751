package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/scan"
	"h5ingest/scan/scantest"
	"h5ingest/service"
	"h5ingest/source/fabric"
)

// The scan service's counts and its cancel, through the real handler
// (service.New over this package's Runner) on loopback, with a real
// sender in the same process.

// served is a scan service of Runner for a test, on a loopback port.
type served struct {
	t    *testing.T
	base string
	dir  string // the profile's output directory
	logs *scantest.Buffer
	svc  *service.Service
	// end ends the service as SIGTERM ends serve (its drain, then its
	// shutdown) and returns what Serve returned; the test's end calls it
	// too.
	end func() error
}

// serveProfile is the profile file the tests' service scans with: frames
// of f from a sender on addr, into dir, with the YAML lines of extra
// (indented keys of source: and output:) on top.
func serveProfile(f frame.Format, addr, dir string, ringSlots int, compression string, level int) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf(`name: served
detector:
  chips_x: %d
  chips_y: %d
  chip_width: %d
  chip_height: %d
  encoding: bitplane
  bit_depth: 24
  coding: lfsr
source:
  provider: tcp
  address: %s
  port: %s
  ring_slots: %d
  connect_timeout: 30s
  idle_timeout: 20s
backend: cpu
output:
  directory: %s
  template: "{scan}.h5"
  compression: %s
  level: %d
`, f.ChipsX, f.ChipsY, f.ChipWidth, f.ChipHeight, host, port, ringSlots, dir, compression, level)
}

// startServed starts a scan service whose one profile file, "served", is
// profile; its log (warnings and errors, JSON) goes to logs.
func startServed(t *testing.T, profile string, dir string) *served {
	return startServedDrain(t, profile, dir, 30*time.Second)
}

// startServedDrain is startServed with the drain timeout of serve's
// --drain-timeout.
func startServedDrain(t *testing.T, profile string, dir string, drain time.Duration) *served {
	t.Helper()
	profiles := t.TempDir()
	if err := os.WriteFile(filepath.Join(profiles, "served"), []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &served{t: t, dir: dir, logs: &scantest.Buffer{}}
	log := scantest.JSONLog(s.logs)
	obs := scan.NewServingObserver(log)
	s.svc = service.New(&Runner{Profiles: profiles, Log: log, Observer: obs, Stages: scantest.Stages(t)}, service.Config{})
	s.svc.Handle("/", obs.Handler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { result <- s.svc.Serve(ctx, ln, drain) }()
	s.end = sync.OnceValue(func() error {
		cancel()
		return <-result
	})
	t.Cleanup(func() { s.end() })
	s.base = "http://" + ln.Addr().String()
	return s
}

// call makes a request of the API and decodes its answer into out, where
// out is not nil; it returns the HTTP status.
func (s *served) call(method, path string, body, out any) int {
	s.t.Helper()
	code, b := apiCall(s.t, s.base, method, path, body, out)
	if code >= 300 {
		s.t.Logf("%s %s: %d %s", method, path, code, b)
	}
	return code
}

// apiCall makes a request of the API at base, its body (where not nil) as
// JSON, and decodes a 2xx answer into out where out is not nil; it returns
// the HTTP status and the answer's body.
func apiCall(t *testing.T, base, method, path string, body, out any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil || method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, b)
		}
	}
	return resp.StatusCode, b
}

// arm arms scan id of n projections and returns its status as the arm
// answered it.
func (s *served) arm(id string, n int) service.Status {
	s.t.Helper()
	var st service.Status
	if code := s.call("POST", "/v1/scans", map[string]any{"profile": "served", "scan_id": id,
		"plan": map[string]any{"projections": n}}, &st); code != http.StatusCreated {
		s.t.Fatalf("arm: status %d", code)
	}
	return st
}

// status returns the scan's status now.
func (s *served) status(id string) service.Status {
	s.t.Helper()
	var st service.Status
	if code := s.call("GET", "/v1/scans/"+id, nil, &st); code != http.StatusOK {
		s.t.Fatalf("get %s: status %d", id, code)
	}
	return st
}

// wait waits for the scan to end and returns its status.
func (s *served) wait(id string) service.Status {
	s.t.Helper()
	var st service.Status
	if code := s.call("GET", "/v1/scans/"+id+"/wait?timeout=120", nil, &st); code != http.StatusOK {
		s.t.Fatalf("wait %s: status %d", id, code)
	}
	return st
}

// metrics returns the series of /metrics by name, the values of each
// name's series (one per module and label) summed.
func (s *served) metrics() map[string]float64 {
	s.t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			m[name] += v
		}
	}
	return m
}

// progressEvents follows /v1/events and collects the counts of every
// progress event until the returned function is called, which returns
// them.
func (s *served) progressEvents() (stop func() []service.Counts) {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", s.base+"/v1/events", nil)
	var (
		mu     sync.Mutex
		counts []service.Counts
		done   = make(chan struct{})
	)
	go func() { // the answer's head comes with the first event
		defer close(done)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event:"):
				event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
			case strings.HasPrefix(line, "data:") && event == "progress":
				var st service.Status
				if json.Unmarshal([]byte(strings.TrimPrefix(line, "data:")), &st) == nil {
					mu.Lock()
					counts = append(counts, st.Counts)
					mu.Unlock()
				}
			}
		}
	}()
	return func() []service.Counts {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return counts
	}
}

// sendRecords sends recs to addr as module 0 as fast as the receiver
// takes them, counting the frames posted in sent, and ends the scan. The
// channel gives the sender's error.
func sendRecords(t *testing.T, recs [][]byte, addr string, sent *atomic.Int64) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s, err := fabric.DialWait(ctx, fabric.SenderConfig{Provider: "tcp", Addr: addr, Timeout: 30 * time.Second,
			Hello: fabric.Hello{Mode: fabric.ModeWrite, Format: scantest.BigFormat}})
		if err != nil {
			done <- err
			return
		}
		for _, rec := range recs {
			buf, err := s.Buffer(ctx)
			if err == nil {
				err = s.Post(copy(buf, rec))
			}
			if err != nil {
				s.Abort()
				done <- err
				return
			}
			sent.Add(1)
		}
		_, err = s.Close(ctx)
		done <- err
	}()
	return done
}

// ended reports whether a scan in state st has ended.
func ended(st service.State) bool {
	switch st {
	case service.Done, service.Incomplete, service.Cancelled, service.Failed:
		return true
	}
	return false
}

// slowLevel is the deflate level that makes the pipeline slower than a
// sender on loopback: a backlog in the ring.
func slowLevel() int {
	if scantest.Race {
		return 1
	}
	return 7
}

// TestServeCountsPendingNotMissing runs a scan of 40 frames through the
// service whose sender, faster than the pipeline, never sends frame 5.
// From the arm on, planned is 40; while the scan runs no frame counts
// missing (in GET, the progress events and /metrics) until a frame
// source.ring_slots (16) beyond frame 5 has been received: the frames not
// come yet are pending. At the end frame 5 is the one missing, nothing
// is pending.
func TestServeCountsPendingNotMissing(t *testing.T) {
	const n, slots, hole = 40, 16, 5
	dir, addr := t.TempDir(), scantest.FreeAddr(t)
	s := startServed(t, serveProfile(scantest.BigFormat, addr, dir, slots, "deflate", slowLevel()), dir)
	recs := scantest.CaptureRecords(t, scantest.SimulateModule(t, scantest.BigFormat, n, 0))
	recs = append(recs[:hole:hole], recs[hole+1:]...)
	events := s.progressEvents()

	armed := s.arm("counts", n)
	if c := armed.Counts; c.Planned != n || c.Pending != n || c.Missing != 0 {
		t.Errorf("counts when armed: %+v, want %d planned, all pending, none missing", c, n)
	}
	if c := s.status("counts").Counts; c.Planned != n || c.Pending != n {
		t.Errorf("counts before the first frame: %+v, want %d planned and pending", c, n)
	}
	var sent atomic.Int64
	result := sendRecords(t, recs, addr, &sent)
	// Frame 5 is missing once the highest frame received is 5 + 16 = 21:
	// received counts frames 0-4 and 6-21 then, 21 of them.
	due := func(c service.Counts) bool { return c.Received >= hole+slots }
	check := func(where string, c service.Counts) {
		t.Helper()
		if c.Missing > 0 && !due(c) {
			t.Errorf("%s: %+v: frames counted missing before any frame passed them by the gap", where, c)
		}
		if c.Planned != n {
			t.Errorf("%s: planned %d, want %d", where, c.Planned, n)
		}
		if c.Missing+c.Pending+c.Written > n {
			t.Errorf("%s: %+v: more frames than planned", where, c)
		}
	}
	var seen []service.Counts
	for st := s.status("counts"); !ended(st.State); st = s.status("counts") {
		check("GET", st.Counts)
		seen = append(seen, st.Counts)
		if m := s.metrics(); m["h5ingest_frames_missing"] > 0 && m["h5ingest_frames_received_total"] < hole+slots {
			t.Errorf("/metrics: %v missing with %v received", m["h5ingest_frames_missing"], m["h5ingest_frames_received_total"])
		}
		time.Sleep(30 * time.Millisecond)
	}
	if err := <-result; err != nil {
		t.Fatalf("sender: %v", err)
	}
	final := s.wait("counts")
	progress := events()
	for _, c := range progress[:max(0, len(progress)-1)] { // the last is the end's
		check("progress event", c)
	}
	running := 0
	for _, c := range seen {
		if c.Received > 0 && c.Pending > 0 {
			running++
		}
	}
	if running == 0 {
		t.Errorf("no GET saw the scan running with frames pending: %v", seen)
	}
	if c := final.Counts; c.Planned != n || c.Pending != 0 || c.Missing != 1 || c.OK != n-1 || c.Received != n-1 {
		t.Errorf("counts at the end: %+v, want %d planned, %d ok, 1 missing, none pending", c, n, n-1)
	}
	if final.State != service.Incomplete {
		t.Errorf("state %s, want incomplete (frame 5 missing)", final.State)
	}
	t.Logf("%d GETs while running, %d progress events; final %+v", len(seen), len(progress), final.Counts)
}

// TestServeCancelWritesTheRing cancels a scan of the service whose ring
// is full behind a slow pipeline (a sender faster than it): at once, and
// while a stop drains the ring (as a control system that gives up on a
// drain does). Either way the frames that had arrived are written before the
// file closes, none discarded, and the scan ends cancelled without an
// error. When they cannot be written in time (CancelWrite of 1 ms) the
// frames left are counted discarded, in the API and /metrics, with a
// warning; received and discarded still add up to every frame that came.
func TestServeCancelWritesTheRing(t *testing.T) {
	const n, slots = 60, 16
	recs := scantest.CaptureRecords(t, scantest.SimulateModule(t, scantest.BigFormat, n, 0))
	for _, tt := range []struct {
		name        string
		stopFirst   bool
		cancelWrite time.Duration
		discard     bool
	}{
		// No bound but a hang's on writing the ring, however slow the
		// machine: a busy one took more than CancelWrite's 5 s.
		{"cancel", false, time.Hour, false},
		{"stop, cancel while it drains", true, time.Hour, false},
		{"cancel that cannot write in time", false, time.Millisecond, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			defer func(d time.Duration) { CancelWrite = d }(CancelWrite)
			CancelWrite = tt.cancelWrite
			dir, addr := t.TempDir(), scantest.FreeAddr(t)
			s := startServed(t, serveProfile(scantest.BigFormat, addr, dir, slots, "deflate", slowLevel()), dir)
			s.arm("cancel", n)
			var sent atomic.Int64
			result := sendRecords(t, recs, addr, &sent)
			// The frames that arrived (the receiver counts each as it
			// lands in the ring), not those the sender posted: some of
			// those may still be on their way when the request comes, and
			// those after a stop are not the scan's.
			var before service.Counts
			arrived := 0
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				arrived = int(s.metrics()["h5ingest_fabric_frames_total"])
				before = s.status("cancel").Counts
				if arrived-before.Received >= slots/2 {
					break // a backlog in the ring
				}
				if time.Now().After(deadline) {
					t.Fatalf("no backlog: %d sent, %d arrived, %+v", sent.Load(), arrived, before)
				}
			}
			if tt.stopFirst {
				if code := s.call("POST", "/v1/scans/cancel/stop", map[string]any{}, nil); code != http.StatusAccepted {
					t.Fatalf("stop: status %d", code)
				}
				// The cancel follows at once, while the stop drains the
				// backlog of at least slots/2 frames behind a slow pipeline.
				if st := s.status("cancel").State; st != service.Stopping {
					t.Fatalf("state %s after the stop, want stopping (draining the ring)", st)
				}
			}
			if code := s.call("POST", "/v1/scans/cancel/cancel", map[string]any{}, nil); code != http.StatusAccepted {
				t.Fatalf("cancel: status %d", code)
			}
			final := s.wait("cancel")
			select {
			case <-result:
			case <-time.After(time.Minute):
				t.Fatal("the sender did not end")
			}
			c := final.Counts
			t.Logf("before the cancel %d sent, %d arrived, %+v; at the end %+v", sent.Load(), arrived, before, c)
			if final.State != service.Cancelled || final.Error != "" {
				t.Errorf("state %s, error %q: want cancelled, no error", final.State, final.Error)
			}
			if c.Received+c.Discarded < arrived {
				t.Errorf("%d received and %d discarded of the %d frames that arrived before the cancel: frames lost without a count", c.Received, c.Discarded, arrived)
			}
			if len(final.Files) != 1 {
				t.Fatalf("files %+v, want the scan's", final.Files)
			}
			got := scantest.Statuses(t, final.Files[0].Path)
			if got[frame.StatusOK] != c.OK || c.OK != c.Written || got[frame.StatusOK]+got[frame.StatusMissing] != n {
				t.Errorf("file: %v; counts %+v: want the ok frames written, the rest of %d missing", got, c, n)
			}
			if m := s.metrics(); int(m["h5ingest_frames_discarded_total"]) != c.Discarded {
				t.Errorf("/metrics: %v discarded, the API %d", m["h5ingest_frames_discarded_total"], c.Discarded)
			}
			warned := strings.Contains(s.logs.String(), "frames discarded")
			switch {
			case !tt.discard && (c.Discarded != 0 || c.Written < arrived):
				t.Errorf("%d written, %d discarded of %d in the ring and before: the cancel must write them", c.Written, c.Discarded, arrived)
			case tt.discard && (c.Discarded == 0 || !warned):
				t.Errorf("%d discarded, warned %v: a cancel that cannot write the ring counts and says what it discards\n%s", c.Discarded, warned, s.logs.String())
			}
		})
	}
}

// TestServeDrainTimeoutSaysSo ends a service (as SIGTERM ends serve)
// while its scan has a backlog in the ring behind a slow pipeline, with a
// drain timeout too short for it: Serve returns an error wrapping
// service.ErrDrainTimeout (serve logs it as a warning and exits 1) naming
// the scan and saying it was cancelled, and the file holds every frame
// that was received, the rest recorded missing.
func TestServeDrainTimeoutSaysSo(t *testing.T) {
	const n, slots = 60, 16
	dir, addr := t.TempDir(), scantest.FreeAddr(t)
	s := startServedDrain(t, serveProfile(scantest.BigFormat, addr, dir, slots, "deflate", slowLevel()), dir, time.Millisecond)
	s.arm("drain", n)
	var sent atomic.Int64
	result := sendRecords(t, scantest.CaptureRecords(t, scantest.SimulateModule(t, scantest.BigFormat, n, 0)), addr, &sent)
	for deadline := time.Now().Add(60 * time.Second); sent.Load() < slots; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-result:
			t.Fatalf("the sender ended after %d frames, before a backlog: %v\nthe scan: %+v\n%s", sent.Load(), err, s.status("drain"), s.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no backlog: %d sent\n%s", sent.Load(), s.logs.String())
		}
	}
	err := s.end()
	if !errors.Is(err, service.ErrDrainTimeout) || !strings.Contains(err.Error(), "scan drain") || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("Serve: %v, want an error wrapping ErrDrainTimeout naming the scan, cancelled", err)
	}
	select {
	case <-result:
	case <-time.After(time.Minute):
		t.Fatal("the sender did not end")
	}
	got := scantest.Statuses(t, filepath.Join(dir, "drain.h5"))
	if got[frame.StatusOK]+got[frame.StatusMissing] != n || got[frame.StatusOK] == 0 {
		t.Errorf("file: %v, want the frames received ok and the rest of %d missing", got, n)
	}
	t.Logf("Serve: %v; file %v, %d sent", err, got, sent.Load())
}
