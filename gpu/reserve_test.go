//go:build cgo

package gpu

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"h5ingest/compress/bitshuffle"
	"h5ingest/frame"
)

// TestReserve checks, on the device backend with the kernels on the host,
// that Reserve allocates every buffer a scan's Decode calls need at once:
// it adds a lane for each call reserved beyond the backend's streams, and
// afterwards concurrent calls of full batches, plain and transposed,
// allocate no device or staging buffer, and still decode right.
func TestReserve(t *testing.T) {
	g := frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 64, ChipHeight: 32}
	f := frame.Format{Geometry: g, Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR}
	o := testOrientations(g)["mixed"]
	d, allocs, err := newHostDev(hostCUDA, Options{Orientation: o, Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cpu := newBackend(t, "cpu", Options{Orientation: o})
	const batch, calls = 4, 3

	release, err := d.Reserve(f, batch, calls, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.all) != calls {
		t.Errorf("after reserving %d calls on a backend of 2 streams: %d lanes", calls, len(d.all))
	}
	reserved := allocs.Load()
	if want := int64(calls) * int64(nRegions+2); reserved != want {
		t.Errorf("Reserve allocated %d buffers, want %d (%d lanes of %d regions and 2 staging buffers)", reserved, want, calls, nRegions)
	}

	var wg sync.WaitGroup
	for c := range calls {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(7, uint64(c)))
			for round := range 6 {
				var jobs []Job
				for k := range batch - round%2 { // full batches and short ones
					j := newJob(f, k, randomBytes(rng, f.PayloadSize()))
					if (round+k)%3 == 0 {
						j.ShuffleBlock = bitshuffle.DefaultBlockSize(f.PixelSize())
					}
					jobs = append(jobs, j)
				}
				compareBatch(t, d, cpu, jobs, fmt.Sprintf("call %d round %d", c, round))
			}
		})
	}
	wg.Wait()
	if n := allocs.Load(); n != reserved {
		t.Errorf("Decode calls after Reserve allocated %d more buffers, want 0", n-reserved)
	}

	// A second scan on the backend, after the first released its calls,
	// reuses the lanes.
	release()
	release2, err := d.Reserve(f, batch, calls, false)
	if err != nil {
		t.Fatal(err)
	}
	defer release2()
	if len(d.all) != calls || allocs.Load() != reserved {
		t.Errorf("reserving again after a release: %d lanes, %d more buffers; want %d lanes, none", len(d.all), allocs.Load()-reserved, calls)
	}

	for _, tc := range []struct {
		f            frame.Format
		batch, calls int
	}{{frame.Format{}, 1, 1}, {f, 0, 1}, {f, 1, 0}} {
		if _, err := d.Reserve(tc.f, tc.batch, tc.calls, false); err == nil {
			t.Errorf("Reserve(%v, %d, %d) succeeded", tc.f, tc.batch, tc.calls)
		}
	}
}

// TestReserveGrowsWithout checks the test above can fail: without Reserve,
// the first Decode call allocates its lane's buffers.
func TestReserveGrowsWithout(t *testing.T) {
	g := frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 64, ChipHeight: 32}
	f := frame.Format{Geometry: g, Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR}
	d, allocs, err := newHostDev(hostCUDA, Options{Streams: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	rng := rand.New(rand.NewPCG(8, 8))
	if err := d.Decode([]Job{newJob(f, 0, randomBytes(rng, f.PayloadSize()))}); err != nil {
		t.Fatal(err)
	}
	if allocs.Load() == 0 {
		t.Error("a Decode call without Reserve allocated nothing")
	}
}
