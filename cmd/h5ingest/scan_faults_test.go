package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestReplayFramesBeyondPlan replays a capture of 12 frames with a plan of
// 8: the four frames beyond the plan are rejected, as the spec says, with
// exit status 3, a summary line, a line saying where they went, and a log
// line; the eight planned frames are all good.
func TestReplayFramesBeyondPlan(t *testing.T) {
	in, truth := simulate(t, "--frames", "12")
	out := filepath.Join(t.TempDir(), "plan8.h5")
	code, stdout, stderr := runProcess(t, "replay", in, "-o", out, "--projections", "8")
	if code != exitIncomplete {
		t.Fatalf("exit status %d, want %d (frames beyond the plan are rejected)\n%s%s", code, exitIncomplete, stdout, stderr)
	}
	for _, want := range []string{"ok              8\n", "out of range    4 rejected (beyond the scan, not written)\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	for _, want := range []string{"4 frames beyond the scan were rejected (frame numbers 8 and above, past the plan's 8 frames", `"frame rejected"`, `"reason":"out of range"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("standard error lacks %q:\n%s", want, stderr)
		}
	}
	status, ok := statuses(t, out, truth)
	if len(status) != 8 || ok != 8 {
		t.Errorf("file holds %d frames, %d ok: want the 8 planned, all ok", len(status), ok)
	}
}

// TestReplayStrayFrameNumberNoPlan replays, without a plan, a capture of
// good frames among which a few carry corrupt frame numbers (2^24-1 was
// accepted once: 16.7 million records, 3 GB of memory, an 840 MB file):
// they are rejected as out of range, exit status 3, the file holds the good
// frames alone, all ok, and memory and file stay small.
func TestReplayStrayFrameNumberNoPlan(t *testing.T) {
	const frames = 24
	path, truth := simulate(t, "--frames", strconv.Itoa(frames))
	var stream [][]byte
	stray := []uint64{1<<24 - 1, 20_000, 1 << 40, 1 << 63, 1<<64 - 1}
	for n, rec := range records(t, path) {
		stream = append(stream, rec)
		if n%5 == 2 {
			bad := bytes.Clone(rec)
			binary.LittleEndian.PutUint64(bad[8:], stray[n/5])
			stream = append(stream, resealed(bad))
		}
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "stray.pmcap")
	writeRecords(t, in, stream) // metadata without a plan
	out := filepath.Join(dir, "stray.h5")
	cmd := command("replay", in, "-o", out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != exitIncomplete {
		t.Fatalf("exit status %d (%v), want %d\n%s%s", code, err, exitIncomplete, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "out of range    5 rejected") {
		t.Errorf("summary does not count the 5 stray frames:\n%s", stdout.String())
	}
	if !strings.Contains(stderr.String(), "source.max_frame_gap") {
		t.Errorf("standard error does not say why the frames were rejected:\n%s", stderr.String())
	}
	status, ok := statuses(t, out, truth)
	if len(status) != frames || ok != frames {
		t.Errorf("file holds %d frames, %d ok: want the %d good frames, all ok", len(status), ok, frames)
	}
	info, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() > 4<<20 {
		t.Errorf("file of %d bytes for %d small frames", info.Size(), frames)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > 400<<10 { // KiB
		t.Errorf("replay peaked at %d MiB of memory for %d small frames", ru.Maxrss>>10, frames)
	}
}
