package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// serveProcess is an h5ingest serve started for a test.
type serveProcess struct {
	t     *testing.T
	base  string
	token string
	cmd   *exec.Cmd
	out   *bytes.Buffer
}

// startServe starts h5ingest serve on a free loopback port with args and
// waits until it answers.
func startServe(t *testing.T, token string, args ...string) *serveProcess {
	t.Helper()
	return startServeLimited(t, token, 0, args...)
}

// startServeLimited is startServe with at most nofile open files for
// serve (ulimit -n), where nofile is not 0.
func startServeLimited(t *testing.T, token string, nofile int, args ...string) *serveProcess {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	all := append([]string{"serve", "--listen", addr, "--log-level", "warn"}, args...)
	if token != "" {
		file := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		all = append(all, "--token-file", file)
	}
	cmd := command(all...)
	if nofile > 0 {
		cmd.Args = append([]string{"/bin/sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, nofile)}, cmd.Args...)
		cmd.Path = "/bin/sh"
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProcess{t: t, base: "http://" + addr, token: token, cmd: cmd, out: &out}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("serve did not stop on SIGINT:\n%s", out.String())
		}
	})
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(p.base + "/openapi.json"); err == nil {
			resp.Body.Close()
			return p
		}
	}
	t.Fatalf("serve never answered:\n%s", out.String())
	return nil
}

// call makes a request and returns its status and decoded JSON body.
func (p *serveProcess) call(method, path string, body any) (int, map[string]any) {
	p.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, p.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// get returns the body of a GET of path.
func (p *serveProcess) get(path string) string {
	p.t.Helper()
	resp, err := http.Get(p.base + path)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// operatorPort makes the receiver of the serve started next listen on a
// free loopback port, as its operator would in its profile (here its
// environment), and returns the port.
func operatorPort(t *testing.T) int {
	t.Helper()
	port := freePort(t)
	t.Setenv("H5INGEST_SOURCE_PORT", strconv.Itoa(port))
	t.Setenv("H5INGEST_SOURCE_CONNECT_TIMEOUT", "30s")
	return port
}

// armRequest arms scan id with the small detector's frames written to
// dir, under serve's data root.
func armRequest(id string, dir string, projections int) map[string]any {
	return map[string]any{
		"profile": "default", "scan_id": id, "title": "serve " + id, "sample": "Au",
		"plan":          map[string]any{"projections": projections},
		"overrides":     map[string]any{"output": map[string]any{"directory": dir}},
		"user_metadata": map[string]any{"operator": "ana"},
	}
}

// TestServeScans drives serve over HTTP as a control system would: two
// scans back to back, each from a sender on loopback, waited for and
// verified; a second arm while one is armed is a 409; a stop mid-scan
// drains it and records the rest missing; a cancel closes the file; bad
// requests change nothing.
func TestServeScans(t *testing.T) {
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "30")
	dir := t.TempDir()
	port := operatorPort(t)
	// Every scan streams its images; nobody reads them, which costs the
	// scans nothing.
	p := startServe(t, "", "--data-root", dir, "--stream", fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t)))

	for _, id := range []string{"s1", "s2"} {
		code, st := p.call("POST", "/v1/scans", armRequest(id, dir, 30))
		if code != http.StatusCreated || st["state"] != "armed" {
			t.Fatalf("arm %s: %d %v\n%s", id, code, st, p.out.String())
		}
		if code := run([]string{"send", capPath, "--to", fmt.Sprintf("127.0.0.1:%d", port), "--timeout", "20s"}); code != exitOK {
			t.Fatalf("send %s: exit status %d\n%s", id, code, p.out.String())
		}
		_, st = p.call("GET", "/v1/scans/"+id+"/wait?timeout=30", nil)
		counts, _ := st["counts"].(map[string]any)
		files, _ := st["files"].([]any)
		if st["state"] != "done" || counts["ok"] != float64(30) || len(files) != 1 {
			t.Fatalf("%s after the sender: %v\n%s", id, st, p.out.String())
		}
		f := files[0].(map[string]any)
		if f["path"] != filepath.Join(dir, id+".h5") || f["verified"] != true {
			t.Errorf("%s file %v", id, f)
		}
		if code, vout := runCaptured(t, "verify", filepath.Join(dir, id+".h5")); code != exitOK {
			t.Errorf("verify %s: %d\n%s", id, code, vout)
		}
		// The same server shows the scan's page and metrics: this scan's,
		// the last one's gone.
		metrics := p.get("/metrics")
		for _, want := range []string{`h5ingest_frames_written_total{module="0"} 30`, `scan="` + id + `"`, "h5ingest_write_frames_total", "process_resident_memory_bytes"} {
			if !strings.Contains(metrics, want) {
				t.Errorf("after %s, /metrics lacks %s", id, want)
			}
		}
		if id == "s2" && strings.Contains(metrics, `scan="s1"`) {
			t.Error("/metrics still shows s1 after s2")
		}
		if page := p.get("/"); !strings.Contains(page, "<html") {
			t.Errorf("the status page: %.200s", page)
		}
		if st := p.get("/status.json"); !strings.Contains(st, `"`+id+`"`) || strings.Count(st, `"output"`) != 1 {
			t.Errorf("/status.json after %s: %.300s", id, st)
		}
	}

	// A scan armed, a second arm refused, the first cancelled.
	if code, _ := p.call("POST", "/v1/scans", armRequest("c1", dir, 30)); code != http.StatusCreated {
		t.Fatalf("arm c1: %d", code)
	}
	if code, e := p.call("POST", "/v1/scans", armRequest("c2", dir, 30)); code != http.StatusConflict {
		t.Errorf("second arm: %d %v, want 409", code, e)
	}
	if code, st := p.call("POST", "/v1/scans/c1/cancel", nil); code != http.StatusAccepted || st["state"] != "cancelling" {
		t.Errorf("cancel: %d %v, want 202 cancelling", code, st)
	}
	if _, st := p.call("GET", "/v1/scans/c1/wait?timeout=30", nil); st["state"] != "cancelled" || st["error"] != nil {
		t.Errorf("c1 after cancel: %v, want cancelled without an error", st)
	}

	// A stop before any detector connected: nothing was written.
	if code, _ := p.call("POST", "/v1/scans", armRequest("e1", dir, 30)); code != http.StatusCreated {
		t.Fatalf("arm e1: %d", code)
	}
	p.call("POST", "/v1/scans/e1/stop", nil)
	if _, st := p.call("GET", "/v1/scans/e1/wait?timeout=30", nil); st["state"] != "cancelled" || len(st["files"].([]any)) != 0 {
		t.Errorf("e1 stopped before the detector: %v", st)
	}

	// Stop mid-scan: a sender at 20 frames/s, stopped after a few.
	if code, _ := p.call("POST", "/v1/scans", armRequest("d1", dir, 30)); code != http.StatusCreated {
		t.Fatalf("arm d1: %d", code)
	}
	sender := command("send", capPath, "--to", fmt.Sprintf("127.0.0.1:%d", port), "--fps", "20", "--timeout", "20s")
	if err := sender.Start(); err != nil {
		t.Fatal(err)
	}
	defer sender.Wait()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		_, st := p.call("GET", "/v1/scans/d1", nil)
		if c, _ := st["counts"].(map[string]any); c["received"].(float64) >= 5 {
			break
		}
	}
	if code, st := p.call("POST", "/v1/scans/d1/stop", nil); code != http.StatusAccepted || st["state"] != "stopping" {
		t.Errorf("stop: %d %v", code, st)
	}
	_, st := p.call("GET", "/v1/scans/d1/wait?timeout=30", nil)
	c, _ := st["counts"].(map[string]any)
	if st["state"] != "incomplete" || c["ok"].(float64) < 5 || c["missing"].(float64) == 0 || c["ok"].(float64)+c["missing"].(float64) != 30 {
		t.Errorf("d1 after stop: %v\n%s", st, p.out.String())
	}
	if code, vout := runCaptured(t, "verify", filepath.Join(dir, "d1.h5")); code != exitIncomplete {
		t.Errorf("verify of the stopped scan: %d, want %d\n%s", code, exitIncomplete, vout)
	}

	// Bad requests change nothing.
	before, _ := os.ReadDir(dir)
	bad := map[string]struct {
		body any
		want int
	}{
		"unknown key":   {map[string]any{"profile": "default", "scan_id": "b1", "overrides": map[string]any{"output": map[string]any{"compresion": "lz4"}}}, http.StatusUnprocessableEntity},
		"dot-dot id":    {map[string]any{"profile": "default", "scan_id": "../b2"}, http.StatusUnprocessableEntity},
		"dot-dot name":  {map[string]any{"profile": "default", "scan_id": "b3", "output": "../b3.h5"}, http.StatusUnprocessableEntity},
		"profile path":  {map[string]any{"profile": "/etc/passwd", "scan_id": "b4"}, http.StatusUnprocessableEntity},
		"metadata key":  {map[string]any{"profile": "default", "scan_id": "b6", "user_metadata": map[string]any{"stage": map[string]any{"x/y": 1}}}, http.StatusUnprocessableEntity},
		"oversize body": {[]byte(`{"profile":"default","scan_id":"b5","title":"` + strings.Repeat("x", 100<<10) + `"}`), http.StatusRequestEntityTooLarge},
	}
	for name, tc := range bad {
		if code, e := p.call("POST", "/v1/scans", tc.body); code != tc.want {
			t.Errorf("%s: %d %v, want %d", name, code, e, tc.want)
		}
	}
	if after, _ := os.ReadDir(dir); len(after) != len(before) {
		t.Errorf("bad requests changed the output directory: %d entries, then %d", len(before), len(after))
	}
	if _, list := p.call("GET", "/v1/scans", nil); len(list["scans"].([]any)) != 5 { // s1, s2, c1, e1, d1
		t.Errorf("scans listed: %v", list["scans"])
	}
}

// TestServeSafeByDefault: off loopback, serve needs a token file; with a
// token, a request under /v1/ without it gets a 401, a read too.
func TestServeSafeByDefault(t *testing.T) {
	code, out := runCaptured(t, "serve", "--listen", "0.0.0.0:0")
	if code != exitUsage {
		t.Errorf("serve on 0.0.0.0 without a token: exit status %d, want %d\n%s", code, exitUsage, out)
	}
	short := filepath.Join(t.TempDir(), "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	if code, _ := runCaptured(t, "serve", "--token-file", short); code != exitUsage {
		t.Errorf("a 3-character token: exit status %d, want %d", code, exitUsage)
	}
	p := startServe(t, "0123456789abcdef")
	anon := *p
	anon.token = ""
	if code, _ := anon.call("POST", "/v1/scans", armRequest("x", t.TempDir(), 3)); code != http.StatusUnauthorized {
		t.Errorf("arm without the token: %d, want 401", code)
	}
	if code, _ := anon.call("GET", "/v1/scans", nil); code != http.StatusUnauthorized {
		t.Errorf("reading without the token: %d, want 401", code)
	}
	if code, _ := p.call("GET", "/v1/scans", nil); code != http.StatusOK {
		t.Errorf("reading with the token: %d", code)
	}
}

// TestServePythonClient has tools/serve/client.py, standard library only,
// arm a scan on a running serve, wait for it and print its file.
func TestServePythonClient(t *testing.T) {
	py := python(t, "json")
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "12")
	dir := t.TempDir()
	port := operatorPort(t)
	p := startServe(t, "0123456789abcdef", "--data-root", dir)
	client := exec.Command(py, "../../tools/serve/client.py", "--url", p.base, "--token", p.token,
		"--profile", "default", "--scan-id", "py1", "--projections", "12", "--title", "from python",
		"--set", "output.directory="+dir, "--set", "output.compression=lz4", "--meta", "operator=ana")
	var out bytes.Buffer
	client.Stdout, client.Stderr = &out, &out
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if code, _ := p.call("GET", "/v1/scans/py1", nil); code == http.StatusOK {
			break
		}
	}
	if code := run([]string{"send", capPath, "--to", fmt.Sprintf("127.0.0.1:%d", port), "--timeout", "20s"}); code != exitOK {
		t.Fatalf("send: %d\n%s", code, p.out.String())
	}
	if err := client.Wait(); err != nil {
		t.Fatalf("client: %v\n%s\n%s", err, out.String(), p.out.String())
	}
	if got := strings.TrimSpace(out.String()); got != filepath.Join(dir, "py1.h5") {
		t.Errorf("client printed %q", got)
	}
}
