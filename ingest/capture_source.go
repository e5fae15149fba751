package ingest

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"h5ingest/ingest/capture"
)

// CaptureSource replays the frames of a capture file, in file order, as a
// Source. Payload buffers are recycled: it allocates only until as many
// frames are in flight as the pipeline holds.
type CaptureSource struct {
	r           *capture.Reader
	payloadSize int // size of the pooled buffers: the scan format's payload

	// Interval, when positive, paces the replay: one frame per interval,
	// as a detector at that rate would deliver them.
	Interval time.Duration
	next     time.Time // when the next frame is due
	timer    *time.Timer

	mu   sync.Mutex
	free []*Frame
}

// NewCaptureSource returns a source reading r, with buffers sized for
// payloads of payloadSize bytes. Larger payloads (frames that will be
// rejected) still get read, into a buffer of their own.
func NewCaptureSource(r *capture.Reader, payloadSize int) *CaptureSource {
	return &CaptureSource{r: r, payloadSize: payloadSize}
}

// Next returns the next frame of the capture, or io.EOF after the last one.
// A capture cut short returns an error wrapping capture.ErrTruncated after
// its last whole frame.
func (s *CaptureSource) Next(ctx context.Context) (*Frame, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	f := s.get()
	h, payload, err := s.r.Next(f.Payload[:cap(f.Payload)])
	if errors.Is(err, io.ErrShortBuffer) {
		// A frame larger than the scan's: read it whole so that it can be
		// recorded as rejected. Rare, so it may allocate.
		f.Payload = make([]byte, h.PayloadSize)
		h, payload, err = s.r.Next(f.Payload)
	}
	if err != nil {
		s.Release(f)
		return nil, err
	}
	f.Header, f.Payload = h, payload
	return f, nil
}

// wait blocks until the next frame is due, or ctx is done.
func (s *CaptureSource) wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.Interval <= 0 {
		return nil
	}
	now := time.Now()
	if s.next.IsZero() {
		s.next = now
	}
	if d := s.next.Sub(now); d > 0 {
		if s.timer == nil {
			s.timer = time.NewTimer(d)
		} else {
			s.timer.Reset(d)
		}
		select {
		case <-s.timer.C:
		case <-ctx.Done():
			s.timer.Stop()
			return ctx.Err()
		}
	}
	s.next = s.next.Add(s.Interval)
	return nil
}

func (s *CaptureSource) get() *Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.free); n > 0 {
		f := s.free[n-1]
		s.free = s.free[:n-1]
		return f
	}
	return &Frame{Payload: make([]byte, s.payloadSize)}
}

// Release returns f's buffer for reuse.
func (s *CaptureSource) Release(f *Frame) {
	if cap(f.Payload) != s.payloadSize {
		return // an oversized one-off buffer: let it go
	}
	f.Payload = f.Payload[:s.payloadSize]
	s.mu.Lock()
	s.free = append(s.free, f)
	s.mu.Unlock()
}
