package scan

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"h5ingest/frame"
	"h5ingest/scan/scantest"
	"h5ingest/source/capture"
)

// TestInspect summarises a replayed file, its capture and the capture cut
// short.
func TestInspect(t *testing.T) {
	src := scantest.SimulateModule(t, scantest.SmallFormat, 6, 0)
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.SmallFormat, map[string]any{"plan.darks": 1, "plan.flats": 1, "plan.projections": 4})
	pl, err := p.Plan.Plan()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "scan.h5")
	files, err := NewFiles(p, Names{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Replay(context.Background(), ReplayOptions{Options: Options{Profile: p, Plan: pl, Stages: stages}, Files: files, Captures: []string{src}}); err != nil {
		t.Fatal(err)
	}
	rep, err := Inspect(stockStages(), out)
	if err != nil {
		t.Fatal(err)
	}
	f := rep.File
	if rep.Path != out || f == nil || rep.Master != nil || rep.Capture != nil {
		t.Fatalf("report %+v, want a module file's", rep)
	}
	frameSize := int64(32 * 96 * 4)
	if f.Layout != "nxtomo" || f.SWMR || f.Frames != 6 || f.Height != 32 || f.Width != 96 || f.ElemSize != 4 || f.DecodedBytes != 6*frameSize {
		t.Errorf("file %s (SWMR %v) %d x %d x %d of %d bytes, %d decoded; want nxtomo, 6 x 32 x 96 of 4 bytes",
			f.Layout, f.SWMR, f.Frames, f.Height, f.Width, f.ElemSize, f.DecodedBytes)
	}
	if f.Codec != "bslz4" || len(f.Filters) != 1 || f.Filters[0].ID != 32008 || f.Filters[0].Name == "" {
		t.Errorf("codec %q, filters %v; want bslz4 reading bitshuffle (32008), named", f.Codec, f.Filters)
	}
	if f.StoredBytes <= 0 || f.StoredBytes >= f.DecodedBytes || f.Ratio != float64(f.DecodedBytes)/float64(f.StoredBytes) {
		t.Errorf("%d bytes stored of %d, ratio %v", f.StoredBytes, f.DecodedBytes, f.Ratio)
	}
	if f.Counts != (frame.Counts{OK: 6}) || f.Problems != "" || !strings.HasPrefix(f.Plan, "1 darks, 1 flats, 4 projections at 0 to") {
		t.Errorf("frames %v, problems %q, plan %q; want 6 ok, none, the replayed plan", f.Counts, f.Problems, f.Plan)
	}
	if f.SpanFrames != 6 || f.Span <= 0 {
		t.Errorf("time span %v over %d frames, want one over 6", f.Span, f.SpanFrames)
	}

	rep, err = Inspect(stockStages(), src)
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Capture
	if rep.Path != src || c == nil || rep.File != nil || rep.Master != nil {
		t.Fatalf("report %+v, want a capture's", rep)
	}
	info, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	m := c.Tally.Modules[0]
	if c.Err != nil || c.Size != info.Size() || c.Tally.Records != 6 || len(c.Tally.Modules) != 1 || m == nil || m.Records != 6 || m.First != 0 || m.Last != 5 {
		t.Errorf("capture of %d bytes (%v): %+v, want %d bytes, 6 frames of module 0, numbered 0 to 5", c.Size, c.Err, c.Tally, info.Size())
	}
	if c.PlanErr != nil || c.Plan == nil || c.Plan.Frames() != 6 {
		t.Errorf("capture's plan %+v (%v), want the simulator's of 6 frames", c.Plan, c.PlanErr)
	}
	if err := os.Truncate(src, info.Size()-100); err != nil {
		t.Fatal(err)
	}
	rep, err = Inspect(stockStages(), src)
	if !errors.Is(err, ErrIncomplete) || rep == nil || rep.Capture == nil || !errors.Is(rep.Capture.Err, capture.ErrTruncated) || rep.Capture.Tally.Records != 5 {
		t.Errorf("a cut capture: %v, report %+v; want ErrIncomplete and the 5 frames before the cut", err, rep)
	}
}
