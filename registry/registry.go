// Package registry holds the named implementations of h5ingest's stages
// that a profile chooses by name: sources (source.transport), decode
// backends (backend), chunk codecs (output.compression), file layouts
// (output.layout) and processors (output.processors).
//
// A Registry starts empty. Package stock adds h5ingest's own
// stages in one function, and a facility adds its own beside them, before
// any profile is loaded; nothing registers itself at import. Profile
// validation (config.Names), the command's flag help, "h5ingest profiles
// names" and docs/profiles.md all read the names from a Registry.
//
// Package registry is part of h5ingest's facility API; see docs/extending.md.
package registry

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"h5ingest/compress"
	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/pipeline"
	"h5ingest/receive"
	"h5ingest/source/capture"
	"h5ingest/writer"
)

// Source is a way frames arrive, named by source.transport: acquire
// listens with it, replay reads what it recorded.
type Source struct {
	Name string
	Doc  string // one line, for help and docs
	// Listen opens the receiver that acquire takes a scan's frames from,
	// as the profile's source keys and the scan's setup say; nil: the
	// source cannot acquire.
	Listen func(receive.Setup) (receive.Listener, error)
	// Station, where set, opens the source once for many scans, as the
	// scan service does for a source whose links are set up statically;
	// serve's scans of the source then listen through it alone.
	Station func(receive.Setup) (receive.Station, error)
	// Check, where set, refuses a setup Listen could not work with (keys
	// out of range, a ring too large), before any file is made.
	Check func(receive.Setup) error
	// Addressed says the source listens on the profile's source.address
	// and source.port through libfabric's source.provider: the pre-scan
	// checks look at the provider, the port and the locked memory of its
	// rings.
	Addressed bool
	// Open opens a recording of the source's frames (acquire --record's
	// file) for replay, with the format of its frames; nil: the source
	// cannot replay.
	Open func(path string) (*capture.Reader, frame.Format, error)
}

// Backend is a decode backend, named by backend.
type Backend struct {
	Name string
	Doc  string
	New  func(gpu.Options) (gpu.Backend, error)
	// Batch is how many frames the pipeline gives the backend in one
	// Decode: 1 (or 0) where a backend splits each frame over every core,
	// more where it overlaps one batch's copies with another's work (a
	// GPU).
	Batch int
	// Transpose says the backend does the bit transpose of a bitshuffle
	// codec itself (gpu.Job.ShuffleBlock), so that output.backend_shuffle
	// may be chosen with it.
	Transpose bool
	// Preload, where set, prepares once, when a command starts, what the
	// backend's scans share (a GPU's context and compiled kernels), so
	// that no scan waits for it once its detector connects; release gives
	// it back. acquire calls it for the profile's backend, serve
	// --preload-gpu for the default profile's (scan.PreloadBackend).
	Preload func(gpu.Options) (release func(), err error)
	// Reference says the backend runs on every machine and is the one
	// the others are checked and measured against: the bench's default.
	Reference bool
}

// Stream V2 encodings of a codec's chunks (Codec.Stream), besides the
// name of a compression of Stream V2's compressed-array tag.
const (
	StreamNone = ""    // Stream V2 cannot carry the chunks
	StreamRaw  = "raw" // the chunks are the image's pixels as they are
)

// Codec is a chunk codec, named by output.compression, with what the
// program asks about it: how a file's filter pipeline is read back into
// it, the levels it takes, how the live stream carries its chunks and
// what its files' readers need.
type Codec struct {
	Name string
	Doc  string
	// New returns a codec for chunks of elemSize-byte pixels at level
	// (0: the codec's default).
	New func(elemSize, level int) (compress.Codec, error)
	// Filter is the HDF5 filter id that ends the codec's filter pipeline
	// (its compression, such as 32008 for bitshuffle); 0 for a codec that
	// stores chunks unfiltered.
	Filter int
	// Read returns a codec that decodes the chunks of a dataset whose
	// filter pipeline, as a file stores it, is filters (ending in Filter)
	// and whose pixels are elemSize bytes, from the filters' values
	// (block size, level ...). Verify, inspect and the image reader find
	// it by the pipeline's last filter (Registry.ReadCodec). Codecs that
	// share a filter may share a Read: the first registered that reads a
	// pipeline decodes it.
	Read func(filters []compress.Filter, elemSize int) (compress.Codec, error)
	// MinLevel and MaxLevel are the levels output.level may choose, 0
	// always choosing the codec's default; both 0: the codec takes no
	// level.
	MinLevel, MaxLevel int
	// Transpose says the codec's first stage is the bit transpose that a
	// backend may do (compress.Preshuffled), for output.backend_shuffle.
	Transpose bool
	// Stream is how DECTRIS Stream V2 carries the chunks: StreamNone,
	// StreamRaw, or the compression the stream's compressed-array tag
	// names ("bslz4", "lz4").
	Stream string
	// Warning is what a user who chooses the codec must know about the
	// readers of its files, said when a scan starts or a profile is
	// checked; "" for nothing.
	Warning string
	// Optional says the codec's filters are declared optional to libhdf5
	// (H5Z_FLAG_OPTIONAL), as a filter of a plugin must be: the writer
	// creates the dataset with plugin loading off, and a mandatory filter
	// that libhdf5 cannot load fails there.
	Optional bool
}

// firstPluginFilter is the lowest HDF5 filter id of a plugin: lower ids
// are libhdf5's own (deflate 1, shuffle 2 ...).
const firstPluginFilter = 256

// Layout is a file layout, named by output.layout.
type Layout struct {
	Name string
	Doc  string
	New  func() writer.Layout
}

// Processor is a processor stage, named in output.processors. A
// processor sets New or Start:
//
//   - New, for a processor without options or state of the scan: it makes
//     the processor of each compression worker, for frames of format f;
//   - Start, for a processor that takes options from the profile, sees the
//     scan (its format and plan, each frame's image key) or shares state
//     across its workers: made by the function Start from the processor's
//     typed options, it starts the processor's stage for one scan, which
//     makes each worker's processor and is closed when the scan ends
//     (pipeline.Stage). Registry.StartProcessor calls it.
type Processor struct {
	Name  string
	Doc   string
	New   func(f frame.Format) (pipeline.Processor, error)
	Start Starter // registry.Start(defaults, check, start)
}

// Registry is a set of named stages of each kind.
type Registry struct {
	sources    []Source
	backends   []Backend
	codecs     []Codec
	layouts    []Layout
	processors []Processor
}

// New returns an empty registry.
func New() *Registry { return &Registry{} }

// add appends e to list unless an entry has its name.
func add[T any](kind string, list *[]T, e T, name func(T) string) error {
	switch {
	case name(e) == "":
		return fmt.Errorf("register %s: no name", kind)
	case !plainName(name(e)):
		return fmt.Errorf("register %s %q: a name is letters, digits and - _ . + not first", kind, name(e))
	case slices.ContainsFunc(*list, func(x T) bool { return name(x) == name(e) }):
		return fmt.Errorf("register %s %q: the name is taken", kind, name(e))
	}
	*list = append(*list, e)
	return nil
}

// plainName reports whether n is a name a profile, a flag and a list of
// names can all spell: an ASCII letter or digit, then letters, digits
// and - _ . +.
func plainName(n string) bool {
	for i, r := range n {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case i > 0 && strings.ContainsRune("-_.+", r):
		default:
			return false
		}
	}
	return n != ""
}

// find returns the entry of list named n.
func find[T any](list []T, n string, name func(T) string) (T, bool) {
	i := slices.IndexFunc(list, func(x T) bool { return name(x) == n })
	if i < 0 {
		var zero T
		return zero, false
	}
	return list[i], true
}

// names returns the names of list, in the order registered.
func names[T any](list []T, name func(T) string) []string {
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = name(e)
	}
	return out
}

// AddSource registers s; a name already taken is an error.
func (r *Registry) AddSource(s Source) error {
	return add("source", &r.sources, s, func(s Source) string { return s.Name })
}

// AddBackend registers b; a name already taken is an error.
func (r *Registry) AddBackend(b Backend) error {
	switch {
	case b.New == nil:
		return fmt.Errorf("register backend %q: no New", b.Name)
	case b.Batch < 0:
		return fmt.Errorf("register backend %q: batch %d, want 1 or more (0: 1)", b.Name, b.Batch)
	}
	return add("backend", &r.backends, b, func(b Backend) string { return b.Name })
}

// AddCodec registers c; a name already taken is an error, and so is an
// entry that could not be used: one without New, with filters but no
// Read, with a plugin's filter it does not declare optional, or with its
// levels the wrong way round.
func (r *Registry) AddCodec(c Codec) error {
	switch {
	case c.New == nil:
		return fmt.Errorf("register codec %q: no New", c.Name)
	case c.Filter < 0:
		return fmt.Errorf("register codec %q: filter id %d", c.Name, c.Filter)
	case c.Filter != 0 && c.Read == nil:
		return fmt.Errorf("register codec %q: filter %d but no Read, so that no file of it could be read back", c.Name, c.Filter)
	case c.Filter >= firstPluginFilter && !c.Optional:
		return fmt.Errorf("register codec %q: filter %d is a plugin's, which libhdf5 may not load when it writes: declare its filters optional (Optional, and compress.Filter.Optional)", c.Name, c.Filter)
	case c.MinLevel > c.MaxLevel:
		return fmt.Errorf("register codec %q: levels %d to %d, want the lowest first", c.Name, c.MinLevel, c.MaxLevel)
	}
	return add("codec", &r.codecs, c, func(c Codec) string { return c.Name })
}

// AddLayout registers l; a name already taken is an error.
func (r *Registry) AddLayout(l Layout) error {
	if l.New == nil {
		return fmt.Errorf("register layout %q: no New", l.Name)
	}
	if n := l.New().Name(); n != l.Name {
		return fmt.Errorf("register layout %q: its Layout says its name is %q", l.Name, n)
	}
	return add("layout", &r.layouts, l, func(l Layout) string { return l.Name })
}

// AddProcessor registers p; a name already taken is an error, and so is
// an entry that sets neither New nor Start, or both, or whose Start could
// not be used.
func (r *Registry) AddProcessor(p Processor) error {
	switch {
	case p.New == nil && p.Start == nil:
		return fmt.Errorf("register processor %q: no New or Start", p.Name)
	case p.New != nil && p.Start != nil:
		return fmt.Errorf("register processor %q: New and Start both set; a processor sets one", p.Name)
	case p.Start != nil:
		if err := p.Start.valid(); err != nil {
			return fmt.Errorf("register processor %q: %w", p.Name, err)
		}
	}
	return add("processor", &r.processors, p, func(p Processor) string { return p.Name })
}

// Source returns the source named name.
func (r *Registry) Source(name string) (Source, bool) {
	return find(r.sources, name, func(s Source) string { return s.Name })
}

// Backend returns the backend named name.
func (r *Registry) Backend(name string) (Backend, bool) {
	return find(r.backends, name, func(b Backend) string { return b.Name })
}

// ReferenceBackend returns the name of the first backend registered as
// the reference (Backend.Reference); "" where none is.
func (r *Registry) ReferenceBackend() string {
	for _, b := range r.backends {
		if b.Reference {
			return b.Name
		}
	}
	return ""
}

// Batch returns the frames per Decode of the opened backend b: the batch
// of the backend registered under the name b says it is (a backend that
// chooses, such as auto, says what it chose), 1 where none is.
func (r *Registry) Batch(b gpu.Backend) int {
	if e, ok := r.Backend(b.Name()); ok && e.Batch > 1 {
		return e.Batch
	}
	return 1
}

// ReadCodec returns a codec that decodes the chunks of a dataset whose
// filter pipeline is filters, as a file stores it, and whose pixels are
// elemSize bytes: the first registered codec whose filter ends the
// pipeline and whose Read accepts it. An empty pipeline is read by the
// codec of no filter.
func (r *Registry) ReadCodec(filters []compress.Filter, elemSize int) (compress.Codec, error) {
	id := 0
	if len(filters) > 0 {
		id = filters[len(filters)-1].ID
	}
	var errs []error
	for _, c := range r.codecs {
		if c.Filter != id {
			continue
		}
		if c.Read == nil { // no filter: New(elemSize, 0) reads
			if len(filters) == 0 {
				return c.New(elemSize, 0)
			}
			continue
		}
		codec, err := c.Read(filters, elemSize)
		if err == nil {
			return codec, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", c.Name, err))
	}
	ids := make([]int, len(filters))
	for i, f := range filters {
		ids[i] = f.ID
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("no registered codec reads the filter pipeline %v", ids)
	}
	return nil, fmt.Errorf("no registered codec reads the filter pipeline %v: %w", ids, errors.Join(errs...))
}

// CodecOf returns the name of the codec that reads the filter pipeline
// filters, for people; "" where none does.
func (r *Registry) CodecOf(filters []compress.Filter, elemSize int) string {
	id := 0
	if len(filters) > 0 {
		id = filters[len(filters)-1].ID
	}
	for _, c := range r.codecs {
		switch {
		case c.Filter != id:
		case c.Read == nil && len(filters) == 0:
			return c.Name
		case c.Read != nil:
			if _, err := c.Read(filters, elemSize); err == nil {
				return c.Name
			}
		}
	}
	return ""
}

// Codec returns the codec named name.
func (r *Registry) Codec(name string) (Codec, bool) {
	return find(r.codecs, name, func(c Codec) string { return c.Name })
}

// Layout returns the layout named name.
func (r *Registry) Layout(name string) (Layout, bool) {
	return find(r.layouts, name, func(l Layout) string { return l.Name })
}

// Processor returns the processor named name.
func (r *Registry) Processor(name string) (Processor, bool) {
	return find(r.processors, name, func(p Processor) string { return p.Name })
}

// Names returns the names of every stage, by kind, for profile
// validation and help.
func (r *Registry) Names() config.Names {
	return config.Names{
		Transports:     names(r.sources, func(s Source) string { return s.Name }),
		Backends:       names(r.backends, func(b Backend) string { return b.Name }),
		Codecs:         names(r.codecs, func(c Codec) string { return c.Name }),
		Layouts:        names(r.layouts, func(l Layout) string { return l.Name }),
		Processors:     names(r.processors, func(p Processor) string { return p.Name }),
		CheckProcessor: r.CheckProcessor,
		CodecInfo:      codecInfo(r.codecs),
		Transposers:    transposers(r.backends),
	}
}

// transposers returns the names of the backends that do the bit
// transpose.
func transposers(backends []Backend) []string {
	var out []string
	for _, b := range backends {
		if b.Transpose {
			out = append(out, b.Name)
		}
	}
	return out
}

// codecInfo returns what a profile may ask of each codec, by name.
func codecInfo(codecs []Codec) map[string]config.CodecInfo {
	m := make(map[string]config.CodecInfo, len(codecs))
	for _, c := range codecs {
		m[c.Name] = config.CodecInfo{MinLevel: c.MinLevel, MaxLevel: c.MaxLevel, Transpose: c.Transpose, Stream: c.Stream != StreamNone}
	}
	return m
}

// Entry is one registered stage, for help and docs.
type Entry struct {
	Kind, Name, Doc string
}

// Entries returns every registered stage, by kind in the order sources,
// backends, codecs, layouts, processors, each kind in the order
// registered.
func (r *Registry) Entries() []Entry {
	var out []Entry
	for _, s := range r.sources {
		out = append(out, Entry{"source", s.Name, s.Doc})
	}
	for _, b := range r.backends {
		out = append(out, Entry{"backend", b.Name, b.Doc})
	}
	for _, c := range r.codecs {
		out = append(out, Entry{"codec", c.Name, c.Doc})
	}
	for _, l := range r.layouts {
		out = append(out, Entry{"layout", l.Name, l.Doc})
	}
	for _, p := range r.processors {
		out = append(out, Entry{"processor", p.Name, p.Doc})
	}
	return out
}
