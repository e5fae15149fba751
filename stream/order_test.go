package stream

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// orderRun feeds ids to a window, an image for each id in images and none
// for the others, and returns the ids it queued, in their order, with
// its counts. Images take their buffers from a pool of buffers, as a
// stream's do, and a consumer that keeps up gives each queued image's
// back at once; an image that finds none free is dropped, as a stream
// drops it.
type orderRun struct {
	out                      []int
	gaps, late               uint64
	dropped, finished, freed int
}

func runOrder(ids []int, images map[int]bool, at func(i int) time.Time, buffers int) orderRun {
	out := make(chan *image, buffers)
	free := make(chan *image, buffers)
	for range buffers {
		free <- &image{}
	}
	var gaps, late atomic.Uint64
	o := newOrder(out, free, &gaps, &late)
	var r orderRun
	drain := func(back bool) {
		for len(out) > 0 {
			img := <-out
			r.out = append(r.out, img.n)
			if back {
				free <- img
			}
		}
	}
	var now time.Time
	for i, id := range ids {
		now = at(i)
		switch {
		case !images[id]:
			o.put(id, nil, now)
		case len(free) == 0: // as Stream.offer does
			o.skipGap(now)
			r.dropped++
			o.put(id, nil, now)
		default:
			img := <-free
			img.n = id
			o.put(id, img, now)
		}
		drain(true)
	}
	o.finish(now)
	r.finished = len(out)
	drain(true)
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
			if r.freed != len(tc.ids) || r.dropped != 0 {
				t.Errorf("%d buffers of %d given back, %d images dropped", r.freed, len(tc.ids), r.dropped)
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

// TestOrderGapCostsNoImage: frames that never come (lost on the way,
// dropped by a full pipeline), alone or in runs, between frames that come
// in order or a little out of it: where the consumer keeps up, the window
// waits for a missing frame no longer than its buffers allow and loses no
// image for it, whatever the number of buffers.
func TestOrderGapCostsNoImage(t *testing.T) {
	const n = 200
	every := func(k int) []int {
		var m []int
		for i := k / 2; i < n; i += k {
			m = append(m, i)
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		missing []int
		swap    int // each frame is taken up to swap-1 places late
	}{
		{"one", []int{10}, 0},
		{"two together", []int{10, 11}, 0},
		{"a run of ten", []int{40, 41, 42, 43, 44, 45, 46, 47, 48, 49}, 0},
		{"every 20th", every(20), 0},
		{"every 3rd", every(3), 0},
		{"the first", []int{0}, 0},
		{"the last", []int{n - 1}, 0},
		{"every 20th, out of order", every(20), 4},
	} {
		for _, buffers := range []int{1, 2, 8, 64} {
			if tc.swap >= buffers {
				continue // the window reorders less than its buffers
			}
			t.Run(fmt.Sprintf("%s/%d buffers", tc.name, buffers), func(t *testing.T) {
				images := map[int]bool{}
				var ids, want []int
				for i := range n {
					if !slices.Contains(tc.missing, i) {
						images[i] = true
						ids = append(ids, i)
						want = append(want, i)
					}
				}
				for i := 0; tc.swap > 1 && i+tc.swap <= len(ids); i += tc.swap {
					slices.Reverse(ids[i : i+tc.swap])
				}
				gaps := 0 // the missing frames before the last image
				for _, m := range tc.missing {
					if m < want[len(want)-1] {
						gaps++
					}
				}
				r := runOrder(ids, images, steady, buffers)
				if !slices.Equal(r.out, want) || r.dropped != 0 || r.late != 0 || r.gaps != uint64(gaps) {
					t.Errorf("%d images queued of %d, %d dropped, %d late, %d gaps; want every image and %d gaps",
						len(r.out), len(want), r.dropped, r.late, r.gaps, gaps)
				}
			})
		}
	}
}
