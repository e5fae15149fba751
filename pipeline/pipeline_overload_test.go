package pipeline

import (
	"context"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"
)

// floodSource is a detector far faster than the pipeline: a frame is ready
// the moment Next asks. It copies every frame into a buffer of its own, as
// a receive ring does, and counts the buffers it had to make and the
// frames out at once.
type floodSource struct {
	frames []*Frame // the scan, to copy from

	mu        sync.Mutex
	next      int
	free      []*Frame
	made      int // buffers allocated
	out, most int // frames handed out and not released; the most at once
}

func (s *floodSource) Next(ctx context.Context) (*Frame, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.next == len(s.frames) {
		return nil, io.EOF
	}
	src := s.frames[s.next]
	s.next++
	var f *Frame
	if n := len(s.free); n > 0 {
		f, s.free = s.free[n-1], s.free[:n-1]
	} else {
		f = &Frame{Payload: make([]byte, len(src.Payload))}
		s.made++
	}
	f.Header = src.Header
	copy(f.Payload, src.Payload)
	s.out++
	s.most = max(s.most, s.out)
	return f, nil
}

func (s *floodSource) Release(f *Frame) {
	s.mu.Lock()
	s.free = append(s.free, f)
	s.out--
	s.mu.Unlock()
}

// slowSink is a disk far slower than the detector. Given the source, it
// also notes the most frames that had left it and were not yet stored:
// what the pipeline held at once.
type slowSink struct {
	*memSink
	delay time.Duration
	src   *floodSource
	held  *int
}

func (s slowSink) WriteChunk(n int, chunk []byte) error {
	time.Sleep(s.delay)
	if s.src != nil {
		s.src.mu.Lock()
		*s.held = max(*s.held, s.src.next-len(s.chunks))
		s.src.mu.Unlock()
	}
	return s.memSink.WriteChunk(n, chunk)
}

// TestPipelineOverload floods a pipeline of 5 slots with frames much faster
// than its sink stores them: back-pressure holds the source, so it never
// has more than the pool's frames out and makes no more buffers than that,
// the heap stays flat, and every frame arrives intact.
func TestPipelineOverload(t *testing.T) {
	const frames = 300
	src := &floodSource{}
	for n := range uint64(frames) {
		src.frames = append(src.frames, testFrame(t, testFormat, n))
	}
	var held int
	sink := slowSink{newMemSink(), time.Millisecond, src, &held}
	p := newTestPipeline(t, frames, "bslz4")
	slots := p.cfg.Slots

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	progress, err := p.Run(context.Background(), src, sink)
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if progress.OK != frames {
		t.Errorf("%d frames ok of %d: %+v", progress.OK, frames, progress.Counts)
	}
	checkOutput(t, sink.memSink, "bslz4", frames, nil)
	t.Logf("pool of %d slots: at most %d frames out, %d buffers made, %d held by the pipeline", slots, src.most, src.made, held)
	if src.most > slots || src.made > slots {
		t.Errorf("the source had %d frames out at once and made %d buffers: the pool holds %d", src.most, src.made, slots)
	}
	// The pipeline releases a frame once it is decoded, so the source may
	// see few out at once; that the sink was the bottleneck shows in what
	// the pipeline held, waiting for it: its whole pool.
	if held < slots {
		t.Errorf("at most %d frames held by the pipeline of a pool of %d: the sink was not the bottleneck", held, slots)
	}
	// What the pipeline holds is its pool; the sink's own copies of the
	// chunks are the only thing that grows with the scan.
	var stored int64
	for _, c := range sink.chunks {
		stored += int64(cap(c))
	}
	pool := int64(slots) * int64(testFormat.ImageSize()+testFormat.PayloadSize()) * 4
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc) - stored; grew > pool+1<<20 {
		t.Errorf("heap grew by %d bytes beyond the stored chunks, more than the pool's %d", grew, pool)
	}
}
