package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/registry"
	"h5ingest/scan/scantest"
	"h5ingest/source/sim"
	"h5ingest/stock"
	"h5ingest/writer"
)

// TestMain lets the test binary stand in for the h5ingest command, so that
// tests can run it as a process of its own (to kill it, or to read its file
// from another process while it writes), or for a detector module that the
// test paces (a held sender, heldsender_test.go).
//
// The tests that mostly wait (on such processes, a paced replay, a
// browser) run in parallel (t.Parallel). A test that sets the environment
// (t.Setenv, as smallDetector, expectFormat and operatorPort do: the
// command in-process and its children read the profile from it) or
// captures os.Stdout (runCaptured) cannot: go test runs it before any
// parallel test starts.
func TestMain(m *testing.M) {
	if err := stock.Register(stages); err != nil {
		panic(err) // an empty registry takes every built-in name
	}
	if os.Getenv(heldSenderEnv) == "1" {
		os.Exit(runHeldSender(os.Args[1:]))
	}
	if os.Getenv("H5INGEST_TEST_AS_COMMAND") == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// stages are the stages of the command the tests run: h5ingest's own.
var stages = registry.New()

// run runs the command line args as h5ingest does, returning its exit
// status.
func run(args []string) int { return Run(stages, args) }

// command returns an h5ingest process with the given arguments. It is
// killed if the test binary dies first (a test's timeout), so that no serve
// or acquire of a test outlives the run holding its ports.
func command(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "H5INGEST_TEST_AS_COMMAND=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// smallScan is the geometry the end-to-end tests simulate: small enough to
// be quick, with several chips in both directions so orientation matters.
var smallScan = []string{"--chips", "3x2", "--chip-size", "32x16"}

// simulate writes a capture with the given extra simulate flags and returns
// its path and ground truth.
func simulate(t *testing.T, args ...string) (string, *sim.Truth) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "scan.pmcap")
	all := append([]string{"simulate", "-o", path, "--seed", "11"}, smallScan...)
	if code := run(append(all, args...)); code != exitOK {
		t.Fatalf("simulate %v: exit status %d", args, code)
	}
	return path, scantest.Truth(t, path)
}

// runCaptured runs h5ingest in-process and returns its exit status and what
// it printed on standard output.
func runCaptured(t *testing.T, args ...string) (int, string) {
	t.Helper()
	old := os.Stdout
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout = wr
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(rd)
		done <- b
	}()
	code := run(args)
	wr.Close()
	os.Stdout = old
	return code, string(<-done)
}

// TestReplayCodecsAndLayouts writes every codec and both layouts and has
// h5py + hdf5plugin read them back.
func TestReplayCodecsAndLayouts(t *testing.T) {
	path, truth := simulate(t, "--darks", "1", "--flats", "1", "--projections", "4")
	status := scantest.ExpectedStatus(truth)
	tests := []struct {
		compression, layout string
		filters             string   // as h5dump -pH shows the first filter
		args                []string // more flags
	}{
		{"bslz4", writer.LayoutNXtomo, "FILTER_ID 32008", nil},
		{"bslz4", writer.LayoutNXtomo, "FILTER_ID 32008", []string{"--backend-shuffle"}},
		{"lz4", writer.LayoutNXtomo, "FILTER_ID 32004", nil},
		{"deflate", writer.LayoutNXtomo, "SHUFFLE", nil},
		{"none", writer.LayoutNXtomo, "NONE", nil},
		{"bslz4", writer.LayoutCXI, "FILTER_ID 32008", nil},
	}
	for _, tt := range tests {
		t.Run(strings.Join(append([]string{tt.compression, tt.layout}, tt.args...), "/"), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "scan.h5")
			args := append([]string{"replay", path, "-o", out, "--compression", tt.compression,
				"--layout", tt.layout, "--darks", "1", "--flats", "1", "--projections", "4"}, tt.args...)
			code, stdout := runCaptured(t, args...)
			if code != exitOK {
				t.Fatalf("replay exit status %d\n%s", code, stdout)
			}
			if code, stdout := runCaptured(t, "verify", out); code != exitOK {
				t.Fatalf("verify exit status %d\n%s", code, stdout)
			}
			if dump, err := exec.Command("h5dump", "-pH", "-d", stackPath(tt.layout), out).CombinedOutput(); err != nil {
				t.Errorf("h5dump: %v\n%s", err, dump)
			} else if !strings.Contains(string(dump), tt.filters) {
				t.Errorf("h5dump -pH does not show %q:\n%s", tt.filters, dump)
			}
			scantest.CrossCheck(t, out, tt.layout, truth, status, tt.compression == "bslz4" && tt.layout == writer.LayoutNXtomo)
		})
	}
}

func stackPath(layout string) string {
	if layout == writer.LayoutCXI {
		return "/entry_1/instrument_1/detector_1/data"
	}
	return "/entry/instrument/detector/data"
}

// TestReplayBitshuffleValues checks the bitshuffle filter's stored values in
// h5dump's words: element size 4 and LZ4 in the slots readers use.
func TestReplayBitshuffleValues(t *testing.T) {
	path, _ := simulate(t, "--frames", "2")
	out := filepath.Join(t.TempDir(), "scan.h5")
	if code, stdout := runCaptured(t, "replay", path, "-o", out); code != exitOK {
		t.Fatalf("replay exit status %d\n%s", code, stdout)
	}
	dump, err := exec.Command("h5dump", "-pH", "-d", stackPath(writer.LayoutNXtomo), out).CombinedOutput()
	if err != nil {
		t.Fatalf("h5dump: %v\n%s", err, dump)
	}
	if ok, _ := regexp.MatchString(`PARAMS \{ 0 5 4 0 2 \}`, string(dump)); !ok {
		t.Errorf("h5dump does not show cd_values 0 5 4 0 2:\n%s", dump)
	}
}

// TestVerifyFindsDamage damages one chunk behind h5ingest's back and checks
// that verify names the frame and fails.
func TestVerifyFindsDamage(t *testing.T) {
	py := scantest.Python(t, "h5py", "numpy")
	path, _ := simulate(t, "--frames", "4")
	out := filepath.Join(t.TempDir(), "scan.h5")
	if code, stdout := runCaptured(t, "replay", path, "-o", out, "--compression", "none"); code != exitOK {
		t.Fatalf("replay exit status %d\n%s", code, stdout)
	}
	script := `
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    d = f["/entry/instrument/detector/data"]
    mask, chunk = d.id.read_direct_chunk((2, 0, 0))
    b = bytearray(chunk)
    b[100] ^= 0x01
    d.id.write_direct_chunk((2, 0, 0), bytes(b), mask)
`
	if o, err := exec.Command(py, "-c", script, out).CombinedOutput(); err != nil {
		t.Fatalf("damage chunk: %v\n%s", err, o)
	}
	code, stdout := runCaptured(t, "verify", out)
	if code != exitFailure || !strings.Contains(stdout, "BAD frame 2: data CRC") {
		t.Errorf("verify exit status %d, want %d naming frame 2:\n%s", code, exitFailure, stdout)
	}
}

func TestReplayRefusesExistingFile(t *testing.T) {
	path, _ := simulate(t, "--frames", "2")
	out := filepath.Join(t.TempDir(), "scan.h5")
	if err := os.WriteFile(out, []byte("earlier scan"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _ := runCaptured(t, "replay", path, "-o", out); code == exitOK {
		t.Fatal("replay replaced an existing file without --overwrite")
	}
	if b, _ := os.ReadFile(out); string(b) != "earlier scan" {
		t.Fatal("the existing file changed")
	}
	if code, stdout := runCaptured(t, "replay", path, "-o", out, "--overwrite"); code != exitOK {
		t.Fatalf("replay --overwrite exit status %d\n%s", code, stdout)
	}
}

func TestReplayUsageErrors(t *testing.T) {
	path, _ := simulate(t, "--frames", "1")
	badProfile := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(badProfile, []byte("detector:\n  pixel_sise_m: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "x.h5")
	tests := [][]string{
		{"replay", path},
		{"replay", path, "-o", out, "--compression", "zip"},
		{"replay", path, "-o", out, "--layout", "nexus"},
		{"replay", path, "-o", out, "--backend", "fpga"},
		{"replay", path, "-o", out, "--profile", badProfile},
		{"replay", path, "-o", out, "--darks", "2"},
		{"replay", path, "-o", out, "--projections", "-1"},
		{"replay", path, "-o", out, "--fps", "-5"},
		{"replay", path, "-o", out, "--fps", "NaN"},
		{"replay", path, "-o", out, "--fps", "Inf"},
		{"send", path, "--to", "127.0.0.1:1", "--fps", "NaN"},
		{"send", path, "--to", "127.0.0.1:1", "--fps", "+Inf"},
		{"replay", "-o", out},
		{"replay", path, "-o", out, "--no-such-flag"},
		{"no-such-command"},
		{"verify"},
		{"inspect", out, "--png", "0"},
	}
	for _, args := range tests {
		if code, _ := runCaptured(t, args...); code != exitUsage {
			t.Errorf("%v: exit status %d, want %d", args, code, exitUsage)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a usage error left an output file")
	}
}

// heldAcquire starts an acquire of a scan of n projections of
// simulate's detector into out, flushing for readers every 100 ms, and a
// held sender of the capture at path to it (connected, nothing sent).
func heldAcquire(t *testing.T, path, out string, n int) (*proc, *heldSender) {
	t.Helper()
	addr := scantest.FreeAddr(t)
	acq := startProcEnv(t, formatEnv(scantest.SmallFormat), "acquire", "--listen", addr, "-o", out, "--projections", strconv.Itoa(n),
		"--flush", "100ms", "--connect-timeout", "1m", "--idle-timeout", "10m")
	return acq, startHeldSender(t, path, addr)
}

// TestSWMRReaderFollowsAcquire has an h5py SWMR reader follow the file
// while acquire writes it, the detector held after every 10 frames until
// the reader has seen them: the reader sees the ok frames grow 10, 20, 30,
// 40 as they are written.
func TestSWMRReaderFollowsAcquire(t *testing.T) {
	t.Parallel()
	py := scantest.Python(t, "h5py", "numpy")
	path, _ := simulate(t, "--frames", "40")
	out := filepath.Join(t.TempDir(), "scan.h5")
	acq, sender := heldAcquire(t, path, out, 40)
	// It prints the count of ok frames each time it changes, until 40.
	script := `
import sys, time, h5py
# The file exists once the detector connects, before its layout is
# complete and SWMR writing starts: until then it does not open as one.
while True:
    try:
        f = h5py.File(sys.argv[1], "r", swmr=True)
        break
    except OSError:
        time.sleep(0.02)
last = -1
with f:
    st = f["/entry/instrument/detector/frame_status"]
    while last != 40:
        st.refresh()
        ok = int((st[:] == 0).sum())
        if ok != last:
            print(ok, flush=True)
            last = ok
        time.sleep(0.02)
`
	reader := exec.Command(py, "-c", script, writer.TempName(out))
	var stderr scantest.Buffer
	reader.Stderr = &stderr
	stdout, err := reader.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		reader.Process.Kill()
		reader.Wait()
	}()
	counts := lines(stdout)
	var seen []int
	for want := 10; want <= 40; want += 10 {
		sender.send(t, 10)
		for len(seen) == 0 || seen[len(seen)-1] < want {
			n, err := strconv.Atoi(nextLine(t, counts, "the SWMR reader", &stderr))
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, n)
		}
	}
	if !slices.IsSorted(seen) || !slices.Contains(seen, 10) || !slices.Contains(seen, 20) || !slices.Contains(seen, 30) || seen[len(seen)-1] != 40 {
		t.Errorf("the reader saw ok-frame counts %v: want them growing through 10, 20, 30 and 40", seen)
	}
	sender.finish(t)
	if code := acq.wait(t, time.Minute); code != exitOK {
		t.Errorf("acquire: exit status %d\n%s", code, acq.stderr.String())
	}
}

// TestKilledWriterLeavesReadableFile kills acquire (SIGKILL) once a flush
// has put 20 frames of a scan of 60 in its file, the detector held, and
// checks that the file opens, holds those 20 frames as sent, and that
// verify says which frames are missing.
func TestKilledWriterLeavesReadableFile(t *testing.T) {
	path, truth := simulate(t, "--frames", "60")
	out := filepath.Join(t.TempDir(), "scan.h5")
	acq, sender := heldAcquire(t, path, out, 60)
	sender.send(t, 20)
	part := writer.TempName(out)
	for deadline := time.Now().Add(time.Minute); scantest.OKFrames(part) < 20; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the 20 frames sent were not flushed to %s within a minute:\n%s", part, acq.stderr.String())
		}
	}
	if err := acq.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	acq.cmd.Wait()
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a killed scan got its final name")
	}
	code, stdout := runCaptured(t, "verify", part)
	if code != exitIncomplete || strings.Contains(stdout, "BAD") {
		t.Fatalf("verify of the killed scan: exit status %d, want %d with no bad chunk\n%s", code, exitIncomplete, stdout)
	}
	records := scantest.Records(t, part)
	ok := 0
	for n, rec := range records {
		if rec.Status == frame.StatusOK {
			ok++
			if rec.DataCRC != truth.DataCRC[n] {
				t.Errorf("frame %d: data CRC %08x, truth %08x", n, rec.DataCRC, truth.DataCRC[n])
			}
		}
	}
	if ok != 20 {
		t.Errorf("%d frames ok in the killed scan, want the 20 sent and flushed", ok)
	}
}

// TestLogsNameTheScan checks that with --scan-id every log line says which
// scan it is about.
func TestLogsNameTheScan(t *testing.T) {
	t.Parallel()
	path, _ := simulate(t, "--frames", "3", "--corrupt", "1")
	cmd := command("replay", path, "-o", filepath.Join(t.TempDir(), "s9.h5"), "--scan-id", "s9", "--log-level", "info")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Run()
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	n := 0
	for _, line := range lines {
		if !strings.HasPrefix(line, "{") {
			continue // the command's own closing message
		}
		n++
		if !strings.Contains(line, `"scan":"s9"`) {
			t.Errorf("log line without the scan: %s", line)
		}
	}
	if n < 2 {
		t.Errorf("%d log lines, want at least the start and the CRC mismatch:\n%s", n, stderr.String())
	}
}

// TestInspectWithoutPlan checks what inspect says of a scan replayed
// without a plan: every frame a projection, and no rotation, not a range
// "0 to 0".
func TestInspectWithoutPlan(t *testing.T) {
	simulated, _ := simulate(t, "--frames", "3")
	path := filepath.Join(t.TempDir(), "noplan.pmcap")
	scantest.WriteCapture(t, path, scantest.CaptureRecords(t, simulated)) // metadata without a plan
	out := filepath.Join(t.TempDir(), "scan.h5")
	if code, stdout := runCaptured(t, "replay", path, "-o", out); code != exitOK {
		t.Fatalf("replay exit status %d\n%s", code, stdout)
	}
	code, stdout := runCaptured(t, "inspect", out)
	if code != exitOK || !strings.Contains(stdout, "0 darks, 0 flats, 3 projections all at 0 degrees (no rotation recorded)") {
		t.Errorf("inspect exit status %d:\n%s", code, stdout)
	}
}

// TestReplayOneModuleOfSeveral replays an interleaved capture of the test
// array with a profile of one module: the file holds that module's frames
// only, told apart by their module_id, and the others are dropped and
// counted, never taken for the profile's module (same frame numbers).
func TestReplayOneModuleOfSeveral(t *testing.T) {
	paths, truths := simulateModules(t)
	capturePath := interleave(t, paths)
	for _, id := range []int{0, 2} {
		t.Run(fmt.Sprint("module ", id), func(t *testing.T) {
			dir := t.TempDir()
			profile := filepath.Join(dir, "one.yaml")
			text := fmt.Sprintf("detector:\n  chips_x: 3\n  chips_y: 2\n  chip_width: 32\n  chip_height: 16\n  modules:\n    - {id: %d, x: 0, y: 0}\n", id)
			if err := os.WriteFile(profile, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "one.h5")
			code, _, stderr := runProcess(t, append([]string{"replay", capturePath, "--profile", profile, "-o", out}, arrayPlan...)...)
			if code != exitOK {
				t.Fatalf("replay exit status %d, want %d\n%s", code, exitOK, stderr)
			}
			others := truths[0].Records * (len(arrayModules) - 1)
			if want := fmt.Sprintf("%d frames of modules other than the profile's module %d", others, id); !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
			recs := scantest.Records(t, out)
			truth := truths[slices.IndexFunc(arrayModules, func(m struct{ id, x, y int }) bool { return m.id == id })]
			if len(recs) != truth.Frames {
				t.Fatalf("%d records, want %d", len(recs), truth.Frames)
			}
			for n, rec := range recs {
				if rec.Status != frame.StatusOK || rec.DataCRC != truth.DataCRC[n] {
					t.Errorf("frame %d: status %d data CRC %08x, want module %d's: status 0, %08x",
						n, rec.Status, rec.DataCRC, id, truth.DataCRC[n])
				}
			}
		})
	}
}

// TestReplayOtherModuleHint replays a capture of module 3 with the default
// profile (module 0): nothing is written, and the command says how to
// replay module 3, which then works.
func TestReplayOtherModuleHint(t *testing.T) {
	path, _ := simulate(t, "--frames", "3", "--module", "3")
	out := filepath.Join(t.TempDir(), "scan.h5")
	code, _, stderr := runProcess(t, "replay", path, "-o", out)
	hint := `to replay module 3 of this capture, give a profile listing it, e.g. H5INGEST_DETECTOR_MODULES="[{id: 3}]"`
	if code != exitIncomplete || !strings.Contains(stderr, hint) {
		t.Fatalf("replay of module 3 with a profile of module 0: exit status %d\n%s", code, stderr)
	}
	t.Setenv("H5INGEST_DETECTOR_MODULES", "[{id: 3}]")
	if code, _, stderr := runProcess(t, "replay", path, "-o", out, "--overwrite"); code != exitOK {
		t.Errorf("replay as the hint says: exit status %d\n%s", code, stderr)
	}
}
