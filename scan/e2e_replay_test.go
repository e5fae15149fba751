package scan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	"h5ingest/source/sim"
	"h5ingest/writer"
)

// The faults of a replay through the library: captures that are garbage
// or hold every frame fault of the spec, a pipeline too slow for a
// detector that cannot wait, an interruption; and what a replay leaves
// open. docs/reliability.md lists each.

// TestReplayGarbageCapture replays files that are not captures, or that
// turn to garbage part way.
func TestReplayGarbageCapture(t *testing.T) {
	path, truth := scantest.Simulate(t, simScan(scantest.SmallFormat, 6))
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	frameBytes := frame.HeaderSize + scantest.SmallFormat.PayloadSize()
	head := len(good) - 6*frameBytes
	rng := rand.New(rand.NewPCG(8, 8))
	noise := make([]byte, 3*frameBytes)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.SmallFormat, nil)
	tests := []struct {
		name string
		data []byte
		ok   int // frames ok in the file, the scan incomplete; -1: no file, a failure
	}{
		{"empty file", nil, -1},
		{"random bytes", noise, -1},
		{"header then garbage", append(good[:head:head], noise...), -1},
		{"garbage after three frames", append(good[:head+3*frameBytes:head+3*frameBytes], noise...), 3},
		{"zeros after two frames", append(good[:head+2*frameBytes:head+2*frameBytes], make([]byte, frameBytes)...), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "bad.pmcap")
			if err := os.WriteFile(in, tt.data, 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "bad.h5")
			r := replayInto(t, context.Background(), p, stages, plan.Plan{}, out, in)
			if tt.ok < 0 {
				if !failed(r.err) || r.err.Error() == "" {
					t.Fatalf("replay: %v, want a failure with a message\n%s", r.err, r.errs)
				}
				if _, err := os.Stat(out); err == nil {
					t.Error("an output file was written")
				}
				return
			}
			if !errors.Is(r.err, ErrIncomplete) {
				t.Fatalf("replay: %v, want ErrIncomplete\n%s", r.err, r.errs)
			}
			if !strings.Contains(r.errs, "h5ingest: ") || !strings.Contains(r.errs, "at byte") {
				t.Errorf("the message does not name the byte offset:\n%s", r.errs)
			}
			if _, ok := scantest.CheckTruth(t, out, truth); ok != tt.ok {
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
	apply  func(rec []byte) []byte
}

var recordedFaults = []badFrame{
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
// the status and count the spec gives it.
func TestReplayRandomFrameFaults(t *testing.T) {
	const frames = 24
	path, truth := scantest.Simulate(t, simScan(scantest.SmallFormat, frames))
	clean := scantest.CaptureRecords(t, path)
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.SmallFormat, nil)
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
					headerFaults[int(seed)%len(headerFaults)].apply(rec)
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
			in := filepath.Join(dir, "faults.pmcap")
			scantest.WriteCapture(t, in, stream)
			out := filepath.Join(dir, "faults.h5")
			r := replayInto(t, context.Background(), p, stages, plan.Tomo(0, 0, frames, 0, 180), out, in)
			var wantErr error
			if missing+rejected+crc+outOfRange > 0 {
				wantErr = ErrIncomplete // frames beyond the plan are rejected too
			}
			if !errors.Is(r.err, wantErr) {
				t.Fatalf("replay: %v, want %v\n%s%s", r.err, wantErr, r.out, r.errs)
			}
			if cut >= 0 && !strings.Contains(r.errs, "at byte") {
				t.Errorf("a header fault did not name its byte offset:\n%s", r.errs)
			}
			c := r.summary().Progress.Counts
			if want := (pipeline.Counts{OK: frames - missing - rejected - crc, Missing: missing, CRCMismatch: crc, Rejected: rejected,
				Duplicate: dups, OutOfRange: outOfRange}); c.OK != want.OK || c.Missing != want.Missing || c.CRCMismatch != want.CRCMismatch ||
				c.Rejected != want.Rejected || c.Duplicate != want.Duplicate || c.OutOfRange != want.OutOfRange {
				t.Errorf("summary counts %+v, want %+v", c, want)
			}
			status, _ := scantest.CheckTruth(t, out, truth)
			for n := range frames {
				if status[n] != want[n] {
					t.Errorf("frame %d: status %d, want %d", n, status[n], want[n])
				}
			}
			if vout, err := verified(out); strings.Contains(vout, "BAD") || failed(err) {
				t.Errorf("verify: %v\n%s", err, vout)
			}
		})
	}
}

// TestReplayFaultTable replays a capture holding every kind of fault the
// simulator makes (missing, duplicated, reordered, corrupt), of a detector
// with chips turned, and checks the file record by record, then reads it
// with h5py. (What inspect says of the file: TestInspectFaultTable in
// package cli.)
func TestReplayFaultTable(t *testing.T) {
	t.Parallel()
	cfg := simScan(scantest.SmallFormat, 0)
	cfg.Plan = plan.Tomo(2, 2, 12, 0, 180)
	cfg.Orientation = frame.Orientation{0, 180, 0, 180, 180, 0}
	cfg.Missing, cfg.Duplicate = sim.FaultSpec{Frames: []int{3}}, sim.FaultSpec{Frames: []int{5}}
	cfg.Reorder, cfg.Corrupt = sim.FaultSpec{Frames: []int{7}}, sim.FaultSpec{Frames: []int{9}}
	path, truth := scantest.Simulate(t, cfg)
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.SmallFormat, map[string]any{"detector.chip_orientation": []any{0, 180, 0, 180, 180, 0}})
	out := filepath.Join(t.TempDir(), "scan.h5")
	r := replayInto(t, context.Background(), p, stages, plan.Tomo(2, 2, 12, 0, 180), out, path)
	if !errors.Is(r.err, ErrIncomplete) {
		t.Fatalf("replay: %v, want ErrIncomplete (frames missing and corrupt)\n%s", r.err, r.out)
	}
	if c := r.summary().Progress; c.Missing != 1 || c.CRCMismatch != 1 || c.Duplicate != 1 {
		t.Errorf("summary: %d missing, %d crc mismatch, %d duplicates; want 1 of each:\n%s", c.Missing, c.CRCMismatch, c.Duplicate, r.out)
	}
	status := scantest.ExpectedStatus(truth)
	rd, err := writer.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	records, err := rd.Records()
	rd.Close()
	if err != nil {
		t.Fatal(err)
	}
	for n, rec := range records {
		if rec.Status != status[n] {
			t.Errorf("frame %d: status %d, want %d", n, rec.Status, status[n])
		}
		if rec.Status == frame.StatusOK && rec.DataCRC != truth.DataCRC[n] {
			t.Errorf("frame %d: data CRC %08x, truth %08x", n, rec.DataCRC, truth.DataCRC[n])
		}
		if rec.Status == frame.StatusCRCMismatch && rec.DataCRC == truth.DataCRC[n] {
			t.Errorf("frame %d: a corrupt payload decoded to the true image", n)
		}
	}
	if vout, err := verified(out); !errors.Is(err, ErrIncomplete) || strings.Contains(vout, "BAD") {
		t.Errorf("verify: %v, want ErrIncomplete with no bad chunk:\n%s", err, vout)
	}
	scantest.CrossCheck(t, out, writer.LayoutNXtomo, truth, status, true)
}

// TestReplayDropWhenFull replays a capture far faster than the pipeline
// writes it, as a detector that cannot wait sends: the frames that find
// the pipeline full are dropped, counted in the summary and recorded
// missing; verify agrees.
func TestReplayDropWhenFull(t *testing.T) {
	t.Parallel()
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 6, ChipsY: 6, ChipWidth: 64, ChipHeight: 64},
		Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	path, truth := scantest.Simulate(t, simScan(f, 60))
	stages := scantest.Stages(t)
	p := testProfile(t, stages, f, map[string]any{"source.drop_when_full": true})
	out := filepath.Join(t.TempDir(), "scan.h5")
	r := replayInto(t, context.Background(), p, stages, plan.Plan{}, out, path)
	dropped := r.summary().Progress.Overflow
	if !errors.Is(r.err, ErrIncomplete) || dropped == 0 {
		t.Fatalf("replay: %v with %d dropped, want ErrIncomplete with some dropped:\n%s", r.err, dropped, r.out)
	}
	status, _ := scantest.CheckTruth(t, out, truth)
	missing := 0
	for n, s := range status {
		switch s {
		case frame.StatusMissing:
			missing++
		case frame.StatusOK:
		default:
			t.Errorf("frame %d: status %d", n, s)
		}
	}
	if missing != dropped || len(status) != 60 {
		t.Errorf("%d of %d frames recorded missing, the summary says %d dropped", missing, len(status), dropped)
	}
	if vout, err := verified(out); !errors.Is(err, ErrIncomplete) || strings.Contains(vout, "BAD") {
		t.Errorf("verify: %v, want ErrIncomplete with no bad chunk:\n%s", err, vout)
	}
}

// TestReplayStrayFrameNumberNoPlan replays, without a plan, a capture of
// good frames among which a few carry corrupt frame numbers (2^24-1 was
// accepted once: 16.7 million records, 3 GB of memory, an 840 MB file):
// they are rejected as out of range, the scan is incomplete, the file
// holds the good frames alone, all ok, and memory and file stay small.
func TestReplayStrayFrameNumberNoPlan(t *testing.T) {
	const frames = 24
	in, truth := strayCapture(t, frames)
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.SmallFormat, nil)
	out := filepath.Join(t.TempDir(), "stray.h5")
	measured := resetPeakRSS(t)
	r := replayInto(t, context.Background(), p, stages, plan.Plan{}, out, in)
	if !errors.Is(r.err, ErrIncomplete) {
		t.Fatalf("replay: %v, want ErrIncomplete\n%s%s", r.err, r.out, r.errs)
	}
	if measured {
		if peak := peakRSS(t); peak > 400<<20 {
			t.Errorf("the replay peaked at %d MiB of memory for %d small frames", peak>>20, frames)
		}
	}
	if n := r.summary().Progress.OutOfRange; n != 5 {
		t.Errorf("summary counts %d frames out of range, want the 5 stray frames:\n%s", n, r.out)
	}
	if !strings.Contains(r.errs, "source.max_frame_gap") {
		t.Errorf("the replay does not say why the frames were rejected:\n%s", r.errs)
	}
	status, ok := scantest.CheckTruth(t, out, truth)
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
}

// TestReplayLeavesNothingOpen replays, with and without faults in the
// capture, and checks that goroutines, file descriptors and HDF5 objects
// are all gone after it.
func TestReplayLeavesNothingOpen(t *testing.T) {
	clean, _ := scantest.Simulate(t, simScan(scantest.SmallFormat, 8))
	cfg := simScan(scantest.SmallFormat, 8)
	cfg.Missing, cfg.Corrupt, cfg.Duplicate = sim.FaultSpec{Frames: []int{2}}, sim.FaultSpec{Frames: []int{5}}, sim.FaultSpec{Frames: []int{3}}
	faulty, _ := scantest.Simulate(t, cfg)
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.SmallFormat, nil)
	dir := t.TempDir()
	scan := func(in, name string) error {
		return replayInto(t, context.Background(), p, stages, plan.Tomo(0, 0, 8, 0, 180), filepath.Join(dir, name), in).err
	}
	scan(clean, "warm.h5") // once-per-process goroutines start here
	time.Sleep(100 * time.Millisecond)
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)
	if err := scan(clean, "clean.h5"); err != nil {
		t.Fatalf("replay: %v", err)
	}
	checkNothingLeft(t, goroutines, fds)
	if err := scan(faulty, "faulty.h5"); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("replay of a faulty capture: %v, want ErrIncomplete", err)
	}
	checkNothingLeft(t, goroutines, fds)
	if err := scan(filepath.Join(dir, "no-such.pmcap"), "none.h5"); !failed(err) {
		t.Fatalf("replay of a missing capture: %v, want a failure", err)
	}
	checkNothingLeft(t, goroutines, fds)
}

// TestInterruptedReplay ends a paced replay by its context, as the
// command's Ctrl-C does: the file is finished and verifies, the scan is
// incomplete, and it says it was interrupted in words (not "context
// canceled").
func TestInterruptedReplay(t *testing.T) {
	path, _ := scantest.Simulate(t, simScan(scantest.SmallFormat, 40))
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.SmallFormat, nil)
	out := filepath.Join(t.TempDir(), "scan.h5")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(800*time.Millisecond, cancel)
	r := replayWith(t, ctx, ReplayOptions{Options: Options{Profile: p, Plan: plan.Tomo(0, 0, 40, 0, 180), Stages: stages},
		Captures: []string{path}, FPS: 20}, Names{Output: out})
	if !errors.Is(r.err, ErrIncomplete) {
		t.Fatalf("interrupted replay: %v, want ErrIncomplete\n%s", r.err, r.errs)
	}
	if msg := r.said(); !strings.Contains(msg, "h5ingest: interrupted: "+out+" holds the frames received before") ||
		strings.Contains(msg, "context canceled") {
		t.Errorf("interrupted replay says:\n%s", msg)
	}
	if vout, err := verified(out); !errors.Is(err, ErrIncomplete) {
		t.Errorf("verify of the interrupted scan: %v, want ErrIncomplete\n%s", err, vout)
	}
}

// TestReplayTakesCapturedOrientation replays a capture of a module with
// chips turned, which it records, with profiles that give no chip
// orientation, the same, and another: with none the capture's is taken
// (said as it is), so every frame is the image the detector saw; a
// profile that differs stands, with a warning naming both.
func TestReplayTakesCapturedOrientation(t *testing.T) {
	t.Parallel()
	turned := []any{0, 180, 0, 180, 180, 0}
	cfg := simScan(scantest.SmallFormat, 6)
	cfg.Orientation = frame.Orientation{0, 180, 0, 180, 180, 0}
	path, truth := scantest.Simulate(t, cfg)
	// The same frames in a capture whose geometry records five chips' worth
	// for the six, one of them at 90 degrees.
	damaged := filepath.Join(t.TempDir(), "damaged.pmcap")
	meta := capture.Metadata{Profile: "test", Created: "2026-01-01T00:00:00Z", Software: "test"}
	if err := meta.Set(capture.KeyGeometry, capture.Geometry{Format: capture.NewFormatInfo(scantest.SmallFormat), Orientation: []int{0, 90, 0, 180, 180}}); err != nil {
		t.Fatal(err)
	}
	scantest.WriteCaptureMeta(t, damaged, meta, scantest.CaptureRecords(t, path))
	// What inspect shows of it: what a replay will turn.
	if rep, err := Inspect(scantest.Stages(t), path); err != nil || rep.Capture == nil || fmt.Sprint(rep.Capture.Orientation) != "[0 180 0 180 180 0]" {
		t.Errorf("inspect: %+v, %v; want the capture's orientation [0 180 0 180 180 0]", rep, err)
	}
	stages := scantest.Stages(t)
	for _, c := range []struct {
		name    string
		capture string
		profile map[string]any
		truth   int    // frames whose data CRC is the simulator's, of 6
		says    string // in the notes, or the error
		fails   bool
	}{
		{"none in the profile", path, nil, 6, "no chip orientation in the profile: using the one recorded in " + path, false},
		{"the same", path, map[string]any{"detector.chip_orientation": turned}, 6, "", false},
		{"another", path, map[string]any{"detector.chip_orientation": []any{0, 0, 0, 0, 0, 0}}, 0,
			"records the chip orientation [0 180 0 180 180 0], the profile gives [0 0 0 0 0 0]: the chips are turned as the profile says", false},
		{"a damaged one, none in the profile", damaged, nil, 0,
			"capture " + damaged + ": the chip orientation it records: ", true},
		{"a damaged one, the profile's", damaged, map[string]any{"detector.chip_orientation": turned}, 6,
			"the chip orientation it records: ", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := testProfile(t, stages, scantest.SmallFormat, c.profile)
			out := filepath.Join(t.TempDir(), "scan.h5")
			r := replayInto(t, context.Background(), p, stages, plan.Tomo(0, 0, 6, 0, 180), out, c.capture)
			checkOrientationReplay(t, r, out, truth, c.fails, c.says, c.truth)
		})
	}
}
