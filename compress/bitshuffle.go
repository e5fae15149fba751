package compress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"h5ingest/compress/bitshuffle"
)

// headerLen is the size of the header that the bitshuffle and LZ4 filters
// put in front of a chunk: the decoded size as a 64-bit big-endian integer
// and the block size in bytes as a 32-bit big-endian integer.
const headerLen = 12

// blockCompressor compresses the blocks of a bitshuffle chunk. There is one
// per compression flag; each keeps its own state and is used by one
// goroutine at a time.
type blockCompressor interface {
	// compress appends one compressed block, decodable on its own, to dst.
	compress(dst, src []byte) ([]byte, error)
	// decompress decodes src into exactly len(dst) bytes.
	decompress(dst, src []byte) error
	// bound returns the largest compressed size of an n-byte block.
	bound(n int) int
	// maxDecoded returns the most bytes n compressed bytes can decode to.
	maxDecoded(n int) int
}

// bitshuffleCodec is filter 32008 with LZ4 or zstd compression: each block
// bit-transposed, then compressed with a 4-byte big-endian length in front.
type bitshuffleCodec struct {
	name       string
	elemSize   int
	blockElems int // block size in elements; 0 stands for the default
	flag       uint32
	level      int // zstd level, stored in cd_values slot 5
	blocks     blockCompressor
	scratch    []byte // one transposed block
}

// newBitshuffleLZ4 returns the bslz4 codec. blockElems is 0 or a multiple
// of 8.
func newBitshuffleLZ4(elemSize, blockElems int) *bitshuffleCodec {
	return &bitshuffleCodec{
		name: "bslz4", elemSize: elemSize, blockElems: blockElems,
		flag: bitshuffleLZ4, blocks: new(lz4Blocks),
	}
}

// newBitshuffleZstd returns the bszstd codec. blockElems is 0 or a multiple
// of 8; level 0 means DefaultZstdLevel.
func newBitshuffleZstd(elemSize, blockElems, level int) (*bitshuffleCodec, error) {
	if level == 0 {
		level = DefaultZstdLevel
	}
	blocks, err := newZstdBlocks(level)
	if err != nil {
		return nil, err
	}
	return &bitshuffleCodec{
		name: "bszstd", elemSize: elemSize, blockElems: blockElems,
		flag: bitshuffleZstd, level: level, blocks: blocks,
	}, nil
}

// Filters returns the bitshuffle filter with its cd_values as the plugin
// stores them: major, minor, element size, block size, compression flag and,
// for zstd, the level. The filter is marked optional so that a libhdf5 that
// cannot load the plugin at write time still creates the dataset; its
// cd_values are then stored exactly as given.
func (c *bitshuffleCodec) Filters() []Filter {
	v := []uint32{BitshuffleMajor, BitshuffleMinor, uint32(c.elemSize), uint32(c.blockElems), c.flag}
	if c.flag == bitshuffleZstd {
		v = append(v, uint32(int32(c.level)))
	}
	return []Filter{{ID: FilterBitshuffle, Name: "bitshuffle", Optional: true, Values: v}}
}

// block returns the block size in elements.
func (c *bitshuffleCodec) block() int {
	if c.blockElems == 0 {
		return bitshuffle.DefaultBlockSize(c.elemSize)
	}
	return c.blockElems
}

// Bound returns the largest stored size of an n-byte chunk.
func (c *bitshuffleCodec) Bound(n int) int {
	full, partial, rest := bitshuffle.Split(n/c.elemSize, c.block())
	size := headerLen + full*(4+c.blocks.bound(c.block()*c.elemSize)) + rest*c.elemSize
	if partial > 0 {
		size += 4 + c.blocks.bound(partial*c.elemSize)
	}
	return size
}

// BlockElems returns the block size in elements.
func (c *bitshuffleCodec) BlockElems() int { return c.block() }

// Encode appends the stored form of the chunk src to dst.
func (c *bitshuffleCodec) Encode(dst, src []byte) ([]byte, error) {
	return c.encode(dst, src, false)
}

// EncodeShuffled appends the stored form of the chunk that shuffled is the
// transposed form of, without transposing it again.
func (c *bitshuffleCodec) EncodeShuffled(dst, shuffled []byte) ([]byte, error) {
	return c.encode(dst, shuffled, true)
}

// AppendHeader appends the 12-byte header of a chunk of n bytes.
func (c *bitshuffleCodec) AppendHeader(dst []byte, n int) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	return binary.BigEndian.AppendUint32(dst, uint32(c.block()*c.elemSize))
}

// AppendBlocks appends the stored blocks of src, a run of a chunk's
// blocks, to dst, as Encode appends them after the header: each block
// transposed and compressed, with its length in front, and the chunk's
// last partial block and leftover bytes where the run ends the chunk. It
// needs at most Bound(len(src)) - 12 bytes of room.
func (c *bitshuffleCodec) AppendBlocks(dst, src []byte) ([]byte, error) {
	if err := c.checkChunk(src); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = slices.Grow(dst, c.Bound(len(src))-headerLen)
	dst, err := c.appendBlocks(dst, src, false)
	if err != nil {
		return dst[:start], err
	}
	return dst, nil
}

// checkChunk reports a chunk that is no whole number of elements or that
// HDF5 cannot store.
func (c *bitshuffleCodec) checkChunk(src []byte) error {
	if len(src)%c.elemSize != 0 {
		return fmt.Errorf("%s: chunk of %d bytes is not a whole number of %d-byte elements", c.name, len(src), c.elemSize)
	}
	if len(src) > maxChunk {
		return fmt.Errorf("%s: chunk of %d bytes exceeds the 4 GiB HDF5 limit", c.name, len(src))
	}
	return nil
}

// encode appends the stored form of a chunk given as src, already
// transposed block by block when shuffled is set.
func (c *bitshuffleCodec) encode(dst, src []byte, shuffled bool) ([]byte, error) {
	if err := c.checkChunk(src); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = slices.Grow(dst, c.Bound(len(src)))
	dst = c.AppendHeader(dst, len(src))
	dst, err := c.appendBlocks(dst, src, shuffled)
	if err != nil {
		return dst[:start], err
	}
	return dst, nil
}

// appendBlocks appends the compressed blocks of src, transposing each
// first unless shuffled is set, then src's leftover bytes.
func (c *bitshuffleCodec) appendBlocks(dst, src []byte, shuffled bool) ([]byte, error) {
	es := c.elemSize
	blockBytes := c.block() * es
	full, partial, _ := bitshuffle.Split(len(src)/es, c.block())
	if !shuffled {
		c.scratch = growLen(c.scratch, blockBytes)
	}
	off := 0
	for i := range full + min(partial, 1) {
		size := blockBytes
		if i == full {
			size = partial * es
		}
		blk := src[off : off+size]
		if !shuffled {
			blk = c.scratch[:size]
			bitshuffle.ShuffleBlock(blk, src[off:off+size], es)
		}
		at := len(dst)
		var err error
		dst, err = c.blocks.compress(append(dst, 0, 0, 0, 0), blk)
		if err != nil {
			return dst, fmt.Errorf("%s block %d at offset %d: %w", c.name, i, off, err)
		}
		binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
		off += size
	}
	return append(dst, src[off:]...), nil
}

// Decode appends the chunk that the stored form src decodes to.
func (c *bitshuffleCodec) Decode(dst, src []byte) ([]byte, error) {
	es := c.elemSize
	total, blockBytes, err := readHeader(src)
	if err != nil {
		return dst, fmt.Errorf("%s: %w", c.name, err)
	}
	if total%es != 0 {
		return dst, fmt.Errorf("%s: decoded size %d is not a whole number of %d-byte elements", c.name, total, es)
	}
	if blockBytes%es != 0 || blockBytes/es%8 != 0 {
		return dst, fmt.Errorf("%s: block size %d bytes is not a multiple of 8 %d-byte elements", c.name, blockBytes, es)
	}
	blockElems := blockBytes / es
	if blockElems == 0 { // as the filter reads it: the default block size
		blockElems = bitshuffle.DefaultBlockSize(es)
		blockBytes = blockElems * es
	}
	full, partial, rest := bitshuffle.Split(total/es, blockElems)
	body := src[headerLen:]
	if err := c.check(body, full, partial, rest, blockBytes); err != nil {
		return dst, err
	}
	start := len(dst)
	dst = slices.Grow(dst, total)[:start+total]
	out := dst[start:]
	if full > 0 {
		c.scratch = growLen(c.scratch, blockBytes)
	} else {
		c.scratch = growLen(c.scratch, partial*es)
	}
	in, o := 0, 0
	for i := range full + min(partial, 1) {
		size := blockBytes
		if i == full {
			size = partial * es
		}
		n := int(binary.BigEndian.Uint32(body[in:]))
		blk := c.scratch[:size]
		if err := c.blocks.decompress(blk, body[in+4:in+4+n]); err != nil {
			return dst[:start], fmt.Errorf("%s block %d at offset %d: %w", c.name, i, headerLen+in, err)
		}
		bitshuffle.UnshuffleBlock(out[o:o+size], blk, es)
		in += 4 + n
		o += size
	}
	copy(out[o:], body[in:])
	return dst, nil
}

// check walks the block lengths of a chunk body before anything is
// decoded, so that a malformed chunk is rejected before its claimed size is
// allocated.
func (c *bitshuffleCodec) check(body []byte, full, partial, rest, blockBytes int) error {
	in := 0
	for i := range full + min(partial, 1) {
		size := blockBytes
		if i == full {
			size = partial * c.elemSize
		}
		if len(body)-in < 4 {
			return fmt.Errorf("%s block %d at offset %d: truncated length prefix", c.name, i, headerLen+in)
		}
		n := int(binary.BigEndian.Uint32(body[in:]))
		if n > len(body)-in-4 {
			return fmt.Errorf("%s block %d at offset %d: length %d runs past the end of the %d-byte chunk",
				c.name, i, headerLen+in, n, headerLen+len(body))
		}
		if c.blocks.maxDecoded(n) < size {
			return fmt.Errorf("%s block %d at offset %d: %d bytes cannot decode to a %d-byte block",
				c.name, i, headerLen+in, n, size)
		}
		in += 4 + n
	}
	if left := len(body) - in; left != rest*c.elemSize {
		return fmt.Errorf("%s: %d bytes after the last block at offset %d, want %d leftover bytes",
			c.name, left, headerLen+in, rest*c.elemSize)
	}
	return nil
}

// errShortHeader reports a chunk shorter than its header.
var errShortHeader = errors.New("chunk shorter than its 12-byte header")

// readHeader reads the 12-byte header of a bitshuffle or LZ4 filter chunk,
// checking that the decoded size is one HDF5 allows.
func readHeader(src []byte) (total, blockBytes int, err error) {
	if len(src) < headerLen {
		return 0, 0, fmt.Errorf("%w: %d bytes", errShortHeader, len(src))
	}
	t := binary.BigEndian.Uint64(src)
	if t > maxChunk {
		return 0, 0, fmt.Errorf("header decoded size %d exceeds the 4 GiB HDF5 chunk limit", t)
	}
	return int(t), int(binary.BigEndian.Uint32(src[8:])), nil
}

// growLen returns b with length n, reusing its storage when it is large
// enough.
func growLen(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
