package service

import (
	"os/exec"
	"strings"
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
		if m["proposal"] != float64(20261234) || m["operator"] != "ana" || m["run"] != "007" || m["flag"] != true ||
			pos["x"] != 1.5 || m["note"] != "a=b" || req.ExperimentID != "20261234" {
			t.Errorf("the runner got %s: %#v, experiment %q", req.ScanID, m, req.ExperimentID)
		}
	}
}
