//go:build cgo

package gpu

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"h5ingest/gpu/internal/hostgrid"
	"h5ingest/gpu/kernels"
)

// hostCUDA names, in the conformance suite, the device backend run with the
// CUDA kernels compiled for the host (package hostgrid): every line of the
// cuda backend but the driver calls, on any machine. hostCUDAGlobalLUT is
// the same with the kernels reading the LFSR tables' copy in global memory.
const (
	hostCUDA          = "cuda-on-host"
	hostCUDAGlobalLUT = "cuda-on-host-global-lut"
)

// hostBackends lists the backends that exist only in tests.
var hostBackends = []string{hostCUDA, hostCUDAGlobalLUT}

var uploadTables = sync.OnceValue(hostgrid.UploadTables)

// newHostCUDA returns the device backend on host engines, reading the
// LFSR tables where the backend name says.
func newHostCUDA(name string, opts Options) (Backend, error) {
	d, _, err := newHostDev(name, opts)
	return d, err
}

// newHostDev returns the device backend on host engines, and the count of
// the buffers its engines have allocated: device regions and staging
// buffers, as the cuda engine allocates them with cuMemAlloc and
// cuMemHostAlloc.
func newHostDev(name string, opts Options) (*devBackend, *atomic.Int64, error) {
	if err := opts.validate(); err != nil {
		return nil, nil, err
	}
	if err := uploadTables(); err != nil {
		return nil, nil, err
	}
	allocs := new(atomic.Int64)
	var engines []engine
	for range opts.streams() {
		engines = append(engines, &hostEngine{allocs: allocs})
	}
	lut := uint32(lfsrTables)
	if name == hostCUDAGlobalLUT {
		lut = kernels.LUTGlobal
	}
	newEngine := func() (engine, error) { return &hostEngine{allocs: allocs}, nil }
	return newDevBackend(name, opts.Orientation, lut, engines, newEngine, nil), allocs, nil
}

// hostEngine is an engine whose device memory is C memory and whose
// kernels run on the host, at once.
type hostEngine struct {
	mem    [nRegions]*hostgrid.Mem
	descs  []byte
	pieces []byte
	allocs *atomic.Int64 // buffers allocated
}

func (e *hostEngine) reserve(sizes *[nRegions]int) error {
	for r, n := range sizes {
		if e.mem[r] != nil && n <= len(e.mem[r].Bytes()) {
			continue
		}
		if e.mem[r] != nil {
			e.mem[r].Free()
		}
		e.mem[r] = hostgrid.Alloc(n)
		e.allocs.Add(1)
	}
	for _, b := range []*[]byte{&e.descs, &e.pieces} {
		n := sizes[regDescs]
		if b == &e.pieces {
			n = sizes[regPieces]
		}
		if n > len(*b) {
			*b = make([]byte, n)
			e.allocs.Add(1)
		}
	}
	return nil
}

func (e *hostEngine) addr(r region) uint64 { return e.mem[r].Addr() }
func (e *hostEngine) hostDescs() []byte    { return e.descs }
func (e *hostEngine) hostPieces() []byte   { return e.pieces }

func (e *hostEngine) copyIn(r region, off int, src []byte) error {
	if copy(e.mem[r].Bytes()[off:], src) != len(src) {
		return fmt.Errorf("copy of %d bytes to region %d at %d overflows", len(src), r, off)
	}
	return nil
}

func (e *hostEngine) copyOut(dst []byte, r region, off int) error {
	if copy(dst, e.mem[r].Bytes()[off:]) != len(dst) {
		return fmt.Errorf("copy of %d bytes from region %d at %d overflows", len(dst), r, off)
	}
	return nil
}

func (e *hostEngine) launch(kernel string, gridX, n int) error {
	return hostgrid.Launch(kernel, gridX, n, kernels.BlockSize, e.mem[regDescs].Addr(), n)
}

func (e *hostEngine) wait() error { return nil }

func (e *hostEngine) close() error {
	for _, m := range e.mem {
		if m != nil {
			m.Free()
		}
	}
	return nil
}

// TestHostCUDAPiMega runs a Pi-mega frame of every format, with mixed chip
// orientations, through the kernels on the host, against the CPU backend.
func TestHostCUDAPiMega(t *testing.T) {
	if testing.Short() {
		t.Skip("a Pi-mega frame of every format takes seconds on the host")
	}
	testPiMegaParity(t, newBackend(t, hostCUDA, Options{Orientation: piMegaOrientation, Streams: 2}))
}

// TestKernelLayout checks that the descriptor Go writes is the struct the
// kernels' C compiler lays out, and that the constants agree.
func TestKernelLayout(t *testing.T) {
	want := []int{kernels.FrameSize, 0, 8, 16, 24, 32, 40, 44, 48, 52, 56, 60, 64, 68, 72, 76,
		80, 82, 84, 86, 88, 89, 90, 91, 92, 96, 104, 108, kernels.CRCSubSize, kernels.CRCRun}
	got := hostgrid.Layout()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("struct h5_frame layout and constants %v, Go writes %v", got, want)
	}
}
