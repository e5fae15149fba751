package writer

import (
	"errors"
	"path"
	"unsafe"
)

// Layout arranges a file: where the frame stack, the per-frame records and
// the scan's metadata go. NXtomo and CXI are h5ingest's; a facility adds
// its own by implementing Layout with the Builder's steps, and choosing it
// by name in a profile (package registry).
type Layout interface {
	// Name is the layout's name in profiles (output.layout).
	Name() string
	// StackPath is the absolute path of the frame stack in the file: a
	// dataset named "data", with the per-frame records beside it.
	StackPath() string
	// Build creates the layout's groups and datasets in a new file.
	Build(b *Builder) error
}

// NXtomo is the NeXus NXtomo layout, with a Data Exchange view
// (/exchange) for tomopy and dxchange: the layout of tomography scans.
type NXtomo struct {
	SourceType string // /entry/instrument/source/type; default "Synchrotron X-ray Source"
	SourceName string // /entry/instrument/source/name
}

// Name returns "nxtomo".
func (NXtomo) Name() string { return LayoutNXtomo }

// StackPath returns /entry/instrument/detector/data.
func (NXtomo) StackPath() string { return nxtomoStack }

// Build creates the NXtomo layout.
func (l NXtomo) Build(b *Builder) error { b.nxtomo(l); return b.err }

// CXI is the CXI 1.5 layout that coherent diffraction codes (PtyPy) read,
// with the scan positions as the sample's translations.
type CXI struct{}

// Name returns "cxi".
func (CXI) Name() string { return LayoutCXI }

// StackPath returns /entry_1/instrument_1/detector_1/data.
func (CXI) StackPath() string { return cxiStack }

// Build creates the CXI layout.
func (CXI) Build(b *Builder) error { b.cxi(); return b.err }

// Node is a group of the file a Builder creates.
type Node struct {
	id   hid
	path string // absolute
}

// Root returns the file's root group.
func (b *Builder) Root() Node { return Node{b.w.file, "/"} }

// Options returns the options of the file being built.
func (b *Builder) Options() Options { return b.w.opts }

// Group creates the group name in parent with its NeXus class (NX_class;
// "" for none).
func (b *Builder) Group(parent Node, name, class string) Node {
	return Node{b.group(parent.id, name, class), path.Join(parent.path, name)}
}

// PerFrame names a value of the scan plan for each frame, which a layout
// stores with Builder.Column.
type PerFrame string

// The scan plan's per-frame values.
const (
	ColumnImageKey      PerFrame = "image_key"      // int8: 2 dark, 1 flat, 0 projection (Options.ImageKey)
	ColumnRotationAngle PerFrame = "rotation_angle" // float64, degrees (Options.RotationAngle)
	ColumnMonitor       PerFrame = "monitor"        // float64, the beam monitor (Options.Monitor)
	ColumnTranslation   PerFrame = "translation"    // three float64 a frame, metres (Options.Translation)
)

// Column creates name in parent, the dataset of the plan's values v for
// each frame: one value a frame (three for a translation), as many as the
// scan's frames, growing with the frames in a scan of open length. The
// root's attribute h5ingest_<v> records where it is, so that Reader
// (ImageKey, RotationAngle, Translation) and inspect find it in any
// layout.
func (b *Builder) Column(parent Node, name string, v PerFrame) {
	b.perFrame(parent.id, path.Join(parent.path, name), name, v)
}

// FloatColumn creates name in parent, a dataset of a layout's own float64
// value for each frame, value(n) for frame n, with its units ("" for
// none); as many as the scan's frames, growing with the frames in a scan
// of open length. value is called from the writer's goroutine, once a
// frame.
func (b *Builder) FloatColumn(parent Node, name, units string, value func(n int) float64) {
	w := b.w
	var vals []float64
	b.column(parent.id, name, kindF64, 1, true, units, func() (unsafe.Pointer, int) {
		n := len(w.frameNumber)
		for i := len(vals); i < n; i++ {
			vals = append(vals, value(i))
		}
		vals = vals[:n]
		return ptr(vals), n
	})
}

// Attr sets the string attribute name of n.
func (b *Builder) Attr(n Node, name, value string) { b.attr(n.id, name, value) }

// String creates the string dataset name in parent.
func (b *Builder) String(parent Node, name, value string) { b.str(parent.id, name, value) }

// Float creates the scalar dataset name in parent, with its units ("" for
// none).
func (b *Builder) Float(parent Node, name string, v float64, units string) {
	b.scalarF64(parent.id, name, v, units)
}

// Header writes what every h5ingest file has: the root's attributes
// (default names entry, the entry NeXus readers show first), and in
// entry the start and end times and the scan's metadata (title aside:
// experiment_identifier, program_name with the configuration, the user's
// metadata).
func (b *Builder) Header(entry Node, defaultEntry string) {
	b.rootAttrs(defaultEntry)
	b.times(entry.id)
	b.scanMetadata(entry.id)
}

// Stack creates the frame stack "data" in det, chunked by frame with the
// file's filter pipeline, and the five per-frame records beside it
// (frame_number, timestamp, raw_crc32c, data_crc32c, frame_status). The
// group must be at the Layout's StackPath.
func (b *Builder) Stack(det Node) {
	if b.err != nil {
		return
	}
	p := b.w.opts.Layout.StackPath()
	if path.Base(p) != "data" {
		b.fail(errors.New("the frame stack's path must end in /data: " + p))
		return
	}
	b.stack(det.id, p)
	b.records(det.id)
}

// SoftLink creates name in parent, a soft link to the absolute path
// target.
func (b *Builder) SoftLink(parent Node, target, name string) { b.softLink(parent.id, target, name) }
