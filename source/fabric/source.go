package fabric

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"h5ingest/frame"
	"h5ingest/receive"
)

// ConfigOf returns the listener configuration a scan's setup asks for:
// the profile's source keys, at the setup's address, vetting each hello
// by the setup's modules and format and the profile's source.mode.
func ConfigOf(s receive.Setup) (Config, error) {
	src := s.Source
	addr := s.Addr
	if addr == "" {
		addr = net.JoinHostPort(src.Address, strconv.Itoa(src.Port))
	}
	cfg := Config{
		Provider: src.Provider, Addr: addr, Slots: src.RingSlots,
		ConnectTimeout: src.ConnectTimeout, IdleTimeout: src.IdleTimeout,
		MaxRingBytes: int64(src.RingMaxBytes),
	}
	mode, err := ParseMode(src.Mode)
	if err != nil {
		return Config{}, fmt.Errorf("key source.mode: %w", err)
	}
	if ring := int64(src.RingSlots) * int64(frame.HeaderSize+s.Format.PayloadSize()); ring > int64(src.RingMaxBytes) {
		return Config{}, fmt.Errorf("keys source.ring_slots and source.ring_max_bytes: a ring of %d slots of %d-byte frames takes %d bytes, more than the %d allowed",
			src.RingSlots, frame.HeaderSize+s.Format.PayloadSize(), ring, src.RingMaxBytes)
	}
	size := frame.HeaderSize + s.Format.PayloadSize()
	cfg.Check = func(h Hello) error {
		switch {
		case h.Mode != mode:
			return fmt.Errorf("mode %v: this receiver takes %v (profile key source.mode)", h.Mode, mode)
		case h.Format == s.Format && h.FrameSize() > size:
			return fmt.Errorf("frames of up to %d bytes: this receiver's frames are %d bytes (profile keys detector.*)", h.FrameSize(), size)
		case s.Check != nil:
			return s.Check(h.module())
		}
		return nil
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// module is what the hello says of its module.
func (h Hello) module() receive.Module {
	return receive.Module{ID: h.Module, Format: h.Format, Frames: h.Frames, Mode: h.Mode.String()}
}

// Check refuses a setup Open could not work with.
func Check(s receive.Setup) error {
	_, err := ConfigOf(s)
	return err
}

// Open listens for senders as a scan's setup asks: the source that
// source.transport fabric names.
func Open(s receive.Setup) (receive.Listener, error) {
	cfg, err := ConfigOf(s)
	if err != nil {
		return nil, err
	}
	l, err := Listen(cfg)
	if err != nil {
		return nil, err
	}
	return sourceListener{l}, nil
}

// sourceListener is a Listener as a receive.Listener.
type sourceListener struct{ *Listener }

func (l sourceListener) Accept(ctx context.Context) (receive.Stream, error) {
	s, err := l.Listener.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (l sourceListener) Addr() string { return l.Listener.Addr().String() }

// Module says which module the stream's sender is, as its hello said.
func (s *Stream) Module() receive.Module { return s.hello.module() }
