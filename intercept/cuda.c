/* Driver API wrappers with something to decide: cuGetProcAddress (both
 * ABIs) answers with the shim's wrapper for every real pointer the shim
 * wraps (routing by the exact pointer the real resolver returned, so the
 * requested version and per-thread-stream variant are kept), and in d2 the
 * device identity (SM count, compute capability, limits) is canonical
 * (context/device.c) for everyone but the vendor libraries.
 *
 * cudaGetDriverEntryPoint* (libcudart) is not exported: the runtime gets
 * every driver entry point through dlsym("cuGetProcAddress_v2") and then
 * cuGetProcAddress, both answered here, so its lookups are caught without
 * the shim depending on or imitating libcudart.
 */
#include "shim/shim.h"
#include "context/device.h"

static void *es_route(void *real, const void *caller)
{
    int idx = -1;
    void *w = es_wrapper_for_real(ES_LIB_CUDA, real, &idx);
    if (!w)
        return real;
    /* The true function, not `real`: a driver that takes the address of its
     * own exports hands out the shim's wrappers (they preempt them). */
    if (es_cfg.determinism == ES_DET_D2 && es_fn_is_identity(ES_LIB_CUDA, idx) &&
        es_addr_in_vendor_lib(caller))
        return es_real_ptr(ES_LIB_CUDA, idx);
    es_stat_getproc(ES_LIB_CUDA, idx);
    return w;
}

ES_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus)
{
    ES_ENTER(cuda, cuGetProcAddress_v2);
    CUresult r = ES_REAL(cuda, cuGetProcAddress_v2)(symbol, pfn, cudaVersion, flags,
                                                    symbolStatus);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = es_route(*pfn, __builtin_return_address(0));
    return r;
}

ES_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags)
{
    ES_ENTER(cuda, cuGetProcAddress);
    CUresult r = ES_REAL(cuda, cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = es_route(*pfn, __builtin_return_address(0));
    return r;
}

ES_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    ES_ENTER(cuda, cuDeviceGetAttribute);
    CUresult r = ES_REAL(cuda, cuDeviceGetAttribute)(pi, attrib, dev);
    if (__builtin_expect(es_cfg.determinism == ES_DET_D2, 0) && r == CUDA_SUCCESS &&
        es_device_canonical_attr((int)attrib, pi))
        ES_DEBUG("d2: device %d attribute %d reported as %d", (int)dev, (int)attrib, *pi);
    return r;
}

ES_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    ES_ENTER(cuda, cuDeviceComputeCapability);
    CUresult r = ES_REAL(cuda, cuDeviceComputeCapability)(major, minor, dev);
    if (es_cfg.determinism == ES_DET_D2 && r == CUDA_SUCCESS && major && minor)
        es_device_canonical_cc(major, minor);
    return r;
}
