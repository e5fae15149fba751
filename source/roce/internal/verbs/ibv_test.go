package verbs

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestLoad checks that libibverbs.so.1 loads and that a missing library,
// or one without libibverbs' symbols, is a clear error that names it and
// leaves the loaded library in place.
func TestLoad(t *testing.T) {
	if err := loadIBV(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ soname, want string }{
		{"libibverbs-absent.so.1", "libibverbs-absent.so.1 not found (Debian package libibverbs1): libibverbs-absent.so.1: cannot open shared object file"},
		{"libc.so.6", "libc.so.6 not found (Debian package libibverbs1): libc.so.6: no symbol ibv_get_device_list"},
	} {
		err := load(tt.soname)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("load(%q) = %v, want an error containing %q", tt.soname, err, tt.want)
		}
	}
	// The failed loads changed nothing: the library still answers (with
	// the devices there are, or with none).
	t.Setenv(FakeEnv, "")
	d, err := Open("h5ingest-no-such-device", 1, 0)
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Open after failed loads: %v, %v; want ErrNoDevice", d, err)
	}
}

// TestOpenNoDevice checks Open's errors before and at the device list: a
// port or GID index that cannot be, and a device that is not there, named
// with what there is and where to look.
func TestOpenNoDevice(t *testing.T) {
	t.Setenv(FakeEnv, "")
	for _, tt := range []struct {
		device     string
		port, gid  int
		noDevice   bool
		wantSubstr []string
	}{
		{"h5ingest-no-such-device", 1, 0, true, []string{"open RDMA device h5ingest-no-such-device port 1: no RDMA device named h5ingest-no-such-device: ", "ibv_devinfo", "rdma_rxe"}},
		{"mlx5_0", 0, 0, false, []string{"open RDMA device mlx5_0 port 0: ports are numbered from 1"}},
		{"mlx5_0", 256, 0, false, []string{"ports are numbered from 1"}},
		{"mlx5_0", 1, -1, false, []string{"open RDMA device mlx5_0 port 1: GID index -1: indexes start at 0"}},
		{"", 0, 0, false, []string{"open the first RDMA device, port 0: ports are numbered from 1"}},
	} {
		d, err := Open(tt.device, tt.port, tt.gid)
		if err == nil {
			d.Close()
			t.Errorf("Open(%q, %d, %d) succeeded", tt.device, tt.port, tt.gid)
			continue
		}
		if errors.Is(err, ErrNoDevice) != tt.noDevice {
			t.Errorf("Open(%q, %d, %d) = %v: wraps ErrNoDevice %v, want %v", tt.device, tt.port, tt.gid, err, !tt.noDevice, tt.noDevice)
		}
		for _, s := range tt.wantSubstr {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("Open(%q, %d, %d) = %v, want it to say %q", tt.device, tt.port, tt.gid, err, s)
			}
		}
	}
	// The first device: on a machine with none, the same error.
	d, err := Open("", 1, 0)
	if err == nil {
		d.Close()
		t.Skip("this machine has an RDMA device")
	}
	if !errors.Is(err, ErrNoDevice) && !strings.Contains(err.Error(), "port") {
		t.Errorf("Open(\"\", 1, 0) = %v, want ErrNoDevice or a port's fault", err)
	}
	if errors.Is(err, ErrNoDevice) && !strings.HasPrefix(err.Error(), "open the first RDMA device, port 1: no RDMA device: ") {
		t.Errorf("Open(\"\", 1, 0) = %v", err)
	}
	if n := OpenObjects(); n != 0 {
		t.Errorf("%d objects open after failed opens", n)
	}
}

// TestPickDevice checks which device Open takes from the list, and what
// its error says where none fits.
func TestPickDevice(t *testing.T) {
	for _, tt := range []struct {
		names   []string
		want    string
		listErr error
		pick    int
		err     string
	}{
		{[]string{"mlx5_0", "mlx5_1"}, "mlx5_1", nil, 1, ""},
		{[]string{"mlx5_0", "mlx5_1"}, "", nil, 0, ""},
		{[]string{"rxe0"}, "rxe0", nil, 0, ""},
		{[]string{"mlx5_0", "rxe0"}, "mlx5_2", nil, -1, "open RDMA device mlx5_2 port 1: no RDMA device named mlx5_2: found mlx5_0, rxe0; ibv_devinfo lists"},
		{nil, "", nil, -1, "open the first RDMA device, port 1: no RDMA device: the machine has none; ibv_devinfo"},
		{nil, "mlx5_0", syscall.ENOSYS, -1, "no RDMA device named mlx5_0: the kernel offers none, its RDMA modules (ib_uverbs and the NIC's driver) not loaded (function not implemented)"},
		{nil, "mlx5_0", syscall.EACCES, -1, "no RDMA device named mlx5_0: the machine has none (permission denied)"},
	} {
		k, err := pickDevice(tt.names, tt.want, 1, tt.listErr)
		if tt.err == "" {
			if err != nil || k != tt.pick {
				t.Errorf("pickDevice(%q, %q) = %d, %v; want %d", tt.names, tt.want, k, err, tt.pick)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrNoDevice) || !strings.Contains(err.Error(), "rdma link add rxe0 type rxe") {
			t.Errorf("pickDevice(%q, %q) = %d, %v; want ErrNoDevice saying %q and the soft-RoCE hint", tt.names, tt.want, k, err, tt.err)
		}
	}
}

// TestCEnums checks each constant of verbs.go that crosses into
// libibverbs unconverted against <infiniband/verbs.h>'s value.
func TestCEnums(t *testing.T) {
	for _, e := range cEnums {
		if e.goValue != e.cVal {
			t.Errorf("%s: Go %d, C %d", e.name, e.goValue, e.cVal)
		}
	}
	if len(cEnums) < 23 {
		t.Errorf("%d enum values checked", len(cEnums))
	}
}

// TestMTU checks path MTUs in bytes against enum ibv_mtu both ways.
func TestMTU(t *testing.T) {
	for _, tt := range []struct{ bytes, enum int }{{256, 1}, {512, 2}, {1024, 3}, {2048, 4}, {4096, 5}} {
		if e, err := mtuEnum(tt.bytes); err != nil || e != tt.enum {
			t.Errorf("mtuEnum(%d) = %d, %v; want %d", tt.bytes, e, err, tt.enum)
		}
		if b := mtuBytes(tt.enum); b != tt.bytes {
			t.Errorf("mtuBytes(%d) = %d, want %d", tt.enum, b, tt.bytes)
		}
	}
	for _, n := range []int{0, -1, 128, 1500, 8192, 9000} {
		if e, err := mtuEnum(n); err == nil || !strings.Contains(err.Error(), "256, 512, 1024, 2048 or 4096") {
			t.Errorf("mtuEnum(%d) = %d, %v; want an error naming the MTUs there are", n, e, err)
		}
	}
	for _, e := range []int{0, 6, -1} {
		if b := mtuBytes(e); b != 0 {
			t.Errorf("mtuBytes(%d) = %d, want 0", e, b)
		}
	}
}

// TestGID checks GIDs as addresses and back: an IPv6 GID is itself, an
// IPv4 address its IPv4-mapped GID (RoCE v2), and no address or a zoned
// one an error.
func TestGID(t *testing.T) {
	for _, tt := range []struct {
		addr  string
		bytes [16]byte
		back  string
	}{
		{"fe80::268a:7ff:fe55:4660", [16]byte{0xfe, 0x80, 8: 0x26, 0x8a, 0x07, 0xff, 0xfe, 0x55, 0x46, 0x60}, "fe80::268a:7ff:fe55:4660"},
		{"10.0.0.2", [16]byte{10: 0xff, 0xff, 10, 0, 0, 2}, "::ffff:10.0.0.2"},
		{"::ffff:192.168.1.7", [16]byte{10: 0xff, 0xff, 192, 168, 1, 7}, "::ffff:192.168.1.7"},
	} {
		a := netip.MustParseAddr(tt.addr)
		b, err := gidBytes(a)
		if err != nil || b != tt.bytes {
			t.Errorf("gidBytes(%s) = %x, %v; want %x", a, b, err, tt.bytes)
		}
		if got := gidAddr(b).String(); got != tt.back {
			t.Errorf("gidAddr(%x) = %s, want %s", b, got, tt.back)
		}
	}
	for _, a := range []netip.Addr{{}, netip.MustParseAddr("fe80::1%eth0")} {
		if b, err := gidBytes(a); err == nil {
			t.Errorf("gidBytes(%v) = %x, want an error", a, b)
		}
	}
}

// TestNames checks the names given to a port's state, its link layer and
// a GID's type, from libibverbs' numbers or, for the type, sysfs's text.
func TestNames(t *testing.T) {
	for s, want := range map[int]string{1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER", 9: "state 9", -1: "state -1"} {
		if got := portStateName(s); got != want {
			t.Errorf("portStateName(%d) = %q, want %q", s, got, want)
		}
	}
	for l, want := range map[int]string{0: "InfiniBand", 1: "InfiniBand", 2: "Ethernet"} {
		if got := linkLayerName(l); got != want {
			t.Errorf("linkLayerName(%d) = %q, want %q", l, got, want)
		}
	}
	for _, tt := range []struct {
		typ   int
		sysfs string
		want  string
	}{
		{0, "", "RoCE v1"}, // IB type, on an Ethernet port
		{1, "", "RoCE v1"},
		{2, "", "RoCE v2"},
		{2, "IB/RoCE v1\n", "RoCE v2"}, // the library's word wins
		{-1, "IB/RoCE v1\n", "RoCE v1"},
		{-1, "RoCE v2\n", "RoCE v2"},
		{-1, "", ""},
		{-1, "something else\n", ""},
	} {
		if got := gidTypeName(tt.typ, tt.sysfs); got != tt.want {
			t.Errorf("gidTypeName(%d, %q) = %q, want %q", tt.typ, tt.sysfs, got, tt.want)
		}
	}
}

// TestRTRArgs checks what ReadyToReceive refuses before it asks the
// device.
func TestRTRArgs(t *testing.T) {
	gid := netip.MustParseAddr("::ffff:10.0.0.7")
	for _, tt := range []struct {
		r      Remote
		mtu    int
		active int
		enum   int
		err    string
	}{
		{Remote{GID: gid, QPN: 0x11, PSN: 0}, 4096, 4096, 5, ""},
		{Remote{GID: gid, QPN: 0xffffff, PSN: 0xffffff}, 1024, 4096, 3, ""},
		{Remote{GID: gid, QPN: 0x11}, 4096, 0, 5, ""}, // the port did not say
		{Remote{QPN: 0x11}, 4096, 4096, 0, "peer's no GID given"},
		{Remote{GID: gid, QPN: 0}, 4096, 4096, 0, "peer's QPN 0x0: a QPN is 24 bits, not 0"},
		{Remote{GID: gid, QPN: 0x1000000}, 4096, 4096, 0, "peer's QPN 0x1000000"},
		{Remote{GID: gid, QPN: 1, PSN: 0x1000000}, 4096, 4096, 0, "peer's PSN 0x1000000: a PSN is 24 bits"},
		{Remote{GID: gid, QPN: 1}, 1500, 4096, 0, "path MTU 1500 bytes"},
		{Remote{GID: gid, QPN: 1}, 4096, 1024, 0, "path MTU 4096 bytes above the port's active MTU, 1024"},
	} {
		b, e, err := rtrArgs(tt.r, tt.mtu, tt.active)
		switch {
		case tt.err == "" && (err != nil || e != tt.enum || b != tt.r.GID.As16()):
			t.Errorf("rtrArgs(%+v, %d, %d) = %x, %d, %v; want %d", tt.r, tt.mtu, tt.active, b, e, err, tt.enum)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("rtrArgs(%+v, %d, %d) = %v, want an error saying %q", tt.r, tt.mtu, tt.active, err, tt.err)
		}
	}
}

// TestPoll checks Poll through libibverbs' inline ibv_poll_cq and a
// provider's ops: every field of a completion, the immediate data in host
// order and only where the completion has one, batches longer than Poll's
// own, an empty queue, a failed queue, and no allocation.
func TestPoll(t *testing.T) {
	o := newOpsFake(0x1234, RC, Port{Device: "fake0", Num: 1})
	defer o.free()
	imm := make([]byte, 4)
	binary.BigEndian.PutUint32(imm, 0x01020304) // as the wire carries it
	immNet := binary.NativeEndian.Uint32(imm)
	want := []Completion{
		{WRID: 7, Status: Success, Opcode: OpRecvRDMAImm, ByteLen: 9437184, Imm: 0x01020304, QPNum: 0x1234},
		{WRID: 8, Status: Success, Opcode: OpRDMAWrite, QPNum: 0x1234},
		{WRID: 9, Status: RemAccessErr, Opcode: OpRDMAWrite, QPNum: 0x1234, Vendor: 0x88},
	}
	o.add(want[0], immNet, true)
	o.add(want[1], immNet, false) // no immediate flagged: none read
	o.add(want[2], 0, false)
	wc := make([]Completion, 2)
	if n, err := o.cq.Poll(wc); n != 2 || err != nil || wc[0] != want[0] || wc[1] != want[1] {
		t.Fatalf("Poll = %d, %v: %+v; want %+v", n, err, wc[:n], want[:2])
	}
	if n, err := o.cq.Poll(wc); n != 1 || err != nil || wc[0] != want[2] {
		t.Fatalf("Poll = %d, %v: %+v; want %+v", n, err, wc[:n], want[2:])
	}
	if n, err := o.cq.Poll(wc); n != 0 || err != nil {
		t.Fatalf("Poll of an empty queue = %d, %v", n, err)
	}
	if n, err := o.cq.Poll(nil); n != 0 || err != nil {
		t.Fatalf("Poll(nil) = %d, %v", n, err)
	}

	// More than one batch: Poll takes them all, in order.
	const many = 2*pollBatch + 22
	for i := range many {
		o.add(Completion{WRID: uint64(i), Opcode: OpRecvRDMAImm, QPNum: 0x1234}, uint32(i), true)
	}
	big := make([]Completion, 200)
	polls := o.polls()
	n, err := o.cq.Poll(big)
	if n != many || err != nil {
		t.Fatalf("Poll of %d = %d, %v", many, n, err)
	}
	for i, c := range big[:n] {
		if c.WRID != uint64(i) {
			t.Fatalf("completion %d has id %d", i, c.WRID)
		}
	}
	if p := o.polls() - polls; p != 3 {
		t.Errorf("%d ibv_poll_cq calls for %d completions, want 3", p, many)
	}

	allocs := testing.AllocsPerRun(100, func() {
		o.add(want[0], immNet, true)
		if n, err := o.cq.Poll(wc); n != 1 || err != nil {
			t.Fatalf("Poll = %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("Poll allocates %v times a call", allocs)
	}

	o.setFail(0, -5)
	if n, err := o.cq.Poll(wc); n != 0 || err == nil || !strings.Contains(err.Error(), "ibv_poll_cq: the completion queue failed (-5): its queue pairs are in error") {
		t.Errorf("Poll of a failed queue = %d, %v", n, err)
	}
}

// testMemory is registered memory as PostWriteImm sees it.
type testMemory struct {
	b    []byte
	lkey uint32
}

func (m *testMemory) Bytes() []byte { return m.b }
func (m *testMemory) Addr() uint64  { return 0 }
func (m *testMemory) RKey() uint32  { return 0 }
func (m *testMemory) LKey() uint32  { return m.lkey }
func (m *testMemory) Huge() bool    { return false }
func (m *testMemory) Close() error  { m.b = nil; return nil }

// addrOf returns the address of b's first byte.
func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

// TestPost checks the work requests PostRecv and PostWriteImm post: a
// receive of no buffer, a signaled write with immediate data in network
// order of the bytes given, under their key, to the peer's address and
// key; what they refuse; a full queue's error; and no allocation.
func TestPost(t *testing.T) {
	o := newOpsFake(0x99, RC, Port{Device: "fake0", Num: 1})
	defer o.free()

	if err := o.qp.PostRecv(42); err != nil {
		t.Fatal(err)
	}
	if id, sges, wrs, n := o.lastRecv(); id != 42 || sges != 0 || wrs != 1 || n != 1 {
		t.Errorf("receive posted: id %d, %d entries, %d chained, %d posted; want 42, 0, 1, 1", id, sges, wrs, n)
	}

	m := &testMemory{b: make([]byte, 4096), lkey: 0xabc}
	base := addrOf(m.b)
	for _, tt := range []struct {
		name  string
		local []byte
		addr  uint64
		len   uint32
		sges  int
	}{
		{"middle", m.b[100:300], base + 100, 200, 1},
		{"whole", m.b, base, 4096, 1},
		{"tail", m.b[4000:], base + 4000, 96, 1},
		{"empty", nil, 0, 0, 0},
	} {
		if err := o.qp.PostWriteImm(5, m, tt.local, 0x7f0000001000, 0xdead, 0x01020304); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		s := o.lastSend()
		imm := make([]byte, 4)
		binary.NativeEndian.PutUint32(imm, s.ImmNet)
		if s.ID != 5 || s.Opcode != wrRDMAWriteWithImm || s.Flags != sendSignaled || string(imm) != "\x01\x02\x03\x04" ||
			s.RemoteAddr != 0x7f0000001000 || s.RKey != 0xdead || s.NumSGE != tt.sges || s.WRs != 1 {
			t.Errorf("%s: send posted %+v (immediate as sent %x)", tt.name, s, imm)
		}
		if tt.sges == 1 && (s.Addr != tt.addr || s.Length != tt.len || s.LKey != 0xabc) {
			t.Errorf("%s: entry %#x %d bytes key %#x; want %#x %d bytes key 0xabc", tt.name, s.Addr, s.Length, s.LKey, tt.addr, tt.len)
		}
	}

	sends := o.lastSend().Sends
	other := make([]byte, 100)
	for _, tt := range []struct {
		name  string
		m     Memory
		local []byte
		err   string
	}{
		{"outside", m, other, "100 bytes to write do not lie in the 4096 bytes registered"},
		{"no memory", nil, m.b[:10], "no registered memory given"},
		{"closed memory", &testMemory{}, m.b[:10], "the registered memory is closed"},
		{"a nil memory", (*ibvMemory)(nil), m.b[:10], "the registered memory is closed"},
	} {
		err := o.qp.PostWriteImm(1, tt.m, tt.local, 0, 0, 0)
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: PostWriteImm = %v, want an error saying %q", tt.name, err, tt.err)
		}
	}
	if s := o.lastSend().Sends; s != sends {
		t.Errorf("%d refused writes were posted", s-sends)
	}

	allocs := testing.AllocsPerRun(100, func() {
		if err := o.qp.PostRecv(1); err != nil {
			t.Fatal(err)
		}
		if err := o.qp.PostWriteImm(1, m, m.b[:64], 0, 0, 0); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("PostRecv and PostWriteImm allocate %v times a pair", allocs)
	}

	o.setFail(int(syscall.ENOMEM), 0)
	if err := o.qp.PostRecv(1); !errors.Is(err, syscall.ENOMEM) || !strings.HasPrefix(err.Error(), "ibv_post_recv: ") {
		t.Errorf("PostRecv on a full queue = %v", err)
	}
	if err := o.qp.PostWriteImm(1, m, m.b[:64], 0, 0, 0); !errors.Is(err, syscall.ENOMEM) || !strings.HasPrefix(err.Error(), "ibv_post_send: ") {
		t.Errorf("PostWriteImm on a full queue = %v", err)
	}
}

// TestNilAndClosed checks that nil and closed objects answer with errors
// (or nothing to close), never a panic, and that a device refuses to
// close under its open objects.
func TestNilAndClosed(t *testing.T) {
	var d *ibvDevice
	for _, dev := range []*ibvDevice{d, {}} {
		if p := dev.Port(); p.Device != "" {
			t.Errorf("Port of a closed device = %+v", p)
		}
		if _, err := dev.Register(4096); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("Register on a closed device = %v", err)
		}
		if _, err := dev.NewCQ(16); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("NewCQ on a closed device = %v", err)
		}
		if _, err := dev.NewQP(nil, RC, 1, 1); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("NewQP on a closed device = %v", err)
		}
		if err := dev.Close(); err != nil {
			t.Errorf("Close of a closed device = %v", err)
		}
	}

	for _, m := range []*ibvMemory{nil, {}} {
		if m.Bytes() != nil || m.Addr() != 0 || m.RKey() != 0 || m.LKey() != 0 || m.Huge() || m.Close() != nil {
			t.Errorf("closed memory %+v answers", m)
		}
	}

	for _, c := range []*ibvCQ{nil, {}} {
		if n, err := c.Poll(make([]Completion, 4)); n != 0 || err == nil || !strings.Contains(err.Error(), "completion queue closed") {
			t.Errorf("Poll of a closed queue = %d, %v", n, err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close of a closed queue = %v", err)
		}
	}

	for _, q := range []*ibvQP{nil, {}} {
		if q.Num() != 0 {
			t.Errorf("Num of a closed queue pair = %d", q.Num())
		}
		for name, err := range map[string]error{
			"Init":           q.Init(),
			"ReadyToReceive": q.ReadyToReceive(Remote{}, 4096),
			"ReadyToSend":    q.ReadyToSend(0),
			"PostRecv":       q.PostRecv(0),
			"PostWriteImm":   q.PostWriteImm(0, nil, nil, 0, 0, 0),
		} {
			if err == nil || !strings.Contains(err.Error(), "queue pair closed") {
				t.Errorf("%s on a closed queue pair = %v", name, err)
			}
		}
		if s, err := q.State(); err == nil || s != StateError {
			t.Errorf("State of a closed queue pair = %v, %v", s, err)
		}
		if err := q.Close(); err != nil {
			t.Errorf("Close of a closed queue pair = %v", err)
		}
	}

	// A device with objects open refuses to close, and keeps them.
	o := newOpsFake(1, UC, Port{Device: "fake0", Num: 1})
	defer o.free()
	o.cq.dev.open.Add(2)
	if err := o.cq.dev.Close(); err == nil || err.Error() != "close RDMA device fake0: 2 of its memory regions, completion queues and queue pairs still open" {
		t.Errorf("Close of a device in use = %v", err)
	}
	if _, err := o.cq.dev.NewQP(&ibvCQ{}, RC, 1, 1); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("NewQP on a device without a protection domain = %v", err)
	}
	if err := o.qp.ReadyToReceive(Remote{}, 4096); err == nil || !strings.Contains(err.Error(), "ibv_modify_qp to RTR: peer's no GID given") {
		t.Errorf("ReadyToReceive with no peer = %v", err)
	}
	if err := o.qp.ReadyToSend(1 << 24); err == nil || !strings.Contains(err.Error(), "PSN 0x1000000: a PSN is 24 bits") {
		t.Errorf("ReadyToSend past 24 bits = %v", err)
	}
}

// TestMapMemory checks the memory Register maps: at least the size asked,
// whole pages, zeroed and writable, on huge pages only where the system
// has some free.
func TestMapMemory(t *testing.T) {
	hugeFree := false
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		hugeFree = strings.Contains(string(b), "HugePages_Free:") && !strings.Contains(string(b), "HugePages_Free:        0\n")
	}
	for _, size := range []int{1, 4096, 5000, 3 << 20} {
		b, huge, err := mapMemory(size)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < size || len(b)%os.Getpagesize() != 0 {
			t.Errorf("mapMemory(%d): %d bytes", size, len(b))
		}
		if huge && !hugeFree {
			t.Errorf("mapMemory(%d) on huge pages where none are free", size)
		}
		if huge && len(b)%hugePageSize() != 0 {
			t.Errorf("mapMemory(%d) on huge pages: %d bytes, not whole pages of %d", size, len(b), hugePageSize())
		}
		for i := range b {
			if b[i] != 0 {
				t.Fatalf("mapMemory(%d): byte %d is %d", size, i, b[i])
			}
		}
		b[len(b)-1] = 1
		if err := syscall.Munmap(b); err != nil {
			t.Error(err)
		}
	}
	for _, tt := range []struct {
		meminfo string
		want    int
	}{
		{"MemTotal:       24000000 kB\nHugepagesize:       2048 kB\nHugetlb: 0 kB\n", 2 << 20},
		{"Hugepagesize:    1048576 kB\n", 1 << 30},
		{"MemTotal: 1 kB\n", 2 << 20},
		{"Hugepagesize: x kB\n", 2 << 20},
	} {
		if got := parseHugePageSize(tt.meminfo); got != tt.want {
			t.Errorf("parseHugePageSize(%q) = %d, want %d", tt.meminfo, got, tt.want)
		}
	}
}

// TestMemlockHint checks the hint a registration out of memory gets: the
// limit RLIMIT_MEMLOCK sets, and how to raise it; other errors as they
// were.
func TestMemlockHint(t *testing.T) {
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &old); err != nil {
		t.Fatal(err)
	}
	low := old
	low.Cur = 64 << 10
	if old.Max != unix.RLIM_INFINITY && old.Max < low.Cur {
		low.Cur = old.Max
	}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &low); err != nil {
		t.Fatal(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_MEMLOCK, &old)
	enomem := nullError("ibv_reg_mr 1048576 bytes on mlx5_0", syscall.ENOMEM)
	err := memlockHint(enomem, 1<<20)
	if !errors.Is(err, syscall.ENOMEM) || !strings.Contains(err.Error(), "ibv_reg_mr 1048576 bytes on mlx5_0: cannot allocate memory (registering pins 1048576 bytes, and RLIMIT_MEMLOCK lets this process lock 65536: raise it, ulimit -l unlimited") {
		t.Errorf("memlockHint = %v", err)
	}
	einval := nullError("ibv_reg_mr", syscall.EINVAL)
	if err := memlockHint(einval, 1<<20); err != einval {
		t.Errorf("memlockHint(EINVAL) = %v, want it unchanged", err)
	}
	if err := nullError("ibv_alloc_pd", nil); !errors.Is(err, syscall.EIO) {
		t.Errorf("nullError without errno = %v, want EIO", err)
	}
	if err := callError("ibv_modify_qp to RTR", 22); err == nil || err.Error() != "ibv_modify_qp to RTR: invalid argument" || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("callError(22) = %v", err)
	}
	if err := callError("ibv_modify_qp to RTR", -22); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("callError(-22) = %v", err)
	}
	if err := callError("x", 0); err != nil {
		t.Errorf("callError(0) = %v", err)
	}
}
