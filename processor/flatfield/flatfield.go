// Package flatfield is a processor stage that corrects a tomography
// scan's projections with the scan's own dark and flat fields as they
// arrive, for an online preview:
//
//	output:
//	  processors: [{name: flatfield, bin: 4}]
//
// It averages the darks (image key 2) and the flats (image key 1) that
// the plan puts before its first projection, and from the first
// projection on makes each projection's corrected preview,
// (projection - dark) / (flat - dark) clipped to [min, max] as float32,
// each pixel of it the mean of bin x bin corrected pixels. The raw frames
// go to the file, and to the live stream, unchanged: the stage only reads
// them. Where the previews go is its option to:
//
//   - dataset (the default): a dataset of the scan's file
//     (/flatfield/preview by default, one frame per frame of the scan, NaN
//     where a frame is not a projection);
//   - stream: the live stream, as a Stream V2 series of its own on a
//     socket of its own (by default the port after the scan's streams:
//     stream.address's port plus the number of modules), one image
//     message per preview, its data a float32 typed array (CBOR tag 85),
//     its image_id the index of the projection it was made from, the
//     start message's flatfield_enabled true and image_dtype float32.
//     The previews are not a channel of the scan's own image messages:
//     Stream V2's channels are a detector's thresholds, each image
//     message carries every channel of one exposure, and they share the
//     start message's image size and unsigned pixel type; a preview is
//     float32, binned, and made of projections only.
//
// A profile that streams every tenth projection's preview, binned 4 x 4:
//
//	output:
//	  processors: [{name: flatfield, to: stream, bin: 4, every: 10}]
//
// The stage is the state the compression workers share: the sums of the
// darks and flats, guarded by a mutex while they arrive, and the
// reference (the dark average and 1/(flat - dark) of each pixel), made
// once and read by every worker without a lock after. Each worker keeps
// its own preview buffers, so that no frame allocates.
package flatfield

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"h5ingest/frame"
	"h5ingest/pipeline"
)

// Where previews go (Options.To).
const (
	ToDataset = "dataset" // a dataset of the scan's file
	ToStream  = "stream"  // a series of the live stream
)

// Options are flatfield's options, set in its profile entry.
type Options struct {
	// To says where previews go: "dataset" (a dataset of the scan's
	// file) or "stream" (a series of the live stream).
	To string `mapstructure:"to"`
	// Dataset is the path of the previews in the file (to: dataset).
	Dataset string `mapstructure:"dataset"`
	// Address is the ZeroMQ endpoint of the previews' series (to:
	// stream), tcp://HOST:PORT; "" binds the port after the scan's own
	// streams. In a scan of several modules, module i's binds PORT+i.
	Address string `mapstructure:"address"`
	// Bin makes each preview pixel the mean of Bin x Bin corrected
	// pixels (a partial block at the right or bottom edge is left out);
	// 1 keeps every pixel.
	Bin int `mapstructure:"bin"`
	// Every previews every Every-th frame from the first projection on
	// (the projections among them); 1 previews each projection. A
	// preview of a Pi-mega module takes milliseconds of one core: at the
	// detector's full rate, a beamline previews a few a second.
	Every int `mapstructure:"every"`
	// Min and Max clip each corrected pixel before binning.
	Min float64 `mapstructure:"min"`
	Max float64 `mapstructure:"max"`
	// Wait bounds how long the first projection waits for darks and
	// flats of the plan still on their way through other workers; once it
	// passes, the reference is made from those that came.
	Wait time.Duration `mapstructure:"wait"`
}

// DefaultOptions returns the options with their defaults.
func DefaultOptions() Options {
	return Options{To: ToDataset, Dataset: "/flatfield/preview", Bin: 1, Every: 1, Min: 0, Max: 2, Wait: 500 * time.Millisecond}
}

// Check refuses options no scan could run with, naming the option: the
// check of flatfield's registry entry, which a profile's check runs
// before any scan (registry.Start).
func (o Options) Check() error {
	switch {
	case o.To != ToDataset && o.To != ToStream:
		return fmt.Errorf("to: %q, want dataset or stream", o.To)
	case o.Bin < 1:
		return fmt.Errorf("bin: %d, want 1 or more", o.Bin)
	case o.Every < 1:
		return fmt.Errorf("every: %d, want 1 or more", o.Every)
	case math.IsNaN(o.Min) || math.IsNaN(o.Max) || o.Min >= o.Max:
		return fmt.Errorf("min %v, max %v: want min below max", o.Min, o.Max)
	case o.Wait < 0:
		return fmt.Errorf("wait: %v is negative", o.Wait)
	case o.To == ToStream && o.Address != "" && !strings.HasPrefix(o.Address, "tcp://"):
		return fmt.Errorf("address: %q, want tcp://HOST:PORT", o.Address)
	}
	return nil
}

// Stage is the flatfield stage of one scan (pipeline.Stage).
type Stage struct {
	opts   Options
	format frame.Format
	keys   []int8
	out    pipeline.FrameWriter
	stream pipeline.FrameStream // out, where previews go to the live stream
	ow, oh int                  // preview size

	// The reference frames: the darks and flats before the first
	// projection.
	first                int // the first projection's frame index
	needDarks, needFlats int

	mu           sync.Mutex // guards what follows until made
	darkSum      []float64
	flatSum      []float64
	darks, flats int
	late         int           // reference frames that came after the reference was made
	ready        chan struct{} // closed once every planned reference frame is in
	madeCh       chan struct{} // closed once the reference is made
	workers      int           // processors made: one per worker
	waiting      int           // workers waiting for the reference
	made         atomic.Bool   // dark and scale are set and never change again
	dark, scale  []float32     // per pixel: the dark average, and 1/(flat - dark) or 0

	previews atomic.Int64 // written
	failed   atomic.Int64 // not written: the writer failed
	noFlat   atomic.Int64 // not corrected: no flat came
	errMu    sync.Mutex
	firstErr error
}

// Start starts flatfield's stage for a scan: New, as the start of its
// registry entry (registry.Start).
func Start(o Options, s pipeline.Scan) (pipeline.Stage, error) {
	return New(o, s)
}

// New returns the stage for scan s with options o, refusing options
// Check refuses and a scan the stage cannot work with.
func New(o Options, s pipeline.Scan) (*Stage, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	switch {
	case s.Frames == 0 || len(s.ImageKeys) == 0:
		return nil, errors.New("needs the scan's plan (its darks, flats and projections); this scan has none")
	case o.To == ToDataset && s.AddDataset == nil:
		return nil, errors.New("to: dataset: this scan writes no file of its own to add the previews to")
	case o.To == ToStream && s.AddStream == nil:
		return nil, errors.New("to: stream: this scan has no live stream (the profile sets no stream.address)")
	}
	st := &Stage{opts: o, format: s.Format, keys: s.ImageKeys, ready: make(chan struct{}), madeCh: make(chan struct{}), first: -1}
	for i, k := range s.ImageKeys {
		if k == 0 {
			st.first = i
			break
		}
		switch k {
		case 2:
			st.needDarks++
		case 1:
			st.needFlats++
		}
	}
	switch {
	case st.first < 0:
		return nil, errors.New("the plan has no projection to correct")
	case st.needFlats == 0:
		return nil, errors.New("the plan has no flat field before its first projection")
	}
	h, w := s.Format.Height(), s.Format.Width()
	st.oh, st.ow = h/o.Bin, w/o.Bin
	if st.oh == 0 || st.ow == 0 {
		return nil, fmt.Errorf("bin: %d is larger than the %dx%d image", o.Bin, h, w)
	}
	if o.To == ToStream {
		images := 0
		for n := st.first; n < len(st.keys); n += o.Every {
			if st.keys[n] == 0 {
				images++
			}
		}
		out, err := s.AddStream(pipeline.StreamSeries{Name: "flatfield", Height: st.oh, Width: st.ow, Images: images,
			Scale: o.Bin, FlatField: true, Address: o.Address})
		if err != nil {
			return nil, err
		}
		st.out, st.stream = out, out
	} else {
		out, err := s.AddDataset(pipeline.Dataset{Path: o.Dataset, Height: st.oh, Width: st.ow})
		if err != nil {
			return nil, err
		}
		st.out = out
	}
	n := h * w
	st.darkSum, st.flatSum = make([]float64, n), make([]float64, n)
	st.dark, st.scale = make([]float32, n), make([]float32, n)
	return st, nil
}

// Processor returns a worker's processor (pipeline.Stage).
func (st *Stage) Processor() (pipeline.Processor, error) {
	st.mu.Lock()
	st.workers++
	st.mu.Unlock()
	return &worker{st: st, acc: make([]float64, st.ow), buf: make([]byte, 4*st.ow*st.oh)}, nil
}

// Previews returns how many previews the stage wrote.
func (st *Stage) Previews() int { return int(st.previews.Load()) }

// Close reports the previews the stage could not make or write, and a
// reference made from fewer darks or flats than planned (pipeline.Stage).
func (st *Stage) Close() error {
	var errs []error
	st.mu.Lock()
	if st.made.Load() && (st.darks < st.needDarks || st.flats < st.needFlats) {
		errs = append(errs, fmt.Errorf("reference made from %d of %d darks and %d of %d flats", st.darks, st.needDarks, st.flats, st.needFlats))
	}
	if st.late > 0 {
		errs = append(errs, fmt.Errorf("%d darks or flats came after the first projection was corrected and are in no reference", st.late))
	}
	st.mu.Unlock()
	if n := st.noFlat.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("%d projections without preview: no flat field came", n))
	}
	if n := st.failed.Load(); n > 0 {
		st.errMu.Lock()
		errs = append(errs, fmt.Errorf("%d previews not written: %w", n, st.firstErr))
		st.errMu.Unlock()
	}
	return errors.Join(errs...)
}

// add adds a dark (key 2) or flat (key 1) image to its sum, unless the
// reference is made.
func (st *Stage) add(key int8, image []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.made.Load() {
		st.late++
		return
	}
	sum := st.flatSum
	if key == 2 {
		sum = st.darkSum
		st.darks++
	} else {
		st.flats++
	}
	switch st.format.PixelSize() {
	case 2:
		for i := range sum {
			sum[i] += float64(binary.LittleEndian.Uint16(image[2*i:]))
		}
	default:
		for i := range sum {
			sum[i] += float64(binary.LittleEndian.Uint32(image[4*i:]))
		}
	}
	if st.darks == st.needDarks && st.flats == st.needFlats {
		close(st.ready)
	}
}

// reference makes the reference once and reports whether there is one
// (a flat came). The first projections wait for the planned darks and
// flats still in other workers, up to Options.Wait, but never once every
// worker waits: then no other frame can come until the reference is made.
func (st *Stage) reference() bool {
	if st.made.Load() {
		return st.flats > 0 // flats no longer changes once made
	}
	st.mu.Lock()
	st.waiting++
	if st.waiting >= st.workers {
		st.makeLocked()
	}
	st.mu.Unlock()
	if !st.made.Load() {
		t := time.NewTimer(st.opts.Wait)
		select {
		case <-st.ready:
		case <-st.madeCh:
		case <-t.C:
		}
		t.Stop()
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.waiting--
	st.makeLocked()
	return st.flats > 0
}

// makeLocked makes the reference from the darks and flats summed so far,
// unless it is made; st.mu is held.
func (st *Stage) makeLocked() {
	if st.made.Load() {
		return
	}
	for i := range st.dark {
		var d, f float64
		if st.darks > 0 {
			d = st.darkSum[i] / float64(st.darks)
		}
		if st.flats > 0 {
			f = st.flatSum[i] / float64(st.flats)
		}
		st.dark[i], st.scale[i] = float32(d), 0
		if f-d > 0 {
			st.scale[i] = float32(1 / (f - d))
		}
	}
	st.made.Store(true)
	close(st.madeCh)
}

// fail counts a preview not written and keeps the first error.
func (st *Stage) fail(err error) {
	if st.failed.Add(1) == 1 {
		st.errMu.Lock()
		st.firstErr = err
		st.errMu.Unlock()
	}
}

// worker is one compression worker's processor, with its own buffers.
type worker struct {
	st  *Stage
	acc []float64 // one row of preview pixels being summed
	buf []byte    // the preview, float32 little-endian
}

// Process reads frame n's image: a reference frame goes into its sum, a
// projection's preview to the dataset or the stream. It never changes the
// image and never fails the frame: a preview it cannot make or write is
// counted and reported by Close.
func (w *worker) Process(n int, f frame.Format, image []byte) error {
	st := w.st
	if n < 0 || n >= len(st.keys) {
		return nil
	}
	if !w.preview(n, image) && st.stream != nil {
		st.stream.Skip(n) // no preview of n: the stream need not wait for one
	}
	return nil
}

// preview writes frame n's preview, or adds it to the reference, and
// reports whether a preview of n was written.
func (w *worker) preview(n int, image []byte) bool {
	st := w.st
	switch key := st.keys[n]; {
	case key == 0:
		if (n-st.first)%st.opts.Every != 0 {
			return false
		}
		if !st.reference() {
			st.noFlat.Add(1)
			return false
		}
		w.correct(image)
		if err := st.out.WriteFrame(n, w.buf); err != nil {
			st.fail(err)
			return false
		}
		st.previews.Add(1)
		return true
	case n < st.first && (key == 1 || key == 2):
		st.add(key, image)
	}
	return false
}

// correct fills buf with the preview of image.
func (w *worker) correct(image []byte) {
	st := w.st
	b, width := st.opts.Bin, st.format.Width()
	lo, hi := float32(st.opts.Min), float32(st.opts.Max)
	norm := 1 / float64(b*b)
	two := st.format.PixelSize() == 2
	if b == 1 {
		for i := range st.oh * st.ow {
			var p float32
			if two {
				p = float32(binary.LittleEndian.Uint16(image[2*i:]))
			} else {
				p = float32(binary.LittleEndian.Uint32(image[4*i:]))
			}
			v := min(max((p-st.dark[i])*st.scale[i], lo), hi)
			binary.LittleEndian.PutUint32(w.buf[4*i:], math.Float32bits(v))
		}
		return
	}
	for oy := range st.oh {
		clear(w.acc)
		for y := oy * b; y < (oy+1)*b; y++ {
			row := y * width
			for ox := range st.ow {
				var s float64
				for x := ox * b; x < (ox+1)*b; x++ {
					i := row + x
					var p float32
					if two {
						p = float32(binary.LittleEndian.Uint16(image[2*i:]))
					} else {
						p = float32(binary.LittleEndian.Uint32(image[4*i:]))
					}
					v := (p - st.dark[i]) * st.scale[i]
					s += float64(min(max(v, lo), hi))
				}
				w.acc[ox] += s
			}
		}
		out := w.buf[4*oy*st.ow:]
		for ox, s := range w.acc {
			binary.LittleEndian.PutUint32(out[4*ox:], math.Float32bits(float32(s*norm)))
		}
	}
}
