package serve

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"h5ingest/config"
	"h5ingest/gpu"
	"h5ingest/registry"
	"h5ingest/scan/scantest"
)

// errLost stands for the loss gpu.Lost returns.
var errLost = fmt.Errorf("%w: CUDA device 0: CUDA_ERROR_ILLEGAL_ADDRESS", gpu.ErrDeviceLost)

// newTestGuard returns a guard of action whose GPU is lost where lost,
// with the log it writes.
func newTestGuard(action OnGPULost, lost bool) (*GPUGuard, *zapobserver.ObservedLogs) {
	core, logs := zapobserver.New(zapcore.InfoLevel)
	c := make(chan struct{})
	g := &GPUGuard{action: action, log: zap.New(core), lost: func() error { return nil }, lostC: c}
	if lost {
		g.lost = func() error { return errLost }
		close(c)
	}
	return g, logs
}

// TestGPUGuardProfile checks the backend each scan gets from the guard:
// the profile's while the GPU works, the CPU for a profile on the GPU
// once it is lost with GPULostCPU (logged), a refusal once it is lost
// with GPULostExit; and what health says of it.
func TestGPUGuardProfile(t *testing.T) {
	for _, tc := range []struct {
		action          OnGPULost
		lost            bool
		backend, want   string // the profile's backend, the scan's
		refused, logged bool
		problem, warn   bool // in health
	}{
		{GPULostCPU, false, "cuda", "cuda", false, false, false, false},
		{GPULostExit, false, "auto", "auto", false, false, false, false},
		{GPULostCPU, true, "cuda", "cpu", false, true, false, true},
		{GPULostCPU, true, "auto", "cpu", false, true, false, true},
		{GPULostCPU, true, "cpu", "cpu", false, false, false, true},
		{GPULostCPU, true, "fpga", "fpga", false, false, false, true}, // a facility's own, not on the GPU
		{GPULostExit, true, "auto", "", true, false, true, false},
		{GPULostExit, true, "cpu", "", true, false, true, false},
	} {
		t.Run(fmt.Sprintf("%s/lost=%v/%s", tc.action, tc.lost, tc.backend), func(t *testing.T) {
			g, logs := newTestGuard(tc.action, tc.lost)
			p, err := g.profile("s1", config.Profile{Backend: tc.backend}, testStages(t))
			switch {
			case tc.refused && (!errors.Is(err, gpu.ErrDeviceLost) || !strings.Contains(err.Error(), "exits")):
				t.Errorf("profile: %v, want a refusal that says serve exits", err)
			case !tc.refused && (err != nil || p.Backend != tc.want):
				t.Errorf("profile: backend %q, %v; want %q", p.Backend, err, tc.want)
			}
			if got := logs.FilterMessageSnippet("decodes on the CPU").FilterField(zap.String("scan", "s1")).Len(); got != map[bool]int{true: 1}[tc.logged] {
				t.Errorf("%d log lines say the scan decodes on the CPU", got)
			}
			problems, warnings := g.health()
			if (len(problems) > 0) != tc.problem || (len(warnings) > 0) != tc.warn {
				t.Errorf("health: problems %q, warnings %q", problems, warnings)
			}
			for _, s := range append(problems, warnings...) {
				if !strings.Contains(s, "CUDA_ERROR_ILLEGAL_ADDRESS") {
					t.Errorf("health %q does not say what lost the GPU", s)
				}
			}
		})
	}
	var none *GPUGuard // a Runner without one
	if p, err := none.profile("s1", config.Profile{Backend: "cuda"}, testStages(t)); err != nil || p.Backend != "cuda" {
		t.Errorf("no guard: backend %q, %v", p.Backend, err)
	}
	if p, w := (&Runner{}).Health(); p != nil || w != nil {
		t.Errorf("a runner without a guard: health %q %q", p, w)
	}
}

// TestGPUGuardWatch checks what the guard does at the loss: with
// GPULostExit it stops serve and returns the error serve exits with; with
// GPULostCPU it only logs; and it returns nil once ctx ends without a
// loss.
func TestGPUGuardWatch(t *testing.T) {
	for _, tc := range []struct {
		action OnGPULost
		lost   bool
		stops  bool
	}{
		{GPULostExit, true, true},
		{GPULostCPU, true, false},
		{GPULostExit, false, false},
	} {
		t.Run(fmt.Sprintf("%s/lost=%v", tc.action, tc.lost), func(t *testing.T) {
			g, logs := newTestGuard(tc.action, tc.lost)
			ctx, cancel := context.WithCancel(context.Background())
			if !tc.lost {
				cancel() // serve ends for another reason
			}
			defer cancel()
			stopped := false
			err := g.Watch(ctx, func() { stopped = true })
			if stopped != tc.stops || (err != nil) != tc.stops {
				t.Errorf("stopped %v, error %v; want stopped %v", stopped, err, tc.stops)
			}
			if tc.stops && !errors.Is(err, gpu.ErrDeviceLost) {
				t.Errorf("error %v, want the loss", err)
			}
			if got := logs.FilterMessageSnippet("GPU lost").Len(); got != map[bool]int{true: 1}[tc.lost] {
				t.Errorf("%d log lines say the GPU was lost", got)
			}
		})
	}
}

// TestParseOnGPULost checks the names --on-gpu-lost takes.
func TestParseOnGPULost(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want OnGPULost
		ok   bool
	}{{"exit", GPULostExit, true}, {"cpu", GPULostCPU, true}, {"", "", false}, {"restart", "", false}, {"CPU", "", false}} {
		got, err := ParseOnGPULost(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseOnGPULost(%q) = %q, %v", tc.in, got, err)
		}
	}
}

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
		return errLost
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
	in := simulate(t, scantest.SmallFormat, frames)
	truth := scantest.Truth(t, in)
	for _, tc := range []struct {
		name string
		lose bool
	}{{"lost after the first call", true}, {"never lost", false}} {
		t.Run(tc.name, func(t *testing.T) {
			stages := testStages(t)
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
