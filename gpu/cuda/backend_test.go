//go:build cgo

package cuda_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"

	"h5ingest/compress/bitshuffle"
	"h5ingest/frame"
	"h5ingest/gpu"
)

// These tests hold the gpu package's cuda backend to its cpu backend, bit
// for bit, on a GPU. They live here so that one test binary, built with
// go test -c ./gpu/cuda on a machine without CUDA, carries all the GPU
// checks to a machine with one.

// formats lists every encoding, depth and coding of format version 1.
func formats(g frame.Geometry) []frame.Format {
	var fs []frame.Format
	for _, d := range []int{1, 6, 12, 24} {
		for _, c := range []frame.Coding{frame.Binary, frame.LFSR} {
			fs = append(fs, frame.Format{Encoding: frame.Bitplane, BitDepth: d, Coding: c})
		}
	}
	fs = append(fs,
		frame.Format{Encoding: frame.Packed12, BitDepth: 12},
		frame.Format{Encoding: frame.Packed24, BitDepth: 24},
		frame.Format{Encoding: frame.U16LE, BitDepth: 16},
		frame.Format{Encoding: frame.U32LE, BitDepth: 32},
	)
	var ok []frame.Format
	for _, f := range fs {
		f.Geometry = g
		if f.Validate() == nil {
			ok = append(ok, f)
		}
	}
	return ok
}

var geometries = []frame.Geometry{
	{ChipsX: 3, ChipsY: 2, ChipWidth: 16, ChipHeight: 8},
	{ChipsX: 1, ChipsY: 1, ChipWidth: 8, ChipHeight: 1},
	{ChipsX: 2, ChipsY: 3, ChipWidth: 24, ChipHeight: 5},
	{ChipsX: 2, ChipsY: 2, ChipWidth: 3, ChipHeight: 2},
	{ChipsX: 2, ChipsY: 2, ChipWidth: 64, ChipHeight: 64},
	{ChipsX: 3, ChipsY: 1, ChipWidth: 136, ChipHeight: 170},
	frame.PiMega,
}

// orientations returns none, all chips at 180 degrees, and a mix.
func orientations(g frame.Geometry) map[string]frame.Orientation {
	all, mixed := make(frame.Orientation, g.Chips()), make(frame.Orientation, g.Chips())
	for k := range all {
		all[k] = 180
		if k%3 != 1 {
			mixed[k] = 180
		}
	}
	return map[string]frame.Orientation{"none": nil, "all180": all, "mixed": mixed}
}

// job returns a job for a random payload of f, with buffers from alloc.
func job(rng *rand.Rand, f frame.Format, n int, alloc func(int) []byte) gpu.Job {
	payload := alloc(f.PayloadSize())
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	image := alloc(f.ImageSize() + 5)
	for i := range image {
		image[i] = 0xA5
	}
	return gpu.Job{
		Header: frame.Header{FrameNumber: uint64(n), PayloadSize: uint32(len(payload)),
			PayloadCRC: frame.Checksum(payload), Format: f},
		Payload: payload,
		Image:   image,
	}
}

// compare decodes batch on be and a copy on cpu and reports differences.
func compare(t *testing.T, be, cpu gpu.Backend, batch []gpu.Job, what string) {
	t.Helper()
	ref := make([]gpu.Job, len(batch))
	for i, j := range batch {
		ref[i] = j
		ref[i].Image = bytes.Clone(j.Image)
	}
	if err := be.Decode(batch); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := cpu.Decode(ref); err != nil {
		t.Fatalf("%s: cpu: %v", what, err)
	}
	for i := range batch {
		g, w := &batch[i], &ref[i]
		name := fmt.Sprintf("%s, %v", what, g.Header.Format)
		switch {
		case (g.Err == nil) != (w.Err == nil):
			t.Errorf("%s: error %v, cpu %v", name, g.Err, w.Err)
		case g.Err != nil:
		case g.RawCRC != w.RawCRC || g.DataCRC != w.DataCRC:
			t.Errorf("%s: CRCs %08x %08x, cpu %08x %08x", name, g.RawCRC, g.DataCRC, w.RawCRC, w.DataCRC)
		case g.RawCRC != frame.Checksum(g.Payload):
			t.Errorf("%s: RawCRC %08x, CRC-32C of the payload %08x", name, g.RawCRC, frame.Checksum(g.Payload))
		case !bytes.Equal(g.Image, w.Image):
			k := 0
			for g.Image[k] == w.Image[k] {
				k++
			}
			t.Errorf("%s: image differs from the cpu backend's at byte %d", name, k)
		}
	}
}

func newBackend(t testing.TB, name string, opts gpu.Options) gpu.Backend {
	t.Helper()
	be, err := gpu.New(name, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := be.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return be
}

// TestParity decodes random payloads of every format, geometry (up to a
// Pi-mega module) and orientation on the GPU and the CPU, in Go memory
// and in page-locked memory from the backend's HostAllocator. With -short
// (as against the fake driver) it leaves out the Pi-mega module.
func TestParity(t *testing.T) {
	needGPU(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, g := range geometries {
		if testing.Short() && g == frame.PiMega {
			continue
		}
		for oname, o := range orientations(g) {
			be := newBackend(t, "cuda", gpu.Options{Orientation: o})
			cpu := newBackend(t, "cpu", gpu.Options{Orientation: o})
			ha := be.(gpu.HostAllocator)
			var pinned, registered [][]byte
			allocs := map[string]func(int) []byte{
				"go": func(n int) []byte { return make([]byte, n) },
				"pinned": func(n int) []byte {
					b, err := ha.AllocHost(n)
					if err != nil {
						t.Fatal(err)
					}
					pinned = append(pinned, b)
					return b
				},
				// Mapped memory page-locked in place, as a receiver's ring is.
				"registered": func(n int) []byte {
					b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
					if err != nil {
						t.Fatal(err)
					}
					if err := ha.RegisterHost(b); err != nil {
						t.Fatal(err)
					}
					registered = append(registered, b)
					return b
				},
			}
			for aname, alloc := range allocs {
				var batch []gpu.Job
				for _, f := range formats(g) {
					batch = append(batch, job(rng, f, len(batch), alloc))
					// And one asked for bit-transposed on the device.
					j := job(rng, f, len(batch), alloc)
					j.ShuffleBlock = bitshuffle.DefaultBlockSize(f.PixelSize())
					batch = append(batch, j)
				}
				compare(t, be, cpu, batch, fmt.Sprintf("%v, %s, %s memory", g, oname, aname))
			}
			for _, b := range pinned {
				if err := ha.FreeHost(b); err != nil {
					t.Error(err)
				}
			}
			for _, b := range registered {
				if err := ha.UnregisterHost(b); err != nil {
					t.Error(err)
				}
				syscall.Munmap(b)
			}
		}
	}
}

// TestConcurrent decodes from several goroutines at once, more than the
// backend has streams, with batches of several rounds (fewer with -short).
func TestConcurrent(t *testing.T) {
	needGPU(t)
	frames := 100
	if testing.Short() {
		frames = 10
	}
	g := frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16}
	o := orientations(g)["mixed"]
	be := newBackend(t, "cuda", gpu.Options{Orientation: o, Streams: 3})
	cpu := newBackend(t, "cpu", gpu.Options{Orientation: o})
	var wg sync.WaitGroup
	for gr := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(3, uint64(gr)))
			for round := range 4 {
				var batch []gpu.Job
				for range frames {
					for _, f := range formats(g) {
						batch = append(batch, job(rng, f, len(batch), func(n int) []byte { return make([]byte, n) }))
					}
				}
				compare(t, be, cpu, batch, fmt.Sprintf("goroutine %d round %d", gr, round))
			}
		})
	}
	wg.Wait()
}

// TestRoundTrip decodes images encoded as a detector sends them: Pi-mega
// frames, or with -short smaller ones.
func TestRoundTrip(t *testing.T) {
	needGPU(t)
	rng := rand.New(rand.NewPCG(5, 6))
	g := frame.PiMega
	if testing.Short() {
		g = frame.Geometry{ChipsX: 3, ChipsY: 2, ChipWidth: 32, ChipHeight: 16}
	}
	o := orientations(g)["mixed"]
	be := newBackend(t, "cuda", gpu.Options{Orientation: o})
	for _, f := range formats(g) {
		counts := make([]uint32, f.Pixels())
		for i := range counts {
			counts[i] = uint32(rng.Uint64N(uint64(f.MaxCount()) + 1))
		}
		payload, err := f.AppendPayload(nil, counts, o)
		if err != nil {
			t.Fatal(err)
		}
		j := gpu.Job{Header: frame.Header{PayloadSize: uint32(len(payload)), Format: f},
			Payload: payload, Image: make([]byte, f.ImageSize())}
		batch := []gpu.Job{j}
		if err := be.Decode(batch); err != nil || batch[0].Err != nil {
			t.Fatalf("%v: %v, %v", f, err, batch[0].Err)
		}
		for i, c := range counts {
			var got uint32
			if f.PixelSize() == 2 {
				got = uint32(batch[0].Image[2*i]) | uint32(batch[0].Image[2*i+1])<<8
			} else {
				b := batch[0].Image[4*i:]
				got = uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
			}
			if got != c {
				t.Errorf("%v: pixel %d = %d, want %d", f, i, got, c)
				break
			}
		}
	}
}
