package gpu

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"h5ingest/frame"
)

// piMegaFormats returns every format on a Pi-mega module.
func piMegaFormats() []frame.Format {
	fs := testFormats()
	for i := range fs {
		fs[i].Geometry = frame.PiMega
	}
	return fs
}

func formatName(f frame.Format) string {
	return fmt.Sprintf("%v%d%v", f.Encoding, f.BitDepth, map[frame.Coding]string{frame.LFSR: "lfsr"}[f.Coding])
}

// piMegaOrientation turns every other chip, as the mixed layouts of a
// module do.
var piMegaOrientation = testOrientations(frame.PiMega)["mixed"]

// BenchmarkDecode measures the CPU backend, decode and both checksums, on
// one Pi-mega frame per call, with 1 and 2 workers.
func BenchmarkDecode(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, f := range piMegaFormats() {
		job := newJob(f, 0, randomBytes(rng, f.PayloadSize()))
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/workers=%d", formatName(f), workers), func(b *testing.B) {
				be := newBackend(b, "cpu", Options{Orientation: piMegaOrientation, Workers: workers})
				batch := []Job{job}
				b.SetBytes(int64(f.PayloadSize()))
				b.ReportAllocs()
				for b.Loop() {
					if err := be.Decode(batch); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkDecodeRows measures decoding alone, no checksums, on one
// goroutine: the per-core speed of the row decoders, on each decode path
// this CPU has (portable Go, then the vector ones).
func BenchmarkDecodeRows(b *testing.B) {
	rng := rand.New(rand.NewPCG(2, 2))
	for _, f := range piMegaFormats() {
		job := newJob(f, 0, randomBytes(rng, f.PayloadSize()))
		for _, path := range decodePaths() {
			b.Run(formatName(f)+"/"+path.name, func(b *testing.B) {
				path.use(b)
				benchmarkDecodeRows(b, f, job)
			})
		}
	}
}

func benchmarkDecodeRows(b *testing.B, f frame.Format, job Job) {
	p, err := makePlan(&job, piMegaOrientation, 1)
	if err != nil {
		b.Fatal(err)
	}
	counts := make([]uint32, f.ChipWidth)
	w, pix := f.ChipWidth, f.PixelSize()
	b.SetBytes(int64(f.PayloadSize()))
	b.ReportAllocs()
	for b.Loop() {
		for k := range f.Chips() {
			chip := job.Payload[k*p.chipBytes : (k+1)*p.chipBytes]
			rot := p.rot.Rotated(k)
			for r := range f.ChipHeight {
				off := f.PixelIndex(k, r, 0, false) * pix
				p.decodeRow(job.Image[off:off+w*pix], chip, r, rot, counts)
			}
		}
	}
}

// BenchmarkCRC measures the CRC-32C of a Pi-mega 24-bit payload, in the
// pieces the backend cuts (one per chip and band) combined, beside one
// plain hash/crc32 pass over the same bytes.
func BenchmarkCRC(b *testing.B) {
	f := frame.Format{Geometry: frame.PiMega, Encoding: frame.Bitplane, BitDepth: 24, Coding: frame.LFSR}
	payload := randomBytes(rand.New(rand.NewPCG(3, 3)), f.PayloadSize())
	job := newJob(f, 0, payload)
	tab := crc32.MakeTable(crc32.Castagnoli)
	want := crc32.Checksum(payload, tab)
	b.Run("hash/crc32", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for b.Loop() {
			if crc32.Checksum(payload, tab) != want {
				b.Fatal("wrong CRC")
			}
		}
	})
	b.Run("pieces+combine", func(b *testing.B) {
		p, err := makePlan(&job, piMegaOrientation, 2)
		if err != nil {
			b.Fatal(err)
		}
		crcs := make([]uint32, p.pieces())
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		for b.Loop() {
			for k := range f.Chips() {
				chip := payload[k*p.chipBytes : (k+1)*p.chipBytes]
				for band := range p.bands {
					r0, r1 := p.readoutRange(band, p.rot.Rotated(k))
					crcs[p.rawPiece(k, band)] = frame.Checksum(chip[p.payloadOffset(r0):p.payloadOffset(r1)])
				}
			}
			if raw, _ := p.combine(crcs); raw != want {
				b.Fatalf("combined CRC %08x, want %08x", raw, want)
			}
		}
	})
	b.Run("combine", func(b *testing.B) {
		p, _ := makePlan(&job, piMegaOrientation, 2)
		crcs := make([]uint32, p.pieces())
		b.ReportAllocs()
		for b.Loop() {
			p.combine(crcs)
		}
	})
}
