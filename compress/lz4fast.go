package compress

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// This file holds the LZ4 block compressor of the bitshuffle codec: a
// greedy single-probe compressor, written for many small blocks (the
// filter's are 8 KiB) of bit-transposed detector data, where long runs of
// zero bytes are the common case.
//
// Its hash table holds positions offset by a base that grows with every
// block, so an entry left by an earlier block reads as stale (below the
// block's base) instead of the table being cleared for every block.

const (
	lz4HashLog   = 13
	lz4MinMatch  = 4
	lz4MaxOffset = 65535
	// lz4LastLiterals and lz4MFLimit are the format's end-of-block rules:
	// the last 5 bytes are always literals, and the last match starts at
	// least 12 bytes before the end.
	lz4LastLiterals = 5
	lz4MFLimit      = 12
	// lz4SkipTrigger sets how fast the search strides through data that
	// does not match: one byte more per 2^lz4SkipTrigger failed probes.
	lz4SkipTrigger = 6
)

// fastLZ4 compresses LZ4 blocks. It is used by one goroutine at a time.
type fastLZ4 struct {
	table [1 << lz4HashLog]uint32 // base + position of the last 4 bytes hashed there
	base  uint32                  // base of the current block
	accel int                     // LZ4_compress_fast's acceleration; 0 stands for 1
}

func lz4Hash(x uint32) uint32 { return x * 2654435761 >> (32 - lz4HashLog) }

// load32 reads the 4 bytes at src[i:] little-endian, without a bounds
// check: the probe loop, where it is used, keeps i at least 4 bytes
// before the end of src.
func load32(src []byte, i int) uint32 {
	return binary.LittleEndian.Uint32(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(src)), i)), 4))
}

// compress appends the LZ4 block of src to dst. dst must have room for
// lz4.CompressBlockBound(len(src)) more bytes, and len(src) must be below
// 1 GiB.
func (c *fastLZ4) compress(dst, src []byte) []byte {
	n := len(src)
	if uint64(c.base)+uint64(n) >= 1<<32-1 {
		c.table = [1 << lz4HashLog]uint32{}
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
//
// The parse is the C library's (LZ4_compress_default, or LZ4_compress_fast
// at the acceleration set, for blocks under 64 KiB): a 13-bit hash of 4
// bytes, one candidate per position, a table entry from before the block
// standing for position 0, a stride that grows by one byte every 64
// failed probes (starting from the acceleration), a match extended
// backwards over literals, and after each match a probe at the next
// position before the search starts again. For such blocks it makes the
// very bytes the C library makes, so that a file stores no more than the
// C filter's.
func (c *fastLZ4) sequences(out, src []byte, base uint32) (di, anchor int) {
	n := len(src)
	mflimit := n - lz4MFLimit + 1 // a probe at or past it ends the search
	end := n - lz4LastLiterals    // matches stop here
	c.table[lz4Hash(binary.LittleEndian.Uint32(src))] = base
	ip := 1
	fwdH := lz4Hash(binary.LittleEndian.Uint32(src[ip:]))
	for {
		// Probe for a match, striding faster the longer none is found.
		var ref int
		ip, ref = c.search(src, base, ip, fwdH, mflimit, max(c.accel, 1)<<lz4SkipTrigger)
		if ip < 0 {
			return di, anchor
		}
		// Extend backwards over literals.
		for ip > anchor && ref > 0 && src[ip-1] == src[ref-1] {
			ip--
			ref--
		}
		for {
			m := matchEnd(src[:end], ip+lz4MinMatch, ip-ref)
			di = putSequence(out, di, src[anchor:ip], ip-ref, m-ip)
			ip, anchor = m, m
			if ip >= mflimit {
				return di, anchor
			}
			c.table[lz4Hash(binary.LittleEndian.Uint32(src[ip-2:]))] = base + uint32(ip-2)
			// A match at the very next position goes on without literals.
			h := lz4Hash(binary.LittleEndian.Uint32(src[ip:]))
			ref = max(int(c.table[h])-int(base), 0)
			c.table[h] = base + uint32(ip)
			if ip-ref > lz4MaxOffset || binary.LittleEndian.Uint32(src[ref:]) != binary.LittleEndian.Uint32(src[ip:]) {
				break
			}
		}
		ip++
		fwdH = lz4Hash(binary.LittleEndian.Uint32(src[ip:]))
	}
}

// searchGo probes src for a match from fwd, whose hash is fwdH, as the C
// library does: a stride of one byte more every 64 failed probes, counting
// from probes, each probe's table entry read and set to the probe. It
// returns the first probe whose 4 bytes match its entry's (a position
// within the offset limit; an entry below base stands for position 0)
// and that entry, or ip = -1 once a probe would pass mflimit.
func (c *fastLZ4) searchGo(src []byte, base uint32, fwd int, fwdH uint32, mflimit, probes int) (ip, ref int) {
	step := 1
	next := load32(src, fwd) // the 4 bytes at fwd
	for {
		h := fwdH & (1<<lz4HashLog - 1)
		ip = fwd
		seq := next
		fwd += step
		step = probes >> lz4SkipTrigger
		probes++
		if fwd > mflimit {
			return -1, 0
		}
		// In bounds: 0 <= ref < ip < fwd <= mflimit, 4 bytes
		// before the end.
		ref = max(int(c.table[h])-int(base), 0)
		next = load32(src, fwd)
		fwdH = lz4Hash(next)
		c.table[h] = base + uint32(ip)
		if load32(src, ref) == seq && ip-ref <= lz4MaxOffset {
			return ip, ref
		}
	}
}

// matchEnd returns where the match of src[m-off:] with src[m:] ends, at
// most len(src). Bit-transposed detector data is mostly long runs of zero
// bytes, where the match runs on for kilobytes: it compares 32 bytes a
// step while they all match (with AVX2 where the CPU has it, 64), then 8,
// then one. Most matches in the noisier bit planes are short: the first 8
// bytes are compared here, before any call.
func matchEnd(src []byte, m, off int) int {
	if m+8 <= len(src) {
		if x := binary.LittleEndian.Uint64(src[m:]) ^ binary.LittleEndian.Uint64(src[m-off:]); x != 0 {
			return m + bits.TrailingZeros64(x)>>3
		}
		m += 8
	}
	if n := equalPrefix32(src, m, off); n >= 0 {
		if n%32 != 0 {
			return m + n // a difference within the bytes compared
		}
		m += n // all equal, or the difference is src[m+n]: the Go loop sees it at once
	}
	return matchEndGo(src, m, off)
}

// matchEndGo is matchEnd in Go alone.
func matchEndGo(src []byte, m, off int) int {
	end := len(src)
	for m+32 <= end {
		a, b := src[m:m+32], src[m-off:m-off+32]
		x0 := binary.LittleEndian.Uint64(a) ^ binary.LittleEndian.Uint64(b)
		x1 := binary.LittleEndian.Uint64(a[8:]) ^ binary.LittleEndian.Uint64(b[8:])
		x2 := binary.LittleEndian.Uint64(a[16:]) ^ binary.LittleEndian.Uint64(b[16:])
		x3 := binary.LittleEndian.Uint64(a[24:]) ^ binary.LittleEndian.Uint64(b[24:])
		if x0|x1|x2|x3 != 0 {
			break
		}
		m += 32
	}
	for m+8 <= end {
		x := binary.LittleEndian.Uint64(src[m:]) ^ binary.LittleEndian.Uint64(src[m-off:])
		if x != 0 {
			return m + bits.TrailingZeros64(x)>>3
		}
		m += 8
	}
	for m < end && src[m] == src[m-off] {
		m++
	}
	return m
}

// putSequence writes one sequence, literals then a match of length
// matchLen at offset, at out[di:] and returns the new end.
func putSequence(out []byte, di int, lit []byte, offset, matchLen int) int {
	ml := matchLen - lz4MinMatch
	tok := byte(min(len(lit), 15)<<4) | byte(min(ml, 15))
	out[di] = tok
	di++
	if len(lit) >= 15 {
		di = putLength(out, di, len(lit)-15)
	}
	if len(lit) <= 16 && cap(lit) >= 16 && len(out)-di >= 16 {
		// Short literals, the usual case, as two 8-byte moves; the bytes
		// past them are overwritten next.
		w := lit[:16]
		binary.LittleEndian.PutUint64(out[di:], binary.LittleEndian.Uint64(w))
		binary.LittleEndian.PutUint64(out[di+8:], binary.LittleEndian.Uint64(w[8:]))
		di += len(lit)
	} else {
		di += copy(out[di:], lit)
	}
	out[di], out[di+1] = byte(offset), byte(offset>>8)
	di += 2
	if ml >= 15 {
		di = putLength(out, di, ml-15)
	}
	return di
}

// putLiterals writes the block's last sequence, literals only.
func putLiterals(out []byte, di int, lit []byte) int {
	out[di] = byte(min(len(lit), 15) << 4)
	di++
	if len(lit) >= 15 {
		di = putLength(out, di, len(lit)-15)
	}
	return di + copy(out[di:], lit)
}

// putLength writes the extension bytes of a length: 255s, then the rest.
func putLength(out []byte, di, l int) int {
	for l >= 255 {
		out[di] = 255
		di++
		l -= 255
	}
	out[di] = byte(l)
	return di + 1
}
