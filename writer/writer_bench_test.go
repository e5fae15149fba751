package writer

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkWriteChunk measures direct chunk writes of uncompressed frames
// into a fixed-length stack, cycling over 64 chunks so that the file stays
// small, with the default flush cadence.
func BenchmarkWriteChunk(b *testing.B) {
	for _, g := range []struct{ h, w, elem int }{{256, 256, 2}, {1536, 1536, 4}} {
		b.Run(fmt.Sprintf("%dx%dx%d", g.h, g.w, g.elem), func(b *testing.B) {
			const frames = 64
			w, err := Create(Options{
				Path: filepath.Join(b.TempDir(), "bench.h5"), Layout: NXtomo{},
				Frames: frames, Height: g.h, Width: g.w, ElemSize: g.elem, FlushInterval: time.Second,
			})
			if err != nil {
				b.Fatal(err)
			}
			chunk := pattern(1, g.h, g.w, g.elem)
			b.SetBytes(int64(len(chunk)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := w.WriteChunk(i%frames, 0, chunk); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
