package scan

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/registry"
	"h5ingest/writer"
)

// errBad is wrapped by the error of a file with bad chunks or records,
// each of which Verify's report lists.
var errBad = errors.New("bad chunks or records")

// DefaultVerifyStall is how long Verify waits for one step of its reading
// (opening the file, its records, one chunk) before it gives up.
const DefaultVerifyStall = 2 * time.Minute

// verifySteps counts the steps of verify's reading (a file opened, a
// chunk read); the watchdog of bounded reads it.
var verifySteps atomic.Int64

// verifyStep, where a test sets it, runs at every step: it stands in for an
// HDF5 call that does not return.
var verifyStep atomic.Pointer[func()]

// step records progress of verify's reading.
func step() {
	verifySteps.Add(1)
	if f := verifyStep.Load(); f != nil {
		(*f)()
	}
}

// VerifyReport is what Verify finds in a file: of a module's file, its
// frames, the chunks it checked and what does not hold up; of a master,
// each module file's report.
type VerifyReport struct {
	Path    string
	Frames  int          // frames in the stack
	Checked int          // chunks decompressed and compared with their record's CRC-32C
	Counts  frame.Counts // frames by recorded status
	Bad     []Finding    // chunks, records and layout that do not hold up, in frame order (the layout's first)

	// Unrecorded lists the frames that have a chunk but no record, as a
	// writer stopped mid-scan leaves them: they count as missing.
	Unrecorded []int

	// Modules is, of a master, the verification of each module file it
	// names, in the master's order; it is nil of a module's file.
	Modules []ModuleVerify
}

// A Finding is a chunk, record or part of the layout that Verify found
// does not hold up.
type Finding struct {
	Frame  int    // the frame; -1 for the file's layout
	Detail string // what is wrong
}

// String returns the finding as Verify's caller shows it: "frame 3: data
// CRC 1a2b3c4d, recorded 5e6f7a8b", or of the layout its Detail alone.
func (f Finding) String() string {
	if f.Frame < 0 {
		return f.Detail
	}
	return fmt.Sprintf("frame %d: %s", f.Frame, f.Detail)
}

// ModuleVerify is the verification of one module file of a master.
type ModuleVerify struct {
	ID   int    // the module's id
	Path string // the module's file
	// Report is the file's report; nil when the file could not be
	// verified (absent, unreadable, its records short), and then Err says
	// why.
	Report *VerifyReport
	// Err is the file's outcome, as Verify returns it for the file.
	Err error
}

// Verify proves the file at path, a module's file or a master (and then
// every module file it names), against its records: every written chunk
// decompressed with the codec of stages that reads the file's filters and
// its CRC-32C compared with the frame's data_crc32c, the layout complete,
// records and chunks in agreement. It returns what it finds, and nil when
// every frame is good, ErrIncomplete when the file is sound but some
// frames are missing, corrupt or rejected (or it holds none), and an
// error for a bad chunk or layout (listed in the report's Bad) or a file
// that cannot be read. The report is nil when the file could not be
// verified: it could not be read, or the reading stopped.
//
// Verify reads on a goroutine of its own and gives up when the reading
// makes no progress for stall (a damaged file can make the HDF5 library
// stop answering), or when ctx is done. HDF5 calls cannot be interrupted:
// a stuck goroutine is left behind, holding the library, and the caller
// should call the library no more (a command exits).
func Verify(ctx context.Context, stages *registry.Registry, path string, stall time.Duration) (*VerifyReport, error) {
	return VerifyCounting(ctx, stages, path, stall, nil)
}

// VerifyCounting is Verify that counts in progress, where not nil, the
// frames it reads as it reads them, for a command to show.
func VerifyCounting(ctx context.Context, stages *registry.Registry, path string, stall time.Duration, progress *VerifyProgress) (*VerifyReport, error) {
	return bounded(ctx, path, stall, func() (*VerifyReport, error) { return verify(stages, path, progress, false) })
}

// VerifyProgress counts the frames Verify has read, of those it is to
// read. Its methods may be called from any goroutine; a nil
// *VerifyProgress counts nothing.
type VerifyProgress struct{ read, total atomic.Int64 }

// Frames returns the frames read so far and those to read (0 until the
// file is open; of a master, of every module file).
func (p *VerifyProgress) Frames() (read, total int) {
	return int(p.read.Load()), int(p.total.Load())
}

// count adds n to the frames to read.
func (p *VerifyProgress) count(n int) {
	if p != nil {
		p.total.Add(int64(n))
	}
}

// readOne counts a frame read.
func (p *VerifyProgress) readOne() {
	if p != nil {
		p.read.Add(1)
	}
}

// bounded runs read, which reads the file at path, on a goroutine of its
// own, as Verify describes: it gives up when the reading makes no
// progress for stall or ctx is done, and then returns the zero R.
func bounded[R any](ctx context.Context, path string, stall time.Duration, read func() (R, error)) (R, error) {
	type result struct {
		r   R
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := read()
		done <- result{r, err}
	}()
	tick := time.NewTicker(min(stall/4, time.Second))
	defer tick.Stop()
	last, since := verifySteps.Load(), time.Now()
	var zero R
	for {
		select {
		case res := <-done:
			return res.r, res.err
		case <-ctx.Done():
			return zero, fmt.Errorf("verify %s: stopped (%v) before the end", path, context.Cause(ctx))
		case <-tick.C:
			if n := verifySteps.Load(); n != last {
				last, since = n, time.Now()
				continue
			}
			if time.Since(since) >= stall {
				return zero, fmt.Errorf("verify %s: reading the file made no progress for %v: the file is damaged or its storage does not answer", path, stall)
			}
		}
	}
}

// verify proves path as Verify does, with no bound on the time it takes.
// counted says its frames are counted in progress already: a module file
// of a master.
func verify(stages *registry.Registry, path string, progress *VerifyProgress, counted bool) (*VerifyReport, error) {
	if stages == nil {
		return nil, errNoRegistry
	}
	if _, err := os.Stat(path); err != nil {
		return nil, unreadable(err, "file unreadable", "an HDF5 file")
	}
	step()
	r, err := writer.OpenPlain(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	step()
	if r.Modules != nil {
		progress.count(r.Frames * len(r.Modules))
		return verifyMaster(stages, path, r.Modules, r.Frames, progress)
	}
	if !counted {
		progress.count(r.Frames)
	}
	rep, err := verifyFile(r, stages, progress)
	if err != nil {
		return nil, fmt.Errorf("verify %s: %w", path, err)
	}
	rep.Path = path
	slices.SortStableFunc(rep.Bad, func(a, b Finding) int { return cmp.Compare(a.Frame, b.Frame) })
	switch {
	case len(rep.Bad) > 0:
		return rep, fmt.Errorf("%s: %d %w", path, len(rep.Bad), errBad)
	case rep.Frames == 0, rep.Counts.OK != rep.Frames:
		return rep, ErrIncomplete
	}
	return rep, nil
}

// verifyMaster verifies every module file of a master of frames frames
// and returns the worst outcome: a module file that is missing or bad
// fails the master, and one that holds fewer frames than the master makes
// it incomplete (the master reads the frames past its end as missing).
func verifyMaster(stages *registry.Registry, path string, modules []writer.MasterModule, frames int, progress *VerifyProgress) (*VerifyReport, error) {
	rep := &VerifyReport{Path: path, Modules: make([]ModuleVerify, 0, len(modules))}
	var worst error
	for _, m := range modules {
		file := m.File
		if !filepath.IsAbs(file) {
			file = filepath.Join(filepath.Dir(path), file)
		}
		mr, err := verify(stages, file, progress, true)
		if err == nil && mr != nil && mr.Frames < frames {
			err = fmt.Errorf("%s holds %d of the master's %d frames: %w", file, mr.Frames, frames, ErrIncomplete)
		}
		rep.Modules = append(rep.Modules, ModuleVerify{ID: m.ID, Path: file, Report: mr, Err: err})
		if err != nil && !errors.Is(err, ErrIncomplete) && !errors.Is(err, errBad) {
			err = fmt.Errorf("module %d: %w", m.ID, err)
		}
		worst = worse(worst, err)
	}
	return rep, worst
}

// chunkCheck is one chunk handed to a verification worker.
type chunkCheck struct {
	n    int
	data []byte
	want uint32
}

// verifyFile checks the layout, then every frame's record and chunk.
// Chunks are read on this goroutine (the HDF5 library is not used
// concurrently) and decompressed on one worker per core.
func verifyFile(r *writer.Reader, stages *registry.Registry, progress *VerifyProgress) (*VerifyReport, error) {
	res := &VerifyReport{Frames: r.Frames}
	for _, p := range r.MissingPaths() {
		res.Bad = append(res.Bad, Finding{-1, fmt.Sprintf("layout %s: %s is missing", r.Layout, p)})
	}
	records, err := r.Records()
	if err != nil {
		return nil, err
	}
	step()
	if len(records) != r.Frames {
		return nil, fmt.Errorf("%d records for %d frames", len(records), r.Frames)
	}
	var mu sync.Mutex
	report := func(n int, format string, args ...any) {
		mu.Lock()
		res.Bad = append(res.Bad, Finding{n, fmt.Sprintf(format, args...)})
		mu.Unlock()
	}
	chk, err := startChecker(r, stages, report)
	if err != nil {
		return nil, err
	}
	for n, rec := range records {
		res.Counts.Add(rec.Status)
		if rec.Status > frame.StatusRejected {
			report(n, "unknown status %d", rec.Status)
		}
		data, mask, err := r.ReadChunk(n, chk.buffer())
		step()
		progress.readOne()
		written := frame.Written(rec.Status)
		switch {
		case errors.Is(err, writer.ErrNoChunk):
			if written {
				report(n, "recorded as written (status %d) but has no chunk", rec.Status)
			}
			chk.done(data)
		case err != nil:
			chk.wait()
			return nil, err
		case rec.Status == frame.StatusMissing:
			// The writer stored the chunk but stopped (killed, or the disk
			// filled) before its record reached the file: nothing vouches
			// for it, so the frame stays missing.
			res.Unrecorded = append(res.Unrecorded, n)
			chk.done(data)
		case !written:
			report(n, "recorded with status %d but has a chunk", rec.Status)
			chk.done(data)
		case mask != 0:
			report(n, "chunk skipped filters (mask %#x)", mask)
			chk.done(data)
		default:
			res.Checked++
			chk.check(chunkCheck{n: n, data: data, want: rec.DataCRC})
		}
	}
	chk.wait()
	return res, nil
}

// checker decompresses chunks on a goroutine per core and reports each
// whose image is not a frame's size or not the CRC its record holds. Its
// chunk buffers go round: buffer lends one, which comes back through
// check or done.
type checker struct {
	work chan chunkCheck
	free chan []byte
	wg   sync.WaitGroup
}

// startChecker starts the checker of the chunks of r, reporting through
// report.
func startChecker(r *writer.Reader, stages *registry.Registry, report func(n int, format string, args ...any)) (*checker, error) {
	codecs := make([]compress.Codec, runtime.GOMAXPROCS(0))
	for i := range codecs {
		var err error
		if codecs[i], err = stages.ReadCodec(r.Filters, r.ElemSize); err != nil {
			return nil, err
		}
	}
	imageSize := r.Height * r.Width * r.ElemSize
	c := &checker{work: make(chan chunkCheck, len(codecs)), free: make(chan []byte, 2*len(codecs))}
	for range cap(c.free) {
		c.free <- nil
	}
	for _, codec := range codecs {
		c.wg.Go(func() {
			var img []byte
			for cc := range c.work {
				var err error
				img, err = codec.Decode(img[:0], cc.data)
				switch {
				case err != nil:
					report(cc.n, "chunk does not decompress: %v", err)
				case len(img) != imageSize:
					report(cc.n, "chunk decompresses to %d bytes, a frame is %d", len(img), imageSize)
					img = nil // what a codec grew past a frame is not kept
				case frame.Checksum(img) != cc.want:
					report(cc.n, "data CRC %08x, recorded %08x", frame.Checksum(img), cc.want)
				}
				c.free <- cc.data
			}
		})
	}
	return c, nil
}

// buffer lends a chunk buffer, waiting for one to come back if need be.
func (c *checker) buffer() []byte { return (<-c.free)[:0] }

// check has a chunk checked; its buffer comes back once it is.
func (c *checker) check(cc chunkCheck) { c.work <- cc }

// done gives back a buffer whose chunk is not checked.
func (c *checker) done(buf []byte) { c.free <- buf }

// wait waits for the chunks given to check to be checked.
func (c *checker) wait() {
	close(c.work)
	c.wg.Wait()
}

// ErrNotRecovered is wrapped by the error of a file recover left as it
// was: it cannot be read as a scan's file, or it is not one recover may
// rename.
var ErrNotRecovered = errors.New("left as it was")

// RecoverReport is what Recover did: the temporary file it renamed, the
// final name the file now has, and the verification of it.
type RecoverReport struct {
	Temp   string        // the temporary file, as it was named
	Final  string        // the file's final name
	Verify *VerifyReport // as Verify reports it; nil when it could not be verified
}

// Recover finishes the file of a scan whose writer was killed (see
// writer.Recover): path is its temporary file, or its final name when the
// temporary file exists. It first opens the temporary file read-only and
// checks its layout (its stack, the datasets of its layout, a record per
// frame); a file that fails (empty, damaged) keeps its temporary name,
// untouched, and the error wraps ErrNotRecovered. So does a temporary name
// that is a symbolic link: recover renames files, not links. Otherwise it
// renames the file and verifies it under its final name as Verify does,
// and returns what it did with Verify's outcome. The report is nil when
// the file was not renamed.
func Recover(ctx context.Context, stages *registry.Registry, path string, stall time.Duration) (*RecoverReport, error) {
	if _, ok := writer.FinalName(path); !ok {
		if temp := writer.TempName(path); fileExists(temp) {
			path = temp
		}
	}
	if info, err := os.Lstat(path); err == nil && info.Mode()&os.ModeSymlink != 0 {
		return nil, fmt.Errorf("recover %s: a symbolic link: %w (run recover on the file it points to, under its own .NAME.part name)", path, ErrNotRecovered)
	}
	if final, ok := writer.FinalName(path); ok && fileExists(path) {
		// A scan that still writes the file is named before the file is
		// read: mid-flush, it may not read as a whole file.
		if err := writer.CheckUnlocked(final); err != nil {
			return nil, fmt.Errorf("recover %s: %w", path, err)
		}
		_, err := bounded(ctx, path, stall, func() (struct{}, error) { return struct{}{}, checkLayout(path) })
		if err != nil {
			return nil, fmt.Errorf("recover %s: %w: %w", path, ErrNotRecovered, err)
		}
	}
	final, err := writer.Recover(path)
	if err != nil {
		return nil, err
	}
	rep := &RecoverReport{Temp: path, Final: final}
	rep.Verify, err = Verify(ctx, stages, final, stall)
	return rep, err
}

// checkLayout opens the scan's file at path read-only and checks what
// recover needs of it before renaming it: a frame stack, every dataset of
// its layout, records that read back, one per frame, and a chunk index
// that finds every frame's chunk (or none): each chunk is read, not
// checked. A damaged chunk is verify's to name; damaged metadata that
// would leave the file unreadable under its final name is refused here.
func checkLayout(path string) error {
	step()
	r, err := writer.OpenPlain(path)
	if err != nil {
		return fmt.Errorf("not readable as a scan's file: %w", err)
	}
	defer r.Close()
	step()
	if r.Modules != nil {
		return errors.New("a master file: recover finishes module files, whose scans write them")
	}
	if missing := r.MissingPaths(); len(missing) > 0 {
		return fmt.Errorf("layout %s: %s missing", r.Layout, strings.Join(missing, ", "))
	}
	records, err := r.Records()
	if err != nil {
		return fmt.Errorf("records: %w", err)
	}
	step()
	if len(records) != r.Frames {
		return fmt.Errorf("%d records for %d frames", len(records), r.Frames)
	}
	var buf []byte
	for n := range r.Frames {
		data, _, err := r.ReadChunk(n, buf[:0])
		if err != nil && !errors.Is(err, writer.ErrNoChunk) {
			return err
		}
		buf = data
		step()
	}
	return nil
}
