package capture

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"h5ingest/frame"
)

// FuzzReader feeds arbitrary bytes to the reader: it must never panic,
// never return a payload of another size than its header says, and end
// with io.EOF or an error that stays. The file mapped into memory reads
// the same: the same records, payloads and errors, read with Next or
// NextMapped.
func FuzzReader(f *testing.F) {
	data, offs := writeCapture(f, testFormat, 3)
	f.Add(data)
	f.Add(data[:offs[1]+20])
	f.Add(data[:offs[0]+10])
	f.Add(data[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewReader(bytes.NewReader(b))
		path := filepath.Join(t.TempDir(), "c.pmcap")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		m, merr := Open(path)
		if merr == nil {
			defer m.Close()
		}
		// The same message, but for the name: the file's, not "stream".
		same := func(err, merr error) bool {
			return (err == nil) == (merr == nil) && (err == nil || err.Error() == strings.ReplaceAll(merr.Error(), path, "stream"))
		}
		if !same(err, merr) {
			t.Fatalf("buffered reader: %v; mapped: %v", err, merr)
		}
		if err != nil {
			return
		}
		m.SetMaxPayload(1 << 16)
		sameAsMapped := func(h frame.Header, p []byte, err error) {
			t.Helper()
			mh, mp, merr := m.NextMapped()
			if errors.Is(err, io.ErrShortBuffer) {
				// The mapped reader needs no buffer: it reads on.
				if merr != nil || mh != h || len(mp) != int(h.PayloadSize) {
					t.Fatalf("buffer too short for %+v; mapped read %+v, %v", h, mh, merr)
				}
				return
			}
			if !same(err, merr) || mh != h || !bytes.Equal(mp, p) {
				t.Fatalf("buffered read %+v, %d bytes, %v; mapped %+v, %d bytes, %v", h, len(p), err, mh, len(mp), merr)
			}
		}
		r.SetMaxPayload(1 << 16)
		buf := make([]byte, 1<<12)
		for range 1000 {
			h, p, err := r.Next(buf)
			sameAsMapped(h, p, err)
			if errors.Is(err, io.ErrShortBuffer) {
				if int(h.PayloadSize) <= len(buf) {
					t.Fatalf("short buffer for a payload of %d bytes", h.PayloadSize)
				}
				buf = make([]byte, h.PayloadSize)
				h2, p2, err2 := r.Next(buf) // the record the mapped reader read
				if err2 != nil || h2 != h || len(p2) != int(h.PayloadSize) {
					t.Fatalf("record %+v not read with a buffer its size: %v", h, err2)
				}
				continue
			}
			if err != nil {
				if _, _, again := r.Next(buf); again != err {
					t.Fatalf("error not sticky: %v then %v", err, again)
				}
				if errors.Is(err, ErrTruncated) != r.Truncated() {
					t.Fatalf("error %v but Truncated() = %v", err, r.Truncated())
				}
				return
			}
			if len(p) != int(h.PayloadSize) {
				t.Fatalf("payload of %d bytes, header says %d", len(p), h.PayloadSize)
			}
			_ = h.Check() // must not panic on any header
			if r.Offset() < 0 || r.Offset()+frame.HeaderSize+int64(len(p)) > int64(len(b)) {
				t.Fatalf("record at %d of %d bytes beyond the input's %d", r.Offset(), len(p), len(b))
			}
		}
	})
}
