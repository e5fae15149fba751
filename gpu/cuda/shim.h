// shim.h declares the few CUDA driver API types the package uses, without
// the toolkit's cuda.h, and the thin C wrappers in driver.c: each binds the
// given context to the calling thread and makes one driver call through a
// pointer that h5cu_load resolved with dlsym.

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUevent;
typedef unsigned long long CUdeviceptr;

// h5cu_load opens libcuda.so.1 and resolves every entry point; on failure it
// returns a message (dlerror's or the missing symbol's), else NULL.
const char *h5cu_load(void);

CUresult h5cu_init(void);
CUresult h5cu_driver_version(int *v);
CUresult h5cu_error_name(CUresult r, const char **s);
CUresult h5cu_error_string(CUresult r, const char **s);

CUresult h5cu_device_count(int *n);
CUresult h5cu_device_get(CUdevice *d, int ordinal);
CUresult h5cu_device_name(char *name, int len, CUdevice d);
CUresult h5cu_device_attribute(int *v, int attr, CUdevice d);
CUresult h5cu_device_total_mem(size_t *n, CUdevice d);

CUresult h5cu_primary_retain(CUcontext *c, CUdevice d);
CUresult h5cu_primary_release(CUdevice d);
CUresult h5cu_primary_set_flags(CUdevice d, unsigned int flags);
CUresult h5cu_primary_state(CUdevice d, unsigned int *flags, int *active);
CUresult h5cu_ctx_synchronize(CUcontext c);

CUresult h5cu_mem_alloc(CUcontext c, CUdeviceptr *p, size_t n);
CUresult h5cu_mem_free(CUcontext c, CUdeviceptr p);
CUresult h5cu_mem_host_alloc(CUcontext c, void **p, size_t n, unsigned int flags);
CUresult h5cu_mem_free_host(CUcontext c, void *p);
CUresult h5cu_mem_host_register(CUcontext c, void *p, size_t n, unsigned int flags);
CUresult h5cu_mem_host_unregister(CUcontext c, void *p);
CUresult h5cu_memcpy_htod_async(CUcontext c, CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult h5cu_memcpy_dtoh_async(CUcontext c, void *dst, CUdeviceptr src, size_t n, CUstream s);
CUresult h5cu_memcpy_dtod_async(CUcontext c, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult h5cu_memset_d8_async(CUcontext c, CUdeviceptr dst, unsigned char v, size_t n, CUstream s);

CUresult h5cu_module_load(CUcontext c, CUmodule *m, const void *image, char *log, size_t logSize);
CUresult h5cu_module_unload(CUcontext c, CUmodule m);
CUresult h5cu_module_function(CUcontext c, CUfunction *f, CUmodule m, const char *name);
CUresult h5cu_module_global(CUcontext c, CUdeviceptr *p, size_t *n, CUmodule m, const char *name);
CUresult h5cu_launch(CUcontext c, CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
		     unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared, CUstream s,
		     unsigned long long *args, int nargs);

CUresult h5cu_stream_create(CUcontext c, CUstream *s, unsigned int flags);
CUresult h5cu_stream_destroy(CUcontext c, CUstream s);
CUresult h5cu_stream_synchronize(CUcontext c, CUstream s);

CUresult h5cu_event_create(CUcontext c, CUevent *e, unsigned int flags);
CUresult h5cu_event_destroy(CUcontext c, CUevent e);
CUresult h5cu_event_record(CUcontext c, CUevent e, CUstream s);
CUresult h5cu_event_synchronize(CUcontext c, CUevent e);
CUresult h5cu_event_elapsed(CUcontext c, float *ms, CUevent start, CUevent end);
