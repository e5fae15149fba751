package cli

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"h5ingest/scan/scantest"
	"h5ingest/writer"
)

// streamLine returns the sent, dropped and thinned counts of the
// summary's stream line.
func streamLine(t *testing.T, stdout string) (sent, dropped, thinned int) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^  stream +(\d+) images sent, (\d+) dropped .*, (\d+) thinned$`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no stream line in the summary:\n%s", stdout)
	}
	a, _ := strconv.Atoi(m[1])
	b, _ := strconv.Atoi(m[2])
	c, _ := strconv.Atoi(m[3])
	return a, b, c
}

// TestReplayLiveStream replays a scan with --stream while the Python
// consumer of tools/stream, on Debian's zmq, cbor2 and bitshuffle, reads
// it: it gets the start, every image, decoded, with the CRC-32C of the
// file's record, in the plan's order and keys, then the end.
func TestReplayLiveStream(t *testing.T) {
	py := scantest.Python(t, "zmq", "cbor2", "bitshuffle", "crcmod")
	capPath, _ := simulate(t, "--darks", "2", "--flats", "3", "--projections", "25")
	ep := "tcp://" + scantest.FreeAddr(t)
	cons := exec.Command(py, "../tools/stream/consume.py", ep, "--timeout", "60")
	out, err := cons.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(); err != nil {
		t.Fatal(err)
	}
	defer cons.Process.Kill()
	lines := bufio.NewScanner(out)
	lines.Buffer(nil, 1<<20)
	lines.Scan() // connected (ZeroMQ connects once the stream binds)
	// A queue as long as the scan: the images sent while the consumer
	// connects wait for it rather than being dropped.
	dir := t.TempDir()
	profile := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(profile, []byte("stream:\n  queue: 32\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h5 := filepath.Join(dir, "live.h5")
	code, stdout := runCaptured(t, "replay", capPath, "-o", h5, "--profile", profile, "--stream", ep, "--fps", "100")
	if code != exitOK {
		t.Fatalf("replay: exit status %d\n%s", code, stdout)
	}
	if sent, dropped, _ := streamLine(t, stdout); sent != 30 || dropped != 0 {
		t.Errorf("summary: %d sent, %d dropped, want 30 and 0", sent, dropped)
	}
	r, err := writer.Open(h5)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := r.Records()
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	var images int
	var types []string
	for lines.Scan() {
		var m struct {
			Type     string
			ImageID  int `json:"image_id"`
			CRC      uint32
			ImageKey *int `json:"image_key"`
		}
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", lines.Text(), err)
		}
		types = append(types, m.Type)
		if m.Type != "image" {
			continue
		}
		wantKey := 0 // 2 darks (key 2), 3 flats (key 1), projections (key 0)
		switch {
		case m.ImageID < 2:
			wantKey = 2
		case m.ImageID < 5:
			wantKey = 1
		}
		if m.ImageID != images || m.CRC != recs[m.ImageID].DataCRC || m.ImageKey == nil || *m.ImageKey != wantKey {
			t.Errorf("image %d (the %dth): %s; the file's record CRC %d, key %d", m.ImageID, images, lines.Text(), recs[m.ImageID].DataCRC, wantKey)
		}
		images++
	}
	if err := cons.Wait(); err != nil {
		t.Errorf("consumer: %v", err)
	}
	if images != 30 || len(types) != 32 || types[0] != "start" || types[31] != "end" {
		t.Errorf("consumer got %d images, messages %v", images, types)
	}
}

// TestReplayStalledConsumer replays a scan of full Pi-mega frames to a
// stream whose consumer connects and never reads: the replay is not held
// back (it ends, exit 0, every frame ok in the file), and the images the
// stream could not send are counted in the summary.
func TestReplayStalledConsumer(t *testing.T) {
	dir := t.TempDir()
	capPath := filepath.Join(dir, "big.pmcap")
	if code := run([]string{"simulate", "-o", capPath, "--frames", "40", "--seed", "3"}); code != exitOK {
		t.Fatalf("simulate: %d", code)
	}
	ep := "tcp://" + scantest.FreeAddr(t)
	sock, err := zmq.NewSocket(zmq.PULL)
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	sock.SetRcvhwm(1)
	if err := sock.Connect(ep); err != nil {
		t.Fatal(err)
	}
	h5 := filepath.Join(dir, "big.h5")
	profile := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(profile, []byte("stream:\n  queue: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	code, stdout := runCaptured(t, "replay", capPath, "-o", h5, "--profile", profile, "--stream", ep)
	took := time.Since(begin)
	if code != exitOK {
		t.Fatalf("replay: exit status %d\n%s", code, stdout)
	}
	if n := scantest.SummaryCount(t, stdout, "ok"); n != 40 {
		t.Errorf("%d frames ok, want 40", n)
	}
	sent, dropped, _ := streamLine(t, stdout)
	if sent+dropped != 40 || dropped == 0 {
		t.Errorf("stream: %d sent, %d dropped; want 40 in all, some dropped", sent, dropped)
	}
	t.Logf("replay of 40 frames to a stalled consumer: %v, %d images sent, %d dropped", took, sent, dropped)
	code, vout := runCaptured(t, "verify", h5)
	if code != exitOK {
		t.Errorf("verify: %d\n%s", code, vout)
	}
}
