package pipeline

import (
	"testing"

	"h5ingest/frame"
)

func TestTrackerRules(t *testing.T) {
	type arrival struct {
		n       uint64
		verdict Verdict
		outcome uint8 // for accepted frames: status given by the pipeline
	}
	tests := []struct {
		name     string
		planned  int
		maxGap   int // 0: the default
		arrivals []arrival
		status   []uint8
		counts   Counts
	}{
		{
			name:    "in order",
			planned: 3,
			arrivals: []arrival{
				{0, Accept, frame.StatusOK}, {1, Accept, frame.StatusOK}, {2, Accept, frame.StatusOK},
			},
			status: []uint8{0, 0, 0},
			counts: Counts{Planned: 3, Received: 3, OK: 3},
		},
		{
			name:    "missing, duplicate, out of range, reordered",
			planned: 4,
			arrivals: []arrival{
				{1, Accept, frame.StatusOK}, {0, Accept, frame.StatusOK}, {1, Duplicate, 0},
				{4, OutOfRange, 0}, {3, Accept, frame.StatusOK},
			},
			status: []uint8{0, 0, frame.StatusMissing, 0},
			counts: Counts{Planned: 4, Received: 5, OK: 3, Duplicate: 1, OutOfRange: 1, Missing: 1},
		},
		{
			name:    "corrupt payload and rejected",
			planned: 3,
			arrivals: []arrival{
				{0, Accept, frame.StatusCRCMismatch}, {1, Accept, frame.StatusRejected}, {2, Accept, frame.StatusOK},
				{1, Duplicate, 0},
			},
			status: []uint8{frame.StatusCRCMismatch, frame.StatusRejected, 0},
			counts: Counts{Planned: 3, Received: 4, OK: 1, CRCMismatch: 1, Rejected: 1, Duplicate: 1},
		},
		{
			name:    "unknown length grows",
			planned: 0,
			arrivals: []arrival{
				{0, Accept, frame.StatusOK}, {3, Accept, frame.StatusOK}, {1 << 30, OutOfRange, 0},
			},
			status: []uint8{0, frame.StatusMissing, frame.StatusMissing, 0},
			counts: Counts{Received: 3, OK: 2, OutOfRange: 1, Missing: 2},
		},
		{
			// One corrupt frame number must not grow the scan by billions
			// of records: beyond the gap it is rejected, and the scan goes
			// on from the highest frame accepted.
			name:    "unknown length, stray frame numbers beyond the gap",
			planned: 0,
			maxGap:  4,
			arrivals: []arrival{
				{0, Accept, frame.StatusOK}, {1 << 40, OutOfRange, 0}, {1, Accept, frame.StatusOK},
				{5, Accept, frame.StatusOK}, {10, OutOfRange, 0}, {9, Accept, frame.StatusOK},
				{1<<64 - 1, OutOfRange, 0}, {1 << 63, OutOfRange, 0}, {2, Accept, frame.StatusOK},
			},
			status: []uint8{0, 0, 0, frame.StatusMissing, frame.StatusMissing, 0, frame.StatusMissing, frame.StatusMissing, frame.StatusMissing, 0},
			counts: Counts{Received: 9, OK: 5, OutOfRange: 4, Missing: 5},
		},
		{
			name:     "unknown length, first frame beyond the gap",
			planned:  0,
			maxGap:   4,
			arrivals: []arrival{{4, OutOfRange, 0}, {3, Accept, frame.StatusOK}},
			status:   []uint8{frame.StatusMissing, frame.StatusMissing, frame.StatusMissing, 0},
			counts:   Counts{Received: 2, OK: 1, OutOfRange: 1, Missing: 3},
		},
		{
			name:     "unknown length, default gap",
			planned:  0,
			arrivals: []arrival{{0, Accept, frame.StatusOK}, {DefaultMaxFrameGap + 1, OutOfRange, 0}, {DefaultMaxFrameGap, Accept, frame.StatusOK}},
			status:   append(append([]uint8{0}, make1(DefaultMaxFrameGap-1, frame.StatusMissing)...), 0),
			counts:   Counts{Received: 3, OK: 2, OutOfRange: 1, Missing: DefaultMaxFrameGap - 1},
		},
		{
			name:     "a plan bounds the scan, not the gap",
			planned:  100,
			maxGap:   4,
			arrivals: []arrival{{50, Accept, frame.StatusOK}, {100, OutOfRange, 0}},
			status:   append(append(make1(50, frame.StatusMissing), 0), make1(49, frame.StatusMissing)...),
			counts:   Counts{Planned: 100, Received: 2, OK: 1, OutOfRange: 1, Missing: 99},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(tt.planned, tt.maxGap)
			for _, a := range tt.arrivals {
				h := frame.Header{FrameNumber: a.n}
				v := tr.Admit(&h)
				if v != a.verdict {
					t.Fatalf("frame %d: verdict %v, want %v", a.n, v, a.verdict)
				}
				if v != Accept {
					continue
				}
				if a.outcome == frame.StatusRejected {
					tr.Reject(a.n)
				} else {
					tr.Done(a.n, a.outcome)
				}
			}
			if tr.Frames() != len(tt.status) {
				t.Fatalf("Frames = %d, want %d", tr.Frames(), len(tt.status))
			}
			for i, want := range tt.status {
				if got := tr.Status(i); got != want {
					t.Errorf("status of frame %d = %d, want %d", i, got, want)
				}
			}
			tr.End()
			if got := tr.Counts(); got != tt.counts {
				t.Errorf("counts at the end\n got %+v\nwant %+v", got, tt.counts)
			}
		})
	}
}

// TestTrackerPendingUntilPassed: while a scan runs, a frame not received
// is pending until a received frame lies the missing gap beyond it, a
// frame being written is neither pending nor missing, and once the scan
// ends every frame not received (or not finished) is missing.
func TestTrackerPendingUntilPassed(t *testing.T) {
	tests := []struct {
		name              string
		planned, gap      int
		arrive            []uint64 // admitted, in order
		done              int      // of those, the first done ok
		running, atEnd    Counts
		discardedAtTheEnd int
	}{
		{
			name: "armed, nothing received", planned: 40, gap: 4,
			running: Counts{Planned: 40, Pending: 40},
			atEnd:   Counts{Planned: 40, Missing: 40},
		},
		{
			name: "3 of 40 received in order", planned: 40, gap: 4, arrive: []uint64{0, 1, 2}, done: 3,
			running: Counts{Planned: 40, Received: 3, OK: 3, Pending: 37},
			atEnd:   Counts{Planned: 40, Received: 3, OK: 3, Missing: 37},
		},
		{
			name: "a hole passed by less than the gap", planned: 40, gap: 4, arrive: []uint64{0, 2, 3, 4}, done: 4,
			running: Counts{Planned: 40, Received: 4, OK: 4, Pending: 36},
			atEnd:   Counts{Planned: 40, Received: 4, OK: 4, Missing: 36},
		},
		{
			name: "a hole passed by the gap", planned: 40, gap: 4, arrive: []uint64{0, 2, 3, 4, 5}, done: 5,
			running: Counts{Planned: 40, Received: 5, OK: 5, Missing: 1, Pending: 34},
			atEnd:   Counts{Planned: 40, Received: 5, OK: 5, Missing: 35},
		},
		{
			name: "frames being written are neither", planned: 10, gap: 4, arrive: []uint64{0, 1, 2}, done: 1,
			running: Counts{Planned: 10, Received: 3, OK: 1, Pending: 7},
			atEnd:   Counts{Planned: 10, Received: 3, OK: 1, Missing: 9},
		},
		{
			name: "no plan: the hole behind the highest", planned: 0, gap: 2, arrive: []uint64{0, 5}, done: 2,
			running: Counts{Received: 2, OK: 2, Missing: 3, Pending: 1},
			atEnd:   Counts{Received: 2, OK: 2, Missing: 4},
		},
		{
			name: "discarded at the end", planned: 10, gap: 4, arrive: []uint64{0, 1}, done: 2, discardedAtTheEnd: 5,
			running: Counts{Planned: 10, Received: 2, OK: 2, Pending: 8},
			atEnd:   Counts{Planned: 10, Received: 2, OK: 2, Missing: 8, Discarded: 5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(tt.planned, 0)
			tr.SetMissingGap(tt.gap)
			for i, n := range tt.arrive {
				h := frame.Header{FrameNumber: n}
				if v := tr.Admit(&h); v != Accept {
					t.Fatalf("frame %d: %v", n, v)
				}
				if i < tt.done {
					tr.Done(n, frame.StatusOK)
				}
			}
			if got := tr.Counts(); got != tt.running {
				t.Errorf("counts while running\n got %+v\nwant %+v", got, tt.running)
			}
			tr.End()
			tr.Discard(tt.discardedAtTheEnd)
			if got := tr.Counts(); got != tt.atEnd {
				t.Errorf("counts at the end\n got %+v\nwant %+v", got, tt.atEnd)
			}
		})
	}
}

// make1 returns n copies of v.
func make1(n int, v uint8) []uint8 {
	s := make([]uint8, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func TestProblemsCountFramesBeyondTheScan(t *testing.T) {
	// A scan whose planned frames are all good but which received frames
	// beyond its plan is incomplete: those frames are in no file.
	tr := NewTracker(1, 0)
	for _, n := range []uint64{0, 1} {
		h := frame.Header{FrameNumber: n}
		if tr.Admit(&h) == Accept {
			tr.Done(n, frame.StatusOK)
		}
	}
	if c := tr.Counts(); c.OutOfRange != 1 || c.Problems() != 1 {
		t.Errorf("counts %+v, problems %d: want 1 out of range, 1 problem", c, c.Problems())
	}
}
