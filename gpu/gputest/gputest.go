// Package gputest is the conformance suite of decode backends: a new
// gpu.Backend, a facility's own, runs it with one line,
//
//	gputest.Backend(t, open)
//
// and it checks the backend against h5ingest's CPU backend, the
// reference, on the same frames. h5ingest's own backends run the fuller
// suite in package gpu (TestBackends).
package gputest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"h5ingest/frame"
	"h5ingest/gpu"
)

// formats are the payload formats the suite decodes, on a small
// geometry: every encoding, with LFSR and binary counters.
var formats = []frame.Format{
	{Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR},
	{Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.Binary},
	{Encoding: frame.Bitplane, BitDepth: 6, Coding: frame.LFSR},
	{Encoding: frame.Bitplane, BitDepth: 1, Coding: frame.Binary},
	{Encoding: frame.Packed12, BitDepth: 12},
	{Encoding: frame.Packed24, BitDepth: 24},
	{Encoding: frame.U16LE, BitDepth: 16},
	{Encoding: frame.U32LE, BitDepth: 32},
}

// Backend checks the backends open makes: a batch of frames of every
// format, from random payloads, decodes to the reference's images and
// checksums, chips rotated by 180 degrees included; a job the backend
// cannot decode gets its own error and leaves the others decoded; batches
// decode at once from several goroutines; Decode after Close fails.
func Backend(t *testing.T, open func(gpu.Options) (gpu.Backend, error)) {
	t.Helper()
	g := frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 16, ChipHeight: 8}
	o := frame.Orientation{0, 180, 180, 0}
	ref, err := gpu.New("cpu", gpu.Options{Orientation: o})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	be, err := open(gpu.Options{Orientation: o})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	batch := func(seed uint64) []gpu.Job {
		rng := rand.New(rand.NewPCG(seed, 1))
		var jobs []gpu.Job
		for i, f := range formats {
			f.Geometry = g
			p := make([]byte, f.PayloadSize())
			for j := range p {
				p[j] = byte(rng.Uint32())
			}
			h := frame.Header{FrameNumber: uint64(i), PayloadSize: uint32(len(p)), PayloadCRC: frame.Checksum(p), Format: f}
			jobs = append(jobs, gpu.Job{Header: h, Payload: p, Image: make([]byte, f.ImageSize())})
		}
		return jobs
	}
	check := func(name string, got []gpu.Job, seed uint64) {
		want := batch(seed)
		if err := ref.Decode(want); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			g, w := &got[i], &want[i]
			if w.Err != nil && !bytes.Equal(g.Payload, w.Payload) {
				continue // a job made bad on purpose
			}
			if w.Err != nil {
				t.Fatalf("%s, %v: the reference cannot decode it: %v", name, w.Header.Format, w.Err)
			}
			if (g.Err != nil) != (w.Err != nil) || !bytes.Equal(g.Image, w.Image) || g.RawCRC != w.RawCRC || g.DataCRC != w.DataCRC {
				t.Errorf("%s, %v: image, checksums or error (%v) not the reference's (%v)", name, g.Header.Format, g.Err, w.Err)
			}
		}
	}
	jobs := batch(1)
	if err := be.Decode(jobs); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	check("one batch", jobs, 1)

	bad := batch(2)
	bad[1].Payload = bad[1].Payload[1:]
	bad[3].Image = bad[3].Image[:len(bad[3].Image)-1]
	if err := be.Decode(bad); err != nil {
		t.Fatalf("Decode of a batch with bad jobs: %v", err)
	}
	for i, j := range bad {
		if (j.Err != nil) != (i == 1 || i == 3) {
			t.Errorf("job %d (%v): error %v", i, j.Header.Format, j.Err)
		}
	}

	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			seed := uint64(10 + w)
			jobs := batch(seed)
			if err := be.Decode(jobs); err != nil {
				t.Errorf("Decode at once with others: %v", err)
				return
			}
			check(fmt.Sprint("goroutine ", w), jobs, seed)
		})
	}
	wg.Wait()
	if err := be.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := be.Decode(batch(3)); err == nil {
		t.Error("Decode after Close: no error")
	}
}
