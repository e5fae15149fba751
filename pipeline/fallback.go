package pipeline

import (
	"errors"
	"fmt"
	"sync"

	"go.uber.org/zap"

	"h5ingest/gpu"
)

// takeover is the backend that decodes in the configured one's place once
// a device backend lost its device for the process (gpu.ErrDeviceLost):
// opened once, by the first decode goroutine that meets the loss, and
// closed when Run returns.
type takeover struct {
	mu      sync.Mutex
	backend gpu.Backend // nil until opened, and once closed
	name    string      // the backend's name, once opened
	err     error       // why it could not be opened
}

// decodeBatch decodes jobs with *backend. Where the configured backend
// fails because its device is lost and the configuration has a Fallback,
// the same batch is decoded again with the fallback, which *backend then
// names for the goroutine's later batches: the frames that arrived are
// decoded, not lost with the device.
func (p *Pipeline) decodeBatch(backend *gpu.Backend, jobs []gpu.Job) error {
	err := (*backend).Decode(jobs)
	if err == nil || *backend != p.cfg.Backend || !errors.Is(err, gpu.ErrDeviceLost) || p.cfg.Fallback == nil {
		return err
	}
	fb, ferr := p.openFallback(err)
	if ferr != nil {
		return fmt.Errorf("%w; and no backend took its place: %w", err, ferr)
	}
	for i := range jobs { // the results, as the lost device left them, go
		j := &jobs[i]
		j.RawCRC, j.DataCRC, j.Err, j.Compressed, j.CompressErr, j.Chunk = 0, 0, nil, false, nil, j.Chunk[:0]
	}
	*backend = fb
	return fb.Decode(jobs)
}

// openFallback returns the fallback backend, opening it at the first call;
// lost is the configured backend's error, for the log.
func (p *Pipeline) openFallback(lost error) (gpu.Backend, error) {
	t := &p.takeover
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.backend == nil && t.err == nil {
		t.backend, t.err = p.cfg.Fallback()
		if t.err != nil {
			p.log.Error("the decode backend lost its device and the fallback did not open: the rest of the scan is recorded missing",
				zap.String("backend", p.cfg.Backend.Name()), zap.NamedError("lost", lost), zap.Error(t.err))
		} else {
			t.name = t.backend.Name()
			p.log.Warn("the decode backend lost its device: the scan's frames decode on the fallback backend from here on, none lost",
				zap.String("backend", p.cfg.Backend.Name()), zap.String("fallback", t.name), zap.Error(lost))
		}
	}
	return t.backend, t.err
}

// closeFallback closes the fallback backend where one was opened.
func (p *Pipeline) closeFallback() {
	t := &p.takeover
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.backend != nil {
		if err := t.backend.Close(); err != nil {
			p.log.Warn("close the fallback decode backend", zap.Error(err))
		}
		t.backend = nil
	}
}

// FellBack reports whether the pipeline's frames were decoded, from some
// frame on, by Config.Fallback because the configured backend lost its
// device, and the name of the backend that took over.
func (p *Pipeline) FellBack() (bool, string) {
	t := &p.takeover
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.name != "", t.name
}
