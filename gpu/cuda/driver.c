//go:build cgo

// driver.c: the CUDA driver API, loaded at run time with dlopen. No CUDA
// headers: shim.h declares the types. Every wrapper binds its context to
// the calling thread first (cuCtxSetCurrent is a thread-local store), since
// a goroutine may run its cgo calls on any thread.

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

#include "shim.h"

#define CU_JIT_ERROR_LOG_BUFFER 5
#define CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6

static CUresult (*p_cuInit)(unsigned int);
static CUresult (*p_cuDriverGetVersion)(int *);
static CUresult (*p_cuGetErrorName)(CUresult, const char **);
static CUresult (*p_cuGetErrorString)(CUresult, const char **);
static CUresult (*p_cuDeviceGetCount)(int *);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDeviceGetName)(char *, int, CUdevice);
static CUresult (*p_cuDeviceGetAttribute)(int *, int, CUdevice);
static CUresult (*p_cuDeviceTotalMem)(size_t *, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuDevicePrimaryCtxRelease)(CUdevice);
static CUresult (*p_cuDevicePrimaryCtxSetFlags)(CUdevice, unsigned int);
static CUresult (*p_cuDevicePrimaryCtxGetState)(CUdevice, unsigned int *, int *);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuCtxSynchronize)(void);
static CUresult (*p_cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*p_cuMemFree)(CUdeviceptr);
static CUresult (*p_cuMemHostAlloc)(void **, size_t, unsigned int);
static CUresult (*p_cuMemFreeHost)(void *);
static CUresult (*p_cuMemHostRegister)(void *, size_t, unsigned int);
static CUresult (*p_cuMemHostUnregister)(void *);
static CUresult (*p_cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
static CUresult (*p_cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
static CUresult (*p_cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
static CUresult (*p_cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
static CUresult (*p_cuModuleLoadDataEx)(CUmodule *, const void *, unsigned int, int *, void **);
static CUresult (*p_cuModuleUnload)(CUmodule);
static CUresult (*p_cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*p_cuModuleGetGlobal)(CUdeviceptr *, size_t *, CUmodule, const char *);
static CUresult (*p_cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
				    unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
static CUresult (*p_cuStreamCreate)(CUstream *, unsigned int);
static CUresult (*p_cuStreamDestroy)(CUstream);
static CUresult (*p_cuStreamSynchronize)(CUstream);
static CUresult (*p_cuEventCreate)(CUevent *, unsigned int);
static CUresult (*p_cuEventDestroy)(CUevent);
static CUresult (*p_cuEventRecord)(CUevent, CUstream);
static CUresult (*p_cuEventSynchronize)(CUevent);
static CUresult (*p_cuEventElapsedTime)(float *, CUevent, CUevent);

static char load_error[512];

#define SYM(var, name)                                                                   \
	do {                                                                             \
		*(void **)(&var) = dlsym(lib, name);                                     \
		if (!var) {                                                              \
			snprintf(load_error, sizeof load_error, "libcuda.so.1 lacks %s", name); \
			return load_error;                                               \
		}                                                                        \
	} while (0)

/* SYM2 resolves the _v2 entry point, or on a driver older than CUDA 11 the
 * first version, of the same signature. */
#define SYM2(var, name_v2, name)                                                         \
	do {                                                                             \
		*(void **)(&var) = dlsym(lib, name_v2);                                  \
		if (!var)                                                                \
			SYM(var, name);                                                  \
	} while (0)

const char *h5cu_load(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		const char *e = dlerror();
		snprintf(load_error, sizeof load_error, "%s", e ? e : "dlopen failed");
		return load_error;
	}
	SYM(p_cuInit, "cuInit");
	SYM(p_cuDriverGetVersion, "cuDriverGetVersion");
	SYM(p_cuGetErrorName, "cuGetErrorName");
	SYM(p_cuGetErrorString, "cuGetErrorString");
	SYM(p_cuDeviceGetCount, "cuDeviceGetCount");
	SYM(p_cuDeviceGet, "cuDeviceGet");
	SYM(p_cuDeviceGetName, "cuDeviceGetName");
	SYM(p_cuDeviceGetAttribute, "cuDeviceGetAttribute");
	SYM(p_cuDeviceTotalMem, "cuDeviceTotalMem_v2");
	SYM(p_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM2(p_cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
	SYM2(p_cuDevicePrimaryCtxSetFlags, "cuDevicePrimaryCtxSetFlags_v2", "cuDevicePrimaryCtxSetFlags");
	SYM(p_cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState");
	SYM(p_cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(p_cuCtxSynchronize, "cuCtxSynchronize");
	SYM(p_cuMemAlloc, "cuMemAlloc_v2");
	SYM(p_cuMemFree, "cuMemFree_v2");
	SYM(p_cuMemHostAlloc, "cuMemHostAlloc");
	SYM(p_cuMemFreeHost, "cuMemFreeHost");
	SYM(p_cuMemHostRegister, "cuMemHostRegister_v2");
	SYM(p_cuMemHostUnregister, "cuMemHostUnregister");
	SYM(p_cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	SYM(p_cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	SYM(p_cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
	SYM(p_cuMemsetD8Async, "cuMemsetD8Async");
	SYM(p_cuModuleLoadDataEx, "cuModuleLoadDataEx");
	SYM(p_cuModuleUnload, "cuModuleUnload");
	SYM(p_cuModuleGetFunction, "cuModuleGetFunction");
	SYM(p_cuModuleGetGlobal, "cuModuleGetGlobal_v2");
	SYM(p_cuLaunchKernel, "cuLaunchKernel");
	SYM(p_cuStreamCreate, "cuStreamCreate");
	SYM(p_cuStreamDestroy, "cuStreamDestroy_v2");
	SYM(p_cuStreamSynchronize, "cuStreamSynchronize");
	SYM(p_cuEventCreate, "cuEventCreate");
	SYM(p_cuEventDestroy, "cuEventDestroy_v2");
	SYM(p_cuEventRecord, "cuEventRecord");
	SYM(p_cuEventSynchronize, "cuEventSynchronize");
	SYM(p_cuEventElapsedTime, "cuEventElapsedTime");
	return NULL;
}

#define BIND(c)                                     \
	do {                                        \
		CUresult r_ = p_cuCtxSetCurrent(c); \
		if (r_ != 0)                        \
			return r_;                  \
	} while (0)

CUresult h5cu_init(void) { return p_cuInit(0); }
CUresult h5cu_driver_version(int *v) { return p_cuDriverGetVersion(v); }
CUresult h5cu_error_name(CUresult r, const char **s) { return p_cuGetErrorName(r, s); }
CUresult h5cu_error_string(CUresult r, const char **s) { return p_cuGetErrorString(r, s); }

CUresult h5cu_device_count(int *n) { return p_cuDeviceGetCount(n); }
CUresult h5cu_device_get(CUdevice *d, int ordinal) { return p_cuDeviceGet(d, ordinal); }
CUresult h5cu_device_name(char *name, int len, CUdevice d) { return p_cuDeviceGetName(name, len, d); }
CUresult h5cu_device_attribute(int *v, int attr, CUdevice d) { return p_cuDeviceGetAttribute(v, attr, d); }
CUresult h5cu_device_total_mem(size_t *n, CUdevice d) { return p_cuDeviceTotalMem(n, d); }

CUresult h5cu_primary_retain(CUcontext *c, CUdevice d) { return p_cuDevicePrimaryCtxRetain(c, d); }
CUresult h5cu_primary_release(CUdevice d) { return p_cuDevicePrimaryCtxRelease(d); }
CUresult h5cu_primary_set_flags(CUdevice d, unsigned int flags) { return p_cuDevicePrimaryCtxSetFlags(d, flags); }
CUresult h5cu_primary_state(CUdevice d, unsigned int *flags, int *active) { return p_cuDevicePrimaryCtxGetState(d, flags, active); }

CUresult h5cu_ctx_synchronize(CUcontext c)
{
	BIND(c);
	return p_cuCtxSynchronize();
}

CUresult h5cu_mem_alloc(CUcontext c, CUdeviceptr *p, size_t n)
{
	BIND(c);
	return p_cuMemAlloc(p, n);
}

CUresult h5cu_mem_free(CUcontext c, CUdeviceptr p)
{
	BIND(c);
	return p_cuMemFree(p);
}

CUresult h5cu_mem_host_alloc(CUcontext c, void **p, size_t n, unsigned int flags)
{
	BIND(c);
	return p_cuMemHostAlloc(p, n, flags);
}

CUresult h5cu_mem_free_host(CUcontext c, void *p)
{
	BIND(c);
	return p_cuMemFreeHost(p);
}

CUresult h5cu_mem_host_register(CUcontext c, void *p, size_t n, unsigned int flags)
{
	BIND(c);
	return p_cuMemHostRegister(p, n, flags);
}

CUresult h5cu_mem_host_unregister(CUcontext c, void *p)
{
	BIND(c);
	return p_cuMemHostUnregister(p);
}

CUresult h5cu_memcpy_htod_async(CUcontext c, CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	BIND(c);
	return p_cuMemcpyHtoDAsync(dst, src, n, s);
}

CUresult h5cu_memcpy_dtoh_async(CUcontext c, void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	BIND(c);
	return p_cuMemcpyDtoHAsync(dst, src, n, s);
}

CUresult h5cu_memcpy_dtod_async(CUcontext c, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	BIND(c);
	return p_cuMemcpyDtoDAsync(dst, src, n, s);
}

CUresult h5cu_memset_d8_async(CUcontext c, CUdeviceptr dst, unsigned char v, size_t n, CUstream s)
{
	BIND(c);
	return p_cuMemsetD8Async(dst, v, n, s);
}

CUresult h5cu_module_load(CUcontext c, CUmodule *m, const void *image, char *log, size_t logSize)
{
	BIND(c);
	int opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *vals[2] = {log, (void *)(uintptr_t)logSize};
	return p_cuModuleLoadDataEx(m, image, 2, opts, vals);
}

CUresult h5cu_module_unload(CUcontext c, CUmodule m)
{
	BIND(c);
	return p_cuModuleUnload(m);
}

CUresult h5cu_module_function(CUcontext c, CUfunction *f, CUmodule m, const char *name)
{
	BIND(c);
	return p_cuModuleGetFunction(f, m, name);
}

CUresult h5cu_module_global(CUcontext c, CUdeviceptr *p, size_t *n, CUmodule m, const char *name)
{
	BIND(c);
	return p_cuModuleGetGlobal(p, n, m, name);
}

// h5cu_launch launches f with nargs parameters, each held in an 8-byte slot
// of args: the driver copies each parameter's own size from the start of its
// slot, which on a little-endian machine is the value's low bytes.
CUresult h5cu_launch(CUcontext c, CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
		     unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared, CUstream s,
		     unsigned long long *args, int nargs)
{
	void *params[16];
	if (nargs > 16)
		nargs = 16;
	for (int i = 0; i < nargs; i++)
		params[i] = &args[i];
	BIND(c);
	return p_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, params, NULL);
}

CUresult h5cu_stream_create(CUcontext c, CUstream *s, unsigned int flags)
{
	BIND(c);
	return p_cuStreamCreate(s, flags);
}

CUresult h5cu_stream_destroy(CUcontext c, CUstream s)
{
	BIND(c);
	return p_cuStreamDestroy(s);
}

CUresult h5cu_stream_synchronize(CUcontext c, CUstream s)
{
	BIND(c);
	return p_cuStreamSynchronize(s);
}

CUresult h5cu_event_create(CUcontext c, CUevent *e, unsigned int flags)
{
	BIND(c);
	return p_cuEventCreate(e, flags);
}

CUresult h5cu_event_destroy(CUcontext c, CUevent e)
{
	BIND(c);
	return p_cuEventDestroy(e);
}

CUresult h5cu_event_record(CUcontext c, CUevent e, CUstream s)
{
	BIND(c);
	return p_cuEventRecord(e, s);
}

CUresult h5cu_event_synchronize(CUcontext c, CUevent e)
{
	BIND(c);
	return p_cuEventSynchronize(e);
}

CUresult h5cu_event_elapsed(CUcontext c, float *ms, CUevent start, CUevent end)
{
	BIND(c);
	return p_cuEventElapsedTime(ms, start, end);
}
