package verbs

// #cgo LDFLAGS: -ldl
// #include "ibv_helpers.h"
import "C"

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// libibverbs is the library the real verbs open, and the Debian package
// that has it.
const (
	libibverbs    = "libibverbs.so.1"
	libibverbsDeb = "libibverbs1"
)

// openObjects counts the libibverbs objects (devices, registered memory,
// completion queues, queue pairs) opened and not yet closed.
var openObjects atomic.Int64

// OpenObjects returns how many libibverbs objects (devices, registered
// memory, completion queues, queue pairs) the real verbs hold open. A
// program that has closed everything it opened sees 0.
func OpenObjects() int { return int(openObjects.Load()) }

var loaded struct {
	once sync.Once
	err  error
}

// loadIBV opens libibverbs.so.1 and resolves the functions the real
// verbs call, once; every later call returns the first one's result.
func loadIBV() error {
	loaded.once.Do(func() { loaded.err = load(libibverbs) })
	return loaded.err
}

// load opens the library soname and resolves the functions the package
// calls, or leaves everything unresolved and says why not.
func load(soname string) error {
	cname := C.CString(soname)
	defer C.free(unsafe.Pointer(cname))
	if msg := C.h5v_load(cname); msg != nil {
		return fmt.Errorf("%s not found (Debian package %s): %s", soname, libibverbsDeb, C.GoString(msg))
	}
	return nil
}

// callError turns the return value of a libibverbs call that returns 0
// or an errno value (some providers return it negated) into an error
// naming op.
func callError(op string, ret C.int) error {
	if ret == 0 {
		return nil
	}
	if ret < 0 {
		ret = -ret
	}
	return fmt.Errorf("%s: %w", op, syscall.Errno(ret))
}

// nullError is the error of a libibverbs call that returned NULL, with
// the errno it left (err), or EIO where it left none.
func nullError(op string, err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) || errno == 0 {
		errno = syscall.EIO
	}
	return fmt.Errorf("%s: %w", op, errno)
}

// hint is what Open's errors tell a person to look at.
const hint = "ibv_devinfo lists the devices and their ports; on a host without an RDMA NIC, " +
	"soft-RoCE (RoCE v2 only): modprobe rdma_rxe; rdma link add rxe0 type rxe netdev IFACE"

// deviceText names what Open looks for: "RDMA device mlx5_0 port 1", or
// "the first RDMA device, port 1".
func deviceText(device string, port int) string {
	if device == "" {
		return fmt.Sprintf("the first RDMA device, port %d", port)
	}
	return fmt.Sprintf("RDMA device %s port %d", device, port)
}

// pickDevice returns the index in names of the device named want, or of
// the first where want is "", or an error wrapping ErrNoDevice that says
// what there is. listErr is why the list could not be read, if it could
// not.
func pickDevice(names []string, want string, port int, listErr error) (int, error) {
	for i, n := range names {
		if want == "" || n == want {
			return i, nil
		}
	}
	found := "the machine has none"
	switch {
	case errors.Is(listErr, syscall.ENOSYS):
		found = fmt.Sprintf("the kernel offers none, its RDMA modules (ib_uverbs and the NIC's driver) not loaded (%v)", listErr)
	case listErr != nil:
		found = fmt.Sprintf("the machine has none (%v)", listErr)
	case len(names) > 0:
		found = "found " + strings.Join(names, ", ")
	}
	named := ""
	if want != "" {
		named = " named " + want
	}
	return -1, fmt.Errorf("open %s: %w%s: %s; %s", deviceText(want, port), ErrNoDevice, named, found, hint)
}

// portStateNames are enum ibv_port_state's names, as ibv_devinfo prints
// them.
var portStateNames = [...]string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}

// portStateName returns the name of port state s (enum ibv_port_state).
func portStateName(s int) string {
	if s >= 0 && s < len(portStateNames) {
		return portStateNames[s]
	}
	return "state " + strconv.Itoa(s)
}

// linkLayerName returns the name of link layer l (IBV_LINK_LAYER_*):
// Ethernet for RoCE, else InfiniBand.
func linkLayerName(l int) string {
	if l == C.IBV_LINK_LAYER_ETHERNET {
		return "Ethernet"
	}
	return "InfiniBand"
}

// mtuBytes returns the bytes of path MTU e (enum ibv_mtu), or 0 for a
// value that is none.
func mtuBytes(e int) int {
	if e < C.IBV_MTU_256 || e > C.IBV_MTU_4096 {
		return 0
	}
	return 128 << e
}

// mtuEnum returns the enum ibv_mtu value of a path MTU of n bytes, which
// must be 256, 512, 1024, 2048 or 4096.
func mtuEnum(n int) (int, error) {
	for e := C.IBV_MTU_256; e <= C.IBV_MTU_4096; e++ {
		if mtuBytes(e) == n {
			return e, nil
		}
	}
	return 0, fmt.Errorf("path MTU %d bytes: RDMA's are 256, 512, 1024, 2048 or 4096", n)
}

// gidAddr returns GID g as the IPv6 address it is (RoCE v2 GIDs of IPv4
// addresses are IPv4-mapped: ::ffff:10.0.0.2).
func gidAddr(g [16]byte) netip.Addr { return netip.AddrFrom16(g) }

// gidBytes returns the 16 bytes of GID a; an IPv4 address becomes its
// IPv4-mapped GID, as RoCE v2 forms it.
func gidBytes(a netip.Addr) ([16]byte, error) {
	if !a.IsValid() {
		return [16]byte{}, errors.New("no GID given")
	}
	if a.Zone() != "" {
		return [16]byte{}, fmt.Errorf("GID %s: a GID has no zone", a)
	}
	return a.As16(), nil
}

// gidTypeName names the type of a GID table entry: t is enum
// ibv_gid_type as libibverbs says it, or -1 where it cannot, and then
// sysfs is the port's gid_attrs/types entry ("IB/RoCE v1", "RoCE v2").
// On an Ethernet port, the IB type is RoCE v1.
func gidTypeName(t int, sysfs string) string {
	switch t {
	case C.IBV_GID_TYPE_IB, C.IBV_GID_TYPE_ROCE_V1:
		return "RoCE v1"
	case C.IBV_GID_TYPE_ROCE_V2:
		return "RoCE v2"
	}
	switch strings.TrimSpace(sysfs) {
	case "IB/RoCE v1":
		return "RoCE v1"
	case "RoCE v2":
		return "RoCE v2"
	}
	return ""
}

// qpType returns enum ibv_qp_type's value for t.
func qpType(t QPType) (C.int, error) {
	switch t {
	case RC:
		return C.IBV_QPT_RC, nil
	case UC:
		return C.IBV_QPT_UC, nil
	}
	return 0, fmt.Errorf("queue pair type %d: RC or UC", int(t))
}

// psnMask keeps the 24 bits of a packet sequence number or a queue pair
// number.
const psnMask = 1<<24 - 1

// rtrArgs checks what ReadyToReceive moves a queue pair toward: the
// peer's GID (its 16 bytes returned), QPN and PSN of 24 bits, and a path
// MTU (its enum ibv_mtu value returned) not above the port's active one.
func rtrArgs(r Remote, mtu, activeMTU int) (gid [16]byte, mtuE int, err error) {
	if gid, err = gidBytes(r.GID); err != nil {
		return gid, 0, fmt.Errorf("peer's %w", err)
	}
	if r.QPN > psnMask || r.QPN == 0 {
		return gid, 0, fmt.Errorf("peer's QPN %#x: a QPN is 24 bits, not 0", r.QPN)
	}
	if r.PSN > psnMask {
		return gid, 0, fmt.Errorf("peer's PSN %#x: a PSN is 24 bits", r.PSN)
	}
	if mtuE, err = mtuEnum(mtu); err != nil {
		return gid, 0, err
	}
	if activeMTU > 0 && mtu > activeMTU {
		return gid, 0, fmt.Errorf("path MTU %d bytes above the port's active MTU, %d (the interface's MTU sets it: 4096 needs jumbo frames)", mtu, activeMTU)
	}
	return gid, mtuE, nil
}

// memlockHint adds to the error of a registration of n bytes that ran
// out of memory what RLIMIT_MEMLOCK lets the process lock, where it is
// limited.
func memlockHint(err error, n int) error {
	var rl unix.Rlimit
	if !errors.Is(err, syscall.ENOMEM) || unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl) != nil || rl.Cur == unix.RLIM_INFINITY {
		return err
	}
	return fmt.Errorf("%w (registering pins %d bytes, and RLIMIT_MEMLOCK lets this process lock %d: "+
		"raise it, ulimit -l unlimited in its shell or LimitMEMLOCK=infinity in its systemd unit)", err, n, rl.Cur)
}

// hugePageSize returns the system's default huge page size, from
// /proc/meminfo, or 2 MiB where it does not say.
func hugePageSize() int {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 2 << 20
	}
	return parseHugePageSize(string(b))
}

// parseHugePageSize reads the "Hugepagesize:" line of /proc/meminfo's
// text, or returns 2 MiB.
func parseHugePageSize(meminfo string) int {
	for line := range strings.Lines(meminfo) {
		rest, ok := strings.CutPrefix(line, "Hugepagesize:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 2 && f[1] == "kB" {
			if kb, err := strconv.Atoi(f[0]); err == nil && kb > 0 {
				return kb << 10
			}
		}
	}
	return 2 << 20
}

// mapMemory maps size bytes of zeroed anonymous memory: on huge pages
// where size is at least one and the system has them free, else on
// normal pages. It returns the whole mapping (rounded up to its pages).
func mapMemory(size int) (mapping []byte, huge bool, err error) {
	prot := syscall.PROT_READ | syscall.PROT_WRITE
	flags := syscall.MAP_ANON | syscall.MAP_PRIVATE
	if hp := hugePageSize(); size >= hp {
		n := (size + hp - 1) &^ (hp - 1)
		if b, err := syscall.Mmap(-1, 0, n, prot, flags|syscall.MAP_HUGETLB); err == nil {
			return b, true, nil
		}
	}
	page := syscall.Getpagesize()
	n := (size + page - 1) &^ (page - 1)
	b, err := syscall.Mmap(-1, 0, n, prot, flags)
	if err != nil {
		return nil, false, fmt.Errorf("map %d bytes: %w", n, err)
	}
	return b, false, nil
}

// ibvDevice is one port of an RDMA device opened through libibverbs,
// with its protection domain.
type ibvDevice struct {
	ctx  *C.struct_ibv_context
	pd   *C.struct_ibv_pd
	port Port
	open atomic.Int64 // its memory, completion queues and queue pairs not yet closed
}

// openIBV opens port of the RDMA device named device ("" for the first)
// through libibverbs, checks that the port is an active Ethernet (RoCE)
// port with a GID at gidIndex, and allocates a protection domain.
func openIBV(device string, port, gidIndex int) (Device, error) {
	what := deviceText(device, port)
	if err := loadIBV(); err != nil {
		return nil, fmt.Errorf("open %s: %w", what, err)
	}
	if port < 1 || port > 255 {
		return nil, fmt.Errorf("open %s: ports are numbered from 1", what)
	}
	if gidIndex < 0 {
		return nil, fmt.Errorf("open %s: GID index %d: indexes start at 0", what, gidIndex)
	}
	var n C.int
	list, listErr := C.h5v_get_device_list(&n)
	var names []string
	if list != nil {
		defer C.h5v_free_device_list(list)
		for i := range int(n) {
			names = append(names, C.GoString(C.h5v_device_name(C.h5v_device_at(list, C.int(i)))))
		}
		listErr = nil
	} else {
		listErr = nullError("ibv_get_device_list", listErr)
	}
	i, err := pickDevice(names, device, port, listErr)
	if err != nil {
		return nil, err
	}
	name := names[i]
	what = deviceText(name, port)
	ctx, err := C.h5v_open_device(C.h5v_device_at(list, C.int(i)))
	if ctx == nil {
		return nil, nullError("ibv_open_device "+name, err)
	}
	d := &ibvDevice{ctx: ctx}
	if err := d.queryPort(name, port, gidIndex); err != nil {
		C.h5v_close_device(ctx)
		return nil, fmt.Errorf("open %s: %w", what, err)
	}
	pd, err := C.h5v_alloc_pd(ctx)
	if pd == nil {
		C.h5v_close_device(ctx)
		return nil, nullError("ibv_alloc_pd "+name, err)
	}
	d.pd = pd
	openObjects.Add(1)
	return d, nil
}

// queryPort fills d.port from the port's attributes and its GID table
// entry gidIndex, or says why the port cannot carry RoCE.
func (d *ibvDevice) queryPort(name string, port, gidIndex int) error {
	var attr C.struct_ibv_port_attr
	if err := callError("ibv_query_port", C.h5v_query_port(d.ctx, C.int(port), &attr)); err != nil {
		return err
	}
	p := Port{
		Device:    name,
		Num:       port,
		State:     portStateName(int(attr.state)),
		LinkLayer: linkLayerName(int(attr.link_layer)),
		ActiveMTU: mtuBytes(int(attr.active_mtu)),
		GIDIndex:  gidIndex,
	}
	if p.LinkLayer != "Ethernet" {
		return fmt.Errorf("the port's link layer is %s; the roce source needs Ethernet (RoCE)", p.LinkLayer)
	}
	if attr.state != C.IBV_PORT_ACTIVE && attr.state != C.IBV_PORT_ACTIVE_DEFER {
		return fmt.Errorf("the port is %s, not ACTIVE: check the cable and the switch port, and that its interface is up (ip link; rdma link)", p.State)
	}
	if tl := int(attr.gid_tbl_len); gidIndex >= tl {
		return fmt.Errorf("GID index %d is past the port's GID table of %d entries (show_gids, or /sys/class/infiniband/%s/ports/%d/gids, lists them)", gidIndex, tl, name, port)
	}
	var gid [16]byte
	var typ C.int
	ret := C.h5v_query_gid(d.ctx, C.int(port), C.int(gidIndex), (*C.uint8_t)(unsafe.Pointer(&gid[0])), &typ)
	if ret == C.ENODATA || (ret == 0 && gid == [16]byte{}) {
		return fmt.Errorf("GID index %d is empty: its interface has no address for it (show_gids, or /sys/class/infiniband/%s/ports/%d/gids, lists the table)", gidIndex, name, port)
	}
	if err := callError(fmt.Sprintf("ibv_query_gid index %d", gidIndex), ret); err != nil {
		return err
	}
	p.GID = gidAddr(gid)
	sysfs := ""
	if typ < 0 {
		b, _ := os.ReadFile(fmt.Sprintf("/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d", name, port, gidIndex))
		sysfs = string(b)
	}
	p.GIDType = gidTypeName(int(typ), sysfs)
	d.port = p
	return nil
}

// errClosed is the error of a call on an object that is closed, or nil.
var errClosed = errors.New("closed")

// Port returns what the port said of itself when the device was opened.
func (d *ibvDevice) Port() Port {
	if d == nil {
		return Port{}
	}
	return d.port
}

// Register maps size bytes (huge pages where the system has them free and
// size is at least one) and registers them for local and remote write.
func (d *ibvDevice) Register(size int) (Memory, error) {
	if d == nil || d.pd == nil {
		return nil, fmt.Errorf("ibv_reg_mr: RDMA device %w", errClosed)
	}
	if size <= 0 {
		return nil, fmt.Errorf("ibv_reg_mr: %d bytes", size)
	}
	mapping, huge, err := mapMemory(size)
	if err != nil {
		return nil, err
	}
	addr := uint64(uintptr(unsafe.Pointer(&mapping[0])))
	mr, err := C.h5v_reg_mr(d.pd, C.uint64_t(addr), C.size_t(size), C.IBV_ACCESS_LOCAL_WRITE|C.IBV_ACCESS_REMOTE_WRITE)
	if mr == nil {
		syscall.Munmap(mapping)
		return nil, memlockHint(nullError(fmt.Sprintf("ibv_reg_mr %d bytes on %s", size, d.port.Device), err), size)
	}
	d.open.Add(1)
	openObjects.Add(1)
	return &ibvMemory{
		dev: d, mapping: mapping, b: mapping[:size:size], mr: mr,
		lkey: uint32(C.h5v_mr_lkey(mr)), rkey: uint32(C.h5v_mr_rkey(mr)), huge: huge,
	}, nil
}

// pollBatch is how many completions a CQ's Poll takes from libibverbs at
// a time, into memory it keeps.
const pollBatch = 64

// NewCQ creates a completion queue of at least entries entries.
func (d *ibvDevice) NewCQ(entries int) (CQ, error) {
	if d == nil || d.pd == nil {
		return nil, fmt.Errorf("ibv_create_cq: RDMA device %w", errClosed)
	}
	if entries < 1 {
		return nil, fmt.Errorf("ibv_create_cq: %d entries", entries)
	}
	cq, err := C.h5v_create_cq(d.ctx, C.int(entries))
	if cq == nil {
		return nil, nullError(fmt.Sprintf("ibv_create_cq %d entries on %s", entries, d.port.Device), err)
	}
	d.open.Add(1)
	openObjects.Add(1)
	return newIBVCQ(d, cq), nil
}

// NewQP creates a queue pair of type t whose sends and receives complete
// on cq, which must be one of d's.
func (d *ibvDevice) NewQP(cq CQ, t QPType, sends, recvs int) (QP, error) {
	if d == nil || d.pd == nil {
		return nil, fmt.Errorf("ibv_create_qp: RDMA device %w", errClosed)
	}
	c, ok := cq.(*ibvCQ)
	if !ok || c == nil || c.cq == nil || c.dev != d {
		return nil, errors.New("ibv_create_qp: the completion queue is not an open one of this device")
	}
	ct, err := qpType(t)
	if err != nil {
		return nil, fmt.Errorf("ibv_create_qp: %w", err)
	}
	if sends < 0 || recvs < 0 {
		return nil, fmt.Errorf("ibv_create_qp: %d sends, %d receives", sends, recvs)
	}
	qp, err := C.h5v_create_qp(d.pd, c.cq, ct, C.int(sends), C.int(recvs))
	if qp == nil {
		return nil, nullError(fmt.Sprintf("ibv_create_qp %s, %d sends, %d receives, on %s", t, sends, recvs, d.port.Device), err)
	}
	d.open.Add(1)
	openObjects.Add(1)
	return &ibvQP{dev: d, qp: qp, typ: t, num: uint32(C.h5v_qp_num(qp))}, nil
}

// Close frees the protection domain and closes the device. It refuses,
// leaving everything open, while memory, completion queues or queue pairs
// of the device are: close those first.
func (d *ibvDevice) Close() error {
	if d == nil || d.ctx == nil {
		return nil
	}
	if n := d.open.Load(); n > 0 {
		return fmt.Errorf("close RDMA device %s: %d of its memory regions, completion queues and queue pairs still open", d.port.Device, n)
	}
	if err := callError("ibv_dealloc_pd "+d.port.Device, C.h5v_dealloc_pd(d.pd)); err != nil {
		return err
	}
	d.pd = nil
	err := callError("ibv_close_device "+d.port.Device, C.h5v_close_device(d.ctx))
	d.ctx = nil
	openObjects.Add(-1)
	return err
}

// ibvMemory is a mapping registered with a device for remote write.
type ibvMemory struct {
	dev        *ibvDevice
	mapping    []byte // the whole mapping, as munmap takes it
	b          []byte // the size asked for
	mr         *C.struct_ibv_mr
	lkey, rkey uint32
	huge       bool
}

// Bytes returns the memory, nil once closed.
func (m *ibvMemory) Bytes() []byte {
	if m == nil {
		return nil
	}
	return m.b
}

// Addr returns the memory's address, 0 once closed.
func (m *ibvMemory) Addr() uint64 {
	if m == nil || m.b == nil {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&m.b[0])))
}

// RKey returns the key a peer writes with.
func (m *ibvMemory) RKey() uint32 {
	if m == nil {
		return 0
	}
	return m.rkey
}

// LKey returns the key local work requests use.
func (m *ibvMemory) LKey() uint32 {
	if m == nil {
		return 0
	}
	return m.lkey
}

// Huge reports whether the memory is on huge pages.
func (m *ibvMemory) Huge() bool { return m != nil && m.huge }

// Close deregisters the memory and unmaps it; no slice of it may be used
// after. It must not run beside another call on m.
func (m *ibvMemory) Close() error {
	if m == nil || m.mr == nil {
		return nil
	}
	if err := callError(fmt.Sprintf("ibv_dereg_mr %d bytes", len(m.b)), C.h5v_dereg_mr(m.mr)); err != nil {
		return err
	}
	m.mr = nil
	m.b = nil
	m.dev.open.Add(-1)
	openObjects.Add(-1)
	if err := syscall.Munmap(m.mapping); err != nil {
		return fmt.Errorf("unmap %d bytes: %w", len(m.mapping), err)
	}
	m.mapping = nil
	return nil
}

// ibvCQ is a completion queue, with C memory that Poll reads completions
// into.
type ibvCQ struct {
	dev     *ibvDevice
	cq      *C.struct_ibv_cq
	scratch *C.struct_ibv_wc  // pollBatch entries
	out     *C.struct_h5v_wc  // pollBatch entries
	outs    []C.struct_h5v_wc // out, as a slice
}

// newIBVCQ wraps cq, allocating the memory Poll uses.
func newIBVCQ(d *ibvDevice, cq *C.struct_ibv_cq) *ibvCQ {
	c := &ibvCQ{
		dev:     d,
		cq:      cq,
		scratch: (*C.struct_ibv_wc)(C.calloc(pollBatch, C.sizeof_struct_ibv_wc)),
		out:     (*C.struct_h5v_wc)(C.calloc(pollBatch, C.sizeof_struct_h5v_wc)),
	}
	c.outs = unsafe.Slice(c.out, pollBatch)
	return c
}

// Poll fills wc with the completions there are, up to len(wc), without
// waiting. It allocates nothing. It may run beside a queue pair's posts,
// not beside another Poll or Close of the same queue.
func (c *ibvCQ) Poll(wc []Completion) (int, error) {
	if c == nil || c.cq == nil {
		return 0, fmt.Errorf("ibv_poll_cq: completion queue %w", errClosed)
	}
	n := 0
	for n < len(wc) {
		k := min(len(wc)-n, pollBatch)
		got := int(C.h5v_poll(c.cq, c.scratch, c.out, C.int(k)))
		if got < 0 {
			return n, fmt.Errorf("ibv_poll_cq: the completion queue failed (%d): its queue pairs are in error", got)
		}
		for i, e := range c.outs[:got] {
			wc[n+i] = Completion{
				WRID:    uint64(e.wr_id),
				Status:  Status(e.status),
				Opcode:  Opcode(e.opcode),
				ByteLen: uint32(e.byte_len),
				Imm:     uint32(e.imm),
				QPNum:   uint32(e.qp_num),
				Vendor:  uint32(e.vendor_err),
			}
		}
		n += got
		if got < k {
			break
		}
	}
	return n, nil
}

// Close destroys the completion queue; the queue pairs on it must be
// closed first.
func (c *ibvCQ) Close() error {
	if c == nil || c.cq == nil {
		return nil
	}
	if err := callError("ibv_destroy_cq", C.h5v_destroy_cq(c.cq)); err != nil {
		return err
	}
	c.free()
	c.dev.open.Add(-1)
	openObjects.Add(-1)
	return nil
}

// free forgets the queue and frees the memory Poll uses.
func (c *ibvCQ) free() {
	c.cq = nil
	C.free(unsafe.Pointer(c.scratch))
	C.free(unsafe.Pointer(c.out))
	c.scratch, c.out, c.outs = nil, nil, nil
}

// ibvQP is a queue pair, set up by hand.
type ibvQP struct {
	dev *ibvDevice
	qp  *C.struct_ibv_qp
	typ QPType
	num uint32
}

// Num returns the queue pair's number, 0 once closed.
func (q *ibvQP) Num() uint32 {
	if q == nil || q.qp == nil {
		return 0
	}
	return q.num
}

// closedQP is the error of a call on a queue pair that is closed.
func closedQP(op string) error { return fmt.Errorf("%s: queue pair %w", op, errClosed) }

// Reset moves the queue pair from any state to RESET, dropping its work
// requests.
func (q *ibvQP) Reset() error {
	if q == nil || q.qp == nil {
		return closedQP("ibv_modify_qp to RESET")
	}
	return callError("ibv_modify_qp to RESET", C.h5v_modify_reset(q.qp))
}

// Init moves the queue pair from RESET to INIT on the device's port,
// allowing local and remote writes.
func (q *ibvQP) Init() error {
	if q == nil || q.qp == nil {
		return closedQP("ibv_modify_qp to INIT")
	}
	return callError(fmt.Sprintf("ibv_modify_qp to INIT (%s port %d)", q.dev.port.Device, q.dev.port.Num),
		C.h5v_modify_init(q.qp, C.int(q.dev.port.Num)))
}

// ReadyToReceive moves the queue pair from INIT to RTR toward r, through
// the device's GID table entry, at path MTU mtu bytes.
func (q *ibvQP) ReadyToReceive(r Remote, mtu int) error {
	if q == nil || q.qp == nil {
		return closedQP("ibv_modify_qp to RTR")
	}
	p := q.dev.port
	gid, mtuE, err := rtrArgs(r, mtu, p.ActiveMTU)
	if err != nil {
		return fmt.Errorf("ibv_modify_qp to RTR: %w", err)
	}
	rc := C.int(0)
	if q.typ == RC {
		rc = 1
	}
	ret := C.h5v_modify_rtr(q.qp, rc, C.int(p.Num), C.int(p.GIDIndex), (*C.uint8_t)(unsafe.Pointer(&gid[0])),
		C.uint32_t(r.QPN), C.uint32_t(r.PSN), C.int(mtuE))
	return callError(fmt.Sprintf("ibv_modify_qp to RTR (peer GID %s QPN %#x PSN %#x, GID index %d, MTU %d)",
		r.GID, r.QPN, r.PSN, p.GIDIndex, mtu), ret)
}

// ReadyToSend moves the queue pair from RTR to RTS, sending from psn.
func (q *ibvQP) ReadyToSend(psn uint32) error {
	if q == nil || q.qp == nil {
		return closedQP("ibv_modify_qp to RTS")
	}
	if psn > psnMask {
		return fmt.Errorf("ibv_modify_qp to RTS: PSN %#x: a PSN is 24 bits", psn)
	}
	rc := C.int(0)
	if q.typ == RC {
		rc = 1
	}
	return callError(fmt.Sprintf("ibv_modify_qp to RTS (PSN %#x)", psn), C.h5v_modify_rts(q.qp, rc, C.uint32_t(psn)))
}

// State returns the queue pair's state, as the device says.
func (q *ibvQP) State() (QPState, error) {
	if q == nil || q.qp == nil {
		return StateError, closedQP("ibv_query_qp")
	}
	var s C.int
	if err := callError("ibv_query_qp", C.h5v_query_state(q.qp, &s)); err != nil {
		return StateError, err
	}
	return QPState(s), nil
}

// PostRecv posts a receive of no buffer, which a write with immediate
// data consumes. It allocates nothing but on failure; a full receive
// queue is ENOMEM.
func (q *ibvQP) PostRecv(id uint64) error {
	if q == nil || q.qp == nil {
		return closedQP("ibv_post_recv")
	}
	if ret := C.h5v_post_recv(q.qp, C.uint64_t(id)); ret != 0 {
		return callError("ibv_post_recv", ret)
	}
	return nil
}

// PostWriteImm posts a signaled RDMA write with immediate data of local,
// which must lie in m, to the peer's addr under rkey. It allocates
// nothing but on failure; a full send queue is ENOMEM.
func (q *ibvQP) PostWriteImm(id uint64, m Memory, local []byte, addr uint64, rkey uint32, imm uint32) error {
	if q == nil || q.qp == nil {
		return closedQP("ibv_post_send")
	}
	laddr, err := within(m, local)
	if err != nil {
		return fmt.Errorf("ibv_post_send: %w", err)
	}
	ret := C.h5v_post_write_imm(q.qp, C.uint64_t(id), C.uint64_t(laddr), C.uint32_t(len(local)),
		C.uint32_t(m.LKey()), C.uint64_t(addr), C.uint32_t(rkey), C.uint32_t(imm))
	if ret != 0 {
		return callError("ibv_post_send", ret)
	}
	return nil
}

// within returns the address of local, which must lie in m's memory (0
// for an empty local).
func within(m Memory, local []byte) (uint64, error) {
	if len(local) == 0 {
		return 0, nil
	}
	if m == nil {
		return 0, errors.New("no registered memory given")
	}
	b := m.Bytes()
	if len(b) == 0 {
		return 0, errors.New("the registered memory is closed")
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(local)))
	if p < base || p-base > uintptr(len(b)) || uintptr(len(local)) > uintptr(len(b))-(p-base) {
		return 0, fmt.Errorf("%d bytes to write do not lie in the %d bytes registered", len(local), len(b))
	}
	if len(local) > 1<<31 {
		return 0, fmt.Errorf("%d bytes to write: one write carries at most 2 GiB", len(local))
	}
	return uint64(p), nil
}

// Close destroys the queue pair; receives posted on it are dropped.
func (q *ibvQP) Close() error {
	if q == nil || q.qp == nil {
		return nil
	}
	if err := callError(fmt.Sprintf("ibv_destroy_qp %#x", q.num), C.h5v_destroy_qp(q.qp)); err != nil {
		return err
	}
	q.qp = nil
	q.dev.open.Add(-1)
	openObjects.Add(-1)
	return nil
}
