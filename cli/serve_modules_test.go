package cli

import (
	"fmt"
	"h5ingest/scan/scantest"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// arrayServeSetup writes the test array's profile as "array" in a
// profiles directory, its files going to a directory of their own, its
// receivers from port on (port plus each module's index), and returns
// both directories.
func arrayServeSetup(t *testing.T, port int, connect string) (profiles, dir string) {
	t.Helper()
	profiles, dir = t.TempDir(), t.TempDir()
	text, err := os.ReadFile(arrayProfile(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(profiles, "array.yaml"), text, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("H5INGEST_OUTPUT_DIRECTORY", dir)
	t.Setenv("H5INGEST_SOURCE_PORT", fmt.Sprint(port))
	t.Setenv("H5INGEST_SOURCE_CONNECT_TIMEOUT", connect)
	return profiles, dir
}

// armArray arms scan id of the test array's plan on p.
func armArray(t *testing.T, p *serveProcess, id string) {
	t.Helper()
	arm := map[string]any{"profile": "array", "scan_id": id, "plan": map[string]any{"darks": 1, "flats": 1, "projections": 3}}
	if code, st := p.call("POST", "/v1/scans", arm); code != http.StatusCreated {
		t.Fatalf("arm %s: %d %v\n%s", id, code, st, p.out.String())
	}
}

// sendArray sends module index i's capture to its port, port plus i, and
// fails the test unless it is delivered.
func sendArray(t *testing.T, paths []string, port, i int) {
	t.Helper()
	m := arrayModules[i].id
	if code := run([]string{"send", paths[i], "--to", fmt.Sprintf("127.0.0.1:%d", port+i), "--module", fmt.Sprint(m), "--timeout", "20s"}); code != exitOK {
		t.Fatalf("send of module %d: exit status %d", m, code)
	}
}

// resultFiles returns the paths of a scan's files as its status lists
// them, by module (-1: the master), failing the test on a file that did
// not verify.
func resultFiles(t *testing.T, st map[string]any) map[int]string {
	t.Helper()
	out := map[int]string{}
	files, _ := st["files"].([]any)
	for _, f := range files {
		f := f.(map[string]any)
		out[int(f["module"].(float64))] = f["path"].(string)
		if f["verified"] != true {
			t.Errorf("file %v did not verify", f)
		}
	}
	return out
}

// TestServeModulesOneNode runs the 2 x 2 array as one node of four
// modules: one serve --modules 0,1,2,3 armed once, a sender per module on
// its own port; the API lists the four module files and the master, each
// module's counts and their sum, and h5ingest verify proves the master
// (and through it every module file).
func TestServeModulesOneNode(t *testing.T) {
	paths, _ := simulateModules(t)
	port := scantest.FreePorts(t, len(arrayModules))
	profiles, dir := arrayServeSetup(t, port, "30s")
	p := startServe(t, "", "--profiles", profiles, "--modules", "0,1,2,3")
	if _, st := p.call("GET", "/v1/status", nil); fmt.Sprint(st["modules"]) != "[0 1 2 3]" {
		t.Errorf("service status: %v", st)
	}
	armArray(t, p, "n1")
	for i := range arrayModules {
		sendArray(t, paths, port, i)
	}
	_, st := p.call("GET", "/v1/scans/n1/wait?timeout=60", nil)
	counts, _ := st["counts"].(map[string]any)
	if st["state"] != "done" || counts["ok"] != float64(20) || counts["planned"] != float64(20) {
		t.Fatalf("n1: %v\n%s", st, p.out.String())
	}
	mods, _ := st["modules"].([]any)
	if len(mods) != 4 {
		t.Fatalf("n1's modules: %v", st["modules"])
	}
	for i, m := range mods {
		m := m.(map[string]any)
		if c := m["counts"].(map[string]any); m["module"] != float64(arrayModules[i].id) || c["ok"] != float64(5) || c["missing"] != float64(0) {
			t.Errorf("n1's module %d: %v", arrayModules[i].id, m)
		}
	}
	files := resultFiles(t, st)
	want := map[int]string{-1: filepath.Join(dir, "n1_master.h5")}
	for _, m := range arrayModules {
		want[m.id] = filepath.Join(dir, fmt.Sprintf("n1_mod%d.h5", m.id))
	}
	if fmt.Sprint(files) != fmt.Sprint(want) {
		t.Errorf("n1's files %v, want %v", files, want)
	}
	if code, out := runCaptured(t, "verify", want[-1]); code != exitOK || !strings.Contains(out, "master of 4 modules") {
		t.Errorf("verify the master: %d\n%s", code, out)
	}
}

// TestServeModulesTwoNodes runs the 2 x 2 array as two nodes of two
// modules on one host (serve --modules 0,1 and serve --modules 2,3, one
// profile, one source.port: module K on the port plus its index, so the
// two never collide): each lists its two files and no master, which
// h5ingest master writes once both are done. Then a scan whose module 1
// never connects ends incomplete on the first node: module 1's file has
// every frame missing, module 0's is whole.
func TestServeModulesTwoNodes(t *testing.T) {
	paths, _ := simulateModules(t)
	port := scantest.FreePorts(t, len(arrayModules))
	profiles, dir := arrayServeSetup(t, port, "4s")
	nodes := []*serveProcess{
		startServe(t, "", "--profiles", profiles, "--modules", "0,1"),
		startServe(t, "", "--profiles", profiles, "--modules", "2,3"),
	}
	for _, p := range nodes {
		armArray(t, p, "t1")
	}
	for i := range arrayModules {
		sendArray(t, paths, port, i)
	}
	for n, p := range nodes {
		_, st := p.call("GET", "/v1/scans/t1/wait?timeout=60", nil)
		counts, _ := st["counts"].(map[string]any)
		if st["state"] != "done" || counts["ok"] != float64(10) {
			t.Fatalf("node %d: %v\n%s", n, st, p.out.String())
		}
		files := resultFiles(t, st)
		want := map[int]string{}
		for _, m := range arrayModules[2*n : 2*n+2] {
			want[m.id] = filepath.Join(dir, fmt.Sprintf("t1_mod%d.h5", m.id))
		}
		if fmt.Sprint(files) != fmt.Sprint(want) {
			t.Errorf("node %d's files %v, want %v (no master)", n, files, want)
		}
	}
	if code, stdout, stderr := runProcess(t, append([]string{"master", "--profile", filepath.Join(profiles, "array.yaml"), "--scan-id", "t1"}, arrayPlan...)...); code != exitOK {
		t.Fatalf("master: exit status %d\n%s%s", code, stdout, stderr)
	}
	if code, out := runCaptured(t, "verify", filepath.Join(dir, "t1_master.h5")); code != exitOK {
		t.Errorf("verify the master: %d\n%s", code, out)
	}

	// Module 1's sender never connects.
	p := nodes[0]
	armArray(t, p, "t2")
	sendArray(t, paths, port, 0)
	_, st := p.call("GET", "/v1/scans/t2/wait?timeout=60", nil)
	counts, _ := st["counts"].(map[string]any)
	if st["state"] != "incomplete" || counts["ok"] != float64(5) || counts["missing"] != float64(5) ||
		!strings.Contains(fmt.Sprint(st["error"]), "module 1 never connected") {
		t.Fatalf("t2: %v\n%s", st, p.out.String())
	}
	files := resultFiles(t, st)
	if code, out := runCaptured(t, "verify", files[0]); code != exitOK {
		t.Errorf("verify module 0's file: %d\n%s", code, out)
	}
	if code, out := runCaptured(t, "verify", files[1]); code != exitIncomplete || !strings.Contains(out, "ok 0, missing 5") {
		t.Errorf("verify module 1's file: %d, want %d with 5 missing\n%s", code, exitIncomplete, out)
	}
}

// TestServeModulesFlags: --module N is --modules N; both at once, a
// module given twice or a negative one are refused.
func TestServeModulesFlags(t *testing.T) {
	for _, tc := range []struct {
		module  int
		modules []int
		want    string // the modules, or the error's text
	}{
		{-1, nil, "[]"},
		{2, nil, "[2]"},
		{-1, []int{0, 1}, "[0 1]"},
		{1, []int{0, 1}, "give one of them"},
		{-1, []int{0, 1, 0}, "module 0 given twice"},
		{-1, []int{-3}, "module -3, want 0 to 65535"},
	} {
		got, err := serveModules(tc.module, tc.modules)
		text := fmt.Sprint(got)
		if err != nil {
			text = err.Error()
		}
		if !strings.Contains(text, tc.want) {
			t.Errorf("--module %d --modules %v: %s, want %s", tc.module, tc.modules, text, tc.want)
		}
	}
}
