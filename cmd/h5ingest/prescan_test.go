package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"h5ingest/config"
	"h5ingest/source/fabric"
	"h5ingest/writer"
)

func TestExpectedBytes(t *testing.T) {
	tests := []struct {
		frames, frameBytes int
		compression        string
		want               uint64
	}{
		{100, 1000, "bslz4", 55000},
		{100, 1000, "none", 110000},
		{0, 1000, "bslz4", 0},
		{2040, 1536 * 1536 * 4, "bslz4", 2040 * 1536 * 1536 * 2 * 11 / 10},
	}
	for _, tt := range tests {
		if got := expectedBytes(tt.frames, tt.frameBytes, tt.compression); got != tt.want {
			t.Errorf("expectedBytes(%d, %d, %s) = %d, want %d", tt.frames, tt.frameBytes, tt.compression, got, tt.want)
		}
	}
}

func TestPreScanChecks(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, "left.h5") // a scan to it was interrupted
	if err := os.WriteFile(writer.TempName(left), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cpu, cuda := config.Default(), config.Default()
	cpu.Backend, cuda.Backend = "cpu", "cuda"
	tests := []struct {
		name  string
		check func() error
		want  string // "" for no error
	}{
		{"space", func() error { return checkFreeSpace(dir, 1) }, ""},
		{"too little space", func() error { return checkFreeSpace(dir, 1<<62) }, "free space on " + dir},
		{"no such file system", func() error { return checkFreeSpace(filepath.Join(dir, "none"), 1) }, "no such file"},
		{"writable", func() error { return checkWritable(dir) }, ""},
		{"no directory", func() error { return checkWritable(filepath.Join(dir, "none")) }, "does not exist"},
		{"a file", func() error { return checkWritable(file) }, "is not a directory"},
		{"new file", func() error { return checkNew(filepath.Join(dir, "new.h5"), false) }, ""},
		{"file exists", func() error { return checkNew(file, false) }, "output file " + file + " exists (give --overwrite to replace it)"},
		{"unfinished scan's file", func() error { return checkNew(left, false) }, writer.TempName(left) + " exists: the temporary file of a scan to " + left},
		{"port free", func() error { return checkPortFree("tcp", freeAddr(t)) }, ""},
		{"port busy", func() error { return checkPortFree("tcp", busy.Addr().String()) }, "is not free"},
		{"verbs port not checked", func() error { return checkPortFree("verbs", busy.Addr().String()) }, ""},
		{"cpu backend", func() error { return checkBackend(cpu) }, ""},
		{"cuda backend", func() error { return checkBackend(cuda) }, "decode backend cuda"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.check()
			if tt.name == "cuda backend" && err == nil {
				t.Skip("this machine has a CUDA device")
			}
			if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("the writable check left %d files in %s", len(entries)-2, dir)
	}
}

// TestAcquirePreScanFails checks that acquire stops before listening
// when a check fails: exit status 1, each failure on a line of its own.
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
		"pre-scan check: listen address " + busy.Addr().String() + " is not free"} {
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
		{"acquire", []string{"acquire", "--listen", freeAddr(t), "-o", out, "--connect-timeout", "20s"},
			"pre-scan check: output file " + out + " exists (give --overwrite to replace it)\n"},
		{"acquire recording over a capture", []string{"acquire", "--listen", freeAddr(t), "-o", filepath.Join(dir, "new.h5"),
			"--record", rec, "--connect-timeout", "20s"}, "pre-scan check: capture file " + rec + " exists (give --overwrite to replace it)\n"},
		{"acquire recording into a directory", []string{"acquire", "--listen", freeAddr(t), "-o", filepath.Join(dir, "new.h5"),
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
	addr := freeAddr(t)
	if slices.Contains(fabric.Providers(addr), "verbs") {
		t.Skip("this machine has an RDMA device: verbs is there")
	}
	dir := t.TempDir()
	code, stderr, took := runIn(t, nil, "acquire", "--profile", "pimega-135d-tomo", "--scan-id", "s0042",
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
	code, stderr, _ = runIn(t, nil, "acquire", "--profile", "pimega-135d-tomo", "--scan-id", "s0042",
		"--output-dir", dir, "--listen", addr, "--connect-timeout", "1s", "--backend", "cpu", "--projections", "10", "--provider", "tcp")
	if code != exitFailure || strings.Contains(stderr, "pre-scan check") || !strings.Contains(stderr, "wait for a sender") {
		t.Errorf("with --provider tcp: exit status %d\n%s", code, stderr)
	}
}
