package service

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeRunner prepares fakeScans: each "receives" frames one every tick
// until it has planned of them, is stopped, or is cancelled.
type fakeRunner struct {
	planned int
	tick    time.Duration
	refuse  []string      // reasons to refuse every request
	hold    chan struct{} // where set, Prepare waits for it to close
	began   chan string   // where set, Prepare sends the scan id on it as it begins

	mu       sync.Mutex
	prepared []ArmRequest
	scans    []*fakeScan
}

func (r *fakeRunner) Prepare(ctx context.Context, req ArmRequest) (Scan, error) {
	if r.began != nil {
		r.began <- req.ScanID
	}
	if r.hold != nil {
		<-r.hold // checks on a file system that does not answer
	}
	if len(r.refuse) > 0 {
		return nil, &RefusedError{Reasons: r.refuse}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	sc := &fakeScan{planned: r.planned, tick: r.tick, id: req.ScanID, stop: make(chan struct{})}
	r.prepared = append(r.prepared, req)
	r.scans = append(r.scans, sc)
	return sc, nil
}

type fakeScan struct {
	id       string
	planned  int
	tick     time.Duration
	stop     chan struct{}
	stopOnce sync.Once
	stopped  atomic.Bool
	released atomic.Bool // Release was called
}

func (s *fakeScan) Release() { s.released.Store(true) }

func (s *fakeScan) Stop() {
	s.stopOnce.Do(func() { s.stopped.Store(true); close(s.stop) })
}

func (s *fakeScan) Run(ctx context.Context, rep Reporter) Result {
	c := Counts{Planned: s.planned}
	t := time.NewTicker(s.tick)
	defer t.Stop()
	state := Done
loop:
	for c.Received < s.planned {
		select {
		case <-ctx.Done():
			state = Cancelled
			break loop
		case <-s.stop:
			c.Received++ // the frame in flight is written: a drain
			c.Written++
			c.OK++
			state = Incomplete
			break loop
		case <-t.C:
			c.Received++
			c.Written++
			c.OK++
			rep.Progress(c)
		}
	}
	c.Missing = s.planned - c.OK
	if c.Missing > 0 && state == Done {
		state = Incomplete
	}
	f := File{Path: "/data/" + s.id + ".h5", Module: 0, Verified: true}
	rep.FileFinalised(f)
	return Result{State: state, Counts: c, Files: []File{f}}
}

// client talks to a service under test.
type client struct {
	t     *testing.T
	base  string
	token string
}

func (c client) do(method, path string, body any) (int, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if b, ok := body.([]byte); ok {
		rd = bytes.NewReader(b)
	} else if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if rd != nil || method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func newTestService(t *testing.T, r Runner, cfg Config) (*Service, client) {
	t.Helper()
	s := New(r, cfg)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return s, client{t: t, base: srv.URL, token: cfg.Token}
}

func arm(id string) map[string]any {
	return map[string]any{"profile": "default", "scan_id": id, "title": "gold foam", "sample": "Au",
		"plan": map[string]any{"darks": 1, "flats": 1, "projections": 3}, "user_metadata": map[string]any{"proposal": 20261234}}
}

func TestArmWaitBackToBack(t *testing.T) {
	r := &fakeRunner{planned: 5, tick: 5 * time.Millisecond}
	_, c := newTestService(t, r, Config{})
	for i, id := range []string{"s1", "s2"} {
		code, st := c.do("POST", "/v1/scans", arm(id))
		if code != http.StatusCreated || st["state"] != "armed" || st["scan_id"] != id {
			t.Fatalf("arm %s: %d %v", id, code, st)
		}
		code, st = c.do("GET", "/v1/scans/"+id+"/wait?timeout=10", nil)
		if code != http.StatusOK || st["state"] != "done" {
			t.Fatalf("wait %s: %d %v", id, code, st)
		}
		counts := st["counts"].(map[string]any)
		if counts["ok"] != float64(5) || counts["missing"] != float64(0) {
			t.Errorf("%s: counts %v", id, counts)
		}
		code, files := c.do("GET", "/v1/scans/"+id+"/files", nil)
		if fs := files["files"].([]any); code != 200 || len(fs) != 1 || fs[0].(map[string]any)["path"] != "/data/"+id+".h5" {
			t.Errorf("%s files: %d %v", id, code, files)
		}
		if len(r.prepared) != i+1 || r.prepared[i].Title != "gold foam" || r.prepared[i].Plan.Projections != 3 ||
			r.prepared[i].UserMetadata["proposal"] != int64(20261234) {
			t.Errorf("the runner got %+v", r.prepared)
		}
	}
	if _, list := c.do("GET", "/v1/scans", nil); len(list["scans"].([]any)) != 2 {
		t.Errorf("list %v", list)
	}
	if code, _ := c.do("POST", "/v1/scans", arm("s1")); code != http.StatusConflict {
		t.Errorf("a used scan id: %d, want 409", code)
	}
}

func TestSecondArmConflicts(t *testing.T) {
	r := &fakeRunner{planned: 1000, tick: 10 * time.Millisecond}
	_, c := newTestService(t, r, Config{})
	if code, _ := c.do("POST", "/v1/scans", arm("first")); code != http.StatusCreated {
		t.Fatal(code)
	}
	code, e := c.do("POST", "/v1/scans", arm("second"))
	if code != http.StatusConflict || !strings.Contains(fmt.Sprint(e["detail"]), "first") {
		t.Errorf("second arm: %d %v, want 409 naming the first", code, e)
	}
	if len(r.prepared) != 1 {
		t.Errorf("the second arm reached the runner")
	}
	c.do("POST", "/v1/scans/first/cancel", nil)
	if _, st := c.do("GET", "/v1/scans/first/wait?timeout=10", nil); st["state"] != "cancelled" {
		t.Errorf("after cancel: %v", st)
	}
}

func TestStopDrainsCancelCloses(t *testing.T) {
	for _, tc := range []struct {
		op, want string
		stopped  bool
	}{{"stop", "incomplete", true}, {"cancel", "cancelled", false}} {
		t.Run(tc.op, func(t *testing.T) {
			r := &fakeRunner{planned: 1000, tick: 5 * time.Millisecond}
			_, c := newTestService(t, r, Config{})
			c.do("POST", "/v1/scans", arm("x"))
			time.Sleep(50 * time.Millisecond)
			code, st := c.do("POST", "/v1/scans/x/"+tc.op, nil)
			if code != http.StatusAccepted {
				t.Fatalf("%s: %d %v", tc.op, code, st)
			}
			_, st = c.do("GET", "/v1/scans/x/wait?timeout=10", nil)
			counts := st["counts"].(map[string]any)
			if st["state"] != tc.want || counts["missing"].(float64) == 0 || counts["ok"].(float64)+counts["missing"].(float64) != 1000 {
				t.Errorf("%s: %v", tc.op, st)
			}
			if got := r.scans[0].stopped.Load(); got != tc.stopped {
				t.Errorf("%s: Stop called %v", tc.op, got)
			}
			if code, _ := c.do("POST", "/v1/scans/x/"+tc.op, nil); code != http.StatusConflict {
				t.Errorf("%s of an ended scan: %d, want 409", tc.op, code)
			}
		})
	}
}

func TestBadRequestsChangeNothing(t *testing.T) {
	r := &fakeRunner{planned: 1, tick: time.Millisecond}
	_, c := newTestService(t, r, Config{})
	big := []byte(`{"profile":"default","scan_id":"big","title":"` + strings.Repeat("x", 100<<10) + `"}`)
	for name, tc := range map[string]struct {
		body any
		want int
	}{
		"dot-dot scan id":  {map[string]any{"profile": "default", "scan_id": "../x"}, http.StatusUnprocessableEntity},
		"slash scan id":    {map[string]any{"profile": "default", "scan_id": "a/b"}, http.StatusUnprocessableEntity},
		"dot-dot output":   {map[string]any{"profile": "default", "scan_id": "a", "output": "../../etc/x.h5"}, http.StatusUnprocessableEntity},
		"hidden output":    {map[string]any{"profile": "default", "scan_id": "a", "output": ".x.h5"}, http.StatusUnprocessableEntity},
		"no profile":       {map[string]any{"scan_id": "a"}, http.StatusUnprocessableEntity},
		"negative darks":   {map[string]any{"profile": "default", "scan_id": "a", "plan": map[string]any{"darks": -1}}, http.StatusUnprocessableEntity},
		"not json":         {[]byte("{profile"), http.StatusBadRequest},
		"oversized body":   {big, http.StatusRequestEntityTooLarge},
		"metadata not obj": {map[string]any{"profile": "default", "scan_id": "a", "user_metadata": []int{1}}, http.StatusUnprocessableEntity},
	} {
		if code, e := c.do("POST", "/v1/scans", tc.body); code != tc.want {
			t.Errorf("%s: %d %v, want %d", name, code, e, tc.want)
		}
	}
	if len(r.prepared) != 0 {
		t.Errorf("bad requests reached the runner: %+v", r.prepared)
	}
	if _, list := c.do("GET", "/v1/scans", nil); len(list["scans"].([]any)) != 0 {
		t.Errorf("bad requests left scans: %v", list)
	}
	if code, _ := c.do("GET", "/v1/scans/nope", nil); code != http.StatusNotFound {
		t.Errorf("unknown scan: %d", code)
	}

	r.refuse = []string{"output directory /nope does not exist", "port 31001 in use"}
	code, e := c.do("POST", "/v1/scans", arm("refused"))
	if code != http.StatusUnprocessableEntity || len(e["errors"].([]any)) != 2 {
		t.Errorf("refused: %d %v, want 422 listing both reasons", code, e)
	}
	if _, list := c.do("GET", "/v1/scans", nil); len(list["scans"].([]any)) != 0 {
		t.Errorf("a refused arm left a scan: %v", list)
	}
}

func TestToken(t *testing.T) {
	r := &fakeRunner{planned: 1000, tick: 10 * time.Millisecond}
	_, c := newTestService(t, r, Config{Token: "s3cret"})
	anon := c
	anon.token = ""
	wrong := c
	wrong.token = "s3cre"
	for _, cl := range []client{anon, wrong} {
		if code, _ := cl.do("POST", "/v1/scans", arm("a")); code != http.StatusUnauthorized {
			t.Errorf("arm with token %q: %d, want 401", cl.token, code)
		}
	}
	if code, _ := c.do("POST", "/v1/scans", arm("a")); code != http.StatusCreated {
		t.Fatalf("arm with the token: %d", code)
	}
	for _, op := range []string{"stop", "cancel"} {
		if code, _ := anon.do("POST", "/v1/scans/a/"+op, nil); code != http.StatusUnauthorized {
			t.Errorf("%s without the token: %d, want 401", op, code)
		}
	}
	if r.scans[0].stopped.Load() {
		t.Error("a stop without the token stopped the scan")
	}
	c.do("POST", "/v1/scans/a/cancel", nil)
}

func TestEvents(t *testing.T) {
	r := &fakeRunner{planned: 40, tick: 10 * time.Millisecond}
	_, c := newTestService(t, r, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", c.base+"/v1/events", nil)
	// The response's head comes with the first event: arm once the
	// request has reached the service.
	armed := make(chan int, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		b, _ := json.Marshal(arm("ev"))
		resp, err := http.Post(c.base+"/v1/scans", "application/json", bytes.NewReader(b))
		if err != nil {
			armed <- 0
			return
		}
		resp.Body.Close()
		armed <- resp.StatusCode
	}()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if code := <-armed; code != http.StatusCreated {
		t.Fatalf("arm: %d", code)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	var names []string
	progress := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			if name == "progress" {
				progress++
				if progress > 1 {
					continue
				}
			}
			names = append(names, name)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && strings.Contains(data, `"state":"done"`) {
			break
		}
	}
	want := []string{"armed", "first_frame", "progress", "file_finalised", "done"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("events %v, want %v (progress repeated)", names, want)
	}
	// 40 frames over about 0.4 s: a few progress events, not one per frame.
	if progress == 0 || progress > 10 {
		t.Errorf("%d progress events for 40 frames", progress)
	}
}

// TestPythonClient runs the standard-library Python client of
// tools/serve against the service: it arms, waits and prints the file.
func TestPythonClient(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	r := &fakeRunner{planned: 10, tick: 5 * time.Millisecond}
	_, c := newTestService(t, r, Config{Token: "tok"})
	cmd := exec.Command("/usr/bin/python3", "../tools/serve/client.py", "--url", c.base, "--token", "tok",
		"--profile", "default", "--scan-id", "py1", "--projections", "10", "--title", "from python",
		"--meta", "operator=ana", "--timeout", "30")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	if strings.TrimSpace(string(out)) != "/data/py1.h5" {
		t.Errorf("client printed %q", out)
	}
	if len(r.prepared) != 1 || r.prepared[0].Title != "from python" || r.prepared[0].UserMetadata["operator"] != "ana" ||
		r.prepared[0].Plan == nil || r.prepared[0].Plan.Projections != 10 {
		t.Errorf("the runner got %+v", r.prepared)
	}
}
