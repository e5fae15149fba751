package scan

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"h5ingest/frame"
	"h5ingest/preview"
	"h5ingest/registry"
	"h5ingest/writer"
)

// Image is a frame of a file, decoded, as ReadImage returns it, with what
// the image cannot show.
type Image struct {
	preview.Frame
	Notes []ImageNote // in the order the image was read; none when every pixel is as written
}

// ImageNoteKind is what an ImageNote says of an image's pixels.
type ImageNoteKind int

const (
	// FrameNotWritten: the frame is missing or rejected (the note's
	// Status); its pixels hold the fill value 0.
	FrameNotWritten ImageNoteKind = iota + 1
	// FrameDamaged: the frame was received with a payload CRC mismatch;
	// its pixels are as received, possibly damaged.
	FrameDamaged
	// ModuleFileAbsent: a master's module file is absent; the module's
	// pixels hold the fill value 0.
	ModuleFileAbsent
	// ModuleFileShort: a master's module file holds the note's Frames
	// frames, not the one read; the module's pixels hold the fill value 0.
	ModuleFileShort
)

// An ImageNote says which pixels of an Image do not show what the
// detector sent, and why.
type ImageNote struct {
	Kind   ImageNoteKind
	Path   string // the module's file the note is about
	Frame  int    // the frame read
	Module int    // the module's id, of a ModuleFileAbsent or ModuleFileShort
	Status uint8  // the frame's recorded status, of a FrameNotWritten or FrameDamaged
	Frames int    // the frames the module's file holds, of a ModuleFileShort
}

// FrameRangeError is the error of a frame asked for that the file does
// not have.
type FrameRangeError struct {
	Frame  int // the frame asked for
	Frames int // the frames the file has, numbered from 0
}

func (e *FrameRangeError) Error() string {
	return fmt.Sprintf("frame %d: the file has frames 0 to %d", e.Frame, e.Frames-1)
}

// ReadImage returns frame n of the file at path, decoded: of a master
// file, the frame of the whole array, each module's image at its place.
// What the image cannot show (a frame missing, rejected or received
// damaged, a module file absent or shorter) is in its Notes; those
// pixels hold the fill value 0. A frame the file does not have is a
// *FrameRangeError, marked as the caller's to fix (ErrUsage). The image
// is nil only when the error is not.
func ReadImage(stages *registry.Registry, path string, n int) (*Image, error) {
	if stages == nil {
		return nil, errNoRegistry
	}
	r, err := writer.OpenPlain(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if n < 0 || n >= r.Frames {
		return nil, Usage(&FrameRangeError{Frame: n, Frames: r.Frames})
	}
	im := &Image{Frame: preview.Frame{Height: r.Height, Width: r.Width, ElemSize: r.ElemSize}}
	if r.Modules != nil {
		im.Data, err = arrayImage(&im.Notes, stages, r, path, n)
	} else {
		im.Data, err = moduleImage(&im.Notes, stages, r, path, n)
	}
	if err != nil {
		return nil, err
	}
	return im, nil
}

// moduleImage returns the decoded image of frame n of a module's file (r,
// at path): zeros, the fill value, for a frame that was never written. It
// appends to notes what the image cannot show.
func moduleImage(notes *[]ImageNote, stages *registry.Registry, r *writer.Reader, path string, n int) ([]byte, error) {
	records, err := r.Records()
	if err != nil {
		return nil, err
	}
	if n < len(records) {
		switch s := records[n].Status; s {
		case frame.StatusMissing, frame.StatusRejected:
			*notes = append(*notes, ImageNote{Kind: FrameNotWritten, Path: path, Frame: n, Status: s})
		case frame.StatusCRCMismatch:
			*notes = append(*notes, ImageNote{Kind: FrameDamaged, Path: path, Frame: n, Status: s})
		}
	}
	data, _, err := r.ReadChunk(n, nil)
	switch {
	case errors.Is(err, writer.ErrNoChunk):
		return make([]byte, r.Height*r.Width*r.ElemSize), nil // a missing frame reads as the fill value
	case err != nil:
		return nil, err
	}
	codec, err := stages.ReadCodec(r.Filters, r.ElemSize)
	if err != nil {
		return nil, err
	}
	size := r.Height * r.Width * r.ElemSize
	img, err := codec.Decode(make([]byte, 0, size), data)
	switch {
	case err != nil:
		return nil, fmt.Errorf("frame %d of %s: %w", n, path, err)
	case len(img) != size:
		return nil, fmt.Errorf("frame %d of %s: chunk decompresses to %d bytes, a frame is %d", n, path, len(img), size)
	}
	return img, nil
}

// arrayImage returns frame n of a master file (r, at path) as the whole
// array: each module's image, read from its file, at the module's offset;
// zeros in the gaps and where a module's file is absent or has no frame n.
// It appends to notes what the image cannot show.
func arrayImage(notes *[]ImageNote, stages *registry.Registry, r *writer.Reader, path string, n int) ([]byte, error) {
	es := r.ElemSize
	img := make([]byte, r.Height*r.Width*es)
	for _, m := range r.Modules {
		file := filepath.Join(filepath.Dir(path), m.File)
		if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
			*notes = append(*notes, ImageNote{Kind: ModuleFileAbsent, Path: file, Frame: n, Module: m.ID})
			continue
		}
		mr, err := writer.OpenPlain(file)
		if err != nil {
			return nil, err
		}
		if mr.Height != m.Height || mr.Width != m.Width || mr.ElemSize != es {
			mr.Close()
			return nil, fmt.Errorf("module %d's file %s holds %d x %d frames of %d bytes a pixel, the master %d x %d of %d",
				m.ID, file, mr.Height, mr.Width, mr.ElemSize, m.Height, m.Width, es)
		}
		if n >= mr.Frames {
			mr.Close()
			*notes = append(*notes, ImageNote{Kind: ModuleFileShort, Path: file, Frame: n, Module: m.ID, Frames: mr.Frames})
			continue
		}
		mod, err := moduleImage(notes, stages, mr, file, n)
		mr.Close()
		if err != nil {
			return nil, err
		}
		row := m.Width * es
		for y := range m.Height {
			at := ((m.Y+y)*r.Width + m.X) * es
			copy(img[at:at+row], mod[y*row:(y+1)*row])
		}
	}
	return img, nil
}
