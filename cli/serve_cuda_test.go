package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"h5ingest/frame"
	"h5ingest/gpu/gputest"
	"h5ingest/writer"
)

// serveFaultLaunch is the kernel launch the fake driver faults at in
// TestServeGPULost: serve's check of the kernels at start-up takes
// launches 1 to 3, and each decode call of the first scan (up to 4 frames)
// three more, so launch 14 falls in the CRC kernel of its fourth call, with
// at least three frames decoded before and more than twenty-two to come.
const serveFaultLaunch = 14

// TestServeGPULost runs serve on the fake CUDA driver, which faults with a
// sticky error in the middle of the first scan and from then on fails
// every call of the process, as the real driver does. Either way that
// scan keeps all 30 frames: those from the fault on, the batch it struck
// included, decode on the CPU, so the file verifies whole, and the log
// says "CUDA device lost" and that the scan went on on the CPU; the driver
// is asked for nothing more.
// With --on-gpu-lost cpu, health stays 200 with a warning (in the status
// too) and the next scans, on the default profile (auto) and on one that
// asks for cuda, decode on the CPU, all 30 frames OK. With the default,
// exit, serve drains the scan and exits 1 by itself, for systemd to
// restart it. The kernels were loaded at start-up, before any arm, with
// the compute cache asked for.
func TestServeGPULost(t *testing.T) {
	for _, tc := range []struct {
		code int
		flag string // --on-gpu-lost; "" for the default
	}{{700, "cpu"}, {719, ""}} {
		t.Run(fmt.Sprintf("code=%d/on-gpu-lost=%s", tc.code, tc.flag), func(t *testing.T) {
			env, log := gputest.FakeDriver(t)
			env = append(env, "FAKECUDA_FAULT_CODE="+strconv.Itoa(tc.code), "FAKECUDA_FAULT_LAUNCH="+strconv.Itoa(serveFaultLaunch))
			for _, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			smallDetector(t)
			capPath, _ := simulate(t, "--frames", "30")
			dir := t.TempDir()
			cache := filepath.Join(t.TempDir(), "cuda")
			port := operatorPort(t)
			// A profile of the operator's that asks for the GPU and nothing else.
			profiles := t.TempDir()
			if err := os.WriteFile(filepath.Join(profiles, "gpu.yaml"), []byte("name: gpu\ndescription: decode on the GPU only\nbackend: cuda\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"--cuda-cache", cache, "--data-root", dir, "--profiles", profiles}
			if tc.flag != "" {
				args = append(args, "--on-gpu-lost", tc.flag)
			}
			p := startServe(t, "", args...)
			calls := func() string {
				c, err := gputest.FakeDriverCalls(log)
				if err != nil {
					t.Fatal(err)
				}
				return strings.Join(c, "\n")
			}
			if got := calls(); strings.Count(got, "cuModuleLoadDataEx") != 1 || !strings.Contains(got, "cache="+cache) {
				t.Fatalf("at start-up, before any arm, the driver logged:\n%s\n%s", got, p.out.String())
			}
			arm := func(id, profile string) {
				t.Helper()
				req := armRequest(id, dir, 30)
				req["profile"] = profile
				if code, st := p.call("POST", "/v1/scans", req); code != http.StatusCreated {
					t.Fatalf("arm %s: %d %v\n%s", id, code, st, p.out.String())
				}
			}
			send := []string{"send", capPath, "--to", fmt.Sprintf("127.0.0.1:%d", port), "--timeout", "20s"}
			scan := func(id, profile string) map[string]any {
				t.Helper()
				arm(id, profile)
				if code := run(send); code != exitOK {
					t.Fatalf("send %s: exit status %d\n%s", id, code, p.out.String())
				}
				_, st := p.call("GET", "/v1/scans/"+id+"/wait?timeout=60", nil)
				return st
			}
			count := func(st map[string]any, key string) int {
				c, _ := st["counts"].(map[string]any)
				n, _ := c[key].(float64)
				return int(n)
			}
			// checkFaulted checks the file of the scan the fault struck.
			checkFaulted := func() {
				t.Helper()
				path := filepath.Join(dir, "s1.h5")
				r, err := writer.Open(path)
				if err != nil {
					t.Fatalf("the scan with the fault: %v\n%s", err, p.out.String())
				}
				records, err := r.Records()
				r.Close()
				c := frame.CountRecords(records)
				if err != nil || len(records) != 30 || c.OK != 30 {
					t.Errorf("the scan with the fault: %d frames recorded (%v), %v; want 30, all OK", len(records), c, err)
				}
				if code, out := runCaptured(t, "verify", path); code != exitOK {
					t.Errorf("verify of the scan with the fault: %d, want %d\n%s", code, exitOK, out)
				}
				if out := p.out.String(); !strings.Contains(out, "frames decode on the fallback backend") {
					t.Errorf("serve did not say the scan went on on the CPU:\n%s", out)
				}
				// The last launch the driver saw is the one that faulted.
				got := calls()
				if last := got[strings.LastIndex(got, "cuLaunchKernel"):]; !strings.Contains(strings.SplitN(last, "\n", 2)[0], "fault="+strconv.Itoa(tc.code)) {
					t.Errorf("a launch after the fault:\n%s", last)
				}
				if strings.Count(got, "cuModuleLoadDataEx") != 1 || strings.Contains(got, "cuDevicePrimaryCtxRetain sticky") {
					t.Errorf("a new context or module asked for after the fault:\n%s", got)
				}
			}

			if tc.flag == "" { // exit
				arm("s1", "default")
				sender := startProc(t, send...) // serve may go before it ends: its status is not judged
				if code := (&proc{cmd: p.cmd}).wait(t, lineBound); code != exitFailure {
					t.Errorf("serve after the GPU was lost: exit status %d, want %d\n%s", code, exitFailure, p.out.String())
				}
				sender.wait(t, lineBound)
				checkFaulted()
				if out := p.out.String(); !strings.Contains(out, "CUDA device lost") || !strings.Contains(out, "exiting to be restarted") {
					t.Errorf("serve did not say it lost the GPU and exits:\n%s", out)
				}
				return
			}

			st := scan("s1", "default")
			if st["state"] != "done" || count(st, "ok") != 30 {
				t.Errorf("the scan with the fault: %v\n%s", st, p.out.String())
			}
			checkFaulted()
			code, h := p.call("GET", "/v1/health", nil)
			if w := fmt.Sprint(h["warnings"]); code != http.StatusOK || !strings.Contains(w, "GPU was lost") || !strings.Contains(w, "decode on the CPU") {
				t.Errorf("health after the GPU was lost: %d %v", code, h)
			}
			if _, st := p.call("GET", "/v1/status", nil); !strings.Contains(fmt.Sprint(st["warnings"]), "GPU was lost") {
				t.Errorf("status after the GPU was lost: %v", st)
			}
			for _, s := range []struct{ id, profile string }{{"s2", "default"}, {"s3", "gpu"}} {
				st := scan(s.id, s.profile)
				if st["state"] != "done" || count(st, "ok") != 30 {
					b, _ := json.Marshal(st)
					t.Errorf("scan %s (profile %s) after the GPU was lost: %s\n%s", s.id, s.profile, b, p.out.String())
				}
				if code, out := runCaptured(t, "verify", filepath.Join(dir, s.id+".h5")); code != exitOK {
					t.Errorf("verify of %s: %d\n%s", s.id, code, out)
				}
			}
			// Serve stopped, so that its output is read once written.
			p.cmd.Process.Signal(os.Interrupt)
			p.cmd.Wait()
			out := p.out.String()
			if !strings.Contains(out, "CUDA device lost") || !strings.Contains(out, "the next scans decode on the CPU") {
				t.Errorf("serve did not warn of the lost GPU:\n%s", out)
			}
			if n := strings.Count(out, "scan decodes on the CPU"); n != 2 {
				t.Errorf("%d scans said they decode on the CPU, want 2:\n%s", n, out)
			}
			if got := calls(); strings.Count(got, "cuModuleLoadDataEx") != 1 {
				t.Errorf("the driver was asked for a new module:\n%s", got)
			}
		})
	}
}
