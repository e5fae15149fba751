package registry_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"h5ingest/compress"
	"h5ingest/gpu"
	"h5ingest/registry"
	"h5ingest/stock"
)

// stockStages returns a registry of h5ingest's own stages.
func stockStages(t *testing.T) *registry.Registry {
	t.Helper()
	r := registry.New()
	if err := stock.Register(r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCodecEntriesAgree checks that what each built-in codec's entry says
// is what its codec does: the filter that ends its pipeline, its filters'
// optional flag, its bit transpose (compress.Preshuffled), and that the
// registry reads a file of it back into a codec of the same pipeline.
func TestCodecEntriesAgree(t *testing.T) {
	r := stockStages(t)
	for _, name := range r.Names().Codecs {
		e, _ := r.Codec(name)
		for _, level := range []int{0, e.MaxLevel} {
			c, err := e.New(2, level)
			if err != nil {
				t.Fatalf("%s at level %d: %v", name, level, err)
			}
			fs := c.Filters()
			last := 0
			if len(fs) > 0 {
				last = fs[len(fs)-1].ID
			}
			_, transposes := c.(compress.Preshuffled)
			switch {
			case last != e.Filter:
				t.Errorf("%s: its pipeline ends in filter %d, its entry says %d", name, last, e.Filter)
			case len(fs) > 0 && fs[len(fs)-1].Optional != e.Optional:
				t.Errorf("%s: its filter's optional flag %v, its entry says %v", name, fs[len(fs)-1].Optional, e.Optional)
			case transposes != e.Transpose:
				t.Errorf("%s: bit transpose %v, its entry says %v", name, transposes, e.Transpose)
			}
			back, err := r.ReadCodec(fs, 2)
			if err != nil {
				t.Fatalf("%s: the registry does not read its own pipeline %v back: %v", name, fs, err)
			}
			if got, want := fmt.Sprint(flat(back.Filters())), fmt.Sprint(flat(fs)); got != want {
				t.Errorf("%s: read back as %v, written as %v", name, back.Filters(), fs)
			}
			if got := r.CodecOf(fs, 2); got != name {
				t.Errorf("the codec of %s's pipeline is %q", name, got)
			}
		}
	}
	if e, _ := r.Codec("bszstd"); !strings.Contains(e.Warning, "bitshuffle older than 0.4") {
		t.Errorf("bszstd's entry carries the warning %q", e.Warning)
	}
}

// flat returns the ids and values of a pipeline in one list, to compare.
func flat(fs []compress.Filter) []uint32 {
	var out []uint32
	for _, f := range fs {
		out = append(append(out, uint32(f.ID)), f.Values...)
	}
	return out
}

// TestReadCodecFindsAnyRegistered checks that a codec of a filter
// h5ingest does not know is found by its filter once registered, and
// that a pipeline no codec reads is refused naming its filters.
func TestReadCodecFindsAnyRegistered(t *testing.T) {
	r := stockStages(t)
	unknown := []compress.Filter{{ID: 32015, Values: []uint32{3}}}
	if _, err := r.ReadCodec(unknown, 2); err == nil || !strings.Contains(err.Error(), "no registered codec reads the filter pipeline [32015]") {
		t.Errorf("a pipeline of an unregistered filter: %v", err)
	}
	var got []compress.Filter
	err := r.AddCodec(registry.Codec{Name: "zstd", Doc: "plain zstd", Filter: 32015, Optional: true,
		New: func(elemSize, _ int) (compress.Codec, error) { return compress.New("lz4", elemSize, 0) },
		Read: func(fs []compress.Filter, elemSize int) (compress.Codec, error) {
			got = fs
			return compress.New("lz4", elemSize, 0)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadCodec(unknown, 2); err != nil || len(got) != 1 || got[0].ID != 32015 {
		t.Errorf("the registered reader got %v (%v)", got, err)
	}
	if name := r.CodecOf(unknown, 2); name != "zstd" {
		t.Errorf("the codec of filter 32015 is %q", name)
	}
	bad := []compress.Filter{{ID: compress.FilterBitshuffle, Values: []uint32{0, 5, 2, 0, 9}}}
	if _, err := r.ReadCodec(bad, 2); err == nil || !strings.Contains(err.Error(), "bslz4: ") || !strings.Contains(err.Error(), "bszstd: ") {
		t.Errorf("a bitshuffle pipeline of an unknown compression: %v", err)
	}
}

// TestCodecEntriesRefused checks the entries a registry refuses: a codec
// of filters it could not read back, a plugin's filter declared mandatory
// (libhdf5 writes with plugin loading off), levels the wrong way round.
func TestCodecEntriesRefused(t *testing.T) {
	newLZ4 := func(elemSize, _ int) (compress.Codec, error) { return compress.New("lz4", elemSize, 0) }
	for _, tc := range []struct {
		c    registry.Codec
		want string
	}{
		{registry.Codec{Name: "a", New: newLZ4, Filter: 32004}, "filter 32004 but no Read"},
		{registry.Codec{Name: "b", New: newLZ4, Filter: 32004, Read: compress.FromFilters}, "declare its filters optional"},
		{registry.Codec{Name: "c", New: newLZ4, MinLevel: 9, MaxLevel: 1}, "levels 9 to 1, want the lowest first"},
		{registry.Codec{Name: "d", New: newLZ4, Filter: -1}, "filter id -1"},
	} {
		if err := registry.New().AddCodec(tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.c.Name, err, tc.want)
		}
	}
}

// fakeBackend is a backend that says its name and decodes nothing.
type fakeBackend struct {
	gpu.Backend
	name string
}

func (b fakeBackend) Name() string { return b.name }

// TestBatch checks that the batch of an opened backend is its entry's,
// found by the name the backend says (what auto chose), and 1 where no
// entry has it.
func TestBatch(t *testing.T) {
	r := stockStages(t)
	if err := r.AddBackend(registry.Backend{Name: "fpga", Doc: "a facility's", Batch: 16,
		New: func(gpu.Options) (gpu.Backend, error) { return nil, errors.New("no fpga") }}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want int
	}{{"cuda", 4}, {"cpu", 1}, {"fpga", 16}, {"unregistered", 1}} {
		if got := r.Batch(fakeBackend{name: tc.name}); got != tc.want {
			t.Errorf("batch of %s: %d, want %d", tc.name, got, tc.want)
		}
	}
	if err := r.AddBackend(registry.Backend{Name: "x", Batch: -1, New: func(gpu.Options) (gpu.Backend, error) { return nil, nil }}); err == nil {
		t.Error("a negative batch registered")
	}
	n := r.Names()
	if want := []string{"auto", "cpu", "cuda"}; strings.Join(n.Transposers, " ") != strings.Join(want, " ") {
		t.Errorf("backends that transpose %v, want %v (not fpga)", n.Transposers, want)
	}
	if i := n.CodecInfo["bszstd"]; i.MinLevel != 1 || i.MaxLevel != 22 || i.Stream || !i.Transpose {
		t.Errorf("bszstd as profiles see it: %+v", i)
	}
}
