package stream

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"h5ingest/frame"
)

// BenchmarkImagePath times what the stream does with one image between
// the file's sink and ZeroMQ: the sink's copy of the chunk into a queued
// buffer, its place in the order, and the sender's encoding of the image
// message, for chunks of a compressed and of an uncompressed Pi-mega
// module (1536 x 1536 pixels of 4 bytes).
func BenchmarkImagePath(b *testing.B) {
	for _, size := range []int{2 << 20, 1536 * 1536 * 4} {
		b.Run(fmt.Sprintf("chunk=%dKiB", size>>10), func(b *testing.B) {
			chunk := make([]byte, size)
			r := rand.New(rand.NewPCG(1, 2))
			for i := range chunk {
				chunk[i] = byte(r.Uint32())
			}
			s := benchStream(size)
			sink := s.Sink(discard{})
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for n := range b.N {
				sink.WriteChunk(n, chunk)
				sink.SetRecord(n, frame.Record{Timestamp: uint64(n), DataCRC: 1})
				img := <-s.queue
				if msg := benchMessage(s, img); len(msg) < size {
					b.Fatalf("message of %d bytes", len(msg))
				}
				s.free <- img
			}
		})
	}
}

// benchStream returns a stream without a socket or a sender: the
// benchmark takes the queued images itself.
func benchStream(maxChunk int) *Stream {
	se := testSeries(0)
	se.Compression = ""
	s := &Stream{series: se, uniqueID: "scan-42-20261123T120000.000000Z-host-31001", number: 1,
		armDate: se.Armed.Format(time.RFC3339Nano), exposure: 1000000,
		free: make(chan *image, 2), queue: make(chan *image, 2)}
	s.sizeHead(maxChunk)
	for range 2 {
		s.free <- s.newImage(maxChunk)
	}
	s.order = newOrder(s.queue, s.free, &s.gaps, &s.late)
	return s
}

// benchMessage returns img's image message, as the sender builds it.
func benchMessage(s *Stream, img *image) []byte { return s.imageMessage(img) }
