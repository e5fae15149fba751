package scan

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"

	"h5ingest/compress"
	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/pipeline"
	"h5ingest/registry"
	"h5ingest/writer"
)

// errNoRegistry is the error of a scan given no registry to make its
// stages from.
var errNoRegistry = errors.New("scan: no registry of stages (Options.Stages)")

// stages are the stages a profile names, made from a registry; its
// processors are started apart (startProcessors), once the scan's plan
// is known.
type stages struct {
	newCodec func() (compress.Codec, error)
	layout   writer.Layout
}

// makeStages returns the codec maker and the layout that profile p names
// for frames of format f, and checks that its processors are registered.
func makeStages(reg *registry.Registry, p config.Profile, f frame.Format) (stages, error) {
	if reg == nil {
		return stages{}, errNoRegistry
	}
	out := p.Output
	c, ok := reg.Codec(out.Compression)
	if !ok {
		return stages{}, Usage(fmt.Errorf("key output.compression: %q is not registered", out.Compression))
	}
	layout, err := layoutOf(reg, p)
	if err != nil {
		return stages{}, err
	}
	for i, entry := range out.Processors {
		if _, ok := reg.Processor(entry.Name); !ok {
			return stages{}, Usage(fmt.Errorf("key output.processors[%d]: %q is not registered", i, entry.Name))
		}
	}
	newCodec := func() (compress.Codec, error) { return c.New(f.PixelSize(), out.Level) }
	if err := readsItsOwn(reg, c, newCodec, f.PixelSize()); err != nil {
		return stages{}, err
	}
	return stages{layout: layout, newCodec: newCodec}, nil
}

// readsItsOwn checks that the filter pipeline codec entry c writes is read
// back by the lookup verify, inspect and the image reader use
// (registry.ReadCodec), before any file is made: a facility's codec whose
// entry has no Read (the older form of an entry), or whose Read refuses
// its own filters, would write files that nothing could verify.
func readsItsOwn(reg *registry.Registry, c registry.Codec, newCodec func() (compress.Codec, error), elemSize int) error {
	codec, err := newCodec()
	if err != nil {
		return Usage(fmt.Errorf("key output.compression: %s: %w", c.Name, err))
	}
	filters := codec.Filters()
	if c.Read != nil {
		if _, err := c.Read(filters, elemSize); err != nil {
			return fmt.Errorf("key output.compression: codec %s cannot read back the filters it writes (%w): its files could not be verified", c.Name, err)
		}
	}
	if _, err := reg.ReadCodec(filters, elemSize); err != nil {
		if c.Read == nil && len(filters) > 0 {
			last := filters[len(filters)-1].ID
			return Usage(fmt.Errorf("key output.compression: codec %s writes the filter pipeline %v, which no registered codec reads back, so its files could not be verified: give its registry entry Filter: %d and a Read that decodes such chunks (docs/extending.md)", c.Name, filterIDs(filters), last))
		}
		return fmt.Errorf("key output.compression: codec %s cannot read back the filters it writes (%w): its files could not be verified", c.Name, err)
	}
	return nil
}

// filterIDs returns the ids of a filter pipeline.
func filterIDs(filters []compress.Filter) []int {
	ids := make([]int, len(filters))
	for i, f := range filters {
		ids[i] = f.ID
	}
	return ids
}

// layoutOf returns the file layout profile p names.
func layoutOf(reg *registry.Registry, p config.Profile) (writer.Layout, error) {
	if reg == nil {
		return nil, errNoRegistry
	}
	l, ok := reg.Layout(p.Output.Layout)
	if !ok {
		return nil, Usage(fmt.Errorf("key output.layout: %q is not registered", p.Output.Layout))
	}
	return l.New(), nil
}

// openBackend opens the decode backend profile names.
func openBackend(reg *registry.Registry, profile config.Profile, log *zap.Logger) (gpu.Backend, error) {
	if reg == nil {
		return nil, errNoRegistry
	}
	b, ok := reg.Backend(profile.Backend)
	if !ok {
		return nil, Usage(fmt.Errorf("key backend: %q is not registered", profile.Backend))
	}
	backend, err := b.New(gpu.Options{
		Orientation: profile.Detector.Orientation(),
		Logger:      slog.New(zapslog.NewHandler(log.Core())),
	})
	if err != nil {
		return nil, backendErr(err)
	}
	return backend, nil
}

// backendErr is the error of a backend that did not open or preload: a
// usage error naming the key (no such device, a bad option), except where
// the device was lost to a sticky error as it opened, which no change to
// the command line or profile mends.
func backendErr(err error) error {
	if errors.Is(err, gpu.ErrDeviceLost) {
		return fmt.Errorf("backend: %w", err)
	}
	return Usage(fmt.Errorf("key backend: %w", err))
}

// fallbackBackend returns what opens the registry's reference backend
// (stock h5ingest's cpu) with the profile's options, for a scan whose
// backend, named backend, loses its device mid-scan: the pipeline then
// decodes the scan's frames with it (pipeline.Config.Fallback). It
// returns nil where the scan's backend is the reference, or none is
// registered.
func fallbackBackend(reg *registry.Registry, profile config.Profile, backend string, log *zap.Logger) func() (gpu.Backend, error) {
	ref := reg.ReferenceBackend()
	if ref == "" || ref == backend {
		return nil
	}
	profile.Backend = ref
	return func() (gpu.Backend, error) { return openBackend(reg, profile, log) }
}

// PreloadBackend prepares what the scans of the backend named backend
// share, as its entry in stages says (registry.Backend.Preload): for
// stock h5ingest, the GPU that cuda decodes on, or auto where a device
// answers, its kernels loaded, JIT-compiled and checked on a frame, kept
// until release. A command calls it when it starts (serve: at start-up),
// so that no scan waits for it once its detector connects, and every scan
// of the process shares one context. computeCache is where the driver
// keeps the kernels it compiled (CUDA_CACHE_PATH); "" takes
// DefaultComputeCache. A backend whose entry has no Preload holds
// nothing.
func PreloadBackend(stages *registry.Registry, backend, computeCache string, log *zap.Logger) (release func(), err error) {
	if stages == nil {
		return nil, errNoRegistry
	}
	b, ok := stages.Backend(backend)
	if !ok {
		return nil, Usage(fmt.Errorf("key backend: %q is not registered", backend))
	}
	if b.Preload == nil {
		return func() {}, nil
	}
	if log == nil {
		log = zap.NewNop()
	}
	if computeCache == "" {
		computeCache = DefaultComputeCache()
	}
	release, err = b.Preload(gpu.Options{ComputeCache: computeCache, Logger: slog.New(zapslog.NewHandler(log.Core()))})
	if err != nil {
		return nil, backendErr(err)
	}
	if release == nil {
		release = func() {}
	}
	return release, nil
}

// DefaultComputeCache returns the directory for the CUDA driver's cache of
// compiled kernels when none is given: "" where CUDA_CACHE_PATH is set
// (the driver reads it), else the cache directory systemd gives a service
// (CacheDirectory=, as $CACHE_DIRECTORY) with "cuda" under it, else ""
// (the driver's default, ~/.nv/ComputeCache, which a service user
// without a home cannot write).
func DefaultComputeCache() string {
	if os.Getenv("CUDA_CACHE_PATH") != "" {
		return ""
	}
	if dirs := os.Getenv("CACHE_DIRECTORY"); dirs != "" {
		first, _, _ := strings.Cut(dirs, ":")
		return filepath.Join(first, "cuda")
	}
	return ""
}

// chain runs several processors in turn; the first error stops it.
type chain []pipeline.Processor

// Process implements pipeline.Processor.
func (c chain) Process(n int, f frame.Format, image []byte) error {
	for _, p := range c {
		if err := p.Process(n, f, image); err != nil {
			return err
		}
	}
	return nil
}
