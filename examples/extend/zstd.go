package extend

import (
	"errors"
	"fmt"

	"github.com/klauspost/compress/zstd"

	"h5ingest/compress"
)

// FilterZstd is the HDF5 filter id of plain Zstandard, registered with
// The HDF Group and read by hdf5plugin.Zstd: each chunk one zstd frame,
// cd_values[0] the level.
const FilterZstd = 32015

// Zstd levels: hdf5plugin's default, and the levels the filter takes.
const (
	DefaultZstdLevel = 3
	MinZstdLevel     = -7 // zstd's fast levels, as zstd -1 to --fast=7
	MaxZstdLevel     = 22
)

// maxZstdChunk bounds what a chunk may decode to: HDF5 chunks stay below
// 4 GiB, and a damaged frame must not claim more.
const maxZstdChunk = 1<<32 - 1

// Zstd is a codec of plain zstd chunks (filter 32015), a codec whose
// filter h5ingest itself does not know: it shows what a codec of a new
// filter registers so that replay writes its files and verify, inspect
// and the image reader read them back (ReadZstd).
type Zstd struct {
	level int
	enc   *zstd.Encoder
	dec   *zstd.Decoder
}

// NewZstd returns a zstd codec at level (0: DefaultZstdLevel).
func NewZstd(level int) (*Zstd, error) {
	if level == 0 {
		level = DefaultZstdLevel
	}
	if level < MinZstdLevel || level > MaxZstdLevel {
		return nil, fmt.Errorf("zstd: level %d outside %d to %d", level, MinZstdLevel, MaxZstdLevel)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(level)),
		zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
	if err != nil {
		return nil, fmt.Errorf("zstd: encoder: %w", err)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxZstdChunk))
	if err != nil {
		return nil, fmt.Errorf("zstd: decoder: %w", err)
	}
	return &Zstd{level: level, enc: enc, dec: dec}, nil
}

// ReadZstd returns the codec of a dataset whose filter pipeline is
// filters, plain zstd alone, from its stored level: the entry's Read.
func ReadZstd(filters []compress.Filter, _ int) (compress.Codec, error) {
	if len(filters) != 1 || filters[0].ID != FilterZstd {
		return nil, errors.New("zstd: want the zstd filter alone")
	}
	level := DefaultZstdLevel
	if v := filters[0].Values; len(v) > 0 {
		level = int(int32(v[0]))
	}
	return NewZstd(level)
}

// Encode implements compress.Codec: one zstd frame.
func (z *Zstd) Encode(dst, src []byte) ([]byte, error) { return z.enc.EncodeAll(src, dst), nil }

// Decode implements compress.Codec.
func (z *Zstd) Decode(dst, src []byte) ([]byte, error) {
	out, err := z.dec.DecodeAll(src, dst)
	if err != nil {
		return dst, fmt.Errorf("zstd: %w", err)
	}
	return out, nil
}

// Filters implements compress.Codec: the zstd filter with its level,
// optional, as a plugin's filter must be (libhdf5 writes it without the
// plugin loaded).
func (z *Zstd) Filters() []compress.Filter {
	return []compress.Filter{{ID: FilterZstd, Name: "zstd", Optional: true, Values: []uint32{uint32(int32(z.level))}}}
}

// Bound implements compress.Codec: zstd's compress bound
// (ZSTD_COMPRESSBOUND) plus room for the frame header.
func (z *Zstd) Bound(n int) int {
	extra := 0
	if n < 128<<10 {
		extra = (128<<10 - n) >> 11
	}
	return n + n>>8 + extra + 32
}
