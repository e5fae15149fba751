package fabric

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
	"unsafe"

	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/source/capture"
	"h5ingest/source/fabric/internal/fi"
)

var testFormat = frame.Format{
	Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 32, ChipHeight: 16},
	Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR,
}

var testMeta = capture.Metadata{Profile: "test", Created: "2025-01-02T03:04:05Z", Software: "h5ingest test"}

// testRecord returns frame i of module m of a synthetic scan, encoded.
func testRecord(t testing.TB, f frame.Format, m, i int) []byte {
	t.Helper()
	counts := make([]uint32, f.Pixels())
	for p := range counts {
		counts[p] = uint32(p*7+i*131+m*17) % (f.MaxCount() + 1)
	}
	payload, err := f.AppendPayload(nil, counts, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := frame.Header{
		FrameNumber: uint64(i), Timestamp: uint64(i) * 1e6,
		PayloadSize: uint32(len(payload)), PayloadCRC: frame.Checksum(payload),
		ModuleID: uint16(m), Format: f,
	}
	return append(frame.AppendHeader(nil, &h), payload...)
}

// testCapture returns a capture of n frames of module m.
func testCapture(t testing.TB, f frame.Format, m, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := capture.NewWriter(&buf, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := w.WriteRecord(testRecord(t, f, m, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// testConfig returns a listener configuration on a free loopback port.
func testConfig() Config {
	cfg := DefaultConfig("127.0.0.1:0")
	cfg.Slots = 8
	cfg.ConnectTimeout = 10 * time.Second
	cfg.IdleTimeout = 5 * time.Second
	return cfg
}

func testListen(t *testing.T, cfg Config) *Listener {
	t.Helper()
	l, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// checkNoLeaks fails the test if libfabric objects are left open when it
// ends.
func checkNoLeaks(t *testing.T) {
	t.Helper()
	before := fi.OpenObjects()
	t.Cleanup(func() {
		if n := fi.OpenObjects(); n != before {
			t.Errorf("%d libfabric objects left open (%d before the test)", n, before)
		}
	})
}

func senderConfig(addr string, mode Mode, module int, n int) SenderConfig {
	return SenderConfig{
		Provider: "tcp", Addr: addr, Timeout: 10 * time.Second,
		Hello: Hello{Module: uint16(module), Mode: mode, Format: testFormat, Frames: uint64(n)},
	}
}

// sendCapture sends capture data to addr in a goroutine and returns a
// channel with its outcome.
func sendCapture(ctx context.Context, t *testing.T, cfg SenderConfig, data []byte, fps float64) <-chan sendResult {
	done := make(chan sendResult, 1)
	go func() {
		r, err := capture.NewReader(bytes.NewReader(data))
		if err != nil {
			done <- sendResult{err: err}
			return
		}
		s, err := Dial(ctx, cfg)
		if err != nil {
			done <- sendResult{err: err}
			return
		}
		st, err := SendCapture(ctx, s, r, fps)
		if err != nil {
			s.Abort()
		}
		done <- sendResult{st, err}
	}()
	return done
}

type sendResult struct {
	stats SendStats
	err   error
}

// receiveAll reads every frame of s, releasing each after hold, and
// returns the records as they arrived. Every payload must lie in the
// stream's HostMemory, which a device backend page-locks.
func receiveAll(ctx context.Context, s *Stream, hold time.Duration) ([][]byte, error) {
	var recs [][]byte
	for {
		f, err := s.Next(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return recs, nil
			}
			return recs, err
		}
		if !inRegions(f.Payload, s.HostMemory()) {
			return recs, fmt.Errorf("frame %d: payload outside the stream's HostMemory", f.Header.FrameNumber)
		}
		rec := frame.AppendHeader(nil, &f.Header)
		recs = append(recs, append(rec, f.Payload...))
		if hold > 0 {
			time.Sleep(hold)
		}
		s.Release(f)
	}
}

func TestSendReceive(t *testing.T) {
	for _, mode := range []Mode{ModeWrite, ModeSend} {
		t.Run(mode.String(), func(t *testing.T) {
			checkNoLeaks(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const n = 40
			data := testCapture(t, testFormat, 0, n)
			l := testListen(t, testConfig())
			done := sendCapture(ctx, t, senderConfig(l.Addr().String(), mode, 0, n), data, 0)
			s, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Format() != testFormat || s.Hello().Mode != mode {
				t.Errorf("hello: %+v", s.Hello())
			}
			var rec bytes.Buffer
			w, err := capture.NewWriter(&rec, testMeta)
			if err != nil {
				t.Fatal(err)
			}
			s.Record(w)
			recs, res := receiveSent(ctx, t, s, done)
			if len(recs) != n {
				t.Fatalf("received %d frames, want %d", len(recs), n)
			}
			for i, r := range recs {
				if want := testRecord(t, testFormat, 0, i); !bytes.Equal(r, want) {
					t.Fatalf("frame %d differs from the one sent", i)
				}
			}
			w.Close()
			if !bytes.Equal(rec.Bytes(), data) {
				t.Errorf("recorded capture (%d bytes) differs from the sent one (%d bytes)", rec.Len(), len(data))
			}
			st := s.Stats()
			if st.Frames != n || st.SenderFrames != n || res.stats.Frames != n || res.stats.Received != n {
				t.Errorf("stats: receiver %+v, sender %+v", st, res.stats)
			}
			if want := uint64(len(recs) * len(recs[0])); st.Bytes != want || res.stats.Bytes != want {
				t.Errorf("bytes: receiver %d, sender %d, want %d", st.Bytes, res.stats.Bytes, want)
			}
			s.Close()
			l.Close()
		})
	}
}

// TestSendCaptureOfSeveralModules sends a capture of two modules'
// interleaved frames as module 1: only module 1's frames travel, and the
// others are counted as skipped.
func TestSendCaptureOfSeveralModules(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 10
	var buf bytes.Buffer
	w, err := capture.NewWriter(&buf, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		for m := range 2 {
			if err := w.WriteRecord(testRecord(t, testFormat, m, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	l := testListen(t, testConfig())
	done := sendCapture(ctx, t, senderConfig(l.Addr().String(), ModeWrite, 1, n), buf.Bytes(), 0)
	s, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs, res := receiveSent(ctx, t, s, done)
	if len(recs) != n || res.stats.Frames != n || res.stats.Skipped != n {
		t.Fatalf("received %d frames; sender sent %d, skipped %d; want %d of each", len(recs), res.stats.Frames, res.stats.Skipped, n)
	}
	for i, r := range recs {
		if !bytes.Equal(r, testRecord(t, testFormat, 1, i)) {
			t.Fatalf("frame %d is not module 1's frame %d", i, i)
		}
	}
}

func TestModulesAtOnce(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const modules, n = 4, 30
	l := testListen(t, testConfig())
	var dones []<-chan sendResult
	for m := range modules {
		mode := ModeWrite
		if m%2 == 1 {
			mode = ModeSend
		}
		dones = append(dones, sendCapture(ctx, t, senderConfig(l.Addr().String(), mode, m, n), testCapture(t, testFormat, m, n), 2000))
	}
	var wg sync.WaitGroup
	got := make([][][]byte, modules)
	errs := make(chan error, modules)
	for range modules {
		s, err := l.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs, err := receiveAll(ctx, s, 0)
			if err != nil {
				errs <- err
			}
			got[s.Hello().Module] = recs
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for m, done := range dones {
		if res := <-done; res.err != nil {
			t.Errorf("module %d: %v", m, res.err)
		}
		if len(got[m]) != n {
			t.Fatalf("module %d: %d frames, want %d", m, len(got[m]), n)
		}
		for i, r := range got[m] {
			if !bytes.Equal(r, testRecord(t, testFormat, m, i)) {
				t.Fatalf("module %d frame %d differs from the one sent", m, i)
			}
		}
	}
}

func TestDuplicateModuleRefused(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := testListen(t, testConfig())
	cfg := senderConfig(l.Addr().String(), ModeWrite, 2, 5)
	first := sendCapture(ctx, t, cfg, testCapture(t, testFormat, 2, 5), 0)
	s, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	second := sendCapture(ctx, t, cfg, testCapture(t, testFormat, 2, 5), 0)
	if _, err := l.Accept(ctx); !errors.Is(err, ErrProtocol) {
		t.Errorf("second connection of module 2: Accept returned %v, want a protocol error", err)
	}
	var refused *RefusedError
	if res := <-second; !errors.As(res.err, &refused) || refused.Code != RefuseModule {
		t.Errorf("second sender got %v, want a refusal with code %d", res.err, RefuseModule)
	}
	if _, err := receiveAll(ctx, s, 0); err != nil {
		t.Fatal(err)
	}
	if res := <-first; res.err != nil {
		t.Fatal(res.err)
	}
}

func TestBackPressure(t *testing.T) {
	for _, mode := range []Mode{ModeWrite, ModeSend} {
		t.Run(mode.String(), func(t *testing.T) {
			checkNoLeaks(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const n = 24
			cfg := testConfig()
			cfg.Slots = 4
			l := testListen(t, cfg)
			done := sendCapture(ctx, t, senderConfig(l.Addr().String(), mode, 0, n), testCapture(t, testFormat, 0, n), 0)
			s, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// A slow consumer: it holds every frame a while, so the ring
			// of 4 slots fills and the sender waits.
			recs, err := receiveAll(ctx, s, 10*time.Millisecond)
			res := <-done
			if err != nil {
				t.Fatalf("receiver: %v (sender: %v)", err, res.err)
			}
			if res.err != nil {
				t.Fatal(res.err)
			}
			if len(recs) != n {
				t.Fatalf("received %d frames, want %d", len(recs), n)
			}
			for i, r := range recs {
				if !bytes.Equal(r, testRecord(t, testFormat, 0, i)) {
					t.Fatalf("frame %d differs from the one sent", i)
				}
			}
			st := s.Stats()
			if res.stats.HeldBack < 50*time.Millisecond {
				t.Errorf("sender held back %v; 24 frames held 10 ms each through 4 slots should hold it longer", res.stats.HeldBack)
			}
			if st.SenderHeldBack != res.stats.HeldBack {
				t.Errorf("receiver heard the sender was held back %v, the sender says %v", st.SenderHeldBack, res.stats.HeldBack)
			}
			// The receiver sees the ring full from when it takes the last
			// slot's completion to when a credit goes out; the sender waits
			// from when it finds no credit to when one comes: the two
			// agree but for the messages' crossing times, a few of them.
			if d := st.HeldBack - res.stats.HeldBack; d > 5*time.Millisecond || d < -res.stats.HeldBack/2 || res.stats.ReceiverHeldBack != st.HeldBack {
				t.Errorf("ring full for %v (sender heard %v), want the sender's %v within its messages' crossing, and equal",
					st.HeldBack, res.stats.ReceiverHeldBack, res.stats.HeldBack)
			}
			t.Logf("sender held back %v, receiver saw its ring full %v", res.stats.HeldBack, st.HeldBack)
		})
	}
}

func TestSenderDisconnects(t *testing.T) {
	for _, mode := range []Mode{ModeWrite, ModeSend} {
		t.Run(mode.String(), func(t *testing.T) {
			checkNoLeaks(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l := testListen(t, testConfig())
			done := make(chan error, 1)
			go func() {
				s, err := Dial(ctx, senderConfig(l.Addr().String(), mode, 0, 10))
				if err != nil {
					done <- err
					return
				}
				for i := range 5 {
					buf, err := s.Buffer(ctx)
					if err != nil {
						done <- err
						return
					}
					n := copy(buf, testRecord(t, testFormat, 0, i))
					if err := s.Post(n); err != nil {
						done <- err
						return
					}
				}
				time.Sleep(50 * time.Millisecond)
				done <- s.Abort()
			}()
			s, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			recs, err := receiveAll(ctx, s, 0)
			if !errors.Is(err, ErrDisconnected) {
				t.Errorf("Next after the sender left: %v, want ErrDisconnected", err)
			}
			if len(recs) != 5 {
				t.Errorf("received %d frames before the disconnect, want 5", len(recs))
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestTimeouts(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := testConfig()
	cfg.ConnectTimeout = 200 * time.Millisecond
	cfg.IdleTimeout = 200 * time.Millisecond
	l := testListen(t, cfg)
	start := time.Now()
	if _, err := l.Accept(ctx); !errors.Is(err, ErrTimeout) {
		t.Errorf("Accept with no sender: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Accept took %v to time out after 200ms", d)
	}
	// A sender that connects and falls silent.
	cfg.ConnectTimeout = 5 * time.Second
	l = testListen(t, cfg)
	quiet := make(chan *Sender, 1)
	go func() {
		s, err := Dial(ctx, senderConfig(l.Addr().String(), ModeWrite, 0, 10))
		if err != nil {
			t.Error(err)
		}
		quiet <- s
	}()
	s, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Next(ctx); !errors.Is(err, ErrTimeout) {
		t.Errorf("Next from a silent sender: %v, want ErrTimeout", err)
	}
	if sender := <-quiet; sender != nil {
		sender.Abort()
	}
}

var _ = fmt.Sprint

// receiveSent receives every frame of s and waits for the sender that done
// reports on; either failing fails the test.
func receiveSent(ctx context.Context, t *testing.T, s *Stream, done <-chan sendResult) ([][]byte, sendResult) {
	t.Helper()
	recs, err := receiveAll(ctx, s, 0)
	if err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	return recs, res
}

// inRegions reports whether p lies wholly in one of regions.
func inRegions(p []byte, regions [][]byte) bool {
	if len(p) == 0 {
		return true
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	for _, r := range regions {
		base := uintptr(unsafe.Pointer(unsafe.SliceData(r)))
		if start >= base && start+uintptr(len(p)) <= base+uintptr(len(r)) {
			return true
		}
	}
	return false
}

// TestSlotOf checks that Release finds a frame's slot from the frame
// itself, in constant time: each of a ring's frames gives its own index,
// and a frame that is not the stream's (another stream's, a copy, nil)
// none, so that its Release returns no credit.
func TestSlotOf(t *testing.T) {
	s := &Stream{frames: make([]pipeline.Frame, 4096)}
	for _, i := range []int{0, 1, 7, 4095} {
		if got := s.slotOf(&s.frames[i]); got != i {
			t.Errorf("slotOf(&frames[%d]) = %d", i, got)
		}
	}
	other := &Stream{frames: make([]pipeline.Frame, 4)}
	copied := s.frames[3]
	for name, f := range map[string]*pipeline.Frame{"another stream's": &other.frames[1], "a copy": &copied, "nil": nil} {
		if got := s.slotOf(f); got != -1 {
			t.Errorf("slotOf(%s frame) = %d, want -1", name, got)
		}
	}
	if got := (&Stream{}).slotOf(&copied); got != -1 {
		t.Errorf("slotOf on a stream with no ring = %d, want -1", got)
	}
}
