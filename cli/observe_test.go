package cli

import (
	"bufio"
	"errors"
	"fmt"
	"image/png"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/scan/scantest"
)

// scrape returns the samples of a Prometheus text page, by series.
func scrape(t *testing.T, url string) (map[string]float64, error) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q", line)
		}
		m[line[:i]] = v
	}
	return m, sc.Err()
}

// waitFor polls f every 20 ms until it returns true, for up to d.
func waitFor(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !f(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", d, what)
		}
	}
}

// TestMetricsDuringAcquire scrapes /metrics while a paced sender sends a
// scan with faults over the tcp provider, and checks the final figures
// against the file's records.
func TestMetricsDuringAcquire(t *testing.T) {
	smallDetector(t)
	path, truth := simulate(t, "--darks", "0", "--flats", "0", "--projections", "50",
		"--missing", "7,20", "--corrupt", "11,12,30", "--duplicate", "5")
	dir := t.TempDir()
	addr, maddr := scantest.FreeAddr(t), scantest.FreeAddr(t)
	base := "http://" + maddr
	done := startAcquire("--listen", addr, "--output-dir", dir, "--scan-id", "obs", "--connect-timeout", "20s",
		"--projections", "50", "--metrics", maddr, "--metrics-linger", "5s", "--report", filepath.Join(dir, "report.html"))
	sent := make(chan int, 1)
	go func() { sent <- run([]string{"send", path, "--to", addr, "--fps", "25", "--timeout", "20s"}) }()

	// Mid-scan: the counts are there and grow.
	var mid map[string]float64
	waitFor(t, 20*time.Second, "a mid-scan scrape", func() bool {
		m, err := scrape(t, base+"/metrics")
		if err == nil && m[`h5ingest_frames_written_total{module="0"}`] >= 5 {
			mid = m
			return true
		}
		return false
	})
	if mid[`h5ingest_frames_written_total{module="0"}`] >= 45 {
		t.Errorf("the scrape was not mid-scan: %v frames written", mid[`h5ingest_frames_written_total{module="0"}`])
	}
	if code := <-sent; code != exitOK {
		t.Fatalf("send exit status %d", code)
	}
	final := filepath.Join(dir, "obs.h5")
	waitFor(t, 20*time.Second, "the final file", func() bool { _, err := os.Stat(final); return err == nil })
	m, err := scrape(t, base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range mid { // counters never go back
		if strings.Contains(k, "_total") && m[k] < v {
			t.Errorf("%s went from %v to %v", k, v, m[k])
		}
	}
	recs, _ := readFile(t, final)
	byStatus := map[uint8]float64{}
	for _, r := range recs {
		byStatus[r.Status]++
	}
	want := map[string]float64{
		`h5ingest_records_total{module="0",status="ok"}`:                   byStatus[frame.StatusOK],
		`h5ingest_records_total{module="0",status="missing"}`:              byStatus[frame.StatusMissing],
		`h5ingest_records_total{module="0",status="crc_mismatch"}`:         byStatus[frame.StatusCRCMismatch],
		`h5ingest_records_total{module="0",status="rejected"}`:             byStatus[frame.StatusRejected],
		`h5ingest_frames_written_total{module="0"}`:                        byStatus[frame.StatusOK] + byStatus[frame.StatusCRCMismatch],
		`h5ingest_write_frames_total{module="0"}`:                          byStatus[frame.StatusOK] + byStatus[frame.StatusCRCMismatch],
		`h5ingest_frames_missing{module="0"}`:                              byStatus[frame.StatusMissing],
		`h5ingest_frame_problems_total{module="0",problem="crc_mismatch"}`: byStatus[frame.StatusCRCMismatch],
		`h5ingest_frame_problems_total{module="0",problem="duplicate"}`:    1,
		`h5ingest_source_frames_total{module="0"}`:                         49, // 50 - 2 missing + 1 duplicate
		`h5ingest_fabric_frames_total{module="0"}`:                         49,
		`h5ingest_source_frames_in_flight{module="0"}`:                     0,
		`h5ingest_scan_frames{module="0"}`:                                 50,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if byStatus[frame.StatusMissing] != 2 || byStatus[frame.StatusCRCMismatch] != float64(len(truth.Faults.Corrupt)) {
		t.Errorf("file records by status %v: want the simulated faults", byStatus)
	}
	if c := m[`h5ingest_decode_batch_seconds_count{module="0"}`]; c < 1 || m[`h5ingest_decode_frames_total{module="0"}`] != 48 {
		t.Errorf("decode: %v batches, %v frames; want some, and 48", c, m[`h5ingest_decode_frames_total{module="0"}`])
	}
	resp, err := http.Get(base + "/preview.png")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(resp.Body); err != nil {
		t.Errorf("preview: %v", err)
	}
	resp.Body.Close()
	if code := <-done; code != exitIncomplete {
		t.Errorf("acquire exit status %d, want %d (frames missing)", code, exitIncomplete)
	}
	report, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "<polyline", "incomplete: 2 missing, 3 with a CRC mismatch", final} {
		if !strings.Contains(string(report), want) {
			t.Errorf("the report lacks %q", want)
		}
	}
}

// chromium is the headless browser of the status page test.
const chromium = "/usr/bin/chromium"

// dumpDOM loads url in headless Chromium, lets its scripts run for budget
// of virtual time, and returns what Chromium printed: the page, with
// --dump-dom.
func dumpDOM(t *testing.T, url string, budget time.Duration, extra ...string) string {
	t.Helper()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic",
		"--user-data-dir=" + t.TempDir(), fmt.Sprintf("--virtual-time-budget=%d", budget.Milliseconds())}, extra...)
	cmd := exec.Command(chromium, append(args, url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", extra, err, stderr.String())
	}
	return string(out)
}

// shown returns the number the page shows in the element with id.
func shown(t *testing.T, dom, id string) float64 {
	t.Helper()
	m := regexp.MustCompile(`id="` + regexp.QuoteMeta(id) + `"[^>]*>([0-9.]+)`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("the page shows no %s:\n%.2000s", id, dom)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestStatusPageInChromium loads the status page of an acquire twice,
// each time while the detector's sender is held still mid-scan, and checks
// that the page shows what the metrics say (40 frames written, then 80),
// the scan's one CRC mismatch and its plan; between the two it takes a
// screenshot.
func TestStatusPageInChromium(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("no headless browser: %s is missing (Debian package chromium, in the Makefile's DEBS)", chromium)
	}
	path, _ := simulate(t, "--frames", "160", "--corrupt", "3")
	dir := t.TempDir()
	addr, maddr := scantest.FreeAddr(t), scantest.FreeAddr(t)
	base := "http://" + maddr
	acq := startProcEnv(t, formatEnv(scantest.SmallFormat), "acquire", "--listen", addr, "-o", filepath.Join(dir, "page.h5"),
		"--projections", "160", "--connect-timeout", "1m", "--idle-timeout", "10m", "--metrics", maddr)
	sender := startHeldSender(t, path, addr)
	written := func() float64 {
		m, err := scrape(t, base+"/metrics")
		if err != nil {
			return -1
		}
		return m[`h5ingest_frames_written_total{module="0"}`]
	}

	shotDir := os.Getenv("H5INGEST_TEST_SCREENSHOT_DIR")
	if shotDir == "" {
		shotDir = t.TempDir()
	}
	shot := filepath.Join(shotDir, "status-page.png")
	for i, want := range []float64{40, 80} {
		sender.send(t, 40)
		waitFor(t, time.Minute, fmt.Sprintf("%v frames written", want), func() bool { return written() == want })
		dom := dumpDOM(t, base+"/", 1500*time.Millisecond, "--dump-dom")
		if n := shown(t, dom, "m0-written"); n != want {
			t.Errorf("the page shows %v frames written; the metrics say %v", n, want)
		}
		if crc := shown(t, dom, "m0-crc_mismatch"); crc != 1 {
			t.Errorf("the page shows %v CRC mismatches, the scan has 1 (frame 3)", crc)
		}
		if !strings.Contains(dom, "160 projections") {
			t.Error("the page does not show the plan")
		}
		if i == 0 {
			dumpDOM(t, base+"/", 1500*time.Millisecond, "--screenshot="+shot, "--window-size=1200,560", "--hide-scrollbars")
		}
	}
	sender.finish(t)

	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	colours := map[[3]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colours[[3]uint32{r >> 12, g >> 12, bl >> 12}] = true
		}
	}
	if len(colours) < 20 {
		t.Errorf("the screenshot has %d colours: blank?", len(colours))
	}
	t.Logf("screenshot: %s", shot)
	if code := acq.wait(t, time.Minute); code != exitIncomplete {
		t.Errorf("acquire: exit status %d, want %d (a CRC mismatch)\n%s", code, exitIncomplete, acq.stderr.String())
	}
}

// TestStatusPageWhileWaiting takes the status address from the profile and
// checks the page answers once acquire says it waits for the detector
// (the page is up before the wait begins), and that an interrupt then
// ends the wait.
func TestStatusPageWhileWaiting(t *testing.T) {
	t.Parallel()
	statusAddr := scantest.FreeAddr(t)
	profile := filepath.Join(t.TempDir(), "watch.yaml")
	if err := os.WriteFile(profile, []byte("status:\n  address: "+statusAddr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "scan.h5")
	acq := startProc(t, "acquire", "--profile", profile, "--listen", scantest.FreeAddr(t), "-o", out, "--connect-timeout", "10m")
	acq.waitStderr(t, "waiting for module 0 on")
	resp, err := http.Get("http://" + statusAddr + "/status.json")
	if err != nil {
		t.Fatalf("no status page on %s while acquire waited: %v", statusAddr, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status.json: %s", resp.Status)
	}
	acq.cmd.Process.Signal(os.Interrupt)
	if code := acq.wait(t, time.Minute); code != exitIncomplete {
		t.Errorf("acquire interrupted while waiting: exit status %d, want %d\n%s", code, exitIncomplete, acq.stderr.String())
	}
}

// TestReplayObserveFlagsFailEarly checks that a --report or --metrics that
// cannot work stops replay before it creates its file, and that a replay
// failing before its scan stops the status server it started.
func TestReplayObserveFlagsFailEarly(t *testing.T) {
	path, _ := simulate(t, "--frames", "2")
	dir := t.TempDir()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"report in a missing directory", []string{"--report", filepath.Join(dir, "none", "report.html")}, exitUsage},
		{"status port in use", []string{"--metrics", busy.Addr().String()}, exitFailure},
	}
	for _, tt := range tests {
		out := filepath.Join(dir, "scan.h5")
		if code := run(append([]string{"replay", path, "-o", out}, tt.args...)); code != tt.code {
			t.Errorf("%s: exit status %d, want %d", tt.name, code, tt.code)
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: replay left %s (%v)", tt.name, out, err)
		}
	}
	addr := scantest.FreeAddr(t)
	if code := run([]string{"replay", path, "-o", filepath.Join(dir, "none", "scan.h5"), "--metrics", addr}); code != exitFailure {
		t.Errorf("replay into a missing directory: exit status %d, want %d", code, exitFailure)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the status server of a replay that failed before its scan still listens: %v", err)
	}
	l.Close()
}
