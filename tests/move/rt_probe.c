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

static void *rt_lookup(const char *name)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    if (cuGetProcAddress(name, &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS)
        return NULL;
    return fn;
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
