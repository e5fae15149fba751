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

	"h5ingest/gpu/gputest"
)

// serveFaultLaunch is the kernel launch the fake driver faults at in
// TestServeCUDASticky: serve's check of the kernels at start-up takes
// launches 1 to 3, and each decode call of the first scan (up to 4 frames)
// three more, so launch 14 falls in the CRC kernel of its fourth call, with
// at least three frames decoded before and more than twenty-two to come.
const serveFaultLaunch = 14

// TestServeCUDASticky runs serve on the fake CUDA driver, which faults
// with a sticky error in the middle of the first scan: that scan ends
// incomplete with every frame recorded (those decoded before the fault
// OK, the rest missing), its file verifies as incomplete, and a second
// scan armed on the same serve is good: on a new context, checked on a
// frame before the scan, where the driver allows one, and on the CPU
// with a warning where the error outlives the context. The kernels were
// loaded at start-up, before any arm, with the compute cache asked for.
func TestServeCUDASticky(t *testing.T) {
	for _, tc := range []struct {
		code    int
		persist bool
	}{{700, false}, {719, true}} {
		t.Run(fmt.Sprintf("code=%d/persist=%v", tc.code, tc.persist), func(t *testing.T) {
			env, log := gputest.FakeDriver(t)
			env = append(env, "FAKECUDA_FAULT_CODE="+strconv.Itoa(tc.code), "FAKECUDA_FAULT_LAUNCH="+strconv.Itoa(serveFaultLaunch))
			if tc.persist {
				env = append(env, "FAKECUDA_FAULT_PERSIST=1")
			}
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
			p := startServe(t, "", "--cuda-cache", cache, "--data-root", dir, "--profiles", profiles)
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

			scan := func(id string) map[string]any {
				t.Helper()
				req := armRequest(id, dir, 30) // the default profile: backend auto
				if code, st := p.call("POST", "/v1/scans", req); code != http.StatusCreated {
					t.Fatalf("arm %s: %d %v\n%s", id, code, st, p.out.String())
				}
				if code := run([]string{"send", capPath, "--to", fmt.Sprintf("127.0.0.1:%d", port), "--timeout", "20s"}); code != exitOK {
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

			st := scan("s1")
			if st["state"] != "incomplete" || count(st, "ok") < 3 || count(st, "ok") >= 30 || count(st, "ok")+count(st, "missing") != 30 {
				t.Errorf("the scan with the fault: %v\n%s", st, p.out.String())
			}
			if code, out := runCaptured(t, "verify", filepath.Join(dir, "s1.h5")); code != exitIncomplete {
				t.Errorf("verify of the scan with the fault: %d, want %d\n%s", code, exitIncomplete, out)
			}

			st = scan("s2")
			if st["state"] != "done" || count(st, "ok") != 30 {
				t.Errorf("the scan after the fault: %v\n%s", st, p.out.String())
			}
			if code, out := runCaptured(t, "verify", filepath.Join(dir, "s2.h5")); code != exitOK {
				t.Errorf("verify of the scan after the fault: %d\n%s", code, out)
			}
			if tc.persist {
				// A profile that asks for the GPU alone is refused, saying why.
				req := armRequest("g1", dir, 30)
				req["profile"] = "gpu"
				code, body := p.call("POST", "/v1/scans", req)
				if b, _ := json.Marshal(body); code != http.StatusUnprocessableEntity || !strings.Contains(string(b), "restart h5ingest") {
					t.Errorf("arm of a cuda profile after the device was lost for good: %d %s", code, b)
				}
			}
			// Serve stopped, so that its output is read once written.
			p.cmd.Process.Signal(os.Interrupt)
			p.cmd.Wait()
			got, out := calls(), p.out.String()
			if !strings.Contains(out, "CUDA device lost") {
				t.Errorf("serve did not warn of the lost device:\n%s", out)
			}
			if tc.persist {
				if !strings.Contains(out, "backend=cpu") && !strings.Contains(out, `"backend":"cpu"`) || !strings.Contains(out, "restart h5ingest") {
					t.Errorf("serve did not warn that the second scan decodes on the CPU:\n%s", out)
				}
				return
			}
			if !strings.Contains(got, "cuDevicePrimaryCtxReset_v2") || strings.Count(got, "cuModuleLoadDataEx") != 2 {
				t.Errorf("no new context and module after the fault:\n%s", got)
			}
			if !strings.Contains(out, "CUDA context recreated") {
				t.Errorf("serve did not say it made a new context:\n%s", out)
			}
			// The second scan decoded on the new context: launches after the reset.
			if after := got[strings.LastIndex(got, "cuDevicePrimaryCtxReset_v2"):]; strings.Count(after, "cuLaunchKernel") < 3+3*8 {
				t.Errorf("%d launches after the reset, want the check's and the scan's", strings.Count(after, "cuLaunchKernel"))
			}
		})
	}
}
