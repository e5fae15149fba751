package capture

import (
	"context"
	"errors"
	"fmt"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"io"
	"slices"
	"sync"
)

// OpenScan opens a capture for replay and returns it with the format of
// its scan (ScanFormat); the reader accepts payloads as large as the
// format's.
func OpenScan(path string) (*Reader, frame.Format, error) {
	format, err := ScanFormat(path)
	if err != nil {
		return nil, frame.Format{}, err
	}
	r, err := Open(path)
	if err != nil {
		return nil, frame.Format{}, err
	}
	r.SetMaxPayload(max(DefaultMaxPayload, int64(format.PayloadSize())))
	return r, format, nil
}

// ScanFormat returns the frame format of the scan in a capture: that of
// its first frame whose header checks out.
func ScanFormat(path string) (frame.Format, error) {
	r, err := Open(path)
	if err != nil {
		return frame.Format{}, err
	}
	defer r.Close()
	var skip []byte
	for range maxFormatProbe {
		h, _, err := r.Next(nil)
		switch {
		case errors.Is(err, io.ErrShortBuffer):
			if h.Check() == nil {
				return h.Format, nil
			}
			skip = slices.Grow(skip[:0], int(h.PayloadSize))[:h.PayloadSize]
			if _, _, err := r.Next(skip); err != nil {
				return frame.Format{}, err
			}
		case errors.Is(err, io.EOF):
			return frame.Format{}, fmt.Errorf("capture %s holds no usable frame", path)
		case err != nil:
			return frame.Format{}, err
		}
	}
	return frame.Format{}, fmt.Errorf("capture %s: none of its first %d frames has a usable format", path, maxFormatProbe)
}

// maxFormatProbe is how many frames ScanFormat reads to find the scan's
// format.
const maxFormatProbe = 64

// Sources reads several captures (one per module) as one source:
// a frame of each in turn, as a detector's modules send them, until every
// capture has ended. A capture that cannot be read on ends alone; its
// error comes after the frames of the others.
type Sources struct {
	srcs  []*Source
	next  int    // the source to read next
	ended []bool // by source
	err   error  // the first error of a source, other than its end

	mu    sync.Mutex
	owner map[*pipeline.Frame]*Source // frames out, by the source that gave them
}

// NewSources returns the source of srcs' frames, a frame of each in turn.
func NewSources(srcs []*Source) *Sources {
	return &Sources{srcs: srcs, ended: make([]bool, len(srcs)), owner: map[*pipeline.Frame]*Source{}}
}

// Next returns the next frame of the next capture that has one.
func (c *Sources) Next(ctx context.Context) (*pipeline.Frame, error) {
	for range 2 * len(c.srcs) {
		i := c.next
		c.next = (c.next + 1) % len(c.srcs)
		if c.ended[i] {
			continue
		}
		f, err := c.srcs[i].Next(ctx)
		switch {
		case err == nil:
			c.mu.Lock()
			c.owner[f] = c.srcs[i]
			c.mu.Unlock()
			return f, nil
		case ctx.Err() != nil:
			return nil, err
		case !errors.Is(err, io.EOF) && c.err == nil:
			c.err = err
		}
		c.ended[i] = true
	}
	if c.err != nil {
		return nil, c.err
	}
	return nil, io.EOF
}

// Release gives f back to the capture it came from. It is safe to call
// from several goroutines.
func (c *Sources) Release(f *pipeline.Frame) {
	c.mu.Lock()
	src := c.owner[f]
	delete(c.owner, f)
	c.mu.Unlock()
	if src != nil {
		src.Release(f)
	}
}
