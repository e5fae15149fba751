package gpu_test

import (
	"testing"

	"h5ingest/gpu"
	"h5ingest/gpu/gputest"
)

// TestBackendConforms runs the exported suite on the CPU backend with one
// worker, against the reference's default split over every core.
func TestBackendConforms(t *testing.T) {
	gputest.Backend(t, func(o gpu.Options) (gpu.Backend, error) {
		o.Workers = 1
		return gpu.New("cpu", o)
	})
}
