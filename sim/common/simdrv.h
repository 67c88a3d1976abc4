/* How simcuda's libraries (cuBLAS, cuDNN, NCCL) reach the driver: exactly as
 * NVIDIA's do on CUDA 13, by dlopen("libcuda.so.1"), dlsym of
 * "cuGetProcAddress_v2" and then cuGetProcAddress for every entry point. So
 * a shim that interposes dlsym and cuGetProcAddress sees all their traffic.
 *
 * SIMDRV_FUNCS is the one list of driver functions the libraries use
 * (base name, the version asked of cuGetProcAddress, arguments). The version
 * is the CUDA version whose ABI the arguments describe, so the driver hands
 * back the matching variant (cuMemAlloc at 3020 -> cuMemAlloc_v2,
 * cuStreamGetCtx at 9020 -> the form without the green context of _v2).
 */
#ifndef SIMDRV_H
#define SIMDRV_H

#include <cuda.h>

#define SIMDRV_FUNCS(X)                                                              \
    X(cuInit, 2000, (unsigned int flags))                                            \
    X(cuCtxGetCurrent, 4000, (CUcontext *pctx))                                      \
    X(cuCtxSetCurrent, 4000, (CUcontext ctx))                                        \
    X(cuCtxGetDevice, 2000, (CUdevice *dev))                                         \
    X(cuCtxSynchronize, 2000, (void))                                                \
    X(cuDeviceGet, 2000, (CUdevice *dev, int ordinal))                               \
    X(cuDeviceGetCount, 2000, (int *count))                                          \
    X(cuDeviceGetName, 2000, (char *name, int len, CUdevice dev))                    \
    X(cuDeviceGetAttribute, 2000, (int *v, CUdevice_attribute a, CUdevice dev))      \
    X(cuDeviceGetUuid, 11040, (CUuuid *uuid, CUdevice dev))                          \
    X(cuDeviceGetPCIBusId, 4010, (char *id, int len, CUdevice dev))                  \
    X(cuDevicePrimaryCtxRetain, 7000, (CUcontext *pctx, CUdevice dev))               \
    X(cuStreamSynchronize, 2000, (CUstream s))                                       \
    X(cuStreamQuery, 2000, (CUstream s))                                             \
    X(cuStreamGetCtx, 9020, (CUstream s, CUcontext *pctx))                           \
    X(cuLaunchHostFunc, 10000, (CUstream s, CUhostFn fn, void *data))                \
    X(cuMemAlloc, 3020, (CUdeviceptr *p, size_t bytes))                              \
    X(cuMemFree, 3020, (CUdeviceptr p))                                              \
    X(cuMemcpy, 4000, (CUdeviceptr dst, CUdeviceptr src, size_t bytes))              \
    X(cuMemcpyAsync, 4000, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s)) \
    X(cuPointerGetAttribute, 4000, (void *data, CUpointer_attribute a, CUdeviceptr p)) \
    X(cuEventCreate, 2000, (CUevent *e, unsigned int flags))                         \
    X(cuEventRecord, 2000, (CUevent e, CUstream s))                                  \
    X(cuEventDestroy, 4000, (CUevent e))                                             \
    X(cuStreamWaitEvent, 3020, (CUstream s, CUevent e, unsigned int flags))          \
    X(cuGetErrorString, 6000, (CUresult r, const char **s))                         \
    X(cuMemcpyDtoHAsync, 3020, (void *dst, CUdeviceptr src, size_t bytes, CUstream s)) \
    X(cuMemsetD32Async, 3020, (CUdeviceptr dst, unsigned int v, size_t n, CUstream s)) \
    X(cuEventSynchronize, 2000, (CUevent e))                                         \
    X(cuEventElapsedTime, 2000, (float *ms, CUevent start, CUevent end))             \
    X(cuMemGetAllocationGranularity, 10020, (size_t *g, const CUmemAllocationProp *prop, \
                                             CUmemAllocationGranularity_flags option)) \
    X(cuMemCreate, 10020, (CUmemGenericAllocationHandle *h, size_t size,             \
                           const CUmemAllocationProp *prop, unsigned long long flags)) \
    X(cuMemRelease, 10020, (CUmemGenericAllocationHandle h))                         \
    X(cuMemAddressReserve, 10020, (CUdeviceptr *p, size_t size, size_t align,        \
                                   CUdeviceptr addr, unsigned long long flags))      \
    X(cuMemAddressFree, 10020, (CUdeviceptr p, size_t size))                         \
    X(cuMemMap, 10020, (CUdeviceptr p, size_t size, size_t offset,                  \
                        CUmemGenericAllocationHandle h, unsigned long long flags))   \
    X(cuMemUnmap, 10020, (CUdeviceptr p, size_t size))                               \
    X(cuMemSetAccess, 10020, (CUdeviceptr p, size_t size, const CUmemAccessDesc *desc, \
                              size_t count))                                         \
    X(cuMemExportToShareableHandle, 10020, (void *shh, CUmemGenericAllocationHandle h, \
                                            CUmemAllocationHandleType type,          \
                                            unsigned long long flags))               \
    X(cuMemImportFromShareableHandle, 10020, (CUmemGenericAllocationHandle *h, void *osh, \
                                              CUmemAllocationHandleType type))       \
    X(cuModuleLoadData, 2000, (CUmodule *mod, const void *image))                    \
    X(cuModuleGetFunction, 2000, (CUfunction *fn, CUmodule mod, const char *name))   \
    X(cuLaunchKernel, 4000, (CUfunction fn, unsigned int gx, unsigned int gy,        \
                             unsigned int gz, unsigned int bx, unsigned int by,      \
                             unsigned int bz, unsigned int shared, CUstream s,       \
                             void **params, void **extra))

typedef struct simdrv {
#define SIMDRV_MEMBER(name, ver, args) CUresult (*name) args;
    SIMDRV_FUNCS(SIMDRV_MEMBER)
#undef SIMDRV_MEMBER
} simdrv_t;

/* Loads the driver once (thread-safe). Returns the table, or NULL when
 * libcuda.so.1 or one of the functions cannot be found (the reason is in
 * simdrv_error()). Every member of a returned table is non-NULL. */
const simdrv_t *simdrv_get(void);
const char *simdrv_error(void);

/* Device facts the libraries' heuristics read, for the current context's
 * device. Returns 0 or a negative errno (no context: -ENODEV). */
typedef struct simdrv_devinfo {
    CUdevice dev;
    int ordinal;        /* physical simulated ordinal as seen by this process */
    int sm_count;
    int cc_major, cc_minor;
    char name[128];
    char model[16];     /* short model: "a100", "t4", ... lower case */
    char bus_id[32];
    CUuuid uuid;
} simdrv_devinfo_t;
int simdrv_current_device(simdrv_devinfo_t *info);

/* Whether the current context's device is the one whose UUID is *uuid: the
 * libraries' handles are bound to the device current at their creation and
 * refuse work anywhere else (no current context, a destroyed one, another
 * device). 1 yes, 0 no. */
int simdrv_bound_here(const CUuuid *uuid);

#endif
