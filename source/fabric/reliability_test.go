package fabric

// Faults at the receiver with a backlog in its ring, and hostile peers:
// what arrived is handed out before any end, and a bad peer never costs a
// real sender its place. docs/reliability.md lists each with its test.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/source/capture"
	"h5ingest/source/fabric/internal/fi"
)

// captureRecorder records into a capture in memory.
type captureRecorder struct {
	buf bytes.Buffer
	w   *capture.Writer
}

func newCaptureRecorder(t *testing.T) *captureRecorder {
	t.Helper()
	r := &captureRecorder{}
	w, err := capture.NewWriter(&r.buf, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	r.w = w
	return r
}

func (r *captureRecorder) WriteRecord(rec []byte) error { return r.w.WriteRecord(rec) }

// records returns the records the capture holds.
func (r *captureRecorder) records(t *testing.T) [][]byte {
	t.Helper()
	if err := r.w.Close(); err != nil {
		t.Fatal(err)
	}
	cr, err := capture.NewReader(bytes.NewReader(r.buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var recs [][]byte
	for {
		buf := make([]byte, 1<<16)
		h, payload, err := cr.Next(buf[64:])
		if errors.Is(err, io.EOF) {
			return recs
		}
		if err != nil {
			t.Fatal(err)
		}
		h.Put(buf)
		recs = append(recs, buf[:64+len(payload)])
	}
}

// failingRecorder fails from its nth record on, as a full disk does.
type failingRecorder struct{ n, calls int }

func (r *failingRecorder) WriteRecord([]byte) error {
	r.calls++
	if r.calls > r.n {
		return errors.New("no space left on device")
	}
	return nil
}

// fillRing connects a sender to l and posts n frames, more than the
// receiver has taken, then ends as end says: "abort" closes the
// connection abruptly (a detector that loses power), "stay" keeps it open.
// It returns the frames posted and a function that closes the sender.
func fillRing(ctx context.Context, t *testing.T, l *Listener, mode Mode, n int) ([][]byte, *Sender) {
	t.Helper()
	s, err := Dial(ctx, senderConfig(l.Addr().String(), mode, 0, n))
	if err != nil {
		t.Fatal(err)
	}
	var sent [][]byte
	for i := range n {
		buf, err := s.Buffer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rec := testRecord(t, testFormat, 0, i)
		if err := s.Post(copy(buf, rec)); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, rec)
	}
	// The provider moves the frames while the sender makes progress.
	s.progress(200 * time.Millisecond)
	return sent, s
}

// TestBacklogHandedOutBeforeTheEnd fills the receiver's ring (more slots
// than a completion read returns) before the receiver takes a frame, then
// ends the stream: the sender dies, or the receiver is stopped (Ctrl-C).
// Every frame that arrived is handed out, and recorded, before the end's
// error; after a Stop no credit goes back to the sender.
func TestBacklogHandedOutBeforeTheEnd(t *testing.T) {
	const slots = 40 // more than fi.MaxBatch, so that arrivals wait in the completion queue
	stopped := errors.New("interrupted")
	for _, mode := range []Mode{ModeWrite, ModeSend} {
		for _, end := range []string{"sender killed", "stopped"} {
			t.Run(mode.String()+"/"+end, func(t *testing.T) {
				checkNoLeaks(t)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				cfg := testConfig()
				cfg.Slots = slots
				l := testListen(t, cfg)
				accepted := make(chan *Stream, 1)
				go func() {
					s, err := l.Accept(ctx)
					if err != nil {
						t.Error(err)
					}
					accepted <- s
				}()
				sent, sender := fillRing(ctx, t, l, mode, slots)
				s := <-accepted
				if s == nil {
					sender.Abort()
					return
				}
				defer s.Close()
				rec := newCaptureRecorder(t)
				s.Record(rec)
				switch end {
				case "sender killed":
					sender.Abort()
					time.Sleep(100 * time.Millisecond) // the shutdown reaches the receiver first
				case "stopped":
					s.Stop(stopped)
					defer sender.Abort()
				}
				got, err := receiveAll(ctx, s, time.Millisecond)
				want := ErrDisconnected
				if end == "stopped" {
					want = stopped
				}
				if !errors.Is(err, want) {
					t.Errorf("Next at the end: %v, want %v", err, want)
				}
				if len(got) != len(sent) {
					t.Fatalf("%d frames handed out of the %d that arrived", len(got), len(sent))
				}
				for i := range sent {
					if !bytes.Equal(got[i], sent[i]) {
						t.Errorf("frame %d differs from the one sent", i)
					}
				}
				recorded := rec.records(t)
				if st := s.Stats(); st.Frames != uint64(len(got)) || len(recorded) != len(got) {
					t.Errorf("received %d, handed out %d, recorded %d: want them equal", st.Frames, len(got), len(recorded))
				}
				for i := range recorded {
					if !bytes.Equal(recorded[i], sent[i]) {
						t.Errorf("recorded frame %d differs from the one sent", i)
					}
				}
				if end == "stopped" {
					// Released slots are not credited: the sender may send no more.
					sender.progress(100 * time.Millisecond)
					if sender.canSend() {
						t.Error("the sender got credits after the receiver stopped")
					}
				}
			})
		}
	}
}

// TestFailingRecordStopsOnlyTheRecording has the recorder fail after a few
// frames, as a full disk does: the stream hands out every frame, and says
// what stopped the recording.
func TestFailingRecordStopsOnlyTheRecording(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := testListen(t, testConfig())
	done := sendCapture(ctx, t, senderConfig(l.Addr().String(), ModeWrite, 0, 20), testCapture(t, testFormat, 0, 20), 0)
	s, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rec := &failingRecorder{n: 5}
	s.Record(rec)
	got, res := receiveSent(ctx, t, s, done)
	if len(got) != 20 || res.stats.Received != 20 {
		t.Errorf("%d frames handed out, the sender heard %d received: want 20", len(got), res.stats.Received)
	}
	if err := s.RecordErr(); err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Errorf("RecordErr: %v, want the recorder's error", err)
	}
	if rec.calls != 6 {
		t.Errorf("the recorder was called %d times, want 6 (it stops at the first failure)", rec.calls)
	}
}

// dialRaw connects to addr at the libfabric level, as a hostile peer: it
// sends nothing. close closes the connection.
func dialRaw(t *testing.T, addr string) (close func()) {
	t.Helper()
	info, err := fi.GetInfo("tcp", addr, false)
	if err != nil {
		t.Fatal(err)
	}
	fab, err := fi.OpenFabric(info)
	if err != nil {
		info.Close()
		t.Fatal(err)
	}
	c, err := openConn(fab, info, 4)
	if err != nil {
		info.Close()
		fab.Close()
		t.Fatal(err)
	}
	close = func() {
		c.ep.Shutdown()
		c.close()
		fab.Close()
	}
	if err := c.ep.Connect(info); err != nil {
		close()
		t.Fatal(err)
	}
	if err := c.waitEvent(fi.EventConnected, 5*time.Second, "connect"); err != nil {
		close()
		t.Fatal(err)
	}
	return close
}

// TestHostilePeers has peers that connect and close at once, connect and
// stay silent, or send a garbage hello, connect before and while the real
// senders of modules 0 and 1 do. Each bad peer is refused (an error
// wrapping ErrRefused, the listener goes on); the real senders are
// accepted at once, not after a bad peer's handshake timeout, and every
// frame of theirs arrives.
func TestHostilePeers(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := testConfig()
	cfg.HandshakeTimeout = 3 * time.Second
	cfg.Check = func(h Hello) error {
		if h.Module > 1 {
			return errors.New("modules 0 and 1 only")
		}
		return nil
	}
	l := testListen(t, cfg)
	addr := l.Addr().String()

	var hostile sync.WaitGroup
	silent := dialRaw(t, addr) // connects and says nothing
	defer silent()
	dialRaw(t, addr)() // connects and closes at once
	hostile.Add(1)
	go func() { // garbage for a hello
		defer hostile.Done()
		hc := senderConfig(addr, ModeWrite, 0, 1)
		hc.rawHello = make([]byte, helloSize)
		for i := range hc.rawHello {
			hc.rawHello[i] = byte(rand.IntN(256))
		}
		if s, err := Dial(ctx, hc); err == nil {
			s.Abort()
			t.Error("a garbage hello was accepted")
		}
	}()
	time.Sleep(100 * time.Millisecond) // the bad peers come first

	start := time.Now()
	var senders []<-chan sendResult
	for m := range 2 {
		senders = append(senders, sendCapture(ctx, t, senderConfig(addr, ModeWrite, m, 10), testCapture(t, testFormat, m, 10), 0))
	}
	var streams []*Stream
	var refused []error
	for len(streams) < 2 {
		s, err := l.Accept(ctx)
		if errors.Is(err, ErrRefused) {
			refused = append(refused, err)
			continue
		}
		if err != nil {
			t.Fatalf("Accept: %v (refused before: %v)", err, refused)
		}
		defer s.Close()
		streams = append(streams, s)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the real senders were accepted after %v, want at once (the silent peer's handshake timeout is %v)", d, cfg.HandshakeTimeout)
	}
	for _, s := range streams {
		got, res := receiveSent(ctx, t, s, senders[s.Hello().Module])
		if len(got) != 10 || res.err != nil {
			t.Errorf("module %d: %d frames of 10 (%v)", s.Hello().Module, len(got), res.err)
		}
	}
	hostile.Wait()
	// The silent peer is refused at its handshake timeout.
	for len(refused) < 3 {
		_, err := l.Accept(ctx)
		if !errors.Is(err, ErrRefused) {
			t.Fatalf("Accept: %v, want the silent peer refused; refused so far: %v", err, refused)
		}
		refused = append(refused, err)
	}
	var timedOut bool
	for _, err := range refused {
		timedOut = timedOut || errors.Is(err, ErrTimeout)
		t.Logf("refused: %v", err)
	}
	if !timedOut {
		t.Errorf("no refusal for the silent peer's timeout in %v", refused)
	}
}

// peakRSS returns the process's peak resident memory, bytes.
func peakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Skip("no VmHWM in /proc/self/status")
	return 0
}

// TestHugeFramesRefused has a peer announce frames of 699 MB: a ring of
// them passes the receiver's limit, so it is refused (code 6) before any
// memory is taken, and the next sender is served.
func TestHugeFramesRefused(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := testConfig()
	cfg.Slots = 32
	l := testListen(t, cfg)
	before := peakRSS(t)
	hc := senderConfig(l.Addr().String(), ModeWrite, 0, 1)
	hc.Hello.MaxFrame = 699_000_000
	done := make(chan error, 1)
	go func() {
		s, err := Dial(ctx, hc)
		if err == nil {
			s.Abort()
		}
		done <- err
	}()
	if _, err := l.Accept(ctx); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "limit") {
		t.Errorf("Accept: %v, want a refusal naming the ring limit", err)
	}
	var refusal *RefusedError
	if err := <-done; !errors.As(err, &refusal) || refusal.Code != RefuseResources {
		t.Errorf("the sender got %v, want a refusal with code %d", err, RefuseResources)
	}
	if grew := peakRSS(t) - before; grew > 64<<20 {
		t.Errorf("peak memory grew by %d MB for a refused sender", grew>>20)
	}
	done2 := sendCapture(ctx, t, senderConfig(l.Addr().String(), ModeWrite, 0, 3), testCapture(t, testFormat, 0, 3), 0)
	s, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, _ := receiveSent(ctx, t, s, done2); len(got) != 3 {
		t.Errorf("%d frames of 3 after the refusal", len(got))
	}
}

// TestFrameOfWrongLengthDoesNotEndTheStream has a sender post, among 8
// frames that all reach the ring before the receiver takes any, one frame
// a byte shorter than its header says (both transfer modes). Next hands
// out all 8, that one with the payload as it arrived, for the pipeline to
// reject, and then the end of the scan. It used to end the stream at that
// frame with frame.ErrNotFrame: the 4 good frames after it, which had
// arrived, were never handed out and the scan ended early.
func TestFrameOfWrongLengthDoesNotEndTheStream(t *testing.T) {
	for _, mode := range []Mode{ModeWrite, ModeSend} {
		t.Run(mode.String(), func(t *testing.T) {
			checkNoLeaks(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			l := testListen(t, testConfig())
			data := testCapture(t, testFormat, 0, 8)
			sent := make(chan error, 1)
			go func() {
				s, err := Dial(ctx, senderConfig(l.Addr().String(), mode, 0, 8))
				if err != nil {
					sent <- err
					return
				}
				r, _ := capture.NewReader(bytes.NewReader(data))
				for i := range 8 {
					b, err := s.Buffer(ctx)
					if err != nil {
						s.Abort()
						sent <- err
						return
					}
					h, payload, err := r.Next(b[frame.HeaderSize:])
					if err != nil {
						s.Abort()
						sent <- err
						return
					}
					h.Put(b)
					n := frame.HeaderSize + len(payload)
					if i == 3 {
						n--
					}
					if err := s.Post(n); err != nil {
						s.Abort()
						sent <- err
						return
					}
				}
				_, err = s.Close(ctx)
				sent <- err
			}()
			st, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			var lengths []int
			for {
				if len(lengths) == 1 {
					// Held by the pipeline: the rest reach the ring.
					time.Sleep(300 * time.Millisecond)
				}
				f, err := st.Next(ctx)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("after %d frames: %v", len(lengths)+1, err)
				}
				lengths = append(lengths, len(f.Payload)-int(f.Header.PayloadSize))
				st.Release(f)
			}
			if want := []int{0, 0, 0, -1, 0, 0, 0, 0}; !slices.Equal(lengths, want) {
				t.Errorf("frames handed out, payload minus the header's size: %v, want %v", lengths, want)
			}
			if err := <-sent; err != nil {
				t.Errorf("sender: %v", err)
			}
		})
	}
}
