package fabric

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"h5ingest/frame"
)

// BenchmarkReceive measures the receiver alone over loopback: frames of
// a Pi-mega module (and a small one) sent as fast as credits allow,
// released as soon as they arrive. Read its MB/s beside fi_pingpong's at
// the same message size (tools/bench-fabric/run.sh).
func BenchmarkReceive(b *testing.B) {
	pimega := frame.Format{Geometry: frame.PiMega, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	for _, f := range []frame.Format{testFormat, pimega} {
		for _, mode := range []Mode{ModeWrite, ModeSend} {
			b.Run(fmt.Sprintf("%dx%d/%v", f.Width(), f.Height(), mode), func(b *testing.B) {
				benchReceive(b, f, mode)
			})
		}
	}
}

func benchReceive(b *testing.B, f frame.Format, mode Mode) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l, err := Listen(testConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	rec := testRecord(b, f, 0, 0)
	n := b.N
	done := make(chan error, 1)
	go func() {
		s, err := Dial(ctx, SenderConfig{Provider: "tcp", Addr: l.Addr().String(), Timeout: 30 * time.Second,
			Hello: Hello{Mode: mode, Format: f, Frames: uint64(n)}})
		if err != nil {
			done <- err
			return
		}
		for range n {
			buf, err := s.Buffer(ctx)
			if err != nil {
				done <- err
				return
			}
			if err := s.Post(copy(buf, rec)); err != nil {
				done <- err
				return
			}
		}
		_, err = s.Close(ctx)
		done <- err
	}()
	s, err := l.Accept(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	b.ResetTimer()
	for {
		fr, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		s.Release(fr)
	}
	b.StopTimer()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
