// Package fi is a thin cgo layer over libfabric's connected endpoints
// (FI_EP_MSG): fabric, domain, event queue, passive and active endpoints,
// completion queues and registered memory, with every object counted
// until closed. libfabric.so.1 is opened with dlopen on first use (Load),
// and the signal handlers its providers install are put back. Package
// fabric builds the receiver and the sender on it; nothing else uses it.
package fi

// #cgo LDFLAGS: -ldl
// #include "fi_helpers.h"
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// openObjects counts the libfabric objects (and fi_info lists and slot
// memory mappings) opened and not yet closed.
var openObjects atomic.Int64

// OpenObjects returns how many libfabric objects, fi_info lists and
// registered-memory mappings this package holds open. A program that has
// closed everything it opened sees 0.
func OpenObjects() int { return int(openObjects.Load()) }

// Error is a failed libfabric call: the operation and libfabric's error.
type Error struct {
	Op   string        // the call, with what it acted on
	Code syscall.Errno // libfabric's error code (its values are errno's)
	Text string        // fi_strerror, or the provider's own text
}

// Error returns the operation and libfabric's text for the error.
func (e *Error) Error() string { return e.Op + ": " + e.Text }

// Unwrap returns the errno, so that errors.Is(err, syscall.ECONNREFUSED)
// and the like work.
func (e *Error) Unwrap() error { return e.Code }

// Temporary reports whether trying again later may succeed: a full queue,
// a peer not yet listening, a timeout.
func (e *Error) Temporary() bool {
	switch e.Code {
	case syscall.EAGAIN, syscall.ECONNREFUSED, syscall.ETIMEDOUT, syscall.EINTR:
		return true
	}
	return false
}

var loaded struct {
	once sync.Once
	err  error
}

// Load opens libfabric.so.1 and resolves the functions the package calls.
// The library is not linked: a program that never opens the network never
// loads it (nor the provider libraries it pulls in, some of which sleep
// at load). GetInfo calls Load, and so every path to an object does; it
// does the work once and returns the same result to every call. Without
// the library the error says "libfabric.so.1 not found" and why.
func Load() error {
	loaded.once.Do(func() { loaded.err = load("libfabric.so.1") })
	return loaded.err
}

// load opens the library soname and resolves the functions the package
// calls, or leaves everything as it was and says why not.
func load(soname string) error {
	cname := C.CString(soname)
	defer C.free(unsafe.Pointer(cname))
	if msg := C.h5i_load(cname); msg != nil {
		return fmt.Errorf("%s not found (Debian package libfabric1): %s", soname, C.GoString(msg))
	}
	return nil
}

// fiError turns a negative libfabric return code into an *Error.
func fiError(op string, ret C.ssize_t) error {
	if ret >= 0 {
		return nil
	}
	code := -int(ret)
	return &Error{Op: op, Code: syscall.Errno(code), Text: C.GoString(C.h5i_strerror(C.int(code)))}
}

// Info describes one way to reach a peer: a provider, a fabric, and an
// address. It wraps one struct fi_info (GetInfo picks it from the list
// libfabric offers).
type Info struct {
	p *C.struct_fi_info
}

// Address formats and endpoint protocols of the hints.
const (
	AddrIPv4      = C.FI_SOCKADDR_IN  // struct sockaddr_in
	AddrIPv6      = C.FI_SOCKADDR_IN6 // struct sockaddr_in6
	ProtoUnspec   = C.FI_PROTO_UNSPEC
	ProtoRDMACMRC = C.FI_PROTO_RDMA_CM_IB_RC // verbs: RC queue pairs set up by the RDMA CM (InfiniBand, RoCE)
)

// Hints returns the address format and endpoint protocol GetInfo asks
// provider for at addr's host: IPv4 socket addresses unless the host is
// an IPv6 address, and for verbs RC queue pairs through the RDMA
// connection manager (the endpoints a detector's RDMA engine connects
// to; iWARP is not asked for).
func Hints(provider, host string) (addrFormat, protocol uint32) {
	addrFormat = AddrIPv4
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() && !a.Is4In6() {
		addrFormat = AddrIPv6
	}
	protocol = ProtoUnspec
	if provider == "verbs" {
		protocol = ProtoRDMACMRC
	}
	return addrFormat, protocol
}

// GetInfo asks libfabric for connected endpoints (FI_EP_MSG) with message
// and RMA capabilities on provider ("tcp", "verbs") for host:port addr,
// with the address format and protocol of Hints. With listen set the
// address is the local one to listen on; otherwise it is the peer's. Of
// the entries libfabric offers (verbs offers one per RDMA device and
// address), it takes the one whose address is addr's host (Pick).
func GetInfo(provider, addr string, listen bool) (*Info, error) {
	host, port, err := splitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if err := Load(); err != nil {
		return nil, fmt.Errorf("fi_getinfo provider %s address %s: %w", provider, addr, err)
	}
	cprov, cnode, cserv := C.CString(provider), C.CString(host), C.CString(port)
	defer C.free(unsafe.Pointer(cprov))
	defer C.free(unsafe.Pointer(cnode))
	defer C.free(unsafe.Pointer(cserv))
	src := C.int(0)
	if listen {
		src = 1
	}
	addrFormat, protocol := Hints(provider, host)
	var list *C.struct_fi_info
	if ret := C.h5i_getinfo(cprov, cnode, cserv, src, C.uint32_t(addrFormat), C.uint32_t(protocol), &list); ret != 0 {
		return nil, fiError(fmt.Sprintf("fi_getinfo provider %s address %s", provider, addr), C.ssize_t(ret))
	}
	if list == nil {
		return nil, fmt.Errorf("fi_getinfo provider %s address %s: no matching endpoint", provider, addr)
	}
	defer C.h5i_freeinfo(list)
	var entries []*C.struct_fi_info
	var offers []Offer
	for p := list; p != nil; p = C.h5i_next(p) {
		i := Info{p: p}
		o := Offer{Provider: i.Provider(), AddrFormat: i.AddrFormat(), Protocol: i.Protocol()}
		if listen {
			o.Addr = i.SrcAddr()
		} else {
			o.Addr = i.DestAddr()
		}
		entries = append(entries, p)
		offers = append(offers, o)
	}
	want, _ := netip.ParseAddr(host) // a host name matches any address
	k, err := Pick(offers, want, addrFormat)
	if err != nil {
		return nil, fmt.Errorf("fi_getinfo provider %s address %s: %w", provider, addr, err)
	}
	p := C.h5i_dupone(entries[k])
	if p == nil {
		return nil, fmt.Errorf("fi_getinfo provider %s address %s: fi_dupinfo: out of memory", provider, addr)
	}
	openObjects.Add(1)
	return &Info{p: p}, nil
}

// Offer is what Pick weighs of one entry libfabric offers.
type Offer struct {
	Provider   string
	AddrFormat uint32
	Protocol   uint32
	Addr       netip.AddrPort // the local address (listening), or the peer's
}

// Pick returns the index of the first offer of address format addrFormat
// whose address is want; when want is not valid (a host name) or
// unspecified (0.0.0.0, ::), the first of that format. An offer with no
// address, or one a provider reports in a form other than an IP socket
// address, never matches a given address.
func Pick(offers []Offer, want netip.Addr, addrFormat uint32) (int, error) {
	anyAddr := !want.IsValid() || want.IsUnspecified()
	var seen []string
	for k, o := range offers {
		if o.AddrFormat != addrFormat {
			seen = append(seen, fmt.Sprintf("%s address format %d", o.Provider, o.AddrFormat))
			continue
		}
		if anyAddr || (o.Addr.IsValid() && o.Addr.Addr().Unmap() == want.Unmap()) {
			return k, nil
		}
		seen = append(seen, fmt.Sprintf("%s at %v", o.Provider, o.Addr.Addr()))
	}
	return 0, fmt.Errorf("no endpoint at address %v among the %d offered (%s)", want, len(offers), strings.Join(seen, ", "))
}

func splitHostPort(addr string) (host, port string, err error) {
	ap, err := netip.ParseAddrPort(addr)
	if err == nil {
		return ap.Addr().String(), fmt.Sprint(ap.Port()), nil
	}
	// A host name: split at the last colon.
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			if i == 0 || i == len(addr)-1 {
				break
			}
			return addr[:i], addr[i+1:], nil
		}
	}
	return "", "", fmt.Errorf("address %q: want host:port", addr)
}

// Provider returns the provider's name.
func (i *Info) Provider() string { return C.GoString(C.h5i_prov_name(i.p)) }

// AddrFormat returns the format of the info's addresses (AddrIPv4, ...).
func (i *Info) AddrFormat() uint32 { return uint32(C.h5i_addr_format(i.p)) }

// Protocol returns the endpoint's protocol (ProtoRDMACMRC for verbs).
func (i *Info) Protocol() uint32 { return uint32(C.h5i_protocol(i.p)) }

// SrcAddr returns the local address, where it is an IP socket address.
func (i *Info) SrcAddr() netip.AddrPort {
	var n C.size_t
	p := C.h5i_src_addr(i.p, &n)
	return sockaddr(p, n)
}

// DestAddr returns the peer's address, where it is an IP socket address.
func (i *Info) DestAddr() netip.AddrPort {
	var n C.size_t
	p := C.h5i_dest_addr(i.p, &n)
	return sockaddr(p, n)
}

// sockaddr reads the socket address of n bytes at p; the zero AddrPort
// where it is none or not IP.
func sockaddr(p unsafe.Pointer, n C.size_t) netip.AddrPort {
	if p == nil || n < 8 {
		return netip.AddrPort{}
	}
	a, err := parseSockaddr(C.GoBytes(p, C.int(n)))
	if err != nil {
		return netip.AddrPort{}
	}
	return a
}

// FakeMRMode, FakeInjectSize and FakeMaxMessage change what the info says
// of its provider, before a domain or endpoint is opened with it: the
// tests of package fabric use them to run the paths a provider such as
// verbs takes (FI_MR_VIRT_ADDR, no inject, a smaller largest message) on
// the tcp provider, which honours them.
func (i *Info) FakeMRMode(mode uint64) { C.h5i_set_mr_mode(i.p, C.uint64_t(mode)) }

// FakeInjectSize sets the info's inject size (see FakeMRMode).
func (i *Info) FakeInjectSize(n int) { C.h5i_set_inject_size(i.p, C.size_t(n)) }

// FakeMaxMessage sets the info's largest message (see FakeMRMode).
func (i *Info) FakeMaxMessage(n uint64) { C.h5i_set_max_msg_size(i.p, C.size_t(n)) }

// InjectSize returns the largest message that can be injected (sent
// without a completion, from any memory).
func (i *Info) InjectSize() int { return int(C.h5i_inject_size(i.p)) }

// TxSize and RxSize return the depths of the transmit and receive queues.
func (i *Info) TxSize() int { return int(C.h5i_tx_size(i.p)) }

// RxSize returns the depth of the receive queue.
func (i *Info) RxSize() int { return int(C.h5i_rx_size(i.p)) }

// MaxMessage returns the largest message the endpoint sends.
func (i *Info) MaxMessage() uint64 { return uint64(C.h5i_max_msg_size(i.p)) }

const (
	// mrVirtAddr is the memory registration mode in which remote
	// addresses are virtual addresses, not offsets. The hints in
	// fi_helpers.h accept it along with FI_MR_LOCAL, FI_MR_ALLOCATED and
	// FI_MR_PROV_KEY, which Register meets as it is.
	mrVirtAddr = C.FI_MR_VIRT_ADDR
	// MRVirtAddr is mrVirtAddr, for FakeMRMode.
	MRVirtAddr = mrVirtAddr
)

// Access flags of a memory region (fi_mr_reg): what this end sends from
// (AccessSend), receives into (AccessRecv) or writes from (AccessWrite),
// and what a peer may write into (AccessRemoteWrite). A region is
// registered for no more than it is used for: a sender's buffers never
// take a remote write.
const (
	AccessSend        = C.FI_SEND
	AccessRecv        = C.FI_RECV
	AccessWrite       = C.FI_WRITE
	AccessRemoteWrite = C.FI_REMOTE_WRITE
)

// MRMode returns the memory registration mode bits the provider requires.
func (i *Info) MRMode() uint64 { return uint64(C.h5i_mr_mode(i.p)) }

// Close frees the info.
func (i *Info) Close() error {
	if i.p != nil {
		C.h5i_freeinfo(i.p)
		i.p = nil
		openObjects.Add(-1)
	}
	return nil
}

// fid is an open libfabric object.
type fid struct {
	p    *C.struct_fid
	name string
}

func (f *fid) open(p *C.struct_fid, name string) {
	f.p, f.name = p, name
	openObjects.Add(1)
}

// Close closes the object; closing a closed one does nothing.
func (f *fid) Close() error {
	if f.p == nil {
		return nil
	}
	ret := C.h5i_close(f.p)
	f.p = nil
	openObjects.Add(-1)
	return fiError("fi_close "+f.name, C.ssize_t(ret))
}

// Fabric is an open fabric (fi_fabric).
type Fabric struct {
	fid
	f        *C.struct_fid_fabric
	provider string
}

// OpenFabric opens the fabric info describes.
func OpenFabric(info *Info) (*Fabric, error) {
	fab := &Fabric{provider: info.Provider()}
	if ret := C.h5i_fabric(info.p, &fab.f); ret != 0 {
		return nil, fiError("fi_fabric "+info.Provider(), C.ssize_t(ret))
	}
	fab.open(C.h5i_fid_fabric(fab.f), "fabric")
	return fab, nil
}

// Domain is an open domain (fi_domain): one NIC, for the tcp provider one
// network interface.
type Domain struct {
	fid
	d        *C.struct_fid_domain
	mrMode   uint64
	provider string
}

// OpenDomain opens the domain info describes on fab.
func OpenDomain(fab *Fabric, info *Info) (*Domain, error) {
	dom := &Domain{mrMode: info.MRMode(), provider: fab.provider}
	if ret := C.h5i_domain(fab.f, info.p, &dom.d); ret != 0 {
		return nil, fiError("fi_domain", C.ssize_t(ret))
	}
	dom.open(C.h5i_fid_domain(dom.d), "domain")
	return dom, nil
}

// EventQueue is a connection-management event queue (fi_eq_open).
type EventQueue struct {
	fid
	eq       *C.struct_fid_eq
	provider string
}

// OpenEventQueue opens an event queue on fab.
func OpenEventQueue(fab *Fabric) (*EventQueue, error) {
	q := &EventQueue{provider: fab.provider}
	if ret := C.h5i_eq_open(fab.f, &q.eq); ret != 0 {
		return nil, fiError("fi_eq_open", C.ssize_t(ret))
	}
	q.open(C.h5i_fid_eq(q.eq), "event queue")
	return q, nil
}

// Event kinds read from an EventQueue.
const (
	EventConnReq   = C.FI_CONNREQ   // a peer asks to connect; Event.Info is set
	EventConnected = C.FI_CONNECTED // the connection is up
	EventShutdown  = C.FI_SHUTDOWN  // the peer closed the connection
)

// Event is one connection-management event.
type Event struct {
	Kind uint32
	Info *Info // for EventConnReq: the info to open the endpoint with; the caller closes it
}

// Read waits up to timeout for an event. It returns ok false when none
// came in time. A zero timeout does not wait.
func (q *EventQueue) Read(timeout time.Duration) (ev Event, ok bool, err error) {
	var kind C.uint32_t
	var info *C.struct_fi_info
	var ecode, perr C.int
	ms := C.int(timeout.Milliseconds())
	ret := C.h5i_eq_sread(q.eq, ms, &kind, &info, &ecode, &perr)
	switch {
	case ret == -C.FI_EAGAIN || ret == -C.FI_ETIMEDOUT || ret == -C.FI_EINTR:
		// EINTR: the Go runtime's signals (preemption) cut waits short.
		return Event{}, false, nil
	case ret == -C.FI_EAVAIL:
		op := "connection event"
		if providerCodes(q.provider) && perr != 0 {
			op += fmt.Sprintf(" (provider error %d)", int(perr))
		}
		return Event{}, false, fiError(op, -C.ssize_t(ecode))
	case ret < 0:
		return Event{}, false, fiError("fi_eq_sread", C.ssize_t(ret))
	}
	ev.Kind = uint32(kind)
	if info != nil {
		openObjects.Add(1)
		ev.Info = &Info{p: info}
	}
	return ev, true, nil
}

// CompletionQueue is a completion queue (fi_cq_open) of FI_CQ_FORMAT_DATA
// entries.
type CompletionQueue struct {
	fid
	cq       *C.struct_fid_cq
	entries  *C.struct_fi_cq_data_entry // C array of MaxBatch entries
	errBuf   *C.char
	provider string
}

// MaxBatch is how many completions a Read returns at most.
const MaxBatch = 16

const errBufLen = 256

// Completion is one finished operation.
type Completion struct {
	Context uint64 // the context the operation was posted with
	Len     int    // bytes received, for receives
	Flags   uint64 // FI_SEND, FI_RECV, FI_RMA, ...
}

// OpenCompletionQueue opens a completion queue of size entries on dom.
func OpenCompletionQueue(dom *Domain, size int) (*CompletionQueue, error) {
	q := &CompletionQueue{provider: dom.provider}
	if ret := C.h5i_cq_open(dom.d, C.size_t(size), &q.cq); ret != 0 {
		return nil, fiError("fi_cq_open", C.ssize_t(ret))
	}
	q.open(C.h5i_fid_cq(q.cq), "completion queue")
	q.entries = (*C.struct_fi_cq_data_entry)(C.calloc(MaxBatch, C.sizeof_struct_fi_cq_data_entry))
	q.errBuf = (*C.char)(C.calloc(1, errBufLen))
	return q, nil
}

// providerCodes reports whether provider's own error codes (prov_errno)
// say something of their own. The socket providers (tcp, sockets, udp,
// net) fill them with the errno of whatever system call ran last, often
// one that has nothing to do with the error ("Operation canceled (No such
// file or directory)"), so their text is left out; verbs gives the work
// completion's status, which is kept.
func providerCodes(provider string) bool {
	switch provider {
	case "tcp", "sockets", "udp", "net", "tcp;ofi_rxm", "":
		return false
	}
	return true
}

// withProviderText returns text with the provider's own text for its
// error code provErr added, where the provider's codes mean something
// (providerCodes), the code is not 0, and its text is not text again.
func withProviderText(provider, text string, provErr int, provText string) string {
	if !providerCodes(provider) || provErr == 0 || provText == "" || provText == text {
		return text
	}
	return text + " (" + provText + ")"
}

// CompletionError is an operation that completed in error.
type CompletionError struct {
	Context uint64 // the failed operation's context
	Err     *Error
}

// Error returns the error the completion carries.
func (e *CompletionError) Error() string { return e.Err.Error() }

// Unwrap returns the libfabric error.
func (e *CompletionError) Unwrap() error { return e.Err }

// Read fills dst with up to len(dst) (at most 16) completions, waiting up
// to timeout for the first when timeout is not 0, and returns how many it
// read: 0 when none came. An operation that failed is returned as a
// *CompletionError. Read does not allocate, but for errors.
func (q *CompletionQueue) Read(dst []Completion, timeout time.Duration) (int, error) {
	n := min(len(dst), MaxBatch)
	var errCtx C.uint64_t
	var ecode, perr C.int
	ms := C.int(0)
	if timeout > 0 {
		ms = C.int(max(1, timeout.Milliseconds()))
	}
	ret := C.h5i_cq_read(q.cq, q.entries, C.size_t(n), ms, &errCtx, &ecode, &perr, q.errBuf, errBufLen)
	switch {
	case ret == -C.FI_EAGAIN || ret == -C.FI_ETIMEDOUT || ret == -C.FI_EINTR:
		// EINTR: the Go runtime's signals (preemption) cut waits short.
		return 0, nil
	case ret == -C.FI_EAVAIL:
		e := fiError("completion", -C.ssize_t(ecode)).(*Error)
		e.Text = withProviderText(q.provider, e.Text, int(perr), C.GoString(q.errBuf))
		return 0, &CompletionError{Context: uint64(errCtx), Err: e}
	case ret < 0:
		return 0, fiError("fi_cq_read", C.ssize_t(ret))
	}
	entries := unsafe.Slice(q.entries, MaxBatch)
	for i := range int(ret) {
		e := &entries[i]
		dst[i] = Completion{Context: uint64(uintptr(e.op_context)), Len: int(e.len), Flags: uint64(e.flags)}
	}
	return int(ret), nil
}

// Close closes the queue and frees its buffers.
func (q *CompletionQueue) Close() error {
	err := q.fid.Close()
	if q.entries != nil {
		C.free(unsafe.Pointer(q.entries))
		C.free(unsafe.Pointer(q.errBuf))
		q.entries, q.errBuf = nil, nil
	}
	return err
}

// Completion flags.
const (
	FlagSend = C.FI_SEND
	FlagRecv = C.FI_RECV
	FlagRMA  = C.FI_RMA
)

// PassiveEndpoint listens for connection requests (fi_passive_ep).
type PassiveEndpoint struct {
	fid
	pep *C.struct_fid_pep
}

// ListenPassive opens a passive endpoint for info on fab, reporting its
// connection requests to eq, and starts listening.
func ListenPassive(fab *Fabric, info *Info, eq *EventQueue) (*PassiveEndpoint, error) {
	pe := &PassiveEndpoint{}
	if ret := C.h5i_passive_ep(fab.f, info.p, eq.eq, &pe.pep); ret != 0 {
		return nil, fiError("fi_passive_ep", C.ssize_t(ret))
	}
	pe.open(C.h5i_fid_pep(pe.pep), "passive endpoint")
	if ret := C.h5i_listen(pe.pep); ret != 0 {
		pe.Close()
		return nil, fiError("fi_listen", C.ssize_t(ret))
	}
	return pe, nil
}

// Addr returns the address the endpoint listens on (with the port the
// system picked, when it was asked for port 0).
func (pe *PassiveEndpoint) Addr() (netip.AddrPort, error) {
	return getname(pe.p)
}

// Reject refuses a connection request.
func (pe *PassiveEndpoint) Reject(req *Info) error {
	return fiError("fi_reject", C.ssize_t(C.h5i_reject(pe.pep, req.p)))
}

func getname(f *C.struct_fid) (netip.AddrPort, error) {
	var buf [128]byte
	n := C.size_t(len(buf))
	p := C.malloc(C.size_t(len(buf)))
	defer C.free(p)
	if ret := C.h5i_getname(f, p, &n); ret != 0 {
		return netip.AddrPort{}, fiError("fi_getname", C.ssize_t(ret))
	}
	copy(buf[:], unsafe.Slice((*byte)(p), len(buf)))
	a, err := parseSockaddr(buf[:min(int(n), len(buf))])
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("fi_getname: %w", err)
	}
	return a, nil
}

// parseSockaddr decodes a struct sockaddr_in or sockaddr_in6.
func parseSockaddr(b []byte) (netip.AddrPort, error) {
	if len(b) < 8 {
		return netip.AddrPort{}, fmt.Errorf("socket address of %d bytes", len(b))
	}
	family := binary.NativeEndian.Uint16(b[0:])
	port := binary.BigEndian.Uint16(b[2:])
	switch {
	case family == syscall.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
	case family == syscall.AF_INET6 && len(b) >= 24:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), port), nil
	}
	return netip.AddrPort{}, fmt.Errorf("address family %d is not IP", family)
}

// Endpoint is a connected endpoint (fi_endpoint, FI_EP_MSG).
type Endpoint struct {
	fid
	ep *C.struct_fid_ep
}

// OpenEndpoint opens an endpoint on dom for info, binds eq for its
// connection events, tx for the completions of its sends and writes and rx
// for those of its receives, and enables it.
func OpenEndpoint(dom *Domain, info *Info, eq *EventQueue, tx, rx *CompletionQueue) (*Endpoint, error) {
	e := &Endpoint{}
	if ret := C.h5i_endpoint(dom.d, info.p, eq.eq, tx.cq, rx.cq, &e.ep); ret != 0 {
		return nil, fiError("fi_endpoint", C.ssize_t(ret))
	}
	e.open(C.h5i_fid_ep(e.ep), "endpoint")
	return e, nil
}

// Accept accepts the connection request the endpoint was opened for; the
// connection is up at the EventConnected event.
func (e *Endpoint) Accept() error {
	return fiError("fi_accept", C.ssize_t(C.h5i_accept(e.ep)))
}

// Connect asks the peer in info to connect; the connection is up at the
// EventConnected event.
func (e *Endpoint) Connect(info *Info) error {
	return fiError("fi_connect", C.ssize_t(C.h5i_connect(e.ep, info.p)))
}

// Shutdown closes the connection; the peer sees EventShutdown.
func (e *Endpoint) Shutdown() error {
	return fiError("fi_shutdown", C.ssize_t(C.h5i_shutdown(e.ep)))
}

// Recv posts a receive into b (registered in mr) with context ctx.
func (e *Endpoint) Recv(b []byte, mr *MemoryRegion, ctx uint64) error {
	ret := C.h5i_recv(e.ep, unsafe.Pointer(unsafe.SliceData(b)), C.size_t(len(b)), mr.desc, C.uint64_t(ctx))
	return fiError("fi_recv", ret)
}

// Send posts a send of b (registered in mr) with context ctx.
func (e *Endpoint) Send(b []byte, mr *MemoryRegion, ctx uint64) error {
	ret := C.h5i_send(e.ep, unsafe.Pointer(unsafe.SliceData(b)), C.size_t(len(b)), mr.desc, C.uint64_t(ctx))
	return fiError("fi_send", ret)
}

// Inject sends a small message (at most Info.InjectSize bytes) from any
// memory; b may be reused at once and no completion is reported.
func (e *Endpoint) Inject(b []byte) error {
	ret := C.h5i_inject(e.ep, unsafe.Pointer(unsafe.SliceData(b)), C.size_t(len(b)))
	return fiError("fi_inject", ret)
}

// Write posts an RDMA write of b (registered in mr) to the peer's memory at
// addr with key, with context ctx.
func (e *Endpoint) Write(b []byte, mr *MemoryRegion, addr, key, ctx uint64) error {
	ret := C.h5i_write(e.ep, unsafe.Pointer(unsafe.SliceData(b)), C.size_t(len(b)), mr.desc,
		C.uint64_t(addr), C.uint64_t(key), C.uint64_t(ctx))
	return fiError("fi_write", ret)
}

// MemoryRegion is memory registered with a domain (fi_mr_reg).
type MemoryRegion struct {
	fid
	mr     *C.struct_fid_mr
	desc   unsafe.Pointer
	base   uintptr
	access uint64
	// Key is the key a peer names the region by.
	Key uint64
	// Addr is the address a peer writes at offset 0 of the region: the
	// virtual address where the provider wants FI_MR_VIRT_ADDR, else 0.
	Addr uint64
}

var nextKey atomic.Uint64

// Register registers m, all of it, with dom for access (Access flags).
// The memory may not be unmapped before dom is closed (Memory.Free says
// so): a provider that caches registrations (verbs) keeps them by virtual
// address until its domain closes, and would give memory mapped later at
// the same address the old pages.
func Register(dom *Domain, m *Memory, access uint64) (*MemoryRegion, error) {
	b := m.b
	if dom.p == nil || len(b) == 0 {
		return nil, fmt.Errorf("fi_mr_reg of %d bytes: the domain or the memory is closed", len(b))
	}
	r := &MemoryRegion{base: uintptr(unsafe.Pointer(unsafe.SliceData(b))), access: access}
	key := nextKey.Add(1) // ignored where the provider picks keys
	ret := C.h5i_mr_reg(dom.d, unsafe.Pointer(unsafe.SliceData(b)), C.size_t(len(b)), C.uint64_t(access), C.uint64_t(key), &r.mr)
	if ret != 0 {
		return nil, fiError(fmt.Sprintf("fi_mr_reg of %d bytes", len(b)), C.ssize_t(ret))
	}
	r.open(C.h5i_fid_mr(r.mr), "memory region")
	r.desc = C.h5i_mr_desc(r.mr)
	r.Key = uint64(C.h5i_mr_key(r.mr))
	if dom.mrMode&mrVirtAddr != 0 {
		r.Addr = uint64(r.base)
	}
	m.doms = append(m.doms, dom)
	return r, nil
}

// Access returns the access flags the region was registered with.
func (r *MemoryRegion) Access() uint64 { return r.access }

// Memory is page-aligned memory outside the Go heap, for registration.
type Memory struct {
	b    []byte
	doms []*Domain // the domains it was registered with
}

// Alloc maps n bytes (rounded up to whole pages) of zeroed memory outside
// the Go heap.
func Alloc(n int) (*Memory, error) {
	page := syscall.Getpagesize()
	n = (n + page - 1) &^ (page - 1)
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes: %w", n, err)
	}
	openObjects.Add(1)
	return &Memory{b: b}, nil
}

// Bytes returns the memory.
func (m *Memory) Bytes() []byte { return m.b }

// ErrRegistered is returned by Memory.Free for memory registered with a
// domain that is still open; the memory stays mapped.
var ErrRegistered = errors.New("memory registered with a domain that is still open")

// Free unmaps the memory; no slice of it may be used after. It refuses,
// leaving the memory mapped, while a domain it was registered with is
// open: close the regions and then the domain first.
func (m *Memory) Free() error {
	if m.b == nil {
		return nil
	}
	for _, d := range m.doms {
		if d.p != nil {
			return fmt.Errorf("unmap %d bytes: %w", len(m.b), ErrRegistered)
		}
	}
	err := syscall.Munmap(m.b)
	m.b, m.doms = nil, nil
	openObjects.Add(-1)
	return err
}
