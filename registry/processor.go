package registry

import (
	"fmt"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
)

// StartProcessor starts the stage of entry index of output.processors for
// one scan: it finds the processor, decodes the entry's options into the
// processor's option struct (an unknown option is an error naming its
// key) and starts it. A processor registered with New becomes a stage
// whose workers each get their own processor and whose Close does
// nothing.
func (r *Registry) StartProcessor(index int, entry config.Processor, scan pipeline.Scan) (pipeline.Stage, error) {
	p, ok := r.Processor(entry.Name)
	if !ok {
		return nil, fmt.Errorf("key output.processors[%d]: %q is not registered", index, entry.Name)
	}
	var opts any
	if p.Options != nil {
		opts = p.Options()
	}
	if err := entry.Decode(index, opts); err != nil {
		return nil, err
	}
	if p.Start == nil {
		return perWorker{p.New, scan.Format}, nil
	}
	st, err := p.Start(opts, scan)
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

// processorOptions returns a new option struct of the processor named
// name, with its defaults; nil for one without options (config.Names).
func (r *Registry) processorOptions(name string) any {
	if p, ok := r.Processor(name); ok && p.Options != nil {
		return p.Options()
	}
	return nil
}
