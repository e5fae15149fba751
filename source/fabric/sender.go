package fabric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"h5ingest/frame"
	"h5ingest/source/capture"
	"h5ingest/source/fabric/internal/fi"
)

// SenderConfig sets up a Sender.
type SenderConfig struct {
	Provider string // libfabric provider: "tcp" or "verbs"
	Addr     string // the receiver's host:port
	Hello    Hello  // module, mode and scan
	// Buffers is how many frames may be in transmission at once.
	Buffers int
	// Timeout bounds connecting, the control exchange and the end of scan.
	Timeout time.Duration
	// Waiting, where set, is called once by DialWait when its first try
	// finds no receiver listening yet, before it tries again: a command
	// says that it waits.
	Waiting func()

	rawHello []byte                 // tests: sent instead of Hello's encoding
	fake     func(*fi.Info)         // tests: changes what the provider says of itself
	sendErr  func(typ uint16) error // tests: fails the small messages it returns an error for
}

// SendStats counts what a Sender sent.
type SendStats struct {
	Frames   uint64        // frames sent
	Bytes    uint64        // bytes sent, headers included
	HeldBack time.Duration // time spent waiting for credits
	Elapsed  time.Duration // since the connection was accepted
	// Credited are the frames the receiver gave their slot back for (a
	// credit): frames it took and was done with. A receiver that stops a
	// scan gives no more credits and closes the connection without a bye,
	// so Credited is then all the sender knows it took: the frames in its
	// ring when it stopped (at most the ring's slots) are taken too, those
	// that arrived later are not.
	Credited uint64
	// Received and ReceiverHeldBack are the receiver's counts at the end
	// of the scan (frames received, time its ring was full), from its bye;
	// 0 where it sent none.
	Received         uint64
	ReceiverHeldBack time.Duration
	// Skipped are the frames of other modules that SendCapture found in
	// its capture and did not send.
	Skipped uint64
	// Sending is the time from the first frame posted to the last: the
	// pace is (Frames-1)/Sending.
	Sending time.Duration
}

// Rate returns the frames a second the sender kept from its first frame to
// its last; 0 with fewer than two frames.
func (st SendStats) Rate() float64 {
	if st.Frames < 2 || st.Sending <= 0 {
		return 0
	}
	return float64(st.Frames-1) / st.Sending.Seconds()
}

// Sender sends frames to a receiver the way a detector module does. Its
// methods are called from one goroutine.
type Sender struct {
	cfg    SenderConfig
	fab    *fi.Fabric
	c      *conn
	accept Accept

	bufMem  *fi.Memory
	bufMR   *fi.MemoryRegion
	bufs    [][]byte
	freeBuf []int // buffers not in transmission
	cur     int   // buffer handed out by Buffer; -1 when none

	freeSlots []uint32 // write mode: slots the sender may write
	slotUsed  []bool
	credits   int // send mode: receives the receiver has posted

	start   time.Time
	firstAt time.Time // first frame posted
	stats   SendStats
	bye     bool
	err     error
}

// DialWait is Dial for a sender that may start before its receiver: it
// tries again every 100 ms while the receiver is not listening yet (a
// temporary error, or the connection reset before the receiver answered
// the hello, when no frame has been sent), up to cfg.Timeout or until ctx
// ends; then its error satisfies NotListening. A refusal in the protocol
// is final.
func DialWait(ctx context.Context, cfg SenderConfig) (*Sender, error) {
	deadline := time.Now().Add(cfg.Timeout)
	for tries := 0; ; tries++ {
		s, err := Dial(ctx, cfg)
		if err == nil || !retryable(err) || time.Now().After(deadline) {
			return s, err
		}
		if tries == 0 && cfg.Waiting != nil {
			cfg.Waiting()
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// NotListening reports whether Dial's err says that no receiver was
// listening at the address (nothing there, or not yet).
func NotListening(err error) bool { return retryable(err) }

// retryable reports whether a connect that failed with err may be tried
// again.
func retryable(err error) bool {
	var fe *Error
	if !errors.As(err, &fe) {
		return false
	}
	return fe.Temporary() || errors.Is(err, syscall.ECONNRESET)
}

// Dial connects to the receiver at cfg.Addr and runs the control
// exchange. A refusal is returned as a *RefusedError.
func Dial(ctx context.Context, cfg SenderConfig) (_ *Sender, err error) {
	if cfg.Buffers <= 0 {
		cfg.Buffers = 4
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Hello.Mode == 0 {
		cfg.Hello.Mode = ModeWrite
	}
	s := &Sender{cfg: cfg, cur: -1}
	defer func() {
		if err != nil {
			s.close()
			err = fmt.Errorf("connect to %s with provider %s: %w", cfg.Addr, cfg.Provider, err)
		}
	}()
	hello := cfg.rawHello
	if hello == nil {
		if hello, err = appendHello(nil, &cfg.Hello); err != nil {
			return nil, err
		}
	}
	info, err := fi.GetInfo(cfg.Provider, cfg.Addr, false)
	if err != nil {
		return nil, err
	}
	if cfg.fake != nil {
		cfg.fake(info)
	}
	if s.fab, err = fi.OpenFabric(info); err != nil {
		info.Close()
		return nil, err
	}
	ctrl := min(info.RxSize(), 256)
	if n, most := cfg.Hello.FrameSize(), info.MaxMessage(); uint64(n) > most {
		info.Close()
		return nil, fmt.Errorf("frames of %d bytes: provider %s sends messages of at most %d bytes (its max_msg_size)", n, cfg.Provider, most)
	}
	if s.c, err = openConn(s.fab, info, ctrl); err != nil {
		info.Close()
		return nil, err
	}
	s.c.txDone = func(c fi.Completion) {
		if c.Context&^ctxIndex == ctxSlot {
			s.freeBuf = append(s.freeBuf, int(c.Context&ctxIndex))
		}
	}
	s.c.sendErr = cfg.sendErr
	// Every control buffer but the last takes the receiver's messages;
	// the last sends ours.
	for i := range ctrl - 1 {
		if err := s.c.postCtrl(i); err != nil {
			return nil, err
		}
	}
	if err := s.c.ep.Connect(info); err != nil {
		return nil, err
	}
	if err := s.c.waitEvent(fi.EventConnected, cfg.Timeout, "connect"); err != nil {
		return nil, err
	}
	if err := s.c.sendCtrl(ctrl-1, hello, cfg.Timeout); err != nil {
		return nil, err
	}
	b, err := s.waitCtrl(ctx, cfg.Timeout, "the receiver's answer")
	if err != nil {
		return nil, err
	}
	if typ, err := parseHeader(b); err == nil && typ == msgRefuse {
		r, err := parseRefuse(b)
		if err != nil {
			return nil, err
		}
		return nil, r
	}
	if s.accept, err = parseAccept(b); err != nil {
		return nil, err
	}
	if n := int(s.accept.Slots) + 2; n > ctrl-1 {
		return nil, fmt.Errorf("%w: %d slots, more credits than this sender can take (%d)", ErrProtocol, s.accept.Slots, ctrl-3)
	}
	if s.bufMem, err = fi.Alloc(cfg.Buffers * int(s.accept.SlotSize)); err != nil {
		return nil, err
	}
	// Sent and written from, never written into by the receiver.
	if s.bufMR, err = fi.Register(s.c.dom, s.bufMem, fi.AccessSend|fi.AccessWrite); err != nil {
		return nil, lockedMemoryHint(cfg.Provider, int64(len(s.bufMem.Bytes())), err)
	}
	size := int(s.accept.SlotSize)
	for i := range cfg.Buffers {
		s.bufs = append(s.bufs, s.bufMem.Bytes()[i*size:(i+1)*size:(i+1)*size])
		s.freeBuf = append(s.freeBuf, i)
	}
	s.slotUsed = make([]bool, s.accept.Slots)
	for i := range s.accept.Slots {
		s.freeSlots = append(s.freeSlots, s.accept.Slots-1-i)
	}
	s.credits = int(s.accept.Slots)
	s.start = time.Now()
	return s, nil
}

// Accept returns the receiver's ring, as it described it.
func (s *Sender) Accept() Accept { return s.accept }

// waitCtrl waits for one control message from the receiver.
func (s *Sender) waitCtrl(ctx context.Context, timeout time.Duration, what string) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n, err := s.c.rx.Read(s.c.comp[:1], 50*time.Millisecond)
		if err != nil {
			return nil, fmt.Errorf("receive %s: %w", what, err)
		}
		if n == 1 {
			c := s.c.comp[0]
			i := int(c.Context & ctxIndex)
			b := s.c.ctrlBuf(i)[:c.Len]
			return b, s.c.postCtrl(i)
		}
		if s.c.shutDown() {
			return nil, fmt.Errorf("receive %s: %w", what, ErrDisconnected)
		}
	}
	return nil, fmt.Errorf("receive %s: none in %v: %w", what, timeout, ErrTimeout)
}

// progress handles the completions there are, waiting up to wait for the
// first: finished transmissions free their buffers, credits free slots.
func (s *Sender) progress(wait time.Duration) error {
	n, _, err := s.c.readTx(0, 0) // frame buffers come back through txDone
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	if n > 0 {
		wait = 0
	}
	n, err = s.c.rx.Read(s.c.comp[:], wait)
	if err != nil {
		if s.c.shutDown() {
			err = fmt.Errorf("%w: %w", ErrDisconnected, err)
		}
		return fmt.Errorf("receive credits: %w", err)
	}
	for _, c := range s.c.comp[:n] {
		i := int(c.Context & ctxIndex)
		if err := s.handle(s.c.ctrlBuf(i)[:c.Len]); err != nil {
			return err
		}
		if err := s.c.postCtrl(i); err != nil {
			return err
		}
	}
	return nil
}

// handle handles one message from the receiver during the scan.
func (s *Sender) handle(b []byte) error {
	typ, err := parseHeader(b)
	if err != nil {
		return err
	}
	switch typ {
	case msgCredit:
		slot := parseCredit(b)
		if s.cfg.Hello.Mode == ModeSend {
			s.credits++
			if s.stats.Credited < s.stats.Frames { // not the end message's receive
				s.stats.Credited++
			}
			return nil
		}
		if slot >= s.accept.Slots || !s.slotUsed[slot] {
			return fmt.Errorf("%w: credit for slot %d, which is not in use", ErrProtocol, slot)
		}
		s.slotUsed[slot] = false
		s.freeSlots = append(s.freeSlots, slot)
		s.stats.Credited++
	case msgBye:
		m := parseBye(b)
		s.stats.Received, s.stats.ReceiverHeldBack = m.Frames, time.Duration(m.HeldBack)
		s.bye = true
	default:
		return fmt.Errorf("%w: %s message during the scan", ErrProtocol, msgNames[typ])
	}
	return nil
}

// canSend reports whether the receiver has room for one more message.
func (s *Sender) canSend() bool {
	if s.cfg.Hello.Mode == ModeSend {
		return s.credits > 0
	}
	return len(s.freeSlots) > 0
}

// Buffer waits for a free transmit buffer and a credit (a free slot at the
// receiver), and returns the buffer, as large as a slot, to fill with the
// next frame: header and payload. The time spent waiting for the credit
// counts as held back.
func (s *Sender) Buffer(ctx context.Context) ([]byte, error) {
	if s.err != nil {
		return nil, s.err
	}
	if err := s.wait(ctx, func() bool { return len(s.freeBuf) > 0 }, false); err != nil {
		return nil, err
	}
	if err := s.wait(ctx, s.canSend, true); err != nil {
		return nil, err
	}
	s.cur = s.freeBuf[len(s.freeBuf)-1]
	s.freeBuf = s.freeBuf[:len(s.freeBuf)-1]
	return s.bufs[s.cur], nil
}

// wait makes progress until ready reports true; held counts the time.
func (s *Sender) wait(ctx context.Context, ready func() bool, held bool) error {
	if err := s.progress(0); err != nil {
		return s.fail(err)
	}
	if ready() {
		return nil
	}
	start := time.Now()
	if held {
		defer func() { s.stats.HeldBack += time.Since(start) }()
	}
	for !ready() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.progress(20 * time.Millisecond); err != nil {
			return s.fail(err)
		}
		if s.c.shutDown() {
			return s.fail(fmt.Errorf("send: %w", ErrDisconnected))
		}
	}
	return nil
}

func (s *Sender) fail(err error) error {
	if s.err == nil {
		s.err = err
	}
	return s.err
}

// Post sends the first n bytes of the buffer Buffer returned: one frame,
// header and payload.
func (s *Sender) Post(n int) error {
	if s.cur < 0 {
		return errors.New("post: no buffer: call Buffer first")
	}
	b := s.bufs[s.cur][:n]
	i := s.cur
	s.cur = -1
	if n < frame.HeaderSize {
		s.freeBuf = append(s.freeBuf, i)
		return fmt.Errorf("post: a frame of %d bytes, shorter than its header", n)
	}
	fn := binary.LittleEndian.Uint64(b[8:])
	if err := s.post(b, i, fn); err != nil {
		return s.fail(fmt.Errorf("send frame %d: %w", fn, err))
	}
	now := time.Now()
	if s.stats.Frames == 0 {
		s.firstAt = now
	}
	s.stats.Sending = now.Sub(s.firstAt)
	s.stats.Frames++
	s.stats.Bytes += uint64(n)
	return nil
}

func (s *Sender) post(b []byte, buf int, fn uint64) error {
	if s.cfg.Hello.Mode == ModeSend {
		s.credits--
		return s.retry(func() error { return s.c.ep.Send(b, s.bufMR, ctxSlot|uint64(buf)) })
	}
	slot := s.freeSlots[len(s.freeSlots)-1]
	s.freeSlots = s.freeSlots[:len(s.freeSlots)-1]
	s.slotUsed[slot] = true
	addr := slotAddr(s.accept, slot)
	if err := s.retry(func() error { return s.c.ep.Write(b, s.bufMR, addr, s.accept.Key, ctxSlot|uint64(buf)) }); err != nil {
		return err
	}
	return s.notifyFrame(frameMsg{Slot: slot, Len: uint32(len(b)), FrameNumber: fn})
}

// slotAddr returns the remote address of a slot of the ring a described:
// its address (the ring's virtual address where the receiver's provider
// uses FI_MR_VIRT_ADDR, as verbs does; 0 where it takes offsets, as tcp
// does) plus the slot's offset.
func slotAddr(a Accept, slot uint32) uint64 { return a.Addr + uint64(slot)*uint64(a.SlotSize) }

// notifyFrame tells the receiver a frame is in a slot. The provider keeps
// sends after writes (FI_ORDER_SAW), so the frame is in place first.
func (s *Sender) notifyFrame(m frameMsg) error {
	msg := putFrameMsg(s.c.scratch(0, frameMsgSize), m)
	return s.retry(func() error { return s.c.postSmall(msg) })
}

// retry calls post until the transmit queue takes it, making progress
// meanwhile.
func (s *Sender) retry(post func() error) error {
	deadline := time.Now().Add(s.cfg.Timeout)
	for {
		err := post()
		var fe *fi.Error
		if err == nil || !errors.As(err, &fe) || fe.Code != syscall.EAGAIN || time.Now().After(deadline) {
			return err
		}
		if err := s.progress(time.Millisecond); err != nil {
			return err
		}
	}
}

// Stats returns what the sender has sent so far.
func (s *Sender) Stats() SendStats {
	st := s.stats
	st.Elapsed = time.Since(s.start)
	return st
}

// Close ends the scan: it tells the receiver there are no more frames,
// waits for its answer, and closes the connection.
func (s *Sender) Close(ctx context.Context) (SendStats, error) {
	err := s.end(ctx)
	st := s.Stats()
	if cerr := s.close(); err == nil {
		err = cerr
	}
	return st, err
}

func (s *Sender) end(ctx context.Context) error {
	if s.err != nil {
		return s.err
	}
	if err := s.wait(ctx, s.canSend, false); err != nil {
		return err
	}
	msg := putEnd(s.c.scratch(0, endSize), endMsg{Frames: s.stats.Frames, HeldBack: uint64(s.stats.HeldBack)})
	if s.cfg.Hello.Mode == ModeSend {
		s.credits--
	}
	if err := s.retry(func() error { return s.c.postSmall(msg) }); err != nil {
		return fmt.Errorf("send end of scan: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if err := s.wait(ctx, func() bool { return s.bye }, false); err != nil {
		return fmt.Errorf("wait for the receiver to take the end of scan: %w", err)
	}
	if s.stats.Received != s.stats.Frames {
		return fmt.Errorf("%w: sent %d frames, the receiver got %d", ErrProtocol, s.stats.Frames, s.stats.Received)
	}
	return nil
}

// Abort closes the connection without ending the scan, as a detector that
// loses power does.
func (s *Sender) Abort() error { return s.close() }

func (s *Sender) close() error {
	var errs []error
	if s.c != nil {
		if s.c.ep != nil {
			s.c.ep.Shutdown()
			errs = append(errs, s.c.ep.Close())
		}
		if s.bufMR != nil {
			errs = append(errs, s.bufMR.Close())
		}
		errs = append(errs, s.c.close())
		if s.bufMem != nil {
			// Once the domain is closed (see openConn).
			errs = append(errs, s.bufMem.Free())
		}
		s.c = nil
	}
	if s.fab != nil {
		errs = append(errs, s.fab.Close())
		s.fab = nil
	}
	return errors.Join(errs...)
}

// SendCapture sends every frame of r of the sender's module (its hello's)
// through s, fps frames a second (0: as fast as the receiver takes them),
// and ends the scan. Frames of other modules, in a capture of several
// modules' interleaved frames, are skipped and counted (SendStats.Skipped).
// A frame larger than the receiver's slots stops it with an error.
func SendCapture(ctx context.Context, s *Sender, r *capture.Reader, fps float64) (SendStats, error) {
	var period time.Duration
	if fps > 0 {
		period = time.Duration(float64(time.Second) / fps)
	}
	start := time.Now()
	for i := 0; ; i++ {
		if period > 0 {
			if d := time.Until(start.Add(time.Duration(i) * period)); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return s.Stats(), ctx.Err()
				}
			}
		}
		buf, err := s.Buffer(ctx)
		if err != nil {
			return s.Stats(), err
		}
		h, payload, err := r.Next(buf[frame.HeaderSize:])
		for err == nil && h.ModuleID != s.cfg.Hello.Module {
			s.stats.Skipped++
			h, payload, err = r.Next(buf[frame.HeaderSize:])
		}
		if errors.Is(err, io.EOF) {
			s.cur, s.freeBuf = -1, append(s.freeBuf, s.cur)
			return s.Close(ctx)
		}
		if errors.Is(err, io.ErrShortBuffer) {
			return s.Stats(), fmt.Errorf("%w: frame %d of %d bytes does not fit the receiver's slots of %d",
				ErrProtocol, h.FrameNumber, frame.HeaderSize+int64(h.PayloadSize), s.accept.SlotSize)
		}
		if err != nil {
			return s.Stats(), err
		}
		h.Put(buf)
		if err := s.Post(frame.HeaderSize + len(payload)); err != nil {
			return s.Stats(), err
		}
	}
}
