package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"h5ingest/compress/bitshuffle"
	"h5ingest/frame"
)

// testFormats lists every encoding, depth and coding of format version 1.
func testFormats() []frame.Format {
	var fs []frame.Format
	for _, d := range []int{1, 6, 12, 24} {
		for _, c := range []frame.Coding{frame.Binary, frame.LFSR} {
			fs = append(fs, frame.Format{Encoding: frame.Bitplane, BitDepth: d, Coding: c})
		}
	}
	return append(fs,
		frame.Format{Encoding: frame.Packed12, BitDepth: 12},
		frame.Format{Encoding: frame.Packed24, BitDepth: 24},
		frame.Format{Encoding: frame.U16LE, BitDepth: 16},
		frame.Format{Encoding: frame.U32LE, BitDepth: 32},
	)
}

// testGeometries are small, odd geometries; formats skip those they do not
// allow (bitplane needs widths of a multiple of 8, packed12 even chips).
var testGeometries = []frame.Geometry{
	{ChipsX: 3, ChipsY: 2, ChipWidth: 16, ChipHeight: 8},
	{ChipsX: 1, ChipsY: 1, ChipWidth: 8, ChipHeight: 1},
	{ChipsX: 2, ChipsY: 3, ChipWidth: 24, ChipHeight: 5},
	{ChipsX: 2, ChipsY: 2, ChipWidth: 3, ChipHeight: 2},
	{ChipsX: 1, ChipsY: 2, ChipWidth: 5, ChipHeight: 3},
}

// testOrientations returns the orientations tried on a geometry: none,
// every chip at 180 degrees, and a mix.
func testOrientations(g frame.Geometry) map[string]frame.Orientation {
	all, mixed := make(frame.Orientation, g.Chips()), make(frame.Orientation, g.Chips())
	for k := range all {
		all[k] = 180
		if k%3 != 1 {
			mixed[k] = 180
		}
	}
	return map[string]frame.Orientation{"none": nil, "all180": all, "mixed": mixed}
}

// randomImage returns counts up to f.MaxCount, with 0 and MaxCount in it.
func randomImage(rng *rand.Rand, f frame.Format) []uint32 {
	counts := make([]uint32, f.Pixels())
	max := f.MaxCount()
	for i := range counts {
		switch rng.IntN(8) {
		case 0:
			counts[i] = 0
		case 1:
			counts[i] = max
		default:
			counts[i] = uint32(rng.Uint64N(uint64(max) + 1))
		}
	}
	return counts
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// newJob returns a job for payload, with an image buffer a little larger
// than needed and filled with garbage, so that stray writes and unwritten
// pixels both show.
func newJob(f frame.Format, number int, payload []byte) Job {
	img := bytes.Repeat([]byte{0xA5}, f.ImageSize()+7)
	return Job{
		Header: frame.Header{
			FrameNumber: uint64(number),
			PayloadSize: uint32(len(payload)),
			PayloadCRC:  frame.Checksum(payload),
			Format:      f,
		},
		Payload: payload,
		Image:   img,
	}
}

// checkJob checks a decoded job against the image it should hold.
func checkJob(t *testing.T, name string, j *Job, want []byte) {
	t.Helper()
	if j.Err != nil {
		t.Errorf("%s: %v", name, j.Err)
		return
	}
	n := j.Header.Format.ImageSize()
	if got := j.Image[:n]; !bytes.Equal(got, want) {
		i := 0
		for i < n && got[i] == want[i] {
			i++
		}
		t.Errorf("%s: image differs from byte %d of %d: got % x, want % x", name, i, n,
			got[i:min(i+8, n)], want[i:min(i+8, n)])
	}
	if !bytes.Equal(j.Image[n:], bytes.Repeat([]byte{0xA5}, len(j.Image)-n)) {
		t.Errorf("%s: wrote past the image's %d bytes", name, n)
	}
	if want := frame.Checksum(j.Payload); j.RawCRC != want {
		t.Errorf("%s: RawCRC %08x, want %08x", name, j.RawCRC, want)
	}
	if want := frame.Checksum(want); j.DataCRC != want {
		t.Errorf("%s: DataCRC %08x, want %08x", name, j.DataCRC, want)
	}
}

// openBackend returns the backend called name: one New knows, or one of
// hostBackends.
func openBackend(name string, opts Options) (Backend, error) {
	if slices.Contains(hostBackends, name) {
		return newHostCUDA(name, opts)
	}
	return New(name, opts)
}

// skipWithoutDevice skips a test of the cuda backend where no GPU answers.
func skipWithoutDevice(t testing.TB, name string) {
	t.Helper()
	if name != "cuda" {
		return
	}
	b, err := New("cuda", Options{})
	if err != nil {
		t.Skipf("needs a CUDA GPU: %v", err)
	}
	b.Close()
}

func newBackend(t testing.TB, name string, opts Options) Backend {
	t.Helper()
	b, err := openBackend(name, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// TestBackends runs the conformance suite against every backend New knows,
// and against the device backend running the CUDA kernels on the host. The
// cuda backend is skipped, with the reason, where no GPU answers.
func TestBackends(t *testing.T) {
	for _, name := range append(Names(), hostBackends...) {
		t.Run(name, func(t *testing.T) {
			skipWithoutDevice(t, name)
			t.Run("Parity", func(t *testing.T) { testParity(t, name) })
			t.Run("Rounds", func(t *testing.T) { testRounds(t, name) })
			for _, workers := range []int{1, 5} {
				t.Run(fmt.Sprint("workers=", workers), func(t *testing.T) {
					testRoundTrip(t, name, workers)
					testRandomPayloads(t, name, workers)
				})
			}
			t.Run("Shuffle", func(t *testing.T) { testShuffle(t, name) })
			t.Run("BadJobs", func(t *testing.T) { testBadJobs(t, name) })
			t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, name) })
			t.Run("Closed", func(t *testing.T) { testClosed(t, name) })
		})
	}
}

// testRoundTrip encodes random images as a detector does and decodes them,
// every format in one batch, for each geometry and orientation.
func testRoundTrip(t *testing.T, name string, workers int) {
	rng := rand.New(rand.NewPCG(10, uint64(workers)))
	for _, g := range testGeometries {
		for oname, o := range testOrientations(g) {
			be := newBackend(t, name, Options{Orientation: o, Workers: workers})
			var batch []Job
			var want [][]byte
			for _, f := range testFormats() {
				f.Geometry = g
				if f.Validate() != nil {
					continue
				}
				counts := randomImage(rng, f)
				payload, err := f.AppendPayload(nil, counts, o)
				if err != nil {
					t.Fatal(err)
				}
				batch = append(batch, newJob(f, len(batch), payload))
				want = append(want, imageBytes(f, counts))
			}
			if err := be.Decode(batch); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			for i := range batch {
				checkJob(t, fmt.Sprintf("round trip %v, %s", batch[i].Header.Format, oname), &batch[i], want[i])
			}
		}
	}
}

// testRandomPayloads decodes random bytes, which are valid payloads of
// every format, and holds the result to the reference decoder.
func testRandomPayloads(t *testing.T, name string, workers int) {
	rng := rand.New(rand.NewPCG(20, uint64(workers)))
	for _, g := range testGeometries {
		for oname, o := range testOrientations(g) {
			be := newBackend(t, name, Options{Orientation: o, Workers: workers})
			var batch []Job
			for _, f := range testFormats() {
				f.Geometry = g
				if f.Validate() != nil {
					continue
				}
				batch = append(batch, newJob(f, len(batch), randomBytes(rng, f.PayloadSize())))
			}
			if err := be.Decode(batch); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			for i := range batch {
				j := &batch[i]
				checkJob(t, fmt.Sprintf("random payload %v, %s", j.Header.Format, oname), j,
					refDecode(j.Header.Format, j.Payload, o))
			}
		}
	}
}

// TestPiMegaFrame round-trips one full Pi-mega frame, 24-bit LFSR
// bitplane, with mixed chip orientations.
func TestPiMegaFrame(t *testing.T) {
	f := frame.Format{Geometry: frame.PiMega, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	o := testOrientations(f.Geometry)["mixed"]
	rng := rand.New(rand.NewPCG(30, 31))
	counts := randomImage(rng, f)
	payload, err := f.AppendPayload(nil, counts, o)
	if err != nil {
		t.Fatal(err)
	}
	be := newBackend(t, "cpu", Options{Orientation: o})
	batch := []Job{newJob(f, 0, payload)}
	if err := be.Decode(batch); err != nil {
		t.Fatal(err)
	}
	checkJob(t, "Pi-mega frame", &batch[0], imageBytes(f, counts))
}

// testBadJobs checks that frames the backend cannot decode get an error
// naming the frame, and that the others of the batch are decoded.
func testBadJobs(t *testing.T, name string) {
	g := frame.Geometry{ChipsX: 2, ChipsY: 1, ChipWidth: 8, ChipHeight: 4}
	o := frame.Orientation{0, 180}
	f := frame.Format{Geometry: g, Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR}
	rng := rand.New(rand.NewPCG(40, 41))
	good := func(n int) Job { return newJob(f, n, randomBytes(rng, f.PayloadSize())) }

	otherChips := f
	otherChips.ChipsX = 3
	badOrientation := newJob(otherChips, 1, randomBytes(rng, otherChips.PayloadSize()))
	smallImage := good(3)
	smallImage.Image = smallImage.Image[:f.ImageSize()-1]
	shortPayload := good(5)
	shortPayload.Payload = shortPayload.Payload[1:]
	badFormat := good(7)
	badFormat.Header.Format.BitDepth = 13
	badShuffle := good(9)
	badShuffle.ShuffleBlock = 12
	negativeShuffle := good(11)
	negativeShuffle.ShuffleBlock = -8

	batch := []Job{good(0), badOrientation, good(2), smallImage, good(4), shortPayload, good(6), badFormat,
		good(8), badShuffle, good(10), negativeShuffle}
	for i := range batch {
		batch[i].RawCRC, batch[i].DataCRC = 1, 1 // stale results must not survive
	}
	be := newBackend(t, name, Options{Orientation: o, Workers: 2})
	if err := be.Decode(batch); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	for i := range batch {
		j := &batch[i]
		if i%2 == 0 {
			checkJob(t, fmt.Sprintf("good frame %d", i), j, refDecode(f, j.Payload, o))
			continue
		}
		if j.Err == nil {
			t.Errorf("bad frame %d decoded without error", i)
			continue
		}
		if !strings.Contains(j.Err.Error(), fmt.Sprintf("frame %d:", i)) {
			t.Errorf("bad frame %d: error %q does not name the frame", i, j.Err)
		}
		if j.RawCRC != 0 || j.DataCRC != 0 {
			t.Errorf("bad frame %d: CRCs %08x, %08x left set", i, j.RawCRC, j.DataCRC)
		}
	}
	for i, want := range map[int]string{1: "orientation lists 2 chips", 3: "image buffer", 5: "payload of", 7: "bit depth 13",
		9: "block size 12", 11: "block size -8"} {
		if err := batch[i].Err; err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("bad frame %d: error %q does not say %q", i, err, want)
		}
	}
}

// testShuffle asks for bit-transposed images, with block sizes that give
// full blocks, a partial block and leftover pixels, frames that do and do
// not ask in one batch, and holds every image to the reference decoder's
// image transposed by package bitshuffle. DataCRC stays the CRC of the
// image before the transpose.
func testShuffle(t *testing.T, name string) {
	rng := rand.New(rand.NewPCG(30, 31))
	for gi, g := range parityGeometries {
		o := testOrientations(g)["mixed"]
		be := newBackend(t, name, Options{Orientation: o, Workers: 3, Streams: 2})
		var batch []Job
		for _, f := range testFormats() {
			f.Geometry = g
			if f.Validate() != nil {
				continue
			}
			for _, block := range []int{0, 8, 24, bitshuffle.DefaultBlockSize(f.PixelSize())} {
				j := newJob(f, len(batch), randomBytes(rng, f.PayloadSize()))
				j.ShuffleBlock = block
				batch = append(batch, j)
			}
		}
		if err := be.Decode(batch); err != nil {
			t.Fatalf("Decode: %v", err)
		}
		for i := range batch {
			j := &batch[i]
			f := j.Header.Format
			plain := refDecode(f, j.Payload, o)
			want := plain
			if j.ShuffleBlock != 0 {
				var err error
				if want, err = bitshuffle.AppendShuffle(nil, plain, f.PixelSize(), j.ShuffleBlock); err != nil {
					t.Fatal(err)
				}
			}
			// checkJob holds DataCRC to the CRC of the image it is given;
			// a transposed image keeps the CRC of the plain one.
			what := fmt.Sprintf("geometry %d, %v, block %d", gi, f, j.ShuffleBlock)
			dataCRC := j.DataCRC
			if j.ShuffleBlock != 0 {
				if want := frame.Checksum(plain); dataCRC != want {
					t.Errorf("%s: DataCRC %08x, want %08x, the CRC of the image before the transpose", what, dataCRC, want)
				}
				j.DataCRC = frame.Checksum(want)
			}
			checkJob(t, what, j, want)
		}
	}
}

// testConcurrent decodes from several goroutines at once on one backend.
func testConcurrent(t *testing.T, name string) {
	g := frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16}
	o := testOrientations(g)["mixed"]
	be := newBackend(t, name, Options{Orientation: o, Workers: 3})
	var wg sync.WaitGroup
	for gr := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(50, uint64(gr)))
			for round := range 5 {
				var batch []Job
				for _, f := range testFormats() {
					f.Geometry = g
					batch = append(batch, newJob(f, len(batch), randomBytes(rng, f.PayloadSize())))
				}
				if err := be.Decode(batch); err != nil {
					t.Errorf("goroutine %d round %d: %v", gr, round, err)
					return
				}
				for i := range batch {
					j := &batch[i]
					checkJob(t, fmt.Sprintf("goroutine %d round %d, %v", gr, round, j.Header.Format), j,
						refDecode(j.Header.Format, j.Payload, o))
				}
			}
		})
	}
	wg.Wait()
}

func testClosed(t *testing.T, name string) {
	be, err := openBackend(name, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := be.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := be.Decode(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Decode after Close: %v, want ErrClosed", err)
	}
}

func TestNew(t *testing.T) {
	be, err := New("cpu", Options{})
	if err != nil {
		t.Fatalf("New(cpu): %v", err)
	}
	if be.Name() != "cpu" {
		t.Errorf("New(cpu).Name() = %q", be.Name())
	}
	be.Close()
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"gpu", Options{}, `unknown backend "gpu" (want one of auto, cpu, cuda)`},
		{"cpu", Options{Workers: -1}, "-1 workers"},
		{"cuda", Options{Streams: -1}, "-1 streams"},
		{"cuda", Options{Device: -2}, "CUDA device -2"},
		{"cpu", Options{Orientation: frame.Orientation{0, 90}}, "chip 1 orientation 90"},
	} {
		be, err := New(tc.name, tc.opts)
		if err == nil {
			be.Close()
			t.Errorf("New(%q, %+v) succeeded", tc.name, tc.opts)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q, %+v): %q, want it to say %q", tc.name, tc.opts, err, tc.want)
		}
	}
}

// TestAuto checks that auto picks cuda where New("cuda") works and the CPU
// where it does not, logging one line that says which and why.
func TestAuto(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	cudaBe, cudaErr := New("cuda", Options{})
	if cudaErr == nil {
		cudaBe.Close()
	}
	be, err := New("auto", Options{Logger: log})
	if err != nil {
		t.Fatalf("New(auto): %v", err)
	}
	defer be.Close()
	lines := strings.Split(strings.TrimSpace(logged.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("auto logged %d lines, want 1: %q", len(lines), logged.String())
	}
	want, reason := "cuda", "CUDA device found"
	if cudaErr != nil {
		want, reason = "cpu", cudaErr.Error()[len("gpu: cuda backend: "):]
	}
	if be.Name() != want {
		t.Errorf("auto picked %q; New(cuda) gave %v, so want %q", be.Name(), cudaErr, want)
	}
	for _, s := range []string{"backend=" + want, reason} {
		if !strings.Contains(lines[0], s) {
			t.Errorf("auto's log line %q does not say %q", lines[0], s)
		}
	}
}

// TestCUDAWithoutDevice checks the error of the cuda backend on a machine
// without the driver or without a GPU.
func TestCUDAWithoutDevice(t *testing.T) {
	be, err := New("cuda", Options{})
	if err == nil {
		be.Close()
		t.Skip("a CUDA GPU answers here")
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "gpu: cuda backend: ") {
		t.Errorf("error %q does not name the cuda backend", msg)
	}
	if !strings.Contains(msg, "libcuda.so.1 not found: ") && !strings.Contains(msg, "no CUDA device") &&
		!strings.Contains(msg, "cuInit") && !strings.Contains(msg, "without cgo") {
		t.Errorf("error %q does not say what is missing", msg)
	}
}

// TestDecodeAllocs checks that Decode allocates nothing per frame once
// warm, on the CPU and on the device backend.
func TestDecodeAllocs(t *testing.T) {
	for _, name := range append([]string{"cpu", "cuda"}, hostBackends...) {
		t.Run(name, func(t *testing.T) {
			skipWithoutDevice(t, name)
			testDecodeAllocs(t, name)
		})
	}
}

func testDecodeAllocs(t *testing.T, name string) {
	g := frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 64, ChipHeight: 64}
	be := newBackend(t, name, Options{Orientation: testOrientations(g)["mixed"], Workers: 2})
	rng := rand.New(rand.NewPCG(60, 61))
	var batch []Job
	for i, f := range testFormats() {
		f.Geometry = g
		j := newJob(f, len(batch), randomBytes(rng, f.PayloadSize()))
		if i%2 == 1 {
			j.ShuffleBlock = bitshuffle.DefaultBlockSize(f.PixelSize())
		}
		batch = append(batch, j)
	}
	for range 8 { // warm every lane of a device backend
		if err := be.Decode(batch); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(20, func() {
		if err := be.Decode(batch); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Decode of a batch of %d frames: %v allocations, want 0", len(batch), allocs)
	}
}

// TestCPUDecodePathsNameEveryEncoding checks that the decode paths the
// cpu backend names, for bench and its log, cover every encoding.
func TestCPUDecodePathsNameEveryEncoding(t *testing.T) {
	paths := CPUDecodePaths()
	for _, e := range frame.Encodings {
		named := false
		for _, d := range paths {
			named = named || strings.Contains(d.Encodings, e.String())
		}
		if !named {
			t.Errorf("encoding %v is in none of the named decode paths %v", e, paths)
		}
	}
	for _, d := range paths {
		if d.Instructions == "" {
			t.Errorf("%q: no instructions named", d.Encodings)
		}
	}
}

// TestCPUBandShuffle checks the cpu backend's two ways to the bit
// transpose: in each decode task, as soon as its band's CRC is taken, where
// every band holds whole blocks (a Pi-mega frame at the default block
// size), and once the batch is decoded where bands cut blocks; both must
// give the reference image transposed, with DataCRC the plain image's.
func TestCPUBandShuffle(t *testing.T) {
	rng := rand.New(rand.NewPCG(70, 71))
	for _, c := range []struct {
		f       frame.Format
		block   int
		workers int
		inBands bool
	}{
		{frame.Format{Geometry: frame.PiMega, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}, 2048, 2, true},
		{frame.Format{Geometry: frame.PiMega, Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR}, 4096, 2, true},
		{frame.Format{Geometry: frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 24, ChipHeight: 5}, Encoding: frame.Bitplane, BitDepth: 24}, 40, 3, false},
	} {
		j := newJob(c.f, 0, randomBytes(rng, c.f.PayloadSize()))
		j.ShuffleBlock = c.block
		p, err := makePlan(&j, nil, c.workers)
		if err != nil {
			t.Fatal(err)
		}
		if p.bandShuffle != c.inBands {
			t.Fatalf("%v, block %d: transposed in the decode tasks %v, want %v", c.f, c.block, p.bandShuffle, c.inBands)
		}
		be := newBackend(t, "cpu", Options{Workers: c.workers})
		batch := []Job{j}
		if err := be.Decode(batch); err != nil {
			t.Fatal(err)
		}
		plain := refDecode(c.f, j.Payload, nil)
		want, err := bitshuffle.AppendShuffle(nil, plain, c.f.PixelSize(), c.block)
		if err != nil {
			t.Fatal(err)
		}
		if got := batch[0].Image[:c.f.ImageSize()]; !bytes.Equal(got, want) {
			t.Errorf("%v, block %d: transposed image differs from the reference's", c.f, c.block)
		}
		if batch[0].DataCRC != frame.Checksum(plain) {
			t.Errorf("%v, block %d: DataCRC %08x, want the plain image's %08x", c.f, c.block, batch[0].DataCRC, frame.Checksum(plain))
		}
	}
}
