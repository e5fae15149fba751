// Package gpu decodes raw detector frames into images and checksums them:
// every payload encoding, counter depth and counter coding of format
// version 1 (see package frame), chip orientation, and the CRC-32C of the
// payload as received and of the decoded image.
//
// # Backends
//
// The work is done by a Backend, chosen by name with New:
//
//   - "cpu": pure Go, always available. It splits every frame into bands of
//     chip rows and runs them on a fixed pool of worker goroutines, so a
//     single frame uses every core.
//   - "auto": the best backend present. Until the CUDA backend exists this is
//     always "cpu"; with it, "auto" will pick CUDA when a device and driver
//     are there, and fall back to "cpu" otherwise.
//
// Every backend must give the same results, bit for bit, for every frame:
//
//   - Image[:Header.Format.ImageSize()] holds the decoded image, row-major,
//     height x width, little-endian uint16 pixels when the bit depth is at
//     most 16, else uint32; counters are decoded to counts (LFSR codes by
//     table), and each chip placed as the orientation says.
//   - RawCRC is the CRC-32C of Payload, DataCRC the CRC-32C of the image
//     bytes. A RawCRC that differs from Header.PayloadCRC is a result for
//     the caller to record, not an error.
//   - A frame the backend cannot decode (a format that does not validate, a
//     payload of the wrong size, an image buffer too small, an orientation
//     that does not fit the chip count) gets Job.Err; the other frames of
//     the batch are decoded all the same.
//   - The backend never allocates images: buffers belong to the caller, who
//     may allocate them in pinned memory for a device backend. A backend
//     keeps no reference to a Job, its payload or its image after Decode
//     returns.
//   - Decode blocks until the batch is done and is safe to call from several
//     goroutines at once, so several batches can be in flight (the CUDA
//     backend maps each in-flight call to a stream). In steady state it
//     allocates nothing per frame.
package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"strings"

	"h5ingest/ingest/frame"
)

// Job is one frame to decode: its header and payload, the caller's image
// buffer, and the results.
type Job struct {
	Header  frame.Header // parsed and checked by the caller
	Payload []byte       // len(Payload) == Header.PayloadSize
	Image   []byte       // destination, len(Image) >= Header.Format.ImageSize()

	// Results, set by Decode.
	RawCRC  uint32 // CRC-32C of Payload as received
	DataCRC uint32 // CRC-32C of Image[:Header.Format.ImageSize()]
	Err     error  // why this frame was not decoded; nil on success
}

// Backend decodes and checksums batches of frames.
type Backend interface {
	// Name returns the backend's name, as New knows it.
	Name() string

	// Decode decodes every job of batch into its image and sets its
	// results. Problems with one frame go to that job's Err (and leave its
	// CRCs zero and its image undefined); the error is for a failure of the
	// backend itself, such as a call after Close. Decode blocks until the
	// whole batch is done; it is safe to call from several goroutines at
	// once, on distinct batches.
	Decode(batch []Job) error

	// Close releases the backend's workers and memory. It waits for Decode
	// calls in progress; later calls to Decode fail.
	Close() error
}

// Options configure a backend.
type Options struct {
	// Orientation gives each chip's rotation, 0 or 180 degrees, in
	// chip-major order. Nil leaves every chip at 0. Its length must match
	// the chip count of every frame decoded with it.
	Orientation frame.Orientation

	// Workers is the number of CPU worker goroutines; 0 means GOMAXPROCS.
	Workers int
}

// ErrClosed is returned by Decode after Close.
var ErrClosed = errors.New("gpu: backend closed")

// Names lists the backend names that New accepts.
func Names() []string { return []string{"auto", "cpu"} }

// New returns the backend called name, configured by opts. It is the one
// place backends are registered.
func New(name string, opts Options) (Backend, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	switch name {
	case "cpu", "auto": // auto is the CPU until the CUDA backend exists
		return newCPU(opts), nil
	}
	return nil, fmt.Errorf("gpu: unknown backend %q (want one of %s)", name, strings.Join(Names(), ", "))
}

func (o *Options) validate() error {
	if o.Workers < 0 {
		return fmt.Errorf("gpu: %d workers: want 0 (GOMAXPROCS) or more", o.Workers)
	}
	if err := o.Orientation.Validate(len(o.Orientation)); err != nil {
		return fmt.Errorf("gpu: %v", err)
	}
	return nil
}

func (o *Options) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return runtime.GOMAXPROCS(0)
}
