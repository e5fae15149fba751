//go:build cgo

package cuda_test

import (
	"strings"
	"testing"

	"h5ingest/gpu/internal/fakecuda"
)

// TestFakeDriver runs the device tests of this package against a fake
// libcuda.so.1 (package fakecuda), which runs the kernels on the host and
// logs the driver calls, and judges the log: the tests share the device's
// primary context, asked for blocking synchronisation before it is first
// retained and released as often as retained, and every table a kernel
// reads was uploaded on its stream or waited for before the launch.
func TestFakeDriver(t *testing.T) {
	if fakecuda.Child() {
		t.Skip("runs the other tests against the fake driver; this is that run")
	}
	tests := []string{"TestDevice", "TestElapsedAnyThread", "TestModule", "TestParity", "TestConcurrent", "TestRoundTrip"}
	out, calls := fakecuda.Run(t, "^("+strings.Join(tests, "|")+")$")
	for _, name := range tests {
		if !strings.Contains(out, "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass against the fake driver:\n%s", name, out)
		}
	}
	checkContext(t, calls)
	if err := fakecuda.CheckUploadOrder(calls); err != nil {
		t.Error(err)
	}
}

// checkContext checks that only the primary context was used, with
// blocking sync asked for before it was first retained, and released as
// often as retained.
func checkContext(t *testing.T, calls []fakecuda.Call) {
	t.Helper()
	retains, releases, flagsSet := 0, 0, false
	for _, c := range calls {
		switch c.Func {
		case "cuCtxCreate_v2", "cuCtxDestroy_v2":
			t.Errorf("%s: a context of its own, which a GPU in EXCLUSIVE_PROCESS mode refuses", c)
		case "cuDevicePrimaryCtxSetFlags_v2":
			flagsSet = c.Int("flags")&7 == 4
		case "cuDevicePrimaryCtxRetain":
			if retains == 0 && !flagsSet {
				t.Error("primary context retained before blocking sync (CU_CTX_SCHED_BLOCKING_SYNC) was set")
			}
			retains++
		case "cuDevicePrimaryCtxRelease_v2":
			releases++
		}
	}
	if retains == 0 || retains != releases {
		t.Errorf("primary context retained %d times, released %d times", retains, releases)
	}
}
