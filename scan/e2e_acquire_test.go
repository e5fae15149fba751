package scan

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/scan/scantest"
	"h5ingest/source/capture"
	"h5ingest/source/fabric"
	"h5ingest/source/sim"
)

// The faults of an acquire through the library: a sender that stalls,
// reconnects, sends nothing, sends frames beyond the plan or with stray
// numbers; a --record capture on a full disk or named as the scan's file;
// and what an acquire leaves open. docs/reliability.md lists each.

// TestAcquireSenderStalls has the detector stop mid-scan for a while: a
// pause shorter than the idle timeout loses nothing; a longer one ends the
// scan with the frames after it recorded missing (ErrIncomplete).
func TestAcquireSenderStalls(t *testing.T) {
	path, truth := scantest.Simulate(t, simScan(scantest.SmallFormat, 20))
	recs := scantest.CaptureRecords(t, path)
	stages := scantest.Stages(t)
	tests := []struct {
		name        string
		stall, idle time.Duration
		want        error
		ok          int
	}{
		{"resumes", 400 * time.Millisecond, 3 * time.Second, nil, 20},
		{"past idle timeout", 1500 * time.Millisecond, 300 * time.Millisecond, ErrIncomplete, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			addr, out := scantest.FreeAddr(t), filepath.Join(t.TempDir(), "stall.h5")
			p := testProfile(t, stages, scantest.SmallFormat, map[string]any{"source.connect_timeout": 20 * time.Second, "source.idle_timeout": tt.idle})
			acq := startAcquire(t, acquireOptions(t, p, stages, plan.Tomo(0, 0, 20, 0, 180), out, addr))
			s := dialRetrying(t, ctx, addr, scantest.SmallFormat)
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
			runErr := acq.wait(t, 20*time.Second)
			if !errors.Is(runErr, tt.want) {
				t.Fatalf("acquire: %v, want %v\n%s", runErr, tt.want, acq.errs.String())
			}
			if tt.want == nil && err != nil {
				t.Errorf("sender: %v", err)
			}
			if tt.want != nil && err == nil {
				t.Error("the sender was not told that the receiver had stopped")
			}
			status, ok := scantest.CheckTruth(t, out, truth)
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
// has it connect again to send the rest: an acquire takes one connection
// per scan, so the scan ends at the disconnect (ErrIncomplete, the rest
// recorded missing) and the second connection is refused, not swallowed.
func TestAcquireSenderReconnects(t *testing.T) {
	path, truth := scantest.Simulate(t, simScan(scantest.SmallFormat, 20))
	recs := scantest.CaptureRecords(t, path)
	stages := scantest.Stages(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr, out := scantest.FreeAddr(t), filepath.Join(t.TempDir(), "reconnect.h5")
	p := testProfile(t, stages, scantest.SmallFormat, map[string]any{"source.connect_timeout": 20 * time.Second, "source.idle_timeout": 10 * time.Second})
	o := acquireOptions(t, p, stages, plan.Tomo(0, 0, 20, 0, 180), out, addr)
	running := make(chan *pipeline.Pipeline, 1)
	o.Progress = progressOf(running)
	acq := startAcquire(t, o)
	s := dialRetrying(t, ctx, addr, scantest.SmallFormat)
	if err := post(ctx, s, recs[:10]); err != nil {
		t.Fatal(err)
	}
	waitReceived(t, running, 10) // the ten frames land
	s.Abort()
	again := make(chan error, 1)
	go func() {
		s, err := dial(ctx, addr, scantest.SmallFormat, 3*time.Second)
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
	if err := acq.wait(t, 20*time.Second); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("acquire: %v, want ErrIncomplete\n%s", err, acq.errs.String())
	}
	if err := <-again; err == nil {
		t.Error("the reconnected sender sent the rest of the scan into nothing, without an error")
	}
	status, ok := scantest.CheckTruth(t, out, truth)
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

// TestAcquireLeavesNothingOpen receives a scan, whole and cut short, and
// checks that goroutines, file descriptors, HDF5 and libfabric objects
// are all gone after it.
func TestAcquireLeavesNothingOpen(t *testing.T) {
	path, _ := scantest.Simulate(t, simScan(scantest.SmallFormat, 8))
	recs := scantest.CaptureRecords(t, path)
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.SmallFormat, map[string]any{"source.connect_timeout": 20 * time.Second})
	dir := t.TempDir()
	scan := func(name string, abort bool) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		addr := scantest.FreeAddr(t)
		acq := startAcquire(t, acquireOptions(t, p, stages, plan.Tomo(0, 0, 8, 0, 180), filepath.Join(dir, name), addr))
		s := dialRetrying(t, ctx, addr, scantest.SmallFormat)
		if abort {
			post(ctx, s, recs[:4])
			time.Sleep(100 * time.Millisecond)
			s.Abort()
		} else if err := post(ctx, s, recs); err != nil {
			t.Fatal(err)
		} else if _, err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return acq.wait(t, 20*time.Second)
	}
	scan("warm.h5", false)
	time.Sleep(100 * time.Millisecond)
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	if err := scan("whole.h5", false); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	checkNothingLeft(t, goroutines, fds)
	if err := scan("cut.h5", true); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("acquire of a scan cut short: %v, want ErrIncomplete", err)
	}
	checkNothingLeft(t, goroutines, fds)
}

// TestAcquireOfNoFrame has a detector connect and end its scan without a
// frame, with no plan: the acquire says so and is incomplete, not a
// success.
func TestAcquireOfNoFrame(t *testing.T) {
	stages := scantest.Stages(t)
	addr, out := scantest.FreeAddr(t), filepath.Join(t.TempDir(), "empty.h5")
	p := testProfile(t, stages, scantest.SmallFormat, map[string]any{"source.connect_timeout": 20 * time.Second})
	acq := startAcquire(t, acquireOptions(t, p, stages, plan.Plan{}, out, addr))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := dialRetrying(t, ctx, addr, scantest.SmallFormat)
	if _, err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := acq.wait(t, 30*time.Second); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("acquire of no frame: %v, want ErrIncomplete\n%s", err, acq.errs.String())
	}
	if !strings.Contains(acq.errs.String(), "no frame arrived and no plan gave a count") {
		t.Errorf("acquire of no frame says:\n%s", acq.errs.String())
	}
}

// TestAcquireRecordDiskFull records onto a 1 MiB tmpfs a scan of 40
// frames of 295 kB: the recording stops with a warning and a cut capture,
// while the scan goes on and its file gets every frame (no error).
func TestAcquireRecordDiskFull(t *testing.T) {
	small := mountTmpfs(t, "size=1m")
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 128, ChipHeight: 128},
		Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	path, _ := scantest.Simulate(t, simScan(f, 40))
	stages := scantest.Stages(t)
	out, rec, addr := filepath.Join(t.TempDir(), "scan.h5"), filepath.Join(small, "scan.pmcap"), scantest.FreeAddr(t)
	p := testProfile(t, stages, f, map[string]any{"source.connect_timeout": 30 * time.Second})
	o := acquireOptions(t, p, stages, plan.Tomo(0, 0, 40, 0, 180), out, addr)
	o.Record = rec
	acq := startAcquire(t, o)
	if err := <-scantest.SendHello(path, addr, fabric.Hello{Mode: fabric.ModeWrite, Format: f}, 0, make(chan struct{})); err != nil {
		t.Errorf("send: %v", err)
	}
	if err := acq.wait(t, 30*time.Second); err != nil {
		t.Errorf("acquire: %v, want none (the scan's file is whole):\n%s", err, acq.errs.String())
	}
	if msg := acq.errs.String(); !strings.Contains(msg, "--record stopped") || !strings.Contains(msg, "no space left on device") {
		t.Errorf("the acquire does not warn about the recording:\n%s", msg)
	}
	if st := scantest.Statuses(t, out); st[frame.StatusOK] != 40 {
		t.Errorf("the file holds %v, want 40 ok", st)
	}
	r, err := capture.Open(rec)
	if err != nil {
		t.Fatalf("the cut capture does not open: %v", err)
	}
	defer r.Close()
	var whole int
	buf := make([]byte, 1<<20)
	for ; ; whole++ {
		if _, _, err = r.Next(buf); err != nil {
			break
		}
	}
	if !errors.Is(err, capture.ErrTruncated) || whole == 0 || whole >= 40 {
		t.Errorf("the capture holds %d whole frames then %v: want some, then a cut", whole, err)
	}
}

// TestAcquireFramesBeyondPlan sends a detector's 12 frames to an acquire
// whose plan has 8, with a ring of 2 slots so that frames wait for the
// pipeline: the 4 frames beyond the plan are rejected, the scan is
// incomplete (it used to be a success), and the --record capture keeps
// all 12.
func TestAcquireFramesBeyondPlan(t *testing.T) {
	sent, truth := scantest.Simulate(t, simScan(scantest.SmallFormat, 12))
	stages := scantest.Stages(t)
	dir := t.TempDir()
	out, rec, addr := filepath.Join(dir, "s2.h5"), filepath.Join(dir, "s2.pmcap"), scantest.FreeAddr(t)
	p := testProfile(t, stages, scantest.SmallFormat, map[string]any{"source.ring_slots": 2, "source.connect_timeout": 20 * time.Second})
	o := acquireOptions(t, p, stages, plan.Tomo(0, 0, 8, 0, 180), out, addr)
	o.Record = rec
	acq := startAcquire(t, o)
	if err := <-scantest.SendHello(sent, addr, fabric.Hello{Mode: fabric.ModeWrite, Format: scantest.SmallFormat}, 0, make(chan struct{})); err != nil {
		t.Fatalf("send: %v", err)
	}
	if err := acq.wait(t, 30*time.Second); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("acquire: %v, want ErrIncomplete", err)
	}
	status, ok := scantest.CheckTruth(t, out, truth)
	if len(status) != 8 || ok != 8 {
		t.Errorf("file holds %d frames, %d ok: want the 8 planned, all ok", len(status), ok)
	}
	if got := len(scantest.CaptureRecords(t, rec)); got != 12 {
		t.Errorf("the capture holds %d frames, want all 12 that arrived", got)
	}
}

// strayCapture writes a capture of frames good frames, without a plan in
// its metadata, among which 5 carry corrupt frame numbers (2^24-1, 20000,
// 2^40, 2^63, 2^64-1), and returns it with the good frames' truth.
func strayCapture(t *testing.T, frames int) (string, *sim.Truth) {
	t.Helper()
	path, truth := scantest.Simulate(t, simScan(scantest.SmallFormat, frames))
	var stream [][]byte
	stray := []uint64{1<<24 - 1, 20_000, 1 << 40, 1 << 63, 1<<64 - 1}
	for n, rec := range scantest.CaptureRecords(t, path) {
		stream = append(stream, rec)
		if n%5 == 2 {
			bad := bytes.Clone(rec)
			binary.LittleEndian.PutUint64(bad[8:], stray[n/5])
			stream = append(stream, resealed(bad))
		}
	}
	in := filepath.Join(t.TempDir(), "stray.pmcap")
	scantest.WriteCapture(t, in, stream)
	return in, truth
}

// TestAcquireStrayFrameNumberNoPlan has a detector send, to an acquire
// without a plan, good frames among which 5 carry corrupt frame numbers,
// through a ring of 2 slots: they are rejected as out of range, the scan
// is incomplete, and the file holds the good frames alone, all ok.
func TestAcquireStrayFrameNumberNoPlan(t *testing.T) {
	const frames = 24
	sent, truth := strayCapture(t, frames)
	stages := scantest.Stages(t)
	out, addr := filepath.Join(t.TempDir(), "s3.h5"), scantest.FreeAddr(t)
	p := testProfile(t, stages, scantest.SmallFormat, map[string]any{"source.ring_slots": 2, "source.connect_timeout": 20 * time.Second})
	acq := startAcquire(t, acquireOptions(t, p, stages, plan.Plan{}, out, addr))
	if err := <-scantest.SendHello(sent, addr, fabric.Hello{Mode: fabric.ModeWrite, Format: scantest.SmallFormat}, 0, make(chan struct{})); err != nil {
		t.Fatalf("send: %v", err)
	}
	if err := acq.wait(t, 30*time.Second); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("acquire: %v, want ErrIncomplete", err)
	}
	status, ok := scantest.CheckTruth(t, out, truth)
	if len(status) != frames || ok != frames {
		t.Errorf("file holds %d frames, %d ok: want the %d good frames, all ok", len(status), ok, frames)
	}
}

// TestAcquireRecordIsTheOutput gives an acquire's --record capture the
// name of the scan's file, its temporary name or its lock file, in a
// directory of its own, with and without output.overwrite: a usage error
// before it listens, and no file made. An acquire used to take the
// detector, make the capture under the file's name and then fail
// ("exists"), the detector's frames sent into nothing and an empty file
// left; with overwrite the scan's file would have replaced the capture.
func TestAcquireRecordIsTheOutput(t *testing.T) {
	stages := scantest.Stages(t)
	for _, overwrite := range []bool{false, true} {
		dir := t.TempDir()
		out := filepath.Join(dir, "scan.h5")
		p := testProfile(t, stages, scantest.SmallFormat, map[string]any{"output.overwrite": overwrite, "source.connect_timeout": 5 * time.Second})
		for _, rec := range []string{out, filepath.Join(dir, ".", "scan.h5"), filepath.Join(dir, ".scan.h5.part"), filepath.Join(dir, ".scan.h5.lock")} {
			o := acquireOptions(t, p, stages, plan.Plan{}, out, scantest.FreeAddr(t))
			o.Record = rec
			// NewAcquisition refuses it: nothing has listened yet.
			_, err := NewAcquisition(o)
			if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "give the capture a name of its own") {
				t.Errorf("acquire --record %s (overwrite %v): %v, want a usage error before listening", rec, overwrite, err)
			}
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("files left: %v", entries)
		}
	}
}
