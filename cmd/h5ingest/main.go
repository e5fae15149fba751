// Command h5ingest moves X-ray detector frames from the wire (or a capture
// file) to chunked, compressed HDF5 files. It is package cli with
// h5ingest's own stages; a facility's build registers its own beside them
// (see docs/extending.md).
package main

import (
	"fmt"
	"os"

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
	os.Exit(cli.Run(stages, os.Args[1:]))
}
