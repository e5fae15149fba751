// Package gpu_test checks the GPU run kit (run.sh, check-binaries.sh)
// with fake binaries: the paths on which it must refuse, and say why,
// without a GPU.
package gpu_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// kit is a copy of the repository layout run.sh expects, with fake test
// binaries in bin/gpu and fake getconf and nvidia-smi first on PATH.
type kit struct {
	root, bin, tools string
}

// fakeTest is a test binary that prints what $FAKE_<NAME> says: pass,
// skip, fail, silent (exit 0, nothing printed) or nostart (the loader's
// complaint about glibc, exit 1).
const fakeTest = `#!/bin/sh
name=$(basename "$0" .test | tr a-z- A-Z_)
eval mode=\${FAKE_$name:-pass}
case $mode in
pass) printf '=== RUN   TestDevice\n--- PASS: TestDevice (0.01s)\nPASS\n' ;;
bench) printf 'BenchmarkKernels/bitplane24-16  20  1234 ns/op  900.0 GB/s\nPASS\n' ;;
skip) printf '=== RUN   TestDevice\n    cuda_test.go:23: needs a CUDA GPU: no CUDA device\n--- SKIP: TestDevice (0.00s)\nPASS\n' ;;
fail) printf '--- FAIL: TestDevice (0.01s)\nFAIL\n'; exit 1 ;;
silent) ;;
nostart) echo "$0: /lib/x86_64-linux-gnu/libc.so.6: version GLIBC_2.34 not found" >&2; exit 1 ;;
esac
`

func newKit(t *testing.T, glibc string) *kit {
	t.Helper()
	root := t.TempDir()
	k := &kit{root: root, bin: filepath.Join(root, "bin", "gpu"), tools: filepath.Join(root, "fakebin")}
	for _, d := range []string{k.bin, k.tools, filepath.Join(root, "tools", "gpu"), filepath.Join(root, "gpu", "cuda"), filepath.Join(root, "gpu"), filepath.Join(root, "pipeline")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script, err := os.ReadFile("run.sh")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "tools", "gpu", "run.sh"), string(script))
	for _, b := range []string{"gpu.test", "gpu-backends.test", "pipeline.test"} {
		write(t, filepath.Join(k.bin, b), fakeTest)
	}
	if err := os.WriteFile(filepath.Join(k.bin, "glibc.txt"), []byte("2.34\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(k.tools, "getconf"), "#!/bin/sh\necho 'glibc "+glibc+"'\n")
	write(t, filepath.Join(k.tools, "nvidia-smi"), "#!/bin/sh\necho \"$*\" >\"$FAKE_SMI_ARGS\"\necho 'name, driver_version, compute_mode'\necho 'NVIDIA H100, 550.54, Default'\n")
	return k
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
}

// run runs run.sh with env (FAKE_GPU=..., per binary) and returns its exit
// status and output.
func (k *kit) run(t *testing.T, env ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("sh", filepath.Join(k.root, "tools", "gpu", "run.sh"))
	cmd.Env = append(os.Environ(), "PATH="+k.tools+":"+os.Getenv("PATH"), "OUT="+filepath.Join(k.root, "out"),
		"FAKE_SMI_ARGS="+filepath.Join(k.root, "smi-args"))
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return 0, string(out)
	}
	if e, ok := err.(*exec.ExitError); ok {
		return e.ExitCode(), string(out)
	}
	t.Fatal(err)
	return 0, ""
}

// TestRunKit checks run.sh's verdicts: it passes only when every step ran
// and the device tests passed on a GPU, refuses an old glibc before running
// anything, fails a step that printed neither PASS nor SKIP, and records
// the GPU's compute mode, PCIe link and driver.
func TestRunKit(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("needs sh")
	}
	tests := []struct {
		name  string
		glibc string
		env   []string
		code  int
		say   []string
	}{
		{"all ran on a GPU", "2.36", []string{"FAKE_GPU=pass"}, 0, []string{"device: ok", "glibc 2.36 (the binaries need 2.34 or newer)"}},
		{"glibc too old", "2.31", nil, 3, []string{"this machine has glibc 2.31; the test binaries need glibc 2.34 or newer"}},
		{"glibc older in the minor only", "2.4", nil, 3, []string{"this machine has glibc 2.4;"}},
		{"binary cannot start", "2.36", []string{"FAKE_GPU=nostart"}, 1, []string{"device: FAILED, exit 1"}},
		{"binary prints nothing", "2.36", []string{"FAKE_GPU=silent"}, 1, []string{"device: FAILED, printed neither a passed nor a skipped test or benchmark"}},
		{"benchmarks print nothing", "2.36", []string{"FAKE_PIPELINE=silent"}, 1, []string{"pipeline: FAILED, printed neither"}},
		{"a test fails", "2.36", []string{"FAKE_GPU_BACKENDS=fail"}, 1, []string{"backends: FAILED, exit 1"}},
		{"benchmark lines count as run", "2.36", []string{"FAKE_PIPELINE=bench"}, 0, []string{"pipeline: ok"}},
		{"no GPU answers", "2.36", []string{"FAKE_GPU=skip"}, 4, []string{"device: ok", "no GPU measured: TestDevice did not pass (cuda_test.go:23: needs a CUDA GPU: no CUDA device)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newKit(t, tc.glibc)
			code, out := k.run(t, tc.env...)
			if code != tc.code {
				t.Errorf("exit %d, want %d:\n%s", code, tc.code, out)
			}
			for _, s := range tc.say {
				if !strings.Contains(out, s) {
					t.Errorf("output does not say %q:\n%s", s, out)
				}
			}
			ran := fileExists(filepath.Join(k.root, "out", "device.log"))
			if ran != (tc.code != 3) {
				t.Errorf("binaries ran: %v; want them run only on a new enough glibc", ran)
			}
			if tc.code == 3 {
				return
			}
			args, err := os.ReadFile(filepath.Join(k.root, "smi-args"))
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{"driver_version", "compute_mode", "pcie.link.gen.current", "pcie.link.width.current", "pcie.link.gen.max", "pcie.link.width.max"} {
				if !strings.Contains(string(args), q) {
					t.Errorf("nvidia-smi not asked for %s: %s", q, args)
				}
			}
		})
	}
}

// TestRunKitIncomplete checks that run.sh refuses a bin/gpu without the
// glibc note that make gpu-binaries writes.
func TestRunKitIncomplete(t *testing.T) {
	k := newKit(t, "2.36")
	if err := os.Remove(filepath.Join(k.bin, "glibc.txt")); err != nil {
		t.Fatal(err)
	}
	code, out := k.run(t)
	if code != 2 || !strings.Contains(out, "glibc.txt missing: run make gpu-binaries") {
		t.Errorf("exit %d, want 2 saying glibc.txt is missing:\n%s", code, out)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestCheckBinaries checks what make gpu-binaries refuses: a binary built
// without cgo, or linking more than libc; and what it writes for run.sh:
// the newest glibc symbol version the binaries need.
func TestCheckBinaries(t *testing.T) {
	for _, tool := range []string{"sh", "ldd", "readelf"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	libcOnly, err := exec.LookPath("true") // coreutils' true links only libc
	if err != nil {
		t.Skip("needs true")
	}
	more, _ := exec.LookPath("python3") // links libm and libz beside libc
	tests := []struct {
		name   string
		binary string
		cgo    string // what the fake go version -m says
		ok     bool
		say    string
	}{
		{"cgo, libc only", libcOnly, "CGO_ENABLED=1", true, "built with cgo, linking only libc; they need glibc "},
		{"built without cgo", libcOnly, "CGO_ENABLED=0", false, "not built with cgo"},
		{"links more than libc", more, "CGO_ENABLED=1", false, "needs more than libc"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.binary == "" {
				t.Skip("no binary linking more than libc here")
			}
			dir := t.TempDir()
			b, err := os.ReadFile(tc.binary)
			if err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, "gpu.test"), string(b))
			goTool := filepath.Join(dir, "go")
			write(t, goTool, "#!/bin/sh\nprintf '%s: go1.26\\n\\tbuild\\t"+tc.cgo+"\\n' \"$3\"\n")
			cmd := exec.Command("sh", "check-binaries.sh", dir)
			cmd.Env = append(os.Environ(), "GO="+goTool)
			out, err := cmd.CombinedOutput()
			if (err == nil) != tc.ok || !strings.Contains(string(out), tc.say) {
				t.Errorf("check-binaries: %v, %q; want ok %v saying %q", err, out, tc.ok, tc.say)
			}
			note, err := os.ReadFile(filepath.Join(dir, "glibc.txt"))
			if tc.ok && (err != nil || !strings.HasPrefix(string(note), "2.")) {
				t.Errorf("glibc.txt: %q, %v; want the glibc version the binaries need", note, err)
			}
		})
	}
}
