package cli

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"h5ingest/scan/scantest"
	"h5ingest/writer"
)

// TestPauseFlushesRecords replays 30 planned frames at 40 a second out of
// a capture of 200 (the rest beyond the plan, so nothing is written after
// the 30th): within a few flush intervals of the last frame, verify of the
// .part sees all 30 ok, and after a SIGKILL then, recover keeps all 30.
// Before, records reached the file only when a later chunk was written,
// and both saw 0.
func TestPauseFlushesRecords(t *testing.T) {
	smallDetector(t)
	capPath, _ := simulate(t, "--frames", "200")
	out := t.TempDir() + "/r.h5"
	scan := command("replay", capPath, "-o", out, "--projections", "30", "--fps", "40", "--flush", "200ms")
	var stderr bytes.Buffer
	scan.Stderr = &stderr
	if err := scan.Start(); err != nil {
		t.Fatal(err)
	}
	defer scan.Process.Kill()
	part := writer.TempName(out)
	// The 30 frames take 0.75 s; the replay goes on for 5 s.
	ok := 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && ok < 30; time.Sleep(50 * time.Millisecond) {
		ok = scantest.OKFrames(part)
	}
	if ok != 30 {
		t.Fatalf("3 s into the replay, 2 s after its last planned frame, the .part holds %d ok records, want 30\n%s", ok, stderr.String())
	}
	code, stdout, stderrV := runProcess(t, "verify", part)
	if !regexp.MustCompile(`\bok 30\b`).MatchString(stdout) {
		t.Errorf("verify of the .part during the pause: exit status %d\n%s%s", code, stdout, stderrV)
	}
	t.Logf("verify during the pause: %s", stdout)
	if err := scan.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	scan.Wait()
	code, stdout, stderrV = runProcess(t, "recover", part)
	if !regexp.MustCompile(`\bok 30\b`).MatchString(stdout) {
		t.Errorf("recover after a SIGKILL in the pause: exit status %d, want ok 30\n%s%s", code, stdout, stderrV)
	}
}
