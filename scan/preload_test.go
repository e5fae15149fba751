package scan

import (
	"errors"
	"strings"
	"testing"

	"h5ingest/gpu"
	"h5ingest/registry"
)

// TestPreloadBackend: a backend is preloaded as its registry entry says,
// and released by what PreloadBackend returns; one whose entry has no
// Preload holds nothing; an unknown one, or a Preload that fails, is a
// usage error naming the key.
func TestPreloadBackend(t *testing.T) {
	var log []string
	newCPU := func(o gpu.Options) (gpu.Backend, error) { return gpu.New("cpu", o) }
	reg := registry.New()
	for _, b := range []registry.Backend{
		{Name: "dev", New: newCPU, Preload: func(o gpu.Options) (func(), error) {
			log = append(log, "load "+o.ComputeCache)
			return func() { log = append(log, "release") }, nil
		}},
		{Name: "plain", New: newCPU},
		{Name: "broken", New: newCPU, Preload: func(gpu.Options) (func(), error) { return nil, errors.New("no device") }},
	} {
		if err := reg.AddBackend(b); err != nil {
			t.Fatal(err)
		}
	}
	release, err := PreloadBackend(reg, "dev", "/cache", nil)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if got := strings.Join(log, ", "); got != "load /cache, release" {
		t.Errorf("%s, want the entry's preload and its release", got)
	}
	if release, err := PreloadBackend(reg, "plain", "", nil); err != nil || release == nil {
		t.Errorf("a backend without Preload: %v", err)
	} else {
		release()
	}
	for name, want := range map[string]string{"broken": "key backend: no device", "nowhere": `key backend: "nowhere" is not registered`} {
		if _, err := PreloadBackend(reg, name, "", nil); err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a usage error with %q", name, err, want)
		}
	}
}
