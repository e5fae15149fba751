package verbs

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The fake verbs: a NIC in software for tests and for machines without
// RDMA, behind the same table as libibverbs.
//
// Processes meet in one directory. A queue pair is a file there, qp-QPN,
// mapped shared: its state, its peer (QPN and expected PSN), its receive
// queue (the ids of the receives posted) and the completion queue its
// receives complete on. A completion queue is a file cq-ID, mapped shared:
// a ring of completions that the local process and a peer's fake NIC both
// add to. Registered memory is plain memory of its process, announced in
// a file mr-RKEY (process, address, length): a peer's fake NIC writes into
// it with process_vm_writev, as a NIC writes at an rkey and address.
//
// A write with immediate data goes as a NIC's does: its bytes land in
// pieces (another thread may read the slot half written), it consumes a
// receive posted at the peer, and its completion reaches the peer's
// completion queue only once the bytes of the next write have landed (or
// the sender has nothing more to write), so that data lands before its
// completion is seen, as on the wire. It fails as a NIC fails: an RC
// write to a queue pair that is not ready, gone or set up for another
// peer or PSN completes with retries exceeded, one with no receive posted
// with RNR retries exceeded, one to a bad rkey or address with a remote
// access error (both queue pairs then in error); a UC write in those
// cases is lost without a word. A completion queue that overflows puts
// its queue pairs in error, and a queue pair in error flushes its
// receives. FaultEnv makes a sending process inject one of these.

// FaultEnv, in a sending process using the fake, injects a fault at a
// write: KIND@N, the N-th write (from 1) of each queue pair created while
// it is set. Kinds:
// qp-error (the peer's queue pair goes to error), retry-exceeded (the
// write is never acknowledged), bad-rkey (the write names another key),
// error-completion (the peer's receive completes with an error status),
// cq-full (the peer's completion queue overflows).
const FaultEnv = "H5INGEST_TEST_FAKE_VERBS_FAULT"

const (
	fakeDevice = "fake0"
	qpMagic    = 0x31505148 // "HQP1"
	cqMagic    = 0x31514348 // "HCQ1"
	// qp file offsets
	qpState   = 4
	qpDest    = 8
	qpPSN     = 12
	qpCQ      = 16
	qpRQCap   = 24
	qpTypeOff = 28
	qpRQHead  = 32
	qpRQTail  = 40
	qpPID     = 48
	qpEntries = 64
	// cq file offsets
	cqCap      = 4
	cqHead     = 8
	cqTail     = 16
	cqLock     = 24
	cqOverflow = 28
	cqEntries  = 64
	cqeSize    = 32
	// piece is how many bytes the fake NIC places at a time.
	piece = 64 << 10
	// retryWindow is how long an RC write is retried (a peer not ready, no
	// receive posted) before it completes in error.
	retryWindow = 200 * time.Millisecond
)

// fakeGIDs is the fake port's GID table: a link-local and an
// IPv4-mapped address, each as RoCE v1 and v2.
var fakeGIDs = []struct {
	gid netip.Addr
	typ string
}{
	{netip.MustParseAddr("fe80::1"), "RoCE v1"},
	{netip.MustParseAddr("fe80::1"), "RoCE v2"},
	{netip.MustParseAddr("::ffff:127.0.0.1"), "RoCE v1"},
	{netip.MustParseAddr("::ffff:127.0.0.1"), "RoCE v2"},
}

type fakeDev struct {
	dir  string
	port Port
	mu   sync.Mutex
	cqs  []*fakeCQ
}

func openFake(dir, device string, port, gidIndex int) (Device, error) {
	if device != "" && device != fakeDevice {
		return nil, fmt.Errorf("open RDMA device %q: %w (the fake verbs in %s have %s only)", device, ErrNoDevice, dir, fakeDevice)
	}
	if port != 1 {
		return nil, fmt.Errorf("open %s port %d: the device has port 1 only", fakeDevice, port)
	}
	if gidIndex < 0 || gidIndex >= len(fakeGIDs) {
		return nil, fmt.Errorf("query %s port 1 GID index %d: %w (the GID table has entries 0 to %d)", fakeDevice, gidIndex, syscall.EINVAL, len(fakeGIDs)-1)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("fake verbs: %w", err)
	}
	g := fakeGIDs[gidIndex]
	return &fakeDev{dir: dir, port: Port{Device: fakeDevice, Num: 1, State: "ACTIVE", LinkLayer: "Ethernet",
		ActiveMTU: 4096, GIDIndex: gidIndex, GID: g.gid, GIDType: g.typ}}, nil
}

func (d *fakeDev) Port() Port { return d.port }

func (d *fakeDev) Close() error { return nil }

// fakeMem is memory registered with the fake: the process's own, named
// to peers by a file mr-RKEY.
type fakeMem struct {
	b    []byte
	rkey uint32
	path string
}

func (d *fakeDev) Register(size int) (Memory, error) {
	if size <= 0 {
		return nil, fmt.Errorf("register %d bytes: %w", size, syscall.EINVAL)
	}
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("allocate %d bytes to register: %w", size, err)
	}
	for {
		rkey := randomU32() | 1
		path := filepath.Join(d.dir, fmt.Sprintf("mr-%08x", rkey))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			unix.Munmap(b)
			return nil, fmt.Errorf("register memory: %w", err)
		}
		_, err = fmt.Fprintf(f, "%d %d %d\n", os.Getpid(), uintptr(unsafe.Pointer(&b[0])), size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
			unix.Munmap(b)
			return nil, fmt.Errorf("register memory: %w", err)
		}
		return &fakeMem{b: b, rkey: rkey, path: path}, nil
	}
}

func (m *fakeMem) Bytes() []byte { return m.b }
func (m *fakeMem) Addr() uint64  { return uint64(uintptr(unsafe.Pointer(&m.b[0]))) }
func (m *fakeMem) RKey() uint32  { return m.rkey }
func (m *fakeMem) LKey() uint32  { return m.rkey }
func (m *fakeMem) Huge() bool    { return false }

func (m *fakeMem) Close() error {
	if m.b == nil {
		return nil
	}
	os.Remove(m.path)
	err := unix.Munmap(m.b)
	m.b = nil
	return err
}

// region is a peer's registered memory, as its mr file says.
type region struct {
	pid        int
	addr, size uint64
}

func (d *fakeDev) lookupKey(rkey uint32) (region, bool) {
	b, err := os.ReadFile(filepath.Join(d.dir, fmt.Sprintf("mr-%08x", rkey)))
	if err != nil {
		return region{}, false
	}
	var r region
	if _, err := fmt.Sscan(string(b), &r.pid, &r.addr, &r.size); err != nil {
		return region{}, false
	}
	return r, true
}

// shm is a file of the meeting directory mapped shared.
type shm struct {
	b    []byte
	path string
}

func createShm(path string, size int) (*shm, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		os.Remove(path)
		return nil, err
	}
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		os.Remove(path)
		return nil, err
	}
	return &shm{b: b, path: path}, nil
}

func openShm(path string) (*shm, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() < 64 {
		return nil, fmt.Errorf("%s: %d bytes, too short", path, st.Size())
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return &shm{b: b, path: path}, nil
}

func (s *shm) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&s.b[off])) }
func (s *shm) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&s.b[off])) }

func (s *shm) close(remove bool) {
	if s == nil || s.b == nil {
		return
	}
	unix.Munmap(s.b)
	s.b = nil
	if remove {
		os.Remove(s.path)
	}
}

// fakeCQ is a completion queue in shared memory.
type fakeCQ struct {
	d   *fakeDev
	id  uint64
	mem *shm
	mu  sync.Mutex
	qps []*fakeQP // the local queue pairs on it, whose receives a flush completes
}

func (d *fakeDev) NewCQ(entries int) (CQ, error) {
	if entries < 1 {
		return nil, fmt.Errorf("create a completion queue of %d entries: %w", entries, syscall.EINVAL)
	}
	for {
		id := uint64(randomU32())<<16 | uint64(os.Getpid()&0xffff)
		mem, err := createShm(filepath.Join(d.dir, fmt.Sprintf("cq-%x", id)), cqEntries+entries*cqeSize)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create a completion queue: %w", err)
		}
		*mem.u32(0) = cqMagic
		*mem.u32(cqCap) = uint32(entries)
		cq := &fakeCQ{d: d, id: id, mem: mem}
		d.mu.Lock()
		d.cqs = append(d.cqs, cq)
		d.mu.Unlock()
		return cq, nil
	}
}

// push adds c to the completion queue in s (this process's or a peer's);
// false where the queue is full, which marks it overflowed.
func pushCQE(s *shm, c Completion) bool {
	lock := s.u32(cqLock)
	for !atomic.CompareAndSwapUint32(lock, 0, 1) {
		runtime.Gosched()
	}
	defer atomic.StoreUint32(lock, 0)
	capacity := uint64(atomic.LoadUint32(s.u32(cqCap)))
	head, tail := atomic.LoadUint64(s.u64(cqHead)), atomic.LoadUint64(s.u64(cqTail))
	if tail-head >= capacity {
		atomic.StoreUint32(s.u32(cqOverflow), 1)
		return false
	}
	e := s.b[cqEntries+int(tail%capacity)*cqeSize:][:cqeSize]
	binary.LittleEndian.PutUint64(e[0:], c.WRID)
	binary.LittleEndian.PutUint32(e[8:], uint32(c.Status))
	binary.LittleEndian.PutUint32(e[12:], uint32(c.Opcode))
	binary.LittleEndian.PutUint32(e[16:], c.ByteLen)
	binary.LittleEndian.PutUint32(e[20:], c.Imm)
	binary.LittleEndian.PutUint32(e[24:], c.QPNum)
	binary.LittleEndian.PutUint32(e[28:], c.Vendor)
	atomic.StoreUint64(s.u64(cqTail), tail+1)
	return true
}

// ErrCQOverrun is the error of a completion queue that overflowed: its
// queue pairs are in error.
var ErrCQOverrun = errors.New("completion queue overrun: completions were lost and its queue pairs are in error")

func (cq *fakeCQ) Poll(wc []Completion) (int, error) {
	s := cq.mem
	if s == nil || s.b == nil {
		return 0, fmt.Errorf("poll a closed completion queue: %w", syscall.EINVAL)
	}
	capacity := uint64(atomic.LoadUint32(s.u32(cqCap)))
	head, tail := atomic.LoadUint64(s.u64(cqHead)), atomic.LoadUint64(s.u64(cqTail))
	n := 0
	for ; n < len(wc) && head < tail; n++ {
		e := s.b[cqEntries+int(head%capacity)*cqeSize:][:cqeSize]
		wc[n] = Completion{WRID: binary.LittleEndian.Uint64(e[0:]), Status: Status(binary.LittleEndian.Uint32(e[8:])),
			Opcode: Opcode(binary.LittleEndian.Uint32(e[12:])), ByteLen: binary.LittleEndian.Uint32(e[16:]),
			Imm: binary.LittleEndian.Uint32(e[20:]), QPNum: binary.LittleEndian.Uint32(e[24:]), Vendor: binary.LittleEndian.Uint32(e[28:])}
		head++
	}
	atomic.StoreUint64(s.u64(cqHead), head)
	if n > 0 {
		return n, nil
	}
	if atomic.LoadUint32(s.u32(cqOverflow)) != 0 {
		cq.errorQPs()
		return 0, ErrCQOverrun
	}
	// A queue pair in error flushes its receives, each as a completion.
	cq.mu.Lock()
	defer cq.mu.Unlock()
	for _, qp := range cq.qps {
		for n < len(wc) {
			id, ok := qp.flushRecv()
			if !ok {
				break
			}
			wc[n] = Completion{WRID: id, Status: WRFlushErr, Opcode: OpRecv, QPNum: qp.num}
			n++
		}
	}
	return n, nil
}

// errorQPs moves the queue pairs on the queue to error.
func (cq *fakeCQ) errorQPs() {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	for _, qp := range cq.qps {
		qp.setState(StateError)
	}
}

func (cq *fakeCQ) Close() error {
	cq.mem.close(true)
	return nil
}

// fakeQP is a queue pair whose hardware state is a shared file; its
// sends go through a goroutine of the process, its NIC.
type fakeQP struct {
	d     *fakeDev
	num   uint32
	mem   *shm
	cq    *fakeCQ
	typ   QPType
	sends chan sendWR
	quit  chan struct{}
	done  chan struct{}

	mu     sync.Mutex
	remote Remote
	psn    uint32
	peer   *shm // the peer's queue pair
	peerCQ *shm // the completion queue of the peer's receives

	fault  faultSpec
	writes int64 // writes carried out, for fault
}

type sendWR struct {
	id     uint64
	local  []byte
	addr   uint64
	rkey   uint32
	imm    uint32
	finish chan struct{} // tests: closed when the write completes
}

func (d *fakeDev) NewQP(c CQ, t QPType, sends, recvs int) (QP, error) {
	cq, ok := c.(*fakeCQ)
	if !ok || cq.mem == nil {
		return nil, fmt.Errorf("create a queue pair: %w (not a completion queue of the fake)", syscall.EINVAL)
	}
	if sends < 1 || recvs < 1 {
		return nil, fmt.Errorf("create a queue pair of %d sends and %d receives: %w", sends, recvs, syscall.EINVAL)
	}
	for {
		num := randomU32()&0xfffff0 | 0x10
		mem, err := createShm(filepath.Join(d.dir, fmt.Sprintf("qp-%06x", num)), qpEntries+recvs*8)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create a queue pair: %w", err)
		}
		*mem.u32(0) = qpMagic
		*mem.u64(qpCQ) = cq.id
		*mem.u32(qpRQCap) = uint32(recvs)
		*mem.u32(qpTypeOff) = uint32(t)
		*mem.u32(qpPID) = uint32(os.Getpid())
		qp := &fakeQP{d: d, num: num, mem: mem, cq: cq, typ: t, sends: make(chan sendWR, sends),
			quit: make(chan struct{}), done: make(chan struct{}), fault: faultOf()}
		cq.mu.Lock()
		cq.qps = append(cq.qps, qp)
		cq.mu.Unlock()
		go qp.nic()
		return qp, nil
	}
}

func (qp *fakeQP) Num() uint32 { return qp.num }

func (qp *fakeQP) state() QPState { return QPState(atomic.LoadUint32(qp.mem.u32(qpState))) }

func (qp *fakeQP) setState(s QPState) { atomic.StoreUint32(qp.mem.u32(qpState), uint32(s)) }

func (qp *fakeQP) State() (QPState, error) {
	if qp.mem.b == nil {
		return 0, fmt.Errorf("query a closed queue pair: %w", syscall.EINVAL)
	}
	return qp.state(), nil
}

func (qp *fakeQP) move(from, to QPState) error {
	if s := qp.state(); s != from {
		return fmt.Errorf("modify queue pair %#x from %v to %v: %w (it is %v)", qp.num, from, to, syscall.EINVAL, s)
	}
	qp.setState(to)
	return nil
}

func (qp *fakeQP) Init() error { return qp.move(StateReset, StateInit) }

func (qp *fakeQP) Reset() error {
	s := qp.mem
	if s.b == nil {
		return fmt.Errorf("modify a closed queue pair to RESET: %w", syscall.EINVAL)
	}
	// Writes that come meanwhile find no RTR queue pair and are dropped;
	// the receive queue is emptied, nothing completes.
	qp.setState(StateReset)
	atomic.StoreUint32(s.u32(qpDest), 0)
	atomic.StoreUint64(s.u64(qpRQHead), atomic.LoadUint64(s.u64(qpRQTail)))
	qp.mu.Lock()
	qp.remote = Remote{}
	qp.mu.Unlock()
	return nil
}

func (qp *fakeQP) ReadyToReceive(r Remote, mtu int) error {
	switch mtu {
	case 256, 512, 1024, 2048, 4096:
	default:
		return fmt.Errorf("modify queue pair %#x to RTR: path MTU %d: %w (256, 512, 1024, 2048 or 4096)", qp.num, mtu, syscall.EINVAL)
	}
	if mtu > qp.d.port.ActiveMTU {
		return fmt.Errorf("modify queue pair %#x to RTR: path MTU %d: %w (the port's active MTU is %d)", qp.num, mtu, syscall.EINVAL, qp.d.port.ActiveMTU)
	}
	if !r.GID.IsValid() || r.QPN == 0 || r.QPN > 0xffffff {
		return fmt.Errorf("modify queue pair %#x to RTR: peer GID %v QPN %#x: %w", qp.num, r.GID, r.QPN, syscall.EINVAL)
	}
	qp.mu.Lock()
	qp.remote = r
	qp.mu.Unlock()
	atomic.StoreUint32(qp.mem.u32(qpDest), r.QPN)
	atomic.StoreUint32(qp.mem.u32(qpPSN), r.PSN&0xffffff)
	return qp.move(StateInit, StateRTR)
}

func (qp *fakeQP) ReadyToSend(psn uint32) error {
	qp.mu.Lock()
	qp.psn = psn & 0xffffff
	qp.mu.Unlock()
	return qp.move(StateRTR, StateRTS)
}

// The receive queue: ids at qpEntries, a ring of qpRQCap, head taken by
// the peer's NIC (or a flush), tail by PostRecv.

func (qp *fakeQP) PostRecv(id uint64) error {
	s := qp.mem
	if s.b == nil {
		return fmt.Errorf("post a receive: %w (queue pair closed)", syscall.EINVAL)
	}
	capacity := uint64(atomic.LoadUint32(s.u32(qpRQCap)))
	head, tail := atomic.LoadUint64(s.u64(qpRQHead)), atomic.LoadUint64(s.u64(qpRQTail))
	if tail-head >= capacity {
		return fmt.Errorf("post a receive: %w (the receive queue holds %d)", syscall.ENOMEM, capacity)
	}
	binary.LittleEndian.PutUint64(s.b[qpEntries+int(tail%capacity)*8:], id)
	atomic.StoreUint64(s.u64(qpRQTail), tail+1)
	return nil
}

// takeRecv takes the oldest receive posted on the queue pair in s.
func takeRecv(s *shm) (uint64, bool) {
	capacity := uint64(atomic.LoadUint32(s.u32(qpRQCap)))
	for {
		head, tail := atomic.LoadUint64(s.u64(qpRQHead)), atomic.LoadUint64(s.u64(qpRQTail))
		if head >= tail {
			return 0, false
		}
		id := binary.LittleEndian.Uint64(s.b[qpEntries+int(head%capacity)*8:])
		if atomic.CompareAndSwapUint64(s.u64(qpRQHead), head, head+1) {
			return id, true
		}
	}
}

// flushRecv takes a receive of a queue pair in error, to complete it
// flushed.
func (qp *fakeQP) flushRecv() (uint64, bool) {
	if qp.mem.b == nil || qp.state() != StateError {
		return 0, false
	}
	return takeRecv(qp.mem)
}

func (qp *fakeQP) PostWriteImm(id uint64, m Memory, local []byte, addr uint64, rkey uint32, imm uint32) error {
	return qp.postWrite(sendWR{id: id, local: local, addr: addr, rkey: rkey, imm: imm})
}

func (qp *fakeQP) postWrite(wr sendWR) error {
	// A queue pair in error takes work requests and flushes them, each
	// completing with WRFlushErr after those before it.
	if s := qp.state(); s != StateRTS && s != StateError {
		return fmt.Errorf("post a write: %w (queue pair %#x is %v, not RTS)", syscall.EINVAL, qp.num, s)
	}
	select {
	case qp.sends <- wr:
		return nil
	default:
		return fmt.Errorf("post a write: %w (the send queue is full)", syscall.ENOMEM)
	}
}

func (qp *fakeQP) Close() error {
	if qp.mem.b == nil {
		return nil
	}
	close(qp.quit)
	<-qp.done
	qp.cq.mu.Lock()
	for i, q := range qp.cq.qps {
		if q == qp {
			qp.cq.qps = append(qp.cq.qps[:i], qp.cq.qps[i+1:]...)
			break
		}
	}
	qp.cq.mu.Unlock()
	qp.mu.Lock()
	qp.peer.close(false)
	qp.peerCQ.close(false)
	qp.peer, qp.peerCQ = nil, nil
	qp.mu.Unlock()
	qp.mem.close(true)
	return nil
}

// faultSpec is the fault FaultEnv asks a queue pair for.
type faultSpec struct {
	kind string
	at   int64 // the write, from 1; 0: none
}

// faultOf parses FaultEnv, as a queue pair is created.
func faultOf() faultSpec {
	kind, at, ok := strings.Cut(os.Getenv(FaultEnv), "@")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil {
		return faultSpec{}
	}
	return faultSpec{kind, n}
}

// nic carries out the queue pair's writes in order. The completion of a
// write is held back until the next write's bytes have landed, or until
// there is no next write.
func (qp *fakeQP) nic() {
	defer close(qp.done)
	var pending *delivery
	for {
		var wr sendWR
		if pending != nil {
			select {
			case wr = <-qp.sends:
			default:
				qp.deliver(pending)
				pending = nil
				continue
			}
		} else {
			select {
			case wr = <-qp.sends:
			case <-qp.quit:
				return
			}
		}
		d := qp.write(wr)
		if pending != nil {
			qp.deliver(pending)
			pending = nil
		}
		if d != nil && d.status == Success && d.recvOK {
			pending = d
			continue
		}
		if d != nil {
			qp.deliver(d)
		}
	}
}

// delivery is a write carried out whose completions are yet to be given.
type delivery struct {
	wr     sendWR
	status Status // the sender's completion
	recvOK bool   // the peer's receive completes
	recvID uint64
	recv   Status
	n      uint32
	peer   *shm
	peerCQ *shm
}

// deliver gives a write's completions: the peer's receive, then the
// sender's own.
func (qp *fakeQP) deliver(d *delivery) {
	if d.recvOK {
		c := Completion{WRID: d.recvID, Status: d.recv, Opcode: OpRecvRDMAImm, ByteLen: d.n, Imm: d.wr.imm,
			QPNum: atomic.LoadUint32(qp.mem.u32(qpDest))}
		if d.recv != Success {
			c.Vendor = 0x42
		}
		if qp.fault.kind == "cq-full" && qp.writes >= qp.fault.at || !pushCQE(d.peerCQ, c) {
			atomic.StoreUint32(d.peerCQ.u32(cqOverflow), 1)
			atomic.StoreUint32(d.peer.u32(qpState), uint32(StateError))
			if qp.typ == RC {
				d.status = RetryExcErr
			}
		}
		if d.recv != Success {
			atomic.StoreUint32(d.peer.u32(qpState), uint32(StateError))
		}
	}
	if d.status != Success {
		qp.setState(StateError)
	}
	pushCQE(qp.cq.mem, Completion{WRID: d.wr.id, Status: d.status, Opcode: OpRDMAWrite, ByteLen: uint32(len(d.wr.local)), QPNum: qp.num})
	if d.wr.finish != nil {
		close(d.wr.finish)
	}
}

// write places one write's bytes at the peer and takes a receive there;
// it returns what its completions will be.
func (qp *fakeQP) write(wr sendWR) *delivery {
	d := &delivery{wr: wr, n: uint32(len(wr.local))}
	if qp.state() != StateRTS {
		d.status = WRFlushErr
		return d
	}
	qp.writes++
	nth, f := qp.writes, qp.fault
	if f.at == nth {
		switch f.kind {
		case "retry-exceeded":
			d.status = RetryExcErr
			return d
		case "bad-rkey":
			wr.rkey ^= 0x80000000
		}
	}
	// RC retries what the peer does not take; UC loses it.
	lost := func(s Status) *delivery {
		if qp.typ == RC {
			d.status = s
		}
		return d
	}
	peer, peerCQ, ok := qp.peerQP()
	if !ok {
		return lost(RetryExcErr)
	}
	d.peer, d.peerCQ = peer, peerCQ
	deadline := time.Now().Add(retryWindow)
	for {
		st := QPState(atomic.LoadUint32(peer.u32(qpState)))
		if st == StateRTR || st == StateRTS {
			break
		}
		if st == StateError || time.Now().After(deadline) || qp.closing() {
			return lost(RetryExcErr)
		}
		time.Sleep(time.Millisecond)
	}
	qp.mu.Lock()
	psn := qp.psn
	qp.mu.Unlock()
	if atomic.LoadUint32(peer.u32(qpDest)) != qp.num || atomic.LoadUint32(peer.u32(qpPSN)) != psn {
		// The peer drops packets from a queue pair or at a PSN it does not
		// expect: the sender is never acknowledged.
		return lost(RetryExcErr)
	}
	if f.at == nth && f.kind == "qp-error" {
		atomic.StoreUint32(peer.u32(qpState), uint32(StateError))
		return lost(RetryExcErr)
	}
	r, ok := qp.d.lookupKey(wr.rkey)
	pid := int(atomic.LoadUint32(peer.u32(qpPID)))
	if !ok || r.pid != pid || wr.addr < r.addr || wr.addr+uint64(len(wr.local)) > r.addr+r.size {
		if qp.typ == RC {
			atomic.StoreUint32(peer.u32(qpState), uint32(StateError))
		}
		return lost(RemAccessErr)
	}
	for off := 0; off < len(wr.local); off += piece {
		end := min(off+piece, len(wr.local))
		local := []unix.Iovec{{Base: &wr.local[off], Len: uint64(end - off)}}
		remote := []unix.RemoteIovec{{Base: uintptr(wr.addr) + uintptr(off), Len: end - off}}
		if _, err := unix.ProcessVMWritev(pid, local, remote, 0); err != nil {
			// The peer's process is gone (or its memory with it).
			return lost(RetryExcErr)
		}
		runtime.Gosched()
	}
	for {
		id, ok := takeRecv(peer)
		if ok {
			d.recvOK, d.recvID, d.recv = true, id, Success
			if f.at == nth && f.kind == "error-completion" {
				d.recv = LocQPOpErr
			}
			return d
		}
		if qp.typ == UC || time.Now().After(deadline) || qp.closing() {
			return lost(RNRRetryExcErr)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (qp *fakeQP) closing() bool {
	select {
	case <-qp.quit:
		return true
	default:
		return false
	}
}

// peerQP maps the peer's queue pair and its completion queue, once.
func (qp *fakeQP) peerQP() (peer, peerCQ *shm, ok bool) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.peer != nil && qp.peer.b != nil {
		return qp.peer, qp.peerCQ, true
	}
	if !qp.remoteReachable() {
		return nil, nil, false
	}
	p, err := openShm(filepath.Join(qp.d.dir, fmt.Sprintf("qp-%06x", qp.remote.QPN)))
	if err != nil {
		return nil, nil, false
	}
	if atomic.LoadUint32(p.u32(0)) != qpMagic {
		p.close(false)
		return nil, nil, false
	}
	c, err := openShm(filepath.Join(qp.d.dir, fmt.Sprintf("cq-%x", atomic.LoadUint64(p.u64(qpCQ)))))
	if err != nil {
		p.close(false)
		return nil, nil, false
	}
	qp.peer, qp.peerCQ = p, c
	return p, c, true
}

// remoteReachable reports whether the peer's GID is one of this host's:
// the fake reaches no other.
func (qp *fakeQP) remoteReachable() bool {
	for _, g := range fakeGIDs {
		if g.gid == qp.remote.GID {
			return true
		}
	}
	return false
}

func randomU32() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:])
}

// FakeArrivals completes writes with immediate data at one of the fake's
// queue pairs, as the NIC does once a write's bytes have landed, without
// placing any bytes: it is for measuring the receiver's own work per
// frame, apart from the cost of moving them.
type FakeArrivals struct {
	qpn    uint32
	qp, cq *shm
}

// OpenFakeArrivals opens the fake's queue pair qpn in dir for
// FakeArrivals.Complete.
func OpenFakeArrivals(dir string, qpn uint32) (*FakeArrivals, error) {
	p, err := openShm(filepath.Join(dir, fmt.Sprintf("qp-%06x", qpn)))
	if err != nil {
		return nil, err
	}
	c, err := openShm(filepath.Join(dir, fmt.Sprintf("cq-%x", atomic.LoadUint64(p.u64(qpCQ)))))
	if err != nil {
		p.close(false)
		return nil, err
	}
	return &FakeArrivals{qpn: qpn, qp: p, cq: c}, nil
}

// Complete takes a receive posted at the queue pair and adds the
// completion of a write of n bytes with immediate data imm to its queue.
func (a *FakeArrivals) Complete(imm, n uint32) error {
	id, ok := takeRecv(a.qp)
	if !ok {
		return fmt.Errorf("queue pair %#x: no receive posted", a.qpn)
	}
	if !pushCQE(a.cq, Completion{WRID: id, Opcode: OpRecvRDMAImm, ByteLen: n, Imm: imm, QPNum: a.qpn}) {
		return ErrCQOverrun
	}
	return nil
}

// Close unmaps the queue pair.
func (a *FakeArrivals) Close() {
	a.qp.close(false)
	a.cq.close(false)
}
