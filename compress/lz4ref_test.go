package compress

import (
	"encoding/binary"
	"math/bits"
)

// refLZ4 is the LZ4 block compressor as it was before its parse became the
// C library's: a 12-bit hash, and a stride that grows with the bytes since
// the last match (one more per 32) rather than with failed probes (one
// more per 64). It skips noisy bit planes about twice as fast and stores
// some 7% more on a tomography frame; BenchmarkLZ4Blocks times both in one
// run, to weigh that trade again.

// refLZ4 compresses LZ4 blocks. It is used by one goroutine at a time.
type refLZ4 struct {
	table [1 << refHashLog]uint32 // base + position of the last 4 bytes hashed there
	base  uint32                  // base of the current block
}

// refHashLog and refSkipLog are its hash table's size and stride: one
// byte more per 2^refSkipLog bytes since the last match.
const refHashLog, refSkipLog = 12, 5

func refHash(x uint32) uint32 { return x * 2654435761 >> (32 - refHashLog) }

// compress appends the LZ4 block of src to dst. dst must have room for
// lz4.CompressBlockBound(len(src)) more bytes, and len(src) must be below
// 1 GiB.
func (c *refLZ4) compress(dst, src []byte) []byte {
	n := len(src)
	if uint64(c.base)+uint64(n) >= 1<<32-1 {
		c.table = [1 << refHashLog]uint32{}
		c.base = 0
	}
	base := c.base + 1 // entries of 0 (never set) are stale too
	c.base = base + uint32(n)
	start := len(dst)
	out := dst[start:cap(dst)]
	di, anchor := 0, 0
	if n > lz4MFLimit {
		di, anchor = c.sequences(out, src, base)
	}
	di = putLiterals(out, di, src[anchor:])
	return dst[:start+di]
}

// sequences writes the block's sequences up to its last literals to out
// and returns the bytes written and where the last literals start.
func (c *refLZ4) sequences(out, src []byte, base uint32) (di, anchor int) {
	n := len(src)
	limit := n - lz4MFLimit    // last position a match may start at
	end := n - lz4LastLiterals // matches stop here
	c.table[refHash(binary.LittleEndian.Uint32(src))] = base
	si := 1
	for si < limit {
		seq := binary.LittleEndian.Uint32(src[si:])
		h := refHash(seq)
		ref := int(c.table[h]) - int(base)
		c.table[h] = base + uint32(si)
		if ref < 0 || si-ref > lz4MaxOffset || binary.LittleEndian.Uint32(src[ref:]) != seq {
			si += 1 + (si-anchor)>>refSkipLog
			continue
		}
		// Extend backwards over literals, then forwards 8 bytes at a time.
		for si > anchor && ref > 0 && src[si-1] == src[ref-1] {
			si--
			ref--
		}
		m := si + lz4MinMatch
		for m+8 <= end {
			x := binary.LittleEndian.Uint64(src[m:]) ^ binary.LittleEndian.Uint64(src[m-(si-ref):])
			if x != 0 {
				m += bits.TrailingZeros64(x) >> 3
				break
			}
			m += 8
		}
		for m < end && src[m] == src[m-(si-ref)] {
			m++
		}
		m = min(m, end)
		di = putSequence(out, di, src[anchor:si], si-ref, m-si)
		si, anchor = m, m
		if si < limit {
			c.table[refHash(binary.LittleEndian.Uint32(src[si-2:]))] = base + uint32(si-2)
		}
	}
	return di, anchor
}
