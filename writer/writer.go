// Package writer writes detector frames into chunked HDF5 files in the
// layouts of spec/hdf5.md (nxtomo and cxi) and reads them back.
//
// A Writer stores chunks that the pipeline compressed itself with direct
// chunk writes (H5Dwrite_chunk), keeps the per-frame records in memory and
// writes them at each flush. The file is written under a temporary name in
// SWMR mode, so readers can follow the scan, and renamed to its final name
// by Close. A Reader opens such a file and gives the stack's geometry, the
// filter pipeline, the per-frame metadata and the stored chunks.
//
// The package calls the HDF5 C library (1.10.3 or newer) through a cgo
// layer of its own (h5.go, h5shim.c). The gonum.org/v1/hdf5 binding was
// tried first and left: it cannot pass a file access property list, so
// files it creates keep a superblock older than SWMR needs (version 3), and
// it lacks direct chunk writes, filters by id, extents and virtual datasets,
// which are most of what this package does.
//
// Of package writer, a layout's interface and what builds it (Layout,
// Builder, Node, Options, PerFrame and its Column values, NXtomo, CXI)
// are part of h5ingest's facility API; see docs/extending.md.
package writer

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/plan"
)

// Layout names.
const (
	LayoutNXtomo = "nxtomo" // NeXus NXtomo with a Data Exchange view
	LayoutCXI    = "cxi"    // CXI 1.5
)

// DefaultFlushInterval is the SWMR flush cadence used when
// Options.FlushInterval is zero.
const DefaultFlushInterval = time.Second

// Options describe the file a Writer creates.
type Options struct {
	Path      string // final name of the file
	Overwrite bool   // replace an existing file (and a stale temporary one)
	Layout    Layout // NXtomo, CXI or a facility's own

	// Frames is the number of frames of the scan plan, N; 0 makes every
	// per-frame dataset extendible, growing as frames arrive.
	Frames        int
	Height, Width int
	ElemSize      int // 2 (uint16) or 4 (uint32)

	// Filters is the pipeline the stored chunks went through, in order,
	// with cd_values exactly as they must be stored. Filters are declared
	// optional or mandatory as each says; a filter that libhdf5 cannot
	// load must be optional. Create turns libhdf5's plugin loading off
	// (process-wide) while it creates the stack, so that no plugin's
	// set_local callback rewrites the values, and fails if the stored
	// pipeline differs from this one.
	Filters []compress.Filter

	FlushInterval time.Duration // SWMR flush cadence; 0 means DefaultFlushInterval

	// The scan plan's values per frame, N values each (nil means
	// defaults: projections, angle 0, monitor 1, translation zeros); each
	// layout stores those it has (NXtomo the first three, CXI the
	// translations). With Frames == 0 they may have any length; later
	// frames take the defaults.
	ImageKey      []int8       // dark, flat or projection (package plan)
	RotationAngle []float64    // degrees
	Monitor       []float64    // beam monitor
	Translation   [][3]float64 // scan positions, metres

	Creator    string // program that wrote the file; default "h5ingest"
	Title      string // the entry's title
	SampleName string // the sample's name
	// ExperimentID is the proposal or experiment the scan belongs to:
	// the entry's experiment_identifier.
	ExperimentID string
	// UserMetadata is free-form metadata from the user or the control
	// system, kept under the entry's NXcollection user_metadata: a string
	// as a string, an integer (of any Go type, or a json.Number without
	// fraction or exponent) as an int64 (a uint64 above its range), any
	// other number as a float64, a boolean as h5py keeps one (an
	// enumeration FALSE, TRUE over int8), a map[string]any as an
	// NXcollection inside, anything else as its JSON text.
	UserMetadata map[string]any
	// Configuration is how the program was set up for the scan (the
	// merged profile, as YAML): the entry's program_name carries it, with
	// Creator's version.
	Configuration string
	Version       string    // the writing program's version, program_name's version
	PixelSize     float64   // metres, both axes
	Distance      float64   // sample to detector, metres
	Energy        float64   // photon energy, joules (cxi: source_1/energy; nxtomo: instrument/monochromator/energy in keV)
	StartTime     time.Time // the scan's start, start_time; zero means now
	// EndTime is the scan's end, end_time; zero means when Close writes
	// it (for a master file written before its modules end, its
	// creation). A replay gives both from its capture, so that its file
	// has the live scan's times.
	EndTime time.Time
	// Access, where not nil, is the mode and group the file gets as it
	// is made; nil: as the process makes it.
	Access *Access
	// Extra are datasets beside the frame stack that a processor fills
	// (WriteExtra); nil for none.
	Extra []Extra
}

// timeFormat is ISO 8601 with microseconds and the zone.
const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

// timeSize is the fixed string size of start_time and end_time.
const timeSize = 40

// extendibleChunk is the chunk length of per-frame datasets of
// extendible files.
const extendibleChunk = 4096

func (o *Options) setDefaults() {
	if o.FlushInterval == 0 {
		o.FlushInterval = DefaultFlushInterval
	}
	if o.Creator == "" {
		o.Creator = "h5ingest"
	}
	if o.StartTime.IsZero() {
		o.StartTime = time.Now()
	}
}

func (o *Options) validate() error {
	switch {
	case o.Path == "":
		return errors.New("no path")
	case o.Layout == nil:
		return errors.New("no layout")
	case o.Frames < 0:
		return fmt.Errorf("frame count %d is negative", o.Frames)
	case o.Height <= 0 || o.Width <= 0:
		return fmt.Errorf("frame size %dx%d is not positive", o.Height, o.Width)
	case o.ElemSize != 2 && o.ElemSize != 4:
		return fmt.Errorf("element size %d is not 2 or 4", o.ElemSize)
	case uint64(o.Height)*uint64(o.Width)*uint64(o.ElemSize) >= 1<<32:
		return fmt.Errorf("frame of %dx%dx%d bytes does not fit an HDF5 chunk (4 GiB)", o.Height, o.Width, o.ElemSize)
	case o.FlushInterval < 0:
		return fmt.Errorf("flush interval %v is negative", o.FlushInterval)
	}
	if o.Frames > 0 {
		for _, c := range []struct {
			name string
			n    int
		}{{"image keys", len(o.ImageKey)}, {"rotation angles", len(o.RotationAngle)},
			{"monitor values", len(o.Monitor)}, {"translations", len(o.Translation)}} {
			if c.n != 0 && c.n != o.Frames {
				return fmt.Errorf("%d %s for %d frames", c.n, c.name, o.Frames)
			}
		}
	}
	for i, k := range o.ImageKey {
		if k < plan.Projection || k > plan.Invalid {
			return fmt.Errorf("image key %d of frame %d is not 0 to 3", k, i)
		}
	}
	return o.validateExtras()
}

// Writer writes one scan's file. Its methods must be called from one
// goroutine at a time. The first failure of the file (an HDF5 error) sticks:
// later calls return it, except SetRecord of a frame without a chunk, which
// is still kept (see SetRecord). Bad arguments (a frame out of range) do
// not stick.
//
// A Writer holds its output file's lock from Create to Close (see
// LockName), and keeps room on the file system for its records, which it
// gives back when the file fails, so that a full disk still leaves room to
// write them and close the file.
type Writer struct {
	opts Options
	temp string    // name while writing
	lock *fileLock // the output file's lock, held until Close

	file, stack, endTime hid
	timeType             hid            // fixed-length string type of the times
	cols                 []*column      // per-frame datasets written at flushes
	extendible           bool           // per-frame datasets grow
	frames               int            // current extent of the stack
	master               []MasterModule // modules of a master file; nil for a module's own file
	extras               []*extra       // Options.Extra, open
	// created is a master file's creation time; zero for a module's own
	// file, which was created at its start.
	created time.Time
	// ended is what Close wrote as end_time; zero until then.
	ended time.Time

	// mu guards the Writer: its flush timer (see tick) runs on a
	// goroutine of its own.
	mu        sync.Mutex
	flusher   *time.Timer // flushes a file left unwritten; nil in a master file
	off       chunkOffset
	lastFlush time.Time
	dirty     bool // records changed since the last flush
	unflushed bool // chunks written since the last flush
	renamed   bool // the file has its final name
	err       error

	// per frame, in memory
	frameNumber []uint64
	timestamp   []uint64
	rawCRC      []uint32
	dataCRC     []uint32
	status      []uint8
	imageKey    []int8
	angle       []float64
	monitor     []float64
	translation [][3]float64
	theta       []float64 // angles of the projections
}

// ErrExists is returned, wrapped, by Create and CreateMaster when the file,
// or the temporary file of a scan to it, exists and Overwrite is not set.
var ErrExists = errors.New("exists")

// Access is the permission bits and owner group of a file: what an
// operator gives a service's files so that the beamline's users can read
// them whatever the service's umask.
type Access struct {
	Mode os.FileMode // permission bits; 0 leaves them as made
	GID  int         // owner group id; -1 leaves it as made
}

// apply gives the file at path a's mode and group, the group first (a
// change of owner may clear bits the mode then sets again).
func (a *Access) apply(path string) error {
	if a == nil {
		return nil
	}
	if a.GID >= 0 {
		if err := os.Chown(path, -1, a.GID); err != nil {
			return fmt.Errorf("give the file group %d: %w (the process must belong to the group, unless it runs as root)", a.GID, err)
		}
	}
	if a.Mode != 0 {
		if err := os.Chmod(path, a.Mode.Perm()); err != nil {
			return fmt.Errorf("give the file mode %#o: %w", a.Mode.Perm(), err)
		}
	}
	return nil
}

// TempName returns the name under which the file for path is written:
// a hidden name beside it.
func TempName(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".part")
}

// Create creates the whole layout of the file under a temporary name beside
// opts.Path and starts SWMR writing. It refuses an existing opts.Path, or a
// temporary file left by an interrupted scan, unless opts.Overwrite is set,
// and always refuses, with a *LockedError and before touching any file, a
// file that another process writes (see LockName).
func Create(opts Options) (*Writer, error) {
	opts.setDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("create %s: %w", opts.Path, err)
	}
	w := &Writer{opts: opts, temp: TempName(opts.Path), extendible: opts.Frames == 0, frames: opts.Frames}
	// The lock comes before anything is looked at or touched: a scan
	// writing this file keeps its .part and its final name.
	lock, err := lockOutput(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", opts.Path, err)
	}
	fail := func(err error) (*Writer, error) {
		if w.file > 0 {
			w.closeAll()
			os.Remove(w.temp)
		}
		lock.release()
		return nil, fmt.Errorf("create %s: %w", opts.Path, err)
	}
	for _, name := range []string{opts.Path, w.temp} {
		if _, err := os.Lstat(name); err == nil && !opts.Overwrite {
			return fail(fmt.Errorf("%s %w", name, ErrExists))
		}
	}
	w.initFrames()
	f, err := createTemp(w.temp, opts.Overwrite)
	if err != nil {
		return fail(err)
	}
	w.file = f
	if err := opts.Access.apply(w.temp); err != nil {
		return fail(err)
	}
	if err := w.build(); err != nil {
		return fail(err)
	}
	if err := w.createExtras(); err != nil {
		return fail(err)
	}
	if err := startSWMR(w.file, w.temp); err != nil {
		return fail(err)
	}
	if err := lock.reserve(reserveFor(0)); err != nil {
		return fail(err)
	}
	w.lock = lock
	w.lastFlush = time.Now()
	w.mu.Lock() // the timer may fire before it is kept
	w.flusher = time.AfterFunc(w.opts.FlushInterval, w.tick)
	w.mu.Unlock()
	return w, nil
}

// tick flushes the file when records or chunks changed since the last
// flush and the flush interval has passed with no write to flush them: a
// pause in a scan (between its flats and its projections, after its last
// planned frame) still reaches readers that follow the file and a
// recovery after a crash within one interval. It runs on the timer's
// goroutine, under mu; libhdf5 is built thread-safe.
func (w *Writer) tick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file <= 0 || w.err != nil {
		return
	}
	// Within one interval of a change, the file is flushed: by a write
	// (WriteChunk) or here.
	wait := w.opts.FlushInterval - time.Since(w.lastFlush)
	if wait <= 0 {
		if w.dirty || w.unflushed {
			// A failure is the Writer's sticky error, which the next
			// write or Close returns.
			w.flush()
		}
		wait = w.opts.FlushInterval
	}
	w.flusher.Reset(max(wait, time.Millisecond))
}

// createTemp creates the HDF5 file temp, a scan's temporary name, as a new
// file: never through a symbolic link or into a file another name shares.
// With overwrite, what is at temp (a file of an interrupted scan, or a
// link planted there) is removed first, the link itself and not what it
// points to; a name that appears between the removal and the creation
// fails the creation.
func createTemp(temp string, overwrite bool) (hid, error) {
	if overwrite {
		if err := os.Remove(temp); err != nil && !errors.Is(err, os.ErrNotExist) {
			return -1, fmt.Errorf("remove the temporary file of an earlier scan: %w", err)
		}
	}
	return createFile(temp, false)
}

// initFrames fills the per-frame slices for the planned frames.
func (w *Writer) initFrames() {
	n := w.opts.Frames
	w.frameNumber = make([]uint64, 0, n)
	w.timestamp = make([]uint64, 0, n)
	w.rawCRC = make([]uint32, 0, n)
	w.dataCRC = make([]uint32, 0, n)
	w.status = make([]uint8, 0, n)
	w.imageKey = make([]int8, 0, n)
	w.angle = make([]float64, 0, n)
	w.monitor = make([]float64, 0, n)
	w.translation = make([][3]float64, 0, n)
	w.grow(n)
}

// grow extends the per-frame slices to n frames with the planned or
// default values.
func (w *Writer) grow(n int) {
	o := &w.opts
	for i := len(w.frameNumber); i < n; i++ {
		w.frameNumber = append(w.frameNumber, uint64(i))
		w.timestamp = append(w.timestamp, 0)
		w.rawCRC = append(w.rawCRC, 0)
		w.dataCRC = append(w.dataCRC, 0)
		w.status = append(w.status, frame.StatusMissing)
		key, angle, mon, tr := int8(plan.Projection), 0.0, 1.0, [3]float64{}
		if i < len(o.ImageKey) {
			key = o.ImageKey[i]
		}
		if i < len(o.RotationAngle) {
			angle = o.RotationAngle[i]
		}
		if i < len(o.Monitor) {
			mon = o.Monitor[i]
		}
		if i < len(o.Translation) {
			tr = o.Translation[i]
		}
		w.imageKey = append(w.imageKey, key)
		w.angle = append(w.angle, angle)
		w.monitor = append(w.monitor, mon)
		w.translation = append(w.translation, tr)
		if key == plan.Projection {
			w.theta = append(w.theta, angle)
		}
	}
}

// WriteChunk stores chunk, the frame's image after the filter pipeline
// (mask bit i set means filter i was skipped for it), as the chunk of frame
// index frame, and flushes the file when the flush interval has passed.
// In a file of fixed length, frame must be below Options.Frames; an
// extendible file grows to hold it. It does not allocate, except to grow
// an extendible file.
func (w *Writer) WriteChunk(frame int, mask uint32, chunk []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if frame < 0 || (!w.extendible && frame >= w.frames) {
		return fmt.Errorf("write chunk of frame %d to %s: frame outside 0 to %d", frame, w.opts.Path, w.frames-1)
	}
	if frame >= w.frames {
		if err := w.extend(frame + 1); err != nil {
			return w.fail(fmt.Errorf("write chunk of frame %d to %s: %w", frame, w.opts.Path, err))
		}
	}
	w.off.setFrame(frame)
	if err := writeChunk(w.stack, &w.off, mask, chunk); err != nil {
		return w.fail(fmt.Errorf("write chunk of frame %d to %s: %w", frame, w.opts.Path, err))
	}
	w.unflushed = true
	if time.Since(w.lastFlush) >= w.opts.FlushInterval {
		return w.flush()
	}
	return nil
}

// extend grows the stack (and the in-memory records) to n frames.
func (w *Writer) extend(n int) error {
	if err := setExtent(w.stack, "frame stack", []uint64{uint64(n), uint64(w.opts.Height), uint64(w.opts.Width)}); err != nil {
		return err
	}
	w.frames = n
	w.grow(n)
	w.dirty = true
	return w.lock.reserve(reserveFor(n))
}

// SetRecord keeps r as the record of frame index frame; records reach the
// file at the next flush. Frames without a record stay frame.StatusMissing. In an
// extendible file a record may come before its frame's chunk.
//
// After a failure of the file, SetRecord still keeps the records of frames
// that have no chunk (missing or rejected), and returns nil for them, so
// that Close writes records of the whole scan as the pipeline saw it;
// other records return the failure.
func (w *Writer) SetRecord(frame int, r frame.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if frame < 0 || (!w.extendible && frame >= w.frames) {
		if w.err != nil {
			return w.err
		}
		return fmt.Errorf("set record of frame %d in %s: frame outside 0 to %d", frame, w.opts.Path, w.frames-1)
	}
	if w.err != nil {
		if !chunkless(r.Status) {
			return w.err
		}
		// Kept in memory only; Close grows the file to hold it.
		w.grow(frame + 1)
	} else if frame >= w.frames {
		if err := w.extend(frame + 1); err != nil {
			return w.fail(fmt.Errorf("set record of frame %d in %s: %w", frame, w.opts.Path, err))
		}
	}
	w.timestamp[frame] = r.Timestamp
	w.rawCRC[frame] = r.RawCRC
	w.dataCRC[frame] = r.DataCRC
	w.status[frame] = r.Status
	w.dirty = true
	return nil
}

// chunkless reports whether a frame of status s has no chunk.
func chunkless(s uint8) bool { return s == frame.StatusMissing || s == frame.StatusRejected }

// Flush writes the records and flushes the file, so that SWMR readers see
// every chunk written so far. Between writes the Writer also flushes by
// itself, once the flush interval has passed after a change.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flush()
}

func (w *Writer) flush() error {
	if w.err != nil {
		return w.err
	}
	if w.dirty {
		if err := w.writeColumns(); err != nil {
			return w.fail(fmt.Errorf("flush %s: %w", w.opts.Path, err))
		}
		w.dirty = false
	}
	if err := flushFile(w.file, w.temp); err != nil {
		return w.fail(err)
	}
	w.lastFlush = time.Now()
	w.unflushed = false
	return nil
}

// Close writes the records and end_time, flushes, closes the file and
// renames it to its final name. A Writer that failed still closes and
// renames what it has, and Close returns the first error. Close is
// idempotent in that a second call returns the first call's result.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file <= 0 {
		return w.err
	}
	if w.flusher != nil {
		w.flusher.Stop()
	}
	defer w.lock.release()
	// The records go out even after a failure: they hold only frames whose
	// chunks were written, so the file keeps every whole frame it has. The
	// room reserved beside the file (see fileLock.reserve) was given back
	// at the failure, for them and for the metadata that closing writes.
	if n := len(w.status); w.extendible && n > w.frames {
		// Records of frames the pipeline saw after the failure.
		if err := setExtent(w.stack, "frame stack", []uint64{uint64(n), uint64(w.opts.Height), uint64(w.opts.Width)}); err != nil {
			w.fail(fmt.Errorf("close %s: %w", w.opts.Path, err))
			w.cut(w.frames)
		} else {
			w.frames = n
		}
	}
	if err := w.writeColumns(); err != nil {
		w.fail(fmt.Errorf("close %s: %w", w.opts.Path, err))
	}
	if w.err == nil {
		ended := cmp.Or(w.opts.EndTime, time.Now())
		end := fixedString(ended.Format(timeFormat), timeSize)
		if err := writeAll(w.endTime, "end_time", 0, w.timeType, unsafe.Pointer(&end[0])); err != nil {
			w.fail(fmt.Errorf("close %s: %w", w.opts.Path, err))
		} else {
			w.ended = ended
		}
	}
	if err := w.closeAll(); err != nil {
		if w.err == nil {
			w.err = fmt.Errorf("close %s: %w", w.opts.Path, err)
		}
		// The file may still be marked open for writing, which only SWMR
		// readers accept: clear the mark where the library can (as
		// recover does), so that every reader opens what the file holds.
		clearStatus(w.temp)
	}
	if err := w.rename(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// Times returns what the file records as the scan's start and end: its
// start_time, and the end_time that Close wrote (zero before Close, or
// where Close could not write it).
func (w *Writer) Times() (start, end time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.opts.StartTime, w.ended
}

// Discard closes the Writer and removes its file and lock, for a scan
// refused as it started, before its first frame: no file is left under
// either name. After Close, or a second time, it does nothing and returns
// the Writer's error.
func (w *Writer) Discard() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file <= 0 {
		return w.err
	}
	if w.flusher != nil {
		w.flusher.Stop()
	}
	defer w.lock.release()
	err := w.closeAll()
	if rerr := os.Remove(w.temp); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		err = fmt.Errorf("discard %s: %w", w.temp, err)
	}
	if w.err == nil {
		w.err = cmp.Or(err, fmt.Errorf("%s: discarded before its first frame", w.opts.Path))
	}
	return err
}

// Name returns the name of the Writer's file: its temporary name (see
// TempName) until Close has given it its final name, and still after a
// Close that could not (a file appeared at the final name meanwhile).
func (w *Writer) Name() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.renamed {
		return w.opts.Path
	}
	return w.temp
}

// AppearedError is returned by Close when a file appeared at the final
// name while the scan wrote: that file is left as it is, and the scan's
// file keeps its temporary name, Temp.
type AppearedError struct {
	Path string // the final name, taken by another file
	Temp string // the scan's file
}

func (e *AppearedError) Error() string {
	return fmt.Sprintf("close %s: file appeared while writing; the scan stays in %s", e.Path, e.Temp)
}

// rename moves the closed file to its final name, without replacing an
// existing file unless Overwrite is set.
func (w *Writer) rename() error {
	if w.opts.Overwrite {
		if err := os.Rename(w.temp, w.opts.Path); err != nil {
			return fmt.Errorf("close %s: %w", w.opts.Path, err)
		}
		w.renamed = true
		return nil
	}
	if err := os.Link(w.temp, w.opts.Path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return &AppearedError{Path: w.opts.Path, Temp: w.temp}
		}
		// No hard links on this file system: a rename that replaces
		// nothing.
		if err := renameNoReplace(w.temp, w.opts.Path); err != nil {
			if errors.Is(err, os.ErrExist) {
				return &AppearedError{Path: w.opts.Path, Temp: w.temp}
			}
			return fmt.Errorf("close %s: %w", w.opts.Path, err)
		}
		w.renamed = true
		return nil
	}
	// The file has its final name, whether or not the temporary one goes.
	w.renamed = true
	if err := os.Remove(w.temp); err != nil {
		return fmt.Errorf("close %s: remove temporary name: %w", w.opts.Path, err)
	}
	return nil
}

// renameNoReplace renames from to to unless to exists (renameat2 with
// RENAME_NOREPLACE); on a file system without it, it renames after a last
// check that to does not exist.
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EEXIST) {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: os.ErrExist}
	}
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		if err != nil {
			return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
		}
		return nil
	}
	if _, err := os.Lstat(to); err == nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: os.ErrExist}
	}
	return os.Rename(from, to)
}

// fail makes err the Writer's sticky error (unless it has one) and gives
// back the room reserved for the records, which may be what the failure
// lacks (a full disk).
func (w *Writer) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	w.lock.unreserve()
	return w.err
}

// cut shortens the per-frame slices to n frames.
func (w *Writer) cut(n int) {
	if n >= len(w.status) {
		return
	}
	w.frameNumber, w.timestamp, w.rawCRC, w.dataCRC, w.status = w.frameNumber[:n], w.timestamp[:n], w.rawCRC[:n], w.dataCRC[:n], w.status[:n]
	projections := 0
	for _, k := range w.imageKey[n:] {
		if k == plan.Projection {
			projections++
		}
	}
	w.imageKey, w.angle, w.monitor, w.translation = w.imageKey[:n], w.angle[:n], w.monitor[:n], w.translation[:n]
	w.theta = w.theta[:len(w.theta)-projections]
}

// closeAll closes every identifier the Writer holds, the file last, and
// returns the first error.
func (w *Writer) closeAll() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, c := range w.cols {
		keep(closeID(c.id))
		c.id = 0
	}
	keep(w.closeExtras())
	keep(closeID(w.stack))
	keep(closeID(w.endTime))
	keep(closeID(w.timeType))
	keep(closeID(w.file))
	w.stack, w.endTime, w.timeType, w.file = 0, 0, 0, 0
	return first
}
