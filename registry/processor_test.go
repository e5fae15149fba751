package registry_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/registry"
)

// gainOptions are the options of a test processor, gain.
type gainOptions struct {
	Gain float64 `mapstructure:"gain"`
}

// check refuses a gain that would blank every image.
func (o gainOptions) check() error {
	if o.Gain <= 0 {
		return fmt.Errorf("gain: %v, want above 0", o.Gain)
	}
	return nil
}

type stage struct {
	opts gainOptions
	scan pipeline.Scan
}

func (s *stage) Processor() (pipeline.Processor, error) { return nil, errors.New("not in this test") }
func (s *stage) Close() error                           { return nil }

type nop struct{}

func (nop) Process(int, frame.Format, []byte) error { return nil }

// testProcessors returns h5ingest's own stages and three processors:
// gain (typed options with a check, default 1), nop (New) and scanonly
// (Start, no options).
func testProcessors(t *testing.T) *registry.Registry {
	t.Helper()
	r := stockStages(t)
	start := func(o gainOptions, s pipeline.Scan) (pipeline.Stage, error) { return &stage{o, s}, nil }
	for _, p := range []registry.Processor{
		{Name: "gain", Start: registry.Start(func() gainOptions { return gainOptions{Gain: 1} }, gainOptions.check, start)},
		{Name: "nop", New: func(frame.Format) (pipeline.Processor, error) { return nop{}, nil }},
		{Name: "scanonly", Start: registry.Start(nil, nil, func(_ struct{}, s pipeline.Scan) (pipeline.Stage, error) {
			return &stage{scan: s}, nil
		})},
	} {
		if err := r.AddProcessor(p); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// TestStartProcessor starts processors of each kind from profile entries:
// options decoded over the defaults into the typed struct and handed to
// start with the scan, and a processor of New made a stage of its own per
// worker.
func TestStartProcessor(t *testing.T) {
	r := testProcessors(t)
	scan := pipeline.Scan{Frames: 3, ImageKeys: []int8{2, 1, 0}}
	for _, c := range []struct {
		entry config.Processor
		gain  float64
	}{
		{config.Processor{Name: "gain", Options: map[string]any{"gain": 2.5}}, 2.5},
		{config.Processor{Name: "gain", Options: map[string]any{"gain": 3}}, 3},
		{config.Processor{Name: "gain"}, 1},
		{config.Processor{Name: "scanonly"}, 0},
	} {
		st, err := r.StartProcessor(0, c.entry, scan)
		if err != nil {
			t.Fatalf("%v: %v", c.entry, err)
		}
		if s := st.(*stage); s.opts.Gain != c.gain || len(s.scan.ImageKeys) != 3 {
			t.Errorf("%v: started with %+v and %+v, want gain %v", c.entry, s.opts, s.scan, c.gain)
		}
	}
	st, err := r.StartProcessor(1, config.Processor{Name: "nop"}, scan)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := st.Processor(); err != nil || p != (nop{}) {
		t.Errorf("New's processor: %v, %v", p, err)
	}
	if err := st.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestProcessorOptionsRefused checks that the entries a processor cannot
// take are refused alike by CheckProcessor, by the names a profile is
// loaded with (profiles check, the scan service's arm request) and when
// the scan starts, each naming the key.
func TestProcessorOptionsRefused(t *testing.T) {
	r := testProcessors(t)
	for _, c := range []struct {
		entry config.Processor
		want  string
	}{
		{config.Processor{Name: "gain", Options: map[string]any{"gain": 0}}, "key output.processors[0]: processor gain: gain: 0, want above 0"},
		{config.Processor{Name: "gain", Options: map[string]any{"gain": -2.5}}, "key output.processors[0]: processor gain: gain: -2.5, want above 0"},
		{config.Processor{Name: "gain", Options: map[string]any{"gian": 2}}, "key output.processors[0].gian: unknown option of processor gain (it knows gain)"},
		{config.Processor{Name: "gain", Options: map[string]any{"gain": "high"}}, "key output.processors[0].gain:"},
		{config.Processor{Name: "nop", Options: map[string]any{"gain": 2}}, "processor nop takes no options"},
		{config.Processor{Name: "scanonly", Options: map[string]any{"gain": 2}}, "processor scanonly takes no options"},
		{config.Processor{Name: "blur"}, `"blur" is not registered`},
	} {
		t.Run(c.entry.String(), func(t *testing.T) {
			if err := r.CheckProcessor(0, c.entry); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("CheckProcessor: %v, want %q", err, c.want)
			}
			if _, err := r.StartProcessor(0, c.entry, pipeline.Scan{}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("StartProcessor: %v, want %q", err, c.want)
			}
			if c.entry.Name == "blur" {
				return // config refuses the name itself
			}
			profile := "output:\n  processors: [" + c.entry.String() + "]\n"
			path := filepath.Join(t.TempDir(), "p.yaml")
			if err := os.WriteFile(path, []byte(profile), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := config.Load(path, r.Names()); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("config.Load of %q: %v, want %q", profile, err, c.want)
			}
		})
	}
}

// TestProcessorRefused checks the processor entries a registry refuses.
func TestProcessorRefused(t *testing.T) {
	r := registry.New()
	newNop := func(frame.Format) (pipeline.Processor, error) { return nop{}, nil }
	start := func(gainOptions, pipeline.Scan) (pipeline.Stage, error) { return nil, nil }
	for _, c := range []struct {
		p    registry.Processor
		want string
	}{
		{registry.Processor{Name: "x"}, "no New or Start"},
		{registry.Processor{Name: "x", New: newNop, Start: registry.Start(nil, nil, start)}, "sets one"},
		{registry.Processor{Name: "x", Start: registry.Start(nil, nil,
			func(*gainOptions, pipeline.Scan) (pipeline.Stage, error) { return nil, nil })}, "options of type *registry_test.gainOptions: want a struct"},
		{registry.Processor{Name: "x", Start: registry.Start(nil, gainOptions.check, nil)}, "no start function"},
	} {
		if err := r.AddProcessor(c.p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}

// levelOptions are options of a slice and a map, whose defaults a decoded
// entry must leave as they were.
type levelOptions struct {
	Levels []int          `mapstructure:"levels"`
	Names  map[string]int `mapstructure:"names"`
}

// TestProcessorDefaultsNotShared decodes entries of slice and map options
// one after another: each starts from the defaults, not from what the
// entry before it set.
func TestProcessorDefaultsNotShared(t *testing.T) {
	r := registry.New()
	var got []levelOptions
	defaults := func() levelOptions { return levelOptions{Levels: []int{1, 2, 3}, Names: map[string]int{"a": 1}} }
	if err := r.AddProcessor(registry.Processor{Name: "levels", Start: registry.Start(defaults, nil,
		func(o levelOptions, _ pipeline.Scan) (pipeline.Stage, error) {
			got = append(got, o)
			return &stage{}, nil
		})}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []config.Processor{
		{Name: "levels", Options: map[string]any{"levels": []any{7, 8, 9}, "names": map[string]any{"b": 2}}},
		{Name: "levels"},
	} {
		if _, err := r.StartProcessor(0, e, pipeline.Scan{}); err != nil {
			t.Fatal(err)
		}
	}
	want := []levelOptions{{[]int{7, 8, 9}, map[string]int{"a": 1, "b": 2}}, defaults()}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("started with %v, want %v", got, want)
	}
}
