package registry_test

import (
	"errors"
	"strings"
	"testing"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/registry"
)

type opts struct {
	Gain float64 `mapstructure:"gain"`
}

type stage struct {
	opts *opts
	scan pipeline.Scan
}

func (s *stage) Processor() (pipeline.Processor, error) { return nil, errors.New("not in this test") }
func (s *stage) Close() error                           { return nil }

type nop struct{}

func (nop) Process(int, frame.Format, []byte) error { return nil }

// TestStartProcessor starts processors of both kinds from profile
// entries: options decoded over the defaults and handed to Start with the
// scan, unknown options refused naming the key, and a processor of New
// made a stage of its own per worker.
func TestStartProcessor(t *testing.T) {
	r := registry.New()
	for _, p := range []registry.Processor{
		{Name: "gain", Options: func() any { return &opts{Gain: 1} },
			Start: func(o any, s pipeline.Scan) (pipeline.Stage, error) { return &stage{o.(*opts), s}, nil }},
		{Name: "nop", New: func(frame.Format) (pipeline.Processor, error) { return nop{}, nil }},
	} {
		if err := r.AddProcessor(p); err != nil {
			t.Fatal(err)
		}
	}
	scan := pipeline.Scan{Frames: 3, ImageKeys: []int8{2, 1, 0}}
	st, err := r.StartProcessor(0, config.Processor{Name: "gain", Options: map[string]any{"gain": 2.5}}, scan)
	if err != nil {
		t.Fatal(err)
	}
	if s := st.(*stage); s.opts.Gain != 2.5 || len(s.scan.ImageKeys) != 3 {
		t.Errorf("started with %+v and %+v", *s.opts, s.scan)
	}
	st, err = r.StartProcessor(0, config.Processor{Name: "gain"}, scan)
	if err != nil || st.(*stage).opts.Gain != 1 {
		t.Errorf("without options: %v, %v", st, err)
	}
	st, err = r.StartProcessor(1, config.Processor{Name: "nop"}, scan)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := st.Processor(); err != nil || p != (nop{}) {
		t.Errorf("New's processor: %v, %v", p, err)
	}
	if err := st.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for _, c := range []struct {
		entry config.Processor
		want  string
	}{
		{config.Processor{Name: "gain", Options: map[string]any{"gian": 2}}, "key output.processors[3].gian: unknown option of processor gain (it knows gain)"},
		{config.Processor{Name: "nop", Options: map[string]any{"gain": 2}}, "processor nop takes no options"},
		{config.Processor{Name: "blur"}, `"blur" is not registered`},
	} {
		if _, err := r.StartProcessor(3, c.entry, scan); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.entry, err, c.want)
		}
	}
	if o, ok := r.Names().ProcessorOptions("gain").(*opts); !ok || o.Gain != 1 {
		t.Errorf("Names().ProcessorOptions(gain) = %v", r.Names().ProcessorOptions("gain"))
	}
}

// TestProcessorRefused checks the processor entries a registry refuses.
func TestProcessorRefused(t *testing.T) {
	r := registry.New()
	newNop := func(frame.Format) (pipeline.Processor, error) { return nop{}, nil }
	start := func(any, pipeline.Scan) (pipeline.Stage, error) { return nil, nil }
	for _, c := range []struct {
		p    registry.Processor
		want string
	}{
		{registry.Processor{Name: "x"}, "no New or Start"},
		{registry.Processor{Name: "x", New: newNop, Start: start}, "sets one"},
		{registry.Processor{Name: "x", New: newNop, Options: func() any { return &opts{} }}, "Options without Start"},
	} {
		if err := r.AddProcessor(c.p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want %q", err, c.want)
		}
	}
}
