package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/scan/scantest"
	"h5ingest/source/capture"
	"h5ingest/writer"
)

// roceEnv returns the environment in which h5ingest processes meet through
// the fake verbs in dir, with the small detector: acquire over roce and
// send as the front end's emulator then run as they would on two hosts.
func roceEnv(t *testing.T, dir string, extra ...string) []string {
	t.Helper()
	env := append(formatEnv(smallFormat()), "H5INGEST_TEST_FAKE_VERBS="+dir)
	return append(env, extra...)
}

// smallFormat is the format of the captures simulate writes in these
// tests (smallScan).
func smallFormat() frame.Format {
	f := frame.Usual(frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16}, frame.Bitplane)
	return f
}

// TestAcquireOverRoCE runs acquire --transport roce and send --transport
// roce as two processes meeting through the fake NIC, started in either
// order, and checks that the file equals a replay of the capture, record
// for record and chunk for chunk, and that --record keeps the frames as
// sent.
func TestAcquireOverRoCE(t *testing.T) {
	smallDetector(t)
	path, _ := simulate(t, "--darks", "2", "--flats", "2", "--projections", "36")
	plan := []string{"--darks", "2", "--flats", "2", "--projections", "36"}
	dir := t.TempDir()
	wantRecs, wantChunks := replayFile(t, path, plan...)
	for _, tc := range []struct {
		name        string
		senderFirst bool
		header      string
	}{
		{"receiver first", false, "frame"},
		{"front end first", true, "frame"},
		{"bare payloads", false, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			meet := t.TempDir()
			env := roceEnv(t, meet, "H5INGEST_SOURCE_FRAME_HEADER="+tc.header)
			params, fe := filepath.Join(meet, "rdma.json"), filepath.Join(meet, "front-end.json")
			out, rec := filepath.Join(dir, tc.name+".h5"), filepath.Join(dir, tc.name+".pmcap")
			acquire := append([]string{"acquire", "--transport", "roce", "--rdma-params", params, "--front-end", fe,
				"-o", out, "--record", rec, "--connect-timeout", "30s", "--slots", "64"}, plan...)
			send := []string{"send", path, "--transport", "roce", "--rdma-params", params, "--front-end", fe, "--timeout", "30s", "--fps", "400"}
			var a, s *proc
			if tc.senderFirst {
				s = startProcEnv(t, env, send...)
				a = startProcEnv(t, env, acquire...)
			} else {
				a = startProcEnv(t, env, acquire...)
				s = startProcEnv(t, env, send...)
			}
			if code := s.wait(t, time.Minute); code != exitOK {
				t.Fatalf("send exit status %d\n%s%s\nacquire:\n%s%s", code, s.stdout.String(), s.stderr.String(), a.stdout.String(), a.stderr.String())
			}
			if code := a.wait(t, time.Minute); code != exitOK {
				t.Fatalf("acquire exit status %d\n%s%s", code, a.stdout.String(), a.stderr.String())
			}
			recs, chunks := readFile(t, out)
			if tc.header == "none" {
				// Bare payloads carry no detector clock: the receiver
				// stamps each frame when it takes it. All else is equal.
				for i := range recs {
					recs[i].Timestamp = wantRecs[i].Timestamp
				}
			}
			if !slices.Equal(recs, wantRecs) {
				t.Errorf("records differ from replay's:\n%v\n%v", recs, wantRecs)
			}
			for i := range wantChunks {
				if !bytes.Equal(chunks[i], wantChunks[i]) {
					t.Errorf("chunk %d differs from replay's", i)
				}
			}
			if got, want := captureFrames(t, rec), captureFrames(t, path); !slices.EqualFunc(got, want, func(a, b capturedFrame) bool {
				return a.n == b.n && bytes.Equal(a.payload, b.payload) && (tc.header == "none" || a.h == b.h)
			}) {
				t.Error("the --record capture's frames differ from the sent capture's")
			}
			if _, marked := captureMetadata(t, rec).Extra["frame_headers"]; marked != (tc.header == "none") {
				t.Errorf("the --record capture says its headers are the receiver's: %v, with frame_header %s", marked, tc.header)
			}
			if !strings.Contains(a.stdout.String(), "overrun         0") {
				t.Errorf("the summary has no overrun line of 0:\n%s", a.stdout.String())
			}
			if _, err := os.Stat(params); !os.IsNotExist(err) {
				t.Errorf("the parameter file outlived the receiver's queue pairs: %v", err)
			}
		})
	}
}

// TestAcquireOverRoCEParams checks the parameter file a receiver writes:
// its end of the queue pair before the front end answers, then ready.
func TestAcquireOverRoCEParams(t *testing.T) {
	smallDetector(t)
	meet := t.TempDir()
	params, fe := filepath.Join(meet, "rdma.json"), filepath.Join(meet, "front-end.json")
	out := filepath.Join(t.TempDir(), "none.h5")
	a := startProcEnv(t, roceEnv(t, meet), "acquire", "--transport", "roce", "--rdma-params", params, "--front-end", fe,
		"-o", out, "--connect-timeout", "1s", "--projections", "4")
	code := a.wait(t, time.Minute)
	if code == exitOK {
		t.Fatalf("acquire with no front end ended well:\n%s", a.stdout.String())
	}
	stderr := a.stderr.String()
	for _, want := range []string{"no front end answered", "QPN", "GID", fe} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the timeout does not say %q:\n%s", want, stderr)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a scan whose front end never came left a file: %v", err)
	}
}

// readParams reads a receiver's parameter file as the front end would.
func readParams(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// capturedFrame is one frame of a capture file.
type capturedFrame struct {
	n       uint64
	h       frame.Header
	payload []byte
}

// captureFrames returns the frames of a capture file, in its order.
func captureFrames(t *testing.T, path string) []capturedFrame {
	t.Helper()
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []capturedFrame
	for {
		h, p, err := r.Next(make([]byte, 1<<20))
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, capturedFrame{h.FrameNumber, h, bytes.Clone(p)})
	}
}

// startRoCE starts acquire --transport roce of a 200-frame scan and its
// front end's emulator at 100 frames/s, meeting through the fake NIC, and
// returns both once the scan's file holds frames.
func startRoCE(t *testing.T) (a, s *proc, out, capturePath string) {
	t.Helper()
	capturePath, _ = simulate(t, "--darks", "0", "--flats", "0", "--projections", "200")
	meet := t.TempDir()
	env := roceEnv(t, meet)
	params, fe := filepath.Join(meet, "rdma.json"), filepath.Join(meet, "front-end.json")
	out = filepath.Join(t.TempDir(), "roce.h5")
	env = append(env, "H5INGEST_OUTPUT_FLUSH_INTERVAL=100ms")
	a = startProcEnv(t, env, "acquire", "--transport", "roce", "--rdma-params", params, "--front-end", fe,
		"-o", out, "--projections", "200", "--connect-timeout", "30s", "--idle-timeout", "2s")
	s = startProcEnv(t, env, "send", capturePath, "--transport", "roce", "--rdma-params", params, "--front-end", fe, "--timeout", "30s", "--fps", "100")
	// Frames flow once the scan's file holds some.
	part := writer.TempName(out)
	for deadline := time.Now().Add(30 * time.Second); scantest.OKFrames(part) < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s holds no frame:\n%s%s", part, a.stdout.String(), a.stderr.String())
		}
	}
	return a, s, out, capturePath
}

// TestRoCEFrontEndKilled kills the front end mid-scan: acquire ends at
// its idle timeout, incomplete, with every frame that came written whole
// and the rest recorded missing.
func TestRoCEFrontEndKilled(t *testing.T) {
	smallDetector(t)
	a, s, out, path := startRoCE(t)
	s.cmd.Process.Kill()
	s.cmd.Wait()
	if code := a.wait(t, time.Minute); code != exitIncomplete {
		t.Fatalf("acquire exit status %d, want %d (incomplete)\n%s%s", code, exitIncomplete, a.stdout.String(), a.stderr.String())
	}
	if !strings.Contains(a.stderr.String()+a.stdout.String(), "no frame for 2s") {
		t.Errorf("acquire does not say the front end fell silent:\n%s%s", a.stdout.String(), a.stderr.String())
	}
	checkAgainstReplay(t, out, path, 200)
}

// TestRoCEReceiverKilled kills acquire mid-scan: the emulator stops with
// the NIC's word for a peer gone, and recover gives the file every frame
// written before, each whole.
func TestRoCEReceiverKilled(t *testing.T) {
	smallDetector(t)
	a, s, out, path := startRoCE(t)
	a.cmd.Process.Kill()
	a.cmd.Wait()
	if code := s.wait(t, time.Minute); code == exitOK || !strings.Contains(s.stderr.String(), "retry counter exceeded") {
		t.Errorf("send exit status %d after its receiver was killed, want a failure saying retries were exceeded:\n%s", code, s.stderr.String())
	}
	if code, stdout, stderr := runProcess(t, "recover", writer.TempName(out)); code != exitIncomplete {
		t.Fatalf("recover: exit status %d, want %d\n%s%s", code, exitIncomplete, stdout, stderr)
	}
	checkAgainstReplay(t, out, path, 200)
}

// checkAgainstReplay checks that the file at out holds n frames, some ok
// and the rest missing, and that each ok frame's record and chunk are a
// replay's of the capture at path (with replayArgs: the acquire's codec).
func checkAgainstReplay(t *testing.T, out, path string, n int, replayArgs ...string) {
	t.Helper()
	wantRecs, wantChunks := replayFile(t, path, append([]string{"--projections", strconv.Itoa(n)}, replayArgs...)...)
	recs, chunks := readFile(t, out)
	if len(recs) != n {
		t.Fatalf("%d records, want %d", len(recs), n)
	}
	ok := 0
	for i, r := range recs {
		switch r.Status {
		case frame.StatusOK:
			ok++
			if r != wantRecs[i] || !bytes.Equal(chunks[i], wantChunks[i]) {
				t.Errorf("frame %d is ok but not the capture's", i)
			}
		case frame.StatusMissing:
		default:
			t.Errorf("frame %d: status %d, want ok or missing", i, r.Status)
		}
	}
	if ok == 0 || ok == n {
		t.Errorf("%d of %d frames ok, want some but not all", ok, n)
	}
}

// TestProfilesCheckRoCE checks that profiles check holds a profile's roce
// keys to what the transport can work with, naming the key.
func TestProfilesCheckRoCE(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want string // "" for ok
	}{
		{"source:\n  transport: roce\n", ""},
		{"source:\n  transport: roce\n  front_end: [{module: 0, gid: \"::ffff:10.0.0.7\", qpn: 77, psn: 9001}]\n", ""},
		{"source:\n  transport: roce\n  ring_slots: 6\n", "source.write_guard"},
		{"source:\n  transport: roce\n  qp_type: uc\n  frame_header: none\n", "source.qp_type uc"},
		{"source:\n  transport: roce\n  qp_type: ud\n", "source.qp_type"},
		{"source:\n  transport: roce\n  mtu: 9000\n", "source.mtu"},
		{"source:\n  transport: roce\n  front_end: [{module: 0, gid: nope, qpn: 77}]\n", "source.front_end"},
		{"source:\n  transport: roce\n  write_guard: 0\n", "source.write_guard"},
		{"source:\n  transport: roce\n  immediate: word\n", "source.immediate"},
		{"source:\n  transport: roce\n  frame_header: maybe\n", "source.frame_header"},
		{"source:\n  transport: roce\n  front_end: [{module: 0, gid: \"fe80::1\", qpn: 0, psn: 1}]\n", "source.front_end"},
		{"source:\n  transport: roce\n  front_end: [{module: 7, gid: \"fe80::1\", qpn: 5, psn: 1}]\n", "source.front_end"},
	} {
		file := filepath.Join(t.TempDir(), "p.yaml")
		if err := os.WriteFile(file, []byte(tc.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runProcess(t, "profiles", "check", file)
		out := stdout + stderr
		switch {
		case tc.want == "" && code != exitOK:
			t.Errorf("profiles check of\n%s: exit status %d\n%s", tc.yaml, code, out)
		case tc.want != "" && (code != exitUsage || !strings.Contains(out, tc.want)):
			t.Errorf("profiles check of\n%s: exit status %d, want %d naming %s:\n%s", tc.yaml, code, exitUsage, tc.want, out)
		}
	}
}

// TestRoCEFrontEndFasterThanPipeline has the emulator write a scan as
// fast as it can into an 8-slot ring while the pipeline compresses slowly:
// frames are overrun, and each is recorded missing and counted alike in
// the summary and /metrics, while every frame stored ok is the capture's,
// byte for byte.
func TestRoCEFrontEndFasterThanPipeline(t *testing.T) {
	const n = 60
	path := simulateBacklog(t, n)
	meet := t.TempDir()
	env := append(backlogEnv(t, path), "H5INGEST_TEST_FAKE_VERBS="+meet)
	params, fe := filepath.Join(meet, "rdma.json"), filepath.Join(meet, "front-end.json")
	out := filepath.Join(t.TempDir(), "fast.h5")
	maddr := scantest.FreeAddr(t)
	a := startProcEnv(t, env, append([]string{"acquire", "--transport", "roce", "--rdma-params", params, "--front-end", fe,
		"-o", out, "--projections", strconv.Itoa(n), "--slots", "8", "--connect-timeout", "30s", "--idle-timeout", "3s",
		"--metrics", maddr, "--metrics-linger", "30s"}, backlogPipeline()...)...)
	s := startProcEnv(t, env, "send", path, "--transport", "roce", "--rdma-params", params, "--front-end", fe, "--timeout", "30s")
	if code := s.wait(t, time.Minute); code != exitOK {
		t.Fatalf("send exit status %d\n%s", code, s.stderr.String())
	}
	var m map[string]float64
	waitFor(t, time.Minute, "the scan's end in /metrics", func() bool {
		var err error
		m, err = scrape(t, "http://"+maddr+"/metrics")
		_, statErr := os.Stat(out)
		return err == nil && statErr == nil
	})
	a.cmd.Process.Signal(os.Interrupt) // ends the metrics' linger
	a.wait(t, time.Minute)
	summary := regexp.MustCompile(`overrun +(\d+) \(recorded missing\)`).FindStringSubmatch(a.stdout.String())
	if summary == nil {
		t.Fatalf("no overrun line in the summary:\n%s%s", a.stdout.String(), a.stderr.String())
	}
	overrun, _ := strconv.Atoi(summary[1])
	if overrun == 0 {
		t.Errorf("a front end far faster than the pipeline overran nothing in an 8-slot ring:\n%s", a.stdout.String())
	}
	if got := m[`h5ingest_source_overrun_total{module="0"}`]; got != float64(overrun) {
		t.Errorf("/metrics counts %v overrun, the summary %d", got, overrun)
	}
	if got := m[`h5ingest_source_ring_slots{module="0"}`]; got != 8 {
		t.Errorf("/metrics says %v ring slots, want 8", got)
	}
	recs, _ := readFile(t, out)
	missing := 0
	for _, r := range recs {
		if r.Status == frame.StatusMissing {
			missing++
		}
	}
	if missing != overrun {
		t.Errorf("%d frames recorded missing, %d overrun: every frame was written, so each missing one is an overrun", missing, overrun)
	}
	checkAgainstReplay(t, out, path, n, backlogPipeline()...)
}

// TestProfilesCheckRoCERingPerCores checks that a ring must be deeper than
// the guard plus the frames the pipeline holds in flight on the machine
// that checks it (one per core, two decodes' batches of the backend), on a
// machine of 16 cores.
func TestProfilesCheckRoCERingPerCores(t *testing.T) {
	t.Setenv("GOMAXPROCS", "16")
	for _, tc := range []struct {
		backend string
		slots   int
		ok      bool
	}{
		{"cpu", 20, false}, // 16 + 2*1 in flight, guard 2
		{"cpu", 21, true},
		{"cuda", 26, false}, // 16 + 2*4
		{"cuda", 27, true},
		{"auto", 26, false}, // the batch of the backend it may choose
	} {
		file := filepath.Join(t.TempDir(), "p.yaml")
		yaml := fmt.Sprintf("backend: %s\nsource:\n  transport: roce\n  ring_slots: %d\n  write_guard: 2\n", tc.backend, tc.slots)
		if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runProcess(t, "profiles", "check", file)
		if got := code == exitOK; got != tc.ok || !tc.ok && !strings.Contains(stdout+stderr, fmt.Sprintf("want ring_slots %d or more", tc.slots+1)) {
			t.Errorf("backend %s, ring_slots %d on 16 cores: exit status %d, want ok %v\n%s%s", tc.backend, tc.slots, code, tc.ok, stdout, stderr)
		}
	}
}
