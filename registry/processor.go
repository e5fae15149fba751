package registry

import (
	"errors"
	"fmt"
	"reflect"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
)

// Starter starts a processor's stage for one scan from its profile entry
// (Processor.Start). Start makes one from the processor's typed options.
type Starter interface {
	// options returns the options of entry index of output.processors,
	// decoded over the defaults and checked.
	options(index int, entry config.Processor) (any, error)
	// start starts the stage with options from options.
	start(options any, scan pipeline.Scan) (pipeline.Stage, error)
	// valid reports why the Starter could not be used.
	valid() error
}

// Start returns the Start of a processor whose options are a struct of
// type O, set in its profile entry (output.processors: [{name: NAME, key:
// value}]):
//
//   - defaults returns the options with each one's value where the entry
//     sets none, a new value each call (so that no slice or map of it is
//     shared between entries or scans); nil: O's zero value. An entry's
//     options are decoded over it by the fields' mapstructure tags,
//     strictly: a key O has no field for, or a value of the wrong type,
//     is refused naming the key and the options the processor knows;
//   - check, where not nil, refuses options no scan could run with (a
//     gain of 0, a bin below 1), saying which option and why. It runs
//     wherever a profile is checked, before any scan: "h5ingest profiles
//     check", a profile loaded by a command or by the scan service's arm
//     request (all through Registry.Names), and again when a scan starts;
//   - start starts the processor's stage for one scan with the decoded,
//     checked options; what only the scan can tell (the format, the
//     plan) it checks itself.
//
// O must be a struct, not a pointer to one; a struct of no fields takes no
// options.
func Start[O any](defaults func() O, check func(O) error, start func(O, pipeline.Scan) (pipeline.Stage, error)) Starter {
	return typedStart[O]{defaults: defaults, check: check, begin: start}
}

// typedStart is the Starter of options of type O.
type typedStart[O any] struct {
	defaults func() O
	check    func(O) error
	begin    func(O, pipeline.Scan) (pipeline.Stage, error)
}

func (s typedStart[O]) valid() error {
	if t := reflect.TypeFor[O](); t.Kind() != reflect.Struct {
		return fmt.Errorf("options of type %v: want a struct", t)
	}
	if s.begin == nil {
		return errors.New("no start function")
	}
	return nil
}

func (s typedStart[O]) options(index int, entry config.Processor) (any, error) {
	var o O
	if s.defaults != nil {
		o = s.defaults()
	}
	var dst any = &o
	if reflect.TypeFor[O]().NumField() == 0 {
		dst = nil // takes no options
	}
	if err := entry.Decode(index, dst); err != nil {
		return nil, err
	}
	if s.check != nil {
		if err := s.check(o); err != nil {
			return nil, fmt.Errorf("key output.processors[%d]: processor %s: %w", index, entry.Name, err)
		}
	}
	return o, nil
}

func (s typedStart[O]) start(options any, scan pipeline.Scan) (pipeline.Stage, error) {
	return s.begin(options.(O), scan)
}

// CheckProcessor checks entry index of output.processors without
// starting it: the processor is registered, and its options decode into
// its option struct and pass its check (Start). Registry.Names gives it to
// config, so that every profile loaded with the registry's names is
// checked so ("h5ingest profiles check", the scan service's arm request).
func (r *Registry) CheckProcessor(index int, entry config.Processor) error {
	_, _, err := r.processorOptions(index, entry)
	return err
}

// processorOptions returns the processor of entry index of
// output.processors and the entry's checked options; nil options for a
// processor of New.
func (r *Registry) processorOptions(index int, entry config.Processor) (Processor, any, error) {
	p, ok := r.Processor(entry.Name)
	if !ok {
		return p, nil, fmt.Errorf("key output.processors[%d]: %q is not registered", index, entry.Name)
	}
	if p.Start == nil {
		return p, nil, entry.Decode(index, nil)
	}
	opts, err := p.Start.options(index, entry)
	return p, opts, err
}

// StartProcessor starts the stage of entry index of output.processors for
// one scan: it finds the processor, checks the entry's options as
// CheckProcessor does and starts it. A processor registered with New
// becomes a stage whose workers each get their own processor and whose
// Close does nothing.
func (r *Registry) StartProcessor(index int, entry config.Processor, scan pipeline.Scan) (pipeline.Stage, error) {
	p, opts, err := r.processorOptions(index, entry)
	if err != nil {
		return nil, err
	}
	if p.Start == nil {
		return perWorker{p.New, scan.Format}, nil
	}
	st, err := p.Start.start(opts, scan)
	if err != nil {
		return nil, fmt.Errorf("processor %s: %w", p.Name, err)
	}
	return st, nil
}

// perWorker is the stage of a processor registered with New.
type perWorker struct {
	new    func(frame.Format) (pipeline.Processor, error)
	format frame.Format
}

func (s perWorker) Processor() (pipeline.Processor, error) { return s.new(s.format) }
func (s perWorker) Close() error                           { return nil }
