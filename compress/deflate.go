package compress

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"slices"
)

// deflateCodec is HDF5's shuffle filter (bytes regrouped by their position
// in the element) followed by the deflate filter (a zlib stream).
type deflateCodec struct {
	elemSize int
	level    int
	zw       *zlib.Writer
	zr       io.ReadCloser // a zlib reader, reset for each chunk
	in       bytes.Reader
	out      appendWriter
	scratch  []byte // the byte-shuffled chunk
}

// newDeflate returns the shuffle+deflate codec; level 0 means
// DefaultDeflateLevel.
func newDeflate(elemSize, level int) (*deflateCodec, error) {
	if level == 0 {
		level = DefaultDeflateLevel
	}
	if level < 1 || level > MaxDeflateLevel {
		return nil, fmt.Errorf("compress: deflate level %d outside 1..%d", level, MaxDeflateLevel)
	}
	c := &deflateCodec{elemSize: elemSize, level: level}
	var err error
	if c.zw, err = zlib.NewWriterLevel(&c.out, level); err != nil {
		return nil, fmt.Errorf("compress: zlib writer: %w", err)
	}
	return c, nil
}

// Filters returns the shuffle filter (cd_values: element size) and the
// deflate filter (cd_values: level), both built into libhdf5.
func (c *deflateCodec) Filters() []Filter {
	return []Filter{
		{ID: FilterShuffle, Name: "shuffle", Values: []uint32{uint32(c.elemSize)}},
		{ID: FilterDeflate, Name: "deflate", Values: []uint32{uint32(c.level)}},
	}
}

// Bound returns the largest stored size of an n-byte chunk: deflate's
// stored blocks cost 5 bytes per 16 KiB at worst, plus the zlib header and
// checksum.
func (c *deflateCodec) Bound(n int) int {
	return n + 5*(n/16384+1) + 6 + 64
}

// Encode appends the stored form of the chunk src to dst.
func (c *deflateCodec) Encode(dst, src []byte) ([]byte, error) {
	if len(src)%c.elemSize != 0 {
		return dst, fmt.Errorf("deflate: chunk of %d bytes is not a whole number of %d-byte elements", len(src), c.elemSize)
	}
	c.scratch = growLen(c.scratch, len(src))
	byteShuffle(c.scratch, src, c.elemSize)
	c.out.b = dst
	c.zw.Reset(&c.out)
	_, err := c.zw.Write(c.scratch)
	if err == nil {
		err = c.zw.Close()
	}
	out := c.out.b
	c.out.b = nil
	if err != nil {
		return dst, fmt.Errorf("deflate: %w", err)
	}
	return out, nil
}

// Decode appends the chunk that the stored form src decodes to.
func (c *deflateCodec) Decode(dst, src []byte) ([]byte, error) {
	c.in.Reset(src)
	if err := c.resetReader(); err != nil {
		return dst, fmt.Errorf("deflate: %w", err)
	}
	n, err := c.inflate()
	if err != nil {
		return dst, fmt.Errorf("deflate at output offset %d: %w", n, err)
	}
	if c.in.Len() != 0 {
		return dst, fmt.Errorf("deflate: %d bytes after the end of the zlib stream", c.in.Len())
	}
	if n%c.elemSize != 0 {
		return dst, fmt.Errorf("deflate: %d decoded bytes are not a whole number of %d-byte elements", n, c.elemSize)
	}
	start := len(dst)
	dst = slices.Grow(dst, n)[:start+n]
	byteUnshuffle(dst[start:], c.scratch[:n], c.elemSize)
	return dst, nil
}

// resetReader points the zlib reader at c.in, making it on first use.
func (c *deflateCodec) resetReader() error {
	if c.zr == nil {
		zr, err := zlib.NewReader(&c.in)
		c.zr = zr
		return err
	}
	return c.zr.(zlib.Resetter).Reset(&c.in, nil)
}

// inflate reads the whole zlib stream into c.scratch, growing it as needed,
// and returns the decoded size.
func (c *deflateCodec) inflate() (int, error) {
	c.scratch = c.scratch[:cap(c.scratch)]
	n := 0
	for {
		if n == len(c.scratch) {
			if n >= maxChunk {
				return n, errors.New("stream decodes past the 4 GiB HDF5 chunk limit")
			}
			c.scratch = append(c.scratch, make([]byte, max(n, 4096))...)
		}
		m, err := c.zr.Read(c.scratch[n:])
		n += m
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// appendWriter is an io.Writer that appends to a byte slice.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// byteShuffle is HDF5's shuffle filter: byte j of element i moves to
// j*n+i, n the number of elements.
func byteShuffle(dst, src []byte, elemSize int) {
	n := len(src) / elemSize
	for j := range elemSize {
		out := dst[j*n : (j+1)*n]
		for i := range out {
			out[i] = src[i*elemSize+j]
		}
	}
}

// byteUnshuffle inverts byteShuffle.
func byteUnshuffle(dst, src []byte, elemSize int) {
	n := len(src) / elemSize
	for j := range elemSize {
		in := src[j*n : (j+1)*n]
		for i, b := range in {
			dst[i*elemSize+j] = b
		}
	}
}
