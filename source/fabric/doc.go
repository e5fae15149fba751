// Package fabric receives detector frames over RDMA through libfabric, and
// sends them, for tests and load generation, the way a detector does.
//
// It speaks the wire protocol of docs/protocol.md: a Listener accepts one
// connection per detector module and hands out a Stream, a
// pipeline.Source whose frames point into registered slot memory (no
// copy); a Sender connects to a Listener and writes frames into free
// slots, waiting for credits when the receiver falls behind. The
// protocol's messages are encoded and decoded in pure Go (proto.go).
//
// Under it, package internal/fi is a thin cgo layer over libfabric's
// connected endpoints (FI_EP_MSG): on RoCE or InfiniBand the verbs
// provider makes them RC queue pairs; elsewhere the tcp provider runs the
// same calls. libfabric is opened on first use, so that a program that
// never opens the network never loads it. Every libfabric object is
// counted until closed (OpenObjects).
package fabric
