package capture

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"h5ingest/gpu"
	"h5ingest/pipeline"
)

// Source replays the frames of a capture file, in file order, as a
// pipeline.Source. From a mapped Reader (Reader.Mapped) it hands out the
// payloads where they lie in the mapping, copying nothing, as a receiver
// hands out its ring's slots; otherwise it reads them into buffers it
// recycles, allocating only until as many frames are in flight as the
// pipeline holds. Lent a backend's page-locked memory (ReadIntoHost), it
// reads payloads into that, from which the device copies at full speed.
type Source struct {
	r           *Reader
	payloadSize int // size of the pooled buffers: the scan format's payload

	// Interval, when positive, paces the replay: one frame per interval,
	// as a detector at that rate would deliver them.
	Interval time.Duration
	next     time.Time // when the next frame is due
	timer    *time.Timer

	mu        sync.Mutex
	free      []*pipeline.Frame
	frames    []*pipeline.Frame         // frames without a buffer, for payloads in the mapping
	host      gpu.HostAllocator         // lent page-locked memory; nil: Go memory
	loan      int                       // the loan under way, or last
	lenders   map[int]gpu.HostAllocator // each loan's lender, while it has buffers out
	users     int                       // pipelines lending host memory
	hostFails bool                      // host refused a buffer: Go memory until the loan ends
	pinned    map[*byte]int             // page-locked buffers, by first byte: their loan
}

var _ pipeline.HostBufferSource = (*Source)(nil)

// NewSource returns a source reading r, with buffers sized for
// payloads of payloadSize bytes. Larger payloads (frames that will be
// rejected) still get read, into a buffer of their own.
func NewSource(r *Reader, payloadSize int) *Source {
	return &Source{r: r, payloadSize: payloadSize}
}

// Next returns the next frame of the capture, or io.EOF after the last one.
// A capture cut short returns an error wrapping capture.ErrTruncated after
// its last whole frame.
func (s *Source) Next(ctx context.Context) (*pipeline.Frame, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	if s.r.Mapped() && !s.lent() {
		h, payload, err := s.r.NextMapped()
		if err != nil {
			return nil, err
		}
		f := s.getFrame()
		f.Header, f.Payload = h, payload
		return f, nil
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
func (s *Source) wait(ctx context.Context) error {
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

// lent reports whether a backend's page-locked memory is lent.
func (s *Source) lent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.host != nil
}

// getFrame returns a frame for a payload in the mapping: one whose buffer
// went back, or a new one.
func (s *Source) getFrame() *pipeline.Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.frames); n > 0 {
		f := s.frames[n-1]
		s.frames = s.frames[:n-1]
		return f
	}
	return new(pipeline.Frame)
}

func (s *Source) get() *pipeline.Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.free); n > 0 {
		f := s.free[n-1]
		s.free = s.free[:n-1]
		return f
	}
	if s.host != nil && !s.hostFails && s.payloadSize > 0 {
		buf, err := s.host.AllocHost(s.payloadSize)
		if err == nil {
			s.pinned[&buf[0]] = s.loan
			return &pipeline.Frame{Payload: buf}
		}
		s.hostFails = true // only slower: Go memory until the loan ends
	}
	return &pipeline.Frame{Payload: make([]byte, s.payloadSize)}
}

// Release returns f's buffer for reuse. While host memory is lent, only
// its buffers are kept; once the loan ends they go back to it.
func (s *Source) Release(f *pipeline.Frame) {
	if s.r.inMapping(f.Payload) {
		dropPages(f.Payload)
		f.Payload = nil
		s.mu.Lock()
		s.frames = append(s.frames, f)
		s.mu.Unlock()
		return
	}
	if cap(f.Payload) != s.payloadSize || s.payloadSize == 0 {
		return // an oversized one-off buffer: let it go
	}
	f.Payload = f.Payload[:s.payloadSize]
	s.mu.Lock()
	defer s.mu.Unlock()
	loan, pinned := s.pinned[&f.Payload[0]]
	switch {
	case pinned && (s.host == nil || loan != s.loan): // its loan has ended
		s.freeHost(f.Payload)
	case !pinned && s.host != nil && !s.hostFails: // make room for a page-locked one
	default:
		s.free = append(s.free, f)
	}
}

// ReadIntoHost implements pipeline.HostBufferSource: payloads are read into
// buffers from host (from the first lender, where pipelines on different
// backends share the source) until the last lender is done.
func (s *Source) ReadIntoHost(host gpu.HostAllocator) (done func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users == 0 {
		if s.pinned == nil {
			s.pinned, s.lenders = map[*byte]int{}, map[int]gpu.HostAllocator{}
		}
		s.loan++
		s.host, s.lenders[s.loan], s.hostFails = host, host, false
		s.free = s.free[:0] // Go buffers make way for page-locked ones
	}
	s.users++
	var once sync.Once
	return func() { once.Do(s.endLoan) }
}

// endLoan ends one lender's loan; after the last, the page-locked buffers
// go back, those in flight as they are released.
func (s *Source) endLoan() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users--; s.users > 0 {
		return
	}
	s.host = nil
	kept := s.free[:0]
	for _, f := range s.free {
		if _, ok := s.pinned[&f.Payload[0]]; ok {
			s.freeHost(f.Payload)
			continue
		}
		kept = append(kept, f)
	}
	s.free = kept
}

// freeHost gives a page-locked buffer back to its lender. A refusal (a
// backend closed already, whose memory went with it) leaves nothing to do.
func (s *Source) freeHost(b []byte) {
	loan := s.pinned[&b[0]]
	delete(s.pinned, &b[0])
	s.lenders[loan].FreeHost(b)
}
