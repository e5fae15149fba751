// Package serve is what h5ingest serve runs: the scan service's Runner
// (package service drives it over HTTP), which arms each scan a control
// system asks for as an acquire of this node's modules on package scan's
// detector session, one module or several, and shows the service and its
// scans on the status page and /metrics. It also sets up at start-up the
// links of a source whose links are static (a RoCE front end's queue
// pairs, OpenStation), and carries out what serve does once the GPU is
// lost (GPUGuard).
//
// A request reaches only what the operator allowed (see Runner); the
// scans themselves, their files and their checks are package scan's.
package serve

import (
	"context"
	"errors"
	"os"

	"h5ingest/registry"
	"h5ingest/scan"
)

// errNoRegistry refuses a scan or a station of a Runner without stages.
var errNoRegistry = errors.New("serve: no registry of stages (Runner.Stages)")

// verifyPath proves the file at path as scan.Verify does, with
// scan.DefaultVerifyStall, and returns its outcome.
func verifyPath(stages *registry.Registry, path string) error {
	_, err := scan.Verify(context.Background(), stages, path, scan.DefaultVerifyStall)
	return err
}

// fileExists reports whether there is a file (of any kind) at path.
func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
