// Package pipelinetest is the conformance suite of processor stages: a new
// pipeline.Processor runs it with one line,
//
//	pipelinetest.Processor(t, newProcessor, format)
//
// and it checks what the pipeline counts on when it runs one processor per
// compression worker.
package pipelinetest

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"

	"h5ingest/frame"
	"h5ingest/pipeline"
)

// Processor checks the processors newProcessor makes for images of format
// f: the same image gives the same result from any of them, a processor
// works in place and allocates nothing per image, and several processors
// work at once, each on its own image, as the pipeline's workers do.
func Processor(t *testing.T, newProcessor func() (pipeline.Processor, error), f frame.Format) {
	t.Helper()
	const images = 8
	inputs := make([][]byte, images)
	want := make([][]byte, images)
	p, err := newProcessor()
	if err != nil {
		t.Fatalf("make processor: %v", err)
	}
	for n := range images {
		inputs[n] = image(f, uint64(n))
		want[n] = bytes.Clone(inputs[n])
		if err := p.Process(n, f, want[n]); err != nil {
			t.Fatalf("frame %d: %v", n, err)
		}
	}
	// Again, by as many processors at once as a pipeline has workers.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	got := make([][][]byte, len(errs))
	for w := range errs {
		q, err := newProcessor()
		if err != nil {
			t.Fatalf("make processor: %v", err)
		}
		wg.Go(func() {
			for n := range images {
				img := bytes.Clone(inputs[n])
				if err := q.Process(n, f, img); err != nil {
					errs[w] = err
					return
				}
				got[w] = append(got[w], img)
			}
		})
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("processor %d at once with others: %v", w, err)
		}
		for n, img := range got[w] {
			if !bytes.Equal(img, want[n]) {
				t.Errorf("processor %d, frame %d: not the result of the first processor", w, n)
			}
		}
	}
	img := bytes.Clone(inputs[0])
	if a := testing.AllocsPerRun(20, func() {
		copy(img, inputs[0])
		p.Process(0, f, img)
	}); a > 0 {
		t.Errorf("%.1f allocations per image, want none", a)
	}
}

// image returns a decoded image of format f: photon counts, mostly low.
func image(f frame.Format, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, f.ImageSize())
	size := f.PixelSize()
	for i := 0; i < len(b); i += size {
		v := uint32(rng.IntN(200))
		if rng.IntN(50) == 0 {
			v = rng.Uint32N(f.MaxCount() + 1)
		}
		for j := range size {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}
