/* The real driver functions the EST-moving machinery of move/ calls
 * itself (memory registry, swap engine, virtual handles): one table, looked
 * up by exact exported symbol on a handle of libcuda.so.1.
 *
 * Inside libeasyscale.so the table is filled from the library handle the
 * shim opened (never through cuGetProcAddress: a driver that takes the
 * address of its own exports would hand out the shim's wrappers); tests
 * and benchmarks fill it from their own dlopen of the driver. The engine
 * never calls a wrapper of the shim, so it never meets the door or a
 * virtual handle.
 *
 * Contract: es_drv_load() fills every member (a missing symbol becomes a
 * stub returning CUDA_ERROR_NOT_FOUND, so no member is ever NULL) and
 * returns 0, or -ENOENT when the handle lacks one of them (the table is
 * still usable: such calls fail cleanly). Call it once, before any other
 * move/ function; es_drv is read without locks afterwards.
 */
#ifndef ES_MOVE_DRV_H
#define ES_MOVE_DRV_H

#include <cuda.h>

/* X(exact exported symbol): declared by cuda.h under that name. */
#define ES_DRV_FUNCS(X)                                                                        \
    X(cuInit) X(cuGetErrorName) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetAttribute)    \
    X(cuDeviceGetUuid_v2)                                                                      \
    X(cuDeviceCanAccessPeer) X(cuMemGetInfo_v2)                                                \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2) X(cuDevicePrimaryCtxGetState) \
    X(cuDevicePrimaryCtxReset_v2)                                                              \
    X(cuDevicePrimaryCtxSetFlags_v2) X(cuCtxCreate_v4) X(cuCtxDestroy_v2) X(cuCtxGetCurrent)  \
    X(cuCtxSetCurrent) X(cuCtxPushCurrent_v2) X(cuCtxPopCurrent_v2) X(cuCtxSynchronize)       \
    X(cuCtxGetDevice) X(cuCtxGetStreamPriorityRange) X(cuCtxSetLimit) X(cuCtxSetCacheConfig)  \
    X(cuCtxEnablePeerAccess)                                                                   \
    X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease) X(cuMemMap)     \
    X(cuMemUnmap) X(cuMemSetAccess) X(cuMemGetAllocationGranularity)                           \
    X(cuMemExportToShareableHandle) X(cuMemImportFromShareableHandle)                          \
    X(cuMemGetAllocationPropertiesFromHandle)                                                  \
    X(cuMemHostRegister_v2) X(cuMemHostUnregister)                                             \
    X(cuMemcpyDtoHAsync_v2) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoDAsync_v2)                    \
    X(cuMemcpyPeerAsync) X(cuMemsetD8Async)                                                    \
    X(cuStreamCreate) X(cuStreamCreateWithPriority) X(cuStreamDestroy_v2)                      \
    X(cuStreamSynchronize) X(cuStreamQuery) X(cuStreamIsCapturing) X(cuStreamWaitEvent)       \
    X(cuEventCreate) X(cuEventDestroy_v2) X(cuEventRecord) X(cuEventQuery)                     \
    X(cuEventSynchronize)                                                                      \
    X(cuModuleLoadData) X(cuModuleLoadDataEx) X(cuModuleUnload) X(cuModuleGetFunction)        \
    X(cuModuleGetGlobal_v2) X(cuLibraryLoadData) X(cuLibraryUnload) X(cuLibraryGetKernel)     \
    X(cuLibraryGetModule)                                                                      \
    X(cuKernelGetFunction) X(cuFuncSetAttribute) X(cuFuncSetCacheConfig)                       \
    X(cuKernelSetAttribute) X(cuLaunchKernel)

#define ES_DRV_MEMBER(sym) __typeof__(sym) *sym;
typedef struct es_drv {
    ES_DRV_FUNCS(ES_DRV_MEMBER)
} es_drv_t;
#undef ES_DRV_MEMBER

extern es_drv_t es_drv;

/* lookup(handle, symbol) is dlsym or an equivalent. */
int es_drv_load(void *handle, void *(*lookup)(void *, const char *));

/* Whether es_drv_load has run. */
int es_drv_ready(void);

/* A short name for a CUresult ("CUDA_ERROR_OUT_OF_MEMORY"), never NULL. */
const char *es_drv_errname(CUresult r);

#endif
