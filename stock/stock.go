// Package stock registers h5ingest's own stages, in one function that a
// program calls once (as restic's internal/backend/all does), rather than
// through init functions with side effects at import.
package stock

import (
	"h5ingest/compress"
	"h5ingest/gpu"
	"h5ingest/registry"
	"h5ingest/writer"
)

// Register adds h5ingest's sources, backends, codecs and layouts to r. It
// fails only where r holds one of their names already.
func Register(r *registry.Registry) error {
	for _, add := range []func() error{
		func() error {
			return r.AddSource(registry.Source{Name: "fabric", Doc: "libfabric connected endpoints: RDMA (verbs) on RoCE or InfiniBand, tcp elsewhere"})
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
	} {
		if err := add(); err != nil {
			return err
		}
	}
	return nil
}

// backendDocs say what each of gpu's backends is.
var backendDocs = map[string]string{
	"auto": "cuda where a GPU is there, else cpu",
	"cpu":  "pure Go on every core",
	"cuda": "an NVIDIA GPU through the CUDA driver, loaded at run time",
}

func addBackends(r *registry.Registry) error {
	for _, name := range gpu.Names() {
		err := r.AddBackend(registry.Backend{Name: name, Doc: backendDocs[name],
			New: func(o gpu.Options) (gpu.Backend, error) { return gpu.New(name, o) }})
		if err != nil {
			return err
		}
	}
	return nil
}

// codecDocs say what each of compress's codecs is.
var codecDocs = map[string]string{
	"bslz4":   "bitshuffle + LZ4 (HDF5 filter 32008), what detector files usually hold",
	"bszstd":  "bitshuffle + zstd (filter 32008); needs bitshuffle 0.4 or newer to read",
	"lz4":     "LZ4 (filter 32004)",
	"deflate": "shuffle + deflate, HDF5's own filters: every reader opens it",
	"none":    "uncompressed",
}

func addCodecs(r *registry.Registry) error {
	for _, name := range compress.Names() {
		err := r.AddCodec(registry.Codec{Name: name, Doc: codecDocs[name],
			New: func(elemSize, level int) (compress.Codec, error) { return compress.New(name, elemSize, level) }})
		if err != nil {
			return err
		}
	}
	return nil
}
