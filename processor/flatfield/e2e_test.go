package flatfield_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/registry"
	"h5ingest/scan"
	"h5ingest/source/capture"
	"h5ingest/source/sim"
	"h5ingest/stock"
)

const py = "/usr/bin/python3"

// replay writes a simulated tomography scan of format f (4 darks, 5
// flats, 12 projections) to a capture in dir, replays it into dir/name.h5
// under a profile of the YAML text, verifies the file and returns its
// path and what the replay returned. A note of the scan about a
// processor fails t.
func replay(t *testing.T, dir, name string, f frame.Format, profile string) (string, scan.Result) {
	t.Helper()
	out, res, err := replayScan(t, dir, name, f, profile)
	if err != nil {
		t.Fatalf("replay: %v\n%v", err, res)
	}
	for _, m := range res.Modules {
		for _, n := range m.Notes {
			if strings.Contains(n.Text, "processor") {
				t.Errorf("replay: %s", n.Text)
			}
		}
	}
	if report, err := scan.Verify(context.Background(), stages(t), out, scan.DefaultVerifyStall); err != nil {
		t.Fatalf("verify: %v\n%+v", err, report)
	}
	return out, res
}

// stages returns the stock registry.
func stages(t *testing.T) *registry.Registry {
	t.Helper()
	reg := registry.New()
	if err := stock.Register(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

// replayScan is replay without the checks: the file's path and what the
// replay returned.
func replayScan(t *testing.T, dir, name string, f frame.Format, profile string) (string, scan.Result, error) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Format, cfg.Plan, cfg.Seed = f, plan.Tomo(4, 5, 12, 0, 180), 7
	capPath := filepath.Join(dir, name+".pmcap")
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := os.Create(capPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteCapture(c, capture.Metadata{Profile: "test"}); err != nil {
		t.Fatal(err)
	}
	c.Close()

	reg := stages(t)
	profPath := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(profPath, []byte(profile), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := config.Load(profPath, reg.Names())
	if err != nil {
		return "", scan.Result{}, err
	}
	out := filepath.Join(dir, name+".h5")
	files, err := scan.NewFiles(p, scan.Names{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	res, err := scan.Replay(context.Background(), scan.ReplayOptions{
		Options: scan.Options{Profile: p, Stages: reg}, Files: files, Captures: []string{capPath}})
	return out, res, err
}

// numpyCheck has numpy compute the flat-field correction from the raw
// frames of the file at path, read with h5py, and compares the previews
// with it: those of the dataset dset of the file, or, where dset is a
// .npz a consumer of the live stream wrote, those it received (by
// image_id). Frames that are no projection have no preview (NaN).
const numpyCheck = `
import sys, h5py, hdf5plugin, numpy as np
path, dset, b, lo, hi = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
f = h5py.File(path, "r")
raw = f["/entry/instrument/detector/data"][()].astype(np.float64)
keys = f["/entry/instrument/detector/image_key"][()]
n, h, w = raw.shape
oh, ow = h // b, w // b
if dset.endswith(".npz"):
    z = np.load(dset)
    assert z["previews"].dtype == np.float32 and z["previews"].shape[1:] == (oh, ow), (z["previews"].dtype, z["previews"].shape)
    got = np.full((n, oh, ow), np.nan, np.float32)
    got[z["preview_ids"]] = z["previews"]
else:
    got = f[dset][()]
first = int(np.argmax(keys == 0))
ref = keys[:first]
dark = raw[:first][ref == 2].mean(axis=0) if (ref == 2).any() else np.zeros(raw.shape[1:])
flat = raw[:first][ref == 1].mean(axis=0)
den = flat - dark
ok = den > 0
assert got.dtype == np.float32 and got.shape == (n, oh, ow), (got.dtype, got.shape)
worst = 0.0
for i in range(n):
    if keys[i] != 0:
        assert np.isnan(got[i]).all(), "frame %d (key %d) has a preview" % (i, keys[i])
        continue
    c = np.where(ok, (raw[i] - dark) / np.where(ok, den, 1), 0.0)
    c = np.clip(c, lo, hi)[:oh * b, :ow * b].reshape(oh, b, ow, b).mean(axis=(1, 3))
    assert np.allclose(got[i], c, rtol=1e-5, atol=1e-5), "frame %d: max diff %g" % (i, np.abs(got[i] - c).max())
    worst = max(worst, float(np.abs(got[i] - c).max()))
    assert c.std() > 0.01, "frame %d: a flat preview proves nothing" % i
print("ok", worst)
`

// checkNumpy runs numpyCheck.
func checkNumpy(t *testing.T, out, previews string, bin int, lo, hi float64) {
	t.Helper()
	res, err := exec.Command(py, "-c", numpyCheck, out, previews, strconv.Itoa(bin), fmt.Sprint(lo), fmt.Sprint(hi)).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(res), "ok") {
		t.Fatalf("numpy check: %v\n%s", err, res)
	}
	t.Logf("numpy: %s", strings.TrimSpace(string(res)))
}

// needPython skips t where Debian's Python lacks a module the checks use.
func needPython(t *testing.T, modules string) {
	t.Helper()
	if out, err := exec.Command(py, "-c", "import "+modules).CombinedOutput(); err != nil {
		t.Skipf("%s cannot import %s: %v %s", py, modules, err, out)
	}
}

// TestReplayMatchesNumpy replays a simulated tomography scan with a
// profile that names flatfield with options, then has numpy compute the
// same correction from the raw frames of the file, read with h5py: the
// previews match it, frames that are no projection read NaN, and verify
// passes (the raw frames are stored unchanged).
func TestReplayMatchesNumpy(t *testing.T) {
	needPython(t, "h5py, hdf5plugin, numpy")
	dir := t.TempDir()
	for _, c := range []struct {
		name    string
		format  frame.Format
		options string
		bin     int
		lo, hi  float64
	}{
		{"24-bit-bin2", frame.Format{Geometry: frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16},
			Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}, "bin: 2, max: 1.5", 2, 0, 1.5},
		{"12-bit-bin3", frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 32, ChipHeight: 16},
			Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR}, "bin: 3, dataset: /processed/flat", 3, 0, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, _ := replay(t, dir, c.name, c.format, "name: ff\noutput:\n  processors: [{name: flatfield, "+c.options+"}]\n")
			dataset := "/flatfield/preview"
			if strings.Contains(c.options, "dataset") {
				dataset = "/processed/flat"
			}
			checkNumpy(t, out, dataset, c.bin, c.lo, c.hi)
		})
	}
}

// streamConsumer receives a scan's live stream (raw) and the flat-field
// previews' series (preview) at once, as an online tomography client
// would, each message decoded by tools/stream/consume.py's tag hook, up
// to both end messages. It saves the previews and the raw images by
// image_id in an .npz, and prints each series' start message and counts.
const streamConsumer = `
import sys, json, time, numpy as np, zmq, cbor2
sys.path.insert(0, sys.argv[1])
import consume
raw_ep, preview_ep, out = sys.argv[2], sys.argv[3], sys.argv[4]
ctx = zmq.Context()
poller, names = zmq.Poller(), {}
for name, ep in (("raw", raw_ep), ("preview", preview_ep)):
    s = ctx.socket(zmq.PULL)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(ep)
    poller.register(s, zmq.POLLIN)
    names[s] = name
print("ready", flush=True)
got = {"raw": [], "preview": []}
info = {"raw": {}, "preview": {}}
deadline = time.time() + 60
while sum("end" in i for i in info.values()) < 2 and time.time() < deadline:
    for s, _ in poller.poll(500):
        b = s.recv()
        name = names[s]
        assert b[:3] == b"\xd9\xd9\xf7", "no self-described tag"
        msg = cbor2.loads(b, tag_hook=consume.tag_hook)
        if msg["type"] == "image":
            got[name].append((msg["image_id"], msg["data"]["threshold_1"], msg["user_data"]))
        else:
            info[name][msg["type"]] = {k: v for k, v in msg.items() if k in (
                "series_unique_id", "image_dtype", "image_size_x", "image_size_y", "number_of_images", "flatfield_enabled", "user_data")}
for name in got:
    info[name]["image_ids"] = [i for i, _, _ in got[name]]
    info[name]["image_keys"] = [u.get("image_key") for _, _, u in got[name]]
np.savez(out, preview_ids=np.array(info["preview"]["image_ids"], int), previews=np.array([a for _, a, _ in got["preview"]]),
         raw_ids=np.array(info["raw"]["image_ids"], int), raws=np.array([a for _, a, _ in got["raw"]]))
print(json.dumps(info, default=str), flush=True)
`

// freePorts returns a loopback port p such that p and p+1 are free.
func freePorts(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
		l.Close()
		if err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no two free ports side by side on 127.0.0.1")
	return 0
}

// TestStreamRouteMatchesNumpy replays a tomography scan (darks, flats,
// projections: image keys 2, 1, 0) whose profile has a live stream and
// sends flatfield's previews to it (to: stream), to a consumer of both
// series: the previews' series, on the port after the scan's, is float32,
// flat-field corrected, one image per projection in image_id order, and
// numpy's correction of the file's frames matches it; the scan's own
// series carries every raw frame, equal to the file's, as it does
// without the processor; and the file verifies (its frames unchanged).
func TestStreamRouteMatchesNumpy(t *testing.T) {
	needPython(t, "h5py, hdf5plugin, numpy, zmq, cbor2, bitshuffle, crcmod")
	tools, err := filepath.Abs("../../tools/stream")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	port := freePorts(t)
	npz := filepath.Join(dir, "received.npz")
	consumer := exec.Command(py, "-c", streamConsumer, tools,
		fmt.Sprintf("tcp://127.0.0.1:%d", port), fmt.Sprintf("tcp://127.0.0.1:%d", port+1), npz)
	stdout, err := consumer.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	consumer.Stderr = &stderr
	if err := consumer.Start(); err != nil {
		t.Fatal(err)
	}
	defer consumer.Process.Kill()
	lines := bufio.NewScanner(stdout)
	lines.Buffer(nil, 1<<20)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("consumer: %q %s", lines.Text(), stderr.String())
	}

	f := frame.Format{Geometry: frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16},
		Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	began := time.Now()
	out, res := replay(t, dir, "stream", f, fmt.Sprintf("name: ff\nstream:\n  address: tcp://127.0.0.1:%d\n  queue: 64\n"+
		"output:\n  processors: [{name: flatfield, to: stream, bin: 2, max: 1.5}]\n", port))
	t.Logf("replay with both series took %v", time.Since(began).Round(time.Millisecond))
	if s := res.Modules[0].Series; len(s) != 1 || s[0].Name != "flatfield" || s[0].Sent != 12 || s[0].Dropped != 0 || !s[0].Ended {
		t.Errorf("the summary's series %+v, want flatfield's 12 previews sent and its end delivered", s)
	}
	if !lines.Scan() {
		t.Fatalf("consumer printed nothing: %s", stderr.String())
	}
	summary := lines.Text()
	if err := consumer.Wait(); err != nil {
		t.Fatalf("consumer: %v\n%s", err, stderr.String())
	}
	t.Logf("consumer: %.600s", summary)
	checkNumpy(t, out, npz, 2, 0, 1.5)

	// The series themselves, and the raw frames against the file's.
	script := `
import sys, json, h5py, hdf5plugin, numpy as np
info, path, z = json.loads(sys.argv[1]), sys.argv[2], np.load(sys.argv[3])
f = h5py.File(path, "r")
data, keys = f["/entry/instrument/detector/data"][()], f["/entry/instrument/detector/image_key"][()]
n, h, w = data.shape
raw, pre = info["raw"], info["preview"]
assert "end" in raw and "end" in pre, "an end of series is missing"
assert raw["image_ids"] == list(range(n)), raw["image_ids"]
assert (z["raws"] == data).all() and z["raws"].dtype == data.dtype, "the raw stream's frames are not the file's"
assert raw["start"]["flatfield_enabled"] is False and raw["start"]["image_dtype"] == "uint32", raw["start"]
proj = [i for i in range(n) if keys[i] == 0]
assert pre["image_ids"] == proj, (pre["image_ids"], proj)
assert set(pre["image_keys"]) == {0}, pre["image_keys"]
s = pre["start"]
assert s["image_dtype"] == "float32" and s["flatfield_enabled"] is True, s
assert (s["image_size_y"], s["image_size_x"], s["number_of_images"]) == (h // 2, w // 2, len(proj)), s
assert s["user_data"]["images_of"] == raw["start"]["series_unique_id"], s["user_data"]
assert s["series_unique_id"] != raw["start"]["series_unique_id"]
print("ok", len(proj), "previews,", n, "raw frames")
`
	checked, err := exec.Command(py, "-c", script, summary, out, npz).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(checked), "ok") {
		t.Fatalf("series check: %v\n%s", err, checked)
	}
	t.Logf("%s", strings.TrimSpace(string(checked)))
}

// TestStreamRouteFaults: a stream route that cannot work is refused
// before the scan starts, naming what is wrong; one whose consumer is
// absent costs the scan nothing: the file is whole and verifies.
func TestStreamRouteFaults(t *testing.T) {
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 1, ChipWidth: 32, ChipHeight: 16},
		Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR}
	dir := t.TempDir()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	taken := busy.Addr().(*net.TCPAddr).Port
	live := fmt.Sprintf("stream: {address: 'tcp://127.0.0.1:%d', linger: 500ms}\n", freePorts(t))
	for _, c := range []struct {
		name, profile, want string
	}{
		{"no stream.address", "output:\n  processors: [{name: flatfield, to: stream}]\n", "to: stream: this scan has no live stream"},
		{"unknown route", live + "output:\n  processors: [{name: flatfield, to: screen}]\n", `to: "screen"`},
		{"address not tcp", live + "output:\n  processors: [{name: flatfield, to: stream, address: '127.0.0.1:1'}]\n", "want tcp://HOST:PORT"},
		{"unknown key", live + "output:\n  processors: [{name: flatfield, to: stream, port: 1}]\n", "port"},
		{"address taken", live + fmt.Sprintf("output:\n  processors: [{name: flatfield, to: stream, address: 'tcp://127.0.0.1:%d'}]\n", taken), "series flatfield"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, _, err := replayScan(t, dir, "fault", f, "name: ff\n"+c.profile)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("replay: %v, want an error with %q", err, c.want)
			}
			// Refused before its first frame, the scan leaves no file:
			// neither its final name, nor its temporary one, nor its lock.
			left, _ := filepath.Glob(filepath.Join(dir, "*fault.h5*"))
			if out != "" && len(left) > 0 {
				t.Errorf("a refused scan left %v", left)
			}
		})
	}
	t.Run("no consumer", func(t *testing.T) {
		began := time.Now()
		_, res := replay(t, dir, "absent", f, "name: ff\n"+live+"output:\n  processors: [{name: flatfield, to: stream}]\n")
		if d := time.Since(began); d > 10*time.Second {
			t.Errorf("the scan took %v without a consumer", d)
		}
		m := res.Modules[0]
		if s := m.Series; len(s) != 1 || s[0].Sent != 0 || s[0].NoConsumer != 12 || s[0].Ended {
			t.Errorf("the summary's series %+v, want flatfield's 12 previews left out for no consumer", s)
		}
		if m.Progress.OK != 21 {
			t.Errorf("%d frames ok, want all 21", m.Progress.OK)
		}
		var warned bool
		for _, n := range m.Notes {
			warned = warned || n.Kind == scan.Warning && strings.Contains(n.Text, "series flatfield") && strings.Contains(n.Text, "no consumer")
		}
		if !warned {
			t.Errorf("no warning that the previews' series had no consumer: %v", m.Notes)
		}
	})
}

// TestProfileCheckRefuses checks that options no scan could run with are
// refused where a profile is checked, with h5ingest's registry (as
// "h5ingest profiles check" and the scan service's arm request check
// it), naming the processor's entry and the option, before any scan.
func TestProfileCheckRefuses(t *testing.T) {
	for _, c := range []struct{ entry, want string }{
		{"{name: flatfield, bin: 0}", "key output.processors[0]: processor flatfield: bin: 0, want 1 or more"},
		{"{name: flatfield, every: -1}", "key output.processors[0]: processor flatfield: every: -1, want 1 or more"},
		{"{name: flatfield, to: file}", `key output.processors[0]: processor flatfield: to: "file", want dataset or stream`},
		{"{name: flatfield, min: 3}", "key output.processors[0]: processor flatfield: min 3, max 2: want min below max"},
		{"{name: flatfield, wait: -1s}", "key output.processors[0]: processor flatfield: wait: -1s is negative"},
		{"{name: flatfield, to: stream, address: 'host:1'}", `key output.processors[0]: processor flatfield: address: "host:1", want tcp://HOST:PORT`},
		{"{name: flatfield, bins: 2}", "key output.processors[0].bins: unknown option of processor flatfield"},
	} {
		t.Run(c.entry, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ff.yaml")
			if err := os.WriteFile(path, []byte("output:\n  processors: ["+c.entry+"]\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := config.Load(path, stages(t).Names()); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("profile check: %v, want %q", err, c.want)
			}
		})
	}
}
