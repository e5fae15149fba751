//go:build cgo

package gpu

import (
	"errors"
	"fmt"

	"h5ingest/frame"
	"h5ingest/gpu/cuda"
	"h5ingest/gpu/kernels"
)

// cudaBackend is the device backend on a CUDA GPU: lanes of its own on the
// process's shared device (cudaDevice). It also hands out page-locked host
// memory (HostAllocator).
type cudaBackend struct {
	*devBackend
	dev    *cudaDevice
	ctx    *cuda.Context
	device string // the GPU's name, for the log line of auto
}

// newCUDA opens the process's device opts.Device (the first open retains
// its primary context and loads the kernels; later ones share them) and
// makes opts.streams() lanes on it.
func newCUDA(opts Options) (*cudaBackend, error) {
	d, err := acquireDevice(opts)
	if err != nil {
		return nil, err
	}
	b, err := d.newBackend(opts, d.release)
	if err != nil {
		d.release()
		return nil, err
	}
	return b, nil
}

// newBackend makes a backend of opts.streams() lanes on the device, each a
// stream with its own buffers, running the device's kernels; release is
// called when it closes.
func (d *cudaDevice) newBackend(opts Options, release func() error) (b *cudaBackend, err error) {
	ctx := d.ctx
	var engines []engine
	defer func() {
		if err != nil {
			for _, e := range engines {
				e.close()
			}
		}
	}()
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
		return &cudaEngine{ctx: ctx, s: s, done: done, fns: d.fns}, nil
	}
	for range opts.streams() {
		e, err := newEngine()
		if err != nil {
			return nil, err
		}
		engines = append(engines, e)
	}
	b = &cudaBackend{dev: d, ctx: ctx, device: d.name}
	b.devBackend = newDevBackend("cuda", opts.Orientation, lfsrTables, engines, newEngine, release)
	return b, nil
}

// Decode decodes and checksums the batch on the device. A sticky error
// loses the GPU for the process (Lost): this call and every later one of
// every cuda backend fail with ErrDeviceLost.
func (b *cudaBackend) Decode(jobs []Job) error {
	if err := Lost(); err != nil {
		return err
	}
	return b.lose(b.devBackend.Decode(jobs))
}

// Reserve implements Reserver; once the GPU is lost it fails at once.
func (b *cudaBackend) Reserve(f frame.Format, batch, calls int, shuffle bool) (func(), error) {
	if err := Lost(); err != nil {
		return nil, err
	}
	release, err := b.devBackend.Reserve(f, batch, calls, shuffle)
	return release, b.lose(err)
}

// lose returns err, or, where it holds a sticky error of the driver's,
// the loss of the GPU that it makes.
func (b *cudaBackend) lose(err error) error {
	if err == nil {
		return nil
	}
	var driver *cuda.Error
	if errors.As(err, &driver) && driver.Sticky() {
		return b.dev.markLost(driver)
	}
	return err
}

// Close frees the backend's lanes and gives up its share of the device.
// Once the GPU is lost the driver refuses to free what it holds, which goes
// with the context: no error.
func (b *cudaBackend) Close() error {
	err := b.devBackend.Close()
	if Lost() != nil {
		return nil
	}
	return err
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
		return nil, b.lose(fmt.Errorf("gpu: cuda backend: %w", err))
	}
	return buf, nil
}

// FreeHost frees memory from AllocHost. After Close it frees nothing and
// says so: the memory goes with the device's primary context when its last
// user releases it. Once the GPU is lost it frees nothing and says
// nothing: the memory goes with the process.
func (b *cudaBackend) FreeHost(buf []byte) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	if Lost() != nil {
		return nil // the driver refuses: it goes with the process
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

// RegisterHost page-locks b, which must lie outside the Go heap, for the
// device: once in the process, however many backends register it, and
// not at all where it is page-locked for CUDA already (cudaDevice.register).
func (b *cudaBackend) RegisterHost(buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	if err := b.dev.register(buf); err != nil {
		return b.lose(fmt.Errorf("gpu: cuda backend: %d bytes: %w", len(buf), err))
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
	if Lost() != nil {
		return nil // the driver refuses: they go with the process
	}
	if err := b.dev.unregister(buf); err != nil {
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
