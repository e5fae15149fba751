//go:build cgo

package gpu

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"h5ingest/compress/bitshuffle"
	"h5ingest/frame"
	"h5ingest/gpu/internal/fakecuda"
)

// TestFakeDriver runs the cuda backend, driver calls and all, against a
// fake libcuda.so.1 that runs the kernels on the host (package fakecuda):
// the conformance suite, the allocation test, auto's choice, many backends
// at once and Reserve. It then judges
// the driver calls the fake logged:
//   - one context, the device's primary one, retained once for all the
//     backends open at a time and released as often, with blocking sync
//     asked for before the first retain; never a context of its own (the
//     fake, like a GPU in EXCLUSIVE_PROCESS mode, refuses a second);
//   - every module a backend loaded unloaded when it closes, since the
//     shared context outlives it;
//   - every wait for a lane on an event created with blocking sync;
//   - the module's tables uploaded on a stream that was waited for before
//     any kernel ran.
func TestFakeDriver(t *testing.T) {
	if fakecuda.Child() {
		t.Skip("runs the other tests against the fake driver; this is that run")
	}
	tests := []string{"TestBackends", "TestDecodeAllocs", "TestAuto", "TestFakeDriverShared", "TestFakeDriverReserve"}
	out, calls := fakecuda.Run(t, "^("+strings.Join(tests, "|")+")$/^cuda$")
	for _, name := range append(tests, "TestBackends/cuda", "TestBackends/cuda/Concurrent", "TestDecodeAllocs/cuda") {
		if !strings.Contains(out, "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass against the fake driver:\n%s", name, out)
		}
	}
	if strings.Contains(out, "--- SKIP") {
		t.Errorf("a test skipped against the fake driver:\n%s", out)
	}
	retains, releases, maxRefs, flagsSet := 0, 0, uint64(0), false
	modules := map[string]int{}
	waitEvents := map[string]bool{}
	for _, c := range calls {
		switch c.Func {
		case "cuCtxCreate_v2", "cuCtxDestroy_v2":
			t.Errorf("%s: a context of its own, which a GPU in EXCLUSIVE_PROCESS mode refuses", c)
		case "cuDevicePrimaryCtxSetFlags_v2":
			flagsSet = c.Int("flags")&7 == 4
		case "cuDevicePrimaryCtxRetain":
			if retains == 0 && !flagsSet {
				t.Error("primary context retained before blocking sync (CU_CTX_SCHED_BLOCKING_SYNC) was set")
			}
			retains++
			maxRefs = max(maxRefs, c.Int("refs"))
		case "cuDevicePrimaryCtxRelease_v2":
			releases++
		case "cuEventSynchronize":
			waitEvents[c.Args["flags"]] = true
		case "cuModuleLoadDataEx":
			modules[c.Args["module"]]++
			if c.Args["target"] != "sm_90" {
				t.Errorf("%s: the fake device is of compute capability 9.0, want the sm_90 PTX", c)
			}
		case "cuModuleLoadDataEx-refused":
			t.Errorf("%s: a PTX the device cannot load was tried", c)
		case "cuModuleUnload":
			modules[c.Args["module"]]--
		case "cuCtxSynchronize":
			t.Errorf("%s: the backend waits for its lanes, not the whole context", c)
		}
	}
	if retains == 0 || retains != releases {
		t.Errorf("primary context retained %d times, released %d times", retains, releases)
	}
	if maxRefs != 1 {
		t.Errorf("the primary context held %d times at once, want once for every backend of the process", maxRefs)
	}
	for m, n := range modules {
		if n != 0 {
			t.Errorf("module %s loaded and not unloaded: the shared primary context would keep it", m)
		}
	}
	if len(waitEvents) != 1 || !waitEvents["3"] {
		t.Errorf("lanes waited on events of flags %v, want only 3 (blocking sync, no timing)", waitEvents)
	}
	if err := fakecuda.CheckUploadOrder(calls); err != nil {
		t.Error(err)
	}
}

// sharedBackends is how many cuda backends TestFakeDriverShared holds at
// once, as many as the tests of a package may.
const sharedBackends = 30

// TestFakeDriverShared opens many cuda backends at once and decodes with
// each: they share the device's primary context, retained once, and one
// module, loaded (JIT-compiled) once. It runs only against the fake driver
// (TestFakeDriver), which refuses a second context.
func TestFakeDriverShared(t *testing.T) {
	if !fakecuda.Child() {
		t.Skip("runs against the fake driver, under TestFakeDriver")
	}
	retains, loads := countCalls(t, "cuDevicePrimaryCtxRetain "), countCalls(t, "cuModuleLoadDataEx ")
	g := frame.Geometry{ChipsX: 2, ChipsY: 1, ChipWidth: 16, ChipHeight: 4}
	f := frame.Format{Geometry: g, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	cpu := newBackend(t, "cpu", Options{})
	var bes []Backend
	for range sharedBackends {
		be, err := New("cuda", Options{Streams: 2})
		if err != nil {
			t.Fatalf("backend %d: %v", len(bes)+1, err)
		}
		bes = append(bes, be)
	}
	if n := countCalls(t, "cuDevicePrimaryCtxRetain ") - retains; n != 1 {
		t.Errorf("%d backends retained the primary context %d times, want once", sharedBackends, n)
	}
	if n := countCalls(t, "cuModuleLoadDataEx ") - loads; n != 1 {
		t.Errorf("%d backends loaded the kernels %d times, want once", sharedBackends, n)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for i, be := range bes {
		compareBatch(t, be, cpu, []Job{newJob(f, 0, randomBytes(rng, f.PayloadSize()))}, fmt.Sprintf("backend %d", i))
	}
	for _, be := range bes {
		if err := be.Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestFakeDriverReserve checks Reserve on the cuda backend itself: after
// it, Decode calls of the batches reserved for allocate no device memory
// (cuMemAlloc) and no page-locked memory (cuMemHostAlloc).
func TestFakeDriverReserve(t *testing.T) {
	if !fakecuda.Child() {
		t.Skip("runs against the fake driver, under TestFakeDriver")
	}
	g := frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 32, ChipHeight: 8}
	f := frame.Format{Geometry: g, Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.Binary}
	be := newBackend(t, "cuda", Options{Streams: 1})
	cpu := newBackend(t, "cpu", Options{})
	const batch, calls = 4, 2
	if _, err := be.(Reserver).Reserve(f, batch, calls, true); err != nil {
		t.Fatal(err)
	}
	before := countAllocs(t)
	var wg sync.WaitGroup
	for c := range calls {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(10, uint64(c)))
			for round := range 4 {
				var jobs []Job
				for k := range batch {
					j := newJob(f, k, randomBytes(rng, f.PayloadSize()))
					if k%2 == 0 {
						j.ShuffleBlock = bitshuffle.DefaultBlockSize(f.PixelSize())
					}
					jobs = append(jobs, j)
				}
				compareBatch(t, be, cpu, jobs, fmt.Sprintf("call %d round %d", c, round))
			}
		})
	}
	wg.Wait()
	if n := countAllocs(t); n != before {
		t.Errorf("Decode calls after Reserve made %d driver allocations, want 0", n-before)
	}
}

// TestFakeDriverOldDriver runs Reserve's test against a fake driver that
// refuses the sm_90 PTX, as a driver older than that PTX's ISA does on a
// Hopper GPU: the backend loads the sm_70 PTX instead, and decodes.
func TestFakeDriverOldDriver(t *testing.T) {
	if fakecuda.Child() {
		t.Skip("runs a test against the fake driver; this is that run")
	}
	out, calls := fakecuda.Run(t, "^TestFakeDriverReserve$", "FAKECUDA_REFUSE_TARGET=sm_90")
	if !strings.Contains(out, "--- PASS: TestFakeDriverReserve ") {
		t.Errorf("TestFakeDriverReserve did not pass against a driver refusing sm_90:\n%s", out)
	}
	var loads []string
	for _, c := range calls {
		switch c.Func {
		case "cuModuleLoadDataEx-refused":
			loads = append(loads, "refused "+c.Args["target"])
		case "cuModuleLoadDataEx":
			loads = append(loads, "loaded "+c.Args["target"])
		}
	}
	if got := strings.Join(loads, ", "); got != "refused sm_90, loaded sm_70" {
		t.Errorf("module loads: %s; want the sm_90 PTX refused, then the sm_70 one loaded", got)
	}
}

// countAllocs counts the device and page-locked allocations in the fake
// driver's log so far.
func countAllocs(t *testing.T) int {
	t.Helper()
	return countCalls(t, "cuMemAlloc_v2 ") + countCalls(t, "cuMemHostAlloc ")
}

// countCalls counts the lines of the fake driver's log so far that hold s.
func countCalls(t *testing.T, s string) int {
	t.Helper()
	b, err := os.ReadFile(os.Getenv("FAKECUDA_LOG"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), s)
}
