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
			if got := tr.Counts(); got != tt.counts {
				t.Errorf("counts\n got %+v\nwant %+v", got, tt.counts)
			}
		})
	}
}

func TestTrackerInFlightCountsAsMissing(t *testing.T) {
	tr := NewTracker(2, 0)
	h := frame.Header{FrameNumber: 0}
	tr.Admit(&h)
	if c := tr.Counts(); c.Missing != 2 {
		t.Errorf("missing = %d before any frame finished, want 2", c.Missing)
	}
	tr.Done(0, frame.StatusOK)
	if c := tr.Counts(); c.Missing != 1 || c.Problems() != 1 {
		t.Errorf("counts %+v, want 1 missing", c)
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
