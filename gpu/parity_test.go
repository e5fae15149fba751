package gpu

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"h5ingest/compress/bitshuffle"
	"h5ingest/frame"
)

// This file holds the cross-checks of a backend against the CPU backend,
// bit for bit, images and CRCs: the test of the CUDA kernels, on the host
// (hostCUDA) here and on a GPU (cuda) where one is lent.

// compareBatch decodes batch with be and a copy of it with the CPU
// backend, and reports every difference.
func compareBatch(t *testing.T, be, cpu Backend, batch []Job, what string) {
	t.Helper()
	ref := make([]Job, len(batch))
	for i, j := range batch {
		ref[i] = j
		ref[i].Image = bytes.Clone(j.Image)
	}
	if err := be.Decode(batch); err != nil {
		t.Fatalf("%s: Decode: %v", what, err)
	}
	if err := cpu.Decode(ref); err != nil {
		t.Fatalf("%s: cpu Decode: %v", what, err)
	}
	for i := range batch {
		g, w := &batch[i], &ref[i]
		name := fmt.Sprintf("%s, frame %d (%v)", what, i, g.Header.Format)
		if (g.Err == nil) != (w.Err == nil) {
			t.Errorf("%s: error %v, cpu backend %v", name, g.Err, w.Err)
			continue
		}
		if w.Err != nil {
			continue
		}
		if g.RawCRC != w.RawCRC || g.DataCRC != w.DataCRC {
			t.Errorf("%s: CRCs %08x %08x, cpu backend %08x %08x", name, g.RawCRC, g.DataCRC, w.RawCRC, w.DataCRC)
		}
		if !bytes.Equal(g.Image, w.Image) {
			k := 0
			for g.Image[k] == w.Image[k] {
				k++
			}
			t.Errorf("%s: image differs from the cpu backend's from byte %d of %d", name, k, g.Header.Format.ImageSize())
		}
	}
}

// parityGeometries adds, to the small test geometries, ones whose payload
// and image cross the CRC sub-piece and piece sizes of the kernels, with
// and without a short last piece.
var parityGeometries = append(testGeometries[:len(testGeometries):len(testGeometries)],
	frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 64, ChipHeight: 64},   // 1, 2, 4 pieces exactly
	frame.Geometry{ChipsX: 3, ChipsY: 1, ChipWidth: 136, ChipHeight: 170}, // short last sub-piece and piece
	frame.Geometry{ChipsX: 1, ChipsY: 1, ChipWidth: 8, ChipHeight: 128},   // exactly one sub-piece for 1-bit
)

// testParity holds backend name to the CPU backend on random payloads of
// every format, geometry and orientation, all formats of a geometry in one
// batch.
func testParity(t *testing.T, name string) {
	rng := rand.New(rand.NewPCG(70, 71))
	for gi, g := range parityGeometries {
		for oname, o := range testOrientations(g) {
			be := newBackend(t, name, Options{Orientation: o, Streams: 2})
			cpu := newBackend(t, "cpu", Options{Orientation: o, Workers: 2})
			var batch []Job
			for _, f := range testFormats() {
				f.Geometry = g
				if f.Validate() != nil {
					continue
				}
				batch = append(batch, newJob(f, len(batch), randomBytes(rng, f.PayloadSize())))
			}
			compareBatch(t, be, cpu, batch, fmt.Sprintf("geometry %d, orientation %s", gi, oname))
		}
	}
}

// testRounds decodes a batch larger than one round of the device backend
// (roundFrames), valid and invalid frames mixed, so it runs as several
// rounds on two lanes.
func testRounds(t *testing.T, name string) {
	g := frame.Geometry{ChipsX: 2, ChipsY: 1, ChipWidth: 8, ChipHeight: 2}
	o := frame.Orientation{180, 0}
	be := newBackend(t, name, Options{Orientation: o, Streams: 3})
	cpu := newBackend(t, "cpu", Options{Orientation: o, Workers: 2})
	rng := rand.New(rand.NewPCG(80, 81))
	fs := testFormats()
	var batch []Job
	for i := range 2*roundFrames + 37 {
		f := fs[i%len(fs)]
		f.Geometry = g
		j := newJob(f, i, randomBytes(rng, f.PayloadSize()))
		if i%97 == 5 {
			j.Payload = j.Payload[1:]
		}
		batch = append(batch, j)
	}
	compareBatch(t, be, cpu, batch, "rounds")
}

// testPiMegaParity holds be to the CPU backend on one Pi-mega frame of
// every format, with mixed chip orientations, and on the same frame asked
// for bit-transposed in the bitshuffle codecs' default blocks.
func testPiMegaParity(t *testing.T, be Backend) {
	cpu := newBackend(t, "cpu", Options{Orientation: piMegaOrientation})
	rng := rand.New(rand.NewPCG(90, 91))
	for _, f := range piMegaFormats() {
		payload := randomBytes(rng, f.PayloadSize())
		shuffled := newJob(f, 1, payload)
		shuffled.ShuffleBlock = bitshuffle.DefaultBlockSize(f.PixelSize())
		batch := []Job{newJob(f, 0, payload), shuffled}
		compareBatch(t, be, cpu, batch, "Pi-mega")
	}
}
