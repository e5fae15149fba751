package writer

import (
	"cmp"
	"errors"
	"fmt"
	"path"
	"strings"
	"unsafe"

	"h5ingest/compress"
	"h5ingest/frame"
)

// ErrNoChunk is returned by Reader.ReadChunk for a frame whose chunk was
// never written (a missing frame; it reads as zeros).
var ErrNoChunk = errors.New("chunk never written")

// Reader reads a file in one of the package's layouts. Its methods must be
// called from one goroutine at a time.
type Reader struct {
	Layout        string            // LayoutNXtomo, LayoutCXI or LayoutOther
	Frames        int               // current length of the stack
	Height, Width int               // frame size
	ElemSize      int               // bytes per pixel
	Filters       []compress.Filter // pipeline as stored
	SWMR          bool              // opened as a SWMR reader
	// Modules are the modules of a master file (see CreateMaster), in
	// the order of its combined records; nil for a module's own file.
	Modules []MasterModule

	path  string
	det   string // detector group
	file  hid
	stack hid
	off   chunkOffset
}

// Open opens path read-only, as a SWMR reader where the file format
// allows, and reads the stack's geometry and filters.
func Open(path string) (*Reader, error) {
	r := &Reader{path: path, SWMR: true}
	f, err := openFile(path, true)
	if err != nil {
		r.SWMR = false
		if f, err = openFile(path, false); err != nil {
			return nil, err
		}
	}
	return r.start(f)
}

// OpenPlain opens path read-only as a plain reader where the file allows
// it (a file whose writer closed it), and as a SWMR reader only where it
// must (a file being written, or left by a killed writer). A plain reader
// fails at once on damaged metadata, where a SWMR reader retries the read,
// taking so long on a damaged file that it seems to hang: checks of whole
// files (verify) and summaries (inspect, master) open them so. A file the
// plain reader refuses for another reason than the open-for-writing mark
// (damaged metadata) is refused at once, without a SWMR reader's retries.
func OpenPlain(path string) (*Reader, error) {
	r := &Reader{path: path}
	f, err := openFile(path, false)
	if err != nil {
		if !markedOpenForWrite(err) {
			return nil, err
		}
		r.SWMR = true
		if f, err = openFile(path, true); err != nil {
			return nil, err
		}
	}
	return r.start(f)
}

// start makes f the reader's file and reads what the reader needs of it.
func (r *Reader) start(f hid) (*Reader, error) {
	r.file = f
	if err := r.init(); err != nil {
		r.Close()
		return nil, fmt.Errorf("open %s: %w", r.path, err)
	}
	return r, nil
}

// markedOpenForWrite reports whether a plain reader's open failed on the
// file's open-for-writing mark (a file being written, or left by a killed
// writer), which a SWMR reader accepts.
func markedOpenForWrite(err error) bool {
	return strings.Contains(err.Error(), "already open for write")
}

// LayoutOther is Reader.Layout of a file of a layout other than
// h5ingest's (a facility's own, see Layout): its frame stack is the
// dataset "data" of the group the NeXus default attributes lead to (the
// root's default entry, the entry's default group), its records beside.
const LayoutOther = "other"

// defaultData returns the group the file's NeXus default attributes lead
// to, where it holds a frame stack and its records.
func (r *Reader) defaultData() (string, bool) {
	p := ""
	for range 2 {
		g, err := openGroup(r.file, cmp.Or(p, "/"))
		if err != nil {
			return "", false
		}
		v, err := readAttrStrings(g, "default")
		closeID(g)
		if err != nil || len(v) != 1 || v[0] == "" || strings.ContainsAny(v[0], "/.") {
			return "", false
		}
		p += "/" + v[0]
	}
	return p, exists(r.file, p+"/data") && exists(r.file, p+"/frame_status")
}

// StackPath returns the path of the file's frame stack, where a Layout's
// StackPath puts it.
func (r *Reader) StackPath() string { return r.det + "/data" }

func (r *Reader) init() error {
	switch {
	case exists(r.file, nxtomoStack):
		r.Layout, r.det = LayoutNXtomo, path.Dir(nxtomoStack)
	case exists(r.file, cxiStack):
		r.Layout, r.det = LayoutCXI, path.Dir(cxiStack)
	default:
		det, ok := r.defaultData()
		if !ok {
			return errors.New("neither an nxtomo nor a cxi layout, nor a frame stack where the NeXus default attributes lead")
		}
		r.Layout, r.det = LayoutOther, det
	}
	d, err := openDataset(r.file, r.det+"/data")
	if err != nil {
		return err
	}
	r.stack = d
	if r.ElemSize, err = elemSize(d, "frame stack"); err != nil {
		return err
	}
	if r.Filters, err = filters(d, "frame stack"); err != nil {
		return err
	}
	if exists(r.file, r.det+"/module_ids") {
		if err := r.readModules(); err != nil {
			return err
		}
	}
	return r.readShape()
}

func (r *Reader) readShape() error {
	dims, _, err := shape(r.stack, "frame stack")
	if err != nil {
		return err
	}
	if len(dims) != 3 {
		return fmt.Errorf("frame stack has rank %d, not 3", len(dims))
	}
	r.Frames, r.Height, r.Width = int(dims[0]), int(dims[1]), int(dims[2])
	if r.Modules != nil {
		// A master's stack grows with a module file longer than the
		// scan; the scan's N frames are where its extent is pinned.
		n, ok, err := pinnedFrames(r.stack, absentSource)
		if err != nil {
			return fmt.Errorf("frame stack: %w", err)
		}
		if ok {
			r.Frames = n
		}
	}
	return nil
}

// Refresh makes a SWMR reader see the frames the writer flushed since Open
// or the last Refresh, and updates Frames.
func (r *Reader) Refresh() error {
	if err := refresh(r.stack, r.det+"/data"); err != nil {
		return err
	}
	return r.readShape()
}

// ReadChunk appends the stored bytes of frame's chunk to dst and returns
// them with the chunk's filter mask, or ErrNoChunk.
func (r *Reader) ReadChunk(frame int, dst []byte) (data []byte, mask uint32, err error) {
	if r.Modules != nil {
		return dst, 0, r.masterError(fmt.Sprintf("read chunk of frame %d from", frame))
	}
	if frame < 0 || frame >= r.Frames {
		return dst, 0, fmt.Errorf("read chunk of frame %d from %s: frame outside 0 to %d", frame, r.path, r.Frames-1)
	}
	r.off.setFrame(frame)
	data, mask, ok, err := readChunk(r.stack, &r.off, dst)
	if err != nil {
		return data, 0, fmt.Errorf("read chunk of frame %d from %s: %w", frame, r.path, err)
	}
	if !ok {
		return data, 0, ErrNoChunk
	}
	return data, mask, nil
}

// Records returns the per-frame records as last flushed. A master file
// has records per module: Records returns an error wrapping ErrMaster.
func (r *Reader) Records() ([]frame.Record, error) {
	if r.Modules != nil {
		return nil, r.masterError("records of")
	}
	return r.records(r.det)
}

// records reads the per-frame records in group g.
func (r *Reader) records(g string) ([]frame.Record, error) {
	status, err := readColumn[uint8](r, g+"/frame_status", kindU8, 1)
	if err != nil {
		return nil, err
	}
	ts, err := readColumn[uint64](r, g+"/timestamp", kindU64, 1)
	if err != nil {
		return nil, err
	}
	raw, err := readColumn[uint32](r, g+"/raw_crc32c", kindU32, 1)
	if err != nil {
		return nil, err
	}
	data, err := readColumn[uint32](r, g+"/data_crc32c", kindU32, 1)
	if err != nil {
		return nil, err
	}
	if len(ts) != len(status) || len(raw) != len(status) || len(data) != len(status) {
		return nil, fmt.Errorf("records of %s have different lengths", r.path)
	}
	out := make([]frame.Record, len(status))
	for i := range out {
		out[i] = frame.Record{Timestamp: ts[i], RawCRC: raw[i], DataCRC: data[i], Status: status[i]}
	}
	return out, nil
}

// FrameNumbers returns the frame_number record.
func (r *Reader) FrameNumbers() ([]uint64, error) {
	if r.Modules != nil {
		return nil, r.masterError("frame numbers of")
	}
	return readColumn[uint64](r, r.det+"/frame_number", kindU64, 1)
}

// ImageKey returns the image keys of a file whose layout stores them
// (Builder.Column), nil for one whose layout does not.
func (r *Reader) ImageKey() ([]int8, error) {
	p, ok := r.columnPath(ColumnImageKey)
	if !ok {
		return nil, nil
	}
	return readColumn[int8](r, p, kindI8, 1)
}

// RotationAngle returns the rotation angles in degrees of a file whose
// layout stores them, nil for one whose layout does not.
func (r *Reader) RotationAngle() ([]float64, error) {
	p, ok := r.columnPath(ColumnRotationAngle)
	if !ok {
		return nil, nil
	}
	return readColumn[float64](r, p, kindF64, 1)
}

// Translation returns the scan positions in metres of a file whose layout
// stores them, nil for one whose layout does not.
func (r *Reader) Translation() ([][3]float64, error) {
	p, ok := r.columnPath(ColumnTranslation)
	if !ok {
		return nil, nil
	}
	v, err := readColumn[float64](r, p, kindF64, 3)
	if err != nil {
		return nil, err
	}
	out := make([][3]float64, len(v)/3)
	for i := range out {
		copy(out[i][:], v[3*i:])
	}
	return out, nil
}

// earlierColumns are where files written before the root recorded its
// columns (h5ingest_<values>) keep them: NXtomo's and CXI's places.
var earlierColumns = map[PerFrame]string{
	ColumnImageKey:      "/entry/instrument/detector/image_key",
	ColumnRotationAngle: "/entry/sample/rotation_angle",
	ColumnTranslation:   "/entry_1/sample_1/geometry_1/translation",
}

// columnPath returns where the file keeps the plan's values v: the path
// the root's attribute h5ingest_<v> names, or in a file written before,
// NXtomo's or CXI's place for them where it exists.
func (r *Reader) columnPath(v PerFrame) (string, bool) {
	if g, err := openGroup(r.file, "/"); err == nil {
		p, err := readAttrStrings(g, columnAttr(v))
		closeID(g)
		if err == nil && len(p) == 1 && exists(r.file, p[0]) {
			return p[0], true
		}
	}
	p, ok := earlierColumns[v]
	return p, ok && exists(r.file, p)
}

// readColumn reads the dataset at p, of width values per row, whole.
func readColumn[T any](r *Reader, p string, k kind, width int) ([]T, error) {
	d, err := openDataset(r.file, p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", r.path, err)
	}
	defer closeID(d)
	if r.SWMR {
		if err := refresh(d, p); err != nil {
			return nil, fmt.Errorf("read %s: %w", r.path, err)
		}
	}
	dims, _, err := shape(d, p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", r.path, err)
	}
	n := 1
	for _, x := range dims {
		n *= int(x)
	}
	if len(dims) == 0 || n%width != 0 {
		return nil, fmt.Errorf("read %s: %s has shape %v", r.path, p, dims)
	}
	out := make([]T, n)
	if n == 0 {
		return out, nil
	}
	if err := readAll(d, p, k, unsafe.Pointer(&out[0])); err != nil {
		return nil, fmt.Errorf("read %s: %w", r.path, err)
	}
	return out, nil
}

// Close closes the file.
func (r *Reader) Close() error {
	err := closeID(r.stack)
	if cerr := closeID(r.file); err == nil {
		err = cerr
	}
	r.stack, r.file = 0, 0
	return err
}

// requiredPaths lists the datasets every file of a layout holds, besides
// the frame stack and the per-frame records.
var requiredPaths = map[string][]string{
	LayoutNXtomo: {
		"/entry/definition", "/entry/start_time", "/entry/end_time",
		"/entry/instrument/detector/image_key",
		"/entry/instrument/detector/x_pixel_size", "/entry/instrument/detector/y_pixel_size",
		"/entry/instrument/detector/distance",
		"/entry/sample/name", "/entry/sample/rotation_angle", "/entry/control/data",
		"/entry/data/data", "/entry/data/rotation_angle", "/entry/data/image_key",
		"/exchange/data", "/exchange/data_white", "/exchange/data_dark", "/exchange/theta",
	},
	LayoutCXI: {
		"/cxi_version", "/entry_1/start_time", "/entry_1/end_time",
		"/entry_1/instrument_1/source_1/energy",
		"/entry_1/instrument_1/detector_1/distance",
		"/entry_1/instrument_1/detector_1/x_pixel_size", "/entry_1/instrument_1/detector_1/y_pixel_size",
		"/entry_1/sample_1/geometry_1/translation", "/entry_1/data_1/data",
	},
}

// recordNames are the per-frame record datasets beside the stack.
var recordNames = []string{"frame_number", "timestamp", "raw_crc32c", "data_crc32c", "frame_status"}

// MissingPaths returns the datasets of the file's layout that the file
// lacks; none for a complete file.
func (r *Reader) MissingPaths() []string {
	var missing []string
	for _, name := range recordNames {
		if p := r.det + "/" + name; !exists(r.file, p) {
			missing = append(missing, p)
		}
	}
	for _, p := range requiredPaths[r.Layout] {
		if !exists(r.file, p) {
			missing = append(missing, p)
		}
	}
	return missing
}

// StoredBytes returns the bytes the frame stack's chunks take in the file.
func (r *Reader) StoredBytes() int64 { return storageSize(r.stack) }
