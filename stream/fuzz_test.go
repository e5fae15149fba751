package stream

import (
	"sync/atomic"
	"testing"
	"time"
)

// FuzzOrder feeds the order window any sequence of outcomes (an id's
// distance from the last, whether it has an image, how much time passed):
// it never blocks or panics, queues images in strictly increasing
// image_id order, and accounts for every image it was given, queued or
// left out.
func FuzzOrder(f *testing.F) {
	f.Add([]byte{0, 1, 2, 1, 3, 1, 1, 0, 2, 1})
	f.Add([]byte{5, 1, 0xff, 1, 0x80, 0, 7, 1, 0xfe, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		n := len(ops)/2 + 1
		out := make(chan *image, n)
		free := make(chan *image, n)
		var gaps, late atomic.Uint64
		o := newOrder(out, free, &gaps, &late)
		id, images := 0, 0
		now := time.Unix(0, 0)
		for i := 0; i+1 < len(ops); i += 2 {
			// The low bits move the id (by -8 to +23, or far ahead), the
			// high ones say whether it has an image and the time it took.
			step := int(ops[i]&31) - 8
			if ops[i]&31 == 31 {
				step = orderSpan + int(ops[i+1])
			}
			id = max(id+step, 0)
			now = now.Add(time.Duration(ops[i]>>5) * maxWait / 4)
			if ops[i+1]&1 == 1 {
				images++
				o.put(id, &image{n: id}, now)
			} else {
				o.put(id, nil, now)
			}
		}
		o.finish(now)
		last, queued := -1, 0
		for len(out) > 0 {
			img := <-out
			if img.n <= last {
				t.Fatalf("image %d queued after image %d", img.n, last)
			}
			last = img.n
			queued++
		}
		if queued+int(late.Load()) != images || len(free) != int(late.Load()) || o.held != 0 {
			t.Fatalf("%d images: %d queued, %d late, %d buffers back, %d held", images, queued, late.Load(), len(free), o.held)
		}
	})
}
