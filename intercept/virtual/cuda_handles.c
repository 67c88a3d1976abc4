/* The driver's handles as virtual handles (docs/MOVING.md, section 4): the
 * hand-written thunks of the kind-T entries of shim/funcs.h that create,
 * destroy or configure contexts, streams, events, modules, functions,
 * libraries and kernels (move/vhandle.h records them), installed in the
 * translating real table while handles are virtual. Whoever calls
 * ES_REAL(cuda, ...) -- the generated wrappers, the module audit's hooks,
 * the virtual devices -- reaches these.
 *
 * Devices: the application's ordinal is the virtual device (vdev) of an
 * object; the real device behind it is the memory registry's
 * (es_memreg_device), which a move changes. */
#include "shim/log.h"
#include "shim/real.h"
#include "intercept/virtual/thunks.h"
#include "move/door.h"
#include "move/memreg.h"
#include "move/vhandle.h"

#include <stdio.h>
#include <stdlib.h>

/* The real device of vdev (the registry's table, identity until a move;
 * set up at the first use, after cuInit). */
static int es_real_dev(int vdev)
{
    if (!es_memreg_granularity() && es_memreg_init() != 0)
        return vdev;
    return es_memreg_device(vdev);
}

/* ---- contexts -------------------------------------------------------------------- */

void es_move_first_touch(int vdev); /* move/est.c: time-slicing */

static CUresult es_h_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    es_move_first_touch(dev);
    int d = es_real_dev(dev);
    if (d < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    return es_vh_primary_retain(pctx, dev, d);
}

static CUresult es_h_cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    return es_vh_primary_release(dev);
}

static CUresult es_h_cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    return es_vh_primary_reset(dev);
}

static CUresult es_h_cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned flags,
                                    CUdevice dev)
{
    if (params && (params->numExecAffinityParams > 0 || params->cigParams)) {
        ES_WARN("cuCtxCreate with execution affinity or CIG parameters: not supported while "
                "ESTs can move (EASYSCALE_MOVE=off allows it)");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    es_move_first_touch(dev);
    int d = es_real_dev(dev);
    if (d < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    return es_vh_ctx_create(pctx, flags, dev, d);
}

static CUresult es_h_cuCtxCreate_v2(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    return es_h_cuCtxCreate_v4(pctx, NULL, flags, dev);
}

static CUresult es_h_cuCtxDestroy_v2(CUcontext ctx)
{
    return es_vh_ctx_destroy(ctx);
}

static CUresult es_h_cuCtxSetCurrent(CUcontext ctx)
{
    return es_vh_set_current(ctx);
}

static CUresult es_h_cuCtxGetCurrent(CUcontext *pctx)
{
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = es_vh_current();
    return CUDA_SUCCESS;
}

/* The application's ordinal of a context's device, which a move does not
 * change (the driver would answer with the real device). */
static CUresult es_h_cuCtxGetDevice(CUdevice *device)
{
    CUcontext c = es_vh_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    int v = es_vh_vdev_of(c);
    if (v < 0)
        return ES_RAW(cuda, cuCtxGetDevice)(device);
    *device = v;
    return CUDA_SUCCESS;
}

static CUresult es_h_cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    if (!ctx)
        return es_h_cuCtxGetDevice(device);
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    int v = es_vh_vdev_of(ctx);
    if (v < 0)
        return ES_RAW(cuda, cuCtxGetDevice_v2)(device, (CUcontext)es_vh_real(ctx));
    *device = v;
    return CUDA_SUCCESS;
}

static CUresult es_h_cuCtxPushCurrent_v2(CUcontext ctx)
{
    return es_vh_push_current(ctx);
}

static CUresult es_h_cuCtxPopCurrent_v2(CUcontext *pctx)
{
    return es_vh_pop_current(pctx);
}

static CUresult es_h_cuCtxSetLimit(CUlimit limit, size_t value)
{
    return es_vh_ctx_set_limit(limit, value);
}

static CUresult es_h_cuCtxSetCacheConfig(CUfunc_cache config)
{
    return es_vh_ctx_set_cache_config(config);
}

/* Peer access also grants the peer access to the shim's VMM-backed
 * cuMemAlloc memory of the peer context's device (the driver's peer access
 * covers cuMemAlloc memory, not VMM mappings). */
static CUresult es_h_cuCtxEnablePeerAccess(CUcontext peer, unsigned flags)
{
    CUresult r = ES_RAW(cuda, cuCtxEnablePeerAccess)((CUcontext)es_vh_real(peer), flags);
    int owner = es_vh_vdev_of(peer), accessor = es_vh_vdev_of(es_vh_current());
    if (r == CUDA_SUCCESS && owner >= 0 && accessor >= 0 && owner != accessor)
        r = es_memreg_peer_enable(owner, accessor);
    return r;
}

static CUresult es_h_cuCtxDisablePeerAccess(CUcontext peer)
{
    CUresult r = ES_RAW(cuda, cuCtxDisablePeerAccess)((CUcontext)es_vh_real(peer));
    int owner = es_vh_vdev_of(peer), accessor = es_vh_vdev_of(es_vh_current());
    if (r == CUDA_SUCCESS && owner >= 0 && accessor >= 0 && owner != accessor)
        r = es_memreg_peer_disable(owner, accessor);
    return r;
}

/* ---- streams and events --------------------------------------------------------------- */

static CUresult es_h_cuStreamCreate(CUstream *ph, unsigned flags)
{
    return es_vh_stream_create(ph, flags, 0, 0);
}

static CUresult es_h_cuStreamCreateWithPriority(CUstream *ph, unsigned flags, int prio)
{
    return es_vh_stream_create(ph, flags, 1, prio);
}

static CUresult es_h_cuStreamDestroy_v2(CUstream s)
{
    return es_vh_stream_destroy(s);
}

/* A callback receives the stream: the application's (virtual) one. */
typedef struct es_cb {
    CUstreamCallback fn;
    void *data;
    CUstream vstream;
} es_cb_t;

static void CUDA_CB es_cb_tramp(CUstream real, CUresult status, void *arg)
{
    es_cb_t c = *(es_cb_t *)arg;
    (void)real;
    free(arg);
    c.fn(c.vstream, status, c.data);
}

static CUresult es_h_cuStreamAddCallback(CUstream s, CUstreamCallback fn, void *data,
                                         unsigned flags)
{
    if (!fn)
        return ES_RAW(cuda, cuStreamAddCallback)(es_vh_stream(s), fn, data, flags);
    es_cb_t *c = malloc(sizeof(*c));
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *c = (es_cb_t){ fn, data, s };
    CUresult r = ES_RAW(cuda, cuStreamAddCallback)(es_vh_stream(s), es_cb_tramp, c, flags);
    if (r != CUDA_SUCCESS)
        free(c);
    return r;
}

/* Captures in progress hold moves off (move/door.h). */
static CUresult es_h_cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    CUresult r = ES_RAW(cuda, cuStreamBeginCapture_v2)(es_vh_stream(s), mode);
    if (r == CUDA_SUCCESS)
        es_door_capture_begin();
    return r;
}

static CUresult es_h_cuStreamBeginCapture(CUstream s)
{
    CUresult r = ES_RAW(cuda, cuStreamBeginCapture)(es_vh_stream(s));
    if (r == CUDA_SUCCESS)
        es_door_capture_begin();
    return r;
}

static CUresult es_h_cuStreamBeginCapture_ptsz(CUstream s)
{
    CUresult r = ES_RAW(cuda, cuStreamBeginCapture_ptsz)(es_vh_stream(s));
    if (r == CUDA_SUCCESS)
        es_door_capture_begin();
    return r;
}

static CUresult es_h_cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
    CUresult r = ES_RAW(cuda, cuStreamBeginCapture_v2_ptsz)(es_vh_stream(s), mode);
    if (r == CUDA_SUCCESS)
        es_door_capture_begin();
    return r;
}

/* A graph holds real handles: counted while alive (move/vhandle.h). */
static CUresult es_end_capture(CUresult (*end)(CUstream, CUgraph *), CUstream s, CUgraph *graph)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUstream real = es_vh_stream(s);
    ES_RAW(cuda, cuStreamIsCapturing)(real, &st);
    CUresult r = end(real, graph);
    /* the capture is over, whether the graph came out or not */
    if (st != CU_STREAM_CAPTURE_STATUS_NONE)
        es_door_capture_end();
    if (r == CUDA_SUCCESS && graph && *graph)
        es_vh_graph_made(*graph);
    return r;
}

static CUresult es_h_cuStreamEndCapture(CUstream s, CUgraph *graph)
{
    return es_end_capture(ES_RAW(cuda, cuStreamEndCapture), s, graph);
}

static CUresult es_h_cuStreamEndCapture_ptsz(CUstream s, CUgraph *graph)
{
    return es_end_capture(ES_RAW(cuda, cuStreamEndCapture_ptsz), s, graph);
}

static CUresult es_h_cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g,
                                                 unsigned long long flags)
{
    CUresult r = ES_RAW(cuda, cuGraphInstantiateWithFlags)(exec, g, flags);
    if (r == CUDA_SUCCESS && exec)
        es_vh_graph_made(*exec);
    return r;
}

static CUresult es_h_cuGraphInstantiate_v2(CUgraphExec *exec, CUgraph g, CUgraphNode *err,
                                           char *log, size_t len)
{
    CUresult r = ES_RAW(cuda, cuGraphInstantiate_v2)(exec, g, err, log, len);
    if (r == CUDA_SUCCESS && exec)
        es_vh_graph_made(*exec);
    return r;
}

static CUresult es_h_cuGraphExecDestroy(CUgraphExec exec)
{
    CUresult r = ES_RAW(cuda, cuGraphExecDestroy)(exec);
    if (r == CUDA_SUCCESS)
        es_vh_graph_gone(exec);
    return r;
}

static CUresult es_h_cuGraphDestroy(CUgraph g)
{
    CUresult r = ES_RAW(cuda, cuGraphDestroy)(g);
    if (r == CUDA_SUCCESS)
        es_vh_graph_gone(g);
    return r;
}

static CUresult es_h_cuEventCreate(CUevent *ph, unsigned flags)
{
    return es_vh_event_create(ph, flags);
}

static CUresult es_h_cuEventDestroy_v2(CUevent e)
{
    return es_vh_event_destroy(e);
}

/* ---- modules, functions, libraries, kernels ---------------------------------------------- */

static CUresult es_h_cuModuleLoad(CUmodule *m, const char *fname)
{
    return es_vh_module_load_file(m, fname);
}

static CUresult es_h_cuModuleLoadData(CUmodule *m, const void *image)
{
    return es_vh_module_load(m, image, 0, 0, NULL, NULL);
}

static CUresult es_h_cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned n,
                                        CUjit_option *opts, void **vals)
{
    return es_vh_module_load(m, image, 0, n, opts, vals);
}

static CUresult es_h_cuModuleLoadFatBinary(CUmodule *m, const void *fatbin)
{
    return es_vh_module_load(m, fatbin, 0, 0, NULL, NULL);
}

static CUresult es_h_cuModuleUnload(CUmodule m)
{
    return es_vh_module_unload(m);
}

static CUresult es_h_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    return es_vh_module_get_function(f, m, name);
}

static CUresult es_h_cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule m,
                                          const char *name)
{
    return es_vh_module_get_global(dptr, bytes, m, name);
}

static CUresult es_h_cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v)
{
    return es_vh_func_set_attribute(f, a, v);
}

static CUresult es_h_cuFuncSetCacheConfig(CUfunction f, CUfunc_cache c)
{
    return es_vh_func_set_cache_config(f, c);
}

static CUresult es_h_cuLibraryLoadData(CUlibrary *l, const void *code, CUjit_option *jo,
                                       void **jv, unsigned nj, CUlibraryOption *lo, void **lv,
                                       unsigned nl)
{
    return es_vh_library_load(l, code, 0, nj, jo, jv, nl, lo, lv);
}

static CUresult es_h_cuLibraryLoadFromFile(CUlibrary *l, const char *file, CUjit_option *jo,
                                           void **jv, unsigned nj, CUlibraryOption *lo,
                                           void **lv, unsigned nl)
{
    if (!l || !file)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(file, "rb");
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    CUresult r = CUDA_SUCCESS;
    do {
        if (len + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *b = realloc(buf, cap);
            if (!b) {
                r = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            buf = b;
        }
        n = fread(buf + len, 1, 65536, f);
        len += n;
    } while (n > 0);
    fclose(f);
    if (r == CUDA_SUCCESS) {
        buf[len] = 0;
        r = es_vh_library_load(l, buf, len, nj, jo, jv, nl, lo, lv);
    }
    free(buf);
    return r;
}

static CUresult es_h_cuLibraryUnload(CUlibrary l)
{
    return es_vh_library_unload(l);
}

static CUresult es_h_cuLibraryGetKernel(CUkernel *k, CUlibrary l, const char *name)
{
    return es_vh_library_get_kernel(k, l, name);
}

static CUresult es_h_cuLibraryGetModule(CUmodule *m, CUlibrary l)
{
    return es_vh_library_get_module(m, l);
}

static CUresult es_h_cuKernelGetFunction(CUfunction *f, CUkernel k)
{
    return es_vh_kernel_get_function(f, k);
}

/* ---- legacy ABIs and per-thread variants ----------------------------------------------------- */

static CUresult es_h_cuCtxCreate(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    return es_h_cuCtxCreate_v4(pctx, NULL, flags, dev);
}

static CUresult es_h_cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n,
                                    unsigned flags, CUdevice dev)
{
    if (params && n > 0) {
        ES_WARN("cuCtxCreate with execution affinity: not supported while ESTs can move "
                "(EASYSCALE_MOVE=off allows it)");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    return es_h_cuCtxCreate_v4(pctx, NULL, flags, dev);
}

static CUresult es_h_cuCtxDestroy(CUcontext ctx) { return es_vh_ctx_destroy(ctx); }
static CUresult es_h_cuCtxPushCurrent(CUcontext ctx) { return es_vh_push_current(ctx); }
static CUresult es_h_cuCtxPopCurrent(CUcontext *pctx) { return es_vh_pop_current(pctx); }
static CUresult es_h_cuEventDestroy(CUevent e) { return es_vh_event_destroy(e); }
static CUresult es_h_cuStreamDestroy(CUstream s) { return es_vh_stream_destroy(s); }

static CUresult es_h_cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback fn, void *data,
                                              unsigned flags)
{
    return es_h_cuStreamAddCallback(s ? s : CU_STREAM_PER_THREAD, fn, data, flags);
}

/* Enumerations hand out the same objects as the lookups by name. */
static CUresult es_h_cuModuleEnumerateFunctions(CUfunction *fns, unsigned n, CUmodule m)
{
    if (!fns)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ES_RAW(cuda, cuModuleEnumerateFunctions)(fns, n, (CUmodule)es_vh_real(m));
    for (unsigned i = 0; r == CUDA_SUCCESS && i < n && fns[i]; i++) {
        const char *name = NULL;
        r = ES_RAW(cuda, cuFuncGetName)(&name, fns[i]);
        if (r == CUDA_SUCCESS)
            r = es_vh_module_get_function(&fns[i], m, name);
    }
    return r;
}

static CUresult es_h_cuLibraryEnumerateKernels(CUkernel *ks, unsigned n, CUlibrary l)
{
    if (!ks)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ES_RAW(cuda, cuLibraryEnumerateKernels)(ks, n, (CUlibrary)es_vh_real(l));
    for (unsigned i = 0; r == CUDA_SUCCESS && i < n && ks[i]; i++) {
        const char *name = NULL;
        r = ES_RAW(cuda, cuKernelGetName)(&name, ks[i]);
        if (r == CUDA_SUCCESS)
            r = es_vh_library_get_kernel(&ks[i], l, name);
    }
    return r;
}

/* ---- launches with a configuration: its stream translated in a copy ---------------------- */

static CUresult es_h_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kp,
                                      void **extra)
{
    if (!config)
        return ES_RAW(cuda, cuLaunchKernelEx)(config, (CUfunction)es_vh_real(f), kp, extra);
    CUlaunchConfig c = *config;
    c.hStream = es_vh_stream(c.hStream);
    return ES_RAW(cuda, cuLaunchKernelEx)(&c, (CUfunction)es_vh_real(f), kp, extra);
}

static CUresult es_h_cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                           void **kp, void **extra)
{
    if (!config)
        return ES_RAW(cuda, cuLaunchKernelEx_ptsz)(config, (CUfunction)es_vh_real(f), kp, extra);
    CUlaunchConfig c = *config;
    c.hStream = es_vh_stream(c.hStream);
    return ES_RAW(cuda, cuLaunchKernelEx_ptsz)(&c, (CUfunction)es_vh_real(f), kp, extra);
}

/* The cluster occupancy queries take a launch configuration: its stream
 * is virtual. */
static CUresult es_h_occupancy_cfg(CUresult (*fn)(int *, CUfunction, const CUlaunchConfig *),
                                   int *out, CUfunction f, const CUlaunchConfig *config)
{
    if (!config)
        return fn(out, (CUfunction)es_vh_real(f), config);
    CUlaunchConfig c = *config;
    c.hStream = es_vh_stream(c.hStream);
    return fn(out, (CUfunction)es_vh_real(f), &c);
}

static CUresult es_h_cuOccupancyMaxPotentialClusterSize(int *n, CUfunction f,
                                                        const CUlaunchConfig *config)
{
    return es_h_occupancy_cfg(ES_RAW(cuda, cuOccupancyMaxPotentialClusterSize), n, f, config);
}

static CUresult es_h_cuOccupancyMaxActiveClusters(int *n, CUfunction f,
                                                  const CUlaunchConfig *config)
{
    return es_h_occupancy_cfg(ES_RAW(cuda, cuOccupancyMaxActiveClusters), n, f, config);
}

/* ---- installing -------------------------------------------------------------------------- */

void es_handles_install(void);
void es_handles_install(void)
{
#define ES_SET(sym) es_real_cuda.sym = es_h_##sym;
    ES_SET(cuDevicePrimaryCtxRetain)
    ES_SET(cuDevicePrimaryCtxRelease_v2)
    ES_SET(cuDevicePrimaryCtxReset_v2)
    ES_SET(cuCtxCreate_v4)
    ES_SET(cuCtxCreate_v2)
    ES_SET(cuCtxDestroy_v2)
    ES_SET(cuCtxSetCurrent)
    ES_SET(cuCtxGetCurrent)
    ES_SET(cuCtxGetDevice)
    ES_SET(cuCtxGetDevice_v2)
    ES_SET(cuCtxPushCurrent_v2)
    ES_SET(cuCtxPopCurrent_v2)
    ES_SET(cuCtxSetLimit)
    ES_SET(cuCtxSetCacheConfig)
    ES_SET(cuCtxEnablePeerAccess)
    ES_SET(cuCtxDisablePeerAccess)
    ES_SET(cuStreamCreate)
    ES_SET(cuStreamCreateWithPriority)
    ES_SET(cuStreamDestroy_v2)
    ES_SET(cuStreamAddCallback)
    ES_SET(cuStreamBeginCapture_v2)
    ES_SET(cuStreamEndCapture)
    ES_SET(cuStreamEndCapture_ptsz)
    ES_SET(cuStreamBeginCapture)
    ES_SET(cuStreamBeginCapture_ptsz)
    ES_SET(cuStreamBeginCapture_v2_ptsz)
    ES_SET(cuGraphInstantiateWithFlags)
    ES_SET(cuGraphInstantiate_v2)
    ES_SET(cuGraphExecDestroy)
    ES_SET(cuGraphDestroy)
    ES_SET(cuEventCreate)
    ES_SET(cuEventDestroy_v2)
    ES_SET(cuModuleLoad)
    ES_SET(cuModuleLoadData)
    ES_SET(cuModuleLoadDataEx)
    ES_SET(cuModuleLoadFatBinary)
    ES_SET(cuModuleUnload)
    ES_SET(cuModuleGetFunction)
    ES_SET(cuModuleGetGlobal_v2)
    ES_SET(cuFuncSetAttribute)
    ES_SET(cuFuncSetCacheConfig)
    ES_SET(cuLibraryLoadData)
    ES_SET(cuLibraryLoadFromFile)
    ES_SET(cuLibraryUnload)
    ES_SET(cuLibraryGetKernel)
    ES_SET(cuLibraryGetModule)
    ES_SET(cuKernelGetFunction)
    ES_SET(cuLaunchKernelEx)
    ES_SET(cuLaunchKernelEx_ptsz)
    ES_SET(cuOccupancyMaxPotentialClusterSize)
    ES_SET(cuOccupancyMaxActiveClusters)
    ES_SET(cuCtxCreate)
    ES_SET(cuCtxCreate_v3)
    ES_SET(cuCtxDestroy)
    ES_SET(cuCtxPushCurrent)
    ES_SET(cuCtxPopCurrent)
    ES_SET(cuEventDestroy)
    ES_SET(cuStreamDestroy)
    ES_SET(cuStreamAddCallback_ptsz)
    ES_SET(cuModuleEnumerateFunctions)
    ES_SET(cuLibraryEnumerateKernels)
#undef ES_SET
}
