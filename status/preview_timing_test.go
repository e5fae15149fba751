package status

import (
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/instrument"
)

// BenchmarkPreview measures what a preview costs at Pi-mega size: the copy
// the decode stage makes (at most every 250 ms) and the PNG the server
// renders per new image.
func BenchmarkPreview(b *testing.B) {
	f := frame.Format{
		Geometry: frame.Geometry{ChipsX: 6, ChipsY: 6, ChipWidth: 256, ChipHeight: 256},
		Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR,
	}
	img := make([]byte, f.ImageSize())
	for i := range img {
		img[i] = byte(i * 7)
	}
	jobs := []gpu.Job{{Header: frame.Header{Format: f}, Image: img}}
	st := instrument.New()
	st.Preview.Enable(1) // every offer copies
	be := st.Backend(idleBackend{})
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(img)))
		for b.Loop() {
			be.Decode(jobs)
		}
	})
	b.Run("render", func(b *testing.B) {
		m := &Monitor{stages: st}
		rp := &renderedPreview{}
		for b.Loop() {
			rp.seq, rp.when = 0, time.Time{} // force a new rendering
			if _, err := rp.render(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// idleBackend decodes nothing: the copy benchmark measures the wrapper.
type idleBackend struct{ nopBackend }

func (idleBackend) Decode([]gpu.Job) error { return nil }
