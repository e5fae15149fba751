//go:build !cgo

package gpu

import (
	"errors"
	"fmt"
)

// ErrDeviceLost is wrapped by the errors of a device backend whose device
// failed with a sticky error; without cgo there is none.
var ErrDeviceLost = errors.New("gpu: device lost")

// Lost returns nil without cgo: no GPU is used, so none is lost.
func Lost() error { return nil }

// LostChan returns a channel that is never closed without cgo.
func LostChan() <-chan struct{} { return nil }

// Preload holds nothing without cgo: no device can be opened. For "cuda"
// it says so.
func Preload(name string, opts Options) (release func(), err error) {
	if name == "cuda" {
		_, err := newCUDA(opts)
		return nil, fmt.Errorf("gpu: cuda backend: %w", err)
	}
	return func() {}, nil
}

// cudaBackend stands in for the CUDA backend in a build without cgo.
type cudaBackend struct {
	Backend
	device string
}

// newCUDA reports that the binary cannot reach the CUDA driver.
func newCUDA(Options) (*cudaBackend, error) {
	return nil, absentError{errors.New("built without cgo, so the CUDA driver cannot be loaded")}
}
