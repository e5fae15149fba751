package service

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPythonClientTypes: tools/serve/client.py keeps the JSON type of
// each --meta value (a number stays a number, true a boolean, what is not
// JSON text), sends --experiment-id as experiment_identifier, and arms
// with the options alone as with the arm command.
func TestPythonClientTypes(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	r := &fakeRunner{planned: 2, tick: 5 * time.Millisecond}
	_, c := newTestService(t, r, Config{Token: "0123456789abcdef"})
	for i, args := range [][]string{
		{"arm", "--url", c.base},
		{"--url", c.base},
	} {
		id := []string{"py-arm", "py-plain"}[i]
		cmd := exec.Command("/usr/bin/python3", append([]string{"../tools/serve/client.py"}, append(args,
			"--token", c.token, "--profile", "default", "--scan-id", id, "--projections", "2",
			"--experiment-id", "20261234", "--meta", "proposal=20261234", "--meta", "operator=ana",
			"--meta", "run=007", "--meta", "flag=true", "--meta", "pos={\"x\": 1.5}", "--meta", "note=a=b")...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("client %v: %v\n%s", args[0], err, out)
		}
		if strings.TrimSpace(string(out)) != "/data/"+id+".h5" {
			t.Errorf("client printed %q", out)
		}
	}
	if len(r.prepared) != 2 {
		t.Fatalf("prepared %d scans", len(r.prepared))
	}
	for _, req := range r.prepared {
		m := req.UserMetadata
		pos, _ := m["pos"].(map[string]any)
		if m["proposal"] != int64(20261234) || m["operator"] != "ana" || m["run"] != "007" || m["flag"] != true ||
			pos["x"] != 1.5 || m["note"] != "a=b" || req.ExperimentID != "20261234" {
			t.Errorf("the runner got %s: %#v, experiment %q", req.ScanID, m, req.ExperimentID)
		}
	}
}

// cuttingProxy forwards TCP connections to backend, putting backend's
// address in the requests' Host header, and cuts the first stream of
// events after its cut'th event: a network drop in the middle of it. It
// keeps each request's head.
type cuttingProxy struct {
	ln      net.Listener
	backend string
	cut     int

	mu     sync.Mutex
	heads  []string
	conns  []net.Conn
	events int // streams of events opened
}

func newCuttingProxy(t *testing.T, backend string, cut int) *cuttingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttingProxy{ln: ln, backend: backend, cut: cut}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	go p.serve()
	return p
}

func (p *cuttingProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *cuttingProxy) forward(c net.Conn) {
	defer c.Close()
	b, err := net.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	defer b.Close()
	p.mu.Lock()
	p.conns = append(p.conns, c, b)
	p.mu.Unlock()
	buf := make([]byte, 64<<10)
	n, err := c.Read(buf)
	if err != nil {
		return
	}
	head := strings.Replace(string(buf[:n]), "Host: "+p.ln.Addr().String(), "Host: "+p.backend, 1)
	p.mu.Lock()
	p.heads = append(p.heads, head)
	stream := strings.HasPrefix(head, "GET /v1/events ")
	if stream {
		p.events++
	}
	cut := stream && p.events == 1
	p.mu.Unlock()
	if _, err := b.Write([]byte(head)); err != nil {
		return
	}
	go io.Copy(b, c)
	if !cut {
		io.Copy(c, b)
		return
	}
	var seen bytes.Buffer
	for bytes.Count(seen.Bytes(), []byte("\n\n")) < p.cut {
		n, err := b.Read(buf)
		if err != nil {
			return
		}
		seen.Write(buf[:n])
		c.Write(buf[:n])
	}
}

// TestPythonFollowerResumes: client.py's follower, its connection cut by
// the network in the middle of a scan, reconnects with Last-Event-ID and
// prints every event of the scan once, in order, without a gap.
func TestPythonFollowerResumes(t *testing.T) {
	if _, err := exec.LookPath("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	r := &fakeRunner{planned: 100, tick: 10 * time.Millisecond}
	svc, c := newTestService(t, r, Config{})
	proxy := newCuttingProxy(t, strings.TrimPrefix(c.base, "http://"), 3)
	follow := exec.Command("/usr/bin/python3", "../tools/serve/client.py", "follow",
		"--url", "http://"+proxy.ln.Addr().String(), "--scan-id", "fr1")
	var out bytes.Buffer
	follow.Stdout, follow.Stderr = &out, &out
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer follow.Process.Kill()
	// The follower asks whether the scan has ended, then opens its stream
	// of events: arm once the service has it as a subscriber.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		svc.events.mu.Lock()
		subscribed := len(svc.events.subs) > 0
		svc.events.mu.Unlock()
		if subscribed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower opened no stream of events:\n%s", out.String())
		}
	}
	if code, _ := c.do("POST", "/v1/scans", arm("fr1")); code != http.StatusCreated {
		t.Fatalf("arm: %d", code)
	}
	done := make(chan error, 1)
	go func() { done <- follow.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("follow: %v\n%s", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("follow did not end with the scan:\n%s", out.String())
	}
	var ids []string
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var ev struct {
			ID    string
			Event string
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("follow printed %q", line)
		}
		ids = append(ids, ev.ID)
		if len(names) == 0 || names[len(names)-1] != ev.Event {
			names = append(names, ev.Event)
		}
	}
	for i, id := range ids {
		if id != svc.events.eventID(uint64(i+1)) {
			t.Fatalf("event ids %v: a gap or a repeat at %d", ids, i)
		}
	}
	if got := strings.Join(names, ","); got != "armed,first_frame,progress,file_finalised,done" {
		t.Errorf("events %s", got)
	}
	proxy.mu.Lock()
	var heads []string // of the event streams: the follower asks first whether the scan has ended
	for _, h := range proxy.heads {
		if strings.HasPrefix(h, "GET /v1/events ") {
			heads = append(heads, h)
		}
	}
	proxy.mu.Unlock()
	if len(heads) != 2 || strings.Contains(strings.ToLower(heads[0]), "last-event-id") || !strings.Contains(strings.ToLower(heads[1]), "last-event-id: "+svc.events.eventID(3)+"\r\n") {
		t.Errorf("the follower's requests: %q", heads)
	}

	// Following the scan once it has ended says how it ended, at once,
	// rather than wait for events that will not come.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	again, err := exec.CommandContext(ctx, "/usr/bin/python3", "../tools/serve/client.py", "follow",
		"--url", c.base, "--scan-id", "fr1").CombinedOutput()
	var ended struct {
		Event string
		Data  struct{ State string }
	}
	if err != nil || json.Unmarshal(bytes.TrimSpace(again), &ended) != nil || ended.Event != "done" || ended.Data.State != "done" {
		t.Errorf("follow of the ended scan: %v\n%s", err, again)
	}
}
