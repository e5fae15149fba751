package roce

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/receive"
	"h5ingest/source/roce/internal/verbs"
)

// drain takes every frame of st until Next fails, checking each intact
// frame against truth, and returns the frame numbers taken and the error.
func drain(t *testing.T, ctx context.Context, st receive.Stream, truth map[uint64][]byte) ([]uint64, error) {
	t.Helper()
	ow := st.(pipeline.OverwritingSource)
	var got []uint64
	for {
		f, err := st.Next(ctx)
		if err != nil {
			return got, err
		}
		p := bytes.Clone(f.Payload)
		if ow.Intact(f) {
			if truth != nil && !bytes.Equal(p, truth[f.Header.FrameNumber]) {
				t.Errorf("frame %d intact but not the capture's", f.Header.FrameNumber)
			}
			got = append(got, f.Header.FrameNumber)
		}
		st.Release(f)
	}
}

// TestNICFaults injects the faults a NIC meets at the front end's fifth
// write, and checks what each side says: the frames before it are
// delivered whole, the receiver's stream ends with an error naming the
// module and the fault, the front end's with the NIC's status.
func TestNICFaults(t *testing.T) {
	for _, tc := range []struct {
		fault    string
		receiver string // in the stream's error
		sender   string // in the emulator's error
	}{
		{"bad-rkey@5", "queue pair", "remote access error"},
		{"retry-exceeded@5", "no frame for", "transport retry counter exceeded"},
		{"qp-error@5", "is in error", "transport retry counter exceeded"},
		{"error-completion@5", "local QP operation error", ""},
		{"cq-full@5", "completion queue overrun", ""},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			dir := fakeVerbs(t)
			const n = 12
			path, truth := capturePath(t, n)
			s := setup(dir, func(s *config.Source) { s.IdleTimeout = 2 * time.Second })
			s.Frames = n
			t.Setenv(verbs.FaultEnv, tc.fault)
			st, sent := receiveScan(t, dir, path, s, 200)
			got, err := drain(t, context.Background(), st, truth)
			if err == nil || errors.Is(err, io.EOF) || !strings.Contains(err.Error(), tc.receiver) || !strings.Contains(err.Error(), "module 0") {
				t.Errorf("the stream ended with %v, want an error naming module 0 and %q", err, tc.receiver)
			}
			if len(got) > 4 {
				t.Errorf("%d frames delivered, want at most the 4 before the fault", len(got))
			}
			for i, fn := range got {
				if fn != uint64(i) {
					t.Errorf("frames %v delivered, want the first ones in order", got)
					break
				}
			}
			serr := <-sent
			if tc.sender != "" && (serr == nil || !strings.Contains(serr.Error(), tc.sender)) {
				t.Errorf("the front end ended with %v, want %q", serr, tc.sender)
			}
		})
	}
}

// TestNoFrontEnd checks that a receiver whose front end never writes
// times out, naming the queue pair and GID it waited on, and one whose
// front end never answers names the file and its nonce.
func TestNoFrontEnd(t *testing.T) {
	t.Run("profile's front end silent", func(t *testing.T) {
		dir := fakeVerbs(t)
		s := setup(dir, func(s *config.Source) {
			s.ConnectTimeout = 200 * time.Millisecond
			s.FrontEnd = []config.FrontEnd{{Module: 0, GID: "fe80::1", QPN: 0x1234, PSN: 7}}
		})
		s.PeerFile = ""
		l, err := Open(s)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		st, err := l.Accept(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		_, err = st.Next(context.Background())
		if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "QPN") || !strings.Contains(err.Error(), "GID fe80::1") {
			t.Errorf("Next: %v, want a timeout naming the QPN and GID", err)
		}
	})
	t.Run("no answer", func(t *testing.T) {
		dir := fakeVerbs(t)
		s := setup(dir, func(s *config.Source) { s.ConnectTimeout = 200 * time.Millisecond })
		l, err := Open(s)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, err = l.Accept(context.Background())
		if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), s.PeerFile) || !strings.Contains(err.Error(), l.(*Listener).Nonce()) {
			t.Errorf("Accept: %v, want a timeout naming the file and nonce", err)
		}
	})
}

// lyingFrontEnd is a front end driven by hand through the fake verbs: the
// test chooses each write's slot and immediate.
type lyingFrontEnd struct {
	t    *testing.T
	qp   verbs.QP
	cq   verbs.CQ
	mem  verbs.Memory
	peer ModuleParams
}

// newLyingFrontEnd connects a hand-driven front end to l's module 0.
func newLyingFrontEnd(t *testing.T, l *Listener) *lyingFrontEnd {
	t.Helper()
	dev, err := verbs.Open("", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	peer := l.Params().Modules[0]
	fe := &lyingFrontEnd{t: t, peer: peer}
	if fe.mem, err = dev.Register(peer.SlotSize); err != nil {
		t.Fatal(err)
	}
	if fe.cq, err = dev.NewCQ(8); err != nil {
		t.Fatal(err)
	}
	if fe.qp, err = dev.NewQP(fe.cq, verbs.RC, 1, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fe.qp.Close(); fe.cq.Close(); fe.mem.Close() })
	if err := fe.qp.Init(); err != nil {
		t.Fatal(err)
	}
	if err := fe.qp.ReadyToReceive(verbs.Remote{GID: netip.MustParseAddr(peer.GID), QPN: peer.QPN, PSN: peer.PSN}, 4096); err != nil {
		t.Fatal(err)
	}
	if err := fe.qp.ReadyToSend(11); err != nil {
		t.Fatal(err)
	}
	end := FrontEndPort{Module: 0, GID: "fe80::1", QPN: fe.qp.Num(), PSN: 11}
	for _, s := range l.streams {
		if err := s.connect(end); err != nil {
			t.Fatal(err)
		}
	}
	l.st.frontEnds = map[int]FrontEndPort{0: end}
	if err := l.st.moduleReady(0); err != nil {
		t.Fatal(err)
	}
	return fe
}

// write writes frame n's header and payload into slot with immediate imm,
// and waits for its completion.
func (fe *lyingFrontEnd) write(n uint64, slot int, imm uint32, payload []byte) {
	fe.t.Helper()
	b := fe.mem.Bytes()
	h := frame.Header{FrameNumber: n, PayloadSize: uint32(len(payload)), PayloadCRC: frame.Checksum(payload), Format: smallFormat}
	h.Put(b)
	copy(b[frame.HeaderSize:], payload)
	if err := fe.qp.PostWriteImm(n, fe.mem, b[:frame.HeaderSize+len(payload)], fe.peer.Addr+uint64(slot*fe.peer.SlotSize), fe.peer.RKey, imm); err != nil {
		fe.t.Fatal(err)
	}
	var wc [1]verbs.Completion
	for {
		k, err := fe.cq.Poll(wc[:])
		if err != nil {
			fe.t.Fatal(err)
		}
		if k == 1 {
			if wc[0].Status != verbs.Success {
				fe.t.Fatalf("write of frame %d: %v", n, wc[0].Status)
			}
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// TestLyingFrontEnd has a front end repeat, skip, go back and name slots
// beyond the ring, and checks that each is counted as what it is, that no
// frame a later write put in its slot is delivered as intact, and that
// every whole frame is delivered.
func TestLyingFrontEnd(t *testing.T) {
	for _, tc := range []struct {
		name      string
		immediate string
		writes    [][3]uint64 // frame number, slot, immediate
		delivered []uint64
		stats     receive.Stats
	}{
		{"repeats and goes back", ImmediateFrame,
			[][3]uint64{{0, 0, 0}, {1, 1, 1}, {1, 1, 1}, {2, 2, 2}, {0, 0, 0}, {3, 3, 3}},
			// A write into a slot replaces what it held: the first copies of
			// frames 1 and 0 are gone when the reader comes to them.
			[]uint64{1, 2, 0, 3}, receive.Stats{Frames: 6, Disordered: 2, Overrun: 2, Undelivered: 2}},
		{"skips", ImmediateFrame,
			[][3]uint64{{0, 0, 0}, {3, 3, 3}, {4, 4, 4}, {9, 9, 9}},
			[]uint64{0, 3, 4, 9}, receive.Stats{Frames: 4, Gaps: 6}},
		{"header and immediate disagree", ImmediateFrame,
			[][3]uint64{{0, 0, 0}, {5, 1, 1}, {2, 2, 2}},
			[]uint64{0, 2}, receive.Stats{Frames: 3, Damaged: 1, Undelivered: 1, Gaps: 0}},
		{"slot beyond the ring", ImmediateSlot,
			[][3]uint64{{0, 0, 0}, {1, 1, 1}, {2, 2, 99}, {3, 3, 3}},
			[]uint64{0, 1, 3}, receive.Stats{Frames: 4, Damaged: 1, Undelivered: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := fakeVerbs(t)
			s := setup(dir, func(s *config.Source) { s.Immediate = tc.immediate; s.IdleTimeout = 300 * time.Millisecond })
			l, err := Listen(must(ConfigOf(s)))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			fe := newLyingFrontEnd(t, l)
			payload := make([]byte, smallFormat.PayloadSize())
			for _, w := range tc.writes {
				payload[0] = byte(w[0])
				fe.write(w[0], int(w[1]), uint32(w[2]), payload)
			}
			st, err := l.Accept(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			got, err := drain(t, context.Background(), st, nil)
			if !errors.Is(err, ErrTimeout) {
				t.Errorf("the stream ended with %v, want the idle timeout", err)
			}
			if !equalU64(got, tc.delivered) {
				t.Errorf("delivered %v, want %v", got, tc.delivered)
			}
			stats := st.Stats()
			stats.Bytes, stats.RingUsed, stats.RingSlots, stats.Uncredited = 0, 0, 0, false
			if stats != tc.stats {
				t.Errorf("stats %+v, want %+v", stats, tc.stats)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestConfigRefuses checks that the profile keys a front end cannot work
// with are refused, naming the key.
func TestConfigRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*config.Source)
		want string
	}{
		{"qp type", func(s *config.Source) { s.QPType = "ud" }, "source.qp_type"},
		{"immediate", func(s *config.Source) { s.Immediate = "both" }, "source.immediate"},
		{"header", func(s *config.Source) { s.FrameHeader = "some" }, "source.frame_header"},
		{"mtu", func(s *config.Source) { s.MTU = 9000 }, "source.mtu"},
		{"ring not deeper than guard and pipeline", func(s *config.Source) { s.RingSlots = 6; s.WriteGuard = 2 }, "source.write_guard"},
		{"uc without headers", func(s *config.Source) { s.QPType = "uc"; s.FrameHeader = "none" }, "source.qp_type uc"},
		{"slot immediates without headers", func(s *config.Source) { s.Immediate = "slot"; s.FrameHeader = "none" }, "source.immediate slot"},
		{"front end GID", func(s *config.Source) { s.FrontEnd = []config.FrontEnd{{Module: 0, GID: "nope", QPN: 5}} }, "source.front_end"},
		{"front end GID with a zone", func(s *config.Source) { s.FrontEnd = []config.FrontEnd{{Module: 0, GID: "fe80::2%eth0", QPN: 5}} }, "no zone"},
		{"front end GID unspecified", func(s *config.Source) { s.FrontEnd = []config.FrontEnd{{Module: 0, GID: "::", QPN: 5}} }, "unspecified"},
		{"front end of another module", func(s *config.Source) { s.FrontEnd = []config.FrontEnd{{Module: 3, GID: "fe80::1", QPN: 5}} }, "no entry for module 0"},
		{"ring too large", func(s *config.Source) { s.RingMaxBytes = 1 << 10 }, "source.ring_max_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(setup(t.TempDir(), tc.set))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check: %v, want an error naming %q", err, tc.want)
			}
		})
	}
	s := setup(t.TempDir(), nil)
	s.PeerFile = ""
	if err := Check(s); err == nil || !strings.Contains(err.Error(), "--front-end") {
		t.Errorf("Check with neither a profile's front end nor a file: %v", err)
	}
	// One file for both ends: the receiver would read its own end as the
	// front end's and link its queue pair to itself.
	dir := t.TempDir()
	s = setup(dir, nil)
	s.PeerFile = filepath.Join(dir, ".", filepath.Base(s.ParamsFile))
	if err := Check(s); err == nil || !strings.Contains(err.Error(), "--front-end") {
		t.Errorf("Check with --front-end the --rdma-params file: %v", err)

	}
	fakeVerbs(t)
	if _, err := Send(context.Background(), SendConfig{Port: 1, ParamsFile: s.ParamsFile, FrontEndFile: s.PeerFile, Timeout: time.Second}, "unread.pmcap"); err == nil || !strings.Contains(err.Error(), "--front-end") {
		t.Errorf("Send with --front-end the --rdma-params file: %v", err)
	}
	if st, err := OpenStation(s); err == nil || !strings.Contains(err.Error(), "--front-end") {
		t.Errorf("OpenStation with --front-end the --rdma-params file: %v", err)
		if err == nil {
			st.Close()
		}
	}
}
