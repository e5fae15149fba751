//go:build cgo

package cuda

// #cgo LDFLAGS: -ldl
// #include <stdlib.h>
// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"
)

// Error is a failed driver call: the function and the driver's result code,
// with the code's name and description (from cuGetErrorName and
// cuGetErrorString), and for a module load the JIT compiler's log.
type Error struct {
	Func string // the driver function, e.g. "cuModuleLoadData"
	Code int    // the CUresult
	Name string // e.g. "CUDA_ERROR_INVALID_PTX"
	Desc string // the driver's description
	Log  string // the JIT error log, if any
}

// Error returns the driver call, the error's name and its description.
func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s: %s", e.Func, e.Name, e.Desc)
	if e.Log != "" {
		s += ": " + e.Log
	}
	return s
}

// Result codes the package's users act on.
const (
	// HostMemoryAlreadyRegistered: cuMemHostRegister of memory (or part
	// of it) registered before, in this process.
	HostMemoryAlreadyRegistered = 712
	// IllegalAddress: a kernel read or wrote outside its memory.
	IllegalAddress = 700
	// LaunchFailed: an exception on the device while a kernel ran.
	LaunchFailed = 719
)

// stickyCodes are the result codes after which, as the driver documents,
// the process is in an inconsistent state and every later call returns the
// same error: an uncorrectable ECC error, an illegal address,
// a launch timeout, a hardware stack error, an illegal instruction, a
// misaligned address, an invalid address space, an invalid program
// counter, a launch failure.
var stickyCodes = [...]int{214, IllegalAddress, 702, 714, 715, 716, 717, 718, LaunchFailed}

// ErrSticky matches, with errors.Is, every *Error whose code is sticky:
// one after which, as the driver documents, the process is in an
// inconsistent state, every later call returns the same error, in any
// context, and only a new process can use the GPU again.
var ErrSticky = errors.New("cuda: sticky error: the process must be restarted to use the GPU again")

// Sticky reports whether the error's code is sticky (see ErrSticky).
func (e *Error) Sticky() bool {
	for _, c := range stickyCodes {
		if e.Code == c {
			return true
		}
	}
	return false
}

// Is reports whether target is ErrSticky and the error is Sticky, for
// errors.Is.
func (e *Error) Is(target error) bool { return target == ErrSticky && e.Sticky() }

// HasCode reports whether err is, or wraps, an *Error of the given code.
func HasCode(err error, code int) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// check turns a result code into an *Error, or nil for CUDA_SUCCESS.
func check(fn string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	e := &Error{Func: fn, Code: int(r), Name: fmt.Sprintf("CUresult(%d)", int(r)), Desc: "unknown error"}
	var s *C.char
	if C.h5cu_error_name(r, &s) == 0 && s != nil {
		e.Name = C.GoString(s)
	}
	if C.h5cu_error_string(r, &s) == 0 && s != nil {
		e.Desc = C.GoString(s)
	}
	return e
}

var loaded struct {
	once sync.Once
	err  error
}

// Load opens libcuda.so.1, resolves the driver's entry points and
// initializes the driver (cuInit). It does the work once and returns the
// same result to every call. Without the driver the error says
// "libcuda.so.1 not found: " and why.
func Load() error {
	loaded.once.Do(func() {
		if msg := C.h5cu_load(); msg != nil {
			loaded.err = fmt.Errorf("libcuda.so.1 not found: %s", C.GoString(msg))
			return
		}
		loaded.err = check("cuInit", C.h5cu_init())
	})
	return loaded.err
}

// DriverVersion returns the driver's CUDA version, 1000*major + 10*minor.
func DriverVersion() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var v C.int
	err := check("cuDriverGetVersion", C.h5cu_driver_version(&v))
	return int(v), err
}

// DeviceCount returns the number of CUDA devices.
func DeviceCount() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var n C.int
	err := check("cuDeviceGetCount", C.h5cu_device_count(&n))
	return int(n), err
}

// Device is a CUDA device.
type Device struct{ d C.CUdevice }

// GetDevice returns the device of the given ordinal.
func GetDevice(ordinal int) (Device, error) {
	if err := Load(); err != nil {
		return Device{}, err
	}
	var d C.CUdevice
	if err := check("cuDeviceGet", C.h5cu_device_get(&d, C.int(ordinal))); err != nil {
		return Device{}, err
	}
	return Device{d}, nil
}

// Name returns the device's name, e.g. "NVIDIA H100 80GB HBM3".
func (d Device) Name() (string, error) {
	var buf [256]C.char
	if err := check("cuDeviceGetName", C.h5cu_device_name(&buf[0], C.int(len(buf)), d.d)); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// Attribute is a CUdevice_attribute.
type Attribute int

// Device attributes the package names; any other CUdevice_attribute value
// may be passed to Device.Attribute.
const (
	MaxThreadsPerBlock     Attribute = 1
	ClockRate              Attribute = 13 // kHz
	MultiprocessorCount    Attribute = 16
	MemoryClockRate        Attribute = 36 // kHz
	GlobalMemoryBusWidth   Attribute = 37 // bits
	AsyncEngineCount       Attribute = 40
	ComputeCapabilityMajor Attribute = 75
	ComputeCapabilityMinor Attribute = 76
)

// Attribute returns the value of a device attribute.
func (d Device) Attribute(a Attribute) (int, error) {
	var v C.int
	err := check("cuDeviceGetAttribute", C.h5cu_device_attribute(&v, C.int(a), d.d))
	return int(v), err
}

// TotalMem returns the device's memory in bytes.
func (d Device) TotalMem() (int64, error) {
	var n C.size_t
	err := check("cuDeviceTotalMem", C.h5cu_device_total_mem(&n, d.d))
	return int64(n), err
}

// Context is the primary context of one device, which every user of the
// device in the process shares (the driver counts its users); everything
// below is created in it.
type Context struct {
	c      C.CUcontext
	Device Device
	// BlockingSync reports whether the context's threads sleep while they
	// wait for the device (CU_CTX_SCHED_BLOCKING_SYNC) rather than spin.
	// False where another user in the process made the context active with
	// other flags and the driver kept them; the waits of Event.Wait sleep
	// either way.
	BlockingSync bool

	mu       sync.Mutex
	released bool
}

// Context flags and event flags of the driver API.
const (
	ctxSchedMask         = 0x07
	ctxSchedBlockingSync = 0x04
	eventBlockingSync    = 0x01
	eventDisableTiming   = 0x02
)

// PrimaryContext retains the primary context of device d
// (cuDevicePrimaryCtxRetain): one context per device and process, however
// many backends use it, as a GPU in EXCLUSIVE_PROCESS compute mode requires,
// and without the memory a context of its own costs each. Before the first
// retain it asks for blocking synchronisation
// (cuDevicePrimaryCtxSetFlags_v2 with CU_CTX_SCHED_BLOCKING_SYNC), so that a
// thread waiting for the device sleeps instead of spinning a core that
// compression needs. Close releases the context; the driver destroys it,
// with all its memory, when its last user has released it.
func PrimaryContext(d Device) (*Context, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	var flags C.uint
	var active C.int
	if err := check("cuDevicePrimaryCtxGetState", C.h5cu_primary_state(d.d, &flags, &active)); err != nil {
		return nil, err
	}
	blocking := flags&ctxSchedMask == ctxSchedBlockingSync
	if !blocking {
		// Refused on drivers that do not change the flags of an active
		// context: waits still sleep, on blocking-sync events.
		blocking = C.h5cu_primary_set_flags(d.d, ctxSchedBlockingSync) == 0
	}
	var c C.CUcontext
	if err := check("cuDevicePrimaryCtxRetain", C.h5cu_primary_retain(&c, d.d)); err != nil {
		return nil, err
	}
	return &Context{c: c, Device: d, BlockingSync: blocking}, nil
}

// Close releases the primary context (cuDevicePrimaryCtxRelease_v2), once:
// later calls do nothing. Free what was created in it first; the driver
// frees it anyway when the last user of the context releases it.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return nil
	}
	c.released = true
	return check("cuDevicePrimaryCtxRelease", C.h5cu_primary_release(c.Device.d))
}

// Synchronize waits for all work in the context.
func (c *Context) Synchronize() error {
	return check("cuCtxSynchronize", C.h5cu_ctx_synchronize(c.c))
}

// DevicePtr is an address in device memory.
type DevicePtr uint64

// Alloc allocates n bytes of device memory (at least 256-byte aligned).
func (c *Context) Alloc(n int) (DevicePtr, error) {
	var p C.CUdeviceptr
	if err := check("cuMemAlloc", C.h5cu_mem_alloc(c.c, &p, C.size_t(max(n, 1)))); err != nil {
		return 0, fmt.Errorf("%d bytes: %w", n, err)
	}
	return DevicePtr(p), nil
}

// Free frees device memory from Alloc.
func (c *Context) Free(p DevicePtr) error {
	if p == 0 {
		return nil
	}
	return check("cuMemFree", C.h5cu_mem_free(c.c, C.CUdeviceptr(p)))
}

// AllocHost allocates n bytes of page-locked host memory (cuMemHostAlloc),
// which the device copies from and to at full speed and asynchronously.
// The memory is outside the Go heap: free it with FreeHost, and do not use
// the slice after.
func (c *Context) AllocHost(n int) ([]byte, error) {
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", C.h5cu_mem_host_alloc(c.c, &p, C.size_t(max(n, 1)), 0)); err != nil {
		return nil, fmt.Errorf("%d bytes: %w", n, err)
	}
	return unsafe.Slice((*byte)(p), n), nil
}

// FreeHost frees memory from AllocHost.
func (c *Context) FreeHost(b []byte) error {
	if cap(b) == 0 {
		return nil
	}
	return check("cuMemFreeHost", C.h5cu_mem_free_host(c.c, unsafe.Pointer(unsafe.SliceData(b))))
}

// RegisterHost page-locks memory that does not belong to the Go heap (from
// mmap or C allocation: the driver keeps its address, which cgo forbids for
// Go memory), so the device copies it as fast as AllocHost memory. Undo it
// with UnregisterHost before the memory is freed.
func (c *Context) RegisterHost(p unsafe.Pointer, n int) error {
	return check("cuMemHostRegister", C.h5cu_mem_host_register(c.c, p, C.size_t(n), 0))
}

// UnregisterHost undoes RegisterHost.
func (c *Context) UnregisterHost(p unsafe.Pointer) error {
	return check("cuMemHostUnregister", C.h5cu_mem_host_unregister(c.c, p))
}

// Module is a module loaded from PTX.
type Module struct {
	ctx *Context
	m   C.CUmodule
}

// LoadModule JIT-compiles and loads a PTX module (cuModuleLoadDataEx). ptx
// must end in a NUL byte. A failed compilation's error carries the JIT log.
func (c *Context) LoadModule(ptx string) (*Module, error) {
	if len(ptx) == 0 || ptx[len(ptx)-1] != 0 {
		return nil, fmt.Errorf("cuda: module image is not NUL-terminated")
	}
	image := C.CString(ptx) // C memory: the driver reads it during the call only
	defer C.free(unsafe.Pointer(image))
	var log [4096]C.char
	var m C.CUmodule
	if err := check("cuModuleLoadData", C.h5cu_module_load(c.c, &m, unsafe.Pointer(image), &log[0], C.size_t(len(log)))); err != nil {
		err.(*Error).Log = C.GoString(&log[0])
		return nil, err
	}
	return &Module{ctx: c, m: m}, nil
}

// Unload unloads the module.
func (m *Module) Unload() error {
	return check("cuModuleUnload", C.h5cu_module_unload(m.ctx.c, m.m))
}

// Function is a kernel of a module.
type Function struct {
	ctx  *Context
	f    C.CUfunction
	Name string
}

// Function returns the kernel called name.
func (m *Module) Function(name string) (*Function, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var f C.CUfunction
	if err := check("cuModuleGetFunction", C.h5cu_module_function(m.ctx.c, &f, m.m, cs)); err != nil {
		return nil, fmt.Errorf("kernel %s: %w", name, err)
	}
	return &Function{ctx: m.ctx, f: f, Name: name}, nil
}

// Global returns the address and size of the module global called name.
func (m *Module) Global(name string) (DevicePtr, int, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var p C.CUdeviceptr
	var n C.size_t
	if err := check("cuModuleGetGlobal", C.h5cu_module_global(m.ctx.c, &p, &n, m.m, cs)); err != nil {
		return 0, 0, fmt.Errorf("global %s: %w", name, err)
	}
	return DevicePtr(p), int(n), nil
}

// Dim3 is a grid or block size.
type Dim3 struct{ X, Y, Z int }

// Stream is a queue of device work. Its methods enqueue and return; the
// work runs in order on the device.
type Stream struct {
	ctx *Context
	s   C.CUstream
}

// NewStream creates a stream that does not wait for the legacy default
// stream (CU_STREAM_NON_BLOCKING).
func (c *Context) NewStream() (*Stream, error) {
	var s C.CUstream
	if err := check("cuStreamCreate", C.h5cu_stream_create(c.c, &s, 1)); err != nil {
		return nil, err
	}
	return &Stream{ctx: c, s: s}, nil
}

// Close destroys the stream once its work is done.
func (s *Stream) Close() error {
	return check("cuStreamDestroy", C.h5cu_stream_destroy(s.ctx.c, s.s))
}

// Synchronize waits for the stream's work.
func (s *Stream) Synchronize() error {
	return check("cuStreamSynchronize", C.h5cu_stream_synchronize(s.ctx.c, s.s))
}

// CopyHtoD enqueues a copy of src to dst. From page-locked memory the copy
// is asynchronous, and src must not change until the stream reaches it;
// from Go memory the driver stages src before the call returns.
func (s *Stream) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoDAsync", C.h5cu_memcpy_htod_async(s.ctx.c, C.CUdeviceptr(dst), unsafe.Pointer(unsafe.SliceData(src)), C.size_t(len(src)), s.s))
}

// Upload copies src to dst on the stream and waits until the copy is
// done, so that work on any stream of the context may read dst after it.
// Tables a module's kernels read go up this way: a synchronous copy on the
// legacy stream (cuMemcpyHtoD) is not ordered before work on the
// non-blocking streams of NewStream.
func (s *Stream) Upload(dst DevicePtr, src []byte) error {
	if err := s.CopyHtoD(dst, src); err != nil {
		return err
	}
	return s.Synchronize()
}

// Download copies len(dst) bytes at src into dst on the stream and waits
// until the copy is done.
func (s *Stream) Download(dst []byte, src DevicePtr) error {
	if err := s.CopyDtoH(dst, src); err != nil {
		return err
	}
	return s.Synchronize()
}

// CopyDtoH enqueues a copy of len(dst) bytes at src into dst. Into
// page-locked memory the copy is asynchronous, and dst holds the bytes once
// the stream reaches it; into Go memory the call returns when the copy is
// done.
func (s *Stream) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoHAsync", C.h5cu_memcpy_dtoh_async(s.ctx.c, unsafe.Pointer(unsafe.SliceData(dst)), C.CUdeviceptr(src), C.size_t(len(dst)), s.s))
}

// CopyDtoD enqueues a copy of n bytes within device memory.
func (s *Stream) CopyDtoD(dst, src DevicePtr, n int) error {
	return check("cuMemcpyDtoDAsync", C.h5cu_memcpy_dtod_async(s.ctx.c, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), s.s))
}

// Memset enqueues setting n bytes at dst to v.
func (s *Stream) Memset(dst DevicePtr, v byte, n int) error {
	return check("cuMemsetD8Async", C.h5cu_memset_d8_async(s.ctx.c, C.CUdeviceptr(dst), C.uchar(v), C.size_t(n), s.s))
}

// Launch enqueues kernel f on a grid of blocks. Each of args is one kernel
// parameter, held in 8 bytes: a device address, or an integer of up to 8
// bytes (the kernel reads its parameter's size from the low bytes). At
// most 16 parameters. Keep args in memory reused across launches: it is
// passed to C and so escapes.
func (s *Stream) Launch(f *Function, grid, block Dim3, sharedMem int, args []uint64) error {
	if len(args) > 16 {
		return fmt.Errorf("cuda: launch of %s: %d parameters, at most 16", f.Name, len(args))
	}
	var a *C.ulonglong
	if len(args) > 0 {
		a = (*C.ulonglong)(unsafe.Pointer(&args[0]))
	}
	err := check("cuLaunchKernel", C.h5cu_launch(s.ctx.c, f.f,
		C.uint(grid.X), C.uint(max(grid.Y, 1)), C.uint(max(grid.Z, 1)),
		C.uint(block.X), C.uint(max(block.Y, 1)), C.uint(max(block.Z, 1)),
		C.uint(sharedMem), s.s, a, C.int(len(args))))
	if err != nil {
		return fmt.Errorf("launch of %s: %w", f.Name, err)
	}
	return nil
}

// Event marks a point in a stream, for waiting and timing.
type Event struct {
	ctx *Context
	e   C.CUevent
}

// NewEvent creates an event that records timing.
func (c *Context) NewEvent() (*Event, error) {
	return c.newEvent(0)
}

// NewWaitEvent creates an event to wait on, without timing, whose
// Synchronize puts the waiting thread to sleep until the device reaches
// it (CU_EVENT_BLOCKING_SYNC) instead of spinning.
func (c *Context) NewWaitEvent() (*Event, error) {
	return c.newEvent(eventBlockingSync | eventDisableTiming)
}

func (c *Context) newEvent(flags C.uint) (*Event, error) {
	var e C.CUevent
	if err := check("cuEventCreate", C.h5cu_event_create(c.c, &e, flags)); err != nil {
		return nil, err
	}
	return &Event{ctx: c, e: e}, nil
}

// Close destroys the event.
func (e *Event) Close() error {
	return check("cuEventDestroy", C.h5cu_event_destroy(e.ctx.c, e.e))
}

// Record enqueues the event on s.
func (e *Event) Record(s *Stream) error {
	return check("cuEventRecord", C.h5cu_event_record(e.ctx.c, e.e, s.s))
}

// Synchronize waits until the device has reached the event.
func (e *Event) Synchronize() error {
	return check("cuEventSynchronize", C.h5cu_event_synchronize(e.ctx.c, e.e))
}

// Elapsed returns the device time from start to end, both reached and
// both of one context, which it binds to the calling thread first.
func Elapsed(start, end *Event) (time.Duration, error) {
	var ms C.float
	if err := check("cuEventElapsedTime", C.h5cu_event_elapsed(start.ctx.c, &ms, start.e, end.e)); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
