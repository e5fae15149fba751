//go:build cgo

package gpu

import (
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"h5ingest/gpu/cuda"
	"h5ingest/gpu/internal/fakecuda"
)

// TestPreloadTimes runs TestPreloadTimesChild in a child process whose
// driver starts with an empty compute cache of its own (CUDA_CACHE_PATH,
// read once per process), and prints what it logged: how long the kernels
// took to load the first time, JIT-compiled, and the second, from the
// cache. On a GPU machine these are the figures of a serve's start, cold
// and warm; nothing is asserted of them. It skips where no GPU answers.
func TestPreloadTimes(t *testing.T) {
	if fakecuda.Child() || os.Getenv("H5INGEST_PRELOAD_CHILD") != "" {
		t.Skip("the parent of TestPreloadTimesChild")
	}
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no CUDA device (%d devices, %v)", n, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestPreloadTimesChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "H5INGEST_PRELOAD_CHILD=1", "CUDA_CACHE_PATH="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestPreloadTimesChild") {
		t.Fatalf("TestPreloadTimesChild: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "load of the kernels") {
			t.Log(strings.TrimSpace(line))
		}
	}
}

// TestPreloadTimesChild runs under TestPreloadTimes: it opens the GPU
// twice with Preload, giving it back between, and logs each load's time.
func TestPreloadTimesChild(t *testing.T) {
	if os.Getenv("H5INGEST_PRELOAD_CHILD") == "" {
		t.Skip("runs under TestPreloadTimes, with a compute cache of its own")
	}
	load := regexp.MustCompile(`module_load=(\S+)`)
	for _, round := range []string{"first (compiled)", "second (from the cache)"} {
		var logged syncBuffer
		release, err := Preload("cuda", Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
		if err != nil {
			t.Fatal(err)
		}
		release()
		m := load.FindStringSubmatch(logged.String())
		if m == nil {
			t.Fatalf("no load time in Preload's line:\n%s", logged.String())
		}
		t.Logf("%s load of the kernels: %s", round, m[1])
	}
}
