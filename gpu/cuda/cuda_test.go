//go:build cgo

package cuda_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"h5ingest/gpu/cuda"
	"h5ingest/gpu/kernels"
)

// needGPU skips the test, with the reason, where the driver does not load
// or no device answers, and returns the primary context of device 0
// otherwise.
func needGPU(t testing.TB) *cuda.Context {
	t.Helper()
	n, err := cuda.DeviceCount()
	if err != nil {
		t.Skipf("needs a CUDA GPU: %v", err)
	}
	if n == 0 {
		t.Skip("needs a CUDA GPU: the driver loads but sees no device")
	}
	d, err := cuda.GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := cuda.PrimaryContext(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ctx.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return ctx
}

// TestLoadWithoutDriver checks the error where libcuda.so.1 is missing.
func TestLoadWithoutDriver(t *testing.T) {
	err := cuda.Load()
	if err == nil {
		t.Skip("the CUDA driver loads here")
	}
	var cerr *cuda.Error
	if !strings.HasPrefix(err.Error(), "libcuda.so.1 not found: ") && !errors.As(err, &cerr) {
		t.Errorf("Load: %q, want it to say libcuda.so.1 was not found, or a driver error", err)
	}
	if _, err2 := cuda.DeviceCount(); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("DeviceCount after a failed Load: %v, want %v", err2, err)
	}
}

// TestDevice prints what the device is and checks its memory round trip:
// synchronous and stream copies, memset, page-locked memory, events.
func TestDevice(t *testing.T) {
	ctx := needGPU(t)
	name, err := ctx.Device.Name()
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := ctx.Device.TotalMem()
	major, _ := ctx.Device.Attribute(cuda.ComputeCapabilityMajor)
	minor, _ := ctx.Device.Attribute(cuda.ComputeCapabilityMinor)
	sms, _ := ctx.Device.Attribute(cuda.MultiprocessorCount)
	v, _ := cuda.DriverVersion()
	t.Logf("device %q, sm_%d%d, %d SMs, %.1f GiB; driver CUDA %d.%d", name, major, minor, sms, float64(mem)/(1<<30), v/1000, v%1000/10)
	if name == "" || mem <= 0 || major < 3 || sms <= 0 {
		t.Errorf("device attributes look wrong: %q %d sm_%d%d %d SMs", name, mem, major, minor, sms)
	}

	const n = 1<<20 + 3
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i * 7)
	}
	a, err := ctx.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free(a)
	b, err := ctx.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Free(b)
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Upload(a, src); err != nil {
		t.Fatal(err)
	}
	start, _ := ctx.NewEvent()
	end, _ := ctx.NewEvent()
	defer start.Close()
	defer end.Close()
	pinned, err := ctx.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.FreeHost(pinned)
	for _, err := range []error{
		start.Record(s),
		s.CopyDtoD(b, a, n),
		s.Memset(b, 0xEE, 5),
		s.CopyDtoH(pinned, b),
		end.Record(s),
		end.Synchronize(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	want := append(bytes.Repeat([]byte{0xEE}, 5), src[5:]...)
	if !bytes.Equal(pinned, want) {
		t.Error("device round trip changed the bytes")
	}
	if d, err := cuda.Elapsed(start, end); err != nil || d <= 0 {
		t.Errorf("Elapsed = %v, %v", d, err)
	}
	back := make([]byte, n)
	if err := s.Download(back, a); err != nil || !bytes.Equal(back, src) {
		t.Errorf("upload and download: %v, equal %v", err, bytes.Equal(back, src))
	}
}

// TestElapsedAnyThread times two events from many goroutines, each on an
// OS thread of its own held at once, so that most are threads on which no
// call bound the context before: Elapsed binds it itself.
func TestElapsedAnyThread(t *testing.T) {
	ctx := needGPU(t)
	s, err := ctx.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start, _ := ctx.NewEvent()
	end, _ := ctx.NewEvent()
	defer start.Close()
	defer end.Close()
	for _, err := range []error{start.Record(s), end.Record(s), end.Synchronize()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	const threads = 64
	var ready, done sync.WaitGroup
	ready.Add(threads)
	errs := make(chan error, threads)
	for range threads {
		done.Go(func() {
			runtime.LockOSThread() // held until every goroutine has a thread
			defer runtime.UnlockOSThread()
			ready.Done()
			ready.Wait()
			if _, err := cuda.Elapsed(start, end); err != nil {
				errs <- err
			}
		})
	}
	done.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Elapsed on a thread of its own: %v", err)
		break
	}
}

// TestModule loads the kernels, the PTX of every target the device's
// compute capability allows, and checks that a broken module and a
// missing kernel give the driver's error names.
func TestModule(t *testing.T) {
	ctx := needGPU(t)
	major, _ := ctx.Device.Attribute(cuda.ComputeCapabilityMajor)
	minor, _ := ctx.Device.Attribute(cuda.ComputeCapabilityMinor)
	targets := kernels.Targets(major, minor)
	if len(targets) == 0 {
		t.Fatalf("compute capability %d.%d: no PTX target", major, minor)
	}
	for _, target := range targets {
		m, err := ctx.LoadModule(target.PTX)
		if err != nil {
			t.Errorf("%s: %v", target.Arch, err)
			continue
		}
		defer m.Unload()
		for _, k := range kernels.Kernels {
			if _, err := m.Function(k); err != nil {
				t.Errorf("%s: %v", target.Arch, err)
			}
		}
		for name, b := range kernels.TableBytes() {
			if _, n, err := m.Global(name); err != nil || n != len(b) {
				t.Errorf("%s: global %s: %d bytes, %v; want %d", target.Arch, name, n, err, len(b))
			}
		}
		if _, err := m.Function("no_such_kernel"); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_NOT_FOUND") {
			t.Errorf("missing kernel: %v, want CUDA_ERROR_NOT_FOUND", err)
		}
	}
	broken := strings.Replace(kernels.PTX, "h5_decode(", "h5_decode(((", 1)
	_, err := ctx.LoadModule(broken)
	var cerr *cuda.Error
	if !errors.As(err, &cerr) || !strings.HasPrefix(cerr.Name, "CUDA_ERROR_") || cerr.Func != "cuModuleLoadData" {
		t.Errorf("broken PTX: %v, want a cuModuleLoadData error with the driver's name", err)
	} else {
		t.Logf("broken PTX gives: %v", err)
	}
}

// TestErrSticky checks which driver errors errors.Is finds sticky: those
// the driver documents as leaving the process unusable, wrapped or not,
// and no other.
func TestErrSticky(t *testing.T) {
	for _, tc := range []struct {
		code   int
		sticky bool
	}{
		{cuda.IllegalAddress, true},
		{cuda.LaunchFailed, true},
		{214, true}, // uncorrectable ECC error
		{702, true}, // launch timeout
		{cuda.HostMemoryAlreadyRegistered, false},
		{2, false},   // out of memory
		{218, false}, // invalid PTX
	} {
		err := fmt.Errorf("decode: %w", &cuda.Error{Func: "cuEventSynchronize", Code: tc.code})
		if got := errors.Is(err, cuda.ErrSticky); got != tc.sticky {
			t.Errorf("code %d: errors.Is(err, ErrSticky) = %v, want %v", tc.code, got, tc.sticky)
		}
	}
	if errors.Is(errors.New("not the driver's"), cuda.ErrSticky) {
		t.Error("an error not from the driver is sticky")
	}
}
