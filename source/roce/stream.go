package roce

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/receive"
	"h5ingest/source/roce/internal/verbs"
)

// pollBatch is how many completions one poll takes at most.
const pollBatch = 32

// Stream is one module's queue pair and ring: a receive.Stream of the
// frames its front end writes. Next hands frames out in the order their
// completions came; a frame's payload lies in its slot, read in place,
// and Intact says, after the pipeline's last read of it, whether the
// front end wrote over it meanwhile. Next is called from one goroutine at
// a time; Intact, Release, Stop, Stats and Close from any.
type Stream struct {
	st       *station
	cfg      *Config
	module   int
	mem      verbs.Memory
	cq       verbs.CQ
	qp       verbs.QP
	psn      uint32
	slotSize int
	slots    [][]byte
	frames   []pipeline.Frame // one per slot
	handed   []arrival        // what each slot's frame was when Next handed it out

	readyOnce sync.Once
	readyErr  error

	// The completion queue is polled by the stream's goroutine and, for
	// a fresh look, by Intact; cqMu serialises them and guards what the
	// polls learn.
	cqMu    sync.Mutex
	wc      [pollBatch]verbs.Completion
	seen    bool   // a completion has come
	maxSeen uint64 // the highest sequence number come
	count   uint64 // completions come
	gen     []uint64
	cqErr   error        // the queue pair or its completion queue failed
	plan    uint64       // the scan's frames; 0: no plan
	peer    FrontEndPort // the front end's end the queue pair is linked to
	linked  bool         // the queue pair is ready to receive from peer
	warned  int          // warnings logged about the front end's numbering

	mu       sync.Mutex
	queue    []arrival // frames come and not yet handed out, a ring
	qHead    int
	qLen     int
	signal   chan struct{}
	used     int    // slots handed out and not released
	inUse    []bool // by slot: its frame is handed out and not released
	released chan struct{}
	stop     error
	stopAt   uint64
	stopSeen bool
	ended    bool // the plan's last frame has come
	stats    receive.Stats
	closed   bool
	scanning bool // a scan has the stream (a station's, between beginScan and endScan)
	// unlinked: the scan's front end is not linked yet (a station's, from
	// beginScan to connect): what comes is another scan's front end's,
	// one still writing, and is not taken.
	unlinked bool
	foreign  uint64 // writes that came while unlinked, this scan
	rec      receive.Recorder
	recErr   error
	recPool  sync.Pool

	pollQuit    chan struct{}
	pollDone    chan struct{}
	pollStarted atomic.Bool
	idle        *time.Timer
}

// arrival is a frame whose completion came: its sequence number (the
// frame number, or with slot immediates the count of writes before it),
// its slot and length, and the slot's generation when it came.
type arrival struct {
	seq, gen   uint64
	slot, size int
}

// newStream creates a module's ring, completion queue and queue pair, and
// posts its receives.
func newStream(st *station, module int) (_ *Stream, err error) {
	cfg := &st.cfg
	s := &Stream{st: st, cfg: cfg, module: module, slotSize: cfg.SlotSize(), plan: cfg.Frames, scanning: !st.kept,
		signal: make(chan struct{}, 1), pollQuit: make(chan struct{}), pollDone: make(chan struct{})}
	defer func() {
		if err != nil {
			s.free()
		}
	}()
	ring := cfg.Slots * s.slotSize
	if s.mem, err = st.dev.Register(ring); err != nil {
		return nil, fmt.Errorf("register a ring of %d slots of %d bytes (%d bytes; see ulimit -l): %w", cfg.Slots, s.slotSize, ring, err)
	}
	b := s.mem.Bytes()
	for i := range cfg.Slots {
		s.slots = append(s.slots, b[i*s.slotSize:(i+1)*s.slotSize])
	}
	s.frames = make([]pipeline.Frame, cfg.Slots)
	s.handed = make([]arrival, cfg.Slots)
	s.gen = make([]uint64, cfg.Slots)
	s.queue = make([]arrival, cfg.Slots)
	s.inUse = make([]bool, cfg.Slots)
	s.released = make(chan struct{}, 1)
	// Every completion consumes a receive and is reposted at once: twice
	// the ring keeps the front end from ever meeting an empty receive
	// queue, and a completion queue as deep cannot overflow (a completion
	// needs a receive).
	recvs := 2 * cfg.Slots
	if s.cq, err = st.dev.NewCQ(recvs + 16); err != nil {
		return nil, fmt.Errorf("create the completion queue: %w", err)
	}
	if s.qp, err = st.dev.NewQP(s.cq, cfg.QPType, 1, recvs); err != nil {
		return nil, fmt.Errorf("create the %v queue pair: %w", cfg.QPType, err)
	}
	if err = s.initQP(); err != nil {
		return nil, err
	}
	var p [4]byte
	rand.Read(p[:])
	s.psn = binary.LittleEndian.Uint32(p[:]) & 0xffffff
	s.recPool.New = func() any { b := make([]byte, frame.HeaderSize+cfg.Format.PayloadSize()); return &b }
	return s, nil
}

// params returns the stream's end of its queue pair.
func (s *Stream) params() ModuleParams {
	port := s.st.dev.Port()
	return ModuleParams{Module: s.module, Device: port.Device, Port: port.Num, GID: port.GID.String(), GIDIndex: port.GIDIndex,
		GIDType: port.GIDType, QPN: s.qp.Num(), PSN: s.psn, Addr: s.mem.Addr(), RKey: s.mem.RKey(),
		SlotSize: s.slotSize, Slots: s.cfg.Slots, MTU: s.cfg.MTU, QPType: qpTypeName(s.cfg.QPType),
		Immediate: s.cfg.Immediate, FrameHeader: s.cfg.Header}
}

func qpTypeName(t verbs.QPType) string {
	if t == verbs.UC {
		return "uc"
	}
	return "rc"
}

// initQP moves the queue pair to INIT and posts its receives.
func (s *Stream) initQP() error {
	if err := s.qp.Init(); err != nil {
		return err
	}
	recvs := 2 * s.cfg.Slots
	for i := range recvs {
		if err := s.qp.PostRecv(uint64(i)); err != nil {
			return fmt.Errorf("post receive %d of %d: %w", i+1, recvs, err)
		}
	}
	return nil
}

// connect brings the queue pair to ready-to-receive toward the front end
// fe, and starts taking its completions. A queue pair linked to fe
// already, and not failed, is left as it is; one linked to another end,
// or failed, is reset (keeping its number) and brought up afresh, its
// completions left from before dropped.
func (s *Stream) connect(fe FrontEndPort) error {
	gid, err := fe.peer()
	if err != nil {
		return err
	}
	s.cqMu.Lock()
	same, linked := s.linked && s.peer == fe && s.cqErr == nil, s.linked
	s.cqMu.Unlock()
	if same {
		s.linkedForScan()
		return nil
	}
	if linked {
		if err := s.unlink(); err != nil {
			return err
		}
		s.cfg.Log.Info("queue pair reset for another front end's end", zap.Int("module", s.module), zap.Uint32("qpn", s.qp.Num()),
			zap.String("front_end_gid", fe.GID), zap.Uint32("front_end_qpn", fe.QPN))
	}
	if err := s.qp.ReadyToReceive(verbs.Remote{GID: gid, QPN: fe.QPN, PSN: fe.PSN}, s.cfg.MTU); err != nil {
		return fmt.Errorf("module %d: %w", s.module, err)
	}
	s.cfg.Log.Info("queue pair ready to receive", zap.Int("module", s.module), zap.Uint32("qpn", s.qp.Num()),
		zap.String("front_end_gid", fe.GID), zap.Uint32("front_end_qpn", fe.QPN))
	s.cqMu.Lock()
	s.peer, s.linked = fe, true
	s.cqMu.Unlock()
	s.linkedForScan()
	s.pollStarted.Store(true)
	go s.poll()
	return nil
}

// unlink resets a linked queue pair (keeping its number) and brings it back
// to INIT with its receives posted, its completions left from before
// dropped: nothing lands in the ring until it is brought up toward a
// front end again. A queue pair not linked is left as it is.
func (s *Stream) unlink() error {
	s.cqMu.Lock()
	linked := s.linked
	s.cqMu.Unlock()
	if !linked {
		return nil
	}
	if s.pollStarted.Load() {
		close(s.pollQuit)
		<-s.pollDone
		s.pollStarted.Store(false)
		s.pollQuit, s.pollDone = make(chan struct{}), make(chan struct{})
	}
	if err := s.qp.Reset(); err != nil {
		return fmt.Errorf("module %d: %w", s.module, err)
	}
	s.cqMu.Lock()
	for {
		n, err := s.cq.Poll(s.wc[:])
		if n == 0 || err != nil {
			break
		}
	}
	s.linked, s.cqErr = false, nil
	s.cqMu.Unlock()
	if err := s.initQP(); err != nil {
		return fmt.Errorf("module %d: %w", s.module, err)
	}
	return nil
}

// linkedForScan takes what comes from now on for the scan: its front end
// is linked.
func (s *Stream) linkedForScan() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unlinked = false
}

// beginScan gives the stream to a scan of plan frames: its ring empty,
// its counts zero, nothing stopped.
func (s *Stream) beginScan(plan uint64) {
	s.cqMu.Lock()
	defer s.cqMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plan, s.seen, s.maxSeen, s.count, s.warned = plan, false, 0, 0, 0
	s.qHead, s.qLen, s.used = 0, 0, 0
	clear(s.inUse)
	s.stop, s.stopAt, s.stopSeen, s.ended = nil, 0, false, false
	s.stats = receive.Stats{}
	s.rec, s.recErr = nil, nil
	s.readyOnce, s.readyErr = sync.Once{}, nil
	s.scanning, s.unlinked, s.foreign = true, true, 0
	for _, c := range []chan struct{}{s.signal, s.released} {
		select {
		case <-c:
		default:
		}
	}
}

// errScanEnded stops a station's stream between scans: what comes then
// is no scan's.
var errScanEnded = errors.New("the scan has ended")

// endScan takes the stream back from its scan: frames that come until the
// next scan are counted and not taken.
func (s *Stream) endScan() {
	s.cqMu.Lock()
	defer s.cqMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop == nil {
		s.stop, s.stopAt, s.stopSeen = errScanEnded, s.maxSeen, s.seen
	}
	s.qHead, s.qLen, s.used = 0, 0, 0
	clear(s.inUse)
	s.rec = nil
	s.scanning = false
}

// inScan reports whether a scan has the stream.
func (s *Stream) inScan() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scanning
}

// Module says which module the stream receives, and how.
func (s *Stream) Module() receive.Module {
	return receive.Module{ID: uint16(s.module), Format: s.cfg.Format, Frames: s.plan,
		Mode: fmt.Sprintf("roce %v, immediate %s, header %s", s.cfg.QPType, s.cfg.Immediate, s.cfg.Header), HeadersWritten: s.cfg.Header == HeaderNone}
}

// Record makes the stream keep every frame it hands out, once Intact has
// found it whole, in r.
func (s *Stream) Record(r receive.Recorder) { s.rec = r }

// RecordErr returns the error that stopped the recording, or nil.
func (s *Stream) RecordErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recErr
}

// poll is the stream's receiving goroutine: it takes completions off the
// queue as they come, reposts their receives and queues their frames,
// whether or not the pipeline is ready for them, until Close or a failure
// of the queue pair.
func (s *Stream) poll() {
	defer close(s.pollDone)
	idle := 0
	for {
		select {
		case <-s.pollQuit:
			return
		default:
		}
		n, err := s.pollOnce()
		switch {
		case err != nil:
			return
		case n > 0:
			idle = 0
		case idle < 64:
			idle++
			runtime.Gosched()
		default:
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// pollOnce takes the completions there are, and tells Next of the frames
// they bring.
func (s *Stream) pollOnce() (int, error) {
	s.cqMu.Lock()
	if s.cqErr != nil {
		s.cqMu.Unlock()
		return 0, s.cqErr
	}
	n, err := s.cq.Poll(s.wc[:])
	queued := false
	for i := range n {
		if !s.take(s.wc[i]) {
			break
		}
		queued = true
	}
	if err != nil && s.cqErr == nil {
		s.cqErr = fmt.Errorf("module %d: %w", s.module, err)
	}
	err = s.cqErr
	s.cqMu.Unlock()
	if queued || err != nil {
		s.wake()
	}
	return n, err
}

// wake tells a waiting Next that something came.
func (s *Stream) wake() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// take handles one completion; false where it ends the receiving. cqMu
// is held.
func (s *Stream) take(c verbs.Completion) bool {
	if c.Status != verbs.Success {
		if c.Status == verbs.WRFlushErr {
			s.cqErr = fmt.Errorf("module %d: queue pair %d is in error: its receives were flushed (the front end's writes broke it, or it was reset)", s.module, s.qp.Num())
		} else {
			s.cqErr = fmt.Errorf("module %d: a completion on queue pair %d failed: %v (vendor syndrome %#x)", s.module, s.qp.Num(), c.Status, c.Vendor)
		}
		return false
	}
	if c.Opcode != verbs.OpRecvRDMAImm {
		s.cqErr = fmt.Errorf("module %d: queue pair %d: a completion of opcode %d, where only writes with immediate data come", s.module, s.qp.Num(), c.Opcode)
		return false
	}
	if err := s.qp.PostRecv(c.WRID); err != nil {
		s.cqErr = fmt.Errorf("module %d: post a receive again: %w", s.module, err)
		return false
	}
	if s.fromAnotherScan(c) {
		return true
	}
	var seq uint64
	slot := 0
	if s.cfg.Immediate == ImmediateFrame {
		seq = uint64(c.Imm)
		slot = int(seq % uint64(s.cfg.Slots))
	} else {
		seq = s.count
		if int(c.Imm) >= s.cfg.Slots {
			s.frontEndWarn("a write names a slot beyond the ring: its frame is not taken", zap.Uint32("slot", c.Imm), zap.Int("slots", s.cfg.Slots))
			s.count++
			s.mu.Lock()
			s.stats.Frames++
			s.stats.Damaged++
			s.stats.Undelivered++
			s.mu.Unlock()
			return true
		}
		slot = int(c.Imm)
		if want := int(seq % uint64(s.cfg.Slots)); slot != want {
			s.frontEndWarn("a write went to another slot than the next one", zap.Int("slot", slot), zap.Int("expected", want))
		}
	}
	s.count++
	s.gen[slot]++
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.seen || s.cfg.Immediate == ImmediateSlot:
		// Slot immediates number the writes themselves: no gap nor
		// disorder shows here (the headers' numbers show them to the
		// pipeline).
	case seq <= s.maxSeen:
		s.stats.Disordered++
		s.frontEndWarn("a frame number repeats or goes backwards", zap.Uint64("frame", seq), zap.Uint64("after", s.maxSeen))
	case seq > s.maxSeen+1:
		s.stats.Gaps += seq - s.maxSeen - 1
	}
	if !s.seen || seq > s.maxSeen {
		s.maxSeen, s.seen = seq, true
	}
	s.stats.Frames++
	s.stats.Bytes += uint64(c.ByteLen)
	if s.stop != nil && (!s.stopSeen || seq > s.stopAt) || s.ended {
		// A stopped stream takes no frame that comes later, nor an ended
		// one a frame beyond the plan's last.
		s.stats.Undelivered++
		return true
	}
	if s.qLen == len(s.queue) {
		// The pipeline is a whole ring behind: the oldest frame waiting
		// has been written over, or is about to be.
		s.qHead = (s.qHead + 1) % len(s.queue)
		s.qLen--
		s.stats.Overrun++
		s.stats.Undelivered++
	}
	s.queue[(s.qHead+s.qLen)%len(s.queue)] = arrival{seq: seq, gen: s.gen[slot], slot: slot, size: int(c.ByteLen)}
	s.qLen++
	if n := s.plan; n > 0 && (s.cfg.Immediate == ImmediateFrame && seq == n-1 || s.cfg.Immediate == ImmediateSlot && s.count == n) {
		s.ended = true
	}
	return true
}

// fromAnotherScan reports whether c is a write that came before the
// scan's front end was linked: another scan's front end, still writing.
// Its frame would pass for this scan's (and the same frame of this scan's
// front end be dropped as a repeat): it is not taken, and leaves the
// scan's counts and numbering alone. cqMu is held.
func (s *Stream) fromAnotherScan(c verbs.Completion) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.unlinked {
		return false
	}
	s.foreign++
	if s.foreign == 1 {
		s.cfg.Log.Warn("a front end writes before the scan's front end is linked: its frames are another scan's, neither taken nor counted", zap.Int("module", s.module), zap.Uint32("immediate", c.Imm))
	}
	return true
}

// frontEndWarn logs what the front end did wrong, the first few times.
// cqMu is held.
func (s *Stream) frontEndWarn(msg string, fields ...zap.Field) {
	s.warned++
	if s.warned > 10 {
		return
	}
	if s.warned == 10 {
		msg += " (no more such warnings for this module)"
	}
	s.cfg.Log.Warn(msg, append(fields, zap.Int("module", s.module))...)
}

// overrun reports whether the front end may have written over the frame
// of a, from what the polls have seen. cqMu is held.
func (s *Stream) overrun(a arrival) bool {
	return s.gen[a.slot] != a.gen || s.maxSeen >= a.seq+uint64(s.cfg.Slots-s.cfg.WriteGuard)
}

// Next returns the next frame that came: io.EOF once the plan's last has
// been handed out, Stop's cause after a Stop (once the frames that came
// before are handed out), the queue pair's failure, or an error wrapping
// ErrTimeout after the idle timeout. A frame already written over is not
// handed out; it is counted as overrun and recorded missing.
func (s *Stream) Next(ctx context.Context) (*pipeline.Frame, error) {
	// The first Next: the scan takes frames from now on, which the
	// parameter file tells the front end; its first frame may take up to
	// the connect timeout.
	s.readyOnce.Do(func() { s.readyErr = s.st.moduleReady(s.module) })
	if s.readyErr != nil {
		return nil, fmt.Errorf("module %d: tell the front end the queue pair is ready: %w", s.module, s.readyErr)
	}
	wait := s.cfg.IdleTimeout
	s.cqMu.Lock()
	seen := s.seen
	s.cqMu.Unlock()
	if !seen {
		wait = s.cfg.ConnectTimeout
	}
	if s.idle == nil {
		s.idle = time.NewTimer(wait)
	} else {
		s.idle.Reset(wait)
	}
	for {
		s.mu.Lock()
		if s.qLen > 0 {
			a := s.queue[s.qHead]
			s.qHead = (s.qHead + 1) % len(s.queue)
			s.qLen--
			s.mu.Unlock()
			if err := s.awaitSlot(ctx, a.slot); err != nil {
				return nil, err
			}
			if f := s.deliver(a); f != nil {
				return f, nil
			}
			continue
		}
		ended, stop := s.ended, s.stop
		s.mu.Unlock()
		s.cqMu.Lock()
		cqErr := s.cqErr
		s.cqMu.Unlock()
		switch {
		case ended:
			return nil, io.EOF
		case stop != nil:
			return nil, stop
		case cqErr != nil:
			// What came before the failure was queued and handed out.
			if s.qLenNow() == 0 {
				return nil, cqErr
			}
			continue
		}
		select {
		case <-s.signal:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.idle.C:
			s.cqMu.Lock()
			last, seen, peer := s.maxSeen, s.seen, s.peer
			s.cqMu.Unlock()
			if !seen {
				return nil, fmt.Errorf("module %d: no frame from the front end within %v: waited on QPN %d (%#x) on GID %v, linked to the front end's QPN %d on GID %s (%s): %w",
					s.module, s.cfg.ConnectTimeout, s.qp.Num(), s.qp.Num(), s.st.dev.Port().GID, peer.QPN, peer.GID, s.st.peersFrom(), ErrTimeout)
			}
			return nil, fmt.Errorf("module %d: no frame for %v after frame %d: %w", s.module, s.cfg.IdleTimeout, last, ErrTimeout)
		}
	}
}

func (s *Stream) qLenNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.qLen
}

// deliver makes a frame of an arrival; nil where the slot no longer (or
// never) held it.
func (s *Stream) deliver(a arrival) *pipeline.Frame {
	s.cqMu.Lock()
	gone := s.overrun(a)
	s.cqMu.Unlock()
	if gone {
		s.count1(&s.stats.Overrun, &s.stats.Undelivered)
		return nil
	}
	b := s.slots[a.slot][:min(a.size, s.slotSize)]
	f := &s.frames[a.slot]
	if s.cfg.Header == HeaderNone {
		// No detector clock: the time the frame was taken stands for it.
		f.Header = frame.Header{FrameNumber: a.seq, Timestamp: uint64(time.Now().UnixNano()), PayloadSize: uint32(len(b)), ModuleID: uint16(s.module), Format: s.cfg.Format}
		f.Payload, f.Unchecked = b, true
	} else {
		h, err := frame.ParseHeader(b)
		if err == nil && s.cfg.Immediate == ImmediateFrame && h.FrameNumber != a.seq {
			err = fmt.Errorf("the header says frame %d, the immediate data %d", h.FrameNumber, a.seq)
		}
		if err != nil {
			// Written over while the header was read, or never whole: a
			// fresh poll tells which.
			s.pollOnce()
			s.cqMu.Lock()
			gone := s.overrun(a)
			if !gone {
				s.frontEndWarn("a slot holds no whole frame: it is not taken", zap.Int("slot", a.slot), zap.Error(err))
			}
			s.cqMu.Unlock()
			if gone {
				s.count1(&s.stats.Overrun, &s.stats.Undelivered)
			} else {
				s.count1(&s.stats.Damaged, &s.stats.Undelivered)
			}
			return nil
		}
		f.Header, f.Payload, f.Unchecked = h, b[frame.HeaderSize:], false
	}
	s.mu.Lock()
	s.handed[a.slot] = a
	s.inUse[a.slot] = true
	s.used++
	s.mu.Unlock()
	return f
}

// awaitSlot waits until the pipeline has released the frame it holds in
// slot, if any: a front end that never waits may have written the slot's
// next frame while the pipeline still reads the one before (which Intact
// then finds overrun), and a slot's frame is handed out once at a time.
func (s *Stream) awaitSlot(ctx context.Context, slot int) error {
	for {
		s.mu.Lock()
		busy := s.inUse[slot]
		s.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-s.released:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// count1 adds one to counts of the stream's stats.
func (s *Stream) count1(counts ...*uint64) {
	s.mu.Lock()
	for _, n := range counts {
		*n++
	}
	s.mu.Unlock()
}

// HostMemory returns the ring, which every payload the stream hands out
// lies in (pipeline.HostMemorySource): a device backend may page-lock it
// and copy payloads from it without staging.
func (s *Stream) HostMemory() [][]byte { return [][]byte{s.mem.Bytes()} }

// slotOf returns the slot of a frame Next handed out; -1 for another.
func (s *Stream) slotOf(f *pipeline.Frame) int { return receive.SlotOf(s.frames, f) }

// Intact reports whether f, a frame Next handed out, was not written over
// while it was read: called after the last read of its payload (the
// decode, a device's upload), it keeps the recording's copy, polls the
// completion queue afresh and applies the rule of the package doc. A
// frame it reports overrun is counted as such and must be recorded
// missing; its recording is not kept.
func (s *Stream) Intact(f *pipeline.Frame) bool {
	slot := s.slotOf(f)
	if slot < 0 {
		return false
	}
	s.mu.Lock()
	a, rec := s.handed[slot], s.rec
	s.mu.Unlock()
	var copied *[]byte
	if rec != nil {
		copied = s.recPool.Get().(*[]byte)
		defer s.recPool.Put(copied)
		*copied = s.recordOf((*copied)[:0], f)
	}
	s.pollOnce()
	s.cqMu.Lock()
	gone := s.overrun(a)
	if gone {
		s.frontEndWarn("a frame was written over while it was read: it is recorded missing", zap.Uint64("frame", a.seq), zap.Int("slot", a.slot))
	}
	s.cqMu.Unlock()
	if gone {
		s.count1(&s.stats.Overrun)
		return false
	}
	if rec != nil {
		if err := rec.WriteRecord(*copied); err != nil {
			s.mu.Lock()
			if s.recErr == nil {
				s.recErr = fmt.Errorf("record frame %d: %w", f.Header.FrameNumber, err)
			}
			s.rec = nil
			s.mu.Unlock()
		}
	}
	return true
}

// recordOf appends f as a capture keeps it: its header, as received or,
// for a front end that sends none, written here with the CRC of the copy,
// then its payload.
func (s *Stream) recordOf(dst []byte, f *pipeline.Frame) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, frame.HeaderSize)...)
	dst = append(dst, f.Payload...)
	h := f.Header
	if f.Unchecked {
		h.PayloadCRC = frame.Checksum(dst[n+frame.HeaderSize:])
	}
	h.Put(dst[n:])
	return dst
}

// Release gives f's slot back to the ring.
func (s *Stream) Release(f *pipeline.Frame) {
	if slot := s.slotOf(f); slot >= 0 {
		s.mu.Lock()
		if s.inUse[slot] {
			s.inUse[slot] = false
			s.used--
			f.Payload = nil
		}
		s.mu.Unlock()
		select {
		case s.released <- struct{}{}:
		default:
		}
	}
}

// Stop makes the stream take no frame that comes from now on: Next hands
// out those that came before, then returns cause.
func (s *Stream) Stop(cause error) {
	s.cqMu.Lock()
	defer s.cqMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop == nil {
		s.stop, s.stopAt, s.stopSeen = cause, s.maxSeen, s.seen
	}
	s.wake()
}

// Stats returns what the stream has received so far.
func (s *Stream) Stats() receive.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.RingUsed, st.RingSlots, st.Uncredited = s.qLen+s.used, s.cfg.Slots, true
	return st
}

func (s *Stream) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close stops the receiving and frees the queue pair, its completion
// queue and the ring; a station's stream ends its scan instead, and stays
// for the next. No frame of the stream may be used after.
func (s *Stream) Close() error {
	if s.st.kept {
		s.endScan()
		return s.st.moduleEnded(s.module)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	err := s.free()
	return errors.Join(err, s.st.release())
}

// free stops the receiving goroutine where it runs and frees what the
// stream holds.
func (s *Stream) free() error {
	close(s.pollQuit)
	if s.pollStarted.Load() {
		<-s.pollDone
	}
	if s.idle != nil {
		s.idle.Stop()
	}
	var errs []error
	if s.qp != nil {
		errs = append(errs, s.qp.Close())
	}
	if s.cq != nil {
		errs = append(errs, s.cq.Close())
	}
	if s.mem != nil {
		errs = append(errs, s.mem.Close())
	}
	return errors.Join(errs...)
}
