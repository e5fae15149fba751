// Package extend shows how a facility adds its own stages to h5ingest
// from a package of its own, without touching h5ingest's: a processor
// stage that sets pixels below a noise threshold to zero, a file layout
// that keeps only a NeXus entry with the frame stack, a codec preset and
// a codec of a filter h5ingest does not know (plain zstd, filter 32015).
// A profile then chooses them by name (output.processors, output.layout,
// output.compression). docs/extending.md explains each step; the
// package's Example runs a scan with them.
package extend

import (
	"encoding/binary"
	"fmt"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/registry"
	"h5ingest/writer"
)

// Register adds the stages of this package to r, each under its own
// name, with threshold as the noise threshold in counts.
func Register(r *registry.Registry, threshold uint32) error {
	if err := r.AddProcessor(registry.Processor{
		Name: "threshold", Doc: fmt.Sprintf("pixels below %d counts set to 0 (noise)", threshold),
		New: func(f frame.Format) (pipeline.Processor, error) {
			return NewThreshold(f, threshold)
		},
	}); err != nil {
		return err
	}
	if err := r.AddLayout(registry.Layout{Name: "flat", Doc: "a NeXus entry holding the frame stack and its records, nothing else",
		New: func() writer.Layout { return Flat{} }}); err != nil {
		return err
	}
	if err := r.AddCodec(registry.Codec{Name: "deflate-max", Doc: "shuffle + deflate at level 9: smallest files every reader opens",
		New:    func(elemSize, _ int) (compress.Codec, error) { return compress.New("deflate", elemSize, 9) },
		Filter: compress.FilterDeflate, Read: compress.FromFilters}); err != nil {
		return err
	}
	return r.AddCodec(registry.Codec{Name: "zstd", Doc: "plain Zstandard (HDF5 filter 32015, hdf5plugin.Zstd), one frame a chunk",
		New:    func(_, level int) (compress.Codec, error) { return NewZstd(level) },
		Filter: FilterZstd, Read: ReadZstd, Optional: true,
		MinLevel: MinZstdLevel, MaxLevel: MaxZstdLevel})
}

// Threshold is a processor that sets every pixel below its threshold to
// zero, in place.
type Threshold struct {
	min  uint32
	size int // bytes a pixel
}

// NewThreshold returns the threshold processor of frames of format f.
func NewThreshold(f frame.Format, min uint32) (*Threshold, error) {
	if s := f.PixelSize(); s != 2 && s != 4 {
		return nil, fmt.Errorf("threshold: pixels of %d bytes", s)
	}
	return &Threshold{min: min, size: f.PixelSize()}, nil
}

// Process implements pipeline.Processor.
func (t *Threshold) Process(_ int, _ frame.Format, image []byte) error {
	if t.size == 2 {
		for i := 0; i+1 < len(image); i += 2 {
			if uint32(binary.LittleEndian.Uint16(image[i:])) < t.min {
				image[i], image[i+1] = 0, 0
			}
		}
		return nil
	}
	for i := 0; i+3 < len(image); i += 4 {
		if binary.LittleEndian.Uint32(image[i:]) < t.min {
			binary.LittleEndian.PutUint32(image[i:], 0)
		}
	}
	return nil
}

// Flat is a layout of one NeXus entry whose data group holds the frame
// stack and its records, /entry/data/data, with the plan's image keys and
// rotation angles beside them (Builder.Column), which inspect reads back.
type Flat struct{}

// Name implements writer.Layout.
func (Flat) Name() string { return "flat" }

// StackPath implements writer.Layout.
func (Flat) StackPath() string { return "/entry/data/data" }

// Build implements writer.Layout.
func (Flat) Build(b *writer.Builder) error {
	entry := b.Group(b.Root(), "entry", "NXentry")
	b.Attr(entry, "default", "data")
	b.Header(entry, "entry")
	b.String(entry, "title", b.Options().Title)
	data := b.Group(entry, "data", "NXdata")
	b.Attr(data, "signal", "data")
	b.Stack(data)
	b.Column(data, "image_key", writer.ColumnImageKey)
	b.Column(data, "rotation_angle", writer.ColumnRotationAngle)
	return nil
}
