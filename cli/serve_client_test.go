package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"h5ingest/scan/scantest"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// clientPy is the standard-library client of the scan service.
const clientPy = "../tools/serve/client.py"

// TestServeClientStatusProfilesFollow has tools/serve/client.py drive a
// real serve, with a real sender on loopback, through the paths a control
// system watches a scan by: the profiles (a file of --profiles named
// without .yaml, shown as profiles show prints it), arming by that name,
// the service's status while armed and running (with rates) and after,
// its health, a running scan's latest image, and the events, followed to
// the scan's end with ids that have no gap.
func TestServeClientStatusProfilesFollow(t *testing.T) {
	py := scantest.Python(t, "json")
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "40")
	dir, profiles := t.TempDir(), t.TempDir()
	port := scantest.FreePort(t)
	profile := filepath.Join(profiles, "beamline.yaml")
	text := fmt.Sprintf("name: beamline\ndescription: the test beamline\nsource:\n  port: %d\n  connect_timeout: 30s\noutput:\n  directory: %s\n", port, dir)
	if err := os.WriteFile(profile, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, "0123456789abcdef", "--profiles", profiles)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(p.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	client := func(args ...string) *exec.Cmd {
		all := append([]string{clientPy, args[0], "--url", p.base, "--token-file", tokenFile}, args[1:]...)
		return exec.Command(py, all...)
	}
	output := func(args ...string) string {
		t.Helper()
		out, err := client(args...).CombinedOutput()
		if err != nil {
			t.Fatalf("client.py %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	status := func() map[string]any {
		t.Helper()
		var st map[string]any
		if err := json.Unmarshal([]byte(output("status")), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}

	// The profiles, by the names an arm gives.
	list := output("profiles")
	for _, want := range []string{"beamline\tfile\tthe test beamline\n", "default\tbuilt-in\t", "pimega-135d-tomo\tbuilt-in\t"} {
		if !strings.Contains(list, want) {
			t.Errorf("profiles lacks %q:\n%s", want, list)
		}
	}
	// One merged, as profiles show prints it.
	shown := output("profiles", "beamline")
	code, show := runCaptured(t, "profiles", "show", profile)
	if code != exitOK {
		t.Fatalf("profiles show: %d", code)
	}
	keys := 0
	for _, line := range strings.Split(strings.TrimSpace(show), "\n") {
		kv, from, _ := strings.Cut(line, "# ")
		from, _, _ = strings.Cut(from, "; one of")
		key, value, _ := strings.Cut(strings.TrimSpace(kv), " ")
		value = strings.TrimSpace(value)
		found := false
		for _, l := range strings.Split(shown, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == key && strings.Contains(l, " "+value+" ") && strings.Contains(l, "# "+from) {
				found = true
			}
		}
		if !found {
			t.Errorf("the client's profile lacks %s = %s (%s)", key, value, from)
		}
		keys++
	}
	if keys < 40 || !strings.Contains(shown, "environment H5INGEST_DETECTOR_CHIPS_X") || !strings.Contains(shown, "profile "+profile) {
		t.Errorf("%d keys; the client printed\n%s", keys, shown)
	}
	if out, err := client("profiles", "nope").CombinedOutput(); err == nil || !strings.Contains(string(out), "refused (404)") {
		t.Errorf("profiles nope: %v %s", err, out)
	}
	if st := status(); st["state"] != "idle" || st["scan"] != nil {
		t.Errorf("status before the scan: %v", st)
	}

	// Follow the events from the first the service holds (event 0 is
	// none: every event after it), so that a follower slow to connect
	// still gets those of the arm.
	follow := client("follow", "--scan-id", "sc1", "--last-event-id", "0")
	var events bytes.Buffer
	follow.Stdout, follow.Stderr = &events, &events
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer follow.Process.Kill()

	arm := client("arm", "--profile", "beamline", "--scan-id", "sc1", "--projections", "40", "--title", "status test",
		"--experiment-id", "20261234", "--meta", "proposal=20261234", "--meta", "operator=ana")
	var armOut bytes.Buffer
	arm.Stdout, arm.Stderr = &armOut, &armOut
	if err := arm.Start(); err != nil {
		t.Fatal(err)
	}
	defer arm.Process.Kill()
	var st map[string]any
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if st = status(); st["state"] == "armed" {
			break
		}
	}
	if sc, _ := st["scan"].(map[string]any); st["state"] != "armed" || sc["scan_id"] != "sc1" {
		t.Fatalf("status once armed: %v\n%s\n%s", st, armOut.String(), p.out.String())
	}

	// The detector sends 40 frames at 10 a second: the scan runs four
	// seconds, long enough for a loaded machine's polls (each preview is a
	// Python process) to see it running with a rate.
	sender := command("send", capPath, "--to", fmt.Sprintf("127.0.0.1:%d", port), "--fps", "10", "--timeout", "20s")
	if err := sender.Start(); err != nil {
		t.Fatal(err)
	}
	defer sender.Wait()
	var running map[string]any
	png1 := filepath.Join(t.TempDir(), "latest.png")
	pictures := 0
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st = status()
		if st["state"] != "running" {
			if st["state"] == "idle" {
				break
			}
			continue
		}
		sc := st["scan"].(map[string]any)
		if r, _ := sc["rates"].(map[string]any); r["frames_per_second"].(float64) > 0 && running == nil {
			running = st
		}
		if out, err := client("preview", "--scan-id", "sc1", "-o", png1).CombinedOutput(); err == nil {
			pictures++
		} else if !strings.Contains(string(out), "refused (404)") { // no image decoded yet
			t.Errorf("preview while running: %v %s", err, out)
		}
	}
	if running == nil {
		t.Errorf("no status while running showed a rate; the last: %v", st)
	} else {
		r := running["scan"].(map[string]any)["rates"].(map[string]any)
		if fps := r["frames_per_second"].(float64); fps > 30 || r["received_mb_per_second"].(float64) <= 0 || r["stored_mb_per_second"].(float64) <= 0 {
			t.Errorf("rates of a 10 frames/s scan: %v", r)
		}
	}
	if pictures == 0 {
		t.Error("no preview while the scan ran")
	} else if f, err := os.Open(png1); err != nil {
		t.Error(err)
	} else {
		pic, err := png.Decode(f)
		f.Close()
		if err != nil || pic.Bounds().Dy() < 32 || pic.Bounds().Dx() <= 96 { // 96 x 32 pixels and a colour bar
			t.Errorf("the preview: %v %v", err, pic.Bounds())
		}
	}
	if err := arm.Wait(); err != nil {
		t.Fatalf("arm: %v\n%s\n%s", err, armOut.String(), p.out.String())
	}
	if got := strings.TrimSpace(armOut.String()); got != filepath.Join(dir, "sc1.h5") {
		t.Errorf("arm printed %q", got)
	}

	// The events, followed to the scan's end: ids without a gap, rates in
	// the progress events.
	waited := make(chan error, 1)
	go func() { waited <- follow.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("follow: %v\n%s", err, events.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("follow did not end with the scan:\n%s", events.String())
	}
	var names, ids []string
	rated, firstFrame := 0, -1 // the index of the first_frame event in ids
	sc := bufio.NewScanner(&events)
	for sc.Scan() {
		var ev struct {
			ID    string // EPOCH-N
			Event string
			Data  map[string]any
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("follow printed %q", sc.Text())
		}
		epoch, _, _ := strings.Cut(ev.ID, "-")
		if want := fmt.Sprintf("%s-%d", epoch, len(ids)+1); ev.ID != want || len(ids) > 0 && !strings.HasPrefix(ids[0], epoch+"-") {
			t.Errorf("event %s after %v, want %s", ev.ID, ids, want)
		}
		if ev.Event == "first_frame" && firstFrame < 0 {
			firstFrame = len(ids)
		}
		ids = append(ids, ev.ID)
		if len(names) == 0 || names[len(names)-1] != ev.Event {
			names = append(names, ev.Event)
		}
		if r, _ := ev.Data["rates"].(map[string]any); ev.Event == "progress" && r["frames_per_second"].(float64) > 0 {
			rated++
		}
	}
	// Between the detector's hello and its first frame, a progress event
	// of zero counts may come (a report falling in that gap).
	got := strings.Join(names, ",")
	if !strings.HasPrefix(got, "armed,first_frame,progress") && !strings.HasPrefix(got, "armed,progress,first_frame,progress") ||
		!strings.HasSuffix(got, "file_finalised,done") || rated == 0 {
		t.Errorf("events %s, %d progress with rates", got, rated)
	}
	// A client that comes back after the scan, with the id of an event it
	// saw, gets those after it.
	if firstFrame < 1 {
		t.Fatalf("event ids %v, first_frame at %d", ids, firstFrame)
	}
	again := output("follow", "--last-event-id", ids[firstFrame-1], "--count", "1")
	if !strings.HasPrefix(again, `{"id": "`+ids[firstFrame]+`", "event": "first_frame"`) {
		t.Errorf("follow from event %s: %s", ids[firstFrame-1], again)
	}

	st = status()
	last, _ := st["last_scan"].(map[string]any)
	storage, _ := st["storage"].(map[string]any)
	if st["state"] != "idle" || last["scan_id"] != "sc1" || last["state"] != "done" || storage["directory"] != dir || storage["free_bytes"].(float64) <= 0 {
		t.Errorf("status after the scan: %v", st)
	}
	if r, _ := last["rates"].(map[string]any); r["window_seconds"].(float64) <= 0 || r["frames_per_second"].(float64) <= 0 {
		t.Errorf("the ended scan's rates: %v", last["rates"])
	}
	if out, err := client("health").CombinedOutput(); err != nil || !strings.Contains(string(out), `"healthy": true`) {
		t.Errorf("health: %v %s", err, out)
	}
	// Once ended, the preview is the file's last frame.
	if out, err := client("preview", "--scan-id", "sc1", "-o", png1).CombinedOutput(); err != nil {
		t.Errorf("preview after the scan: %v %s", err, out)
	}
	if code, v := p.call("GET", "/v1/version", nil); code != 200 || v["api"] != "v1" || v["version"] == "" {
		t.Errorf("version: %d %v", code, v)
	}
}

// TestClientToken checks where client.py takes a service's token from:
// a file (its first line; a byte order mark and white space dropped, as
// serve drops them) or the environment, the file first; a token that
// cannot be read, or is wrong, is refused with a line saying why.
func TestClientToken(t *testing.T) {
	py := scantest.Python(t, "json")
	p := startServe(t, "0123456789abcdef")
	dir := t.TempDir()
	file := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := file("good", p.token+"\n")
	for _, tc := range []struct {
		name string
		args []string
		env  string // H5INGEST_TOKEN; "" for unset
		code int
		want string // in standard error
	}{
		{"file", []string{"--token-file", good}, "", 0, ""},
		{"file with a BOM, CRLF and a second line", []string{"--token-file", file("bom", "\ufeff "+p.token+" \r\nsecond line\n")}, "", 0, ""},
		{"environment", nil, p.token, 0, ""},
		{"the file over the environment", []string{"--token-file", good}, "wrong-token-wrong-token", 0, ""},
		{"none", nil, "", 2, "refused (401)"},
		{"wrong", []string{"--token-file", file("wrong", "wrong-token-wrong-token\n")}, "", 2, "refused (401)"},
		{"empty file", []string{"--token-file", file("empty", "\n")}, p.token, 2, "holds no token"},
		{"missing file", []string{"--token-file", filepath.Join(dir, "absent")}, "", 2, "absent"},
		{"not text", []string{"--token-file", file("binary", "\xff\xfe\x00\x01")}, "", 2, "token file"},
		{"a control character", []string{"--token-file", file("ctl", "0123\x0056789abcdef\n")}, "", 2, "control character"},
		{"both on the command line", []string{"--token-file", good, "--token", p.token}, "", 2, "not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(py, append([]string{clientPy, "status", "--url", p.base}, tc.args...)...)
			cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "H5INGEST_TOKEN=") })
			if tc.env != "" {
				cmd.Env = append(cmd.Env, "H5INGEST_TOKEN="+tc.env)
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) || strings.Contains(stderr.String(), "Traceback") {
				t.Errorf("client.py status %v: exit status %d, %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
			}
			if code == 0 && !strings.Contains(stdout.String(), `"state"`) {
				t.Errorf("status printed %q", stdout.String())
			}
		})
	}
}
