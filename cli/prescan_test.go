package cli

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"h5ingest/scan/scantest"
	"h5ingest/source/fabric"
	"h5ingest/writer"
)

// TestAcquirePreScanFails checks that acquire stops before listening
// when a check fails: exit status 1, each failure on a line of its own,
// a port taken named as such with what to do.
func TestAcquirePreScanFails(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	out := filepath.Join(t.TempDir(), "none", "scan.h5")
	start := time.Now()
	cmd := command("acquire", "--listen", busy.Addr().String(), "-o", out, "--backend", "cpu",
		"--projections", "10", "--connect-timeout", "20s")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	_ = cmd.Run() // a failed check is an exit status, checked below
	code, stderr := cmd.ProcessState.ExitCode(), errOut.String()
	if code != exitFailure {
		t.Fatalf("exit status %d, want %d\n%s", code, exitFailure, stderr)
	}
	for _, want := range []string{"pre-scan check: output directory " + filepath.Dir(out) + " does not exist\n",
		"pre-scan check: port taken: listen address " + busy.Addr().String() + " is not free",
		"; another process listens on the detector's port: stop it (ss -ltnp names it), or give another (source.port)\n"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("acquire took %v to fail its checks", d)
	}
}

// TestPreScanRefusesExistingFiles checks that replay and acquire refuse an
// existing output file (or a scan's leftover temporary file) before they
// read a frame: acquire must not keep the detector waiting for a scan it
// cannot write. With --overwrite the check passes, unless the output is a
// directory, which no scan replaces.
func TestPreScanRefusesExistingFiles(t *testing.T) {
	t.Parallel()
	path, _ := simulate(t, "--frames", "2")
	dir := t.TempDir()
	out, left := filepath.Join(dir, "scan.h5"), filepath.Join(dir, "left.h5")
	rec := filepath.Join(dir, "earlier.pmcap")
	if err := os.WriteFile(rec, []byte("earlier capture"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{out, writer.TempName(left)} {
		if err := os.WriteFile(f, []byte("earlier scan"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		args []string
		want string // on stderr
	}{
		{"replay", []string{"replay", path, "-o", out}, "pre-scan check: output file " + out + " exists (give --overwrite to replace it)\n"},
		{"replay over an unfinished scan", []string{"replay", path, "-o", left}, "pre-scan check: " + writer.TempName(left) + " exists"},
		{"replay over a directory", []string{"replay", path, "-o", dir, "--overwrite"}, "pre-scan check: output file " + dir + " is a directory\n"},
		{"acquire", []string{"acquire", "--listen", scantest.FreeAddr(t), "-o", out, "--connect-timeout", "20s"},
			"pre-scan check: output file " + out + " exists (give --overwrite to replace it)\n"},
		{"acquire recording over a capture", []string{"acquire", "--listen", scantest.FreeAddr(t), "-o", filepath.Join(dir, "new.h5"),
			"--record", rec, "--connect-timeout", "20s"}, "pre-scan check: capture file " + rec + " exists (give --overwrite to replace it)\n"},
		{"acquire recording into a directory", []string{"acquire", "--listen", scantest.FreeAddr(t), "-o", filepath.Join(dir, "new.h5"),
			"--record", dir, "--overwrite", "--connect-timeout", "20s"}, "pre-scan check: capture file " + dir + " is a directory\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			code, _, stderr := runProcess(t, tt.args...)
			if code != exitFailure || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit status %d, stderr:\n%s\nwant status %d and %q", code, stderr, exitFailure, tt.want)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v to refuse the existing file", d)
			}
		})
	}
	if b, _ := os.ReadFile(out); string(b) != "earlier scan" {
		t.Error("the existing file changed")
	}
	if b, _ := os.ReadFile(rec); string(b) != "earlier capture" {
		t.Error("the existing capture changed")
	}
	if code, _, stderr := runProcess(t, "replay", path, "-o", left, "--overwrite"); code != exitOK {
		t.Errorf("replay --overwrite over an unfinished scan: exit status %d\n%s", code, stderr)
	}
}

// TestAcquireMissingProvider runs the README's first acquire, whose
// profile listens with verbs, on a machine without RDMA: the pre-scan check
// says in one line which providers there are and suggests --provider tcp,
// exit status 1, before anything is listened on or written. It used to
// pass the checks and fail in fi_getinfo with "No data available".
func TestAcquireMissingProvider(t *testing.T) {
	t.Parallel()
	addr := scantest.FreeAddr(t)
	if slices.Contains(fabric.Providers(addr), "verbs") {
		t.Skip("this machine has an RDMA device: verbs is there")
	}
	dir := t.TempDir()
	code, stderr, took := runTimed(t, "acquire", "--profile", "pimega-135d-tomo", "--scan-id", "s0042",
		"--output-dir", dir, "--listen", addr, "--connect-timeout", "20s", "--backend", "cpu", "--projections", "10")
	if code != exitFailure {
		t.Fatalf("exit status %d, want %d\n%s", code, exitFailure, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "h5ingest: pre-scan check: libfabric provider verbs cannot listen on "+addr) ||
		!strings.Contains(lines[0], "providers that can here: tcp") || !strings.Contains(lines[0], "give --provider tcp") {
		t.Errorf("want one line naming the providers here and suggesting --provider tcp:\n%s", stderr)
	}
	if took > 10*time.Second {
		t.Errorf("took %v", took)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("files made: %v", entries)
	}
	// With --provider tcp, as the line says, the same command passes its
	// checks and waits for the detector (here: for a second, in vain).
	code, stderr, _ = runTimed(t, "acquire", "--profile", "pimega-135d-tomo", "--scan-id", "s0042",
		"--output-dir", dir, "--listen", addr, "--connect-timeout", "1s", "--backend", "cpu", "--projections", "10", "--provider", "tcp")
	if code != exitFailure || strings.Contains(stderr, "pre-scan check") || !strings.Contains(stderr, "wait for a sender") {
		t.Errorf("with --provider tcp: exit status %d\n%s", code, stderr)
	}
}

// runTimed runs h5ingest as a process and returns its exit status,
// standard error and how long it took.
func runTimed(t *testing.T, args ...string) (int, string, time.Duration) {
	t.Helper()
	cmd := command(args...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	start := time.Now()
	_ = cmd.Run() // the exit status is checked by the caller
	return cmd.ProcessState.ExitCode(), errOut.String(), time.Since(start)
}
