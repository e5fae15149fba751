package scan

import (
	"fmt"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/receive"
	"h5ingest/registry"
	"h5ingest/source/capture"
)

// SourceOf returns the registry's entry of the source that profile p's
// source.transport names; an error wrapping ErrUsage where none is
// registered.
func SourceOf(stages *registry.Registry, p config.Profile) (registry.Source, error) {
	if stages == nil {
		return registry.Source{}, errNoRegistry
	}
	s, ok := stages.Source(p.Source.Transport)
	if !ok {
		return registry.Source{}, Usage(fmt.Errorf("key source.transport: %q is not registered", p.Source.Transport))
	}
	return s, nil
}

// recordings returns how replay opens the recordings of profile p's
// source.
func recordings(stages *registry.Registry, p config.Profile) (func(path string) (*capture.Reader, frame.Format, error), error) {
	s, err := SourceOf(stages, p)
	if err != nil {
		return nil, err
	}
	if s.Open == nil {
		return nil, Usage(fmt.Errorf("key source.transport: %s records nothing a replay reads", s.Name))
	}
	return s.Open, nil
}

// listenerOf returns the registry's entry of profile p's source, which
// acquire opens the receiver with.
func listenerOf(stages *registry.Registry, p config.Profile) (registry.Source, error) {
	s, err := SourceOf(stages, p)
	if err != nil {
		return s, err
	}
	if s.Listen == nil {
		return s, Usage(fmt.Errorf("key source.transport: %s cannot receive a scan (it is replayed only)", s.Name))
	}
	return s, nil
}

// CheckSource checks profile p's source keys as its source checks them
// before a scan (registry.Source.Check), for a profile alone.
func CheckSource(stages *registry.Registry, p config.Profile) error {
	s, err := SourceOf(stages, p)
	if err != nil || s.Check == nil {
		return err
	}
	format, err := p.Detector.Format()
	if err != nil {
		return err
	}
	return s.Check(receive.Setup{Source: p.Source, Format: format, Modules: p.Detector.ModuleIDs(), ProfileOnly: true,
		InFlight: inFlight(stages, p)})
}

// inFlight returns how many of a module's frames the pipeline of a scan
// of profile p may hold from its source at once, on this machine: one per
// core and two decodes' batches of its backend (of the largest batch
// registered, for a backend that chooses at run time).
func inFlight(stages *registry.Registry, p config.Profile) int {
	batch := 1
	if stages == nil {
		return pipeline.Slots(0, batch)
	}
	if b, ok := stages.Backend(p.Backend); ok && b.Batch > 0 {
		batch = b.Batch
	} else {
		for _, name := range stages.Names().Backends {
			if b, ok := stages.Backend(name); ok {
				batch = max(batch, b.Batch)
			}
		}
	}
	return pipeline.Slots(0, batch)
}
