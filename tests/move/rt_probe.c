/* A stand-in for the CUDA runtime, built as libcudart.so.99 (the shim tells
 * the runtime apart by the object its lookups come from): like libcudart,
 * it asks the driver for its entry points through cuGetProcAddress and
 * calls them. tests/move/runtime_test.c loads it into move_client. */
#include <cuda.h>

__attribute__((visibility("default"))) int rt_probe_current(CUcontext *ctx);

int rt_probe_current(CUcontext *ctx)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    if (cuGetProcAddress("cuCtxGetCurrent", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) !=
            CUDA_SUCCESS ||
        !fn)
        return -1;
    CUresult (*get)(CUcontext *);
    *(void **)&get = fn;
    return (int)get(ctx);
}

/* Makes device dev's primary context current on the calling thread, as the
 * runtime does on a thread's first call. */
__attribute__((visibility("default"))) int rt_probe_bind(int dev);

static void *rt_lookup_v(const char *name, int version)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    if (cuGetProcAddress(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS)
        return NULL;
    return fn;
}

static void *rt_lookup(const char *name)
{
    return rt_lookup_v(name, 13000);
}

int rt_probe_bind(int dev)
{
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*set)(CUcontext);
    *(void **)&retain = rt_lookup("cuDevicePrimaryCtxRetain");
    *(void **)&set = rt_lookup("cuCtxSetCurrent");
    CUcontext c = NULL;
    if (!retain || !set || retain(&c, dev) != CUDA_SUCCESS)
        return -1;
    return (int)set(c);
}

/* The device view a library gets: the count, the device of the current
 * context, and the primary context of that device. */
__attribute__((visibility("default"))) int rt_probe_devices(int *count, int *dev,
                                                            CUcontext *primary);

int rt_probe_devices(int *count, int *dev, CUcontext *primary)
{
    CUresult (*getcount)(int *);
    CUresult (*ctxdev)(CUdevice *);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*release)(CUdevice);
    *(void **)&getcount = rt_lookup("cuDeviceGetCount");
    *(void **)&ctxdev = rt_lookup_v("cuCtxGetDevice", 12000); /* 13000: the _v2 ABI */
    *(void **)&retain = rt_lookup("cuDevicePrimaryCtxRetain");
    *(void **)&release = rt_lookup("cuDevicePrimaryCtxRelease");
    CUdevice d;
    CUresult r;
    if (!getcount || !ctxdev || !retain || !release)
        return -1;
    if ((r = getcount(count)) != CUDA_SUCCESS || (r = ctxdev(&d)) != CUDA_SUCCESS ||
        (r = retain(primary, d)) != CUDA_SUCCESS)
        return (int)r; /* the first failure's status */
    *dev = (int)d;
    return (int)release(d);
}

/* Any driver function, looked up as the runtime looks it up. */
__attribute__((visibility("default"))) void *rt_probe_lookup(const char *name, int version);

void *rt_probe_lookup(const char *name, int version)
{
    return rt_lookup_v(name, version);
}
