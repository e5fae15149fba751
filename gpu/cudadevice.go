//go:build cgo

package gpu

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"
	"unsafe"

	"h5ingest/frame"
	"h5ingest/gpu/cuda"
	"h5ingest/gpu/kernels"
)

// cudaDevice is a CUDA device as the process uses it: its primary context,
// retained once, and the kernels' module, JIT-compiled and loaded once with
// its tables uploaded, which every cuda backend of the process shares
// (each with lanes of its own). It is counted: the last backend to close
// unloads it, unless Preload keeps it for the process's life.
//
// A sticky error (cuda.ErrSticky) in any backend loses the GPU for the
// process (Lost): every backend on it then fails at once, and no backend
// opens again until the process restarts, as the driver documents.
type cudaDevice struct {
	ordinal int
	name    string
	ctx     *cuda.Context
	mod     *cuda.Module
	fns     map[string]*cuda.Function
	loaded  time.Duration // how long the module took to load: the JIT compilation
	arch    string        // the PTX target loaded, e.g. "sm_90"

	users int // backends open on it; guarded by devices.mu

	pinMu sync.Mutex
	pins  map[span]*pin // host memory page-locked through RegisterHost
}

// span is a range of host memory.
type span struct {
	p uintptr
	n int
}

// pin is host memory registered with the device: how many RegisterHost
// calls hold it, and whether this package registered it (or found it
// page-locked already, and so leaves it so).
type pin struct {
	refs  int
	owned bool
}

// devices holds the process's open CUDA devices, by ordinal.
var devices struct {
	mu    sync.Mutex
	m     map[int]*cudaDevice
	keep  map[int]int   // Preload's holds, by ordinal
	lost  error         // ErrDeviceLost and the sticky error that lost the GPU for the process; nil while none did
	lostC chan struct{} // closed when lost is set; made by the first LostChan or loss
	log   *slog.Logger  // Preload's: where device events are logged
}

// ErrDeviceLost is wrapped by the errors of a device backend once a CUDA
// call of the process failed with a sticky error (an illegal address, a
// launch failure: cuda.ErrSticky): the batch in flight and every later
// call of every cuda backend fail with it, and the frames are the
// caller's to record; "cuda" opens no backend again and "auto" opens the
// CPU's, until the process restarts (Lost).
var ErrDeviceLost = errors.New("gpu: device lost")

// Lost returns the error that lost the GPU for the process, wrapping
// ErrDeviceLost and the driver's sticky error, or nil while no CUDA call
// of the process has failed with one. Once lost, the GPU stays lost
// until the process restarts: the driver documents that every later call
// fails the same way, in any context.
func Lost() error {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	return devices.lost
}

// LostChan returns a channel that is closed when the GPU is lost for the
// process (see Lost), for a service to act on the loss.
func LostChan() <-chan struct{} {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	return lostChanLocked()
}

// lostChanLocked returns devices.lostC, made if need be. Called with
// devices.mu held.
func lostChanLocked() chan struct{} {
	if devices.lostC == nil {
		devices.lostC = make(chan struct{})
	}
	return devices.lostC
}

// Preload opens the CUDA device the backend name would use, loads and
// JIT-compiles the kernels and checks them on a frame against the CPU
// backend, and keeps the device open until release is called, so that
// every backend opened meanwhile shares it and starts at once: a command
// calls it when it starts, not when the detector connects. It logs one
// line with the device and the time the module took to load. For "cpu",
// and for "auto" where no device opens (logged), it holds nothing and
// returns no error; for "cuda" a device that does not open is an error.
// opts.Logger also receives the device's later events (a lost device, a
// new context).
func Preload(name string, opts Options) (release func(), err error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	nothing := func() {}
	switch name {
	case "cuda", "auto":
	default:
		return nothing, nil
	}
	devices.mu.Lock()
	devices.log = log
	devices.mu.Unlock()
	d, err := acquireDevice(opts)
	if err != nil {
		if name == "auto" {
			log.Log(context.Background(), fallbackLevel(err), "decode backend", "backend", "cpu", "reason", "cuda unavailable: "+err.Error())
			return nothing, nil
		}
		return nil, fmt.Errorf("gpu: cuda backend: %w", err)
	}
	devices.mu.Lock()
	d.users--
	if devices.keep == nil {
		devices.keep = map[int]int{}
	}
	devices.keep[opts.Device]++
	devices.mu.Unlock()
	log.Info("decode backend ready", "backend", "cuda", "device", d.name, "ptx", d.arch, "module_load", d.loaded.Round(time.Millisecond).String(),
		"compute_cache", cmp.Or(os.Getenv("CUDA_CACHE_PATH"), "the driver's default (~/.nv/ComputeCache)"))
	var once sync.Once
	return func() {
		once.Do(func() {
			devices.mu.Lock()
			defer devices.mu.Unlock()
			devices.keep[opts.Device]--
			if d := devices.m[opts.Device]; d != nil {
				d.closeIfIdle()
			}
		})
	}, nil
}

// setComputeCache points the driver's JIT cache at dir (CUDA_CACHE_PATH),
// made if missing; it takes effect at the driver's initialisation, the
// first open of the process.
func setComputeCache(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("compute cache: %w", err)
	}
	return os.Setenv("CUDA_CACHE_PATH", dir)
}

// acquireDevice returns the process's device opts.Device, opened (or made
// anew after a loss) and counted as one more user.
func acquireDevice(opts Options) (*cudaDevice, error) {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	if err := setComputeCache(opts.ComputeCache); err != nil {
		return nil, err
	}
	if err := cuda.Load(); err != nil {
		return nil, absentError{err}
	}
	if devices.lost != nil {
		return nil, fmt.Errorf("%w: restart h5ingest to use the GPU again", devices.lost)
	}
	if d := devices.m[opts.Device]; d != nil {
		d.users++
		return d, nil
	}
	d, err := openDevice(opts)
	if errors.Is(err, cuda.ErrSticky) { // the check of the kernels faulted
		loseLocked(fmt.Errorf("CUDA device %d: %w", opts.Device, err), opts.Logger)
		return nil, fmt.Errorf("%w: restart h5ingest to use the GPU again", devices.lost)
	}
	if err != nil {
		return nil, err
	}
	if devices.m == nil {
		devices.m = map[int]*cudaDevice{}
	}
	devices.m[opts.Device] = d
	d.users++
	return d, nil
}

// openDevice retains the primary context of device opts.Device, loads the
// kernels, uploads their tables and checks them on one frame against the
// CPU backend.
func openDevice(opts Options) (_ *cudaDevice, err error) {
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, absentError{errors.New("no CUDA device")}
	}
	if opts.Device >= n {
		return nil, absentError{fmt.Errorf("no CUDA device %d (the machine has %d)", opts.Device, n)}
	}
	dev, err := cuda.GetDevice(opts.Device)
	if err != nil {
		return nil, err
	}
	name, err := dev.Name()
	if err != nil {
		return nil, err
	}
	ctx, err := cuda.PrimaryContext(dev)
	if err != nil {
		return nil, err
	}
	d := &cudaDevice{ordinal: opts.Device, name: name, ctx: ctx, fns: map[string]*cuda.Function{}, pins: map[span]*pin{}}
	defer func() {
		if err != nil {
			d.teardown()
		}
	}()
	if d.mod, d.arch, d.loaded, err = loadKernels(ctx, dev); err != nil {
		return nil, err
	}
	for _, k := range kernels.Kernels {
		if d.fns[k], err = d.mod.Function(k); err != nil {
			return nil, err
		}
	}
	if err := d.uploadTables(); err != nil {
		return nil, err
	}
	if err := d.check(); err != nil {
		return nil, fmt.Errorf("first frame on the device: %w", err)
	}
	return d, nil
}

// loadKernels loads the kernels' PTX for the newest target the device's
// compute capability allows (kernels.Targets), falling back to an older
// target where the driver refuses it, and returns the module, the target
// and how long the load (the JIT compilation) took.
func loadKernels(ctx *cuda.Context, dev cuda.Device) (*cuda.Module, string, time.Duration, error) {
	major, err1 := dev.Attribute(cuda.ComputeCapabilityMajor)
	minor, err2 := dev.Attribute(cuda.ComputeCapabilityMinor)
	if err := errors.Join(err1, err2); err != nil {
		return nil, "", 0, fmt.Errorf("compute capability: %w", err)
	}
	targets := kernels.Targets(major, minor)
	if len(targets) == 0 {
		return nil, "", 0, fmt.Errorf("compute capability %d.%d: the kernels need 7.0 (Volta) or newer", major, minor)
	}
	var errs []error
	for _, t := range targets {
		start := time.Now()
		mod, err := ctx.LoadModule(t.PTX)
		if err == nil {
			return mod, t.Arch, time.Since(start), nil
		}
		if errors.Is(err, cuda.ErrSticky) {
			return nil, "", 0, err
		}
		errs = append(errs, fmt.Errorf("%s: %w", t.Arch, err))
	}
	return nil, "", 0, errors.Join(errs...)
}

// uploadTables copies the LFSR and CRC tables into the module's globals on
// a stream of their own and waits for the copies, so that any stream's
// kernels may read them after.
func (d *cudaDevice) uploadTables() error {
	s, err := d.ctx.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()
	for name, t := range kernels.TableBytes() {
		p, n, err := d.mod.Global(name)
		if err != nil {
			return err
		}
		if n != len(t) {
			return fmt.Errorf("module global %s has %d bytes, want %d", name, n, len(t))
		}
		if err := s.Upload(p, t); err != nil {
			return fmt.Errorf("upload of %s: %w", name, err)
		}
	}
	return nil
}

// check decodes one small frame on the device and compares its image and
// CRCs with the CPU backend's: a module that loads but computes wrong, or
// a context that fails at its first kernel, is found before a scan.
func (d *cudaDevice) check() error {
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 1, ChipWidth: 16, ChipHeight: 4},
		Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	payload := make([]byte, f.PayloadSize())
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	job := func() []Job {
		return []Job{{Header: frame.Header{PayloadSize: uint32(len(payload)), PayloadCRC: frame.Checksum(payload), Format: f},
			Payload: payload, Image: make([]byte, f.ImageSize())}}
	}
	want, got := job(), job()
	cpu := newCPU(Options{Workers: 1})
	defer cpu.Close()
	if err := cpu.Decode(want); err != nil {
		return err
	}
	b, err := d.newBackend(Options{Streams: 1}, func() error { return nil })
	if err != nil {
		return err
	}
	err = b.devBackend.Decode(got)
	if cerr := b.devBackend.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return err
	case got[0].Err != nil:
		return got[0].Err
	case !bytes.Equal(got[0].Image, want[0].Image) || got[0].RawCRC != want[0].RawCRC || got[0].DataCRC != want[0].DataCRC:
		return errors.New("the decoded frame differs from the CPU backend's")
	}
	return nil
}

// release counts a backend off the device. Called by the backend's Close.
func (d *cudaDevice) release() error {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	d.users--
	return d.closeIfIdle()
}

// closeIfIdle unloads the device when no backend and no Preload holds it
// (a lost one once no backend holds it). Called with devices.mu held.
func (d *cudaDevice) closeIfIdle() error {
	if d.users > 0 || devices.keep[d.ordinal] > 0 && devices.lost == nil {
		return nil
	}
	if devices.m[d.ordinal] == d {
		delete(devices.m, d.ordinal)
	}
	if devices.lost != nil {
		d.teardown()
		return nil // the driver refuses to free what a lost process holds: it goes with the process
	}
	return d.teardown()
}

// teardown unloads the module and releases the context, once.
func (d *cudaDevice) teardown() error {
	var errs []error
	if d.mod != nil {
		errs = append(errs, d.mod.Unload())
		d.mod = nil
	}
	if d.ctx != nil {
		errs = append(errs, d.ctx.Close())
	}
	return errors.Join(errs...)
}

// markLost records err, a sticky error of the device's, as what lost the
// GPU for the process, unless something did before, and returns the loss.
func (d *cudaDevice) markLost(err error) error {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	return loseLocked(fmt.Errorf("CUDA device %d (%s): %w", d.ordinal, d.name, err), nil)
}

// loseLocked records err, a sticky error, as what lost the GPU for the
// process, once, logging it at warning level to Preload's logger, else
// log, else the default; it returns the loss. Called with devices.mu held.
func loseLocked(err error, log *slog.Logger) error {
	if devices.lost != nil {
		return devices.lost
	}
	devices.lost = fmt.Errorf("%w: %w", ErrDeviceLost, err)
	close(lostChanLocked())
	log = cmp.Or(devices.log, log, slog.Default())
	log.Warn("CUDA device lost: a sticky error; the GPU decodes nothing more until the process restarts (the frames in flight on it are the caller's to decode on the CPU, or to record missing)",
		"error", err.Error())
	return devices.lost
}

// register page-locks b for the device, once however many backends ask:
// memory registered already (by another backend, or by another user of
// the process, which the driver says with
// CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) is counted, not registered
// again, and unregistered only by this package and only by its last user.
func (d *cudaDevice) register(b []byte) error {
	s := span{uintptr(unsafe.Pointer(unsafe.SliceData(b))), len(b)}
	d.pinMu.Lock()
	defer d.pinMu.Unlock()
	if p, ok := d.pins[s]; ok {
		p.refs++
		return nil
	}
	err := d.ctx.RegisterHost(unsafe.Pointer(unsafe.SliceData(b)), len(b))
	switch {
	case cuda.HasCode(err, cuda.HostMemoryAlreadyRegistered):
		d.pins[s] = &pin{refs: 1}
	case err != nil:
		return err
	default:
		d.pins[s] = &pin{refs: 1, owned: true}
	}
	return nil
}

// unregister undoes register.
func (d *cudaDevice) unregister(b []byte) error {
	s := span{uintptr(unsafe.Pointer(unsafe.SliceData(b))), len(b)}
	d.pinMu.Lock()
	defer d.pinMu.Unlock()
	p, ok := d.pins[s]
	if !ok {
		return d.ctx.UnregisterHost(unsafe.Pointer(unsafe.SliceData(b)))
	}
	if p.refs--; p.refs > 0 {
		return nil
	}
	delete(d.pins, s)
	if !p.owned {
		return nil
	}
	return d.ctx.UnregisterHost(unsafe.Pointer(unsafe.SliceData(b)))
}
