package extend_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"example.org/beamline/extend"

	"h5ingest/registry"
	"h5ingest/stock"
	"h5ingest/writer"
)

// beamlineProfile chooses every stage of package extend that a file
// shows: the flat layout, the zstd codec (filter 32015) at one of its fast
// levels, and the threshold processor at the threshold it sets.
const beamlineProfile = `name: beamline
backend: cpu
output:
  layout: flat
  compression: zstd
  level: -5
  processors: [{name: threshold, min: 1500}]
stream:
  queue: 32
`

// rawProfile writes the same scan unprocessed and uncompressed, the
// reference the beamline's file is checked against.
const rawProfile = `name: raw
backend: cpu
output:
  layout: flat
  compression: none
`

// beamlineMin is the threshold beamlineProfile sets: above the darks'
// counts and within the projections', so that it zeroes some pixels of
// every projection, not only the darks, and a processor that ignored the
// option (the default is 100) would be seen.
const beamlineMin = 1500

// python is Debian's Python, which has h5py, hdf5plugin, zmq and cbor2.
const python = "/usr/bin/python3"

// TestCommand builds the beamline's own h5ingest (cmd/h5ingest-beamline:
// stock.Register, extend.Register, cli.Run) and uses it as an operator
// would: it finds the beamline's stages in profiles names and the flags'
// help, checks the profile, replays a simulated scan with the zstd codec,
// the flat layout and the threshold processor configured in the profile,
// verifies and inspects the file, reads it with h5py, and streams the
// scan to the Python consumer of tools/stream. The thresholded pixels are
// compared with an unprocessed replay of the same scan.
func TestCommand(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "h5ingest-beamline")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/h5ingest-beamline").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	h5ingest := func(t *testing.T, want int, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != want {
			t.Fatalf("h5ingest-beamline %s: exit status %d, want %d\n%s", strings.Join(args, " "), code, want, out)
		}
		return string(out)
	}
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}

	names := h5ingest(t, 0, "profiles", "names")
	for _, want := range []string{
		"codec      zstd ", "codec      deflate-max ", "layout     flat ", "processor  threshold ", // the beamline's
		"codec      bslz4 ", "layout     nxtomo ", "processor  flatfield ", // h5ingest's
	} {
		if !strings.Contains(names, want) {
			t.Errorf("profiles names: no line starting %q:\n%s", want, names)
		}
	}
	help := h5ingest(t, 0, "replay", "--help")
	for _, want := range []string{"bslz4, bszstd, lz4, deflate, none, deflate-max or zstd", "zstd -7 to 22"} {
		if !strings.Contains(help, want) {
			t.Errorf("replay --help does not say %q:\n%s", want, help)
		}
	}
	profile := write("beamline.yaml", beamlineProfile)
	h5ingest(t, 0, "profiles", "check", profile)
	misspelt := write("misspelt.yaml", strings.Replace(beamlineProfile, "min: 1500", "mins: 1500", 1))
	if out := h5ingest(t, 2, "profiles", "check", misspelt); !strings.Contains(out, "output.processors[0].mins: unknown option of processor threshold (it knows min)") {
		t.Errorf("profiles check of a misspelt option says:\n%s", out)
	}
	zero := write("zero.yaml", strings.Replace(beamlineProfile, "min: 1500", "min: 0", 1))
	if out := h5ingest(t, 2, "profiles", "check", zero); !strings.Contains(out, "key output.processors[0]: processor threshold: min: 0, want 1 or more") {
		t.Errorf("profiles check of a threshold of 0 says:\n%s", out)
	}

	h5ingest(t, 0, "simulate", "--scene", "tomo", "--chips", "3x2", "--chip-size", "32x16",
		"--darks", "2", "--flats", "2", "--projections", "8", "--seed", "11", "-o", "scan.pmcap")
	out := h5ingest(t, 0, "replay", "--profile", profile, "-o", "scan.h5", "scan.pmcap")
	if !regexp.MustCompile(`(?m)^  ok +12$`).MatchString(out) {
		t.Errorf("replay's summary does not say 12 frames ok:\n%s", out)
	}
	h5ingest(t, 0, "replay", "--profile", write("raw.yaml", rawProfile), "-o", "raw.h5", "scan.pmcap")
	if out := h5ingest(t, 0, "verify", "scan.h5"); !strings.Contains(out, "scan.h5: 12 frames, 12 chunks verified; ok 12, missing 0") {
		t.Errorf("verify says:\n%s", out)
	}
	out = h5ingest(t, 0, "inspect", "scan.h5")
	for _, want := range []string{"compression   zstd: zstd (filter 32015: 4294967291)", "plan          2 darks, 2 flats, 8 projections"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect says:\n%s\nwant a line with %q", out, want)
		}
	}

	want, changed := thresholded(t, filepath.Join(dir, "raw.h5"), beamlineMin)
	below := 0
	for n, c := range changed {
		if c == 0 && n >= 4 {
			t.Fatalf("projection %d has no pixel below the threshold: the test proves nothing", n)
		}
		below += c
	}
	got := images(t, filepath.Join(dir, "scan.h5"))
	if len(got) != 12 {
		t.Fatalf("the beamline's file has %d frames, want 12", len(got))
	}
	for n := range got {
		if !bytes.Equal(got[n], want[n]) {
			t.Errorf("frame %d is not the unprocessed frame with its pixels below %d set to 0", n, beamlineMin)
		}
	}
	t.Logf("%d pixels below %d counts set to 0 in 12 frames", below, beamlineMin)

	t.Run("h5py", func(t *testing.T) {
		if out, err := exec.Command(python, "-c", "import h5py, numpy, zstandard").CombinedOutput(); err != nil {
			t.Skipf("%s cannot import h5py, numpy and zstandard (Debian: python3-h5py python3-numpy python3-zstandard): %v %s", python, err, out)
		}
		got, err := exec.Command(python, "-c", h5pyCheck, filepath.Join(dir, "scan.h5"), filepath.Join(dir, "raw.h5"), fmt.Sprint(beamlineMin)).CombinedOutput()
		if err != nil {
			t.Fatalf("h5py: %v\n%s", err, got)
		}
		var r struct {
			Filters           []int
			Shape             []int
			ImageKeys         []int `json:"image_keys"`
			Thresholded, Plug bool
			Below             int
		}
		if err := json.Unmarshal(got, &r); err != nil {
			t.Fatalf("h5py: %v\n%s", err, got)
		}
		if fmt.Sprint(r.Filters, r.Shape, r.ImageKeys) != "[32015] [12 32 96] [2 2 1 1 0 0 0 0 0 0 0 0]" || !r.Thresholded || r.Below != below {
			t.Errorf("h5py read %s; want filter 32015, 12 frames of 32 x 96, the plan's image keys, the raw frames with %d pixels below %d set to 0", got, below, beamlineMin)
		}
		if !r.Plug {
			t.Log("this h5py has no zstd filter (hdf5plugin from PyPI has one, Debian 12's has not): the chunks were read raw and decoded with zstandard")
		}
	})

	t.Run("stream", func(t *testing.T) {
		for _, m := range []string{"zmq", "cbor2", "bitshuffle", "crcmod", "numpy"} {
			if out, err := exec.Command(python, "-c", "import "+m).CombinedOutput(); err != nil {
				t.Skipf("%s cannot import %s, which tools/stream/consume.py needs: %v %s", python, m, err, out)
			}
		}
		ep := freeEndpoint(t)
		// Stream V2 cannot carry zstd chunks: the codec's entry says so,
		// and the command refuses before it writes anything.
		if out := h5ingest(t, 2, "replay", "--profile", profile, "-o", "refused.h5", "--stream", ep, "scan.pmcap"); !strings.Contains(out, "output.compression zstd, which Stream V2 cannot carry") {
			t.Errorf("replay --stream with zstd says:\n%s", out)
		}
		consumer := exec.Command(python, filepath.Join(h5ingestDir(t), "tools", "stream", "consume.py"), ep, "--timeout", "30")
		stdout, err := consumer.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		consumer.Stderr = &stderr
		if err := consumer.Start(); err != nil {
			t.Fatal(err)
		}
		defer consumer.Process.Kill()
		lines := bufio.NewScanner(stdout)
		lines.Buffer(nil, 1<<20)
		lines.Scan() // connected
		out := h5ingest(t, 0, "replay", "--profile", profile, "--compression", "bslz4", "--level", "0", "-o", "streamed.h5", "--stream", ep, "scan.pmcap")
		if !strings.Contains(out, "stream          12 images sent, 0 dropped") {
			t.Errorf("replay --stream's summary:\n%s", out)
		}
		images, messages := 0, 0
		for lines.Scan() {
			messages++
			var m struct {
				Type     string
				ImageID  int `json:"image_id"`
				Sum      uint64
				ImageKey int `json:"image_key"`
			}
			if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
				t.Fatalf("consumer: %s: %v", lines.Text(), err)
			}
			if m.Type != "image" {
				continue
			}
			if m.ImageID != images || m.Sum != sum(want[images]) {
				t.Errorf("image %d (the %dth): %s; want the sum of the thresholded frame, %d", m.ImageID, images, lines.Text(), sum(want[images]))
			}
			images++
		}
		if err := consumer.Wait(); err != nil { // 1: a CRC mismatch, 2: a timeout
			t.Errorf("consumer: %v\n%s", err, stderr.String())
		}
		if images != 12 || messages != 14 {
			t.Errorf("the consumer got %d images in %d messages, want 12 in 14 (start, images, end)", images, messages)
		}
	})
}

// h5pyCheck reads the beamline's file as a facility's analysis would:
// from the NeXus default attributes to the frame stack, its filter
// pipeline, and its chunks, decoded by hdf5plugin's zstd filter where
// h5py has it and by zstandard from the raw chunks where it has not,
// against the unprocessed file's frames with the threshold applied.
const h5pyCheck = `import json, sys, h5py, numpy, zstandard
try:
    import hdf5plugin
except ImportError:
    pass
f, raw, low = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r"), int(sys.argv[3])
e = f[f.attrs["default"]]
d = e[e.attrs["default"]]
s = d[d.attrs["signal"]]
plist = s.id.get_create_plist()
filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
size = s.shape[1] * s.shape[2] * s.dtype.itemsize
z = zstandard.ZstdDecompressor()
images = numpy.stack([numpy.frombuffer(z.decompress(s.id.read_direct_chunk((n, 0, 0))[1], max_output_size=size), s.dtype).reshape(s.shape[1:]) for n in range(s.shape[0])])
plug = h5py.h5z.filter_avail(32015)
if plug:
    assert numpy.array_equal(s[:], images), "hdf5plugin and zstandard decode differently"
r = raw["/entry/data/data"][:]
print(json.dumps({"filters": filters, "shape": list(s.shape), "image_keys": [int(k) for k in d["image_key"][:]],
    "thresholded": bool(numpy.array_equal(images, numpy.where(r < low, 0, r))), "below": int(((r > 0) & (r < low)).sum()), "plug": bool(plug)}))
`

// images returns the decoded frames of the flat-layout file at path, read
// with h5ingest's reader and the codec the beamline's registry finds for
// its filters.
func images(t *testing.T, path string) [][]byte {
	t.Helper()
	stages := registry.New()
	if err := stock.Register(stages); err != nil {
		t.Fatal(err)
	}
	if err := extend.Register(stages); err != nil {
		t.Fatal(err)
	}
	r, err := writer.OpenPlain(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	codec, err := stages.ReadCodec(r.Filters, r.ElemSize)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for n := range r.Frames {
		chunk, _, err := r.ReadChunk(n, nil)
		if err != nil {
			t.Fatal(err)
		}
		img, err := codec.Decode(nil, chunk)
		if err != nil {
			t.Fatalf("frame %d: %v", n, err)
		}
		out = append(out, img)
	}
	return out
}

// thresholded returns the frames of the unprocessed file at path with
// every pixel below min set to 0, as the threshold processor leaves them,
// and how many pixels that changed in each.
func thresholded(t *testing.T, path string, min uint32) ([][]byte, []int) {
	t.Helper()
	frames := images(t, path)
	changed := make([]int, len(frames))
	for n, img := range frames {
		for i := 0; i+3 < len(img); i += 4 {
			if v := binary.LittleEndian.Uint32(img[i:]); v != 0 && v < min {
				binary.LittleEndian.PutUint32(img[i:], 0)
				changed[n]++
			}
		}
	}
	return frames, changed
}

// sum returns the sum of an image's 32-bit pixels.
func sum(img []byte) uint64 {
	var s uint64
	for i := 0; i+3 < len(img); i += 4 {
		s += uint64(binary.LittleEndian.Uint32(img[i:]))
	}
	return s
}

// freeEndpoint returns a tcp:// endpoint on loopback whose port was free
// a moment ago.
func freeEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "tcp://" + l.Addr().String()
}

// h5ingestDir returns the directory of the h5ingest module this module
// builds with: the replace's target here, the module cache's copy where
// go.mod pins a release instead.
func h5ingestDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "h5ingest").Output()
	if err != nil {
		t.Fatalf("go list -m h5ingest: %v", err)
	}
	return strings.TrimSpace(string(out))
}
