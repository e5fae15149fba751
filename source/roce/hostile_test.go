package roce

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/source/sim"
)

// TestHeldFrameKeepsItsIdentity holds a frame as the pipeline does (a
// decode still to come) while the front end laps the ring and Next skips
// the frames it overran, until it hands out the frame that went into the
// held frame's slot. The held frame must still be the frame it was (its
// number), and Intact must find it written over. Sharing one
// pipeline.Frame per slot made the held frame turn into the later one,
// which Intact then passed: acquire stored frame n with frame n+slots'
// pixels, status ok.
func TestHeldFrameKeepsItsIdentity(t *testing.T) {
	st, nic := benchStream(t, "none")
	n := uint32(smallFormat.PayloadSize())
	ctx := context.Background()
	slots := uint32(st.cfg.Slots)
	if err := nic.Complete(0, n); err != nil {
		t.Fatal(err)
	}
	held, err := st.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The front end writes a whole ring more; the last write lands
	// in the held frame's slot.
	for i := uint32(1); i <= slots; i++ {
		if err := nic.Complete(i, n); err != nil {
			t.Fatal(err)
		}
	}
	// Every frame up to the one before the held slot's next: Next hands
	// out no frame in a slot whose frame is held.
	for {
		f, err := st.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if f == held {
			t.Fatalf("Next handed out the held frame's slot again, as frame %d", f.Header.FrameNumber)
		}
		last := f.Header.FrameNumber == uint64(slots-1)
		st.Release(f)
		if last {
			break
		}
	}
	if got := held.Header.FrameNumber; got != 0 {
		t.Errorf("the held frame 0 now says it is frame %d", got)
	}
	if st.Intact(held) {
		t.Error("Intact passed frame 0 although a whole ring more was written while it was held")
	}
	// Once released, the slot's next frame comes.
	st.Release(held)
	f, err := st.Next(ctx)
	if err != nil || f.Header.FrameNumber != uint64(slots) {
		t.Fatalf("after the release Next gave %v, %v; want frame %d", f, err, slots)
	}
	st.Release(f)
}

// TestTwoModulesTwoFrontEnds runs a receiver of modules 0 and 1 against
// two emulators, one per module (send --module 0 and send --module 1, as
// each module's front end is its own), meeting through the one
// --front-end file the receiver reads. Each emulator wrote that file with
// its own module alone, over the other's, and the receiver failed at once:
// "the front end's file has no entry for module 0".
func TestTwoModulesTwoFrontEnds(t *testing.T) {
	dir := fakeVerbs(t)
	const n = 8
	cfg := sim.DefaultConfig()
	cfg.Format = smallFormat
	cfg.Plan = plan.Tomo(0, 0, n, 0, 180)
	path := filepath.Join(t.TempDir(), "two.pmcap")
	if _, err := sim.WriteFile(path, cfg, []uint16{0, 1}, false, "test"); err != nil {
		t.Fatal(err)
	}
	s := setup(dir, nil)
	s.Modules = []int{0, 1}
	s.Frames = n
	l, err := Open(s)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent []<-chan error
	for _, m := range []int{0, 1} {
		done := make(chan error, 1)
		sent = append(sent, done)
		go func() {
			_, err := Send(ctx, SendConfig{Port: 1, Module: m, ParamsFile: s.ParamsFile, FrontEndFile: s.PeerFile,
				Timeout: 20 * time.Second, FPS: 200}, path)
			done <- err
		}()
	}
	var drains sync.WaitGroup
	for range 2 {
		st, err := l.Accept(ctx)
		if err != nil {
			t.Fatalf("Accept: %v", err)
		}
		defer st.Close()
		drains.Go(func() {
			if _, err := drain(t, ctx, st, nil); !errors.Is(err, io.EOF) {
				t.Errorf("module %d: the stream ended with %v", st.Module().ID, err)
			}
		})
	}
	drains.Wait()
	for _, done := range sent {
		if err := <-done; err != nil {
			t.Errorf("a module's front end: %v", err)
		}
	}
}

// TestStaleReadyParams starts the emulator before the receiver while the
// parameter file of a receiver that is gone (killed mid-scan: its file
// says ready) is still there, as acquire and send may start in either
// order. The emulator must meet the receiver that starts next; it wrote
// into the dead queue pair at once and gave up with "transport retry
// counter exceeded (peer gone or unreachable)".
func TestStaleReadyParams(t *testing.T) {
	dir := fakeVerbs(t)
	path, _ := capturePath(t, 8)
	s := setup(dir, func(s *config.Source) { s.ConnectTimeout = 5 * time.Second })
	s.Frames = 8
	stale := Params{Version: ParamsVersion, Nonce: "0123456789abcdef", Ready: true, Modules: []ModuleParams{{
		Module: 0, Device: "fake0", Port: 1, GID: "fe80::1", QPN: 0x123450, PSN: 1, Addr: 1 << 20, RKey: 0x11,
		SlotSize: s.Format.PayloadSize() + frame.HeaderSize, Slots: 16, MTU: 4096, QPType: "rc",
		Immediate: ImmediateFrame, FrameHeader: HeaderFrame, Ready: true}}}
	if err := writeJSON(s.ParamsFile, stale); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sent := emulate(t, ctx, dir, path, 200)
	// The emulator has read the stale file once it answers it.
	var fe FrontEndParams
	if err := waitFile(ctx, s.PeerFile, time.Now().Add(20*time.Second), &fe, func() error {
		if fe.Nonce != stale.Nonce {
			return errors.New("not the stale nonce's answer")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	l, err := Open(s)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := l.Accept(ctx)
	if err != nil {
		t.Fatalf("Accept: %v (the emulator: %v)", err, <-sent)
	}
	defer st.Close()
	if _, err := drain(t, ctx, st, nil); !errors.Is(err, io.EOF) {
		t.Errorf("the stream ended with %v", err)
	}
	if err := <-sent; err != nil {
		t.Errorf("the emulator: %v", err)
	}
}

// TestParamsFileOfAnotherReceiver opens a second receiver on the
// parameter file of a first (two acquires given the same --rdma-params).
// Closing the first removed the file the second had written, and the
// second's front end then found nothing: the second must be refused, or
// its file must outlive the first.
func TestParamsFileOfAnotherReceiver(t *testing.T) {
	dir := fakeVerbs(t)
	s := setup(dir, nil)
	first, err := Open(s)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Open(s)
	if err != nil {
		first.Close()
		return // refused: the file is the first's
	}
	defer second.Close()
	first.Close()
	var p Params
	if err := readJSON(s.ParamsFile, &p); err != nil {
		t.Fatalf("the second receiver's parameter file: %v", err)
	}
	if want := second.(*Listener).Nonce(); p.Nonce != want {
		t.Errorf("the parameter file has nonce %q, want the second receiver's %q", p.Nonce, want)
	}
}

// TestUnreadableFrontEndFileSaysWhy gives a front end's file that is not
// JSON. The timeout said only "no front end answered in FILE", as if there
// were none: it must say what is wrong with the file that is there.
func TestUnreadableFrontEndFileSaysWhy(t *testing.T) {
	for _, tc := range []struct{ name, content, want string }{
		{"garbage", "garbage{{", "invalid character"},
		{"truncated", `{"version": 1, "nonce": "ab`, "unexpected end of JSON input"},
		{"another run's", `{"version": 1, "nonce": "0123456789abcdef", "modules": [{"module": 0, "gid": "fe80::1", "qpn": 5, "psn": 1}]}`, "0123456789abcdef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := fakeVerbs(t)
			s := setup(dir, func(s *config.Source) { s.ConnectTimeout = 100 * time.Millisecond })
			if err := os.WriteFile(s.PeerFile, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			l, err := Open(s)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			_, err = l.Accept(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Accept: %v, want it to say %q", err, tc.want)
			}
		})
	}
}
