package instrument

import (
	"bytes"
	"testing"

	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/pipeline/pipelinetest"
)

// storeSink keeps what it is given, copying each chunk.
type storeSink struct{ st pipelinetest.Stored }

func (s *storeSink) WriteChunk(n int, c []byte) error {
	s.st.Chunks[n] = bytes.Clone(c)
	return nil
}

func (s *storeSink) SetRecord(n int, r frame.Record) error { s.st.Records[n] = r; return nil }

// TestSinkConforms runs the sink suite through the counting sink, which
// must hand every chunk and record on as it gets them.
func TestSinkConforms(t *testing.T) {
	pipelinetest.Sink(t, func(t *testing.T, frames int) (pipeline.Sink, func() pipelinetest.Stored) {
		store := &storeSink{pipelinetest.Stored{Chunks: map[int][]byte{}, Records: map[int]frame.Record{}}}
		return New().Sink(store), func() pipelinetest.Stored { return store.st }
	})
}
