package serve

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/gpu"
	"h5ingest/registry"
)

// OnGPULost is what serve does once a sticky CUDA error (an illegal
// address, a launch failure) has lost the GPU for the process, which the
// driver documents only a new process recovers from (gpu.Lost). Either
// way the scan the error struck goes on, its frames from the batch the
// error struck on decoded on the CPU (pipeline.Config.Fallback), and the
// log says "CUDA device lost".
type OnGPULost string

const (
	// GPULostExit: serve drains the running scan as on SIGTERM, takes no
	// more, and exits with status 1 for its supervisor to restart it
	// with the GPU (the unit's Restart=on-failure). The default.
	GPULostExit OnGPULost = "exit"
	// GPULostCPU: serve goes on, and the scans whose profile decodes on
	// the GPU (backend auto or cuda) decode on the CPU, with a warning in
	// the log, /v1/health and /v1/status, until serve restarts.
	GPULostCPU OnGPULost = "cpu"
)

// ParseOnGPULost returns the OnGPULost named s.
func ParseOnGPULost(s string) (OnGPULost, error) {
	switch a := OnGPULost(s); a {
	case GPULostExit, GPULostCPU:
		return a, nil
	}
	return "", fmt.Errorf("%q: want %s or %s", s, GPULostExit, GPULostCPU)
}

// GPUGuard carries out a serve's OnGPULost: once the GPU is lost, it
// chooses each scan's backend (Runner.Prepare), says so in the service's
// health (Runner.Health), and ends serve where it is to exit (Watch). A
// nil GPUGuard leaves every profile's backend as it is.
type GPUGuard struct {
	action OnGPULost
	log    *zap.Logger
	lost   func() error    // the loss, nil while none: gpu.Lost
	lostC  <-chan struct{} // closed at the loss: gpu.LostChan
}

// NewGPUGuard returns the guard of action, logging to log.
func NewGPUGuard(action OnGPULost, log *zap.Logger) *GPUGuard {
	return &GPUGuard{action: action, log: log, lost: gpu.Lost, lostC: gpu.LostChan()}
}

// onGPU reports whether a scan of backend decodes on the GPU: a backend
// whose registry entry opens a device when a command starts (Preload).
func onGPU(stages *registry.Registry, backend string) bool {
	b, ok := stages.Backend(backend)
	return ok && b.Preload != nil
}

// profile returns profile as scan id runs it: once the GPU is lost, with
// GPULostCPU on the CPU where it names a backend on the GPU (logged), and
// with GPULostExit refused.
func (g *GPUGuard) profile(id string, profile config.Profile, stages *registry.Registry) (config.Profile, error) {
	if g == nil {
		return profile, nil
	}
	lost := g.lost()
	switch {
	case lost == nil:
	case g.action == GPULostExit:
		return profile, fmt.Errorf("%w: serve exits to be restarted (--on-gpu-lost exit), and takes no more scans", lost)
	case onGPU(stages, profile.Backend) && stages.ReferenceBackend() != "":
		g.log.Warn("scan decodes on the CPU: the GPU was lost; restart h5ingest serve to use it again",
			zap.String("scan", id), zap.String("profile_backend", profile.Backend), zap.Error(lost))
		profile.Backend = stages.ReferenceBackend()
	}
	return profile, nil
}

// health returns the loss of the GPU as the service's health says it:
// with GPULostExit a problem, with GPULostCPU a warning; nothing while
// the GPU works.
func (g *GPUGuard) health() (problems, warnings []string) {
	if g == nil {
		return nil, nil
	}
	lost := g.lost()
	switch {
	case lost == nil:
		return nil, nil
	case g.action == GPULostExit:
		return []string{fmt.Sprintf("the GPU was lost (%v): serve drains the running scan and exits, to be restarted", lost)}, nil
	}
	return nil, []string{fmt.Sprintf("the GPU was lost (%v): scans decode on the CPU until h5ingest serve restarts", lost)}
}

// Health implements service.HealthReporter: the loss of the GPU, as
// r.GPU says it.
func (r *Runner) Health() (problems, warnings []string) { return r.GPU.health() }

// Watch waits for the GPU's loss, or for ctx's end. At the loss it logs
// what serve does then and, with GPULostExit, calls stop, which should
// drain the running scan and end serve as SIGTERM does, and returns the
// error serve exits with. It returns nil otherwise.
func (g *GPUGuard) Watch(ctx context.Context, stop func()) error {
	select {
	case <-ctx.Done():
		return nil
	case <-g.lostC:
	}
	lost := g.lost()
	if g.action == GPULostCPU {
		g.log.Warn("GPU lost: the next scans decode on the CPU (--on-gpu-lost cpu); restart h5ingest serve to use the GPU again", zap.Error(lost))
		return nil
	}
	g.log.Warn("GPU lost: draining the running scan, then exiting to be restarted (--on-gpu-lost exit)", zap.Error(lost))
	stop()
	return fmt.Errorf("%w: exiting to be restarted (--on-gpu-lost exit)", lost)
}
