package compress

import (
	"fmt"
	"math"
)

// HDF5 filter ids of the codecs' pipelines.
const (
	FilterDeflate    = 1     // HDF5's built-in deflate (zlib stream)
	FilterShuffle    = 2     // HDF5's built-in byte shuffle
	FilterLZ4        = 32004 // HDF5 LZ4 filter plugin
	FilterBitshuffle = 32008 // bitshuffle filter plugin
)

// FilterName returns the name of a filter id of the codecs' pipelines, for
// people; other ids are named by number.
func FilterName(id int) string {
	switch id {
	case FilterDeflate:
		return "deflate"
	case FilterShuffle:
		return "shuffle"
	case FilterLZ4:
		return "lz4"
	case FilterBitshuffle:
		return "bitshuffle"
	}
	return fmt.Sprintf("filter %d", id)
}

// BitshuffleMajor and BitshuffleMinor are the bitshuffle version this
// package writes into cd_values slots 0 and 1. Readers ignore both slots.
const (
	BitshuffleMajor = 0
	BitshuffleMinor = 5
)

// Default levels, used when New is given level 0, and the highest levels.
const (
	DefaultZstdLevel    = 3  // the bitshuffle filter's and hdf5plugin's default
	DefaultDeflateLevel = 6  // zlib's default
	MaxZstdLevel        = 22 // the highest zstd level the bitshuffle filter accepts
	MaxDeflateLevel     = 9
	// MaxLZ4Acceleration is the highest LZ4 acceleration bslz4 takes (as
	// level -MaxLZ4Acceleration); beyond it a block is mostly literals.
	MaxLZ4Acceleration = 64
)

// Bitshuffle compression flags, cd_values slot 4.
const (
	bitshuffleNoCompression = 0
	bitshuffleLZ4           = 2
	bitshuffleZstd          = 3
)

// maxChunk bounds a chunk's decoded size: HDF5 chunks cannot reach 4 GiB.
const maxChunk = 1<<32 - 1

// names lists the codecs New knows, in the order of the output spec.
var names = []string{"bslz4", "bszstd", "lz4", "deflate", "none"}

// Names returns the names that New accepts.
func Names() []string {
	return append([]string(nil), names...)
}

// New returns a codec for chunks of elemSize-byte elements. name is one of
// Names(). level is the zstd level for bszstd (at most 22, negative levels
// allowed), the zlib level for deflate (1 to 9), or for bslz4 minus the
// LZ4 acceleration (-1 to -MaxLZ4Acceleration: the C library's
// LZ4_compress_fast, faster and larger the higher); 0 selects the
// default, and the other codecs take no level.
func New(name string, elemSize, level int) (Codec, error) {
	if elemSize <= 0 || elemSize > math.MaxUint16 {
		return nil, fmt.Errorf("compress: %s: element size %d out of range", name, elemSize)
	}
	switch name {
	case "bslz4":
		if level > 0 || level < -MaxLZ4Acceleration {
			return nil, fmt.Errorf("compress: bslz4 level %d: want 0 (the C filter's parse) or -1 to -%d (LZ4 acceleration)", level, MaxLZ4Acceleration)
		}
		c := newBitshuffleLZ4(elemSize, 0)
		c.blocks.(*lz4Blocks).f.accel = -level
		return c, nil
	case "bszstd":
		return newBitshuffleZstd(elemSize, 0, level)
	case "lz4":
		if level != 0 {
			return nil, fmt.Errorf("compress: lz4 takes no level, got %d", level)
		}
		return newLZ4(0)
	case "deflate":
		return newDeflate(elemSize, level)
	case "none":
		if level != 0 {
			return nil, fmt.Errorf("compress: none takes no level, got %d", level)
		}
		return none{}, nil
	}
	return nil, fmt.Errorf("compress: unknown codec %q (known: %v)", name, names)
}

// FromFilters returns a codec that decodes the chunks of a dataset whose
// filter pipeline is filters (as read back from a file) and whose elements
// are elemSize bytes, and encodes chunks with the same settings. It
// recognises the pipelines that the codecs of New declare, with any block
// size and level.
func FromFilters(filters []Filter, elemSize int) (Codec, error) {
	if elemSize <= 0 || elemSize > math.MaxUint16 {
		return nil, fmt.Errorf("compress: element size %d out of range", elemSize)
	}
	switch {
	case len(filters) == 0:
		return none{}, nil
	case len(filters) == 1 && filters[0].ID == FilterBitshuffle:
		return bitshuffleFromValues(filters[0].Values, elemSize)
	case len(filters) == 1 && filters[0].ID == FilterLZ4:
		return lz4FromValues(filters[0].Values)
	case len(filters) == 2 && filters[0].ID == FilterShuffle && filters[1].ID == FilterDeflate:
		return deflateFromValues(filters[0].Values, filters[1].Values, elemSize)
	}
	ids := make([]int, len(filters))
	for i, f := range filters {
		ids[i] = f.ID
	}
	return nil, fmt.Errorf("compress: unsupported filter pipeline %v", ids)
}

// ReaderOf returns the reader of the files of the codec name of New: a
// FromFilters that accepts only that codec's pipelines, so that a reader
// of bslz4's files does not take bszstd's, whose filter is the same
// (bitshuffle) with another compression in its values.
func ReaderOf(name string) func(filters []Filter, elemSize int) (Codec, error) {
	return func(filters []Filter, elemSize int) (Codec, error) {
		c, err := FromFilters(filters, elemSize)
		if err != nil {
			return nil, err
		}
		if n := nameOf(c); n != name {
			return nil, fmt.Errorf("compress: the filter pipeline is %s's, not %s's", n, name)
		}
		return c, nil
	}
}

// nameOf returns the name in New of a codec of this package.
func nameOf(c Codec) string {
	switch c := c.(type) {
	case *bitshuffleCodec:
		return c.name
	case *lz4Codec:
		return "lz4"
	case *deflateCodec:
		return "deflate"
	case none:
		return "none"
	}
	return ""
}

// bitshuffleFromValues builds a bitshuffle codec from the filter's stored
// cd_values, read the way the filter reads them: slot 2 element size, slot
// 3 block size, slot 4 compression, slot 5 zstd level.
func bitshuffleFromValues(v []uint32, elemSize int) (Codec, error) {
	if len(v) < 3 {
		return nil, fmt.Errorf("compress: bitshuffle filter has %d cd_values, needs at least 3", len(v))
	}
	if int(v[2]) != elemSize {
		return nil, fmt.Errorf("compress: bitshuffle filter element size %d, dataset element size %d", v[2], elemSize)
	}
	block, flag := 0, bitshuffleNoCompression
	if len(v) > 3 {
		block = int(v[3])
		if block%8 != 0 || block > math.MaxInt32/elemSize {
			return nil, fmt.Errorf("compress: bitshuffle block size %d elements is not a multiple of 8", block)
		}
	}
	if len(v) > 4 {
		flag = int(v[4])
	}
	switch flag {
	case bitshuffleLZ4:
		return newBitshuffleLZ4(elemSize, block), nil
	case bitshuffleZstd:
		level := DefaultZstdLevel
		if len(v) > 5 {
			level = int(int32(v[5]))
		}
		return newBitshuffleZstd(elemSize, block, level)
	}
	return nil, fmt.Errorf("compress: bitshuffle without compression (flag %d) is not supported", flag)
}

// lz4FromValues builds an LZ4 filter codec from the filter's cd_values.
func lz4FromValues(v []uint32) (Codec, error) {
	block := 0
	if len(v) > 0 {
		block = int(v[0])
	}
	return newLZ4(block)
}

// deflateFromValues builds the shuffle+deflate codec from the two filters'
// cd_values.
func deflateFromValues(shuffle, deflate []uint32, elemSize int) (Codec, error) {
	if len(shuffle) > 0 && int(shuffle[0]) != elemSize {
		return nil, fmt.Errorf("compress: shuffle filter element size %d, dataset element size %d", shuffle[0], elemSize)
	}
	level := DefaultDeflateLevel
	if len(deflate) > 0 {
		level = int(deflate[0])
	}
	if level == 0 {
		return nil, fmt.Errorf("compress: deflate level 0 (stored) is not supported")
	}
	return newDeflate(elemSize, level)
}
