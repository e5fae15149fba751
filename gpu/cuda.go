//go:build cgo

package gpu

import (
	"errors"
	"fmt"
	"unsafe"

	"h5ingest/gpu/cuda"
	"h5ingest/gpu/kernels"
)

// cudaBackend is the device backend on a CUDA GPU. It also hands out
// page-locked host memory (HostAllocator).
type cudaBackend struct {
	*devBackend
	ctx    *cuda.Context
	device string // the GPU's name, for the log line of auto
}

// newCUDA opens the CUDA driver, retains the primary context of
// opts.Device, loads the kernels and makes opts.streams() lanes.
func newCUDA(opts Options) (*cudaBackend, error) {
	if err := cuda.Load(); err != nil {
		return nil, err
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errors.New("no CUDA device")
	}
	if opts.Device >= n {
		return nil, fmt.Errorf("no CUDA device %d (the machine has %d)", opts.Device, n)
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
	b, err := setupCUDA(ctx, opts)
	if err != nil {
		ctx.Close()
		return nil, err
	}
	b.device = name
	return b, nil
}

// setupCUDA loads the kernels in ctx, makes the lanes and uploads the
// module's tables on the first lane's stream, waiting for the upload
// before any lane runs a kernel.
func setupCUDA(ctx *cuda.Context, opts Options) (b *cudaBackend, err error) {
	mod, err := ctx.LoadModule(kernels.PTX)
	if err != nil {
		return nil, err
	}
	var engines []engine
	defer func() {
		if err != nil {
			for _, e := range engines {
				e.close()
			}
			mod.Unload()
		}
	}()
	fns := make(map[string]*cuda.Function)
	for _, name := range kernels.Kernels {
		if fns[name], err = mod.Function(name); err != nil {
			return nil, err
		}
	}
	newEngine := func() (engine, error) {
		s, err := ctx.NewStream()
		if err != nil {
			return nil, err
		}
		done, err := ctx.NewWaitEvent()
		if err != nil {
			s.Close()
			return nil, err
		}
		return &cudaEngine{ctx: ctx, s: s, done: done, fns: fns}, nil
	}
	for range opts.streams() {
		e, err := newEngine()
		if err != nil {
			return nil, err
		}
		engines = append(engines, e)
	}
	s := engines[0].(*cudaEngine).s
	for name, t := range kernels.TableBytes() {
		p, n, err := mod.Global(name)
		if err != nil {
			return nil, err
		}
		if n != len(t) {
			return nil, fmt.Errorf("module global %s has %d bytes, want %d", name, n, len(t))
		}
		if err := s.Upload(p, t); err != nil {
			return nil, fmt.Errorf("upload of %s: %w", name, err)
		}
	}
	// The module goes before the context is released: other backends may
	// hold the device's primary context on.
	release := func() error { return errors.Join(mod.Unload(), ctx.Close()) }
	b = &cudaBackend{ctx: ctx}
	b.devBackend = newDevBackend("cuda", opts.Orientation, lfsrTables, engines, newEngine, release)
	return b, nil
}

// AllocHost returns n bytes of page-locked host memory, from which the
// device copies payloads and into which it copies images at full speed.
// Free it with FreeHost before Close.
func (b *cudaBackend) AllocHost(n int) ([]byte, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return nil, ErrClosed
	}
	buf, err := b.ctx.AllocHost(n)
	if err != nil {
		return nil, fmt.Errorf("gpu: cuda backend: %w", err)
	}
	return buf, nil
}

// FreeHost frees memory from AllocHost. After Close it frees nothing and
// says so: the memory goes with the device's primary context when its last
// user releases it.
func (b *cudaBackend) FreeHost(buf []byte) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	if err := b.ctx.FreeHost(buf); err != nil {
		return fmt.Errorf("gpu: cuda backend: %w", err)
	}
	return nil
}

var (
	_ HostAllocator = (*cudaBackend)(nil)
	_ Reserver      = (*cudaBackend)(nil)
)

// RegisterHost page-locks b, which must lie outside the Go heap.
func (b *cudaBackend) RegisterHost(buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	if err := b.ctx.RegisterHost(unsafe.Pointer(unsafe.SliceData(buf)), len(buf)); err != nil {
		return fmt.Errorf("gpu: cuda backend: %d bytes: %w", len(buf), err)
	}
	return nil
}

// UnregisterHost undoes RegisterHost.
func (b *cudaBackend) UnregisterHost(buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	if err := b.ctx.UnregisterHost(unsafe.Pointer(unsafe.SliceData(buf))); err != nil {
		return fmt.Errorf("gpu: cuda backend: %w", err)
	}
	return nil
}

// cudaEngine is an engine on one CUDA stream, with its own device buffers
// and page-locked staging buffers, grown to fit and never shrunk.
type cudaEngine struct {
	ctx    *cuda.Context
	s      *cuda.Stream
	done   *cuda.Event // recorded after a round's work, to wait on asleep
	fns    map[string]*cuda.Function
	mem    [nRegions]cuda.DevicePtr
	size   [nRegions]int
	descs  []byte // page-locked
	pieces []byte // page-locked
	args   [2]uint64
}

func (e *cudaEngine) reserve(sizes *[nRegions]int) error {
	for r, n := range sizes {
		if n <= e.size[r] {
			continue
		}
		n += n / 4 // room to grow
		if err := e.ctx.Free(e.mem[r]); err != nil {
			return err
		}
		e.mem[r], e.size[r] = 0, 0
		p, err := e.ctx.Alloc(n)
		if err != nil {
			return err
		}
		e.mem[r], e.size[r] = p, n
	}
	var err error
	if e.descs, err = e.growHost(e.descs, sizes[regDescs]); err != nil {
		return err
	}
	e.pieces, err = e.growHost(e.pieces, sizes[regPieces])
	return err
}

func (e *cudaEngine) growHost(b []byte, n int) ([]byte, error) {
	if n <= len(b) {
		return b, nil
	}
	if err := e.ctx.FreeHost(b); err != nil {
		return nil, err
	}
	return e.ctx.AllocHost(n + n/4)
}

func (e *cudaEngine) addr(r region) uint64 { return uint64(e.mem[r]) }
func (e *cudaEngine) hostDescs() []byte    { return e.descs }
func (e *cudaEngine) hostPieces() []byte   { return e.pieces }

func (e *cudaEngine) copyIn(r region, off int, src []byte) error {
	return e.s.CopyHtoD(e.mem[r]+cuda.DevicePtr(off), src)
}

func (e *cudaEngine) copyOut(dst []byte, r region, off int) error {
	return e.s.CopyDtoH(dst, e.mem[r]+cuda.DevicePtr(off))
}

func (e *cudaEngine) launch(kernel string, gridX, n int) error {
	e.args = [2]uint64{uint64(e.mem[regDescs]), uint64(n)}
	return e.s.Launch(e.fns[kernel], cuda.Dim3{X: gridX, Y: n}, cuda.Dim3{X: kernels.BlockSize}, 0, e.args[:])
}

// wait records an event after the work given so far and sleeps until the
// device reaches it: a blocking-sync event, so that the waiting thread
// leaves its core to the compression workers.
func (e *cudaEngine) wait() error {
	if err := e.done.Record(e.s); err != nil {
		return err
	}
	return e.done.Synchronize()
}

func (e *cudaEngine) close() error {
	errs := []error{e.s.Close(), e.done.Close(), e.ctx.FreeHost(e.descs), e.ctx.FreeHost(e.pieces)}
	for r := range e.mem {
		errs = append(errs, e.ctx.Free(e.mem[r]))
	}
	return errors.Join(errs...)
}
