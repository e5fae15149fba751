//go:build !cgo

package gpu

import "errors"

// cudaBackend stands in for the CUDA backend in a build without cgo.
type cudaBackend struct {
	Backend
	device string
}

// newCUDA reports that the binary cannot reach the CUDA driver.
func newCUDA(Options) (*cudaBackend, error) {
	return nil, errors.New("built without cgo, so the CUDA driver cannot be loaded")
}
