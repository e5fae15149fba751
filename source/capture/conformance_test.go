package capture_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"h5ingest/pipeline"
	"h5ingest/pipeline/pipelinetest"
	"h5ingest/source/capture"
)

// replayOf returns a capture source replaying frames from memory.
func replayOf(t *testing.T, frames []*pipeline.Frame) *capture.Source {
	t.Helper()
	r, err := capture.NewReader(bytes.NewReader(captureOf(t, frames)))
	if err != nil {
		t.Fatal(err)
	}
	return capture.NewSource(r, len(frames[0].Payload))
}

// mappedReplayOf returns a capture source replaying frames from a file it
// maps into memory.
func mappedReplayOf(t *testing.T, frames []*pipeline.Frame) *capture.Source {
	t.Helper()
	path := filepath.Join(t.TempDir(), "scan.pmcap")
	if err := os.WriteFile(path, captureOf(t, frames), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Mapped() {
		t.Fatalf("%s is not mapped", path)
	}
	t.Cleanup(func() { r.Close() })
	return capture.NewSource(r, len(frames[0].Payload))
}

// captureOf returns the capture file of frames.
func captureOf(t *testing.T, frames []*pipeline.Frame) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := capture.NewWriter(&buf, capture.Metadata{Profile: "conformance"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		if err := w.WriteFrame(&f.Header, f.Payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestSourcesConform runs the source conformance suite on a capture
// replay, alone and through a Demux of one module, as replay runs it.
func TestSourcesConform(t *testing.T) {
	t.Run("capture", func(t *testing.T) {
		pipelinetest.Source(t, func(t *testing.T, frames []*pipeline.Frame) pipeline.Source { return replayOf(t, frames) })
	})
	t.Run("mapped", func(t *testing.T) {
		pipelinetest.Source(t, func(t *testing.T, frames []*pipeline.Frame) pipeline.Source { return mappedReplayOf(t, frames) })
	})
	t.Run("demux", func(t *testing.T) {
		pipelinetest.Source(t, func(t *testing.T, frames []*pipeline.Frame) pipeline.Source {
			d := pipeline.NewDemux(replayOf(t, frames), []uint16{0}, 1)
			go d.Run(context.Background())
			return d.Module(0)
		})
	})
}
