package pipeline

import (
	"context"
	"sync"
	"testing"
)

// TestProgressWhileRunning reads Progress from another goroutine while Run
// runs, as the status page and the progress line do: under -race it shows
// that nothing Progress reads is written without the lock, and the counts
// it sees only go up.
func TestProgressWhileRunning(t *testing.T) {
	const frames = 64
	src := &sliceSource{frames: testFrames(t, testFormat, frames)}
	p := newTestPipeline(t, frames, "bslz4")
	done := make(chan struct{})
	var wg sync.WaitGroup
	var reads int
	var bad []Progress
	wg.Add(1)
	go func() {
		defer wg.Done()
		var last Progress
		for {
			select {
			case <-done:
				return
			default:
			}
			pr := p.Progress()
			reads++
			if pr.Written < last.Written || pr.Elapsed < last.Elapsed || pr.StoredBytes < last.StoredBytes {
				bad = append(bad, last, pr)
			}
			last = pr
		}
	}()
	final, err := p.Run(context.Background(), src, newMemSink())
	close(done)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if final.Written != frames || final.OK != frames {
		t.Errorf("final progress %+v, want %d frames written and ok", final, frames)
	}
	if len(bad) > 0 {
		t.Errorf("progress went backwards: %+v then %+v", bad[0], bad[1])
	}
	if reads == 0 {
		t.Error("Progress was never read while Run ran")
	}
}
