package roce

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"h5ingest/frame"
	"h5ingest/source/capture"
	"h5ingest/source/roce/internal/verbs"
)

// SendConfig sets up the front end's emulator.
type SendConfig struct {
	Device   string // RDMA device; "" for the first
	Port     int    // its port, from 1
	GIDIndex int    // the GID table entry the queue pair uses
	Module   int    // the module this front end is: its frames of the capture are sent
	// ParamsFile is the receiver's parameter file (acquire's
	// --rdma-params), FrontEndFile where the emulator writes its own end
	// (acquire's --front-end).
	ParamsFile, FrontEndFile string
	// Timeout bounds the wait for the receiver's parameters and for its
	// queue pair to be ready.
	Timeout time.Duration
	// FPS paces the writes; 0: as fast as the queue pair takes them.
	FPS float64
	Log *zap.Logger
}

// SendStats counts what the emulator wrote.
type SendStats struct {
	Frames  uint64        // frames written (and completed)
	Bytes   uint64        // bytes written
	Skipped uint64        // frames of the capture of another module
	Elapsed time.Duration // from the first write to the last completion
	Late    uint64        // writes later than the pace asked (at --fps)
}

// stagingSlots is how many frames the emulator has under way at once: its
// send queue, and so the writes a receiver's write_guard must cover
// beyond the last completion it has seen (less: the fake NIC and a real
// one complete them in order).
const stagingSlots = 2

// Send plays a detector front end: it brings a queue pair up toward the
// receiver whose parameters cfg.ParamsFile holds, answers with its own in
// cfg.FrontEndFile, waits for the receiver to be ready, then writes the
// capture's frames of its module with immediate data into the receiver's
// ring, round-robin, at cfg.FPS or as fast as it can, never waiting for
// the receiver. The receiver and the emulator may start in either order:
// a receiver whose queue pair takes not even the first write (one killed,
// whose file was left behind) is passed over for the next to start.
func Send(ctx context.Context, cfg SendConfig, path string) (SendStats, error) {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if sameFile(cfg.ParamsFile, cfg.FrontEndFile) {
		return SendStats{}, fmt.Errorf("--rdma-params and --front-end name one file, %s: the front end would write its end over the receiver's; give each end a file of its own", cfg.ParamsFile)
	}
	dev, err := verbs.Open(cfg.Device, cfg.Port, cfg.GIDIndex)
	if err != nil {
		return SendStats{}, fmt.Errorf("open the RDMA device: %w", err)
	}
	defer dev.Close()
	fe := &frontEnd{cfg: cfg, dev: dev, deadline: time.Now().Add(cfg.Timeout), gone: map[string]bool{}}
	defer fe.close()
	for {
		if err := fe.meet(ctx); err != nil {
			return SendStats{}, err
		}
		r, err := capture.Open(path)
		if err != nil {
			return SendStats{}, err
		}
		st, err := fe.send(ctx, r)
		r.Close()
		var dead *deadPeerError
		if st.Frames > 0 || !errors.As(err, &dead) {
			return st, err
		}
		cfg.Log.Warn("the receiver took not even the first write: waiting for another", zap.String("nonce", fe.nonce), zap.Error(err))
		fe.gone[fe.nonce] = true
		fe.lastDead = err
	}
}

// deadPeerError is a write the receiver's queue pair did not take: it is
// gone, or not the one the parameters name.
type deadPeerError struct {
	frame  uint64
	qpn    uint32
	status verbs.Status
}

func (e *deadPeerError) Error() string {
	return fmt.Sprintf("write of frame %d to the receiver's queue pair %d failed: %v", e.frame, e.qpn, e.status)
}

// frontEnd is the emulator's queue pair and staging buffers.
type frontEnd struct {
	cfg      SendConfig
	dev      verbs.Device
	deadline time.Time       // for the receiver's parameters and readiness
	gone     map[string]bool // nonces of receivers that took no write
	nonce    string          // the receiver's met
	lastDead error           // why the last receiver passed over was
	cq       verbs.CQ
	qp       verbs.QP
	mem      verbs.Memory
	psn      uint32
	peer     ModuleParams
	wc       [stagingSlots]verbs.Completion
}

func (fe *frontEnd) close() {
	if fe.qp != nil {
		fe.qp.Close()
	}
	if fe.cq != nil {
		fe.cq.Close()
	}
	if fe.mem != nil {
		fe.mem.Close()
	}
	fe.qp, fe.cq, fe.mem = nil, nil, nil
}

// meet waits for the receiver's parameters, brings a queue pair up toward
// it, answers with its own end, and waits for the receiver to be ready. A
// receiver that starts again meanwhile (another nonce) is met afresh.
func (fe *frontEnd) meet(ctx context.Context) error {
	answered := ""
	for {
		var p Params
		err := waitFile(ctx, fe.cfg.ParamsFile, fe.deadline, &p, func() error {
			switch {
			case p.Version != ParamsVersion || p.Nonce == "":
				return fmt.Errorf("version %d, nonce %q: not a receiver's parameters", p.Version, p.Nonce)
			case fe.gone[p.Nonce]:
				return fmt.Errorf("the receiver of nonce %s took no write: waiting for the next", p.Nonce)
			case p.Nonce == answered && !moduleReady(p, fe.cfg.Module):
				return fmt.Errorf("the receiver of nonce %s is not ready to receive module %d yet", p.Nonce, fe.cfg.Module)
			}
			return nil
		})
		if errors.Is(err, ErrTimeout) {
			if fe.lastDead != nil && answered == "" {
				return fmt.Errorf("the receiver of nonce %s took not even the first write (%v), and no other came within %v: %w", fe.nonce, fe.lastDead, fe.cfg.Timeout, err)
			}
			if answered == "" {
				return fmt.Errorf("no receiver's parameters in %s within %v (start acquire --transport roce --rdma-params %s): %w", fe.cfg.ParamsFile, fe.cfg.Timeout, fe.cfg.ParamsFile, err)
			}
			return fmt.Errorf("the receiver (nonce %s) was not ready to receive within %v: %w", answered, fe.cfg.Timeout, err)
		}
		if err != nil {
			return err
		}
		if p.Nonce == answered && moduleReady(p, fe.cfg.Module) {
			fe.nonce = answered
			return nil
		}
		if err := fe.answer(p); err != nil {
			return err
		}
		answered = p.Nonce
	}
}

// answer creates a queue pair toward the receiver of p, ready to send, and
// writes the front end's file answering p's nonce.
func (fe *frontEnd) answer(p Params) error {
	fe.close()
	i := -1
	for j, m := range p.Modules {
		if m.Module == fe.cfg.Module {
			i = j
		}
	}
	if i < 0 {
		return fmt.Errorf("the receiver's parameters in %s have no queue pair for module %d", fe.cfg.ParamsFile, fe.cfg.Module)
	}
	peer := p.Modules[i]
	gid, err := netip.ParseAddr(peer.GID)
	if err != nil {
		return fmt.Errorf("the receiver's GID %q: %w", peer.GID, err)
	}
	typ := verbs.RC
	if peer.QPType == "uc" {
		typ = verbs.UC
	}
	if peer.SlotSize <= 0 || peer.Slots <= 0 {
		return fmt.Errorf("the receiver's ring of %d slots of %d bytes: nothing to write into", peer.Slots, peer.SlotSize)
	}
	if fe.mem, err = fe.dev.Register(stagingSlots * peer.SlotSize); err != nil {
		return fmt.Errorf("register the front end's buffers: %w", err)
	}
	if fe.cq, err = fe.dev.NewCQ(stagingSlots * 2); err != nil {
		return err
	}
	if fe.qp, err = fe.dev.NewQP(fe.cq, typ, stagingSlots, 1); err != nil {
		return err
	}
	var b [4]byte
	rand.Read(b[:])
	fe.psn = binary.LittleEndian.Uint32(b[:]) & 0xffffff
	if err := fe.qp.Init(); err != nil {
		return err
	}
	if err := fe.qp.ReadyToReceive(verbs.Remote{GID: gid, QPN: peer.QPN, PSN: peer.PSN}, peer.MTU); err != nil {
		return err
	}
	if err := fe.qp.ReadyToSend(fe.psn); err != nil {
		return err
	}
	fe.peer = peer
	port := fe.dev.Port()
	ans := FrontEndParams{Version: ParamsVersion, Nonce: p.Nonce, Modules: []FrontEndPort{{Module: fe.cfg.Module, GID: port.GID.String(), QPN: fe.qp.Num(), PSN: fe.psn}}}
	fe.cfg.Log.Info("front end's queue pair ready to send", zap.Int("module", fe.cfg.Module), zap.Uint32("qpn", fe.qp.Num()),
		zap.Uint32("receiver_qpn", peer.QPN), zap.String("nonce", p.Nonce))
	return fe.writeAnswer(ans)
}

// writeAnswer writes the front end's end of its module's queue pair into
// the front end's file, beside those of other modules' front ends that
// answered the same receiver (each module's front end is its own, and
// they share the file), under a lock.
func (fe *frontEnd) writeAnswer(ans FrontEndParams) error {
	unlock, err := lockFile(fe.cfg.FrontEndFile)
	if err != nil {
		return fmt.Errorf("lock %s: %w", fe.cfg.FrontEndFile, err)
	}
	defer unlock()
	var old FrontEndParams
	if readJSON(fe.cfg.FrontEndFile, &old) == nil && old.Nonce == ans.Nonce {
		for _, m := range old.Modules {
			if m.Module != fe.cfg.Module {
				ans.Modules = append(ans.Modules, m)
			}
		}
	}
	return writeJSON(fe.cfg.FrontEndFile, ans)
}

// send writes the capture's frames of the module, round-robin into the
// receiver's ring, waiting only for its own buffers.
func (fe *frontEnd) send(ctx context.Context, r *capture.Reader) (st SendStats, err error) {
	var start time.Time
	defer func() {
		if !start.IsZero() {
			st.Elapsed = time.Since(start)
		}
	}()
	peer := fe.peer
	bufs := fe.mem.Bytes()
	var period time.Duration
	if fe.cfg.FPS > 0 {
		period = time.Duration(float64(time.Second) / fe.cfg.FPS)
	}
	inFlight := 0
	var seq uint64
	for i := 0; ; {
		buf := bufs[(i%stagingSlots)*peer.SlotSize:][:peer.SlotSize]
		for inFlight == stagingSlots {
			if err := fe.reap(ctx, &inFlight, &st); err != nil {
				return st, err
			}
		}
		into := buf[frame.HeaderSize:]
		if peer.FrameHeader == HeaderNone {
			into = buf
		}
		h, payload, err := r.Next(into)
		for err == nil && int(h.ModuleID) != fe.cfg.Module {
			st.Skipped++
			h, payload, err = r.Next(into)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, io.ErrShortBuffer) {
			return st, fmt.Errorf("frame %d of %d bytes does not fit the receiver's slots of %d", h.FrameNumber, frame.HeaderSize+int(h.PayloadSize), peer.SlotSize)
		}
		if err != nil {
			return st, err
		}
		n := len(payload)
		if peer.FrameHeader != HeaderNone {
			h.Put(buf)
			n += frame.HeaderSize
		}
		if start.IsZero() {
			start = time.Now()
		}
		if period > 0 {
			due := start.Add(time.Duration(i) * period)
			if d := time.Until(due); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return st, ctx.Err()
				}
			} else if d < -period {
				st.Late++
			}
		}
		imm := uint32(h.FrameNumber)
		slot := h.FrameNumber % uint64(peer.Slots)
		if peer.Immediate == ImmediateSlot {
			slot = seq % uint64(peer.Slots)
			imm = uint32(slot)
		}
		addr := peer.Addr + slot*uint64(peer.SlotSize)
		if err := fe.qp.PostWriteImm(h.FrameNumber, fe.mem, buf[:n], addr, peer.RKey, imm); err != nil {
			return st, fmt.Errorf("write frame %d: %w", h.FrameNumber, err)
		}
		inFlight++
		seq++
		i++
	}
	for inFlight > 0 {
		if err := fe.reap(ctx, &inFlight, &st); err != nil {
			return st, err
		}
	}
	return st, nil
}

// reap waits for at least one of the emulator's writes to complete.
func (fe *frontEnd) reap(ctx context.Context, inFlight *int, st *SendStats) error {
	for idle := 0; ; idle++ {
		n, err := fe.cq.Poll(fe.wc[:])
		if err != nil {
			return err
		}
		for _, c := range fe.wc[:n] {
			*inFlight--
			if c.Status != verbs.Success {
				err := &deadPeerError{frame: c.WRID, qpn: fe.peer.QPN, status: c.Status}
				if c.Status == verbs.RetryExcErr || c.Status == verbs.RemAccessErr {
					return err
				}
				return errors.New(err.Error())
			}
			st.Frames++
			st.Bytes += uint64(c.ByteLen)
		}
		if n > 0 {
			return nil
		}
		if idle > 64 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Microsecond):
			}
		}
	}
}

// moduleReady reports whether the receiver of p is ready to receive
// module's frames.
func moduleReady(p Params, module int) bool {
	for _, m := range p.Modules {
		if m.Module == module {
			return m.Ready
		}
	}
	return false
}
