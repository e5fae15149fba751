package writer

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/plan"
)

const (
	testFrames = 6
	testH      = 16
	testW      = 24
)

var testKeys = []int8{plan.DarkField, plan.FlatField, plan.Projection, plan.Projection, plan.Projection, plan.Projection}

// pattern returns frame's test image as little-endian bytes (the same
// formula as testdata/crosscheck.py).
func pattern(frame, h, w, elemSize int) []byte {
	out := make([]byte, h*w*elemSize)
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			v := uint32((frame*7919 + y*w + x) % 65521)
			i := (y*w + x) * elemSize
			if elemSize == 2 {
				binary.LittleEndian.PutUint16(out[i:], uint16(v))
			} else {
				binary.LittleEndian.PutUint32(out[i:], v)
			}
		}
	}
	return out
}

// pipeline is a filter pipeline with an encoder of its chunks, made here
// so that the tests do not depend on package compress's codecs.
type pipeline struct {
	name    string
	filters []compress.Filter
	encode  func(t *testing.T, raw []byte, elemSize int) []byte
}

var (
	pipeNone    = pipeline{name: "none", encode: func(_ *testing.T, raw []byte, _ int) []byte { return raw }}
	pipeDeflate = pipeline{
		name: "deflate",
		filters: []compress.Filter{
			{ID: filterShuffle, Name: "shuffle", Values: []uint32{2}},
			{ID: filterDeflate, Name: "deflate", Values: []uint32{4}},
		},
		encode: func(t *testing.T, raw []byte, elemSize int) []byte {
			var buf bytes.Buffer
			zw, err := zlib.NewWriterLevel(&buf, 4)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := zw.Write(byteShuffle(raw, elemSize)); err != nil {
				t.Fatal(err)
			}
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		},
	}
)

// byteShuffle is HDF5's shuffle filter: byte j of every element, then byte
// j+1 of every element.
func byteShuffle(raw []byte, elemSize int) []byte {
	n := len(raw) / elemSize
	out := make([]byte, len(raw))
	for i := 0; i < n; i++ {
		for j := 0; j < elemSize; j++ {
			out[j*n+i] = raw[i*elemSize+j]
		}
	}
	return out
}

// layoutNamed returns the built-in layout of name.
func layoutNamed(name string) Layout {
	if name == LayoutCXI {
		return CXI{}
	}
	return NXtomo{}
}

func testOptions(dir, layout string, p pipeline) Options {
	o := Options{
		Path:          filepath.Join(dir, "scan_"+layout+"_"+p.name+".h5"),
		Layout:        layoutNamed(layout),
		Frames:        testFrames,
		Height:        testH,
		Width:         testW,
		ElemSize:      2,
		Filters:       p.filters,
		FlushInterval: time.Hour,
		Title:         "test scan",
		SampleName:    "test sample",
		PixelSize:     55e-6,
		Distance:      0.25,
		Energy:        1.602176634e-15,
		StartTime:     time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
	}
	if layout == LayoutNXtomo {
		o.Layout = NXtomo{SourceName: "test ring"}
		o.ImageKey = testKeys
		o.RotationAngle = []float64{0, 0, 0, 45, 90, 135}
	} else {
		for i := 0; i < testFrames; i++ {
			o.Translation = append(o.Translation, [3]float64{float64(i) * 1e-6, -float64(i) * 2e-6, 0})
		}
	}
	return o
}

func testRecord(i int) frame.Record {
	r := frame.Record{Timestamp: 1_000_000 * uint64(i+1), RawCRC: 0x1000 + uint32(i), DataCRC: 0x2000 + uint32(i)}
	if i == 4 {
		r.Status = frame.StatusCRCMismatch
	}
	return r
}

// writeTestFile writes every frame of o except those in skip, with
// records, and closes the file.
func writeTestFile(t *testing.T, o Options, p pipeline, skip ...int) {
	t.Helper()
	w, err := Create(o)
	if err != nil {
		t.Fatal(err)
	}
	n := o.Frames
	if n == 0 {
		n = testFrames
	}
	for i := 0; i < n; i++ {
		if slices.Contains(skip, i) {
			continue
		}
		if err := w.WriteChunk(i, 0, p.encode(t, pattern(i, o.Height, o.Width, o.ElemSize), o.ElemSize)); err != nil {
			t.Fatal(err)
		}
		if err := w.SetRecord(i, testRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// wantRecords returns the records writeTestFile leaves for n frames.
func wantRecords(n int, skip ...int) []frame.Record {
	out := make([]frame.Record, n)
	for i := range out {
		out[i] = testRecord(i)
		if slices.Contains(skip, i) {
			out[i] = frame.Record{Status: frame.StatusMissing}
		}
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	for _, layout := range []string{LayoutNXtomo, LayoutCXI} {
		for _, p := range []pipeline{pipeNone, pipeDeflate} {
			t.Run(layout+"/"+p.name, func(t *testing.T) {
				o := testOptions(t.TempDir(), layout, p)
				writeTestFile(t, o, p, 3)
				if n := openObjectsAll(); n != 0 {
					t.Fatalf("%d HDF5 objects open after Close", n)
				}
				r, err := Open(o.Path)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				if r.Layout != layout || r.Frames != testFrames || r.Height != testH || r.Width != testW || r.ElemSize != 2 {
					t.Fatalf("got layout %s, %dx%dx%d of %d bytes", r.Layout, r.Frames, r.Height, r.Width, r.ElemSize)
				}
				if !r.SWMR {
					t.Error("not opened as a SWMR reader")
				}
				if err := checkFilters(r.Filters, p.filters, 2); err != nil {
					t.Error(err)
				}
				var buf []byte
				for i := 0; i < testFrames; i++ {
					data, mask, err := r.ReadChunk(i, buf[:0])
					if i == 3 {
						if !errors.Is(err, ErrNoChunk) {
							t.Errorf("frame 3 (never written): got %v, want ErrNoChunk", err)
						}
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					want := p.encode(t, pattern(i, testH, testW, 2), 2)
					if mask != 0 || !bytes.Equal(data, want) {
						t.Errorf("frame %d: mask %d, %d bytes, want the %d bytes written", i, mask, len(data), len(want))
					}
					buf = data
				}
				recs, err := r.Records()
				if err != nil {
					t.Fatal(err)
				}
				if want := wantRecords(testFrames, 3); !slices.Equal(recs, want) {
					t.Errorf("records\ngot  %v\nwant %v", recs, want)
				}
				fn, err := r.FrameNumbers()
				if err != nil || !slices.Equal(fn, []uint64{0, 1, 2, 3, 4, 5}) {
					t.Errorf("frame numbers %v, %v", fn, err)
				}
				keys, err := r.ImageKey()
				if err != nil {
					t.Fatal(err)
				}
				angles, err := r.RotationAngle()
				if err != nil {
					t.Fatal(err)
				}
				tr, err := r.Translation()
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(keys, o.ImageKey) || !slices.Equal(angles, o.RotationAngle) || !slices.Equal(tr, o.Translation) {
					t.Errorf("got keys %v angles %v translations %v", keys, angles, tr)
				}
			})
		}
	}
}

// attrWant is one expected string attribute (name "" checks that the
// object exists).
type attrWant struct {
	path, name string
	want       []string
}

func checkAttrs(t *testing.T, file string, wants []attrWant) {
	t.Helper()
	f, err := openFile(file, false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeID(f)
	for _, a := range wants {
		if !exists(f, a.path) && a.path != "/" {
			t.Errorf("%s missing", a.path)
			continue
		}
		if a.name == "" {
			continue
		}
		obj, err := openGroup(f, a.path)
		if err != nil {
			obj, err = openDataset(f, a.path)
		}
		if err != nil {
			t.Errorf("open %s: %v", a.path, err)
			continue
		}
		got, err := readAttrStrings(obj, a.name)
		closeID(obj)
		if err != nil || !slices.Equal(got, a.want) {
			t.Errorf("%s@%s = %q, %v; want %q", a.path, a.name, got, err, a.want)
		}
	}
}

func one(s string) []string { return []string{s} }

func TestNXtomoLayout(t *testing.T) {
	o := testOptions(t.TempDir(), LayoutNXtomo, pipeNone)
	writeTestFile(t, o, pipeNone)
	det := "/entry/instrument/detector"
	checkAttrs(t, o.Path, []attrWant{
		{"/", "default", one("entry")},
		{"/", "creator", one("h5ingest")},
		{"/", "file_name", one(filepath.Base(o.Path))},
		{"/", "file_time", one("2026-03-01T12:00:00.000000Z")},
		{"/entry", "NX_class", one("NXentry")},
		{"/entry", "default", one("data")},
		{"/entry/definition", "", nil},
		{"/entry/title", "", nil},
		{"/entry/start_time", "", nil},
		{"/entry/end_time", "", nil},
		{"/entry/instrument", "NX_class", one("NXinstrument")},
		{"/entry/instrument/source", "NX_class", one("NXsource")},
		{"/entry/instrument/source/type", "", nil},
		{"/entry/instrument/source/name", "", nil},
		{"/entry/instrument/source/probe", "", nil},
		{"/entry/instrument/monochromator", "NX_class", one("NXmonochromator")},
		{"/entry/instrument/monochromator/energy", "units", one("keV")},
		{det, "NX_class", one("NXdetector")},
		{det + "/data", "target", one(det + "/data")},
		{det + "/image_key", "target", one(det + "/image_key")},
		{det + "/x_pixel_size", "units", one("m")},
		{det + "/y_pixel_size", "units", one("m")},
		{det + "/distance", "units", one("m")},
		{det + "/frame_number", "", nil},
		{det + "/timestamp", "units", one("ns")},
		{det + "/raw_crc32c", "", nil},
		{det + "/data_crc32c", "", nil},
		{det + "/frame_status", "", nil},
		{"/entry/sample", "NX_class", one("NXsample")},
		{"/entry/sample/name", "", nil},
		{"/entry/sample/rotation_angle", "units", one("degree")},
		{"/entry/sample/rotation_angle", "target", one("/entry/sample/rotation_angle")},
		{"/entry/control", "NX_class", one("NXmonitor")},
		{"/entry/control/data", "", nil},
		{"/entry/data", "NX_class", one("NXdata")},
		{"/entry/data", "signal", one("data")},
		{"/entry/data", "axes", []string{"rotation_angle", ".", "."}},
		{"/entry/data/data", "", nil},
		{"/entry/data/rotation_angle", "", nil},
		{"/entry/data/image_key", "", nil},
		{"/exchange", "NX_class", one("NXcollection")},
		{"/exchange/data", "", nil},
		{"/exchange/data_white", "", nil},
		{"/exchange/data_dark", "", nil},
		{"/exchange/theta", "units", one("degree")},
	})
	f, err := openFile(o.Path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeID(f)
	for name, want := range map[string][]uint64{"data": {4, testH, testW}, "data_white": {1, testH, testW}, "data_dark": {1, testH, testW}} {
		d, err := openDataset(f, "/exchange/"+name)
		if err != nil {
			t.Fatal(err)
		}
		dims, _, err := shape(d, name)
		closeID(d)
		if err != nil || !slices.Equal(dims, want) {
			t.Errorf("/exchange/%s shape %v, %v; want %v", name, dims, err, want)
		}
	}
}

func TestCXILayout(t *testing.T) {
	o := testOptions(t.TempDir(), LayoutCXI, pipeNone)
	writeTestFile(t, o, pipeNone)
	det := "/entry_1/instrument_1/detector_1"
	checkAttrs(t, o.Path, []attrWant{
		{"/", "default", one("entry_1")},
		{"/cxi_version", "", nil},
		{"/entry_1", "NX_class", one("NXentry")},
		{"/entry_1/start_time", "", nil},
		{"/entry_1/end_time", "", nil},
		{"/entry_1/instrument_1", "NX_class", one("NXinstrument")},
		{"/entry_1/instrument_1/source_1", "NX_class", one("NXsource")},
		{"/entry_1/instrument_1/source_1/energy", "units", one("J")},
		{det, "NX_class", one("NXdetector")},
		{det + "/data", "", nil},
		{det + "/distance", "units", one("m")},
		{det + "/x_pixel_size", "units", one("m")},
		{det + "/y_pixel_size", "units", one("m")},
		{det + "/frame_status", "", nil},
		{"/entry_1/sample_1", "NX_class", one("NXsample")},
		{"/entry_1/sample_1/geometry_1/translation", "units", one("m")},
		{"/entry_1/data_1", "NX_class", one("NXdata")},
	})
	f, err := openFile(o.Path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer closeID(f)
	target, err := softLinkTarget(f, "/entry_1/data_1/data")
	if err != nil || target != det+"/data" {
		t.Errorf("/entry_1/data_1/data links to %q, %v; want soft link to %s/data", target, err, det)
	}
}

func TestFilters(t *testing.T) {
	bslz4 := compress.Filter{ID: 32008, Name: "bitshuffle", Optional: true, Values: []uint32{0, 0, 2, 0, 2}}
	bszstd := compress.Filter{ID: 32008, Name: "bitshuffle", Optional: true, Values: []uint32{0, 0, 2, 0, 3, 5}}
	lz4 := compress.Filter{ID: 32004, Name: "lz4", Optional: true, Values: []uint32{0}}
	shuffleBare := compress.Filter{ID: filterShuffle, Name: "shuffle"}
	tests := []struct {
		name    string
		filters []compress.Filter
		dump    []string // in h5dump -pH output
	}{
		{"none", nil, []string{"NONE"}},
		{"deflate", pipeDeflate.filters, []string{"PREPROCESSING SHUFFLE", "COMPRESSION DEFLATE { LEVEL 4 }"}},
		{"shuffle-no-values", []compress.Filter{shuffleBare}, []string{"PREPROCESSING SHUFFLE"}},
		{"bslz4", []compress.Filter{bslz4}, []string{"FILTER_ID 32008", "PARAMS { 0 0 2 0 2 }"}},
		{"bszstd", []compress.Filter{bszstd}, []string{"FILTER_ID 32008", "PARAMS { 0 0 2 0 3 5 }"}},
		{"lz4", []compress.Filter{lz4}, []string{"FILTER_ID 32004", "PARAMS { 0 }"}},
	}
	h5dump, dumpErr := exec.LookPath("h5dump")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t.TempDir(), LayoutNXtomo, pipeNone)
			o.Filters = tc.filters
			writeTestFile(t, o, pipeNone)
			r, err := Open(o.Path)
			if err != nil {
				t.Fatal(err)
			}
			got := r.Filters
			r.Close()
			if err := checkFilters(got, tc.filters, 2); err != nil {
				t.Error(err)
			}
			if dumpErr != nil {
				t.Skip("h5dump (Debian hdf5-tools) not installed")
			}
			out, err := exec.Command(h5dump, "-pH", "-d", nxtomoStack, o.Path).CombinedOutput()
			if err != nil {
				t.Fatalf("h5dump: %v\n%s", err, out)
			}
			for _, s := range tc.dump {
				if !strings.Contains(string(out), s) {
					t.Errorf("h5dump -pH lacks %q:\n%s", s, out)
				}
			}
			if !strings.Contains(string(out), "VALUE  0") || !strings.Contains(string(out), "CHUNKED ( 1, 16, 24 )") {
				t.Errorf("h5dump -pH: want chunks (1,16,24) and fill value 0:\n%s", out)
			}
		})
	}
}

func TestFilterErrors(t *testing.T) {
	tests := []struct {
		name    string
		filters []compress.Filter
		want    string
	}{
		{"shuffle of the wrong size", []compress.Filter{{ID: filterShuffle, Name: "shuffle", Values: []uint32{4}}}, "cd_values"},
		{"unavailable mandatory filter", []compress.Filter{{ID: 32008, Name: "bitshuffle", Values: []uint32{0, 0, 2, 0, 2}}}, "create frame stack"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t.TempDir(), LayoutCXI, pipeNone)
			o.Filters = tc.filters
			w, err := Create(o)
			if err == nil {
				w.Close()
				t.Fatal("Create succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
			if _, err := os.Stat(TempName(o.Path)); !os.IsNotExist(err) {
				t.Errorf("temporary file left behind: %v", err)
			}
			if n := openObjectsAll(); n != 0 {
				t.Errorf("%d HDF5 objects open after a failed Create", n)
			}
		})
	}
}

func TestCheckFilters(t *testing.T) {
	shuffle := func(v ...uint32) compress.Filter { return compress.Filter{ID: filterShuffle, Values: v} }
	tests := []struct {
		name      string
		got, want []compress.Filter
		ok        bool
	}{
		{"shuffle stored with the element size", []compress.Filter{shuffle(2)}, []compress.Filter{shuffle()}, true},
		{"shuffle asked with the element size", []compress.Filter{shuffle(2)}, []compress.Filter{shuffle(2)}, true},
		{"shuffle of another size", []compress.Filter{shuffle(2)}, []compress.Filter{shuffle(4)}, false},
		{"bitshuffle shifted by set_local", []compress.Filter{{ID: 32008, Optional: true, Values: []uint32{0, 3, 2, 0, 0, 2, 0, 2}}},
			[]compress.Filter{{ID: 32008, Optional: true, Values: []uint32{0, 0, 2, 0, 2}}}, false},
		{"optional flag differs", []compress.Filter{{ID: 32004, Values: []uint32{0}}}, []compress.Filter{{ID: 32004, Optional: true, Values: []uint32{0}}}, false},
		{"missing filter", nil, []compress.Filter{shuffle()}, false},
	}
	for _, tc := range tests {
		if err := checkFilters(tc.got, tc.want, 2); (err == nil) != tc.ok {
			t.Errorf("%s: got %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestRuns(t *testing.T) {
	keys := []int8{2, 2, 1, 0, 0, 1, 0, 2}
	tests := []struct {
		key  int8
		want []run
	}{
		{0, []run{{3, 2}, {6, 1}}},
		{1, []run{{2, 1}, {5, 1}}},
		{2, []run{{0, 2}, {7, 1}}},
		{3, nil},
	}
	for _, tc := range tests {
		if got := runs(keys, tc.key); !slices.Equal(got, tc.want) {
			t.Errorf("runs of key %d: got %v, want %v", tc.key, got, tc.want)
		}
	}
}

func TestOverwriteAndRename(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(dir, LayoutCXI, pipeNone)
	w, err := Create(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(TempName(o.Path)); err != nil {
		t.Errorf("temporary file while writing: %v", err)
	}
	if _, err := os.Stat(o.Path); !os.IsNotExist(err) {
		t.Errorf("final name exists while writing: %v", err)
	}
	if _, err := Create(o); !errors.Is(err, ErrLocked) {
		t.Errorf("Create beside a running scan: got %v, want ErrLocked", err)
	}
	over := o
	over.Overwrite = true
	if _, err := Create(over); !errors.Is(err, ErrLocked) {
		t.Errorf("Create with Overwrite beside a running scan: got %v, want ErrLocked", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(TempName(o.Path)); !os.IsNotExist(err) {
		t.Errorf("temporary file after Close: %v", err)
	}
	if _, err := os.Stat(o.Path); err != nil {
		t.Errorf("final file after Close: %v", err)
	}
	if _, err := Create(o); !errors.Is(err, ErrExists) {
		t.Errorf("Create over an existing file: got %v, want ErrExists", err)
	}
	o.Overwrite = true
	o.Frames = 2
	o.Translation = nil
	w, err = Create(o)
	if err != nil {
		t.Fatalf("Create with Overwrite: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Open(o.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Frames != 2 {
		t.Errorf("overwritten file has %d frames, want 2", r.Frames)
	}
}

func TestOptionErrors(t *testing.T) {
	base := testOptions(t.TempDir(), LayoutNXtomo, pipeNone)
	tests := []struct {
		name   string
		change func(*Options)
	}{
		{"layout", func(o *Options) { o.Layout = nil }},
		{"element size", func(o *Options) { o.ElemSize = 3 }},
		{"height", func(o *Options) { o.Height = 0 }},
		{"frames", func(o *Options) { o.Frames = -1 }},
		{"key count", func(o *Options) { o.ImageKey = o.ImageKey[:2] }},
		{"key value", func(o *Options) { o.ImageKey = []int8{0, 0, 0, 0, 0, 4} }},
		{"path", func(o *Options) { o.Path = "" }},
	}
	for _, tc := range tests {
		o := base
		tc.change(&o)
		if w, err := Create(o); err == nil {
			w.Close()
			t.Errorf("%s: Create succeeded", tc.name)
		}
	}
}

func TestWriteErrors(t *testing.T) {
	o := testOptions(t.TempDir(), LayoutNXtomo, pipeNone)
	w, err := Create(o)
	if err != nil {
		t.Fatal(err)
	}
	chunk := pattern(0, testH, testW, 2)
	if err := w.WriteChunk(testFrames, 0, chunk); err == nil {
		t.Error("chunk past the planned frames accepted")
	}
	if err := w.SetRecord(-1, frame.Record{}); err == nil {
		t.Error("record of frame -1 accepted")
	}
	if err := w.WriteChunk(0, 0, nil); err == nil {
		t.Error("empty chunk accepted")
	}
	// The empty chunk failed inside the writer: the error sticks.
	if err := w.WriteChunk(1, 0, chunk); err == nil {
		t.Error("no sticky error after a failed write")
	}
	if err := w.Close(); err == nil {
		t.Error("Close forgot the sticky error")
	}
	if _, err := os.Stat(o.Path); err != nil {
		t.Errorf("a failed scan still gets its final name: %v", err)
	}
	if n := openObjectsAll(); n != 0 {
		t.Errorf("%d HDF5 objects open after Close", n)
	}
}

func TestWriteChunkAllocs(t *testing.T) {
	o := testOptions(t.TempDir(), LayoutNXtomo, pipeNone)
	w, err := Create(o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	chunk := pattern(0, testH, testW, 2)
	frame := 0
	allocs := testing.AllocsPerRun(20, func() {
		if err := w.WriteChunk(frame%testFrames, 0, chunk); err != nil {
			t.Fatal(err)
		}
		frame++
	})
	if allocs != 0 {
		t.Errorf("WriteChunk allocates %.1f times per frame", allocs)
	}
}

func TestExtendible(t *testing.T) {
	for _, layout := range []string{LayoutNXtomo, LayoutCXI} {
		t.Run(layout, func(t *testing.T) {
			o := testOptions(t.TempDir(), layout, pipeDeflate)
			o.Frames = 0
			if layout == LayoutNXtomo {
				o.ImageKey = testKeys[:2] // a dark and a flat, then projections
				o.RotationAngle = []float64{0, 0, 10, 20}
			} else {
				o.Translation = o.Translation[:3]
			}
			w, err := Create(o)
			if err != nil {
				t.Fatal(err)
			}
			// Out of order, frame 3 missing, a record before its chunk.
			if err := w.SetRecord(5, testRecord(5)); err != nil {
				t.Fatal(err)
			}
			for _, i := range []int{1, 0, 4, 2, 5} {
				if err := w.WriteChunk(i, 0, pipeDeflate.encode(t, pattern(i, testH, testW, 2), 2)); err != nil {
					t.Fatal(err)
				}
				if i != 5 {
					if err := w.SetRecord(i, testRecord(i)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := Open(o.Path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.Frames != testFrames {
				t.Fatalf("%d frames, want %d", r.Frames, testFrames)
			}
			recs, err := r.Records()
			if err != nil {
				t.Fatal(err)
			}
			if want := wantRecords(testFrames, 3); !slices.Equal(recs, want) {
				t.Errorf("records\ngot  %v\nwant %v", recs, want)
			}
			if _, _, err := r.ReadChunk(3, nil); !errors.Is(err, ErrNoChunk) {
				t.Errorf("frame 3: %v, want ErrNoChunk", err)
			}
			if layout == LayoutNXtomo {
				keys, _ := r.ImageKey()
				angles, _ := r.RotationAngle()
				if !slices.Equal(keys, testKeys) || !slices.Equal(angles, []float64{0, 0, 10, 20, 0, 0}) {
					t.Errorf("keys %v angles %v", keys, angles)
				}
			} else {
				tr, _ := r.Translation()
				if len(tr) != testFrames || tr[2] != o.Translation[2] || tr[5] != ([3]float64{}) {
					t.Errorf("translations %v", tr)
				}
			}
			pyCheck(t, o, []int{3}, []float64{0, 0, 10, 20, 0, 0}, testKeys)
		})
	}
}

// expectation is what testdata/crosscheck.py compares a file with.
type expectation struct {
	Layout        string       `json:"layout"`
	Frames        int          `json:"frames"`
	Height        int          `json:"height"`
	Width         int          `json:"width"`
	ElemSize      int          `json:"elem_size"`
	Written       []int        `json:"written"`
	ImageKey      []int8       `json:"image_key"`
	RotationAngle []float64    `json:"rotation_angle"`
	Translation   [][3]float64 `json:"translation"`
	Energy        float64      `json:"energy"`
	Timestamp     []uint64     `json:"timestamp"`
	RawCRC        []uint32     `json:"raw_crc32c"`
	DataCRC       []uint32     `json:"data_crc32c"`
	Status        []int        `json:"frame_status"` // not []uint8, which JSON encodes as base64
}

// pyCheck runs testdata/crosscheck.py (h5py, and dxchange for nxtomo) on
// the file of o, whose frames except skip were written by writeTestFile.
func pyCheck(t *testing.T, o Options, skip []int, angles []float64, keys []int8) {
	t.Helper()
	python := pythonWith(t, "h5py", "numpy", "dxchange")
	e := expectation{Layout: o.Layout.Name(), Frames: testFrames, Height: o.Height, Width: o.Width, ElemSize: o.ElemSize,
		ImageKey: keys, RotationAngle: angles, Energy: o.Energy, Written: []int{}}
	for i, r := range wantRecords(testFrames, skip...) {
		if !slices.Contains(skip, i) {
			e.Written = append(e.Written, i)
		}
		e.Timestamp = append(e.Timestamp, r.Timestamp)
		e.RawCRC = append(e.RawCRC, r.RawCRC)
		e.DataCRC = append(e.DataCRC, r.DataCRC)
		e.Status = append(e.Status, int(r.Status))
		tr := [3]float64{}
		if i < len(o.Translation) {
			tr = o.Translation[i]
		}
		e.Translation = append(e.Translation, tr)
	}
	js, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	exp := filepath.Join(t.TempDir(), "expect.json")
	if err := os.WriteFile(exp, js, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, "testdata/crosscheck.py", o.Path, exp).CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
		t.Errorf("crosscheck.py: %v\n%s", err, out)
	}
}

// pythonWith returns /usr/bin/python3, or skips the test when it or one
// of the modules is missing.
func pythonWith(t *testing.T, modules ...string) string {
	t.Helper()
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("cross-reader check needs %s: %v", python, err)
	}
	for _, m := range modules {
		if out, err := exec.Command(python, "-c", "import "+m).CombinedOutput(); err != nil {
			t.Skipf("cross-reader check needs Python module %s (Debian python3-%s): %s", m, m, out)
		}
	}
	return python
}

func TestCrossReader(t *testing.T) {
	for _, layout := range []string{LayoutNXtomo, LayoutCXI} {
		for _, p := range []pipeline{pipeNone, pipeDeflate} {
			t.Run(layout+"/"+p.name, func(t *testing.T) {
				o := testOptions(t.TempDir(), layout, p)
				writeTestFile(t, o, p, 3)
				pyCheck(t, o, []int{3}, o.RotationAngle, o.ImageKey)
			})
		}
	}
}

// TestSWMRLive reads a scan with h5py while the Writer still has it open.
func TestSWMRLive(t *testing.T) {
	python := pythonWith(t, "h5py", "numpy")
	o := testOptions(t.TempDir(), LayoutNXtomo, pipeNone)
	w, err := Create(o)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 0; i < 3; i++ {
		if err := w.WriteChunk(i, 0, pattern(i, testH, testW, 2)); err != nil {
			t.Fatal(err)
		}
		if err := w.SetRecord(i, testRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	script := `
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r", swmr=True) as f:
    assert f.swmr_mode
    d = f["/entry/instrument/detector/data"]
    s = f["/entry/instrument/detector/frame_status"][...]
    assert list(s) == [0, 0, 0, 1, 1, 1], s
    assert d[2, 0, 1] == (2 * 7919 + 1) % 65521, d[2, 0, 1]
    assert not d[3].any()
print("ok")
`
	out, err := exec.Command(python, "-c", script, TempName(o.Path)).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Errorf("h5py reading the open scan: %v\n%s", err, out)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestReaderMissingPathsAndStoredBytes(t *testing.T) {
	for _, layout := range []string{LayoutNXtomo, LayoutCXI} {
		t.Run(layout, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "scan.h5")
			w, err := Create(Options{Path: path, Layout: layoutNamed(layout), Frames: 3, Height: 4, Width: 8, ElemSize: 2})
			if err != nil {
				t.Fatal(err)
			}
			chunk := make([]byte, 4*8*2)
			for _, n := range []int{0, 2} {
				if err := w.WriteChunk(n, 0, chunk); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if m := r.MissingPaths(); len(m) != 0 {
				t.Errorf("complete file lacks %v", m)
			}
			if got := r.StoredBytes(); got != 2*int64(len(chunk)) {
				t.Errorf("StoredBytes = %d, want %d", got, 2*len(chunk))
			}
		})
	}
	// A file with a stack but not the rest of a layout.
	path := filepath.Join(t.TempDir(), "bare.h5")
	if out, err := exec.Command("/usr/bin/python3", "-c", `
import h5py, sys
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("/entry/instrument/detector/data", shape=(1, 2, 8), dtype="u2", chunks=(1, 2, 8))
`, path).CombinedOutput(); err != nil {
		t.Skipf("no h5py to make an incomplete file: %v %s", err, out)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	m := r.MissingPaths()
	if !slices.Contains(m, "/entry/instrument/detector/frame_status") || !slices.Contains(m, "/exchange/data") {
		t.Errorf("MissingPaths = %v, want the records and /exchange among them", m)
	}
}
