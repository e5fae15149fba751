package compress

import (
	"fmt"
	"slices"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// lz4Blocks compresses bitshuffle blocks as raw LZ4 blocks.
type lz4Blocks struct {
	f fastLZ4
}

// maxFastLZ4 is the largest block fastLZ4 takes; larger ones (only ever
// from a block size set far above the filter's default) go to pierrec/lz4.
const maxFastLZ4 = 1 << 30

// compress appends one LZ4 block. Given CompressBlockBound bytes of room,
// the compressor always produces a block, literal-only when the data does
// not compress, which is what the bitshuffle filter needs: it has no raw
// fallback.
func (b *lz4Blocks) compress(dst, src []byte) ([]byte, error) {
	if len(src) > maxFastLZ4 {
		var c lz4.Compressor
		return appendLZ4(&c, dst, src)
	}
	dst = slices.Grow(dst, lz4.CompressBlockBound(len(src)))
	return b.f.compress(dst, src), nil
}

// appendLZ4 appends the LZ4 block of src, compressed with c, to dst.
func appendLZ4(c *lz4.Compressor, dst, src []byte) ([]byte, error) {
	bound := lz4.CompressBlockBound(len(src))
	dst = slices.Grow(dst, bound)
	n, err := c.CompressBlock(src, dst[len(dst):len(dst)+bound])
	if err != nil {
		return dst, fmt.Errorf("lz4: %w", err)
	}
	if n == 0 && len(src) > 0 {
		return dst, fmt.Errorf("lz4: no block produced for %d bytes", len(src))
	}
	return dst[:len(dst)+n], nil
}

// decompress decodes one LZ4 block into exactly len(dst) bytes.
func (b *lz4Blocks) decompress(dst, src []byte) error {
	return uncompressLZ4(dst, src)
}

// uncompressLZ4 decodes the LZ4 block src into exactly len(dst) bytes.
func uncompressLZ4(dst, src []byte) error {
	n, err := lz4.UncompressBlock(src, dst)
	if err != nil {
		return fmt.Errorf("lz4: %w", err)
	}
	if n != len(dst) {
		return fmt.Errorf("lz4: block decodes to %d bytes, want %d", n, len(dst))
	}
	return nil
}

func (b *lz4Blocks) bound(n int) int { return lz4.CompressBlockBound(n) }

// maxDecoded bounds LZ4's expansion: each byte of a match length
// extension adds at most 255 bytes of output.
func (b *lz4Blocks) maxDecoded(n int) int { return lz4MaxDecoded(n) }

func lz4MaxDecoded(n int) int { return 255*n + 64 }

// zstdBlocks compresses bitshuffle blocks as zstd frames, one per block,
// with an encoder and a decoder kept for the codec's lifetime. Both run
// synchronously on the caller's goroutine.
type zstdBlocks struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

// newZstdBlocks returns a zstd block compressor for a zstd level.
func newZstdBlocks(level int) (*zstdBlocks, error) {
	if level > MaxZstdLevel {
		return nil, fmt.Errorf("compress: zstd level %d above %d", level, MaxZstdLevel)
	}
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(level)),
		zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false),
		zstd.WithLowerEncoderMem(true))
	if err != nil {
		return nil, fmt.Errorf("compress: zstd encoder: %w", err)
	}
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecodeAllCapLimit(true))
	if err != nil {
		return nil, fmt.Errorf("compress: zstd decoder: %w", err)
	}
	return &zstdBlocks{enc: enc, dec: dec}, nil
}

// compress appends one complete zstd frame.
func (b *zstdBlocks) compress(dst, src []byte) ([]byte, error) {
	return b.enc.EncodeAll(src, dst), nil
}

// decompress decodes the zstd frames in src into exactly len(dst) bytes;
// the decoder is held to dst's length so that it never allocates more.
func (b *zstdBlocks) decompress(dst, src []byte) error {
	out, err := b.dec.DecodeAll(src, dst[:0:len(dst)])
	if err != nil {
		return fmt.Errorf("zstd: %w", err)
	}
	if len(out) != len(dst) {
		return fmt.Errorf("zstd: block decodes to %d bytes, want %d", len(out), len(dst))
	}
	return nil
}

// bound is zstd's compress bound (ZSTD_COMPRESSBOUND) plus room for the
// frame header.
func (b *zstdBlocks) bound(n int) int {
	extra := 0
	if n < 128<<10 {
		extra = (128<<10 - n) >> 11
	}
	return n + n>>8 + extra + 32
}

// maxDecoded bounds zstd's expansion: a block of at most 128 KiB takes at
// least 3 bytes of header and one byte of content.
func (b *zstdBlocks) maxDecoded(n int) int { return n * (128 << 10) / 4 }
