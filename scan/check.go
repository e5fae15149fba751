package scan

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"h5ingest/config"
	"h5ingest/gpu"
	"h5ingest/registry"
	"h5ingest/source/fabric"
	"h5ingest/writer"
)

// Pre-scan checks run before a scan takes its first frame, so that what
// would fail mid-scan fails before the detector sends: Checks.Run returns
// every failure, which a command shows one a line before it exits with
// status 1. A replay
// only warns about free space: its frames stay in the capture.

// assumedRatio is the compression ratio the free-space check counts on:
// Pi-mega frames compress 3 to 10 times with bitshuffle-LZ4; 2 is safe.
const assumedRatio = 2

// spaceMargin is the margin on top of the expected size, in percent.
const spaceMargin = 10

// expectedBytes returns the space a scan of frames frames of frameBytes
// decoded bytes each is expected to need: at assumedRatio (1 where the
// chunks are stored unfiltered), plus the margin.
func expectedBytes(frames, frameBytes int, compressed bool) uint64 {
	b := uint64(frames) * uint64(frameBytes)
	if compressed {
		b /= assumedRatio
	}
	return b + b*spaceMargin/100
}

// checkFreeSpace reports whether the file system holding dir has need
// bytes free for an unprivileged writer.
func checkFreeSpace(dir string, need uint64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return fmt.Errorf("free space on %s: %w", dir, err)
	}
	free := st.Bavail * uint64(st.Bsize)
	if free < need {
		return fmt.Errorf("free space on %s: %s free, the scan needs about %s (frames x frame size / compression ratio %d, +%d%%)",
			dir, FormatBytes(int64(min(free, 1<<62))), FormatBytes(int64(min(need, 1<<62))), assumedRatio, spaceMargin)
	}
	return nil
}

// checkWritable reports whether dir is a directory a file can be created
// in, by creating and removing one.
func checkWritable(dir string) error {
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("output directory %s does not exist", dir)
	case err != nil:
		return fmt.Errorf("output directory %s: %w", dir, err)
	case !info.IsDir():
		return fmt.Errorf("output directory %s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".h5ingest-check-*")
	if err != nil {
		return fmt.Errorf("output directory %s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("output directory %s: remove test file: %w", dir, err)
	}
	return nil
}

// checkTarget reports why path cannot take a file a scan writes, named
// what: a directory there, or, unless overwrite, a file.
func checkTarget(what, path string, overwrite bool) error {
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		return fmt.Errorf("%s %s is a directory", what, path)
	}
	if !overwrite && fileExists(path) {
		return &ExistsError{What: what, Path: path}
	}
	return nil
}

// ExistsError is a pre-scan check's failure for a file a scan would
// replace: Path, its What ("output file"), exists, or Temp, the temporary
// file of a scan to Path that did not finish.
type ExistsError struct{ What, Path, Temp string }

func (e *ExistsError) Error() string {
	if e.Temp != "" {
		return fmt.Sprintf("%s exists: the temporary file of a scan to %s that did not finish (verify it and rename it, or give --overwrite to replace it)",
			e.Temp, e.Path)
	}
	return fmt.Sprintf("%s %s exists (give --overwrite to replace it)", e.What, e.Path)
}

// checkNew reports whether path is free for a scan's file: no scan
// writing it (even with overwrite), checkTarget, and unless overwrite no
// temporary file of a scan to it that did not finish.
func checkNew(path string, overwrite bool) error {
	if err := writer.CheckUnlocked(path); err != nil {
		return err
	}
	if err := checkTarget("output file", path, overwrite); err != nil || overwrite {
		return err
	}
	if temp := writer.TempName(path); fileExists(temp) {
		return &ExistsError{What: "output file", Path: path, Temp: temp}
	}
	return nil
}

// maxNameBytes is the longest file name Linux file systems take (NAME_MAX).
const maxNameBytes = 255

// checkName reports a file name a scan cannot create, named what: one
// whose temporary name (.NAME.part) is longer than a file system takes,
// or a path longer than the system takes. Checked before the detector
// connects, so that a long scan id does not fail a scan under way.
func checkName(what, path string, temp bool) error {
	name := filepath.Base(path)
	if temp {
		name = filepath.Base(writer.TempName(path))
	}
	if len(name) > maxNameBytes {
		hint := ""
		if temp {
			hint = fmt.Sprintf(", written first as %.20s…", name)
		}
		return fmt.Errorf("%s %s: a name of %d bytes%s, where a file system takes %d (shorten the scan id, the output file name or output.template)",
			what, path, len(name), hint, maxNameBytes)
	}
	if len(path) >= syscall.PathMax {
		return fmt.Errorf("%s %.60s…: a path of %d bytes, where the system takes %d", what, path, len(path), syscall.PathMax-1)
	}
	return nil
}

// fileExists reports whether there is a file (of any kind) at path.
func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// checkPortFree reports whether addr (host:port) can be listened on. It
// tries TCP, which is what the tcp and sockets providers listen with;
// verbs listens through the RDMA connection manager, whose ports this
// check cannot see.
func checkPortFree(provider, addr string) error {
	if provider != "tcp" && provider != "sockets" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen address %s is not free: %w", addr, err)
	}
	l.Close()
	return nil
}

// checkBackend reports whether the profile's decode backend, as stages
// make it, can start.
func checkBackend(stages *registry.Registry, p config.Profile) error {
	if stages == nil {
		return errNoRegistry
	}
	e, ok := stages.Backend(p.Backend)
	if !ok {
		return fmt.Errorf("decode backend %s: not registered", p.Backend)
	}
	// The scan's own backend logs the choice a backend that chooses makes;
	// this one is quiet.
	b, err := e.New(gpu.Options{Orientation: p.Detector.Orientation(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("decode backend %s: %w", p.Backend, err)
	}
	b.Close()
	return nil
}

// checkLockedMemory reports whether the rings of every module's
// connection can be locked, where the provider pins them (verbs): one
// ring of the profile's slots per output file.
func (c Checks) checkLockedMemory() error {
	format, err := c.Profile.Detector.Format()
	if err != nil {
		return nil // the profile's own check says why
	}
	modules := int64(max(1, len(c.Files)))
	return fabric.CheckLockedMemory(c.Provider, modules*fabric.RingBytes(c.Profile.Source.RingSlots, format))
}

// Checks is what a scan is checked for before it starts.
type Checks struct {
	Files      []string // output files: none may exist unless the profile says overwrite
	Master     string   // the master file of several modules' files, or "": it may exist (a scan keeps one written ahead)
	Record     string   // acquire --record's capture file, or "": it may not exist unless the profile says overwrite
	Frames     int      // frames per file; 0 when not known (no space check)
	FrameBytes int      // decoded bytes per frame
	Provider   string   // listen: provider and address; "" for none
	Addr       string
	Profile    config.Profile
	Stages     *registry.Registry // the stages the profile names
	// SpaceWarns makes too little free space a warning, not a failure:
	// for a replay, whose frames stay in the capture.
	SpaceWarns bool
}

// ErrChecks is what the error of failed pre-scan checks (a ChecksError)
// is.
var ErrChecks = errors.New("pre-scan checks failed")

// Run runs every check. It tells notify, where set, the readers' warning
// and any other warning (too little free space for a replay), and
// returns a *ChecksError with every failure, or nil.
func (c Checks) Run(notify func(Note)) error {
	if msg := ReadersWarning(c.Stages, c.Profile.Output.Compression); msg != "" {
		tell(notify, Note{Kind: Warning, Text: msg})
	}
	if failed := c.failures(notify); len(failed) > 0 {
		return &ChecksError{Failures: failed}
	}
	return nil
}

// failures runs every check and returns what failed; warnings go to
// notify.
func (c Checks) failures(notify func(Note)) []error {
	var failed []error
	note := func(err error) {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if c.Addr != "" {
		// First: a missing provider (verbs without RDMA) is the likeliest
		// failure of a first try.
		note(fabric.CheckProvider(c.Provider, c.Addr))
	}
	for _, f := range c.Files {
		note(checkName("output file", f, true))
	}
	if c.Master != "" {
		note(checkName("master file", c.Master, true))
	}
	if c.Record != "" {
		note(checkName("capture file", c.Record, false))
	}
	var dirs []string
	for _, f := range c.Files {
		if d := filepath.Dir(f); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	if d := filepath.Dir(c.Master); c.Master != "" && !slices.Contains(dirs, d) {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := checkWritable(d); err != nil {
			failed = append(failed, err)
			continue
		}
		if c.Frames > 0 {
			n := 0 // files on this file system's directory
			for _, f := range c.Files {
				if filepath.Dir(f) == d {
					n++
				}
			}
			need := uint64(n) * expectedBytes(c.Frames, c.FrameBytes, c.compressed())
			if err := checkFreeSpace(d, need); err != nil && c.SpaceWarns {
				tell(notify, Note{Kind: Warning, Text: err.Error()})
			} else if err != nil {
				failed = append(failed, err)
			}
		}
	}
	overwrite := c.Profile.Output.Overwrite
	for _, f := range c.Files {
		note(checkNew(f, overwrite))
	}
	if c.Master != "" {
		note(writer.CheckUnlocked(c.Master))
		note(checkTarget("output file", c.Master, true)) // a master written ahead is kept
	}
	if c.Record != "" {
		note(checkTarget("capture file", c.Record, overwrite))
	}
	if c.Addr != "" {
		note(checkPortFree(c.Provider, c.Addr))
		note(c.checkLockedMemory())
	}
	note(checkBackend(c.Stages, c.Profile))
	return failed
}

// compressed reports whether the profile's codec filters its chunks; an
// unregistered one is counted as compressed (makeStages refuses it).
func (c Checks) compressed() bool {
	if c.Stages == nil {
		return true
	}
	e, ok := c.Stages.Codec(c.Profile.Output.Compression)
	return !ok || e.Filter != 0
}
