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

// firstContact runs first-contact.sh in k with the packed h5ingest of
// archive (none if "") and env, and returns its exit status, its output
// and its summary file.
func (k *kit) firstContact(t *testing.T, archive string, env ...string) (int, string, string) {
	t.Helper()
	script, err := os.ReadFile("first-contact.sh")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(k.root, "tools", "gpu", "first-contact.sh"), string(script))
	if archive != "" {
		b, err := os.ReadFile(archive)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(k.bin, "h5ingest.tar.gz"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(k.root, "out")
	cmd := exec.Command("sh", filepath.Join(k.root, "tools", "gpu", "first-contact.sh"))
	cmd.Env = append(os.Environ(), "PATH="+k.tools+":"+os.Getenv("PATH"), "OUT="+out,
		"FAKE_SMI_ARGS="+filepath.Join(k.root, "smi-args"), "TMPDIR="+k.root)
	cmd.Env = append(cmd.Env, env...)
	b, err := cmd.CombinedOutput()
	code := 0
	if e, ok := err.(*exec.ExitError); ok {
		code = e.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	summary, _ := os.ReadFile(filepath.Join(out, "summary.txt"))
	return code, string(b), string(summary)
}

// TestFirstContactNoGPU runs first-contact.sh on a machine with no GPU,
// with the h5ingest that make gpu-binaries packed and a short bench: run.sh's
// device tests skip, the CPU bench's own rows still run, the Python rows it
// cannot run are named, the cuda bench is left out, and the exit status
// says "no GPU". Without the archive it refuses, saying what to build.
func TestFirstContactNoGPU(t *testing.T) {
	for _, tool := range []string{"sh", "tar", "df"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	k := newKit(t, "2.40")
	code, out, _ := k.firstContact(t, "")
	if code != 2 || !strings.Contains(out, "h5ingest.tar.gz missing: run make gpu-binaries") {
		t.Errorf("no archive: exit %d, want 2 saying what to build:\n%s", code, out)
	}

	archive := filepath.Join("..", "..", "bin", "gpu", "h5ingest.tar.gz")
	if _, err := os.Stat(archive); err != nil {
		t.Skip("no bin/gpu/h5ingest.tar.gz: run make gpu-binaries (make test does)")
	}
	if testing.Short() {
		t.Skip("runs h5ingest bench")
	}
	code, out, summary := k.firstContact(t, archive, "FAKE_GPU=skip",
		"FRAMES=4", "ROUNDS=1", "WORKERS=1,2", "PYTHON=/nonexistent/python3")
	if code != 4 {
		t.Errorf("exit %d, want 4 (no GPU):\n%s", code, out)
	}
	for _, s := range []string{
		"run.sh: exit 4 (every step ran, no GPU answered)",
		"gpu: NVIDIA H100, 550.54, Default",
		"bench-cpu: h5ingest bench --backend cpu --workers 1,2",
		"h5ingest replay, GOMAXPROCS=1 (1 worker)",
		"h5ingest writer alone, chunks precompressed",
		"reference: h5py + hdf5plugin bslz4, defaults: /nonexistent/python3 cannot run",
		"bench-cuda: not run: run.sh found no working GPU (exit 4)",
		"first-contact: exit 4: everything ran, but no GPU answered",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("output does not say %q:\n%s", s, out)
		}
	}
	if !strings.HasSuffix(out, summary) || summary == "" {
		t.Errorf("the summary is not what it prints last:\n%s", out)
	}
	entries, err := os.ReadDir(filepath.Join(k.root, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) > 8 {
		t.Errorf("%d files under $OUT; a call brings back 8 at most", len(entries))
	}
	if left, _ := filepath.Glob(filepath.Join(k.root, "first-contact.*")); len(left) > 0 {
		t.Errorf("left its temporary folder behind: %v", left)
	}
}

// TestPackH5ingest checks what pack-h5ingest.sh packs: the binary, the
// libraries it needs but the glibc family, and the glibc they need; and
// that it fails, saying so, when the kit passes the limit a call carries.
func TestPackH5ingest(t *testing.T) {
	for _, tool := range []string{"sh", "ldd", "readelf", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	binary, err := filepath.EvalSymlinks("/usr/bin/python3") // links libm and libz beside libc
	if err != nil {
		t.Skip("needs /usr/bin/python3")
	}
	if deps, _ := exec.Command("ldd", binary).Output(); !strings.Contains(string(deps), "libz.so") || !strings.Contains(string(deps), "libm.so") {
		t.Skipf("%s does not link libz and libm: %s", binary, deps)
	}
	for _, tc := range []struct {
		name  string
		limit string
		ok    bool
		say   string
	}{
		{"fits", "64", true, "under 64 MiB"},
		{"over the limit", "0", false, "over the 0 MiB a call to the lent GPU machine carries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			archive := filepath.Join(dir, "gpu", "h5ingest.tar.gz")
			cmd := exec.Command("sh", "pack-h5ingest.sh", binary, archive)
			cmd.Env = append(os.Environ(), "KIT_LIMIT_MIB="+tc.limit)
			out, err := cmd.CombinedOutput()
			if (err == nil) != tc.ok || !strings.Contains(string(out), tc.say) {
				t.Fatalf("pack: %v, %s; want ok %v saying %q", err, out, tc.ok, tc.say)
			}
			if !tc.ok {
				return
			}
			list, err := exec.Command("tar", "-tzf", archive).Output()
			if err != nil {
				t.Fatal(err)
			}
			files := strings.Fields(string(list))
			has := func(prefix string) bool {
				for _, f := range files {
					if strings.HasPrefix(f, prefix) {
						return true
					}
				}
				return false
			}
			for _, want := range []string{"h5ingest", "glibc.txt", "lib/libz.so"} {
				if !has(want) {
					t.Errorf("archive lacks %s: %v", want, files)
				}
			}
			for _, glibc := range []string{"lib/libc.so", "lib/libm.so", "lib/ld-linux"} {
				if has(glibc) {
					t.Errorf("archive holds %s, which the machine's glibc provides: %v", glibc, files)
				}
			}
		})
	}
}
