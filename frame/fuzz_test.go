package frame

import (
	"errors"
	"testing"
)

// FuzzParseHeader checks that any 64 bytes either parse or fail with
// ErrNotFrame, never panic, and that a parsed header encodes back to the
// same bytes (reserved bytes aside) and passes or fails Check cleanly.
func FuzzParseHeader(f *testing.F) {
	h := sampleHeader()
	good := AppendHeader(nil, &h)
	f.Add(good)
	small := Header{FrameNumber: 3, PayloadSize: 6, Format: Format{Geometry{1, 1, 2, 1}, Packed24, 24, Binary}}
	f.Add(AppendHeader(nil, &small))
	f.Add(make([]byte, HeaderSize))
	f.Add([]byte("PMF1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b)
		if err != nil {
			if !errors.Is(err, ErrNotFrame) {
				t.Fatalf("error %v does not wrap ErrNotFrame", err)
			}
			return
		}
		if err := h.Check(); err != nil {
			if !errors.Is(err, ErrRejected) {
				t.Fatalf("Check error %v does not wrap ErrRejected", err)
			}
			return
		}
		again, err := ParseHeader(AppendHeader(nil, &h))
		if err != nil || again != h {
			t.Fatalf("re-encoded header parses to %+v, %v; want %+v", again, err, h)
		}
	})
}
