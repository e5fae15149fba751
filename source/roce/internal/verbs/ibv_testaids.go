package verbs

// The package's tests drive the real completion queue and queue pair code
// (ibvCQ.Poll, ibvQP.PostRecv, ibvQP.PostWriteImm, and libibverbs' inline
// ibv_poll_cq, ibv_post_recv and ibv_post_send they call) on a machine
// without an RDMA device through the objects below: a context whose ops
// table, where a provider's functions would be, holds C functions that
// record what is posted and hand out completions queued by the test.
// Test files cannot use cgo, so they live here.

/*
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

struct h5v_opsfake {
	struct ibv_context ctx; // first: the ops find the fake from it
	struct ibv_cq cq;
	struct ibv_qp qp;
	struct ibv_wc wc[256];
	int nwc;       // completions queued
	int fail;      // the errno value posts return, where not 0
	int poll_ret;  // what poll_cq returns, where negative
	int polls;     // poll_cq calls
	int sends, recvs;
	struct ibv_send_wr send; // the last send posted, its list cut
	struct ibv_sge sge;      // its first entry
	int send_wrs;            // how many work requests it chained
	struct ibv_recv_wr recv; // the last receive posted
	int recv_wrs;
};

static int h5v_opsfake_poll(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
	struct h5v_opsfake *f = (struct h5v_opsfake *)cq->context;
	f->polls++;
	if (f->poll_ret < 0) return f->poll_ret;
	int k = n < f->nwc ? n : f->nwc;
	memcpy(wc, f->wc, (size_t)k * sizeof *wc);
	memmove(f->wc, f->wc + k, (size_t)(f->nwc - k) * sizeof *wc);
	f->nwc -= k;
	return k;
}

static int h5v_opsfake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
	struct h5v_opsfake *f = (struct h5v_opsfake *)qp->context;
	if (f->fail) { *bad = wr; return f->fail; }
	f->send = *wr;
	f->send_wrs = 0;
	for (struct ibv_send_wr *w = wr; w; w = w->next) f->send_wrs++;
	memset(&f->sge, 0, sizeof f->sge);
	if (wr->num_sge > 0 && wr->sg_list) f->sge = wr->sg_list[0];
	f->send.next = NULL;
	f->send.sg_list = NULL;
	f->sends++;
	return 0;
}

static int h5v_opsfake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
	struct h5v_opsfake *f = (struct h5v_opsfake *)qp->context;
	if (f->fail) { *bad = wr; return f->fail; }
	f->recv = *wr;
	f->recv_wrs = 0;
	for (struct ibv_recv_wr *w = wr; w; w = w->next) f->recv_wrs++;
	f->recv.next = NULL;
	f->recvs++;
	return 0;
}

static struct h5v_opsfake *h5v_opsfake_new(uint32_t qpn) {
	struct h5v_opsfake *f = calloc(1, sizeof *f);
	if (!f) return NULL;
	f->ctx.ops.poll_cq = h5v_opsfake_poll;
	f->ctx.ops.post_send = h5v_opsfake_post_send;
	f->ctx.ops.post_recv = h5v_opsfake_post_recv;
	f->cq.context = &f->ctx;
	f->cq.cqe = 256;
	f->qp.context = &f->ctx;
	f->qp.qp_num = qpn;
	f->qp.send_cq = &f->cq;
	f->qp.recv_cq = &f->cq;
	return f;
}

// h5v_opsfake_add queues a completion; imm_net is the immediate data as
// the wire carries it (network order).
static int h5v_opsfake_add(struct h5v_opsfake *f, uint64_t id, int status, int opcode,
		uint32_t len, uint32_t imm_net, int with_imm, uint32_t qpn, uint32_t vendor) {
	if (f->nwc == 256) return -1;
	struct ibv_wc *w = &f->wc[f->nwc++];
	memset(w, 0, sizeof *w);
	w->wr_id = id;
	w->status = (enum ibv_wc_status)status;
	w->opcode = (enum ibv_wc_opcode)opcode;
	w->byte_len = len;
	w->imm_data = imm_net;
	w->wc_flags = with_imm ? IBV_WC_WITH_IMM : 0;
	w->qp_num = qpn;
	w->vendor_err = vendor;
	return 0;
}

static uint32_t h5v_opsfake_imm(struct h5v_opsfake *f) { return f->send.imm_data; }
static uint64_t h5v_opsfake_raddr(struct h5v_opsfake *f) { return f->send.wr.rdma.remote_addr; }
static uint32_t h5v_opsfake_rkey(struct h5v_opsfake *f) { return f->send.wr.rdma.rkey; }
*/
import "C"

import "unsafe"

// opsFake is a completion queue and a queue pair on a context whose
// provider ops are the C functions above.
type opsFake struct {
	f  *C.struct_h5v_opsfake
	cq *ibvCQ
	qp *ibvQP
}

// newOpsFake returns a fake with a queue pair numbered qpn of type t on
// its completion queue, on a device whose port is p. The device has a
// context but no protection domain: only the checks that Close makes
// before it calls the library may be tried on it.
func newOpsFake(qpn uint32, t QPType, p Port) *opsFake {
	f := C.h5v_opsfake_new(C.uint32_t(qpn))
	if f == nil {
		panic("out of memory")
	}
	d := &ibvDevice{ctx: &f.ctx, port: p}
	return &opsFake{
		f:  f,
		cq: newIBVCQ(d, &f.cq),
		qp: &ibvQP{dev: d, qp: &f.qp, typ: t, num: qpn},
	}
}

// add queues completion c, its immediate data given as the wire carries
// it (immNet, network order) and flagged present or not.
func (o *opsFake) add(c Completion, immNet uint32, withImm bool) bool {
	w := C.int(0)
	if withImm {
		w = 1
	}
	return C.h5v_opsfake_add(o.f, C.uint64_t(c.WRID), C.int(c.Status), C.int(c.Opcode), C.uint32_t(c.ByteLen),
		C.uint32_t(immNet), w, C.uint32_t(c.QPNum), C.uint32_t(c.Vendor)) == 0
}

// fakeSend is what the last send work request carried.
type fakeSend struct {
	ID           uint64
	Opcode       int // enum ibv_wr_opcode
	Flags        int // IBV_SEND_*
	ImmNet       uint32
	RemoteAddr   uint64
	RKey         uint32
	NumSGE       int
	WRs          int // work requests chained
	Addr         uint64
	Length, LKey uint32
	Sends        int
}

// lastSend returns the last send work request posted and how many were.
func (o *opsFake) lastSend() fakeSend {
	s := &o.f.send
	return fakeSend{
		ID: uint64(s.wr_id), Opcode: int(s.opcode), Flags: int(s.send_flags),
		ImmNet:     uint32(C.h5v_opsfake_imm(o.f)),
		RemoteAddr: uint64(C.h5v_opsfake_raddr(o.f)), RKey: uint32(C.h5v_opsfake_rkey(o.f)),
		NumSGE: int(s.num_sge), WRs: int(o.f.send_wrs),
		Addr: uint64(o.f.sge.addr), Length: uint32(o.f.sge.length), LKey: uint32(o.f.sge.lkey),
		Sends: int(o.f.sends),
	}
}

// lastRecv returns the last receive posted: its id, its scatter/gather
// entries and how many work requests it chained; and how many were.
func (o *opsFake) lastRecv() (id uint64, numSGE, wrs, recvs int) {
	r := &o.f.recv
	return uint64(r.wr_id), int(r.num_sge), int(o.f.recv_wrs), int(o.f.recvs)
}

// setFail makes posts return errno value e (0: succeed), and poll_cq
// return pollRet where it is negative.
func (o *opsFake) setFail(e int, pollRet int) {
	o.f.fail = C.int(e)
	o.f.poll_ret = C.int(pollRet)
}

// polls returns how many times poll_cq was called.
func (o *opsFake) polls() int { return int(o.f.polls) }

// free closes the fake's queue pair and completion queue as Close would,
// without the library, and frees the fake.
func (o *opsFake) free() {
	o.qp.qp = nil
	o.cq.free()
	C.free(unsafe.Pointer(o.f))
	o.f = nil
}

// cEnums pairs each constant of verbs.go that the real verbs hand to or
// take from libibverbs unconverted with the value <infiniband/verbs.h>
// gives it.
var cEnums = []struct {
	name          string
	goValue, cVal int
}{
	{"IBV_WC_SUCCESS", int(Success), C.IBV_WC_SUCCESS},
	{"IBV_WC_LOC_LEN_ERR", int(LocLenErr), C.IBV_WC_LOC_LEN_ERR},
	{"IBV_WC_LOC_QP_OP_ERR", int(LocQPOpErr), C.IBV_WC_LOC_QP_OP_ERR},
	{"IBV_WC_LOC_PROT_ERR", int(LocProtErr), C.IBV_WC_LOC_PROT_ERR},
	{"IBV_WC_WR_FLUSH_ERR", int(WRFlushErr), C.IBV_WC_WR_FLUSH_ERR},
	{"IBV_WC_REM_INV_REQ_ERR", int(RemInvReqErr), C.IBV_WC_REM_INV_REQ_ERR},
	{"IBV_WC_REM_ACCESS_ERR", int(RemAccessErr), C.IBV_WC_REM_ACCESS_ERR},
	{"IBV_WC_REM_OP_ERR", int(RemOpErr), C.IBV_WC_REM_OP_ERR},
	{"IBV_WC_RETRY_EXC_ERR", int(RetryExcErr), C.IBV_WC_RETRY_EXC_ERR},
	{"IBV_WC_RNR_RETRY_EXC_ERR", int(RNRRetryExcErr), C.IBV_WC_RNR_RETRY_EXC_ERR},
	{"IBV_WC_GENERAL_ERR", int(GeneralErr), C.IBV_WC_GENERAL_ERR},
	{"IBV_WC_GENERAL_ERR + 1", statusNamesLength, C.IBV_WC_GENERAL_ERR + 1},
	{"IBV_WC_SEND", int(OpSend), C.IBV_WC_SEND},
	{"IBV_WC_RDMA_WRITE", int(OpRDMAWrite), C.IBV_WC_RDMA_WRITE},
	{"IBV_WC_RECV", int(OpRecv), C.IBV_WC_RECV},
	{"IBV_WC_RECV_RDMA_WITH_IMM", int(OpRecvRDMAImm), C.IBV_WC_RECV_RDMA_WITH_IMM},
	{"IBV_QPS_RESET", int(StateReset), C.IBV_QPS_RESET},
	{"IBV_QPS_INIT", int(StateInit), C.IBV_QPS_INIT},
	{"IBV_QPS_RTR", int(StateRTR), C.IBV_QPS_RTR},
	{"IBV_QPS_RTS", int(StateRTS), C.IBV_QPS_RTS},
	{"IBV_QPS_SQD", int(StateSQD), C.IBV_QPS_SQD},
	{"IBV_QPS_SQE", int(StateSQE), C.IBV_QPS_SQE},
	{"IBV_QPS_ERR", int(StateError), C.IBV_QPS_ERR},
}

// The send work request opcode and flag PostWriteImm must post.
const (
	wrRDMAWriteWithImm = C.IBV_WR_RDMA_WRITE_WITH_IMM
	sendSignaled       = C.IBV_SEND_SIGNALED
)
