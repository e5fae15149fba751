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
package registry

import (
	"fmt"
	"slices"

	"h5ingest/compress"
	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/pipeline"
	"h5ingest/writer"
)

// Source is a way frames arrive, named by source.transport.
type Source struct {
	Name string
	Doc  string // one line, for help and docs
}

// Backend is a decode backend, named by backend.
type Backend struct {
	Name string
	Doc  string
	New  func(gpu.Options) (gpu.Backend, error)
}

// Codec is a chunk codec, named by output.compression.
type Codec struct {
	Name string
	Doc  string
	// New returns a codec for chunks of elemSize-byte pixels at level
	// (0: the codec's default).
	New func(elemSize, level int) (compress.Codec, error)
}

// Layout is a file layout, named by output.layout.
type Layout struct {
	Name string
	Doc  string
	New  func() writer.Layout
}

// Processor is a processor stage, named in output.processors.
type Processor struct {
	Name string
	Doc  string
	// New returns the processor of one compression worker for a scan of
	// frames of format f.
	New func(f frame.Format) (pipeline.Processor, error)
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
	case slices.ContainsFunc(*list, func(x T) bool { return name(x) == name(e) }):
		return fmt.Errorf("register %s %q: the name is taken", kind, name(e))
	}
	*list = append(*list, e)
	return nil
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
	if b.New == nil {
		return fmt.Errorf("register backend %q: no New", b.Name)
	}
	return add("backend", &r.backends, b, func(b Backend) string { return b.Name })
}

// AddCodec registers c; a name already taken is an error.
func (r *Registry) AddCodec(c Codec) error {
	if c.New == nil {
		return fmt.Errorf("register codec %q: no New", c.Name)
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

// AddProcessor registers p; a name already taken is an error.
func (r *Registry) AddProcessor(p Processor) error {
	if p.New == nil {
		return fmt.Errorf("register processor %q: no New", p.Name)
	}
	return add("processor", &r.processors, p, func(p Processor) string { return p.Name })
}

// Backend returns the backend named name.
func (r *Registry) Backend(name string) (Backend, bool) {
	return find(r.backends, name, func(b Backend) string { return b.Name })
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
		Transports: names(r.sources, func(s Source) string { return s.Name }),
		Backends:   names(r.backends, func(b Backend) string { return b.Name }),
		Codecs:     names(r.codecs, func(c Codec) string { return c.Name }),
		Layouts:    names(r.layouts, func(l Layout) string { return l.Name }),
		Processors: names(r.processors, func(p Processor) string { return p.Name }),
	}
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
