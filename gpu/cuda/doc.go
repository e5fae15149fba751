// Package cuda is a thin binding of the CUDA driver API, loaded at run time:
// Load opens libcuda.so.1 with dlopen and resolves the entry points (the _v2
// ones where the driver has them), so a binary that imports the package
// builds without the CUDA toolkit and runs, without a GPU, on any machine
// with libc. No CUDA header is used; the package declares the few types it
// needs.
//
// It covers what the gpu package's cuda backend needs: devices and their
// attributes, the device's primary context (one per device and process,
// shared by every user, with blocking synchronisation), streams and events
// (events to wait on put the waiting thread to sleep), device memory, and
// copies on streams only (the legacy stream's synchronous copies are not
// ordered before work on other streams), page-locked
// host memory (allocated, or registered when it comes from outside the Go
// heap), modules loaded from PTX, and kernel launches. Errors carry the
// driver's name and description of the result code, as *Error.
//
// Every call binds the context to the calling thread first, so methods may
// be called from any goroutine. A Context and what it created are safe for
// concurrent use as the driver is: distinct streams may be driven from
// distinct goroutines at once.
//
// The package needs cgo; built without it, it holds only this
// documentation, and package gpu reports the cuda backend as unavailable.
package cuda
