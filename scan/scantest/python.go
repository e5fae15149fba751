package scantest

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"h5ingest/frame"
	"h5ingest/source/sim"
	"h5ingest/writer"
)

// python3 is the interpreter the cross-checks run: Debian's, which has
// the modules make deps installs (h5py, hdf5plugin, numpy ...), rather
// than whichever python3 comes first on PATH.
const python3 = "/usr/bin/python3"

// Python returns the path of Debian's Python 3 (/usr/bin/python3, which
// has the modules make deps installs, rather than whichever python3
// comes first on PATH) if it imports each of the modules, and skips the
// test where it does not. What it finds of a module holds for the rest
// of the test binary's run: each module is tried once, in one
// interpreter with the others asked for at the same time, since an
// import such as dxchange's takes seconds.
func Python(t testing.TB, modules ...string) string {
	t.Helper()
	importMu.Lock()
	defer importMu.Unlock()
	var untried []string
	for _, m := range modules {
		if _, ok := imported[m]; !ok {
			untried = append(untried, m)
		}
	}
	if len(untried) > 0 {
		tryImports(untried)
	}
	for _, m := range modules {
		if err := imported[m]; err != nil {
			t.Skipf("%s cannot import %s (install the Debian packages with make deps): %v", python3, m, err)
		}
	}
	return python3
}

var (
	importMu sync.Mutex
	// imported holds, by module, why Python cannot import it: nil
	// where it can.
	imported = map[string]error{}
)

// tryImports imports each module in one interpreter and notes in
// imported whether it could; importMu is held.
func tryImports(modules []string) {
	const script = `import importlib, sys
for m in sys.argv[1:]:
    try:
        importlib.import_module(m)
    except BaseException as e:
        print("scantest-no-import", m, repr(e), flush=True)
`
	out, err := exec.Command(python3, append([]string{"-c", script}, modules...)...).CombinedOutput()
	for _, m := range modules {
		imported[m] = nil
		if err != nil {
			imported[m] = fmt.Errorf("%v %s", err, out)
		}
	}
	for line := range strings.Lines(string(out)) {
		if rest, ok := strings.CutPrefix(line, "scantest-no-import "); ok {
			m, why, _ := strings.Cut(strings.TrimSpace(rest), " ")
			imported[m] = errors.New(why)
		}
	}
}

// WriteJSON writes v as JSON into a file of the test's temporary
// directory, for a Python check to read, and returns the file's path.
func WriteJSON(t testing.TB, v any) string {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "expect.json")
	if err := os.WriteFile(path, js, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

//go:embed check_scan.py
var checkScan []byte

// CrossCheck has check_scan.py read the scan's file with h5py and
// hdf5plugin, independent of h5ingest's own readers and codecs, and
// compare it with the simulation whose truth is given: each frame's
// status (status, as ExpectedStatus or CheckTruth gives it) and data
// CRC, for the nxtomo layout the image keys and angles, the first and
// last frames pixel by pixel where they are ok, and where dxchange is
// set, the file read through dxchange. It skips the test where Python
// lacks the modules.
func CrossCheck(t testing.TB, file, layout string, truth *sim.Truth, status []uint8, dxchange bool) {
	t.Helper()
	CrossCheckWith(t, file, layout, truth, status, dxchange, nil)
}

// CrossCheckWith is CrossCheck with more expectations for check_scan.py
// (such as "translation").
func CrossCheckWith(t testing.TB, file, layout string, truth *sim.Truth, status []uint8, dxchange bool, more map[string]any) {
	t.Helper()
	py := Python(t, "h5py", "hdf5plugin", "crcmod", "numpy")
	if dxchange {
		Python(t, "dxchange")
	}
	cfg := Config(t, truth)
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
	// Two frames pixel by pixel, drawn again by the simulator.
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pixels := map[string][]uint32{}
	for _, n := range []int{0, truth.Frames - 1} {
		if n >= 0 && n < len(status) && status[n] == frame.StatusOK {
			img, _ := s.Image(n, nil)
			pixels[fmt.Sprint(n)] = img
		}
	}
	exp["pixels"] = pixels
	for k, v := range more {
		exp[k] = v
	}
	script := filepath.Join(t.TempDir(), "check_scan.py")
	if err := os.WriteFile(script, checkScan, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, script, file, WriteJSON(t, exp)).CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
		t.Fatalf("h5py cross-check of %s: %v\n%s", file, err, out)
	}
}
