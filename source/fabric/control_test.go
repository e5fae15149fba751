package fabric

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"h5ingest/frame"
)

func TestBadHelloRefused(t *testing.T) {
	badGeometry := testFormat
	badGeometry.ChipWidth = 7 // not a multiple of 8
	wrongMagic := helloBytes(t, &Hello{Mode: ModeWrite, Format: testFormat})
	copy(wrongMagic, "XXXX")
	tests := []struct {
		name  string
		hello Hello
		raw   []byte
		code  uint32
		text  string
	}{
		{name: "magic", raw: wrongMagic, code: RefuseMalformed, text: "magic"},
		{name: "version", hello: Hello{Mode: ModeWrite, Format: testFormat, Version: 2}, code: RefuseVersion, text: "version 2"},
		{name: "geometry", hello: Hello{Mode: ModeWrite, Format: badGeometry}, code: RefuseFormat, text: "frame format"},
		{name: "mode", hello: Hello{Mode: 9, Format: testFormat}, code: RefuseMalformed, text: "mode 9"},
		{name: "short", raw: wrongMagic[:10], code: RefuseMalformed, text: "shorter than a header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkNoLeaks(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			l := testListen(t, testConfig())
			cfg := senderConfig(l.Addr().String(), ModeWrite, 0, 1)
			cfg.Hello, cfg.rawHello = tt.hello, tt.raw
			done := make(chan error, 1)
			go func() {
				s, err := Dial(ctx, cfg)
				if err == nil {
					s.Abort()
				}
				done <- err
			}()
			_, err := l.Accept(ctx)
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tt.text) {
				t.Errorf("Accept: %v, want a protocol error about %q", err, tt.text)
			}
			var refused *RefusedError
			if err := <-done; !errors.As(err, &refused) || refused.Code != tt.code || !strings.Contains(refused.Reason, tt.text) {
				t.Errorf("sender got %v, want a refusal with code %d about %q", err, tt.code, tt.text)
			}
		})
	}
}

func TestCheckRefuses(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := testConfig()
	cfg.Check = func(h Hello) error {
		if h.Module > 1 {
			return errors.New("this scan has modules 0 and 1")
		}
		return nil
	}
	l := testListen(t, cfg)
	done := make(chan error, 1)
	go func() {
		_, err := Dial(ctx, senderConfig(l.Addr().String(), ModeWrite, 5, 1))
		done <- err
	}()
	if _, err := l.Accept(ctx); err == nil {
		t.Error("Accept took module 5")
	}
	var refused *RefusedError
	if err := <-done; !errors.As(err, &refused) || refused.Code != RefuseScan || !strings.Contains(refused.Reason, "modules 0 and 1") {
		t.Errorf("sender got %v, want the check's refusal", err)
	}
}

// TestBadFrameMessages sends frame messages that break the protocol: the
// stream must end with a clear error, never a panic.
func TestBadFrameMessages(t *testing.T) {
	tests := []struct {
		name string
		msg  func(a Accept) frameMsg
		want error
		text string
	}{
		{"slot out of range", func(a Accept) frameMsg { return frameMsg{Slot: a.Slots + 3, Len: 100} }, ErrProtocol, "slot 11, the ring has 8"},
		{"bigger than slot", func(a Accept) frameMsg { return frameMsg{Slot: 1, Len: a.SlotSize + 1} }, ErrProtocol, "bytes in slot 1"},
		{"shorter than header", func(a Accept) frameMsg { return frameMsg{Slot: 1, Len: 10} }, ErrProtocol, "of 10 bytes"},
		{"slot without a frame", func(a Accept) frameMsg { return frameMsg{Slot: 2, Len: 200} }, frame.ErrNotFrame, "slot 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkNoLeaks(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			l := testListen(t, testConfig())
			senders := make(chan *Sender, 1)
			go func() {
				s, err := Dial(ctx, senderConfig(l.Addr().String(), ModeWrite, 0, 1))
				if err != nil {
					t.Error(err)
					senders <- nil
					return
				}
				if err := s.notifyFrame(tt.msg(s.Accept())); err != nil {
					t.Error(err)
				}
				senders <- s
			}()
			st, err := l.Accept(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			_, err = st.Next(ctx)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
				t.Errorf("Next: %v, want %v about %q", err, tt.want, tt.text)
			}
			if _, again := st.Next(ctx); again == nil || again.Error() != err.Error() {
				t.Errorf("Next after the error: %v, want the same error", again)
			}
			if s := <-senders; s != nil {
				s.Abort()
			}
		})
	}
}

func TestFrameBiggerThanSlotNotSent(t *testing.T) {
	checkNoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := testListen(t, testConfig())
	big := testFormat
	big.ChipsY = 4 // frames twice the size the hello announces
	done := sendCapture(ctx, t, senderConfig(l.Addr().String(), ModeWrite, 0, 3), testCapture(t, big, 0, 3), 0)
	s, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res := <-done
	if !errors.Is(res.err, ErrProtocol) || !strings.Contains(res.err.Error(), "does not fit the receiver's slots") {
		t.Errorf("sending frames bigger than a slot: %v, want a clear error", res.err)
	}
	if _, err := s.Next(ctx); !errors.Is(err, ErrDisconnected) {
		t.Errorf("Next after the sender gave up: %v, want ErrDisconnected", err)
	}
}

func TestHelloRoundTrip(t *testing.T) {
	h := Hello{Module: 3, Mode: ModeSend, Format: testFormat, Frames: 1800, PeriodNs: 1e6, MaxFrame: 5000, Version: ProtoVersion}
	got, err := ParseHello(helloBytes(t, &h))
	if err != nil || got != h {
		t.Errorf("ParseHello(appendHello(%+v)) = %+v, %v", h, got, err)
	}
	a := Accept{Slots: 16, SlotSize: 7078016, Addr: 0x7f0000001000, Key: 42}
	if got, err := parseAccept(appendAccept(nil, &a)); err != nil || got != a {
		t.Errorf("parseAccept = %+v, %v, want %+v", got, err, a)
	}
	r, err := parseRefuse(appendRefuse(nil, RefuseFormat, "chip width 7"))
	if err != nil || r.Code != RefuseFormat || r.Reason != "chip width 7" {
		t.Errorf("parseRefuse = %+v, %v", r, err)
	}
	// A longer message of a later minor revision is accepted; a shorter
	// one, or one whose length field lies, is not.
	b := helloBytes(t, &h)
	if _, err := ParseHello(b[:40]); !errors.Is(err, ErrProtocol) {
		t.Errorf("short hello: %v", err)
	}
	b[8]++
	if _, err := ParseHello(b); !errors.Is(err, ErrProtocol) {
		t.Errorf("hello with a wrong length: %v", err)
	}
}

// helloBytes encodes h, which must fit a hello.
func helloBytes(tb testing.TB, h *Hello) []byte {
	tb.Helper()
	b, err := appendHello(nil, h)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// TestHelloFormatFits checks that a format whose fields do not fit the
// hello's bytes is refused by the sender before it connects, naming the
// field, where it used to be truncated into another, valid, format; and
// that the hello packs a format at offset 20 exactly as a frame header
// packs it at 34.
func TestHelloFormatFits(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*frame.Format)
		want string
	}{
		{"chips x 257", func(f *frame.Format) { f.ChipsX = 257 }, "chips x 257 does not fit its field (0 to 255)"},
		{"bit depth 280", func(f *frame.Format) { f.BitDepth = 280 }, "bit depth 280 does not fit"},
		{"chip width 65544", func(f *frame.Format) { f.ChipWidth = 65536 + 8 }, "chip width 65544 does not fit its field (0 to 65535)"},
		{"negative chip height", func(f *frame.Format) { f.ChipHeight = -1 }, "chip height -1 does not fit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := Hello{Mode: ModeWrite, Format: testFormat}
			tt.edit(&h.Format)
			if b, err := appendHello(nil, &h); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("appendHello = %d bytes, %v; want an error saying %q", len(b), err, tt.want)
			}
			// The sender refuses it before it opens anything: no receiver
			// listens at the address.
			_, err := Dial(context.Background(), SenderConfig{Provider: "tcp", Addr: "127.0.0.1:1", Hello: h, Timeout: time.Second})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Dial = %v; want an error saying %q", err, tt.want)
			}
		})
	}
	h := Hello{Mode: ModeWrite, Format: testFormat}
	b := helloBytes(t, &h)
	fh := frame.Header{Format: testFormat}
	hdr := frame.AppendHeader(nil, &fh)
	if got, want := b[helloFormat:helloFormat+frame.FormatSize], hdr[34:34+frame.FormatSize]; !bytes.Equal(got, want) {
		t.Errorf("hello's format bytes % x, a frame header's % x", got, want)
	}
	if n := OpenObjects(); n != 0 {
		t.Errorf("%d libfabric objects open after refused dials", n)
	}
}
