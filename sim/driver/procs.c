/* simcuda entry points: the one table of exported driver functions (base
 * name, CUDA version that introduced this ABI, exported symbol, per-thread
 * default stream variant) and cuGetProcAddress / cuGetProcAddress_v2, which
 * answer from it. A base name may appear several times, once per ABI
 * version; a lookup picks the newest entry not newer than the caller's
 * cudaVersion. */
#include "sim/driver/internal.h"
#include "sim/driver/unsupported.h"
#include "sim/driver/capture.h"

#include <cudaProfiler.h>
#include <string.h>

#define NOPT 0
/* X(base name, version introduced, symbol, per-thread variant or NOPT) */
#define SIM_PROCS(X)                                                                     \
    X(cuInit, 2000, cuInit, NOPT)                                                        \
    X(cuDriverGetVersion, 2020, cuDriverGetVersion, NOPT)                                \
    X(cuGetErrorName, 6000, cuGetErrorName, NOPT)                                        \
    X(cuGetErrorString, 6000, cuGetErrorString, NOPT)                                    \
    X(cuGetExportTable, 3000, cuGetExportTable, NOPT)                                    \
    X(cuGetProcAddress, 11030, cuGetProcAddress, NOPT)                                   \
    X(cuGetProcAddress, 12000, cuGetProcAddress_v2, NOPT)                                \
    X(cuDeviceGet, 2000, cuDeviceGet, NOPT)                                              \
    X(cuDeviceGetCount, 2000, cuDeviceGetCount, NOPT)                                    \
    X(cuDeviceGetName, 2000, cuDeviceGetName, NOPT)                                      \
    X(cuDeviceGetUuid, 9020, cuDeviceGetUuid, NOPT)                                      \
    X(cuDeviceGetUuid, 11040, cuDeviceGetUuid_v2, NOPT)                                  \
    X(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2, NOPT)                                 \
    X(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute, NOPT)                            \
    X(cuDeviceComputeCapability, 2000, cuDeviceComputeCapability, NOPT)                  \
    X(cuDeviceGetPCIBusId, 4010, cuDeviceGetPCIBusId, NOPT)                              \
    X(cuDeviceGetByPCIBusId, 4010, cuDeviceGetByPCIBusId, NOPT)                          \
    X(cuDeviceCanAccessPeer, 4000, cuDeviceCanAccessPeer, NOPT)                          \
    X(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain, NOPT)                    \
    X(cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease, NOPT)                  \
    X(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2, NOPT)              \
    X(cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset, NOPT)                      \
    X(cuDevicePrimaryCtxReset, 11000, cuDevicePrimaryCtxReset_v2, NOPT)                  \
    X(cuDevicePrimaryCtxSetFlags, 7000, cuDevicePrimaryCtxSetFlags, NOPT)                \
    X(cuDevicePrimaryCtxSetFlags, 11000, cuDevicePrimaryCtxSetFlags_v2, NOPT)            \
    X(cuDevicePrimaryCtxGetState, 7000, cuDevicePrimaryCtxGetState, NOPT)                \
    X(cuCtxCreate, 2000, cuCtxCreate, NOPT)                                              \
    X(cuCtxCreate, 3020, cuCtxCreate_v2, NOPT)                                           \
    X(cuCtxCreate, 11040, cuCtxCreate_v3, NOPT)                                          \
    X(cuCtxCreate, 12050, cuCtxCreate_v4, NOPT)                                          \
    X(cuCtxDestroy, 2000, cuCtxDestroy, NOPT)                                            \
    X(cuCtxDestroy, 4000, cuCtxDestroy_v2, NOPT)                                         \
    X(cuCtxPushCurrent, 2000, cuCtxPushCurrent, NOPT)                                    \
    X(cuCtxPushCurrent, 4000, cuCtxPushCurrent_v2, NOPT)                                 \
    X(cuCtxPopCurrent, 2000, cuCtxPopCurrent, NOPT)                                      \
    X(cuCtxPopCurrent, 4000, cuCtxPopCurrent_v2, NOPT)                                   \
    X(cuCtxSetCurrent, 4000, cuCtxSetCurrent, NOPT)                                      \
    X(cuCtxGetCurrent, 4000, cuCtxGetCurrent, NOPT)                                      \
    X(cuCtxGetDevice, 2000, cuCtxGetDevice, NOPT)                                        \
    X(cuCtxGetDevice, 13000, cuCtxGetDevice_v2, NOPT)                                    \
    X(cuCtxGetFlags, 7000, cuCtxGetFlags, NOPT)                                          \
    X(cuCtxSetFlags, 12010, cuCtxSetFlags, NOPT)                                         \
    X(cuCtxGetId, 12000, cuCtxGetId, NOPT)                                               \
    X(cuCtxGetApiVersion, 3020, cuCtxGetApiVersion, NOPT)                                \
    X(cuCtxSynchronize, 2000, cuCtxSynchronize, NOPT)                                    \
    X(cuCtxSynchronize, 13000, cuCtxSynchronize_v2, NOPT)                                \
    X(cuCtxGetStreamPriorityRange, 5050, cuCtxGetStreamPriorityRange, NOPT)              \
    X(cuCtxSetLimit, 3010, cuCtxSetLimit, NOPT)                                          \
    X(cuCtxGetLimit, 3010, cuCtxGetLimit, NOPT)                                          \
    X(cuCtxGetCacheConfig, 3020, cuCtxGetCacheConfig, NOPT)                              \
    X(cuCtxSetCacheConfig, 3020, cuCtxSetCacheConfig, NOPT)                              \
    X(cuCtxEnablePeerAccess, 4000, cuCtxEnablePeerAccess, NOPT)                          \
    X(cuCtxDisablePeerAccess, 4000, cuCtxDisablePeerAccess, NOPT)                        \
    X(cuProfilerStart, 4000, cuProfilerStart, NOPT)                                      \
    X(cuProfilerStop, 4000, cuProfilerStop, NOPT)                                        \
    X(cuMemAlloc, 3020, cuMemAlloc_v2, NOPT)                                             \
    X(cuMemAllocPitch, 3020, cuMemAllocPitch_v2, NOPT)                                   \
    X(cuMemFree, 3020, cuMemFree_v2, NOPT)                                               \
    X(cuMemGetInfo, 3020, cuMemGetInfo_v2, NOPT)                                         \
    X(cuMemGetAddressRange, 3020, cuMemGetAddressRange_v2, NOPT)                         \
    X(cuMemAllocHost, 3020, cuMemAllocHost_v2, NOPT)                                     \
    X(cuMemHostAlloc, 2020, cuMemHostAlloc, NOPT)                                        \
    X(cuMemFreeHost, 2000, cuMemFreeHost, NOPT)                                          \
    X(cuMemHostGetDevicePointer, 3020, cuMemHostGetDevicePointer_v2, NOPT)               \
    X(cuMemHostGetFlags, 2030, cuMemHostGetFlags, NOPT)                                  \
    X(cuMemHostRegister, 4000, cuMemHostRegister, NOPT)                                  \
    X(cuMemHostRegister, 6050, cuMemHostRegister_v2, NOPT)                               \
    X(cuMemHostUnregister, 4000, cuMemHostUnregister, NOPT)                              \
    X(cuMemAllocAsync, 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz)                     \
    X(cuMemFreeAsync, 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz)                        \
    X(cuPointerGetAttribute, 4000, cuPointerGetAttribute, NOPT)                          \
    X(cuPointerGetAttributes, 7000, cuPointerGetAttributes, NOPT)                        \
    X(cuMemcpy, 4000, cuMemcpy, cuMemcpy_ptds)                                           \
    X(cuMemcpyAsync, 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz)                            \
    X(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds)                         \
    X(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds)                         \
    X(cuMemcpyDtoD, 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds)                         \
    X(cuMemcpyHtoDAsync, 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz)          \
    X(cuMemcpyDtoHAsync, 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz)          \
    X(cuMemcpyDtoDAsync, 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz)          \
    X(cuMemcpyPeer, 4000, cuMemcpyPeer, cuMemcpyPeer_ptds)                               \
    X(cuMemcpyPeerAsync, 4000, cuMemcpyPeerAsync, cuMemcpyPeerAsync_ptsz)                \
    X(cuMemcpy2D, 3020, cuMemcpy2D_v2, cuMemcpy2D_v2_ptds)                               \
    X(cuMemcpy2DUnaligned, 3020, cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds)    \
    X(cuMemcpy2DAsync, 3020, cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz)                \
    X(cuMemsetD8, 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds)                               \
    X(cuMemsetD16, 3020, cuMemsetD16_v2, cuMemsetD16_v2_ptds)                            \
    X(cuMemsetD32, 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds)                            \
    X(cuMemsetD2D8, 3020, cuMemsetD2D8_v2, cuMemsetD2D8_v2_ptds)                         \
    X(cuMemsetD2D16, 3020, cuMemsetD2D16_v2, cuMemsetD2D16_v2_ptds)                      \
    X(cuMemsetD2D32, 3020, cuMemsetD2D32_v2, cuMemsetD2D32_v2_ptds)                      \
    X(cuMemsetD8Async, 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz)                      \
    X(cuMemsetD16Async, 3020, cuMemsetD16Async, cuMemsetD16Async_ptsz)                   \
    X(cuMemsetD32Async, 3020, cuMemsetD32Async, cuMemsetD32Async_ptsz)                   \
    X(cuMemsetD2D8Async, 3020, cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz)                \
    X(cuMemsetD2D16Async, 3020, cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz)             \
    X(cuMemsetD2D32Async, 3020, cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz)             \
    X(cuMemAddressReserve, 10020, cuMemAddressReserve, NOPT)                             \
    X(cuMemAddressFree, 10020, cuMemAddressFree, NOPT)                                   \
    X(cuMemCreate, 10020, cuMemCreate, NOPT)                                             \
    X(cuMemRelease, 10020, cuMemRelease, NOPT)                                           \
    X(cuMemMap, 10020, cuMemMap, NOPT)                                                   \
    X(cuMemUnmap, 10020, cuMemUnmap, NOPT)                                               \
    X(cuMemSetAccess, 10020, cuMemSetAccess, NOPT)                                       \
    X(cuMemGetAccess, 10020, cuMemGetAccess, NOPT)                                       \
    X(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity, NOPT)         \
    X(cuMemGetAllocationPropertiesFromHandle, 10020, cuMemGetAllocationPropertiesFromHandle, NOPT) \
    X(cuMemRetainAllocationHandle, 11000, cuMemRetainAllocationHandle, NOPT)             \
    X(cuMemExportToShareableHandle, 10020, cuMemExportToShareableHandle, NOPT)           \
    X(cuMemImportFromShareableHandle, 10020, cuMemImportFromShareableHandle, NOPT)       \
    X(cuStreamCreate, 2000, cuStreamCreate, NOPT)                                        \
    X(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority, NOPT)                \
    X(cuStreamDestroy, 2000, cuStreamDestroy, NOPT)                                      \
    X(cuStreamDestroy, 4000, cuStreamDestroy_v2, NOPT)                                   \
    X(cuStreamSynchronize, 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz)          \
    X(cuStreamQuery, 2000, cuStreamQuery, cuStreamQuery_ptsz)                            \
    X(cuStreamWaitEvent, 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz)                \
    X(cuStreamGetFlags, 5050, cuStreamGetFlags, cuStreamGetFlags_ptsz)                   \
    X(cuStreamGetPriority, 5050, cuStreamGetPriority, cuStreamGetPriority_ptsz)          \
    X(cuStreamGetCtx, 9020, cuStreamGetCtx, cuStreamGetCtx_ptsz)                         \
    X(cuStreamGetCtx, 12050, cuStreamGetCtx_v2, cuStreamGetCtx_v2_ptsz)                  \
    X(cuStreamGetId, 12000, cuStreamGetId, cuStreamGetId_ptsz)                           \
    X(cuStreamGetDevice, 12080, cuStreamGetDevice, cuStreamGetDevice_ptsz)               \
    X(cuStreamAddCallback, 5000, cuStreamAddCallback, cuStreamAddCallback_ptsz)          \
    X(cuLaunchHostFunc, 10000, cuLaunchHostFunc, cuLaunchHostFunc_ptsz)                  \
    X(cuStreamWaitValue32, 11070, cuStreamWaitValue32_v2, cuStreamWaitValue32_v2_ptsz)    \
    X(cuStreamWaitValue64, 11070, cuStreamWaitValue64_v2, cuStreamWaitValue64_v2_ptsz)    \
    X(cuStreamWriteValue32, 11070, cuStreamWriteValue32_v2, cuStreamWriteValue32_v2_ptsz) \
    X(cuStreamWriteValue64, 11070, cuStreamWriteValue64_v2, cuStreamWriteValue64_v2_ptsz) \
    X(cuStreamBatchMemOp, 11070, cuStreamBatchMemOp_v2, cuStreamBatchMemOp_v2_ptsz)      \
    SIM_CAPTURE_PROCS(X)                                                                 \
    X(cuEventCreate, 2000, cuEventCreate, NOPT)                                          \
    X(cuEventRecord, 2000, cuEventRecord, cuEventRecord_ptsz)                            \
    X(cuEventRecordWithFlags, 11010, cuEventRecordWithFlags, cuEventRecordWithFlags_ptsz) \
    X(cuEventQuery, 2000, cuEventQuery, NOPT)                                            \
    X(cuEventSynchronize, 2000, cuEventSynchronize, NOPT)                                \
    X(cuEventDestroy, 2000, cuEventDestroy, NOPT)                                        \
    X(cuEventDestroy, 4000, cuEventDestroy_v2, NOPT)                                     \
    X(cuEventElapsedTime, 2000, cuEventElapsedTime, NOPT)                                \
    X(cuEventElapsedTime, 12080, cuEventElapsedTime_v2, NOPT)                            \
    X(cuModuleLoad, 2000, cuModuleLoad, NOPT)                                            \
    X(cuModuleLoadData, 2000, cuModuleLoadData, NOPT)                                    \
    X(cuModuleLoadDataEx, 2010, cuModuleLoadDataEx, NOPT)                                \
    X(cuModuleLoadFatBinary, 2000, cuModuleLoadFatBinary, NOPT)                          \
    X(cuModuleUnload, 2000, cuModuleUnload, NOPT)                                        \
    X(cuModuleGetFunction, 2000, cuModuleGetFunction, NOPT)                              \
    X(cuModuleGetGlobal, 3020, cuModuleGetGlobal_v2, NOPT)                               \
    X(cuModuleGetLoadingMode, 11070, cuModuleGetLoadingMode, NOPT)                       \
    X(cuLibraryLoadData, 12000, cuLibraryLoadData, NOPT)                                 \
    X(cuLibraryLoadFromFile, 12000, cuLibraryLoadFromFile, NOPT)                         \
    X(cuLibraryUnload, 12000, cuLibraryUnload, NOPT)                                     \
    X(cuLibraryGetKernel, 12000, cuLibraryGetKernel, NOPT)                               \
    X(cuLibraryGetModule, 12000, cuLibraryGetModule, NOPT)                               \
    X(cuLibraryGetKernelCount, 12040, cuLibraryGetKernelCount, NOPT)                     \
    X(cuLibraryEnumerateKernels, 12040, cuLibraryEnumerateKernels, NOPT)                 \
    X(cuKernelGetFunction, 12000, cuKernelGetFunction, NOPT)                             \
    X(cuKernelGetLibrary, 12050, cuKernelGetLibrary, NOPT)                               \
    X(cuModuleGetFunctionCount, 12040, cuModuleGetFunctionCount, NOPT)                   \
    X(cuModuleEnumerateFunctions, 12040, cuModuleEnumerateFunctions, NOPT)               \
    X(cuFuncIsLoaded, 12040, cuFuncIsLoaded, NOPT)                                       \
    X(cuFuncLoad, 12040, cuFuncLoad, NOPT)                                               \
    X(cuPointerSetAttribute, 6000, cuPointerSetAttribute, NOPT)                          \
    X(cuDeviceGetP2PAttribute, 8000, cuDeviceGetP2PAttribute, NOPT)                      \
    X(cuKernelGetAttribute, 12000, cuKernelGetAttribute, NOPT)                           \
    X(cuKernelSetAttribute, 12000, cuKernelSetAttribute, NOPT)                           \
    X(cuKernelGetName, 12030, cuKernelGetName, NOPT)                                     \
    X(cuKernelGetParamInfo, 12040, cuKernelGetParamInfo, NOPT)                           \
    X(cuFuncGetAttribute, 2020, cuFuncGetAttribute, NOPT)                                \
    X(cuLibraryGetGlobal, 12000, cuLibraryGetGlobal, NOPT) \
    X(cuLibraryGetManaged, 12000, cuLibraryGetManaged, NOPT) \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, cuOccupancyMaxActiveBlocksPerMultiprocessor, NOPT) \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, 7000, cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, NOPT) \
    X(cuOccupancyMaxPotentialBlockSize, 6050, cuOccupancyMaxPotentialBlockSize, NOPT) \
    X(cuOccupancyMaxPotentialBlockSizeWithFlags, 7000, cuOccupancyMaxPotentialBlockSizeWithFlags, NOPT) \
    X(cuOccupancyAvailableDynamicSMemPerBlock, 10020, cuOccupancyAvailableDynamicSMemPerBlock, NOPT) \
    X(cuFuncSetAttribute, 9000, cuFuncSetAttribute, NOPT)                                \
    X(cuFuncSetCacheConfig, 3000, cuFuncSetCacheConfig, NOPT)                            \
    X(cuFuncGetName, 12030, cuFuncGetName, NOPT)                                         \
    X(cuFuncGetModule, 11000, cuFuncGetModule, NOPT)                                     \
    X(cuFuncGetParamInfo, 12040, cuFuncGetParamInfo, NOPT)                               \
    X(cuLaunchKernel, 4000, cuLaunchKernel, cuLaunchKernel_ptsz)                         \
    X(cuLaunchKernelEx, 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz)                  \
    X(cuLaunchCooperativeKernel, 9000, cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz)

typedef struct sim_proc {
    const char *name;
    int version;
    void *fn;
    void *ptsz;
} sim_proc_t;

#define SIM_PROC_ROW(name, ver, sym, pt) {#name, ver, (void *)sym, (void *)pt},
#define SIM_U_ROW(name, ver, sym) {#name, ver, (void *)sym, NULL},
static const sim_proc_t g_procs[] = {SIM_PROCS(SIM_PROC_ROW) SIM_UNSUPPORTED(SIM_U_ROW, SIM_PROC_ROW)};
#undef SIM_PROC_ROW
#undef SIM_U_ROW

/* Finds symbol for cudaVersion and flags. CUDA_SUCCESS with *pfn set, or
 * CUDA_ERROR_NOT_FOUND with *pfn NULL and *status saying why, or
 * CUDA_ERROR_INVALID_VALUE for bad arguments. */
static CUresult lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = CUDA_ERROR_NOT_FOUND;
    const sim_proc_t *best = NULL;
    if (!symbol || !pfn ||
        (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                               CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    *pfn = NULL;
    if (cudaVersion > SIM_DRIVER_VERSION) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    for (size_t i = 0; i < sizeof(g_procs) / sizeof(g_procs[0]); i++) {
        if (strcmp(g_procs[i].name, symbol) != 0)
            continue;
        if (g_procs[i].version > cudaVersion) {
            st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
            continue;
        }
        if (!best || g_procs[i].version > best->version)
            best = &g_procs[i];
    }
    if (best) {
        int pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
        *pfn = pt && best->ptsz ? best->ptsz : best->fn;
        st = CU_GET_PROC_ADDRESS_SUCCESS;
        r = CUDA_SUCCESS;
    }
out:
    if (status)
        *status = st;
    if (sim_trace_on())
        sim_trace("cuGetProcAddress(\"%s\", version %d, flags %#llx) -> %s%s", symbol ? symbol : "(null)",
                  cudaVersion, (unsigned long long)flags,
                  r == CUDA_SUCCESS ? "found" : r == CUDA_ERROR_INVALID_VALUE ? "invalid value" :
                  st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "NULL (version not sufficient)" :
                  "NULL (symbol not found)",
                  best ? (best->ptsz && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? " (per-thread)" : "") : "");
    return r;
}

/* cuda.h (CUDA 13.0) documents the _v2 form: an unknown symbol, or one with
 * no version old enough for cudaVersion, gives CUDA_SUCCESS with *pfn NULL,
 * symbolStatus saying which. */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    CUresult r = lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
    return r == CUDA_ERROR_NOT_FOUND ? CUDA_SUCCESS : r;
}

/* The CUDA 11.3 form has no status argument: a symbol it cannot give is
 * CUDA_ERROR_NOT_FOUND (with *pfn NULL). */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}

/* cuGetExportTable hands out NVIDIA's private function tables, each named
 * by a UUID; cuda.h declares the function but documents no table. simcuda
 * provides none: every request sets *ppExportTable to NULL and returns
 * CUDA_ERROR_NOT_SUPPORTED (logged under SIMCUDA_TRACE=1).
 *
 * Consequence, measured with CUDA 13.0's libcudart.so.13 and
 * libcudart_static.a: at its initialisation the runtime resolves its driver
 * entry points through cuGetProcAddress (all it needs are found), then asks
 * for table f8cff951-2146-8b4e-b9e2-fb469e7c0dd9 (optional: it goes on
 * without it) and then for 6bd5fb6c-5bf4-e74a-8987-d93912fd9df9 (known in
 * public reimplementations as the "cudart interface" table), without which it
 * stops: every runtime call then returns the driver's refusal as its own
 * error (cudaErrorNotSupported), before any context, memory or module
 * exists. That table's contents are undocumented, so NVIDIA's CUDA runtime
 * does not run on simcuda (tests/sim/driver/cudart_test.c checks exactly
 * this failure point). */
CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId)
        return CUDA_ERROR_INVALID_VALUE;
    *ppExportTable = NULL;
    if (sim_trace_on()) {
        const unsigned char *u = (const unsigned char *)pExportTableId->bytes;
        sim_trace("cuGetExportTable(%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x) "
                  "-> not supported",
                  u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
                  u[13], u[14], u[15]);
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}
