package writer

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"unsafe"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/plan"
)

// kiloElectronVolt is one keV in joules.
const kiloElectronVolt = 1.602176634e-16

// Paths of the frame stack in each layout.
const (
	nxtomoStack = "/entry/instrument/detector/data"
	cxiStack    = "/entry_1/instrument_1/detector_1/data"
)

// column is a per-frame dataset that the Writer (re)writes from memory.
type column struct {
	id     hid
	name   string
	kind   kind
	static bool                         // written once when the file has a fixed length
	data   func() (unsafe.Pointer, int) // first element and frame count
	width  uint64                       // values per frame
}

// writeColumns writes the records (and, when the file is extendible, every
// per-frame dataset) from memory, growing extendible datasets first.
func (w *Writer) writeColumns() error {
	for _, c := range w.cols {
		if c.static && !w.extendible {
			continue
		}
		if err := w.writeColumn(c); err != nil {
			return err
		}
	}
	return nil
}

func (w *Writer) writeColumn(c *column) error {
	ptr, n := c.data()
	if w.extendible {
		dims := []uint64{uint64(n)}
		if c.width > 1 {
			dims = append(dims, c.width)
		}
		if err := setExtent(c.id, c.name, dims); err != nil {
			return err
		}
	}
	if n == 0 {
		return nil
	}
	return writeAll(c.id, c.name, c.kind, 0, ptr)
}

// Builder is what a Layout creates a new file's groups and datasets with.
// Its first error sticks and makes the later steps no-ops; Build returns
// it.
type Builder struct {
	w      *Writer
	err    error
	groups []hid
}

// build creates the layout of w.opts.Layout in w.file.
func (w *Writer) build() error {
	t, err := stringType(timeSize)
	if err != nil {
		return err
	}
	w.timeType = t
	b := &Builder{w: w}
	if err := w.opts.Layout.Build(b); err != nil {
		b.fail(fmt.Errorf("layout %s: %w", w.opts.Layout.Name(), err))
	}
	switch {
	case b.err != nil:
	case w.stack <= 0 && w.master == nil:
		b.fail(fmt.Errorf("layout %s made no frame stack (Builder.Stack)", w.opts.Layout.Name()))
	case w.endTime <= 0:
		b.fail(fmt.Errorf("layout %s wrote no header (Builder.Header)", w.opts.Layout.Name()))
	}
	for _, g := range b.groups {
		if err := closeID(g); err != nil && b.err == nil {
			b.err = err
		}
	}
	return b.err
}

func (b *Builder) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

func (b *Builder) rootAttrs(defaultEntry string) {
	o := &b.w.opts
	b.attr(b.w.file, "default", defaultEntry)
	b.attr(b.w.file, "creator", o.Creator)
	b.attr(b.w.file, "file_name", filepath.Base(o.Path))
	b.attr(b.w.file, "file_time", cmp.Or(b.w.created, o.StartTime).Format(timeFormat))
}

// times creates start_time and end_time in entry; end_time holds the start
// time until Close rewrites it.
func (b *Builder) times(entry hid) {
	start := fixedString(b.w.opts.StartTime.Format(timeFormat), timeSize)
	for _, name := range []string{"start_time", "end_time"} {
		d := b.dataset(entry, name, 0, b.w.timeType, nil, nil, dcpl{})
		b.write(d, name, 0, b.w.timeType, unsafe.Pointer(&start[0]))
		if name == "end_time" {
			b.w.endTime = d
		} else {
			b.close(d)
		}
	}
}

func (b *Builder) nxtomo(l NXtomo) {
	w, o := b.w, &b.w.opts
	b.rootAttrs("entry")
	b.attr(w.file, "NX_class", "NXroot") // NeXus: every group names its class, the root too
	entry := b.group(w.file, "entry", "NXentry")
	b.attr(entry, "default", "data")
	b.str(entry, "definition", "NXtomo")
	b.str(entry, "title", o.Title)
	b.times(entry)
	b.scanMetadata(entry)

	inst := b.group(entry, "instrument", "NXinstrument")
	src := b.group(inst, "source", "NXsource")
	b.str(src, "type", cmp.Or(l.SourceType, "Synchrotron X-ray Source"))
	b.str(src, "name", l.SourceName)
	b.str(src, "probe", "x-ray")
	if o.Energy > 0 {
		// The photon energy, where NeXus keeps it: the monochromator's.
		mono := b.group(inst, "monochromator", "NXmonochromator")
		b.scalarF64(mono, "energy", o.Energy/kiloElectronVolt, "keV")
	}

	det := b.group(inst, "detector", "NXdetector")
	b.stack(det, nxtomoStack)
	b.attr(w.stack, "target", nxtomoStack)
	key := b.perFrame(det, "/entry/instrument/detector/image_key", "image_key", ColumnImageKey)
	b.attr(key, "target", "/entry/instrument/detector/image_key")
	b.scalarF64(det, "x_pixel_size", o.PixelSize, "m")
	b.scalarF64(det, "y_pixel_size", o.PixelSize, "m")
	b.scalarF64(det, "distance", o.Distance, "m")
	b.records(det)

	sample := b.group(entry, "sample", "NXsample")
	b.str(sample, "name", o.SampleName)
	angle := b.perFrame(sample, "/entry/sample/rotation_angle", "rotation_angle", ColumnRotationAngle)
	b.attr(angle, "target", "/entry/sample/rotation_angle")

	control := b.group(entry, "control", "NXmonitor")
	b.perFrame(control, "/entry/control/data", "data", ColumnMonitor)

	data := b.group(entry, "data", "NXdata")
	b.attr(data, "signal", "data")
	b.attrs(data, "axes", "rotation_angle", ".", ".")
	b.attrInt(data, "rotation_angle_indices", 0)
	b.hardLink(data, nxtomoStack, "data")
	b.hardLink(data, "/entry/sample/rotation_angle", "rotation_angle")
	b.hardLink(data, "/entry/instrument/detector/image_key", "image_key")

	b.exchange()
}

func (b *Builder) cxi() {
	w, o := b.w, &b.w.opts
	b.rootAttrs("entry_1")
	version := int32(150)
	b.close(b.scalar(w.file, "cxi_version", kindI32, unsafe.Pointer(&version)))
	entry := b.group(w.file, "entry_1", "NXentry")
	b.attr(entry, "default", "data_1")
	if o.Title != "" {
		b.str(entry, "title", o.Title)
	}
	b.times(entry)
	b.scanMetadata(entry)
	inst := b.group(entry, "instrument_1", "NXinstrument")
	src := b.group(inst, "source_1", "NXsource")
	b.scalarF64(src, "energy", o.Energy, "J")
	det := b.group(inst, "detector_1", "NXdetector")
	b.stack(det, cxiStack)
	b.scalarF64(det, "distance", o.Distance, "m")
	b.scalarF64(det, "x_pixel_size", o.PixelSize, "m")
	b.scalarF64(det, "y_pixel_size", o.PixelSize, "m")
	b.records(det)
	sample := b.group(entry, "sample_1", "NXsample")
	if o.SampleName != "" {
		b.str(sample, "name", o.SampleName)
	}
	geom := b.group(sample, "geometry_1", "NXgeometry")
	b.perFrame(geom, "/entry_1/sample_1/geometry_1/translation", "translation", ColumnTranslation)
	data := b.group(entry, "data_1", "NXdata")
	b.attr(data, "signal", "data")
	b.softLink(data, cxiStack, "data")
}

// perFrame creates name in loc, whose absolute path is at, the column of
// the plan's values v (Builder.Column), records its path in the root's
// attribute h5ingest_<v>, and returns the dataset.
func (b *Builder) perFrame(loc hid, at, name string, v PerFrame) hid {
	w := b.w
	var d hid
	switch v {
	case ColumnImageKey:
		d = b.column(loc, name, kindI8, 1, true, "", func() (unsafe.Pointer, int) { return ptr(w.imageKey), len(w.imageKey) })
	case ColumnRotationAngle:
		d = b.column(loc, name, kindF64, 1, true, "degree", func() (unsafe.Pointer, int) { return ptr(w.angle), len(w.angle) })
	case ColumnMonitor:
		d = b.column(loc, name, kindF64, 1, true, "", func() (unsafe.Pointer, int) { return ptr(w.monitor), len(w.monitor) })
	case ColumnTranslation:
		d = b.column(loc, name, kindF64, 3, true, "m", func() (unsafe.Pointer, int) {
			if len(w.translation) == 0 {
				return nil, 0
			}
			return unsafe.Pointer(&w.translation[0][0]), len(w.translation)
		})
	default:
		b.fail(fmt.Errorf("per-frame column %s: no plan values named %q", at, v))
		return -1
	}
	b.attr(w.file, columnAttr(v), at)
	return d
}

// columnAttr is the root's attribute that holds the path of the column of
// the plan's values v.
func columnAttr(v PerFrame) string { return "h5ingest_" + string(v) }

// records creates the five per-frame record datasets in det.
func (b *Builder) records(det hid) {
	if b.w.master != nil {
		b.masterRecords(det)
		return
	}
	w := b.w
	b.column(det, "frame_number", kindU64, 1, false, "", func() (unsafe.Pointer, int) { return ptr(w.frameNumber), len(w.frameNumber) })
	b.column(det, "timestamp", kindU64, 1, false, "ns", func() (unsafe.Pointer, int) { return ptr(w.timestamp), len(w.timestamp) })
	b.column(det, "raw_crc32c", kindU32, 1, false, "", func() (unsafe.Pointer, int) { return ptr(w.rawCRC), len(w.rawCRC) })
	b.column(det, "data_crc32c", kindU32, 1, false, "", func() (unsafe.Pointer, int) { return ptr(w.dataCRC), len(w.dataCRC) })
	b.column(det, "frame_status", kindU8, 1, false, "", func() (unsafe.Pointer, int) { return ptr(w.status), len(w.status) })
}

// ptr returns a pointer to the first element of s, or nil.
func ptr[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// stackKind returns the element kind of the frame stack.
func (w *Writer) stackKind() kind {
	if w.opts.ElemSize == 2 {
		return kindU16
	}
	return kindU32
}

func (w *Writer) stackDims() (dims, max []uint64) {
	h, wd := uint64(w.opts.Height), uint64(w.opts.Width)
	if w.extendible {
		return []uint64{0, h, wd}, []uint64{unlimited, h, wd}
	}
	n := uint64(w.opts.Frames)
	return []uint64{n, h, wd}, []uint64{n, h, wd}
}

// stack creates the frame stack "data" in det, chunked by frame, fill value
// 0, with the filter pipeline of the options, and checks the pipeline as
// stored.
func (b *Builder) stack(det hid, path string) {
	if b.err != nil {
		return
	}
	if b.w.master != nil {
		b.virtualStack(det, path)
		return
	}
	w, o := b.w, &b.w.opts
	var fill uint32
	p, err := newDCPL([]uint64{1, uint64(o.Height), uint64(o.Width)}, w.stackKind(), unsafe.Pointer(&fill))
	if err != nil {
		b.fail(err)
		return
	}
	defer p.close()
	dims, max := w.stackDims()
	err = withoutPlugins(func() error {
		if err := p.setFilters(o.Filters); err != nil {
			return err
		}
		w.stack, err = createDataset(det, "data", w.stackKind(), 0, dims, max, p)
		return err
	})
	if err != nil {
		b.fail(fmt.Errorf("create frame stack %s: %w", path, err))
		return
	}
	got, err := filters(w.stack, path)
	if err != nil {
		b.fail(err)
		return
	}
	if err := checkFilters(got, o.Filters, o.ElemSize); err != nil {
		b.fail(fmt.Errorf("frame stack %s: %w", path, err))
	}
}

// checkFilters compares the pipeline as stored with the one asked for.
// libhdf5's shuffle stores the element size as its only cd_value whatever
// it was given, so shuffle may be asked for with no values; values given
// must be that.
func checkFilters(got, want []compress.Filter, elemSize int) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d filters stored, %d asked for", len(got), len(want))
	}
	for i, g := range got {
		wf := want[i]
		wv := wf.Values
		if wf.ID == filterShuffle && len(wv) == 0 {
			wv = []uint32{uint32(elemSize)}
		}
		if g.ID != wf.ID || g.Optional != wf.Optional || !slices.Equal(g.Values, wv) {
			hint := ""
			switch {
			case wf.ID == filterShuffle:
				hint = fmt.Sprintf(" (libhdf5 stores the element size, %d)", elemSize)
			case wf.ID >= 256:
				hint = " (did a filter plugin's set_local rewrite them?)"
			}
			return fmt.Errorf("filter %d stored as id %d optional %v cd_values %v, asked for id %d (%s) optional %v cd_values %v%s",
				i, g.ID, g.Optional, g.Values, wf.ID, wf.Name, wf.Optional, wv, hint)
		}
	}
	return nil
}

// Filter ids built into libhdf5.
const (
	filterDeflate = 1
	filterShuffle = 2
)

// exchange creates /exchange: data, data_white and data_dark as virtual
// datasets selecting the frames of image key 0, 1 and 2 from the stack,
// and theta, the angles of the projections.
func (b *Builder) exchange() {
	w := b.w
	ex := b.group(w.file, "exchange", "NXcollection")
	b.virtual(ex, "data", plan.Projection)
	b.virtual(ex, "data_white", plan.FlatField)
	b.virtual(ex, "data_dark", plan.DarkField)
	b.column(ex, "theta", kindF64, 1, true, "degree", func() (unsafe.Pointer, int) { return ptr(w.theta), len(w.theta) })
}

// run is a stretch of consecutive frames with the same image key.
type run struct{ first, n int }

// runs returns the runs of frames with image key k among keys.
func runs(keys []int8, k int8) []run {
	var out []run
	for i := 0; i < len(keys); i++ {
		if keys[i] != k {
			continue
		}
		j := i
		for j < len(keys) && keys[j] == k {
			j++
		}
		out = append(out, run{i, j - i})
		i = j - 1
	}
	return out
}

// virtual creates the virtual dataset name in ex holding the frames of
// image key k, one mapping per run. In an extendible file the planned
// image keys cover the first frames; every later frame is a projection.
func (b *Builder) virtual(ex hid, name string, k int8) {
	if b.err != nil {
		return
	}
	w, o := b.w, &b.w.opts
	keys := w.imageKey
	if w.extendible {
		keys = o.ImageKey
	}
	rs := runs(keys, k)
	total := 0
	for _, r := range rs {
		total += r.n
	}
	h, wd := uint64(o.Height), uint64(o.Width)
	tail := w.extendible && k == plan.Projection
	vDims := []uint64{uint64(total), h, wd}
	vMax := slices.Clone(vDims)
	if tail {
		vMax[0] = unlimited
	}
	if len(rs) == 0 && !tail {
		b.close(b.dataset(ex, name, w.stackKind(), 0, vDims, vMax, dcpl{}))
		return
	}
	var fill uint32
	p, err := newDCPL(nil, w.stackKind(), unsafe.Pointer(&fill))
	if err != nil {
		b.fail(err)
		return
	}
	defer p.close()
	sDims := []uint64{uint64(max(len(keys), 1)), h, wd}
	_, sMax := w.stackDims()
	at := 0
	for _, r := range rs {
		err := p.setVirtual(vDims, vMax, []uint64{uint64(at), 0, 0}, ".", nxtomoStack,
			sDims, sMax, []uint64{uint64(r.first), 0, 0}, []uint64{uint64(r.n), h, wd})
		if err != nil {
			b.fail(fmt.Errorf("create /exchange/%s: %w", name, err))
			return
		}
		at += r.n
	}
	if tail {
		err := p.setVirtual(vDims, vMax, []uint64{uint64(at), 0, 0}, ".", nxtomoStack,
			sDims, sMax, []uint64{uint64(len(keys)), 0, 0}, []uint64{unlimited, h, wd})
		if err != nil {
			b.fail(fmt.Errorf("create /exchange/%s: %w", name, err))
			return
		}
	}
	b.close(b.dataset(ex, name, w.stackKind(), 0, vDims, vMax, p))
}

// group creates a group with its NX_class; the Builder closes it.
func (b *Builder) group(loc hid, name, class string) hid {
	if b.err != nil {
		return -1
	}
	g, err := createGroup(loc, name)
	if err != nil {
		b.fail(err)
		return -1
	}
	b.groups = append(b.groups, g)
	if class != "" {
		b.attr(g, "NX_class", class)
	}
	return g
}

func (b *Builder) attr(obj hid, name, value string) {
	if b.err == nil {
		if err := setAttrString(obj, name, value); err != nil {
			b.fail(err)
		}
	}
}

func (b *Builder) attrs(obj hid, name string, values ...string) {
	if b.err == nil {
		if err := setAttrStrings(obj, name, false, values...); err != nil {
			b.fail(err)
		}
	}
}

func (b *Builder) attrInt(obj hid, name string, v int32) {
	if b.err == nil {
		if err := setAttrInt32(obj, name, v); err != nil {
			b.fail(err)
		}
	}
}

func (b *Builder) dataset(loc hid, name string, k kind, t hid, dims, max []uint64, p dcpl) hid {
	if b.err != nil {
		return -1
	}
	d, err := createDataset(loc, name, k, t, dims, max, p)
	if err != nil {
		b.fail(err)
		return -1
	}
	return d
}

func (b *Builder) write(d hid, name string, k kind, t hid, buf unsafe.Pointer) {
	if b.err == nil {
		if err := writeAll(d, name, k, t, buf); err != nil {
			b.fail(err)
		}
	}
}

func (b *Builder) close(id hid) {
	if err := closeID(id); err != nil {
		b.fail(err)
	}
}

// str creates a scalar fixed-length string dataset holding value.
func (b *Builder) str(loc hid, name, value string) { b.close(b.strDataset(loc, name, value)) }

// strDataset creates a scalar fixed-length string dataset holding value
// and returns it, open.
func (b *Builder) strDataset(loc hid, name, value string) hid {
	if b.err != nil {
		return -1
	}
	buf := fixedString(value, len(value)+1)
	t, err := stringType(len(buf))
	if err != nil {
		b.fail(err)
		return -1
	}
	defer closeID(t)
	d := b.dataset(loc, name, 0, t, nil, nil, dcpl{})
	b.write(d, name, 0, t, unsafe.Pointer(&buf[0]))
	return d
}

// scalar creates a scalar dataset of kind k holding *v and returns it.
func (b *Builder) scalar(loc hid, name string, k kind, v unsafe.Pointer) hid {
	d := b.dataset(loc, name, k, 0, nil, nil, dcpl{})
	b.write(d, name, k, 0, v)
	return d
}

func (b *Builder) scalarF64(loc hid, name string, v float64, units string) {
	d := b.scalar(loc, name, kindF64, unsafe.Pointer(&v))
	if units != "" {
		b.attr(d, "units", units)
	}
	b.close(d)
}

// column creates a per-frame dataset of width values per frame and writes
// what memory holds now. The Writer keeps it open to rewrite it at flushes.
func (b *Builder) column(loc hid, name string, k kind, width uint64, static bool, units string, data func() (unsafe.Pointer, int)) hid {
	if b.err != nil {
		return -1
	}
	w := b.w
	_, n := data()
	dims, max := []uint64{uint64(n)}, []uint64{uint64(n)}
	var p dcpl
	if w.extendible {
		fill := uint64(0)
		if name == "frame_status" {
			fill = frame.StatusMissing
		}
		chunk := []uint64{extendibleChunk}
		dims[0], max[0] = 0, unlimited
		if width > 1 {
			chunk = append(chunk, width)
		}
		var err error
		p, err = newDCPL(chunk, k, unsafe.Pointer(&fill))
		if err != nil {
			b.fail(err)
			return -1
		}
		defer p.close()
	} else if name == "frame_status" {
		// Its fill value is missing in a file of fixed length too, so
		// that no reader sees ok where the writer wrote no record.
		fill := uint64(frame.StatusMissing)
		var err error
		p, err = newDCPL(nil, k, unsafe.Pointer(&fill))
		if err != nil {
			b.fail(err)
			return -1
		}
		defer p.close()
	}
	if width > 1 {
		dims, max = append(dims, width), append(max, width)
	}
	d := b.dataset(loc, name, k, 0, dims, max, p)
	if b.err != nil {
		return -1
	}
	c := &column{id: d, name: name, kind: k, static: static, data: data, width: width}
	w.cols = append(w.cols, c)
	if units != "" {
		b.attr(d, "units", units)
	}
	if b.err == nil {
		if err := w.writeColumn(c); err != nil {
			b.fail(err)
		}
	}
	return d
}

func (b *Builder) hardLink(loc hid, target, name string) {
	if b.err == nil {
		if err := linkHard(loc, target, name); err != nil {
			b.fail(err)
		}
	}
}

func (b *Builder) softLink(loc hid, target, name string) {
	if b.err == nil {
		if err := linkSoft(loc, target, name); err != nil {
			b.fail(err)
		}
	}
}

// fixedString returns s in a zero-padded buffer of size bytes (truncated to
// leave a terminating zero).
func fixedString(s string, size int) []byte {
	buf := make([]byte, size)
	copy(buf[:size-1], s)
	return buf
}
