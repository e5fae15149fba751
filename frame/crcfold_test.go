package frame

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// clmul is the carry-less product of a and b: its low and high 64 bits.
func clmul(a, b uint64) (lo, hi uint64) {
	for i := range 64 {
		if b>>i&1 != 0 {
			lo ^= a << i
			if i > 0 {
				hi ^= a >> (64 - i)
			}
		}
	}
	return lo, hi
}

// foldEmulated is crc32cFold written out with 128-bit pieces, as the
// assembly does it lane by lane: it proves the constants.
func foldEmulated(crc uint32, p []byte) uint32 {
	type piece struct{ lo, hi uint64 }
	load := func(b []byte) piece { return piece{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])} }
	fold := func(x piece, i int) piece {
		l1, h1 := clmul(x.lo, foldConsts[2*i])
		l2, h2 := clmul(x.hi, foldConsts[2*i+1])
		return piece{l1 ^ l2, h1 ^ h2}
	}
	var acc [16]piece // four accumulators of four lanes
	for i := range acc {
		acc[i] = load(p[16*i:])
	}
	acc[0].lo ^= uint64(crc)
	for off := 256; off < len(p); off += 256 {
		for i := range acc {
			f, d := fold(acc[i], 0), load(p[off+16*i:])
			acc[i] = piece{f.lo ^ d.lo, f.hi ^ d.hi}
		}
	}
	for a := 1; a < 4; a++ { // accumulator a-1 into a, 512 bits on
		for l := range 4 {
			f := fold(acc[4*(a-1)+l], 1)
			acc[4*a+l].lo ^= f.lo
			acc[4*a+l].hi ^= f.hi
		}
	}
	r := acc[15]
	for l := range 3 { // lane l of the last accumulator into lane 3
		f := fold(acc[12+l], 2+l)
		r.lo ^= f.lo
		r.hi ^= f.hi
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], r.lo)
	binary.LittleEndian.PutUint64(b[8:], r.hi)
	return ^crc32.Update(^uint32(0), castagnoli, b[:]) // CRC from 0, no conditioning
}

func TestFoldConstants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{256, 512, 768, 4096} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		for _, crc := range []uint32{0, 0xFFFFFFFF, rng.Uint32()} {
			want := ^crc32.Update(^crc, castagnoli, p) // the register after p, from register crc
			if got := foldEmulated(crc, p); got != want {
				t.Errorf("%d bytes from %08x: folded %08x, want %08x", n, crc, got, want)
			}
		}
	}
}
