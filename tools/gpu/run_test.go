// Package gpu_test checks the GPU run kit (run.sh, check-binaries.sh)
// with fake binaries: the paths on which it must refuse, and say why,
// without a GPU.
package gpu_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"h5ingest/gpu/gputest"
)

// kit is a copy of the repository layout run.sh expects, with fake test
// binaries in bin/gpu and fake getconf and nvidia-smi first on PATH.
type kit struct {
	root, bin, tools string
}

// fakeTest is a test binary that prints what $FAKE_<NAME> says: pass,
// skip, fail, silent (exit 0, nothing printed) or nostart (the loader's
// complaint about glibc, exit 1). Asked for a benchmark, pass prints
// benchmark lines as the real binaries do on a GPU, skip those a machine
// without one prints (first touch only).
const fakeTest = `#!/bin/sh
name=$(basename "$0" .test | tr a-z- A-Z_)
eval mode=\${FAKE_$name:-pass}
bench=
while [ $# -gt 0 ]; do
	[ "$1" = -test.bench ] && bench=$2
	shift
done
case $mode in
pass | skip)
	case $bench in
	FirstTouch)
		echo 'BenchmarkFirstTouch/touch-16    1  1700000000 ns/op  315.6 touch-MB/s'
		[ $mode = pass ] && echo 'BenchmarkFirstTouch/pin-16    1  90000000 ns/op  5965 pin-MB/s' &&
			echo 'BenchmarkFirstTouch/register-16    1  80000000 ns/op  6710 register-MB/s'
		;;
	Kernels)
		[ $mode = pass ] || { echo '--- SKIP: BenchmarkKernels'; exit 0; }
		for f in bitplane1 bitplane1lfsr bitplane6 bitplane6lfsr bitplane12 bitplane12lfsr bitplane24 bitplane24lfsr \
			bitplane24lfsr/global-lut bitplane24lfsr/counts bitplane24lfsr/counts/global-lut packed12 packed24 u16le u32le \
			bitplane12lfsr/global-lut bitplane12lfsr/counts bitplane12lfsr/counts/global-lut; do
			echo "BenchmarkKernels/$f-16   20  1234567 ns/op  229312.12 MB/s  229.3 GB/s  0.8800 of-d2d  412.5 crc-GB/s  2.124e+04 d2d-traffic-GB/s  401.2 decode-GB/s  12.50 fold-µs  1650 shuffle-GB/s  1.869e+04 traffic-GB/s"
		done
		;;
	EndToEnd)
		[ $mode = pass ] || { echo '--- SKIP: BenchmarkEndToEnd'; exit 0; }
		echo '    bench_test.go:334: copies: host to device 52.1 GB/s, device to host 53.4 GB/s, device to device 1712 GB/s'
		for v in pinned pinned-shuffled ring module-2rounds module-1round pageable; do
			for f in bitplane24lfsr packed24 u32le; do
				echo "BenchmarkEndToEnd/$v/$f-16   20  9876543 ns/op  45859.33 MB/s  28.31 2x2-GB/s  45.86 GB/s  1712 d2d-GB/s  53.40 dtoh-GB/s  52.10 htod-GB/s  7.078 module-GB/s"
			done
		done
		;;
	Pipeline)
		for b in cpu cuda; do
			[ $mode = pass ] || [ $b = cpu ] || continue
			for src in go ring; do
				for sh in false true; do
					echo "BenchmarkPipeline/$b/source=$src/backend-shuffle=$sh-16   10  99999999 ns/op  16.00 cpus  10.51 GB/s  7.078 module-GB/s  1484 frames/s  123.0 setup-ms"
				done
			done
		done
		;;
	'')
		if [ $mode = pass ]; then
			printf '=== RUN   TestDevice\n    cuda_test.go:70: device "NVIDIA H200", sm_90, 132 SMs, 139.8 GiB; driver CUDA 12.8\n--- PASS: TestDevice (0.01s)\nPASS\n'
		else
			printf '=== RUN   TestDevice\n    cuda_test.go:23: needs a CUDA GPU: no CUDA device\n--- SKIP: TestDevice (0.00s)\nPASS\n'
		fi
		;;
	esac
	;;
bench) printf 'BenchmarkKernels/bitplane24-16  20  1234 ns/op  900.0 GB/s\nPASS\n' ;;
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
	write(t, filepath.Join(k.tools, "nvidia-smi"), "#!/bin/sh\necho \"$*\" >\"$FAKE_SMI_ARGS\"\n"+
		"echo 'name, driver_version, compute_mode, pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current, pcie.link.width.max'\n"+
		"echo 'NVIDIA H100, 550.54, Default, 5, 5, 16, 16'\n")
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

// TestFirstContact runs first-contact.sh with fake test binaries (as on a
// machine without a GPU, on one whose GPU works, and on one where a step
// fails beside a working GPU) and the h5ingest that make gpu-binaries
// packed, on a short bench; where a GPU works, h5ingest's cuda bench runs
// against the fake CUDA driver. Each run must end with its digest: under
// 8 KB, the last thing printed, holding the verdict and exit status, the
// GPU line of nvidia-smi, the device, first touch and the sizes it set,
// every step, and the CPU scaling line; where a GPU works, the copy rates,
// the 18 end-to-end rows, the kernel rows and the pipeline rows too.
// Without the archive it refuses, saying what to build.
func TestFirstContact(t *testing.T) {
	for _, tool := range []string{"sh", "tar", "df", "awk"} {
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
	short := []string{"FRAMES=4", "ROUNDS=1", "WORKERS=1,2", "CUDA_WORKERS=2", "PYTHON=/nonexistent/python3"}
	everyRun := []string{
		"===== first-contact digest\n",
		"\ngpu: NVIDIA H100, 550.54, Default, 5, 5, 16, 16\n",
		"\nfirst touch: 315.6 MB/s fresh memory touched",
		"\n  sized from it: FRAMES=4 (as given) ROUNDS=1; limits: run.sh ",
		"\n  device: ok\n  backends: ok\n  kernels: ok\n  end-to-end: ok\n",
		"\n  (name)                                   frames/s GB/s setup-ms\n",
		"\n  bench-cpu: ok, h5ingest bench --backend cpu --workers 1,2 (FRAMES=4 ROUNDS=1), in ",
		"\nbench-cpu:\n  scaling (pipeline time, median rounds): 1 worker ",
		"\n  one module at 1000 frames/s (7.08 GB/s of payload) needs ",
	}
	withGPU := []string{
		"\ndevice: device \"NVIDIA H200\", sm_90, 132 SMs, 139.8 GiB; driver CUDA 12.8\n",
		"MB/s fresh memory touched, 5965 MB/s page-locked afresh, 6710 MB/s registered in place\n",
		"\ncopies: host to device 52.1 GB/s, device to host 53.4 GB/s, device to device 1712 GB/s\n",
		"\nend-to-end, raw payload (one module 7.08 GB/s, a 2x2 array 28.3):\n  (name)                                   GB/s\n  EndToEnd/pinned/bitplane24lfsr           45.86\n",
		"\n  (name)                                   GB/s decode-GB/s crc-GB/s fold-µs shuffle-GB/s of-d2d\n",
		"\n  Kernels/bitplane24lfsr/counts/global-lut 229.3 401.2 412.5 12.50 1650 0.8800\n",
	}
	tests := []struct {
		name  string
		env   []string
		fake  bool // h5ingest's cuda bench runs against the fake driver
		code  int
		say   []string
		never []string
	}{
		{"no GPU", []string{"FAKE_GPU=skip", "FAKE_GPU_BACKENDS=skip", "FAKE_PIPELINE=skip"}, false, 4,
			append(slices.Clone(everyRun),
				"\nverdict: exit 4: everything ran, but no GPU answered\n",
				"\ndevice: no device answered: cuda_test.go:23: needs a CUDA GPU: no CUDA device\n",
				"MB/s fresh memory touched, - MB/s page-locked afresh",
				"\n  bench-cuda: not run: the device tests did not pass (run.sh exit 4)\n",
				"\ncopies: not measured\n"),
			[]string{"end-to-end, GB/s", "kernels (", "\nbench-cuda:\n"}},
		{"a GPU, a step failed", []string{"FAKE_PIPELINE=fail"}, false, 5,
			append(slices.Clone(withGPU),
				"\nverdict: exit 5: the GPU works (the device tests passed), but a step failed",
				"\n  pipeline: FAILED, exit 1\n",
				"\n  bench-cuda: FAILED, exit 1: "),
			nil},
		{"a GPU, everything ran", nil, true, 0,
			append(append(slices.Clone(everyRun), withGPU...),
				"\nverdict: exit 0: everything ran; the device tests passed on a GPU\n",
				"\n  pipeline: ok\n",
				"\n  Pipeline/cuda/source=ring/backend-shuffle=true 1484 10.51 123.0\n",
				"\n  bench-cuda: ok, h5ingest bench --backend cuda --workers 2 (FRAMES=4 ROUNDS=1), in ",
				"\nbench-cuda:\n  scaling (pipeline time, median rounds): 2 workers "),
			nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := newKit(t, "2.40")
			env := append(slices.Clone(short), tc.env...)
			if tc.fake {
				driver, _ := gputest.FakeDriver(t)
				env = append(env, driver...)
			}
			code, out, summary := k.firstContact(t, archive, env...)
			if code != tc.code {
				t.Errorf("exit %d, want %d:\n%s", code, tc.code, out)
			}
			b, err := os.ReadFile(filepath.Join(k.root, "out", "digest.txt"))
			if err != nil {
				t.Fatal(err)
			}
			digest := string(b)
			if len(digest) == 0 || len(digest) > 8000 {
				t.Errorf("digest of %d bytes, want some and at most 8000:\n%s", len(digest), digest)
			}
			t.Logf("digest: %d bytes", len(digest))
			if !strings.HasSuffix(out, digest) || !strings.HasSuffix(summary, digest) {
				t.Errorf("the digest is not what it prints last:\n%s", out)
			}
			if !strings.HasSuffix(digest, fmt.Sprintf("===== end of digest: exit %d\n", tc.code)) {
				t.Errorf("digest does not end with its exit status:\n%s", digest)
			}
			for _, s := range tc.say {
				if !strings.Contains(digest, s) {
					t.Errorf("digest does not say %q:\n%s", s, digest)
				}
			}
			for _, s := range tc.never {
				if strings.Contains(digest, s) {
					t.Errorf("digest says %q:\n%s", s, digest)
				}
			}
			if tc.code != 4 {
				if n := strings.Count(digest, "\n  EndToEnd/"); n != 18 {
					t.Errorf("%d end-to-end rows in the digest, want 18", n)
				}
				if n := strings.Count(digest, "\n  Kernels/"); n != 18 {
					t.Errorf("%d kernel rows in the digest, want 18", n)
				}
			}
			// The long tables come before the digest.
			if i := strings.Index(out, "h5ingest replay -> HDF5 bslz4"); i < 0 || i > len(out)-len(digest) {
				t.Errorf("the bench table is not printed before the digest:\n%s", out)
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
		})
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
