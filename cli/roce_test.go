package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/source/capture"
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
	want := filepath.Join(dir, "replay.h5")
	if code := run(append([]string{"replay", path, "-o", want}, plan...)); code != exitOK {
		t.Fatalf("replay exit status %d", code)
	}
	wantRecs, wantChunks := readFile(t, want)
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
				"-o", out, "--record", rec, "--connect-timeout", "30s", "--slots", "16"}, plan...)
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
