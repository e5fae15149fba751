package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeCaseFoldedKeysStayInTheDataRoot: a request that gives a field
// twice, once as the API spells it and once in other letter case
// ("output" and "OUTPUT"), is judged by the first and decoded with the
// second (encoding/json matches keys without regard to case, the last one
// winning), so "OUTPUT": "../outside/x.h5" must be refused as the
// lower-case "output" would be, and nothing may be made outside the data
// root. The same for scan_id, whose refusal must name the request field,
// not the command line's --scan-id.
func TestServeCaseFoldedKeysStayInTheDataRoot(t *testing.T) {
	smallDetector(t)
	top := t.TempDir()
	root, outside := filepath.Join(top, "root"), filepath.Join(top, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	operatorPort(t)
	p := startServe(t, "", "--data-root", root, "--preload-gpu=false")
	for _, tc := range []struct{ name, body string }{
		{"output, then OUTPUT", `{"profile":"default","scan_id":"c1","output":"ok.h5","OUTPUT":"../outside/pwn.h5","plan":{"projections":3},"overrides":{"output":{"directory":"."}}}`},
		{"output, then Output", `{"profile":"default","scan_id":"c2","output":"ok.h5","Output":"../outside/pwn.h5","plan":{"projections":3},"overrides":{"output":{"directory":"."}}}`},
		{"scan_id, then SCAN_ID", `{"profile":"default","scan_id":"c3","SCAN_ID":"../outside/c3","plan":{"projections":3},"overrides":{"output":{"directory":"."}}}`},
	} {
		code, e := p.call("POST", "/v1/scans", []byte(tc.body))
		text := fmt.Sprint(e)
		if code == http.StatusCreated {
			id, _ := e["scan_id"].(string)
			p.call("POST", "/v1/scans/"+id+"/cancel", nil)
			p.call("GET", "/v1/scans/"+id+"/wait?timeout=10", nil)
			b, _ := json.Marshal(e)
			t.Errorf("%s: armed (201), want 422: %s", tc.name, b)
			continue
		}
		if code != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d %v, want 422", tc.name, code, e)
		}
		if strings.Contains(text, "--") || strings.Contains(text, "flag ") {
			t.Errorf("%s: the answer names a command-line flag: %v", tc.name, e)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("the directory outside the data root holds %v", entries)
	}
}

// TestServeOverflowingAnglesRefused: angles that are each finite but
// whose rotation between them is not would record NaN and infinite
// rotation angles; the arm is refused (422), naming the request fields,
// and no file is made.
func TestServeOverflowingAnglesRefused(t *testing.T) {
	smallDetector(t)
	root := t.TempDir()
	operatorPort(t)
	p := startServe(t, "", "--data-root", root, "--preload-gpu=false")
	code, e := p.call("POST", "/v1/scans", []byte(`{"profile":"default","scan_id":"a1","plan":{"projections":3,"angle_start":-1.7e308,"angle_end":1.7e308},"overrides":{"output":{"directory":"."}}}`))
	if code == http.StatusCreated {
		p.call("POST", "/v1/scans/a1/cancel", nil)
		p.call("GET", "/v1/scans/a1/wait?timeout=10", nil)
	}
	text := fmt.Sprint(e)
	if code != http.StatusUnprocessableEntity || !strings.Contains(text, "plan.angle_start") || !strings.Contains(text, "plan.angle_end") {
		t.Errorf("an arm of angles -1.7e308 to 1.7e308: %d %v, want 422 naming plan.angle_start and plan.angle_end", code, e)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("the refused arm made %v", entries)
	}
}
