package sim

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"

	"h5ingest/frame"
)

// generator makes frames of a scan. It holds one worker's buffers and is
// used by one goroutine at a time.
type generator struct {
	s          *Scan
	pcg        rand.PCG
	mean       []float32
	counts     []uint32
	imageBytes []byte   // the decoded image's bytes, for its data CRC
	codes      []uint32 // a chip row of counter codes
}

func newGenerator(s *Scan) *generator {
	return &generator{s: s, mean: make([]float32, s.cfg.Format.Pixels())}
}

// image returns the counts of frame i in dst (grown if needed) and whether
// any was clipped.
func (g *generator) image(i int, dst []uint32) ([]uint32, bool) {
	f := g.s.cfg.Format
	dst = slices.Grow(dst[:0], f.Pixels())[:f.Pixels()]
	g.pcg.Seed(g.s.cfg.Seed^streamNoise, uint64(i))
	flux := g.s.scene.flux(float64(normalQ[g.pcg.Uint64()&0xFFFF]))
	g.s.scene.expected(i, flux, g.mean)
	clipped := sample(&g.pcg, dst, g.mean, f.MaxCount())
	return dst, clipped
}

// made is what the generator made of one frame.
type made struct {
	record  []byte // header and payload, as written (corrupt if planned)
	dataCRC uint32 // CRC-32C of the expected decoded image
	flags   uint32 // the header's flags
}

// frame makes frame i. With encode false it makes only the image and its
// checksum, and record is empty. The record is built in buf's memory.
func (g *generator) frame(i int, encode bool, buf []byte) (made, error) {
	f := g.s.cfg.Format
	var clipped bool
	g.counts, clipped = g.image(i, g.counts)
	g.imageBytes = appendImage(g.imageBytes[:0], f, g.counts)
	m := made{dataCRC: frame.Checksum(g.imageBytes), record: buf[:0]}
	if clipped {
		m.flags = frame.FlagOverflow
	}
	if !encode {
		return m, nil
	}
	rec := append(buf[:0], make([]byte, frame.HeaderSize)...)
	rec, err := appendPayload(rec, f, g.s.cfg.Orientation, g.counts, &g.codes)
	if err != nil {
		return m, fmt.Errorf("simulate frame %d: %w", i, err)
	}
	payload := rec[frame.HeaderSize:]
	h := frame.Header{
		FrameNumber: uint64(i),
		Timestamp:   g.s.Timestamp(i),
		PayloadSize: uint32(len(payload)),
		PayloadCRC:  frame.Checksum(payload),
		ModuleID:    g.s.cfg.Module,
		Format:      f,
		Flags:       m.flags,
	}
	h.Put(rec)
	if _, ok := slices.BinarySearch(g.s.faults.Corrupt, i); ok && len(payload) > 0 {
		r := rand.NewPCG(g.s.cfg.Seed^streamCorrupt, uint64(i))
		payload[r.Uint64()%uint64(len(payload))] ^= 0xFF
	}
	m.record = rec
	return m, nil
}

// appendImage appends the decoded image's bytes: little-endian uint16
// counts where the depth is at most 16 bits, else uint32.
func appendImage(dst []byte, f frame.Format, counts []uint32) []byte {
	n := len(dst)
	size := len(counts) * f.PixelSize()
	dst = slices.Grow(dst, size)[:n+size]
	out := dst[n:]
	if f.PixelSize() == 2 {
		for p, v := range counts {
			binary.LittleEndian.PutUint16(out[2*p:], uint16(v))
		}
		return dst
	}
	for p, v := range counts {
		binary.LittleEndian.PutUint32(out[4*p:], v)
	}
	return dst
}
