package pipeline

import (
	"fmt"

	"h5ingest/frame"
)

// Verdict is what the tracker decides for an arriving frame.
type Verdict int

// Verdicts of Tracker.Admit.
const (
	Accept     Verdict = iota // decode and write it
	Duplicate                 // its number was seen before: drop this copy
	OutOfRange                // its number is beyond the scan: reject it, unwritten
)

// String names the verdict for log lines.
func (v Verdict) String() string {
	switch v {
	case Accept:
		return "accept"
	case Duplicate:
		return "duplicate"
	case OutOfRange:
		return "out of range"
	}
	return fmt.Sprintf("verdict(%d)", int(v))
}

// Counts sums up what happened to a scan's frames.
//
// While a scan runs, a planned frame not received yet is pending until a
// frame at least the missing gap beyond it has been received (see
// NewTracker and Tracker.SetMissingGap); then it is missing. Once the
// scan has ended (Tracker.End) no frame is pending: every frame not
// received is missing. A frame being decoded and written is neither.
type Counts struct {
	Planned     int // frames the scan plan expects (0: unknown)
	Received    int // frames with a good header, whatever came of them
	OK          int // written, status 0
	CRCMismatch int // written with a payload CRC mismatch, status 2
	Rejected    int // not decodable, status 3
	Duplicate   int // later copies of a frame number, dropped
	OutOfRange  int // frame numbers beyond the plan, or far beyond the highest of a scan without one: rejected, not written
	Pending     int // not received yet and not yet due, while the scan runs
	Missing     int // passed by the missing gap while the scan runs; never seen by the end; status 1
	NotFrame    int // bytes that were not a frame header
	Overflow    int // dropped because the pipeline was full (never held back), status 1
	Overrun     int // written over while it was read, by a sender that never waits (OverwritingSource), status 1
	// Discarded counts frames that arrived (in a source's ring) but that
	// the scan never took, because it was cancelled before it could write
	// them: they are not in Received, they are recorded (and counted)
	// missing, and a warning says so.
	Discarded int
}

// Problems returns the number of frames that make a scan incomplete: the
// planned frames that are not good (missing, corrupt or rejected) and the
// frames rejected as beyond the scan, which no file holds.
func (c Counts) Problems() int { return c.Missing + c.CRCMismatch + c.Rejected + c.OutOfRange }

// Tracker applies the receiver's rules for bad frames: it knows which frame
// numbers arrived, drops duplicates, rejects frames beyond the plan, and
// records the status of every frame of the scan. It is not safe for
// concurrent use.
type Tracker struct {
	planned    int     // 0: unknown length, the scan grows as frames arrive
	maxGap     int     // without a plan: how far beyond the highest frame number a new one may lie
	missingGap int     // while running: how far a later frame must have passed one not seen for it to be missing
	status     []uint8 // per frame; statusUnseen until something arrives
	highest    int     // the highest frame number accepted; -1 before any
	ended      bool    // End was called: nothing is pending any more
	counts     Counts
}

// DefaultMissingGap is the missing gap of a tracker whose user sets none
// (SetMissingGap): a frame not received is missing, while the scan runs,
// once a frame this far beyond it has been received.
const DefaultMissingGap = 64

// DefaultMaxFrameGap is how far beyond the highest frame number seen a
// frame of a scan without a plan may lie, where nothing else says: ten
// seconds of a detector at 1000 frames/s. A corrupt frame number further
// out is rejected as out of range instead of growing the scan (and the
// records held for it) by that much.
const DefaultMaxFrameGap = 10_000

// statusUnseen marks a frame number no frame has claimed yet, and
// statusClaimed one whose frame is being decoded and written.
const (
	statusUnseen  = 0xFF
	statusClaimed = 0xFE
)

// NewTracker returns a tracker for a scan of planned frames; 0 means the
// length is not known in advance. In such a scan a frame number more than
// maxGap beyond the highest accepted so far (the first frame: maxGap or
// more) is out of range; maxGap 0 means DefaultMaxFrameGap.
func NewTracker(planned, maxGap int) *Tracker {
	if maxGap <= 0 {
		maxGap = DefaultMaxFrameGap
	}
	t := &Tracker{planned: planned, maxGap: maxGap, missingGap: DefaultMissingGap, status: make([]uint8, planned), highest: -1}
	for i := range t.status {
		t.status[i] = statusUnseen
	}
	t.counts.Planned = planned
	return t
}

// Admit decides what happens to a frame whose header parsed. A frame it
// accepts must later get Done or Reject.
func (t *Tracker) Admit(h *frame.Header) Verdict {
	t.counts.Received++
	n := h.FrameNumber
	if t.planned > 0 && n >= uint64(t.planned) {
		t.counts.OutOfRange++
		return OutOfRange
	}
	if t.planned == 0 && (n >= maxUnplanned || n >= uint64(len(t.status))+uint64(t.maxGap)) {
		t.counts.OutOfRange++
		return OutOfRange
	}
	for uint64(len(t.status)) <= n {
		t.status = append(t.status, statusUnseen)
	}
	if t.status[n] != statusUnseen {
		t.counts.Duplicate++
		return Duplicate
	}
	t.status[n] = statusClaimed // set by Done, Reject or Overflow
	t.highest = max(t.highest, int(n))
	return Accept
}

// SetMissingGap sets how far beyond a frame not received a received frame
// must lie for the frame to count as missing while the scan runs; gap <= 0
// means DefaultMissingGap.
func (t *Tracker) SetMissingGap(gap int) {
	if gap <= 0 {
		gap = DefaultMissingGap
	}
	t.missingGap = gap
}

// End records that the scan has ended: from now on every frame not
// received counts as missing, none as pending.
func (t *Tracker) End() { t.ended = true }

// Discard counts n frames that arrived but that the scan never took (see
// Counts.Discarded).
func (t *Tracker) Discard(n int) { t.counts.Discarded += n }

// maxUnplanned bounds the frame numbers a scan of unknown length accepts,
// so that one corrupt number cannot claim memory for billions of records.
const maxUnplanned = 1 << 24

// Reject records frame n, already admitted, as not decodable (status 3).
func (t *Tracker) Reject(n uint64) {
	t.status[n] = frame.StatusRejected
	t.counts.Rejected++
}

// Done records frame n, already admitted, as written with the given status:
// frame.StatusOK or frame.StatusCRCMismatch.
func (t *Tracker) Done(n uint64, status uint8) {
	t.status[n] = status
	if status == frame.StatusCRCMismatch {
		t.counts.CRCMismatch++
	} else {
		t.counts.OK++
	}
}

// Overflow records that frame n, already admitted, was dropped because the
// pipeline had no room for it: it stays missing (status 1), and is counted.
func (t *Tracker) Overflow(n uint64) {
	t.status[n] = frame.StatusMissing
	t.counts.Overflow++
}

// Overrun records that frame n, already admitted, was written over while
// it was read: it stays missing (status 1), and is counted.
func (t *Tracker) Overrun(n uint64) {
	t.status[n] = frame.StatusMissing
	t.counts.Overrun++
}

// NotFrame counts bytes that were not a frame header.
func (t *Tracker) NotFrame() { t.counts.NotFrame++ }

// Frames returns the number of frames of the scan: the plan's count, or for
// a scan of unknown length one past the highest frame number seen.
func (t *Tracker) Frames() int { return len(t.status) }

// Status returns the status of frame n so far: frame.StatusMissing for a
// frame not seen or not finished yet.
func (t *Tracker) Status(n int) uint8 {
	if n >= len(t.status) || t.status[n] == statusUnseen || t.status[n] == statusClaimed {
		return frame.StatusMissing
	}
	return t.status[n]
}

// Counts returns the counts so far. Before End, a frame not received is
// pending unless a received frame lies the missing gap or more beyond it;
// after End it is missing, as is a frame admitted but never finished.
func (t *Tracker) Counts() Counts {
	c := t.counts
	c.Missing, c.Pending = 0, 0
	due := t.highest - t.missingGap // frames up to here are missing once unseen
	for n, s := range t.status {
		switch {
		case s == frame.StatusMissing:
			c.Missing++
		case s == statusClaimed && t.ended:
			c.Missing++
		case s != statusUnseen:
		case t.ended || n <= due:
			c.Missing++
		default:
			c.Pending++
		}
	}
	return c
}
