package fabric

import "testing"

// FuzzControl feeds arbitrary bytes to the control message parsers: they
// must never panic, and what they accept must encode back to the same
// fields.
func FuzzControl(f *testing.F) {
	f.Add(helloBytes(f, &Hello{Module: 1, Mode: ModeWrite, Format: testFormat, Frames: 10}))
	f.Add(appendAccept(nil, &Accept{Slots: 8, SlotSize: 4096, Addr: 1 << 40, Key: 7}))
	f.Add(appendRefuse(nil, RefuseFormat, "chip width 7"))
	f.Add(putFrameMsg(make([]byte, frameMsgSize), frameMsg{Slot: 3, Len: 4160, FrameNumber: 9}))
	f.Add(putEnd(make([]byte, endSize), endMsg{Frames: 10}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := ParseHello(b); err == nil {
			again, err := ParseHello(helloBytes(t, &h))
			if err != nil || again != h {
				t.Fatalf("hello %+v does not round-trip: %+v, %v", h, again, err)
			}
		}
		if a, err := parseAccept(b); err == nil {
			if again, err := parseAccept(appendAccept(nil, &a)); err != nil || again != a {
				t.Fatalf("accept %+v does not round-trip: %+v, %v", a, again, err)
			}
		}
		if r, err := parseRefuse(b); err == nil && len(r.Reason) > maxReason {
			t.Fatalf("refusal reason of %d bytes", len(r.Reason))
		}
		if typ, err := parseHeader(b); err == nil {
			switch typ {
			case msgFrame:
				_ = parseFrameMsg(b)
			case msgCredit:
				_ = parseCredit(b)
			case msgEnd:
				_ = parseEnd(b)
			case msgBye:
				_ = parseBye(b)
			}
		}
	})
}
