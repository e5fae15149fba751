package pipeline

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"h5ingest/frame"
)

// interleaved returns frames 0 to n-1 of each module, round robin.
func interleaved(n int, modules ...uint16) []*Frame {
	var out []*Frame
	for i := range n {
		for _, m := range modules {
			out = append(out, &Frame{Header: frame.Header{FrameNumber: uint64(i), ModuleID: m}})
		}
	}
	return out
}

// drain reads src to its end and returns the frame numbers and the end.
func drain(src Source) ([]uint64, error) {
	var got []uint64
	for {
		f, err := src.Next(context.Background())
		if err != nil {
			return got, err
		}
		got = append(got, f.Header.FrameNumber)
		src.Release(f)
	}
}

func TestDemux(t *testing.T) {
	stop := errors.New("capture cut short")
	tests := []struct {
		name    string
		frames  []*Frame
		end     error // what the source ends with; nil: io.EOF
		modules []uint16
		want    map[uint16][]uint64
		unknown int64
	}{
		{"two modules", interleaved(3, 0, 1), nil, []uint16{0, 1},
			map[uint16][]uint64{0: {0, 1, 2}, 1: {0, 1, 2}}, 0},
		{"a module absent", interleaved(2, 0, 2), nil, []uint16{0, 1, 2},
			map[uint16][]uint64{0: {0, 1}, 1: nil, 2: {0, 1}}, 0},
		{"a module not asked for", interleaved(2, 0, 5), nil, []uint16{0},
			map[uint16][]uint64{0: {0, 1}}, 2},
		{"source error", interleaved(2, 3, 4), stop, []uint16{3, 4},
			map[uint16][]uint64{3: {0, 1}, 4: {0, 1}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &sliceSource{frames: tt.frames, err: tt.end}
			d := NewDemux(src, tt.modules, 1)
			var wg sync.WaitGroup
			got := map[uint16][]uint64{}
			ends := map[uint16]error{}
			var mu sync.Mutex
			for _, id := range tt.modules {
				wg.Add(1)
				go func() {
					defer wg.Done()
					frames, err := drain(d.Module(id))
					mu.Lock()
					got[id], ends[id] = frames, err
					mu.Unlock()
				}()
			}
			runErr := d.Run(context.Background())
			wg.Wait()
			wantEnd := tt.end
			if wantEnd == nil {
				wantEnd = io.EOF
			}
			for _, id := range tt.modules {
				if !slices.Equal(got[id], tt.want[id]) {
					t.Errorf("module %d got frames %v, want %v", id, got[id], tt.want[id])
				}
				if !errors.Is(ends[id], wantEnd) {
					t.Errorf("module %d ended with %v, want %v", id, ends[id], wantEnd)
				}
			}
			if !errors.Is(runErr, tt.end) || (tt.end == nil && runErr != nil) {
				t.Errorf("Run returned %v, want %v", runErr, tt.end)
			}
			var wantFirst uint16
			if i := slices.IndexFunc(tt.frames, func(f *Frame) bool { return !slices.Contains(tt.modules, f.Header.ModuleID) }); i >= 0 {
				wantFirst = tt.frames[i].Header.ModuleID
			}
			if n, first := d.Unknown(); n != tt.unknown || first != wantFirst {
				t.Errorf("%d frames of unknown modules, the first of module %d; want %d, %d", n, first, tt.unknown, wantFirst)
			}
			if src.released != len(tt.frames) {
				t.Errorf("%d of %d frames released", src.released, len(tt.frames))
			}
		})
	}
}

// TestDemuxClosedModule checks that a module whose reader stopped (its
// pipeline failed) does not hold the others up once closed.
func TestDemuxClosedModule(t *testing.T) {
	src := &sliceSource{frames: interleaved(50, 0, 1)}
	d := NewDemux(src, []uint16{0, 1}, 2)
	d.Module(1).Close()
	done := make(chan []uint64)
	go func() {
		frames, _ := drain(d.Module(0))
		done <- frames
	}()
	if err := d.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case frames := <-done:
		if len(frames) != 50 {
			t.Errorf("module 0 got %d frames, want 50", len(frames))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("module 0 did not finish")
	}
	// The closed module's queue drains in the background.
	released := 0
	for deadline := time.Now().Add(5 * time.Second); released != 100 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		src.mu.Lock()
		released = src.released
		src.mu.Unlock()
	}
	if released != 100 {
		t.Errorf("%d of 100 frames released", released)
	}
}

// TestDemuxCancel checks that Run stops when ctx is done, even with a
// module's queue full.
func TestDemuxCancel(t *testing.T) {
	src := &sliceSource{frames: interleaved(10, 0)}
	d := NewDemux(src, []uint16{0}, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := d.Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run: %v, want the deadline", err)
	}
	if _, err := d.Module(0).Next(context.Background()); err != nil {
		t.Fatalf("the queued frame: %v", err)
	}
	if _, err := d.Module(0).Next(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("module source after the queue: %v, want the deadline", err)
	}
}
