package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"h5ingest/compress"
	"h5ingest/frame"
)

// bitshuffleCodec returns the named bitshuffle codec (bslz4, bszstd) for
// pixels of pix bytes in blocks of block pixels (0: the default).
func bitshuffleCodec(t testing.TB, name string, pix, block int) compress.BlockEncoder {
	t.Helper()
	c, err := compress.New(name, pix, 0)
	if err != nil {
		t.Fatal(err)
	}
	if block != 0 {
		fs := c.Filters()
		fs[0].Values[3] = uint32(block)
		if c, err = compress.FromFilters(fs, pix); err != nil {
			t.Fatal(err)
		}
	}
	be, ok := c.(compress.BlockEncoder)
	if !ok {
		t.Fatalf("%s compresses no blocks apart", name)
	}
	return be
}

// compression returns a Compression whose encoders are codecs like c.
func compression(t testing.TB, name string, pix, block int) *Compression {
	be := bitshuffleCodec(t, name, pix, block)
	return &Compression{BlockElems: be.BlockElems(), NewEncoder: func() (ChunkEncoder, error) {
		return bitshuffleCodec(t, name, pix, block), nil
	}}
}

// withChunk gives j a chunk buffer of the codec's bound, filled with
// garbage, compressed for by c.
func withChunk(j *Job, c *Compression, be compress.Codec) {
	j.Compress = c
	j.Chunk = bytes.Repeat([]byte{0x5A}, be.Bound(j.Header.Format.ImageSize()))[:0]
}

// TestCPUCompress checks the chunks the cpu backend compresses band by
// band on its decode tasks against the codec's Encode of the reference
// image, byte for byte, for every encoding, depth and coding, chip
// orientations, block sizes and worker counts; where the bands cut blocks
// it must leave the chunk to the caller, with the image decoded all the
// same.
func TestCPUCompress(t *testing.T) {
	rng := rand.New(rand.NewPCG(80, 81))
	geometries := append([]frame.Geometry{
		{ChipsX: 2, ChipsY: 2, ChipWidth: 256, ChipHeight: 24}, // the AVX-512 gathers' widths
		{ChipsX: 1, ChipsY: 3, ChipWidth: 512, ChipHeight: 8},
	}, testGeometries...)
	fused := 0
	for _, f := range testFormats() {
		for _, g := range geometries {
			f.Geometry = g
			if f.Validate() != nil {
				continue
			}
			payload := randomBytes(rng, f.PayloadSize())
			for oname, o := range testOrientations(g) {
				want := refDecode(f, payload, o)
				for _, block := range []int{8, 16, 64, 0} {
					for _, workers := range []int{1, 3} {
						name := fmt.Sprintf("%v/%s/block %d/%d workers", f, oname, block, workers)
						fused += checkCompress(t, name, f, o, payload, want, "bslz4", block, workers)
					}
				}
			}
		}
	}
	if fused == 0 {
		t.Fatal("no case compressed on the decode tasks")
	}
}

// TestCPUCompressPiMega checks a Pi-mega frame of each bitplane depth at
// the default block size, both codecs: every band holds whole blocks, so
// the decode tasks compress it.
func TestCPUCompressPiMega(t *testing.T) {
	rng := rand.New(rand.NewPCG(82, 83))
	for _, f := range []frame.Format{
		{Geometry: frame.PiMega, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR},
		{Geometry: frame.PiMega, Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR},
	} {
		payload := randomBytes(rng, f.PayloadSize())
		want := refDecode(f, payload, nil)
		for _, codec := range []string{"bslz4", "bszstd"} {
			if checkCompress(t, fmt.Sprintf("%v/%s", f, codec), f, nil, payload, want, codec, 0, 2) != 1 {
				t.Errorf("%v, %s: not compressed on the decode tasks", f, codec)
			}
		}
	}
}

// TestCPUCompressBatch checks a batch of frames of different payloads,
// each compressed by the worker that owns it and, as the batch runs out,
// partly by the others from its back: every chunk must be Encode's of its
// own image, byte for byte.
func TestCPUCompressBatch(t *testing.T) {
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 256, ChipHeight: 64}, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	rng := rand.New(rand.NewPCG(88, 89))
	ref := bitshuffleCodec(t, "bslz4", 4, 0)
	c := compression(t, "bslz4", 4, 0)
	for _, workers := range []int{1, 2, 3, 4} {
		be := newBackend(t, "cpu", Options{Workers: workers})
		for round := range 3 {
			batch := make([]Job, 2*workers+1)
			want := make([][]byte, len(batch))
			for i := range batch {
				batch[i] = newJob(f, i, randomBytes(rng, f.PayloadSize()))
				batch[i].DiscardImage = i%2 == 1
				withChunk(&batch[i], c, ref)
				want[i] = refDecode(f, batch[i].Payload, nil)
			}
			if err := be.Decode(batch); err != nil {
				t.Fatal(err)
			}
			for i := range batch {
				j := &batch[i]
				name := fmt.Sprintf("%d workers, round %d, frame %d", workers, round, i)
				wantChunk, err := ref.Encode(nil, want[i])
				if err != nil {
					t.Fatal(err)
				}
				if !j.Compressed || !bytes.Equal(j.Chunk, wantChunk) {
					t.Errorf("%s: compressed %v (%v), chunk equal to Encode's %v", name, j.Compressed, j.CompressErr, bytes.Equal(j.Chunk, wantChunk))
				}
				if j.RawCRC != frame.Checksum(j.Payload) || j.DataCRC != frame.Checksum(want[i]) {
					t.Errorf("%s: CRCs %08x %08x, want %08x %08x", name, j.RawCRC, j.DataCRC, frame.Checksum(j.Payload), frame.Checksum(want[i]))
				}
			}
		}
	}
}

// checkCompress decodes payload of format f with chip orientation o on a
// cpu backend of workers workers, asking for the chunk of codec at block
// pixels a block, and checks the image (want), the CRCs and the chunk. It
// returns 1 where the decode tasks compressed, else 0.
func checkCompress(t *testing.T, name string, f frame.Format, o frame.Orientation, payload, want []byte, codec string, block, workers int) int {
	t.Helper()
	be := newBackend(t, "cpu", Options{Orientation: o, Workers: workers})
	ref := bitshuffleCodec(t, codec, f.PixelSize(), block)
	c := compression(t, codec, f.PixelSize(), block)
	j := newJob(f, 3, payload)
	withChunk(&j, c, ref)
	p, err := makePlan(&j, o, workers)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	batch := []Job{j}
	if err := be.Decode(batch); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	got := &batch[0]
	checkJob(t, name, got, want)
	if got.CompressErr != nil {
		t.Errorf("%s: %v", name, got.CompressErr)
	}
	if got.Compressed != p.compress {
		t.Errorf("%s: compressed %v, want %v (bands of %d rows, whole blocks %v)", name, got.Compressed, p.compress, p.bandRows, p.compress)
	}
	if !got.Compressed {
		// Bands that cut blocks: the image is decoded, discarded or not.
		j.DiscardImage = true
		j.Image = bytes.Repeat([]byte{0xA5}, len(j.Image))
		batch := []Job{j}
		if err := be.Decode(batch); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		checkJob(t, name+", image discarded", &batch[0], want)
		return 0
	}
	wantChunk, err := ref.Encode(nil, want)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if !bytes.Equal(got.Chunk, wantChunk) {
		t.Errorf("%s: chunk of %d bytes differs from Encode's %d bytes", name, len(got.Chunk), len(wantChunk))
	}
	if &got.Chunk[0] != &j.Chunk[:1][0] {
		t.Errorf("%s: chunk not in the job's buffer", name)
	}
	checkDiscardImage(t, name, be, j, wantChunk, frame.Checksum(want))
	return 1
}

// checkDiscardImage decodes job j, whose bands the backend compresses,
// again with DiscardImage: the chunk and the CRCs (the image's, wantCRC)
// must be the same, and the image buffer left as it was.
func checkDiscardImage(t *testing.T, name string, be Backend, j Job, wantChunk []byte, wantCRC uint32) {
	t.Helper()
	j.Image = bytes.Repeat([]byte{0xA5}, len(j.Image))
	j.DiscardImage = true
	batch := []Job{j}
	if err := be.Decode(batch); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	got := &batch[0]
	if !got.Compressed || !bytes.Equal(got.Chunk, wantChunk) {
		t.Errorf("%s, image discarded: compressed %v (%v), chunk equal to Encode's %v", name, got.Compressed, got.CompressErr, bytes.Equal(got.Chunk, wantChunk))
	}
	if want := frame.Checksum(j.Payload); got.RawCRC != want {
		t.Errorf("%s, image discarded: RawCRC %08x, want %08x", name, got.RawCRC, want)
	}
	if got.DataCRC != wantCRC {
		t.Errorf("%s, image discarded: DataCRC %08x, want %08x", name, got.DataCRC, wantCRC)
	}
	if !bytes.Equal(got.Image, bytes.Repeat([]byte{0xA5}, len(got.Image))) {
		t.Errorf("%s, image discarded: the image buffer was written", name)
	}
}

// failingEncoder fails as it appends blocks.
type failingEncoder struct{ ChunkEncoder }

var errEncoder = errors.New("encoder broke")

// shrinkingBound bounds a chunk of size bytes as the codec does, and any
// shorter run of its bytes by less the longer it is.
type shrinkingBound struct {
	ChunkEncoder
	size int
}

func (e shrinkingBound) Bound(n int) int {
	b := e.ChunkEncoder.Bound(e.size)
	if n == e.size {
		return b
	}
	return b - n/2
}

func (failingEncoder) AppendBlocks(dst, src []byte) ([]byte, error) { return dst, errEncoder }

// TestCPUCompressErrors checks that a chunk the backend cannot make (an
// encoder that fails or cannot be made, a chunk buffer below the bound, a
// bound that shrinks as the bytes grow)
// leaves Compressed unset and says why in CompressErr, with the frame
// decoded all the same.
func TestCPUCompressErrors(t *testing.T) {
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 256, ChipHeight: 16}, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	payload := randomBytes(rand.New(rand.NewPCG(84, 85)), f.PayloadSize())
	want := refDecode(f, payload, nil)
	ref := bitshuffleCodec(t, "bslz4", 4, 0)
	for _, c := range []struct {
		name    string
		comp    *Compression
		short   bool
		want    string
		workers int
	}{
		{"encoder fails", &Compression{BlockElems: ref.BlockElems(), NewEncoder: func() (ChunkEncoder, error) {
			return failingEncoder{bitshuffleCodec(t, "bslz4", 4, 0)}, nil
		}}, false, "encoder broke", 2},
		{"no encoder", &Compression{BlockElems: ref.BlockElems(), NewEncoder: func() (ChunkEncoder, error) {
			return nil, errEncoder
		}}, false, "make chunk encoder: encoder broke", 2},
		{"short buffer", compression(t, "bslz4", 4, 0), true, "chunk buffer of", 2},
		{"bound shrinking", &Compression{BlockElems: ref.BlockElems(), NewEncoder: func() (ChunkEncoder, error) {
			return shrinkingBound{bitshuffleCodec(t, "bslz4", 4, 0), f.ImageSize()}, nil
		}}, false, "outside the chunk buffer", 4}, // bands between the first and the last
	} {
		be := newBackend(t, "cpu", Options{Workers: c.workers})
		j := newJob(f, 5, payload)
		withChunk(&j, c.comp, ref)
		if c.short {
			j.Chunk = j.Chunk[: 0 : ref.Bound(f.ImageSize())-1]
		}
		batch := []Job{j}
		if err := be.Decode(batch); err != nil {
			t.Fatal(err)
		}
		got := &batch[0]
		checkJob(t, c.name, got, want)
		if got.Compressed || got.CompressErr == nil || !bytes.Contains([]byte(got.CompressErr.Error()), []byte(c.want)) {
			t.Errorf("%s: compressed %v, error %v; want none and an error saying %q", c.name, got.Compressed, got.CompressErr, c.want)
		}
	}
}

// TestCPUCompressAllocs checks that decoding and compressing allocates
// nothing per frame once each worker has its encoder.
func TestCPUCompressAllocs(t *testing.T) {
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 256, ChipHeight: 64}, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	rng := rand.New(rand.NewPCG(86, 87))
	be := newBackend(t, "cpu", Options{Workers: 2})
	ref := bitshuffleCodec(t, "bslz4", 4, 0)
	c := compression(t, "bslz4", 4, 0)
	batch := make([]Job, 3)
	for i := range batch {
		batch[i] = newJob(f, i, randomBytes(rng, f.PayloadSize()))
		withChunk(&batch[i], c, ref)
	}
	chunks := make([][]byte, len(batch))
	for i := range batch {
		chunks[i] = batch[i].Chunk
	}
	decode := func() {
		for i := range batch {
			batch[i].Chunk = chunks[i]
		}
		if err := be.Decode(batch); err != nil {
			t.Fatal(err)
		}
		for i := range batch {
			if !batch[i].Compressed {
				t.Fatalf("frame %d not compressed: %v", i, batch[i].CompressErr)
			}
		}
	}
	for range 4 { // every worker makes its encoder
		decode()
	}
	if allocs := testing.AllocsPerRun(20, decode); allocs != 0 {
		t.Errorf("Decode and compress of %d frames: %v allocations, want 0", len(batch), allocs)
	}
}

// FuzzCompress decodes and compresses arbitrary payloads in arbitrary
// formats, chip orientations and block sizes: where the decode tasks make
// the chunk, it must be Encode's of the image decoded, byte for byte.
func FuzzCompress(f *testing.F) {
	f.Add([]byte("\x9e\x37\x79\xb9\x7f\x4a\x7c\x15"), uint8(frame.Bitplane), uint8(24), uint8(frame.LFSR), uint8(2), uint8(2), uint16(256), uint16(8), uint8(0), uint16(0), uint8(2))
	f.Add([]byte("\x01\x00\x00\x80\xff"), uint8(frame.Bitplane), uint8(12), uint8(frame.LFSR), uint8(1), uint8(3), uint16(256), uint16(4), uint8(5), uint16(64), uint8(3))
	f.Add([]byte("\x00"), uint8(frame.Bitplane), uint8(24), uint8(0), uint8(3), uint8(2), uint16(16), uint16(8), uint8(2), uint16(8), uint8(4))
	f.Add([]byte("\x12\x34\x56\x78"), uint8(frame.Packed12), uint8(12), uint8(0), uint8(2), uint8(2), uint16(4), uint16(4), uint8(1), uint16(16), uint8(2))
	f.Add([]byte("\xff\x00\x7f"), uint8(frame.U32LE), uint8(32), uint8(0), uint8(2), uint8(3), uint16(8), uint16(5), uint8(3), uint16(24), uint8(1))
	f.Add([]byte("\xa5\x5a"), uint8(frame.Bitplane), uint8(6), uint8(frame.LFSR), uint8(1), uint8(2), uint16(64), uint16(16), uint8(0), uint16(128), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, enc, depth, coding, chipsX, chipsY uint8, w, h uint16, rot uint8, block uint16, workers uint8) {
		fm := frame.Format{
			Geometry: frame.Geometry{ChipsX: int(chipsX), ChipsY: int(chipsY), ChipWidth: int(w), ChipHeight: int(h)},
			Encoding: frame.Encoding(enc), BitDepth: int(depth), Coding: frame.Coding(coding),
		}
		if fm.Validate() != nil || fm.Pixels() > 1<<15 || block%8 != 0 || len(data) == 0 {
			return
		}
		var o frame.Orientation
		if rot != 0 {
			o = make(frame.Orientation, fm.Chips())
			for k := range o {
				if (rot>>(k%8))&1 != 0 {
					o[k] = 180
				}
			}
		}
		payload := make([]byte, fm.PayloadSize())
		for i := range payload {
			payload[i] = data[i%len(data)] ^ byte(i/len(data))
		}
		want := refDecode(fm, payload, o)
		checkCompress(t, fmt.Sprintf("%v block %d", fm, block), fm, o, payload, want, "bslz4", int(block), 1+int(workers%4))
	})
}

// heldEncoder compresses as its ChunkEncoder does, but holds the band
// whose bytes are h.band until every other band of the chunk is
// compressed, and fails it where h.fail is set: while its worker waits,
// the others must take every other band of the frame, those behind it
// from the back of the run.
type heldEncoder struct {
	ChunkEncoder
	h *heldBand
}

type heldBand struct {
	band   []byte        // the image bytes of the band held
	fail   bool          // the held band's blocks fail to compress
	mu     sync.Mutex    // guards others
	others int           // the other bands not compressed yet
	done   chan struct{} // closed once others is 0
}

func (e heldEncoder) AppendBlocks(dst, src []byte) ([]byte, error) {
	h := e.h
	if bytes.Equal(src, h.band) {
		<-h.done
		if h.fail {
			return dst, errEncoder
		}
		return e.ChunkEncoder.AppendBlocks(dst, src)
	}
	out, err := e.ChunkEncoder.AppendBlocks(dst, src)
	h.mu.Lock()
	if h.others--; h.others == 0 {
		close(h.done)
	}
	h.mu.Unlock()
	return out, err
}

// TestCPUCompressStolenBands holds one band of a frame's chunk on its
// worker until the other workers have compressed every other band, those
// behind it taken from the back of the frame's run and compressed apart:
// the chunk must still be Encode's of the image, byte for byte, or, where
// the held band fails, no chunk with the encoder's error; and the next
// frame on the same backend must be whole.
func TestCPUCompressStolenBands(t *testing.T) {
	f := frame.Format{Geometry: frame.Geometry{ChipsX: 2, ChipsY: 2, ChipWidth: 256, ChipHeight: 384}, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	rng := rand.New(rand.NewPCG(90, 91))
	ref := bitshuffleCodec(t, "bslz4", 4, 0)
	plain := compression(t, "bslz4", 4, 0)
	payload, nextPayload := randomBytes(rng, f.PayloadSize()), randomBytes(rng, f.PayloadSize())
	want, wantNext := refDecode(f, payload, nil), refDecode(f, nextPayload, nil)
	wantChunk, err := ref.Encode(nil, want)
	if err != nil {
		t.Fatal(err)
	}
	wantNextChunk, err := ref.Encode(nil, wantNext)
	if err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{2, 3, 7} {
		for _, held := range []int{0, 1, -2, -1} { // a band from the front, or from the back where negative
			for _, c := range []struct {
				fail, discard bool
			}{{false, false}, {false, true}, {true, false}, {true, true}} {
				h := &heldBand{fail: c.fail, done: make(chan struct{})}
				comp := &Compression{BlockElems: ref.BlockElems(), NewEncoder: func() (ChunkEncoder, error) {
					return heldEncoder{bitshuffleCodec(t, "bslz4", 4, 0), h}, nil
				}}
				be := newBackend(t, "cpu", Options{Workers: workers})
				j := newJob(f, 1, payload)
				withChunk(&j, comp, ref)
				j.DiscardImage = c.discard
				p, err := makePlan(&j, nil, workers)
				if err != nil || !p.compress {
					t.Fatalf("%d workers: plan %v, compressed on the decode tasks %v", workers, err, p.compress)
				}
				band := (held + p.tasks()) % p.tasks()
				name := fmt.Sprintf("%d workers, band %d of %d held, fails %v, image discarded %v", workers, band, p.tasks(), c.fail, c.discard)
				rowBytes := f.Width() * f.PixelSize()
				y0, y1 := p.bandRange(band % p.bands)
				start := (band/p.bands*f.ChipHeight + y0) * rowBytes
				h.band, h.others = want[start:start+(y1-y0)*rowBytes], p.tasks()-1
				batch := []Job{j}
				if err := be.Decode(batch); err != nil {
					t.Fatal(err)
				}
				got := &batch[0]
				if !c.discard {
					checkJob(t, name, got, want)
				} else if got.RawCRC != frame.Checksum(j.Payload) || got.DataCRC != frame.Checksum(want) {
					t.Errorf("%s: CRCs %08x %08x, want %08x %08x", name, got.RawCRC, got.DataCRC, frame.Checksum(j.Payload), frame.Checksum(want))
				}
				if c.fail {
					if got.Compressed || len(got.Chunk) != 0 || !errors.Is(got.CompressErr, errEncoder) {
						t.Errorf("%s: compressed %v, %d chunk bytes, error %v; want none and the encoder's error", name, got.Compressed, len(got.Chunk), got.CompressErr)
					}
				} else if !got.Compressed || !bytes.Equal(got.Chunk, wantChunk) {
					t.Errorf("%s: compressed %v (%v), chunk equal to Encode's %v", name, got.Compressed, got.CompressErr, bytes.Equal(got.Chunk, wantChunk))
				}
				// The next frame, compressed as usual.
				next := newJob(f, 2, nextPayload)
				withChunk(&next, plain, ref)
				next.DiscardImage = c.discard
				batch = []Job{next}
				if err := be.Decode(batch); err != nil {
					t.Fatal(err)
				}
				if !batch[0].Compressed || !bytes.Equal(batch[0].Chunk, wantNextChunk) {
					t.Errorf("%s, the next frame: compressed %v (%v), chunk equal to Encode's %v", name, batch[0].Compressed, batch[0].CompressErr, bytes.Equal(batch[0].Chunk, wantNextChunk))
				}
			}
		}
	}
}
