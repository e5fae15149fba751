// Package compress implements the chunk codecs of the HDF5 output: each
// encodes a chunk into exactly the bytes that the registered HDF5 filter
// plugin would store, so any reader with that plugin decompresses it, and
// decodes such chunks back (for verify and tests).
//
// The LZ4 blocks of bitshuffle-LZ4 (bslz4) are parsed as the C library's
// LZ4_compress_default parses them, and for the filter's blocks (under 64
// KiB) are the very bytes it makes: a file is never larger than the C
// filter's. A parse that strides faster through noisy bit planes
// compressed a tomography frame's blocks about twice as fast but stored
// about 7% more (go test ./compress -bench LZ4Blocks: ref against fast);
// size won, as a scan's files outlive its CPU time. Where CPU time
// matters more, bslz4's negative levels are the C library's
// accelerations (LZ4_compress_fast), again byte for byte: -8 stored about
// 2.7% more than level 0 on the same frame, in 0.4 to 0.8 of its time
// (fast-accel8 against fast in the benchmark, on a loaded machine).
//
// A Codec is made for one element size and is used by one goroutine at a
// time: the pipeline gives each compression worker its own.
//
// Package compress is part of h5ingest's facility API; see docs/extending.md.
package compress

import (
	"fmt"
	"strings"
)

// Filter is one stage of an HDF5 filter pipeline as a dataset declares it.
type Filter struct {
	ID       int      // HDF5 filter id, e.g. 32008 for bitshuffle
	Name     string   // the filter's name, for messages
	Optional bool     // declared H5Z_FLAG_OPTIONAL rather than mandatory
	Values   []uint32 // cd_values exactly as stored in the file
}

// String names the filter with its id and stored values, such as
// "bitshuffle (filter 32008: 0 4 4 0 2)"; a filter without a name is
// named by FilterName.
func (f Filter) String() string {
	vals := make([]string, len(f.Values))
	for i, v := range f.Values {
		vals[i] = fmt.Sprint(v)
	}
	name := f.Name
	if name == "" {
		name = FilterName(f.ID)
	}
	if len(vals) == 0 {
		return fmt.Sprintf("%s (filter %d)", name, f.ID)
	}
	return fmt.Sprintf("%s (filter %d: %s)", name, f.ID, strings.Join(vals, " "))
}

// Codec compresses and decompresses whole chunks.
type Codec interface {
	// Encode appends the stored form of the chunk src to dst and returns
	// the extended buffer. len(src) must be a multiple of the element size.
	Encode(dst, src []byte) ([]byte, error)
	// Decode appends the chunk that the stored form src decodes to, and
	// returns the extended buffer.
	Decode(dst, src []byte) ([]byte, error)
	// Filters returns the filter pipeline a dataset holding this codec's
	// chunks declares, in pipeline order.
	Filters() []Filter
	// Bound returns the largest stored size of a chunk of n bytes, so that
	// callers can size pooled buffers once.
	Bound(n int) int
}

// Preshuffled is implemented by the codecs whose first stage is the
// bitshuffle transpose: bslz4 and bszstd. EncodeShuffled takes a chunk whose
// blocks are already transposed, as bitshuffle.AppendShuffle transposes
// them with BlockElems elements a block, and appends exactly the bytes
// Encode appends for the chunk before the transpose. A decode backend that
// transposes the image itself (gpu.Job.ShuffleBlock) so leaves only the
// block compression to the CPU, and the files do not change.
type Preshuffled interface {
	Codec
	// BlockElems returns the bitshuffle block size in elements.
	BlockElems() int
	// EncodeShuffled appends the stored form of the chunk whose transposed
	// form is shuffled to dst and returns the extended buffer.
	EncodeShuffled(dst, shuffled []byte) ([]byte, error)
}

// BlockEncoder is implemented by the bitshuffle codecs. A chunk's stored
// form is its header followed by its blocks, each transposed and
// compressed on its own: runs of whole blocks encoded apart, by several
// goroutines each with its own codec, and put after the header in order
// are exactly the bytes Encode appends. A decode backend so compresses
// each band of an image on the core that decoded it, while the band is in
// its cache (gpu.Job.Compress).
type BlockEncoder interface {
	Codec
	// BlockElems returns the bitshuffle block size in elements.
	BlockElems() int
	// AppendHeader appends the header of a chunk of n bytes to dst.
	AppendHeader(dst []byte, n int) []byte
	// AppendBlocks appends the stored form of src, blocks of a chunk
	// starting at one of its blocks and holding whole blocks or running
	// to the chunk's end, to dst. It needs at most Bound(len(src)) minus
	// the header's bytes of room; with that room it appends in place.
	AppendBlocks(dst, src []byte) ([]byte, error)
}
