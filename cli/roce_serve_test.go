package cli

import (
	"fmt"
	"h5ingest/scan/scantest"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeOverRoCE runs serve with its queue pairs set up once, at
// start-up (--rdma-profile), and two scans through them, each from the
// front end's emulator started afresh as its own process: GET /v1/rdma
// shows the receiver's end, the same queue pair under a new nonce at each
// scan; each scan's file holds every frame, verified; a front end's ends
// that are not such are refused (PUT /v1/rdma).
func TestServeOverRoCE(t *testing.T) {
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "30")
	dir, meet := t.TempDir(), t.TempDir()
	for _, kv := range roceEnv(t, meet, "H5INGEST_SOURCE_TRANSPORT=roce", "H5INGEST_SOURCE_RING_SLOTS=64", "H5INGEST_SOURCE_CONNECT_TIMEOUT=30s") {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	params, fe := filepath.Join(meet, "rdma.json"), filepath.Join(meet, "front-end.json")
	p := startServe(t, "a-long-enough-secret", "--data-root", dir, "--rdma-profile", "default", "--rdma-params", params, "--front-end", fe)

	code, first := p.call("GET", "/v1/rdma", nil)
	mods, _ := first["modules"].([]any)
	if code != http.StatusOK || len(mods) != 1 {
		t.Fatalf("GET /v1/rdma: %d %v", code, first)
	}
	qpn := mods[0].(map[string]any)["qpn"]
	nonces := map[any]bool{first["nonce"]: true}
	for _, id := range []string{"r1", "r2"} {
		code, st := p.call("POST", "/v1/scans", armRequest(id, dir, 30))
		if code != http.StatusCreated {
			t.Fatalf("arm %s: %d %v\n%s", id, code, st, p.out.String())
		}
		_, now := p.call("GET", "/v1/rdma", nil)
		m := now["modules"].([]any)[0].(map[string]any)
		if nonces[now["nonce"]] || m["qpn"] != qpn || now["ready"] == true {
			t.Fatalf("%s armed: GET /v1/rdma %v: want a new nonce, QPN %v kept, not ready", id, now, qpn)
		}
		nonces[now["nonce"]] = true
		if file := readParams(t, params); file["nonce"] != now["nonce"] {
			t.Errorf("%s armed: --rdma-params has nonce %v, GET /v1/rdma %v: want the same", id, file["nonce"], now["nonce"])
		}
		s := startProcEnv(t, nil, "send", capPath, "--transport", "roce", "--rdma-params", params, "--front-end", fe, "--timeout", "30s")
		if code := s.wait(t, time.Minute); code != exitOK {
			t.Fatalf("send %s: exit status %d\n%s%s\nserve:\n%s", id, code, s.stdout.String(), s.stderr.String(), p.out.String())
		}
		_, st = p.call("GET", "/v1/scans/"+id+"/wait?timeout=30", nil)
		counts, _ := st["counts"].(map[string]any)
		if st["state"] != "done" || counts["ok"] != float64(30) {
			t.Fatalf("%s after the front end: %v\n%s", id, st, p.out.String())
		}
		if code, out := runCaptured(t, "verify", filepath.Join(dir, id+".h5")); code != exitOK {
			t.Errorf("verify %s: %d\n%s", id, code, out)
		}
		checkLink(t, st, 30)
	}

	// A scan cancelled while its front end writes, which goes on writing
	// (a front end never waits): the next scan, from a front end started
	// afresh, starts with an empty ring and takes every frame of its own.
	if code, st := p.call("POST", "/v1/scans", armRequest("c1", dir, 30)); code != http.StatusCreated {
		t.Fatalf("arm c1: %d %v", code, st)
	}
	slow := startProcEnv(t, nil, "send", capPath, "--transport", "roce", "--rdma-params", params, "--front-end", fe, "--timeout", "30s", "--fps", "10")
	for deadline := time.Now().Add(time.Minute); ; {
		_, st := p.call("GET", "/v1/scans/c1", nil)
		if counts, _ := st["counts"].(map[string]any); counts["received"].(float64) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("c1 received nothing from the front end: %v\n%s", st, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.call("POST", "/v1/scans/c1/cancel", nil)
	if _, st := p.call("GET", "/v1/scans/c1/wait?timeout=30", nil); st["state"] != "cancelled" {
		t.Fatalf("c1 after cancel: %v", st)
	}
	if code, st := p.call("POST", "/v1/scans", armRequest("c2", dir, 30)); code != http.StatusCreated {
		t.Fatalf("arm c2: %d %v", code, st)
	}
	s := startProcEnv(t, nil, "send", capPath, "--transport", "roce", "--rdma-params", params, "--front-end", fe, "--timeout", "30s")
	if code := s.wait(t, time.Minute); code != exitOK {
		t.Fatalf("send c2: exit status %d\n%s%s\nserve:\n%s", code, s.stdout.String(), s.stderr.String(), p.out.String())
	}
	_, st := p.call("GET", "/v1/scans/c2/wait?timeout=30", nil)
	if counts, _ := st["counts"].(map[string]any); st["state"] != "done" || counts["ok"] != float64(30) {
		t.Fatalf("c2 after a cancelled scan: %v\n%s", st, p.out.String())
	}
	checkLink(t, st, 30)
	slow.cmd.Process.Kill()
	slow.wait(t, time.Minute)
	for _, bad := range []string{`{"modules":[{"module":5,"gid":"fe80::9","qpn":7,"psn":1}]}`, `{"modules":[]}`, `[]`} {
		if code, body := p.call("PUT", "/v1/rdma", []byte(bad)); code != http.StatusUnprocessableEntity {
			t.Errorf("PUT /v1/rdma %s: %d %v, want 422", bad, code, body)
		}
	}
	req, _ := http.NewRequest("PUT", p.base+"/v1/rdma", strings.NewReader(`{"modules":[{"module":0,"gid":"fe80::9","qpn":7,"psn":1}]}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("PUT /v1/rdma without the token: %v %v, want 401", resp.Status, err)
	}
}

// TestServeRoCEWithoutQueuePairs arms a scan of a roce profile on a serve
// that set up no queue pairs: refused, naming the flag that sets them up.
func TestServeRoCEWithoutQueuePairs(t *testing.T) {
	smallDetector(t)
	dir := t.TempDir()
	t.Setenv("H5INGEST_SOURCE_TRANSPORT", "roce")
	p := startServe(t, "", "--data-root", dir)
	code, st := p.call("POST", "/v1/scans", armRequest("x", dir, 3))
	if code/100 != 4 || !strings.Contains(fmt.Sprint(st), "--rdma-profile") {
		t.Fatalf("arm of a roce profile without --rdma-profile: %d %v", code, st)
	}
	if code, _ := p.call("GET", "/v1/rdma", nil); code != http.StatusNotFound {
		t.Errorf("GET /v1/rdma without queue pairs: %d, want 404", code)
	}
}

// checkLink checks the link counts of a scan's status over roce: every
// frame of the plan received, none overrun, the ring empty at the end.
func checkLink(t *testing.T, st map[string]any, frames int) {
	t.Helper()
	mods, _ := st["modules"].([]any)
	if len(mods) != 1 {
		t.Fatalf("status %v: want the module's counts", st)
	}
	link, _ := mods[0].(map[string]any)["link"].(map[string]any)
	if link["received"] != float64(frames) || link["overrun"] != float64(0) || link["gaps"] != float64(0) || link["ring_slots"] != float64(64) || link["ring_fill"] != float64(0) {
		t.Errorf("%s: link counts %v: want %d received, none overrun nor skipped, a ring of 64 left empty", st["scan_id"], link, frames)
	}
}

// TestServeModulesOverRoCE runs the 2 x 2 array as one node of four
// modules over roce: serve sets a queue pair up per module at start-up,
// and two scans each take a front end's emulator per module, started
// afresh (each its own queue pair, sharing the front end's file): every
// module's file is whole, and the master verifies.
func TestServeModulesOverRoCE(t *testing.T) {
	paths, _ := simulateModules(t)
	meet := t.TempDir()
	profiles, dir := arrayServeSetup(t, scantest.FreePorts(t, len(arrayModules)), "30s")
	for _, kv := range []string{"H5INGEST_TEST_FAKE_VERBS=" + meet, "H5INGEST_SOURCE_TRANSPORT=roce", "H5INGEST_SOURCE_RING_SLOTS=64"} {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	params, fe := filepath.Join(meet, "rdma.json"), filepath.Join(meet, "front-end.json")
	p := startServe(t, "", "--profiles", profiles, "--modules", "0,1,2,3", "--rdma-profile", "array", "--rdma-params", params, "--front-end", fe)
	for _, id := range []string{"m1", "m2"} {
		armArray(t, p, id)
		var sends []*proc
		for i, m := range arrayModules {
			sends = append(sends, startProcEnv(t, nil, "send", paths[i], "--transport", "roce", "--module", fmt.Sprint(m.id),
				"--rdma-params", params, "--front-end", fe, "--timeout", "30s"))
		}
		for i, s := range sends {
			if code := s.wait(t, time.Minute); code != exitOK {
				t.Fatalf("%s: send of module %d: exit status %d\n%s%s\nserve:\n%s", id, arrayModules[i].id, code, s.stdout.String(), s.stderr.String(), p.out.String())
			}
		}
		_, st := p.call("GET", "/v1/scans/"+id+"/wait?timeout=60", nil)
		counts, _ := st["counts"].(map[string]any)
		if st["state"] != "done" || counts["ok"] != float64(20) {
			t.Fatalf("%s: %v\n%s", id, st, p.out.String())
		}
		for _, m := range st["modules"].([]any) {
			link, _ := m.(map[string]any)["link"].(map[string]any)
			if link["received"] != float64(5) || link["overrun"] != float64(0) {
				t.Errorf("%s: module %v link counts %v, want 5 received, none overrun", id, m.(map[string]any)["module"], link)
			}
		}
		if code, out := runCaptured(t, "verify", filepath.Join(dir, id+"_master.h5")); code != exitOK {
			t.Errorf("verify %s's master: %d\n%s", id, code, out)
		}
	}
}
