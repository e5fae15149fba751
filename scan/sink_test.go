package scan

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/pipeline/pipelinetest"
	"h5ingest/writer"
)

// TestFileSinkConforms runs the sink suite on the sink every scan writes
// its file through, reading what it stored back from the file.
func TestFileSinkConforms(t *testing.T) {
	pipelinetest.Sink(t, func(t *testing.T, frames int) (pipeline.Sink, func() pipelinetest.Stored) {
		codec, err := compress.New("bslz4", 4, 0)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "sink.h5")
		w, err := writer.Create(writer.Options{Path: path, Layout: writer.NXtomo{}, Frames: frames, Height: 32, Width: 32,
			ElemSize: 4, Filters: codec.Filters(), FlushInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return fileSink{w}, func() pipelinetest.Stored {
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := writer.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			records, err := r.Records()
			if err != nil {
				t.Fatal(err)
			}
			st := pipelinetest.Stored{Chunks: map[int][]byte{}, Records: map[int]frame.Record{}}
			for n, rec := range records {
				st.Records[n] = rec
				data, _, err := r.ReadChunk(n, nil)
				switch {
				case errors.Is(err, writer.ErrNoChunk):
				case err != nil:
					t.Fatalf("frame %d: %v", n, err)
				default:
					st.Chunks[n] = data
				}
			}
			return st
		}
	})
}
