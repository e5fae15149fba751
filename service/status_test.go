package service

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"h5ingest/preview"
)

// statusRunner is a fakeRunner that also says which modules it receives,
// where its scans go and which profiles it has.
type statusRunner struct {
	*fakeRunner
	storage Storage
}

func (r *statusRunner) Modules() []int   { return []int{3} }
func (r *statusRunner) Storage() Storage { return r.storage }

func (r *statusRunner) ListProfiles() ([]ProfileInfo, error) {
	return []ProfileInfo{
		{Name: "default", Source: "built-in", Modules: []int{0}},
		{Name: "beam", Source: "file", Modules: []int{0}},
		{Name: "broken", Source: "file", Modules: []int{}, Error: "bad YAML"},
	}, nil
}

func (r *statusRunner) ShowProfile(name string) (ProfileDetail, error) {
	switch name {
	case "beam":
		return ProfileDetail{Name: "beam", Source: "file", Keys: []ProfileKey{
			{Key: "output.compression", Value: `"bslz4"`, From: "profile beam", OneOf: []string{"bslz4", "none"}}}}, nil
	case "broken":
		return ProfileDetail{}, errors.New("profile broken: not valid YAML")
	}
	return ProfileDetail{}, fmt.Errorf("profile %q: %w", name, ErrNoProfile)
}

// endedJob adds an ended scan to the service as run does, with scan sc.
func endedJob(s *Service, id string, state State, errText string, sc Scan) {
	j := &job{id: id, scan: sc, cancel: func() {}, done: make(chan struct{}),
		status: Status{ScanID: id, State: state, Error: errText, ArmedAt: time.Now().UTC(), EndedAt: time.Now().UTC()}}
	close(j.done)
	s.mu.Lock()
	s.jobs[id] = j
	s.ended = append(s.ended, id)
	s.mu.Unlock()
}

// TestServiceStatus follows the service's state through its scans: idle,
// running with the scan's counts, idle with the last scan, error after a
// failed scan (and health 503 saying why), idle again after the next.
func TestServiceStatus(t *testing.T) {
	r := &statusRunner{fakeRunner: &fakeRunner{planned: 40, tick: 10 * time.Millisecond},
		storage: Storage{Directory: "/data", FreeBytes: 1 << 40}}
	s, c := newTestService(t, r, Config{Version: "1.2.3"})

	code, st := c.do("GET", "/v1/status", nil)
	if code != http.StatusOK || st["state"] != "idle" || st["version"] != "1.2.3" || st["scan"] != nil ||
		fmt.Sprint(st["modules"]) != "[3]" || st["uptime_seconds"].(float64) <= 0 {
		t.Fatalf("idle status: %d %v", code, st)
	}
	if d, _ := st["storage"].(map[string]any); d["directory"] != "/data" || d["free_bytes"] != float64(1<<40) {
		t.Errorf("storage: %v", st["storage"])
	}
	if code, h := c.do("GET", "/v1/health", nil); code != http.StatusOK || h["healthy"] != true {
		t.Errorf("health when idle: %d %v", code, h)
	}

	if code, _ := c.do("POST", "/v1/scans", arm("st1")); code != http.StatusCreated {
		t.Fatalf("arm: %d", code)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, st = c.do("GET", "/v1/status", nil)
		if st["state"] == "running" || time.Now().After(deadline) {
			break
		}
	}
	sc, _ := st["scan"].(map[string]any)
	counts, _ := sc["counts"].(map[string]any)
	if st["state"] != "running" || sc["scan_id"] != "st1" || counts["received"].(float64) < 1 || sc["rates"] == nil {
		t.Errorf("running status: %v", st)
	}
	c.do("GET", "/v1/scans/st1/wait?timeout=10", nil)
	_, st = c.do("GET", "/v1/status", nil)
	if last, _ := st["last_scan"].(map[string]any); st["state"] != "idle" || st["scan"] != nil || last["scan_id"] != "st1" || last["state"] != "done" {
		t.Errorf("status after the scan: %v", st)
	}

	endedJob(s, "f1", Failed, "the disk is full", nil)
	_, st = c.do("GET", "/v1/status", nil)
	le, _ := st["last_error"].(map[string]any)
	if st["state"] != "error" || le["scan_id"] != "f1" || le["error"] != "the disk is full" {
		t.Errorf("status after a failed scan: %v", st)
	}
	code, h := c.do("GET", "/v1/health", nil)
	if code != http.StatusServiceUnavailable || h["healthy"] != false || fmt.Sprint(h["problems"]) != "[scan f1 failed: the disk is full]" {
		t.Errorf("health after a failed scan: %d %v", code, h)
	}

	// The next scan clears the error state; the last error stays.
	if code, _ := c.do("POST", "/v1/scans", arm("st2")); code != http.StatusCreated {
		t.Fatalf("arm: %d", code)
	}
	c.do("GET", "/v1/scans/st2/wait?timeout=10", nil)
	_, st = c.do("GET", "/v1/status", nil)
	if le, _ := st["last_error"].(map[string]any); st["state"] != "idle" || le["scan_id"] != "f1" {
		t.Errorf("status after the next scan: %v", st)
	}
	if code, _ := c.do("GET", "/v1/health", nil); code != http.StatusOK {
		t.Errorf("health after the next scan: %d", code)
	}

	code, v := c.do("GET", "/v1/version", nil)
	if code != http.StatusOK || v["version"] != "1.2.3" || v["api"] != "v1" || v["go"] == "" {
		t.Errorf("version: %d %v", code, v)
	}
}

// slowStorer's Storage answers after delay.
type slowStorer struct {
	*fakeRunner
	delay time.Duration
	st    Storage
	calls atomic.Int32
}

func (r *slowStorer) Storage() Storage {
	r.calls.Add(1)
	time.Sleep(r.delay)
	return r.st
}

// TestHealthStorage: a file system that cannot tell its free space, is
// full or does not answer in time makes the service unhealthy, and the
// status says why; a hung one is asked once, not once per request.
func TestHealthStorage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		delay   time.Duration
		st      Storage
		code    int
		problem string
	}{
		{"free", 0, Storage{Directory: "/d", FreeBytes: 5}, http.StatusOK, ""},
		{"full", 0, Storage{Directory: "/d", FreeBytes: 0}, http.StatusServiceUnavailable, "/d is full"},
		{"error", 0, Storage{Directory: "/d", FreeBytes: -1, Error: "permission denied"}, http.StatusServiceUnavailable, "free space of /d: permission denied"},
		{"hung", 3 * storageWait, Storage{Directory: "/d", FreeBytes: 5}, http.StatusServiceUnavailable, "free space where scans are written: the file system has not answered in 2s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &slowStorer{fakeRunner: &fakeRunner{}, delay: tc.delay, st: tc.st}
			_, c := newTestService(t, r, Config{})
			code, h := c.do("GET", "/v1/health", nil)
			if code != tc.code {
				t.Errorf("health: %d %v, want %d", code, h, tc.code)
			}
			if tc.problem != "" && fmt.Sprint(h["problems"]) != "["+tc.problem+"]" {
				t.Errorf("problems %v, want %q", h["problems"], tc.problem)
			}
			if tc.delay > 0 {
				start := time.Now()
				c.do("GET", "/v1/status", nil) // the question still unanswered: waits again, asks nothing new
				if took := time.Since(start); took > storageWait+time.Second || r.calls.Load() != 1 {
					t.Errorf("the second status took %v, and the file system was asked %d times", took, r.calls.Load())
				}
			}
		})
	}
}

// TestRatesInStatusAndEvents: the rates a scan reports are in its status,
// and so in every event that carries it.
func TestRatesInStatusAndEvents(t *testing.T) {
	r := &fakeRunner{planned: 1, tick: time.Hour}
	s, c := newTestService(t, r, Config{})
	if code, _ := c.do("POST", "/v1/scans", arm("r1")); code != http.StatusCreated {
		t.Fatalf("arm: %d", code)
	}
	s.mu.Lock()
	j := s.current
	s.mu.Unlock()
	sub, _, _ := s.events.subscribe("")
	defer s.events.unsubscribe(sub)
	rep := &reporter{s: s, j: j}
	var rr RateReporter = rep
	want := Rates{FramesPerSecond: 100, WrittenPerSecond: 99, ReceivedMBPerSecond: 1000, StoredMBPerSecond: 300, WindowSeconds: 1}
	rr.Rates(want)
	rep.Progress(Counts{Planned: 1, Received: 1})
	_, st := c.do("GET", "/v1/scans/r1", nil)
	if got := st["rates"].(map[string]any); got["frames_per_second"] != 100.0 || got["stored_mb_per_second"] != 300.0 || got["window_seconds"] != 1.0 {
		t.Errorf("status rates %v", got)
	}
	for ev := range sub {
		if p, ok := ev.data.(ProgressEvent); ok {
			if p.Rates != want {
				t.Errorf("progress event rates %+v, want %+v", p.Rates, want)
			}
			break
		}
	}
	c.do("POST", "/v1/scans/r1/cancel", nil)
}

// TestProfilesAPI holds the profile endpoints to what the runner says:
// the list, one profile's keys with where each came from, 404 for no such
// profile, 422 for one that does not load, and an empty list from a
// runner that lists none.
func TestProfilesAPI(t *testing.T) {
	_, c := newTestService(t, &statusRunner{fakeRunner: &fakeRunner{}}, Config{})
	code, l := c.do("GET", "/v1/profiles", nil)
	list, _ := l["profiles"].([]any)
	if code != http.StatusOK || len(list) != 3 || list[1].(map[string]any)["name"] != "beam" || list[2].(map[string]any)["error"] != "bad YAML" {
		t.Errorf("list: %d %v", code, l)
	}
	code, p := c.do("GET", "/v1/profiles/beam", nil)
	keys, _ := p["keys"].([]any)
	if code != http.StatusOK || len(keys) != 1 || keys[0].(map[string]any)["from"] != "profile beam" {
		t.Errorf("beam: %d %v", code, p)
	}
	for name, want := range map[string]int{"nope": http.StatusNotFound, "broken": http.StatusUnprocessableEntity, ".hidden": http.StatusUnprocessableEntity, "a%2Fb": http.StatusUnprocessableEntity} {
		if code, e := c.do("GET", "/v1/profiles/"+name, nil); code != want {
			t.Errorf("%s: %d %v, want %d", name, code, e, want)
		}
	}
	_, c = newTestService(t, &fakeRunner{}, Config{})
	if code, l := c.do("GET", "/v1/profiles", nil); code != http.StatusOK || len(l["profiles"].([]any)) != 0 {
		t.Errorf("a runner without profiles: %d %v", code, l)
	}
}

// imageScan is an ended scan whose latest image is a 64 x 48 ramp, which
// changes when next is set; it counts the copies it makes.
type imageScan struct {
	fakeScan
	mu     sync.Mutex
	key    uint64
	copies atomic.Int32
}

func (s *imageScan) LatestImage(have uint64) (preview.Frame, uint64, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.key == 0 || s.key == have {
		return preview.Frame{}, 0, s.key, nil
	}
	s.copies.Add(1)
	return rampFrame(s.key), 100 + s.key, s.key, nil
}

func (s *imageScan) next() {
	s.mu.Lock()
	s.key++
	s.mu.Unlock()
}

// rampFrame is a 48 x 64 frame of 4-byte pixels whose counts grow along
// rows, by step.
func rampFrame(step uint64) preview.Frame {
	f := preview.Frame{Height: 48, Width: 64, ElemSize: 4, Data: make([]byte, 48*64*4)}
	for i := range 48 * 64 {
		binary.LittleEndian.PutUint32(f.Data[4*i:], uint32(uint64(i)*step))
	}
	return f
}

// getPNG fetches path and returns its status, body and frame number header.
func getPNG(t *testing.T, url string) (int, []byte, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header.Get("X-Frame-Number")
}

// TestPreview: a scan's latest image as inspect --png renders it, the
// same picture again without a copy while the image is the same, a new
// one when it changes, at most twice a second whatever the clients do,
// 404 before the first image and for a scan that shows none.
func TestPreview(t *testing.T) {
	s, c := newTestService(t, &fakeRunner{}, Config{})
	sc := &imageScan{}
	endedJob(s, "p1", Done, "", sc)
	endedJob(s, "p0", Done, "", &fakeScan{})
	url := c.base + "/v1/scans/p1/preview.png"
	if code, _, _ := getPNG(t, url); code != http.StatusNotFound {
		t.Errorf("before the first image: %d", code)
	}
	if code, _, _ := getPNG(t, c.base+"/v1/scans/p0/preview.png"); code != http.StatusNotFound {
		t.Errorf("a scan that shows no image: %d", code)
	}
	sc.next()
	time.Sleep(previewEvery)
	code, b, number := getPNG(t, url)
	if code != http.StatusOK || number != "101" {
		t.Fatalf("preview: %d %s %.100s", code, number, b)
	}
	pic, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := preview.Render(rampFrame(1), preview.Options{ColorBar: true})
	if pic.Bounds() != want.Bounds() {
		t.Fatalf("picture %v, want %v as inspect --png renders it", pic.Bounds(), want.Bounds())
	}
	for _, p := range [][2]int{{0, 0}, {10, 20}, {63, 47}, {want.Bounds().Dx() - 5, 30}} {
		r1, g1, b1, _ := pic.At(p[0], p[1]).RGBA()
		r2, g2, b2, _ := want.At(p[0], p[1]).RGBA()
		if r1 != r2 || g1 != g2 || b1 != b2 {
			t.Errorf("pixel %v differs from inspect --png's", p)
		}
	}

	// Many clients for a second and a half, the image changing all along:
	// at most two renderings a second (four here, with the first), each a
	// copy of a new image.
	stop := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	var ok, other atomic.Int32
	before := sc.copies.Load()
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if code, _, _ := getPNG(t, url); code == http.StatusOK {
					ok.Add(1)
				} else {
					other.Add(1)
				}
				sc.next()
			}
		})
	}
	wg.Wait()
	// At most: a busy machine renders fewer, never more. Every client got
	// its answers, each a picture.
	renders := sc.copies.Load() - before
	if renders > 4 || other.Load() != 0 || ok.Load() < 8 {
		t.Errorf("%d renderings for %d answers (%d not ok) in 1.5 s, want at most 4, and every answer a picture", renders, ok.Load(), other.Load())
	}
	// And a new image is shown: asked again, the preview comes to it.
	_, _, last := getPNG(t, url)
	sc.next()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(previewEvery / 4) {
		if _, _, number := getPNG(t, url); number != last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the preview stayed at frame %s after the image changed", last)
		}
	}

	// A smaller picture: max_side shrinks the frame.
	time.Sleep(previewEvery)
	code, b, _ = getPNG(t, url+"?max_side=16")
	if pic, err := png.Decode(bytes.NewReader(b)); code != http.StatusOK || err != nil || pic.Bounds().Dx() >= want.Bounds().Dx() {
		t.Errorf("max_side 16: %d %v", code, err)
	}
	if code, _, _ := getPNG(t, c.base+"/v1/scans/nope/preview.png"); code != http.StatusNotFound {
		t.Errorf("no such scan: %d", code)
	}
}

// bigImager's latest image is a frame of 1024 x 1024 pixels, new at each
// call.
type bigImager struct{ key uint64 }

func (b *bigImager) LatestImage(have uint64) (preview.Frame, uint64, uint64, error) {
	b.key++
	f := preview.Frame{Height: 1024, Width: 1024, ElemSize: 4, Data: make([]byte, 1024*1024*4)}
	for i := 0; i < len(f.Data); i += 4 {
		binary.LittleEndian.PutUint32(f.Data[i:], uint32(i%4093))
	}
	return f, b.key, b.key, nil
}

// TestPreviewCostBounded: where rendering a picture takes long (a large
// frame at full size), the next one waits previewShare times as long, so
// that previews take at most a quarter of a core however many clients
// ask.
func TestPreviewCostBounded(t *testing.T) {
	c := newPreviewCache()
	im := &bigImager{}
	before := time.Now()
	if _, _, err := c.get(context.Background(), "big", im, 0); err != nil {
		t.Fatal(err)
	}
	took := time.Since(before)
	if gap := c.next.Sub(before); gap < previewEvery || took > previewEvery/previewShare && gap < previewShare*took*9/10 {
		t.Errorf("a rendering of %v: the next may start %v later", took, gap)
	}
	if took > 2*time.Second {
		return // the race detector's pace: the wait below would take long
	}
	// The same picture comes at once; another size waits its turn.
	next := c.next
	if b, _, err := c.get(context.Background(), "big", im, 0); err != nil || time.Since(before) > next.Sub(before) || im.key != 1 || len(b) == 0 {
		t.Errorf("the same picture again: %v, after %v, %d images read", err, time.Since(before), im.key)
	}
	if _, _, err := c.get(context.Background(), "big", im, 512); err != nil {
		t.Fatal(err)
	}
	if since := time.Since(before); since < next.Sub(before) {
		t.Errorf("the second rendering ended %v after the first began, before it was due (%v)", since, next.Sub(before))
	}
	t.Logf("a frame of 1024 x 1024 pixels rendered in %v", took)
}

// healthRunner is a fakeRunner with conditions of its own.
type healthRunner struct {
	*fakeRunner
	problems, warnings []string
}

func (r *healthRunner) Health() (problems, warnings []string) { return r.problems, r.warnings }

// TestHealthReporter: a runner's problems make the service unhealthy and
// its warnings do not; health lists each where it belongs, and the
// status lists both.
func TestHealthReporter(t *testing.T) {
	for _, tc := range []struct {
		name               string
		problems, warnings []string
		code               int
		status             string // the status's warnings
	}{
		{"none", nil, nil, http.StatusOK, "[]"},
		{"warning", nil, []string{"the GPU was lost: scans decode on the CPU"}, http.StatusOK, "[the GPU was lost: scans decode on the CPU]"},
		{"problem", []string{"the GPU was lost: serve exits"}, nil, http.StatusServiceUnavailable, "[the GPU was lost: serve exits]"},
		{"both", []string{"p"}, []string{"w"}, http.StatusServiceUnavailable, "[p w]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := newTestService(t, &healthRunner{fakeRunner: &fakeRunner{}, problems: tc.problems, warnings: tc.warnings}, Config{})
			code, h := c.do("GET", "/v1/health", nil)
			if code != tc.code || h["healthy"] != (tc.code == http.StatusOK) {
				t.Errorf("health: %d %v, want %d", code, h, tc.code)
			}
			if got, want := fmt.Sprint(h["problems"]), fmt.Sprint(tc.problems); got != want {
				t.Errorf("problems %s, want %s", got, want)
			}
			if got, want := fmt.Sprint(h["warnings"]), fmt.Sprint(tc.warnings); got != want {
				t.Errorf("warnings %s, want %s", got, want)
			}
			_, st := c.do("GET", "/v1/status", nil)
			if w, _ := st["warnings"].([]any); fmt.Sprint(w) != tc.status {
				t.Errorf("status warnings %v, want %s", st["warnings"], tc.status)
			}
		})
	}
}
