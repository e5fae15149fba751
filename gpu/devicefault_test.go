//go:build cgo

package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"h5ingest/frame"
	"h5ingest/gpu/cuda"
	"h5ingest/gpu/internal/fakecuda"
)

// stickyFaultLaunch is the kernel launch the fake driver faults at in
// TestFakeDriverSticky: Preload's check of the module takes launches 1 to
// 3 (decode, sub-piece CRCs, fold), the first batch 4 to 6, so launch 8 is
// the second batch's CRC kernel, in the middle of a round.
const stickyFaultLaunch = 8

// TestFakeDriverSticky injects the sticky errors a kernel can leave
// (CUDA_ERROR_ILLEGAL_ADDRESS, 700, and CUDA_ERROR_LAUNCH_FAILED, 719) in
// the middle of a batch, through the fake driver, which then fails every
// later call of the process as the driver documents, and runs
// TestStickyChild against it: the batch in flight fails with ErrDeviceLost
// and the driver's code, every backend on the device fails at once after,
// the GPU stays lost for the process (Lost), "cuda" says to restart and
// "auto" decodes on the CPU with a warning. The log then shows the module
// loaded once, no context made after the fault (the one asked for
// refused), retains and releases balanced, and the driver started with
// the compute cache asked for.
func TestFakeDriverSticky(t *testing.T) {
	if fakecuda.Child() {
		t.Skip("runs TestStickyChild against the fake driver; this is that run")
	}
	for _, code := range []int{cuda.IllegalAddress, cuda.LaunchFailed} {
		t.Run(fmt.Sprintf("code=%d", code), func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "cuda-cache")
			out, calls := fakecuda.Run(t, "^TestStickyChild$", "FAKECUDA_FAULT_CODE="+strconv.Itoa(code),
				"FAKECUDA_FAULT_LAUNCH="+strconv.Itoa(stickyFaultLaunch), "H5INGEST_TEST_CACHE="+cache)
			if !strings.Contains(out, "--- PASS: TestStickyChild ") {
				t.Fatalf("TestStickyChild did not pass:\n%s", out)
			}
			count := map[string]int{}
			faults, refused := 0, 0
			for _, c := range calls {
				count[c.Func]++
				switch {
				case c.Func == "cuInit" && c.Args["cache"] != cache:
					t.Errorf("the driver started with CUDA_CACHE_PATH %s, want %s", c.Args["cache"], cache)
				case c.Func == "cuLaunchKernel" && c.Args["fault"] != "":
					faults++
					if c.Int("launch") != stickyFaultLaunch || c.Int("fault") != uint64(code) {
						t.Errorf("fault %s", c)
					}
				case c.Func == "cuDevicePrimaryCtxRetain" && c.Args["sticky"] != "":
					refused++
					count[c.Func]--
					if c.Int("sticky") != uint64(code) {
						t.Errorf("a new context refused with %s, want code %d", c, code)
					}
				}
			}
			if faults != 1 {
				t.Errorf("%d faulting launches logged, want 1", faults)
			}
			if refused != 1 {
				t.Errorf("%d retains refused after the fault, want 1 (the test's own)", refused)
			}
			if fi, err := os.Stat(cache); err != nil || !fi.IsDir() {
				t.Errorf("compute cache directory not made: %v", err)
			}
			if count["cuModuleLoadDataEx"] != 1 {
				t.Errorf("module loaded %d times, want 1: no context is made after the fault", count["cuModuleLoadDataEx"])
			}
			if count["cuDevicePrimaryCtxRetain"] != count["cuDevicePrimaryCtxRelease_v2"] {
				t.Errorf("primary context retained %d times, released %d times", count["cuDevicePrimaryCtxRetain"], count["cuDevicePrimaryCtxRelease_v2"])
			}
		})
	}
}

// TestFakeDriverStickyAtCheck runs TestStickyAtCheckChild against a fake
// driver that faults in the check of the kernels, when the device first
// opens: that too loses the GPU for the process.
func TestFakeDriverStickyAtCheck(t *testing.T) {
	if fakecuda.Child() {
		t.Skip("runs TestStickyAtCheckChild against the fake driver; this is that run")
	}
	out, calls := fakecuda.Run(t, "^TestStickyAtCheckChild$", "FAKECUDA_FAULT_CODE=700", "FAKECUDA_FAULT_LAUNCH=2")
	if !strings.Contains(out, "--- PASS: TestStickyAtCheckChild ") {
		t.Fatalf("TestStickyAtCheckChild did not pass:\n%s", out)
	}
	count := map[string]int{}
	for _, c := range calls {
		count[c.Func]++
	}
	if count["cuModuleLoadDataEx"] != 1 || count["cuDevicePrimaryCtxRetain"] != 1 || count["cuDevicePrimaryCtxRelease_v2"] != 1 {
		t.Errorf("driver calls %v, want one module load, one retain and one release: nothing asked after the loss", count)
	}
}

// TestStickyAtCheckChild runs under TestFakeDriverStickyAtCheck.
func TestStickyAtCheckChild(t *testing.T) {
	if !fakecuda.Child() || os.Getenv("FAKECUDA_FAULT_LAUNCH") != "2" {
		t.Skip("runs against a fake driver that faults in the check, under TestFakeDriverStickyAtCheck")
	}
	var logged syncBuffer
	_, err := Preload("cuda", Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if !errors.Is(err, ErrDeviceLost) || !cuda.HasCode(err, cuda.IllegalAddress) {
		t.Errorf("Preload with a fault in the check: %v, want ErrDeviceLost and code 700", err)
	}
	if err := Lost(); !errors.Is(err, ErrDeviceLost) {
		t.Errorf("Lost after a fault in the check: %v", err)
	}
	if !strings.Contains(logged.String(), "CUDA device lost") {
		t.Errorf("the loss was not logged:\n%s", logged.String())
	}
	if _, err := New("cuda", Options{}); !errors.Is(err, ErrDeviceLost) {
		t.Errorf("cuda after a fault in the check: %v, want ErrDeviceLost", err)
	}
}

// syncBuffer is a bytes.Buffer for a logger that several goroutines use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestStickyChild runs under TestFakeDriverSticky, against a fake driver
// that faults at launch stickyFaultLaunch.
func TestStickyChild(t *testing.T) {
	if !fakecuda.Child() || os.Getenv("FAKECUDA_FAULT_CODE") == "" {
		t.Skip("runs against a faulting fake driver, under TestFakeDriverSticky")
	}
	code, _ := strconv.Atoi(os.Getenv("FAKECUDA_FAULT_CODE"))
	var logged syncBuffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	release, err := Preload("cuda", Options{Logger: log, ComputeCache: os.Getenv("H5INGEST_TEST_CACHE")})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if !strings.Contains(logged.String(), "decode backend ready") {
		t.Errorf("Preload logged no ready line:\n%s", logged.String())
	}
	g := frame.Geometry{ChipsX: 2, ChipsY: 1, ChipWidth: 16, ChipHeight: 4}
	f := frame.Format{Geometry: g, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	cpu := newBackend(t, "cpu", Options{})
	rng := rand.New(rand.NewPCG(11, 11))
	batch := func() []Job {
		return []Job{newJob(f, 0, randomBytes(rng, f.PayloadSize())), newJob(f, 1, randomBytes(rng, f.PayloadSize()))}
	}
	// Two modules' backends on the device, as a scan of two modules has.
	a, err := New("cuda", Options{Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New("cuda", Options{Streams: 1})
	if err != nil {
		t.Fatal(err)
	}
	compareBatch(t, a, cpu, batch(), "before the fault")
	if err := Lost(); err != nil {
		t.Fatalf("lost before the fault: %v", err)
	}
	lost := LostChan()
	select {
	case <-lost:
		t.Fatal("LostChan closed before the fault")
	default:
	}
	err = a.Decode(batch())
	if !errors.Is(err, ErrDeviceLost) || !errors.Is(err, cuda.ErrSticky) || !cuda.HasCode(err, code) {
		t.Fatalf("the faulting batch: %v, want ErrDeviceLost, sticky, code %d", err, code)
	}
	if err := Lost(); !errors.Is(err, ErrDeviceLost) || !cuda.HasCode(err, code) {
		t.Errorf("Lost after the fault: %v, want ErrDeviceLost and code %d", err, code)
	}
	select {
	case <-lost:
	default:
		t.Error("LostChan not closed by the fault")
	}
	if err := b.Decode(batch()); !errors.Is(err, ErrDeviceLost) {
		t.Errorf("the other backend after the fault: %v, want ErrDeviceLost", err)
	}
	if _, err := b.(Reserver).Reserve(f, 2, 1, false); !errors.Is(err, ErrDeviceLost) {
		t.Errorf("Reserve after the fault: %v, want ErrDeviceLost", err)
	}
	if _, err := New("cuda", Options{}); !errors.Is(err, ErrDeviceLost) || !strings.Contains(err.Error(), "restart h5ingest") {
		t.Errorf("a backend opened while the lost ones are held: %v, want ErrDeviceLost and a word to restart", err)
	}
	for _, be := range []Backend{a, b} {
		if err := be.Close(); err != nil {
			t.Errorf("close on the lost device: %v", err)
		}
	}
	if !strings.Contains(logged.String(), "CUDA device lost") {
		t.Errorf("the loss was not logged:\n%s", logged.String())
	}
	if _, err := New("cuda", Options{}); !errors.Is(err, ErrDeviceLost) || !strings.Contains(err.Error(), "restart h5ingest") {
		t.Errorf("cuda once every lost backend closed: %v, want ErrDeviceLost and a word to restart", err)
	}
	// The driver itself makes no new context for the process.
	dev, err := cuda.GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	if ctx, err := cuda.PrimaryContext(dev); !cuda.HasCode(err, code) {
		if err == nil {
			ctx.Close()
		}
		t.Errorf("a new primary context after the fault: %v, want code %d", err, code)
	}
	var warned syncBuffer
	auto, err := New("auto", Options{Logger: slog.New(slog.NewTextHandler(&warned, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer auto.Close()
	if auto.Name() != "cpu" || !strings.Contains(warned.String(), "level=WARN") || !strings.Contains(warned.String(), "device lost") {
		t.Errorf("auto after the loss: %s backend, logged:\n%s", auto.Name(), warned.String())
	}
	compareBatch(t, auto, cpu, batch(), "auto on the CPU")
}

// TestFakeDriverPins runs TestPinsChild against the fake driver: memory is
// page-locked for the device once however many backends register it (as
// the pipelines of one process might a ring), unlocked when the last lets
// it go, and left alone where another user of the process page-locked it
// for CUDA before (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED).
func TestFakeDriverPins(t *testing.T) {
	if fakecuda.Child() {
		t.Skip("runs TestPinsChild against the fake driver; this is that run")
	}
	out, calls := fakecuda.Run(t, "^TestPinsChild$")
	if !strings.Contains(out, "--- PASS: TestPinsChild ") {
		t.Fatalf("TestPinsChild did not pass:\n%s", out)
	}
	already := 0
	for _, c := range calls {
		if c.Func == "cuMemHostRegister_v2" && c.Int("result") == cuda.HostMemoryAlreadyRegistered {
			already++
		}
	}
	if already != 1 {
		t.Errorf("%d registrations answered already registered, want 1 (the backend's try of the other user's memory)", already)
	}
}

// TestPinsChild runs under TestFakeDriverPins.
func TestPinsChild(t *testing.T) {
	if !fakecuda.Child() {
		t.Skip("runs against the fake driver, under TestFakeDriverPins")
	}
	ring, err := syscall.Mmap(-1, 0, 1<<16, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(ring)
	a := newBackend(t, "cuda", Options{Streams: 1}).(HostAllocator)
	b := newBackend(t, "cuda", Options{Streams: 1}).(HostAllocator)
	regs, unregs := countCalls(t, "cuMemHostRegister_v2 "), countCalls(t, "cuMemHostUnregister ")
	for _, h := range []HostAllocator{a, b} {
		if err := h.RegisterHost(ring); err != nil {
			t.Fatal(err)
		}
	}
	if n := countCalls(t, "cuMemHostRegister_v2 ") - regs; n != 1 {
		t.Errorf("two backends registered one ring: %d driver registrations, want 1", n)
	}
	if err := a.UnregisterHost(ring); err != nil {
		t.Fatal(err)
	}
	if n := countCalls(t, "cuMemHostUnregister ") - unregs; n != 0 {
		t.Errorf("unregistered while another backend holds it (%d calls)", n)
	}
	if err := b.UnregisterHost(ring); err != nil {
		t.Fatal(err)
	}
	if n := countCalls(t, "cuMemHostUnregister ") - unregs; n != 1 {
		t.Errorf("%d driver unregistrations after the last backend let go, want 1", n)
	}

	// Registered by someone else in the process: used as it is.
	dev, err := cuda.GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := cuda.PrimaryContext(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	other := ring[:1<<15]
	if err := ctx.RegisterHost(unsafeData(other), len(other)); err != nil {
		t.Fatal(err)
	}
	if err := a.RegisterHost(other); err != nil {
		t.Errorf("memory page-locked by another user: %v, want it used as it is", err)
	}
	unregs = countCalls(t, "cuMemHostUnregister ")
	if err := a.UnregisterHost(other); err != nil {
		t.Error(err)
	}
	if n := countCalls(t, "cuMemHostUnregister ") - unregs; n != 0 {
		t.Errorf("the backend unregistered memory another user registered (%d calls)", n)
	}
	if err := ctx.UnregisterHost(unsafeData(other)); err != nil {
		t.Errorf("the other user's registration was taken away: %v", err)
	}
}

// unsafeData returns the address of b's first byte, for package cuda.
func unsafeData(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

// TestFakeDriverWrongResults runs TestWrongChild against a fake driver
// whose decode kernel never runs: a GPU that loads the kernels and
// computes wrong is found by the check of a frame when the device opens,
// before any scan. The device is given back (module unloaded, context
// released).
func TestFakeDriverWrongResults(t *testing.T) {
	if fakecuda.Child() {
		t.Skip("runs TestWrongChild against the fake driver; this is that run")
	}
	out, calls := fakecuda.Run(t, "^TestWrongChild$", "FAKECUDA_WRONG=1")
	if !strings.Contains(out, "--- PASS: TestWrongChild ") {
		t.Fatalf("TestWrongChild did not pass:\n%s", out)
	}
	count := map[string]int{}
	for _, c := range calls {
		count[c.Func]++
	}
	if count["cuModuleLoadDataEx"] == 0 || count["cuModuleLoadDataEx"] != count["cuModuleUnload"] {
		t.Errorf("module loaded %d times, unloaded %d times", count["cuModuleLoadDataEx"], count["cuModuleUnload"])
	}
	if count["cuDevicePrimaryCtxRetain"] != count["cuDevicePrimaryCtxRelease_v2"] {
		t.Errorf("primary context retained %d times, released %d times", count["cuDevicePrimaryCtxRetain"], count["cuDevicePrimaryCtxRelease_v2"])
	}
}

// TestWrongChild runs under TestFakeDriverWrongResults.
func TestWrongChild(t *testing.T) {
	if !fakecuda.Child() || os.Getenv("FAKECUDA_WRONG") == "" {
		t.Skip("runs against a fake driver that computes wrong, under TestFakeDriverWrongResults")
	}
	if _, err := Preload("cuda", Options{}); err == nil || !strings.Contains(err.Error(), "differs from the CPU") {
		t.Errorf("Preload of cuda on a device that computes wrong: %v", err)
	}
	var logged syncBuffer
	release, err := Preload("auto", Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	release()
	if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "backend=cpu") {
		t.Errorf("auto on a device that computes wrong logged:\n%s", logged.String())
	}
	be, err := New("auto", Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	if be.Name() != "cpu" {
		t.Errorf("auto chose %s on a device that computes wrong", be.Name())
	}
}
