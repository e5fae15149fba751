package capture

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"h5ingest/frame"
)

// FuzzReader feeds arbitrary bytes to the reader: it must never panic,
// never return a payload of another size than its header says, and end
// with io.EOF or an error that stays.
func FuzzReader(f *testing.F) {
	data, offs := writeCapture(f, testFormat, 3)
	f.Add(data)
	f.Add(data[:offs[1]+20])
	f.Add(data[:offs[0]+10])
	f.Add(data[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		r.SetMaxPayload(1 << 16)
		buf := make([]byte, 1<<12)
		for range 1000 {
			h, p, err := r.Next(buf)
			if errors.Is(err, io.ErrShortBuffer) {
				if int(h.PayloadSize) <= len(buf) {
					t.Fatalf("short buffer for a payload of %d bytes", h.PayloadSize)
				}
				buf = make([]byte, h.PayloadSize)
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
