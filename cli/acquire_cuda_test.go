package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"h5ingest/gpu/gputest"
	"h5ingest/scan/scantest"
)

// TestAcquireLoadsGPUAtStart runs acquire on the fake CUDA driver: the
// kernels are loaded (JIT-compiled) once, when the command starts, before
// any detector connects, and the scan decodes with that same module: no
// second load when the detector connects, as the pre-scan check and the
// scan each made before.
func TestAcquireLoadsGPUAtStart(t *testing.T) {
	env, log := gputest.FakeDriver(t)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "10")
	out := filepath.Join(t.TempDir(), "scan.h5")
	addr := scantest.FreeAddr(t)
	acq := startProc(t, "acquire", "--listen", addr, "-o", out, "--backend", "cuda", "--projections", "10", "--connect-timeout", "30s")
	calls := func() string {
		c, err := gputest.FakeDriverCalls(log)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(c, "\n")
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(calls(), "cuModuleLoadDataEx"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no module loaded before the detector connected:\n%s", calls())
		}
	}
	if code := run([]string{"send", capPath, "--to", addr, "--timeout", "20s"}); code != exitOK {
		t.Fatalf("send: exit status %d", code)
	}
	if code := acq.wait(t, 30*time.Second); code != exitOK {
		t.Fatalf("acquire: exit status %d\n%s%s", code, acq.stdout.String(), acq.stderr.String())
	}
	got := calls()
	if n := strings.Count(got, "cuModuleLoadDataEx"); n != 1 {
		t.Errorf("kernels loaded %d times in one acquire, want once, at its start", n)
	}
	// The check of a frame at the load, then at least a decode call per
	// frame batch of the scan.
	if n := strings.Count(got, "cuLaunchKernel"); n < 3+3*3 {
		t.Errorf("%d kernel launches: the scan did not decode on the GPU", n)
	}
	if r, l := strings.Count(got, "cuDevicePrimaryCtxRetain"), strings.Count(got, "cuDevicePrimaryCtxRelease_v2"); r != 1 || l != 1 {
		t.Errorf("primary context retained %d times, released %d times, want once each", r, l)
	}
	if code, vout := runCaptured(t, "verify", out); code != exitOK {
		t.Errorf("verify: %d\n%s", code, vout)
	}
}
