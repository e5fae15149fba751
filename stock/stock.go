// Package stock registers h5ingest's own stages, in one function that a
// program calls once (as restic's internal/backend/all does), rather than
// through init functions with side effects at import.
//
// Package stock is part of h5ingest's facility API; see docs/extending.md.
package stock

import (
	"h5ingest/compress"
	"h5ingest/gpu"
	"h5ingest/registry"
	"h5ingest/source/capture"
	"h5ingest/source/fabric"
	"h5ingest/source/roce"
	"h5ingest/writer"
)

// Register adds h5ingest's sources, backends, codecs, layouts and
// processors to r. It fails only where r holds one of their names
// already.
func Register(r *registry.Registry) error {
	for _, add := range []func() error{
		func() error {
			return r.AddSource(registry.Source{Name: "fabric", Doc: "libfabric connected endpoints: RDMA (verbs) on RoCE or InfiniBand, tcp elsewhere",
				Listen: fabric.Open, Check: fabric.Check, Addressed: true, Open: capture.OpenScan})
		},
		func() error {
			return r.AddSource(registry.Source{Name: "roce", Doc: "a detector front end's static RoCE queue pairs: frames written with immediate data into a ring, no credits (libibverbs)",
				Listen: roce.Open, Station: roce.OpenStation, Check: roce.Check, Open: capture.OpenScan})
		},
		func() error { return addBackends(r) },
		func() error { return addCodecs(r) },
		func() error {
			return r.AddLayout(registry.Layout{Name: writer.LayoutNXtomo, Doc: "NeXus NXtomo with a Data Exchange view, for tomography (tomopy, dxchange, silx)",
				New: func() writer.Layout { return writer.NXtomo{} }})
		},
		func() error {
			return r.AddLayout(registry.Layout{Name: writer.LayoutCXI, Doc: "CXI 1.5, for coherent diffraction and ptychography (PtyPy)",
				New: func() writer.Layout { return writer.CXI{} }})
		},
		func() error { return addProcessors(r) },
	} {
		if err := add(); err != nil {
			return err
		}
	}
	return nil
}

// gpuBatch is the frames per decode call on a GPU, which overlaps one
// call's copies with another's kernels; to be tuned on the hardware.
const gpuBatch = 4

// backends are gpu's backends with what each is and can do. Every one
// transposes (gpu.Job.ShuffleBlock); auto takes the batch of the backend
// it chooses.
var backends = []registry.Backend{
	{Name: "auto", Doc: "cuda where a GPU is there, else cpu", Transpose: true, Preload: preload("auto")},
	{Name: "cpu", Doc: "pure Go on every core", Batch: 1, Transpose: true, Reference: true},
	{Name: "cuda", Doc: "an NVIDIA GPU through the CUDA driver, loaded at run time", Batch: gpuBatch, Transpose: true, Preload: preload("cuda")},
}

// preload returns the Preload of gpu's backend name: the device's context
// and kernels, loaded when a command starts; for auto, nothing (and a log
// line) where no GPU answers, for cuda an error.
func preload(name string) func(gpu.Options) (func(), error) {
	return func(o gpu.Options) (func(), error) { return gpu.Preload(name, o) }
}

func addBackends(r *registry.Registry) error {
	for _, b := range backends {
		b.New = func(o gpu.Options) (gpu.Backend, error) { return gpu.New(b.Name, o) }
		if err := r.AddBackend(b); err != nil {
			return err
		}
	}
	return nil
}

// bszstdReaders is what a user who chooses bszstd must know about the
// readers of its files.
const bszstdReaders = "bszstd (bitshuffle + zstd) files cannot be read with bitshuffle older than 0.4, " +
	"which is what Debian 12 ships (bitshuffle 0.3.5, which its python3-hdf5plugin uses too): " +
	"it takes zstd chunks for uncompressed ones, and h5py then fails, crashes (segmentation fault) " +
	"or returns wrong pixels without any error. Readers need bitshuffle 0.4 or newer " +
	"(hdf5plugin from PyPI); choose bslz4 for files that Debian 12's readers must open"

// codecs are compress's codecs with what the program asks about each;
// each is read back from a file by compress.ReaderOf its name.
var codecs = []registry.Codec{
	{Name: "bslz4", Doc: "bitshuffle + LZ4 (HDF5 filter 32008), what detector files usually hold",
		Filter: compress.FilterBitshuffle, Optional: true, Transpose: true, MinLevel: -compress.MaxLZ4Acceleration, MaxLevel: -1, Stream: "bslz4"},
	{Name: "bszstd", Doc: "bitshuffle + zstd (filter 32008); needs bitshuffle 0.4 or newer to read",
		Filter: compress.FilterBitshuffle, Optional: true, Transpose: true, MinLevel: 1, MaxLevel: compress.MaxZstdLevel, Warning: bszstdReaders},
	{Name: "lz4", Doc: "LZ4 (filter 32004)", Filter: compress.FilterLZ4, Optional: true, Stream: "lz4"},
	{Name: "deflate", Doc: "shuffle + deflate, HDF5's own filters: every reader opens it",
		Filter: compress.FilterDeflate, MinLevel: 1, MaxLevel: compress.MaxDeflateLevel},
	{Name: "none", Doc: "uncompressed", Stream: registry.StreamRaw},
}

func addCodecs(r *registry.Registry) error {
	for _, c := range codecs {
		c.New = func(elemSize, level int) (compress.Codec, error) { return compress.New(c.Name, elemSize, level) }
		if c.Filter != 0 {
			c.Read = compress.ReaderOf(c.Name)
		}
		if err := r.AddCodec(c); err != nil {
			return err
		}
	}
	return nil
}
