/* A stand-in for a preloaded shim in sim_driver_api_test: it defines driver
 * entry points that fail loudly, to check that simcuda's own internal calls
 * and the addresses cuGetProcAddress returns never bind to an interposer. */
#include <cuda.h>

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    (void)dptr;
    (void)bytesize;
    return CUDA_ERROR_UNKNOWN;
}

CUresult cuStreamSynchronize(CUstream s)
{
    (void)s;
    return CUDA_ERROR_UNKNOWN;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    (void)dev;
    return CUDA_ERROR_UNKNOWN;
}
