package scan

import (
	"errors"
	"fmt"
	"h5ingest/frame"
	"h5ingest/preview"
	"h5ingest/registry"
	"h5ingest/writer"
	"io"
	"os"
	"path/filepath"
)

// ReadImage returns frame n of the file at path, decoded: of a master
// file, the frame of the whole array, each module's image at its place.
// What the image cannot show (a frame missing, rejected or received
// damaged, a module file absent) is said on notes, one line each; those
// pixels hold the fill value 0.
func ReadImage(notes io.Writer, stages *registry.Registry, path string, n int) (preview.Frame, error) {
	if stages == nil {
		return preview.Frame{}, errNoRegistry
	}
	r, err := writer.OpenPlain(path)
	if err != nil {
		return preview.Frame{}, err
	}
	defer r.Close()
	if n < 0 || n >= r.Frames {
		return preview.Frame{}, Usage(fmt.Errorf("--png %d: the file has frames 0 to %d", n, r.Frames-1))
	}
	var img []byte
	if r.Modules != nil {
		img, err = arrayImage(notes, stages, r, path, n)
	} else {
		img, err = moduleImage(notes, stages, r, path, n)
	}
	if err != nil {
		return preview.Frame{}, err
	}
	return preview.Frame{Data: img, Height: r.Height, Width: r.Width, ElemSize: r.ElemSize}, nil
}

// moduleImage returns the decoded image of frame n of a module's file (r,
// at path): zeros, the fill value, for a frame that was never written.
func moduleImage(notes io.Writer, stages *registry.Registry, r *writer.Reader, path string, n int) ([]byte, error) {
	records, err := r.Records()
	if err != nil {
		return nil, err
	}
	if n < len(records) {
		switch records[n].Status {
		case frame.StatusMissing, frame.StatusRejected:
			fmt.Fprintf(notes, "h5ingest: frame %d of %s is %s: it was never written, the picture shows the fill value 0\n",
				n, path, frame.StatusName(records[n].Status))
		case frame.StatusCRCMismatch:
			fmt.Fprintf(notes, "h5ingest: frame %d of %s has a payload CRC mismatch: the picture shows it as received, possibly damaged\n", n, path)
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
	img, err := codec.Decode(nil, data)
	if err != nil {
		return nil, fmt.Errorf("frame %d of %s: %w", n, path, err)
	}
	return img, nil
}

// arrayImage returns frame n of a master file (r, at path) as the whole
// array: each module's image, read from its file, at the module's offset;
// zeros in the gaps and where a module's file is absent or has no frame n.
func arrayImage(notes io.Writer, stages *registry.Registry, r *writer.Reader, path string, n int) ([]byte, error) {
	es := r.ElemSize
	img := make([]byte, r.Height*r.Width*es)
	for _, m := range r.Modules {
		file := filepath.Join(filepath.Dir(path), m.File)
		if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(notes, "h5ingest: module %d's file %s is absent: its pixels show the fill value 0\n", m.ID, file)
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
			fmt.Fprintf(notes, "h5ingest: module %d's file %s has frames 0 to %d: its pixels show the fill value 0\n", m.ID, file, mr.Frames-1)
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
