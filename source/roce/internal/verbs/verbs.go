// Package verbs is the table of RDMA verbs the roce source calls: a
// device's port, registered memory, completion queues and RC or UC queue
// pairs set up statically (no connection manager), receives posted for
// writes with immediate data, and writes with immediate data.
//
// Two implementations stand behind the one table. The real one opens
// libibverbs.so.1 (rdma-core) with dlopen on first use, as package fi
// opens libfabric, so that a program that never receives over RoCE never
// loads it. The fake one (fake.go) moves a write's bytes into another
// process's registered memory with process_vm_writev, in pieces, and
// delivers its completion through a completion queue in shared memory
// after a delay, so that two processes on a machine without an RDMA
// device meet as a front end and a receiver do, torn reads included; it
// fails the ways a NIC does (a queue pair in error, retries exceeded, a
// bad rkey, a full completion queue). Open returns the fake where
// H5INGEST_TEST_FAKE_VERBS names a directory, in which the processes
// meet.
package verbs

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
)

// FakeEnv names the directory where processes using the fake verbs
// meet; where it is set, Open returns the fake.
const FakeEnv = "H5INGEST_TEST_FAKE_VERBS"

// QPType is a queue pair's transport service.
type QPType int

// Queue pair types: reliable connected (acknowledged, retried) and
// unreliable connected (a lost packet loses its message, silently).
const (
	RC QPType = iota
	UC
)

func (t QPType) String() string {
	if t == UC {
		return "UC"
	}
	return "RC"
}

// QPState is a queue pair's state, as ibv_qp_state numbers it.
type QPState int

// Queue pair states.
const (
	StateReset QPState = iota
	StateInit
	StateRTR // ready to receive
	StateRTS // ready to send
	StateSQD
	StateSQE
	StateError
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state %d", int(s))
}

// Status is a work completion's status, as enum ibv_wc_status numbers it.
type Status int

// Completion statuses that the receiver and the sender tell apart.
const (
	Success           Status = 0
	LocLenErr         Status = 1
	LocQPOpErr        Status = 2
	LocProtErr        Status = 4
	WRFlushErr        Status = 5
	RemInvReqErr      Status = 9
	RemAccessErr      Status = 10
	RemOpErr          Status = 11
	RetryExcErr       Status = 12
	RNRRetryExcErr    Status = 13
	GeneralErr        Status = 21
	statusNamesLength        = 22
)

var statusNames = map[Status]string{
	Success: "success", LocLenErr: "local length error", LocQPOpErr: "local QP operation error",
	LocProtErr: "local protection error", WRFlushErr: "work request flushed (queue pair in error)",
	RemInvReqErr: "remote invalid request", RemAccessErr: "remote access error (bad rkey or address)",
	RemOpErr: "remote operation error", RetryExcErr: "transport retry counter exceeded (peer gone or unreachable)",
	RNRRetryExcErr: "RNR retry counter exceeded (no receive posted at the peer)", GeneralErr: "general error",
}

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("status %d", int(s))
}

// Opcode says what a completion completes.
type Opcode int

// Completion opcodes, as enum ibv_wc_opcode numbers them.
const (
	OpSend        Opcode = 0
	OpRDMAWrite   Opcode = 1
	OpRecv        Opcode = 128
	OpRecvRDMAImm Opcode = 129 // a write with immediate data, at its target
)

// Completion is one work completion.
type Completion struct {
	WRID    uint64 // the work request's id, as posted
	Status  Status
	Opcode  Opcode
	ByteLen uint32 // bytes written, for OpRecvRDMAImm
	Imm     uint32 // the immediate data, in host order
	QPNum   uint32 // the local queue pair
	Vendor  uint32 // the vendor's error syndrome, for people
}

// Port is what a device's port says of itself.
type Port struct {
	Device    string     // the device's name (mlx5_0, rxe0)
	Num       int        // the port, from 1
	State     string     // ACTIVE, DOWN ...
	LinkLayer string     // Ethernet (RoCE) or InfiniBand
	ActiveMTU int        // bytes
	GIDIndex  int        // the GID table entry used
	GID       netip.Addr // that entry's GID, as an IPv6 address
	GIDType   string     // "RoCE v1", "RoCE v2" or "IB", where the system says
}

// Remote is the peer's end of a queue pair, as exchanged out of band.
type Remote struct {
	GID netip.Addr // the peer's GID
	QPN uint32     // the peer's queue pair number
	PSN uint32     // the first packet sequence number the peer sends
}

// Memory is memory a queue pair's peer may write, registered.
type Memory interface {
	Bytes() []byte // the memory, valid until Close
	Addr() uint64  // its address, as the peer writes to it
	RKey() uint32  // the key the peer writes with
	LKey() uint32  // the key local work requests use
	Huge() bool    // backed by huge pages
	Close() error  // deregisters and frees it
}

// CQ is a completion queue.
type CQ interface {
	// Poll fills wc with the completions there are, up to len(wc), without
	// waiting, and returns how many. An error is the queue's own failure
	// (it overflowed): the queue pairs on it are in error.
	Poll(wc []Completion) (int, error)
	Close() error
}

// QP is a queue pair, moved through its states by hand as a front end's
// static setup does.
type QP interface {
	Num() uint32 // the queue pair number the peer addresses
	// Reset moves any state to RESET, dropping the posted work requests
	// without completing them: the queue pair may then be brought up
	// toward another peer, keeping its number.
	Reset() error
	// Init moves RESET to INIT, allowing remote writes.
	Init() error
	// ReadyToReceive moves INIT to RTR toward r, at mtu bytes.
	ReadyToReceive(r Remote, mtu int) error
	// ReadyToSend moves RTR to RTS, sending from psn.
	ReadyToSend(psn uint32) error
	// State returns the queue pair's state.
	State() (QPState, error)
	// PostRecv posts a receive of no buffer, consumed by a write with
	// immediate data, whose completion carries id.
	PostRecv(id uint64) error
	// PostWriteImm posts a signaled RDMA write of local (in m) to the
	// peer's addr under rkey, with immediate data imm.
	PostWriteImm(id uint64, m Memory, local []byte, addr uint64, rkey uint32, imm uint32) error
	Close() error
}

// Device is one port of an RDMA device, opened.
type Device interface {
	Port() Port
	// Register allocates size bytes that a peer may write (huge pages
	// where the system has them), registered for remote write.
	Register(size int) (Memory, error)
	// NewCQ creates a completion queue of at least entries entries.
	NewCQ(entries int) (CQ, error)
	// NewQP creates a queue pair of type t on cq (for sends and
	// receives), with room for sends work requests and recvs receives.
	NewQP(cq CQ, t QPType, sends, recvs int) (QP, error)
	Close() error
}

// ErrNoDevice is wrapped by Open's error where the machine has no RDMA
// device of that name.
var ErrNoDevice = errors.New("no RDMA device")

// Open opens port of the RDMA device named device ("" for the first),
// with GID table entry gidIndex: the fake's where FakeEnv is set, else
// libibverbs'.
func Open(device string, port, gidIndex int) (Device, error) {
	if dir := os.Getenv(FakeEnv); dir != "" {
		return openFake(dir, device, port, gidIndex)
	}
	return openIBV(device, port, gidIndex)
}
