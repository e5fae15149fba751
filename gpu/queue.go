package gpu

import "sync"

// queue hands the cpu backend's workers their tasks, frame by frame. Each
// job of a batch is a run of tasks, in image order: the bands of its chip
// rows, or its runs of bitshuffle blocks. A worker owns one run at a time,
// taking its tasks in order from the front, so that each band of a chunk
// is compressed where it belongs in the chunk, right after the band
// before it; a worker whose run is done takes the oldest run no one owns.
// Only when every run with tasks left is owned does a worker take a task
// from the back of the run with the most left: that band is compressed
// apart and moved into place later (chunkJoin), so that no core waits
// while another has work, as at a scan's last frame.
//
// Each take costs the same however many runs are queued: the runs no one
// owns wait in order in runs, from head on, and leave it as a worker takes
// them; those owned are in owns, one a worker, where a thief looks.
type queue struct {
	mu     sync.Mutex
	more   sync.Cond // signalled when runs are put or the queue closes
	runs   []*run    // from head on, the runs no one owns yet, in the order they were put
	head   int       // the first of runs not taken by a worker
	owns   []*run    // each worker's run while it has tasks not taken; nil for none
	closed bool
}

// run is the tasks [next, end) of one job of a batch not taken yet.
type run struct {
	b       *batch
	job     int32
	next    int32
	end     int32
	tasks   int32 // the run's tasks, taken or not
	shuffle bool  // the tasks transpose runs of blocks of the decoded image
	owner   int   // the worker that owns the run, +1; 0 for none
}

// newQueue returns a queue for workers workers, numbered from 0.
func newQueue(workers int) *queue {
	q := &queue{owns: make([]*run, workers)}
	q.more.L = &q.mu
	return q
}

// put queues runs, which the caller keeps until their tasks are done.
func (q *queue) put(runs []run) {
	q.mu.Lock()
	if q.head > 0 && len(q.runs)+len(runs) > cap(q.runs) {
		// Room at the front: move the runs waiting there, rather than
		// grow the array.
		n := copy(q.runs, q.runs[q.head:])
		clear(q.runs[n:])
		q.runs, q.head = q.runs[:n], 0
	}
	for i := range runs {
		if runs[i].next < runs[i].end {
			q.runs = append(q.runs, &runs[i])
		}
	}
	q.mu.Unlock()
	q.more.Broadcast()
}

// close has take return false once no run has tasks left.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.more.Broadcast()
}

// take returns the next task for worker w, waiting for one. It returns
// false once the queue is closed and empty.
func (q *queue) take(w int) (task, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		r := q.owns[w]
		if r == nil {
			if r = q.unowned(); r != nil {
				r.owner, q.owns[w] = w+1, r
			}
		}
		if r != nil {
			r.next++
			t := r.task(r.next - 1)
			q.left(r)
			return t, true
		}
		if r = q.fullest(); r != nil {
			r.end--
			t := r.task(r.end)
			q.left(r)
			return t, true
		}
		if q.closed {
			return task{}, false
		}
		q.more.Wait()
	}
}

// left drops r from its owner once it has no task left.
func (q *queue) left(r *run) {
	if r.next >= r.end {
		q.owns[r.owner-1] = nil
	}
}

// unowned takes the oldest run no worker owns out of the queue, or returns
// nil for none.
func (q *queue) unowned() *run {
	if q.head == len(q.runs) {
		return nil
	}
	r := q.runs[q.head]
	q.runs[q.head] = nil
	if q.head++; q.head == len(q.runs) {
		q.runs, q.head = q.runs[:0], 0
	}
	return r
}

// fullest returns the owned run with the most tasks left, the first
// worker's of those with as many, or nil for none.
func (q *queue) fullest() *run {
	var best *run
	for _, r := range q.owns {
		if r != nil && (best == nil || r.end-r.next > best.end-best.next) {
			best = r
		}
	}
	return best
}

// task returns the run's task i.
func (r *run) task(i int32) task {
	return task{b: r.b, job: r.job, index: i, of: r.tasks, shuffle: r.shuffle}
}
