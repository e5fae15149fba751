package scan

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/receive"
	"h5ingest/registry"
	"h5ingest/scan/scantest"
	"h5ingest/source/capture"
	"h5ingest/source/fabric"
	"h5ingest/stock"
)

// stockStages returns a registry of h5ingest's own stages, for tests
// without a testing.T at hand.
func stockStages() *registry.Registry {
	r := registry.New()
	if err := stock.Register(r); err != nil {
		panic(err)
	}
	return r
}

// TestSourcesChosenByTransport checks that acquire and replay open the
// receiver and the recordings of the source that source.transport
// names, through its registry entry: a facility's source replaces both,
// and a source without either is refused for that command.
func TestSourcesChosenByTransport(t *testing.T) {
	stages := scantest.Stages(t)
	var listened, opened atomic.Int32
	err := stages.AddSource(registry.Source{Name: "beamline", Doc: "the fabric receiver, counted",
		Listen: func(s receive.Setup) (receive.Listener, error) { listened.Add(1); return fabric.Open(s) },
		Open: func(path string) (*capture.Reader, frame.Format, error) {
			opened.Add(1)
			return capture.OpenScan(path)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := stages.AddSource(registry.Source{Name: "silent", Doc: "neither listens nor replays"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	captured := scantest.SimulateModule(t, scantest.SmallFormat, 3, 0)

	p := testProfile(t, stages, scantest.SmallFormat, map[string]any{"source.transport": "beamline"})
	if r := replayInto(t, context.Background(), p, stages, plan.Plan{}, filepath.Join(dir, "replayed.h5"), captured); r.err != nil {
		t.Fatalf("replay: %v", r.said())
	}
	if opened.Load() != 1 {
		t.Errorf("the source's Open ran %d times for one capture, want 1", opened.Load())
	}
	a, err := NewAcquisition(acquireOptions(t, p, stages, plan.Plan{}, filepath.Join(dir, "acquired.h5"), scantest.FreeAddr(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if listened.Load() != 1 {
		t.Errorf("the source's Listen ran %d times, want 1", listened.Load())
	}

	silent := testProfile(t, stages, scantest.SmallFormat, map[string]any{"source.transport": "silent"})
	if r := replayInto(t, context.Background(), silent, stages, plan.Plan{}, filepath.Join(dir, "none.h5"), captured); r.err == nil ||
		!strings.Contains(r.err.Error(), "key source.transport: silent records nothing a replay reads") {
		t.Errorf("replay of a source that records nothing: %v", r.err)
	}
	_, err = NewAcquisition(acquireOptions(t, silent, stages, plan.Plan{}, filepath.Join(dir, "none.h5"), scantest.FreeAddr(t)))
	if err == nil || !strings.Contains(err.Error(), "key source.transport: silent cannot receive a scan") {
		t.Errorf("acquire of a source that cannot receive: %v", err)
	}
}

// TestStreamCompression checks that the live stream carries a codec's
// chunks as its registry entry says, a facility's codec's too, and
// refuses a codec that has no Stream V2 encoding.
func TestStreamCompression(t *testing.T) {
	stages := scantest.Stages(t)
	if err := stages.AddCodec(registry.Codec{Name: "lz4-fast", Doc: "a facility's LZ4", Stream: "lz4",
		New: func(elemSize, _ int) (compress.Codec, error) { return compress.New("lz4", elemSize, 0) }}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ codec, want, err string }{
		{"bslz4", "bslz4", ""}, {"lz4", "lz4", ""}, {"none", "", ""}, {"lz4-fast", "lz4", ""},
		{"bszstd", "", "compression bszstd has no Stream V2 encoding"},
		{"deflate", "", "compression deflate has no Stream V2 encoding"},
	} {
		got, err := streamCompression(stages, tc.codec)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %q (%v), want %q (%q)", tc.codec, got, err, tc.want, tc.err)
		}
	}
}
