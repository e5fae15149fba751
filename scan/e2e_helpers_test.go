package scan

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/scan/scantest"
	"h5ingest/source/fabric"
	"h5ingest/source/sim"
	"h5ingest/writer"
)

// Helpers of the end-to-end tests that check files against the
// simulator's truth, send frame by frame, fill disks and count what a
// scan leaves open (scan/scantest has those the command's tests share).
//
// The end-to-end tests of a replay that touch no state of the whole
// process run in parallel (t.Parallel). A test that counts the process's
// goroutines, descriptors, HDF5 or libfabric objects or peak memory, sets
// a package variable (CancelWrite, verifyStep) or mounts a file system
// must not: go test runs it before any parallel test starts, alone. (A
// tmpfs the test must unmount stays busy while a process another test
// started, a Python reader, holds a descriptor of it: HDF5 opens its
// files without close-on-exec.) Nor do the scans over the fabric, a
// receiver and its sender in this process: two at once under the race
// detector on a loaded 2-core machine missed their connect timeouts.

// simScan returns the simulator's configuration of a scan of n
// projections of f.
func simScan(f frame.Format, n int) sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Format, cfg.Plan, cfg.Seed = f, plan.Tomo(0, 0, n, 0, 180), 11
	return cfg
}

// withoutPlan rewrites the capture at path with metadata that records no
// plan: a scan of unknown length.
func withoutPlan(t *testing.T, path string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "noplan.pmcap")
	scantest.WriteCapture(t, out, scantest.CaptureRecords(t, path))
	return out
}

// resealed recomputes the header CRC of rec after a change.
func resealed(rec []byte) []byte {
	copy(rec[60:], le32(frame.Checksum(rec[:60])))
	return rec
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// failed reports whether err is a failure: neither nil, nor an incomplete
// scan, nor a usage error (the command's exit status 1).
func failed(err error) bool {
	return err != nil && !errors.Is(err, ErrIncomplete) && !errors.Is(err, ErrUsage)
}

// replayed is what a replay ended with: its result and error, its notes
// as the command prints them (errs, notesText), its log lines, and its
// summaries as a test shows them (out).
type replayed struct {
	res             Result
	err             error
	out, errs, logs string
}

// summary returns the summary of the replay's first module; zero where
// none finished.
func (r replayed) summary() Summary {
	if len(r.res.Modules) == 0 {
		return Summary{}
	}
	return r.res.Modules[0]
}

// said returns what the replay told a person: its warnings and its error,
// as the command prints them on standard error.
func (r replayed) said() string { return r.errs + fmt.Sprint(r.err) }

// replayInto replays the captures into the file out (the master, for a
// profile of several modules) with the plan given, as the command does.
func replayInto(t *testing.T, ctx context.Context, p config.Profile, stages *registry.Registry, pl plan.Plan, out string, captures ...string) replayed {
	t.Helper()
	return replayWith(t, ctx, ReplayOptions{Options: Options{Profile: p, Plan: pl, Stages: stages}, Captures: captures}, Names{Output: out})
}

// replayWith replays as o says into the files names gives, with o's
// Notify and Log writing to buffers.
func replayWith(t *testing.T, ctx context.Context, o ReplayOptions, names Names) replayed {
	t.Helper()
	files, err := NewFiles(o.Profile, names)
	if err != nil {
		return replayed{err: err}
	}
	var notes, logs scantest.Buffer
	o.Files, o.Notify, o.Log = files, notesTo(&notes), scantest.JSONLog(&logs)
	res, err := Replay(ctx, o)
	return replayed{res: res, err: err, out: fmt.Sprintf("%+v\n", res.Modules), errs: notes.String() + notesText(res, err), logs: logs.String()}
}

// acquisition is an acquire run as the command runs one: its pre-scan
// checks, its files held, then the wait for the detector and the scan,
// in the background.
type acquisition struct {
	result     chan error
	errs, logs scantest.Buffer // the notes as the command prints them (notesText), the log
	stop       *Stopper
	close      func()
}

// startAcquire starts the acquire o sets up, with its Notify and Log
// writing to buffers and a stopper of the profile's connect timeout.
func startAcquire(t *testing.T, o AcquireOptions) *acquisition {
	t.Helper()
	a := &acquisition{result: make(chan error, 1)}
	o.Notify, o.Log = notesTo(&a.errs), scantest.JSONLog(&a.logs)
	a.stop = NewStopper(context.Background(), o.Profile.Source.ConnectTimeout, notesTo(&a.errs))
	a.close = sync.OnceFunc(a.stop.Close)
	t.Cleanup(a.close)
	go func() { a.result <- a.run(o) }()
	return a
}

func (a *acquisition) run(o AcquireOptions) error {
	acq, err := NewAcquisition(o)
	if err != nil {
		return err
	}
	if err := acq.Checks().Run(o.Notify); err != nil {
		a.errs.Write([]byte(notesText(Result{}, err)))
		return err
	}
	release, err := acq.Hold()
	if err != nil {
		return err
	}
	defer release()
	res, err := acq.Run(a.stop)
	a.errs.Write([]byte(notesText(res, err)))
	return err
}

// wait returns the acquire's result, failing the test after d, and
// closes its stopper.
func (a *acquisition) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-a.result:
		a.close()
		return err
	case <-time.After(d):
		t.Fatalf("the acquire did not end within %v:\n%s", d, a.errs.String())
		return nil
	}
}

// acquireOptions returns the options of an acquire of the profile's
// detector with the plan given into the file out, listening on addr.
func acquireOptions(t *testing.T, p config.Profile, stages *registry.Registry, pl plan.Plan, out, addr string) AcquireOptions {
	t.Helper()
	files, err := NewFiles(p, Names{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	return AcquireOptions{Options: Options{Profile: p, Plan: pl, Stages: stages}, Files: files, Listen: addr}
}

// dial connects a sender of frames of f, module 0 of a detector, to addr.
func dial(ctx context.Context, addr string, f frame.Format, timeout time.Duration) (*fabric.Sender, error) {
	return fabric.Dial(ctx, fabric.SenderConfig{Provider: "tcp", Addr: addr, Timeout: timeout,
		Hello: fabric.Hello{Mode: fabric.ModeWrite, Format: f}})
}

// dialRetrying dials until the receiver listens, for up to 20 s.
func dialRetrying(t *testing.T, ctx context.Context, addr string, f frame.Format) *fabric.Sender {
	t.Helper()
	s, err := fabric.DialWait(ctx, fabric.SenderConfig{Provider: "tcp", Addr: addr, Timeout: 20 * time.Second,
		Hello: fabric.Hello{Mode: fabric.ModeWrite, Format: f}})
	if err != nil {
		t.Fatalf("no receiver on %s: %v", addr, err)
	}
	return s
}

// post sends recs through s, one frame each.
func post(ctx context.Context, s *fabric.Sender, recs [][]byte) error {
	for _, rec := range recs {
		buf, err := s.Buffer(ctx)
		if err != nil {
			return err
		}
		if err := s.Post(copy(buf, rec)); err != nil {
			return err
		}
	}
	return nil
}

// mountTmpfs mounts a tmpfs with the given options on a new directory, or
// skips the test where that is not allowed.
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	return dir
}

// openFDs returns the number of file descriptors the process holds.
func openFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors: %v", err)
	}
	return len(fds)
}

// settled waits up to 5 s for the goroutine count to come back to at most
// want, and returns the last count.
func settled(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); n > want && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

// checkNothingLeft compares goroutines, file descriptors, HDF5 and
// libfabric objects with their counts before a scan.
func checkNothingLeft(t *testing.T, goroutines, fds int) {
	t.Helper()
	if n := settled(goroutines); n > goroutines {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines left behind:\n%s", n-goroutines, buf[:runtime.Stack(buf, true)])
	}
	if n := openFDs(t); n > fds {
		t.Errorf("%d file descriptors left open", n-fds)
	}
	if n := writer.OpenObjects(); n != 0 {
		t.Errorf("%d HDF5 objects left open", n)
	}
	if n := fabric.OpenObjects(); n != 0 {
		t.Errorf("%d libfabric objects left open", n)
	}
}

// resetPeakRSS makes the process's peak resident memory its present one
// (Linux's clear_refs), so that peakRSS measures what follows; it reports
// false where it cannot. It first hands the memory that the tests before
// freed back to the system, so that the present one is what is in use,
// whatever ran just before and however long ago.
func resetPeakRSS(t *testing.T) bool {
	t.Helper()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("cannot reset the peak memory: %v", err)
		return false
	}
	return true
}

// peakRSS returns the process's peak resident memory since the last
// resetPeakRSS, in bytes.
func peakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// waitReceived waits for the pipeline that running hands over to have
// received n frames, failing the test where a minute passes first (a
// hang: the frames never came).
func waitReceived(t *testing.T, running <-chan *pipeline.Pipeline, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var pl *pipeline.Pipeline
	select {
	case pl = <-running:
	case <-time.After(time.Minute):
		t.Fatal("no scan began")
	}
	for ; pl.Progress().Received < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d frames received, want %d", pl.Progress().Received, n)
		}
	}
}

// waitingNote returns a Notify hook that closes the channel it returns at
// the first note that the scan waits for the detector.
func waitingNote() (func(Note), <-chan struct{}) {
	waiting := make(chan struct{})
	once := sync.OnceFunc(func() { close(waiting) })
	return func(n Note) {
		if n.Kind == Waiting {
			once()
		}
	}, waiting
}

// progressOf returns the options' Progress hook that hands the running
// pipeline to the channel, once.
func progressOf(running chan<- *pipeline.Pipeline) func(p *pipeline.Pipeline, planned int) func() {
	return func(p *pipeline.Pipeline, _ int) func() {
		select {
		case running <- p:
		default:
		}
		return func() {}
	}
}

// verified runs Verify on the file at path and returns its result, with
// its report as lines to match and show: a line "BAD ..." per finding (of
// a master, also per module file that could not be verified) and a line
// per file saying how many chunks it verified.
func verified(path string) (string, error) {
	rep, err := Verify(context.Background(), stockStages(), path, DefaultVerifyStall)
	var b strings.Builder
	var lines func(rep *VerifyReport)
	lines = func(rep *VerifyReport) {
		for _, m := range rep.Modules {
			if m.Report == nil {
				fmt.Fprintf(&b, "BAD module %d: %v\n", m.ID, m.Err)
			} else {
				lines(m.Report)
			}
		}
		for _, f := range rep.Bad {
			fmt.Fprintf(&b, "BAD %v\n", f)
		}
		if rep.Modules == nil {
			fmt.Fprintf(&b, "%s: %d frames, %d chunks verified; %v\n", rep.Path, rep.Frames, rep.Checked, rep.Counts)
		}
	}
	if rep != nil {
		lines(rep)
	}
	return b.String(), err
}
