package cli

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"h5ingest/scan/scantest"
	"h5ingest/version"
)

// TestReplayMetadata gives a scan its title, sample, experiment and user
// metadata on the command line, and reads them back with h5py, beside the
// version and the merged profile every file keeps.
func TestReplayMetadata(t *testing.T) {
	py := scantest.Python(t, "h5py")
	capPath, _ := simulate(t, "--projections", "4")
	h5 := filepath.Join(t.TempDir(), "meta.h5")
	code, out := runCaptured(t, "replay", capPath, "-o", h5, "--title", "gold foam", "--sample", "Au",
		"--experiment-id", "20261234", "--meta", "operator=ana", "--meta", "proposal=42",
		"--meta", `stage={"x_mm": 1.5}`, "--meta", "note=a=b")
	if code != exitOK {
		t.Fatalf("replay: %d\n%s", code, out)
	}
	got, err := exec.Command(py, "-c", `
import sys, json, h5py
e = h5py.File(sys.argv[1], "r")["entry"]
s = lambda x: x.decode() if isinstance(x, bytes) else x
u = e["user_metadata"]
print(json.dumps({"title": s(e["title"][()]), "sample": s(e["sample/name"][()]),
    "experiment": s(e["experiment_identifier"][()]), "version": s(e["program_name"].attrs["version"]),
    "configuration": s(e["program_name"].attrs["configuration"]),
    "operator": s(u["operator"][()]), "proposal": u["proposal"][()].item(), "x_mm": u["stage/x_mm"][()].item(),
    "note": s(u["note"][()])}))
`, h5).CombinedOutput()
	if err != nil {
		t.Fatalf("h5py: %v\n%s", err, got)
	}
	var m map[string]any
	if err := json.Unmarshal(got, &m); err != nil {
		t.Fatalf("%v: %s", err, got)
	}
	for k, want := range map[string]any{"title": "gold foam", "sample": "Au", "experiment": "20261234",
		"operator": "ana", "proposal": float64(42), "x_mm": 1.5, "note": "a=b", "version": version.String()} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v", k, m[k], want)
		}
	}
	if conf, _ := m["configuration"].(string); len(conf) < 100 {
		t.Errorf("the merged profile kept is %q", conf)
	}
	for _, bad := range []string{"=1", "/x=1", "x"} {
		if code, _ := runCaptured(t, "replay", capPath, "-o", filepath.Join(t.TempDir(), "x.h5"), "--meta", bad); code != exitUsage {
			t.Errorf("--meta %q: exit status %d, want %d", bad, code, exitUsage)
		}
	}
}
