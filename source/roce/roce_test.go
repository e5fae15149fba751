package roce

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/receive"
	"h5ingest/source/capture"
	"h5ingest/source/roce/internal/verbs"
	"h5ingest/source/sim"
)

// smallFormat is a small module: 3 x 2 chips of 32 x 16 pixels, 24-bit
// bitplane with LFSR counters, as the Pi-mega sends them.
var smallFormat = frame.Format{Geometry: frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16},
	Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}

// capturePath writes a capture of n frames of module 0 and returns its
// path and every frame as the capture holds it, by frame number.
func capturePath(t testing.TB, n int) (string, map[uint64][]byte) {
	t.Helper()
	return capturePathSeed(t, n, sim.DefaultConfig().Seed)
}

// capturePathSeed is capturePath of the simulator's seed: captures of
// other seeds hold other pixels.
func capturePathSeed(t testing.TB, n int, seed uint64) (string, map[uint64][]byte) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Seed = seed
	cfg.Format = smallFormat
	cfg.Plan = plan.Tomo(0, 0, n, 0, 180)
	path := filepath.Join(t.TempDir(), "scan.pmcap")
	if _, err := sim.WriteFile(path, cfg, []uint16{0}, false, "test"); err != nil {
		t.Fatal(err)
	}
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	truth := map[uint64][]byte{}
	buf := make([]byte, smallFormat.PayloadSize())
	for {
		h, p, err := r.Next(buf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		truth[h.FrameNumber] = bytes.Clone(p)
	}
	return path, truth
}

// fakeVerbs points the process at a fresh meeting directory of the fake
// verbs, and returns it.
func fakeVerbs(t testing.TB) string {
	dir := t.TempDir()
	t.Setenv(verbs.FakeEnv, dir)
	return dir
}

// setup returns a receiver's setup for module 0 of smallFormat, meeting
// its front end through files in dir.
func setup(dir string, src func(*config.Source)) receive.Setup {
	s := config.Default().Source
	s.RingSlots = 16
	s.ConnectTimeout = 20 * time.Second
	s.IdleTimeout = 20 * time.Second
	if src != nil {
		src(&s)
	}
	return receive.Setup{Source: s, Format: smallFormat, Modules: []int{0},
		ParamsFile: filepath.Join(dir, "rdma.json"), PeerFile: filepath.Join(dir, "front-end.json")}
}

// emulate runs the front end's emulator on the capture at path in the
// background, and returns what it ends with.
func emulate(t testing.TB, ctx context.Context, dir, path string, fps float64) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := Send(ctx, SendConfig{Port: 1, ParamsFile: filepath.Join(dir, "rdma.json"), FrontEndFile: filepath.Join(dir, "front-end.json"),
			Timeout: 20 * time.Second, FPS: fps}, path)
		done <- err
	}()
	return done
}

// receiveScan opens a receiver as s says, starts the front end's emulator
// on the capture at path at fps (0: full pace), and returns the module's
// stream and what the emulator ends with; both end with the test.
func receiveScan(t *testing.T, dir, path string, s receive.Setup, fps float64) (receive.Stream, <-chan error) {
	t.Helper()
	l, err := Open(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sent := emulate(t, ctx, dir, path, fps)
	st, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, sent
}

// TestReceiveEveryFrame runs the emulator at full pace against a receiver
// through the fake NIC, in each immediate, header and queue pair mode,
// into a ring deeper than the scan, and checks that every frame arrives
// with the capture's bytes and passes Intact.
func TestReceiveEveryFrame(t *testing.T) {
	for _, tc := range []struct {
		name              string
		immediate, header string
		qp                string
	}{
		{"frame numbers, headers, RC", ImmediateFrame, HeaderFrame, "rc"},
		{"slot indexes, headers, RC", ImmediateSlot, HeaderFrame, "rc"},
		{"frame numbers, bare payloads, RC", ImmediateFrame, HeaderNone, "rc"},
		{"frame numbers, headers, UC", ImmediateFrame, HeaderFrame, "uc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := fakeVerbs(t)
			const n = 40
			path, truth := capturePath(t, n)
			// A ring deeper than the scan: the front end, at full pace,
			// never comes round to a slot, however slow the reader.
			s := setup(dir, func(s *config.Source) {
				s.Immediate, s.FrameHeader, s.QPType = tc.immediate, tc.header, tc.qp
				s.RingSlots = 2 * n
			})
			s.Frames = n
			st, sent := receiveScan(t, dir, path, s, 0)
			ctx := context.Background()
			ow := st.(pipeline.OverwritingSource)
			got := 0
			for {
				f, err := st.Next(ctx)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("after %d frames: %v", got, err)
				}
				want := truth[f.Header.FrameNumber]
				payload := bytes.Clone(f.Payload)
				if !ow.Intact(f) {
					t.Fatalf("frame %d overrun in a ring deeper than the scan", f.Header.FrameNumber)
				}
				if !bytes.Equal(payload, want) {
					t.Fatalf("frame %d: payload differs from the capture's", f.Header.FrameNumber)
				}
				if tc.header == HeaderNone != f.Unchecked {
					t.Errorf("frame %d: Unchecked %v with header mode %s", f.Header.FrameNumber, f.Unchecked, tc.header)
				}
				st.Release(f)
				got++
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			if stats := st.Stats(); got != n || stats.Frames != n || stats.Overrun != 0 {
				t.Errorf("%d frames intact, %d overrun, %d received; want all %d intact", got, stats.Overrun, stats.Frames, n)
			}
		})
	}
}

// TestFasterFrontEndNeverStoresTornFrames has the emulator write as fast
// as it can into a small ring while the reader is slow, and checks that
// every frame Intact passes holds exactly the capture's bytes (as copied
// before Intact was asked), and that the frames lost are counted.
func TestFasterFrontEndNeverStoresTornFrames(t *testing.T) {
	dir := fakeVerbs(t)
	const n = 300
	path, truth := capturePath(t, n)
	s := setup(dir, func(s *config.Source) { s.RingSlots = 8 })
	s.Frames = n
	st, sent := receiveScan(t, dir, path, s, 0)
	ctx := context.Background()
	ow := st.(pipeline.OverwritingSource)
	intact, torn := 0, 0
	copyBuf := make([]byte, smallFormat.PayloadSize())
	for {
		f, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		// A slow read: byte by byte, so that the front end overtakes it.
		for i := range f.Payload {
			copyBuf[i] = f.Payload[i]
			if i%512 == 0 {
				time.Sleep(time.Microsecond)
			}
		}
		ok := ow.Intact(f)
		same := bytes.Equal(copyBuf[:len(f.Payload)], truth[f.Header.FrameNumber])
		switch {
		case ok && !same:
			t.Fatalf("frame %d passed as intact but its bytes are not the capture's", f.Header.FrameNumber)
		case ok:
			intact++
		case !same:
			torn++
		}
		st.Release(f)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	stats := st.Stats()
	t.Logf("%d intact, %d overrun (%d of them torn when read), %d received", intact, stats.Overrun, torn, stats.Frames)
	if intact+int(stats.Overrun) != n {
		t.Errorf("%d intact and %d overrun, want %d in all", intact, stats.Overrun, n)
	}
	if stats.Overrun == 0 {
		t.Error("a front end far faster than the reader overran no frame: the test did not test")
	}
}
