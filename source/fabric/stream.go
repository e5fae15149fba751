package fabric

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/receive"
	"h5ingest/source/fabric/internal/fi"
)

// Recorder keeps the bytes of every frame exactly as they arrived; a
// *capture.Writer is one. WriteRecord is called from the goroutine that
// calls Stream.Next, as the stream learns of each frame's arrival, before
// the frame is handed out.
type Recorder = receive.Recorder

// Stats counts what a Stream received: HeldBack is how long every slot
// was in use (from when the stream takes a completion to when the slot's
// credit goes out), SenderFrames and SenderHeldBack what the sender
// reported at its end of scan.
type Stats = receive.Stats

// Stream is one sender's connection: an pipeline.Source of the frames it
// writes into the ring of slots. Frames point into the registered slot
// memory and stay valid until released; releasing a frame returns its
// slot's credit to the sender. From the first Next on, a goroutine of the
// stream takes frames off the connection as they arrive, up to the ring's
// slots, and records them; Next hands them out in order. Next is called
// from one goroutine at a time; Release, Stop, Stats and Close from any.
type Stream struct {
	c     *conn
	l     *Listener
	cfg   Config
	hello Hello
	peer  netip.AddrPort // the sender's address, as its listener keeps it (Listener.peers)

	ringMem  *fi.Memory
	ringMR   *fi.MemoryRegion
	slotSize int
	frames   []pipeline.Frame // one per slot
	slots    [][]byte         // slot memory

	rec  Recorder
	err  error // sticky: the stream cannot go on
	comp [fi.MaxBatch]fi.Completion

	// arrivals carries what the receiving goroutine (poll) takes off the
	// completion queue to Next, in order: frames, then the end of the scan
	// or the error that ended the receiving. It has room for every slot of
	// the ring and the end, so the receiving never waits for Next.
	arrivals  chan arrival
	pollQuit  chan struct{} // closed by Close: the receiving stops
	pollDone  chan struct{} // closed when the receiving goroutine returns
	ended     bool          // poll: the end of scan is queued
	repostErr error         // poll: a control receive could not be posted again
	idleTimer *time.Timer
	endMsg    endMsg
	// byeSent is set once the sender's end of scan was answered: Close
	// then lets the sender close first, so the bye is not lost with a
	// connection closed under it.
	byeSent bool

	mu     sync.Mutex
	inUse  []bool
	used   int       // slots in use
	fullAt time.Time // when the ring filled; zero when not full
	stats  Stats
	closed bool
	module bool  // the hello's module is registered with the listener
	stop   error // set by Stop: take no frame that arrives later
	recErr error // what stopped the recording
}

// Hello returns what the sender said about itself and its scan.
func (s *Stream) Hello() Hello { return s.hello }

// Format returns the frame format of the sender's scan.
func (s *Stream) Format() frame.Format { return s.hello.Format }

// Record makes the stream hand every frame it receives to r as it arrives,
// before the frame waits for the pipeline. Call it before the first Next.
func (s *Stream) Record(r Recorder) { s.rec = r }

// RecordErr returns the error that stopped the recording, or nil.
func (s *Stream) RecordErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recErr
}

// Stop makes the stream take no frame that arrives from now on, for a scan
// interrupted by its user: Next hands out every frame that arrived before
// (those already in the ring), then returns cause. The sender gets no more
// credits. Stop may be called from any goroutine, more than once; the
// first cause counts.
func (s *Stream) Stop(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop == nil {
		s.stop = cause
	}
}

// Stats returns what the stream has received so far.
func (s *Stream) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	if !s.fullAt.IsZero() {
		st.HeldBack += time.Since(s.fullAt)
	}
	return st
}

// HostMemory returns the ring, which every payload the stream hands out
// lies in: memory outside the Go heap that a device backend may page-lock
// (pipeline.HostMemorySource). It is valid until Close.
func (s *Stream) HostMemory() [][]byte {
	if s.ringMem == nil {
		return nil
	}
	return [][]byte{s.ringMem.Bytes()}
}

// makeRing allocates and registers the slots and posts the receives the
// hello's mode needs.
func (s *Stream) makeRing() error {
	n := s.cfg.Slots
	s.slotSize = slotSize(s.hello)
	var err error
	if s.ringMem, err = fi.Alloc(n * s.slotSize); err != nil {
		return err
	}
	// The ring takes what the mode brings: remote writes, or receives.
	access := uint64(fi.AccessRemoteWrite)
	if s.hello.Mode == ModeSend {
		access = fi.AccessRecv
	}
	if s.ringMR, err = fi.Register(s.c.dom, s.ringMem, access); err != nil {
		return lockedMemoryHint(s.c.info.Provider(), int64(len(s.ringMem.Bytes())), err)
	}
	s.frames = make([]pipeline.Frame, n)
	s.arrivals = make(chan arrival, n+2)
	s.slots = make([][]byte, n)
	s.inUse = make([]bool, n)
	mem := s.ringMem.Bytes()
	for i := range n {
		s.slots[i] = mem[i*s.slotSize : (i+1)*s.slotSize : (i+1)*s.slotSize]
	}
	switch s.hello.Mode {
	case ModeWrite:
		for i := range ctrlBuffers(n) {
			if err := s.c.postCtrl(i); err != nil {
				return err
			}
		}
	case ModeSend:
		for i := range n {
			if err := s.postSlot(i); err != nil {
				return err
			}
		}
	}
	return nil
}

// slotSize returns the size of a slot for the frames h announces.
func slotSize(h Hello) int { return (h.FrameSize() + 63) &^ 63 }

func (s *Stream) postSlot(i int) error {
	return s.c.ep.Recv(s.slots[i], s.ringMR, ctxSlot|uint64(i))
}

// sendBuf returns the control buffer the receiver sends from; the one
// before it takes the hello.
func (s *Stream) sendBuf() int { return ctrlBuffers(s.cfg.Slots) + 1 }

// refuse tells the sender why it is refused.
func (s *Stream) refuse(code uint32, reason string) {
	s.c.sendCtrl(s.sendBuf(), appendRefuse(make([]byte, 0, ctrlSize), code, reason), time.Second)
}

// waitCtrl waits up to timeout for a control message and returns it.
func (s *Stream) waitCtrl(timeout time.Duration, what string) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		n, err := s.c.rx.Read(s.comp[:1], 50*time.Millisecond)
		if err != nil {
			return nil, fmt.Errorf("receive %s: %w", what, err)
		}
		if n == 1 {
			c := s.comp[0]
			return s.c.ctrlBuf(int(c.Context & ctxIndex))[:c.Len], nil
		}
		if s.c.shutDown() {
			return nil, fmt.Errorf("receive %s: %w", what, ErrDisconnected)
		}
		if s.c.quitting() {
			return nil, fmt.Errorf("receive %s: %w", what, errListenerClosed)
		}
	}
	return nil, fmt.Errorf("receive %s: none in %v: %w", what, timeout, ErrTimeout)
}

// Next returns the next frame the sender wrote. It returns io.EOF after the
// sender's end of scan; an error wrapping ErrDisconnected when the sender
// goes away first, ErrTimeout after the idle timeout without a frame,
// frame.ErrNotFrame when a slot does not hold a frame header (the stream's
// framing is lost), ErrProtocol for a message that breaks the protocol, and
// Stop's cause after a Stop. Every frame that arrived before such an end
// is handed out first: an error ends the stream only once the ring holds
// no frame that came before it. Frames whose header is a frame's but whose
// payload does not match it are returned: the pipeline rejects them.
//
// The first Next starts the stream's receiving goroutine, which takes
// frames off the connection as they arrive (and records them), whether or
// not the pipeline is ready for them; the ring's slots bound how many.
func (s *Stream) Next(ctx context.Context) (*pipeline.Frame, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.pollDone == nil {
		s.pollQuit, s.pollDone = make(chan struct{}), make(chan struct{})
		s.idleTimer = time.NewTimer(s.cfg.IdleTimeout)
		go s.poll()
	} else {
		s.idleTimer.Reset(s.cfg.IdleTimeout)
	}
	var a arrival
	select {
	case a = <-s.arrivals:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.idleTimer.C:
		return nil, s.fail(fmt.Errorf("module %d: no frame for %v: %w", s.hello.Module, s.cfg.IdleTimeout, ErrTimeout))
	}
	switch {
	case a.err != nil:
		return nil, s.fail(a.err)
	case a.slot < 0:
		return nil, s.fail(s.end())
	}
	f, err := s.deliver(a.slot, a.length)
	if err != nil {
		return nil, s.fail(fmt.Errorf("module %d: %w", s.hello.Module, err))
	}
	return f, nil
}

// stopCause returns Stop's cause, nil before a Stop.
func (s *Stream) stopCause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stop
}

// poll is the stream's receiving goroutine: it takes every completion off
// the connection as it comes, records the frames, and queues them for
// Next, until the end of the scan, an error, a Stop or Close. What ends
// it is queued after every frame that arrived before.
func (s *Stream) poll() {
	defer close(s.pollDone)
	for !s.ended {
		select {
		case <-s.pollQuit:
			return
		default:
		}
		if cause := s.stopCause(); cause != nil {
			// The frames already in the ring are taken; no later one.
			if err := s.drain(0); err != nil {
				s.queueErr(err)
				return
			}
			s.queueErr(cause)
			return
		}
		if err := s.drain(20 * time.Millisecond); err != nil {
			s.queueErr(err)
			return
		}
		if !s.ended && s.c.shutDown() {
			// What arrived before the sender went is still to be taken.
			err := s.drain(0)
			if err == nil {
				err = fmt.Errorf("module %d: %w before the end of the scan", s.hello.Module, ErrDisconnected)
			}
			s.queueErr(err)
			return
		}
	}
}

// queueErr queues the error that ends the receiving.
func (s *Stream) queueErr(err error) {
	select {
	case s.arrivals <- arrival{slot: -1, err: err}:
	case <-s.pollQuit:
	}
}

// arrival is a frame in a slot, queued for Next; slot -1 is the end of
// the scan, or with err the error that ended the receiving.
type arrival struct {
	slot, length int
	err          error
}

// drain reads the completions there are, waiting up to wait for the first,
// and queues the frames they announce. Counting frames as they arrive,
// rather than as Next hands them out, is what tells when the ring is full.
func (s *Stream) drain(wait time.Duration) error {
	for {
		room := cap(s.arrivals) - len(s.arrivals)
		if room == 0 || s.ended {
			return nil
		}
		n, err := s.drainOnce(room, wait)
		if err == nil && s.repostErr != nil {
			err = fmt.Errorf("module %d: %w", s.hello.Module, s.repostErr)
		}
		if n == 0 || err != nil {
			return err
		}
		wait = 0
	}
}

func (s *Stream) drainOnce(room int, wait time.Duration) (int, error) {
	n, err := s.c.rx.Read(s.comp[:min(room, len(s.comp))], wait)
	if err != nil {
		if s.c.shutDown() || errors.Is(err, syscall.ECANCELED) {
			err = fmt.Errorf("%w: %w", ErrDisconnected, err)
		}
		return 0, fmt.Errorf("module %d: %w", s.hello.Module, err)
	}
	for _, c := range s.comp[:n] {
		a, err := s.arrived(c)
		if err != nil {
			return 0, fmt.Errorf("module %d: %w", s.hello.Module, err)
		}
		if a.slot >= 0 {
			s.record(a)
		}
		s.arrivals <- a
		if a.slot < 0 {
			s.ended = true
			break
		}
	}
	return n, nil
}

// fail makes err the stream's sticky error. Release reads it from another
// goroutine, so it is set under mu.
func (s *Stream) fail(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
	return s.err
}

// arrived handles one receive completion: a frame, or the end.
func (s *Stream) arrived(c fi.Completion) (arrival, error) {
	i := int(c.Context & ctxIndex)
	var slot, length int
	switch c.Context &^ ctxIndex {
	case ctxCtrl:
		b := s.c.ctrlBuf(i)[:c.Len]
		typ, err := parseHeader(b)
		if err != nil {
			return arrival{}, err
		}
		switch typ {
		case msgEnd:
			s.endMsg = parseEnd(b)
			return arrival{slot: -1}, nil
		case msgFrame:
		default:
			return arrival{}, fmt.Errorf("%w: %s message during the scan", ErrProtocol, msgNames[typ])
		}
		m := parseFrameMsg(b)
		if err := s.c.postCtrl(i); err != nil && s.repostErr == nil {
			// The frame arrived: it is taken, the error ends the draining after it.
			s.repostErr = fmt.Errorf("post a control receive: %w", err)
		}
		if m.Slot >= uint32(len(s.slots)) {
			return arrival{}, fmt.Errorf("%w: frame %d in slot %d, the ring has %d", ErrProtocol, m.FrameNumber, m.Slot, len(s.slots))
		}
		if m.Len > uint32(s.slotSize) || m.Len < frame.HeaderSize {
			return arrival{}, fmt.Errorf("%w: frame %d of %d bytes in slot %d of %d bytes", ErrProtocol, m.FrameNumber, m.Len, m.Slot, s.slotSize)
		}
		slot, length = int(m.Slot), int(m.Len)
	case ctxSlot:
		b := s.slots[i][:c.Len]
		if isMessage(b) {
			typ, err := parseHeader(b)
			if err != nil {
				return arrival{}, err
			}
			if typ != msgEnd {
				return arrival{}, fmt.Errorf("%w: %s message during the scan", ErrProtocol, msgNames[typ])
			}
			s.endMsg = parseEnd(b)
			return arrival{slot: -1}, nil
		}
		slot, length = i, c.Len
	default:
		return arrival{}, fmt.Errorf("%w: completion with context %#x", ErrProtocol, c.Context)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inUse[slot] {
		return arrival{}, fmt.Errorf("%w: a frame in slot %d, which the pipeline still holds", ErrProtocol, slot)
	}
	s.inUse[slot] = true
	s.used++
	if s.used == len(s.slots) {
		s.fullAt = time.Now()
	}
	s.stats.Frames++
	s.stats.Bytes += uint64(length)
	return arrival{slot: slot, length: length}, nil
}

// record appends the frame of a to the recording, as it arrived. Bytes
// that do not make a frame record (no frame header, or a length that is
// not the header's) are not recorded; a failed write stops the recording, never the stream.
func (s *Stream) record(a arrival) {
	if s.rec == nil {
		return
	}
	b := s.slots[a.slot][:a.length]
	h, err := frame.ParseHeader(b)
	if err != nil || int64(h.PayloadSize)+frame.HeaderSize != int64(a.length) {
		return
	}
	if err := s.rec.WriteRecord(b); err != nil {
		s.mu.Lock()
		s.recErr = fmt.Errorf("record frame %d: %w", h.FrameNumber, err)
		s.mu.Unlock()
		s.rec = nil
	}
}

// deliver parses the frame in a slot.
func (s *Stream) deliver(slot, length int) (*pipeline.Frame, error) {
	b := s.slots[slot][:length]
	h, err := frame.ParseHeader(b)
	if err != nil {
		return nil, fmt.Errorf("slot %d: %w", slot, err)
	}
	// A frame whose length is not its header's is still a frame in a slot
	// of its own: the pipeline rejects it (its payload does not match its
	// header), and the frames after it go on.
	f := &s.frames[slot]
	f.Header, f.Payload = h, b[frame.HeaderSize:]
	return f, nil
}

// end handles the sender's end of scan: it answers with a bye and returns
// io.EOF.
func (s *Stream) end() error {
	m := s.endMsg
	s.mu.Lock()
	s.stats.SenderFrames = m.Frames
	s.stats.SenderHeldBack = time.Duration(m.HeldBack)
	held := s.stats.HeldBack
	frames := s.stats.Frames
	s.mu.Unlock()
	if err := s.c.sendSmall(putBye(s.c.scratch(1, byeSize), byeMsg{Frames: frames, HeldBack: uint64(held)})); err != nil {
		return fmt.Errorf("answer the end of scan: %w", err)
	}
	s.byeSent = true
	if m.Frames != frames {
		return fmt.Errorf("%w: the sender sent %d frames, %d arrived", ErrProtocol, m.Frames, frames)
	}
	return io.EOF
}

// byeLinger bounds how long Close waits for a sender that was told bye to
// close its side.
const byeLinger = time.Second

// awaitPeerClose waits up to d for the sender to shut the connection down,
// driving the provider's progress so that the bye goes out meanwhile.
func (s *Stream) awaitPeerClose(d time.Duration) {
	deadline := time.Now().Add(d)
	for !s.c.shutDown() && time.Now().Before(deadline) {
		s.c.readTx(10*time.Millisecond, 0)
	}
}

// slotOf returns the slot of a frame Next handed out; -1 for another.
func (s *Stream) slotOf(f *pipeline.Frame) int { return receive.SlotOf(s.frames, f) }

// Release gives f's slot back to the sender.
func (s *Stream) Release(f *pipeline.Frame) {
	slot := s.slotOf(f)
	if slot < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.inUse[slot] {
		return
	}
	s.inUse[slot] = false
	if s.used == len(s.slots) {
		s.stats.HeldBack += time.Since(s.fullAt)
		s.fullAt = time.Time{}
	}
	s.used--
	f.Payload = nil
	if s.closed || s.err != nil || s.stop != nil {
		return // after a Stop the sender sends nothing more
	}
	if s.hello.Mode == ModeSend {
		if err := s.postSlot(slot); err != nil {
			s.creditLost(slot, "post the slot's receive", err)
			return
		}
	}
	if err := s.c.sendSmall(putCredit(s.c.scratch(0, creditSize), uint32(slot))); err != nil {
		s.creditLost(slot, "return the slot's credit", err)
	}
}

// creditLost ends the stream when a slot cannot be given back to the
// sender, which would otherwise wait for it, silently, until a timeout:
// Next hands out every frame that arrived, then returns the reason, as
// after a Stop. s.mu is held.
func (s *Stream) creditLost(slot int, what string, err error) {
	if s.stop == nil {
		s.stop = fmt.Errorf("module %d: %s (slot %d) to the sender: %w", s.hello.Module, what, slot, err)
	}
}

// Close closes the connection and frees its slots. No frame of the stream
// may be used after.
func (s *Stream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.pollDone != nil {
		close(s.pollQuit)
		<-s.pollDone
		s.idleTimer.Stop()
	}
	var errs []error
	if s.c.ep != nil {
		if s.byeSent {
			s.awaitPeerClose(byeLinger)
		}
		s.c.ep.Shutdown()
		errs = append(errs, s.c.ep.Close())
	}
	if s.ringMR != nil {
		errs = append(errs, s.ringMR.Close())
	}
	errs = append(errs, s.c.close())
	if s.ringMem != nil {
		// Once the domain is closed, and its registration cache with it.
		errs = append(errs, s.ringMem.Free())
	}
	l := s.l
	l.mu.Lock()
	if s.module {
		delete(l.modules, s.hello.Module)
	}
	l.streams--
	if l.peers[s.peer]--; l.peers[s.peer] <= 0 {
		delete(l.peers, s.peer)
	}
	closeFab := l.fabClosing && l.streams == 0
	l.mu.Unlock()
	if closeFab {
		errs = append(errs, l.fab.Close())
	}
	return errors.Join(errs...)
}
