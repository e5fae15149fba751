package fabric

import (
	"encoding/binary"
	"errors"
	"fmt"

	"h5ingest/frame"
)

// ProtoVersion is the version of the wire protocol this package speaks.
const ProtoVersion = 1

// ProtoMagic is the first four bytes of every protocol message.
var ProtoMagic = [4]byte{'P', 'M', 'W', 'P'}

// ErrProtocol is wrapped by errors for messages that break the protocol:
// bad magic, version, type or length, a slot out of range, a frame bigger
// than its slot. They are permanent: the connection cannot go on.
var ErrProtocol = errors.New("protocol error")

// Message types.
const (
	msgHello  = 1 // sender -> receiver: who is sending what
	msgAccept = 2 // receiver -> sender: the ring of slots
	msgRefuse = 3 // receiver -> sender: why not
	msgFrame  = 4 // sender -> receiver: a frame is in a slot (write mode)
	msgCredit = 5 // receiver -> sender: a slot is free again
	msgEnd    = 6 // sender -> receiver: no more frames
	msgBye    = 7 // receiver -> sender: end received
)

// Message sizes.
const (
	msgHeaderSize = 16
	helloSize     = 64
	acceptSize    = 64
	refuseSize    = 24 // plus the reason's text
	frameMsgSize  = 32
	creditSize    = 24
	endSize       = 32
	byeSize       = 32

	maxReason = 200 // bytes of text in a refusal
	// ctrlSize is the size of a buffer for any message but a frame.
	ctrlSize = 256
)

var msgNames = [...]string{msgHello: "hello", msgAccept: "accept", msgRefuse: "refuse",
	msgFrame: "frame", msgCredit: "credit", msgEnd: "end", msgBye: "bye"}

var msgSizes = [...]int{msgHello: helloSize, msgAccept: acceptSize, msgRefuse: refuseSize,
	msgFrame: frameMsgSize, msgCredit: creditSize, msgEnd: endSize, msgBye: byeSize}

// Mode is how frames travel: written one-sided into the receiver's slots,
// or sent two-sided into its posted receives.
type Mode uint8

// Modes.
const (
	ModeWrite Mode = 1 // RDMA write into a slot, then a frame message naming it
	ModeSend  Mode = 2 // send into the receiver's posted receive buffers
)

// String returns the mode's name, as flags spell it.
func (m Mode) String() string {
	switch m {
	case ModeWrite:
		return "write"
	case ModeSend:
		return "send"
	}
	return fmt.Sprintf("mode(%d)", m)
}

// ParseMode returns the mode named "write" or "send".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "write":
		return ModeWrite, nil
	case "send":
		return ModeSend, nil
	}
	return 0, fmt.Errorf("mode %q: want write or send", s)
}

// Hello is what a sender says about itself and its scan when it connects.
type Hello struct {
	Module   uint16       // detector module, 0-based
	Mode     Mode         // how frames will travel
	Format   frame.Format // the scan's frame format
	Frames   uint64       // frames in the scan; 0 when not known
	PeriodNs uint64       // ns between frames; 0 for as fast as possible
	MaxFrame uint32       // largest frame, header included; 0: that of Format
	Version  uint16       // protocol version; 0 encodes ProtoVersion
}

// FrameSize returns the size of the largest frame the sender will send,
// header included.
func (h *Hello) FrameSize() int {
	n := frame.HeaderSize + h.Format.PayloadSize()
	return max(n, int(h.MaxFrame))
}

// Accept is the receiver's answer to a Hello it takes: its ring of slots,
// one registered region, slot i at Addr + i*SlotSize.
type Accept struct {
	Slots    uint32 // slots in the ring; also the sender's first credits
	SlotSize uint32 // bytes per slot
	Addr     uint64 // remote address of slot 0 (an offset where the provider uses offsets)
	Key      uint64 // the region's remote key
}

// Refusal codes.
const (
	RefuseMalformed = 1 // the hello is not a valid message
	RefuseVersion   = 2 // a protocol version the receiver does not speak
	RefuseFormat    = 3 // an impossible frame format
	RefuseModule    = 4 // the module is already connected
	RefuseScan      = 5 // the receiver expects another scan (format, module)
	RefuseResources = 6 // the receiver cannot make the slots
	// RefuseMessageSize: a slot of the hello's frames is larger than the
	// provider's largest message (its max_msg_size).
	RefuseMessageSize = 7
)

// RefusedError is a receiver's refusal of a connection.
type RefusedError struct {
	Code   uint32
	Reason string
}

// Error says that the receiver refused, with its code and reason.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("receiver refused the connection (code %d): %s", e.Code, e.Reason)
}

// frameMsg says that a frame of Len bytes is in slot Slot.
type frameMsg struct {
	Slot        uint32
	Len         uint32
	FrameNumber uint64
}

// endMsg closes a scan.
type endMsg struct {
	Frames   uint64 // frames sent
	HeldBack uint64 // ns the sender waited for credits
}

// byeMsg answers an endMsg.
type byeMsg struct {
	Frames   uint64 // frames received
	HeldBack uint64 // ns the ring was full, as the receiver saw it
}

func putHeader(b []byte, typ uint16, n int) []byte {
	b = b[:n]
	clear(b)
	copy(b, ProtoMagic[:])
	binary.LittleEndian.PutUint16(b[4:], ProtoVersion)
	binary.LittleEndian.PutUint16(b[6:], typ)
	binary.LittleEndian.PutUint32(b[8:], uint32(n))
	return b
}

// isMessage reports whether b starts with the protocol's magic (and not a
// frame's).
func isMessage(b []byte) bool { return len(b) >= 4 && [4]byte(b[:4]) == ProtoMagic }

// parseHeader checks a message's common header and returns its type.
// Messages may be longer than their type's size (later versions may add
// fields at the end) but never shorter.
func parseHeader(b []byte) (uint16, error) {
	if len(b) < msgHeaderSize {
		return 0, fmt.Errorf("%w: message of %d bytes, shorter than a header (%d)", ErrProtocol, len(b), msgHeaderSize)
	}
	if [4]byte(b[:4]) != ProtoMagic {
		return 0, fmt.Errorf("%w: magic % x, want % x", ErrProtocol, b[:4], ProtoMagic[:])
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != ProtoVersion {
		return 0, fmt.Errorf("%w: version %d, this end speaks %d", ErrProtocol, v, ProtoVersion)
	}
	typ := binary.LittleEndian.Uint16(b[6:])
	if typ == 0 || int(typ) >= len(msgSizes) {
		return 0, fmt.Errorf("%w: unknown message type %d", ErrProtocol, typ)
	}
	n := binary.LittleEndian.Uint32(b[8:])
	if int64(n) != int64(len(b)) {
		return 0, fmt.Errorf("%w: %s message says %d bytes, %d arrived", ErrProtocol, msgNames[typ], n, len(b))
	}
	if len(b) < msgSizes[typ] {
		return 0, fmt.Errorf("%w: %s message of %d bytes, want at least %d", ErrProtocol, msgNames[typ], len(b), msgSizes[typ])
	}
	return typ, nil
}

func expect(b []byte, want uint16) error {
	typ, err := parseHeader(b)
	if err != nil {
		return err
	}
	if typ != want {
		return fmt.Errorf("%w: %s message where %s was due", ErrProtocol, msgNames[typ], msgNames[want])
	}
	return nil
}

// appendHello encodes h. A format whose fields do not fit the hello's
// bytes is an error (frame.PutFormat), never truncated.
func appendHello(dst []byte, h *Hello) ([]byte, error) {
	b := putHeader(make([]byte, helloSize), msgHello, helloSize)
	if h.Version != 0 {
		binary.LittleEndian.PutUint16(b[4:], h.Version)
	}
	binary.LittleEndian.PutUint16(b[16:], h.Module)
	b[18] = byte(h.Mode)
	if err := frame.PutFormat(b[helloFormat:], h.Format); err != nil {
		return dst, fmt.Errorf("hello: %w", err)
	}
	binary.LittleEndian.PutUint64(b[32:], h.Frames)
	binary.LittleEndian.PutUint64(b[40:], h.PeriodNs)
	binary.LittleEndian.PutUint32(b[48:], h.MaxFrame)
	return append(dst, b...), nil
}

// helloFormat is the offset of the frame format in a hello, packed as a
// frame header packs it (frame.PutFormat).
const helloFormat = 20

// ParseHello decodes and checks a hello message: its header, its mode, and
// a frame format that frame.Format.Validate accepts. Errors wrap
// ErrProtocol.
func ParseHello(b []byte) (Hello, error) {
	if err := expect(b, msgHello); err != nil {
		return Hello{}, err
	}
	h := Hello{
		Module:   binary.LittleEndian.Uint16(b[16:]),
		Mode:     Mode(b[18]),
		Format:   frame.ParseFormat(b[helloFormat:]),
		Frames:   binary.LittleEndian.Uint64(b[32:]),
		PeriodNs: binary.LittleEndian.Uint64(b[40:]),
		MaxFrame: binary.LittleEndian.Uint32(b[48:]),
		Version:  ProtoVersion,
	}
	if h.Mode != ModeWrite && h.Mode != ModeSend {
		return h, fmt.Errorf("%w: hello: mode %d, want %d (write) or %d (send)", ErrProtocol, h.Mode, ModeWrite, ModeSend)
	}
	if err := h.Format.Validate(); err != nil {
		return h, fmt.Errorf("%w: hello: %w: %w", ErrProtocol, errFormat, err)
	}
	if h.MaxFrame > maxSlotSize {
		return h, fmt.Errorf("%w: hello: frames of up to %d bytes, more than a slot may hold (%d)", ErrProtocol, h.MaxFrame, maxSlotSize)
	}
	if n := frame.HeaderSize + h.Format.PayloadSize(); n > maxSlotSize {
		return h, fmt.Errorf("%w: hello: frames of %d bytes, more than a slot may hold (%d)", ErrProtocol, n, maxSlotSize)
	}
	return h, nil
}

// errFormat marks a hello whose frame format is impossible.
var errFormat = errors.New("frame format")

// maxSlotSize bounds a slot: 1 GiB, far beyond any detector frame.
const maxSlotSize = 1 << 30

func appendAccept(dst []byte, a *Accept) []byte {
	b := putHeader(make([]byte, acceptSize), msgAccept, acceptSize)
	binary.LittleEndian.PutUint32(b[16:], a.Slots)
	binary.LittleEndian.PutUint32(b[20:], a.SlotSize)
	binary.LittleEndian.PutUint64(b[32:], a.Addr)
	binary.LittleEndian.PutUint64(b[40:], a.Key)
	return append(dst, b...)
}

func parseAccept(b []byte) (Accept, error) {
	if err := expect(b, msgAccept); err != nil {
		return Accept{}, err
	}
	a := Accept{
		Slots:    binary.LittleEndian.Uint32(b[16:]),
		SlotSize: binary.LittleEndian.Uint32(b[20:]),
		Addr:     binary.LittleEndian.Uint64(b[32:]),
		Key:      binary.LittleEndian.Uint64(b[40:]),
	}
	if a.Slots == 0 || a.Slots > maxSlots {
		return a, fmt.Errorf("%w: accept: %d slots, want 1 to %d", ErrProtocol, a.Slots, maxSlots)
	}
	if a.SlotSize < frame.HeaderSize || a.SlotSize > maxSlotSize {
		return a, fmt.Errorf("%w: accept: slots of %d bytes", ErrProtocol, a.SlotSize)
	}
	return a, nil
}

// maxSlots bounds the ring.
const maxSlots = 4096

func appendRefuse(dst []byte, code uint32, reason string) []byte {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	n := refuseSize + len(reason)
	b := putHeader(make([]byte, n), msgRefuse, n)
	binary.LittleEndian.PutUint32(b[16:], code)
	binary.LittleEndian.PutUint32(b[20:], uint32(len(reason)))
	copy(b[refuseSize:], reason)
	return append(dst, b...)
}

func parseRefuse(b []byte) (*RefusedError, error) {
	if err := expect(b, msgRefuse); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(b[20:])
	if n > maxReason || int(n) > len(b)-refuseSize {
		return nil, fmt.Errorf("%w: refuse: reason of %d bytes in a message of %d", ErrProtocol, n, len(b))
	}
	return &RefusedError{Code: binary.LittleEndian.Uint32(b[16:]), Reason: string(b[refuseSize : refuseSize+int(n)])}, nil
}

func putFrameMsg(b []byte, m frameMsg) []byte {
	b = putHeader(b, msgFrame, frameMsgSize)
	binary.LittleEndian.PutUint32(b[16:], m.Slot)
	binary.LittleEndian.PutUint32(b[20:], m.Len)
	binary.LittleEndian.PutUint64(b[24:], m.FrameNumber)
	return b
}

func parseFrameMsg(b []byte) frameMsg {
	return frameMsg{
		Slot:        binary.LittleEndian.Uint32(b[16:]),
		Len:         binary.LittleEndian.Uint32(b[20:]),
		FrameNumber: binary.LittleEndian.Uint64(b[24:]),
	}
}

func putCredit(b []byte, slot uint32) []byte {
	b = putHeader(b, msgCredit, creditSize)
	binary.LittleEndian.PutUint32(b[16:], slot)
	return b
}

func parseCredit(b []byte) uint32 { return binary.LittleEndian.Uint32(b[16:]) }

func putEnd(b []byte, m endMsg) []byte {
	b = putHeader(b, msgEnd, endSize)
	binary.LittleEndian.PutUint64(b[16:], m.Frames)
	binary.LittleEndian.PutUint64(b[24:], m.HeldBack)
	return b
}

func parseEnd(b []byte) endMsg {
	return endMsg{Frames: binary.LittleEndian.Uint64(b[16:]), HeldBack: binary.LittleEndian.Uint64(b[24:])}
}

func putBye(b []byte, m byeMsg) []byte {
	b = putHeader(b, msgBye, byeSize)
	binary.LittleEndian.PutUint64(b[16:], m.Frames)
	binary.LittleEndian.PutUint64(b[24:], m.HeldBack)
	return b
}

func parseBye(b []byte) byeMsg {
	return byeMsg{Frames: binary.LittleEndian.Uint64(b[16:]), HeldBack: binary.LittleEndian.Uint64(b[24:])}
}
