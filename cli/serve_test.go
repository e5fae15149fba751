package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"h5ingest/scan/scantest"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

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
	addr := fmt.Sprintf("127.0.0.1:%d", scantest.FreePort(t))
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
		p.t.Fatalf("%v\nserve said:\n%s", err, p.out.String())
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
	port := scantest.FreePort(t)
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
	p := startServe(t, "", "--data-root", dir, "--stream", fmt.Sprintf("tcp://127.0.0.1:%d", scantest.FreePort(t)))

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
	py := scantest.Python(t, "json")
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "12")
	dir := t.TempDir()
	port := operatorPort(t)
	p := startServe(t, "0123456789abcdef", "--data-root", dir)
	client := exec.Command(py, "../tools/serve/client.py", "--url", p.base,
		"--profile", "default", "--scan-id", "py1", "--projections", "12", "--title", "from python",
		"--set", "output.directory="+dir, "--set", "output.compression=lz4", "--meta", "operator=ana")
	client.Env = append(os.Environ(), "H5INGEST_TOKEN="+p.token) // as a control system's service hands it over
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

// TestServeRequestReachesOnlyWhatTheOperatorAllowed tries, against a
// running serve, what a hostile request would: a file outside the data
// root replaced (by a directory outside it, a path out of it, a link that
// leads out, the overwrite key), the detector's port opened on every
// interface, a profile that is not the operator's, a file of the data root
// replaced, a directory made; a web page's requests (a no-cors fetch from
// another origin, a page whose name was rebound to the service). Every one
// is refused, naming the request field and never a command-line flag, and
// nothing changes on disk; then a scan the operator allows is written
// under the data root from a real sender.
func TestServeRequestReachesOnlyWhatTheOperatorAllowed(t *testing.T) {
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "6")
	root, outside := filepath.Join(t.TempDir(), "data"), t.TempDir()
	victim := filepath.Join(outside, "passwd")
	for _, f := range []struct{ path, text string }{{victim, "root:x:0:0\n"}, {filepath.Join(root, "s0.h5"), "an older scan\n"}} {
		os.MkdirAll(filepath.Dir(f.path), 0o755)
		if err := os.WriteFile(f.path, []byte(f.text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	port := operatorPort(t)
	p := startServe(t, "", "--data-root", root)
	req := func(id string, output string, overrides map[string]any) map[string]any {
		r := map[string]any{"profile": "default", "scan_id": id, "plan": map[string]any{"projections": 6}}
		if output != "" {
			r["output"] = output
		}
		if overrides != nil {
			r["overrides"] = overrides
		}
		return r
	}
	out := func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"output": m}
	}
	for _, tc := range []struct {
		name string
		body map[string]any
		says string
	}{
		{"a directory outside", req("h1", "passwd", out("directory", outside)), "not under the data root"},
		{"a path out of the root", req("h2", "passwd", out("directory", "../"+filepath.Base(outside))), "not under the data root"},
		{"a link out of the root", req("h3", "passwd", out("directory", "out")), "leads out of the data root"},
		{"a link, absolute", req("h4", "passwd", out("directory", filepath.Join(root, "out"))), "leads out of the data root"},
		{"overwrite", req("h5", "passwd", out("directory", ".", "overwrite", true)), "body.overrides.output.overwrite"},
		{"a file of the root", req("h6", "s0.h5", out("directory", ".")), "no request replaces a file"},
		{"a file of the root, by template", req("s0", "", out("directory", root)), "no request replaces a file"},
		{"a directory made", req("h7", "", out("directory", "new/sub")), "creates no directory"},
		{"every interface", req("h8", "", map[string]any{"source": map[string]any{"address": "0.0.0.0"}}), "body.overrides.source"},
		{"another port", req("h9", "", map[string]any{"source": map[string]any{"port": 22}}), "body.overrides.source"},
		{"the stream's endpoint", req("h10", "", map[string]any{"stream": map[string]any{"address": "tcp://0.0.0.0:31001"}}), "body.overrides.stream.address"},
		{"a profile file", map[string]any{"profile": "/etc/passwd", "scan_id": "h11"}, "not a built-in profile"},
		{"a profile up the tree", map[string]any{"profile": "../../../../etc/passwd", "scan_id": "h12"}, "not a built-in profile"},
	} {
		code, e := p.call("POST", "/v1/scans", tc.body)
		text := fmt.Sprint(e)
		if code != http.StatusUnprocessableEntity || !strings.Contains(text, tc.says) {
			t.Errorf("%s: %d %v, want 422 saying %q", tc.name, code, e, tc.says)
		}
		if strings.Contains(text, "--") || strings.Contains(text, "flag ") {
			t.Errorf("%s: the answer names a command-line flag: %v", tc.name, e)
		}
	}
	if l, err := net.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", port)); err != nil {
		t.Errorf("the detector's port was opened by a refused request: %v", err)
	} else {
		l.Close()
	}

	// A web page: a no-cors fetch from another origin, a page whose name
	// was rebound to the service.
	u := strings.TrimPrefix(p.base, "http://")
	_, portText, _ := net.SplitHostPort(u)
	body := `{"profile":"default","scan_id":"web","plan":{"projections":6}}`
	for name, raw := range map[string]string{
		"no-cors fetch":  browserFetch(u, "http://evil.example", body),
		"rebound name":   browserFetch("evil.example:"+portText, "http://evil.example:"+portText, body),
		"rebound, plain": strings.Replace(browserFetch("evil.example:"+portText, "", body), "text/plain;charset=UTF-8", "application/json", 1),
	} {
		if code := rawCall(t, u, raw); code != http.StatusForbidden && code != http.StatusUnsupportedMediaType {
			t.Errorf("%s: %d, want 403", name, code)
		}
	}
	if code, st := p.call("GET", "/v1/scans", nil); code != http.StatusOK || len(st["scans"].([]any)) != 0 {
		t.Errorf("refused requests left scans: %d %v", code, st)
	}
	if b, _ := os.ReadFile(victim); string(b) != "root:x:0:0\n" {
		t.Errorf("the file outside the data root now holds %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "s0.h5")); string(b) != "an older scan\n" {
		t.Errorf("the file of the data root now holds %q", b)
	}
	for d, n := range map[string]int{root: 2, outside: 1} {
		if entries, _ := os.ReadDir(d); len(entries) != n {
			t.Errorf("%s holds %d entries, want %d: %v", d, len(entries), n, entries)
		}
	}

	// What the operator allows: a file name and compression, under the
	// data root, from a real sender.
	code, st := p.call("POST", "/v1/scans", req("ok", "ok.h5", map[string]any{"output": map[string]any{"directory": ".", "compression": "lz4"}}))
	if code != http.StatusCreated {
		t.Fatalf("the allowed arm: %d %v\n%s", code, st, p.out.String())
	}
	if code := run([]string{"send", capPath, "--to", fmt.Sprintf("127.0.0.1:%d", port), "--timeout", "20s"}); code != exitOK {
		t.Fatalf("send: exit status %d\n%s", code, p.out.String())
	}
	_, st = p.call("GET", "/v1/scans/ok/wait?timeout=30", nil)
	real, _ := filepath.EvalSymlinks(root)
	if files, _ := st["files"].([]any); st["state"] != "done" || len(files) != 1 || files[0].(map[string]any)["path"] != filepath.Join(real, "ok.h5") {
		t.Errorf("the allowed scan: %v\n%s", st, p.out.String())
	}
}

// browserFetch is the request a browser sends for a page's
// fetch("http://HOST/v1/scans", {method: "POST", mode: "no-cors", body})
// from origin ("" for none).
func browserFetch(host, origin, body string) string {
	h := "POST /v1/scans HTTP/1.1\r\nHost: " + host + "\r\nAccept: */*\r\nContent-Type: text/plain;charset=UTF-8\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n", len(body))
	if origin != "" {
		h += "Origin: " + origin + "\r\nSec-Fetch-Mode: no-cors\r\nSec-Fetch-Site: cross-site\r\n"
	}
	return h + "Connection: close\r\n\r\n" + body
}

// rawCall sends the request text as it is to addr and returns the status
// of the answer.
func rawCall(t *testing.T, addr, text string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, text)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeDescriptorStorm: with serve allowed 160 open files, a scan is
// armed, then 400 connections are opened from eight client addresses and
// held, sending nothing, as a page of event streams nobody reads would:
// the service holds no more than its caps, each new connection taking the
// place of an older idle one, keeps answering the control system, and the
// detector, connecting during the storm, is taken: every frame written.
func TestServeDescriptorStorm(t *testing.T) {
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "20")
	dir := t.TempDir()
	port := operatorPort(t)
	p := startServeLimited(t, "", 160, "--data-root", dir, "--preload-gpu=false")
	if code, st := p.call("POST", "/v1/scans", armRequest("storm", dir, 20)); code != http.StatusCreated {
		t.Fatalf("arm: %d %v\n%s", code, st, p.out.String())
	}
	addr := strings.TrimPrefix(p.base, "http://")
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	refused := 0
	for i := range 400 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%8))}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, c)
	}
	for _, c := range held {
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if b, err := io.ReadAll(c); err == nil || strings.HasPrefix(string(b), "HTTP/1.1 503") {
			refused++ // closed by the service (EOF), or answered 503
		}
	}
	if refused < 400-64 {
		t.Errorf("%d of 400 connections closed, want %d or more (64 held at most)", refused, 400-64)
	}
	start := time.Now()
	if code, _ := p.call("GET", "/v1/scans/storm", nil); code != http.StatusOK || time.Since(start) > 2*time.Second {
		t.Errorf("the control system during the storm: %d after %v", code, time.Since(start))
	}
	if code := run([]string{"send", capPath, "--to", fmt.Sprintf("127.0.0.1:%d", port), "--timeout", "20s"}); code != exitOK {
		t.Fatalf("send during the storm: exit status %d\n%s", code, p.out.String())
	}
	_, st := p.call("GET", "/v1/scans/storm/wait?timeout=30", nil)
	if c, _ := st["counts"].(map[string]any); st["state"] != "done" || c["ok"] != float64(20) {
		t.Errorf("the scan during the storm: %v\n%s", st, p.out.String())
	}
}

// TestServeFloodLeavesControl: clients from eight addresses keep serve's
// connection caps (64, 16 a client) full with idle connections, request
// heads that never end and event streams that carry the token but are
// never read, opening a new connection every few milliseconds. The
// control system, with the token, arms a scan, reads it 28 times and
// cancels it: every one of its 30 requests is answered, none 503, each
// within 2 s.
func TestServeFloodLeavesControl(t *testing.T) {
	const token = "flood-control-token-0123"
	dir := t.TempDir()
	operatorPort(t)
	p := startServe(t, token, "--data-root", dir, "--preload-gpu=false")
	addr := strings.TrimPrefix(p.base, "http://")
	stop := make(chan struct{})
	var flood sync.WaitGroup
	var opened atomic.Int64
	for i := range 24 {
		flood.Add(1)
		go func() {
			defer flood.Done()
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%8))}, Timeout: time.Second}
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					continue
				}
				opened.Add(1)
				switch i % 3 {
				case 1:
					io.WriteString(c, "GET /v1/scans HTTP/1.1\r\nHost: "+addr+"\r\nX-a: ")
				case 2:
					c.(*net.TCPConn).SetReadBuffer(4096)
					io.WriteString(c, "GET /v1/events HTTP/1.1\r\nHost: "+addr+"\r\nAuthorization: Bearer "+token+"\r\n\r\n")
				}
				if held = append(held, c); len(held) > 16 {
					held[0].Close()
					held = held[1:]
				}
			}
		}()
	}
	defer func() { close(stop); flood.Wait() }()
	time.Sleep(time.Second) // the caps are full

	do := func(method, path string, body []byte) (int, time.Duration, error) {
		req, _ := http.NewRequest(method, p.base+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		cl := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		start := time.Now()
		resp, err := cl.Do(req)
		if err != nil {
			return 0, time.Since(start), err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, time.Since(start), nil
	}
	arm, _ := json.Marshal(armRequest("flood", dir, 5))
	requests := []struct {
		method, path string
		body         []byte
		want         int
	}{{"POST", "/v1/scans", arm, http.StatusCreated}}
	for range 28 {
		requests = append(requests, struct {
			method, path string
			body         []byte
			want         int
		}{"GET", "/v1/scans/flood", nil, http.StatusOK})
	}
	requests = append(requests, struct {
		method, path string
		body         []byte
		want         int
	}{"POST", "/v1/scans/flood/cancel", []byte("{}"), http.StatusAccepted})
	answered := 0
	for _, q := range requests {
		code, took, err := do(q.method, q.path, q.body)
		if err != nil || code != q.want || took > 2*time.Second {
			t.Errorf("%s %s under the flood: %d %v after %v, want %d", q.method, q.path, code, err, took.Round(time.Millisecond), q.want)
			continue
		}
		answered++
	}
	t.Logf("%d of %d control requests answered; the flood opened %d connections", answered, len(requests), opened.Load())
}

// TestServeOutOfDescriptorsSaysSo: where the operator's caps leave more
// connections than serve may open files (40 here, caps raised), event
// streams that hold them starve the detector; the scan then fails saying
// so (too many open files), not that no detector came.
func TestServeOutOfDescriptorsSaysSo(t *testing.T) {
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "5")
	dir := t.TempDir()
	port := operatorPort(t)
	t.Setenv("H5INGEST_SOURCE_CONNECT_TIMEOUT", "3s")
	p := startServeLimited(t, "", 40, "--data-root", dir, "--preload-gpu=false", "--max-client-connections", "64")
	if code, st := p.call("POST", "/v1/scans", armRequest("starved", dir, 5)); code != http.StatusCreated {
		t.Fatalf("arm: %d %v\n%s", code, st, p.out.String())
	}
	addr := strings.TrimPrefix(p.base, "http://")
	var held []net.Conn
	for range 40 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		// An event stream, which a request's head timeout does not end.
		io.WriteString(c, "GET /v1/events HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
		held = append(held, c)
	}
	time.Sleep(200 * time.Millisecond) // serve accepts what it can
	code := run([]string{"send", capPath, "--to", fmt.Sprintf("127.0.0.1:%d", port), "--timeout", "2s"})
	for _, c := range held {
		c.Close()
	}
	if code == exitOK {
		t.Fatalf("send with the receiver out of descriptors: exit status %d", code)
	}
	_, st := p.call("GET", "/v1/scans/starved/wait?timeout=30", nil)
	if msg, _ := st["error"].(string); st["state"] != "failed" || !strings.Contains(msg, "too many open files") {
		t.Errorf("the starved scan: %v, want failed saying too many open files\n%s", st, p.out.String())
	}
}

// TestServeHungProfile: a profile file that would block whoever opens it
// (a FIFO, as a file on a hung mount does) holds up neither the service's
// reads nor its SIGTERM: the arm naming it is refused at once, a second
// arm is answered, and serve stops on a signal.
func TestServeHungProfile(t *testing.T) {
	profiles := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(profiles, "hung.yaml"), 0o644); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	p := startServe(t, "", "--profiles", profiles, "--preload-gpu=false")
	start := time.Now()
	code, e := p.call("POST", "/v1/scans", map[string]any{"profile": "hung.yaml", "scan_id": "h1"})
	if code != http.StatusUnprocessableEntity || time.Since(start) > 5*time.Second {
		t.Errorf("an arm naming a FIFO: %d %v after %v, want 422 at once", code, e, time.Since(start))
	}
	if code, _ := p.call("GET", "/v1/scans", nil); code != http.StatusOK {
		t.Errorf("a read after it: %d", code)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve after SIGTERM: %v\n%s", err, p.out.String())
		}
	case <-time.After(15 * time.Second):
		t.Errorf("serve did not stop on SIGTERM:\n%s", p.out.String())
	}
}

// TestServeLevelsFromRegistry arms scans whose levels the codecs' registry
// entries allow, beyond the API's old fixed 0 to 22 (bslz4's acceleration,
// a negative level), and checks that the OpenAPI document bounds the
// field by the registry and names each codec's range, while a level the
// profile's codec does not take is refused naming its range.
func TestServeLevelsFromRegistry(t *testing.T) {
	smallDetector(t)
	dir := t.TempDir()
	operatorPort(t)
	p := startServe(t, "", "--data-root", dir)
	doc := p.get("/openapi.json")
	if !strings.Contains(doc, "bslz4 -") || !strings.Contains(doc, "bszstd 1 to 22") {
		t.Errorf("the OpenAPI document does not list each codec's levels")
	}
	for _, tc := range []struct {
		compression string
		level       int
		want        int
		says        string
	}{
		{"bslz4", -8, http.StatusCreated, ""},
		{"deflate", -8, http.StatusUnprocessableEntity, "deflate"},
		{"bszstd", 23, http.StatusUnprocessableEntity, ""},
		{"bszstd", 22, http.StatusCreated, ""},
	} {
		id := fmt.Sprintf("l%s%d", tc.compression, tc.level+100)
		req := armRequest(id, dir, 3)
		req["overrides"] = map[string]any{"output": map[string]any{"directory": dir, "compression": tc.compression, "level": tc.level}}
		code, st := p.call("POST", "/v1/scans", req)
		if code != tc.want || !strings.Contains(fmt.Sprint(st), tc.says) {
			t.Errorf("%s level %d: %d %v, want %d naming %q", tc.compression, tc.level, code, st, tc.want, tc.says)
		}
		if code == http.StatusCreated {
			p.call("POST", "/v1/scans/"+id+"/cancel", nil)
			p.call("GET", "/v1/scans/"+id+"/wait?timeout=30", nil)
		}
	}
}

// TestServeWarnsOfAReadableTokenFile: a token file others than its owner
// may read gives every such user the service; serve says so when it
// starts, naming the file and its mode, and serves.
func TestServeWarnsOfAReadableTokenFile(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		warn bool
	}{{0o600, false}, {0o400, false}, {0o640, true}, {0o644, true}} {
		t.Run(fmt.Sprintf("%#o", tc.mode), func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(file, []byte("a-long-enough-secret\n"), tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(file, tc.mode); err != nil { // past the umask
				t.Fatal(err)
			}
			p := startServe(t, "", "--data-root", t.TempDir(), "--token-file", file)
			out := p.out.String()
			if got := strings.Contains(out, "token file is readable by others") && strings.Contains(out, fmt.Sprintf("%#o", tc.mode)); got != tc.warn {
				t.Errorf("mode %#o: warned %v, want %v:\n%s", tc.mode, got, tc.warn, out)
			}
		})
	}
}
