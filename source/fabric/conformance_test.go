package fabric

import (
	"bytes"
	"context"
	"testing"
	"time"

	"h5ingest/pipeline"
	"h5ingest/pipeline/pipelinetest"
	"h5ingest/source/capture"
)

// TestStreamConforms runs the source conformance suite on a stream, the
// frames sent by a sender over the tcp provider, in both transfer modes.
func TestStreamConforms(t *testing.T) {
	for _, mode := range []Mode{ModeWrite, ModeSend} {
		t.Run(mode.String(), func(t *testing.T) {
			pipelinetest.Source(t, func(t *testing.T, frames []*pipeline.Frame) pipeline.Source {
				var buf bytes.Buffer
				w, err := capture.NewWriter(&buf, testMeta)
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
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				t.Cleanup(cancel)
				l := testListen(t, testConfig())
				cfg := senderConfig(l.Addr().String(), mode, 0, len(frames))
				cfg.Hello.Format = frames[0].Header.Format
				done := sendCapture(ctx, t, cfg, buf.Bytes(), 0)
				s, err := l.Accept(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					s.Close()
					if r := <-done; r.err != nil {
						t.Errorf("sender: %v", r.err)
					}
				})
				return s
			})
		})
	}
}
