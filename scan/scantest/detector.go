package scantest

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
	"h5ingest/source/capture"
	"h5ingest/source/fabric"
	"h5ingest/source/sim"
	"h5ingest/stock"
)

// BigFormat is the frame of the backlog tests: 3 x 2 chips of 256 x 256,
// 24-bit LFSR bitplane, 1.2 MB a frame.
var BigFormat = frame.Format{Geometry: frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 256, ChipHeight: 256},
	Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}

// Stages returns a registry of h5ingest's own stages, as the command
// registers them.
func Stages(t testing.TB) *registry.Registry {
	t.Helper()
	r := registry.New()
	if err := stock.Register(r); err != nil {
		t.Fatal(err)
	}
	return r
}

// SimulateModule writes a capture of a tomography of n frames of f, of
// detector module m (its seed 5 + m), and returns its path.
func SimulateModule(t testing.TB, f frame.Format, n int, m uint16) string {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Format, cfg.Plan = f, plan.Tomo(0, 0, n, 0, 180)
	cfg.Seed, cfg.Module = 5+uint64(m), m
	path, _ := Simulate(t, cfg)
	return path
}

// Send sends the capture at path to addr as module m of a detector of
// BigFormat frames, as fast as the receiver takes them; see SendHello.
func Send(path, addr string, m uint16, kill <-chan struct{}) <-chan error {
	return SendHello(path, addr, fabric.Hello{Module: m, Mode: fabric.ModeWrite, Format: BigFormat}, 0, kill)
}

// SendHello sends the capture at path to addr over libfabric's tcp
// provider with the hello given, at fps frames a second (0: as fast as
// the receiver takes them), in its own goroutine, retrying the connect
// until the receiver listens; kill, when closed, stops the sending and
// drops the connection without the end of scan, as a detector losing
// power does (nil: never). The channel gives the sender's error.
func SendHello(path, addr string, hello fabric.Hello, fps float64, kill <-chan struct{}) <-chan error {
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
			select {
			case <-kill:
				cancel()
			case <-ctx.Done():
			}
		}()
		if _, err = fabric.SendCapture(ctx, s, r, fps); err != nil {
			s.Abort() // the connection dropped, as a detector losing power drops it
		}
		done <- err
	}()
	return done
}

// JSONLog returns a logger of warnings and errors as JSON lines on w, as
// the command logs where standard error is no terminal.
func JSONLog(w io.Writer) *zap.Logger {
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(w), zapcore.WarnLevel))
}

// Buffer is a bytes.Buffer that a scan's goroutines, or a process, write
// while the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
