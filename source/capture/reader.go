package capture

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"h5ingest/frame"
)

// DefaultMaxPayload is the largest payload_size a Reader accepts unless told
// otherwise: a larger one is taken for a damaged header rather than
// allocated or skipped.
const DefaultMaxPayload = 256 << 20

// readBufferSize is the size of a Reader's buffer. Payloads at least this
// large are read straight into the caller's buffer, so it only has to hold
// headers and small frames.
const readBufferSize = 64 << 10

// Reader reads the records of a capture file in order. Its errors are
// sticky: after an error (other than a short buffer) every later call to
// Next returns it. A Reader is used by one goroutine at a time.
//
// A Reader that Open made of a regular file maps the file into memory
// rather than reading it through a buffer: Next copies a payload straight
// from the mapping, and NextMapped hands it out without a copy, as a
// receiver's ring does.
type Reader struct {
	name       string // file name for messages, or "stream"
	br         *bufio.Reader
	data       []byte // the mapped file; nil when reading through br
	fd         int    // the mapped file's descriptor, to see that it has not shrunk
	closer     io.Closer
	meta       Metadata
	rawMeta    []byte
	maxPayload int64

	off     int64 // byte offset of the next record
	recOff  int64 // byte offset of the record last returned (or failed)
	records int64
	hdr     [frame.HeaderSize]byte
	pending bool         // hdr holds a parsed header whose payload is not yet read
	h       frame.Header // the pending header
	cut     bool
	err     error
}

// Open opens the capture file at path and reads its metadata. A regular
// file is mapped into memory (read through a buffer where it cannot be);
// it must not shrink while the Reader is open. Close the Reader to close
// the file.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open capture: %w", err)
	}
	if data := mapFile(f); data != nil {
		r, err := newReader(bytes.NewReader(data), path)
		if err != nil {
			unmap(data)
			f.Close()
			return nil, err
		}
		r.data, r.br, r.fd = data, nil, int(f.Fd())
		r.closer = &mappedFile{f: f, data: data}
		return r, nil
	}
	r, err := newReader(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	r.closer = f
	return r, nil
}

// NewReader reads the magic and metadata of a capture file from r and
// returns a Reader for its records.
func NewReader(r io.Reader) (*Reader, error) { return newReader(r, "stream") }

func newReader(r io.Reader, name string) (*Reader, error) {
	cr := &Reader{name: name, br: bufio.NewReaderSize(r, readBufferSize), maxPayload: DefaultMaxPayload}
	var prefix [prefixSize]byte
	if n, err := io.ReadFull(cr.br, prefix[:]); err != nil {
		if n > 0 && bytes.Equal(prefix[:min(n, len(Magic))], Magic[:min(n, len(Magic))]) {
			return nil, cr.truncated(0, prefixSize, int64(n), "file prefix")
		}
		return nil, fmt.Errorf("read capture %s: %w: %d bytes", name, ErrNotCapture, n)
	}
	if [8]byte(prefix[:8]) != Magic {
		return nil, fmt.Errorf("read capture %s: %w: magic %q, want %q", name, ErrNotCapture, prefix[:8], Magic[:])
	}
	size := int64(binary.LittleEndian.Uint32(prefix[8:]))
	// Read the metadata through a limit rather than allocating its
	// declared size: a damaged length must not allocate gigabytes.
	var meta bytes.Buffer
	n, err := meta.ReadFrom(io.LimitReader(cr.br, size))
	if err != nil {
		return nil, fmt.Errorf("read capture %s metadata: %w", name, err)
	}
	if n < size {
		return nil, cr.truncated(prefixSize, size, n, "metadata")
	}
	cr.rawMeta = meta.Bytes()
	if err := json.Unmarshal(cr.rawMeta, &cr.meta); err != nil {
		return nil, fmt.Errorf("read capture %s: %w: metadata: %w", name, ErrNotCapture, err)
	}
	var pad [8]byte
	padLen := padding(int(size))
	off := prefixSize + size
	if n, err := io.ReadFull(cr.br, pad[:padLen]); err != nil {
		return nil, cr.truncated(off, int64(padLen), int64(n), "padding")
	}
	for i, b := range pad[:padLen] {
		if b != 0 {
			return nil, fmt.Errorf("read capture %s at byte %d: %w: padding byte %#02x, want 0", name, off+int64(i), ErrNotCapture, b)
		}
	}
	cr.off = off + int64(padLen)
	cr.recOff = cr.off
	return cr, nil
}

// truncated records that the file ends inside the part what, which starts
// at byte off and needs want bytes of which have arrived, and returns the
// error saying so.
func (cr *Reader) truncated(off, want, have int64, what string) error {
	cr.cut = true
	return fmt.Errorf("read capture %s at byte %d: %w: %s has %d of %d bytes, %d missing",
		cr.name, off, ErrTruncated, what, have, want, want-have)
}

// Metadata returns the capture's metadata.
func (cr *Reader) Metadata() Metadata { return cr.meta }

// RawMetadata returns the metadata exactly as stored. The caller must not
// modify it.
func (cr *Reader) RawMetadata() []byte { return cr.rawMeta }

// SetMaxPayload sets the largest payload_size Next accepts (default
// DefaultMaxPayload). A larger one stops reading with an error.
func (cr *Reader) SetMaxPayload(n int64) { cr.maxPayload = n }

// Offset returns the byte offset of the record that Next last returned, or
// that its last error is about.
func (cr *Reader) Offset() int64 { return cr.recOff }

// Records returns the number of whole records read so far.
func (cr *Reader) Records() int64 { return cr.records }

// Truncated reports whether the file was found to end inside a record.
func (cr *Reader) Truncated() bool { return cr.cut }

// Next reads the next record: it returns its header and its payload,
// which is buf[:PayloadSize], read straight from the file.
//
// Next returns io.EOF at a clean end of the file. A file that ends inside a
// record gives an error wrapping ErrTruncated, naming the record's offset
// and the missing bytes, after every whole record. Bytes that are not a
// frame header give an error wrapping frame.ErrNotFrame, and a payload_size
// above the limit (see SetMaxPayload) an error of its own: the framing is
// lost, so both end the reading. A header that fails frame.Header.Check is
// not an error here: Next returns it with its payload, so the caller can
// record the frame as rejected.
//
// If buf is too small for the payload, Next returns the header and an
// error wrapping io.ErrShortBuffer that names the size needed, and stays at
// the record: call it again with a larger buffer.
func (cr *Reader) Next(buf []byte) (frame.Header, []byte, error) {
	if cr.err != nil {
		return frame.Header{}, nil, cr.err
	}
	if !cr.pending {
		if err := cr.readHeader(); err != nil {
			cr.err = err
			return frame.Header{}, nil, err
		}
	}
	h := cr.h
	size := int(h.PayloadSize)
	if len(buf) < size {
		return h, nil, fmt.Errorf("read capture %s at byte %d: frame %d: %w: payload of %d bytes, buffer of %d",
			cr.name, cr.recOff, h.FrameNumber, io.ErrShortBuffer, size, len(buf))
	}
	cr.pending = false
	payload := buf[:size]
	if cr.data != nil {
		view, err := cr.payload(h)
		if err != nil {
			return frame.Header{}, nil, err
		}
		copy(payload, view)
		return h, payload, nil
	}
	if n, err := io.ReadFull(cr.br, payload); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			cr.err = cr.truncated(cr.recOff, frame.HeaderSize+int64(size), frame.HeaderSize+int64(n),
				fmt.Sprintf("record of frame %d", h.FrameNumber))
		} else {
			cr.err = fmt.Errorf("read capture %s at byte %d: frame %d: %w", cr.name, cr.recOff, h.FrameNumber, err)
		}
		return frame.Header{}, nil, cr.err
	}
	cr.off += frame.HeaderSize + int64(size)
	cr.records++
	return h, payload, nil
}

// Mapped reports whether the Reader reads a file mapped into memory, so
// that NextMapped can hand out payloads without a copy.
func (cr *Reader) Mapped() bool { return cr.data != nil }

// inMapping reports whether b is a payload NextMapped handed out.
func (cr *Reader) inMapping(b []byte) bool {
	if cr.data == nil || cap(b) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(unsafe.SliceData(cr.data)))
	return p >= lo && p < lo+uintptr(len(cr.data))
}

// errNotMapped is NextMapped's error on a Reader that reads through a
// buffer.
var errNotMapped = errors.New("capture is not mapped into memory")

// NextMapped is Next without the copy: the payload it returns is the
// record's own bytes in the mapped file, valid until Close, and must not
// be written to. On a Reader that does not map its file (Mapped is false)
// it returns an error and reads nothing.
func (cr *Reader) NextMapped() (frame.Header, []byte, error) {
	if cr.data == nil {
		return frame.Header{}, nil, fmt.Errorf("read capture %s: %w", cr.name, errNotMapped)
	}
	if cr.err != nil {
		return frame.Header{}, nil, cr.err
	}
	if !cr.pending {
		if err := cr.readHeader(); err != nil {
			cr.err = err
			return frame.Header{}, nil, err
		}
	}
	cr.pending = false
	h := cr.h
	payload, err := cr.payload(h)
	if err != nil {
		return frame.Header{}, nil, err
	}
	return h, payload, nil
}

// payload returns the payload of the record whose header h was just read
// from the mapped file, and moves past the record; a file that ends
// before the payload does is a truncated record (a sticky error).
func (cr *Reader) payload(h frame.Header) ([]byte, error) {
	size := int64(h.PayloadSize)
	start := cr.off + frame.HeaderSize
	if have := int64(len(cr.data)) - start; have < size {
		cr.err = cr.truncated(cr.recOff, frame.HeaderSize+size, frame.HeaderSize+have,
			fmt.Sprintf("record of frame %d", h.FrameNumber))
		return nil, cr.err
	}
	if err := cr.shrunk(start + size); err != nil {
		cr.err = err
		return nil, err
	}
	cr.off = start + size
	cr.records++
	return cr.data[start:cr.off:cr.off], nil
}

// readHeader reads and parses the header of the next record into cr.h.
func (cr *Reader) readHeader() error {
	cr.recOff = cr.off
	n, err := cr.readHeaderBytes()
	switch {
	case errors.Is(err, io.EOF):
		return io.EOF
	case errors.Is(err, io.ErrUnexpectedEOF):
		if m := min(n, len(frame.Magic)); !bytes.Equal(cr.hdr[:m], frame.Magic[:m]) {
			return fmt.Errorf("read capture %s at byte %d (after %d records): %w: %d trailing bytes without a frame magic",
				cr.name, cr.recOff, cr.records, frame.ErrNotFrame, n)
		}
		return cr.truncated(cr.recOff, frame.HeaderSize, int64(n), "record header")
	case errors.Is(err, ErrTruncated): // the mapped file shrank
		return err
	case err != nil:
		return fmt.Errorf("read capture %s at byte %d: %w", cr.name, cr.recOff, err)
	}
	h, err := frame.ParseHeader(cr.hdr[:])
	if err != nil {
		return fmt.Errorf("read capture %s at byte %d (after %d records): %w", cr.name, cr.recOff, cr.records, err)
	}
	if int64(h.PayloadSize) > cr.maxPayload {
		return fmt.Errorf("read capture %s at byte %d: frame %d: payload_size %d exceeds the limit of %d bytes",
			cr.name, cr.recOff, h.FrameNumber, h.PayloadSize, cr.maxPayload)
	}
	cr.h = h
	cr.pending = true
	return nil
}

// shrunk returns an error if the mapped file now ends before byte end:
// a file cut short under the mapping (a capture overwritten while it is
// replayed) would fault where its pages are gone, so reading stops at an
// error instead, before it touches them.
func (cr *Reader) shrunk(end int64) error {
	size, ok := fileSize(cr.fd)
	if !ok || size >= end {
		return nil
	}
	cr.cut = true
	return fmt.Errorf("read capture %s at byte %d: %w: the file shrank to %d bytes while being read (overwritten?)",
		cr.name, cr.recOff, ErrTruncated, size)
}

// readHeaderBytes fills cr.hdr with the next record's header bytes, from
// the mapped file or through the buffer, as io.ReadFull reports: io.EOF
// at the end of the file, io.ErrUnexpectedEOF with the bytes there are
// when it ends inside the header.
func (cr *Reader) readHeaderBytes() (int, error) {
	if cr.data == nil {
		return io.ReadFull(cr.br, cr.hdr[:])
	}
	if err := cr.shrunk(min(cr.off+frame.HeaderSize, int64(len(cr.data)))); err != nil {
		return 0, err
	}
	n := copy(cr.hdr[:], cr.data[min(cr.off, int64(len(cr.data))):])
	switch {
	case n == 0:
		return 0, io.EOF
	case n < frame.HeaderSize:
		return n, io.ErrUnexpectedEOF
	}
	return n, nil
}

// Close closes the file that Open opened. For a Reader from NewReader it
// does nothing.
func (cr *Reader) Close() error {
	if cr.closer == nil {
		return nil
	}
	err := cr.closer.Close()
	cr.closer = nil
	return err
}

// mappedFile is the file of a mapped Reader: closing it unmaps it first.
type mappedFile struct {
	f    *os.File
	data []byte
}

func (m *mappedFile) Close() error {
	err := unmap(m.data)
	if cerr := m.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("close capture: %w", err)
	}
	return nil
}
