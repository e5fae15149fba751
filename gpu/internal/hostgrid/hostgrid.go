// Package hostgrid runs the CUDA kernels of package kernels on the host,
// for tests on machines without a GPU. It compiles the same source,
// decode.cu, as C behind a shim (host.h) and runs a launch's grid as loops,
// one kernel call per thread, blocks and threads in order.
//
// That is exact for these kernels: their threads share no memory within a
// launch and never wait at a barrier, so the order in which they run does
// not change what they write (see decode.cu).
//
// Memory stands in for device memory: it is C memory, so its address can be
// written into a kernels.Frame descriptor as a kernel expects. Launches and
// uploads from several goroutines are safe: the grid variables are
// thread-local and the module globals are written only by Upload, which
// tests call before they launch.
package hostgrid

// #cgo CFLAGS: -O2 -fno-strict-aliasing -Wall -Wno-unknown-pragmas
// #include <stdlib.h>
// #include "grid.h"
import "C"

import (
	"fmt"
	"unsafe"

	"h5ingest/gpu/kernels"
)

// Mem is a block of C memory that plays the part of device memory.
type Mem struct {
	p unsafe.Pointer
	n int
}

// Alloc returns n bytes (at least one) aligned to kernels.Align, as
// cuMemAlloc would. Free it with Free.
func Alloc(n int) *Mem {
	size := (max(n, 1) + kernels.Align - 1) / kernels.Align * kernels.Align
	p := C.aligned_alloc(C.size_t(kernels.Align), C.size_t(size))
	if p == nil {
		panic(fmt.Sprintf("hostgrid: out of memory for %d bytes", n))
	}
	return &Mem{p: p, n: n}
}

// Addr returns the block's address, as a kernel reads it.
func (m *Mem) Addr() uint64 { return uint64(uintptr(m.p)) }

// Bytes returns the block as a slice, valid until Free.
func (m *Mem) Bytes() []byte { return unsafe.Slice((*byte)(m.p), m.n) }

// Free releases the block.
func (m *Mem) Free() {
	C.free(m.p)
	m.p, m.n = nil, 0
}

var kernelIDs = map[string]C.int{kernels.Decode: 0, kernels.CRCSub: 1, kernels.CRCFold: 2, kernels.Shuffle: 3}

var globalIDs = map[string]C.int{kernels.LFSR12Table: 0, kernels.LFSR6Table: 1, kernels.CRCTable: 2,
	kernels.LFSR12GlobalTable: 3, kernels.LFSR6GlobalTable: 4}

// Launch runs kernel name over a grid of gridX x gridY blocks of block
// threads, with the kernel parameters (frames, n): the address of n
// descriptors.
func Launch(name string, gridX, gridY, block int, frames uint64, n int) error {
	id, ok := kernelIDs[name]
	if !ok {
		return fmt.Errorf("hostgrid: no kernel %q", name)
	}
	if C.hostgrid_launch(id, C.uint(gridX), C.uint(gridY), C.uint(block), C.ulonglong(frames), C.uint(n)) != 0 {
		return fmt.Errorf("hostgrid: launch of %s failed", name)
	}
	return nil
}

// Upload sets the module global name to b, which must have its size.
func Upload(name string, b []byte) error {
	id, ok := globalIDs[name]
	if !ok {
		return fmt.Errorf("hostgrid: no global %q", name)
	}
	if C.hostgrid_upload(id, unsafe.Pointer(unsafe.SliceData(b)), C.size_t(len(b))) != 0 {
		return fmt.Errorf("hostgrid: global %s: %d bytes do not fit", name, len(b))
	}
	return nil
}

// UploadTables uploads every table of kernels.TableBytes, as the cuda
// backend does after loading the module.
func UploadTables() error {
	for name, b := range kernels.TableBytes() {
		if err := Upload(name, b); err != nil {
			return err
		}
	}
	return nil
}

// Layout returns what the C compiler made of struct h5_frame and the CRC
// constants: the struct's size, the offset of each field in declaration
// order, then H5_CRC_SUB and H5_CRC_RUN.
func Layout() []int {
	var out [C.HOSTGRID_LAYOUT_LEN]C.int
	C.hostgrid_layout(&out[0])
	l := make([]int, len(out))
	for i, v := range out {
		l[i] = int(v)
	}
	return l
}
