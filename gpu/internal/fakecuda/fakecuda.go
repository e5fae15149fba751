// Package fakecuda builds a stand-in for the CUDA driver, libcuda.so.1,
// and runs tests against it in a child process, for machines without a
// GPU. The fake (testdata/libcuda.c) models one device in EXCLUSIVE_PROCESS
// compute mode, keeps device memory in host memory and runs the real
// kernels, compiled as host C from package kernels' source, when they are
// launched; it logs every call that allocates, copies, launches or waits.
// The tests judge that log: which context was used, and whether every
// upload was ordered before the kernels that read it.
//
// It needs a C compiler (cc, gcc or clang) where the tests run; Build says
// so when there is none.
package fakecuda

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"h5ingest/gpu/kernels"
)

//go:embed testdata/libcuda.c
var source string

// childEnv marks the child process that Run starts.
const childEnv = "H5INGEST_FAKECUDA"

// Child reports whether this process is a child that Run started, with the
// fake driver in place of libcuda.so.1.
func Child() bool { return os.Getenv(childEnv) != "" }

// Build compiles the fake driver into dir/libcuda.so.1.
func Build(dir string) error {
	var cc string
	for _, c := range []string{os.Getenv("CC"), "cc", "gcc", "clang", "clang-16"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			cc = p
			break
		}
	}
	if cc == "" {
		return errors.New("no C compiler (cc, gcc or clang) to build the fake libcuda.so.1")
	}
	for name, text := range map[string]string{"libcuda.c": source, "decode.cu": kernels.Source, "host.h": kernels.HostShim} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return fmt.Errorf("build fake libcuda: %w", err)
		}
	}
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-std=gnu11", "-w",
		"-o", filepath.Join(dir, "libcuda.so.1"), filepath.Join(dir, "libcuda.c"), "-lpthread").CombinedOutput()
	if err != nil {
		return fmt.Errorf("build fake libcuda with %s: %w: %s", cc, err, out)
	}
	return nil
}

// Run builds the fake driver and runs the tests of this test binary that
// match run, with -test.short (the kernels run on the host, slowly), in a
// child process that loads it, with env (KEY=value: FAKECUDA_FAULT_CODE
// and FAKECUDA_FAULT_LAUNCH to inject a fault) added to its environment,
// and returns the child's output and the driver calls it logged. It skips
// t where no C compiler is found, and fails it where the child fails.
func Run(t testing.TB, run string, env ...string) (string, []Call) {
	t.Helper()
	dir := t.TempDir()
	if err := Build(dir); err != nil {
		if strings.HasPrefix(err.Error(), "no C compiler") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "calls.log")
	cmd := exec.Command(os.Args[0], "-test.run", run, "-test.v", "-test.count=1", "-test.short")
	cmd.Env = append(os.Environ(), childEnv+"=1", "FAKECUDA_LOG="+logPath,
		"LD_LIBRARY_PATH="+dir+":"+os.Getenv("LD_LIBRARY_PATH"))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child test %s against the fake driver: %v\n%s", run, err, out)
	}
	if !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("child test %s against the fake driver ran no test:\n%s", run, out)
	}
	calls, err := ReadLog(logPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(out), calls
}

// Call is one logged driver call: the function, and its arguments as
// key=value words.
type Call struct {
	Func string
	Args map[string]string
}

// Int returns the argument key as a number, 0 when absent.
func (c Call) Int(key string) uint64 {
	v, _ := strconv.ParseUint(c.Args[key], 10, 64)
	return v
}

// String returns the call as logged.
func (c Call) String() string {
	s := c.Func
	for k, v := range c.Args {
		s += " " + k + "=" + v
	}
	return s
}

// ReadLog parses the fake driver's log.
func ReadLog(path string) ([]Call, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read fake driver log: %w", err)
	}
	var calls []Call
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		c := Call{Func: f[0], Args: map[string]string{}}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			c.Args[k] = v
		}
		calls = append(calls, c)
	}
	return calls, nil
}

// CheckUploadOrder returns an error for the first kernel launch that may
// run before an upload into a module global has landed: one copied on
// another stream (the legacy stream included, which non-blocking streams
// do not wait for) and not waited for since, by a synchronisation of that
// stream, of the context, or of an event recorded on it after the copy.
func CheckUploadOrder(calls []Call) error {
	type span struct{ p, n uint64 }
	var globals []span
	inGlobal := func(p uint64) bool {
		for _, g := range globals {
			if p >= g.p && p < g.p+g.n {
				return true
			}
		}
		return false
	}
	pending := map[uint64]string{} // stream -> the global copy not yet waited for
	type mark struct {
		stream uint64
		upload string // the stream's pending upload when the event was recorded
	}
	events := map[uint64]mark{}
	for i, c := range calls {
		switch c.Func {
		case "cuModuleGetGlobal_v2":
			globals = append(globals, span{c.Int("ptr"), c.Int("n")})
		case "cuMemcpyHtoD_v2", "cuMemcpyHtoDAsync_v2":
			if inGlobal(c.Int("dst")) {
				pending[c.Int("stream")] = fmt.Sprintf("call %d: %s", i, c)
			}
		case "cuStreamSynchronize":
			delete(pending, c.Int("stream"))
		case "cuCtxSynchronize":
			clear(pending)
		case "cuEventRecord":
			events[c.Int("event")] = mark{c.Int("stream"), pending[c.Int("stream")]}
		case "cuEventSynchronize":
			if m, ok := events[c.Int("event")]; ok && m.upload != "" && pending[m.stream] == m.upload {
				delete(pending, m.stream)
			}
		case "cuLaunchKernel":
			for s, up := range pending {
				if s != c.Int("stream") || s == 0 {
					return fmt.Errorf("call %d: %s on stream %d may run before the upload on stream %d (%s) lands",
						i, c.Args["name"], c.Int("stream"), s, up)
				}
			}
		}
	}
	return nil
}
