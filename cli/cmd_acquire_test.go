package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/scan/scantest"
	"h5ingest/source/capture"
	"h5ingest/source/fabric"
	"h5ingest/version"
	"h5ingest/writer"
)

// expectFormat makes the profile's detector, which acquire holds senders
// to, the one of frames of format f, for the rest of the test (in-process
// and in child processes).
func expectFormat(t *testing.T, f frame.Format) {
	t.Helper()
	for _, kv := range formatEnv(f) {
		key, v, _ := strings.Cut(kv, "=")
		t.Setenv(key, v)
	}
}

// formatEnv returns the environment that makes the profile's detector the
// one of frames of format f, for a child process of its own
// (startProcEnv), where the test does not set it for all (expectFormat).
func formatEnv(f frame.Format) []string {
	var env []string
	for key, v := range map[string]string{
		"CHIPS_X": strconv.Itoa(f.ChipsX), "CHIPS_Y": strconv.Itoa(f.ChipsY),
		"CHIP_WIDTH": strconv.Itoa(f.ChipWidth), "CHIP_HEIGHT": strconv.Itoa(f.ChipHeight),
		"ENCODING": f.Encoding.String(), "BIT_DEPTH": strconv.Itoa(f.BitDepth), "CODING": f.Coding.String(),
	} {
		env = append(env, "H5INGEST_DETECTOR_"+key+"="+v)
	}
	return env
}

// smallDetector makes the profile's detector that of the captures simulate
// writes (smallScan).
func smallDetector(t *testing.T) {
	t.Helper()
	expectFormat(t, scantest.SmallFormat)
}

// startAcquire runs acquire in the background and returns its exit status
// on a channel.
func startAcquire(args ...string) <-chan int {
	done := make(chan int, 1)
	go func() { done <- run(append([]string{"acquire"}, args...)) }()
	return done
}

// readRecords returns the per-frame records r holds.
func readRecords(t *testing.T, r *writer.Reader) []frame.Record {
	t.Helper()
	recs, err := r.Records()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// readFile returns a file's records and chunks.
func readFile(t *testing.T, path string) ([]frame.Record, [][]byte) {
	t.Helper()
	r, err := writer.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recs := readRecords(t, r)
	var chunks [][]byte
	for i := range recs {
		c, _, err := r.ReadChunk(i, nil)
		if err != nil && recs[i].Status != frame.StatusMissing {
			t.Fatalf("%s: chunk %d (status %d): %v", path, i, recs[i].Status, err)
		}
		chunks = append(chunks, slices.Clone(c))
	}
	return recs, chunks
}

// captureMetadata returns a capture file's metadata.
func captureMetadata(t *testing.T, path string) capture.Metadata {
	t.Helper()
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return r.Metadata()
}

// captureRecords returns the bytes of a capture file's records, without its
// metadata.
func captureRecords(t *testing.T, path string) []byte {
	t.Helper()
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	off := r.Offset()
	r.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b[off:]
}

// replayFile replays the capture at path with args into a file of its
// own and returns the file's records and chunks: what an acquire of the
// same frames must write.
func replayFile(t *testing.T, path string, args ...string) ([]frame.Record, [][]byte) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "replay.h5")
	if code := run(append([]string{"replay", path, "-o", out}, args...)); code != exitOK {
		t.Fatalf("replay exit status %d", code)
	}
	return readFile(t, out)
}

func TestAcquireMatchesReplay(t *testing.T) {
	smallDetector(t)
	path, _ := simulate(t, "--darks", "2", "--flats", "2", "--projections", "16")
	plan := []string{"--darks", "2", "--flats", "2", "--projections", "16"}
	dir := t.TempDir()
	wantRecs, wantChunks := replayFile(t, path, plan...)
	for _, mode := range []string{"write", "send"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv("H5INGEST_SOURCE_MODE", mode) // the profile's mode, which acquire holds senders to
			addr := scantest.FreeAddr(t)
			rec := filepath.Join(dir, mode+".pmcap")
			done := startAcquire(append([]string{"--listen", addr, "--output-dir", dir, "--scan-id", mode,
				"--record", rec, "--connect-timeout", "20s", "--slots", "4"}, plan...)...)
			if code := run([]string{"send", path, "--to", addr, "--mode", mode, "--timeout", "20s"}); code != exitOK {
				t.Fatalf("send exit status %d", code)
			}
			if code := <-done; code != exitOK {
				t.Fatalf("acquire exit status %d", code)
			}
			recs, chunks := readFile(t, filepath.Join(dir, mode+".h5"))
			if !slices.Equal(recs, wantRecs) {
				t.Errorf("records differ from replay's:\n%v\n%v", recs, wantRecs)
			}
			for i := range wantChunks {
				if !bytes.Equal(chunks[i], wantChunks[i]) {
					t.Errorf("chunk %d differs from replay's", i)
				}
			}
			if !bytes.Equal(captureRecords(t, rec), captureRecords(t, path)) {
				t.Error("the --record capture's records differ from the sent capture's")
			}
			if meta := captureMetadata(t, rec); meta.Profile != "default" || meta.Software != "h5ingest acquire "+version.String() || meta.Created == "" {
				t.Errorf("the --record capture's metadata records profile %q, software %q, created %q; want the default profile",
					meta.Profile, meta.Software, meta.Created)
			}
		})
	}
	if n := fabric.OpenObjects(); n != 0 {
		t.Errorf("%d libfabric objects left open", n)
	}
}

// TestAcquireSenderKilled kills the detector's sender (SIGKILL) once 50
// frames of a scan of 200 are written: acquire ends the scan, writes
// those 50 and records the other 150 missing, and exits 3.
func TestAcquireSenderKilled(t *testing.T) {
	smallDetector(t)
	const n, first = 200, 50
	path, _ := simulate(t, "--darks", "0", "--flats", "0", "--projections", strconv.Itoa(n))
	addr, maddr := scantest.FreeAddr(t), scantest.FreeAddr(t)
	out := filepath.Join(t.TempDir(), "killed.h5")
	done := startAcquire("--listen", addr, "-o", out, "--projections", strconv.Itoa(n), "--connect-timeout", "1m",
		"--idle-timeout", "10m", "--metrics", maddr)
	sender := startHeldSender(t, path, addr)
	sender.send(t, first)
	waitFor(t, time.Minute, fmt.Sprintf("%d frames written", first), func() bool {
		m, err := scrape(t, "http://"+maddr+"/metrics")
		return err == nil && m[`h5ingest_frames_written_total{module="0"}`] == first
	})
	sender.kill()
	if code := waitExit(t, done, time.Minute); code != exitIncomplete {
		t.Fatalf("acquire exit status %d, want %d", code, exitIncomplete)
	}
	recs, _ := readFile(t, out)
	if len(recs) != n {
		t.Fatalf("%d records, want %d", len(recs), n)
	}
	var ok, missing int
	for _, r := range recs {
		switch r.Status {
		case frame.StatusOK:
			ok++
		case frame.StatusMissing:
			missing++
		}
	}
	if ok != first || missing != n-first {
		t.Errorf("%d ok and %d missing of %d: want the %d sent ok, the rest missing", ok, missing, n, first)
	}
}

func TestAcquireUsageAndTimeout(t *testing.T) {
	for _, args := range [][]string{
		{"--listen", "127.0.0.1:1"},                                    // no output
		{"-o", "x.h5", "--output-dir", "d", "--listen", "127.0.0.1:1"}, // both
		{"--output-dir", "d", "--listen", "127.0.0.1:1"},               // {scan} without --scan-id
		{"-o", "x.h5", "--slots", "0"},
	} {
		if code := run(append([]string{"acquire"}, args...)); code != exitUsage {
			t.Errorf("acquire %v: exit status %d, want %d", args, code, exitUsage)
		}
	}
	out := filepath.Join(t.TempDir(), "none.h5")
	start := time.Now()
	if code := run([]string{"acquire", "--listen", scantest.FreeAddr(t), "-o", out, "--connect-timeout", "300ms"}); code != exitFailure {
		t.Errorf("acquire with no detector: exit status %d, want %d", code, exitFailure)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("connect timeout of 300ms took %v", d)
	}
	if code := run([]string{"send", "x.pmcap"}); code != exitUsage {
		t.Errorf("send without --to: exit status %d", code)
	}
}

// TestAcquireRefusesOtherSenders checks that a receiver of one module
// refuses a sender that says it is another module, or that delivers frames
// in another mode than the profile's, and goes on waiting for its own: the
// frames of another module never go into its file.
func TestAcquireRefusesOtherSenders(t *testing.T) {
	smallDetector(t)
	other, _ := simulate(t, "--frames", "4", "--module", "1")
	own, _ := simulate(t, "--frames", "4")
	addr := scantest.FreeAddr(t)
	out := filepath.Join(t.TempDir(), "scan.h5")
	done := startAcquire("--listen", addr, "-o", out, "--connect-timeout", "20s")
	code, _, stderr := runProcess(t, "send", other, "--to", addr, "--module", "1", "--timeout", "20s")
	if code != exitFailure || !strings.Contains(stderr, "module 1 is not one this receiver takes (modules 0)") {
		t.Errorf("send as module 1 to a receiver of module 0: exit status %d\n%s", code, stderr)
	}
	code, _, stderr = runProcess(t, "send", own, "--to", addr, "--mode", "send", "--timeout", "20s")
	if code != exitFailure || !strings.Contains(stderr, "mode send: this receiver takes write (profile key source.mode)") {
		t.Errorf("send in mode send to a receiver of mode write: exit status %d\n%s", code, stderr)
	}
	if code := run([]string{"send", own, "--to", addr, "--timeout", "20s"}); code != exitOK {
		t.Errorf("send as module 0: exit status %d", code)
	}
	if code := waitExit(t, done, 20*time.Second); code != exitOK {
		t.Fatalf("acquire exit status %d", code)
	}
	for i, rec := range scantest.Records(t, out) {
		if rec.Status != frame.StatusOK {
			t.Errorf("frame %d: status %d, want ok", i, rec.Status)
		}
	}
}

// TestAcquireSaysWhereItWaits checks the one line acquire prints, at the
// default log level, while it waits for the detector: where it listens,
// for which modules and with which provider; and none with --log-level
// error.
func TestAcquireSaysWhereItWaits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string // "": no line
	}{
		{"one module", nil, "waiting for module 0 on ADDR (provider tcp)"},
		{"every module of an array", []string{"--profile", "pimega-540d"}, "waiting for modules 0,1,2,3 on ADDR (provider tcp)"},
		{"one module of an array", []string{"--profile", "pimega-540d", "--module", "2"}, "waiting for module 2 on ADDR (provider tcp)"},
		{"log level error", []string{"--log-level", "error"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := scantest.FreeAddr(t)
			args := append([]string{"acquire", "--provider", "tcp", "--listen", addr, "--connect-timeout", "1s",
				"-o", filepath.Join(t.TempDir(), "scan.h5")}, tt.args...)
			_, _, stderr := runProcess(t, args...)
			if !strings.Contains(stderr, "none in 1s") {
				t.Fatalf("acquire did not wait for the detector:\n%s", stderr)
			}
			got := strings.Count(stderr, "waiting for")
			switch want := "h5ingest: " + strings.Replace(tt.want, "ADDR", addr, 1) + "\n"; {
			case tt.want == "" && got != 0:
				t.Errorf("acquire says where it waits at --log-level error:\n%s", stderr)
			case tt.want != "" && (got != 1 || !strings.HasPrefix(stderr, want)):
				t.Errorf("acquire says:\n%s\nwant first, and once:\n%s", stderr, want)
			}
		})
	}
}
