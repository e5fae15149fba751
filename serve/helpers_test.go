package serve

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/scan/scantest"
	"h5ingest/source/capture"
	"h5ingest/source/fabric"
	"h5ingest/source/sim"
	"h5ingest/stock"
)

// The scans of these tests run as the service runs them, through the
// Runner: no h5ingest binary, the sender in the same process.

// bigFormat is the frame of the backlog tests: 3 x 2 chips of 256 x 256,
// 24-bit LFSR bitplane, 1.2 MB a frame.
var bigFormat = frame.Format{Geometry: frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 256, ChipHeight: 256},
	Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}

// testStages returns a registry of h5ingest's own stages.
func testStages(t *testing.T) *registry.Registry {
	t.Helper()
	r := registry.New()
	if err := stock.Register(r); err != nil {
		t.Fatal(err)
	}
	return r
}

// simulate writes a capture of n frames of f and returns its path.
func simulate(t *testing.T, f frame.Format, n int) string { return simulateModule(t, f, n, 0) }

// simulateModule writes a capture of a tomography of n frames of f of
// module m and returns its path.
func simulateModule(t *testing.T, f frame.Format, n int, m uint16) string {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Format, cfg.Plan = f, plan.Tomo(0, 0, n, 0, 180)
	cfg.Seed, cfg.Module = 5+uint64(m), m
	path, _ := scantest.Simulate(t, cfg)
	return path
}

// send sends the capture at path to addr as module 0 of a detector, in
// its own goroutine, retrying the connect until the receiver listens;
// kill, when closed, stops the sending and drops the connection without
// the end of scan, as a detector losing power does. The channel gives the
// sender's error.
func send(t *testing.T, path, addr string, kill <-chan struct{}) <-chan error {
	return sendAs(t, path, addr, fabric.Hello{Module: 0, Mode: fabric.ModeWrite, Format: bigFormat}, kill)
}

// sendAs is send with the hello given.
func sendAs(t *testing.T, path, addr string, hello fabric.Hello, kill <-chan struct{}) <-chan error {
	done := make(chan error, 1)
	go func() {
		r, err := capture.Open(path)
		if err != nil {
			done <- err
			return
		}
		defer r.Close()
		cfg := fabric.SenderConfig{Provider: "tcp", Addr: addr, Timeout: 20 * time.Second, Hello: hello}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, err := fabric.DialWait(ctx, cfg)
		if err != nil {
			done <- err
			return
		}
		go func() {
			<-kill
			cancel()
		}()
		if _, err = fabric.SendCapture(ctx, s, r, 0); err != nil {
			s.Abort() // the connection dropped, as a detector losing power drops it
		}
		done <- err
	}()
	return done
}

// jsonLog returns a logger of warnings and errors, as JSON lines, to w.
func jsonLog(w io.Writer) *zap.Logger {
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(w), zapcore.WarnLevel))
}

// bytesBuffer is a bytes.Buffer safe for the goroutines of a scan.
type bytesBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *bytesBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *bytesBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
