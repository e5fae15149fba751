// Package writertest is the conformance suite of file layouts: a new
// writer.Layout, a facility's own or h5ingest's, runs it with one line,
//
//	writertest.Layout(t, layout)
//
// and it checks that scans written with the layout read back as written.
//
// Package writertest is part of h5ingest's facility API; see
// docs/extending.md.
package writertest

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"h5ingest/compress"
	"h5ingest/frame"
	"h5ingest/writer"
)

// Layout writes scans with l, one of a planned length and one that grows
// with its frames, each with a frame missing, and checks that h5ingest's
// reader finds the frame stack (by l's StackPath, or the NeXus default
// attributes for a layout not h5ingest's), that every frame's chunk and
// record read back as written, that the missing frame has no chunk, and
// that the layout lacks none of its datasets.
func Layout(t *testing.T, l writer.Layout) {
	t.Helper()
	for _, planned := range []int{6, 0} {
		t.Run(fmt.Sprintf("%s/planned=%d", l.Name(), planned), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "scan.h5")
			chunks := write(t, l, path, planned)
			check(t, path, chunks)
		})
	}
}

const (
	frames  = 6
	missing = 4
	height  = 4
	width   = 8
)

// write writes frames frames of a scan but the missing one and returns
// their chunks.
func write(t *testing.T, l writer.Layout, path string, planned int) map[int][]byte {
	codec, err := compress.New("bslz4", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := writer.Create(writer.Options{Path: path, Layout: l, Frames: planned, Height: height, Width: width,
		ElemSize: 2, Filters: codec.Filters(), FlushInterval: time.Hour, Title: "conformance"})
	if err != nil {
		t.Fatalf("create a file of layout %s: %v", l.Name(), err)
	}
	chunks := map[int][]byte{}
	for n := range frames {
		if n == missing {
			if err := w.SetRecord(n, frame.Record{Status: frame.StatusMissing}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		img := make([]byte, height*width*2)
		for i := range img {
			img[i] = byte(n * i)
		}
		chunk, err := codec.Encode(nil, img)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteChunk(n, 0, chunk); err != nil {
			t.Fatal(err)
		}
		if err := w.SetRecord(n, frame.Record{Timestamp: uint64(1000 + n), RawCRC: uint32(n), DataCRC: frame.Checksum(img)}); err != nil {
			t.Fatal(err)
		}
		chunks[n] = chunk
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	return chunks
}

// check reads the file back.
func check(t *testing.T, path string, chunks map[int][]byte) {
	r, err := writer.OpenPlain(path)
	if err != nil {
		t.Fatalf("h5ingest's reader does not open the file: %v", err)
	}
	defer r.Close()
	if r.Frames != frames || r.Height != height || r.Width != width || r.ElemSize != 2 {
		t.Errorf("stack of %d frames of %d x %d, %d bytes a pixel; want %d of %d x %d, 2", r.Frames, r.Height, r.Width, r.ElemSize, frames, height, width)
	}
	if p := r.MissingPaths(); len(p) > 0 {
		t.Errorf("datasets missing: %v", p)
	}
	records, err := r.Records()
	if err != nil || len(records) != frames {
		t.Fatalf("%d records (%v), want %d", len(records), err, frames)
	}
	for n, rec := range records {
		data, _, err := r.ReadChunk(n, nil)
		want, written := chunks[n]
		switch {
		case !written:
			if rec.Status != frame.StatusMissing || !errors.Is(err, writer.ErrNoChunk) {
				t.Errorf("frame %d: status %d, chunk error %v; want missing, no chunk", n, rec.Status, err)
			}
		case err != nil || !bytes.Equal(data, want):
			t.Errorf("frame %d: chunk of %d bytes (%v), want the %d written", n, len(data), err, len(want))
		case rec.Status != frame.StatusOK || rec.Timestamp != uint64(1000+n) || rec.RawCRC != uint32(n):
			t.Errorf("frame %d: record %+v, want ok, timestamp %d, raw CRC %d", n, rec, 1000+n, n)
		}
	}
}
