package compress

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"h5ingest/compress/bitshuffle"
)

// The tests in this file check the codecs against independent
// implementations: the C bitshuffle library through its Python module, and
// libhdf5 with the filter plugins through h5py and hdf5plugin. Data goes
// between Go and Python through temporary files.

const python = "/usr/bin/python3"

// needPython skips the test unless python3 and the named modules load.
func needPython(t *testing.T, modules ...string) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s not found: cross-checks need it", python)
	}
	imports := "import " + strings.Join(modules, ", ")
	if out, err := exec.Command(python, "-c", imports).CombinedOutput(); err != nil {
		t.Skipf("%s cannot %q (install the Debian packages python3-bitshuffle/bitshuffle, python3-h5py, python3-hdf5plugin): %s",
			python, imports, bytes.TrimSpace(out))
	}
}

// skipCode is the exit status with which a script reports that the
// installed library cannot do what the test needs; it prints the reason.
const skipCode = 3

// runPython runs script with args; a run that exits with skipCode skips
// the test.
func runPython(t *testing.T, script string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(python, append([]string{"-c", script}, args...)...).CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == skipCode {
		t.Skipf("%s", bytes.TrimSpace(out))
	}
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	return out
}

func dtype(elemSize int) string { return fmt.Sprintf("<u%d", elemSize) }

// crossCase is one chunk for a cross-check script. The script reads and
// writes files named after Name in the test's directory.
type crossCase struct {
	Name  string `json:"name"`
	Codec string `json:"codec,omitempty"`
	Dtype string `json:"dtype"`
	Rows  int    `json:"rows"`
	Cols  int    `json:"cols"`
}

// runCases writes the cases to a manifest and runs script on it once, so
// that python starts once per test rather than once per case.
func runCases(t *testing.T, script, dir, mode string, cases []crossCase) {
	t.Helper()
	manifest, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "cases.json"), manifest)
	runPython(t, script, mode, dir)
}

// bitshuffleScript shuffles and compresses each case's data with the C
// library, and decompresses our chunk body (the module works without the
// 12-byte header).
const bitshuffleScript = `
import sys, os, json, numpy as np, bitshuffle
mode, d = sys.argv[1:]
for c in json.load(open(os.path.join(d, "cases.json"))):
    p = lambda ext: os.path.join(d, c["name"] + ext)
    a = np.fromfile(p(".data"), dtype=c["dtype"])
    bitshuffle.bitshuffle(a, 0).tofile(p(".shuf"))
    bitshuffle.compress_lz4(a, 0).tofile(p(".comp"))
    body = np.fromfile(p(".ours"), dtype=np.uint8)
    bitshuffle.decompress_lz4(body, a.shape, np.dtype(c["dtype"]), 0).tofile(p(".dec"))
`

func TestCrossBitshuffleLibrary(t *testing.T) {
	needPython(t, "numpy", "bitshuffle")
	dir := t.TempDir()
	path := func(c crossCase, ext string) string { return filepath.Join(dir, c.Name+ext) }
	var cases []crossCase
	for _, es := range []int{1, 2, 4, 8} {
		for _, n := range []int{8, 13, 2048, 5000, 5005, 64*1024 + 3} {
			c := crossCase{Name: fmt.Sprintf("uint%d-%d", 8*es, n), Dtype: dtype(es), Rows: 1, Cols: n}
			src := lowCounts(n, es, uint64(n*es))
			enc, err := mustNew(t, "bslz4", es).Encode(nil, src)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, path(c, ".data"), src)
			writeFile(t, path(c, ".ours"), enc[headerLen:])
			cases = append(cases, c)
		}
	}
	runCases(t, bitshuffleScript, dir, "", cases)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			src := readFile(t, path(c, ".data"))
			es := len(src) / c.Cols
			shuffled, err := bitshuffle.AppendShuffle(nil, src, es, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(shuffled, readFile(t, path(c, ".shuf"))) {
				t.Error("our transpose differs from the C library's bitshuffle")
			}
			if !bytes.Equal(readFile(t, path(c, ".dec")), src) {
				t.Error("the C library decodes our chunk to different data")
			}
			header := binary.BigEndian.AppendUint64(nil, uint64(len(src)))
			header = binary.BigEndian.AppendUint32(header, uint32(bitshuffle.DefaultBlockSize(es)*es))
			dec, err := mustNew(t, "bslz4", es).Decode(nil, append(header, readFile(t, path(c, ".comp"))...))
			if err != nil {
				t.Fatalf("decoding the C library's chunk: %v", err)
			}
			if !bytes.Equal(dec, src) {
				t.Error("the C library's chunk decodes to different data")
			}
		})
	}
}

// h5Script, in mode "write", writes each case's data through h5py with the
// codec's filters and saves the raw chunk and the stored filters; in mode
// "read" it stores our chunk with write_direct_chunk and saves what h5py
// reads back through the filter plugin. A case it cannot run gets a .skip
// file with the reason.
const h5Script = `
import sys, os, json, numpy as np, h5py, hdf5plugin
mode, d = sys.argv[1:]
for c in json.load(open(os.path.join(d, "cases.json"))):
    p = lambda ext: os.path.join(d, c["name"] + ext)
    codec, dt, shape = c["codec"], c["dtype"], (c["rows"], c["cols"])
    kw = {
        "bslz4": lambda: hdf5plugin.Bitshuffle(nelems=0, cname="lz4"),
        "bszstd": lambda: hdf5plugin.Bitshuffle(nelems=0, cname="zstd", clevel=3),
        "lz4": lambda: hdf5plugin.LZ4(),
        "deflate": lambda: dict(compression="gzip", compression_opts=6, shuffle=True),
    }[codec]()
    a = np.fromfile(p(".data"), dtype=dt).reshape(shape)
    with h5py.File(p(".h5"), "w") as f:
        ds = f.create_dataset("d", shape=shape, dtype=dt, chunks=shape, **kw)
        if mode == "write":
            ds[...] = a
            mask, raw = ds.id.read_direct_chunk((0, 0))
            if codec == "bszstd" and len(raw) == a.nbytes and int.from_bytes(raw[:8], "big") != a.nbytes:
                open(p(".skip"), "w").write("the installed bitshuffle plugin has no zstd: it stored the chunk bitshuffled, uncompressed")
                continue
            open(p(".chunk"), "wb").write(raw)
            plist = ds.id.get_create_plist()
            filters = [plist.get_filter(i)[:3] for i in range(plist.get_nfilters())]
            json.dump({"mask": mask, "filters": filters}, open(p(".json"), "w"))
        elif not os.path.exists(p(".skip")):
            ds.id.write_direct_chunk((0, 0), open(p(".ours"), "rb").read())
            ds[...].tofile(p(".read"))
`

func TestCrossHDF5Plugins(t *testing.T) {
	needPython(t, "numpy", "h5py", "hdf5plugin")
	dir := t.TempDir()
	path := func(c crossCase, ext string) string { return filepath.Join(dir, c.Name+ext) }
	var cases []crossCase
	for _, name := range []string{"bslz4", "bszstd", "lz4", "deflate"} {
		for _, es := range []int{2, 4} {
			for _, shape := range [][2]int{{1, 5005}, {1, 7}, {64, 100}, {1536, 1536}} {
				c := crossCase{Name: fmt.Sprintf("%s-uint%d-%dx%d", name, 8*es, shape[0], shape[1]),
					Codec: name, Dtype: dtype(es), Rows: shape[0], Cols: shape[1]}
				src := lowCounts(shape[0]*shape[1], es, uint64(shape[1]))
				enc, err := mustNew(t, name, es).Encode(nil, src)
				if err != nil {
					t.Fatal(err)
				}
				writeFile(t, path(c, ".data"), src)
				writeFile(t, path(c, ".ours"), enc)
				cases = append(cases, c)
			}
		}
	}
	runCases(t, h5Script, dir, "write", cases)
	runCases(t, h5Script, dir, "read", cases)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if reason, err := os.ReadFile(path(c, ".skip")); err == nil {
				t.Skip(string(reason))
			}
			src := readFile(t, path(c, ".data"))
			es := len(src) / (c.Rows * c.Cols)
			var got struct {
				Mask    uint32
				Filters [][]json.RawMessage
			}
			if err := json.Unmarshal(readFile(t, path(c, ".json")), &got); err != nil {
				t.Fatal(err)
			}
			if got.Mask != 0 {
				t.Fatalf("libhdf5 skipped filters (mask %#x)", got.Mask)
			}
			codec, err := FromFilters(parseFilters(t, got.Filters), es)
			if err != nil {
				t.Fatal(err)
			}
			dec, err := codec.Decode(nil, readFile(t, path(c, ".chunk")))
			if err != nil {
				t.Fatalf("decoding libhdf5's chunk: %v", err)
			}
			if !bytes.Equal(dec, src) {
				t.Error("libhdf5's chunk decodes to different data")
			}
			if !bytes.Equal(readFile(t, path(c, ".read")), src) {
				t.Error("h5py reads our chunk as different data")
			}
		})
	}
}

// parseFilters turns h5py's (id, flags, cd_values) triples into Filters.
func parseFilters(t *testing.T, raw [][]json.RawMessage) []Filter {
	t.Helper()
	var fs []Filter
	for _, r := range raw {
		var f Filter
		var flags uint32
		if len(r) != 3 || json.Unmarshal(r[0], &f.ID) != nil || json.Unmarshal(r[1], &flags) != nil ||
			json.Unmarshal(r[2], &f.Values) != nil {
			t.Fatalf("unexpected filter description %s", r)
		}
		f.Optional = flags&1 != 0
		fs = append(fs, f)
	}
	return fs
}

func writeFile(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
