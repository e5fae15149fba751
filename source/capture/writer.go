package capture

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"h5ingest/frame"
)

// WriteBufferSize is the size of a Writer's buffer: large sequential writes.
const WriteBufferSize = 4 << 20

// Writer writes a capture file. Its errors are sticky: after one failed
// write every later call returns the same error. A Writer is used by one
// goroutine at a time.
type Writer struct {
	w       io.Writer
	bw      *bufio.Writer
	metaLen int   // bytes of metadata as first written
	n       int64 // bytes handed to bw so far
	records int64
	hdr     [frame.HeaderSize]byte
	err     error
	closed  bool
}

// NewWriter writes the magic and meta, encoded as JSON, to w and returns a
// Writer for the frame records that follow. Close flushes it; it does not
// close w.
func NewWriter(w io.Writer, meta Metadata) (*Writer, error) {
	js, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("encode capture metadata: %w", err)
	}
	if len(js) > math.MaxUint32 {
		return nil, fmt.Errorf("capture metadata of %d bytes: more than a uint32 length allows", len(js))
	}
	cw := &Writer{w: w, bw: bufio.NewWriterSize(w, WriteBufferSize), metaLen: len(js)}
	var prefix [prefixSize]byte
	copy(prefix[:], Magic[:])
	binary.LittleEndian.PutUint32(prefix[8:], uint32(len(js)))
	var pad [8]byte
	cw.write(prefix[:])
	cw.write(js)
	cw.write(pad[:padding(len(js))])
	if cw.err != nil {
		return nil, cw.err
	}
	return cw, nil
}

// write appends b to the file unless an earlier write failed.
func (cw *Writer) write(b []byte) {
	if cw.err != nil {
		return
	}
	if cw.closed {
		cw.err = errors.New("write capture: writer is closed")
		return
	}
	n, err := cw.bw.Write(b)
	cw.n += int64(n)
	if err != nil {
		cw.err = fmt.Errorf("write capture at byte %d: %w", cw.n, err)
	}
}

// WriteFrame writes one record: h encoded exactly as given (its PayloadCRC
// is not recomputed, so a frame can be written corrupt on purpose) followed
// by payload, which must be h.PayloadSize bytes long. h's format fields must
// fit the header (see frame.Header.Put).
func (cw *Writer) WriteFrame(h *frame.Header, payload []byte) error {
	if cw.err != nil {
		return cw.err
	}
	if int64(len(payload)) != int64(h.PayloadSize) {
		return fmt.Errorf("write capture: frame %d: payload of %d bytes, header says %d",
			h.FrameNumber, len(payload), h.PayloadSize)
	}
	h.Put(cw.hdr[:])
	cw.write(cw.hdr[:])
	cw.write(payload)
	if cw.err == nil {
		cw.records++
	}
	return cw.err
}

// WriteRecord writes bytes that arrived on the wire as one record: a frame
// header followed by as many payload bytes as the header's payload_size
// field says. Nothing else of the header is checked: a receiver records
// what it saw.
func (cw *Writer) WriteRecord(rec []byte) error {
	if cw.err != nil {
		return cw.err
	}
	if len(rec) < frame.HeaderSize {
		return fmt.Errorf("write capture: record of %d bytes is shorter than a frame header", len(rec))
	}
	if size := binary.LittleEndian.Uint32(rec[24:]); int64(len(rec)) != frame.HeaderSize+int64(size) {
		return fmt.Errorf("write capture: record of %d bytes, its header says %d payload bytes", len(rec), size)
	}
	cw.write(rec)
	if cw.err == nil {
		cw.records++
	}
	return cw.err
}

// Records returns the number of records written so far.
func (cw *Writer) Records() int64 { return cw.records }

// Size returns the bytes written so far, metadata included, buffered or not.
func (cw *Writer) Size() int64 { return cw.n }

// Flush writes any buffered bytes to the underlying writer.
func (cw *Writer) Flush() error {
	if cw.err != nil {
		return cw.err
	}
	if err := cw.bw.Flush(); err != nil {
		cw.err = fmt.Errorf("write capture at byte %d: %w", cw.n, err)
	}
	return cw.err
}

// Close flushes the writer. Later writes fail; the underlying writer is
// left open.
func (cw *Writer) Close() error {
	err := cw.Flush()
	cw.closed = true
	return err
}

// RewriteMetadata replaces the metadata written by NewWriter with meta, in
// place, for writers that learn part of it only once the records are
// written (per-frame checksums, for example). The underlying writer must be
// an io.WriterAt (an *os.File) and the new JSON must not be longer than the
// first: it is padded with spaces to the same length, which JSON allows.
func (cw *Writer) RewriteMetadata(meta Metadata) error {
	wa, ok := cw.w.(io.WriterAt)
	if !ok {
		return fmt.Errorf("rewrite capture metadata: %T is not an io.WriterAt", cw.w)
	}
	js, err := json.Marshal(meta)
	if err != nil {
		return fmt.Errorf("encode capture metadata: %w", err)
	}
	if len(js) > cw.metaLen {
		return fmt.Errorf("rewrite capture metadata: %d bytes do not fit the %d reserved", len(js), cw.metaLen)
	}
	if err := cw.Flush(); err != nil {
		return err
	}
	for len(js) < cw.metaLen {
		js = append(js, ' ')
	}
	if _, err := wa.WriteAt(js, prefixSize); err != nil {
		cw.err = fmt.Errorf("rewrite capture metadata: %w", err)
	}
	return cw.err
}
