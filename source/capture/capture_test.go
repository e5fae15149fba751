package capture

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"h5ingest/frame"
)

// testFormat is a small module: 2x1 chips of 16x4 pixels, 12-bit bitplane.
var testFormat = frame.Format{
	Geometry: frame.Geometry{ChipsX: 2, ChipsY: 1, ChipWidth: 16, ChipHeight: 4},
	Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR,
}

var testMeta = Metadata{Profile: "test", Created: "2025-01-02T03:04:05Z", Software: "h5ingest test"}

// testFrame returns the header and payload of frame i of a synthetic scan.
func testFrame(t testing.TB, f frame.Format, i int) (frame.Header, []byte) {
	t.Helper()
	counts := make([]uint32, f.Pixels())
	for p := range counts {
		counts[p] = uint32(p*7+i*131) % (f.MaxCount() + 1)
	}
	payload, err := f.AppendPayload(nil, counts, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := frame.Header{
		FrameNumber: uint64(i),
		Timestamp:   uint64(i) * 1e6,
		PayloadSize: uint32(len(payload)),
		PayloadCRC:  frame.Checksum(payload),
		ModuleID:    3,
		Format:      f,
	}
	return h, payload
}

// writeCapture returns a capture of n frames of format f and the offset of
// each record, plus the offset where the records end.
func writeCapture(t testing.TB, f frame.Format, n int) ([]byte, []int64) {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	offs := []int64{w.Size()}
	for i := range n {
		h, p := testFrame(t, f, i)
		if err := w.WriteFrame(&h, p); err != nil {
			t.Fatal(err)
		}
		offs = append(offs, w.Size())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), offs
}

func TestRoundTrip(t *testing.T) {
	formats := []frame.Format{
		testFormat,
		{Geometry: testFormat.Geometry, Encoding: frame.U16LE, BitDepth: 16},
		{Geometry: frame.Geometry{ChipsX: 1, ChipsY: 3, ChipWidth: 5, ChipHeight: 2}, Encoding: frame.Packed24, BitDepth: 24},
	}
	for _, f := range formats {
		t.Run(f.Encoding.String(), func(t *testing.T) {
			const n = 5
			data, offs := writeCapture(t, f, n)
			r, err := NewReader(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Metadata(); got.Profile != testMeta.Profile || got.Created != testMeta.Created || got.Software != testMeta.Software {
				t.Errorf("metadata = %+v, want %+v", got, testMeta)
			}
			buf := make([]byte, f.PayloadSize()+100)
			for i := range n {
				h, p, err := r.Next(buf)
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				wantH, wantP := testFrame(t, f, i)
				if h != wantH {
					t.Errorf("frame %d: header %+v, want %+v", i, h, wantH)
				}
				if !bytes.Equal(p, wantP) {
					t.Errorf("frame %d: payload differs", i)
				}
				if &p[0] != &buf[0] {
					t.Errorf("frame %d: payload is not inside the caller's buffer", i)
				}
				if r.Offset() != offs[i] {
					t.Errorf("frame %d: offset %d, want %d", i, r.Offset(), offs[i])
				}
			}
			if _, _, err := r.Next(buf); err != io.EOF {
				t.Fatalf("after %d frames: %v, want io.EOF", n, err)
			}
			if r.Records() != n || r.Truncated() {
				t.Errorf("records %d truncated %v, want %d false", r.Records(), r.Truncated(), n)
			}
		})
	}
}

func TestMetadataAndPadding(t *testing.T) {
	for extra := range 16 {
		meta := testMeta
		if err := meta.Set("note", strings.Repeat("x", extra)); err != nil {
			t.Fatal(err)
		}
		if err := meta.Set("scan", map[string]int{"frames": 10}); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		w, err := NewWriter(&buf, meta)
		if err != nil {
			t.Fatal(err)
		}
		h, p := testFrame(t, testFormat, 0)
		if err := w.WriteFrame(&h, p); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		b := buf.Bytes()
		if string(b[:8]) != "PMCAP001" {
			t.Fatalf("magic %q", b[:8])
		}
		n := int(binary.LittleEndian.Uint32(b[8:12]))
		js := b[12 : 12+n]
		var obj map[string]any
		if err := json.Unmarshal(js, &obj); err != nil {
			t.Fatalf("metadata %q: %v", js, err)
		}
		if obj["profile"] != "test" || obj["created"] != testMeta.Created || obj["software"] != testMeta.Software ||
			obj["note"] != strings.Repeat("x", extra) {
			t.Errorf("metadata object %v", obj)
		}
		start := 12 + n
		for start%8 != 0 {
			if b[start] != 0 {
				t.Errorf("padding byte at %d = %#x", start, b[start])
			}
			start++
		}
		if start-(12+n) > 7 {
			t.Errorf("padding of %d bytes", start-(12+n))
		}
		if !bytes.Equal(b[start:start+4], frame.Magic[:]) {
			t.Errorf("metadata %d bytes: first record not at byte %d", n, start)
		}
		r, err := NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		got := r.Metadata()
		var scan map[string]int
		if ok, err := got.Get("scan", &scan); !ok || err != nil || scan["frames"] != 10 {
			t.Errorf("metadata field scan = %v (%v, %v)", scan, ok, err)
		}
		if !bytes.Equal(r.RawMetadata(), js) {
			t.Errorf("raw metadata differs")
		}
		if r.Offset() != int64(start) {
			t.Errorf("first record offset %d, want %d", r.Offset(), start)
		}
	}
}

// TestFreeFormMetadata reads captures whose metadata records profile,
// created and software as values other than strings: the metadata is
// free-form (spec/frames.md), so such a capture is read, and its metadata
// written again unchanged.
func TestFreeFormMetadata(t *testing.T) {
	tests := []struct {
		name    string
		js      string
		profile string // the Profile field
		extra   string // a recorded field kept in Extra, "" for none
	}{
		{"strings", `{"created":"c","profile":"p","software":"s"}`, "p", ""},
		{"none recorded", `{"detector":"pimega"}`, "", ""},
		{"profile object", `{"created":"c","profile":{"name":"p","version":2},"software":"s"}`, "", "profile"},
		{"created number", `{"created":1795384705,"profile":"p","software":"s"}`, "p", "created"},
		{"software list", `{"created":"c","profile":"p","software":["det","1.2"]}`, "p", "software"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := append([]byte("PMCAP001"), binary.LittleEndian.AppendUint32(nil, uint32(len(tt.js)))...)
			b = append(b, tt.js...)
			b = append(b, make([]byte, padding(len(tt.js)))...)
			r, err := NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("NewReader: %v", err)
			}
			m := r.Metadata()
			if m.Profile != tt.profile {
				t.Errorf("Profile %q, want %q", m.Profile, tt.profile)
			}
			if tt.extra != "" {
				var v any
				if ok, err := m.Get(tt.extra, &v); !ok || err != nil {
					t.Errorf("Get(%q) = %v, %v; want the value kept", tt.extra, ok, err)
				}
			}
			js, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var got, want any
			if err := json.Unmarshal(js, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tt.js), &want); err != nil {
				t.Fatal(err)
			}
			// Marshalling adds the recorded fields a capture lacks, empty.
			for _, k := range []string{keyProfile, keyCreated, keySoftware} {
				if _, ok := want.(map[string]any)[k]; !ok {
					want.(map[string]any)[k] = ""
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("metadata written again as %s, read %s", js, tt.js)
			}
		})
	}
}

func TestMetadataRejectsReservedExtra(t *testing.T) {
	var m Metadata
	if err := m.Set("created", "x"); err == nil {
		t.Error("Set(created) succeeded")
	}
}

func TestZeroFrames(t *testing.T) {
	data, _ := writeCapture(t, testFormat, 0)
	if len(data)%8 != 0 {
		t.Errorf("empty capture of %d bytes, want a multiple of 8", len(data))
	}
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Next(nil); err != io.EOF {
		t.Fatalf("Next = %v, want io.EOF", err)
	}
}

// TestTruncated cuts a capture at every byte and checks that the whole
// records before the cut are read and the cut is reported with its offset.
// readers are the ways a capture is read: through a buffer (NewReader),
// and mapped (Open of a file) with Next copying or NextMapped not; each
// opens data, or reports the error.
var readers = []struct {
	name   string
	open   func(t *testing.T, data []byte) (*Reader, error)
	mapped bool // read with NextMapped
}{
	{"buffered", func(t *testing.T, data []byte) (*Reader, error) { return NewReader(bytes.NewReader(data)) }, false},
	{"mapped", openFile, false},
	{"mapped/in place", openFile, true},
}

// openFile writes data to a file and opens it with Open, which maps it.
func openFile(t *testing.T, data []byte) (*Reader, error) {
	path := filepath.Join(t.TempDir(), "c.pmcap")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err == nil {
		if len(data) > 0 && !r.Mapped() {
			t.Fatalf("%s is not mapped", path)
		}
		t.Cleanup(func() { r.Close() })
	}
	return r, err
}

// next reads a record as the reader named mapped reads it.
func next(r *Reader, buf []byte, mapped bool) (frame.Header, []byte, error) {
	if mapped {
		return r.NextMapped()
	}
	return r.Next(buf)
}

func TestTruncated(t *testing.T) {
	for _, rd := range readers {
		t.Run(rd.name, func(t *testing.T) { testTruncated(t, rd.open, rd.mapped) })
	}
}

func testTruncated(t *testing.T, open func(*testing.T, []byte) (*Reader, error), mapped bool) {
	const n = 3
	data, offs := writeCapture(t, testFormat, n)
	buf := make([]byte, testFormat.PayloadSize())
	for cut := 0; cut < len(data); cut++ {
		r, err := open(t, data[:cut])
		if cut < int(offs[0]) {
			if err == nil || !(errors.Is(err, ErrTruncated) || (cut == 0 && errors.Is(err, ErrNotCapture))) {
				t.Fatalf("cut at %d (in the file prefix): NewReader error %v", cut, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		whole := 0
		for whole < n && offs[whole+1] <= int64(cut) {
			whole++
		}
		for i := range whole {
			if _, _, err := next(r, buf, mapped); err != nil {
				t.Fatalf("cut at %d: frame %d: %v", cut, i, err)
			}
		}
		_, _, err = next(r, buf, mapped)
		if int64(cut) == offs[whole] {
			if err != io.EOF || r.Truncated() {
				t.Fatalf("cut at record boundary %d: %v, truncated %v; want io.EOF", cut, err, r.Truncated())
			}
			continue
		}
		if !errors.Is(err, ErrTruncated) || !r.Truncated() {
			t.Fatalf("cut at %d: %v, want ErrTruncated", cut, err)
		}
		missing := offs[whole+1] - int64(cut)
		inHeader := int64(cut)-offs[whole] < frame.HeaderSize
		msg := err.Error()
		if !strings.Contains(msg, fmt.Sprintf("at byte %d", offs[whole])) {
			t.Errorf("cut at %d: %q does not name the record at byte %d", cut, msg, offs[whole])
		}
		if !inHeader && !strings.Contains(msg, fmt.Sprintf("%d missing", missing)) {
			t.Errorf("cut at %d: %q does not say %d bytes are missing", cut, msg, missing)
		}
		if r.Offset() != offs[whole] {
			t.Errorf("cut at %d: Offset %d, want %d", cut, r.Offset(), offs[whole])
		}
		if _, _, err2 := next(r, buf, mapped); err2 != err {
			t.Errorf("cut at %d: error not sticky: %v then %v", cut, err, err2)
		}
	}
}

func TestGarbage(t *testing.T) {
	data, offs := writeCapture(t, testFormat, 3)
	tests := []struct {
		name  string
		bytes []byte
	}{
		{"zeros", make([]byte, 200)},
		{"text", []byte("this is not a frame header at all, it is a sentence that is long enough")},
		{"short tail", []byte("garbage")},
		{"bad header crc", func() []byte {
			h, p := testFrame(t, testFormat, 9)
			rec := append(frame.AppendHeader(nil, &h), p...)
			rec[20] ^= 1
			return rec
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Two good records, the garbage, then the third record.
			bad := append(append(append([]byte{}, data[:offs[2]]...), tt.bytes...), data[offs[2]:]...)
			r, err := NewReader(bytes.NewReader(bad))
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, testFormat.PayloadSize())
			for i := range 2 {
				if _, _, err := r.Next(buf); err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
			}
			_, _, err = r.Next(buf)
			if !errors.Is(err, frame.ErrNotFrame) {
				t.Fatalf("Next = %v, want ErrNotFrame", err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("at byte %d", offs[2])) || r.Offset() != offs[2] {
				t.Errorf("error %q / Offset %d: want byte %d", err, r.Offset(), offs[2])
			}
			if _, _, err2 := r.Next(buf); err2 != err {
				t.Errorf("error not sticky: %v", err2)
			}
		})
	}
}

func TestAbsurdPayloadSize(t *testing.T) {
	data, offs := writeCapture(t, testFormat, 1)
	h, _ := testFrame(t, testFormat, 1)
	h.PayloadSize = 3 << 30
	data = append(frame.AppendHeader(data, &h), make([]byte, 1000)...)
	for _, limit := range []int64{0, 1 << 20} {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if limit > 0 {
			r.SetMaxPayload(limit)
		}
		buf := make([]byte, 1<<20)
		if _, _, err := r.Next(buf); err != nil {
			t.Fatal(err)
		}
		_, _, err = r.Next(buf)
		if err == nil || errors.Is(err, io.ErrShortBuffer) || !strings.Contains(err.Error(), "exceeds the limit") ||
			!strings.Contains(err.Error(), fmt.Sprintf("at byte %d", offs[1])) {
			t.Errorf("limit %d: Next = %v, want a payload_size limit error at byte %d", limit, err, offs[1])
		}
	}
}

func TestRejectedHeaderPassesThrough(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	h0, p0 := testFrame(t, testFormat, 0)
	bad := h0
	bad.FrameNumber = 1
	bad.PayloadSize = 10 // does not match the format
	badPayload := []byte("0123456789")
	bad.PayloadCRC = frame.Checksum(badPayload)
	unknown := h0
	unknown.FrameNumber = 2
	unknown.Format.Encoding = 77
	h3, p3 := testFrame(t, testFormat, 3)
	for _, rec := range []struct {
		h frame.Header
		p []byte
	}{{h0, p0}, {bad, badPayload}, {unknown, p0}, {h3, p3}} {
		if err := w.WriteFrame(&rec.h, rec.p); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	r, err := NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	pb := make([]byte, 4096)
	wantRejected := []bool{false, true, true, false}
	for i, want := range wantRejected {
		h, p, err := r.Next(pb)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if int(h.FrameNumber) != i || len(p) != int(h.PayloadSize) {
			t.Errorf("record %d: frame %d with %d payload bytes", i, h.FrameNumber, len(p))
		}
		if got := errors.Is(h.Check(), frame.ErrRejected); got != want {
			t.Errorf("record %d: rejected %v, want %v", i, got, want)
		}
	}
	if _, _, err := r.Next(pb); err != io.EOF {
		t.Errorf("end: %v", err)
	}
}

func TestShortBuffer(t *testing.T) {
	data, _ := writeCapture(t, testFormat, 2)
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := r.Next(make([]byte, 10))
	if !errors.Is(err, io.ErrShortBuffer) || h.FrameNumber != 0 {
		t.Fatalf("Next with a small buffer = frame %d, %v; want ErrShortBuffer", h.FrameNumber, err)
	}
	buf := make([]byte, testFormat.PayloadSize())
	for i := range 2 {
		h, _, err := r.Next(buf)
		if err != nil || int(h.FrameNumber) != i {
			t.Fatalf("after retry: frame %d, %v; want frame %d", h.FrameNumber, err, i)
		}
	}
}

func TestNotCapture(t *testing.T) {
	for _, b := range [][]byte{
		[]byte("PMCAP002\x00\x00\x00\x00"),
		[]byte("hello world, no capture"),
		append([]byte("PMCAP001\x04\x00\x00\x00"), "[1] \x00\x00\x00\x00"...),
		append([]byte("PMCAP001\x02\x00\x00\x00"), "{}\x00\x01"...),
	} {
		if _, err := NewReader(bytes.NewReader(b)); !errors.Is(err, ErrNotCapture) {
			t.Errorf("NewReader(%q) = %v, want ErrNotCapture", b, err)
		}
	}
}

func TestWriterChecks(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	h, p := testFrame(t, testFormat, 0)
	if err := w.WriteFrame(&h, p[1:]); err == nil {
		t.Error("WriteFrame with a short payload succeeded")
	}
	rec := append(frame.AppendHeader(nil, &h), p...)
	if err := w.WriteRecord(rec[:len(rec)-1]); err == nil {
		t.Error("WriteRecord of a cut record succeeded")
	}
	if err := w.WriteRecord(rec); err != nil {
		t.Fatal(err)
	}
	if w.Records() != 1 {
		t.Errorf("Records = %d, want 1", w.Records())
	}
	if err := w.RewriteMetadata(testMeta); err == nil {
		t.Error("RewriteMetadata on a bytes.Buffer succeeded")
	}
}

// errWriter fails every write after the first limit bytes.
type errWriter struct{ limit int }

func (e *errWriter) Write(p []byte) (int, error) {
	if len(p) > e.limit {
		n := e.limit
		e.limit = 0
		return n, errors.New("disk full")
	}
	e.limit -= len(p)
	return len(p), nil
}

func TestWriterErrorIsSticky(t *testing.T) {
	w, err := NewWriter(&errWriter{limit: 100}, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	h, p := testFrame(t, testFormat, 0)
	for range WriteBufferSize/len(p) + 2 {
		if err = w.WriteFrame(&h, p); err != nil {
			break
		}
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("write error %v, want disk full", err)
	}
	if err2 := w.WriteFrame(&h, p); err2 != err {
		t.Errorf("error not sticky: %v", err2)
	}
}

func TestRewriteMetadata(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.pmcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	meta := testMeta
	meta.Set("crc", []uint32{4294967295, 4294967295})
	w, err := NewWriter(f, meta)
	if err != nil {
		t.Fatal(err)
	}
	h, p := testFrame(t, testFormat, 0)
	w.WriteFrame(&h, p)
	meta.Set("crc", []uint32{1, 22})
	if err := w.RewriteMetadata(meta); err != nil {
		t.Fatal(err)
	}
	meta.Set("crc", []uint32{4294967295, 4294967295, 1})
	if err := w.RewriteMetadata(meta); err == nil {
		t.Error("RewriteMetadata with longer metadata succeeded")
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var crc []uint32
	if _, err := r.Metadata().Get("crc", &crc); err != nil || len(crc) != 2 || crc[1] != 22 {
		t.Errorf("crc = %v, %v", crc, err)
	}
	if got, _, err := r.Next(make([]byte, len(p))); err != nil || got != h {
		t.Errorf("record after rewrite: %+v, %v", got, err)
	}
}

// TestNextMappedCopiesNothing checks that NextMapped hands out each
// payload where it lies in the mapped file, the bytes written, without
// allocating.
func TestNextMappedCopiesNothing(t *testing.T) {
	data, offs := writeCapture(t, testFormat, 200)
	r, err := openFile(t, data)
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		h, p, err := r.NextMapped()
		if err != nil {
			t.Fatal(err)
		}
		at := offs[h.FrameNumber] + frame.HeaderSize
		if !bytes.Equal(p, data[at:at+int64(len(p))]) || !r.inMapping(p) || &p[0] != &r.data[at] {
			t.Fatalf("frame %d: payload is not the mapped file's bytes at %d", h.FrameNumber, at)
		}
		i++
	})
	if allocs != 0 {
		t.Errorf("NextMapped allocates %.1f times per record", allocs)
	}
	b, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.NextMapped(); !errors.Is(err, errNotMapped) {
		t.Errorf("NextMapped of a buffered reader: %v, want errNotMapped", err)
	}
}

func TestNextDoesNotAllocate(t *testing.T) {
	data, _ := writeCapture(t, testFormat, 200)
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, testFormat.PayloadSize())
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := r.Next(buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Next allocates %.1f times per record", allocs)
	}
}

// TestMappedReplayDropsReleasedPages checks that a replay from a mapped
// capture keeps in its resident set only the frames in flight: once a
// frame is released its whole pages leave the mapping's resident set (as
// /proc/self/smaps counts it), so a long capture does not fill memory.
func TestMappedReplayDropsReleasedPages(t *testing.T) {
	if _, err := os.Stat("/proc/self/smaps"); err != nil {
		t.Skip("no /proc/self/smaps to read the resident set from")
	}
	f := frame.Format{
		Geometry: frame.Geometry{ChipsX: 2, ChipsY: 1, ChipWidth: 256, ChipHeight: 64},
		Encoding: frame.Bitplane, BitDepth: 12, Coding: frame.LFSR,
	}
	const n = 64
	data, _ := writeCapture(t, f, n)
	r, err := openFile(t, data)
	if err != nil {
		t.Fatal(err)
	}
	src := NewSource(r, f.PayloadSize())
	for i := range n {
		fr, err := src.Next(context.Background())
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		src.Release(fr)
	}
	rss := mappingRSS(t, r.data)
	// At most the pages that records share at their ends stay: two a
	// record, far below the file's size.
	if limit := int64(2*n*os.Getpagesize()) + 64<<10; rss > limit {
		t.Errorf("%d KiB of the %d KiB capture resident after every frame was released, want at most %d KiB",
			rss>>10, len(data)>>10, limit>>10)
	}
}

// mappingRSS returns the resident bytes of the mapping that starts at
// b's first byte, from /proc/self/smaps.
func mappingRSS(t *testing.T, b []byte) int64 {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(&b[0])))
	in := false
	for line := range strings.SplitSeq(string(smaps), "\n") {
		if strings.HasPrefix(line, start) {
			in = true
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimPrefix(line, "Rss:"), "%d kB", &kb); err != nil {
				t.Fatalf("smaps line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no mapping at %s in /proc/self/smaps", start)
	return 0
}

// TestMappedCaptureShrinks checks that a capture cut short while it is
// mapped and read (overwritten by another process) stops the reading with
// an error saying so, before a record past the new end is touched,
// rather than a fault.
func TestMappedCaptureShrinks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cut    func(offs []int64) int64 // the new size, from the records' offsets
		frames int                      // records read before the cut
	}{
		{"inside a payload", func(offs []int64) int64 { return offs[2] + frame.HeaderSize + 10 }, 2},
		{"inside a header", func(offs []int64) int64 { return offs[2] + 3 }, 2},
		{"to nothing", func(offs []int64) int64 { return 0 }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, offs := writeCapture(t, testFormat, 4)
			path := filepath.Join(t.TempDir(), "c.pmcap")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for i := range tc.frames {
				if _, _, err := r.NextMapped(); err != nil {
					t.Fatalf("frame %d before the cut: %v", i, err)
				}
			}
			if err := os.Truncate(path, tc.cut(offs)); err != nil {
				t.Fatal(err)
			}
			var last error
			for range 4 {
				if _, _, last = r.NextMapped(); last != nil {
					break
				}
			}
			if !errors.Is(last, ErrTruncated) || !strings.Contains(last.Error(), "shrank") || !r.Truncated() {
				t.Fatalf("after the cut: %v (truncated %v), want an error saying the file shrank", last, r.Truncated())
			}
		})
	}
}

// TestWidestScanTime checks that the placeholder's JSON is at least as
// long as any scan time recorded in UTC, so that the room it reserves
// holds the real ones.
func TestWidestScanTime(t *testing.T) {
	widest, err := json.Marshal(WidestScanTime(12))
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []ScanTime{
		{Module: 12},
		{Module: 12, Start: time.Date(2026, 11, 28, 22, 8, 10, 123456789, time.UTC)},
		{Module: 12, Start: time.Date(2026, 11, 28, 22, 8, 10, 1, time.UTC), End: time.Date(9999, 1, 1, 0, 0, 0, 999999999, time.UTC)},
		{Module: 12, Start: time.Date(2026, 11, 28, 22, 8, 10, 0, time.UTC), End: time.Date(2026, 11, 28, 23, 0, 0, 100, time.UTC)},
	} {
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > len(widest) {
			t.Errorf("%s is longer than the placeholder %s", b, widest)
		}
	}
}
