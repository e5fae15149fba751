package cli

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"h5ingest/scan/scantest"
	"h5ingest/source/capture"
	"h5ingest/version"
)

// TestInspectLabelsFrameNumbers checks that the problems line says which
// numbers are frame numbers ("missing frames 1, 3"), not "1 missing",
// which reads as a count.
func TestInspectLabelsFrameNumbers(t *testing.T) {
	path, _ := simulate(t, "--frames", "8", "--missing", "1,3,4", "--corrupt", "6")
	out := filepath.Join(t.TempDir(), "scan.h5")
	if code, stdout := runCaptured(t, "replay", path, "-o", out); code != exitIncomplete {
		t.Fatalf("replay exit status %d\n%s", code, stdout)
	}
	code, stdout := runCaptured(t, "inspect", out)
	if want := "  problems      missing frames 1, 3-4; crc mismatch frame 6\n"; code != exitOK || !strings.Contains(stdout, want) {
		t.Errorf("inspect exit status %d, want a line %q:\n%s", code, want, stdout)
	}
}

// TestInspectCapture checks that inspect of a .pmcap summarises the
// capture (it used to fail with an HDF5 error): who wrote it, its plan,
// each module's frames; of a capture cut short, what it holds up to the
// cut, and exit status 3.
func TestInspectCapture(t *testing.T) {
	path, _ := simulate(t, "--darks", "1", "--flats", "1", "--projections", "4", "--duplicate", "2", "--missing", "5")
	code, stdout := runCaptured(t, "inspect", path)
	for _, want := range []string{
		path + "\n",
		"  capture       written by h5ingest simulate ",
		`profile "simulated"`,
		"  plan          1 darks, 1 flats, 4 projections over 0..180 degrees\n",
		"  records       6 frames of 1 module,",
		"  module 0      6 frames, frame numbers 0 to 4 (1 copy of a number seen before), 3x2 chips of 32x16, bitplane 24-bit lfsr",
	} {
		if code != exitOK || !strings.Contains(stdout, want) {
			t.Errorf("inspect exit status %d, want %q:\n%s", code, want, stdout)
		}
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, info.Size()-100); err != nil {
		t.Fatal(err)
	}
	code, stdout = runCaptured(t, "inspect", path)
	if code != exitIncomplete || !strings.Contains(stdout, "  records       5 frames of 1 module") || !strings.Contains(stdout, "  cut short     ") {
		t.Errorf("inspect of a capture cut short: exit status %d\n%s", code, stdout)
	}
}

// TestMasterAbsentModules writes a master before any module file exists:
// master warns that none does, and inspect of the master says "file
// absent" for each (it used to read their frames as missing, or fail).
func TestMasterAbsentModules(t *testing.T) {
	profile := arrayProfile(t)
	dir := t.TempDir()
	t.Setenv("H5INGEST_OUTPUT_DIRECTORY", dir)
	code, stdout, stderr := runProcess(t, append([]string{"master", "--profile", profile, "--scan-id", "s8"}, arrayPlan...)...)
	if code != exitOK || !strings.Contains(stderr, "h5ingest: warning: no module file exists yet ("+filepath.Join(dir, "s8_mod0.h5")) {
		t.Fatalf("master exit status %d, want 0 with a warning\n%s%s", code, stdout, stderr)
	}
	code, stdout = runCaptured(t, "inspect", filepath.Join(dir, "s8_master.h5"))
	if code != exitOK || strings.Count(stdout, ": file absent") != len(arrayModules) {
		t.Errorf("inspect exit status %d, want every module's file absent:\n%s", code, stdout)
	}
}

// TestVersion checks --version, and that the version is in the files a
// scan writes (the root's creator attribute, the master's too) and in the
// captures simulate writes.
func TestVersion(t *testing.T) {
	code, stdout := runCaptured(t, "--version")
	if want := "h5ingest " + version.String() + "\n"; code != exitOK || stdout != want {
		t.Errorf("--version: exit status %d, %q, want %q", code, stdout, want)
	}
	path, _ := simulate(t, "--frames", "2")
	if meta := captureMetadata(t, path); meta.Software != "h5ingest simulate "+version.String() {
		t.Errorf("capture software %q", meta.Software)
	}
	var got string
	if ok, err := captureMetadata(t, path).Get(capture.KeyVersion, &got); !ok || err != nil || got != version.String() {
		t.Errorf("capture version %q, %v, %v", got, ok, err)
	}
	out := filepath.Join(t.TempDir(), "scan.h5")
	if code, stdout := runCaptured(t, "replay", path, "-o", out); code != exitOK {
		t.Fatalf("replay exit status %d\n%s", code, stdout)
	}
	py := scantest.Python(t, "h5py")
	o, err := exec.Command(py, "-c", "import h5py, sys; print(h5py.File(sys.argv[1], 'r').attrs['creator'])", out).CombinedOutput()
	if want := "h5ingest " + version.String(); err != nil || strings.TrimSpace(string(o)) != want {
		t.Errorf("creator attribute %q (%v), want %q", o, err, want)
	}
}

// TestInspectDamagedFile checks that inspect (summary and --png) and
// verify end at once with exit status 1 on files that are not whole HDF5
// files: a file two scans wrote at once, a file whose superblock is
// damaged, and a named pipe. inspect opened every file as a SWMR reader,
// which retries damaged metadata for minutes (the file two scans wrote
// hung it for more than 100 s), and it opened a named pipe, which waits
// for a writer forever.
func TestInspectDamagedFile(t *testing.T) {
	dir := t.TempDir()
	twoWriters := filepath.Join(dir, "two-writers.h5")
	gunzipTo(t, "testdata/two-writers.h5.gz", twoWriters)
	superblock := filepath.Join(dir, "superblock.h5")
	writeTinyScan(t, superblock, 10)
	b, err := os.ReadFile(superblock)
	if err != nil {
		t.Fatal(err)
	}
	b[29] ^= 0xff // inside the superblock, under its checksum
	if err := os.WriteFile(superblock, b, 0o644); err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(dir, "pipe.h5")
	if err := syscall.Mkfifo(pipe, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{twoWriters, superblock, pipe} {
		for _, args := range [][]string{{"inspect", path}, {"inspect", path, "--png", "0", "-o", filepath.Join(dir, "f.png")}, {"verify", path}} {
			cmd := command(args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			timer := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
			cmd.Wait()
			timer.Stop()
			ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
			if d := time.Since(start); ws.Signaled() || ws.ExitStatus() != exitFailure || d > 20*time.Second {
				t.Errorf("%s %s: %v after %v, want exit status %d at once:\n%s", args[0], filepath.Base(path), ws, d, exitFailure, &stderr)
			}
		}
	}
}

// gunzipTo writes the gzip file from, decompressed, to path.
func gunzipTo(t *testing.T, from, path string) {
	t.Helper()
	gz, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer gz.Close()
	zr, err := gzip.NewReader(gz)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, zr); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
