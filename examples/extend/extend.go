// Package extend shows how a facility adds its own stages to h5ingest
// from a module of its own, without touching h5ingest's: a processor
// stage, configured in the profile, that sets pixels below a noise
// threshold to zero, a file layout that keeps only a NeXus entry with the
// frame stack, a codec preset and a codec of a filter h5ingest does not
// know (plain zstd, filter 32015). A profile then chooses them by name
// (output.processors, output.layout, output.compression):
//
//	output:
//	  layout: flat
//	  compression: zstd
//	  processors: [{name: threshold, min: 100}]
//
// Its command, cmd/h5ingest-beamline, is h5ingest with these stages
// beside h5ingest's own. docs/extending.md explains each step; the
// package's Example runs a scan with them through the library.
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

// Register adds the stages of this package to r, each under its own name.
func Register(r *registry.Registry) error {
	if err := r.AddProcessor(registry.Processor{
		Name:  "threshold",
		Doc:   fmt.Sprintf("pixels below min counts set to 0, as noise (option min, default %d)", DefaultThreshold),
		Start: registry.Start(DefaultThresholdOptions, ThresholdOptions.Check, StartThreshold),
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

// DefaultThreshold is the threshold processor's noise threshold, in
// counts, where its profile entry sets none.
const DefaultThreshold = 100

// ThresholdOptions are the threshold processor's options, set in its
// profile entry: processors: [{name: threshold, min: 50}].
type ThresholdOptions struct {
	// Min is the noise threshold in counts: pixels below it are set to 0.
	Min int64 `mapstructure:"min"`
}

// DefaultThresholdOptions returns the options with their defaults, over
// which the registry decodes a profile entry's options.
func DefaultThresholdOptions() ThresholdOptions {
	return ThresholdOptions{Min: DefaultThreshold}
}

// Check refuses a threshold below 1, which would leave every pixel as it
// is: the registry entry's check, which "profiles check" runs.
func (o ThresholdOptions) Check() error {
	if o.Min < 1 {
		return fmt.Errorf("min: %d, want 1 or more", o.Min)
	}
	return nil
}

// StartThreshold starts the threshold stage of one scan from its options,
// decoded and checked (the registry entry's start). A threshold above the
// counts a pixel of the scan's format holds is refused, before any file
// is made.
func StartThreshold(o ThresholdOptions, s pipeline.Scan) (pipeline.Stage, error) {
	if top := int64(s.Format.MaxCount()); o.Min > top {
		return nil, fmt.Errorf("min: %d, want 1 to %d, the counts of a %d-bit pixel", o.Min, top, s.Format.BitDepth)
	}
	if _, err := NewThreshold(s.Format, uint32(o.Min)); err != nil {
		return nil, err
	}
	return thresholdStage{min: uint32(o.Min), format: s.Format}, nil
}

// thresholdStage is the threshold processor's stage of one scan: each
// worker gets a processor of its own, and there is no state to share.
type thresholdStage struct {
	min    uint32
	format frame.Format
}

// Processor implements pipeline.Stage.
func (s thresholdStage) Processor() (pipeline.Processor, error) {
	return NewThreshold(s.format, s.min)
}

// Close implements pipeline.Stage: the stage has nothing to report.
func (thresholdStage) Close() error { return nil }

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
