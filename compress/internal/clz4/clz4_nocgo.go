//go:build !cgo

package clz4

import "errors"

// Available reports whether the C library is linked: false in a build
// without cgo, where Compress and Decompress return errors.
const Available = false

var errNoCgo = errors.New("clz4: built without cgo, the C LZ4 library is not linked")

// Compress returns an error: the C library is not linked.
func Compress(src []byte, acceleration int) ([]byte, error) { return nil, errNoCgo }

// Decompress returns an error: the C library is not linked.
func Decompress(src []byte, size int) ([]byte, error) { return nil, errNoCgo }
