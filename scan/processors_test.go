package scan

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/scan/scantest"
)

// tally is a processor stage whose workers share one count of the frames
// they saw, by image key; it records what it was told and when.
type tally struct {
	scan    pipeline.Scan
	workers atomic.Int32
	frames  atomic.Int64
	mu      sync.Mutex
	byKey   map[int8]int
	closed  int
	// after counts Process calls after Close: there must be none.
	after atomic.Int32
	fail  bool
}

type tallyOptions struct {
	Fail bool `mapstructure:"fail"`
}

func (s *tally) Processor() (pipeline.Processor, error) {
	s.workers.Add(1)
	return tallyWorker{s}, nil
}

func (s *tally) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed++
	if s.fail {
		return errors.New("reference never made")
	}
	return nil
}

type tallyWorker struct{ s *tally }

func (w tallyWorker) Process(n int, _ frame.Format, _ []byte) error {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed > 0 {
		s.after.Add(1)
	}
	s.frames.Add(1)
	s.byKey[s.scan.ImageKeys[n]]++
	return nil
}

// TestProcessorLifecycle replays a tomography scan through a processor
// registered with options and Start: it is started once, told the scan's
// format and plan (each frame's image key), makes one processor per
// worker that share its state, and is closed once after the last frame;
// an error of Close is reported and leaves the file whole.
func TestProcessorLifecycle(t *testing.T) {
	for _, fail := range []bool{false, true} {
		stages := scantest.Stages(t)
		var started []*tally
		if err := stages.AddProcessor(registry.Processor{
			Name: "tally",
			Start: registry.Start(nil, nil, func(o tallyOptions, s pipeline.Scan) (pipeline.Stage, error) {
				st := &tally{scan: s, byKey: map[int8]int{}, fail: o.Fail}
				started = append(started, st)
				return st, nil
			}),
		}); err != nil {
			t.Fatal(err)
		}
		cfg := simScan(scantest.SmallFormat, 0)
		cfg.Plan = plan.Tomo(2, 3, 10, 0, 180)
		capPath, _ := scantest.Simulate(t, cfg)
		p := testProfile(t, stages, scantest.SmallFormat, nil)
		p.Output.Processors = []config.Processor{{Name: "tally", Options: map[string]any{"fail": fail}}}
		out := filepath.Join(t.TempDir(), "scan.h5")
		r := replayInto(t, context.Background(), p, stages, cfg.Plan, out, capPath)
		if r.err != nil {
			t.Fatalf("replay: %v\n%s", r.err, r.errs)
		}
		if len(started) != 1 {
			t.Fatalf("started %d times, want once", len(started))
		}
		st := started[0]
		if st.scan.Format != scantest.SmallFormat || st.scan.Frames != 15 || !slices.Equal(st.scan.ImageKeys, cfg.Plan.ImageKeys()) {
			t.Errorf("told of %v, %d frames, keys %v", st.scan.Format, st.scan.Frames, st.scan.ImageKeys)
		}
		if st.workers.Load() < 1 || st.frames.Load() != 15 {
			t.Errorf("%d workers saw %d frames, want 15 in all", st.workers.Load(), st.frames.Load())
		}
		if st.byKey[plan.DarkField] != 2 || st.byKey[plan.FlatField] != 3 || st.byKey[plan.Projection] != 10 {
			t.Errorf("frames by key %v", st.byKey)
		}
		if st.closed != 1 || st.after.Load() != 0 {
			t.Errorf("closed %d times, %d frames after, want once and none", st.closed, st.after.Load())
		}
		said := strings.Contains(r.errs, "processor tally: reference never made")
		if said != fail {
			t.Errorf("fail %v: warnings %q", fail, r.errs)
		}
		if msg, err := verified(out); err != nil {
			t.Errorf("verify: %v\n%s", err, msg)
		}
	}
}

// TestProcessorStartRefused checks that a processor that cannot start
// fails the scan before its file is made, naming the key.
func TestProcessorStartRefused(t *testing.T) {
	stages := scantest.Stages(t)
	cfg := simScan(scantest.SmallFormat, 4)
	capPath, _ := scantest.Simulate(t, cfg)
	p := testProfile(t, stages, scantest.SmallFormat, nil)
	p.Output.Processors = []config.Processor{{Name: "flatfield", Options: map[string]any{"bins": 2}}}
	out := filepath.Join(t.TempDir(), "scan.h5")
	r := replayInto(t, context.Background(), p, stages, cfg.Plan, out, capPath)
	if r.err == nil || !strings.Contains(r.err.Error(), "output.processors[0].bins") {
		t.Fatalf("replay: %v, want the unknown option named", r.err)
	}
	// The plan has no flats: flatfield cannot start.
	p.Output.Processors = []config.Processor{{Name: "flatfield"}}
	r = replayInto(t, context.Background(), p, stages, cfg.Plan, out, capPath)
	if r.err == nil || !strings.Contains(r.err.Error(), "processor flatfield: the plan has no flat field") {
		t.Fatalf("replay: %v, want flatfield's refusal", r.err)
	}
	// A facility's processor whose Start or whose stage gives nothing is
	// refused by name, not a crash.
	for _, tt := range []struct {
		name  string
		start func(struct{}, pipeline.Scan) (pipeline.Stage, error)
		want  string
	}{
		{"nostage", func(struct{}, pipeline.Scan) (pipeline.Stage, error) { return nil, nil }, "processor nostage: its Start returned no stage"},
		{"noproc", func(struct{}, pipeline.Scan) (pipeline.Stage, error) { return nilStage{}, nil }, "processor noproc: its stage gave no processor"},
	} {
		if err := stages.AddProcessor(registry.Processor{Name: tt.name, Start: registry.Start(nil, nil, tt.start)}); err != nil {
			t.Fatal(err)
		}
		p.Output.Processors = []config.Processor{{Name: tt.name}}
		r = replayInto(t, context.Background(), p, stages, cfg.Plan, out, capPath)
		if r.err == nil || !strings.Contains(r.err.Error()+r.errs, tt.want) {
			t.Errorf("replay with %s: %v, notes %q; want %q", tt.name, r.err, r.errs, tt.want)
		}
	}
}

// nilStage is a processor stage that gives no processor.
type nilStage struct{}

func (nilStage) Processor() (pipeline.Processor, error) { return nil, nil }
func (nilStage) Close() error                           { return nil }
