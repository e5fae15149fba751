package main

// Fault injection: what a user sees when the sender stalls, disconnects or
// reconnects, the disk fills, the output directory goes away, the port is
// taken, the profile or the capture is bad; and that a scan leaves nothing
// open behind it. docs/reliability.md lists every fault with its test.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/source/capture"
	"h5ingest/source/fabric"
	"h5ingest/source/sim"
	"h5ingest/writer"
)

// runProcess runs h5ingest as a process of its own and returns its exit
// status and what it printed on standard output and standard error.
func runProcess(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := command(args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	if strings.Contains(errOut.String(), "panic:") {
		t.Fatalf("h5ingest %v panicked:\n%s", args, errOut.String())
	}
	return code, out.String(), errOut.String()
}

// statuses returns the frame statuses a file records, and how many frames
// are ok, checking that every ok frame has a chunk and the true data CRC.
func statuses(t *testing.T, path string, truth *sim.Truth) (status []uint8, ok int) {
	t.Helper()
	r, err := writer.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for n, rec := range readRecords(t, r) {
		status = append(status, rec.Status)
		if rec.Status != frame.StatusOK {
			continue
		}
		ok++
		if rec.DataCRC != truth.DataCRC[n] {
			t.Errorf("frame %d: data CRC %08x, truth %08x", n, rec.DataCRC, truth.DataCRC[n])
		}
		if _, _, err := r.ReadChunk(n, nil); err != nil {
			t.Errorf("frame %d recorded ok: %v", n, err)
		}
	}
	return status, ok
}

// records reads the records of the capture at path into memory, each
// header and payload as on the wire.
func records(t *testing.T, path string) [][]byte {
	t.Helper()
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var recs [][]byte
	for {
		buf := make([]byte, 1<<20)
		h, payload, err := r.Next(buf[frame.HeaderSize:])
		if errors.Is(err, io.EOF) {
			return recs
		}
		if err != nil {
			t.Fatal(err)
		}
		h.Put(buf)
		recs = append(recs, buf[:frame.HeaderSize+len(payload)])
	}
}

// dial connects an in-process sender, a detector module, to addr.
func dial(ctx context.Context, addr string, f frame.Format, timeout time.Duration) (*fabric.Sender, error) {
	return fabric.Dial(ctx, fabric.SenderConfig{
		Provider: "tcp", Addr: addr, Timeout: timeout,
		Hello: fabric.Hello{Mode: fabric.ModeWrite, Format: f},
	})
}

// dialRetrying dials until the receiver listens, for up to 20 s.
func dialRetrying(t *testing.T, ctx context.Context, addr string, f frame.Format) *fabric.Sender {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := dial(ctx, addr, f, 5*time.Second)
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no receiver on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// post sends recs through s, one frame each.
func post(ctx context.Context, s *fabric.Sender, recs [][]byte) error {
	for _, rec := range recs {
		buf, err := s.Buffer(ctx)
		if err != nil {
			return err
		}
		if err := s.Post(copy(buf, rec)); err != nil {
			return err
		}
	}
	return nil
}

// waitExit returns what done delivers, failing the test after d.
func waitExit(t *testing.T, done <-chan int, d time.Duration) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(d):
		t.Fatalf("acquire did not stop within %v", d)
		return 0
	}
}

// TestAcquireSenderStalls has the detector stop mid-scan for a while: a
// pause shorter than the idle timeout loses nothing; a longer one ends the
// scan with the frames after it recorded missing (exit status 3).
func TestAcquireSenderStalls(t *testing.T) {
	smallDetector(t)
	path, truth := simulate(t, "--frames", "20")
	recs := records(t, path)
	f := truthFormat(t, truth)
	tests := []struct {
		name        string
		stall, idle time.Duration
		code, ok    int
	}{
		{"resumes", 400 * time.Millisecond, 3 * time.Second, exitOK, 20},
		{"past idle timeout", 1500 * time.Millisecond, 300 * time.Millisecond, exitIncomplete, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			addr := freeAddr(t)
			out := filepath.Join(t.TempDir(), "stall.h5")
			done := startAcquire("--listen", addr, "-o", out, "--projections", "20",
				"--connect-timeout", "20s", "--idle-timeout", tt.idle.String())
			s := dialRetrying(t, ctx, addr, f)
			if err := post(ctx, s, recs[:10]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(tt.stall)
			err := post(ctx, s, recs[10:])
			if err == nil {
				_, err = s.Close(ctx)
			} else {
				s.Abort()
			}
			if code := waitExit(t, done, 20*time.Second); code != tt.code {
				t.Fatalf("acquire exit status %d, want %d", code, tt.code)
			}
			if tt.code == exitOK && err != nil {
				t.Errorf("sender: %v", err)
			}
			if tt.code != exitOK && err == nil {
				t.Error("the sender was not told that the receiver had stopped")
			}
			status, ok := statuses(t, out, truth)
			if ok != tt.ok {
				t.Errorf("%d frames ok, want %d: %v", ok, tt.ok, status)
			}
			for n := tt.ok; n < len(status); n++ {
				if status[n] != frame.StatusMissing {
					t.Errorf("frame %d after the stall: status %d, want missing", n, status[n])
				}
			}
		})
	}
}

// TestAcquireSenderReconnects drops the detector's connection mid-scan and
// has it connect again to send the rest: acquire takes one connection per
// scan, so the scan ends at the disconnect (exit status 3, the rest
// recorded missing) and the second connection is refused, not swallowed.
func TestAcquireSenderReconnects(t *testing.T) {
	smallDetector(t)
	path, truth := simulate(t, "--frames", "20")
	recs := records(t, path)
	f := truthFormat(t, truth)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := freeAddr(t)
	out := filepath.Join(t.TempDir(), "reconnect.h5")
	done := startAcquire("--listen", addr, "-o", out, "--projections", "20",
		"--connect-timeout", "20s", "--idle-timeout", "10s")
	s := dialRetrying(t, ctx, addr, f)
	if err := post(ctx, s, recs[:10]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the ten frames land
	s.Abort()
	again := make(chan error, 1)
	go func() {
		s, err := dial(ctx, addr, f, 3*time.Second)
		if err == nil {
			err = post(ctx, s, recs[10:])
			if err == nil {
				_, err = s.Close(ctx)
			} else {
				s.Abort()
			}
		}
		again <- err
	}()
	if code := waitExit(t, done, 20*time.Second); code != exitIncomplete {
		t.Fatalf("acquire exit status %d, want %d", code, exitIncomplete)
	}
	if err := <-again; err == nil {
		t.Error("the reconnected sender sent the rest of the scan into nothing, without an error")
	}
	status, ok := statuses(t, out, truth)
	if ok != 10 {
		t.Errorf("%d frames ok, want the 10 sent before the disconnect: %v", ok, status)
	}
	for n := 10; n < len(status); n++ {
		if status[n] != frame.StatusMissing {
			t.Errorf("frame %d: status %d, want missing", n, status[n])
		}
	}
	if n := fabric.OpenObjects(); n != 0 {
		t.Errorf("%d libfabric objects left open", n)
	}
}

// TestAcquirePortInUse listens where another program already does.
func TestAcquirePortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out := filepath.Join(t.TempDir(), "busy.h5")
	start := time.Now()
	code, _, stderr := runProcess(t, "acquire", "--listen", l.Addr().String(), "-o", out, "--connect-timeout", "3s")
	if code != exitFailure || !strings.Contains(stderr, l.Addr().String()) {
		t.Errorf("acquire on a busy port: exit status %d, want %d with a message naming %s:\n%s",
			code, exitFailure, l.Addr(), stderr)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a busy port took %v to report: acquire waited for a sender instead", d)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed acquire left an output file")
	}
}

// TestProfileFaults gives replay and acquire profiles that are missing or
// malformed: exit status 2, with a message that names the file.
func TestProfileFaults(t *testing.T) {
	path, _ := simulate(t, "--frames", "1")
	dir := t.TempDir()
	profiles := map[string]string{
		"missing":        "",
		"not yaml":       "detector: [chips_x: 3\n",
		"tab indented":   "detector:\n\tchips_x: 3\n",
		"wrong type":     "detector:\n  chips_x: many\n",
		"not a map":      "- just\n- a list\n",
		"binary garbage": "\x00\xff\xfe PMCAP001 \x01\x02",
		"negative":       "source:\n  ring_slots: -4\n",
	}
	for name, text := range profiles {
		file := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
		if name != "missing" {
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		out := filepath.Join(dir, "x.h5")
		for _, args := range [][]string{
			{"replay", path, "-o", out, "--profile", file},
			{"acquire", "--listen", "127.0.0.1:1", "-o", out, "--profile", file},
		} {
			code, _, stderr := runProcess(t, args...)
			if code != exitUsage || !strings.Contains(stderr, file) {
				t.Errorf("%s profile, %s: exit status %d, want %d naming the file:\n%s", name, args[0], code, exitUsage, stderr)
			}
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%s profile: an output file was written", name)
		}
	}
}

// TestReplayGarbageCapture replays files that are not captures, or that
// turn to garbage part way.
func TestReplayGarbageCapture(t *testing.T) {
	path, truth := simulate(t, "--frames", "6")
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	frameBytes := frame.HeaderSize + truthFormat(t, truth).PayloadSize()
	head := len(good) - 6*frameBytes
	rng := rand.New(rand.NewPCG(8, 8))
	noise := make([]byte, 3*frameBytes)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	tests := []struct {
		name string
		data []byte
		code int
		ok   int // frames ok in the file; -1: no file
	}{
		{"empty file", nil, exitFailure, -1},
		{"random bytes", noise, exitFailure, -1},
		{"header then garbage", append(good[:head:head], noise...), exitFailure, -1},
		{"garbage after three frames", append(good[:head+3*frameBytes:head+3*frameBytes], noise...), exitIncomplete, 3},
		{"zeros after two frames", append(good[:head+2*frameBytes:head+2*frameBytes], make([]byte, frameBytes)...), exitIncomplete, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "bad.pmcap")
			if err := os.WriteFile(in, tt.data, 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "bad.h5")
			code, _, stderr := runProcess(t, "replay", in, "-o", out)
			if code != tt.code || !strings.Contains(stderr, "h5ingest: ") {
				t.Fatalf("exit status %d, want %d with a message:\n%s", code, tt.code, stderr)
			}
			if tt.ok < 0 {
				if _, err := os.Stat(out); err == nil {
					t.Error("an output file was written")
				}
				return
			}
			if !strings.Contains(stderr, "at byte") {
				t.Errorf("the message does not name the byte offset:\n%s", stderr)
			}
			if _, ok := statuses(t, out, truth); ok != tt.ok {
				t.Errorf("%d frames ok, want %d", ok, tt.ok)
			}
		})
	}
}

// badFrame is one kind of frame fault of spec/frames.md, applied to a copy
// of a good frame's record.
type badFrame struct {
	name   string
	status uint8 // what the file records for the frame, when it gets a record
	apply  func(rec []byte, frames int) []byte
}

// resealed recomputes the header CRC of rec after a change.
func resealed(rec []byte) []byte {
	copy(rec[60:], le32(frame.Checksum(rec[:60])))
	return rec
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

var recordedFaults = []badFrame{
	{"payload size", frame.StatusRejected, func(rec []byte, _ int) []byte {
		rec = append(rec, 1, 2, 3, 4) // four bytes more than the format holds
		copy(rec[24:], le32(uint32(len(rec)-frame.HeaderSize)))
		return resealed(rec)
	}},
	{"unknown encoding", frame.StatusRejected, func(rec []byte, _ int) []byte {
		rec[34] = 9
		return resealed(rec)
	}},
	{"payload crc", frame.StatusCRCMismatch, func(rec []byte, _ int) []byte {
		rec[frame.HeaderSize+len(rec)/3] ^= 0x10
		return rec
	}},
}

// TestReplayRandomFrameFaults replays captures where frames carry every
// recorded fault of the spec at random rates, plus duplicates, frame
// numbers beyond the plan and, in some, a header fault that ends the
// capture's reading: every good frame arrives intact, every bad one gets
// the status and count the spec gives it.
func TestReplayRandomFrameFaults(t *testing.T) {
	const frames = 24
	path, truth := simulate(t, "--frames", strconv.Itoa(frames))
	clean := records(t, path)
	headerFaults := []struct {
		name  string
		apply func(rec []byte)
	}{
		{"magic", func(rec []byte) { rec[0] = 'X' }},
		{"version", func(rec []byte) { rec[4] = 2; resealed(rec) }},
		{"header size", func(rec []byte) { rec[6] = 32; resealed(rec) }},
		{"header crc", func(rec []byte) { rec[61] ^= 0xFF }},
	}
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 17))
		rate := 0.1 + 0.4*rng.Float64()
		name := fmt.Sprintf("seed %d rate %.2f", seed, rate)
		t.Run(name, func(t *testing.T) {
			want := make([]uint8, frames)
			var dups, outOfRange, rejected, crc int
			var stream [][]byte
			cut := -1 // frame after which a header fault ends the capture
			if seed >= 2 {
				cut = 4 + rng.IntN(frames-8)
			}
			for n := range frames {
				rec := bytes.Clone(clean[n])
				if n == cut {
					hf := headerFaults[int(seed)%len(headerFaults)]
					hf.apply(rec)
					stream = append(stream, rec)
					break
				}
				if rng.Float64() < rate {
					fault := recordedFaults[rng.IntN(len(recordedFaults))]
					rec = fault.apply(rec, frames)
					want[n] = fault.status
					if fault.status == frame.StatusRejected {
						rejected++
					} else {
						crc++
					}
				}
				stream = append(stream, rec)
				if rng.Float64() < rate/2 {
					// A later copy, good or not, never replaces the first.
					dup := bytes.Clone(clean[n])
					dup[frame.HeaderSize] ^= 0xFF
					stream = append(stream, dup)
					dups++
				}
				if rng.Float64() < rate/2 {
					stray := bytes.Clone(clean[n])
					copy(stray[8:], le32(uint32(frames+rng.IntN(1000))))
					stream = append(stream, resealed(stray))
					outOfRange++
				}
			}
			missing := 0
			if cut >= 0 {
				for n := cut; n < frames; n++ {
					want[n] = frame.StatusMissing
					missing++
				}
			}
			dir := t.TempDir()
			in := filepath.Join(dir, "faults.pmcap")
			writeRecords(t, in, stream)
			out := filepath.Join(dir, "faults.h5")
			code, stdout, stderr := runProcess(t, "replay", in, "-o", out, "--projections", "24")
			wantCode := exitOK
			if missing+rejected+crc+outOfRange > 0 {
				wantCode = exitIncomplete // frames beyond the plan are rejected too
			}
			if code != wantCode {
				t.Fatalf("exit status %d, want %d\n%s%s", code, wantCode, stdout, stderr)
			}
			if cut >= 0 && !strings.Contains(stderr, "at byte") {
				t.Errorf("a header fault did not name its byte offset:\n%s", stderr)
			}
			for _, line := range []string{
				"ok              " + itoa(frames-missing-rejected-crc),
				"missing         " + itoa(missing),
				"crc mismatch    " + itoa(crc),
				"rejected        " + itoa(rejected),
				"duplicates      " + itoa(dups) + " dropped",
				"out of range    " + itoa(outOfRange) + " rejected (beyond the scan, not written)",
			} {
				if !strings.Contains(stdout, line+"\n") {
					t.Errorf("summary lacks %q:\n%s", line, stdout)
				}
			}
			status, _ := statuses(t, out, truth)
			for n := range frames {
				if status[n] != want[n] {
					t.Errorf("frame %d: status %d, want %d", n, status[n], want[n])
				}
			}
			if code, stdout, _ := runProcess(t, "verify", out); strings.Contains(stdout, "BAD") || code == exitFailure {
				t.Errorf("verify: exit status %d\n%s", code, stdout)
			}
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// writeRecords writes a capture of the given records.
func writeRecords(t *testing.T, path string, recs [][]byte) {
	t.Helper()
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	w, err := capture.NewWriter(file, capture.Metadata{Profile: "test", Created: "2026-01-01T00:00:00Z", Software: "reliability_test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if err := w.WriteRecord(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// mountTmpfs mounts a tmpfs with the given options on a new directory, or
// skips the test where that is not allowed.
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// TestReplayDiskFull replays a scan onto an 8 MiB tmpfs that holds about
// half of it: exit status 1 with the system's "No space left on device",
// and the file, under its final name, holds every frame written before the
// disk filled, verified, the rest recorded missing.
func TestReplayDiskFull(t *testing.T) {
	dir := mountTmpfs(t, "size=8m")
	path, truth := simulate(t, "--chips", "3x2", "--chip-size", "256x256", "--frames", "12")
	out := filepath.Join(dir, "full.h5")
	code, stdout, stderr := runProcess(t, "replay", path, "-o", out, "--compression", "none", "--projections", "12")
	if code != exitFailure || !strings.Contains(stderr, "No space left on device") {
		t.Fatalf("exit status %d, want %d saying the disk is full:\n%s%s", code, exitFailure, stdout, stderr)
	}
	status, ok := statuses(t, out, truth)
	if ok == 0 || ok == 12 {
		t.Fatalf("%d frames ok of 12: want those written before the disk filled: %v", ok, status)
	}
	for n, s := range status {
		if s != frame.StatusOK && s != frame.StatusMissing {
			t.Errorf("frame %d: status %d, want ok or missing", n, s)
		}
	}
	if !strings.Contains(stdout, "ok              "+itoa(ok)+"\n") {
		t.Errorf("the summary's ok count is not the file's %d:\n%s", ok, stdout)
	}
	code, vout, _ := runProcess(t, "verify", out)
	if code != exitIncomplete || strings.Contains(vout, "BAD") || !strings.Contains(vout, itoa(ok)+" chunks verified") {
		t.Errorf("verify: exit status %d, want %d with %d chunks verified:\n%s", code, exitIncomplete, ok, vout)
	}
}

// startPaced starts a replay of frames paced at 20 frames/s into dir (80
// frames is four seconds, so that what a test does while it writes comes
// in time on a loaded machine) and waits until its file has flushed
// frames. It returns the process, its standard error, the capture and the
// output file.
func startPaced(t *testing.T, dir string, frames int) (*exec.Cmd, *bytes.Buffer, string, string) {
	t.Helper()
	n := strconv.Itoa(frames)
	capture, _ := simulate(t, "--frames", n)
	out := filepath.Join(dir, "scan.h5")
	cmd := command("replay", capture, "-o", out, "--projections", n, "--fps", "20", "--flush", "100ms")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for okRecords(writer.TempName(out)) < 3 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the paced replay wrote nothing:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd, &stderr, capture, out
}

// exitCode waits for cmd and returns its exit status.
func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	return statusOf(t, cmd.Wait())
}

// statusOf returns the exit status a process's Wait error says.
func statusOf(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// TestReplayOutputDirFaults takes the output directory away, or makes it
// read-only, before and during a scan.
func TestReplayOutputDirFaults(t *testing.T) {
	path, _ := simulate(t, "--frames", "2")
	t.Run("missing before", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "gone", "scan.h5")
		code, _, stderr := runProcess(t, "replay", path, "-o", out)
		if code != exitFailure || !strings.Contains(stderr, "pre-scan check: output directory "+filepath.Dir(out)+" does not exist") {
			t.Errorf("exit status %d, want %d saying the directory is missing:\n%s", code, exitFailure, stderr)
		}
	})
	t.Run("read-only before", func(t *testing.T) {
		dir := mountTmpfs(t, "size=1m,ro")
		code, _, stderr := runProcess(t, "replay", path, "-o", filepath.Join(dir, "scan.h5"))
		if code != exitFailure || !strings.Contains(strings.ToLower(stderr), "read-only file system") {
			t.Errorf("exit status %d, want %d saying the file system is read-only:\n%s", code, exitFailure, stderr)
		}
	})
	t.Run("read-only while writing", func(t *testing.T) {
		// Root ignores permission bits; an immutable directory stops root
		// from adding the final name, as a read-only one stops a user.
		if os.Geteuid() != 0 {
			t.Skip("chattr +i needs root")
		}
		dir := t.TempDir()
		cmd, stderr, _, out := startPaced(t, dir, 40)
		if o, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Skipf("chattr +i not supported here: %v %s", err, o)
		}
		defer exec.Command("chattr", "-i", dir).Run()
		if code := exitCode(t, cmd); code != exitFailure || !strings.Contains(stderr.String(), "operation not permitted") {
			t.Fatalf("exit status %d, want %d:\n%s", code, exitFailure, stderr)
		}
		if !strings.Contains(stderr.String(), writer.TempName(out)) {
			t.Errorf("the message does not say where the scan stays:\n%s", stderr)
		}
		// The scan is whole under its temporary name.
		if code, vout, _ := runProcess(t, "verify", writer.TempName(out)); code != exitOK {
			t.Errorf("verify of the temporary file: exit status %d\n%s", code, vout)
		}
	})
	t.Run("removed while writing", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "scans")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd, stderr, _, _ := startPaced(t, dir, 40)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if code := exitCode(t, cmd); code != exitFailure || !strings.Contains(stderr.String(), "no such file or directory") {
			t.Errorf("exit status %d, want %d:\n%s", code, exitFailure, stderr)
		}
	})
}

// openFDs returns the number of file descriptors the process holds.
func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors: %v", err)
	}
	return len(fds)
}

// settled waits up to 5 s for the goroutine count to come back to at most
// want, and returns the last count.
func settled(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); n > want && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

// checkNothingLeft compares goroutines, file descriptors, HDF5 and
// libfabric objects with their counts before a scan.
func checkNothingLeft(t *testing.T, goroutines, fds int) {
	t.Helper()
	if n := settled(goroutines); n > goroutines {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines left behind:\n%s", n-goroutines, buf[:runtime.Stack(buf, true)])
	}
	if n := openFDs(t); n > fds {
		t.Errorf("%d file descriptors left open", n-fds)
	}
	if n := writer.OpenObjects(); n != 0 {
		t.Errorf("%d HDF5 objects left open", n)
	}
	if n := fabric.OpenObjects(); n != 0 {
		t.Errorf("%d libfabric objects left open", n)
	}
}

// TestReplayLeavesNothingOpen replays in-process, with and without faults
// in the capture, and checks that goroutines, file descriptors and HDF5
// objects are all gone after it.
func TestReplayLeavesNothingOpen(t *testing.T) {
	clean, _ := simulate(t, "--frames", "8")
	faulty, _ := simulate(t, "--frames", "8", "--missing", "2", "--corrupt", "5", "--duplicate", "3")
	dir := t.TempDir()
	scan := func(in, name string) int {
		return run([]string{"replay", in, "-o", filepath.Join(dir, name), "--projections", "8"})
	}
	scan(clean, "warm.h5") // once-per-process goroutines (signals) start here
	time.Sleep(100 * time.Millisecond)
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	if code := scan(clean, "clean.h5"); code != exitOK {
		t.Fatalf("replay exit status %d", code)
	}
	checkNothingLeft(t, goroutines, fds)
	if code := scan(faulty, "faulty.h5"); code != exitIncomplete {
		t.Fatalf("replay of a faulty capture: exit status %d", code)
	}
	checkNothingLeft(t, goroutines, fds)
	if code := scan(filepath.Join(dir, "no-such.pmcap"), "none.h5"); code != exitFailure {
		t.Fatalf("replay of a missing capture: exit status %d", code)
	}
	checkNothingLeft(t, goroutines, fds)
}

// TestAcquireLeavesNothingOpen receives a scan in-process, whole and cut
// short, and checks that goroutines, file descriptors, HDF5 and libfabric
// objects are all gone after it.
func TestAcquireLeavesNothingOpen(t *testing.T) {
	smallDetector(t)
	path, truth := simulate(t, "--frames", "8")
	recs := records(t, path)
	f := truthFormat(t, truth)
	dir := t.TempDir()
	scan := func(name string, abort bool) int {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		addr := freeAddr(t)
		done := startAcquire("--listen", addr, "-o", filepath.Join(dir, name), "--projections", "8",
			"--connect-timeout", "20s")
		s := dialRetrying(t, ctx, addr, f)
		if abort {
			post(ctx, s, recs[:4])
			time.Sleep(100 * time.Millisecond)
			s.Abort()
		} else if err := post(ctx, s, recs); err != nil {
			t.Fatal(err)
		} else if _, err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return waitExit(t, done, 20*time.Second)
	}
	scan("warm.h5", false)
	time.Sleep(100 * time.Millisecond)
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	if code := scan("whole.h5", false); code != exitOK {
		t.Fatalf("acquire exit status %d", code)
	}
	checkNothingLeft(t, goroutines, fds)
	if code := scan("cut.h5", true); code != exitIncomplete {
		t.Fatalf("acquire of a scan cut short: exit status %d", code)
	}
	checkNothingLeft(t, goroutines, fds)
}

// TestInterruptedReplay stops a paced replay with SIGINT, as Ctrl-C does:
// the file is finished and verifies, the command says it was interrupted
// in words (not "context canceled") and exits 3.
func TestInterruptedReplay(t *testing.T) {
	path, _ := simulate(t, "--frames", "40")
	out := filepath.Join(t.TempDir(), "scan.h5")
	cmd := command("replay", path, "-o", out, "--projections", "40", "--fps", "20")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(800 * time.Millisecond)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitIncomplete {
		t.Fatalf("interrupted replay: %v, want exit status %d\n%s", err, exitIncomplete, stderr.String())
	}
	if msg := stderr.String(); !strings.Contains(msg, "h5ingest: interrupted: "+out+" holds the frames received before") ||
		strings.Contains(msg, "context canceled") {
		t.Errorf("interrupted replay says:\n%s", msg)
	}
	if code, stdout := runCaptured(t, "verify", out); code != exitIncomplete {
		t.Errorf("verify of the interrupted scan: exit status %d, want %d\n%s", code, exitIncomplete, stdout)
	}
}

// TestAcquireOfNoFrame has a detector connect and end its scan without a
// frame, with no plan: acquire says so and exits 3, not 0.
func TestAcquireOfNoFrame(t *testing.T) {
	smallDetector(t)
	_, truth := simulate(t, "--frames", "1")
	addr := freeAddr(t)
	out := filepath.Join(t.TempDir(), "empty.h5")
	cmd := command("acquire", "--listen", addr, "-o", out, "--connect-timeout", "20s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := dialRetrying(t, ctx, addr, truthFormat(t, truth))
	if _, err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitIncomplete {
		t.Fatalf("acquire of no frame: %v, want exit status %d\n%s", err, exitIncomplete, stderr.String())
	}
	if !strings.Contains(stderr.String(), "no frame arrived and no plan gave a count") {
		t.Errorf("acquire of no frame says:\n%s", stderr.String())
	}
}
