package cli

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/scan/scantest"
)

// procSample is what /proc says of a process after a scan.
type procSample struct {
	rss, hwm int64 // VmRSS and VmHWM, bytes
	threads  int
	fds      int
	// From serve's /metrics: its goroutines and the bytes of its Go heap
	// in use (garbage not yet collected included).
	goroutines int
	heap       int64
}

// sampleProc reads the resident memory, its peak, the threads and the
// open descriptors of process pid.
func sampleProc(t *testing.T, pid int) procSample {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	var s procSample
	for _, line := range strings.Split(string(b), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch key {
		case "VmRSS":
			s.rss = n << 10 // kB
		case "VmHWM":
			s.hwm = n << 10
		case "Threads":
			s.threads = int(n)
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	s.fds = len(fds)
	return s
}

// metricValue returns the value of the unlabelled metric name in a
// Prometheus text exposition; -1 where it has none.
func metricValue(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// sseCounter follows /v1/events and counts the events by name.
type sseCounter struct {
	mu     sync.Mutex
	counts map[string]int
	err    string        // why it could not follow them
	done   chan struct{} // closed when the stream ends
}

// followEvents starts a client of base's /v1/events, which follows it,
// in the background, until the test ends.
func followEvents(t *testing.T, base string) *sseCounter {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &sseCounter{counts: map[string]int{}, done: make(chan struct{})}
	t.Cleanup(func() { cancel(); <-c.done })
	go func() {
		defer close(c.done)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			c.fail(err.Error())
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			c.fail(resp.Status)
			return
		}
		lines := bufio.NewScanner(resp.Body)
		lines.Buffer(nil, 1<<20)
		for lines.Scan() {
			if name, ok := strings.CutPrefix(lines.Text(), "event: "); ok {
				c.mu.Lock()
				c.counts[name]++
				c.mu.Unlock()
			}
		}
	}()
	return c
}

// fail notes why the client could not follow the events.
func (c *sseCounter) fail(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = why
}

// failure returns why the client could not follow the events; "" if it
// could.
func (c *sseCounter) failure() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// count returns how many events named name the client has read.
func (c *sseCounter) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[name]
}

// The soak: soakScans scans (H5INGEST_SOAK_SCANS to run more) of 50
// frames of 256x256 pixels of 24 bits, a stream image of about 190 KB,
// small enough that the scans take about a quarter of a minute on a
// loaded machine.
const (
	soakScans  = 16
	soakFrames = 50
	// soakRef is the scan after which serve has warmed up: its peak
	// resident memory then has seen a few cycles of the garbage
	// collector.
	soakRef = 10
	// soakMargin is how far serve's peak resident memory (VmHWM) may rise
	// from scan soakRef to the last: the collector's cycles and the
	// allocators' noise (5 to 18 MB in runs here, as a rare coincidence of
	// a scan's buffers with a late collection sets a new peak). The
	// stream that kept its buffers and ZeroMQ context left 7 to 10 MB a
	// scan: the 6 scans after soakRef of the default soak rise 42 MB or
	// more with a leak of 7 MB a scan, and fail it. A longer soak finds
	// smaller leaks: H5INGEST_SOAK_SCANS=30 fails one of 1.6 MB a scan.
	soakMargin = 32 << 20
	// soakFDMargin and soakThreadMargin are the descriptors and threads
	// the last third of the scans may hold above the most of scans 6 to
	// soakRef.
	soakFDMargin, soakThreadMargin = 4, 8
)

// TestServeSoak runs soakScans scans back to back through a real serve
// with a live stream that a consumer reads (tools/stream/consume.py, one
// per scan, as an analysis program follows a series) and an SSE client
// following /v1/events, and samples serve's resident memory, threads and
// descriptors after each: once the first few scans have warmed it up,
// memory, threads and descriptors stay level, so that an ended scan
// keeps its summary, never its buffers, sockets or stages.
func TestServeSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the soak runs 16 scans through serve (a quarter of a minute)")
	}
	soakScans := soakScans
	if v := os.Getenv("H5INGEST_SOAK_SCANS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < soakRef+3 {
			t.Fatalf("H5INGEST_SOAK_SCANS=%s: want a number of scans of at least %d", v, soakRef+3)
		}
		soakScans = n
	}
	py := scantest.Python(t, "zmq", "cbor2", "bitshuffle", "crcmod", "numpy")
	// A queue that holds a whole scan: the images wait for the consumer,
	// which connects as the stream binds, rather than being dropped.
	t.Setenv("H5INGEST_STREAM_QUEUE", "64")
	expectFormat(t, frame.Format{
		Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 128, ChipHeight: 128},
		Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR,
	})
	capPath := filepath.Join(t.TempDir(), "soak.pmcap")
	if code := run([]string{"simulate", "-o", capPath, "--frames", strconv.Itoa(soakFrames), "--seed", "5",
		"--chips", "2x2", "--chip-size", "128x128"}); code != exitOK {
		t.Fatalf("simulate: exit status %d", code)
	}
	dir := t.TempDir()
	port := operatorPort(t)
	ep := "tcp://" + scantest.FreeAddr(t)
	p := startServe(t, "", "--data-root", dir, "--stream", ep, "--preload-gpu=false")
	pid := p.cmd.Process.Pid
	events := followEvents(t, p.base)

	samples := make([]procSample, soakScans)
	start := time.Now()
	for i := range soakScans {
		id := fmt.Sprintf("soak%02d", i+1)
		// The consumer connects before the arming, as an analysis program
		// waits for the next series; ZeroMQ connects it once the scan's
		// stream binds.
		cons := exec.Command(py, "../tools/stream/consume.py", ep, "--timeout", "30")
		consOut := &scantest.Buffer{}
		cons.Stdout, cons.Stderr = consOut, consOut
		if err := cons.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(consOut.String(), `"connected"`); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				cons.Process.Kill()
				t.Fatalf("%s: the consumer did not start in 20s:\n%s", id, consOut.String())
			}
		}
		if code, st := p.call("POST", "/v1/scans", armRequest(id, dir, soakFrames)); code != http.StatusCreated {
			cons.Process.Kill()
			t.Fatalf("arm %s: %d %v\n%s", id, code, st, p.out.String())
		}
		// At a detector's pace rather than at once, so that the consumer
		// has connected before the last images.
		if code := run([]string{"send", capPath, "--to", fmt.Sprintf("127.0.0.1:%d", port), "--fps", "250", "--timeout", "20s"}); code != exitOK {
			cons.Process.Kill()
			t.Fatalf("send %s: exit status %d\n%s", id, code, p.out.String())
		}
		_, st := p.call("GET", "/v1/scans/"+id+"/wait?timeout=30", nil)
		if c, _ := st["counts"].(map[string]any); st["state"] != "done" || c["ok"] != float64(soakFrames) {
			cons.Process.Kill()
			t.Fatalf("%s: %v\n%s", id, st, p.out.String())
		}
		// The consumer ends at the series' end message.
		consDone := make(chan error, 1)
		go func() { consDone <- cons.Wait() }()
		select {
		case err := <-consDone:
			if err != nil || !strings.Contains(consOut.String(), `"type": "end"`) {
				t.Errorf("%s: the consumer: %v\n%s", id, err, consOut.String())
			}
		case <-time.After(30 * time.Second):
			cons.Process.Kill()
			t.Fatalf("%s: the consumer got no end message in 30s\n%s\nserve said:\n%s", id, consOut.String(), p.out.String())
		}
		os.Remove(filepath.Join(dir, id+".h5"))
		s := sampleProc(t, pid)
		metrics := p.get("/metrics")
		s.goroutines, s.heap = int(metricValue(metrics, "go_goroutines")), int64(metricValue(metrics, "go_memstats_heap_inuse_bytes"))
		samples[i] = s
		t.Logf("scan %2d: RSS %6.1f MB, peak %6.1f MB, Go heap %5.1f MB, %3d threads, %3d goroutines, %3d descriptors, %d images streamed",
			i+1, float64(s.rss)/1e6, float64(s.hwm)/1e6, float64(s.heap)/1e6, s.threads, s.goroutines, s.fds, strings.Count(consOut.String(), `"type": "image"`))
	}
	t.Logf("%d scans of %d frames in %v", soakScans, soakFrames, time.Since(start).Round(time.Second))

	// Every scan's end reached the SSE client.
	for deadline := time.Now().Add(5 * time.Second); events.count("done") < soakScans && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if n := events.count("done"); n != soakScans {
		t.Errorf("the SSE client saw %d done events, want %d %s", n, soakScans, events.failure())
	}

	// After the first few scans, the peak stays level; so do the
	// threads and descriptors.
	ref, end := samples[soakRef-1], samples[soakScans-1]
	if end.hwm > ref.hwm+soakMargin {
		t.Errorf("peak resident memory grows: %.1f MB after scan %d, %.1f MB after scan %d (margin %d MB)",
			float64(ref.hwm)/1e6, soakRef, float64(end.hwm)/1e6, soakScans, soakMargin>>20)
	}
	warm, last := soakMax(samples[5:soakRef]), soakMax(samples[2*soakScans/3:])
	if last.fds > warm.fds+soakFDMargin {
		t.Errorf("descriptors grow: at most %d over scans 6-%d, %d over the last third", warm.fds, soakRef, last.fds)
	}
	if last.threads > warm.threads+soakThreadMargin {
		t.Errorf("threads grow: at most %d over scans 6-%d, %d over the last third", warm.threads, soakRef, last.threads)
	}
}

// soakMax returns the largest of each figure over samples.
func soakMax(samples []procSample) procSample {
	var m procSample
	for _, s := range samples {
		m.rss, m.hwm = max(m.rss, s.rss), max(m.hwm, s.hwm)
		m.threads, m.fds = max(m.threads, s.threads), max(m.fds, s.fds)
	}
	return m
}
