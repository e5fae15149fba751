package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"h5ingest/scan/scantest"
	"h5ingest/source/capture"
	"h5ingest/writer"
)

// datasetsScript prints, as one JSON object, every dataset of a file by
// its path: a string's value, or the shape, type and SHA-256 of the
// values of any other.
const datasetsScript = `import hashlib, json, sys
import h5py, hdf5plugin, numpy
out = {}
def visit(name, obj):
    if not isinstance(obj, h5py.Dataset):
        return
    v = obj[()]
    if isinstance(v, bytes):
        out[name] = v.decode(errors="replace").rstrip("\x00")
    else:
        a = numpy.asarray(v)
        out[name] = "%s %s %s" % (a.shape, a.dtype, hashlib.sha256(a.tobytes()).hexdigest())
with h5py.File(sys.argv[1], "r") as f:
    f.visititems(visit)
print(json.dumps(out))
`

// datasets returns every dataset of the HDF5 file at path, as
// datasetsScript says them, read by h5py.
func datasets(t *testing.T, path string) map[string]string {
	t.Helper()
	py := scantest.Python(t, "h5py", "hdf5plugin", "numpy")
	out, err := exec.Command(py, "-c", datasetsScript, path).Output()
	if err != nil {
		t.Fatalf("read %s with h5py: %v", path, err)
	}
	var m map[string]string
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return m
}

// entryTimes returns a file's start_time and end_time.
func entryTimes(t *testing.T, path string) (start, end time.Time) {
	t.Helper()
	r, err := writer.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	m, err := r.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	return m.StartTime, m.EndTime
}

// TestReplayOfRecordEqualsLive acquires a scan with --record and replays
// the capture: the replay's file equals the live one in every dataset,
// start_time and end_time included, though it is written later.
func TestReplayOfRecordEqualsLive(t *testing.T) {
	smallDetector(t)
	plan := []string{"--darks", "2", "--flats", "2", "--projections", "12"}
	sent, _ := simulate(t, plan...)
	dir := t.TempDir()
	addr := scantest.FreeAddr(t)
	live, rec := filepath.Join(dir, "live.h5"), filepath.Join(dir, "live.pmcap")
	done := startAcquire(append([]string{"--listen", addr, "-o", live, "--record", rec, "--connect-timeout", "1m"}, plan...)...)
	if code := run([]string{"send", sent, "--to", addr, "--timeout", "1m"}); code != exitOK {
		t.Fatalf("send exit status %d", code)
	}
	if code := waitExit(t, done, time.Minute); code != exitOK {
		t.Fatalf("acquire exit status %d", code)
	}
	var times []capture.ScanTime
	if ok, err := captureMetadata(t, rec).Get(capture.KeyScanTimes, &times); !ok || err != nil || len(times) != 1 {
		t.Fatalf("the capture records scan times %+v (%v), want module 0's", times, err)
	}
	liveStart, liveEnd := entryTimes(t, live)
	if got := times[0]; got.Module != 0 || !got.Start.Truncate(time.Microsecond).Equal(liveStart) || !got.End.Truncate(time.Microsecond).Equal(liveEnd) {
		t.Errorf("the capture records %+v; the live file %v to %v", got, liveStart, liveEnd)
	}

	replayed := filepath.Join(dir, "replayed.h5")
	if code := run([]string{"replay", rec, "-o", replayed}); code != exitOK {
		t.Fatalf("replay exit status %d", code)
	}
	want, got := datasets(t, live), datasets(t, replayed)
	for _, name := range []string{"entry/start_time", "entry/end_time", "entry/data/data"} {
		if _, ok := want[name]; !ok {
			t.Fatalf("the live file has no %s: %v", name, want)
		}
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			yield(k)
		}
		for k := range got {
			if _, ok := want[k]; !ok && !yield(k) {
				return
			}
		}
	}) {
		if want[name] != got[name] {
			t.Errorf("%s: live %q, replay %q", name, want[name], got[name])
		}
	}
}

// TestReplayOfKilledRecord kills acquire (SIGKILL) in the middle of a
// scan: its capture records the scan's start and no end, and a replay of
// it writes the live start, and as the end, when the capture's last
// frame arrived: between the start and the kill, never the replay's own
// clock.
func TestReplayOfKilledRecord(t *testing.T) {
	smallDetector(t)
	// Enough frames that the capture's write buffer has gone to the
	// file before the kill.
	const n, sent = 1000, 600
	src, _ := simulate(t, "--darks", "0", "--flats", "0", "--projections", strconv.Itoa(n))
	dir := t.TempDir()
	addr := scantest.FreeAddr(t)
	live, rec := filepath.Join(dir, "killed.h5"), filepath.Join(dir, "killed.pmcap")
	acq := startProcEnv(t, nil, "acquire", "--listen", addr, "-o", live, "--record", rec, "--projections", strconv.Itoa(n),
		"--connect-timeout", "1m", "--idle-timeout", "10m")
	sender := startHeldSender(t, src, addr)
	sender.send(t, sent)
	part := writer.TempName(live)
	waitFor(t, time.Minute, "frames in the capture and the file", func() bool {
		info, err := os.Stat(rec)
		return err == nil && info.Size() > capture.WriteBufferSize && scantest.OKFrames(part) > 0
	})
	acq.cmd.Process.Kill()
	acq.cmd.Wait()
	killed := time.Now()

	var times []capture.ScanTime
	if ok, err := captureMetadata(t, rec).Get(capture.KeyScanTimes, &times); !ok || err != nil || len(times) != 1 ||
		times[0].Start.IsZero() || !times[0].End.IsZero() {
		t.Fatalf("the killed acquire's capture records scan times %+v (%v), want module 0's start and no end", times, err)
	}
	if code, stdout, stderr := runProcess(t, "recover", part); code != exitIncomplete {
		t.Fatalf("recover: exit status %d, want %d\n%s%s", code, exitIncomplete, stdout, stderr)
	}
	liveStart, _ := entryTimes(t, live)
	info, err := os.Stat(rec)
	if err != nil {
		t.Fatal(err)
	}
	replayed := filepath.Join(dir, "replayed.h5")
	if code := run([]string{"replay", rec, "-o", replayed}); code != exitIncomplete {
		t.Fatalf("replay exit status %d, want %d (frames missing)", code, exitIncomplete)
	}
	start, end := entryTimes(t, replayed)
	if !start.Equal(liveStart) {
		t.Errorf("replay start_time %v, want the live scan's %v", start, liveStart)
	}
	if want := info.ModTime().Truncate(time.Microsecond); !end.Equal(want) || end.Before(start) || end.After(killed) {
		t.Errorf("replay end_time %v, want the last frame's arrival %v, between the start %v and the kill %v", end, want, start, killed)
	}
}

// TestReplayOfArrayRecordEqualsLive acquires the test array's four
// modules with --record, one capture holding them all, and replays it:
// each module's file and the master equal the live ones in every
// dataset, each module's start_time and end_time its own.
func TestReplayOfArrayRecordEqualsLive(t *testing.T) {
	paths, _ := simulateModules(t)
	profile := arrayProfile(t)
	live, replayed := t.TempDir(), t.TempDir()
	rec := filepath.Join(t.TempDir(), "array.pmcap")
	addr := scantest.FreeAddr(t)
	acq := startProcEnv(t, nil, append([]string{"acquire", "--profile", profile, "--listen", addr, "-o", filepath.Join(live, "scan.h5"),
		"--record", rec, "--connect-timeout", "1m"}, arrayPlan...)...)
	var sends []*proc
	for i, p := range paths {
		sends = append(sends, startProcEnv(t, nil, "send", p, "--module", strconv.Itoa(arrayModules[i].id), "--to", addr, "--timeout", "1m"))
	}
	for i, s := range sends {
		if code := s.wait(t, 2*time.Minute); code != exitOK {
			t.Fatalf("send of module %d: exit status %d\n%s", arrayModules[i].id, code, s.stderr.String())
		}
	}
	if code := acq.wait(t, 2*time.Minute); code != exitOK {
		t.Fatalf("acquire: exit status %d\n%s%s", code, acq.stdout.String(), acq.stderr.String())
	}
	if code, stdout, stderr := runProcess(t, "replay", rec, "--profile", profile, "-o", filepath.Join(replayed, "scan.h5")); code != exitOK {
		t.Fatalf("replay: exit status %d\n%s%s", code, stdout, stderr)
	}
	files, err := filepath.Glob(filepath.Join(live, "*.h5"))
	if err != nil || len(files) != len(arrayModules)+1 {
		t.Fatalf("the live scan wrote %v (%v), want a file per module and the master", files, err)
	}
	starts := map[string]bool{}
	for _, f := range files {
		name := filepath.Base(f)
		want, got := datasets(t, f), datasets(t, filepath.Join(replayed, name))
		if len(want) == 0 {
			t.Fatalf("%s has no dataset", f)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s %s: live %q, replay %q", name, k, v, got[k])
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("%s: the replay has %s, the live file has not", name, k)
			}
		}
		starts[want["entry/start_time"]] = true
	}
	if len(starts) < 2 {
		t.Errorf("every file starts at %v: the modules' own times are not told apart", starts)
	}
}
