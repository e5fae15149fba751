package sim

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/cmplx"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"h5ingest/frame"
	"h5ingest/plan"
	"h5ingest/source/capture"
)

var testMeta = capture.Metadata{Profile: "test", Created: "2025-01-02T03:04:05Z", Software: "h5ingest test"}

// smallConfig is a scan of a 64x64-pixel module (2x2 chips of 32x32),
// 24-bit LFSR bitplane.
func smallConfig(scene Scene) Config {
	c := DefaultConfig()
	c.Scene = scene
	c.Format.Geometry = frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 32, ChipHeight: 32}
	c.Plan = plan.Tomo(3, 4, 9, 10, 190)
	c.Frames = 12
	c.StartNS = 5_000_000
	return c
}

func writeToBuffer(t *testing.T, c Config) ([]byte, Stats) {
	t.Helper()
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	st, err := s.WriteCapture(&buf, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes != int64(buf.Len()) {
		t.Errorf("Stats.Bytes = %d, capture has %d", st.Bytes, buf.Len())
	}
	return buf.Bytes(), st
}

// record is a frame read back from a capture.
type record struct {
	h       frame.Header
	payload []byte
}

func readCapture(t *testing.T, r io.Reader) (*Truth, []record) {
	t.Helper()
	cr, err := capture.NewReader(r)
	if err != nil {
		t.Fatal(err)
	}
	truth, err := ReadTruth(cr.Metadata())
	if err != nil {
		t.Fatal(err)
	}
	var recs []record
	for {
		h, p, err := cr.Next(make([]byte, 1<<20))
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, record{h, p})
	}
	return truth, recs
}

func TestEncodeMatchesReference(t *testing.T) {
	geoms := []frame.Geometry{
		{ChipsX: 2, ChipsY: 2, ChipWidth: 16, ChipHeight: 3},
		{ChipsX: 3, ChipsY: 1, ChipWidth: 8, ChipHeight: 5},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, g := range geoms {
		for _, depth := range []int{1, 6, 12, 24} {
			for _, coding := range []frame.Coding{frame.Binary, frame.LFSR} {
				f := frame.Format{Geometry: g, Encoding: frame.Bitplane, BitDepth: depth, Coding: coding}
				for _, o := range []frame.Orientation{nil, alternate(g.Chips())} {
					counts := make([]uint32, f.Pixels())
					for p := range counts {
						counts[p] = r.Uint32N(f.MaxCount() + 1)
					}
					counts[0], counts[len(counts)-1] = f.MaxCount(), 0
					want, err := f.AppendPayload([]byte{9}, counts, o)
					if err != nil {
						t.Fatal(err)
					}
					var scratch []uint32
					got, err := appendPayload([]byte{9}, f, o, counts, &scratch)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Errorf("%v, orientation %v: fast encoder differs from frame.AppendPayload", f, o)
					}
				}
			}
		}
	}
}

func alternate(chips int) frame.Orientation {
	o := make(frame.Orientation, chips)
	for k := range o {
		o[k] = 180 * (k % 2)
	}
	return o
}

func TestEncodePiMegaFrame(t *testing.T) {
	c := DefaultConfig()
	c.Orientation = alternate(c.Format.Chips())
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	counts, _ := s.Image(c.Plan.Count(plan.DarkField)+c.Plan.Count(plan.FlatField)+30, nil)
	want, err := c.Format.AppendPayload(nil, counts, c.Orientation)
	if err != nil {
		t.Fatal(err)
	}
	var scratch []uint32
	got, _ := appendPayload(nil, c.Format, c.Orientation, counts, &scratch)
	if !bytes.Equal(got, want) {
		t.Error("Pi-mega frame: fast encoder differs from frame.AppendPayload")
	}
}

func TestFFTMatchesDFT(t *testing.T) {
	for _, n := range []int{1, 2, 8, 32} {
		r := rand.New(rand.NewPCG(3, uint64(n)))
		a := make([]complex128, n)
		for i := range a {
			a[i] = complex(r.NormFloat64(), r.NormFloat64())
		}
		want := make([]complex128, n)
		for k := range want {
			for j, v := range a {
				want[k] += v * cmplx.Exp(complex(0, -2*math.Pi*float64(j*k)/float64(n)))
			}
		}
		fft(a, twiddles(n))
		for k := range a {
			if cmplx.Abs(a[k]-want[k]) > 1e-9 {
				t.Fatalf("n=%d: bin %d = %v, want %v", n, k, a[k], want[k])
			}
		}
	}
}

func TestPoissonMoments(t *testing.T) {
	var pcg rand.PCG
	pcg.Seed(5, 6)
	for _, mean := range []float32{0, 0.3, 2.5, 12, 15.9, 40, 3000, 1e6} {
		const n = 200_000
		var sum, sum2 float64
		for range n {
			v := float64(poisson(&pcg, mean))
			sum += v
			sum2 += v * v
		}
		m := sum / n
		variance := sum2/n - m*m
		tol := 5*math.Sqrt(float64(mean)/n) + 0.01
		if math.Abs(m-float64(mean)) > tol {
			t.Errorf("mean %v: sample mean %v", mean, m)
		}
		if mean > 0 && math.Abs(variance/float64(mean)-1) > 0.05 {
			t.Errorf("mean %v: sample variance %v", mean, variance)
		}
	}
}

func TestDeterminism(t *testing.T) {
	for _, scene := range []Scene{Tomo, CDI} {
		c := smallConfig(scene)
		c.Corrupt.Rate = 0.2
		a, _ := writeToBuffer(t, c)
		b, _ := writeToBuffer(t, c)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: same seed, different captures", scene)
		}
		c.Seed++
		d, _ := writeToBuffer(t, c)
		_, ra := readCapture(t, bytes.NewReader(a))
		_, rd := readCapture(t, bytes.NewReader(d))
		if bytes.Equal(ra[len(ra)-1].payload, rd[len(rd)-1].payload) {
			t.Errorf("%s: seeds %d and %d give the same last frame", scene, c.Seed-1, c.Seed)
		}
	}
}

// TestWriteToFile checks that a capture written to a file (metadata
// completed in place) holds the same records and truth as one written to a
// buffer (images made twice).
func TestWriteToFile(t *testing.T) {
	c := smallConfig(CDI)
	c.Missing.Frames = []int{2}
	buf, _ := writeToBuffer(t, c)
	s, _ := New(c)
	path := filepath.Join(t.TempDir(), "a.pmcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteCapture(f, testMeta); err != nil {
		t.Fatal(err)
	}
	f.Close()
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tb, rb := readCapture(t, bytes.NewReader(buf))
	tf, rf := readCapture(t, bytes.NewReader(file))
	if !slices.Equal(tb.DataCRC, tf.DataCRC) || !slices.Equal(tb.Flags, tf.Flags) {
		t.Errorf("truth differs: buffer %v %v, file %v %v", tb.DataCRC, tb.Flags, tf.DataCRC, tf.Flags)
	}
	if len(rb) != len(rf) {
		t.Fatalf("%d records in the buffer, %d in the file", len(rb), len(rf))
	}
	for i := range rb {
		if rb[i].h != rf[i].h || !bytes.Equal(rb[i].payload, rf[i].payload) {
			t.Errorf("record %d differs", i)
		}
	}
}

// TestTruth checks the ground truth against the frames: the data CRC of
// each regenerated image, and each written payload against the reference
// encoder applied to that image.
func TestTruth(t *testing.T) {
	for _, scene := range []Scene{Tomo, CDI} {
		c := smallConfig(scene)
		c.Orientation = alternate(c.Format.Chips())
		data, st := writeToBuffer(t, c)
		truth, recs := readCapture(t, bytes.NewReader(data))
		s, _ := New(c)
		if truth.Frames != s.Frames() || len(recs) != s.Frames() || st.Records != len(recs) || truth.Records != len(recs) {
			t.Fatalf("%s: truth says %d frames, %d records; capture has %d records", scene, truth.Frames, truth.Records, len(recs))
		}
		if ff, err := truth.Format.Format(); err != nil || ff != c.Format {
			t.Errorf("%s: truth format %+v (%v), want %v", scene, truth.Format, err, c.Format)
		}
		for i, rec := range recs {
			counts, overflow := s.Image(i, nil)
			img := make([]byte, 4*len(counts))
			for p, v := range counts {
				binary.LittleEndian.PutUint32(img[4*p:], v)
			}
			if got := frame.Checksum(img); got != truth.DataCRC[i] {
				t.Errorf("%s frame %d: data CRC %08x, truth %08x", scene, i, got, truth.DataCRC[i])
			}
			want, err := c.Format.AppendPayload(nil, counts, c.Orientation)
			if err != nil {
				t.Fatal(err)
			}
			h := rec.h
			if int(h.FrameNumber) != i || h.Format != c.Format || h.ModuleID != c.Module || h.Check() != nil {
				t.Errorf("%s frame %d: header %+v", scene, i, h)
			}
			if h.Timestamp != c.StartNS+uint64(i)*1_000_000 {
				t.Errorf("%s frame %d: timestamp %d", scene, i, h.Timestamp)
			}
			if !bytes.Equal(rec.payload, want) || h.PayloadCRC != frame.Checksum(rec.payload) {
				t.Errorf("%s frame %d: payload is not the encoded image", scene, i)
			}
			if (h.Flags&frame.FlagOverflow != 0) != overflow || h.Flags != truth.Flags[i] {
				t.Errorf("%s frame %d: flags %#x, truth %#x, image overflow %v", scene, i, h.Flags, truth.Flags[i], overflow)
			}
		}
	}
}

func TestDataCRC16Bit(t *testing.T) {
	c := smallConfig(Tomo)
	c.Format.BitDepth = 12
	data, _ := writeToBuffer(t, c)
	truth, _ := readCapture(t, bytes.NewReader(data))
	s, _ := New(c)
	counts, _ := s.Image(5, nil)
	img := make([]byte, 2*len(counts))
	for p, v := range counts {
		binary.LittleEndian.PutUint16(img[2*p:], uint16(v))
	}
	if got := frame.Checksum(img); got != truth.DataCRC[5] {
		t.Errorf("12-bit frame 5: data CRC %08x, truth %08x", got, truth.DataCRC[5])
	}
}

func meanOf(v []uint32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x)
	}
	return s / float64(len(v))
}

// region returns the counts of the square of side 2r around (y, x).
func region(img []uint32, w, y, x, r int) []uint32 {
	var out []uint32
	for yy := y - r; yy < y+r; yy++ {
		out = append(out, img[yy*w+x-r:yy*w+x+r]...)
	}
	return out
}

func TestTomoScene(t *testing.T) {
	c := smallConfig(Tomo)
	data, _ := writeToBuffer(t, c)
	truth, _ := readCapture(t, bytes.NewReader(data))
	p := c.Plan
	if truth.Plan == nil || !reflect.DeepEqual(*truth.Plan, p) {
		t.Errorf("truth plan %+v, want %+v", truth.Plan, p)
	}
	darks, flats, projections := p.Count(plan.DarkField), p.Count(plan.FlatField), p.Count(plan.Projection)
	for i := range truth.Frames {
		key, angle := 0, p.AngleStart
		switch {
		case i < darks:
			key = 2
		case i < darks+flats:
			key = 1
		default:
			angle = p.AngleStart + float64(i-darks-flats)*(p.AngleEnd-p.AngleStart)/float64(projections)
		}
		if truth.ImageKey[i] != key || math.Abs(truth.RotationAngle[i]-angle) > 1e-9 {
			t.Errorf("frame %d: image key %d angle %v, want %d %v", i, truth.ImageKey[i], truth.RotationAngle[i], key, angle)
		}
	}
	s, _ := New(c)
	w := c.Format.Width()
	dark, _ := s.Image(0, nil)
	flat, _ := s.Image(darks, nil)
	proj, _ := s.Image(darks+flats+projections/2, nil)
	if md, mf := meanOf(dark), meanOf(flat); md > 5 || mf < 100*md || mf < 1000 {
		t.Errorf("dark mean %v, flat mean %v: want darks of a few counts, flats much brighter", md, mf)
	}
	centre := meanOf(region(proj, w, 32, 32, 6))
	flatCentre := meanOf(region(flat, w, 32, 32, 6))
	edge := meanOf(region(proj, w, 32, 3, 2))
	flatEdge := meanOf(region(flat, w, 32, 3, 2))
	if centre > 0.8*flatCentre {
		t.Errorf("projection centre %v, flat %v: the phantom should absorb", centre, flatCentre)
	}
	if math.Abs(edge-flatEdge) > 0.05*flatEdge {
		t.Errorf("projection edge %v, flat %v: outside the phantom they should agree", edge, flatEdge)
	}
}

func TestCDIScene(t *testing.T) {
	c := smallConfig(CDI)
	c.Format.Geometry = frame.Geometry{ChipsX: 4, ChipsY: 4, ChipWidth: 64, ChipHeight: 64}
	c.Frames = 4
	data, st := writeToBuffer(t, c)
	truth, recs := readCapture(t, bytes.NewReader(data))
	if st.Overflow != len(recs) {
		t.Errorf("%d of %d frames overflowed, want all (peak %v x max count)", st.Overflow, len(recs), c.CDIPeak)
	}
	for i, r := range recs {
		if r.h.Flags&frame.FlagOverflow == 0 || truth.Flags[i] != frame.FlagOverflow {
			t.Errorf("frame %d: flags %#x, truth %#x; want overflow", i, r.h.Flags, truth.Flags[i])
		}
	}
	s, _ := New(c)
	img, _ := s.Image(3, nil)
	sorted := slices.Clone(img)
	slices.Sort(sorted)
	max, median := sorted[len(sorted)-1], sorted[len(sorted)/2]
	if max != c.Format.MaxCount() {
		t.Errorf("brightest pixel %d, want saturated at %d", max, c.Format.MaxCount())
	}
	if float64(max) < 1e3*float64(median+1) {
		t.Errorf("dynamic range: max %d, median %d", max, median)
	}
	if w := c.Format.Width(); img[(c.Format.Height()/2)*w+w/2] != max {
		t.Errorf("centre pixel %d, want the saturated peak", img[(c.Format.Height()/2)*w+w/2])
	}
	// Lower the peak: no frame saturates.
	c.CDIPeak = 0.5
	_, st = writeToBuffer(t, c)
	if st.Overflow != 0 {
		t.Errorf("peak 0.5: %d frames overflowed", st.Overflow)
	}
}

// TestCDISceneTinyImages simulates CDI frames of images smaller than the
// object's disc, down to one pixel: the scene keeps to the image.
func TestCDISceneTinyImages(t *testing.T) {
	for _, g := range []frame.Geometry{
		{ChipsX: 1, ChipsY: 1, ChipWidth: 8, ChipHeight: 1},
		{ChipsX: 2, ChipsY: 2, ChipWidth: 1, ChipHeight: 1},
		{ChipsX: 1, ChipsY: 1, ChipWidth: 1, ChipHeight: 1},
		{ChipsX: 1, ChipsY: 3, ChipWidth: 2, ChipHeight: 1},
		{ChipsX: 1, ChipsY: 1, ChipWidth: 4, ChipHeight: 4},
	} {
		t.Run(g.String(), func(t *testing.T) {
			c := smallConfig(CDI)
			c.Format = frame.Format{Geometry: g, Encoding: frame.U16LE, BitDepth: 16}
			c.Frames = 2
			data, _ := writeToBuffer(t, c)
			truth, recs := readCapture(t, bytes.NewReader(data))
			if len(recs) != 2 || truth.Frames != 2 {
				t.Errorf("%d records, truth of %d frames; want 2", len(recs), truth.Frames)
			}
		})
	}
}

func TestFaults(t *testing.T) {
	c := smallConfig(Tomo)
	c.Missing.Frames = []int{1, 9}
	c.Duplicate.Frames = []int{4, 9} // 9 is missing: stays missing
	c.Reorder.Frames = []int{6, 7, 15, 8}
	c.Corrupt.Frames = []int{4, 12}
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	want := Faults{Missing: []int{1, 9}, Duplicate: []int{4}, Reorder: []int{6}, Corrupt: []int{4, 12}}
	got := s.Faults()
	if !slices.Equal(got.Missing, want.Missing) || !slices.Equal(got.Duplicate, want.Duplicate) ||
		!slices.Equal(got.Reorder, want.Reorder) || !slices.Equal(got.Corrupt, want.Corrupt) {
		t.Errorf("faults %+v, want %+v", got, want)
	}
	data, _ := writeToBuffer(t, c)
	truth, recs := readCapture(t, bytes.NewReader(data))
	if !slices.Equal(truth.Faults.Reorder, want.Reorder) || !slices.Equal(truth.Faults.Missing, want.Missing) {
		t.Errorf("truth faults %+v", truth.Faults)
	}
	var order []int
	for _, r := range recs {
		order = append(order, int(r.h.FrameNumber))
		bad := r.h.PayloadCRC != frame.Checksum(r.payload)
		if corrupt := slices.Contains(want.Corrupt, int(r.h.FrameNumber)); bad != corrupt {
			t.Errorf("frame %d: payload CRC mismatch %v, corrupt %v", r.h.FrameNumber, bad, corrupt)
		}
	}
	wantOrder := []int{0, 2, 3, 4, 4, 5, 7, 6, 8, 10, 11, 12, 13, 14, 15}
	if !slices.Equal(order, wantOrder) {
		t.Errorf("written order %v, want %v", order, wantOrder)
	}
	if len(truth.DataCRC) != c.Plan.Frames() || truth.DataCRC[1] == 0 {
		t.Errorf("truth lacks the data CRC of missing frame 1: %v", truth.DataCRC)
	}
}

func TestFaultRates(t *testing.T) {
	c := smallConfig(CDI)
	c.Frames = 400
	c.Format.Geometry = frame.Geometry{ChipsX: 1, ChipsY: 1, ChipWidth: 8, ChipHeight: 2}
	c.Missing.Rate, c.Duplicate.Rate, c.Reorder.Rate, c.Corrupt.Rate = 0.05, 0.05, 0.05, 0.05
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	f := s.Faults()
	for name, list := range map[string][]int{"missing": f.Missing, "duplicate": f.Duplicate, "reorder": f.Reorder, "corrupt": f.Corrupt} {
		if len(list) < 5 || len(list) > 40 || !sort.IntsAreSorted(list) {
			t.Errorf("%s at rate 0.05 of 400 frames: %v", name, list)
		}
		for _, i := range list {
			if name != "missing" && slices.Contains(f.Missing, i) {
				t.Errorf("%s frame %d is also missing", name, i)
			}
		}
	}
	data, _ := writeToBuffer(t, c)
	_, recs := readCapture(t, bytes.NewReader(data))
	if want := 400 - len(f.Missing) + len(f.Duplicate); len(recs) != want {
		t.Errorf("%d records, want %d", len(recs), want)
	}
	s2, _ := New(c)
	if !slices.Equal(s2.Faults().Corrupt, f.Corrupt) {
		t.Error("fault rates are not deterministic")
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"scene", func(c *Config) { c.Scene = "xray" }, "unknown scene"},
		{"format", func(c *Config) { c.Format.BitDepth = 7 }, "bit depth"},
		{"orientation", func(c *Config) { c.Orientation = frame.Orientation{0} }, "orientation"},
		{"no frames", func(c *Config) { c.Plan = plan.Plan{} }, "at least one frame"},
		{"negative", func(c *Config) { c.Plan.Steps[0].Count = -1 }, "negative"},
		{"fps", func(c *Config) { c.FPS = 0 }, "frame rate"},
		{"rate", func(c *Config) { c.Corrupt.Rate = 2 }, "corrupt rate"},
		{"frame", func(c *Config) { c.Missing.Frames = []int{16} }, "missing frame 16"},
		{"cdi peak", func(c *Config) { c.Scene = CDI; c.CDIPeak = 0 }, "peak"},
	}
	for _, tt := range tests {
		c := smallConfig(Tomo)
		tt.edit(&c)
		_, err := New(c)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: New = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	if _, err := New(smallConfig(Tomo)); err != nil {
		t.Errorf("small config: %v", err)
	}
}

func TestReadTruthWithoutSimulation(t *testing.T) {
	if _, err := ReadTruth(testMeta); err == nil {
		t.Error("ReadTruth of plain metadata succeeded")
	}
}

// failWriter fails once it has taken n bytes.
type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, errors.New("disk full")
	}
	f.n -= len(p)
	return len(p), nil
}

func TestWriteError(t *testing.T) {
	c := smallConfig(Tomo)
	s, _ := New(c)
	_, err := s.WriteCapture(&failWriter{n: 100}, testMeta)
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("WriteCapture to a failing writer = %v", err)
	}
}

func TestReadTruths(t *testing.T) {
	one := Truth{Frames: 2, DataCRC: []uint32{1, 2}, Flags: []uint32{0, 0}}
	two := Truth{Module: 1, Frames: 1, DataCRC: []uint32{3}, Flags: []uint32{0}}
	single := capture.Metadata{}
	if err := single.Set(TruthKey, one); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadTruths(single); err != nil || len(got) != 1 || got[0].Frames != 2 {
		t.Errorf("ReadTruths of one module: %v, %v", got, err)
	}
	several := capture.Metadata{}
	if err := several.Set(ModulesKey, []Truth{one, two}); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadTruths(several); err != nil || len(got) != 2 || got[1].Module != 1 {
		t.Errorf("ReadTruths of two modules: %v, %v", got, err)
	}
	if _, err := ReadTruth(several); err == nil || !strings.Contains(err.Error(), ModulesKey) {
		t.Errorf("ReadTruth of several modules: %v, want an error naming %q", err, ModulesKey)
	}
	bad := capture.Metadata{}
	if err := bad.Set(ModulesKey, []Truth{{Frames: 3}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTruths(bad); err == nil {
		t.Error("ReadTruths of a truth without data CRCs succeeded")
	}
}
