// Package receive says what a live source of detector frames is to a scan:
// a Listener that waits for the detector's modules and hands out a Stream
// for each, a pipeline.Source of the frames the module delivers.
//
// Two sources implement it. Package fabric receives from a sender that
// speaks h5ingest's own protocol over libfabric (a connection, a hello,
// credits per slot); package roce receives from a detector front end that
// writes frames with RDMA immediates into a ring over a statically
// configured queue pair and never waits for the receiver. A scan opens
// either through the registry entry that source.transport names, with a
// Setup, and uses only the interfaces here.
package receive

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"go.uber.org/zap"

	"h5ingest/config"
	"h5ingest/frame"
	"h5ingest/pipeline"
)

// ErrRefused is wrapped by Accept's errors for a sender that was refused:
// the wait goes on for another.
var ErrRefused = errors.New("sender refused")

// ErrTimeout is wrapped by errors for a peer that did not connect, answer
// or send in time.
var ErrTimeout = errors.New("timed out")

// ErrNoSender is wrapped by the error of a wait for a sender that none
// answered within the connect timeout: the detector is silent. It is an
// ErrTimeout too, and says the same.
var ErrNoSender error = noSenderError{}

type noSenderError struct{}

func (noSenderError) Error() string        { return ErrTimeout.Error() }
func (noSenderError) Is(target error) bool { return target == ErrTimeout }

// Module is what a stream knows of the module whose frames it delivers.
type Module struct {
	ID     uint16       // the module's id (0-based)
	Format frame.Format // the format of its frames
	Frames uint64       // the frames the module said it will send; 0 where it said none
	Mode   string       // how its frames arrive, for people and logs
	// HeadersWritten says the sender writes bare payloads: the frame
	// headers the stream hands out (and a recording keeps) are the
	// receiver's own.
	HeadersWritten bool
}

// Stats counts what a Stream received.
type Stats struct {
	Frames uint64 // frames received
	Bytes  uint64 // bytes received, headers included
	// HeldBack is how long every slot of the ring was in use, so that a
	// sender that waits for the receiver could not send.
	HeldBack time.Duration
	// SenderFrames and SenderHeldBack are what the sender reported at the
	// end of the scan, where it reports anything.
	SenderFrames   uint64
	SenderHeldBack time.Duration
	// Uncredited says the sender never waits for the receiver (a front
	// end without credits): Overrun, Gaps, Damaged and Disordered apply.
	Uncredited bool
	// Overrun counts the frames a sender that never waits wrote over
	// before they were read whole: each is recorded missing.
	Overrun uint64
	// Gaps counts the frames a sender that never waits skipped: a frame
	// number more than one past the one before.
	Gaps uint64
	// Damaged counts the writes of a sender that never waits whose slot
	// held no whole frame (a header that is not a frame's, or that names
	// another frame than the write did), and writes to a slot beyond the
	// ring: each frame is not taken.
	Damaged uint64
	// Disordered counts the frames whose number repeated one, or went
	// back behind the highest, that came before.
	Disordered uint64
	// Undelivered counts the frames received that the stream never hands
	// out: written over before Next came to them, not whole, beyond the
	// plan, or come after a Stop.
	Undelivered uint64
	// RingUsed and RingSlots are the ring's slots holding frames not yet
	// read, and all its slots.
	RingUsed, RingSlots int
}

// Recorder keeps the bytes of every frame exactly as it arrived (a
// *capture.Writer is one). A WriteRecord error stops the recording, never
// the stream: a side copy must not cost the scan its frames.
type Recorder interface {
	WriteRecord(rec []byte) error
}

// Stream is one module's frames: a pipeline.Source whose frames stay valid
// until released. Next is called from one goroutine at a time; Release,
// Stop, Stats and Close from any.
type Stream interface {
	pipeline.Source
	// Module says which module the stream delivers, and how.
	Module() Module
	// Record hands every frame to r as it arrives; call it before the
	// first Next.
	Record(r Recorder)
	// RecordErr returns the error that stopped the recording, or nil.
	RecordErr() error
	// Stop makes the stream take no frame that arrives from now on: Next
	// hands out those that arrived before, then returns cause.
	Stop(cause error)
	// Stats returns what the stream has received so far.
	Stats() Stats
	// Close closes the stream; no frame of it may be used after.
	Close() error
}

// Listener waits for a detector's modules. Accept is called from one
// goroutine at a time; Stop and Close from any.
type Listener interface {
	// Accept returns the next module's stream, an error wrapping
	// ErrRefused for a sender refused (call again), or one wrapping
	// ErrTimeout when none came within the connect timeout.
	Accept(ctx context.Context) (Stream, error)
	// Addr says where the listener waits, for people.
	Addr() string
	// Stop refuses every sender from now on with reason; a module whose
	// sender is refused so is named by a *StoppedError from Accept.
	Stop(reason string)
	// Close stops listening; streams already accepted stay open.
	Close() error
}

// Station is a receiver set up once and used scan after scan, as a
// detector whose links are configured statically (roce's queue pairs)
// meets its receiver once: the scan service opens it at start-up and each
// scan takes a Listener of it, over links and rings emptied for the scan.
type Station interface {
	// Scan returns the listener of one scan: a setup whose source keys
	// differ from the station's in what its links are made of is refused,
	// and so is a module already in a scan.
	Scan(Setup) (Listener, error)
	// Params returns the receiver's end of every link, as the sender
	// needs it, for JSON.
	Params() any
	// SetPeers takes the senders' ends of the links, as JSON, where the
	// profile lets a control system give them (ErrPeersFixed otherwise).
	SetPeers(data []byte) error
	// ClearPeers forgets the senders' ends SetPeers gave: the next scans
	// take them where the profile and the command line say.
	ClearPeers() error
	// Close closes every link; no scan may use the station after.
	Close() error
}

// ErrPeersFixed is wrapped by Station.SetPeers's error where the profile
// does not let a control system give the senders' ends.
var ErrPeersFixed = errors.New("the senders' ends are the profile's")

// Setup is what a scan asks of a listener: the profile's source keys and
// what the scan itself decides.
type Setup struct {
	Source config.Source // the profile's source keys
	Format frame.Format  // the detector's frames, as the profile gives them
	// Addr is where to listen, host:port; "" for the profile's
	// source.address and source.port.
	Addr string
	// Modules are the ids of the modules the scan takes, in the order of
	// the profile's detector.modules.
	Modules []int
	// Frames is the scan's planned frame count, per module; 0: no plan.
	Frames int
	// InFlight is how many of a module's frames the scan's pipeline may
	// hold at once, handed out and not released (pipeline.Slots); 0 where
	// not known.
	InFlight int
	// ParamsFile, where set, is where a source set up out of band writes
	// its end of each module's link for the sender (roce: acquire's
	// --rdma-params); PeerFile where it reads the sender's (--front-end).
	ParamsFile, PeerFile string
	// Check, where set, refuses a module's sender the scan cannot take
	// (another module, another frame format).
	Check func(Module) error
	// ProfileOnly says the setup is a profile's alone, checked without a
	// scan (profiles check): what a command gives beside the profile
	// (ParamsFile, PeerFile) is not there to check.
	ProfileOnly bool
	// Log, where set, logs what the source does beside the scan.
	Log *zap.Logger
}

// StoppedError is wrapped by Accept's error for a module's sender that
// came after Stop: it was refused with Stop's reason.
type StoppedError struct {
	Module uint16 // the module the sender named
	Reason string // Stop's reason, which the sender was told
}

func (e *StoppedError) Error() string {
	return fmt.Sprintf("module %d connected after the stop and was refused (%s)", e.Module, e.Reason)
}

// SlotOf returns the index in frames of f, a frame a stream handed out
// from its ring (one Frame per slot), found from its address in constant
// time; -1 for a frame that is not one of frames.
func SlotOf(frames []pipeline.Frame, f *pipeline.Frame) int {
	if len(frames) == 0 || f == nil {
		return -1
	}
	off := uintptr(unsafe.Pointer(f)) - uintptr(unsafe.Pointer(&frames[0]))
	i := off / unsafe.Sizeof(frames[0])
	if i >= uintptr(len(frames)) || &frames[i] != f {
		return -1
	}
	return int(i)
}
