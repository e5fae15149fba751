//go:build !cgo

package gpu

import "errors"

// Without cgo the CUDA kernels cannot run on the host.
const hostCUDA = "cuda-on-host"

var hostBackends []string

func newHostCUDA(string, Options) (Backend, error) { return nil, errors.New("needs cgo") }
