package writer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"h5ingest/frame"
)

// A master file shows the modules of a multi-module detector as one
// detector. It has the layout of a module's file (nxtomo or cxi), with
// these differences:
//
//   - The frame stack is a virtual dataset of the whole array,
//     (N, Height, Width), that places each module file's stack at the
//     module's offset. Pixels no module covers, and every pixel of a
//     module whose file is absent when the master is read, read as 0.
//   - The detector group holds, for module id K, a group module_K with
//     the five per-frame records (frame_number, timestamp, raw_crc32c,
//     data_crc32c, frame_status) as virtual datasets of the module file's
//     records. A module file that is absent, and the frames past the end
//     of a module file shorter than N frames, read as frame_status 1
//     (missing) and zeros elsewhere.
//   - Each virtual dataset maps its sources to their ends, whatever their
//     length, and is pinned at N frames (pinExtent): its largest shape is
//     unlimited in frames, its shape N. A mapping of a fixed N frames
//     would have libhdf5 (1.10) read a shorter source past its end.
//   - The detector group's own records are a combined view of shape
//     (N, M): column j holds the records of the module module_ids[j].
//   - module_ids (M), module_origin (M, 2: y, x) and module_shape
//     (M, 2: height, width) describe the modules, and the attribute
//     module_files names their files as the master stores them.
//
// Virtual datasets resolve when they are read, so a master can be written
// before, while or after its module files are.

// MasterModule is one module of a master file.
type MasterModule struct {
	ID int // module id, as in the frame headers
	// File is the module's file as the master stores it. A relative name
	// is looked up in the master's directory when the master is read, so
	// the base name keeps a scan's files movable together.
	File          string
	X, Y          int // offset of the module's top left pixel in the array image
	Height, Width int // module image size
}

// MasterOptions describe a master file. The embedded Options give the
// path, layout, frame count, the size of the whole array (Height, Width),
// the element size and the metadata, as for a module's file; Filters and
// FlushInterval do not apply. Frames must be above 0. StartTime is the
// scan's start (the earliest module's, where the master is written after
// them), EndTime its end (the latest module's; zero: the master's
// creation, as for a master written before its modules end); the root's
// file_time is the master's own creation.
type MasterOptions struct {
	Options
	Modules []MasterModule
}

// ErrMaster is returned by the Reader methods that read a module file's
// own chunks or records when the file is a master file.
var ErrMaster = errors.New("master file of several modules")

// CreateMaster writes a master file under a temporary name beside
// o.Path and renames it to o.Path. It refuses an existing file unless
// o.Overwrite is set. The module files need not exist yet.
func CreateMaster(o MasterOptions) error {
	o.setDefaults()
	if err := o.validate(); err != nil {
		return fmt.Errorf("create master %s: %w", o.Path, err)
	}
	w := &Writer{opts: o.Options, temp: TempName(o.Path), frames: o.Frames, master: o.Modules,
		created: time.Now()}
	lock, err := lockOutput(o.Path)
	if err != nil {
		return fmt.Errorf("create master %s: %w", o.Path, err)
	}
	w.lock = lock
	for _, name := range []string{o.Path, w.temp} {
		if _, err := os.Lstat(name); err == nil && !o.Overwrite {
			lock.release()
			return fmt.Errorf("create master %s: %s %w", o.Path, name, ErrExists)
		}
	}
	w.initFrames()
	f, err := createTemp(w.temp, o.Overwrite)
	if err != nil {
		lock.release()
		return fmt.Errorf("create master %s: %w", o.Path, err)
	}
	w.file = f
	err = o.Access.apply(w.temp)
	if err == nil {
		err = w.build()
	}
	if err != nil {
		w.closeAll()
		os.Remove(w.temp)
		lock.release()
		return fmt.Errorf("create master %s: %w", o.Path, err)
	}
	return w.Close()
}

func (o *MasterOptions) validate() error {
	if err := o.Options.validate(); err != nil {
		return err
	}
	if o.Frames == 0 {
		return errors.New("no frame count: a master file needs the scan's length")
	}
	if len(o.Modules) == 0 {
		return errors.New("no modules")
	}
	seen := map[int]bool{}
	for _, m := range o.Modules {
		switch {
		case seen[m.ID]:
			return fmt.Errorf("module %d listed twice", m.ID)
		case m.File == "":
			return fmt.Errorf("module %d has no file name", m.ID)
		case m.Height <= 0 || m.Width <= 0:
			return fmt.Errorf("module %d: size %dx%d is not positive", m.ID, m.Height, m.Width)
		case m.X < 0 || m.Y < 0 || m.Y+m.Height > o.Height || m.X+m.Width > o.Width:
			return fmt.Errorf("module %d at (x %d, y %d) of %dx%d pixels is outside the %dx%d array",
				m.ID, m.X, m.Y, m.Height, m.Width, o.Height, o.Width)
		}
		seen[m.ID] = true
	}
	return nil
}

// moduleStack returns the path of the frame stack in a module file of
// the master's layout.
func (w *Writer) moduleStack() string {
	return w.opts.Layout.StackPath()
}

// virtualStack creates the master's frame stack "data" in det: the
// array, fill value 0, with each module's stack at its offset.
func (b *Builder) virtualStack(det hid, stackPath string) {
	w, o := b.w, &b.w.opts
	var fill uint32
	p, err := newDCPL(nil, w.stackKind(), unsafe.Pointer(&fill))
	if err != nil {
		b.fail(err)
		return
	}
	defer p.close()
	n := uint64(o.Frames)
	vDims := []uint64{n, uint64(o.Height), uint64(o.Width)}
	vMax := []uint64{unlimited, uint64(o.Height), uint64(o.Width)}
	if err := pinExtent(p, vDims, vMax, []uint64{1, 1, 1}); err != nil {
		b.fail(fmt.Errorf("create frame stack %s: %w", stackPath, err))
		return
	}
	for _, m := range w.master {
		src := []uint64{n, uint64(m.Height), uint64(m.Width)}
		sMax := []uint64{unlimited, uint64(m.Height), uint64(m.Width)}
		block := []uint64{unlimited, uint64(m.Height), uint64(m.Width)}
		err := p.setVirtual(vDims, vMax, []uint64{0, uint64(m.Y), uint64(m.X)}, m.File, w.moduleStack(),
			src, sMax, []uint64{0, 0, 0}, block)
		if err != nil {
			b.fail(fmt.Errorf("create frame stack %s: module %d: %w", stackPath, m.ID, err))
			return
		}
	}
	w.stack = b.dataset(det, "data", w.stackKind(), 0, vDims, vMax, p)
}

// recordKinds are the element kinds of the per-frame records, in the
// order of recordNames.
var recordKinds = []kind{kindU64, kindU64, kindU32, kindU32, kindU8}

// masterRecords creates the module descriptions, each module's records
// and the combined view of them in det.
func (b *Builder) masterRecords(det hid) {
	w := b.w
	ms := w.master
	ids := make([]int32, len(ms))
	origin := make([]int32, 0, 2*len(ms))
	size := make([]int32, 0, 2*len(ms))
	files := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = int32(m.ID)
		origin = append(origin, int32(m.Y), int32(m.X))
		size = append(size, int32(m.Height), int32(m.Width))
		files[i] = m.File
	}
	m := uint64(len(ms))
	b.close(b.int32s(det, "module_ids", []uint64{m}, ids))
	b.close(b.int32s(det, "module_origin", []uint64{m, 2}, origin))
	b.close(b.int32s(det, "module_shape", []uint64{m, 2}, size))
	if b.err == nil {
		if err := setAttrStrings(det, "module_files", false, files...); err != nil {
			b.fail(err)
		}
	}
	det0 := path.Dir(w.moduleStack())
	for _, mod := range ms {
		g := b.group(det, "module_"+strconv.Itoa(mod.ID), "NXcollection")
		b.attr(g, "file", mod.File)
		for i, name := range recordNames {
			b.moduleRecord(g, name, recordKinds[i], mod, det0+"/"+name)
		}
	}
	for i, name := range recordNames {
		b.combinedRecord(det, name, recordKinds[i], det0+"/"+name)
	}
}

// recordFill returns the fill value of record name: frames of an absent
// module read as missing.
func recordFill(name string) uint64 {
	if name == "frame_status" {
		return frame.StatusMissing
	}
	return 0
}

// moduleRecord creates record name in g, (N), mapping src of the module's
// file.
func (b *Builder) moduleRecord(g hid, name string, k kind, mod MasterModule, src string) {
	if b.err != nil {
		return
	}
	fill := recordFill(name)
	p, err := newDCPL(nil, k, unsafe.Pointer(&fill))
	if err != nil {
		b.fail(err)
		return
	}
	defer p.close()
	n := uint64(b.w.opts.Frames)
	dims, vMax := []uint64{n}, []uint64{unlimited}
	if err := pinExtent(p, dims, vMax, []uint64{1}); err != nil {
		b.fail(fmt.Errorf("create record %s of module %d: %w", name, mod.ID, err))
		return
	}
	err = p.setVirtual(dims, vMax, []uint64{0}, mod.File, src, dims, vMax, []uint64{0}, []uint64{unlimited})
	if err != nil {
		b.fail(fmt.Errorf("create record %s of module %d: %w", name, mod.ID, err))
		return
	}
	b.close(b.dataset(g, name, k, 0, dims, vMax, p))
}

// combinedRecord creates record name in det, (N, M), column j mapping src
// of module j's file.
func (b *Builder) combinedRecord(det hid, name string, k kind, src string) {
	if b.err != nil {
		return
	}
	fill := recordFill(name)
	p, err := newDCPL(nil, k, unsafe.Pointer(&fill))
	if err != nil {
		b.fail(err)
		return
	}
	defer p.close()
	n, m := uint64(b.w.opts.Frames), uint64(len(b.w.master))
	vDims, vMax := []uint64{n, m}, []uint64{unlimited, m}
	sDims, sMax := []uint64{n}, []uint64{unlimited}
	if err := pinExtent(p, vDims, vMax, []uint64{1, m}); err != nil {
		b.fail(fmt.Errorf("create combined record %s: %w", name, err))
		return
	}
	for j, mod := range b.w.master {
		err := p.setVirtualBlocks(vDims, vMax, []uint64{0, uint64(j)}, []uint64{unlimited, 1},
			mod.File, src, sDims, sMax, []uint64{0}, []uint64{unlimited})
		if err != nil {
			b.fail(fmt.Errorf("create combined record %s: module %d: %w", name, mod.ID, err))
			return
		}
	}
	b.close(b.dataset(det, name, k, 0, vDims, vMax, p))
}

// absentSource is a dataset that no file holds: a virtual dataset's
// mapping of it reads as the virtual dataset's fill value.
const absentSource = "/h5ingest_absent"

// pinExtent adds to p, the creation properties of a virtual dataset of
// extent dims/max whose mappings follow their sources as they grow, a
// mapping of its last frame, a slab of shape block, to a source that
// never exists. A virtual dataset is at least as long as its fixed
// mappings reach, so the view keeps its N frames however short its
// sources are; and a mapping that follows its source reads the source up
// to the source's own end only, so frames past a short source's end read
// as the fill value (a fixed mapping reads past it: whatever lies beyond
// a module file's records, never missing). The pin is added first, so that
// a source that holds the last frame gives it.
func pinExtent(p dcpl, dims, max, block []uint64) error {
	start := make([]uint64, len(dims))
	start[0] = dims[0] - 1
	return p.setVirtualBlocks(dims, max, start, block, ".", absentSource, block, block, make([]uint64, len(block)), block)
}

// int32s creates a dataset of dims holding v and returns it.
func (b *Builder) int32s(loc hid, name string, dims []uint64, v []int32) hid {
	d := b.dataset(loc, name, kindI32, 0, dims, dims, dcpl{})
	b.write(d, name, kindI32, 0, ptr(v))
	return d
}

// readModules fills r.Modules from a master file's module descriptions.
func (r *Reader) readModules() error {
	ids, err := readColumn[int32](r, r.det+"/module_ids", kindI32, 1)
	if err != nil {
		return err
	}
	origin, err := readColumn[int32](r, r.det+"/module_origin", kindI32, 2)
	if err != nil {
		return err
	}
	size, err := readColumn[int32](r, r.det+"/module_shape", kindI32, 2)
	if err != nil {
		return err
	}
	g, err := openGroup(r.file, r.det)
	if err != nil {
		return err
	}
	defer closeID(g)
	files, err := readAttrStrings(g, "module_files")
	if err != nil {
		return err
	}
	if len(origin) != 2*len(ids) || len(size) != 2*len(ids) || len(files) != len(ids) {
		return fmt.Errorf("module descriptions of %d modules have %d offsets, %d sizes and %d files",
			len(ids), len(origin)/2, len(size)/2, len(files))
	}
	r.Modules = make([]MasterModule, len(ids))
	for i, id := range ids {
		r.Modules[i] = MasterModule{ID: int(id), File: files[i], Y: int(origin[2*i]), X: int(origin[2*i+1]),
			Height: int(size[2*i]), Width: int(size[2*i+1])}
	}
	return nil
}

// masterError returns the error of a method that a master file cannot
// answer: it names the modules and their files.
func (r *Reader) masterError(op string) error {
	var list []string
	for _, m := range r.Modules {
		list = append(list, fmt.Sprintf("%d (%s)", m.ID, m.File))
	}
	return fmt.Errorf("%s %s: %w, modules %v: read a module's file, or ModuleRecords", op, r.path, ErrMaster, list)
}

// ModuleRecords returns the per-frame records of module id as the master
// places them: frames that the module's file does not hold, past its end
// or in an absent file, read as missing. It reads the module's file itself
// (its name taken as the master stores it, relative to the master's
// directory) rather than the master's virtual records: a master written
// before its virtual datasets followed their sources to their ends maps a
// fixed N frames, which libhdf5 reads past the end of a shorter module
// file.
func (r *Reader) ModuleRecords(id int) ([]frame.Record, error) {
	i := slices.IndexFunc(r.Modules, func(m MasterModule) bool { return m.ID == id })
	if i < 0 {
		return nil, fmt.Errorf("records of module %d in %s: no such module", id, r.path)
	}
	out := make([]frame.Record, r.Frames)
	for j := range out {
		out[j].Status = frame.StatusMissing
	}
	file := r.Modules[i].File
	if !filepath.IsAbs(file) {
		file = filepath.Join(filepath.Dir(r.path), file)
	}
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	m, err := OpenPlain(file)
	if err != nil {
		return nil, fmt.Errorf("records of module %d in %s: %w", id, r.path, err)
	}
	defer m.Close()
	recs, err := m.Records()
	if err != nil {
		return nil, fmt.Errorf("records of module %d in %s: %w", id, r.path, err)
	}
	copy(out, recs)
	return out, nil
}
