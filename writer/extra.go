package writer

import (
	"fmt"
	"math"
	"path"
	"strings"
	"unsafe"
)

// Extra is a dataset of the file beside the frame stack that a processor
// fills with results of its own, such as a corrected preview: one
// Height x Width image of float32 pixels per frame of the scan, each frame
// a chunk of its own, stored uncompressed. A frame never written reads as
// NaN (the fill value). Extras need a file of known length
// (Options.Frames > 0).
type Extra struct {
	// Path is where the dataset goes, from the file's root
	// ("/flatfield/preview"); missing groups are made. It must not name
	// an object of the layout.
	Path          string
	Height, Width int
}

// extra is an extra dataset of an open file.
type extra struct {
	Extra
	id   hid
	size int         // bytes of one frame
	off  chunkOffset // reused, so that a write allocates nothing
}

// validateExtras reports extras the file cannot hold.
func (o *Options) validateExtras() error {
	for i, e := range o.Extra {
		switch {
		case o.Frames == 0:
			return fmt.Errorf("extra dataset %s: a scan of unknown length has none", e.Path)
		case e.Path == "" || path.Clean("/"+e.Path) == "/":
			return fmt.Errorf("extra dataset %d: no path", i)
		case e.Height <= 0 || e.Width <= 0:
			return fmt.Errorf("extra dataset %s: frame size %dx%d is not positive", e.Path, e.Height, e.Width)
		case uint64(e.Height)*uint64(e.Width)*4 >= 1<<32:
			return fmt.Errorf("extra dataset %s: frame of %dx%d float32 does not fit an HDF5 chunk (4 GiB)", e.Path, e.Height, e.Width)
		}
	}
	return nil
}

// createExtras makes the extra datasets of the options, after the layout.
func (w *Writer) createExtras() error {
	for _, e := range w.opts.Extra {
		p := path.Clean("/" + e.Path)
		if exists(w.file, p) {
			return fmt.Errorf("extra dataset %s: the layout has an object there", p)
		}
		parent := w.file
		dir, name := path.Split(p)
		var groups []hid
		closeGroups := func() {
			for _, g := range groups {
				closeID(g)
			}
		}
		at := ""
		for _, g := range strings.Split(strings.Trim(dir, "/"), "/") {
			if g == "" {
				continue
			}
			at += "/" + g
			var id hid
			var err error
			if exists(w.file, at) {
				id, err = openGroup(w.file, at)
			} else {
				id, err = createGroup(parent, g)
			}
			if err != nil {
				closeGroups()
				return fmt.Errorf("extra dataset %s: %w", p, err)
			}
			groups = append(groups, id)
			parent = id
		}
		h, wd := uint64(e.Height), uint64(e.Width)
		fill := float32(math.NaN())
		pl, err := newDCPL([]uint64{1, h, wd}, kindF32, unsafe.Pointer(&fill))
		if err != nil {
			closeGroups()
			return fmt.Errorf("extra dataset %s: %w", p, err)
		}
		dims := []uint64{uint64(w.opts.Frames), h, wd}
		id, err := createDataset(parent, name, kindF32, 0, dims, dims, pl)
		pl.close()
		closeGroups()
		if err != nil {
			return fmt.Errorf("extra dataset %s: %w", p, err)
		}
		w.extras = append(w.extras, &extra{Extra: e, id: id, size: e.Height * e.Width * 4})
	}
	return nil
}

// WriteExtra stores data, Height*Width little-endian float32 pixels, as
// frame index frame of extra dataset i (the index in Options.Extra). Like
// every method of a Writer it is called from one goroutine at a time. An
// error in writing it fails the file, as a chunk's would. It does not
// allocate.
func (w *Writer) WriteExtra(i, frame int, data []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if i < 0 || i >= len(w.extras) {
		return fmt.Errorf("write extra dataset %d of %s: the file has %d", i, w.opts.Path, len(w.extras))
	}
	e := w.extras[i]
	switch {
	case frame < 0 || frame >= w.frames:
		return fmt.Errorf("write frame %d of %s to %s: frame outside 0 to %d", frame, e.Path, w.opts.Path, w.frames-1)
	case len(data) != e.size:
		return fmt.Errorf("write frame %d of %s to %s: %d bytes, want %d", frame, e.Path, w.opts.Path, len(data), e.size)
	}
	e.off.setFrame(frame)
	if err := writeChunk(e.id, &e.off, 0, data); err != nil {
		return w.fail(fmt.Errorf("write frame %d of %s to %s: %w", frame, e.Path, w.opts.Path, err))
	}
	w.unflushed = true
	return nil
}

// closeExtras closes the extra datasets and returns the first error.
func (w *Writer) closeExtras() error {
	var first error
	for _, e := range w.extras {
		if err := closeID(e.id); err != nil && first == nil {
			first = err
		}
		e.id = 0
	}
	return first
}
