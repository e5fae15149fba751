package frame

import (
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestFoldMatchesStandardLibrary cross-checks the folding CRC with the
// standard library's at lengths around its 256-byte turns and its
// threshold, at every alignment of the buffer's start, from several
// registers.
func TestFoldMatchesStandardLibrary(t *testing.T) {
	if !useFold {
		t.Skip("CPU has no AVX-512 carry-less multiply: the folding never runs here")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 70000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lengths := []int{0, 1, 255, 256, 257, 511, 512, 1023, 1024, 1025, 1279, 1280, 1281, 4096, 4097, 65536, 65536 + 255, 69000}
	for _, n := range lengths {
		for _, align := range []int{0, 1, 7, 8, 31, 63} {
			p := buf[align : align+n]
			for _, crc := range []uint32{0, 0xFFFFFFFF, rng.Uint32()} {
				if got, want := update(crc, p), crc32.Update(crc, castagnoli, p); got != want {
					t.Fatalf("%d bytes at offset %d from %08x: %08x, want %08x", n, align, crc, got, want)
				}
			}
		}
	}
	// Zeros and ones, where a wrong constant hides least.
	for _, b := range []byte{0, 0xFF} {
		p := make([]byte, 5000)
		for i := range p {
			p[i] = b
		}
		if got, want := Checksum(p), crc32.Checksum(p, castagnoli); got != want {
			t.Errorf("5000 bytes of %#x: %08x, want %08x", b, got, want)
		}
	}
}

// BenchmarkChecksum times the CRC-32C of a Pi-mega frame's payload band,
// the standard library's three-way loop beside the folding.
func BenchmarkChecksum(b *testing.B) {
	for _, n := range []int{6144, 65536, 7077888} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i * 7)
		}
		for _, bc := range []struct {
			name string
			f    func([]byte) uint32
			ok   bool
		}{
			{"stdlib", func(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }, true},
			{"fold", Checksum, useFold},
		} {
			b.Run(bc.name+"/"+strconv.Itoa(n), func(b *testing.B) {
				if !bc.ok {
					b.Skip("no AVX-512 carry-less multiply")
				}
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for b.Loop() {
					bc.f(p)
				}
			})
		}
	}
}

// FuzzChecksum compares the folding CRC with the standard library's on
// buffers of any length up to 64 KiB built from the fuzzer's bytes, from
// any register.
func FuzzChecksum(f *testing.F) {
	f.Add(uint32(0), []byte("pi-mega"), uint16(3000))
	f.Add(uint32(0xFFFFFFFF), []byte{0}, uint16(1024))
	f.Fuzz(func(t *testing.T, crc uint32, seed []byte, n uint16) {
		if len(seed) == 0 {
			return
		}
		p := make([]byte, int(n))
		for i := range p {
			p[i] = seed[i%len(seed)] ^ byte(i>>8)
		}
		if got, want := update(crc, p), crc32.Update(crc, castagnoli, p); got != want {
			t.Fatalf("%d bytes from %08x: %08x, want %08x", n, crc, got, want)
		}
	})
}
