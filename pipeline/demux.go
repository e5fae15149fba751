package pipeline

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"h5ingest/gpu"
)

// Demux splits a source of several modules' interleaved frames (a capture
// of a multi-module detector) into one Source per module, by the
// module_id of each frame's header. Run reads the source; each module's
// pipeline reads its own ModuleSource. Frames of modules not asked for are
// released and counted.
type Demux struct {
	src     Source
	modules map[uint16]*ModuleSource
	unknown atomic.Int64
	first   atomic.Uint32 // the module of the first unknown frame
	// started closes when a module first asks for a frame, lends host
	// memory or closes: a source that reads into buffers of its own
	// (HostBufferSource) is read only then, so that a pipeline lending it
	// page-locked memory has done so before the first frame is read.
	started chan struct{}
	start   sync.Once
}

// ModuleSource is the Source of one module's frames from a Demux. Frames
// go back to the underlying source on Release, which must therefore be
// safe to call from several goroutines (package capture's Source's is).
type ModuleSource struct {
	d      *Demux
	frames chan *Frame
	quit   chan struct{} // closed by Close: frames of this module are dropped
	once   sync.Once
	err    error // the underlying source's end, set before frames closes
}

// NewDemux returns a demultiplexer of src into the given modules, each
// with a queue of depth frames (at least 1).
func NewDemux(src Source, modules []uint16, depth int) *Demux {
	d := &Demux{src: src, modules: make(map[uint16]*ModuleSource, len(modules)), started: make(chan struct{})}
	for _, id := range modules {
		d.modules[id] = &ModuleSource{d: d, frames: make(chan *Frame, max(depth, 1)), quit: make(chan struct{})}
	}
	return d
}

// Module returns the source of module id's frames, or nil for a module
// the Demux was not made with.
func (d *Demux) Module(id uint16) *ModuleSource { return d.modules[id] }

// Unknown returns how many frames of other modules Run dropped, and the
// module of the first of them.
func (d *Demux) Unknown() (frames int64, first uint16) {
	return d.unknown.Load(), uint16(d.first.Load())
}

// Run hands every frame of the source to its module's source until the
// source ends, then ends every module's source the same way: io.EOF, or
// the source's error. A module whose queue is full holds the others up
// until its pipeline takes a frame or its source is closed. A source that
// reads into buffers of its own (HostBufferSource, a capture) is first
// read once a module's pipeline has started: has asked for a frame, lent
// page-locked memory or closed its source. Run returns
// the source's error (nil at io.EOF), or ctx's when ctx is done first.
func (d *Demux) Run(ctx context.Context) error {
	err := d.pump(ctx)
	for _, m := range d.modules {
		m.err = err
		close(m.frames)
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

func (d *Demux) pump(ctx context.Context) error {
	if _, ok := d.src.(HostBufferSource); ok {
		select {
		case <-d.started:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		f, err := d.src.Next(ctx)
		if err != nil {
			return err
		}
		m := d.modules[f.Header.ModuleID]
		if m == nil {
			if d.unknown.Add(1) == 1 {
				d.first.Store(uint32(f.Header.ModuleID))
			}
			d.src.Release(f)
			continue
		}
		select {
		case m.frames <- f:
		case <-m.quit:
			d.src.Release(f)
		case <-ctx.Done():
			d.src.Release(f)
			return ctx.Err()
		}
	}
}

// Next returns the module's next frame; after the last one it returns
// what ended the underlying source (io.EOF at its clean end).
func (m *ModuleSource) Next(ctx context.Context) (*Frame, error) {
	m.d.begin()
	select {
	case f, ok := <-m.frames:
		if !ok {
			return nil, m.err
		}
		return f, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// begin lets Run read the source.
func (d *Demux) begin() { d.start.Do(func() { close(d.started) }) }

// Release gives f back to the underlying source.
func (m *ModuleSource) Release(f *Frame) { m.d.src.Release(f) }

// ReadIntoHost lends host to the underlying source where it reads into
// buffers of its own (HostBufferSource), else does nothing.
func (m *ModuleSource) ReadIntoHost(host gpu.HostAllocator) (done func()) {
	defer m.d.begin()
	if bs, ok := m.d.src.(HostBufferSource); ok {
		return bs.ReadIntoHost(host)
	}
	return func() {}
}

// Close tells the Demux that this module's frames are no longer read:
// those queued and those still to come are released. Call it when the
// module's pipeline stops, so that a pipeline that failed does not hold
// the other modules up.
func (m *ModuleSource) Close() {
	m.d.begin()
	m.once.Do(func() {
		close(m.quit)
		go func() {
			for f := range m.frames {
				m.d.src.Release(f)
			}
		}()
	})
}
