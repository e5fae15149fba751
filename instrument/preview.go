package instrument

import (
	"sync"
	"sync/atomic"
	"time"

	"h5ingest/compress/bitshuffle"
	"h5ingest/frame"
	"h5ingest/gpu"
)

// PreviewInterval is how often the Backend wrapper keeps a decoded image by
// default: at most four a second.
const PreviewInterval = 250 * time.Millisecond

// Preview keeps a copy of a recently decoded image. The decode stage offers
// images; it copies one at most every interval, and skips it rather than
// wait while a reader holds the copy. Its methods are safe for concurrent
// use.
type Preview struct {
	interval atomic.Int64 // ns; 0: keep nothing
	due      atomic.Int64 // unix ns when the next copy is due
	wanted   atomic.Int64 // unix ns until which someone watches; 0: always

	mu     sync.Mutex
	image  []byte
	format frame.Format
	number uint64    // frame number of the image
	at     time.Time // when it was decoded
	seq    uint64    // images kept so far
}

// NewPreview returns a preview keeping at most one image every interval;
// 0 keeps none until Enable.
func NewPreview(interval time.Duration) *Preview {
	p := new(Preview)
	p.Enable(interval)
	return p
}

// Enable makes the preview keep at most one image every interval; 0 stops
// it keeping any.
func (p *Preview) Enable(interval time.Duration) { p.interval.Store(int64(interval)) }

// WantUntil makes the preview keep images only until t, when someone
// looks at them; a reader calls it on each look. Until the first call it
// keeps images whenever enabled.
func (p *Preview) WantUntil(t time.Time) { p.wanted.Store(t.UnixNano()) }

// View calls f with the latest image, which f must not keep or change,
// while the decode stage keeps no other (it skips its offers meanwhile).
func (p *Preview) View(f func(PreviewImage)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(PreviewImage{Format: p.format, Number: p.number, At: p.at, Seq: p.seq, Image: p.image})
}

// wants reports whether an image offered at now would be kept: the preview
// is enabled, someone looks and the next copy is due.
func (p *Preview) wants(now time.Time) bool {
	if p.interval.Load() <= 0 {
		return false
	}
	if w := p.wanted.Load(); w != 0 && now.UnixNano() > w {
		return false // nobody looks
	}
	return now.UnixNano() >= p.due.Load()
}

// keepImages has a backend keep the images of batch (gpu.Job.DiscardImage
// cleared) when the preview would keep one decoded now.
func (p *Preview) keepImages(batch []gpu.Job, now time.Time) {
	if !p.wants(now) {
		return
	}
	for i := range batch {
		batch[i].DiscardImage = false
	}
}

// offer keeps the first decoded image of batch if one is due, as pixels
// even where the backend transposed it for the codec.
func (p *Preview) offer(batch []gpu.Job, now time.Time) {
	if !p.wants(now) {
		return
	}
	due := p.due.Load()
	if now.UnixNano() < due || !p.due.CompareAndSwap(due, now.UnixNano()+p.interval.Load()) {
		return
	}
	for i := range batch {
		j := &batch[i]
		if j.Err != nil || j.DiscardImage && j.Compressed {
			continue // no image: only its chunk was made
		}
		if !p.mu.TryLock() {
			return // a reader holds the last image: skip this one
		}
		size := j.Header.Format.ImageSize()
		if cap(p.image) < size {
			p.image = make([]byte, size) // once per scan format
		}
		if j.ShuffleBlock != 0 { // transposed for the codec: undo it for people
			img, err := bitshuffle.AppendUnshuffle(p.image[:0], j.Image[:size], j.Header.Format.PixelSize(), j.ShuffleBlock)
			if err != nil { // a block the backend would have refused: keep the last image
				p.mu.Unlock()
				return
			}
			p.image = img
		} else {
			p.image = append(p.image[:0], j.Image[:size]...)
		}
		p.format, p.number, p.at = j.Header.Format, j.Header.FrameNumber, now
		p.seq++
		p.mu.Unlock()
		return
	}
}

// PreviewImage is the image a Preview holds.
type PreviewImage struct {
	Format frame.Format // of the frame: height, width, pixel size
	Number uint64       // frame number
	At     time.Time    // when it was decoded
	Seq    uint64       // how many images the preview kept up to this one; 0: none yet
	Image  []byte       // row-major little-endian pixels
}

// Latest returns the latest image, copied into dst's storage.
func (p *Preview) Latest(dst []byte) PreviewImage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PreviewImage{Format: p.format, Number: p.number, At: p.at, Seq: p.seq, Image: append(dst[:0], p.image...)}
}

// Seq returns how many images the preview has kept (a reader that saw this
// count already has the latest) and the frame number of the latest.
func (p *Preview) Seq() (seq, number uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq, p.number
}
