// Package pipelinetest holds the conformance suites of the pipeline's
// stages: a new processor, source or sink runs its suite with one line,
//
//	pipelinetest.Processor(t, newProcessor, format)
//	pipelinetest.Source(t, open)
//	pipelinetest.Sink(t, open)
//
// and it checks what the pipeline counts on: for processors, one per
// compression worker; for sources, frames in order and buffers held until
// released; for sinks, chunks and records stored as given, in any order.
//
// Of package pipelinetest, the processor suite (Processor) is part of
// h5ingest's facility API; see docs/extending.md.
package pipelinetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

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

// Frames returns n frames of format f as a detector sends them, numbered
// from 0, with their payload CRCs: what Source hands a source to deliver.
func Frames(f frame.Format, n int) []*pipeline.Frame {
	frames := make([]*pipeline.Frame, n)
	counts := make([]uint32, f.Pixels())
	for i := range frames {
		rng := rand.New(rand.NewPCG(uint64(i), 9))
		for j := range counts {
			counts[j] = rng.Uint32N(f.MaxCount() + 1)
		}
		payload, err := f.AppendPayload(nil, counts, nil)
		if err != nil {
			panic(err) // f is the suite's own, valid format
		}
		frames[i] = &pipeline.Frame{Header: frame.Header{FrameNumber: uint64(i), Timestamp: 1000 + uint64(i),
			PayloadSize: uint32(len(payload)), PayloadCRC: frame.Checksum(payload), Format: f}, Payload: payload}
	}
	return frames
}

// Source checks a source: open returns one that delivers frames (made by
// Frames) in order, then ends. It checks that every frame comes once, in
// order, with its header and payload; that a frame held while later ones
// are taken keeps its payload until released, and frames may be released
// in any order; that the end is io.EOF (or wraps it), and stays so; and
// that Next on a cancelled context returns.
func Source(t *testing.T, open func(t *testing.T, frames []*pipeline.Frame) pipeline.Source) {
	t.Helper()
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 1, ChipWidth: 16, ChipHeight: 8},
		Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR}
	const n, held = 12, 3
	want := Frames(f, n)
	src := open(t, want)
	ctx := context.Background()
	var out []*pipeline.Frame
	for i := range n {
		got, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		w := want[i]
		if got.Header.FrameNumber != w.Header.FrameNumber || got.Header.PayloadCRC != w.Header.PayloadCRC ||
			got.Header.Timestamp != w.Header.Timestamp || !bytes.Equal(got.Payload, w.Payload) {
			t.Fatalf("frame %d: got frame %d (%d bytes), want frame %d as sent", i, got.Header.FrameNumber, len(got.Payload), w.Header.FrameNumber)
		}
		out = append(out, got)
		if len(out) > held { // hold a few, release the oldest but one
			early := out[len(out)-held-1]
			if !bytes.Equal(early.Payload, want[early.Header.FrameNumber].Payload) {
				t.Errorf("frame %d changed while held", early.Header.FrameNumber)
			}
			src.Release(early)
			out = slices.Delete(out, len(out)-held-1, len(out)-held)
		}
	}
	for _, g := range slices.Backward(out) {
		if !bytes.Equal(g.Payload, want[g.Header.FrameNumber].Payload) {
			t.Errorf("frame %d changed while held", g.Header.FrameNumber)
		}
		src.Release(g)
	}
	for range 2 {
		if g, err := src.Next(ctx); !errors.Is(err, io.EOF) {
			t.Fatalf("after the last frame: %v, %v; want io.EOF", g, err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	done := make(chan struct{})
	go func() {
		if g, err := src.Next(cancelled); err == nil {
			src.Release(g)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("Next on a cancelled context did not return")
	}
}
