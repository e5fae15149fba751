// C helpers for fi.go: libfabric's data-path and object calls are static
// inline functions, which cgo cannot call directly, so each gets a plain
// wrapper here. No logic lives here beyond filling structs and loading
// the library.

#include <stdlib.h>
#include <string.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>

#define H5I_FI_VERSION FI_VERSION(1, 9)

// libfabric is opened with dlopen on first use (h5i_load), not linked:
// Debian's libfabric links libpsm2 and libinfinipath, whose constructors
// sleep at load, and a command that never opens the network should not
// wait for them. Almost every libfabric call is a static inline function
// of the headers that goes through the ops tables of the objects; only
// these are symbols of the library, and they are called through the
// pointers below. The headers' own inline functions that call them
// (fi_allocinfo) are not used here.
static int (*h5i_p_getinfo)(uint32_t, const char *, const char *, uint64_t,
		const struct fi_info *, struct fi_info **);
static void (*h5i_p_freeinfo)(struct fi_info *);
static struct fi_info *(*h5i_p_dupinfo)(const struct fi_info *);
static int (*h5i_p_fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
static const char *(*h5i_p_strerror)(int);
static char h5i_load_error[512];

#define H5I_SYM(p, name) do { \
	p = dlsym(lib, name); \
	if (!p) { \
		dlclose(lib); \
		snprintf(h5i_load_error, sizeof h5i_load_error, "%s: no symbol %s", soname, name); \
		return h5i_load_error; \
	} \
} while (0)

// The libraries libfabric loads (libpsm2, libinfinipath, the providers)
// may install signal handlers when they are opened or first used. Loaded
// after the Go runtime installed its own, theirs would replace Go's: a
// SIGTERM would end the process at once instead of draining the scan, a
// fault would not become a Go panic. Every call that can load or start a
// provider runs between h5i_sigsave and h5i_sigrestore, which puts back
// each handler that changed.
typedef struct { struct sigaction a[NSIG]; } h5i_sigset;

static void h5i_sigsave(h5i_sigset *s) {
	for (int i = 1; i < NSIG; i++) sigaction(i, NULL, &s->a[i]);
}

static void h5i_sigrestore(const h5i_sigset *s) {
	for (int i = 1; i < NSIG; i++) {
		struct sigaction cur;
		if (sigaction(i, NULL, &cur) != 0) continue;
		if (cur.sa_handler != s->a[i].sa_handler || cur.sa_flags != s->a[i].sa_flags) {
			sigaction(i, &s->a[i], NULL);
		}
	}
}

// h5i_load opens the library soname (libfabric.so.1) and resolves the few
// symbols the package calls; on failure it returns a message (dlerror's or
// the missing symbol's) and sets nothing, else NULL. The caller calls it
// once.
static const char *h5i_load(const char *soname) {
	h5i_sigset sigs;
	h5i_sigsave(&sigs);
	void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
	h5i_sigrestore(&sigs);
	if (!lib) {
		const char *e = dlerror();
		snprintf(h5i_load_error, sizeof h5i_load_error, "%s", e ? e : "dlopen failed");
		return h5i_load_error;
	}
	void *getinfo, *freeinfo, *dupinfo, *fabric, *strerror_;
	H5I_SYM(getinfo, "fi_getinfo");
	H5I_SYM(freeinfo, "fi_freeinfo");
	H5I_SYM(dupinfo, "fi_dupinfo");
	H5I_SYM(fabric, "fi_fabric");
	H5I_SYM(strerror_, "fi_strerror");
	*(void **)(&h5i_p_getinfo) = getinfo;
	*(void **)(&h5i_p_freeinfo) = freeinfo;
	*(void **)(&h5i_p_dupinfo) = dupinfo;
	*(void **)(&h5i_p_fabric) = fabric;
	*(void **)(&h5i_p_strerror) = strerror_;
	return NULL;
}

static void h5i_freeinfo(struct fi_info *i) { h5i_p_freeinfo(i); }
static const char *h5i_strerror(int code) {
	return h5i_p_strerror ? h5i_p_strerror(code) : "libfabric not loaded";
}

// h5i_getinfo asks for connected endpoints of provider prov with the
// capabilities and memory registration modes the receiver and sender use,
// addresses of addr_format (FI_SOCKADDR_IN, FI_SOCKADDR_IN6) and, where
// not 0, the endpoint protocol (FI_PROTO_RDMA_CM_IB_RC for verbs).
static int h5i_getinfo(const char *prov, const char *node, const char *service,
		int source, uint32_t addr_format, uint32_t protocol, struct fi_info **info) {
	struct fi_info *hints = h5i_p_dupinfo(NULL); // fi_allocinfo
	if (!hints) return -FI_ENOMEM;
	hints->addr_format = addr_format;
	hints->ep_attr->type = FI_EP_MSG;
	hints->ep_attr->protocol = protocol;
	hints->caps = FI_MSG | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->domain_attr->threading = FI_THREAD_SAFE;
	hints->tx_attr->msg_order = FI_ORDER_SAW;
	hints->fabric_attr->prov_name = strdup(prov);
	h5i_sigset sigs;
	h5i_sigsave(&sigs);
	int ret = h5i_p_getinfo(H5I_FI_VERSION, node, service, source ? FI_SOURCE : 0, hints, info);
	h5i_sigrestore(&sigs);
	h5i_p_freeinfo(hints);
	return ret;
}

// h5i_dupone returns a copy of the one entry i of an fi_info list (its
// next is NULL), or NULL when out of memory.
static struct fi_info *h5i_dupone(struct fi_info *i) {
	struct fi_info *next = i->next;
	i->next = NULL;
	struct fi_info *d = h5i_p_dupinfo(i);
	i->next = next;
	return d;
}
static struct fi_info *h5i_next(struct fi_info *i) { return i->next; }
static uint32_t h5i_addr_format(struct fi_info *i) { return i->addr_format; }
static uint32_t h5i_protocol(struct fi_info *i) { return i->ep_attr->protocol; }
static void *h5i_src_addr(struct fi_info *i, size_t *len) { *len = i->src_addrlen; return i->src_addr; }
static void *h5i_dest_addr(struct fi_info *i, size_t *len) { *len = i->dest_addrlen; return i->dest_addr; }
static void h5i_set_mr_mode(struct fi_info *i, uint64_t mode) { i->domain_attr->mr_mode = (int)mode; }
static void h5i_set_inject_size(struct fi_info *i, size_t n) { i->tx_attr->inject_size = n; }
static void h5i_set_max_msg_size(struct fi_info *i, size_t n) { i->ep_attr->max_msg_size = n; }
static const char *h5i_prov_name(struct fi_info *i) { return i->fabric_attr->prov_name; }
static uint64_t h5i_mr_mode(struct fi_info *i) { return (uint64_t)i->domain_attr->mr_mode; }
static size_t h5i_inject_size(struct fi_info *i) { return i->tx_attr->inject_size; }
static size_t h5i_tx_size(struct fi_info *i) { return i->tx_attr->size; }
static size_t h5i_rx_size(struct fi_info *i) { return i->rx_attr->size; }
static size_t h5i_max_msg_size(struct fi_info *i) { return i->ep_attr->max_msg_size; }
static void h5i_set_sizes(struct fi_info *i, size_t tx, size_t rx) {
	if (tx && tx < i->tx_attr->size) i->tx_attr->size = tx;
	if (rx && rx < i->rx_attr->size) i->rx_attr->size = rx;
}

static int h5i_fabric(struct fi_info *i, struct fid_fabric **f) {
	h5i_sigset sigs;
	h5i_sigsave(&sigs);
	int ret = h5i_p_fabric(i->fabric_attr, f, NULL);
	h5i_sigrestore(&sigs);
	return ret;
}
static int h5i_domain(struct fid_fabric *f, struct fi_info *i, struct fid_domain **d) {
	h5i_sigset sigs;
	h5i_sigsave(&sigs);
	int ret = fi_domain(f, i, d, NULL);
	h5i_sigrestore(&sigs);
	return ret;
}
static int h5i_close(struct fid *f) { return fi_close(f); }
static struct fid *h5i_fid_fabric(struct fid_fabric *f) { return &f->fid; }
static struct fid *h5i_fid_domain(struct fid_domain *d) { return &d->fid; }
static struct fid *h5i_fid_eq(struct fid_eq *e) { return &e->fid; }
static struct fid *h5i_fid_cq(struct fid_cq *c) { return &c->fid; }
static struct fid *h5i_fid_pep(struct fid_pep *p) { return &p->fid; }
static struct fid *h5i_fid_ep(struct fid_ep *e) { return &e->fid; }
static struct fid *h5i_fid_mr(struct fid_mr *m) { return &m->fid; }

static int h5i_eq_open(struct fid_fabric *f, struct fid_eq **eq) {
	struct fi_eq_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.size = 64;
	attr.wait_obj = FI_WAIT_UNSPEC;
	return fi_eq_open(f, &attr, eq, NULL);
}

// h5i_eq_sread waits up to timeout ms for one connection event. On
// FI_CONNREQ *info is the new connection's info (the caller frees it).
static ssize_t h5i_eq_sread(struct fid_eq *eq, int timeout, uint32_t *event,
		struct fi_info **info, int *err, int *prov_err) {
	struct fi_eq_cm_entry entry;
	*info = NULL;
	*err = 0;
	*prov_err = 0;
	ssize_t ret = fi_eq_sread(eq, event, &entry, sizeof entry, timeout, 0);
	if (ret == -FI_EAVAIL) {
		struct fi_eq_err_entry e;
		memset(&e, 0, sizeof e);
		ssize_t r = fi_eq_readerr(eq, &e, 0);
		if (r < 0) return r;
		*err = e.err;
		*prov_err = e.prov_errno;
		return -FI_EAVAIL;
	}
	if (ret < 0) return ret;
	if (*event == FI_CONNREQ) *info = entry.info;
	return ret;
}

static int h5i_cq_open(struct fid_domain *d, size_t size, struct fid_cq **cq) {
	struct fi_cq_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.size = size;
	attr.format = FI_CQ_FORMAT_DATA;
	attr.wait_obj = FI_WAIT_UNSPEC;
	return fi_cq_open(d, &attr, cq, NULL);
}

// h5i_cq_read reads up to n completions into e, waiting up to timeout ms
// for the first when timeout is not 0. On an error completion it returns
// -FI_EAVAIL with the error's context, code, the provider's own error
// code and, where that is not 0, the provider's text for it.
static ssize_t h5i_cq_read(struct fid_cq *cq, struct fi_cq_data_entry *e, size_t n,
		int timeout, uint64_t *err_ctx, int *err, int *prov_err, char *errbuf, size_t errlen) {
	ssize_t ret;
	if (timeout != 0)
		ret = fi_cq_sread(cq, e, n, NULL, timeout);
	else
		ret = fi_cq_read(cq, e, n);
	if (ret != -FI_EAVAIL) return ret;
	struct fi_cq_err_entry ee;
	memset(&ee, 0, sizeof ee);
	ssize_t r = fi_cq_readerr(cq, &ee, 0);
	if (r < 0) return r;
	*err_ctx = (uint64_t)(uintptr_t)ee.op_context;
	*err = ee.err;
	*prov_err = ee.prov_errno;
	errbuf[0] = 0;
	const char *s = ee.prov_errno ? fi_cq_strerror(cq, ee.prov_errno, ee.err_data, NULL, 0) : NULL;
	if (s) {
		strncpy(errbuf, s, errlen - 1);
		errbuf[errlen - 1] = 0;
	}
	return -FI_EAVAIL;
}

static int h5i_passive_ep(struct fid_fabric *f, struct fi_info *i, struct fid_eq *eq, struct fid_pep **pep) {
	int ret = fi_passive_ep(f, i, pep, NULL);
	if (ret) return ret;
	ret = fi_pep_bind(*pep, &eq->fid, 0);
	if (ret) { fi_close(&(*pep)->fid); *pep = NULL; }
	return ret;
}
static int h5i_listen(struct fid_pep *pep) { return fi_listen(pep); }
static int h5i_getname(fid_t f, void *addr, size_t *len) { return fi_getname(f, addr, len); }
static int h5i_reject(struct fid_pep *pep, struct fi_info *i) { return fi_reject(pep, i->handle, NULL, 0); }

// h5i_endpoint opens an endpoint and binds its event queue and completion
// queues (tx for sends and writes, rx for receives), then enables it.
static int h5i_endpoint(struct fid_domain *d, struct fi_info *i, struct fid_eq *eq,
		struct fid_cq *tx, struct fid_cq *rx, struct fid_ep **ep) {
	int ret = fi_endpoint(d, i, ep, NULL);
	if (ret) return ret;
	if ((ret = fi_ep_bind(*ep, &eq->fid, 0)) ||
	    (ret = fi_ep_bind(*ep, &tx->fid, FI_TRANSMIT)) ||
	    (ret = fi_ep_bind(*ep, &rx->fid, FI_RECV)) ||
	    (ret = fi_enable(*ep))) {
		fi_close(&(*ep)->fid);
		*ep = NULL;
	}
	return ret;
}
static int h5i_accept(struct fid_ep *ep) { return fi_accept(ep, NULL, 0); }
static int h5i_connect(struct fid_ep *ep, struct fi_info *i) { return fi_connect(ep, i->dest_addr, NULL, 0); }
static int h5i_shutdown(struct fid_ep *ep) { return fi_shutdown(ep, 0); }

static int h5i_mr_reg(struct fid_domain *d, void *buf, size_t len, uint64_t access,
		uint64_t key, struct fid_mr **mr) {
	return fi_mr_reg(d, buf, len, access, 0, key, 0, mr, NULL);
}
static void *h5i_mr_desc(struct fid_mr *mr) { return fi_mr_desc(mr); }
static uint64_t h5i_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }

static ssize_t h5i_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, uint64_t ctx) {
	return fi_recv(ep, buf, len, desc, 0, (void *)(uintptr_t)ctx);
}
static ssize_t h5i_send(struct fid_ep *ep, void *buf, size_t len, void *desc, uint64_t ctx) {
	return fi_send(ep, buf, len, desc, 0, (void *)(uintptr_t)ctx);
}
static ssize_t h5i_inject(struct fid_ep *ep, void *buf, size_t len) {
	return fi_inject(ep, buf, len, 0);
}
static ssize_t h5i_write(struct fid_ep *ep, void *buf, size_t len, void *desc,
		uint64_t addr, uint64_t key, uint64_t ctx) {
	return fi_write(ep, buf, len, desc, 0, addr, key, (void *)(uintptr_t)ctx);
}
