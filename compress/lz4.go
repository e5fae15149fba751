package compress

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/pierrec/lz4/v4"
)

const (
	// defaultLZ4Block is the LZ4 filter's block size when cd_values slot 0
	// is 0 or absent.
	defaultLZ4Block = 1 << 30
	// maxLZ4Block is the largest block size hdf5plugin accepts.
	maxLZ4Block = 0x7E000000
)

// lz4Codec is the HDF5 LZ4 filter 32004: a 12-byte header, then blocks of
// [32-bit big-endian length C][C bytes], a block stored raw when LZ4 does
// not make it smaller (C equal to its decoded size).
type lz4Codec struct {
	blockSize int // block size in bytes; 0 stands for the default
	c         lz4.Compressor
}

// newLZ4 returns the LZ4 filter codec for a block size in bytes, 0 for the
// filter's default of 1 GiB.
func newLZ4(blockSize int) (*lz4Codec, error) {
	if blockSize < 0 || blockSize > maxLZ4Block {
		return nil, fmt.Errorf("compress: lz4 block size %d outside 0..%d", blockSize, maxLZ4Block)
	}
	return &lz4Codec{blockSize: blockSize}, nil
}

// Filters returns the LZ4 filter with its block size in cd_values slot 0.
// The filter is marked optional so that a libhdf5 that cannot load the
// plugin at write time still creates the dataset.
func (c *lz4Codec) Filters() []Filter {
	return []Filter{{ID: FilterLZ4, Name: "lz4", Optional: true, Values: []uint32{uint32(c.blockSize)}}}
}

// block returns the block size used for an n-byte chunk: the configured or
// default size clamped to the chunk size, as the filter does.
func (c *lz4Codec) block(n int) int {
	b := c.blockSize
	if b == 0 {
		b = defaultLZ4Block
	}
	return min(b, n)
}

// Bound returns the largest stored size of an n-byte chunk, every block
// stored raw, plus the room LZ4 needs to try a block before giving up.
func (c *lz4Codec) Bound(n int) int {
	b := c.block(n)
	if b == 0 {
		return headerLen
	}
	return headerLen + n + 4*((n+b-1)/b) + lz4.CompressBlockBound(b) - b
}

// Encode appends the stored form of the chunk src to dst.
func (c *lz4Codec) Encode(dst, src []byte) ([]byte, error) {
	if len(src) > math.MaxInt32 {
		return dst, fmt.Errorf("lz4: chunk of %d bytes exceeds the filter's 2 GiB limit", len(src))
	}
	start := len(dst)
	block := c.block(len(src))
	dst = slices.Grow(dst, c.Bound(len(src)))
	dst = binary.BigEndian.AppendUint64(dst, uint64(len(src)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(block))
	for i, off := 0, 0; off < len(src); i, off = i+1, off+block {
		blk := src[off:min(off+block, len(src))]
		at := len(dst)
		var err error
		dst, err = appendLZ4(&c.c, append(dst, 0, 0, 0, 0), blk)
		if err != nil {
			return dst[:start], fmt.Errorf("lz4 block %d at offset %d: %w", i, off, err)
		}
		if len(dst)-at-4 >= len(blk) { // no gain: store the block raw
			dst = append(dst[:at+4], blk...)
		}
		binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	}
	return dst, nil
}

// Decode appends the chunk that the stored form src decodes to.
func (c *lz4Codec) Decode(dst, src []byte) ([]byte, error) {
	total, block, err := readHeader(src)
	if err != nil {
		return dst, fmt.Errorf("lz4: %w", err)
	}
	if total > math.MaxInt32 {
		return dst, fmt.Errorf("lz4: decoded size %d exceeds the filter's 2 GiB limit", total)
	}
	if int32(block) <= 0 && total > 0 {
		return dst, fmt.Errorf("lz4: block size %d is not positive", int32(block))
	}
	block = min(block, total)
	body := src[headerLen:]
	if err := checkLZ4(body, total, block); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = slices.Grow(dst, total)[:start+total]
	out := dst[start:]
	in := 0
	for i, o := 0, 0; o < total; i, o = i+1, o+block {
		blk := out[o:min(o+block, total)]
		n := int(binary.BigEndian.Uint32(body[in:]))
		data := body[in+4 : in+4+n]
		if n == len(blk) {
			copy(blk, data)
		} else if err := uncompressLZ4(blk, data); err != nil {
			return dst[:start], fmt.Errorf("lz4 block %d at offset %d: %w", i, headerLen+in, err)
		}
		in += 4 + n
	}
	return dst, nil
}

// checkLZ4 walks the block lengths of a chunk body before anything is
// decoded, so that a malformed chunk is rejected before its claimed size is
// allocated.
func checkLZ4(body []byte, total, block int) error {
	in := 0
	for i, o := 0, 0; o < total; i, o = i+1, o+block {
		size := min(block, total-o)
		if len(body)-in < 4 {
			return fmt.Errorf("lz4 block %d at offset %d: truncated length prefix", i, headerLen+in)
		}
		n := int(int32(binary.BigEndian.Uint32(body[in:])))
		if n < 0 || n > len(body)-in-4 {
			return fmt.Errorf("lz4 block %d at offset %d: length %d runs past the end of the %d-byte chunk",
				i, headerLen+in, n, headerLen+len(body))
		}
		if n != size && lz4MaxDecoded(n) < size {
			return fmt.Errorf("lz4 block %d at offset %d: %d bytes cannot decode to a %d-byte block",
				i, headerLen+in, n, size)
		}
		in += 4 + n
	}
	if in != len(body) {
		return fmt.Errorf("lz4: %d bytes after the last block at offset %d", len(body)-in, headerLen+in)
	}
	return nil
}
