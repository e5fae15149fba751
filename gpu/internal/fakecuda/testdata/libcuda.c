/*
 * libcuda.c: a stand-in for libcuda.so.1, for tests on machines without a
 * GPU. Package fakecuda builds it, beside the kernels' source, into a
 * directory that a child test process has first on LD_LIBRARY_PATH, so
 * that package cuda's dlopen finds it.
 *
 * It models one device in EXCLUSIVE_PROCESS compute mode: one context in
 * the process, the primary context (counted retains), or one created by
 * cuCtxCreate_v2, not both and not two. Device memory is host memory, so
 * copies are memcpy, and the kernels of gpu/kernels/decode.cu, compiled as
 * host C through gpu/kernels/host.h, run at the launch: the backend's
 * results are real. Every call that orders work is written, one line each,
 * to the file named by FAKECUDA_LOG, for the tests to check the order of
 * uploads, launches and waits.
 *
 * Work runs when it is given, so the fake cannot show a race by itself:
 * the log is what the tests judge.
 *
 * Faults: with FAKECUDA_FAULT_CODE (e.g. 700, CUDA_ERROR_ILLEGAL_ADDRESS,
 * or 719, CUDA_ERROR_LAUNCH_FAILED) and FAKECUDA_FAULT_LAUNCH=N, the Nth
 * kernel launch of the process (from 1) faults as a real kernel does: the
 * launch itself succeeds (the fault is asynchronous), the kernel does not
 * run, and from then on the process is stuck with the code (a sticky
 * error), as the driver documents for these codes ("the process must be
 * terminated and relaunched"): every later call that makes, uses or
 * frees anything in a context returns it, in the context that faulted or
 * any other, and no new context is made (cuDevicePrimaryCtxRetain and
 * cuCtxCreate_v2 return it too). Only
 * what asks about the device or names an error still answers, and
 * cuDevicePrimaryCtxRelease_v2, so that the process can let go.
 *
 * The device has compute capability 9.0: a module whose PTX targets a
 * newer one is refused, and one whose target FAKECUDA_REFUSE_TARGET names
 * (e.g. sm_90) too, as a driver too old for that PTX refuses it.
 *
 * With FAKECUDA_WRONG set, h5_decode never runs: a device that loads the
 * kernels and computes wrong.
 */

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"
#include "decode.cu"

_Thread_local h5_dim3 threadIdx, blockIdx, blockDim, gridDim;

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum {
	OK = 0,
	ERR_INVALID_VALUE = 1,
	ERR_OUT_OF_MEMORY = 2,
	ERR_NOT_INITIALIZED = 3,
	ERR_DEVICE_UNAVAILABLE = 46,
	ERR_INVALID_DEVICE = 101,
	ERR_INVALID_CONTEXT = 201,
	ERR_INVALID_HANDLE = 400,
	ERR_NOT_FOUND = 500,
	ERR_INVALID_PTX = 218,
	ERR_UNSUPPORTED_PTX_VERSION = 222,
	ERR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	ERR_HOST_MEMORY_NOT_REGISTERED = 713,
	ERR_ILLEGAL_ADDRESS = 700,
	ERR_LAUNCH_FAILED = 719,
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *logf;
static int inited;

struct ctx {
	int id;
};
static struct ctx primary = {1}, created = {2};
static int primary_refs;
static unsigned int primary_flags;
static int created_live;
static _Thread_local struct ctx *current;

struct stream {
	int id;
};
struct event {
	int id;
	unsigned int flags;
};
static int next_id = 1;

#define MAX_PINNED 4096
static struct {
	char *p;
	size_t n;
	int registered;
} pinned[MAX_PINNED];

static void logline(const char *fmt, ...)
{
	pthread_mutex_lock(&mu);
	if (!logf) {
		const char *path = getenv("FAKECUDA_LOG");
		logf = fopen(path ? path : "/dev/null", "a");
	}
	if (logf) {
		va_list ap;
		va_start(ap, fmt);
		vfprintf(logf, fmt, ap);
		va_end(ap);
		fputc('\n', logf);
		fflush(logf);
	}
	pthread_mutex_unlock(&mu);
}

/* The injected fault: its code and the launch it strikes; sticky is the
 * error the process is stuck with, for good, once it struck. */
static int fault_code, fault_launch, launches;
static int sticky;

static void fault_init(void)
{
	const char *c = getenv("FAKECUDA_FAULT_CODE"), *n = getenv("FAKECUDA_FAULT_LAUNCH");
	if (c && n) {
		fault_code = atoi(c);
		fault_launch = atoi(n);
	}
}

/* destroy_primary ends the primary context: its registrations go. Called
 * with mu held. */
static void destroy_primary(void);

/* stuck returns the process's sticky error, 0 while there is none. */
static int stuck(void)
{
	pthread_mutex_lock(&mu);
	int st = sticky;
	pthread_mutex_unlock(&mu);
	return st;
}

static int ctx_ok(void)
{
	if (!inited)
		return ERR_NOT_INITIALIZED;
	int st = stuck();
	if (st)
		return st;
	if (current == &primary && primary_refs > 0)
		return OK;
	if (current == &created && created_live)
		return OK;
	return ERR_INVALID_CONTEXT;
}

#define NEED_CTX()                     \
	do {                           \
		int r_ = ctx_ok();     \
		if (r_ != OK)          \
			return r_;     \
	} while (0)

static int is_pinned(const void *p, size_t n)
{
	int yes = 0;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAX_PINNED; i++)
		if (pinned[i].p && (const char *)p >= pinned[i].p && (const char *)p + n <= pinned[i].p + pinned[i].n)
			yes = 1;
	pthread_mutex_unlock(&mu);
	return yes;
}

static int add_pinned(void *p, size_t n, int registered)
{
	int r = ERR_OUT_OF_MEMORY;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAX_PINNED; i++)
		if (pinned[i].p == p) {
			pthread_mutex_unlock(&mu);
			return ERR_HOST_MEMORY_ALREADY_REGISTERED;
		}
	for (int i = 0; i < MAX_PINNED; i++)
		if (!pinned[i].p) {
			pinned[i].p = p, pinned[i].n = n, pinned[i].registered = registered;
			r = OK;
			break;
		}
	pthread_mutex_unlock(&mu);
	return r;
}

static int drop_pinned(void *p, int registered)
{
	int r = ERR_HOST_MEMORY_NOT_REGISTERED;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAX_PINNED; i++)
		if (pinned[i].p == p && pinned[i].registered == registered) {
			pinned[i].p = NULL;
			r = OK;
			break;
		}
	pthread_mutex_unlock(&mu);
	return r;
}

static int sid(struct stream *s) { return s ? s->id : 0; }

CUresult cuInit(unsigned int flags)
{
	(void)flags;
	fault_init();
	inited = 1;
	const char *cache = getenv("CUDA_CACHE_PATH");
	logline("cuInit cache=%s", cache && *cache ? cache : "-");
	return OK;
}

CUresult cuDriverGetVersion(int *v)
{
	*v = 12040;
	return OK;
}

CUresult cuGetErrorName(CUresult r, const char **s)
{
	switch (r) {
	case ERR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
	case ERR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
	case ERR_NOT_INITIALIZED: *s = "CUDA_ERROR_NOT_INITIALIZED"; break;
	case ERR_DEVICE_UNAVAILABLE: *s = "CUDA_ERROR_DEVICE_UNAVAILABLE"; break;
	case ERR_INVALID_DEVICE: *s = "CUDA_ERROR_INVALID_DEVICE"; break;
	case ERR_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
	case ERR_INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; break;
	case ERR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
	case ERR_INVALID_PTX: *s = "CUDA_ERROR_INVALID_PTX"; break;
	case ERR_UNSUPPORTED_PTX_VERSION: *s = "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"; break;
	case ERR_HOST_MEMORY_ALREADY_REGISTERED: *s = "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"; break;
	case ERR_HOST_MEMORY_NOT_REGISTERED: *s = "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"; break;
	case ERR_ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
	case ERR_LAUNCH_FAILED: *s = "CUDA_ERROR_LAUNCH_FAILED"; break;
	default: return ERR_INVALID_VALUE;
	}
	return OK;
}

CUresult cuGetErrorString(CUresult r, const char **s)
{
	if (cuGetErrorName(r, s) != OK)
		return ERR_INVALID_VALUE;
	*s = "fake driver error";
	return OK;
}

CUresult cuDeviceGetCount(int *n)
{
	*n = 1;
	return OK;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	if (ordinal != 0)
		return ERR_INVALID_DEVICE;
	*d = 0;
	return OK;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	(void)d;
	snprintf(name, len, "Fake GPU (host emulation)");
	return OK;
}

CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d)
{
	(void)d;
	switch (attr) {
	case 75: *v = 9; break;  /* compute capability */
	case 76: *v = 0; break;
	case 16: *v = 132; break; /* SMs */
	default: *v = 1;
	}
	return OK;
}

CUresult cuDeviceTotalMem_v2(size_t *n, CUdevice d)
{
	(void)d;
	*n = (size_t)80 << 30;
	return OK;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active)
{
	if (d != 0)
		return ERR_INVALID_DEVICE;
	pthread_mutex_lock(&mu);
	*flags = primary_flags;
	*active = primary_refs > 0;
	pthread_mutex_unlock(&mu);
	return OK;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned int flags)
{
	if (d != 0)
		return ERR_INVALID_DEVICE;
	pthread_mutex_lock(&mu);
	primary_flags = flags;
	pthread_mutex_unlock(&mu);
	logline("cuDevicePrimaryCtxSetFlags_v2 flags=%u", flags);
	return OK;
}

CUresult cuDevicePrimaryCtxRetain(struct ctx **c, CUdevice d)
{
	if (d != 0)
		return ERR_INVALID_DEVICE;
	pthread_mutex_lock(&mu);
	if (sticky) {
		int st = sticky;
		pthread_mutex_unlock(&mu);
		logline("cuDevicePrimaryCtxRetain sticky=%d", st);
		return st;
	}
	if (created_live) {
		pthread_mutex_unlock(&mu);
		return ERR_DEVICE_UNAVAILABLE;
	}
	int refs = ++primary_refs;
	pthread_mutex_unlock(&mu);
	*c = &primary;
	logline("cuDevicePrimaryCtxRetain refs=%d", refs);
	return OK;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	if (d != 0)
		return ERR_INVALID_DEVICE;
	pthread_mutex_lock(&mu);
	if (primary_refs == 0) {
		pthread_mutex_unlock(&mu);
		return ERR_INVALID_CONTEXT;
	}
	int refs = --primary_refs;
	if (refs == 0)
		destroy_primary();
	pthread_mutex_unlock(&mu);
	logline("cuDevicePrimaryCtxRelease_v2 refs=%d", refs);
	return OK;
}

static void destroy_primary(void)
{
	primary_refs = 0;
	for (int i = 0; i < MAX_PINNED; i++)
		pinned[i].p = NULL; /* the memory leaks: a test's few buffers */
}

/* cuCtxCreate_v2 as EXCLUSIVE_PROCESS allows it: while no other context
 * lives in the process. */
CUresult cuCtxCreate_v2(struct ctx **c, unsigned int flags, CUdevice d)
{
	(void)flags;
	if (d != 0)
		return ERR_INVALID_DEVICE;
	pthread_mutex_lock(&mu);
	if (sticky) {
		int st = sticky;
		pthread_mutex_unlock(&mu);
		logline("cuCtxCreate_v2 sticky=%d", st);
		return st;
	}
	if (created_live || primary_refs > 0) {
		pthread_mutex_unlock(&mu);
		logline("cuCtxCreate_v2 refused");
		return ERR_DEVICE_UNAVAILABLE;
	}
	created_live = 1;
	pthread_mutex_unlock(&mu);
	*c = &created;
	current = &created;
	logline("cuCtxCreate_v2");
	return OK;
}

CUresult cuCtxDestroy_v2(struct ctx *c)
{
	if (c != &created || !created_live)
		return ERR_INVALID_CONTEXT;
	created_live = 0;
	logline("cuCtxDestroy_v2");
	return OK;
}

CUresult cuCtxSetCurrent(struct ctx *c)
{
	current = c;
	return OK;
}

CUresult cuCtxSynchronize(void)
{
	NEED_CTX();
	logline("cuCtxSynchronize");
	return OK;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	NEED_CTX();
	void *m = aligned_alloc(256, (n + 255) / 256 * 256);
	if (!m)
		return ERR_OUT_OF_MEMORY;
	*p = (CUdeviceptr)(uintptr_t)m;
	logline("cuMemAlloc_v2 ptr=%llu n=%zu", *p, n);
	return OK;
}

CUresult cuMemFree_v2(CUdeviceptr p)
{
	NEED_CTX();
	free((void *)(uintptr_t)p);
	logline("cuMemFree_v2 ptr=%llu", p);
	return OK;
}

CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags)
{
	(void)flags;
	NEED_CTX();
	*p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
	if (!*p)
		return ERR_OUT_OF_MEMORY;
	add_pinned(*p, n, 0);
	logline("cuMemHostAlloc ptr=%llu n=%zu", (unsigned long long)(uintptr_t)*p, n);
	return OK;
}

CUresult cuMemFreeHost(void *p)
{
	NEED_CTX();
	if (drop_pinned(p, 0) != OK)
		return ERR_INVALID_VALUE;
	free(p);
	logline("cuMemFreeHost ptr=%llu", (unsigned long long)(uintptr_t)p);
	return OK;
}

CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned int flags)
{
	(void)flags;
	NEED_CTX();
	int r = add_pinned(p, n, 1);
	logline("cuMemHostRegister_v2 ptr=%llu n=%zu result=%d", (unsigned long long)(uintptr_t)p, n, r);
	return r;
}

CUresult cuMemHostUnregister(void *p)
{
	NEED_CTX();
	int r = drop_pinned(p, 1);
	logline("cuMemHostUnregister ptr=%llu result=%d", (unsigned long long)(uintptr_t)p, r);
	return r;
}

/* The synchronous copies of the legacy stream, which package cuda no
 * longer calls; logged so that a test sees them if it ever does. */
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	NEED_CTX();
	memcpy((void *)(uintptr_t)dst, src, n);
	logline("cuMemcpyHtoD_v2 dst=%llu n=%zu stream=0", dst, n);
	return OK;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	NEED_CTX();
	memcpy(dst, (void *)(uintptr_t)src, n);
	logline("cuMemcpyDtoH_v2 src=%llu n=%zu stream=0", src, n);
	return OK;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, struct stream *s)
{
	NEED_CTX();
	memcpy((void *)(uintptr_t)dst, src, n);
	logline("cuMemcpyHtoDAsync_v2 dst=%llu n=%zu stream=%d pinned=%d", dst, n, sid(s), is_pinned(src, n));
	return OK;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, struct stream *s)
{
	NEED_CTX();
	memcpy(dst, (void *)(uintptr_t)src, n);
	logline("cuMemcpyDtoHAsync_v2 src=%llu n=%zu stream=%d pinned=%d", src, n, sid(s), is_pinned(dst, n));
	return OK;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, struct stream *s)
{
	NEED_CTX();
	memmove((void *)(uintptr_t)dst, (void *)(uintptr_t)src, n);
	logline("cuMemcpyDtoDAsync_v2 dst=%llu n=%zu stream=%d", dst, n, sid(s));
	return OK;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, struct stream *s)
{
	NEED_CTX();
	memset((void *)(uintptr_t)dst, v, n);
	logline("cuMemsetD8Async dst=%llu n=%zu stream=%d", dst, n, sid(s));
	return OK;
}

struct module {
	int id;
};

CUresult cuModuleLoadDataEx(struct module **m, const void *image, unsigned int n, int *opts, void **vals)
{
	(void)n, (void)opts, (void)vals;
	NEED_CTX();
	/* The "JIT": the kernels' PTX, and no "((", which PTX never has. */
	if (!strstr(image, ".entry h5_decode(") || strstr(image, "(("))
		return ERR_INVALID_VALUE;
	/* Its target: one above the device's compute capability (9.0) cannot
	 * run; one named by FAKECUDA_REFUSE_TARGET is one this driver is too
	 * old to compile (CUDA_ERROR_UNSUPPORTED_PTX_VERSION). */
	char target[16] = "-";
	const char *t = strstr(image, ".target ");
	if (t)
		sscanf(t + 8, "%15[a-z_0-9]", target);
	const char *refuse = getenv("FAKECUDA_REFUSE_TARGET");
	int sm = 0;
	sscanf(target, "sm_%d", &sm);
	if (sm > 90 || (refuse && strcmp(refuse, target) == 0)) {
		logline("cuModuleLoadDataEx-refused target=%s", target);
		return sm > 90 ? ERR_INVALID_PTX : ERR_UNSUPPORTED_PTX_VERSION;
	}
	*m = malloc(sizeof **m);
	(*m)->id = __sync_fetch_and_add(&next_id, 1);
	logline("cuModuleLoadDataEx module=%d target=%s", (*m)->id, target);
	return OK;
}

CUresult cuModuleUnload(struct module *m)
{
	NEED_CTX();
	logline("cuModuleUnload module=%d", m->id);
	free(m);
	return OK;
}

typedef void (*kernel_fn)(const struct h5_frame *, unsigned int);

struct kernel {
	const char *name;
	kernel_fn fn;
};

static const struct kernel kernels[] = {
	{"h5_decode", h5_decode},
	{"h5_crc_sub", h5_crc_sub},
	{"h5_crc_fold", h5_crc_fold},
	{"h5_shuffle", h5_shuffle},
};

static const struct {
	const char *name;
	void *p;
	size_t n;
} globals[] = {
	{"h5_lfsr12", h5_lfsr12, sizeof h5_lfsr12},
	{"h5_lfsr6", h5_lfsr6, sizeof h5_lfsr6},
	{"h5_lfsr12_global", h5_lfsr12_global, sizeof h5_lfsr12_global},
	{"h5_lfsr6_global", h5_lfsr6_global, sizeof h5_lfsr6_global},
	{"h5_crc_table", h5_crc_table, sizeof h5_crc_table},
};

CUresult cuModuleGetFunction(void **f, struct module *m, const char *name)
{
	(void)m;
	NEED_CTX();
	for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
		if (!strcmp(kernels[i].name, name)) {
			*f = (void *)&kernels[i];
			return OK;
		}
	return ERR_NOT_FOUND;
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *n, struct module *m, const char *name)
{
	(void)m;
	NEED_CTX();
	for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
		if (!strcmp(globals[i].name, name)) {
			*p = (CUdeviceptr)(uintptr_t)globals[i].p;
			*n = globals[i].n;
			logline("cuModuleGetGlobal_v2 name=%s ptr=%llu n=%zu", name, *p, *n);
			return OK;
		}
	return ERR_NOT_FOUND;
}

CUresult cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
			unsigned int by, unsigned int bz, unsigned int shared, struct stream *s, void **params,
			void **extra)
{
	(void)gz, (void)by, (void)bz, (void)shared, (void)extra;
	NEED_CTX();
	const struct kernel *k = f;
	const char *name = k->name;
	kernel_fn fn = k->fn;
	const struct h5_frame *frames = *(const struct h5_frame **)params[0];
	unsigned int n = *(const unsigned int *)params[1];
	pthread_mutex_lock(&mu);
	int nth = ++launches;
	if (fault_code && nth == fault_launch)
		sticky = fault_code;
	int st = sticky;
	pthread_mutex_unlock(&mu);
	if (getenv("FAKECUDA_WRONG") && !strcmp(name, "h5_decode")) {
		logline("cuLaunchKernel name=%s stream=%d wrong=1", name, sid(s));
		return OK;
	}
	if (st) { /* the kernel faults: the error shows at the next call */
		logline("cuLaunchKernel name=%s stream=%d fault=%d launch=%d", name, sid(s), st, nth);
		return OK;
	}
	logline("cuLaunchKernel name=%s stream=%d grid=%ux%u block=%u", name, sid(s), gx, gy, bx);
	gridDim = (h5_dim3){gx, gy, 1};
	blockDim = (h5_dim3){bx, 1, 1};
	for (unsigned int y = 0; y < gy; y++)
		for (unsigned int x = 0; x < gx; x++) {
			blockIdx = (h5_dim3){x, y, 0};
			for (unsigned int t = 0; t < bx; t++) {
				threadIdx = (h5_dim3){t, 0, 0};
				fn(frames, n);
			}
		}
	return OK;
}

CUresult cuStreamCreate(struct stream **s, unsigned int flags)
{
	NEED_CTX();
	*s = malloc(sizeof **s);
	(*s)->id = __sync_fetch_and_add(&next_id, 1);
	logline("cuStreamCreate stream=%d flags=%u", (*s)->id, flags);
	return OK;
}

CUresult cuStreamDestroy_v2(struct stream *s)
{
	NEED_CTX();
	logline("cuStreamDestroy_v2 stream=%d", sid(s));
	free(s);
	return OK;
}

CUresult cuStreamSynchronize(struct stream *s)
{
	NEED_CTX();
	logline("cuStreamSynchronize stream=%d", sid(s));
	return OK;
}

CUresult cuEventCreate(struct event **e, unsigned int flags)
{
	NEED_CTX();
	*e = malloc(sizeof **e);
	(*e)->id = __sync_fetch_and_add(&next_id, 1);
	(*e)->flags = flags;
	logline("cuEventCreate event=%d flags=%u", (*e)->id, flags);
	return OK;
}

CUresult cuEventDestroy_v2(struct event *e)
{
	NEED_CTX();
	free(e);
	return OK;
}

CUresult cuEventRecord(struct event *e, struct stream *s)
{
	NEED_CTX();
	logline("cuEventRecord event=%d stream=%d", e->id, sid(s));
	return OK;
}

CUresult cuEventSynchronize(struct event *e)
{
	NEED_CTX();
	logline("cuEventSynchronize event=%d flags=%u", e->id, e->flags);
	return OK;
}

/* Like the driver, it needs a context bound to the calling thread. */
CUresult cuEventElapsedTime(float *ms, struct event *a, struct event *b)
{
	(void)a, (void)b;
	NEED_CTX();
	*ms = 1.0f;
	return OK;
}
