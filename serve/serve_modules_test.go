package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/scan"
	"h5ingest/scan/scantest"
	"h5ingest/service"
	"h5ingest/source/fabric"
)

// A serve of several modules (Runner.ModuleIDs) through the real handler
// on loopback, with a real sender per module on its own port.

// arrayProfileText is a profile of modules ids of scantest.SmallFormat, side by
// side, whose module K's receiver listens on port plus K's index.
func arrayProfileText(ids []int, port int, dir string, connect time.Duration) string {
	f := scantest.SmallFormat
	text := fmt.Sprintf("detector:\n  chips_x: %d\n  chips_y: %d\n  chip_width: %d\n  chip_height: %d\n  modules:\n",
		f.ChipsX, f.ChipsY, f.ChipWidth, f.ChipHeight)
	for i, id := range ids {
		text += fmt.Sprintf("    - {id: %d, x: %d, y: 0}\n", id, i*(f.Width()+4))
	}
	return text + fmt.Sprintf(`source:
  provider: tcp
  address: 127.0.0.1
  port: %d
  connect_timeout: %v
  idle_timeout: 20s
backend: cpu
output:
  directory: %s
  template: "{scan}_m{module}.h5"
`, port, connect, dir)
}

// nodeService is a scan service of a Runner of several modules, on a
// loopback port.
type nodeService struct {
	t    *testing.T
	base string
}

// startNode starts the service of a Runner that receives modules, whose
// profile files are profiles (name: text).
func startNode(t *testing.T, modules []int, profiles map[string]string) *nodeService {
	t.Helper()
	return startNodeLog(t, modules, profiles, io.Discard)
}

// startNodeLog is startNode whose service logs to w.
func startNodeLog(t *testing.T, modules []int, profiles map[string]string, w io.Writer) *nodeService {
	t.Helper()
	dir := t.TempDir()
	for name, text := range profiles {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	log := scantest.JSONLog(w)
	obs := scan.NewServingObserver(log)
	svc := service.New(&Runner{Profiles: dir, ModuleIDs: modules, Log: log, Observer: obs, Stages: scantest.Stages(t)}, service.Config{})
	svc.Handle("/", obs.Handler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		svc.Serve(ctx, ln, 30*time.Second)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return &nodeService{t: t, base: "http://" + ln.Addr().String()}
}

// call makes a request and decodes a 2xx answer into out; it returns the
// HTTP status and the body.
func (s *nodeService) call(method, path string, body, out any) (int, string) {
	s.t.Helper()
	code, b := apiCall(s.t, s.base, method, path, body, out)
	return code, string(b)
}

// arm arms scan id of n projections with profile; it fails the test
// unless the scan is armed.
func (s *nodeService) arm(profile, id string, n int) service.Status {
	s.t.Helper()
	var st service.Status
	if code, body := s.call("POST", "/v1/scans", map[string]any{"profile": profile, "scan_id": id,
		"plan": map[string]any{"projections": n}}, &st); code != http.StatusCreated {
		s.t.Fatalf("arm %s: %d %s", id, code, body)
	}
	return st
}

// wait waits for scan id to end and returns its status.
func (s *nodeService) wait(id string) service.Status {
	s.t.Helper()
	var st service.Status
	if code, body := s.call("GET", "/v1/scans/"+id+"/wait?timeout=120", nil, &st); code != http.StatusOK {
		s.t.Fatalf("wait %s: %d %s", id, code, body)
	}
	return st
}

// TestServeModules arms a serve of modules 0 and 1 once per scan, each
// module's sender on its own port (source.port plus the module's index):
// both files and the master verify, and the API lists them with each
// module's counts and their sum; then a scan whose module 1 never
// connects (its sender tries module 0's port, and is refused) ends
// incomplete, module 1's file with every frame missing, module 0's whole.
func TestServeModules(t *testing.T) {
	const n = 12
	port := scantest.FreePorts(t, 2)
	out := t.TempDir()
	ids := []int{0, 1}
	s := startNode(t, ids, map[string]string{
		"pair":  arrayProfileText(ids, port, out, 30*time.Second),
		"short": arrayProfileText(ids, port, out, 2*time.Second),
	})
	caps := []string{scantest.SimulateModule(t, scantest.SmallFormat, n, 0), scantest.SimulateModule(t, scantest.SmallFormat, n, 1)}
	var ss service.ServiceStatus
	if code, body := s.call("GET", "/v1/status", nil, &ss); code != http.StatusOK || fmt.Sprint(ss.Modules) != "[0 1]" {
		t.Errorf("service status: %d %s", code, body)
	}

	// Both modules.
	if st := s.arm("pair", "s1", n); st.Counts.Planned != 2*n || st.Counts.Pending != 2*n {
		t.Errorf("armed: %+v, want %d planned and pending", st.Counts, 2*n)
	}
	sent := []<-chan error{sendPaced(caps[0], port, 0, 0), sendPaced(caps[1], port+1, 1, 0)}
	for i, c := range sent {
		if err := <-c; err != nil {
			t.Fatalf("sender of module %d: %v", i, err)
		}
	}
	st := s.wait("s1")
	if st.State != service.Done || st.Counts.OK != 2*n || st.Counts.Planned != 2*n || st.Counts.Missing != 0 || st.Error != "" {
		t.Fatalf("s1: %s %+v %q", st.State, st.Counts, st.Error)
	}
	if len(st.Modules) != 2 {
		t.Fatalf("s1's modules: %+v", st.Modules)
	}
	// The rates of an ended scan are over the whole scan: of every module.
	if r := st.Rates; r.WindowSeconds <= 0 || math.Abs(r.FramesPerSecond*r.WindowSeconds-2*n) > 0.01 {
		t.Errorf("s1's rates %+v: want %d frames over the window", r, 2*n)
	}
	for i, m := range st.Modules {
		if m.Module != ids[i] || m.Counts.OK != n || m.Counts.Planned != n || m.Counts.Written != n {
			t.Errorf("s1's module %d: %+v", ids[i], m)
		}
	}
	want := []service.File{
		{Path: filepath.Join(out, "s1_m0.h5"), Module: 0, Verified: true},
		{Path: filepath.Join(out, "s1_m1.h5"), Module: 1, Verified: true},
		{Path: filepath.Join(out, "s1_master.h5"), Module: -1, Verified: true},
	}
	if fmt.Sprint(st.Files) != fmt.Sprint(want) {
		t.Errorf("s1's files:\n%+v\nwant\n%+v", st.Files, want)
	}
	for _, f := range want {
		if err := verifyPath(scantest.Stages(t), f.Path); err != nil {
			t.Errorf("verify %s: %v", f.Path, err)
		}
	}
	for _, f := range want[:2] {
		if got := scantest.Statuses(t, f.Path); got[frame.StatusOK] != n || len(got) != 1 {
			t.Errorf("%s: statuses %v, want %d ok", f.Path, got, n)
		}
	}
	// /metrics shows every module of the scan, not the last to connect.
	if _, metrics := s.call("GET", "/metrics", nil, nil); !strings.Contains(metrics, fmt.Sprintf(`h5ingest_frames_written_total{module="0"} %d`, n)) ||
		!strings.Contains(metrics, fmt.Sprintf(`h5ingest_frames_written_total{module="1"} %d`, n)) {
		t.Errorf("/metrics after s1 lacks a module's frames written:\n%s", grepLines(metrics, "h5ingest_frames_written_total"))
	}

	// Module 1 never connects: its sender tries module 0's port.
	s.arm("short", "s2", n)
	wrong := sendPaced(caps[1], port, 1, 0)
	if err := <-sendPaced(caps[0], port, 0, 0); err != nil {
		t.Fatalf("sender of module 0: %v", err)
	}
	if err := <-wrong; err == nil || !strings.Contains(err.Error(), "sent to the port of module 0") {
		t.Errorf("module 1's sender on module 0's port: %v", err)
	}
	st = s.wait("s2")
	if st.State != service.Incomplete || st.Counts.OK != n || st.Counts.Missing != n || st.Counts.Planned != 2*n || !strings.Contains(st.Error, "module 1 never connected") {
		t.Errorf("s2: %s %+v %q", st.State, st.Counts, st.Error)
	}
	if !slices.ContainsFunc(st.Notes, func(n service.Note) bool { return strings.Contains(n.Text, "module 1") }) {
		t.Errorf("s2's notes say nothing of module 1: %+v", st.Notes)
	}
	if len(st.Modules) != 2 || st.Modules[0].Counts.OK != n || st.Modules[0].Counts.Missing != 0 ||
		st.Modules[1].Counts.OK != 0 || st.Modules[1].Counts.Missing != n || st.Modules[1].Counts.Planned != n {
		t.Errorf("s2's modules: %+v", st.Modules)
	}
	if len(st.Files) != 3 {
		t.Fatalf("s2's files: %+v", st.Files)
	}
	m0, m1, master := filepath.Join(out, "s2_m0.h5"), filepath.Join(out, "s2_m1.h5"), filepath.Join(out, "s2_master.h5")
	if err := verifyPath(scantest.Stages(t), m0); err != nil {
		t.Errorf("module 0's file: %v", err)
	}
	if got := scantest.Statuses(t, m1); got[frame.StatusMissing] != n || len(got) != 1 {
		t.Errorf("module 1's file: statuses %v, want %d missing", got, n)
	}
	for _, p := range []string{m1, master} {
		if err := verifyPath(scantest.Stages(t), p); !errors.Is(err, scan.ErrIncomplete) {
			t.Errorf("verify %s: %v, want incomplete", p, err)
		}
	}

	// A stop before any module connected: no file, and the ports are
	// given back for the next scan.
	s.arm("pair", "s3", n)
	if code, body := s.call("POST", "/v1/scans/s3/stop", nil, nil); code != http.StatusAccepted {
		t.Fatalf("stop: %d %s", code, body)
	}
	if st := s.wait("s3"); st.State != service.Cancelled || len(st.Files) != 0 || st.Counts.Missing != 2*n {
		t.Errorf("s3 stopped before any module: %s %+v %+v", st.State, st.Counts, st.Files)
	}
	if m, _ := filepath.Glob(filepath.Join(out, "s3*")); len(m) != 0 {
		t.Errorf("s3 left %v", m)
	}
	for i := 0; i < 2; i++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+i))
		if err != nil {
			t.Errorf("port of module %d after the scan: %v", i, err)
			continue
		}
		l.Close()
	}
}

// TestServeModulesPorts: module K of a profile of several listens on
// source.port plus K's index in detector.modules, whichever modules the
// serve takes; a serve of some modules writes no master; a module the
// profile lacks, or a port past 65535, is refused.
func TestServeModulesPorts(t *testing.T) {
	mods := []config.Module{{ID: 0}, {ID: 1, X: 100}, {ID: 2, X: 100, Y: 40}, {ID: 3, Y: 40}}
	p := config.Default()
	p.Detector.Modules = mods
	p.Source.Address, p.Source.Port = "127.0.0.1", 9000
	all, err := scan.NewFiles(p, scan.Names{ScanID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		modules []int
		addr    string // of the first module
		master  bool
		err     string
	}{
		{modules: []int{0, 1, 2, 3}, addr: "127.0.0.1:9000", master: true},
		{modules: []int{2, 3}, addr: "127.0.0.1:9002"},
		{modules: []int{3}, addr: "127.0.0.1:9003"},
		{modules: []int{1, 5}, err: "modules 0, 1, 2, 3"},
		{modules: nil, err: "serve --modules"},
	} {
		r := &Runner{ModuleIDs: tc.modules}
		files, err := r.nodeFiles("array", p, all)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("modules %v: %v, want an error saying %q", tc.modules, err, tc.err)
			}
			continue
		}
		if err != nil || len(files.Modules) != len(tc.modules) || (files.Master != "") != tc.master {
			t.Errorf("modules %v: %+v %v", tc.modules, files, err)
			continue
		}
		if addr, err := moduleListenAddr(p, files); addr != tc.addr || err != nil {
			t.Errorf("modules %v listen on %s (%v), want %s", tc.modules, addr, err, tc.addr)
		}
	}
	p.Source.Port = 65534
	if _, err := scan.ModuleAddr(p, 3); err == nil || !strings.Contains(err.Error(), "past port 65535") {
		t.Errorf("module 3 past the last port: %v", err)
	}
}

// grepLines returns the lines of text that hold s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// sendPaced sends the capture of scantest.SmallFormat frames at path as
// module m to the port at fps frames a second (0: as fast as the receiver
// takes them); the channel gives the sender's error.
func sendPaced(path string, port int, m uint16, fps float64) <-chan error {
	return scantest.SendHello(path, fmt.Sprintf("127.0.0.1:%d", port), fabric.Hello{Module: m, Mode: fabric.ModeWrite, Format: scantest.SmallFormat}, fps, nil)
}

// TestServeModulesStopCancel stops, then cancels, a scan of two modules
// mid-scan, each module's sender at 40 frames a second: each ends with
// every module's file listed and verified, each module's frames ok or
// missing (none discarded: what arrived is written), and the sum as the
// scan's counts.
func TestServeModulesStopCancel(t *testing.T) {
	const n = 40
	port := scantest.FreePorts(t, 2)
	out := t.TempDir()
	ids := []int{0, 1}
	s := startNode(t, ids, map[string]string{"pair": arrayProfileText(ids, port, out, 30*time.Second)})
	caps := []string{scantest.SimulateModule(t, scantest.SmallFormat, n, 0), scantest.SimulateModule(t, scantest.SmallFormat, n, 1)}
	for _, tc := range []struct {
		id, op string
		state  service.State
	}{
		{"st", "stop", service.Incomplete},
		{"ca", "cancel", service.Cancelled},
	} {
		s.arm("pair", tc.id, n)
		sent := []<-chan error{sendPaced(caps[0], port, 0, 40), sendPaced(caps[1], port+1, 1, 40)}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			var st service.Status
			s.call("GET", "/v1/scans/"+tc.id, nil, &st)
			if len(st.Modules) == 2 && st.Modules[0].Counts.Received >= 3 && st.Modules[1].Counts.Received >= 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no frames of both modules: %+v", tc.id, st)
			}
		}
		if code, body := s.call("POST", "/v1/scans/"+tc.id+"/"+tc.op, nil, nil); code != http.StatusAccepted {
			t.Fatalf("%s %s: %d %s", tc.op, tc.id, code, body)
		}
		st := s.wait(tc.id)
		for i, c := range sent {
			if err := <-c; err == nil {
				t.Errorf("%s: module %d's sender sent every frame after the %s", tc.id, i, tc.op)
			}
		}
		c := st.Counts
		if st.State != tc.state || st.Error != "" || c.Planned != 2*n || c.OK+c.Missing != 2*n || c.Discarded != 0 || c.OK < 6 || c.Missing == 0 {
			t.Errorf("%s after %s: %s %q %+v", tc.id, tc.op, st.State, st.Error, c)
		}
		if len(st.Modules) != 2 || st.Modules[0].Counts.OK+st.Modules[1].Counts.OK != c.OK {
			t.Errorf("%s's modules %+v, counts %+v", tc.id, st.Modules, c)
		}
		for _, m := range st.Modules {
			if m.Counts.OK+m.Counts.Missing != n || m.Counts.OK < 3 {
				t.Errorf("%s's module %d: %+v", tc.id, m.Module, m.Counts)
			}
		}
		if len(st.Files) != 3 {
			t.Errorf("%s's files: %+v", tc.id, st.Files)
		}
		for _, f := range st.Files {
			if err := verifyPath(scantest.Stages(t), f.Path); !f.Verified || !errors.Is(err, scan.ErrIncomplete) {
				t.Errorf("%s: %+v, verify %v, want verified and incomplete", tc.id, f, err)
			}
		}
	}
}

// TestServeModulesLateSender stops a scan of modules 0, 1 and 2 while
// module 0 sends; module 1's sender comes while module 0 drains, module
// 2's never. Module 1's sender is refused ("the scan has stopped"), serve
// logs the refusal, and the scan's error names module 1 as refused after
// the stop and module 2 as never connected; every file is written and
// listed.
func TestServeModulesLateSender(t *testing.T) {
	const n = 40
	port := scantest.FreePorts(t, 3)
	out := t.TempDir()
	ids := []int{0, 1, 2}
	draining, release := make(chan struct{}), make(chan struct{})
	modulesDraining = func() {
		close(draining)
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
	}
	t.Cleanup(func() { modulesDraining = nil }) // after the service's cleanup, which ends the scan
	var logs scantest.Buffer
	s := startNodeLog(t, ids, map[string]string{"trio": arrayProfileText(ids, port, out, 30*time.Second)}, &logs)
	caps := []string{scantest.SimulateModule(t, scantest.SmallFormat, n, 0), scantest.SimulateModule(t, scantest.SmallFormat, n, 1)}
	s.arm("trio", "late", n)
	first := sendPaced(caps[0], port, 0, 40)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var st service.Status
		s.call("GET", "/v1/scans/late", nil, &st)
		if len(st.Modules) == 3 && st.Modules[0].Counts.Received >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no frames of module 0: %+v", st)
		}
	}
	if code, body := s.call("POST", "/v1/scans/late/stop", nil, nil); code != http.StatusAccepted {
		t.Fatalf("stop: %d %s", code, body)
	}
	select {
	case <-draining:
	case <-time.After(30 * time.Second):
		t.Fatal("the scan never drained")
	}
	err := <-sendPaced(caps[1], port+1, 1, 0)
	close(release)
	var refusal *fabric.RefusedError
	if !errors.As(err, &refusal) || !strings.Contains(err.Error(), "the scan has stopped") {
		t.Errorf("module 1's sender after the stop: %v, want refused: the scan has stopped", err)
	}
	<-first
	st := s.wait("late")
	if st.State != service.Incomplete ||
		!strings.Contains(st.Error, "module 1 connected after the stop and was refused") ||
		!strings.Contains(st.Error, "module 2 never connected") || strings.Contains(st.Error, "1, 2") {
		t.Errorf("late: %s %q, want incomplete, module 1 refused after the stop, module 2 never connected", st.State, st.Error)
	}
	if c := st.Counts; c.Planned != 3*n || c.OK+c.Missing != 3*n || c.OK < 3 || c.Discarded != 0 {
		t.Errorf("late's counts: %+v", c)
	}
	if len(st.Files) != 4 {
		t.Errorf("late's files: %+v, want every module's and the master", st.Files)
	}
	if l := grepLines(logs.String(), "connected after the stop and was refused"); !strings.Contains(l, `"module":1`) {
		t.Errorf("serve's log has no refusal of module 1:\n%s", grepLines(logs.String(), "module"))
	}
}
