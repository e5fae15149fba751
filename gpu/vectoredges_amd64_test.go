package gpu

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"h5ingest/frame"
)

// vectorEdgeWidths are chip widths at and beside every vector step of the
// decodes: 8-pixel bitplane bytes, the AVX2 groups of 8, 16 and 32 pixels,
// the AVX-512 ones of 16, 32, 64, 128 and 256, rows of a few pixels.
var vectorEdgeWidths = []int{1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40, 47, 48, 49,
	63, 64, 65, 72, 96, 127, 128, 129, 136, 192, 200, 255, 256, 257, 264, 384, 511, 512, 513, 520, 600}

// allDecodePaths returns the decode paths this CPU has, and where it has
// AVX-512 the AVX-512 one without AVX2: what GODEBUG=cpu.avx2=off gives.
func allDecodePaths() []decodePath {
	paths := decodePaths()
	if cpuHasGFNI {
		paths = append(paths, decodePath{"avx512-without-avx2", false, true})
	}
	return paths
}

// TestCPUDecodeAtVectorEdges decodes frames of every encoding, depth and
// coding through the cpu backend on every path of allDecodePaths, and
// holds each to the reference decoder: chip widths at every vector edge,
// chips 1 to 11 rows tall (bands of a few rows), one chip or 3 x 2 at
// random orientations, 1 to 4 workers. The payload ends where a page no
// one may read begins, and the image sits at an odd address between bytes
// that must stay as they were; or, every other frame, both start where a
// page no one may touch ends.
func TestCPUDecodeAtVectorEdges(t *testing.T) {
	const gap = 67
	for _, p := range allDecodePaths() {
		t.Run(p.name, func(t *testing.T) {
			p.use(t)
			rng := rand.New(rand.NewPCG(41, 42))
			frames := 0
			for _, f := range testFormats() {
				for _, w := range vectorEdgeWidths {
					for _, g := range []frame.Geometry{{ChipsX: 1, ChipsY: 1, ChipHeight: 1}, {ChipsX: 3, ChipsY: 2, ChipHeight: 2}, {ChipsX: 1, ChipsY: 1, ChipHeight: 3}, {ChipsX: 3, ChipsY: 2, ChipHeight: 11}} {
						g.ChipWidth = w
						f.Geometry = g
						if f.Validate() != nil {
							continue // bitplane chips of a width not a multiple of 8, odd packed12 chips
						}
						o := make(frame.Orientation, g.Chips())
						for k := range o {
							o[k] = 180 * rng.IntN(2)
						}
						frames++
						// Every other frame, the payload and the image start
						// right after a page no one may touch instead.
						payload, buf, at := guardedBytes(t, f.PayloadSize()), bytes.Repeat([]byte{0xA5}, f.ImageSize()+2*gap), gap
						if frames%2 == 1 {
							payload, buf, at = guardedAfter(t, f.PayloadSize()), guardedAfter(t, f.ImageSize()+2*gap), 0
							copy(buf, bytes.Repeat([]byte{0xA5}, len(buf)))
						}
						for i := range payload {
							payload[i] = byte(rng.Uint32())
						}
						be := newBackend(t, "cpu", Options{Orientation: o, Workers: 1 + frames%4})
						job := newJob(f, frames, payload)
						job.Image = buf[at : at+f.ImageSize()]
						jobs := []Job{job}
						if err := be.Decode(jobs); err != nil {
							t.Fatal(err)
						}
						name := fmt.Sprintf("%v, chips at %v, %d workers", f, o, 1+frames%4)
						want := refDecode(f, payload, o)
						checkJob(t, name, &jobs[0], want)
						if bytes.Count(buf[:at], []byte{0xA5}) != at || bytes.Count(buf[at+len(want):], []byte{0xA5}) != len(buf)-at-len(want) {
							t.Fatalf("%s: bytes beside the image written", name)
						}
					}
				}
			}
			if frames < 1000 {
				t.Fatalf("%d frames decoded: the geometries were not made", frames)
			}
		})
	}
}

// FuzzDecodePaths decodes arbitrary payloads of valid formats through the
// cpu backend on every path of allDecodePaths, with 1 to 4 workers and
// the chips at the orientations rot's bits give, and holds each image and
// its CRCs to the reference decoder; the payload ends at a page no one may
// read. FuzzDecode takes invalid formats too, on the path the CPU chose.
func FuzzDecodePaths(f *testing.F) {
	f.Add([]byte("\x9e\x37\x79\xb9\x7f\x4a\x7c"), uint8(frame.Packed12), uint8(12), uint8(0), uint8(2), uint8(1), uint16(259), uint16(2), uint8(1), uint8(3))
	f.Add([]byte("\x9e\x37\x79\xb9\x7f"), uint8(frame.Bitplane), uint8(6), uint8(frame.LFSR), uint8(2), uint8(1), uint16(264), uint16(3), uint8(2), uint8(1))
	f.Add([]byte("\x00\x00\x00\x00\x01"), uint8(frame.Bitplane), uint8(24), uint8(frame.LFSR), uint8(2), uint8(1), uint16(256), uint16(3), uint8(2), uint8(0))
	f.Add([]byte("\xc3\x5a\x01"), uint8(frame.Bitplane), uint8(12), uint8(frame.LFSR), uint8(1), uint8(2), uint16(512), uint16(3), uint8(1), uint8(2))
	f.Add([]byte("\x01\x00\x80\xff\x5a"), uint8(frame.U32LE), uint8(32), uint8(0), uint8(3), uint8(1), uint16(33), uint16(3), uint8(5), uint8(2))
	f.Add([]byte("\x12\x34\x56"), uint8(frame.U16LE), uint8(16), uint8(0), uint8(1), uint8(1), uint16(65), uint16(1), uint8(1), uint8(0))
	f.Add([]byte("\x80\x01\x7e\xd4"), uint8(frame.Bitplane), uint8(1), uint8(0), uint8(3), uint8(1), uint16(72), uint16(5), uint8(6), uint8(3))
	f.Add([]byte("\x01\x00\x80\xff\x5a\x77"), uint8(frame.Packed24), uint8(24), uint8(0), uint8(1), uint8(2), uint16(17), uint16(2), uint8(2), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, enc, depth, coding, chipsX, chipsY uint8, w, h uint16, rot, workers uint8) {
		fm := frame.Format{
			Geometry: frame.Geometry{ChipsX: int(chipsX), ChipsY: int(chipsY), ChipWidth: int(w), ChipHeight: int(h)},
			Encoding: frame.Encoding(enc), BitDepth: int(depth), Coding: frame.Coding(coding),
		}
		if fm.Validate() != nil || fm.Pixels() > 1<<15 {
			return // FuzzDecode tries invalid formats; keep each run short
		}
		var o frame.Orientation
		if rot != 0 {
			o = make(frame.Orientation, fm.Chips())
			for k := range o {
				o[k] = 180 * int(rot>>(k%8)&1)
			}
		}
		payload := guardedBytes(t, fm.PayloadSize())
		for i := range payload {
			if len(data) > 0 {
				payload[i] = data[i%len(data)] ^ byte(i/len(data)) // rows differ
			}
		}
		want := refDecode(fm, payload, o)
		for _, p := range allDecodePaths() {
			savedAVX2, savedGFNI := useAVX2, useGFNI
			useAVX2, useGFNI = p.avx2, p.gfni
			be, err := New("cpu", Options{Orientation: o, Workers: 1 + int(workers%4)})
			if err != nil {
				t.Fatal(err)
			}
			jobs := []Job{newJob(fm, 9, payload)}
			err = be.Decode(jobs)
			be.Close()
			useAVX2, useGFNI = savedAVX2, savedGFNI
			if err != nil {
				t.Fatal(err)
			}
			checkJob(t, fmt.Sprintf("%s: %v, chips at %v", p.name, fm, o), &jobs[0], want)
		}
	})
}
