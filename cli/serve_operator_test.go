package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
	seen   lockedBuffer // every line read so far, for failure messages
	exited chan error   // serve's exit, once lines has ended
}

// startLoggedServe starts serve at --log-level info on a free loopback
// port with args and waits until it answers.
func startLoggedServe(t *testing.T, args ...string) *loggedServe {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", scantest.FreePort(t))
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

// TestServeGracefulStop: SIGHUP ends no scan; SIGTERM takes no new arm
// (503, the service "draining") and lets the running scan, held mid-way
// by its sender, go on to its plan: once the sender sends the rest, the
// scan ends done with every frame, its end logged, and serve exits 0.
func TestServeGracefulStop(t *testing.T) {
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "30")
	dir := t.TempDir()
	port := operatorPort(t)
	p := startLoggedServe(t, "--data-root", dir, "--drain-timeout", "10m")

	if code, st := p.call("POST", "/v1/scans", armRequest("g1", dir, 30)); code != http.StatusCreated {
		t.Fatalf("arm: %d %v", code, st)
	}
	sender := startHeldSender(t, capPath, fmt.Sprintf("127.0.0.1:%d", port))
	sender.send(t, 10)
	waitFor(t, time.Minute, "10 frames received", func() bool {
		_, c := p.scanState(t, "g1")
		return c["received"] == float64(10)
	})

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
	go func() { p.exited <- p.cmd.Wait() }()
	for range p.lines {
	}
	if err := <-p.exited; err != nil {
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
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "30")
	dir := t.TempDir()
	port := operatorPort(t)
	p := startLoggedServe(t, "--data-root", dir, "--drain-timeout", "1s")
	if code, st := p.call("POST", "/v1/scans", armRequest("t1", dir, 30)); code != http.StatusCreated {
		t.Fatalf("arm: %d %v", code, st)
	}
	sender := startHeldSender(t, capPath, fmt.Sprintf("127.0.0.1:%d", port))
	sender.send(t, 10)
	waitFor(t, time.Minute, "10 frames written", func() bool {
		_, c := p.scanState(t, "t1")
		return c["written"] == float64(10)
	})
	p.cmd.Process.Signal(syscall.SIGTERM)
	end := p.expectLog(t, "scan ended", map[string]any{"scan": "t1"})
	if end["level"] != "warn" || end["state"] != "cancelled" || end["written"] != float64(10) || end["missing"] != float64(20) {
		t.Errorf("the scan's end: %v, want cancelled at warn level, 10 written, 20 missing", end)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	for range p.lines {
	}
	if err := <-p.exited; err == nil {
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
