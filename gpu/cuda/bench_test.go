//go:build cgo

package cuda_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"h5ingest/compress/bitshuffle"
	"h5ingest/frame"
	"h5ingest/gpu"
	"h5ingest/gpu/cuda"
	"h5ingest/gpu/kernels"
)

// Throughput the detector asks for: one Pi-mega module at 1000 frames/s
// (7,077,888 bytes a frame), and a 2 x 2 array of modules.
const (
	moduleGBs = 7.077888
	array2x2  = 4 * moduleGBs
)

// formatName names f in a benchmark: the encoding, and for bitplane
// frames the depth and LFSR coding (packed24, u32le, bitplane24lfsr).
func formatName(f frame.Format) string {
	if f.Encoding != frame.Bitplane {
		return f.Encoding.String()
	}
	s := fmt.Sprintf("%v%d", f.Encoding, f.BitDepth)
	if f.Coding == frame.LFSR {
		s += "lfsr"
	}
	return s
}

// copyBandwidth measures device-to-device copy speed on s: bytes copied
// per second (the memory moves twice that, read and write).
func copyBandwidth(b *testing.B, ctx *cuda.Context, s *cuda.Stream) float64 {
	const n = 1 << 30
	src, err := ctx.Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer ctx.Free(src)
	dst, err := ctx.Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer ctx.Free(dst)
	start, err := ctx.NewEvent()
	must(b, err)
	defer start.Close()
	end, err := ctx.NewEvent()
	must(b, err)
	defer end.Close()
	must(b, s.CopyDtoD(dst, src, n)) // warm up
	must(b, start.Record(s))
	for range 5 {
		must(b, s.CopyDtoD(dst, src, n))
	}
	must(b, end.Record(s))
	must(b, end.Synchronize())
	d, err := cuda.Elapsed(start, end)
	if err != nil {
		b.Fatal(err)
	}
	return 5 * n / d.Seconds() / 1e9
}

// hostBandwidth measures copies between page-locked host memory and the
// device on s, in bytes per second each way: the PCIe link's ceiling for
// the copies in and out of a round.
func hostBandwidth(b *testing.B, ctx *cuda.Context, s *cuda.Stream) (htod, dtoh float64) {
	const n = 256 << 20
	host, err := ctx.AllocHost(n)
	if err != nil {
		b.Fatal(err)
	}
	defer ctx.FreeHost(host)
	dev, err := ctx.Alloc(n)
	if err != nil {
		b.Fatal(err)
	}
	defer ctx.Free(dev)
	ev := make([]*cuda.Event, 3)
	for i := range ev {
		if ev[i], err = ctx.NewEvent(); err != nil {
			b.Fatal(err)
		}
		defer ev[i].Close()
	}
	must(b, s.CopyHtoD(dev, host)) // warm up
	must(b, ev[0].Record(s))
	for range 4 {
		must(b, s.CopyHtoD(dev, host))
	}
	must(b, ev[1].Record(s))
	for range 4 {
		must(b, s.CopyDtoH(host, dev))
	}
	must(b, ev[2].Record(s))
	must(b, ev[2].Synchronize())
	in, err := cuda.Elapsed(ev[0], ev[1])
	if err != nil {
		b.Fatal(err)
	}
	out, err := cuda.Elapsed(ev[1], ev[2])
	if err != nil {
		b.Fatal(err)
	}
	return 4 * n / in.Seconds() / 1e9, 4 * n / out.Seconds() / 1e9
}

// BenchmarkKernels times the kernels on the device alone, on a batch of 16
// Pi-mega frames already in device memory, by events; LFSR formats also
// with the tables read from global memory (global-lut) instead of constant
// memory. It reports the raw
// payload decoded and checksummed per second (GB/s), each kernel's share,
// the kernels' memory traffic (payload read twice, image written and read),
// and beside it the device-to-device copy traffic measured in the same
// run, and their ratio (of-d2d: near 1, the kernels are as fast as memory
// allows and fusing them is what could gain). The bitshuffle transpose, which a scan asks for only with
// output.backend_shuffle, is timed apart: shuffle-GB/s is image bytes
// transposed per second.
func BenchmarkKernels(b *testing.B) {
	ctx := needGPU(b)
	mod, err := ctx.LoadModule(kernels.PTX)
	if err != nil {
		b.Fatal(err)
	}
	fns := map[string]*cuda.Function{}
	for _, k := range kernels.Kernels {
		if fns[k], err = mod.Function(k); err != nil {
			b.Fatal(err)
		}
	}
	s, err := ctx.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for name, t := range kernels.TableBytes() {
		p, _, err := mod.Global(name)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Upload(p, t); err != nil {
			b.Fatal(err)
		}
	}
	d2d := copyBandwidth(b, ctx, s)
	name, _ := ctx.Device.Name()
	b.Logf("%s: device-to-device copy %.0f GB/s (memory traffic %.0f GB/s)", name, d2d, 2*d2d)

	var ev [5]*cuda.Event
	for i := range ev {
		if ev[i], err = ctx.NewEvent(); err != nil {
			b.Fatal(err)
		}
		defer ev[i].Close()
	}
	rng := rand.New(rand.NewPCG(1, 1))
	const frames = 16
	rot := make([]byte, frame.PiMega.Chips())
	for k := range rot {
		rot[k] = byte(k % 2)
	}
	type variant struct {
		f      frame.Format
		lut    uint32
		counts bool // a payload of photon counts, not random codes
		name   string
	}
	var variants []variant
	for _, f := range formats(frame.PiMega) {
		variants = append(variants, variant{f, kernels.LUTConstant, false, formatName(f)})
		if f.Coding == frame.LFSR {
			// The tables' other copy, on random codes (every look-up of a
			// warp differs) and on the few codes of low photon counts.
			variants = append(variants,
				variant{f, kernels.LUTGlobal, false, formatName(f) + "/global-lut"},
				variant{f, kernels.LUTConstant, true, formatName(f) + "/counts"},
				variant{f, kernels.LUTGlobal, true, formatName(f) + "/counts/global-lut"})
		}
	}
	for _, v := range variants {
		f := v.f
		b.Run(v.name, func(b *testing.B) {
			units, rs, is, rp, ip := kernels.Layout(f)
			pay, img := align(f.PayloadSize()), align(f.ImageSize())
			subs, pieces := align(4*(rs+is)), 4*(rp+ip)
			descOff := align(len(rot))
			var mem []cuda.DevicePtr
			alloc := func(n int) cuda.DevicePtr {
				p, err := ctx.Alloc(n)
				if err != nil {
					b.Fatal(err)
				}
				mem = append(mem, p)
				return p
			}
			defer func() {
				for _, p := range mem {
					ctx.Free(p)
				}
			}()
			dPay, dImg, dShuf := alloc(frames*pay), alloc(frames*img), alloc(frames*img)
			dSubs, dPieces, dDesc := alloc(frames*subs), alloc(frames*pieces), alloc(descOff+frames*kernels.FrameSize)
			payload := make([]byte, f.PayloadSize())
			for i := range payload {
				payload[i] = byte(rng.Uint32())
			}
			if v.counts {
				counts := make([]uint32, f.Pixels())
				for i := range counts {
					counts[i] = min(uint32(rng.IntN(8)), f.MaxCount()) // a dim tomography projection
				}
				var err error
				if payload, err = f.AppendPayload(payload[:0], counts, nil); err != nil {
					b.Fatal(err)
				}
			}
			descs := make([]byte, descOff+frames*kernels.FrameSize)
			copy(descs, rot)
			for n := range frames {
				if err := s.Upload(dPay+cuda.DevicePtr(n*pay), payload); err != nil {
					b.Fatal(err)
				}
				d := kernels.Frame{
					Payload: uint64(dPay) + uint64(n*pay), Image: uint64(dImg) + uint64(n*img),
					Rot: uint64(dDesc), Subs: uint64(dSubs) + uint64(n*subs), Pieces: uint64(dPieces) + uint64(n*pieces),
					PayloadSize: uint32(f.PayloadSize()), ImageSize: uint32(f.ImageSize()),
					Units: uint32(units), RawSubs: uint32(rs), ImgSubs: uint32(is), RawPieces: uint32(rp), ImgPieces: uint32(ip),
					OpSub:     uint32(gpu.NewCRC32CCombiner(kernels.CRCSubSize)),
					OpRawLast: uint32(gpu.NewCRC32CCombiner(int64(kernels.LastSub(f.PayloadSize())))),
					OpImgLast: uint32(gpu.NewCRC32CCombiner(int64(kernels.LastSub(f.ImageSize())))),
					Format:    f,
					Block:     uint32(bitshuffle.DefaultBlockSize(f.PixelSize())),
					Shuffled:  uint64(dShuf) + uint64(n*img),
					LUT:       v.lut,
				}
				d.Put(descs[descOff+n*kernels.FrameSize:])
			}
			if err := s.Upload(dDesc, descs); err != nil {
				b.Fatal(err)
			}
			args := []uint64{uint64(dDesc) + uint64(descOff), frames}
			launches := []struct {
				name string
				work int
			}{{kernels.Decode, units}, {kernels.CRCSub, rs + is}, {kernels.CRCFold, rp + ip},
				{kernels.Shuffle, kernels.ShuffleUnits(f)}}
			var per [4]time.Duration
			b.SetBytes(int64(frames * f.PayloadSize()))
			for b.Loop() {
				must(b, ev[0].Record(s))
				for i, l := range launches {
					grid := cuda.Dim3{X: kernels.Grid(l.work), Y: frames}
					must(b, s.Launch(fns[l.name], grid, cuda.Dim3{X: kernels.BlockSize}, 0, args))
					must(b, ev[i+1].Record(s))
				}
				must(b, ev[4].Synchronize())
				for i := range per {
					d, err := cuda.Elapsed(ev[i], ev[i+1])
					must(b, err)
					per[i] += d
				}
			}
			total := per[0] + per[1] + per[2]
			raw := float64(b.N) * frames * float64(f.PayloadSize())
			imgBytes := float64(b.N) * frames * float64(f.ImageSize())
			b.ReportMetric(raw/total.Seconds()/1e9, "GB/s")
			b.ReportMetric(raw/per[0].Seconds()/1e9, "decode-GB/s")
			b.ReportMetric((raw+imgBytes)/per[1].Seconds()/1e9, "crc-GB/s")
			b.ReportMetric(float64(per[2].Microseconds())/float64(b.N), "fold-µs")
			b.ReportMetric(imgBytes/per[3].Seconds()/1e9, "shuffle-GB/s")
			traffic := 2 * (raw + imgBytes) / total.Seconds() / 1e9
			b.ReportMetric(traffic, "traffic-GB/s")
			b.ReportMetric(2*d2d, "d2d-traffic-GB/s")
			b.ReportMetric(traffic/(2*d2d), "of-d2d")
		})
	}
}

// must fails b at once on an error of the driver: a figure timed over a
// failed call means nothing.
func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

func align(n int) int { return (n + kernels.Align - 1) / kernels.Align * kernels.Align }

// endToEndFormats are the Pi-mega formats BenchmarkEndToEnd runs, one of
// each kind of decode: the bitplane 24-bit LFSR frames a Pi-mega module
// sends (the most decode work), packed 24-bit, and plain 32-bit (no decode:
// the copies alone). Every format's kernels are timed in BenchmarkKernels.
func endToEndFormats() []frame.Format {
	g := frame.PiMega
	return []frame.Format{
		{Geometry: g, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR},
		{Geometry: g, Encoding: frame.Packed24, BitDepth: 24},
		{Geometry: g, Encoding: frame.U32LE, BitDepth: 32},
	}
}

// BenchmarkEndToEnd measures the cuda backend as the pipeline uses it:
// payloads copied in, decoded and checksummed, images copied out, CRCs
// folded, on batches of 4 Pi-mega frames, with the lanes' buffers reserved
// first (gpu.Reserver). GB/s is raw payload per second, beside what one
// module (7.08 GB/s) and a 2 x 2 array (28.3 GB/s) deliver at 1000
// frames/s, and beside the copy bandwidths measured in the same run:
// page-locked host to device and back (htod-GB/s, dtoh-GB/s, the PCIe
// link) and device to device (d2d-GB/s).
//
// Variants: pinned, 4 goroutines with page-locked payloads and images (a
// 2 x 2 array's pipelines); pinned-shuffled, the same with images
// bit-transposed on the device (output.backend_shuffle); ring, payloads in
// one mapping page-locked in place as a receiver's ring is; module-2rounds
// and module-1round, one module's pipeline with two decode calls in flight
// (as it runs) and with one; pageable, Go memory the driver stages itself.
// Each on the formats of endToEndFormats: 18 rows.
func BenchmarkEndToEnd(b *testing.B) {
	ctx := needGPU(b)
	s, err := ctx.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	htod, dtoh := hostBandwidth(b, ctx, s)
	d2d := copyBandwidth(b, ctx, s)
	s.Close()
	b.Logf("copies: host to device %.1f GB/s, device to host %.1f GB/s, device to device %.0f GB/s", htod, dtoh, d2d)
	o := orientations(frame.PiMega)["mixed"]
	const perBatch = 4
	variants := []struct {
		name       string
		goroutines int
		pinned     bool
		ring       bool
		shuffle    bool
	}{
		{"pinned", 4, true, false, false},
		{"pinned-shuffled", 4, true, false, true},
		{"ring", 4, true, true, false},
		{"module-2rounds", 2, true, false, false},
		{"module-1round", 1, true, false, false},
		{"pageable", 4, false, false, false},
	}
	for _, v := range variants {
		for _, f := range endToEndFormats() {
			b.Run(v.name+"/"+formatName(f), func(b *testing.B) {
				be := newBackend(b, "cuda", gpu.Options{Orientation: o, Streams: 4})
				ha := be.(gpu.HostAllocator)
				if _, err := be.(gpu.Reserver).Reserve(f, perBatch, v.goroutines, v.shuffle); err != nil {
					b.Fatal(err)
				}
				var pinned [][]byte
				defer func() {
					for _, p := range pinned {
						ha.FreeHost(p)
					}
				}()
				alloc := func(n int) []byte {
					if !v.pinned {
						return make([]byte, n)
					}
					p, err := ha.AllocHost(n)
					if err != nil {
						b.Fatal(err)
					}
					pinned = append(pinned, p)
					return p
				}
				payloadAlloc := alloc
				if v.ring {
					n := v.goroutines * perBatch * f.PayloadSize()
					ring, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
					if err != nil {
						b.Fatal(err)
					}
					defer syscall.Munmap(ring)
					if err := ha.RegisterHost(ring); err != nil {
						b.Fatal(err)
					}
					defer ha.UnregisterHost(ring)
					off := 0
					payloadAlloc = func(n int) []byte {
						if n != f.PayloadSize() { // the image
							return alloc(n)
						}
						p := ring[off : off+n]
						off += n
						return p
					}
				}
				rng := rand.New(rand.NewPCG(2, 2))
				batches := make([][]gpu.Job, v.goroutines)
				for g := range batches {
					for range perBatch {
						j := job(rng, f, len(batches[g]), payloadAlloc)
						if v.shuffle {
							j.ShuffleBlock = bitshuffle.DefaultBlockSize(f.PixelSize())
						}
						batches[g] = append(batches[g], j)
					}
				}
				for _, batch := range batches { // warm up
					if err := be.Decode(batch); err != nil {
						b.Fatal(err)
					}
				}
				b.SetBytes(int64(v.goroutines * perBatch * f.PayloadSize()))
				start := time.Now()
				for b.Loop() {
					var wg sync.WaitGroup
					for _, batch := range batches {
						wg.Go(func() {
							if err := be.Decode(batch); err != nil {
								b.Error(err)
							}
						})
					}
					wg.Wait()
				}
				gbs := float64(b.N) * float64(v.goroutines*perBatch) * float64(f.PayloadSize()) / time.Since(start).Seconds() / 1e9
				b.ReportMetric(gbs, "GB/s")
				b.ReportMetric(moduleGBs, "module-GB/s")
				b.ReportMetric(array2x2, "2x2-GB/s")
				b.ReportMetric(htod, "htod-GB/s")
				b.ReportMetric(dtoh, "dtoh-GB/s")
				b.ReportMetric(d2d, "d2d-GB/s")
			})
		}
	}
}

// firstTouchBytes is how much fresh memory BenchmarkFirstTouch touches.
const firstTouchBytes = 512 << 20

// BenchmarkFirstTouch measures how fast this machine hands out fresh
// memory, which every buffer, ring and file on /dev/shm costs on its first
// use: touch, a fresh anonymous mapping written once a page (touch-MB/s);
// and, where a GPU answers, pin, page-locked memory allocated afresh
// (cuMemHostAlloc, pin-MB/s), and register, a fresh mapping page-locked in
// place as a receiver's ring is (cuMemHostRegister, register-MB/s).
// tools/gpu/first-contact.sh runs it first and sizes its steps from it.
func BenchmarkFirstTouch(b *testing.B) {
	mbs := func(d time.Duration) float64 { return float64(b.N) * firstTouchBytes / d.Seconds() / 1e6 }
	b.Run("touch", func(b *testing.B) {
		var took time.Duration
		for range b.N {
			m := freshMapping(b)
			start := time.Now()
			for i := 0; i < len(m); i += 4096 {
				m[i] = 1
			}
			took += time.Since(start)
			syscall.Munmap(m)
		}
		b.ReportMetric(mbs(took), "touch-MB/s")
	})
	b.Run("pin", func(b *testing.B) {
		ctx := needGPU(b)
		var took time.Duration
		for range b.N {
			start := time.Now()
			p, err := ctx.AllocHost(firstTouchBytes)
			must(b, err)
			took += time.Since(start)
			must(b, ctx.FreeHost(p))
		}
		b.ReportMetric(mbs(took), "pin-MB/s")
	})
	b.Run("register", func(b *testing.B) {
		ctx := needGPU(b)
		var took time.Duration
		for range b.N {
			m := freshMapping(b)
			start := time.Now()
			must(b, ctx.RegisterHost(unsafe.Pointer(&m[0]), len(m)))
			took += time.Since(start)
			must(b, ctx.UnregisterHost(unsafe.Pointer(&m[0])))
			syscall.Munmap(m)
		}
		b.ReportMetric(mbs(took), "register-MB/s")
	})
}

// freshMapping returns firstTouchBytes of anonymous memory no one has
// touched yet.
func freshMapping(b *testing.B) []byte {
	m, err := syscall.Mmap(-1, 0, firstTouchBytes, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		b.Fatal(err)
	}
	return m
}
