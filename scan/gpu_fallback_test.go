package scan

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"h5ingest/gpu"
	"h5ingest/registry"
	"h5ingest/scan/scantest"
)

// errDeviceLost is what a device backend's Decode returns once its
// device is lost.
var errDeviceLost = fmt.Errorf("%w: CUDA error 700 (an illegal memory access)", gpu.ErrDeviceLost)

// losingBackend decodes its first call with the CPU backend it wraps and
// fails every later one as a device backend whose device was lost does.
type losingBackend struct {
	gpu.Backend
	lose  bool // false: it never loses its device
	calls atomic.Int32
}

func (b *losingBackend) Name() string { return "lossy" }

func (b *losingBackend) Decode(jobs []gpu.Job) error {
	if b.calls.Add(1) > 1 && b.lose {
		return errDeviceLost
	}
	return b.Backend.Decode(jobs)
}

// TestReplayGPULostMidScanSaysSo replays a capture on a backend that
// loses its device after its first call: every frame is decoded, by the
// CPU from then on, and counted in h5ingest_decode_frames_total (the
// fallback is instrumented as the scan's backend is), and the module's
// summary says so in a warning, where before only the log did (the
// file's configuration names the backend the scan began with). A scan
// whose backend keeps its device has no such note.
func TestReplayGPULostMidScanSaysSo(t *testing.T) {
	const frames = 12
	in := scantest.SimulateModule(t, scantest.SmallFormat, frames, 0)
	truth := scantest.Truth(t, in)
	for _, tc := range []struct {
		name string
		lose bool
	}{{"lost after the first call", true}, {"never lost", false}} {
		t.Run(tc.name, func(t *testing.T) {
			stages := scantest.Stages(t)
			err := stages.AddBackend(registry.Backend{Name: "lossy", New: func(o gpu.Options) (gpu.Backend, error) {
				cpu, err := gpu.New("cpu", o)
				if err != nil {
					return nil, err
				}
				return &losingBackend{Backend: cpu, lose: tc.lose}, nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			p := testProfile(t, stages, scantest.SmallFormat, map[string]any{"backend": "lossy"})
			out := filepath.Join(t.TempDir(), "lost.h5")
			obs := NewServingObserver(zap.NewNop()) // keeps the scan's metrics after it
			r := replayWith(t, context.Background(), ReplayOptions{Options: Options{Profile: p, Stages: stages}, Captures: []string{in}, Observer: obs},
				Names{Output: out})
			if r.err != nil {
				t.Fatalf("replay: %v\n%s", r.err, r.errs)
			}
			if _, ok := scantest.CheckTruth(t, out, truth); ok != frames {
				t.Errorf("%d frames ok, want %d", ok, frames)
			}
			if got := decodedFrames(t, obs); got != frames {
				t.Errorf("h5ingest_decode_frames_total %v, want %d: the frames the CPU decoded in the GPU's place count too", got, frames)
			}
			var said []string
			for _, n := range r.summary().Notes {
				if n.Kind == Warning && strings.Contains(n.Text, "lost its device") {
					said = append(said, n.Text)
				}
			}
			if want := "decoded by the cpu backend"; tc.lose && (len(said) != 1 || !strings.Contains(said[0], want)) || !tc.lose && len(said) != 0 {
				t.Errorf("warnings of the lost device: %q; want one saying %q where the device was lost, none else", said, want)
			}
		})
	}
}

// decodedFrames returns h5ingest_decode_frames_total of the last scan o
// shows.
func decodedFrames(t *testing.T, o *Observer) float64 {
	t.Helper()
	families, err := o.obs.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "h5ingest_decode_frames_total" && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no h5ingest_decode_frames_total of one module")
	return 0
}
