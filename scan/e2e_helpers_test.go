package scan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/source/capture"
	"h5ingest/source/fabric"
	"h5ingest/source/sim"
	"h5ingest/writer"
)

// Helpers of the end-to-end tests that check files against the
// simulator's truth, send frame by frame, fill disks and count what a
// scan leaves open.

// smallFormat is the frame of most end-to-end tests: 3 x 2 chips of
// 32 x 16, 24-bit LFSR bitplane; small enough to be quick, with several
// chips in both directions so that orientation matters.
var smallFormat = frame.Format{Geometry: frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16},
	Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}

// simScan returns the simulator's configuration of a scan of n
// projections of f.
func simScan(f frame.Format, n int) sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Format, cfg.Plan, cfg.Seed = f, plan.Tomo(0, 0, n, 0, 180), 11
	return cfg
}

// simulateScan writes the capture of cfg and returns its path and the
// ground truth it records.
func simulateScan(t *testing.T, cfg sim.Config) (string, *sim.Truth) {
	t.Helper()
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "scan.pmcap")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := s.WriteCapture(out, capture.Metadata{Profile: "test"}); err != nil {
		t.Fatal(err)
	}
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	truth, err := sim.ReadTruth(r.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	return path, truth
}

// truthStatuses returns the frame statuses the file at path records and
// how many are ok, checking that every ok frame has a chunk and the true
// data CRC.
func truthStatuses(t *testing.T, path string, truth *sim.Truth) (status []uint8, ok int) {
	t.Helper()
	r, err := writer.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	recs, err := r.Records()
	if err != nil {
		t.Fatal(err)
	}
	for n, rec := range recs {
		status = append(status, rec.Status)
		if rec.Status != frame.StatusOK {
			continue
		}
		ok++
		if rec.DataCRC != truth.DataCRC[n] {
			t.Errorf("frame %d: data CRC %08x, truth %08x", n, rec.DataCRC, truth.DataCRC[n])
		}
		if _, _, err := r.ReadChunk(n, nil); err != nil {
			t.Errorf("frame %d recorded ok: %v", n, err)
		}
	}
	return status, ok
}

// captureRecords reads the records of the capture at path, frames of up
// to 4 MiB, each header and payload as on the wire.
func captureRecords(t *testing.T, path string) [][]byte {
	t.Helper()
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var recs [][]byte
	buf := make([]byte, 4<<20)
	for {
		h, payload, err := r.Next(buf[frame.HeaderSize:])
		if errors.Is(err, io.EOF) {
			return recs
		}
		if err != nil {
			t.Fatal(err)
		}
		rec := make([]byte, frame.HeaderSize+len(payload))
		h.Put(rec)
		copy(rec[frame.HeaderSize:], payload)
		recs = append(recs, rec)
	}
}

// writeRecords writes a capture of the given records, with metadata that
// holds no plan and no truth.
func writeRecords(t *testing.T, path string, recs [][]byte) {
	t.Helper()
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	w, err := capture.NewWriter(file, capture.Metadata{Profile: "test", Created: "2026-01-01T00:00:00Z", Software: "e2e test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if err := w.WriteRecord(rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// withoutPlan rewrites the capture at path with metadata that records no
// plan: a scan of unknown length.
func withoutPlan(t *testing.T, path string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "noplan.pmcap")
	writeRecords(t, out, captureRecords(t, path))
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

// replayed is what a replay ended with: its result and error, its
// summary and notes as the command prints them (out, errs; resultText)
// and its log lines.
type replayed struct {
	res             Result
	err             error
	out, errs, logs string
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
	var notes, logs bytesBuffer
	o.Files, o.Notify, o.Log = files, notesTo(&notes), jsonLog(&logs)
	res, err := Replay(ctx, o)
	out, errs := resultText(res, err)
	return replayed{res: res, err: err, out: out, errs: notes.String() + errs, logs: logs.String()}
}

// jsonLog returns a logger of warnings and errors as JSON lines on w, as
// the command logs where standard error is no terminal.
func jsonLog(w io.Writer) *zap.Logger {
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(w), zapcore.WarnLevel))
}

// acquisition is an acquire run as the command runs one: its pre-scan
// checks, its files held, then the wait for the detector and the scan,
// in the background.
type acquisition struct {
	result          chan error
	out, errs, logs bytesBuffer // the summary and notes as the command prints them (resultText), the log
	stop            *Stopper
	close           func()
}

// startAcquire starts the acquire o sets up, with its Notify and Log
// writing to buffers and a stopper of the profile's connect timeout.
func startAcquire(t *testing.T, o AcquireOptions) *acquisition {
	t.Helper()
	a := &acquisition{result: make(chan error, 1)}
	o.Notify, o.Log = notesTo(&a.errs), jsonLog(&a.logs)
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
		_, errs := resultText(Result{}, err)
		a.errs.Write([]byte(errs))
		return err
	}
	release, err := acq.Hold()
	if err != nil {
		return err
	}
	defer release()
	res, err := acq.Run(a.stop)
	out, errs := resultText(res, err)
	a.out.Write([]byte(out))
	a.errs.Write([]byte(errs))
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
// false where it cannot.
func resetPeakRSS(t *testing.T) bool {
	t.Helper()
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

// python returns /usr/bin/python3 if it has the modules, or skips the
// test.
func python(t *testing.T, modules ...string) string {
	t.Helper()
	const py = "/usr/bin/python3"
	for _, m := range modules {
		if out, err := exec.Command(py, "-c", "import "+m).CombinedOutput(); err != nil {
			t.Skipf("%s cannot import %s (install the Debian packages with make deps): %v %s", py, m, err, out)
		}
	}
	return py
}

// crossCheck has the command's check_scan.py read the file with h5py and
// hdf5plugin and compare it with the simulation of cfg: statuses, data
// CRCs, image keys and angles, two frames pixel by pixel, and with
// dxchange where asked.
func crossCheck(t *testing.T, file, layout string, cfg sim.Config, truth *sim.Truth, status []uint8, dxchange bool) {
	t.Helper()
	py := python(t, "h5py", "hdf5plugin", "crcmod", "numpy")
	if dxchange {
		python(t, "dxchange")
	}
	f := cfg.Format
	ints := make([]int, len(status)) // not []uint8, which JSON writes as base64
	for i, s := range status {
		ints[i] = int(s)
	}
	exp := map[string]any{"layout": layout, "status": ints, "data_crc": truth.DataCRC,
		"height": f.Height(), "width": f.Width(), "elem_size": f.PixelSize(), "dxchange": dxchange}
	if layout == writer.LayoutNXtomo {
		exp["image_key"] = truth.ImageKey
		exp["rotation_angle"] = truth.RotationAngle
	}
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pixels := map[string][]uint32{}
	for _, n := range []int{0, truth.Frames - 1} {
		if status[n] == frame.StatusOK {
			img, _ := s.Image(n, nil)
			pixels[fmt.Sprint(n)] = img
		}
	}
	exp["pixels"] = pixels
	js, err := json.Marshal(exp)
	if err != nil {
		t.Fatal(err)
	}
	expect := filepath.Join(t.TempDir(), "expect.json")
	if err := os.WriteFile(expect, js, 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join("..", "cmd", "h5ingest", "testdata", "check_scan.py")
	out, err := exec.Command(py, script, file, expect).CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
		t.Fatalf("h5py cross-check of %s: %v\n%s", file, err, out)
	}
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
