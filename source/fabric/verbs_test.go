package fabric

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"h5ingest/pipeline"
	"h5ingest/source/fabric/internal/fi"
)

// What the verbs provider does differently from tcp, run on tcp: a fake
// provider info (fi.Info.Fake*) makes the tcp provider take the path
// verbs takes, and an injected error (Config.sendErr) fails what a NIC
// would.

// sent is what a sender of sendFrames saw, read before it closed.
type sent struct {
	accept          Accept
	access          uint64 // its frame buffers' registration
	sentFromBuffers uint64 // small messages it sent with fi_send
	stats           SendStats
	err             error
}

// sendFrames dials with cfg, sends n frames of module 0, ends the scan,
// and reports what it saw.
func sendFrames(ctx context.Context, t *testing.T, cfg SenderConfig, n int) <-chan sent {
	done := make(chan sent, 1)
	go func() {
		var r sent
		defer func() { done <- r }()
		s, err := Dial(ctx, cfg)
		if err != nil {
			r.err = err
			return
		}
		r.accept, r.access = s.Accept(), s.bufMR.Access()
		for i := range n {
			buf, err := s.Buffer(ctx)
			if err == nil {
				err = s.Post(copy(buf, testRecord(t, testFormat, 0, i)))
			}
			if err != nil {
				r.err = err
				r.stats = s.Stats()
				s.Abort()
				return
			}
		}
		r.sentFromBuffers = s.c.sentFromBuffers.Load()
		r.stats, r.err = s.Close(ctx)
	}()
	return done
}

// checkFrames checks that recs are frames 0 to n-1 of module 0, as sent.
func checkFrames(t *testing.T, recs [][]byte, n int) {
	t.Helper()
	if len(recs) != n {
		t.Fatalf("received %d frames, want %d", len(recs), n)
	}
	for i, r := range recs {
		if !bytes.Equal(r, testRecord(t, testFormat, 0, i)) {
			t.Fatalf("frame %d differs from the one sent", i)
		}
	}
}

// TestInjectSize runs whole scans, in both modes, with the inject size a
// NIC may report (verbs gives its inline size: often 64 or more, on some
// 0): every small message that does not fit goes with fi_send from a
// registered buffer, and each end counts exactly the ones it sent that
// way: the receiver its credits and the bye, the sender its frame
// messages (write mode; its end goes in Close, after the count is read,
// and the bye that answers it shows it arrived).
func TestInjectSize(t *testing.T) {
	const n = 30
	for _, tt := range []struct {
		name   string
		inject int
		// messages sent from buffers: receiver's, sender's per mode
		recv                func() uint64
		sendWrite, sendSend uint64
	}{
		{"0 bytes", 0, func() uint64 { return n + 1 }, n, 0},
		{"credits fit, 32-byte messages do not", creditSize, func() uint64 { return 1 }, n, 0},
		{"every message fits", 64, func() uint64 { return 0 }, 0, 0},
	} {
		for _, mode := range []Mode{ModeWrite, ModeSend} {
			t.Run(tt.name+"/"+mode.String(), func(t *testing.T) {
				checkNoLeaks(t)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				fake := func(i *fi.Info) { i.FakeInjectSize(tt.inject) }
				cfg := testConfig()
				cfg.Slots = 4 // every frame's credit is needed again
				cfg.fake = fake
				l := testListen(t, cfg)
				scfg := senderConfig(l.Addr().String(), mode, 0, n)
				scfg.fake = fake
				done := sendFrames(ctx, t, scfg, n)
				s, err := l.Accept(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if s.c.injectSize != tt.inject {
					t.Fatalf("receiver read an inject size of %d, want %d", s.c.injectSize, tt.inject)
				}
				recs, err := receiveAll(ctx, s, 0)
				if err != nil {
					t.Fatal(err)
				}
				res := <-done
				if res.err != nil {
					t.Fatal(res.err)
				}
				checkFrames(t, recs, n)
				if res.stats.Received != n {
					t.Errorf("the receiver said it got %d frames, want %d", res.stats.Received, n)
				}
				if got, want := s.c.sentFromBuffers.Load(), tt.recv(); got != want {
					t.Errorf("receiver sent %d messages from buffers, want %d", got, want)
				}
				want := tt.sendWrite
				if mode == ModeSend {
					want = tt.sendSend
				}
				if res.sentFromBuffers != want {
					t.Errorf("sender sent %d messages from buffers (before its end), want %d", res.sentFromBuffers, want)
				}
			})
		}
	}
}

// TestMaxMessageSize checks that a provider's largest message
// (max_msg_size) smaller than a slot is refused at the hello with code 7,
// naming both sizes, before any slot is made; and that a sender whose
// own provider cannot carry its frames says so before it connects.
func TestMaxMessageSize(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	slot := slotSize(Hello{Format: testFormat})
	cfg := testConfig()
	cfg.fake = func(i *fi.Info) { i.FakeMaxMessage(uint64(slot - 64)) }
	l := testListen(t, cfg)
	res := <-sendFrames(ctx, t, senderConfig(l.Addr().String(), ModeWrite, 0, 1), 1)
	var r *RefusedError
	if !errors.As(res.err, &r) || r.Code != RefuseMessageSize ||
		!strings.Contains(r.Reason, "max_msg_size") || !strings.Contains(r.Reason, "slots of 3136 bytes") {
		t.Errorf("sender: %v; want a refusal with code %d naming the slot size and max_msg_size", res.err, RefuseMessageSize)
	}
	if _, err := l.Accept(ctx); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "max_msg_size") {
		t.Errorf("Accept: %v, want the refusal", err)
	}
	if slot != 3136 {
		t.Fatalf("test format's slot is %d bytes, not the 3136 the test names", slot)
	}
	scfg := senderConfig(l.Addr().String(), ModeSend, 0, 1)
	scfg.fake = func(i *fi.Info) { i.FakeMaxMessage(1024) }
	_, err := Dial(ctx, scfg)
	if err == nil || !strings.Contains(err.Error(), "frames of 3136 bytes: provider tcp sends messages of at most 1024 bytes") {
		t.Errorf("Dial with frames over the sender's max_msg_size: %v", err)
	}
}

// TestCreditLost checks that a credit the receiver cannot return (the
// provider refuses it, or its queue stays full past the retries) ends the
// stream at once with that reason, after every frame that arrived, where
// the sender used to wait without a word until the idle timeout.
func TestCreditLost(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"refused", &fi.Error{Op: "fi_inject", Code: syscall.EIO, Text: "Input/output error"}, "return the slot's credit (slot 0) to the sender: fi_inject: Input/output error"},
		{"queue full for good", &fi.Error{Op: "fi_inject", Code: syscall.EAGAIN, Text: "Resource temporarily unavailable"}, "Resource temporarily unavailable"},
	} {
		for _, mode := range []Mode{ModeWrite, ModeSend} {
			t.Run(tt.name+"/"+mode.String(), func(t *testing.T) {
				checkNoLeaks(t)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cfg := testConfig()
				cfg.Slots = 4
				cfg.IdleTimeout = 20 * time.Second // far longer than the test may take
				cfg.sendErr = func(typ uint16) error {
					if typ == msgCredit {
						return tt.err
					}
					return nil
				}
				l := testListen(t, cfg)
				done := sendFrames(ctx, t, senderConfig(l.Addr().String(), mode, 0, 12), 12)
				s, err := l.Accept(ctx)
				if err != nil {
					t.Fatal(err)
				}
				// The sender fills the ring's 4 slots; the first credit
				// given back fails.
				var held []*pipeline.Frame
				for range 4 {
					f, err := s.Next(ctx)
					if err != nil {
						t.Fatal(err)
					}
					held = append(held, f)
				}
				start := time.Now()
				for _, f := range held {
					s.Release(f)
				}
				recs, err := receiveAll(ctx, s, 0)
				took := time.Since(start)
				if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "module 0") {
					t.Errorf("Next: %v; want the lost credit's reason, %q", err, tt.want)
				}
				if !errors.Is(err, tt.err) {
					t.Errorf("Next: %v does not wrap the provider's error", err)
				}
				// No frame came after the ring's 4.
				if len(recs) != 0 {
					t.Errorf("%d frames handed out after the failed credit, want none", len(recs))
				}
				if took > 5*time.Second {
					t.Errorf("the stream ended %v after it started, not at once", took)
				}
				if _, err := s.Next(ctx); err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("Next again: %v, want the same reason (sticky)", err)
				}
				s.Close()
				if res := <-done; res.err == nil || res.stats.Frames != 4 {
					t.Errorf("sender: %v after %d frames; want it stopped after the ring's 4", res.err, res.stats.Frames)
				}
			})
		}
	}
}

// TestVirtualAddresses runs a write-mode scan with the receiver's domain
// in FI_MR_VIRT_ADDR mode, as verbs requires: the accept carries the
// ring's virtual address, the sender writes each frame at that address
// plus its slot's offset, and the tcp provider, which then checks remote
// addresses as virtual ones, takes every write. The same scan without it
// carries offsets (0).
func TestVirtualAddresses(t *testing.T) {
	for _, virt := range []bool{true, false} {
		name := "offsets"
		if virt {
			name = "FI_MR_VIRT_ADDR"
		}
		t.Run(name, func(t *testing.T) {
			checkNoLeaks(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const n = 20
			cfg := testConfig()
			cfg.Slots = 4
			if virt {
				cfg.fake = func(i *fi.Info) { i.FakeMRMode(i.MRMode() | fi.MRVirtAddr) }
			}
			l := testListen(t, cfg)
			done := sendFrames(ctx, t, senderConfig(l.Addr().String(), ModeWrite, 0, n), n)
			s, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ring := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(s.HostMemory()[0]))))
			recs, err := receiveAll(ctx, s, 0)
			if err != nil {
				t.Fatal(err)
			}
			res := <-done
			if res.err != nil {
				t.Fatal(res.err)
			}
			checkFrames(t, recs, n)
			want := uint64(0)
			if virt {
				want = ring
			}
			if res.accept.Addr != want {
				t.Errorf("accept's address %#x, want %#x (the ring at %#x)", res.accept.Addr, want, ring)
			}
			for slot := range uint32(4) {
				if got := slotAddr(res.accept, slot); got != want+uint64(slot)*uint64(res.accept.SlotSize) {
					t.Errorf("slot %d written at %#x", slot, got)
				}
			}
		})
	}
}

// TestRegistrationAccess checks that each region is registered for what
// it is used for and no more: a sender's frame buffers are sent and
// written from (FI_SEND, FI_WRITE) and never take a remote write; a
// receiver's ring takes remote writes in write mode and receives in send
// mode; control buffers send and receive.
func TestRegistrationAccess(t *testing.T) {
	for _, mode := range []Mode{ModeWrite, ModeSend} {
		t.Run(mode.String(), func(t *testing.T) {
			checkNoLeaks(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			l := testListen(t, testConfig())
			done := sendFrames(ctx, t, senderConfig(l.Addr().String(), mode, 0, 3), 3)
			s, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ring := uint64(fi.AccessRemoteWrite)
			if mode == ModeSend {
				ring = fi.AccessRecv
			}
			if got := s.ringMR.Access(); got != ring {
				t.Errorf("ring registered for %#x, want %#x", got, ring)
			}
			if got := s.c.ctrlMR.Access(); got != fi.AccessSend|fi.AccessRecv {
				t.Errorf("control buffers registered for %#x, want FI_SEND|FI_RECV", got)
			}
			if _, err := receiveAll(ctx, s, 0); err != nil {
				t.Fatal(err)
			}
			res := <-done
			if res.err != nil {
				t.Fatal(res.err)
			}
			if res.access != fi.AccessSend|fi.AccessWrite || res.access&fi.AccessRemoteWrite != 0 {
				t.Errorf("sender's buffers registered for %#x, want FI_SEND|FI_WRITE and no remote write", res.access)
			}
		})
	}
}

// TestDomainPerConnection checks the invariant that makes the verbs
// provider's registration cache safe with our rings: every connection
// has a domain of its own, no two share one, and a ring is unmapped only
// once its domain is closed (package fi refuses otherwise), so the cache
// goes with the ring.
func TestDomainPerConnection(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := testListen(t, testConfig())
	var streams []*Stream
	var dones []<-chan sent
	for m := range 2 {
		cfg := senderConfig(l.Addr().String(), ModeWrite, m, 2)
		dones = append(dones, sendFrames(ctx, t, cfg, 0))
		s, err := l.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	if streams[0].c.dom == streams[1].c.dom {
		t.Error("two connections share a domain")
	}
	for _, s := range streams {
		// The ring cannot go while its domain is open.
		if err := s.ringMem.Free(); !errors.Is(err, fi.ErrRegistered) {
			t.Errorf("ring unmapped with its domain open: %v", err)
		}
		if _, err := s.Next(ctx); err == nil {
			t.Error("a scan of no frame did not end")
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if s.ringMem.Bytes() != nil {
			t.Error("the ring is still mapped after Close")
		}
	}
	for _, d := range dones {
		<-d
	}
}

// TestNoStaleErrnoText checks that a peer's disconnect reads as what it
// is: the tcp provider's own error code is the errno of whatever system
// call ran last, and its text ("No such file or directory") used to be
// added to every completion error.
func TestNoStaleErrnoText(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := Dial(ctx, SenderConfig{Provider: "tcp", Addr: "127.0.0.1:1", Hello: Hello{Mode: ModeWrite, Format: testFormat}, Timeout: 2 * time.Second})
	if err == nil || strings.Contains(err.Error(), "provider error") || !strings.HasSuffix(err.Error(), "connect: connection event: Connection refused") {
		t.Errorf("dial of a closed port: %v", err)
	}
	l := testListen(t, testConfig())
	done := make(chan error, 1)
	go func() {
		s, err := Dial(ctx, senderConfig(l.Addr().String(), ModeWrite, 0, 10))
		if err != nil {
			done <- err
			return
		}
		time.Sleep(200 * time.Millisecond) // the receiver closes meanwhile
		for i := 0; ; i++ {
			buf, err := s.Buffer(ctx)
			if err == nil {
				err = s.Post(copy(buf, testRecord(t, testFormat, 0, i)))
			}
			if err != nil {
				s.Abort() // before the test ends and counts what is left open
				done <- err
				return
			}
		}
	}()
	s, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	err = <-done
	if !errors.Is(err, ErrDisconnected) || !strings.HasSuffix(err.Error(), "completion: Operation canceled") {
		t.Errorf("sender after the receiver closed: %v; want it to end in \"completion: Operation canceled\", nothing after", err)
	}
}
