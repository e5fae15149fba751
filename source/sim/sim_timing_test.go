package sim

import (
	"os"
	"path/filepath"
	"testing"

	"h5ingest/frame"
	"h5ingest/plan"
)

// BenchmarkWriteCapture simulates full Pi-mega frames (24-bit LFSR
// bitplane) into a capture file; ns/op is per frame.
func BenchmarkWriteCapture(b *testing.B) {
	for _, scene := range []Scene{Tomo, CDI} {
		b.Run(string(scene), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Scene = scene
			cfg.Plan = plan.Tomo(2, 2, b.N, 0, 180)
			cfg.Frames = b.N + 4
			s, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			f, err := os.Create(filepath.Join(b.TempDir(), "bench.pmcap"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			b.SetBytes(int64(frame.HeaderSize + cfg.Format.PayloadSize()))
			b.ResetTimer()
			if _, err := s.WriteCapture(f, testMeta); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkImage makes one frame's counts (noise included), and
// BenchmarkEncode encodes it, by the fast path and by the reference.
func BenchmarkImage(b *testing.B) {
	s, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	g := newGenerator(s)
	var counts []uint32
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		counts, _ = g.image(20+i%100, counts)
	}
}

func BenchmarkEncode(b *testing.B) {
	cfg := DefaultConfig()
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	counts, _ := s.Image(50, nil)
	dst := make([]byte, 0, cfg.Format.PayloadSize())
	b.Run("fast", func(b *testing.B) {
		b.SetBytes(int64(cfg.Format.PayloadSize()))
		b.ReportAllocs()
		var scratch []uint32
		for b.Loop() {
			appendBitplane(dst[:0], cfg.Format, nil, counts, &scratch)
		}
	})
	b.Run("frame.AppendPayload", func(b *testing.B) {
		b.SetBytes(int64(cfg.Format.PayloadSize()))
		for b.Loop() {
			if _, err := cfg.Format.AppendPayload(dst[:0], counts, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
