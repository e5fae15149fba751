package scan

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
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
// each of which Verify listed.
var errBad = errors.New("bad chunks or records")

// DefaultVerifyStall is how long Verify waits for one step of its reading
// (opening the file, its records, one chunk) before it gives up.
const DefaultVerifyStall = 2 * time.Minute

// verifySteps counts the steps of verify's reading (a file opened, a
// chunk read); the watchdog of verifyBounded reads it.
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

// Verify proves the file at path, a module's file or a master (and then
// every module file it names), against its records: every written chunk
// decompressed with h5ingest's own codecs and its CRC-32C compared with
// the frame's data_crc32c, the layout complete, records and chunks in
// agreement. It writes what it finds on out, a line per problem and one
// summing up. It returns nil when every frame is good, ErrIncomplete when
// the file is sound but some frames are missing, corrupt or rejected (or
// it holds none), and an error for a bad chunk or layout or a file that
// cannot be read.
//
// Verify reads on a goroutine of its own and gives up when the reading
// makes no progress for stall (a damaged file can make the HDF5 library
// stop answering), or when ctx is done. HDF5 calls cannot be interrupted:
// a stuck goroutine is left behind, holding the library, and the caller
// should call the library no more (a command exits).
func Verify(ctx context.Context, out io.Writer, stages *registry.Registry, path string, stall time.Duration) error {
	return bounded(ctx, out, path, stall, func(w io.Writer) error { return verify(w, stages, path) })
}

// bounded runs read, which reads the file at path and writes on the
// writer it is given, on a goroutine of its own, as Verify describes: it
// gives up when the reading makes no progress for stall or ctx is done.
func bounded(ctx context.Context, out io.Writer, path string, stall time.Duration, read func(io.Writer) error) error {
	gated := &gatedWriter{w: out}
	done := make(chan error, 1)
	go func() { done <- read(gated) }()
	tick := time.NewTicker(min(stall/4, time.Second))
	defer tick.Stop()
	last, since := verifySteps.Load(), time.Now()
	for {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			gated.cut()
			return fmt.Errorf("verify %s: stopped (%v) before the end", path, context.Cause(ctx))
		case <-tick.C:
			if n := verifySteps.Load(); n != last {
				last, since = n, time.Now()
				continue
			}
			if time.Since(since) >= stall {
				gated.cut()
				return fmt.Errorf("verify %s: reading the file made no progress for %v: the file is damaged or its storage does not answer", path, stall)
			}
		}
	}
}

// gatedWriter passes writes on until cut, and drops them after.
type gatedWriter struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return len(p), nil
	}
	return g.w.Write(p)
}

func (g *gatedWriter) cut() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// verifyResult sums up a verification.
type verifyResult struct {
	frames  int
	checked int          // chunks decompressed and compared
	bad     []problem    // chunks or records that do not hold up
	counts  frame.Counts // frames per recorded status
	// unrecorded lists frames with a chunk but no record: the writer
	// stopped between the two.
	unrecorded []int
}

// verify proves path as Verify does, with no bound on the time it takes.
func verify(out io.Writer, stages *registry.Registry, path string) error {
	if stages == nil {
		return errNoRegistry
	}
	if _, err := os.Stat(path); err != nil {
		return err
	}
	step()
	r, err := writer.OpenPlain(path)
	if err != nil {
		return err
	}
	defer r.Close()
	step()
	if r.Modules != nil {
		return verifyMaster(out, stages, path, r.Modules)
	}
	res, err := verifyFile(r, stages)
	if err != nil {
		return fmt.Errorf("verify %s: %w", path, err)
	}
	slices.SortStableFunc(res.bad, func(a, b problem) int { return cmp.Compare(a.n, b.n) })
	for _, p := range res.bad {
		fmt.Fprintf(out, "BAD %s\n", p.msg)
	}
	if n := len(res.unrecorded); n > 0 {
		fmt.Fprintf(out, "note: %d frames (first %d) have a chunk but no record, as a writer stopped mid-scan leaves them: counted as missing\n",
			n, res.unrecorded[0])
	}
	fmt.Fprintf(out, "%s: %d frames, %d chunks verified; %v\n", path, res.frames, res.checked, res.counts)
	switch {
	case len(res.bad) > 0:
		return fmt.Errorf("%s: %d %w", path, len(res.bad), errBad)
	case res.frames == 0:
		fmt.Fprintf(out, "%s holds no frame\n", path)
		return ErrIncomplete
	case res.counts.OK != res.frames:
		return ErrIncomplete
	}
	return nil
}

// verifyMaster verifies every module file of a master and returns the worst
// outcome: a module file that is missing or bad fails the master.
func verifyMaster(out io.Writer, stages *registry.Registry, path string, modules []writer.MasterModule) error {
	var worst error
	for _, m := range modules {
		file := m.File
		if !filepath.IsAbs(file) {
			file = filepath.Join(filepath.Dir(path), file)
		}
		err := verify(out, stages, file)
		if err != nil && !errors.Is(err, ErrIncomplete) && !errors.Is(err, errBad) {
			fmt.Fprintf(out, "BAD module %d: %v\n", m.ID, err)
			err = fmt.Errorf("module %d: %w", m.ID, err)
		}
		worst = worse(worst, err)
	}
	fmt.Fprintf(out, "%s: master of %d modules\n", path, len(modules))
	return worst
}

// problem is something verify found wrong with frame n (-1: the layout).
type problem struct {
	n   int
	msg string
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
func verifyFile(r *writer.Reader, stages *registry.Registry) (verifyResult, error) {
	res := verifyResult{frames: r.Frames}
	for _, p := range r.MissingPaths() {
		res.bad = append(res.bad, problem{-1, fmt.Sprintf("layout %s: %s is missing", r.Layout, p)})
	}
	records, err := r.Records()
	if err != nil {
		return res, err
	}
	step()
	if len(records) != r.Frames {
		return res, fmt.Errorf("%d records for %d frames", len(records), r.Frames)
	}
	var mu sync.Mutex
	report := func(n int, format string, args ...any) {
		mu.Lock()
		res.bad = append(res.bad, problem{n, fmt.Sprintf("frame %d: ", n) + fmt.Sprintf(format, args...)})
		mu.Unlock()
	}
	chk, err := startChecker(r, stages, report)
	if err != nil {
		return res, err
	}
	for n, rec := range records {
		res.counts.Add(rec.Status)
		if rec.Status > frame.StatusRejected {
			report(n, "unknown status %d", rec.Status)
		}
		data, mask, err := r.ReadChunk(n, chk.buffer())
		step()
		written := frame.Written(rec.Status)
		switch {
		case errors.Is(err, writer.ErrNoChunk):
			if written {
				report(n, "recorded as written (status %d) but has no chunk", rec.Status)
			}
			chk.done(data)
		case err != nil:
			chk.wait()
			return res, err
		case rec.Status == frame.StatusMissing:
			// The writer stored the chunk but stopped (killed, or the disk
			// filled) before its record reached the file: nothing vouches
			// for it, so the frame stays missing.
			res.unrecorded = append(res.unrecorded, n)
			chk.done(data)
		case !written:
			report(n, "recorded with status %d but has a chunk", rec.Status)
			chk.done(data)
		case mask != 0:
			report(n, "chunk skipped filters (mask %#x)", mask)
			chk.done(data)
		default:
			res.checked++
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

// verifyPath proves the file at path as Verify does, writing nothing,
// with DefaultVerifyStall.
func verifyPath(stages *registry.Registry, path string) error {
	return Verify(context.Background(), io.Discard, stages, path, DefaultVerifyStall)
}

// ErrNotRecovered is wrapped by the error of a file recover left as it
// was: it cannot be read as a scan's file, or it is not one recover may
// rename.
var ErrNotRecovered = errors.New("left as it was")

// Recover finishes the file of a scan whose writer was killed (see
// writer.Recover): path is its temporary file, or its final name when the
// temporary file exists. It first opens the temporary file read-only and
// checks its layout (its stack, the datasets of its layout, a record per
// frame); a file that fails (empty, damaged) keeps its temporary name,
// untouched, and the error wraps ErrNotRecovered. So does a temporary name
// that is a symbolic link: recover renames files, not links. Otherwise it
// says on out what it renamed, then verifies the result as Verify does.
func Recover(ctx context.Context, out io.Writer, stages *registry.Registry, path string, stall time.Duration) error {
	if _, ok := writer.FinalName(path); !ok {
		if temp := writer.TempName(path); fileExists(temp) {
			path = temp
		}
	}
	if info, err := os.Lstat(path); err == nil && info.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("recover %s: a symbolic link: %w (run recover on the file it points to, under its own .NAME.part name)", path, ErrNotRecovered)
	}
	if _, ok := writer.FinalName(path); ok && fileExists(path) {
		err := bounded(ctx, io.Discard, path, stall, func(io.Writer) error { return checkLayout(path) })
		if err != nil {
			return fmt.Errorf("recover %s: %w: %w", path, ErrNotRecovered, err)
		}
	}
	final, err := writer.Recover(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "recovered %s as %s\n", filepath.Base(path), final)
	return Verify(ctx, out, stages, final, stall)
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
