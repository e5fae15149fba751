package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"h5ingest/frame"
	"h5ingest/scan/scantest"
	"h5ingest/source/capture"
	"h5ingest/source/sim"
	"h5ingest/writer"
)

// arrayPlan is the plan of the multi-module tests: 5 frames.
var arrayPlan = []string{"--darks", "1", "--flats", "1", "--projections", "3"}

// arrayModules are the modules of the test array: 2 x 2 modules of the
// smallScan geometry (96 x 32 pixels), with gaps of 4 columns and 8 rows,
// numbered clockwise from the top left as on a Pi-mega 540D.
var arrayModules = []struct{ id, x, y int }{{0, 0, 0}, {1, 100, 0}, {2, 100, 40}, {3, 0, 40}}

// arrayProfile writes the profile of the test array and returns its path.
func arrayProfile(t *testing.T) string {
	t.Helper()
	text := "detector:\n  chips_x: 3\n  chips_y: 2\n  chip_width: 32\n  chip_height: 16\n  modules:\n"
	for _, m := range arrayModules {
		text += fmt.Sprintf("    - {id: %d, x: %d, y: %d}\n", m.id, m.x, m.y)
	}
	text += "output:\n  template: \"{scan}_mod{module}.h5\"\n"
	path := filepath.Join(t.TempDir(), "array.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// simulateModules simulates one capture per module of the test array
// (module id and seed of their own) and returns them with their truths.
func simulateModules(t *testing.T) ([]string, []*sim.Truth) {
	t.Helper()
	var paths []string
	var truths []*sim.Truth
	for _, m := range arrayModules {
		p, truth := simulate(t, append([]string{"--module", fmt.Sprint(m.id), "--seed", fmt.Sprint(100 + m.id)}, arrayPlan...)...)
		paths = append(paths, p)
		truths = append(truths, truth)
	}
	return paths, truths
}

// interleave writes the records of the captures, one of each in turn, to
// a capture of its own, leaving out the modules in skip.
func interleave(t *testing.T, paths []string, skip ...int) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "array.pmcap")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var readers []*capture.Reader
	for _, p := range paths {
		r, err := capture.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		readers = append(readers, r)
	}
	w, err := capture.NewWriter(f, readers[0].Metadata())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for live := len(readers); live > 0; {
		live = 0
		for i, r := range readers {
			h, payload, err := r.Next(buf)
			if errors.Is(err, io.EOF) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			live++
			if !slices.Contains(skip, arrayModules[i].id) {
				if err := w.WriteFrame(&h, payload); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkArray has h5py + hdf5plugin read the master file and compare the
// array, module by module, with the simulator's images; modules in absent
// must read as the fill value with every frame missing, and so must the
// gaps between modules.
func checkArray(t *testing.T, master string, truths []*sim.Truth, absent ...int) {
	t.Helper()
	py := scantest.Python(t, "h5py", "hdf5plugin", "numpy")
	type module struct {
		ID     int        `json:"id"`
		X      int        `json:"x"`
		Y      int        `json:"y"`
		Absent bool       `json:"absent"`
		Images [][]uint32 `json:"images"`
	}
	exp := struct {
		Height  int      `json:"height"`
		Width   int      `json:"width"`
		Frames  int      `json:"frames"`
		Modules []module `json:"modules"`
	}{Height: 72, Width: 196, Frames: truths[0].Frames}
	for i, m := range arrayModules {
		mod := module{ID: m.id, X: m.x, Y: m.y, Absent: slices.Contains(absent, m.id)}
		scan, err := sim.New(scantest.Config(t, truths[i]))
		if err != nil {
			t.Fatal(err)
		}
		for n := range truths[i].Frames {
			img, _ := scan.Image(n, nil)
			mod.Images = append(mod.Images, img)
		}
		exp.Modules = append(exp.Modules, mod)
	}
	expPath := scantest.WriteJSON(t, exp)
	script := `
import json, sys, h5py, hdf5plugin, numpy as np
exp = json.load(open(sys.argv[2]))
det = "/entry/instrument/detector"
with h5py.File(sys.argv[1], "r") as f:
    data = f[det + "/data"][...]
    n = exp["frames"]
    assert data.shape == (n, exp["height"], exp["width"]), data.shape
    covered = np.zeros(data.shape[1:], bool)
    ids = list(f[det + "/module_ids"][...])
    status = f[det + "/frame_status"][...]
    assert status.shape == (n, len(ids)), status.shape
    for m in exp["modules"]:
        region = data[:, m["y"]:m["y"] + 32, m["x"]:m["x"] + 96]
        covered[m["y"]:m["y"] + 32, m["x"]:m["x"] + 96] = True
        want_status = [1] * n if m["absent"] else [0] * n
        got = f[det + "/module_%d/frame_status" % m["id"]][...].tolist()
        assert got == want_status, (m["id"], got)
        assert status[:, ids.index(m["id"])].tolist() == want_status
        if m["absent"]:
            assert not region.any(), "absent module %d does not read as 0" % m["id"]
            continue
        want = np.array(m["images"], dtype=np.uint32).reshape(n, 32, 96)
        assert np.array_equal(region, want), "module %d differs from the simulator" % m["id"]
    assert not data[:, ~covered].any(), "gaps between modules do not read as 0"
    assert np.array_equal(f["/exchange/data"][...], data[2:]), "exchange view"
print("ok")
`
	out, err := exec.Command(py, "-c", script, master, expPath).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("h5py reading the master %s: %v\n%s", master, err, out)
	}
}

// TestReplayModules replays an interleaved capture of a 2 x 2 array, and
// one with a module absent, and reads each through its master file.
func TestReplayModules(t *testing.T) {
	paths, truths := simulateModules(t)
	profile := arrayProfile(t)
	tests := []struct {
		name   string
		absent []int
		code   int
	}{
		{"all modules", nil, exitOK},
		{"module 3 absent", []int{3}, exitIncomplete},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			capturePath := interleave(t, paths, tt.absent...)
			dir := t.TempDir()
			master := filepath.Join(dir, "scan.h5")
			report := filepath.Join(dir, "report.html")
			code, stdout := runCaptured(t, append([]string{"replay", capturePath, "--profile", profile, "-o", master, "--report", report}, arrayPlan...)...)
			if code != tt.code {
				t.Fatalf("replay exit status %d, want %d\n%s", code, tt.code, stdout)
			}
			// The report shows every module's scan.
			page, err := os.ReadFile(report)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range arrayModules {
				if want := fmt.Sprintf(", module %d</h2>", m.id); !strings.Contains(string(page), want) {
					t.Errorf("report lacks %q", want)
				}
			}
			for i, m := range arrayModules {
				recs, _ := readFile(t, filepath.Join(dir, fmt.Sprintf("scan_m%d.h5", m.id)))
				for n, rec := range recs {
					want := uint8(frame.StatusOK)
					if slices.Contains(tt.absent, m.id) {
						want = frame.StatusMissing
					}
					if rec.Status != want || (want == frame.StatusOK && rec.DataCRC != truths[i].DataCRC[n]) {
						t.Errorf("module %d frame %d: status %d crc %08x, want status %d crc %08x",
							m.id, n, rec.Status, rec.DataCRC, want, truths[i].DataCRC[n])
					}
				}
			}
			code, stdout = runCaptured(t, "inspect", master)
			if code != exitOK || !strings.Contains(stdout, "master of 4 modules") {
				t.Errorf("inspect of a master: exit status %d\n%s", code, stdout)
			}
			for _, m := range arrayModules {
				want := fmt.Sprintf("module %-6d at (%d, %d)", m.id, m.y, m.x)
				if !strings.Contains(stdout, want) {
					t.Errorf("inspect of the master lacks %q:\n%s", want, stdout)
				}
			}
			// verify checks every module's file through the master.
			code, stdout = runCaptured(t, "verify", master)
			if code != tt.code || strings.Count(stdout, "chunks verified") != len(arrayModules) {
				t.Errorf("verify of the master: exit status %d, want %d, one line per module:\n%s", code, tt.code, stdout)
			}
			checkArray(t, master, truths, tt.absent...)
			// A module file gone is a failure of the whole scan.
			if err := os.Remove(filepath.Join(dir, "scan_m2.h5")); err != nil {
				t.Fatal(err)
			}
			if code, stdout := runCaptured(t, "verify", master); code != exitFailure || !strings.Contains(stdout, "BAD module 2") {
				t.Errorf("verify of a master without module 2's file: exit status %d, want %d naming it:\n%s", code, exitFailure, stdout)
			}
		})
	}
}

// TestMasterAhead writes the master with h5ingest master before the
// module files exist (template names: {scan}_mod{module}.h5 names the
// master {scan}_master.h5), then replays the scan and reads it through
// that master.
func TestMasterAhead(t *testing.T) {
	paths, truths := simulateModules(t)
	profile := arrayProfile(t)
	dir := t.TempDir()
	flags := append([]string{"--profile", profile, "--scan-id", "s7"}, arrayPlan...)
	t.Setenv("H5INGEST_OUTPUT_DIRECTORY", dir)
	code, stdout := runCaptured(t, append([]string{"master"}, flags...)...)
	if code != exitOK {
		t.Fatalf("master exit status %d\n%s", code, stdout)
	}
	master := filepath.Join(dir, "s7_master.h5")
	r, err := writer.Open(master)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, m := range r.Modules {
		files = append(files, m.File)
	}
	r.Close()
	if want := []string{"s7_mod0.h5", "s7_mod1.h5", "s7_mod2.h5", "s7_mod3.h5"}; !slices.Equal(files, want) {
		t.Errorf("master maps %v, want %v", files, want)
	}
	capturePath := interleave(t, paths)
	if code, stdout := runCaptured(t, append([]string{"replay", capturePath}, flags...)...); code != exitOK {
		t.Fatalf("replay exit status %d\n%s", code, stdout)
	}
	checkArray(t, master, truths)
}

// fileMetadata is what h5py reads of a file's scan metadata: strings,
// and each user metadata value with numpy's kind of its type ("i", "f",
// "b"; "str" for a string).
type fileMetadata struct {
	Title, Sample, Experiment, Start, End string
	User                                  map[string][2]any
}

// readMetadata has h5py read the scan metadata of the NXtomo files paths.
func readMetadata(t *testing.T, paths ...string) []fileMetadata {
	t.Helper()
	py := scantest.Python(t, "h5py")
	out, err := exec.Command(py, append([]string{"-c", `
import sys, json, h5py
s = lambda x: x.decode() if isinstance(x, bytes) else x
out = []
for path in sys.argv[1:]:
    with h5py.File(path, "r") as f:
        e = f["entry"]
        get = lambda p: s(e[p][()]) if p in e else ""
        user = {k: [s(v[()]), "str"] if isinstance(v[()], bytes) else [v[()].item(), v.dtype.kind]
                for k, v in e.get("user_metadata", {}).items()}
        out.append({"title": get("title"), "sample": get("sample/name"), "experiment": get("experiment_identifier"),
                    "start": get("start_time"), "end": get("end_time"), "user": user})
print(json.dumps(out))
`}, paths...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("h5py: %v\n%s", err, out)
	}
	var got []fileMetadata
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return got
}

// TestMasterMetadata writes a 2 x 2 scan as receiver nodes do, one
// acquire --module K per module, each given the scan's title, sample,
// experiment and user metadata, then its master with h5ingest master and
// no metadata flags: h5py reads them in the master, typed, with the
// scan's start and end (the earliest module start, the latest module
// end). Flags given to master then replace them (--meta key by key), and
// the same master run again keeps the file.
func TestMasterMetadata(t *testing.T) {
	paths, _ := simulateModules(t)
	profile := arrayProfile(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "scan.h5")
	meta := []string{"--title", "gold foam", "--sample", "Au", "--experiment-id", "p20261234",
		"--meta", "proposal=20261234", "--meta", "operator=ana", "--meta", "cooled=true", "--meta", "dose=1.5"}
	var modules []string
	for i, m := range arrayModules {
		addr := scantest.FreeAddr(t)
		done := startAcquire(append(append([]string{"--profile", profile, "--module", fmt.Sprint(m.id), "--listen", addr,
			"-o", out, "--connect-timeout", "20s"}, arrayPlan...), meta...)...)
		if code := run([]string{"send", paths[i], "--to", addr, "--module", fmt.Sprint(m.id), "--timeout", "20s"}); code != exitOK {
			t.Fatalf("send of module %d: exit status %d", m.id, code)
		}
		if code := <-done; code != exitOK {
			t.Fatalf("acquire of module %d: exit status %d", m.id, code)
		}
		modules = append(modules, filepath.Join(dir, fmt.Sprintf("scan_m%d.h5", m.id)))
	}
	master := func(args ...string) {
		t.Helper()
		code, stdout, stderr := runProcess(t, append(append([]string{"master", "--profile", profile, "-o", out}, arrayPlan...), args...)...)
		if code != exitOK {
			t.Fatalf("master %v: exit status %d\n%s%s", args, code, stdout, stderr)
		}
	}
	master()
	got := readMetadata(t, append([]string{out}, modules...)...)
	start, end := got[1].Start, got[1].End
	for _, m := range got[2:] {
		start, end = min(start, m.Start), max(end, m.End)
	}
	user := map[string][2]any{"proposal": {20261234.0, "i"}, "operator": {"ana", "str"}, "cooled": {true, "b"}, "dose": {1.5, "f"}}
	want := fileMetadata{Title: "gold foam", Sample: "Au", Experiment: "p20261234", Start: start, End: end, User: user}
	if !reflect.DeepEqual(got[0], want) {
		t.Errorf("master's metadata, as h5py reads it:\n%+v\nwant (the first module's start, the last one's end):\n%+v", got[0], want)
	}
	if start >= end || got[1].End >= got[len(got)-1].Start {
		t.Errorf("modules acquired one after the other: starts and ends %+v", got[1:])
	}

	// Flags replace what the module files say; --meta key by key.
	master("--title", "gold foam, again", "--sample", "Au-2", "--experiment-id", "p42", "--meta", "operator=bo", "--meta", "note=x")
	user["operator"], user["note"] = [2]any{"bo", "str"}, [2]any{"x", "str"}
	want = fileMetadata{Title: "gold foam, again", Sample: "Au-2", Experiment: "p42", Start: start, End: end, User: user}
	if got := readMetadata(t, out)[0]; !reflect.DeepEqual(got, want) {
		t.Errorf("master's metadata with flags:\n%+v\nwant\n%+v", got, want)
	}
	before, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	master("--title", "gold foam, again", "--sample", "Au-2", "--experiment-id", "p42", "--meta", "operator=bo", "--meta", "note=x")
	if after, err := os.Stat(out); err != nil || !os.SameFile(before, after) {
		t.Errorf("the same master written again replaced the file (%v)", err)
	}
}

// TestServeModulesMaster runs a 2 x 2 scan as a control system does on
// one host: a serve per module (one source.port in their environment,
// module K's receiver on it plus K's index), all armed over HTTP with the same scan id, title, sample,
// experiment and user metadata, a sender per module; then h5ingest master
// once every module file is written. h5py reads the request's metadata in
// the master, with the scan's start and end.
func TestServeModulesMaster(t *testing.T) {
	paths, _ := simulateModules(t)
	port := scantest.FreePorts(t, len(arrayModules))
	profiles, dir := arrayServeSetup(t, port, "30s") // read as each serve starts
	serves := make([]*serveProcess, len(arrayModules))
	for i, m := range arrayModules {
		serves[i] = startServe(t, "", "--profiles", profiles, "--module", fmt.Sprint(m.id))
	}
	arm := map[string]any{"profile": "array.yaml", "scan_id": "s5", "plan": map[string]any{"darks": 1, "flats": 1, "projections": 3},
		"title": "gold foam", "sample": "Au", "experiment_identifier": "p20261234",
		"user_metadata": map[string]any{"operator": "ana", "cooled": true}}
	for i, p := range serves {
		if code, st := p.call("POST", "/v1/scans", arm); code != http.StatusCreated {
			t.Fatalf("arm module %d: %d %v\n%s", arrayModules[i].id, code, st, p.out.String())
		}
	}
	for i, m := range arrayModules {
		if code := run([]string{"send", paths[i], "--to", fmt.Sprintf("127.0.0.1:%d", port+i), "--module", fmt.Sprint(m.id), "--timeout", "20s"}); code != exitOK {
			t.Fatalf("send of module %d: exit status %d", m.id, code)
		}
	}
	files := []string{filepath.Join(dir, "s5_master.h5")}
	for i, p := range serves {
		if _, st := p.call("GET", "/v1/scans/s5/wait?timeout=30", nil); st["state"] != "done" {
			t.Fatalf("module %d's scan: %v\n%s", arrayModules[i].id, st, p.out.String())
		}
		files = append(files, filepath.Join(dir, fmt.Sprintf("s5_mod%d.h5", arrayModules[i].id)))
	}
	if code, stdout, stderr := runProcess(t, append([]string{"master", "--profile", filepath.Join(profiles, "array.yaml"), "--scan-id", "s5"}, arrayPlan...)...); code != exitOK {
		t.Fatalf("master: exit status %d\n%s%s", code, stdout, stderr)
	}
	got := readMetadata(t, files...)
	start, end := got[1].Start, got[1].End
	for _, m := range got[2:] {
		start, end = min(start, m.Start), max(end, m.End)
	}
	want := fileMetadata{Title: "gold foam", Sample: "Au", Experiment: "p20261234", Start: start, End: end,
		User: map[string][2]any{"operator": {"ana", "str"}, "cooled": {true, "b"}}}
	if !reflect.DeepEqual(got[0], want) {
		t.Errorf("master's metadata, as h5py reads it:\n%+v\nwant:\n%+v", got[0], want)
	}
}

// TestReplayMasterMetadata replays a 2 x 2 scan, whose master is written
// before the first frame, with the scan's metadata: h5py reads it in the
// master, with the scan's start and end (the earliest module start, the
// latest module end), not the master's writing before the frames.
func TestReplayMasterMetadata(t *testing.T) {
	paths, _ := simulateModules(t)
	dir := t.TempDir()
	master := filepath.Join(dir, "scan.h5")
	code, stdout := runCaptured(t, append([]string{"replay", interleave(t, paths), "--profile", arrayProfile(t), "-o", master,
		"--title", "gold foam", "--sample", "Au", "--experiment-id", "p7", "--meta", "proposal=20261234"}, arrayPlan...)...)
	if code != exitOK {
		t.Fatalf("replay exit status %d\n%s", code, stdout)
	}
	files := []string{master}
	for _, m := range arrayModules {
		files = append(files, filepath.Join(dir, fmt.Sprintf("scan_m%d.h5", m.id)))
	}
	got := readMetadata(t, files...)
	start, end := got[1].Start, got[1].End
	for _, m := range got[2:] {
		start, end = min(start, m.Start), max(end, m.End)
	}
	want := fileMetadata{Title: "gold foam", Sample: "Au", Experiment: "p7", Start: start, End: end,
		User: map[string][2]any{"proposal": {20261234.0, "i"}}}
	if !reflect.DeepEqual(got[0], want) {
		t.Errorf("master's metadata, as h5py reads it:\n%+v\nwant:\n%+v", got[0], want)
	}
	if start >= end {
		t.Errorf("the scan starts at %s and ends at %s", start, end)
	}
}

// TestAcquireModules receives the four modules of the test array at once
// over the tcp provider, one sender per module, and reads the scan
// through its master file. The summary gives each module's receive counts.
func TestAcquireModules(t *testing.T) {
	t.Parallel()
	paths, truths := simulateModules(t)
	profile := arrayProfile(t)
	addr := scantest.FreeAddr(t)
	master := filepath.Join(t.TempDir(), "acq.h5")
	acquire := command(append([]string{"acquire", "--profile", profile, "--listen", addr, "-o", master,
		"--connect-timeout", "20s", "--slots", "4"}, arrayPlan...)...)
	var stdout bytes.Buffer
	acquire.Stdout = &stdout
	if err := acquire.Start(); err != nil {
		t.Fatal(err)
	}
	sent := make(chan int, len(paths))
	for i, p := range paths {
		go func() {
			sent <- run([]string{"send", p, "--to", addr, "--module", fmt.Sprint(arrayModules[i].id), "--timeout", "20s"})
		}()
	}
	for range paths {
		if code := <-sent; code != exitOK {
			t.Errorf("send exit status %d", code)
		}
	}
	if err := acquire.Wait(); err != nil {
		t.Fatalf("acquire: %v\n%s", err, stdout.String())
	}
	if n := strings.Count(stdout.String(), "  received        "); n != len(paths) {
		t.Errorf("%d receive counts in the summary, want one per module:\n%s", n, stdout.String())
	}
	checkArray(t, master, truths)
}

// TestAcquireOneModule receives module 1 of the test array alone, as a
// receiver node per module does: its file only, no master.
func TestAcquireOneModule(t *testing.T) {
	path, truth := simulate(t, append([]string{"--module", "1"}, arrayPlan...)...)
	addr := scantest.FreeAddr(t)
	dir := t.TempDir()
	done := startAcquire(append([]string{"--profile", arrayProfile(t), "--module", "1", "--listen", addr,
		"-o", filepath.Join(dir, "node.h5"), "--connect-timeout", "20s"}, arrayPlan...)...)
	if code := run([]string{"send", path, "--to", addr, "--module", "1", "--timeout", "20s"}); code != exitOK {
		t.Errorf("send exit status %d", code)
	}
	if code := <-done; code != exitOK {
		t.Fatalf("acquire exit status %d", code)
	}
	recs, _ := readFile(t, filepath.Join(dir, "node_m1.h5"))
	for n, rec := range recs {
		if rec.Status != frame.StatusOK || rec.DataCRC != truth.DataCRC[n] {
			t.Errorf("frame %d: status %d crc %08x, want ok %08x", n, rec.Status, rec.DataCRC, truth.DataCRC[n])
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "node.h5")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a one-module receiver wrote a master file: %v", err)
	}
	if code := run([]string{"acquire", "--profile", arrayProfile(t), "--module", "9", "-o", "x.h5"}); code != exitUsage {
		t.Errorf("acquire --module 9 of a profile without it: exit status %d, want %d", code, exitUsage)
	}
}

// TestMasterRefusesOtherMaster checks that master keeps an existing master
// file of the same scan, refuses one of another scan with a message saying
// how to replace it, and replaces it with --overwrite.
func TestMasterRefusesOtherMaster(t *testing.T) {
	profile := arrayProfile(t)
	master := filepath.Join(t.TempDir(), "scan.h5")
	tests := []struct {
		name string
		args []string
		code int
		want string // on stderr
	}{
		{"first", []string{"--projections", "4"}, exitOK, ""},
		{"same scan", []string{"--projections", "4"}, exitOK, ""},
		{"another scan", []string{"--projections", "5"}, exitFailure,
			"h5ingest: create master " + master + ": " + master + " exists (give --overwrite to replace it)\n"},
		{"another scan, --overwrite", []string{"--projections", "5", "--overwrite"}, exitOK, ""},
	}
	for _, tt := range tests {
		code, _, stderr := runProcess(t, append([]string{"master", "--profile", profile, "-o", master}, tt.args...)...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: exit status %d, stderr:\n%s\nwant status %d and %q", tt.name, code, stderr, tt.code, tt.want)
		}
	}
}

// TestMasterFlags checks that master shows only the flags that shape a
// master file, and refuses those that ask for a status page or a report,
// which it never makes.
func TestMasterFlags(t *testing.T) {
	profile := arrayProfile(t)
	master := filepath.Join(t.TempDir(), "scan.h5")
	for _, args := range [][]string{
		{"--report", filepath.Join(t.TempDir(), "report.html")},
		{"--metrics", "0"},
		{"--metrics-linger", "1s"},
	} {
		all := append([]string{"master", "--profile", profile, "-o", master, "--projections", "4"}, args...)
		if code, _, stderr := runProcess(t, all...); code != exitUsage || !strings.Contains(stderr, args[0]+": master writes no scan") {
			t.Errorf("master %v: exit status %d, stderr:\n%s\nwant status %d naming %s", args, code, stderr, exitUsage, args[0])
		}
	}
	if _, err := os.Stat(master); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("master file after refused flags: %v", err)
	}
	_, help, _ := runProcess(t, "master", "--help")
	for _, flag := range []string{"--backend", "--compression", "--level", "--flush", "--drop-when-full", "--log-level", "--metrics", "--report"} {
		if strings.Contains(help, flag+" ") {
			t.Errorf("master --help shows %s, which does not change a master file:\n%s", flag, help)
		}
	}
	for _, flag := range []string{"--profile", "-o, --output", "--scan-id", "--layout", "--overwrite", "--projections", "--sequence", "--date"} {
		if !strings.Contains(help, flag+" ") {
			t.Errorf("master --help lacks %s:\n%s", flag, help)
		}
	}
}

// TestModulesShareOneBackend checks that the modules of an array are
// decoded by one backend, opened once, not one per module: on a GPU one
// context for all rather than contexts the GPU time-slices.
func TestModulesShareOneBackend(t *testing.T) {
	paths, _ := simulateModules(t)
	capturePath := interleave(t, paths)
	master := filepath.Join(t.TempDir(), "scan.h5")
	code, _, stderr := runProcess(t, append([]string{"replay", capturePath, "--profile", arrayProfile(t), "-o", master,
		"--backend", "auto", "--log-level", "info"}, arrayPlan...)...)
	if code != exitOK {
		t.Fatalf("replay exit status %d\n%s", code, stderr)
	}
	if n := strings.Count(stderr, `"msg":"decode backend"`); n != 1 {
		t.Errorf("%d backends opened for %d modules, want 1:\n%s", n, len(paths), stderr)
	}
}
