package writer_test

import (
	"testing"

	"h5ingest/writer"
	"h5ingest/writer/writertest"
)

// TestLayoutsConform runs the conformance suite on h5ingest's layouts.
func TestLayoutsConform(t *testing.T) {
	for _, l := range []writer.Layout{writer.NXtomo{}, writer.CXI{}} {
		writertest.Layout(t, l)
	}
}
