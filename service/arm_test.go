package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestArmChecksOutsideTheLock: an arm whose checks hang (a profile on a
// mount that does not answer) holds up no read (it is answered before the
// arm's deadline), gets 503 at its deadline, and arms nothing; a second
// arm meanwhile is a 409; once the checks return, their scan is released
// and the next arm works.
func TestArmChecksOutsideTheLock(t *testing.T) {
	r := &fakeRunner{planned: 3, tick: time.Millisecond, hold: make(chan struct{}), began: make(chan string, 1)}
	_, c := newTestService(t, r, Config{PrepareTimeout: 2 * time.Second})
	armed := make(chan int, 1)
	go func() {
		code, _ := c.do("POST", "/v1/scans", arm("hung"))
		armed <- code
	}()
	<-r.began // the arm is in its checks
	if code, _ := c.do("GET", "/v1/scans", nil); code != http.StatusOK {
		t.Errorf("a read during hung checks: %d", code)
	}
	code, e := c.do("POST", "/v1/scans", arm("second"))
	if code != http.StatusConflict || !strings.Contains(e["detail"].(string), "hung is being armed") {
		t.Errorf("a second arm during the checks: %d %v, want 409", code, e)
	}
	select {
	case code := <-armed:
		t.Fatalf("the hung arm answered %d before the read and the second arm were: they waited for its deadline", code)
	default:
	}
	if code := <-armed; code != http.StatusServiceUnavailable {
		t.Errorf("the hung arm: %d, want 503 at its deadline", code)
	}
	if code, _ := c.do("POST", "/v1/scans", arm("third")); code != http.StatusConflict {
		t.Errorf("an arm while the hung checks have not returned: %d, want 409", code)
	}
	close(r.hold)
	var code2 int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if code2, _ = c.do("POST", "/v1/scans", arm("after")); code2 != http.StatusConflict {
			break
		}
	}
	if code2 != http.StatusCreated {
		t.Fatalf("an arm after the checks returned: %d", code2)
	}
	r.mu.Lock()
	late := r.scans[0]
	r.mu.Unlock()
	if late.id != "hung" || !late.released.Load() {
		t.Errorf("the scan the late checks returned was not released: %+v", late)
	}
	if _, list := c.do("GET", "/v1/scans", nil); len(list["scans"].([]any)) != 1 {
		t.Errorf("scans: %v, want only the last", list["scans"])
	}
}

// TestArmOfAClientThatLeft: a client that goes away while its scan is
// being prepared arms nothing; what Prepare held is released.
func TestArmOfAClientThatLeft(t *testing.T) {
	r := &fakeRunner{planned: 3, tick: time.Millisecond, hold: make(chan struct{}), began: make(chan string, 1)}
	s, c := newTestService(t, r, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	b, _ := json.Marshal(arm("gone"))
	req, _ := http.NewRequestWithContext(ctx, "POST", c.base+"/v1/scans", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-r.began // the arm is in its checks
	cancel()
	<-done
	time.Sleep(100 * time.Millisecond) // the service sees the client gone
	close(r.hold)                      // the checks return, after the client left
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r.mu.Lock()
		n := len(r.scans)
		r.mu.Unlock()
		if n == 1 && r.scans[0].released.Load() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the scan of a client that left was not released")
		}
	}
	s.mu.Lock()
	cur, preparing := s.current, s.preparing
	s.mu.Unlock()
	if cur != nil || preparing != "" {
		t.Errorf("the service armed the scan of a client that left: %v %q", cur, preparing)
	}
	if code, st := c.do("GET", "/v1/scans/gone", nil); code != http.StatusNotFound {
		t.Errorf("the scan of a client that left: %d %v", code, st)
	}
	if code, _ := c.do("POST", "/v1/scans", arm("next")); code != http.StatusCreated {
		t.Errorf("the next arm: %d", code)
	}
}

// post sends body as it is to path and returns the status and the body
// of the answer.
func (c client) post(path, body string) (int, string) {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRequestsReachOnlyTheAllowedKeys: a request sets only the keys of
// Overrides; any other (the receiver's address, overwriting, the status
// page, the stream's endpoint, a misspelt key) is refused, naming the
// request field, and reaches no runner. Numbers are judged as written.
func TestRequestsReachOnlyTheAllowedKeys(t *testing.T) {
	r := &fakeRunner{planned: 1, tick: time.Millisecond}
	_, c := newTestService(t, r, Config{})
	for _, tc := range []struct {
		name, body string
		want       int
		says       []string // in the answer
	}{
		{"source.address", `{"overrides":{"source":{"address":"0.0.0.0"}}}`, 422, []string{`body.overrides.source`, "unexpected property"}},
		{"source.address, dotted", `{"overrides":{"source.address":"0.0.0.0"}}`, 422, []string{`body.overrides.source.address`, "unexpected property"}},
		{"overwrite", `{"overrides":{"output":{"overwrite":true}}}`, 422, []string{`body.overrides.output.overwrite`}},
		{"status", `{"overrides":{"status":{"address":"0.0.0.0:80"}}}`, 422, []string{`body.overrides.status`}},
		{"stream endpoint", `{"overrides":{"stream":{"address":"tcp://0.0.0.0:31001"}}}`, 422, []string{`body.overrides.stream.address`}},
		{"stream queue", `{"overrides":{"stream":{"queue":1024}}}`, 422, []string{`body.overrides.stream.queue`}},
		{"positions file", `{"overrides":{"plan":{"positions":"/etc/passwd"}}}`, 422, []string{`body.overrides.plan`}},
		{"misspelt", `{"overrides":{"output":{"compresion":"lz4"}}}`, 422, []string{`body.overrides.output.compresion`}},
		{"template with a slash", `{"overrides":{"output":{"template":"../{scan}.h5"}}}`, 422, []string{`body.overrides.output.template`}},
		{"hidden template", `{"overrides":{"output":{"template":".{scan}.h5"}}}`, 422, []string{`body.overrides.output.template`}},
		{"level of the wrong type", `{"overrides":{"output":{"level":"3"}}}`, 422, []string{`body.overrides.output.level`}},
		{"level too high", `{"overrides":{"output":{"level":9007199254740992}}}`, 422, []string{`body.overrides.output.level`}},
		{"huge darks", `{"plan":{"darks":99999999999999999999}}`, 400, []string{"plan.darks: 99999999999999999999 is too large"}},
		{"huge level", `{"overrides":{"output":{"level":99999999999999999999}}}`, 400, []string{`overrides.output.level: 99999999999999999999 is too large`}},
		{"negative huge", `{"plan":{"flats":-99999999999999999999}}`, 400, []string{"plan.flats: -99999999999999999999 is too large"}},
		{"infinite angle", `{"plan":{"angle_start":1e999}}`, 400, []string{"plan.angle_start: 1e999 is not a number any field takes"}},
		{"infinite rate", `{"overrides":{"stream":{"max_rate":-1e400}}}`, 400, []string{`overrides.stream.max_rate: -1e400`}},
		{"infinite metadata", `{"user_metadata":{"a":[1,2e308000]}}`, 400, []string{"user_metadata.a[1]: 2e308000"}},
		{"negative rate", `{"overrides":{"stream":{"max_rate":-1}}}`, 422, []string{`body.overrides.stream.max_rate`}},
		{"two values", `{"scan_id":"a"} {"scan_id":"b"}`, 400, []string{"more than one JSON value"}},
		{"output, then OUTPUT", `{"output":"ok.h5","OUTPUT":"../outside/pwn.h5"}`, 422, []string{"body.OUTPUT", "unexpected property"}},
		{"Output alone", `{"Output":"../outside/pwn.h5"}`, 422, []string{"body.Output", "unexpected property"}},
		{"scan_id, then SCAN_ID", `{"scan_id":"c3","SCAN_ID":"../outside/c3"}`, 422, []string{"body.SCAN_ID", "unexpected property"}},
		{"nested DIRECTORY", `{"overrides":{"output":{"directory":"p1","DIRECTORY":"/etc"}}}`, 422, []string{"body.overrides.output.DIRECTORY"}},
		{"plan in capitals", `{"PLAN":{"projections":3}}`, 422, []string{"body.PLAN"}},
		// A key written twice: the typed reading would merge the two
		// objects, so that the first's max_rate passed the schema unseen.
		{"overrides twice", `{"overrides":{"stream":{"max_rate":1e300}},"overrides":{"stream":{"every":2}}}`, 400, []string{"overrides: the key is written twice"}},
		{"max_rate twice", `{"overrides":{"stream":{"max_rate":1,"max_rate":1e300}}}`, 400, []string{"overrides.stream.max_rate: the key is written twice"}},
		{"scan_id twice", `{"profile":"default","scan_id":"k","scan_id":"k2"}`, 400, []string{"scan_id: the key is written twice"}},
		{"metadata key twice", `{"user_metadata":{"a":{"b.c":1,"b.c":2}}}`, 400, []string{`user_metadata.a.\"b.c\": the key is written twice`}},
		{"max_rate 1e300", `{"overrides":{"stream":{"max_rate":1e300}}}`, 422, []string{"body.overrides.stream.max_rate", "<= 1e+06"}},
		{"angle 1e300", `{"plan":{"angle_start":1e300,"angle_end":-1e300}}`, 422, []string{"body.plan.angle_start", "body.plan.angle_end", "360000"}},
		{"nested too deep", `{"user_metadata":{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}`, 400, []string{"nested deeper than 100 levels"}},
	} {
		body := tc.body
		if !strings.Contains(body, "scan_id") {
			body = `{"profile":"default","scan_id":"k",` + strings.TrimPrefix(body, "{")
		}
		code, got := c.post("/v1/scans", body)
		if code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, code, got, tc.want)
		}
		for _, s := range tc.says {
			if !strings.Contains(got, s) {
				t.Errorf("%s: the answer does not say %q: %s", tc.name, s, got)
			}
		}
		for _, flag := range []string{"--", "flag "} {
			if strings.Contains(got, flag) {
				t.Errorf("%s: the answer names a command-line flag: %s", tc.name, got)
			}
		}
	}
	if len(r.prepared) != 0 {
		t.Fatalf("refused requests reached the runner: %+v", r.prepared)
	}
	code, got := c.post("/v1/scans", `{"profile":"default","scan_id":"ok","overrides":{"output":{"directory":"p42","template":"{scan}_{date}.h5",`+
		`"layout":"cxi","compression":"bszstd","level":9},"stream":{"every":10,"max_rate":2.5}}}`)
	if code != http.StatusCreated {
		t.Fatalf("every allowed key: %d %s", code, got)
	}
	keys := map[string]any{}
	for _, k := range r.prepared[0].Overrides.Keys() {
		keys[k.Key] = k.Value
		if k.Field != "overrides."+k.Key {
			t.Errorf("key %s names its field %s", k.Key, k.Field)
		}
	}
	want := map[string]any{"output.directory": "p42", "output.template": "{scan}_{date}.h5", "output.layout": "cxi",
		"output.compression": "bszstd", "output.level": 9, "stream.every": 10, "stream.max_rate": 2.5}
	if len(keys) != len(want) {
		t.Errorf("keys %v, want %v", keys, want)
	}
	for k, v := range want {
		if keys[k] != v {
			t.Errorf("key %s: %#v, want %#v", k, keys[k], v)
		}
	}
}

// TestWaitTimeouts: a wait's timeout is a JSON number of seconds from 0
// to 600; NaN, infinities, hexadecimal, what JSON does not write and
// negative values are refused with an answer that is JSON, naming the
// parameter.
func TestWaitTimeouts(t *testing.T) {
	r := &fakeRunner{planned: 1000, tick: 10 * time.Millisecond}
	_, c := newTestService(t, r, Config{})
	c.do("POST", "/v1/scans", arm("w"))
	defer c.do("POST", "/v1/scans/w/cancel", nil)
	for q, want := range map[string]int{
		"NaN": 422, "nan": 422, "Inf": 422, "+Inf": 422, "-Inf": 422, "infinity": 422, "1e999": 422, "6.1e2": 422, "-1": 422,
		"600.5": 422, "601": 422, "0x10": 422, "0x1p-2": 422, " 1": 422, "+1": 422, "1.": 422, ".5": 422, "01": 422, "1_0": 422,
		"0": 200, "0.05": 200, "5e-2": 200, "1E-3": 200, "600": 200,
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		u := c.base + "/v1/scans/w/wait?timeout=" + url.QueryEscape(q)
		if q == "600" {
			ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
		resp, err := http.DefaultClient.Do(req)
		if q == "600" {
			// It waits: the client gives up first.
			if err == nil {
				resp.Body.Close()
				t.Errorf("timeout=600 answered at once")
			}
			cancel()
			continue
		}
		if err != nil {
			t.Fatalf("timeout=%s: %v", q, err)
		}
		var body map[string]any
		derr := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != want || derr != nil {
			t.Errorf("timeout=%s: %d %v (%v), want %d", q, resp.StatusCode, body, derr, want)
		}
		if want == 422 && !strings.Contains(jsonText(body), "query.timeout") {
			t.Errorf("timeout=%s: the answer does not name query.timeout: %v", q, body)
		}
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestCancelSaysCancelling: a cancel's answer says the scan is
// cancelling (not yet cancelled: its file is being closed).
func TestCancelSaysCancelling(t *testing.T) {
	r := &fakeRunner{planned: 1000, tick: 10 * time.Millisecond}
	_, c := newTestService(t, r, Config{})
	c.do("POST", "/v1/scans", arm("c"))
	code, st := c.do("POST", "/v1/scans/c/cancel", nil)
	if code != http.StatusAccepted || st["state"] != "cancelling" {
		t.Errorf("cancel: %d %v, want 202 cancelling", code, st)
	}
	if _, st := c.do("GET", "/v1/scans/c/wait?timeout=10", nil); st["state"] != "cancelled" || st["error"] != nil {
		t.Errorf("after the cancel: %v, want cancelled without an error", st)
	}
}

// TestUserMetadataKeepsTypes: the user metadata of an arm reaches the
// runner with its numbers as written: a whole number an integer, one with
// a fraction or an exponent a float, at any depth.
func TestUserMetadataKeepsTypes(t *testing.T) {
	r := &fakeRunner{planned: 3, tick: time.Millisecond}
	_, c := newTestService(t, r, Config{})
	body := `{"profile":"p","scan_id":"m1","user_metadata":{"proposal":20261234,"dose":1.5,"energy":12.0,"big":1e3,"neg":-7,` +
		`"nested":{"n":3,"list":[1,2.5]},"note":"abc","flag":true}}`
	if code, text := c.do("POST", "/v1/scans", []byte(body)); code != http.StatusCreated {
		t.Fatalf("arm: %d %s", code, text)
	}
	r.mu.Lock()
	got := r.prepared[len(r.prepared)-1].UserMetadata
	r.mu.Unlock()
	want := Metadata{"proposal": int64(20261234), "dose": 1.5, "energy": 12.0, "big": 1000.0, "neg": int64(-7),
		"nested": map[string]any{"n": int64(3), "list": []any{int64(1), 2.5}}, "note": "abc", "flag": true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("user metadata %#v, want %#v", got, want)
	}
}

// endingScan is a scan whose stop drains until finish is closed, deaf to
// a cancel meanwhile: a stopped scan still writing its last frames.
type endingScan struct {
	stopped, finish chan struct{}
	once            sync.Once
}

func (s *endingScan) Run(ctx context.Context, rep Reporter) Result {
	<-s.stopped
	<-s.finish
	return Result{State: Incomplete, Counts: Counts{Planned: 10, Received: 4, Written: 4, OK: 4, Missing: 6}}
}

func (s *endingScan) Stop() { s.once.Do(func() { close(s.stopped) }) }

func (s *endingScan) Release() {}

type endingRunner struct{ scan *endingScan }

func (r endingRunner) Prepare(context.Context, ArmRequest) (Scan, error) { return r.scan, nil }

// TestCancelWhileAStopEnds: a cancel accepted ("cancelling") while a
// stopped scan is still ending leaves the scan cancelled, without an error,
// as the cancel's answer said, rather than incomplete.
func TestCancelWhileAStopEnds(t *testing.T) {
	sc := &endingScan{stopped: make(chan struct{}), finish: make(chan struct{})}
	_, c := newTestService(t, endingRunner{sc}, Config{})
	if code, st := c.do("POST", "/v1/scans", arm("e")); code != http.StatusCreated {
		t.Fatalf("arm: %d %v", code, st)
	}
	if code, st := c.do("POST", "/v1/scans/e/stop", nil); code != http.StatusAccepted || st["state"] != "stopping" {
		t.Fatalf("stop: %d %v", code, st)
	}
	if code, st := c.do("POST", "/v1/scans/e/cancel", nil); code != http.StatusAccepted || st["state"] != "cancelling" {
		t.Fatalf("cancel: %d %v", code, st)
	}
	close(sc.finish)
	_, st := c.do("GET", "/v1/scans/e/wait?timeout=10", nil)
	if st["state"] != "cancelled" || st["error"] != nil {
		t.Errorf("after a cancel while the stop ended: %v, want cancelled without an error", st)
	}
	if counts, _ := st["counts"].(map[string]any); counts["ok"] != float64(4) || counts["missing"] != float64(6) {
		t.Errorf("counts %v, want the scan's own: 4 ok, 6 missing", st["counts"])
	}
}

// TestArmRefusesNUL: a NUL in any text of an arm (a user_metadata key or
// value at any depth, the title, the sample, a directory) is refused
// before the runner sees the request, 422 naming every field that holds
// one; the writer would make HDF5 names and strings of them, cut there.
func TestArmRefusesNUL(t *testing.T) {
	r := &fakeRunner{planned: 1, tick: time.Millisecond}
	_, c := newTestService(t, r, Config{})
	for _, tc := range []struct {
		name, body string
		fields     []string
	}{
		{"metadata key", `{"user_metadata":{"a\u0000b":1}}`, []string{`body.user_metadata.\"a\\x00b\"`}},
		{"nested metadata key", `{"user_metadata":{"a":{"\u0000":1}}}`, []string{`body.user_metadata.a.\"\\x00\"`}},
		{"metadata value", `{"user_metadata":{"op":"an\u0000a"}}`, []string{`body.user_metadata.op"`}},
		{"metadata in a list", `{"user_metadata":{"l":[1,"x\u0000"]}}`, []string{`body.user_metadata.l[1]"`}},
		{"title", `{"title":"gold\u0000foam"}`, []string{`body.title"`}},
		{"sample", `{"sample":"\u0000"}`, []string{`body.sample"`}},
		{"experiment", `{"experiment_identifier":"2026\u00001234"}`, []string{`body.experiment_identifier"`}},
		{"directory", `{"overrides":{"output":{"directory":"p42\u0000/x"}}}`, []string{`body.overrides.output.directory"`}},
		{"all at once", `{"title":"\u0000","sample":"\u0000","user_metadata":{"\u0000":"\u0000"}}`,
			[]string{`body.title"`, `body.sample"`, `body.user_metadata.\"\\x00\""`, "key holds a NUL"}},
	} {
		body := `{"profile":"default","scan_id":"n",` + strings.TrimPrefix(tc.body, "{")
		code, got := c.post("/v1/scans", body)
		if code != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d %s, want 422", tc.name, code, got)
		}
		for _, f := range tc.fields {
			if !strings.Contains(got, f) || !strings.Contains(got, "NUL") {
				t.Errorf("%s: the answer does not name %s: %s", tc.name, f, got)
			}
		}
	}
	if len(r.prepared) != 0 {
		t.Fatalf("a request with a NUL reached the runner: %+v", r.prepared)
	}
	if code, got := c.post("/v1/scans", `{"profile":"default","scan_id":"n","title":"a\\u0000 as text","user_metadata":{"k":"\\"}}`); code != http.StatusCreated {
		t.Errorf("a request without a NUL: %d %s", code, got)
	}
}

// TestPlanAnglesAsWritten: a request's angles reach the runner as
// written, 0 included; an angle left out is absent (the profile's stands).
func TestPlanAnglesAsWritten(t *testing.T) {
	r := &fakeRunner{planned: 1, tick: time.Millisecond}
	_, c := newTestService(t, r, Config{})
	for i, tc := range []struct {
		plan string
		want map[string]float64 // the angles given
	}{
		{`{"projections":3,"angle_start":0,"angle_end":0}`, map[string]float64{"start": 0, "end": 0}},
		{`{"projections":3,"angle_end":0}`, map[string]float64{"end": 0}},
		{`{"projections":3,"angle_start":-90,"angle_end":90}`, map[string]float64{"start": -90, "end": 90}},
		{`{"projections":3}`, map[string]float64{}},
	} {
		id := fmt.Sprintf("a%d", i)
		if code, got := c.post("/v1/scans", `{"profile":"default","scan_id":"`+id+`","plan":`+tc.plan+`}`); code != http.StatusCreated {
			t.Fatalf("%s: %d %s", tc.plan, code, got)
		}
		c.do("GET", "/v1/scans/"+id+"/wait?timeout=10", nil)
		r.mu.Lock()
		p := r.prepared[i].Plan
		r.mu.Unlock()
		got := map[string]float64{}
		if p.AngleStart != nil {
			got["start"] = *p.AngleStart
		}
		if p.AngleEnd != nil {
			got["end"] = *p.AngleEnd
		}
		if !maps.Equal(got, tc.want) || p.Projections != 3 {
			t.Errorf("%s: angles %v, projections %d, want %v and 3", tc.plan, got, p.Projections, tc.want)
		}
	}
}
