package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"h5ingest/scan/scantest"
)

// loggedServe is a serve started for a test that reads its log: every
// line it prints, on a channel, as it prints it.
type loggedServe struct {
	*serveProcess
	lines  <-chan string
	seen   scantest.Buffer // every line read so far, for failure messages
	exited chan error      // serve's exit, once lines has ended
}

// startLoggedServe starts serve at --log-level info on a free loopback
// port with args and waits until it answers.
func startLoggedServe(t *testing.T, args ...string) *loggedServe {
	t.Helper()
	return startLoggedServeAt(t, fmt.Sprintf("127.0.0.1:%d", scantest.FreePort(t)), args...)
}

// startLoggedServeAt is startLoggedServe listening on addr.
func startLoggedServeAt(t *testing.T, addr string, args ...string) *loggedServe {
	t.Helper()
	cmd := command(append([]string{"serve", "--listen", addr, "--log-level", "info"}, args...)...)
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = wr, wr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wr.Close()
	s := &loggedServe{serveProcess: &serveProcess{t: t, base: "http://" + addr, cmd: cmd}, lines: lines(rd), exited: make(chan error, 1)}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		go func() {
			for range s.lines { // serve may block on a full pipe otherwise
			}
		}()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("serve did not stop on SIGINT:\n%s", s.seen.String())
		}
		rd.Close()
	})
	s.expect(t, "serving scans on")
	return s
}

// expect returns the next line of serve's output that contains every one
// of texts, failing the test where serve ends first.
func (s *loggedServe) expect(t *testing.T, texts ...string) string {
	t.Helper()
	for {
		line := nextLine(t, s.lines, "serve", &s.seen)
		s.seen.Write([]byte(line + "\n"))
		matched := true
		for _, text := range texts {
			matched = matched && strings.Contains(line, text)
		}
		if matched {
			return line
		}
	}
}

// expectLog returns the next JSON log line of serve whose message is msg
// and whose fields hold the values of want, decoded.
func (s *loggedServe) expectLog(t *testing.T, msg string, want map[string]any) map[string]any {
	t.Helper()
	for {
		line := s.expect(t, `"msg":"`+msg+`"`)
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("serve's log line %q: %v", line, err)
		}
		matched := true
		for k, v := range want {
			matched = matched && rec[k] == v
		}
		if matched {
			return rec
		}
	}
}

// scanState returns the state of a scan as GET /v1/scans/ID answers.
func (s *loggedServe) scanState(t *testing.T, id string) (string, map[string]any) {
	t.Helper()
	_, st := s.call("GET", "/v1/scans/"+id, nil)
	c, _ := st["counts"].(map[string]any)
	state, _ := st["state"].(string)
	return state, c
}

// serveHeldScan starts serve with drainTimeout, arms scan id of 30 frames
// and has a held sender send it 10, returning once the scan's count named
// by count (received, written) says 10: serve, its data root and the
// sender, which sends the rest when told.
func serveHeldScan(t *testing.T, drainTimeout, id, count string) (*loggedServe, string, *heldSender) {
	t.Helper()
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "30")
	dir := t.TempDir()
	port := operatorPort(t)
	p := startLoggedServe(t, "--data-root", dir, "--drain-timeout", drainTimeout)
	if code, st := p.call("POST", "/v1/scans", armRequest(id, dir, 30)); code != http.StatusCreated {
		t.Fatalf("arm: %d %v", code, st)
	}
	sender := startHeldSender(t, capPath, fmt.Sprintf("127.0.0.1:%d", port))
	sender.send(t, 10)
	waitFor(t, time.Minute, "10 frames "+count, func() bool {
		_, c := p.scanState(t, id)
		return c[count] == float64(10)
	})
	return p, dir, sender
}

// exit waits for serve to exit, reading its log to the end, and returns
// how it exited.
func (s *loggedServe) exit() error {
	go func() { s.exited <- s.cmd.Wait() }()
	for range s.lines {
	}
	return <-s.exited
}

// TestServeGracefulStop: SIGHUP ends no scan; SIGTERM takes no new arm
// (503, the service "draining") and lets the running scan, held mid-way
// by its sender, go on to its plan: once the sender sends the rest, the
// scan ends done with every frame, its end logged, and serve exits 0.
func TestServeGracefulStop(t *testing.T) {
	p, dir, sender := serveHeldScan(t, "10m", "g1", "received")

	p.cmd.Process.Signal(syscall.SIGHUP)
	p.expectLog(t, "signal ignored: serve and its scan go on (restart serve to read its settings again)", map[string]any{"signal": "hangup"})
	if state, _ := p.scanState(t, "g1"); state != "running" {
		t.Errorf("after SIGHUP the scan is %s, want running", state)
	}

	p.cmd.Process.Signal(syscall.SIGTERM)
	p.expectLog(t, "draining", map[string]any{"signal": "terminated"})
	waitFor(t, time.Minute, "the service draining", func() bool {
		_, st := p.call("GET", "/v1/status", nil)
		return st["state"] == "draining"
	})
	if code, st := p.call("POST", "/v1/scans", armRequest("g2", dir, 30)); code != http.StatusServiceUnavailable {
		t.Errorf("arm while draining: %d %v, want 503", code, st)
	}
	if state, _ := p.scanState(t, "g1"); state != "running" {
		t.Errorf("after SIGTERM the scan is %s, want running until its sender ends", state)
	}

	sender.finish(t)
	end := p.expectLog(t, "scan ended", map[string]any{"scan": "g1"})
	if end["level"] != "info" || end["state"] != "done" || end["written"] != float64(30) || end["ok"] != float64(30) || end["missing"] != float64(0) {
		t.Errorf("the scan's end: %v, want done at info level, 30 written and ok", end)
	}
	if files, _ := end["files"].([]any); len(files) != 1 || files[0] != filepath.Join(dir, "g1.h5") {
		t.Errorf("the scan's end names the files %v, want %s", end["files"], filepath.Join(dir, "g1.h5"))
	}
	if err := p.exit(); err != nil {
		t.Errorf("serve after its drain: %v, want exit status 0\n%s", err, p.seen.String())
	}
	if code, out := runCaptured(t, "verify", filepath.Join(dir, "g1.h5")); code != exitOK {
		t.Errorf("verify: %d\n%s", code, out)
	}
}

// TestServeDrainCancelsAtTimeout: a scan that does not end within the
// drain timeout is cancelled, with the frames that arrived written, and
// serve exits 1; a scan armed but not sent to is cancelled at once.
func TestServeDrainCancelsAtTimeout(t *testing.T) {
	p, _, _ := serveHeldScan(t, "1s", "t1", "written")
	p.cmd.Process.Signal(syscall.SIGTERM)
	end := p.expectLog(t, "scan ended", map[string]any{"scan": "t1"})
	if end["level"] != "warn" || end["state"] != "cancelled" || end["written"] != float64(10) || end["missing"] != float64(20) {
		t.Errorf("the scan's end: %v, want cancelled at warn level, 10 written, 20 missing", end)
	}
	if err := p.exit(); err == nil {
		t.Error("serve exited 0 after a drain timeout cancelled its scan, want 1")
	}
}

// TestServeLogsScanEnds: each scan's end is one log line with its state,
// counts and files, at the level its state calls for: a cancel (logged
// when asked) a warning, a detector that never connected an error.
func TestServeLogsScanEnds(t *testing.T) {
	smallDetector(t)
	dir, profiles := t.TempDir(), t.TempDir()
	port := scantest.FreePort(t)
	t.Setenv("H5INGEST_SOURCE_PORT", fmt.Sprint(port))
	silent := "source:\n  connect_timeout: 1s\n"
	if err := os.WriteFile(filepath.Join(profiles, "silent.yaml"), []byte(silent), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startLoggedServe(t, "--data-root", dir, "--profiles", profiles)

	if code, st := p.call("POST", "/v1/scans", armRequest("c1", dir, 30)); code != http.StatusCreated {
		t.Fatalf("arm c1: %d %v", code, st)
	}
	p.call("POST", "/v1/scans/c1/cancel", nil)
	p.expectLog(t, "cancel requested: the scan takes no more frames and closes its file with those that arrived", map[string]any{"scan": "c1", "level": "warn"})
	end := p.expectLog(t, "scan ended", map[string]any{"scan": "c1"})
	if end["level"] != "warn" || end["state"] != "cancelled" || end["planned"] != float64(30) || end["missing"] != float64(30) {
		t.Errorf("c1's end: %v, want cancelled at warn level, 30 planned and missing", end)
	}

	req := armRequest("f1", dir, 5)
	req["profile"] = "silent"
	if code, st := p.call("POST", "/v1/scans", req); code != http.StatusCreated {
		t.Fatalf("arm f1: %d %v", code, st)
	}
	end = p.expectLog(t, "scan ended", map[string]any{"scan": "f1"})
	if e, _ := end["error"].(string); end["level"] != "error" || end["state"] != "failed" || !strings.HasPrefix(e, "detector silent: ") || !strings.Contains(e, "; no sender connected within source.connect_timeout") {
		t.Errorf("f1's end: %v, want failed at error level, the detector silent and what to check", end)
	}
	if _, st := p.call("GET", "/v1/scans/f1", nil); st["error"] != end["error"] {
		t.Errorf("the log's error %q is not the API's %q", end["error"], st["error"])
	}
}

// TestServeFullDiskSaysWhatToDo fills the file system of serve's data
// root (a small tmpfs, where this process may mount one) once a scan is
// armed: the scan fails, and its error is one line naming the cause and
// the remedy, the same in the API (with error_kind and remedy apart), in
// /v1/health and in the log's line of its end, at error level; HDF5's
// stack stays out of all three.
func TestServeFullDiskSaysWhatToDo(t *testing.T) {
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "30")
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=8m"); err != nil {
		t.Skipf("cannot mount a small tmpfs here: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	port := operatorPort(t)
	p := startLoggedServe(t, "--data-root", dir)
	if code, st := p.call("POST", "/v1/scans", armRequest("full1", dir, 30)); code != http.StatusCreated {
		t.Fatalf("arm: %d %v", code, st)
	}
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for block := make([]byte, 64<<10); err == nil; _, err = filler.Write(block) {
	}
	filler.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the disk: %v", err)
	}
	run([]string{"send", capPath, "--to", fmt.Sprintf("127.0.0.1:%d", port), "--timeout", "20s"})

	end := p.expectLog(t, "scan ended", map[string]any{"scan": "full1"})
	msg, _ := end["error"].(string)
	if end["level"] != "error" || end["state"] != "failed" || !strings.HasPrefix(msg, "disk full: ") ||
		!strings.Contains(msg, "no space left on device; free space") || strings.ContainsAny(msg, "\n") || strings.Contains(msg, "H5") {
		t.Errorf("the scan's end: %v, want failed at error level, its error one line: disk full, the cause, the remedy", end)
	}
	t.Logf("the scan's error: %s", msg)
	_, st := p.call("GET", "/v1/scans/full1", nil)
	if st["error"] != msg || st["error_kind"] != "disk full" || !strings.HasPrefix(fmt.Sprint(st["remedy"]), "free space") {
		t.Errorf("the scan's status: error %q, kind %q, remedy %q; want the log's error, disk full and its remedy", st["error"], st["error_kind"], st["remedy"])
	}
	_, health := p.call("GET", "/v1/health", nil)
	if problems := fmt.Sprint(health["problems"]); !strings.Contains(problems, msg) {
		t.Errorf("health's problems %s do not give the scan's error %q", problems, msg)
	}
}

// TestServeDetectorPortLeaksNoDescriptor holds 30 TCP connections open
// on the detector's port through a scan (a scanner, a client that never
// speaks): once the scan has ended and they close, serve holds no more
// descriptors than before it was armed (the tcp provider would leak one
// for each).
func TestServeDetectorPortLeaksNoDescriptor(t *testing.T) {
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "30")
	dir := t.TempDir()
	port := operatorPort(t)
	p := startLoggedServe(t, "--data-root", dir)
	fds := func() int {
		entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	p.call("GET", "/v1/status", nil) // the client's connection, kept alive, counted in both
	before := fds()
	if code, st := p.call("POST", "/v1/scans", armRequest("leak1", dir, 30)); code != http.StatusCreated {
		t.Fatalf("arm: %d %v", code, st)
	}
	var held []net.Conn
	for range 30 {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if code := run([]string{"send", capPath, "--to", fmt.Sprintf("127.0.0.1:%d", port), "--timeout", "20s"}); code != exitOK {
		t.Fatalf("send: exit status %d", code)
	}
	if _, st := p.call("GET", "/v1/scans/leak1/wait?timeout=30", nil); st["state"] != "done" {
		t.Fatalf("the scan: %v", st)
	}
	for _, c := range held {
		c.Close()
	}
	if after := fds(); after > before+2 {
		t.Errorf("serve holds %d descriptors after the scan, %d before it: the held connections leaked", after, before)
	}
}

// pageStatus is what /status.json says, decoded.
type pageStatus struct {
	Scans []struct {
		Scan struct {
			ID        string `json:"id"`
			Output    string `json:"output"`
			RingSlots int    `json:"ring_slots"`
		} `json:"scan"`
		Written    int    `json:"written"`
		PreviewSeq uint64 `json:"preview_seq"`
	} `json:"scans"`
	Service struct {
		State    string         `json:"state"`
		Scan     *pageScan      `json:"scan"`
		LastScan *pageScan      `json:"last_scan"`
		Storage  map[string]any `json:"storage"`
	} `json:"service"`
	PreviewAllowed bool `json:"preview_allowed"`
}

type pageScan struct {
	ScanID    string `json:"scan_id"`
	State     string `json:"state"`
	Error     string `json:"error"`
	ErrorKind string `json:"error_kind"`
	Remedy    string `json:"remedy"`
	Files     []any  `json:"files"`
}

// page returns serve's /status.json at base, asked with token where not
// empty.
func page(t *testing.T, base, token string) pageStatus {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/status.json", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st pageStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestServeStatusPageShowsTheService follows serve's page data and
// metrics through a scan done, one armed after it, one cancelled and one
// failed: the service's state and the scans' states as the API names
// them, the running scan's image and ring, a newly armed scan replacing
// the last on the page and in /metrics at once, a failure's kind and
// remedy, and the service's series from the start.
func TestServeStatusPageShowsTheService(t *testing.T) {
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "30")
	dir, profiles := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(profiles, "silent.yaml"), []byte("source:\n  connect_timeout: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	port := scantest.FreePort(t)
	t.Setenv("H5INGEST_SOURCE_PORT", fmt.Sprint(port))
	p := startLoggedServe(t, "--data-root", dir, "--profiles", profiles)

	if st := page(t, p.base, ""); st.Service.State != "idle" || len(st.Scans) != 0 || !st.PreviewAllowed {
		t.Errorf("before any scan: %+v, want the service idle, no scan, the preview allowed on loopback", st)
	}
	metrics := p.get("/metrics")
	for _, want := range []string{`h5ingest_build_info{go="go`, `h5ingest_service_state{state="idle"} 1`, `h5ingest_service_state{state="running"} 0`,
		`h5ingest_scans_total{outcome="done"} 0`, `h5ingest_scans_total{outcome="failed"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics at start-up lacks %s", want)
		}
	}

	if code, st := p.call("POST", "/v1/scans", armRequest("s1", dir, 30)); code != http.StatusCreated {
		t.Fatalf("arm s1: %d %v", code, st)
	}
	sender := startHeldSender(t, capPath, fmt.Sprintf("127.0.0.1:%d", port))
	sender.send(t, 10)
	var st pageStatus
	waitFor(t, time.Minute, "s1 running on the page with an image", func() bool {
		st = page(t, p.base, "") // a look at the page keeps images coming for the preview
		return len(st.Scans) == 1 && st.Scans[0].Written == 10 && st.Scans[0].PreviewSeq > 0 && st.Service.State == "running"
	})
	if st.Service.Scan == nil || st.Service.Scan.ScanID != "s1" || st.Scans[0].Scan.RingSlots == 0 {
		t.Errorf("s1 running: %+v", st)
	}
	if !strings.Contains(p.get("/metrics"), `h5ingest_service_state{state="running"} 1`) {
		t.Error("/metrics does not say the service runs a scan")
	}
	resp, err := http.Get(p.base + "/preview.png?module=0")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/png" {
		t.Errorf("the running scan's preview: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	sender.finish(t)
	p.call("GET", "/v1/scans/s1/wait?timeout=30", nil)
	if st = page(t, p.base, ""); st.Service.State != "idle" || st.Service.LastScan == nil || st.Service.LastScan.State != "done" || len(st.Scans) != 1 {
		t.Errorf("after s1: %+v, want the service idle, s1 done and still shown", st)
	}
	_, browser := os.Stat(chromium)
	if browser == nil { // the page as a browser shows it: s1 done, not a grey "finished"
		dom := dumpDOM(t, p.base+"/", 1500*time.Millisecond, "--dump-dom")
		if !regexp.MustCompile(`id="m0-state"[^>]*>done<`).MatchString(dom) || !regexp.MustCompile(`id="service-state"[^>]*>idle<`).MatchString(dom) {
			t.Errorf("the page after s1 does not show it done and the service idle:\n%.3000s", dom)
		}
	}

	if code, st := p.call("POST", "/v1/scans", armRequest("s2", dir, 30)); code != http.StatusCreated {
		t.Fatalf("arm s2: %d %v", code, st)
	}
	waitFor(t, time.Minute, "s2 armed in the service's status", func() bool {
		st = page(t, p.base, "")
		return st.Service.Scan != nil && st.Service.Scan.ScanID == "s2"
	})
	if len(st.Scans) != 0 || st.Service.State != "armed" {
		t.Errorf("s2 armed: the page shows %+v, want s1 gone and the service armed", st)
	}
	if m := p.get("/metrics"); strings.Contains(m, `scan="s1"`) {
		t.Error("/metrics still shows s1 once s2 is armed")
	}
	p.call("POST", "/v1/scans/s2/cancel", nil)
	p.call("GET", "/v1/scans/s2/wait?timeout=30", nil)
	if st = page(t, p.base, ""); st.Service.LastScan == nil || st.Service.LastScan.State != "cancelled" {
		t.Errorf("after the cancel: %+v", st.Service.LastScan)
	}

	req := armRequest("f1", dir, 5)
	req["profile"] = "silent"
	if code, st := p.call("POST", "/v1/scans", req); code != http.StatusCreated {
		t.Fatalf("arm f1: %d %v", code, st)
	}
	p.call("GET", "/v1/scans/f1/wait?timeout=30", nil)
	st = page(t, p.base, "")
	if l := st.Service.LastScan; st.Service.State != "error" || l == nil || l.State != "failed" || l.ErrorKind != "detector silent" || l.Remedy == "" || l.Error == "" {
		t.Errorf("after f1 failed: service %s, last scan %+v; want error, f1 failed with its kind, remedy and error", st.Service.State, l)
	}
	if browser == nil {
		dom := dumpDOM(t, p.base+"/", 1500*time.Millisecond, "--dump-dom")
		if !regexp.MustCompile(`id="service-state"[^>]*>error: the last scan failed<`).MatchString(dom) ||
			!regexp.MustCompile(`id="service-error"[^>]*>detector silent: `).MatchString(dom) {
			t.Errorf("the page after f1 failed does not say so, with its cause:\n%.3000s", dom)
		}
	}
	metrics = p.get("/metrics")
	for _, want := range []string{`h5ingest_scans_total{outcome="done"} 1`, `h5ingest_scans_total{outcome="cancelled"} 1`,
		`h5ingest_scans_total{outcome="failed"} 1`, `h5ingest_service_state{state="error"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics after the scans lacks %s", want)
		}
	}
}

// TestServeStatusPageOffLoopback reads serve's page data from another
// address than loopback: without the token, /status.json holds no path
// and no error's text (its kind and remedy only) and says the preview
// needs the token, and /preview.png is a 401; with the token, both are
// whole.
func TestServeStatusPageOffLoopback(t *testing.T) {
	var ip net.IP
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			ip = n.IP
			break
		}
	}
	if ip == nil {
		t.Skip("this machine has no address off loopback")
	}
	smallDetector(t)
	dir, profiles := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(profiles, "silent.yaml"), []byte("source:\n  connect_timeout: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("H5INGEST_SOURCE_PORT", fmt.Sprint(scantest.FreePort(t)))
	const token = "0123456789abcdef0123"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(ip.String(), fmt.Sprint(scantest.FreePort(t)))
	p := startLoggedServeAt(t, addr, "--data-root", dir, "--profiles", profiles, "--token-file", tokenFile)
	p.token = token
	req := armRequest("f1", dir, 5)
	req["profile"] = "silent"
	if code, st := p.call("POST", "/v1/scans", req); code != http.StatusCreated {
		t.Fatalf("arm f1: %d %v", code, st)
	}
	p.call("GET", "/v1/scans/f1/wait?timeout=30", nil)

	open := page(t, p.base, "")
	l := open.Service.LastScan
	if open.PreviewAllowed || l == nil || l.Error != "detector silent; "+l.Remedy || l.Remedy == "" || len(l.Files) != 0 {
		t.Errorf("without the token: preview allowed %v, last scan %+v; want no preview, the error's kind and remedy alone", open.PreviewAllowed, l)
	}
	if d, _ := open.Service.Storage["directory"].(string); d != "" {
		t.Errorf("without the token, the page names the directory %s", d)
	}
	whole := page(t, p.base, token)
	if l := whole.Service.LastScan; !whole.PreviewAllowed || l == nil || !strings.Contains(l.Error, "wait for a sender on") {
		t.Errorf("with the token: preview allowed %v, last scan %+v; want the preview and the whole error", whole.PreviewAllowed, l)
	}
	for _, tc := range []struct {
		token string
		want  bool // a 401
	}{{"", true}, {token, false}} {
		r, _ := http.NewRequest("GET", p.base+"/preview.png", nil)
		if tc.token != "" {
			r.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.StatusCode == http.StatusUnauthorized; got != tc.want {
			t.Errorf("/preview.png with token %q: %s", tc.token, resp.Status)
		}
	}
}

// TestReplayFullDiskSaysWhatToDo replays into a full file system (a small
// tmpfs): the command line says in one line what is wrong and what to do,
// with no HDF5 error stack; the debug log has the stack.
func TestReplayFullDiskSaysWhatToDo(t *testing.T) {
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "400")
	for _, tc := range []struct {
		level string
		stack bool
	}{{"warn", false}, {"debug", true}} {
		// Room for the file and its records' reserve, not for its chunks.
		dir := t.TempDir()
		if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1300k"); err != nil {
			t.Skipf("cannot mount a small tmpfs here: %v", err)
		}
		t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
		code, stdout, stderr := runProcess(t, "replay", capPath, "-o", filepath.Join(dir, "full.h5"), "--log-level", tc.level)
		said := stdout + stderr
		if code == exitOK || !strings.Contains(said, "h5ingest: disk full: ") {
			t.Errorf("replay into a full disk, log level %s: exit status %d, want a line saying disk full:\n%s", tc.level, code, said)
		}
		if got := strings.Contains(said, "hdf5 error stack"); got != tc.stack {
			t.Errorf("log level %s: HDF5's error stack logged %v, want %v:\n%s", tc.level, got, tc.stack, said)
		}
		for _, line := range strings.Split(said, "\n") {
			if strings.HasPrefix(line, "h5ingest: ") && strings.Contains(line, "H5") {
				t.Errorf("the command line's error carries HDF5's stack: %s", line)
			}
		}
	}
}
