package scan

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/gpu"
	"h5ingest/registry"
)

// TestPreloadBackend: a backend is preloaded as its registry entry says,
// and released by what PreloadBackend returns; one whose entry has no
// Preload holds nothing; an unknown one, or a Preload that fails, is a
// usage error naming the key; a device lost to a sticky error as it
// preloads or opens is not a usage error (no command line mends it), and
// says so.
func TestPreloadBackend(t *testing.T) {
	var log []string
	newCPU := func(o gpu.Options) (gpu.Backend, error) { return gpu.New("cpu", o) }
	lost := fmt.Errorf("first frame on the device: %w", gpu.ErrDeviceLost)
	reg := registry.New()
	for _, b := range []registry.Backend{
		{Name: "dev", New: newCPU, Preload: func(o gpu.Options) (func(), error) {
			log = append(log, "load "+o.ComputeCache)
			return func() { log = append(log, "release") }, nil
		}},
		{Name: "plain", New: newCPU},
		{Name: "broken", New: newCPU, Preload: func(gpu.Options) (func(), error) { return nil, errors.New("no device") }},
		{Name: "lost", New: func(gpu.Options) (gpu.Backend, error) { return nil, lost },
			Preload: func(gpu.Options) (func(), error) { return nil, lost }},
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
	if _, err := PreloadBackend(reg, "lost", "", nil); err == nil || errors.Is(err, ErrUsage) || !errors.Is(err, gpu.ErrDeviceLost) {
		t.Errorf("lost at preload: %v, want the device lost, not a usage error", err)
	}
	if _, err := openBackend(reg, config.Profile{Backend: "lost"}, zap.NewNop()); err == nil || errors.Is(err, ErrUsage) || !errors.Is(err, gpu.ErrDeviceLost) {
		t.Errorf("lost at open: %v, want the device lost, not a usage error", err)
	}
}
