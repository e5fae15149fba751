package gputest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"h5ingest/gpu/internal/fakecuda"
)

// FakeDriver builds the fake CUDA driver of h5ingest's own tests (a
// libcuda.so.1 that runs the kernels on the host and logs its calls; see
// docs/gpu.md) into a temporary directory, and returns the environment
// that makes a process started from the test load it: LD_LIBRARY_PATH,
// and FAKECUDA_LOG, the log that FakeDriverCalls reads. Add
// FAKECUDA_FAULT_CODE and FAKECUDA_FAULT_LAUNCH to inject a sticky error.
// It skips t where there is no C compiler.
func FakeDriver(t testing.TB) (env []string, log string) {
	t.Helper()
	dir := t.TempDir()
	if err := fakecuda.Build(dir); err != nil {
		if strings.HasPrefix(err.Error(), "no C compiler") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	log = filepath.Join(dir, "calls.log")
	return []string{"LD_LIBRARY_PATH=" + dir + ":" + os.Getenv("LD_LIBRARY_PATH"), "FAKECUDA_LOG=" + log}, log
}

// FakeDriverCalls returns the calls the fake driver logged to log, one
// string each: the function, then its arguments as key=value words.
func FakeDriverCalls(log string) ([]string, error) {
	calls, err := fakecuda.ReadLog(log)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) { // nothing logged yet
			return nil, nil
		}
		return nil, fmt.Errorf("gputest: %w", err)
	}
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.String()
	}
	return out, nil
}
