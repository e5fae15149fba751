package stream

import (
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// orderRun feeds ids to a window, an image for each id in images and none
// for the others, and returns the ids it queued, in their order, with
// its counts.
type orderRun struct {
	out             []int
	gaps, late      uint64
	freed, finished int
}

func runOrder(ids []int, images map[int]bool, at func(i int) time.Time, buffers int) orderRun {
	out := make(chan *image, buffers+orderSpan)
	free := make(chan *image, buffers+orderSpan)
	var gaps, late atomic.Uint64
	o := newOrder(out, free, &gaps, &late)
	var r orderRun
	drain := func() {
		for len(out) > 0 {
			r.out = append(r.out, (<-out).n)
		}
	}
	var now time.Time
	for i, id := range ids {
		now = at(i)
		if images[id] {
			o.put(id, &image{n: id}, now)
		} else {
			o.put(id, nil, now)
		}
		drain()
	}
	o.finish(now)
	r.finished = len(out)
	drain()
	r.gaps, r.late, r.freed = gaps.Load(), late.Load(), len(free)
	return r
}

func steady(i int) time.Time { return time.Unix(0, int64(i)*int64(time.Millisecond)) }

func TestOrder(t *testing.T) {
	all := func(ids ...int) map[int]bool {
		m := map[int]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	for _, tc := range []struct {
		name       string
		ids        []int
		images     map[int]bool
		at         func(int) time.Time
		want       []int
		gaps, late uint64
	}{
		{"in order", []int{0, 1, 2, 3}, all(0, 1, 2, 3), steady, []int{0, 1, 2, 3}, 0, 0},
		{"swapped", []int{0, 1, 3, 2, 4}, all(0, 1, 2, 3, 4), steady, []int{0, 1, 2, 3, 4}, 0, 0},
		{"reversed", []int{4, 3, 2, 1, 0}, all(0, 1, 2, 3, 4), steady, []int{0, 1, 2, 3, 4}, 0, 0},
		// Frames left out (thinned, dropped, missing) resolve their ids
		// with no image: nothing waits for them.
		{"left out", []int{1, 0, 3, 2, 4}, all(0, 2, 4), steady, []int{0, 2, 4}, 0, 0},
		// A frame that never comes: at the end the window passes over it.
		{"never comes", []int{0, 2, 3}, all(0, 2, 3), steady, []int{0, 2, 3}, 1, 0},
		// An id beyond the span passes over the gap; the frame that then
		// comes is late, left out.
		{"beyond the span", []int{0, 2, orderSpan + 1, 1}, all(0, 1, 2, orderSpan+1), steady, []int{0, 2, orderSpan + 1}, orderSpan - 1, 1},
		// A window that has not moved for maxWait passes over the gap.
		{"waited too long", []int{0, 2, 3, 4, 1}, all(0, 1, 2, 3, 4),
			func(i int) time.Time { return time.Unix(0, 0).Add(time.Duration(i) * maxWait * 3 / 5) }, []int{0, 2, 3, 4}, 1, 1},
		{"twice", []int{0, 1, 1, 2}, all(0, 1, 2), steady, []int{0, 1, 2}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runOrder(tc.ids, tc.images, tc.at, len(tc.ids))
			if !slices.Equal(r.out, tc.want) || r.gaps != tc.gaps || r.late != tc.late {
				t.Errorf("queued %v, %d gaps, %d late; want %v, %d, %d", r.out, r.gaps, r.late, tc.want, tc.gaps, tc.late)
			}
			if r.freed != int(r.late) {
				t.Errorf("%d buffers given back, %d late images", r.freed, r.late)
			}
		})
	}
}

// TestOrderRandom shuffles frames as compression workers finish them
// (each at most a few places from its turn), leaves some out: the window
// queues every image, in order, and counts no gap where none is.
func TestOrderRandom(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		const n = 2000
		ids := make([]int, n)
		for i := range ids {
			ids[i] = i
		}
		for i := range ids { // each moves at most 8 places
			j := min(n-1, i+rng.IntN(8))
			ids[i], ids[j] = ids[j], ids[i]
		}
		images := map[int]bool{}
		var want []int
		for i := range n {
			if rng.IntN(10) != 0 {
				images[i] = true
				want = append(want, i)
			}
		}
		r := runOrder(ids, images, steady, n)
		if !slices.Equal(r.out, want) || r.gaps != 0 || r.late != 0 || r.finished != 0 {
			t.Fatalf("seed %d: %d queued of %d, in order %v, %d gaps, %d late, %d left at the end",
				seed, len(r.out), len(want), slices.IsSorted(r.out), r.gaps, r.late, r.finished)
		}
	}
}
