// Command h5ingest-beamline is h5ingest with the beamline's own stages
// (package extend: the threshold processor, the flat layout, the
// deflate-max and zstd codecs) registered beside h5ingest's, so that a
// profile may choose either by name. Everything else, its subcommands,
// flags, output and exit statuses, is h5ingest's command (package cli).
//
//	go build -o bin/h5ingest-beamline ./cmd/h5ingest-beamline
//	bin/h5ingest-beamline replay --profile beamline.yaml -o scan.h5 scan.pmcap
package main

import (
	"fmt"
	"os"

	"example.org/beamline/extend"

	"h5ingest/cli"
	"h5ingest/registry"
	"h5ingest/stock"
)

func main() {
	stages := registry.New()
	if err := stock.Register(stages); err != nil {
		fmt.Fprintf(os.Stderr, "h5ingest: %v\n", err)
		os.Exit(1)
	}
	if err := extend.Register(stages); err != nil {
		fmt.Fprintf(os.Stderr, "h5ingest: %v\n", err)
		os.Exit(1)
	}
	os.Exit(cli.Run(stages, os.Args[1:]))
}
