package pipeline

import (
	"context"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"h5ingest/compress"
	"h5ingest/gpu"
)

// TestPipelineLogsAggregated checks that a run of bad frames gives one log
// line per kind of problem, with counts, by the time Run returns.
func TestPipelineLogsAggregated(t *testing.T) {
	backend, err := gpu.New("cpu", gpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	obs, logs := observer.New(zapcore.WarnLevel)
	p, err := New(Config{
		Format:   testFormat,
		Frames:   33, // 30, 31 and 32 never arrive
		Backend:  backend,
		NewCodec: func() (compress.Codec, error) { return compress.New("none", testFormat.PixelSize(), 0) },
		Log:      zap.New(obs),
	})
	if err != nil {
		t.Fatal(err)
	}
	src := &sliceSource{}
	for n := range uint64(30) {
		f := testFrame(t, testFormat, n)
		if n >= 10 {
			f.Payload[3] ^= 0x10 // 20 payload CRC mismatches, frames 10..29
		}
		src.frames = append(src.frames, f)
	}
	for _, n := range []uint64{2, 4, 6} {
		src.frames = append(src.frames, testFrame(t, testFormat, n)) // duplicates
	}
	if _, err := p.Run(context.Background(), src, newMemSink()); err != nil {
		t.Fatal(err)
	}
	want := map[string][3]any{
		"payload CRC mismatch": {int64(20), uint64(10), uint64(29)},
		"frame dropped":        {int64(3), uint64(2), uint64(6)},
		"frames missing":       {int64(3), int64(30), int64(32)},
	}
	if logs.Len() != len(want) {
		t.Fatalf("%d log lines, want %d: %v", logs.Len(), len(want), logs.AllUntimed())
	}
	for _, e := range logs.All() {
		m := e.ContextMap()
		w, ok := want[e.Message]
		if !ok || m["count"] != w[0] || m["first"] != w[1] || m["last"] != w[2] {
			t.Errorf("%q %v, want count, first, last %v", e.Message, m, w)
		}
	}
}
