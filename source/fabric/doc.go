// Package fabric receives detector frames over RDMA through libfabric, and
// sends them, for tests and load generation, the way a detector does.
//
// The package has two layers. The lower one (Fabric, Domain, EventQueue,
// PassiveEndpoint, Endpoint, CompletionQueue, MemoryRegion) is a thin cgo
// layer over libfabric's connected endpoints (FI_EP_MSG), in fi.go and
// fi_helpers.h only: on RoCE or InfiniBand the verbs provider makes them
// RC queue pairs; elsewhere the tcp provider runs the same calls. Every
// libfabric object it opens is counted until closed (see OpenObjects).
//
// The upper layer speaks the wire protocol of docs/protocol.md: a Listener
// accepts one connection per detector module and hands out a Stream, an
// pipeline.Source whose frames point into registered slot memory (no copy);
// a Sender connects to a Listener and writes frames into free slots,
// waiting for credits when the receiver falls behind. The protocol's
// messages are encoded and decoded in pure Go (proto.go).
package fabric
