package serve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"h5ingest/config"
	"h5ingest/gpu"
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
			p, err := g.profile("s1", config.Profile{Backend: tc.backend}, scantest.Stages(t))
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
	if p, err := none.profile("s1", config.Profile{Backend: "cuda"}, scantest.Stages(t)); err != nil || p.Backend != "cuda" {
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
