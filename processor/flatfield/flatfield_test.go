package flatfield

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"h5ingest/frame"
	"h5ingest/pipeline"
	"h5ingest/pipeline/pipelinetest"
	"h5ingest/plan"
)

var (
	format16 = frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 1, ChipWidth: 8, ChipHeight: 6}, Encoding: frame.U16LE, BitDepth: 16}
	format32 = frame.Format{Geometry: frame.Geometry{ChipsX: 1, ChipsY: 2, ChipWidth: 10, ChipHeight: 4}, Encoding: frame.U32LE, BitDepth: 32}
	tomo     = plan.Tomo(2, 3, 6, 0, 180) // frames 0-1 darks, 2-4 flats, 5-10 projections
)

// previews collects what a stage writes.
type previews struct {
	mu      sync.Mutex
	frames  map[int][]byte
	err     error // returned by every write
	discard bool  // keep nothing (and allocate nothing)

	skipped map[int]int           // to a stream: the frames skipped, and how often
	series  pipeline.StreamSeries // to a stream: the series declared
}

func (p *previews) add(d pipeline.Dataset) (pipeline.FrameWriter, error) {
	p.frames = map[int][]byte{}
	return p, nil
}

// addStream is pipeline.Scan.AddStream: the previews' series, kept.
func (p *previews) addStream(s pipeline.StreamSeries) (pipeline.FrameStream, error) {
	p.frames, p.skipped, p.series = map[int][]byte{}, map[int]int{}, s
	return p, nil
}

// Skip implements pipeline.FrameStream.
func (p *previews) Skip(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.skipped[n]++
}

func (p *previews) WriteFrame(n int, data []byte) error {
	if p.err != nil || p.discard {
		return p.err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frames[n] = append([]byte(nil), data...)
	return nil
}

// scene returns the images of a tomographic scan: darks near 100, flats
// near 1000, projections in between, with a dead pixel (flat = dark).
func scene(f frame.Format, keys []int8) [][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([][]byte, len(keys))
	for n, k := range keys {
		img := make([]byte, f.ImageSize())
		for i := range f.Pixels() {
			v := 100 + r.IntN(10)
			switch {
			case i == 3:
				v = 100 // dead pixel: no signal in flats or projections
			case k == plan.FlatField:
				v = 1000 + r.IntN(50)
			case k == plan.Projection:
				v = 100 + r.IntN(1200) // some above the flat: clipped
			}
			if f.PixelSize() == 2 {
				binary.LittleEndian.PutUint16(img[2*i:], uint16(v))
			} else {
				binary.LittleEndian.PutUint32(img[4*i:], uint32(v))
			}
		}
		out[n] = img
	}
	return out
}

// want computes the preview of projection p in float64, as the package
// documents it.
func want(f frame.Format, o Options, keys []int8, images [][]byte, p int) []float64 {
	pix := func(img []byte, i int) float64 {
		if f.PixelSize() == 2 {
			return float64(binary.LittleEndian.Uint16(img[2*i:]))
		}
		return float64(binary.LittleEndian.Uint32(img[4*i:]))
	}
	h, w := f.Height(), f.Width()
	dark, flat := make([]float64, h*w), make([]float64, h*w)
	var nd, nf float64
	for n, k := range keys {
		if k == plan.Projection {
			break
		}
		for i := range dark {
			if k == plan.DarkField {
				dark[i] += pix(images[n], i)
			} else {
				flat[i] += pix(images[n], i)
			}
		}
		if k == plan.DarkField {
			nd++
		} else {
			nf++
		}
	}
	b := o.Bin
	oh, ow := h/b, w/b
	out := make([]float64, oh*ow)
	for i := range dark {
		y, x := i/w, i%w
		if y/b >= oh || x/b >= ow {
			continue
		}
		d, fl := dark[i]/max(nd, 1), flat[i]/nf
		c := 0.0
		if fl-d > 0 {
			c = (pix(images[p], i) - d) / (fl - d)
		}
		out[(y/b)*ow+x/b] += min(max(c, o.Min), o.Max) / float64(b*b)
	}
	return out
}

func floats(b []byte) []float64 {
	out := make([]float64, len(b)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return out
}

func start(t testing.TB, f frame.Format, o Options, keys []int8) (*Stage, *previews) {
	t.Helper()
	p := &previews{}
	st, err := New(o, pipeline.Scan{Format: f, Frames: len(keys), ImageKeys: keys, AddDataset: p.add})
	if err != nil {
		t.Fatal(err)
	}
	return st, p
}

// TestCorrect checks every projection's preview against a float64
// computation of the same correction, for both pixel sizes, with and
// without binning, and that the raw images are left as they were.
func TestCorrect(t *testing.T) {
	keys := tomo.ImageKeys()
	for _, c := range []struct {
		name string
		f    frame.Format
		bin  int
	}{{"u16", format16, 1}, {"u16/bin2", format16, 2}, {"u32/bin3", format32, 3}} {
		t.Run(c.name, func(t *testing.T) {
			o := DefaultOptions()
			o.Bin = c.bin
			st, out := start(t, c.f, o, keys)
			images := scene(c.f, keys)
			proc, _ := st.Processor()
			for n, img := range images {
				before := string(img)
				if err := proc.Process(n, c.f, img); err != nil {
					t.Fatalf("frame %d: %v", n, err)
				}
				if string(img) != before {
					t.Fatalf("frame %d: the image was changed", n)
				}
			}
			if err := st.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if got := st.Previews(); got != tomo.Count(plan.Projection) {
				t.Fatalf("%d previews, want %d", got, tomo.Count(plan.Projection))
			}
			for n, k := range keys {
				got, ok := out.frames[n]
				if k != plan.Projection {
					if ok {
						t.Errorf("frame %d (key %d) has a preview", n, k)
					}
					continue
				}
				g, w := floats(got), want(c.f, o, keys, images, n)
				if len(g) != len(w) {
					t.Fatalf("frame %d: %d pixels, want %d", n, len(g), len(w))
				}
				for i := range w {
					if math.Abs(g[i]-w[i]) > 1e-5*max(1, math.Abs(w[i])) {
						t.Fatalf("frame %d pixel %d: %v, want %v", n, i, g[i], w[i])
					}
				}
			}
		})
	}
}

// TestEvery checks that every: 3 previews every third frame from the
// first projection, and no other.
func TestEvery(t *testing.T) {
	keys := tomo.ImageKeys()
	o := DefaultOptions()
	o.Every = 3
	st, out := start(t, format16, o, keys)
	p, _ := st.Processor()
	for n, img := range scene(format16, keys) {
		p.Process(n, format16, img)
	}
	var got []int
	for n := range len(keys) {
		if _, ok := out.frames[n]; ok {
			got = append(got, n)
		}
	}
	if want := []int{5, 8}; !slices.Equal(got, want) {
		t.Errorf("previews of frames %v, want %v", got, want)
	}
}

// TestSharedAcrossWorkers runs a scan's frames through several workers at
// once, as the pipeline does, the reference frames among them: every
// preview is the one a single worker makes. Run it with -race.
func TestSharedAcrossWorkers(t *testing.T) {
	keys := plan.Tomo(8, 8, 40, 0, 180).ImageKeys()
	images := scene(format16, keys)
	o := DefaultOptions()
	o.Wait = time.Minute // every reference frame comes: no wait runs out
	one, outOne := start(t, format16, o, keys)
	p, _ := one.Processor()
	for n, img := range images {
		p.Process(n, format16, img)
	}
	many, outMany := start(t, format16, o, keys)
	const workers = 4
	frames := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		p, _ := many.Processor()
		wg.Go(func() {
			for n := range frames {
				if err := p.Process(n, format16, images[n]); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for n := range images {
		frames <- n
	}
	close(frames)
	wg.Wait()
	for _, st := range []*Stage{one, many} {
		if err := st.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if len(outMany.frames) != 40 || len(outOne.frames) != 40 {
		t.Fatalf("%d and %d previews, want 40", len(outOne.frames), len(outMany.frames))
	}
	for n, b := range outOne.frames {
		if string(outMany.frames[n]) != string(b) {
			t.Fatalf("frame %d: %d workers made another preview than one", n, workers)
		}
	}
}

// TestEveryWorkerWaiting has each of two workers take a projection before
// the last flat, which a third frame would bring: once both wait, nothing
// else can come, so the reference is made at once, from what came, and
// Close says so, rather than the scan stalling for Options.Wait.
func TestEveryWorkerWaiting(t *testing.T) {
	keys := tomo.ImageKeys()
	images := scene(format16, keys)
	o := DefaultOptions()
	o.Wait = time.Minute
	st, out := start(t, format16, o, keys)
	p0, _ := st.Processor()
	p1, _ := st.Processor()
	for n := range 4 { // frame 4, the last flat, never comes
		p0.Process(n, format16, images[n])
	}
	began := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { p0.Process(5, format16, images[5]) })
	wg.Go(func() { p1.Process(6, format16, images[6]) })
	wg.Wait()
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("the workers waited %v", d)
	}
	if len(out.frames) != 2 {
		t.Errorf("%d previews, want 2", len(out.frames))
	}
	if err := st.Close(); err == nil || !strings.Contains(err.Error(), "2 of 2 darks and 2 of 3 flats") {
		t.Errorf("Close: %v", err)
	}
}

// TestNoAllocation checks that no frame allocates once the reference is
// made: neither a projection nor a late reference frame.
func TestNoAllocation(t *testing.T) {
	keys := tomo.ImageKeys()
	images := scene(format16, keys)
	st, out := start(t, format16, DefaultOptions(), keys)
	out.discard = true
	p, _ := st.Processor()
	for n, img := range images {
		p.Process(n, format16, img)
	}
	for _, n := range []int{0, 2, 5} {
		if a := testing.AllocsPerRun(50, func() { p.Process(n, format16, images[n]) }); a != 0 {
			t.Errorf("frame %d (key %d): %v allocations, want 0", n, keys[n], a)
		}
	}
	// A reference frame before the reference is made.
	st, _ = start(t, format16, DefaultOptions(), plan.Tomo(1000, 1, 1, 0, 180).ImageKeys())
	p, _ = st.Processor()
	if a := testing.AllocsPerRun(50, func() { p.Process(0, format16, images[0]) }); a != 0 {
		t.Errorf("dark: %v allocations, want 0", a)
	}
}

// TestConformance runs the pipeline's processor suite on a stage's
// processors (a scan of projections whose reference is made).
func TestConformance(t *testing.T) {
	keys := plan.Tomo(1, 1, 64, 0, 180).ImageKeys()
	st, _ := start(t, format16, DefaultOptions(), keys)
	images := scene(format16, keys)
	p, _ := st.Processor()
	p.Process(0, format16, images[0])
	p.Process(1, format16, images[1])
	pipelinetest.Processor(t, st.Processor, format16)
}

// TestCloseReports checks what Close says of a scan that did not give the
// stage what it needs.
func TestCloseReports(t *testing.T) {
	keys := tomo.ImageKeys()
	images := scene(format16, keys)
	o := DefaultOptions()
	o.Wait = time.Millisecond
	for _, c := range []struct {
		name  string
		skip  []int // frames that never come
		werr  error
		want  string
		count int // previews written
	}{
		{"a dark and a flat missing", []int{1, 3}, nil, "reference made from 1 of 2 darks and 2 of 3 flats", 6},
		{"no flat", []int{2, 3, 4}, nil, "6 projections without preview: no flat field came", 0},
		{"writes fail", nil, errors.New("disk full"), "6 previews not written: disk full", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, out := start(t, format16, o, keys)
			out.err = c.werr
			p, _ := st.Processor()
			for n, img := range images {
				if !contains(c.skip, n) {
					p.Process(n, format16, img)
				}
			}
			err := st.Close()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Close: %v, want %q", err, c.want)
			}
			if st.Previews() != c.count {
				t.Errorf("%d previews, want %d", st.Previews(), c.count)
			}
		})
	}
	// A flat after the first projection is corrected is reported late.
	st, _ := start(t, format16, o, keys)
	p, _ := st.Processor()
	for _, n := range []int{0, 1, 2, 3, 5, 4} {
		p.Process(n, format16, images[n])
	}
	if err := st.Close(); err == nil || !strings.Contains(err.Error(), "1 darks or flats came after") {
		t.Errorf("Close: %v, want the late flat", err)
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestStartRefuses checks the options and scans the stage cannot work
// with.
func TestStartRefuses(t *testing.T) {
	keys := tomo.ImageKeys()
	add := (&previews{}).add
	for _, c := range []struct {
		name string
		opt  func(*Options)
		scan pipeline.Scan
		want string
	}{
		{"stream without a live stream", func(o *Options) { o.To = ToStream },
			pipeline.Scan{Format: format16, Frames: len(keys), ImageKeys: keys, AddDataset: add}, "to: stream: this scan has no live stream"},
		{"stream address", func(o *Options) { o.To, o.Address = ToStream, "127.0.0.1:1" },
			pipeline.Scan{Format: format16, Frames: len(keys), ImageKeys: keys, AddStream: (&previews{}).addStream}, `address: "127.0.0.1:1"`},
		{"to", func(o *Options) { o.To = "file" }, pipeline.Scan{}, `to: "file"`},
		{"bin", func(o *Options) { o.Bin = 0 }, pipeline.Scan{}, "bin: 0"},
		{"every", func(o *Options) { o.Every = 0 }, pipeline.Scan{}, "every: 0"},
		{"bin too large", func(o *Options) { o.Bin = 100 }, pipeline.Scan{Format: format16, Frames: len(keys), ImageKeys: keys, AddDataset: add}, "larger than"},
		{"clip", func(o *Options) { o.Min = 2 }, pipeline.Scan{}, "min 2, max 2"},
		{"no plan", nil, pipeline.Scan{Format: format16, AddDataset: add}, "needs the scan's plan"},
		{"no file", nil, pipeline.Scan{Format: format16, Frames: len(keys), ImageKeys: keys}, "no file"},
		{"no flats", nil, pipeline.Scan{Format: format16, Frames: 3, ImageKeys: []int8{2, 0, 1}, AddDataset: add}, "no flat field before"},
		{"no projection", nil, pipeline.Scan{Format: format16, Frames: 2, ImageKeys: []int8{2, 1}, AddDataset: add}, "no projection"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := DefaultOptions()
			if c.opt != nil {
				c.opt(&o)
			}
			_, err := Start(o, c.scan)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Start: %v, want %q", err, c.want)
			}
		})
	}
}

// TestStream sends the previews to the live stream: the series declared
// is float32 previews of the binned size, flat-field corrected, as many
// as the plan has projections to preview; each preview is the one the
// dataset route writes; and every other frame, the darks, the flats and
// the projections Every leaves out, is skipped once, so that the stream
// keeps image_id order without waiting for them.
func TestStream(t *testing.T) {
	keys := plan.Tomo(2, 3, 9, 0, 180).ImageKeys() // projections 5-13
	images := scene(format16, keys)
	o := DefaultOptions()
	o.To, o.Bin, o.Every, o.Address = ToStream, 2, 2, "tcp://127.0.0.1:31999"
	out := &previews{}
	st, err := New(o, pipeline.Scan{Format: format16, Frames: len(keys), ImageKeys: keys, AddStream: out.addStream})
	if err != nil {
		t.Fatal(err)
	}
	wantSeries := pipeline.StreamSeries{Name: "flatfield", Height: 3, Width: 8, Images: 5, Scale: 2, FlatField: true, Address: o.Address}
	if out.series != wantSeries {
		t.Errorf("series %+v, want %+v", out.series, wantSeries)
	}
	p, _ := st.Processor()
	for n, img := range images {
		if err := p.Process(n, format16, img); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for n, k := range keys {
		previewed := k == plan.Projection && (n-5)%2 == 0
		if _, ok := out.frames[n]; ok != previewed || out.skipped[n] != map[bool]int{false: 1, true: 0}[previewed] {
			t.Errorf("frame %d (key %d): preview %v, skipped %d times; want preview %v", n, k, ok, out.skipped[n], previewed)
		}
		if previewed {
			assertClose(t, n, floats(out.frames[n]), want(format16, o, keys, images, n))
		}
	}
}

// assertClose fails t unless preview g of frame n is w, pixel by pixel.
func assertClose(t *testing.T, n int, g, w []float64) {
	t.Helper()
	if len(g) != len(w) {
		t.Fatalf("frame %d: %d pixels, want %d", n, len(g), len(w))
	}
	for i := range w {
		if math.Abs(g[i]-w[i]) > 1e-5*max(1, math.Abs(w[i])) {
			t.Fatalf("frame %d pixel %d: %v, want %v", n, i, g[i], w[i])
		}
	}
}
