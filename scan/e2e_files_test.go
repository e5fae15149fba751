package scan

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/scan/scantest"
	"h5ingest/writer"
)

// The faults of a scan's files through the library: a disk that fills,
// an output directory missing, read-only or removed, scan ids that would
// leave the output directory. docs/reliability.md lists each.

// TestReplayDiskFull replays a scan onto an 8 MiB tmpfs that holds about
// half of it: a failure wrapping the system's ENOSPC ("no space left on device"), and
// the file, under its final name, holds every frame written before the
// disk filled, verified, the rest recorded missing.
func TestReplayDiskFull(t *testing.T) {
	dir := mountTmpfs(t, "size=8m")
	path, truth := scantest.Simulate(t, simScan(scantest.BigFormat, 12))
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.BigFormat, map[string]any{"output.compression": "none"})
	out := filepath.Join(dir, "full.h5")
	r := replayInto(t, context.Background(), p, stages, plan.Tomo(0, 0, 12, 0, 180), out, path)
	if !failed(r.err) || !errors.Is(r.err, syscall.ENOSPC) || !strings.Contains(r.err.Error(), "no space left on device") {
		t.Fatalf("replay: %v, want a failure saying the disk is full:\n%s%s", r.err, r.out, r.errs)
	}
	status, ok := scantest.CheckTruth(t, out, truth)
	if ok == 0 || ok == 12 {
		t.Fatalf("%d frames ok of 12: want those written before the disk filled: %v", ok, status)
	}
	for n, s := range status {
		if s != frame.StatusOK && s != frame.StatusMissing {
			t.Errorf("frame %d: status %d, want ok or missing", n, s)
		}
	}
	if got := r.summary().Progress.OK; got != ok {
		t.Errorf("the summary's ok count %d is not the file's %d:\n%s", got, ok, r.out)
	}
	if vout, err := verified(out); !errors.Is(err, ErrIncomplete) || strings.Contains(vout, "BAD") || !strings.Contains(vout, strconv.Itoa(ok)+" chunks verified") {
		t.Errorf("verify: %v, want ErrIncomplete with %d chunks verified:\n%s", err, ok, vout)
	}
}

// TestReplayDiskFullNoPlan replays scans onto tmpfs file systems that fill
// at different points, uncompressed and compressed, with the plan the
// capture records and without a plan (the file grows with the frames):
// the replay fails saying the disk is full; plain h5py (not a SWMR
// reader) opens the file; the file records as many frames, ok and
// missing, as the summary says; and verify finds every record and chunk
// in agreement. Before, the summary said "30 ok" where the file recorded
// all 30 missing, or the file had no records and did not open in plain
// h5py.
func TestReplayDiskFullNoPlan(t *testing.T) {
	py := scantest.Python(t, "h5py", "numpy")
	recorded, _ := scantest.Simulate(t, simScan(scantest.BigFormat, 30))
	captures := map[string]string{"plan recorded": recorded, "no plan": withoutPlan(t, recorded)}
	stages := scantest.Stages(t)
	for _, tt := range []struct{ size, compression string }{
		{"3m", "none"}, {"6m", "none"}, {"9m", "none"}, {"2m", "bslz4"}, {"3m", "bslz4"},
	} {
		for _, which := range []string{"plan recorded", "no plan"} {
			t.Run(tt.size+"/"+tt.compression+"/"+which, func(t *testing.T) {
				dir := mountTmpfs(t, "size="+tt.size)
				out := filepath.Join(dir, "full.h5")
				p := testProfile(t, stages, scantest.BigFormat, map[string]any{"output.compression": tt.compression})
				r := replayInto(t, context.Background(), p, stages, plan.Plan{}, out, captures[which])
				if !failed(r.err) || !errors.Is(r.err, syscall.ENOSPC) || !strings.Contains(r.err.Error(), "no space left on device") {
					t.Fatalf("replay: %v, want a failure saying the disk is full:\n%s%s", r.err, r.out, r.errs)
				}
				b, err := exec.Command(py, "-c", `import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    s = f["/entry/instrument/detector/frame_status"][:]
    print(len(s), int((s == 0).sum()), int((s == 1).sum()))`, out).CombinedOutput()
				if err != nil {
					t.Fatalf("plain h5py does not open the file: %v\n%s", err, b)
				}
				var frames, ok, missing int
				if _, err := fmt.Sscan(string(b), &frames, &ok, &missing); err != nil {
					t.Fatalf("h5py printed %q: %v", b, err)
				}
				if s := r.summary(); s.Frames != frames || s.Progress.OK != ok || s.Progress.Missing != missing {
					t.Errorf("the file records %d frames, %d ok, %d missing; the summary says:\n%s", frames, ok, missing, r.out)
				}
				if ok+missing != frames || ok == 30 {
					t.Errorf("the file records %d frames, %d ok, %d missing", frames, ok, missing)
				}
				if vout, err := verified(out); !errors.Is(err, ErrIncomplete) || strings.Contains(vout, "BAD") || !strings.Contains(vout, strconv.Itoa(ok)+" chunks verified") {
					t.Errorf("verify: %v, want ErrIncomplete with %d chunks verified:\n%s", err, ok, vout)
				}
			})
		}
	}
}

// pacedReplay is a replay running in the background.
type pacedReplay struct {
	out  string // its file
	done chan struct{}
	r    replayed
}

// wait returns what the replay ended with.
func (p *pacedReplay) wait() replayed {
	<-p.done
	return p.r
}

// startPaced starts a replay of frames paced at 20 frames/s into dir,
// flushed every 100 ms (40 frames is two seconds, so that what a test
// does while it writes comes in time on a loaded machine), and waits until
// it has written frames.
func startPaced(t *testing.T, stages *registry.Registry, dir string, frames int) *pacedReplay {
	t.Helper()
	path, _ := scantest.Simulate(t, simScan(scantest.SmallFormat, frames))
	p := testProfile(t, stages, scantest.SmallFormat, map[string]any{"output.flush_interval": 100 * time.Millisecond})
	rp := &pacedReplay{out: filepath.Join(dir, "scan.h5"), done: make(chan struct{})}
	running := make(chan *pipeline.Pipeline, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(rp.done)
		rp.r = replayWith(t, ctx, ReplayOptions{Options: Options{Profile: p, Plan: plan.Tomo(0, 0, frames, 0, 180), Stages: stages,
			Progress: progressOf(running)}, Captures: []string{path}, FPS: 20}, Names{Output: rp.out})
	}()
	t.Cleanup(func() {
		cancel()
		<-rp.done
	})
	var pl *pipeline.Pipeline
	select {
	case pl = <-running:
	case <-rp.done:
		t.Fatalf("the paced replay ended before it began: %v\n%s", rp.r.err, rp.r.errs)
	}
	for deadline := time.Now().Add(20 * time.Second); pl.Progress().Written < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the paced replay wrote nothing")
		}
	}
	return rp
}

// TestReplayOutputDirFaults takes the output directory away, or makes it
// read-only, before and during a scan.
func TestReplayOutputDirFaults(t *testing.T) {
	t.Parallel()
	path, _ := scantest.Simulate(t, simScan(scantest.SmallFormat, 2))
	stages := scantest.Stages(t)
	p := testProfile(t, stages, scantest.SmallFormat, nil)
	t.Run("missing before", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "gone", "scan.h5")
		r := replayInto(t, context.Background(), p, stages, plan.Plan{}, out, path)
		if !failed(r.err) || !strings.Contains(r.said(), "pre-scan check: output directory "+filepath.Dir(out)+" does not exist") {
			t.Errorf("replay: %v, want a failure saying the directory is missing:\n%s", r.err, r.errs)
		}
	})
	t.Run("read-only before", func(t *testing.T) {
		dir := mountTmpfs(t, "size=1m,ro")
		r := replayInto(t, context.Background(), p, stages, plan.Plan{}, filepath.Join(dir, "scan.h5"), path)
		if !failed(r.err) || !strings.Contains(strings.ToLower(r.said()), "read-only file system") {
			t.Errorf("replay: %v, want a failure saying the file system is read-only:\n%s", r.err, r.errs)
		}
	})
	t.Run("read-only while writing", func(t *testing.T) {
		// Root ignores permission bits; an immutable directory stops root
		// from adding the final name, as a read-only one stops a user.
		if os.Geteuid() != 0 {
			t.Skip("chattr +i needs root")
		}
		dir := t.TempDir()
		rp := startPaced(t, stages, dir, 40)
		if o, err := exec.Command("chattr", "+i", dir).CombinedOutput(); err != nil {
			t.Skipf("chattr +i not supported here: %v %s", err, o)
		}
		defer exec.Command("chattr", "-i", dir).Run()
		r := rp.wait()
		if !failed(r.err) || !strings.Contains(r.said(), "operation not permitted") {
			t.Fatalf("replay: %v, want a failure:\n%s", r.err, r.errs)
		}
		if !strings.Contains(r.said(), writer.TempName(rp.out)) {
			t.Errorf("the message does not say where the scan stays:\n%s", r.said())
		}
		// The scan is whole under its temporary name.
		if vout, err := verified(writer.TempName(rp.out)); err != nil {
			t.Errorf("verify of the temporary file: %v\n%s", err, vout)
		}
	})
	t.Run("removed while writing", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "scans")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		rp := startPaced(t, stages, dir, 40)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if r := rp.wait(); !failed(r.err) || !strings.Contains(r.said(), "no such file or directory") {
			t.Errorf("replay: %v, want a failure:\n%s", r.err, r.errs)
		}
	})
}

// arrayProfile is the profile of a test array of four modules of
// scantest.SmallFormat, with a template that names the module files.
const arrayProfile = "detector:\n  chips_x: 3\n  chips_y: 2\n  chip_width: 32\n  chip_height: 16\n  modules:\n" +
	"    - {id: 0, x: 0, y: 0}\n    - {id: 1, x: 100, y: 0}\n    - {id: 2, x: 100, y: 40}\n    - {id: 3, x: 0, y: 40}\n" +
	"output:\n  template: \"{scan}_mod{module}.h5\"\n"

// profileText returns the profile of the YAML text with the keys given
// on top, as a command line would set them.
func profileText(t *testing.T, stages *registry.Registry, text string, keys map[string]any) config.Profile {
	t.Helper()
	path := filepath.Join(t.TempDir(), "profile.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	flags := map[string]config.FlagValue{"backend": {Flag: "test", Value: "cpu"}}
	for k, v := range keys {
		flags[k] = config.FlagValue{Flag: "test", Value: v}
	}
	p, _, err := config.LoadLayers(config.Layers{Profile: path, Flags: flags, Names: stages.Names()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestScanIDStaysInOutputDir gives every scan that names files from a
// scan id (replay and acquire of one module and of several, the master
// written ahead) scan ids that would leave output.directory: each is
// refused with a usage error before any file is made. A scan id whose
// file name (with its temporary name .NAME.part) is too long for the file
// system fails the pre-scan check, before an acquire listens for the
// detector.
func TestScanIDStaysInOutputDir(t *testing.T) {
	capturePath, _ := scantest.Simulate(t, simScan(scantest.SmallFormat, 3))
	stages := scantest.Stages(t)
	replay := func(_ *testing.T, p config.Profile, files Files, errs *scantest.Buffer) error {
		res, err := Replay(context.Background(), ReplayOptions{Options: Options{Profile: p, Stages: stages, Notify: notesTo(errs)}, Files: files, Captures: []string{capturePath}})
		errs.Write([]byte(notesText(res, err)))
		return err
	}
	acquire := func(t *testing.T, p config.Profile, files Files, errs *scantest.Buffer) error {
		a := startAcquire(t, AcquireOptions{Options: Options{Profile: p, Stages: stages}, Files: files, Listen: scantest.FreeAddr(t)})
		err := a.wait(t, 30*time.Second)
		errs.Write([]byte(a.errs.String()))
		return err
	}
	master := func(_ *testing.T, p config.Profile, files Files, errs *scantest.Buffer) error {
		m, err := WriteMasterAhead(files, stages, p, plan.Tomo(0, 0, 3, 0, 180), writer.Metadata{})
		for _, n := range m.Notes {
			errs.Write([]byte(noteLine(n)))
		}
		return err
	}
	commands := []struct {
		name    string
		profile string // "": one module of scantest.SmallFormat
		run     func(*testing.T, config.Profile, Files, *scantest.Buffer) error
	}{
		{"replay", "", replay},
		{"replay modules", arrayProfile, replay},
		{"acquire", "", acquire},
		{"acquire modules", arrayProfile, acquire},
		{"master", arrayProfile, master},
	}
	long := strings.Repeat("s", 249) // s…s.h5 is 252 bytes, .s…s.h5.part 258
	for _, c := range commands {
		for _, id := range []string{"../x", "a/../../x", "..", "sub/x", long} {
			name := c.name + " " + id
			if id == long {
				name = c.name + " long"
			}
			t.Run(name, func(t *testing.T) {
				root := t.TempDir()
				out := filepath.Join(root, "out")
				if err := os.Mkdir(out, 0o755); err != nil {
					t.Fatal(err)
				}
				keys := map[string]any{"output.directory": out, "source.connect_timeout": 20 * time.Second}
				p := testProfile(t, stages, scantest.SmallFormat, keys)
				if c.profile != "" {
					p = profileText(t, stages, c.profile, keys)
				}
				start := time.Now()
				var errs scantest.Buffer
				files, err := NewFiles(p, Names{ScanID: id})
				if err == nil {
					err = c.run(t, p, files, &errs)
				}
				took := time.Since(start)
				said := errs.String() + fmt.Sprint(err)
				if id == long {
					says := "pre-scan check: "
					if c.name == "master" {
						says = "master file "
					}
					if !failed(err) || !strings.Contains(said, says) {
						t.Errorf("%v, want a failure with %q:\n%s", err, says, said)
					}
				} else if !errors.Is(err, ErrUsage) || !strings.Contains(said, "--scan-id") {
					t.Errorf("%v, want a usage error naming --scan-id:\n%s", err, said)
				}
				if took > 10*time.Second {
					t.Errorf("took %v: waited for a detector", took)
				}
				var made []string
				filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
					if p != root && p != out {
						made = append(made, p)
					}
					return nil
				})
				if len(made) > 0 {
					t.Errorf("files made: %v", made)
				}
			})
		}
	}
}
