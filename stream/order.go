package stream

import (
	"sync/atomic"
	"time"
)

// order puts a scan's images in image_id order before they are queued
// for sending: the compression workers finish frames in any order, and
// consumers that build a sinogram or a scan's position list expect the
// order the detector took them in.
//
// It is a window over the image_ids from next on. Each id is resolved
// once, with an image or with none (a frame thinned out, dropped, missing
// or rejected); the images from next on go out as soon as every id before
// them is resolved. The window never waits for long: an id it cannot wait
// for is skipped and counted, and an image that comes after its id was
// skipped is left out of the stream, counted. It waits no longer than
//   - the buffers: once an image has taken the last free buffer, the
//     window passes over the gap before the first image it holds, so
//     that its images go out and the next image finds a buffer where the
//     consumer keeps up: a frame that never comes (lost on the way,
//     dropped by a full pipeline) costs no other image;
//   - the window's span: an id span beyond next passes over next;
//   - maxWait without progress while it holds an image.
//
// A frame the pipeline records missing, rejected or unwritten while the
// scan runs resolves its id at once (the sink's SetRecord), so that
// nothing waits for it.
//
// Its methods run on the sink's goroutine; the counters may be read from
// any.
type order struct {
	next  int      // the image_id the stream sends next
	slots []*image // slots[id % span]: the outcome of id, for next <= id < next+span; nil unresolved
	held  int      // images in the window
	since time.Time
	out   chan<- *image // the send queue: room for every buffer, so never full

	gaps *atomic.Uint64 // ids passed over unresolved
	late *atomic.Uint64 // images left out: their id was passed over
	free chan<- *image  // the buffers not in use, where a late image's goes back
}

// leftOut marks an id resolved with no image.
var leftOut = &image{}

// orderSpan is how many image_ids the window spans: more than any
// pipeline has frames in flight.
const orderSpan = 256

// maxWait is how long the window holds images waiting for an earlier id
// before it passes over the gap.
const maxWait = time.Second

func newOrder(out chan<- *image, free chan<- *image, gaps, late *atomic.Uint64) *order {
	return &order{slots: make([]*image, orderSpan), out: out, free: free, gaps: gaps, late: late}
}

// put resolves id: with img, or with nil where the stream leaves it out.
func (o *order) put(id int, img *image, now time.Time) {
	if id < o.next { // passed over already
		o.drop(img)
		return
	}
	if span := len(o.slots); id >= o.next+span {
		o.advance(id - span + 1)
	}
	i := id % len(o.slots)
	if o.slots[i] != nil { // resolved already: keep the first outcome
		o.drop(img)
		return
	}
	if img == nil {
		o.slots[i] = leftOut
	} else {
		o.slots[i] = img
		if o.held == 0 {
			o.since = now
		}
		o.held++
	}
	o.flush(now)
	if o.held > 0 && (len(o.free) == 0 || now.Sub(o.since) > maxWait) {
		o.skipGap(now)
	}
}

// drop leaves out an image whose id the window has passed or resolved.
func (o *order) drop(img *image) {
	if img != nil {
		o.late.Add(1)
		o.free <- img
	}
}

// flush queues the images from next on up to the first unresolved id.
func (o *order) flush(now time.Time) {
	moved := false
	for {
		i := o.next % len(o.slots)
		v := o.slots[i]
		if v == nil {
			break
		}
		o.slots[i] = nil
		o.next++
		moved = true
		if v != leftOut {
			o.held--
			o.out <- v
		}
	}
	if moved {
		o.since = now
	}
}

// advance moves next to id to, queueing the images it passes in order
// and counting the ids it passes unresolved.
func (o *order) advance(to int) {
	span := len(o.slots)
	end := min(to, o.next+span)
	for id := o.next; id < end; id++ {
		i := id % span
		switch v := o.slots[i]; v {
		case nil:
			o.gaps.Add(1)
		case leftOut:
		default:
			o.held--
			o.out <- v
		}
		o.slots[i] = nil
	}
	if to > end {
		o.gaps.Add(uint64(to - end))
	}
	o.next = to
}

// skipGap passes over the unresolved ids before the first image the
// window holds, which then goes out with those after it.
func (o *order) skipGap(now time.Time) {
	for id := o.next; id < o.next+len(o.slots); id++ {
		if v := o.slots[id%len(o.slots)]; v != nil && v != leftOut {
			o.advance(id)
			o.flush(now)
			return
		}
	}
}

// finish queues every image the window holds, in order, passing over the
// gaps between them: the scan has ended and no earlier image will come.
func (o *order) finish(now time.Time) {
	for o.held > 0 {
		o.skipGap(now)
	}
}
