/* Driver API wrappers with something to decide: cuGetProcAddress (both
 * ABIs) answers with the shim's wrapper for every real pointer the shim
 * wraps (routing by the exact pointer the real resolver returned, so the
 * requested version and per-thread-stream variant are kept), and in d2 the
 * device identity (SM count, compute capability, limits) is lowered to the
 * job's canonical device (device/device.c): the compute capability kept
 * real for code generators and loaders, every value real for the vendor
 * libraries. In d2, cuInit also checks that the shim's portable kernels
 * run on every GPU (kernels/portable.h).
 *
 * cudaGetDriverEntryPoint* (libcudart) is not exported: the runtime gets
 * every driver entry point through dlsym("cuGetProcAddress_v2") and then
 * cuGetProcAddress, both answered here, so its lookups are caught without
 * the shim depending on or imitating libcudart.
 *
 * Lookups from the real libnccl while the collectives are virtual are the
 * NCCL carriers' (coll/transport/nccl.c): answered with the real driver.
 * So are libcudart's while handles are virtual (its private export tables
 * take no virtual handle; EASYSCALE_RUNTIME_HANDLES), but for its cuInit
 * and lookups; the vendor libraries' see the physical devices
 * (intercept/vendordev.c).
 *
 * Module loads, kernel handles and launches feed the run-time kernel audit
 * (EASYSCALE_AUDIT, audit/modaudit.h).
 *
 * Virtual devices (device/vdev.h, while the collectives are virtual): the
 * device count, cuDeviceGet, every call naming a device (translated to the
 * EST's slot) and the calls returning one (translated back), and
 * cuMemGetInfo (the EST's share of the slot).
 */
#include "intercept/enter.h"
#include "intercept/virtual/refuse.h"
#include "intercept/tsdefer.h"
#include "intercept/vendordev.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/real.h"
#include "device/device.h"
#include "device/vdev.h"
#include "kernels/portable.h"
#include "audit/modaudit.h"
#include "move/vhandle.h"
#include "coll/coll.h"
#include "move/mover.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* The CUDA runtime (libcudart) passes the handles it holds to private
 * driver functions (cuGetExportTable), which cannot take virtual ones:
 * NVIDIA's driver answers them CUDA_ERROR_INVALID_CONTEXT (docs/MOVING.md,
 * section 7). Unless EASYSCALE_RUNTIME_HANDLES=virtual its lookups get the
 * real driver. The runtime then holds the application's own memory and
 * streams (a framework's tensors), which no move could carry: from its
 * first lookup on, moves are refused with the reason. (The vendor
 * libraries keep the virtual handles: the shim hands them the virtual
 * streams, valid across moves, intercept/virtual/libh.c.) */
static int es_runtime_gate(char *msg, size_t msglen)
{
    if (msg && msglen)
        snprintf(msg, msglen, "the CUDA runtime (libcudart) of this process holds real driver "
                              "handles and memory outside the shim's registry: its ESTs cannot "
                              "move (docs/MOVING.md, section 7)");
    return -EPERM;
}

/* A thread on which the runtime made a context current, calling a vendor
 * library (which keeps virtual handles) before any virtual context was
 * current there, adopts the virtual context behind the runtime's: the
 * vdev's primary context (the one the runtime uses), retained once. */
static CUcontext es_runtime_adopt(void)
{
    CUcontext real = NULL, p = NULL;
    CUdevice dev;
    if (ES_RAW(cuda, cuCtxGetCurrent)(&real) != CUDA_SUCCESS || !real ||
        ES_RAW(cuda, cuCtxGetDevice)(&dev) != CUDA_SUCCESS)
        return NULL;
    void *v = es_vh_from_real(real);
    if (v)
        return (CUcontext)v;
    int vdev = (int)es_vdev_virt(dev);
    if (es_vh_primary_retain(&p, vdev, dev) != CUDA_SUCCESS)
        return NULL;
    if (es_vh_real(p) != (void *)real) { /* a context the runtime created: not ours */
        (void)es_vh_primary_release(vdev);
        return NULL;
    }
    return p;
}

/* The runtime's first lookup: moves refused from now on, adoption on. */
static void es_runtime_seen(void)
{
    static int said;
    if (__atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL))
        return;
    (void)es_mover_add_gate(es_runtime_gate);
    es_vh_set_adopt(es_runtime_adopt);
    ES_INFO("the CUDA runtime (libcudart) gets the real driver: moves are refused from now on "
            "(EASYSCALE_RUNTIME_HANDLES)");
}

/* The runtime's answer: the real driver, but for its cuInit (the shim's
 * start-up when it is the process's first) and its lookups (they pass here
 * too, answered the same way), and its contexts fixing the EST's slot
 * (intercept/vendordev.c). */
static void *es_route_runtime(void *real, void *w, int idx)
{
    es_runtime_seen();
    if (!w)
        return real;
    if (idx == ES_IDX_cuGetProcAddress_v2 || idx == ES_IDX_cuGetProcAddress ||
        idx == ES_IDX_cuInit) {
        es_stat_getproc(ES_LIB_CUDA, idx);
        return w;
    }
    void *rt = es_runtime_dev_fn(idx);
    return rt ? rt : es_raw_ptr(ES_LIB_CUDA, idx);
}

static void *es_route(void *real, const void *caller, const char *symbol)
{
    int idx = -1;
    void *w = es_wrapper_for_real(ES_LIB_CUDA, real, &idx);
    /* who asks (one dladdr), where an answer depends on it */
    int kind = es_vh_on || es_coll_enabled() || es_vdev_active() ||
                       es_cfg.determinism == ES_DET_D2
                   ? es_addr_kind(caller)
                   : ES_OBJ_OTHER;
    if (kind == ES_OBJ_CUDART && es_vh_on && !es_cfg.runtime_virtual)
        return es_route_runtime(real, w, idx);
    /* The NCCL carriers (coll/transport/nccl.c) work on the real driver,
     * real handles and all (not even the translating thunks: they would
     * hand back virtual ones): with the virtual collectives on, the
     * application's NCCL calls never reach the real libnccl, so every
     * lookup from it is the carriers' (their memory, streams and proxy
     * threads are not the application's). */
    if (kind == ES_OBJ_NCCL && es_coll_enabled())
        return w ? es_raw_ptr(ES_LIB_CUDA, idx) : real;
    if (!w) {
        /* not wrapped: refused when it takes a virtual handle */
        void *stub = es_refusal_by_base(symbol);
        return stub ? stub : real;
    }
    if (es_obj_is_vendor(kind)) {
        /* The vendor libraries see the physical devices (intercept/vendordev.c),
         * and in d2 the true device identity: the true function, not `real`
         * (a driver that takes the address of its own exports hands out the
         * shim's wrappers, which preempt them). */
        void *v = es_vendor_dev_fn(idx);
        if (v) {
            es_stat_getproc(ES_LIB_CUDA, idx);
            return v;
        }
        if (es_cfg.determinism == ES_DET_D2 && es_fn_is_identity(ES_LIB_CUDA, idx))
            return es_real_ptr(ES_LIB_CUDA, idx);
    }
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
        *pfn = es_route(*pfn, __builtin_return_address(0), symbol);
    return r;
}

ES_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags)
{
    ES_ENTER(cuda, cuGetProcAddress);
    CUresult r = ES_REAL(cuda, cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = es_route(*pfn, __builtin_return_address(0), symbol);
    return r;
}

/* d2's identity (device/device.h): values lowered to the canonical
 * device's, the compute capability kept real for code generators and
 * loaders (decided by the caller's address). The real value is always the
 * physical device's: dev is the application's (virtual) ordinal, read on
 * the slot it stands for. */
static int es_real_attr(int attr, int dev, int *value)
{
    return (int)ES_REAL(cuda, cuDeviceGetAttribute)(value, (CUdevice_attribute)attr,
                                                     es_vdev_phys((CUdevice)dev));
}

ES_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    ES_ENTER(cuda, cuDeviceGetAttribute);
    CUresult r = ES_REAL(cuda, cuDeviceGetAttribute)(pi, attrib, es_vdev_phys(dev));
    if (__builtin_expect(es_cfg.determinism == ES_DET_D2, 0) && r == CUDA_SUCCESS && pi &&
        es_device_lower_attr((int)attrib, (int)dev, pi, __builtin_return_address(0),
                             es_real_attr))
        ES_DEBUG("d2: device %d attribute %d reported as %d", (int)dev, (int)attrib, *pi);
    return r;
}

ES_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    ES_ENTER(cuda, cuDeviceComputeCapability);
    CUresult r = ES_REAL(cuda, cuDeviceComputeCapability)(major, minor, es_vdev_phys(dev));
    if (es_cfg.determinism == ES_DET_D2 && r == CUDA_SUCCESS && major && minor)
        es_device_lower_cc(major, minor, __builtin_return_address(0));
    return r;
}

/* ---- virtual devices (device/vdev.h) ----------------------------------------
 * Inactive (EASYSCALE_COLLECTIVES=nccl, or off): each of these is the real
 * call (es_vdev_* are the identity). */

/* After the first successful cuInit (the devices are known):
 * - virtual devices: the physical devices read and EASYSCALE_SLOT resolved
 *   (device/vdev.h);
 * - d2: the portable kernels must run on every device, checked once
 *   (kernels/portable.h): a GPU they cannot serve fails cuInit, loudly, at
 *   start-up. */
ES_EXPORT CUresult cuInit(unsigned int Flags)
{
    static int checked; /* 0 not yet, 1 passed, 2 failed */
    ES_ENTER(cuda, cuInit);
    CUresult r = ES_REAL(cuda, cuInit)(Flags);
    if (r == CUDA_SUCCESS && es_vdev_active()) {
        char msg[256];
        if (es_vdev_init(msg, sizeof(msg)) < 0) {
            /* A configuration error, found only now that the devices are
             * known: the same treatment as a bad value at start-up. */
            ES_ERROR("%s", msg);
            _exit(2);
        }
    }
    if (r == CUDA_SUCCESS && es_cfg.determinism == ES_DET_D2 &&
        __atomic_load_n(&checked, __ATOMIC_ACQUIRE) != 1) {
        r = es_portable_startup_check();
        __atomic_store_n(&checked, r == CUDA_SUCCESS ? 1 : 2, __ATOMIC_RELEASE);
    }
    return r;
}

ES_EXPORT CUresult cuDeviceGetCount(int *count)
{
    ES_ENTER(cuda, cuDeviceGetCount);
    CUresult r = ES_REAL(cuda, cuDeviceGetCount)(count);
    if (r == CUDA_SUCCESS && count)
        *count = es_vdev_count(*count);
    return r;
}

ES_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    ES_ENTER(cuda, cuDeviceGet);
    if (!es_vdev_active())
        return ES_REAL(cuda, cuDeviceGet)(device, ordinal);
    int n = 0;
    CUresult r = ES_REAL(cuda, cuDeviceGetCount)(&n);
    if (r != CUDA_SUCCESS)
        return r;
    if (ordinal < 0 || ordinal >= es_vdev_count(n))
        return device ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_INVALID_VALUE;
    r = ES_REAL(cuda, cuDeviceGet)(device, es_vdev_phys(ordinal));
    if (r == CUDA_SUCCESS)
        *device = ordinal; /* the virtual ordinal is the application's handle */
    return r;
}

ES_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    ES_ENTER(cuda, cuDeviceGetName);
    return ES_REAL(cuda, cuDeviceGetName)(name, len, es_vdev_phys(dev));
}

ES_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    ES_ENTER(cuda, cuDeviceTotalMem_v2);
    return ES_REAL(cuda, cuDeviceTotalMem_v2)(bytes, es_vdev_phys(dev));
}

ES_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    ES_ENTER(cuda, cuDeviceGetUuid_v2);
    return ES_REAL(cuda, cuDeviceGetUuid_v2)(uuid, es_vdev_phys(dev));
}

ES_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    ES_ENTER(cuda, cuDeviceGetPCIBusId);
    return ES_REAL(cuda, cuDeviceGetPCIBusId)(pciBusId, len, es_vdev_phys(dev));
}

ES_EXPORT CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    ES_ENTER(cuda, cuDeviceCanAccessPeer);
    return ES_REAL(cuda, cuDeviceCanAccessPeer)(canAccessPeer, es_vdev_phys(dev),
                                                 es_vdev_phys(peerDev));
}

/* The device a call that makes or names a context passes on: while handles
 * are virtual (docs/MOVING.md) the application's ordinal, which the
 * thunks map to the real device through the memory registry (whose
 * resolver for an EST that never moved is es_vdev_phys: move/est.c);
 * otherwise the physical device. */
static inline CUdevice es_ctx_dev(CUdevice dev)
{
    return es_vh_on ? dev : es_vdev_phys(dev);
}

ES_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    ES_ENTER(cuda, cuDevicePrimaryCtxRetain);
    CUresult r = ES_REAL(cuda, cuDevicePrimaryCtxRetain)(pctx, es_ctx_dev(dev));
    if (r == CUDA_SUCCESS)
        es_vdev_select(dev);
    return r;
}

ES_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    ES_ENTER(cuda, cuDevicePrimaryCtxRelease_v2);
    return ES_REAL(cuda, cuDevicePrimaryCtxRelease_v2)(es_ctx_dev(dev));
}

ES_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    ES_ENTER(cuda, cuDevicePrimaryCtxGetState);
    return ES_REAL(cuda, cuDevicePrimaryCtxGetState)(es_vdev_phys(dev), flags, active);
}

ES_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    ES_ENTER(cuda, cuDevicePrimaryCtxSetFlags_v2);
    return ES_REAL(cuda, cuDevicePrimaryCtxSetFlags_v2)(es_vdev_phys(dev), flags);
}

ES_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    ES_ENTER(cuda, cuDevicePrimaryCtxReset_v2);
    return ES_REAL(cuda, cuDevicePrimaryCtxReset_v2)(es_ctx_dev(dev));
}

ES_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                  unsigned int flags, CUdevice dev)
{
    ES_ENTER(cuda, cuCtxCreate_v4);
    CUresult r = ES_REAL(cuda, cuCtxCreate_v4)(pctx, ctxCreateParams, flags, es_ctx_dev(dev));
    if (r == CUDA_SUCCESS)
        es_vdev_select(dev);
    return r;
}

ES_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    ES_ENTER(cuda, cuCtxGetDevice);
    CUresult r = ES_REAL(cuda, cuCtxGetDevice)(device);
    if (r == CUDA_SUCCESS && device)
        *device = es_vdev_virt(*device);
    return r;
}

ES_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    ES_ENTER(cuda, cuCtxGetDevice_v2);
    CUresult r = ES_REAL(cuda, cuCtxGetDevice_v2)(device, ctx);
    if (r == CUDA_SUCCESS && device)
        *device = es_vdev_virt(*device);
    return r;
}

ES_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                         CUdeviceptr ptr)
{
    ES_ENTER(cuda, cuPointerGetAttribute);
    CUresult r = ES_REAL(cuda, cuPointerGetAttribute)(data, attribute, ptr);
    if (r == CUDA_SUCCESS && data && attribute == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
        *(int *)data = es_vdev_virt(*(int *)data);
    return r;
}

/* The EST's share of its slot: total and free divided by the ESTs placed
 * on the slot (device/vdev.h). */
ES_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    ES_ENTER(cuda, cuMemGetInfo_v2);
    CUresult r = ES_REAL(cuda, cuMemGetInfo_v2)(free, total);
    int k = es_vdev_share();
    if (r == CUDA_SUCCESS && k > 1) {
        if (free)
            *free /= (size_t)k;
        if (total)
            *total /= (size_t)k;
    }
    return r;
}

/* ---- module audit (audit/modaudit.c) ---------------------------------------
 * Loads: the real call first; a module it loaded is audited once (cached by
 * content), whatever the audit says the load's result is the real one.
 * Launches: while no flagged kernel handle exists (es_launch_gate == 0) a
 * launch is the pass-through's one branch and tail call; otherwise one hash
 * lookup, and a flagged kernel is logged (warn) or refused (strict). */

#define ES_AUDITING() (__builtin_expect(es_cfg.audit != ES_AUDIT_MODE_OFF, 1))

/* What each kind-H function does after a successful real call (its
 * parameters are in scope). */
#define ES_HOOK_cuModuleLoad                                                                     \
    if (module) es_modaudit_loaded_file(*module, fname, "cuModuleLoad")
#define ES_HOOK_cuModuleLoadData                                                                 \
    if (module) es_modaudit_loaded(*module, image, SIZE_MAX, "cuModuleLoadData")
#define ES_HOOK_cuModuleLoadDataEx                                                               \
    if (module) es_modaudit_loaded(*module, image, SIZE_MAX, "cuModuleLoadDataEx")
#define ES_HOOK_cuModuleLoadFatBinary                                                            \
    if (module) es_modaudit_loaded(*module, fatCubin, SIZE_MAX, "cuModuleLoadFatBinary")
#define ES_HOOK_cuModuleUnload es_modaudit_unloaded(hmod)
#define ES_HOOK_cuModuleGetFunction if (hfunc) es_modaudit_got(*hfunc, hmod, name)
#define ES_HOOK_cuLibraryLoadData                                                                \
    if (library) es_modaudit_loaded(*library, code, SIZE_MAX, "cuLibraryLoadData")
#define ES_HOOK_cuLibraryLoadFromFile                                                            \
    if (library) es_modaudit_loaded_file(*library, fileName, "cuLibraryLoadFromFile")
#define ES_HOOK_cuLibraryUnload es_modaudit_unloaded(library)
#define ES_HOOK_cuLibraryGetKernel if (pKernel) es_modaudit_got(*pKernel, library, name)
#define ES_HOOK_cuLibraryGetModule if (pMod) es_modaudit_alias(*pMod, library)
#define ES_HOOK_cuKernelGetFunction if (pFunc) es_modaudit_derived(*pFunc, kernel)

#define ES_GEN_HOOKED_P(sym, params, args)
#define ES_GEN_HOOKED_C(sym, params, args)
#define ES_GEN_HOOKED_I(sym, params, args)
#define ES_GEN_HOOKED_A(sym, params, args)
#define ES_GEN_HOOKED_T(sym, params, args)
#define ES_GEN_HOOKED_H(sym, params, args)                                                       \
    ES_EXPORT CUresult sym params                                                                \
    {                                                                                            \
        ES_ENTER(cuda, sym);                                                                     \
        CUresult r = ES_REAL(cuda, sym) args;                                                    \
        if (r == CUDA_SUCCESS && ES_AUDITING()) {                                                \
            ES_HOOK_##sym;                                                                       \
        }                                                                                        \
        return r;                                                                                \
    }
#define ES_GEN_HOOKED(kind, sym, gp, ver, fl, ret, params, args, err)                            \
    ES_GEN_HOOKED_##kind(sym, params, args)
ES_CUDA_FUNCS(ES_GEN_HOOKED)
#undef ES_GEN_HOOKED

/* The one branch of the launch path (es_launch_gate): library not loaded yet
 * / statistics on, or some flagged kernel handle exists. */
#define ES_LAUNCH_SLOW() __builtin_expect(__atomic_load_n(&es_launch_gate, __ATOMIC_ACQUIRE), 0)

#define ES_LAUNCH_WRAPPER(sym, fexpr, sexpr, params, args, rawcall, rawargs)                  \
    __attribute__((noinline, cold)) static CUresult es_slow_##sym params                       \
    {                                                                                          \
        es_enter_slow(ES_LIB_CUDA, ES_IDX_##sym,                                               \
                      es_door_tls.epoch != __atomic_load_n(&es_door_epoch, __ATOMIC_RELAXED)); \
        ES_TS_PRE(cuda, sym, CUresult, (V_STREAM(sexpr)))                                      \
        if (__builtin_expect(es_modaudit_flagged((const void *)(fexpr)), 0) &&                 \
            es_modaudit_launch((const void *)(fexpr), #sym) < 0)                               \
            return CUDA_ERROR_NOT_SUPPORTED;                                                   \
        return rawcall rawargs;                                                                \
    }                                                                                          \
    ES_EXPORT CUresult sym params                                                              \
    {                                                                                          \
        __attribute__((cleanup(es_door_guard_leave))) int g_ = es_door_enter();                 \
        if (ES_LAUNCH_SLOW() | g_)                                                             \
            return es_slow_##sym args;                                                         \
        return rawcall rawargs;                                                                \
    }

#define ES_LK_PARAMS                                                                           \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,        \
     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                   \
     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
#define ES_LK_ARGS                                                                             \
    (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,         \
     hStream, kernelParams, extra)
/* the fast path calls the driver itself: the handles translated */
#define ES_LK_RAW                                                                              \
    ((CUfunction)es_vh_real(f), gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, \
     sharedMemBytes, es_vh_stream(hStream), kernelParams, extra)
#define ES_CK_PARAMS                                                                           \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,        \
     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,                   \
     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
#define ES_CK_ARGS                                                                             \
    (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,         \
     hStream, kernelParams)
#define ES_CK_RAW                                                                              \
    ((CUfunction)es_vh_real(f), gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, \
     sharedMemBytes, es_vh_stream(hStream), kernelParams)
#define ES_LX_PARAMS (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)

/* The launch with a configuration: its stream translated in a copy. */
#define ES_LAUNCH_EX_RAW(sym)                                                                  \
    static CUresult es_raw_##sym(const CUlaunchConfig *config, CUfunction f, void **kp,        \
                                 void **extra)                                                 \
    {                                                                                          \
        if (!es_vh_on || !config)                                                              \
            return es_raw_cuda.sym(config, f, kp, extra);                                      \
        CUlaunchConfig c = *config;                                                            \
        c.hStream = es_vh_stream(c.hStream);                                                   \
        return es_raw_cuda.sym(&c, (CUfunction)es_vh_real(f), kp, extra);                      \
    }
ES_LAUNCH_EX_RAW(cuLaunchKernelEx)
ES_LAUNCH_EX_RAW(cuLaunchKernelEx_ptsz)
#define ES_LX_ARGS (config, f, kernelParams, extra)
/* cuLaunchKernelEx: its configuration holds the stream, translated in a
 * copy */
#define ES_LX_RAW (config, f, kernelParams, extra)

ES_LAUNCH_WRAPPER(cuLaunchKernel, f, hStream, ES_LK_PARAMS, ES_LK_ARGS, ES_RAW(cuda, cuLaunchKernel),
                  ES_LK_RAW)
ES_LAUNCH_WRAPPER(cuLaunchKernel_ptsz, f, hStream, ES_LK_PARAMS, ES_LK_ARGS,
                  ES_RAW(cuda, cuLaunchKernel_ptsz), ES_LK_RAW)
ES_LAUNCH_WRAPPER(cuLaunchCooperativeKernel, f, hStream, ES_CK_PARAMS, ES_CK_ARGS,
                  ES_RAW(cuda, cuLaunchCooperativeKernel), ES_CK_RAW)
ES_LAUNCH_WRAPPER(cuLaunchCooperativeKernel_ptsz, f, hStream, ES_CK_PARAMS, ES_CK_ARGS,
                  ES_RAW(cuda, cuLaunchCooperativeKernel_ptsz), ES_CK_RAW)
ES_LAUNCH_WRAPPER(cuLaunchKernelEx, f, config ? config->hStream : NULL, ES_LX_PARAMS, ES_LX_ARGS, es_raw_cuLaunchKernelEx,
                  ES_LX_RAW)
ES_LAUNCH_WRAPPER(cuLaunchKernelEx_ptsz, f, config ? config->hStream : NULL, ES_LX_PARAMS, ES_LX_ARGS,
                  es_raw_cuLaunchKernelEx_ptsz, ES_LX_RAW)
