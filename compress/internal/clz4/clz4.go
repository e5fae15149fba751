//go:build cgo

// Package clz4 calls the C LZ4 library (Debian liblz4-dev), the one the
// HDF5 bitshuffle and LZ4 filters link, so that tests can hold h5ingest's
// own LZ4 block compressor to its output and its decoder to its streams.
// It is for tests only: h5ingest itself never links it.
package clz4

// #cgo LDFLAGS: -llz4
// #include <lz4.h>
import "C"

import (
	"fmt"
	"unsafe"
)

// Available reports whether the C library is linked: false in a build
// without cgo, where Compress and Decompress return errors.
const Available = true

// Compress returns the LZ4 block LZ4_compress_fast makes of src with the
// given acceleration; acceleration 1 is LZ4_compress_default, as the C
// filters call it.
func Compress(src []byte, acceleration int) ([]byte, error) {
	bound := int(C.LZ4_compressBound(C.int(len(src))))
	if bound <= 0 {
		return nil, fmt.Errorf("clz4: %d bytes is too large for a block", len(src))
	}
	dst := make([]byte, bound)
	n := C.LZ4_compress_fast(ptr(src), (*C.char)(unsafe.Pointer(&dst[0])), C.int(len(src)), C.int(bound), C.int(acceleration))
	if n <= 0 {
		return nil, fmt.Errorf("clz4: LZ4_compress_fast of %d bytes failed", len(src))
	}
	return dst[:n], nil
}

// Decompress decodes the LZ4 block src, which must decode to exactly
// size bytes, with LZ4_decompress_safe.
func Decompress(src []byte, size int) ([]byte, error) {
	dst := make([]byte, size+1) // one spare byte: a block that decodes longer is caught
	n := C.LZ4_decompress_safe(ptr(src), (*C.char)(unsafe.Pointer(&dst[0])), C.int(len(src)), C.int(len(dst)))
	if n < 0 {
		return nil, fmt.Errorf("clz4: LZ4_decompress_safe: malformed block (%d)", int(n))
	}
	if int(n) != size {
		return nil, fmt.Errorf("clz4: block decodes to %d bytes, want %d", int(n), size)
	}
	return dst[:n], nil
}

// ptr returns a C pointer to b's first byte, or to a static byte for an
// empty b.
func ptr(b []byte) *C.char {
	if len(b) == 0 {
		return (*C.char)(unsafe.Pointer(&empty))
	}
	return (*C.char)(unsafe.Pointer(&b[0]))
}

var empty byte
