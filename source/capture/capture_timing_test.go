package capture

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"h5ingest/frame"
)

// BenchmarkRead reads a capture of full-size frames from a file. The
// "io.Copy" sub-benchmark copies the same file to io.Discard: the
// reference the reader is measured against.
func BenchmarkRead(b *testing.B) {
	f := frame.Format{Geometry: frame.PiMega, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.Binary}
	const frames = 16
	path := filepath.Join(b.TempDir(), "bench.pmcap")
	out, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w, err := NewWriter(out, testMeta)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, f.PayloadSize())
	for i := range payload {
		payload[i] = byte(i * 31)
	}
	for i := range frames {
		h := frame.Header{FrameNumber: uint64(i), PayloadSize: uint32(len(payload)), PayloadCRC: frame.Checksum(payload), Format: f}
		if err := w.WriteFrame(&h, payload); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	size := w.Size()
	out.Close()

	b.Run("Reader", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		buf := make([]byte, f.PayloadSize())
		for b.Loop() {
			r, err := Open(path)
			if err != nil {
				b.Fatal(err)
			}
			for {
				if _, _, err = r.Next(buf); err != nil {
					break
				}
			}
			if err != io.EOF {
				b.Fatal(err)
			}
			r.Close()
		}
	})
	b.Run("io.Copy", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			in, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, in); err != nil {
				b.Fatal(err)
			}
			in.Close()
		}
	})
}
