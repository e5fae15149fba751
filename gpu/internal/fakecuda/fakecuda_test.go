package fakecuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckUploadOrder holds the judge of upload order to logs of orders
// that are and are not safe.
func TestCheckUploadOrder(t *testing.T) {
	const global = "cuModuleGetGlobal_v2 name=h5_lfsr12 ptr=1000 n=100\n"
	tests := []struct {
		name, log string
		ok        bool
	}{
		{"legacy copy, then a launch on a stream", "cuMemcpyHtoD_v2 dst=1000 n=100 stream=0\ncuLaunchKernel name=h5_decode stream=5", false},
		{"legacy copy, context synchronised", "cuMemcpyHtoD_v2 dst=1000 n=100 stream=0\ncuCtxSynchronize\ncuLaunchKernel name=h5_decode stream=5", true},
		{"copy on the launch's stream", "cuMemcpyHtoDAsync_v2 dst=1050 n=10 stream=5\ncuLaunchKernel name=h5_decode stream=5", true},
		{"copy on another stream", "cuMemcpyHtoDAsync_v2 dst=1000 n=100 stream=4\ncuLaunchKernel name=h5_decode stream=5", false},
		{"copy on another stream, waited for", "cuMemcpyHtoDAsync_v2 dst=1000 n=100 stream=4\ncuStreamSynchronize stream=4\ncuLaunchKernel name=h5_decode stream=5", true},
		{"event after the copy", "cuMemcpyHtoDAsync_v2 dst=1000 n=100 stream=4\ncuEventRecord event=9 stream=4\ncuEventSynchronize event=9\ncuLaunchKernel name=h5_decode stream=5", true},
		{"event before the copy", "cuEventRecord event=9 stream=4\ncuMemcpyHtoDAsync_v2 dst=1000 n=100 stream=4\ncuEventSynchronize event=9\ncuLaunchKernel name=h5_decode stream=5", false},
		{"copy outside the globals", "cuMemcpyHtoDAsync_v2 dst=5000 n=100 stream=4\ncuLaunchKernel name=h5_decode stream=5", true},
	}
	for _, tc := range tests {
		path := filepath.Join(t.TempDir(), "log")
		if err := os.WriteFile(path, []byte(global+tc.log+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		calls, err := ReadLog(path)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckUploadOrder(calls)
		if (err == nil) != tc.ok {
			t.Errorf("%s: CheckUploadOrder = %v, want ok %v", tc.name, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "may run before the upload") {
			t.Errorf("%s: error %q does not say what is wrong", tc.name, err)
		}
	}
}

// TestBuild checks that the fake driver compiles with the kernels' source.
func TestBuild(t *testing.T) {
	dir := t.TempDir()
	if err := Build(dir); err != nil {
		if strings.HasPrefix(err.Error(), "no C compiler") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "libcuda.so.1")); err != nil {
		t.Fatal(err)
	}
}
