package stock

import (
	"h5ingest/processor/flatfield"
	"h5ingest/registry"
)

// addProcessors registers h5ingest's processors.
func addProcessors(r *registry.Registry) error {
	return r.AddProcessor(registry.Processor{
		Name: "flatfield",
		Doc: "corrects each projection with the scan's own darks and flats, (proj - dark)/(flat - dark), " +
			"into a float32 preview beside the raw frames (options: to, dataset, bin, every, min, max, wait)",
		Start: registry.Start(flatfield.DefaultOptions, flatfield.Options.Check, flatfield.Start),
	})
}
