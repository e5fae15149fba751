package registry_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"h5ingest/compress"
	"h5ingest/gpu"
	"h5ingest/registry"
	"h5ingest/stock"
	"h5ingest/writer"
)

func TestBuiltin(t *testing.T) {
	r := registry.New()
	if err := stock.Register(r); err != nil {
		t.Fatal(err)
	}
	n := r.Names()
	for _, tc := range []struct {
		kind      string
		got, want []string
	}{
		{"sources", n.Transports, []string{"fabric", "roce"}},
		{"codecs", n.Codecs, compress.Names()},
		{"layouts", n.Layouts, []string{writer.LayoutNXtomo, writer.LayoutCXI}},
	} {
		if !slices.Equal(tc.got, tc.want) {
			t.Errorf("%s %v, want %v", tc.kind, tc.got, tc.want)
		}
	}
	for _, e := range r.Entries() {
		if e.Doc == "" {
			t.Errorf("%s %s has no doc", e.Kind, e.Name)
		}
	}
	c, ok := r.Codec("bslz4")
	if !ok {
		t.Fatal("no bslz4")
	}
	codec, err := c.New(4, 0)
	if err != nil || len(codec.Filters()) == 0 {
		t.Errorf("bslz4 codec %v, %v", codec, err)
	}
	if l, ok := r.Layout("cxi"); !ok || l.New().StackPath() != "/entry_1/instrument_1/detector_1/data" {
		t.Errorf("cxi layout %v %v", l, ok)
	}
	if err := stock.Register(r); err == nil || !strings.Contains(err.Error(), "taken") {
		t.Errorf("built-ins registered twice: %v", err)
	}
}

// noCodec is a codec's New that makes none.
func noCodec(int, int) (compress.Codec, error) { return nil, errors.New("no codec") }

func TestRefusedEntries(t *testing.T) {
	r := registry.New()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"no name", r.AddSource(registry.Source{}), "no name"},
		{"codec without New", r.AddCodec(registry.Codec{Name: "x"}), "no New"},
		{"backend without New", r.AddBackend(registry.Backend{Name: "x"}), "no New"},
		{"processor without New", r.AddProcessor(registry.Processor{Name: "x"}), "no New"},
		{"name with a space", r.AddCodec(registry.Codec{Name: "a b", New: noCodec}), "a name is letters"},
		{"name with a comma", r.AddCodec(registry.Codec{Name: "x,y", New: noCodec}), "a name is letters"},
		{"name like a flag", r.AddCodec(registry.Codec{Name: "-v", New: noCodec}), "a name is letters"},
		{"name with a trailing space", r.AddCodec(registry.Codec{Name: "lz4 ", New: noCodec}), "a name is letters"},
		{"layout named otherwise", r.AddLayout(registry.Layout{Name: "nexus", New: func() writer.Layout { return writer.NXtomo{} }}), `says its name is "nxtomo"`},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, tc.err, tc.want)
		}
	}
	if len(r.Entries()) != 0 {
		t.Errorf("refused entries registered: %v", r.Entries())
	}
}

// TestReferenceBackend names the first backend registered as the
// reference, and none in a registry without one.
func TestReferenceBackend(t *testing.T) {
	newCPU := func(o gpu.Options) (gpu.Backend, error) { return gpu.New("cpu", o) }
	r := registry.New()
	for _, b := range []registry.Backend{
		{Name: "a", New: newCPU},
		{Name: "b", New: newCPU, Reference: true},
		{Name: "c", New: newCPU, Reference: true},
	} {
		if err := r.AddBackend(b); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.ReferenceBackend(); got != "b" {
		t.Errorf("reference backend %q, want b", got)
	}
	if registry.New().ReferenceBackend() != "" {
		t.Error("an empty registry has a reference backend")
	}
}
