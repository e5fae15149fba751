// C helpers for ibv.go: libibverbs is opened with dlopen on first use
// (h5v_load), not linked, so that a program that never receives over RoCE
// never loads it nor the provider libraries (libmlx5, librxe) it opens in
// turn. The library's symbols are called through the pointers below; the
// data-path calls (ibv_post_send, ibv_post_recv, ibv_poll_cq) are static
// inline functions of the header that go through the context's ops table
// and need no symbol. The header's macros that rename calls
// (ibv_query_port, ibv_reg_mr) are not used: their inline bodies call
// symbols directly. No logic lives here beyond filling structs.

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static struct ibv_device **(*h5v_p_get_device_list)(int *);
static void (*h5v_p_free_device_list)(struct ibv_device **);
static const char *(*h5v_p_get_device_name)(struct ibv_device *);
static struct ibv_context *(*h5v_p_open_device)(struct ibv_device *);
static int (*h5v_p_close_device)(struct ibv_context *);
static int (*h5v_p_query_port)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *);
static int (*h5v_p_query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
static int (*h5v_p_query_gid_ex)(struct ibv_context *, uint32_t, uint32_t, struct ibv_gid_entry *, uint32_t, size_t);
static struct ibv_pd *(*h5v_p_alloc_pd)(struct ibv_context *);
static int (*h5v_p_dealloc_pd)(struct ibv_pd *);
static struct ibv_mr *(*h5v_p_reg_mr)(struct ibv_pd *, void *, size_t, int);
static int (*h5v_p_dereg_mr)(struct ibv_mr *);
static struct ibv_cq *(*h5v_p_create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
static int (*h5v_p_destroy_cq)(struct ibv_cq *);
static struct ibv_qp *(*h5v_p_create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
static int (*h5v_p_destroy_qp)(struct ibv_qp *);
static int (*h5v_p_modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
static int (*h5v_p_query_qp)(struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *);

static char h5v_load_error[512];

#define H5V_SYM(i, name) do { \
	p[i] = dlsym(lib, name); \
	if (!p[i]) { \
		dlclose(lib); \
		snprintf(h5v_load_error, sizeof h5v_load_error, "%s: no symbol %s", soname, name); \
		return h5v_load_error; \
	} \
} while (0)

// h5v_load opens the library soname (libibverbs.so.1) and resolves the
// symbols the package calls; on failure it returns a message (dlerror's
// or the missing symbol's) and changes nothing, else NULL.
// _ibv_query_gid_ex (rdma-core 32 and later), which says a GID's type,
// is optional. The caller calls it once.
static const char *h5v_load(const char *soname) {
	void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *e = dlerror();
		snprintf(h5v_load_error, sizeof h5v_load_error, "%s", e ? e : "dlopen failed");
		return h5v_load_error;
	}
	void *p[17];
	H5V_SYM(0, "ibv_get_device_list");
	H5V_SYM(1, "ibv_free_device_list");
	H5V_SYM(2, "ibv_get_device_name");
	H5V_SYM(3, "ibv_open_device");
	H5V_SYM(4, "ibv_close_device");
	H5V_SYM(5, "ibv_query_port");
	H5V_SYM(6, "ibv_query_gid");
	H5V_SYM(7, "ibv_alloc_pd");
	H5V_SYM(8, "ibv_dealloc_pd");
	H5V_SYM(9, "ibv_reg_mr");
	H5V_SYM(10, "ibv_dereg_mr");
	H5V_SYM(11, "ibv_create_cq");
	H5V_SYM(12, "ibv_destroy_cq");
	H5V_SYM(13, "ibv_create_qp");
	H5V_SYM(14, "ibv_destroy_qp");
	H5V_SYM(15, "ibv_modify_qp");
	H5V_SYM(16, "ibv_query_qp");
	*(void **)(&h5v_p_get_device_list) = p[0];
	*(void **)(&h5v_p_free_device_list) = p[1];
	*(void **)(&h5v_p_get_device_name) = p[2];
	*(void **)(&h5v_p_open_device) = p[3];
	*(void **)(&h5v_p_close_device) = p[4];
	*(void **)(&h5v_p_query_port) = p[5];
	*(void **)(&h5v_p_query_gid) = p[6];
	*(void **)(&h5v_p_alloc_pd) = p[7];
	*(void **)(&h5v_p_dealloc_pd) = p[8];
	*(void **)(&h5v_p_reg_mr) = p[9];
	*(void **)(&h5v_p_dereg_mr) = p[10];
	*(void **)(&h5v_p_create_cq) = p[11];
	*(void **)(&h5v_p_destroy_cq) = p[12];
	*(void **)(&h5v_p_create_qp) = p[13];
	*(void **)(&h5v_p_destroy_qp) = p[14];
	*(void **)(&h5v_p_modify_qp) = p[15];
	*(void **)(&h5v_p_query_qp) = p[16];
	*(void **)(&h5v_p_query_gid_ex) = dlsym(lib, "_ibv_query_gid_ex");
	return NULL;
}

static struct ibv_device **h5v_get_device_list(int *n) { return h5v_p_get_device_list(n); }
static void h5v_free_device_list(struct ibv_device **l) { h5v_p_free_device_list(l); }
static struct ibv_device *h5v_device_at(struct ibv_device **l, int i) { return l[i]; }
static const char *h5v_device_name(struct ibv_device *d) { return h5v_p_get_device_name(d); }
static struct ibv_context *h5v_open_device(struct ibv_device *d) { return h5v_p_open_device(d); }
static int h5v_close_device(struct ibv_context *c) { return h5v_p_close_device(c); }

// h5v_query_port does what the header's ibv_query_port macro does: the
// provider's extended query where it has one, else the library's call.
static int h5v_query_port(struct ibv_context *c, int port, struct ibv_port_attr *attr) {
	struct verbs_context *vctx = verbs_get_ctx_op(c, query_port);
	if (!vctx) {
		memset(attr, 0, sizeof *attr);
		return h5v_p_query_port(c, (uint8_t)port, (struct _compat_ibv_port_attr *)attr);
	}
	return vctx->query_port(c, (uint8_t)port, attr, sizeof *attr);
}

// h5v_query_gid reads GID table entry index of port into gid and, where
// the library says (rdma-core 32 and later), its type (enum
// ibv_gid_type_sysfs) into *type; else *type is -1. It returns 0 or an
// errno value: ENODATA for an empty entry, EINVAL past the table.
static int h5v_query_gid(struct ibv_context *c, int port, int index, uint8_t gid[16], int *type) {
	*type = -1;
	if (h5v_p_query_gid_ex) {
		struct ibv_gid_entry e;
		memset(&e, 0, sizeof e);
		int ret = h5v_p_query_gid_ex(c, (uint32_t)port, (uint32_t)index, &e, 0, sizeof e);
		if (ret < 0) ret = -ret; // the manual says an errno value; be sure of its sign
		if (ret == 0) {
			memcpy(gid, e.gid.raw, 16);
			*type = (int)e.gid_type;
			return 0;
		}
		if (ret != EOPNOTSUPP && ret != ENOSYS) return ret;
	}
	union ibv_gid g;
	errno = 0;
	if (h5v_p_query_gid(c, (uint8_t)port, index, &g) != 0) return errno ? errno : EINVAL;
	memcpy(gid, g.raw, 16);
	return 0;
}

static struct ibv_pd *h5v_alloc_pd(struct ibv_context *c) { return h5v_p_alloc_pd(c); }
static int h5v_dealloc_pd(struct ibv_pd *pd) { return h5v_p_dealloc_pd(pd); }

static struct ibv_mr *h5v_reg_mr(struct ibv_pd *pd, uint64_t addr, size_t len, int access) {
	return h5v_p_reg_mr(pd, (void *)(uintptr_t)addr, len, access);
}
static int h5v_dereg_mr(struct ibv_mr *mr) { return h5v_p_dereg_mr(mr); }
static uint32_t h5v_mr_lkey(struct ibv_mr *mr) { return mr->lkey; }
static uint32_t h5v_mr_rkey(struct ibv_mr *mr) { return mr->rkey; }

static struct ibv_cq *h5v_create_cq(struct ibv_context *c, int entries) {
	return h5v_p_create_cq(c, entries, NULL, NULL, 0);
}
static int h5v_destroy_cq(struct ibv_cq *cq) { return h5v_p_destroy_cq(cq); }
static int h5v_cq_entries(struct ibv_cq *cq) { return cq->cqe; }

// h5v_wc is one work completion as Go reads it: struct ibv_wc's fields,
// its immediate data (in a union there) in host order.
struct h5v_wc {
	uint64_t wr_id;
	uint32_t status, opcode, byte_len, imm, qp_num, vendor_err;
};

// h5v_poll polls up to n completions of cq into wc (scratch room for n)
// and converts them into out. It returns how many, or a negative value
// where the queue failed.
static int h5v_poll(struct ibv_cq *cq, struct ibv_wc *wc, struct h5v_wc *out, int n) {
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].byte_len = wc[i].byte_len;
		out[i].imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
		out[i].qp_num = wc[i].qp_num;
		out[i].vendor_err = wc[i].vendor_err;
	}
	return got;
}

// h5v_create_qp creates a queue pair of type on cq for both its queues,
// each work request of one scatter/gather entry at most, every send
// signaled only where it asks to be.
static struct ibv_qp *h5v_create_qp(struct ibv_pd *pd, struct ibv_cq *cq, int type, int sends, int recvs) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = (enum ibv_qp_type)type;
	a.cap.max_send_wr = (uint32_t)sends;
	a.cap.max_recv_wr = (uint32_t)recvs;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	return h5v_p_create_qp(pd, &a);
}
static int h5v_destroy_qp(struct ibv_qp *qp) { return h5v_p_destroy_qp(qp); }
static uint32_t h5v_qp_num(struct ibv_qp *qp) { return qp->qp_num; }

// The RC transport's timers and retry counts: the ACK timeout (4.096 us
// times 2^14, 67 ms), seven transport retries, six retries after an RNR
// NAK (not 7, which is infinite: a peer with no receive posted must end
// in an error, not a stall), and the RNR NAK timer this side asks a
// sender to wait (14: 1.28 ms).
enum {
	H5V_TIMEOUT = 14,
	H5V_RETRY_CNT = 7,
	H5V_RNR_RETRY = 6,
	H5V_MIN_RNR_TIMER = 14,
	H5V_HOP_LIMIT = 64,
};

// h5v_modify_reset moves qp from any state to RESET: its work requests
// are dropped, none completes.
static int h5v_modify_reset(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RESET;
	return h5v_p_modify_qp(qp, &a, IBV_QP_STATE);
}

// h5v_modify_init moves qp from RESET to INIT on port, allowing local
// and remote writes.
static int h5v_modify_init(struct ibv_qp *qp, int port) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = (uint8_t)port;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	return h5v_p_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

// h5v_modify_rtr moves qp from INIT to RTR toward the queue pair dqpn at
// GID dgid, routed (a GRH, as RoCE needs) from this port's GID table
// entry sgid_index, expecting PSN rq_psn first, at path MTU mtu (enum
// ibv_mtu).
static int h5v_modify_rtr(struct ibv_qp *qp, int rc, int port, int sgid_index,
		const uint8_t dgid[16], uint32_t dqpn, uint32_t rq_psn, int mtu) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = (enum ibv_mtu)mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = rq_psn;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, dgid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)sgid_index;
	a.ah_attr.grh.hop_limit = H5V_HOP_LIMIT;
	a.ah_attr.port_num = (uint8_t)port;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (rc) {
		a.max_dest_rd_atomic = 1;
		a.min_rnr_timer = H5V_MIN_RNR_TIMER;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	return h5v_p_modify_qp(qp, &a, mask);
}

// h5v_modify_rts moves qp from RTR to RTS, sending from sq_psn.
static int h5v_modify_rts(struct ibv_qp *qp, int rc, uint32_t sq_psn) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (rc) {
		a.timeout = H5V_TIMEOUT;
		a.retry_cnt = H5V_RETRY_CNT;
		a.rnr_retry = H5V_RNR_RETRY;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return h5v_p_modify_qp(qp, &a, mask);
}

// h5v_query_state returns qp's state (enum ibv_qp_state) in *state, or an
// errno value.
static int h5v_query_state(struct ibv_qp *qp, int *state) {
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int ret = h5v_p_query_qp(qp, &a, IBV_QP_STATE, &ia);
	if (ret == 0) *state = (int)a.qp_state;
	return ret;
}

// h5v_post_recv posts a receive of no buffer, which a write with
// immediate data consumes. It returns 0 or an errno value.
static int h5v_post_recv(struct ibv_qp *qp, uint64_t id) {
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = id;
	wr.sg_list = NULL;
	wr.num_sge = 0;
	return ibv_post_recv(qp, &wr, &bad);
}

// h5v_post_write_imm posts a signaled RDMA write with immediate data imm
// (host order; sent in network order) of len bytes at addr (lkey) to the
// peer's raddr under rkey. It returns 0 or an errno value.
static int h5v_post_write_imm(struct ibv_qp *qp, uint64_t id, uint64_t addr, uint32_t len,
		uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t imm) {
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	sge.addr = addr;
	sge.length = len;
	sge.lkey = lkey;
	wr.wr_id = id;
	wr.sg_list = len ? &sge : NULL;
	wr.num_sge = len ? 1 : 0;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}
