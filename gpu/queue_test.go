package gpu

import (
	"fmt"
	"strings"
	"testing"
)

// TestQueueTakes checks the order in which workers take tasks: each owns
// a run and takes it from the front, a worker whose run is done takes the
// oldest run no one owns, and only where every run left is owned does it
// take from the back of the one with the most tasks left.
func TestQueueTakes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		runs    []int32 // tasks of each run
		workers int
		takes   []int  // the worker of each take, in turn
		want    string // "run.task" of each take
	}{
		{"one worker, runs in order", []int32{2, 3}, 1, []int{0, 0, 0, 0, 0}, "0.0 0.1 1.0 1.1 1.2"},
		{"a run each, taken from the front", []int32{3, 3}, 2, []int{0, 1, 0, 1, 0, 1}, "0.0 1.0 0.1 1.1 0.2 1.2"},
		{"the oldest run no one owns next", []int32{1, 3, 2}, 2, []int{0, 1, 0, 0, 1, 1}, "0.0 1.0 2.0 2.1 1.1 1.2"},
		{"every run owned: from the back of the fullest", []int32{4, 2}, 2, []int{0, 1, 1, 1, 0, 0}, "0.0 1.0 1.1 0.3 0.1 0.2"},
		{"one run, two workers", []int32{5}, 2, []int{0, 1, 1, 0, 0}, "0.0 0.4 0.3 0.1 0.2"},
		{"a thief takes the owner's last task", []int32{2}, 2, []int{0, 1, 1}, "0.0 0.1 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(tc.workers)
			var b batch
			for i, n := range tc.runs {
				b.runs = append(b.runs, run{b: &b, job: int32(i), end: n, tasks: n})
			}
			q.put(b.runs)
			q.close()
			var got []string
			for _, w := range tc.takes {
				tk, ok := q.take(w)
				if !ok {
					got = append(got, "")
					continue
				}
				if tk.of != tc.runs[tk.job] {
					t.Errorf("task %d.%d says %d tasks, want %d", tk.job, tk.index, tk.of, tc.runs[tk.job])
				}
				got = append(got, fmt.Sprintf("%d.%d", tk.job, tk.index))
			}
			if s := strings.Join(got, " "); s != tc.want {
				t.Errorf("takes %q, want %q", s, tc.want)
			}
			if len(q.runs) != 0 {
				t.Errorf("after every task: %d runs queued", len(q.runs))
			}
			for w, r := range q.owns {
				if r != nil {
					t.Errorf("after every task: worker %d owns run %d", w, r.job)
				}
			}
		})
	}
}
