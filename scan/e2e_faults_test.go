package scan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/source/capture"
	"h5ingest/source/fabric"
	"h5ingest/source/sim"
	"h5ingest/writer"
)

// Faults of the sender, the capture, the disk and the output directory,
// through the library: what the scan returns, says and leaves in its file.

// smallFormat is the frame of the fault tests: 3 x 2 chips of 32 x 16,
// 24-bit LFSR bitplane.
var smallFormat = frame.Format{Geometry: frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16},
	Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}

// simulateTruth writes a capture of n frames of f, changed by change
// where it is not nil, and returns its path and ground truth.
func simulateTruth(t *testing.T, f frame.Format, n int, change func(*sim.Config)) (string, *sim.Truth) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Format, cfg.Plan, cfg.Seed = f, plan.Tomo(0, 0, n, 0, 180), 11
	if change != nil {
		change(&cfg)
	}
	path := filepath.Join(t.TempDir(), "scan.pmcap")
	if _, err := sim.WriteFile(path, cfg, []uint16{cfg.Module}, false, "test"); err != nil {
		t.Fatal(err)
	}
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	truth, err := sim.ReadTruth(r.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	return path, truth
}

// recordsOf reads the records of the capture at path, each header and
// payload as on the wire.
func recordsOf(t *testing.T, path string) [][]byte {
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

// writeRecordsTo writes a capture of the given records to path.
func writeRecordsTo(t *testing.T, path string, recs [][]byte) {
	t.Helper()
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	w, err := capture.NewWriter(file, capture.Metadata{Profile: "test", Created: "2026-01-01T00:00:00Z", Software: "scan test"})
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

// framesOf returns the frame statuses the file at path records and how
// many are ok, checking that every ok frame has a chunk and the true data
// CRC.
func framesOf(t *testing.T, path string, truth *sim.Truth) (status []uint8, ok int) {
	t.Helper()
	r, err := writer.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recs, err := r.Records()
	if err != nil {
		t.Fatal(err)
	}
	for n, rec := range recs {
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

// replayTo replays the captures into out with the profile keys given, a
// plan of n projections (0: the capture's), and returns the scan's
// summary, its warnings and its error.
func replayTo(t *testing.T, out string, n int, keys map[string]any, captures ...string) (summary, warnings string, err error) {
	t.Helper()
	stages := testStages(t)
	p := testProfile(t, stages, smallFormat, keys)
	files, err := NewFiles(p, Names{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	var pl plan.Plan
	if n > 0 {
		pl = plan.Tomo(0, 0, n, 0, 180)
	}
	var sum, warn bytes.Buffer
	err = Replay(context.Background(), ReplayOptions{Options: Options{Profile: p, Plan: pl, Stages: stages, Out: &sum, Errs: &warn},
		Files: files, Captures: captures})
	return sum.String(), warn.String(), err
}

// acquireInto starts an acquire of n frames of smallFormat (0: no plan)
// into out on addr with the profile keys given, and returns its result.
func acquireInto(t *testing.T, out, addr string, n int, keys map[string]any, warnings io.Writer) <-chan error {
	t.Helper()
	stages := testStages(t)
	if keys == nil {
		keys = map[string]any{}
	}
	keys["source.connect_timeout"] = "20s"
	p := testProfile(t, stages, smallFormat, keys)
	files, err := NewFiles(p, Names{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	var pl plan.Plan
	if n > 0 {
		pl = plan.Tomo(0, 0, n, 0, 180)
	}
	a, err := NewAcquisition(AcquireOptions{Options: Options{Profile: p, Plan: pl, Stages: stages, Errs: warnings}, Files: files, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	go func() {
		stop := NewStopper(context.Background(), 20*time.Second, io.Discard)
		defer stop.Close()
		result <- a.Run(stop)
	}()
	return result
}

// dialSmall connects a sender of smallFormat frames to addr, waiting for
// the receiver to listen.
func dialSmall(t *testing.T, ctx context.Context, addr string) *fabric.Sender {
	t.Helper()
	s, err := fabric.DialWait(ctx, fabric.SenderConfig{Provider: "tcp", Addr: addr, Timeout: 20 * time.Second,
		Hello: fabric.Hello{Mode: fabric.ModeWrite, Format: smallFormat}})
	if err != nil {
		t.Fatalf("no receiver on %s: %v", addr, err)
	}
	return s
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

// waitResult returns what result delivers, failing the test after d.
func waitResult(t *testing.T, result <-chan error, d time.Duration) error {
	t.Helper()
	select {
	case err := <-result:
		return err
	case <-time.After(d):
		t.Fatalf("the scan did not end within %v", d)
		return nil
	}
}

// TestAcquireSenderStalls has the detector stop mid-scan for a while: a
// pause shorter than the idle timeout loses nothing; a longer one ends the
// scan, incomplete, with the frames after it recorded missing, and the
// sender is told.
func TestAcquireSenderStalls(t *testing.T) {
	path, truth := simulateTruth(t, smallFormat, 20, nil)
	recs := recordsOf(t, path)
	for _, tt := range []struct {
		name        string
		stall, idle time.Duration
		ok          int
	}{
		{"resumes", 400 * time.Millisecond, 3 * time.Second, 20},
		{"past idle timeout", 1500 * time.Millisecond, 300 * time.Millisecond, 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			addr, out := freePort(t), filepath.Join(t.TempDir(), "stall.h5")
			result := acquireInto(t, out, addr, 20, map[string]any{"source.idle_timeout": tt.idle.String()}, io.Discard)
			s := dialSmall(t, ctx, addr)
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
			runErr := waitResult(t, result, 20*time.Second)
			switch {
			case tt.ok == 20 && (runErr != nil || err != nil):
				t.Fatalf("acquire: %v; sender: %v; want both whole", runErr, err)
			case tt.ok < 20 && !errors.Is(runErr, ErrIncomplete):
				t.Fatalf("acquire: %v, want ErrIncomplete", runErr)
			case tt.ok < 20 && err == nil:
				t.Error("the sender was not told that the receiver had stopped")
			}
			status, ok := framesOf(t, out, truth)
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
// scan, so the scan ends at the disconnect (incomplete, the rest recorded
// missing) and the second connection is refused, not swallowed.
func TestAcquireSenderReconnects(t *testing.T) {
	path, truth := simulateTruth(t, smallFormat, 20, nil)
	recs := recordsOf(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr, out := freePort(t), filepath.Join(t.TempDir(), "reconnect.h5")
	result := acquireInto(t, out, addr, 20, map[string]any{"source.idle_timeout": "10s"}, io.Discard)
	s := dialSmall(t, ctx, addr)
	if err := post(ctx, s, recs[:10]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the ten frames land
	s.Abort()
	again := make(chan error, 1)
	go func() {
		s, err := fabric.Dial(ctx, fabric.SenderConfig{Provider: "tcp", Addr: addr, Timeout: 3 * time.Second,
			Hello: fabric.Hello{Mode: fabric.ModeWrite, Format: smallFormat}})
		if err == nil {
			if err = post(ctx, s, recs[10:]); err == nil {
				_, err = s.Close(ctx)
			} else {
				s.Abort()
			}
		}
		again <- err
	}()
	if err := waitResult(t, result, 20*time.Second); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("acquire: %v, want ErrIncomplete", err)
	}
	if err := <-again; err == nil {
		t.Error("the reconnected sender sent the rest of the scan into nothing, without an error")
	}
	status, ok := framesOf(t, out, truth)
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

// TestAcquireOfNoFrame has a detector connect and end its scan without a
// frame, with no plan: the scan is incomplete and says why.
func TestAcquireOfNoFrame(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var warnings bytes.Buffer
	addr, out := freePort(t), filepath.Join(t.TempDir(), "empty.h5")
	result := acquireInto(t, out, addr, 0, nil, &warnings)
	s := dialSmall(t, ctx, addr)
	if _, err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitResult(t, result, 20*time.Second); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("acquire of no frame: %v, want ErrIncomplete", err)
	}
	if !strings.Contains(warnings.String(), "no frame arrived and no plan gave a count") {
		t.Errorf("acquire of no frame says:\n%s", warnings.String())
	}
}

// TestReplayGarbageCapture replays files that are not captures, or that
// turn to garbage part way: no file where nothing could be read, the whole
// frames before the garbage where some could, and an error naming the
// byte offset.
func TestReplayGarbageCapture(t *testing.T) {
	path, truth := simulateTruth(t, smallFormat, 6, nil)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	frameBytes := frame.HeaderSize + smallFormat.PayloadSize()
	head := len(good) - 6*frameBytes
	rng := rand.New(rand.NewPCG(8, 8))
	noise := make([]byte, 3*frameBytes)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	for _, tt := range []struct {
		name string
		data []byte
		ok   int // frames ok in the file; -1: no file
	}{
		{"empty file", nil, -1},
		{"random bytes", noise, -1},
		{"header then garbage", append(good[:head:head], noise...), -1},
		{"garbage after three frames", append(good[:head+3*frameBytes:head+3*frameBytes], noise...), 3},
		{"zeros after two frames", append(good[:head+2*frameBytes:head+2*frameBytes], make([]byte, frameBytes)...), 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			in, out := filepath.Join(dir, "bad.pmcap"), filepath.Join(dir, "bad.h5")
			if err := os.WriteFile(in, tt.data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, warnings, err := replayTo(t, out, 0, nil, in)
			if tt.ok < 0 {
				if err == nil || errors.Is(err, ErrIncomplete) || errors.Is(err, ErrUsage) {
					t.Errorf("replay: %v, want a failure", err)
				}
				if _, err := os.Stat(out); err == nil {
					t.Error("an output file was written")
				}
				return
			}
			if !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error()+warnings, "at byte") {
				t.Errorf("replay: %v, want ErrIncomplete naming the byte offset\n%s", err, warnings)
			}
			if _, ok := framesOf(t, out, truth); ok != tt.ok {
				t.Errorf("%d frames ok, want %d", ok, tt.ok)
			}
		})
	}
}

// resealed recomputes the header CRC of rec after a change.
func resealed(rec []byte) []byte {
	copy(rec[60:], le32(frame.Checksum(rec[:60])))
	return rec
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// recordedFaults are the frame faults of spec/frames.md that a file
// records, each with the status it gets.
var recordedFaults = []struct {
	name   string
	status uint8
	apply  func(rec []byte) []byte
}{
	{"payload size", frame.StatusRejected, func(rec []byte) []byte {
		rec = append(rec, 1, 2, 3, 4) // four bytes more than the format holds
		copy(rec[24:], le32(uint32(len(rec)-frame.HeaderSize)))
		return resealed(rec)
	}},
	{"unknown encoding", frame.StatusRejected, func(rec []byte) []byte {
		rec[34] = 9
		return resealed(rec)
	}},
	{"payload crc", frame.StatusCRCMismatch, func(rec []byte) []byte {
		rec[frame.HeaderSize+len(rec)/3] ^= 0x10
		return rec
	}},
}

// TestReplayRandomFrameFaults replays captures where frames carry every
// recorded fault of the spec at random rates, plus duplicates, frame
// numbers beyond the plan and, in some, a header fault that ends the
// capture's reading: every good frame arrives intact, every bad one gets
// the status and count the spec gives it, and the file verifies.
func TestReplayRandomFrameFaults(t *testing.T) {
	const frames = 24
	path, truth := simulateTruth(t, smallFormat, frames, nil)
	clean := recordsOf(t, path)
	headerFaults := []func(rec []byte){
		func(rec []byte) { rec[0] = 'X' },               // magic
		func(rec []byte) { rec[4] = 2; resealed(rec) },  // version
		func(rec []byte) { rec[6] = 32; resealed(rec) }, // header size
		func(rec []byte) { rec[61] ^= 0xFF },            // header CRC
	}
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 17))
		rate := 0.1 + 0.4*rng.Float64()
		t.Run(fmt.Sprintf("seed %d rate %.2f", seed, rate), func(t *testing.T) {
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
					headerFaults[int(seed)%len(headerFaults)](rec)
					stream = append(stream, rec)
					break
				}
				if rng.Float64() < rate {
					fault := recordedFaults[rng.IntN(len(recordedFaults))]
					rec = fault.apply(rec)
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
			in, out := filepath.Join(dir, "faults.pmcap"), filepath.Join(dir, "faults.h5")
			writeRecordsTo(t, in, stream)
			summary, warnings, err := replayTo(t, out, frames, nil, in)
			switch incomplete := missing+rejected+crc+outOfRange > 0; {
			case incomplete && !errors.Is(err, ErrIncomplete), !incomplete && err != nil:
				t.Fatalf("replay: %v (incomplete: %v)\n%s%s", err, incomplete, summary, warnings)
			}
			if cut >= 0 && !strings.Contains(err.Error()+warnings, "at byte") {
				t.Errorf("a header fault did not name its byte offset: %v\n%s", err, warnings)
			}
			for _, line := range []string{
				fmt.Sprintf("ok              %d", frames-missing-rejected-crc),
				fmt.Sprintf("missing         %d", missing),
				fmt.Sprintf("crc mismatch    %d", crc),
				fmt.Sprintf("rejected        %d", rejected),
				fmt.Sprintf("duplicates      %d dropped", dups),
				fmt.Sprintf("out of range    %d rejected (beyond the scan, not written)", outOfRange),
			} {
				if !strings.Contains(summary, line+"\n") {
					t.Errorf("summary lacks %q:\n%s", line, summary)
				}
			}
			status, _ := framesOf(t, out, truth)
			for n := range frames {
				if status[n] != want[n] {
					t.Errorf("frame %d: status %d, want %d", n, status[n], want[n])
				}
			}
			var v bytes.Buffer
			if err := Verify(context.Background(), &v, out, DefaultVerifyStall); strings.Contains(v.String(), "BAD") ||
				(err != nil && !errors.Is(err, ErrIncomplete)) {
				t.Errorf("verify: %v\n%s", err, v.String())
			}
		})
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
// half of it: the error is the system's "No space left on device", and
// the file, under its final name, holds every frame written before the
// disk filled, verified, the rest recorded missing; the summary's ok
// count is the file's.
func TestReplayDiskFull(t *testing.T) {
	dir := mountTmpfs(t, "size=8m")
	f := smallFormat
	f.ChipWidth, f.ChipHeight = 256, 256
	path, truth := simulateTruth(t, f, 12, nil)
	out := filepath.Join(dir, "full.h5")
	stages := testStages(t)
	p := testProfile(t, stages, f, map[string]any{"output.compression": "none"})
	files, err := NewFiles(p, Names{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	var summary bytes.Buffer
	err = Replay(context.Background(), ReplayOptions{Options: Options{Profile: p, Plan: plan.Tomo(0, 0, 12, 0, 180), Stages: stages, Out: &summary},
		Files: files, Captures: []string{path}})
	if err == nil || errors.Is(err, ErrIncomplete) || !strings.Contains(strings.ToLower(err.Error()), "no space left on device") {
		t.Fatalf("replay onto a full disk: %v, want the system's no space left on device", err)
	}
	status, ok := framesOf(t, out, truth)
	if ok == 0 || ok == 12 {
		t.Fatalf("%d frames ok of 12: want those written before the disk filled: %v", ok, status)
	}
	for n, s := range status {
		if s != frame.StatusOK && s != frame.StatusMissing {
			t.Errorf("frame %d: status %d, want ok or missing", n, s)
		}
	}
	if !strings.Contains(summary.String(), fmt.Sprintf("ok              %d\n", ok)) {
		t.Errorf("the summary's ok count is not the file's %d:\n%s", ok, summary.String())
	}
	var v bytes.Buffer
	if err := Verify(context.Background(), &v, out, DefaultVerifyStall); !errors.Is(err, ErrIncomplete) ||
		strings.Contains(v.String(), "BAD") || !strings.Contains(v.String(), fmt.Sprintf("%d chunks verified", ok)) {
		t.Errorf("verify: %v, want incomplete with %d chunks verified:\n%s", err, ok, v.String())
	}
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

// checkNothingLeft compares goroutines, file descriptors, HDF5 and
// libfabric objects with their counts before a scan.
func checkNothingLeft(t *testing.T, goroutines, fds int) {
	t.Helper()
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); n > goroutines && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(20 * time.Millisecond)
	}
	if n > goroutines {
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

// TestReplayLeavesNothingOpen replays with and without faults in the
// capture, and of a capture that is not there: goroutines, file
// descriptors and HDF5 objects are all gone after each.
func TestReplayLeavesNothingOpen(t *testing.T) {
	clean, _ := simulateTruth(t, smallFormat, 8, nil)
	faulty, _ := simulateTruth(t, smallFormat, 8, func(c *sim.Config) {
		c.Missing, c.Corrupt, c.Duplicate = sim.FaultSpec{Frames: []int{2}}, sim.FaultSpec{Frames: []int{5}}, sim.FaultSpec{Frames: []int{3}}
	})
	dir := t.TempDir()
	replayTo(t, filepath.Join(dir, "warm.h5"), 8, nil, clean)
	time.Sleep(100 * time.Millisecond)
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	if _, _, err := replayTo(t, filepath.Join(dir, "clean.h5"), 8, nil, clean); err != nil {
		t.Fatalf("replay: %v", err)
	}
	checkNothingLeft(t, goroutines, fds)
	if _, _, err := replayTo(t, filepath.Join(dir, "faulty.h5"), 8, nil, faulty); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("replay of a faulty capture: %v, want ErrIncomplete", err)
	}
	checkNothingLeft(t, goroutines, fds)
	if _, _, err := replayTo(t, filepath.Join(dir, "none.h5"), 8, nil, filepath.Join(dir, "no-such.pmcap")); err == nil {
		t.Fatal("replay of a missing capture succeeded")
	}
	checkNothingLeft(t, goroutines, fds)
}

// TestAcquireLeavesNothingOpen receives a scan, whole and cut short:
// goroutines, file descriptors, HDF5 and libfabric objects are all gone
// after each.
func TestAcquireLeavesNothingOpen(t *testing.T) {
	path, _ := simulateTruth(t, smallFormat, 8, nil)
	recs := recordsOf(t, path)
	dir := t.TempDir()
	acquire := func(name string, abort bool) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		addr := freePort(t)
		result := acquireInto(t, filepath.Join(dir, name), addr, 8, nil, io.Discard)
		s := dialSmall(t, ctx, addr)
		if abort {
			post(ctx, s, recs[:4])
			time.Sleep(100 * time.Millisecond)
			s.Abort()
		} else if err := post(ctx, s, recs); err != nil {
			t.Fatal(err)
		} else if _, err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return waitResult(t, result, 20*time.Second)
	}
	acquire("warm.h5", false)
	time.Sleep(100 * time.Millisecond)
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	if err := acquire("whole.h5", false); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	checkNothingLeft(t, goroutines, fds)
	if err := acquire("cut.h5", true); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("acquire of a scan cut short: %v, want ErrIncomplete", err)
	}
	checkNothingLeft(t, goroutines, fds)
}

// TestReplayOutputDirMissing replays into a directory that does not
// exist: the pre-scan check says so and nothing is written.
func TestReplayOutputDirMissing(t *testing.T) {
	path, _ := simulateTruth(t, smallFormat, 2, nil)
	out := filepath.Join(t.TempDir(), "gone", "scan.h5")
	_, warnings, err := replayTo(t, out, 0, nil, path)
	if !errors.Is(err, ErrChecks) || !strings.Contains(warnings, "pre-scan check: output directory "+filepath.Dir(out)+" does not exist") {
		t.Errorf("replay into a missing directory: %v\n%s", err, warnings)
	}
}

// TestReplayTruncatedCaptureNoPlan replays a capture that records no
// plan, cut in the middle of its fourth frame: a scan of unknown length
// ends at the last whole frame, three frames all ok, and is incomplete.
func TestReplayTruncatedCaptureNoPlan(t *testing.T) {
	simulated, _ := simulateTruth(t, smallFormat, 6, nil)
	path := filepath.Join(t.TempDir(), "noplan.pmcap")
	writeRecordsTo(t, path, recordsOf(t, simulated)) // metadata without a plan
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	frameBytes := int64(frame.HeaderSize + smallFormat.PayloadSize())
	head := info.Size() - 6*frameBytes
	if err := os.Truncate(path, head+3*frameBytes+frameBytes/2); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "scan.h5")
	if _, _, err := replayTo(t, out, 0, nil, path); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("replay of a cut capture without a plan: %v, want ErrIncomplete", err)
	}
	if got := statuses(t, out); got[frame.StatusOK] != 3 || len(got) != 1 {
		t.Errorf("statuses %v, want 3 frames, all ok", got)
	}
}
