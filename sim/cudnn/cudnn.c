/* simcuda cuDNN: the legacy (v7-style) API of libcudnn.so.9 on the CPU:
 * handle, tensor/filter/convolution/pooling/activation descriptors, the
 * convolution, pooling, activation and tensor-add operations (enqueued on the
 * handle's stream and run later, as on a GPU), the algorithm queries with
 * truthful `determinism` fields, Find* that really times candidates.
 *
 * Status codes follow cudnn_graph.h of v9: NULL pointers are
 * CUDNN_STATUS_BAD_PARAM_NULL_POINTER, a too small workspace is
 * CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT (both in the BAD_PARAM category),
 * mismatched or unset descriptors and bad sizes CUDNN_STATUS_BAD_PARAM,
 * unsupported data types/layouts/algorithms CUDNN_STATUS_NOT_SUPPORTED.
 */
#include "sim/cudnn/cudnn_int.h"
#include "sim/cudnn/backend_kernels.h"
#include "sim/cudnn/kparams.h"
#include "sim/common/live.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- errors ------------------------------------------------------------------ */

static __thread char t_last_err[256];

cudnnStatus_t sim_cudnn_fail(cudnnStatus_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(t_last_err, sizeof(t_last_err), "CUDNN_STATUS %d: ", (int)st);
    if (n > 0 && (size_t)n < sizeof(t_last_err))
        vsnprintf(t_last_err + n, sizeof(t_last_err) - (size_t)n, fmt, ap);
    va_end(ap);
    return st;
}

#define FAIL(st, ...) sim_cudnn_fail((st), __VA_ARGS__)
#define NULLP(what) FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s: %s is NULL", __func__, what)

/* ---- descriptors: what every legacy kind shares ------------------------------------ */

#define HEAD_OK(T)                                                                        \
    _Static_assert(offsetof(struct T, magic) == offsetof(desc_head_t, magic) &&          \
                       offsetof(struct T, set) == offsetof(desc_head_t, set),            \
                   #T " starts with the descriptor head")

/* Every legacy descriptor starts with its kind's magic and whether it has
 * been set (cudnn_int.h). */
typedef struct desc_head {
    uint32_t magic;
    int set;
} desc_head_t;

/* SUCCESS when d is a descriptor of the kind `magic` (and set, if need_set);
 * else BAD_PARAM_NULL_POINTER (NULL) or BAD_PARAM, the message naming the
 * argument and the kind. */
/* Live legacy descriptors of every kind: a destroyed or foreign one is
 * refused without being read. */
static sim_live_t g_descs = SIM_LIVE_INIT;

static cudnnStatus_t desc_check(const void *d, uint32_t magic, int need_set, const char *arg,
                                const char *kind)
{
    const desc_head_t *h = d;
    if (!h)
        return FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s (%s descriptor) is NULL", arg, kind);
    if (!sim_live_has(&g_descs, h) || h->magic != magic)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "%s is not a %s descriptor", arg, kind);
    if (need_set && !h->set)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "%s: %s descriptor not set", arg, kind);
    return CUDNN_STATUS_SUCCESS;
}

/* cudnnCreate*Descriptor: a zeroed descriptor of `size` bytes tagged
 * `magic`, stored at out (a pointer to the caller's descriptor variable). */
static cudnnStatus_t desc_create(void *out, size_t size, uint32_t magic, const char *arg)
{
    if (!out)
        return FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s is NULL", arg);
    desc_head_t *h = calloc(1, size);
    if (!h)
        return FAIL(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "no memory");
    h->magic = magic;
    if (sim_live_add(&g_descs, h) != 0) {
        free(h);
        return FAIL(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "no memory");
    }
    memcpy(out, &h, sizeof(h));
    return CUDNN_STATUS_SUCCESS;
}

/* cudnnDestroy*Descriptor: NULL is a no-op (as in cuDNN), another kind is
 * refused. */
static cudnnStatus_t desc_destroy(void *d, uint32_t magic, const char *kind)
{
    if (!d)
        return CUDNN_STATUS_SUCCESS;
    cudnnStatus_t st = desc_check(d, magic, 0, "descriptor", kind);
    if (st)
        return st;
    sim_live_remove(&g_descs, d);
    ((desc_head_t *)d)->magic = 0;
    free(d);
    return CUDNN_STATUS_SUCCESS;
}

size_t cudnnGetVersion(void)
{
    return CUDNN_VERSION;
}

size_t cudnnGetMaxDeviceVersion(void)
{
    return CUDNN_MAX_DEVICE_VERSION;
}

size_t cudnnGetCudartVersion(void)
{
    return 13000;
}

cudnnStatus_t cudnnGetProperty(libraryPropertyType type, int *value)
{
    if (!value)
        return NULLP("value");
    switch (type) {
    case MAJOR_VERSION: *value = CUDNN_MAJOR; break;
    case MINOR_VERSION: *value = CUDNN_MINOR; break;
    case PATCH_LEVEL: *value = CUDNN_PATCHLEVEL; break;
    default: return FAIL(CUDNN_STATUS_BAD_PARAM, "cudnnGetProperty: bad type %d", (int)type);
    }
    return CUDNN_STATUS_SUCCESS;
}

const char *cudnnGetErrorString(cudnnStatus_t status)
{
    switch (status) {
#define S(x) case x: return #x;
    S(CUDNN_STATUS_SUCCESS)
    S(CUDNN_STATUS_NOT_INITIALIZED)
    S(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH)
    S(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH)
    S(CUDNN_STATUS_DEPRECATED)
    S(CUDNN_STATUS_LICENSE_ERROR)
    S(CUDNN_STATUS_RUNTIME_IN_PROGRESS)
    S(CUDNN_STATUS_RUNTIME_FP_OVERFLOW)
    S(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED)
    S(CUDNN_STATUS_BAD_PARAM)
    S(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
    S(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
    S(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
    S(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND)
    S(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT)
    S(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH)
    S(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH)
    S(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES)
    S(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE)
    S(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH)
    S(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE)
    S(CUDNN_STATUS_NOT_SUPPORTED)
    S(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN)
    S(CUDNN_STATUS_NOT_SUPPORTED_SHAPE)
    S(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE)
    S(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT)
    S(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER)
    S(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART)
    S(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH)
    S(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING)
    S(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE)
    S(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT)
    S(CUDNN_STATUS_NOT_SUPPORTED_PADDING)
    S(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM)
    S(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API)
    S(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE)
    S(CUDNN_STATUS_INTERNAL_ERROR)
    S(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED)
    S(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE)
    S(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
    S(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
    S(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM)
    S(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED)
    S(CUDNN_STATUS_EXECUTION_FAILED)
    S(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
    S(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS)
    S(CUDNN_STATUS_EXECUTION_FAILED_CUDART)
    S(CUDNN_STATUS_EXECUTION_FAILED_CURAND)
#undef S
    case 2001: return "CUDNN_STATUS_INVALID_VALUE";
    }
    return "CUDNN_UNKNOWN_STATUS_FOUND";
}

void cudnnGetLastErrorString(char *message, size_t max_size)
{
    if (!message || !max_size)
        return;
    snprintf(message, max_size, "%s", t_last_err);
    t_last_err[0] = '\0';
}

/* ---- handles ------------------------------------------------------------------- */

/* Live handles, so a destroyed or foreign handle is refused without being
 * dereferenced. */
static sim_live_t g_handles = SIM_LIVE_INIT;

cudnnStatus_t sim_cudnn_check_handle(cudnnHandle_t h)
{
    if (!h)
        return FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "handle is NULL");
    if (!sim_live_has(&g_handles, h))
        return FAIL(CUDNN_STATUS_BAD_PARAM, "handle %p is not a live cuDNN handle", (void *)h);
    return CUDNN_STATUS_SUCCESS;
}

int sim_cudnn_handle_is(cudnnHandle_t h, uint64_t serial)
{
    return h && sim_live_has(&g_handles, h) && h->serial == serial;
}

int sim_cudnn_ctx_on(CUcontext ctx, const CUuuid *uuid)
{
    const simdrv_t *d = simdrv_get();
    CUcontext prev = NULL;
    if (!d || !ctx || d->cuCtxGetCurrent(&prev) != CUDA_SUCCESS)
        return 0;
    int on = (prev == ctx || d->cuCtxSetCurrent(ctx) == CUDA_SUCCESS) && simdrv_bound_here(uuid);
    if (prev != ctx)
        d->cuCtxSetCurrent(prev);
    return on;
}

/* The module of each context (defined with the jobs, below). */
static sim_kmods_t g_kmods;

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle)
{
    if (!handle)
        return NULLP("handle");
    const simdrv_t *d = simdrv_get();
    if (!d)
        return FAIL(CUDNN_STATUS_NOT_INITIALIZED, "cudnnCreate: %s", simdrv_error());
    if (d->cuInit(0) != CUDA_SUCCESS)
        return FAIL(CUDNN_STATUS_NOT_INITIALIZED, "cudnnCreate: cuInit failed");
    CUcontext ctx = NULL;
    if (d->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
        return FAIL(CUDNN_STATUS_NOT_INITIALIZED, "cudnnCreate: no CUDA context");
    if (!ctx) { /* like the runtime: the primary context of the first device */
        CUdevice dev;
        if (d->cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
            d->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
            d->cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
            return FAIL(CUDNN_STATUS_NOT_INITIALIZED, "cudnnCreate: no usable CUDA device");
    }
    simdrv_devinfo_t info;
    if (simdrv_current_device(&info) != 0)
        return FAIL(CUDNN_STATUS_NOT_INITIALIZED, "cudnnCreate: cannot query the device");
    /* cuDNN 9 for CUDA 13 has code for sm_75 and later only (as the CUDA 13
     * toolkit itself) */
    if (info.cc_major * 10 + info.cc_minor < 75)
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH,
                    "cudnnCreate: compute capability %d.%d is not supported", info.cc_major,
                    info.cc_minor);
    const sim_kmod_t *km = NULL;
    CUresult r = sim_kmod_get(&g_kmods, ctx, &km);
    if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE)
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH,
                    "cudnnCreate: the library's kernels do not load on this device (%d)", (int)r);
    if (r != CUDA_SUCCESS)
        return FAIL(CUDNN_STATUS_NOT_INITIALIZED, "cudnnCreate: cannot load the kernels (%d)",
                    (int)r);
    struct cudnnContext *h = calloc(1, sizeof(*h));
    if (!h)
        return FAIL(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "cudnnCreate: no memory");
    h->km = km;
    h->magic = SIM_HANDLE_MAGIC;
    h->ctx = ctx;
    h->stream = NULL;
    h->ordinal = info.ordinal;
    h->uuid = info.uuid;
    static uint64_t serials;
    h->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
    h->dev.cc_major = info.cc_major;
    h->dev.cc_minor = info.cc_minor;
    h->dev.sm_count = info.sm_count;
    snprintf(h->dev.model, sizeof(h->dev.model), "%s", info.model);
    if (sim_live_add(&g_handles, h) != 0) {
        free(h);
        return FAIL(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "cudnnCreate: no memory");
    }
    *handle = h;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle)
{
    if (!handle)
        return NULLP("handle");
    if (!sim_live_remove(&g_handles, handle))
        return FAIL(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: %p is not a live handle", (void *)handle);
    /* Queued kernels hold copies of their parameters: nothing to wait for. */
    handle->magic = 0;
    free(handle);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    handle->stream = (CUstream)streamId;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t *streamId)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    if (!streamId)
        return NULLP("streamId");
    *streamId = (cudaStream_t)handle->stream;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGraphVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnOpsVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnCnnVersionCheck(void) { return CUDNN_STATUS_SUCCESS; }

/* ---- jobs: kernels of the library's module on the stream ---------------------- */

/* sim/cudnn/kernels.cu built by nvcc, in this library's .nv_fatbin section
 * (fatbin_blob.c). */
extern const unsigned char simcudnn_fatbin[];

static const char *const g_kname[SIMCUDNN_K_COUNT] = {
#define SIMCUDNN_K_NAME(id, name) name,
    SIMCUDNN_KERNELS(SIMCUDNN_K_NAME)
#undef SIMCUDNN_K_NAME
};

/* The module of each context (sim/common/kmod.h). */
static sim_kmods_t g_kmods = SIM_KMODS_INIT(simcudnn_fatbin, g_kname, SIMCUDNN_K_COUNT);

static unsigned int grid_for(long long n)
{
    long long g = n > 0 ? (n + SIMCUDNN_THREADS - 1) / SIMCUDNN_THREADS : 1;
    return g > (1 << 20) ? 1u << 20 : (unsigned int)g;
}

static long long elems(const sim_t4_t *v)
{
    return (long long)v->n * v->c * v->h * v->w;
}

static CUresult launch(cudnnHandle_t h, CUstream s, int k, long long n, void **args)
{
    return simdrv_get()->cuLaunchKernel(h->km->fn[k], grid_for(n), 1, 1, SIMCUDNN_THREADS, 1, 1,
                                        0, s, args, NULL);
}

/* The beta of an accumulation by atomics: out = beta * out first. */
static CUresult fill_beta(cudnnHandle_t h, CUstream s, sim_t4_t v, float beta, void *out)
{
    int mode = SIMCUDNN_FILL_BETA;
    void *args[] = {&v, &mode, &beta, &out};
    return launch(h, s, SIMCUDNN_K_FILL, elems(&v), args);
}

/* Launches the kernels of job j on stream s. */
static CUresult launch_job(cudnnHandle_t h, CUstream s, const sim_job_t *j)
{
    sim_job_t c = *j; /* the kernels' parameters are copied at the launch */
    int order = 0, scheme = 0;
    CUresult r;
    switch (c.kind) {
    case SIM_JOB_CONV_FWD: {
        sim_conv_fold_params(SIM_DIR_FWD, c.algo, c.conv.arch, &order, &scheme);
        void *args[] = {&c.conv, &order, &scheme, &c.alpha, &c.beta, &c.in[0], &c.in[1], &c.out};
        return launch(h, s, SIMCUDNN_K_CONV_FWD, elems(&c.conv.y), args);
    }
    case SIM_JOB_CONV_BWD_DATA:
        if (c.algo == 0) { /* nondeterministic: float atomics */
            r = fill_beta(h, s, c.conv.x, c.beta, c.out);
            void *args[] = {&c.conv, &c.alpha, &c.in[0], &c.in[1], &c.out};
            return r ? r : launch(h, s, SIMCUDNN_K_CONV_BWD_DATA_ATOMIC, elems(&c.conv.y), args);
        } else {
            sim_conv_fold_params(SIM_DIR_BWD_DATA, c.algo, c.conv.arch, &order, &scheme);
            void *args[] = {&c.conv, &order, &scheme, &c.alpha, &c.beta, &c.in[0], &c.in[1],
                            &c.out};
            return launch(h, s, SIMCUDNN_K_CONV_BWD_DATA, elems(&c.conv.x), args);
        }
    case SIM_JOB_CONV_BWD_FILTER:
        if (c.algo == 0 || c.algo == 3) { /* nondeterministic: float atomics */
            int rows = c.algo == 0 ? 1 : 2;
            r = fill_beta(h, s, c.conv.w, c.beta, c.out);
            void *args[] = {&c.conv, &rows, &c.alpha, &c.in[0], &c.in[1], &c.out};
            long long units = (long long)c.conv.x.n * ((c.conv.y.h + rows - 1) / rows);
            return r ? r : launch(h, s, SIMCUDNN_K_CONV_BWD_FILTER_ATOMIC,
                                  units * elems(&c.conv.w), args);
        } else {
            sim_conv_fold_params(SIM_DIR_BWD_FILTER, c.algo, c.conv.arch, &order, &scheme);
            void *args[] = {&c.conv, &scheme, &c.alpha, &c.beta, &c.in[0], &c.in[1], &c.out};
            return launch(h, s, SIMCUDNN_K_CONV_BWD_FILTER, elems(&c.conv.w), args);
        }
    case SIM_JOB_BWD_BIAS: {
        void *args[] = {&c.v[0], &c.v[1], &c.alpha, &c.beta, &c.in[0], &c.out};
        return launch(h, s, SIMCUDNN_K_BWD_BIAS, c.v[0].c, args);
    }
    case SIM_JOB_POOL_FWD: {
        void *args[] = {&c.pool, &c.alpha, &c.beta, &c.in[0], &c.out};
        return launch(h, s, SIMCUDNN_K_POOL_FWD, elems(&c.pool.y), args);
    }
    case SIM_JOB_POOL_BWD:
        /* in: y, dy, x; v: dy view, dx view */
        if (c.pool.mode == CUDNN_POOLING_MAX) { /* nondeterministic: float atomics */
            r = fill_beta(h, s, c.v[1], c.beta, c.out);
            void *args[] = {&c.pool, &c.v[0], &c.v[1], &c.alpha, &c.in[1], &c.in[2], &c.out};
            return r ? r : launch(h, s, SIMCUDNN_K_POOL_BWD_ATOMIC, elems(&c.pool.y), args);
        } else {
            void *args[] = {&c.pool, &c.v[0], &c.v[1], &c.alpha, &c.beta, &c.in[1], &c.in[2],
                            &c.out};
            return launch(h, s, SIMCUDNN_K_POOL_BWD, elems(&c.pool.x), args);
        }
    case SIM_JOB_ACT_FWD: {
        void *args[] = {&c.act_mode, &c.coef, &c.v[0], &c.v[1], &c.alpha, &c.beta, &c.in[0],
                        &c.out};
        return launch(h, s, SIMCUDNN_K_ACT_FWD, elems(&c.v[0]), args);
    }
    case SIM_JOB_ACT_BWD: {
        void *args[] = {&c.act_mode, &c.coef, &c.v[0], &c.v[1], &c.v[2], &c.v[3], &c.alpha,
                        &c.beta, &c.in[0], &c.in[1], &c.in[2], &c.out};
        return launch(h, s, SIMCUDNN_K_ACT_BWD, elems(&c.v[2]), args);
    }
    case SIM_JOB_ADD: {
        void *args[] = {&c.v[0], &c.v[1], &c.alpha, &c.beta, &c.in[0], &c.out};
        return launch(h, s, SIMCUDNN_K_ADD, elems(&c.v[1]), args);
    }
    case SIM_JOB_SET:
    case SIM_JOB_SCALE: {
        int mode = c.kind == SIM_JOB_SET ? SIMCUDNN_FILL_SET : SIMCUDNN_FILL_SCALE;
        void *args[] = {&c.v[0], &mode, &c.alpha, &c.out};
        return launch(h, s, SIMCUDNN_K_FILL, elems(&c.v[0]), args);
    }
    case SIM_JOB_CONVERT: {
        simbk_convert_t a;
        memset(&a, 0, sizeof(a));
        a.src = c.in[0];
        a.dst = c.out;
        a.st = c.types[0];
        a.dt = c.types[1];
        a.n = c.v[0].n, a.c = c.v[0].c, a.h = c.v[0].h, a.w = c.v[0].w;
        a.ss[0] = c.v[0].sn, a.ss[1] = c.v[0].sc, a.ss[2] = c.v[0].sh, a.ss[3] = c.v[0].sw;
        a.ds[0] = c.v[1].sn, a.ds[1] = c.v[1].sc, a.ds[2] = c.v[1].sh, a.ds[3] = c.v[1].sw;
        a.total = elems(&c.v[0]);
        void *args[] = {&a};
        return launch(h, s, SIMCUDNN_K_CONVERT, a.total, args);
    }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

cudnnStatus_t sim_cudnn_enqueue(cudnnHandle_t h, const sim_job_t *job)
{
    const simdrv_t *d = simdrv_get();
    if (!d)
        return FAIL(CUDNN_STATUS_NOT_INITIALIZED, "%s", simdrv_error());
    CUcontext prev = NULL;
    d->cuCtxGetCurrent(&prev);
    /* the handle works in its context, on the device it was created on
     * (its kernels and heuristics are that device's): a destroyed context
     * or another device behind it is a driver failure (README) */
    int here = (prev == h->ctx || d->cuCtxSetCurrent(h->ctx) == CUDA_SUCCESS) &&
               simdrv_bound_here(&h->uuid);
    CUresult r = here ? launch_job(h, h->stream, job) : CUDA_ERROR_INVALID_CONTEXT;
    if (prev != h->ctx)
        d->cuCtxSetCurrent(prev);
    if (!here)
        return FAIL(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER,
                    "the handle's context is gone or its device changed");
    if (r != CUDA_SUCCESS)
        return FAIL(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER, "cuLaunchKernel failed (%d)", (int)r);
    return CUDNN_STATUS_SUCCESS;
}

/* ---- tensor descriptors ------------------------------------------------------------ */

static int dtype_valid(cudnnDataType_t t)
{
    return (int)t >= CUDNN_DATA_FLOAT && (int)t <= CUDNN_DATA_COMPLEX_FP64;
}

HEAD_OK(cudnnTensorStruct);
HEAD_OK(cudnnFilterStruct);
HEAD_OK(cudnnConvolutionStruct);
HEAD_OK(cudnnPoolingStruct);
HEAD_OK(cudnnActivationStruct);

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc)
{
    return desc_create(tensorDesc, sizeof(**tensorDesc), SIM_TENSOR_MAGIC, "tensorDesc");
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc)
{
    return desc_destroy(tensorDesc, SIM_TENSOR_MAGIC, "tensor");
}

static cudnnStatus_t tensor_set(cudnnTensorDescriptor_t t, cudnnDataType_t dt, const int dims[4],
                                const int strides[4])
{
    cudnnStatus_t st = desc_check(t, SIM_TENSOR_MAGIC, 0, "tensorDesc", "tensor");
    if (st)
        return st;
    if (!dtype_valid(dt))
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad data type %d", (int)dt);
    int64_t elems = 1;
    for (int i = 0; i < 4; i++) {
        if (dims[i] <= 0 || strides[i] <= 0)
            return FAIL(CUDNN_STATUS_BAD_PARAM, "dimension %d: size %d stride %d", i, dims[i],
                        strides[i]);
        elems += (int64_t)(dims[i] - 1) * strides[i];
        if (elems > INT_MAX)
            return FAIL(CUDNN_STATUS_BAD_PARAM, "tensor too large");
    }
    t->dtype = dt;
    t->nbdims = 4;
    memcpy(t->dims, dims, sizeof(t->dims));
    memcpy(t->strides, strides, sizeof(t->strides));
    t->set = 1;
    return CUDNN_STATUS_SUCCESS;
}

static void packed_strides(cudnnTensorFormat_t f, const int d[4], int s[4])
{
    if (f == CUDNN_TENSOR_NHWC) {
        s[1] = 1;
        s[3] = d[1];
        s[2] = d[3] * d[1];
        s[0] = d[2] * d[3] * d[1];
    } else {
        s[3] = 1;
        s[2] = d[3];
        s[1] = d[2] * d[3];
        s[0] = d[1] * d[2] * d[3];
    }
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc,
                                         cudnnTensorFormat_t format, cudnnDataType_t dataType,
                                         int n, int c, int h, int w)
{
    if (format == CUDNN_TENSOR_NCHW_VECT_C)
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "CUDNN_TENSOR_NCHW_VECT_C is not supported");
    if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad tensor format %d", (int)format);
    int d[4] = {n, c, h, w}, s[4];
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad tensor size %dx%dx%dx%d", n, c, h, w);
    if ((int64_t)n * c * h * w > INT_MAX)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "tensor too large");
    packed_strides(format, d, s);
    return tensor_set(tensorDesc, dataType, d, s);
}

cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t tensorDesc,
                                           cudnnDataType_t dataType, int n, int c, int h, int w,
                                           int nStride, int cStride, int hStride, int wStride)
{
    int d[4] = {n, c, h, w}, s[4] = {nStride, cStride, hStride, wStride};
    return tensor_set(tensorDesc, dataType, d, s);
}

cudnnStatus_t cudnnGetTensor4dDescriptor(const cudnnTensorDescriptor_t tensorDesc,
                                         cudnnDataType_t *dataType, int *n, int *c, int *h,
                                         int *w, int *nStride, int *cStride, int *hStride,
                                         int *wStride)
{
    cudnnStatus_t st = desc_check(tensorDesc, SIM_TENSOR_MAGIC, 1, "tensorDesc", "tensor");
    if (st)
        return st;
    if (!dataType || !n || !c || !h || !w || !nStride || !cStride || !hStride || !wStride)
        return NULLP("an output");
    *dataType = tensorDesc->dtype;
    *n = tensorDesc->dims[0];
    *c = tensorDesc->dims[1];
    *h = tensorDesc->dims[2];
    *w = tensorDesc->dims[3];
    *nStride = tensorDesc->strides[0];
    *cStride = tensorDesc->strides[1];
    *hStride = tensorDesc->strides[2];
    *wStride = tensorDesc->strides[3];
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t tensorDesc,
                                         cudnnDataType_t dataType, int nbDims, const int dimA[],
                                         const int strideA[])
{
    if (!dimA || !strideA)
        return NULLP("dimA/strideA");
    if (nbDims < 3 || nbDims > CUDNN_DIM_MAX)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "nbDims %d out of range", nbDims);
    if (nbDims != 4)
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "only 4-d tensors are supported (nbDims %d)", nbDims);
    return tensor_set(tensorDesc, dataType, dimA, strideA);
}

cudnnStatus_t cudnnSetTensorNdDescriptorEx(cudnnTensorDescriptor_t tensorDesc,
                                           cudnnTensorFormat_t format, cudnnDataType_t dataType,
                                           int nbDims, const int dimA[])
{
    if (!dimA)
        return NULLP("dimA");
    if (nbDims < 3 || nbDims > CUDNN_DIM_MAX)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "nbDims %d out of range", nbDims);
    if (nbDims != 4)
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "only 4-d tensors are supported (nbDims %d)", nbDims);
    return cudnnSetTensor4dDescriptor(tensorDesc, format, dataType, dimA[0], dimA[1], dimA[2],
                                      dimA[3]);
}

cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t tensorDesc,
                                         int nbDimsRequested, cudnnDataType_t *dataType,
                                         int *nbDims, int dimA[], int strideA[])
{
    cudnnStatus_t st = desc_check(tensorDesc, SIM_TENSOR_MAGIC, 1, "tensorDesc", "tensor");
    if (st)
        return st;
    if (nbDimsRequested < 0)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "nbDimsRequested < 0");
    if (!dataType || !nbDims || (nbDimsRequested > 0 && (!dimA || !strideA)))
        return NULLP("an output");
    *dataType = tensorDesc->dtype;
    *nbDims = 4;
    for (int i = 0; i < nbDimsRequested && i < 4; i++) {
        dimA[i] = tensorDesc->dims[i];
        strideA[i] = tensorDesc->strides[i];
    }
    return CUDNN_STATUS_SUCCESS;
}

static size_t dtype_size(cudnnDataType_t t)
{
    switch (t) {
    case CUDNN_DATA_DOUBLE: case CUDNN_DATA_INT64: case CUDNN_DATA_COMPLEX_FP32: return 8;
    case CUDNN_DATA_COMPLEX_FP64: return 16;
    case CUDNN_DATA_HALF: case CUDNN_DATA_BFLOAT16: return 2;
    case CUDNN_DATA_INT8: case CUDNN_DATA_UINT8: case CUDNN_DATA_BOOLEAN:
    case CUDNN_DATA_FP8_E4M3: case CUDNN_DATA_FP8_E5M2: case CUDNN_DATA_FP8_E8M0: return 1;
    default: return 4;
    }
}

cudnnStatus_t cudnnGetTensorSizeInBytes(const cudnnTensorDescriptor_t tensorDesc, size_t *size)
{
    cudnnStatus_t st = desc_check(tensorDesc, SIM_TENSOR_MAGIC, 1, "tensorDesc", "tensor");
    if (st)
        return st;
    if (!size)
        return NULLP("size");
    size_t span = 1;
    for (int i = 0; i < 4; i++)
        span += (size_t)(tensorDesc->dims[i] - 1) * (size_t)tensorDesc->strides[i];
    *size = span * dtype_size(tensorDesc->dtype);
    return CUDNN_STATUS_SUCCESS;
}

/* ---- filter descriptors ---------------------------------------------------------- */

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc)
{
    return desc_create(filterDesc, sizeof(**filterDesc), SIM_FILTER_MAGIC, "filterDesc");
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc)
{
    return desc_destroy(filterDesc, SIM_FILTER_MAGIC, "filter");
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc,
                                         cudnnDataType_t dataType, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w)
{
    cudnnStatus_t st = desc_check(filterDesc, SIM_FILTER_MAGIC, 0, "filterDesc", "filter");
    if (st)
        return st;
    if (!dtype_valid(dataType))
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad data type %d", (int)dataType);
    if (format == CUDNN_TENSOR_NCHW_VECT_C)
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "CUDNN_TENSOR_NCHW_VECT_C is not supported");
    if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad filter format %d", (int)format);
    if (k <= 0 || c <= 0 || h <= 0 || w <= 0 || (int64_t)k * c * h * w > INT_MAX)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad filter size %dx%dx%dx%d", k, c, h, w);
    filterDesc->dtype = dataType;
    filterDesc->format = format;
    filterDesc->k = k;
    filterDesc->c = c;
    filterDesc->h = h;
    filterDesc->w = w;
    filterDesc->set = 1;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetFilter4dDescriptor(const cudnnFilterDescriptor_t filterDesc,
                                         cudnnDataType_t *dataType, cudnnTensorFormat_t *format,
                                         int *k, int *c, int *h, int *w)
{
    cudnnStatus_t st = desc_check(filterDesc, SIM_FILTER_MAGIC, 1, "filterDesc", "filter");
    if (st)
        return st;
    if (!dataType || !format || !k || !c || !h || !w)
        return NULLP("an output");
    *dataType = filterDesc->dtype;
    *format = filterDesc->format;
    *k = filterDesc->k;
    *c = filterDesc->c;
    *h = filterDesc->h;
    *w = filterDesc->w;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t filterDesc,
                                         cudnnDataType_t dataType, cudnnTensorFormat_t format,
                                         int nbDims, const int filterDimA[])
{
    if (!filterDimA)
        return NULLP("filterDimA");
    if (nbDims < 3 || nbDims > CUDNN_DIM_MAX)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "nbDims %d out of range", nbDims);
    if (nbDims != 4)
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "only 4-d filters are supported");
    return cudnnSetFilter4dDescriptor(filterDesc, dataType, format, filterDimA[0], filterDimA[1],
                                      filterDimA[2], filterDimA[3]);
}

cudnnStatus_t cudnnGetFilterNdDescriptor(const cudnnFilterDescriptor_t filterDesc,
                                         int nbDimsRequested, cudnnDataType_t *dataType,
                                         cudnnTensorFormat_t *format, int *nbDims,
                                         int filterDimA[])
{
    int d[4];
    if (nbDimsRequested < 0)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "nbDimsRequested < 0");
    if (!nbDims || (nbDimsRequested > 0 && !filterDimA))
        return NULLP("an output");
    cudnnStatus_t st = cudnnGetFilter4dDescriptor(filterDesc, dataType, format, &d[0], &d[1],
                                                  &d[2], &d[3]);
    if (st)
        return st;
    *nbDims = 4;
    for (int i = 0; i < nbDimsRequested && i < 4; i++)
        filterDimA[i] = d[i];
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetFilterSizeInBytes(const cudnnFilterDescriptor_t filterDesc, size_t *size)
{
    cudnnStatus_t st = desc_check(filterDesc, SIM_FILTER_MAGIC, 1, "filterDesc", "filter");
    if (st)
        return st;
    if (!size)
        return NULLP("size");
    *size = (size_t)filterDesc->k * filterDesc->c * filterDesc->h * filterDesc->w *
            dtype_size(filterDesc->dtype);
    return CUDNN_STATUS_SUCCESS;
}

/* ---- convolution descriptors ------------------------------------------------------- */

static cudnnStatus_t conv_check(const struct cudnnConvolutionStruct *c, int need_set)
{
    return desc_check(c, SIM_CONV_MAGIC, need_set, "convDesc", "convolution");
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc)
{
    cudnnStatus_t st = desc_create(convDesc, sizeof(**convDesc), SIM_CONV_MAGIC, "convDesc");
    if (st)
        return st;
    struct cudnnConvolutionStruct *c = *convDesc;
    c->str_h = c->str_w = c->dil_h = c->dil_w = 1;
    c->groups = 1;
    c->mode = CUDNN_CROSS_CORRELATION;
    c->compute = CUDNN_DATA_FLOAT;
    c->math = CUDNN_DEFAULT_MATH;
    *convDesc = c;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc)
{
    return desc_destroy(convDesc, SIM_CONV_MAGIC, "convolution");
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc, int pad_h,
                                              int pad_w, int u, int v, int dilation_h,
                                              int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType)
{
    cudnnStatus_t st = conv_check(convDesc, 0);
    if (st)
        return st;
    if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 || dilation_w <= 0)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad padding %d,%d stride %d,%d dilation %d,%d",
                    pad_h, pad_w, u, v, dilation_h, dilation_w);
    if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad convolution mode %d", (int)mode);
    if (!dtype_valid(computeType))
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad compute type %d", (int)computeType);
    convDesc->pad_h = pad_h;
    convDesc->pad_w = pad_w;
    convDesc->str_h = u;
    convDesc->str_w = v;
    convDesc->dil_h = dilation_h;
    convDesc->dil_w = dilation_w;
    convDesc->mode = mode;
    convDesc->compute = computeType;
    convDesc->set = 1;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolution2dDescriptor(const cudnnConvolutionDescriptor_t convDesc,
                                              int *pad_h, int *pad_w, int *u, int *v,
                                              int *dilation_h, int *dilation_w,
                                              cudnnConvolutionMode_t *mode,
                                              cudnnDataType_t *computeType)
{
    cudnnStatus_t st = conv_check(convDesc, 1);
    if (st)
        return st;
    if (!pad_h || !pad_w || !u || !v || !dilation_h || !dilation_w || !mode || !computeType)
        return NULLP("an output");
    *pad_h = convDesc->pad_h;
    *pad_w = convDesc->pad_w;
    *u = convDesc->str_h;
    *v = convDesc->str_w;
    *dilation_h = convDesc->dil_h;
    *dilation_w = convDesc->dil_w;
    *mode = convDesc->mode;
    *computeType = convDesc->compute;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t convDesc,
                                              int arrayLength, const int padA[],
                                              const int filterStrideA[], const int dilationA[],
                                              cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType)
{
    if (!padA || !filterStrideA || !dilationA)
        return NULLP("an array");
    if (arrayLength <= 0 || arrayLength > CUDNN_DIM_MAX - 2)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "arrayLength %d", arrayLength);
    if (arrayLength != 2)
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "only 2-d convolutions are supported");
    return cudnnSetConvolution2dDescriptor(convDesc, padA[0], padA[1], filterStrideA[0],
                                           filterStrideA[1], dilationA[0], dilationA[1], mode,
                                           computeType);
}

cudnnStatus_t cudnnGetConvolutionNdDescriptor(const cudnnConvolutionDescriptor_t convDesc,
                                              int arrayLengthRequested, int *arrayLength,
                                              int padA[], int strideA[], int dilationA[],
                                              cudnnConvolutionMode_t *mode,
                                              cudnnDataType_t *computeType)
{
    cudnnStatus_t st = conv_check(convDesc, 1);
    if (st)
        return st;
    if (arrayLengthRequested < 0)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "arrayLengthRequested < 0");
    if (!arrayLength || !mode || !computeType ||
        (arrayLengthRequested > 0 && (!padA || !strideA || !dilationA)))
        return NULLP("an output");
    *arrayLength = 2;
    int pa[2] = {convDesc->pad_h, convDesc->pad_w}, sa[2] = {convDesc->str_h, convDesc->str_w};
    int da[2] = {convDesc->dil_h, convDesc->dil_w};
    for (int i = 0; i < arrayLengthRequested && i < 2; i++) {
        padA[i] = pa[i];
        strideA[i] = sa[i];
        dilationA[i] = da[i];
    }
    *mode = convDesc->mode;
    *computeType = convDesc->compute;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc, int groupCount)
{
    cudnnStatus_t st = conv_check(convDesc, 0);
    if (st)
        return st;
    if (groupCount < 1)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "group count %d", groupCount);
    convDesc->groups = groupCount;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc, int *groupCount)
{
    cudnnStatus_t st = conv_check(convDesc, 0);
    if (st)
        return st;
    if (!groupCount)
        return NULLP("groupCount");
    *groupCount = convDesc->groups;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
                                          cudnnMathType_t mathType)
{
    cudnnStatus_t st = conv_check(convDesc, 0);
    if (st)
        return st;
    if ((int)mathType < CUDNN_DEFAULT_MATH || (int)mathType > CUDNN_FMA_MATH)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad math type %d", (int)mathType);
    convDesc->math = mathType;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
                                          cudnnMathType_t *mathType)
{
    cudnnStatus_t st = conv_check(convDesc, 0);
    if (st)
        return st;
    if (!mathType)
        return NULLP("mathType");
    *mathType = convDesc->math;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionReorderType(cudnnConvolutionDescriptor_t convDesc,
                                             cudnnReorderType_t reorderType)
{
    cudnnStatus_t st = conv_check(convDesc, 0);
    if (st)
        return st;
    if (reorderType != CUDNN_DEFAULT_REORDER && reorderType != CUDNN_NO_REORDER)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad reorder type %d", (int)reorderType);
    convDesc->reorder = reorderType;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionReorderType(cudnnConvolutionDescriptor_t convDesc,
                                             cudnnReorderType_t *reorderType)
{
    cudnnStatus_t st = conv_check(convDesc, 0);
    if (st)
        return st;
    if (!reorderType)
        return NULLP("reorderType");
    *reorderType = convDesc->reorder;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t tensor_check(const struct cudnnTensorStruct *t, const char *what)
{
    return desc_check(t, SIM_TENSOR_MAGIC, 1, what, "tensor");
}

static cudnnStatus_t filter_check(const struct cudnnFilterStruct *f)
{
    return desc_check(f, SIM_FILTER_MAGIC, 1, "w", "filter");
}

static void tensor_view(const struct cudnnTensorStruct *t, sim_t4_t *v)
{
    v->n = t->dims[0];
    v->c = t->dims[1];
    v->h = t->dims[2];
    v->w = t->dims[3];
    v->sn = t->strides[0];
    v->sc = t->strides[1];
    v->sh = t->strides[2];
    v->sw = t->strides[3];
}

static void filter_view(const struct cudnnFilterStruct *f, sim_t4_t *v)
{
    int d[4] = {f->k, f->c, f->h, f->w}, s[4];
    packed_strides(f->format, d, s);
    v->n = f->k;
    v->c = f->c;
    v->h = f->h;
    v->w = f->w;
    v->sn = s[0];
    v->sc = s[1];
    v->sh = s[2];
    v->sw = s[3];
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
                                                    const cudnnTensorDescriptor_t inputTensorDesc,
                                                    const cudnnFilterDescriptor_t filterDesc,
                                                    int *n, int *c, int *h, int *w)
{
    cudnnStatus_t st;
    if ((st = conv_check(convDesc, 1)) || (st = tensor_check(inputTensorDesc, "input")) ||
        (st = filter_check(filterDesc)))
        return st;
    if (!n || !c || !h || !w)
        return NULLP("an output");
    const struct cudnnTensorStruct *x = inputTensorDesc;
    if (x->dims[1] != filterDesc->c * convDesc->groups || filterDesc->k % convDesc->groups)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "input channels %d != filter channels %d x groups %d",
                    x->dims[1], filterDesc->c, convDesc->groups);
    int oh = sim_conv_out_dim(x->dims[2], convDesc->pad_h, filterDesc->h, convDesc->dil_h,
                              convDesc->str_h);
    int ow = sim_conv_out_dim(x->dims[3], convDesc->pad_w, filterDesc->w, convDesc->dil_w,
                              convDesc->str_w);
    if (oh <= 0 || ow <= 0)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "filter larger than the padded input");
    *n = x->dims[0];
    *c = filterDesc->k;
    *h = oh;
    *w = ow;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
                                                    const cudnnTensorDescriptor_t inputTensorDesc,
                                                    const cudnnFilterDescriptor_t filterDesc,
                                                    int nbDims, int tensorOuputDimA[])
{
    if (!tensorOuputDimA)
        return NULLP("tensorOuputDimA");
    if (nbDims != 4)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "nbDims %d (only 4 supported)", nbDims);
    return cudnnGetConvolution2dForwardOutputDim(convDesc, inputTensorDesc, filterDesc,
                                                 &tensorOuputDimA[0], &tensorOuputDimA[1],
                                                 &tensorOuputDimA[2], &tensorOuputDimA[3]);
}

cudnnStatus_t sim_cudnn_conv_problem(const cudnnTensorDescriptor_t xd,
                                     const cudnnFilterDescriptor_t wd,
                                     const cudnnConvolutionDescriptor_t cd,
                                     const cudnnTensorDescriptor_t yd, sim_conv_t *p)
{
    cudnnStatus_t st;
    if ((st = tensor_check(xd, "x")) || (st = filter_check(wd)) || (st = conv_check(cd, 1)) ||
        (st = tensor_check(yd, "y")))
        return st;
    if (xd->dtype != CUDNN_DATA_FLOAT || wd->dtype != CUDNN_DATA_FLOAT ||
        yd->dtype != CUDNN_DATA_FLOAT)
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "only CUDNN_DATA_FLOAT tensors are supported");
    if (cd->compute != CUDNN_DATA_FLOAT)
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "only CUDNN_DATA_FLOAT compute is supported");
    int n, c, h, w;
    if ((st = cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &n, &c, &h, &w)))
        return st;
    if (yd->dims[0] != n || yd->dims[1] != c || yd->dims[2] != h || yd->dims[3] != w)
        return FAIL(CUDNN_STATUS_BAD_PARAM,
                    "output descriptor %dx%dx%dx%d does not match the convolution's %dx%dx%dx%d",
                    yd->dims[0], yd->dims[1], yd->dims[2], yd->dims[3], n, c, h, w);
    if ((long long)wd->h * wd->w > SIMCUDNN_MAX_TAPS)
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "filters of more than %d taps are not supported",
                    SIMCUDNN_MAX_TAPS);
    memset(p, 0, sizeof(*p));
    tensor_view(xd, &p->x);
    filter_view(wd, &p->w);
    tensor_view(yd, &p->y);
    p->pad_h = cd->pad_h;
    p->pad_w = cd->pad_w;
    p->str_h = cd->str_h;
    p->str_w = cd->str_w;
    p->dil_h = cd->dil_h;
    p->dil_w = cd->dil_w;
    p->groups = cd->groups;
    p->flip = cd->mode == CUDNN_CONVOLUTION;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- convolution operations ------------------------------------------------------ */

static const char *dir_name(int dir)
{
    return dir == SIM_DIR_FWD ? "forward" : dir == SIM_DIR_BWD_DATA ? "backward data"
                                                                    : "backward filter";
}

static cudnnStatus_t check_algo(int dir, int algo, const sim_conv_t *p, const void *ws,
                                size_t ws_size)
{
    if (algo < 0 || algo >= sim_conv_algo_count(dir))
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad %s algorithm %d", dir_name(dir), algo);
    if (!sim_conv_algo_supported(dir, algo, p))
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "%s algorithm %d does not support this problem",
                    dir_name(dir), algo);
    size_t need = sim_conv_workspace(dir, algo, p);
    if (ws_size < need)
        return FAIL(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT,
                    "%s algorithm %d needs %zu bytes of workspace, got %zu", dir_name(dir), algo,
                    need, ws_size);
    if (need && !ws)
        return FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "workspace is NULL");
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t conv_op(int dir, cudnnHandle_t handle, const void *alpha,
                             const cudnnTensorDescriptor_t xd, const cudnnFilterDescriptor_t wd,
                             const cudnnConvolutionDescriptor_t cd,
                             const cudnnTensorDescriptor_t yd, int algo, void *ws,
                             size_t ws_size, const void *beta, const void *in0, const void *in1,
                             void *out)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    if (!alpha || !beta)
        return NULLP("alpha/beta");
    sim_job_t j;
    memset(&j, 0, sizeof(j));
    if ((st = sim_cudnn_conv_problem(xd, wd, cd, yd, &j.conv)))
        return st;
    if (!in0 || !in1 || !out)
        return NULLP("a data pointer");
    if ((st = check_algo(dir, algo, &j.conv, ws, ws_size)))
        return st;
    j.conv.arch = handle->dev.cc_major * 10 + handle->dev.cc_minor;
    j.kind = dir == SIM_DIR_FWD        ? SIM_JOB_CONV_FWD
             : dir == SIM_DIR_BWD_DATA ? SIM_JOB_CONV_BWD_DATA
                                       : SIM_JOB_CONV_BWD_FILTER;
    j.algo = algo;
    j.alpha = *(const float *)alpha;
    j.beta = *(const float *)beta;
    j.in[0] = in0;
    j.in[1] = in1;
    j.out = out;
    return sim_cudnn_enqueue(handle, &j);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha,
                                      const cudnnTensorDescriptor_t xDesc, const void *x,
                                      const cudnnFilterDescriptor_t wDesc, const void *w,
                                      const cudnnConvolutionDescriptor_t convDesc,
                                      cudnnConvolutionFwdAlgo_t algo, void *workSpace,
                                      size_t workSpaceSizeInBytes, const void *beta,
                                      const cudnnTensorDescriptor_t yDesc, void *y)
{
    return conv_op(SIM_DIR_FWD, handle, alpha, xDesc, wDesc, convDesc, yDesc, (int)algo,
                   workSpace, workSpaceSizeInBytes, beta, x, w, y);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha,
                                           const cudnnFilterDescriptor_t wDesc, const void *w,
                                           const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *workSpace,
                                           size_t workSpaceSizeInBytes, const void *beta,
                                           const cudnnTensorDescriptor_t dxDesc, void *dx)
{
    return conv_op(SIM_DIR_BWD_DATA, handle, alpha, dxDesc, wDesc, convDesc, dyDesc, (int)algo,
                   workSpace, workSpaceSizeInBytes, beta, w, dy, dx);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void *x,
                                             const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo,
                                             void *workSpace, size_t workSpaceSizeInBytes,
                                             const void *beta,
                                             const cudnnFilterDescriptor_t dwDesc, void *dw)
{
    return conv_op(SIM_DIR_BWD_FILTER, handle, alpha, xDesc, dwDesc, convDesc, dyDesc,
                   (int)algo, workSpace, workSpaceSizeInBytes, beta, x, dy, dw);
}

static cudnnStatus_t float_tensor(const struct cudnnTensorStruct *t, const char *what)
{
    cudnnStatus_t st = tensor_check(t, what);
    if (st)
        return st;
    if (t->dtype != CUDNN_DATA_FLOAT)
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "%s: only CUDNN_DATA_FLOAT is supported", what);
    return CUDNN_STATUS_SUCCESS;
}

static int same_dims(const struct cudnnTensorStruct *a, const struct cudnnTensorStruct *b)
{
    return memcmp(a->dims, b->dims, sizeof(a->dims)) == 0;
}

cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t handle, const void *alpha,
                                           const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                           const void *beta, const cudnnTensorDescriptor_t dbDesc,
                                           void *db)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    if (!alpha || !beta)
        return NULLP("alpha/beta");
    if ((st = float_tensor(dyDesc, "dy")) || (st = float_tensor(dbDesc, "db")))
        return st;
    if (dbDesc->dims[0] != 1 || dbDesc->dims[1] != dyDesc->dims[1] || dbDesc->dims[2] != 1 ||
        dbDesc->dims[3] != 1)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "db must be 1x%dx1x1", dyDesc->dims[1]);
    if (!dy || !db)
        return NULLP("dy/db");
    sim_job_t j;
    memset(&j, 0, sizeof(j));
    j.kind = SIM_JOB_BWD_BIAS;
    tensor_view(dyDesc, &j.v[0]);
    tensor_view(dbDesc, &j.v[1]);
    j.alpha = *(const float *)alpha;
    j.beta = *(const float *)beta;
    j.in[0] = dy;
    j.out = db;
    return sim_cudnn_enqueue(handle, &j);
}

cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void *alpha,
                             const cudnnTensorDescriptor_t aDesc, const void *A, const void *beta,
                             const cudnnTensorDescriptor_t cDesc, void *C)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    if (!alpha || !beta)
        return NULLP("alpha/beta");
    if ((st = float_tensor(aDesc, "A")) || (st = float_tensor(cDesc, "C")))
        return st;
    for (int i = 0; i < 4; i++)
        if (aDesc->dims[i] != 1 && aDesc->dims[i] != cDesc->dims[i])
            return FAIL(CUDNN_STATUS_BAD_PARAM, "A dimension %d (%d) is neither 1 nor C's (%d)",
                        i, aDesc->dims[i], cDesc->dims[i]);
    if (!A || !C)
        return NULLP("A/C");
    sim_job_t j;
    memset(&j, 0, sizeof(j));
    j.kind = SIM_JOB_ADD;
    tensor_view(aDesc, &j.v[0]);
    tensor_view(cDesc, &j.v[1]);
    j.alpha = *(const float *)alpha;
    j.beta = *(const float *)beta;
    j.in[0] = A;
    j.out = C;
    return sim_cudnn_enqueue(handle, &j);
}

static cudnnStatus_t set_or_scale(cudnnHandle_t handle, const cudnnTensorDescriptor_t yDesc,
                                  void *y, const void *value, sim_job_kind_t kind)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    if ((st = float_tensor(yDesc, "y")))
        return st;
    if (!y || !value)
        return NULLP("y/value");
    sim_job_t j;
    memset(&j, 0, sizeof(j));
    j.kind = kind;
    tensor_view(yDesc, &j.v[0]);
    j.alpha = *(const float *)value;
    j.out = y;
    return sim_cudnn_enqueue(handle, &j);
}

cudnnStatus_t cudnnSetTensor(cudnnHandle_t handle, const cudnnTensorDescriptor_t yDesc, void *y,
                             const void *valuePtr)
{
    return set_or_scale(handle, yDesc, y, valuePtr, SIM_JOB_SET);
}

cudnnStatus_t cudnnScaleTensor(cudnnHandle_t handle, const cudnnTensorDescriptor_t yDesc, void *y,
                               const void *alpha)
{
    return set_or_scale(handle, yDesc, y, alpha, SIM_JOB_SCALE);
}

cudnnStatus_t cudnnQueryRuntimeError(cudnnHandle_t handle, cudnnStatus_t *rstatus,
                                     cudnnErrQueryMode_t mode, cudnnRuntimeTag_t *tag)
{
    (void)tag;
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    if (!rstatus)
        return NULLP("rstatus");
    if ((int)mode < CUDNN_ERRQUERY_RAWCODE || (int)mode > CUDNN_ERRQUERY_BLOCKING)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad query mode %d", (int)mode);
    *rstatus = CUDNN_STATUS_SUCCESS; /* no kernel reports runtime errors here */
    return CUDNN_STATUS_SUCCESS;
}

/* ---- pooling ------------------------------------------------------------------------ */

static cudnnStatus_t pool_check(const struct cudnnPoolingStruct *p, int need_set)
{
    return desc_check(p, SIM_POOL_MAGIC, need_set, "poolingDesc", "pooling");
}

cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t *poolingDesc)
{
    return desc_create(poolingDesc, sizeof(**poolingDesc), SIM_POOL_MAGIC, "poolingDesc");
}

cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t poolingDesc)
{
    return desc_destroy(poolingDesc, SIM_POOL_MAGIC, "pooling");
}

cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t poolingDesc,
                                          cudnnPoolingMode_t mode,
                                          cudnnNanPropagation_t maxpoolingNanOpt,
                                          int windowHeight, int windowWidth, int verticalPadding,
                                          int horizontalPadding, int verticalStride,
                                          int horizontalStride)
{
    cudnnStatus_t st = pool_check(poolingDesc, 0);
    if (st)
        return st;
    if ((int)mode < CUDNN_POOLING_MAX || (int)mode > CUDNN_POOLING_MAX_DETERMINISTIC)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad pooling mode %d", (int)mode);
    if (maxpoolingNanOpt != CUDNN_NOT_PROPAGATE_NAN && maxpoolingNanOpt != CUDNN_PROPAGATE_NAN)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad NaN option %d", (int)maxpoolingNanOpt);
    if (windowHeight <= 0 || windowWidth <= 0 || verticalPadding < 0 || horizontalPadding < 0 ||
        verticalStride <= 0 || horizontalStride <= 0)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad pooling window/padding/stride");
    poolingDesc->mode = mode;
    poolingDesc->nan = maxpoolingNanOpt;
    poolingDesc->win_h = windowHeight;
    poolingDesc->win_w = windowWidth;
    poolingDesc->pad_h = verticalPadding;
    poolingDesc->pad_w = horizontalPadding;
    poolingDesc->str_h = verticalStride;
    poolingDesc->str_w = horizontalStride;
    poolingDesc->set = 1;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetPooling2dDescriptor(const cudnnPoolingDescriptor_t poolingDesc,
                                          cudnnPoolingMode_t *mode,
                                          cudnnNanPropagation_t *maxpoolingNanOpt,
                                          int *windowHeight, int *windowWidth,
                                          int *verticalPadding, int *horizontalPadding,
                                          int *verticalStride, int *horizontalStride)
{
    cudnnStatus_t st = pool_check(poolingDesc, 1);
    if (st)
        return st;
    if (!mode || !maxpoolingNanOpt || !windowHeight || !windowWidth || !verticalPadding ||
        !horizontalPadding || !verticalStride || !horizontalStride)
        return NULLP("an output");
    *mode = poolingDesc->mode;
    *maxpoolingNanOpt = poolingDesc->nan;
    *windowHeight = poolingDesc->win_h;
    *windowWidth = poolingDesc->win_w;
    *verticalPadding = poolingDesc->pad_h;
    *horizontalPadding = poolingDesc->pad_w;
    *verticalStride = poolingDesc->str_h;
    *horizontalStride = poolingDesc->str_w;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetPoolingNdDescriptor(cudnnPoolingDescriptor_t poolingDesc,
                                          const cudnnPoolingMode_t mode,
                                          const cudnnNanPropagation_t maxpoolingNanOpt,
                                          int nbDims, const int windowDimA[],
                                          const int paddingA[], const int strideA[])
{
    if (!windowDimA || !paddingA || !strideA)
        return NULLP("an array");
    if (nbDims != 2)
        return FAIL(nbDims < 1 || nbDims > CUDNN_DIM_MAX - 2 ? CUDNN_STATUS_BAD_PARAM
                                                             : CUDNN_STATUS_NOT_SUPPORTED,
                    "only 2-d pooling is supported (nbDims %d)", nbDims);
    return cudnnSetPooling2dDescriptor(poolingDesc, mode, maxpoolingNanOpt, windowDimA[0],
                                       windowDimA[1], paddingA[0], paddingA[1], strideA[0],
                                       strideA[1]);
}

cudnnStatus_t cudnnGetPooling2dForwardOutputDim(const cudnnPoolingDescriptor_t poolingDesc,
                                                const cudnnTensorDescriptor_t inputTensorDesc,
                                                int *n, int *c, int *h, int *w)
{
    cudnnStatus_t st;
    if ((st = pool_check(poolingDesc, 1)) || (st = tensor_check(inputTensorDesc, "input")))
        return st;
    if (!n || !c || !h || !w)
        return NULLP("an output");
    int oh = sim_conv_out_dim(inputTensorDesc->dims[2], poolingDesc->pad_h, poolingDesc->win_h,
                              1, poolingDesc->str_h);
    int ow = sim_conv_out_dim(inputTensorDesc->dims[3], poolingDesc->pad_w, poolingDesc->win_w,
                              1, poolingDesc->str_w);
    if (oh <= 0 || ow <= 0)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "pooling window larger than the padded input");
    *n = inputTensorDesc->dims[0];
    *c = inputTensorDesc->dims[1];
    *h = oh;
    *w = ow;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetPoolingNdDescriptor(const cudnnPoolingDescriptor_t poolingDesc,
                                          int nbDimsRequested, cudnnPoolingMode_t *mode,
                                          cudnnNanPropagation_t *maxpoolingNanOpt, int *nbDims,
                                          int windowDimA[], int paddingA[], int strideA[])
{
    cudnnStatus_t st = pool_check(poolingDesc, 1);
    if (st)
        return st;
    if (nbDimsRequested < 0)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "nbDimsRequested < 0");
    if (!mode || !maxpoolingNanOpt || !nbDims ||
        (nbDimsRequested > 0 && (!windowDimA || !paddingA || !strideA)))
        return NULLP("an output");
    *mode = poolingDesc->mode;
    *maxpoolingNanOpt = poolingDesc->nan;
    *nbDims = 2;
    int wa[2] = {poolingDesc->win_h, poolingDesc->win_w};
    int pa[2] = {poolingDesc->pad_h, poolingDesc->pad_w};
    int sa[2] = {poolingDesc->str_h, poolingDesc->str_w};
    for (int i = 0; i < nbDimsRequested && i < 2; i++) {
        windowDimA[i] = wa[i];
        paddingA[i] = pa[i];
        strideA[i] = sa[i];
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetPoolingNdForwardOutputDim(const cudnnPoolingDescriptor_t poolingDesc,
                                                const cudnnTensorDescriptor_t inputTensorDesc,
                                                int nbDims, int outputTensorDimA[])
{
    if (!outputTensorDimA)
        return NULLP("outputTensorDimA");
    if (nbDims != 4)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "nbDims %d (only 4 supported)", nbDims);
    return cudnnGetPooling2dForwardOutputDim(poolingDesc, inputTensorDesc, &outputTensorDimA[0],
                                             &outputTensorDimA[1], &outputTensorDimA[2],
                                             &outputTensorDimA[3]);
}

static cudnnStatus_t pool_problem(cudnnPoolingDescriptor_t pd, cudnnTensorDescriptor_t xd,
                                  cudnnTensorDescriptor_t yd, sim_pool_t *p)
{
    cudnnStatus_t st;
    int n, c, h, w;
    if ((st = pool_check(pd, 1)) || (st = float_tensor(xd, "x")) || (st = float_tensor(yd, "y")))
        return st;
    if ((st = cudnnGetPooling2dForwardOutputDim(pd, xd, &n, &c, &h, &w)))
        return st;
    if (yd->dims[0] != n || yd->dims[1] != c || yd->dims[2] != h || yd->dims[3] != w)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "y %dx%dx%dx%d does not match pooling output %dx%dx%dx%d",
                    yd->dims[0], yd->dims[1], yd->dims[2], yd->dims[3], n, c, h, w);
    memset(p, 0, sizeof(*p));
    tensor_view(xd, &p->x);
    tensor_view(yd, &p->y);
    p->mode = pd->mode;
    p->nan_prop = pd->nan == CUDNN_PROPAGATE_NAN;
    p->win_h = pd->win_h;
    p->win_w = pd->win_w;
    p->pad_h = pd->pad_h;
    p->pad_w = pd->pad_w;
    p->str_h = pd->str_h;
    p->str_w = pd->str_w;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnPoolingForward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc,
                                  const void *alpha, const cudnnTensorDescriptor_t xDesc,
                                  const void *x, const void *beta,
                                  const cudnnTensorDescriptor_t yDesc, void *y)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    if (!alpha || !beta)
        return NULLP("alpha/beta");
    sim_job_t j;
    memset(&j, 0, sizeof(j));
    if ((st = pool_problem(poolingDesc, xDesc, yDesc, &j.pool)))
        return st;
    if (!x || !y)
        return NULLP("x/y");
    j.kind = SIM_JOB_POOL_FWD;
    j.alpha = *(const float *)alpha;
    j.beta = *(const float *)beta;
    j.in[0] = x;
    j.out = y;
    return sim_cudnn_enqueue(handle, &j);
}

cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc,
                                   const void *alpha, const cudnnTensorDescriptor_t yDesc,
                                   const void *y, const cudnnTensorDescriptor_t dyDesc,
                                   const void *dy, const cudnnTensorDescriptor_t xDesc,
                                   const void *x, const void *beta,
                                   const cudnnTensorDescriptor_t dxDesc, void *dx)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    if (!alpha || !beta)
        return NULLP("alpha/beta");
    sim_job_t j;
    memset(&j, 0, sizeof(j));
    if ((st = pool_problem(poolingDesc, xDesc, yDesc, &j.pool)) ||
        (st = float_tensor(dyDesc, "dy")) || (st = float_tensor(dxDesc, "dx")))
        return st;
    if (!same_dims(dyDesc, yDesc) || !same_dims(dxDesc, xDesc))
        return FAIL(CUDNN_STATUS_BAD_PARAM, "dy/dx descriptors do not match y/x");
    if (!y || !dy || !x || !dx)
        return NULLP("a data pointer");
    j.kind = SIM_JOB_POOL_BWD;
    tensor_view(dyDesc, &j.v[0]);
    tensor_view(dxDesc, &j.v[1]);
    j.alpha = *(const float *)alpha;
    j.beta = *(const float *)beta;
    j.in[0] = y;
    j.in[1] = dy;
    j.in[2] = x;
    j.out = dx;
    return sim_cudnn_enqueue(handle, &j);
}

/* ---- activations ----------------------------------------------------------------- */

static cudnnStatus_t act_check(const struct cudnnActivationStruct *a, int need_set)
{
    return desc_check(a, SIM_ACT_MAGIC, need_set, "activationDesc", "activation");
}

cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t *activationDesc)
{
    return desc_create(activationDesc, sizeof(**activationDesc), SIM_ACT_MAGIC,
                       "activationDesc");
}

cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t activationDesc)
{
    return desc_destroy(activationDesc, SIM_ACT_MAGIC, "activation");
}

cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t activationDesc,
                                           cudnnActivationMode_t mode,
                                           cudnnNanPropagation_t reluNanOpt, double coef)
{
    cudnnStatus_t st = act_check(activationDesc, 0);
    if (st)
        return st;
    if ((int)mode < CUDNN_ACTIVATION_SIGMOID || (int)mode > CUDNN_ACTIVATION_SWISH)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad activation mode %d", (int)mode);
    if (reluNanOpt != CUDNN_NOT_PROPAGATE_NAN && reluNanOpt != CUDNN_PROPAGATE_NAN)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad NaN option %d", (int)reluNanOpt);
    activationDesc->mode = mode;
    activationDesc->nan = reluNanOpt;
    activationDesc->coef = coef;
    activationDesc->set = 1;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetActivationDescriptor(const cudnnActivationDescriptor_t activationDesc,
                                           cudnnActivationMode_t *mode,
                                           cudnnNanPropagation_t *reluNanOpt, double *coef)
{
    cudnnStatus_t st = act_check(activationDesc, 1);
    if (st)
        return st;
    if (!mode || !reluNanOpt || !coef)
        return NULLP("an output");
    *mode = activationDesc->mode;
    *reluNanOpt = activationDesc->nan;
    *coef = activationDesc->coef;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetActivationDescriptorSwishBeta(cudnnActivationDescriptor_t activationDesc,
                                                    double swish_beta)
{
    cudnnStatus_t st = act_check(activationDesc, 0);
    if (st)
        return st;
    activationDesc->swish = swish_beta;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetActivationDescriptorSwishBeta(cudnnActivationDescriptor_t activationDesc,
                                                    double *swish_beta)
{
    cudnnStatus_t st = act_check(activationDesc, 0);
    if (st)
        return st;
    if (!swish_beta)
        return NULLP("swish_beta");
    *swish_beta = activationDesc->swish;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnActivationForward(cudnnHandle_t handle,
                                     cudnnActivationDescriptor_t activationDesc,
                                     const void *alpha, const cudnnTensorDescriptor_t xDesc,
                                     const void *x, const void *beta,
                                     const cudnnTensorDescriptor_t yDesc, void *y)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    if ((st = act_check(activationDesc, 1)))
        return st;
    if (!alpha || !beta)
        return NULLP("alpha/beta");
    if ((st = float_tensor(xDesc, "x")) || (st = float_tensor(yDesc, "y")))
        return st;
    if (!same_dims(xDesc, yDesc))
        return FAIL(CUDNN_STATUS_BAD_PARAM, "x and y dimensions differ");
    if (!sim_act_supported((int)activationDesc->mode))
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "activation mode %d", (int)activationDesc->mode);
    if (!x || !y)
        return NULLP("x/y");
    sim_job_t j;
    memset(&j, 0, sizeof(j));
    j.kind = SIM_JOB_ACT_FWD;
    j.act_mode = (int)activationDesc->mode;
    j.coef = activationDesc->coef;
    tensor_view(xDesc, &j.v[0]);
    tensor_view(yDesc, &j.v[1]);
    j.alpha = *(const float *)alpha;
    j.beta = *(const float *)beta;
    j.in[0] = x;
    j.out = y;
    return sim_cudnn_enqueue(handle, &j);
}

cudnnStatus_t cudnnActivationBackward(cudnnHandle_t handle,
                                      cudnnActivationDescriptor_t activationDesc,
                                      const void *alpha, const cudnnTensorDescriptor_t yDesc,
                                      const void *y, const cudnnTensorDescriptor_t dyDesc,
                                      const void *dy, const cudnnTensorDescriptor_t xDesc,
                                      const void *x, const void *beta,
                                      const cudnnTensorDescriptor_t dxDesc, void *dx)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    if ((st = act_check(activationDesc, 1)))
        return st;
    if (!alpha || !beta)
        return NULLP("alpha/beta");
    if ((st = float_tensor(yDesc, "y")) || (st = float_tensor(dyDesc, "dy")) ||
        (st = float_tensor(xDesc, "x")) || (st = float_tensor(dxDesc, "dx")))
        return st;
    if (!same_dims(xDesc, yDesc) || !same_dims(xDesc, dyDesc) || !same_dims(xDesc, dxDesc))
        return FAIL(CUDNN_STATUS_BAD_PARAM, "x, y, dy, dx dimensions differ");
    if (!sim_act_supported((int)activationDesc->mode))
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "activation mode %d", (int)activationDesc->mode);
    if (!y || !dy || !x || !dx)
        return NULLP("a data pointer");
    sim_job_t j;
    memset(&j, 0, sizeof(j));
    j.kind = SIM_JOB_ACT_BWD;
    j.act_mode = (int)activationDesc->mode;
    j.coef = activationDesc->coef;
    tensor_view(yDesc, &j.v[0]);
    tensor_view(dyDesc, &j.v[1]);
    tensor_view(xDesc, &j.v[2]);
    tensor_view(dxDesc, &j.v[3]);
    j.alpha = *(const float *)alpha;
    j.beta = *(const float *)beta;
    j.in[0] = y;
    j.in[1] = dy;
    j.in[2] = x;
    j.out = dx;
    return sim_cudnn_enqueue(handle, &j);
}

/* ---- algorithm queries ------------------------------------------------------------ */

/* The common shape of the three perf structs. */
typedef struct perf_any {
    int algo;
    cudnnStatus_t status;
    float time;
    size_t memory;
    cudnnDeterminism_t determinism;
    cudnnMathType_t mathType;
    int reserved[3];
} perf_any_t;
_Static_assert(sizeof(perf_any_t) == sizeof(cudnnConvolutionFwdAlgoPerf_t), "perf layout");
_Static_assert(sizeof(perf_any_t) == sizeof(cudnnConvolutionBwdDataAlgoPerf_t), "perf layout");
_Static_assert(sizeof(perf_any_t) == sizeof(cudnnConvolutionBwdFilterAlgoPerf_t), "perf layout");

static void fill_perf(perf_any_t *pf, int dir, int algo, const sim_conv_t *p,
                      cudnnMathType_t math, int supported)
{
    memset(pf, 0, sizeof(*pf));
    pf->algo = algo;
    pf->status = supported ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_NOT_SUPPORTED;
    pf->time = -1.0f;
    pf->memory = supported ? sim_conv_workspace(dir, algo, p) : 0;
    pf->determinism = sim_conv_algo_deterministic(dir, algo) ? CUDNN_DETERMINISTIC
                                                              : CUDNN_NON_DETERMINISTIC;
    pf->mathType = math;
}

static cudnnStatus_t get_v7(int dir, cudnnHandle_t handle, const cudnnTensorDescriptor_t xd,
                            const cudnnFilterDescriptor_t wd, const cudnnConvolutionDescriptor_t cd,
                            const cudnnTensorDescriptor_t yd, int requested, int *returned,
                            perf_any_t *perf)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    sim_conv_t p;
    if ((st = sim_cudnn_conv_problem(xd, wd, cd, yd, &p)))
        return st;
    if (!returned || !perf)
        return NULLP("returnedAlgoCount/perfResults");
    if (requested <= 0)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "requestedAlgoCount %d", requested);
    int algos[8];
    int nsup = sim_heur_rank(dir, &handle->dev, &p, algos);
    int count = sim_conv_algo_count(dir), n = 0;
    for (int i = 0; i < count && n < requested; i++, n++)
        fill_perf(&perf[n], dir, algos[i], &p, cd->math, i < nsup);
    *returned = n;
    return CUDNN_STATUS_SUCCESS;
}

static size_t span_floats(const sim_t4_t *v)
{
    return 1 + (size_t)(v->n - 1) * (size_t)v->sn + (size_t)(v->c - 1) * (size_t)v->sc +
           (size_t)(v->h - 1) * (size_t)v->sh + (size_t)(v->w - 1) * (size_t)v->sw;
}

/* Find*: runs every supported candidate now on the handle's stream, timing
 * each with events, and ranks by measured time (so the order can vary from
 * run to run, as on a GPU). Not Ex: device buffers of its own (zeroed);
 * Ex: the caller's in0, in1, out and workspace. The call returns when the
 * candidates have run. */
static cudnnStatus_t find(int dir, cudnnHandle_t handle, const cudnnTensorDescriptor_t xd,
                          const cudnnFilterDescriptor_t wd, const cudnnConvolutionDescriptor_t cd,
                          const cudnnTensorDescriptor_t yd, int requested, int *returned,
                          perf_any_t *perf, const void *in0, const void *in1, void *out,
                          int ex, void *ws, size_t ws_size)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    sim_job_t j;
    memset(&j, 0, sizeof(j));
    if ((st = sim_cudnn_conv_problem(xd, wd, cd, yd, &j.conv)))
        return st;
    if (!returned || !perf)
        return NULLP("returnedAlgoCount/perfResults");
    if (requested <= 0)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "requestedAlgoCount %d", requested);
    if (ex && (!in0 || !in1 || !out))
        return NULLP("a data pointer");
    (void)ws;
    const simdrv_t *d = simdrv_get();
    if (!d)
        return FAIL(CUDNN_STATUS_NOT_INITIALIZED, "%s", simdrv_error());
    j.conv.arch = handle->dev.cc_major * 10 + handle->dev.cc_minor;
    CUcontext prev = NULL;
    d->cuCtxGetCurrent(&prev);
    if (prev != handle->ctx)
        d->cuCtxSetCurrent(handle->ctx);
    const sim_conv_t *p = &j.conv;
    CUdeviceptr scratch[3] = {0, 0, 0};
    CUevent ev[2] = {NULL, NULL};
    int count = sim_conv_algo_count(dir), n = 0;
    perf_any_t all[8];
    if (d->cuEventCreate(&ev[0], 0) != CUDA_SUCCESS || d->cuEventCreate(&ev[1], 0) != CUDA_SUCCESS) {
        st = FAIL(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER, "cuEventCreate failed");
        goto out;
    }
    if (!ex) {
        size_t sx = span_floats(&p->x), sw = span_floats(&p->w), sy = span_floats(&p->y);
        size_t sz[3];
        /* in0, in1, out by direction: fwd x,w->y; bwd data w,dy->dx; bwd filter x,dy->dw */
        if (dir == SIM_DIR_FWD) { sz[0] = sx; sz[1] = sw; sz[2] = sy; }
        else if (dir == SIM_DIR_BWD_DATA) { sz[0] = sw; sz[1] = sy; sz[2] = sx; }
        else { sz[0] = sx; sz[1] = sy; sz[2] = sw; }
        for (int i = 0; i < 3; i++)
            if (d->cuMemAlloc(&scratch[i], sz[i] * sizeof(float)) != CUDA_SUCCESS ||
                d->cuMemsetD32Async(scratch[i], 0, sz[i], handle->stream) != CUDA_SUCCESS) {
                st = FAIL(CUDNN_STATUS_ALLOC_FAILED, "no device memory for Find's buffers");
                goto out;
            }
        in0 = (const void *)(uintptr_t)scratch[0];
        in1 = (const void *)(uintptr_t)scratch[1];
        out = (void *)(uintptr_t)scratch[2];
    }
    j.kind = dir == SIM_DIR_FWD        ? SIM_JOB_CONV_FWD
             : dir == SIM_DIR_BWD_DATA ? SIM_JOB_CONV_BWD_DATA
                                       : SIM_JOB_CONV_BWD_FILTER;
    j.alpha = 1.0f;
    j.beta = 0.0f;
    j.in[0] = in0;
    j.in[1] = in1;
    j.out = out;
    for (int a = 0; a < count; a++) {
        int sup = sim_conv_algo_supported(dir, a, p);
        fill_perf(&all[a], dir, a, p, cd->math, sup);
        if (!sup)
            continue;
        if (ex && all[a].memory > ws_size) {
            all[a].status = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED; /* ALLOC_FAILED */
            continue;
        }
        j.algo = a;
        float ms = 0.0f;
        if (d->cuEventRecord(ev[0], handle->stream) != CUDA_SUCCESS ||
            launch_job(handle, handle->stream, &j) != CUDA_SUCCESS ||
            d->cuEventRecord(ev[1], handle->stream) != CUDA_SUCCESS ||
            d->cuEventSynchronize(ev[1]) != CUDA_SUCCESS ||
            d->cuEventElapsedTime(&ms, ev[0], ev[1]) != CUDA_SUCCESS)
            all[a].status = CUDNN_STATUS_INTERNAL_ERROR;
        all[a].time = ms;
    }
    /* successes by time, then the rest in id order */
    int used[8] = {0};
    for (;;) {
        int best = -1;
        for (int a = 0; a < count; a++)
            if (!used[a] && all[a].status == CUDNN_STATUS_SUCCESS &&
                (best < 0 || all[a].time < all[best].time))
                best = a;
        if (best < 0)
            break;
        used[best] = 1;
        if (n < requested)
            perf[n++] = all[best];
    }
    for (int a = 0; a < count && n < requested; a++)
        if (!used[a])
            perf[n++] = all[a];
    *returned = n;
out:
    for (int i = 0; i < 2; i++)
        if (ev[i])
            d->cuEventDestroy(ev[i]);
    if (scratch[0] || scratch[1] || scratch[2]) {
        d->cuStreamSynchronize(handle->stream);
        for (int i = 0; i < 3; i++)
            if (scratch[i])
                d->cuMemFree(scratch[i]);
    }
    if (prev != handle->ctx)
        d->cuCtxSetCurrent(prev);
    return st;
}

static cudnnStatus_t max_count(cudnnHandle_t handle, int *count, int dir)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    if (!count)
        return NULLP("count");
    *count = sim_conv_algo_count(dir);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle, int *count)
{
    return max_count(handle, count, SIM_DIR_FWD);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle, int *count)
{
    return max_count(handle, count, SIM_DIR_BWD_DATA);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle, int *count)
{
    return max_count(handle, count, SIM_DIR_BWD_FILTER);
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionFwdAlgoPerf_t *perfResults)
{
    return get_v7(SIM_DIR_FWD, handle, srcDesc, filterDesc, convDesc, destDesc,
                  requestedAlgoCount, returnedAlgoCount, (perf_any_t *)perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t *perfResults)
{
    return get_v7(SIM_DIR_BWD_DATA, handle, gradDesc, filterDesc, convDesc, diffDesc,
                  requestedAlgoCount, returnedAlgoCount, (perf_any_t *)perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t *perfResults)
{
    return get_v7(SIM_DIR_BWD_FILTER, handle, srcDesc, gradDesc, convDesc, diffDesc,
                  requestedAlgoCount, returnedAlgoCount, (perf_any_t *)perfResults);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnFilterDescriptor_t wDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc,
    const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults)
{
    return find(SIM_DIR_FWD, handle, xDesc, wDesc, convDesc, yDesc, requestedAlgoCount,
                returnedAlgoCount, (perf_any_t *)perfResults, NULL, NULL, NULL, 0, NULL, 0);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, void *y, const int requestedAlgoCount,
    int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults, void *workSpace,
    size_t workSpaceSizeInBytes)
{
    return find(SIM_DIR_FWD, handle, xDesc, wDesc, convDesc, yDesc, requestedAlgoCount,
                returnedAlgoCount, (perf_any_t *)perfResults, x, w, y, 1, workSpace,
                workSpaceSizeInBytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t *perfResults)
{
    return find(SIM_DIR_BWD_DATA, handle, dxDesc, wDesc, convDesc, dyDesc, requestedAlgoCount,
                returnedAlgoCount, (perf_any_t *)perfResults, NULL, NULL, NULL, 0, NULL, 0);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, void *dx,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes)
{
    return find(SIM_DIR_BWD_DATA, handle, dxDesc, wDesc, convDesc, dyDesc, requestedAlgoCount,
                returnedAlgoCount, (perf_any_t *)perfResults, w, dy, dx, 1, workSpace,
                workSpaceSizeInBytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc,
    const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t *perfResults)
{
    return find(SIM_DIR_BWD_FILTER, handle, xDesc, dwDesc, convDesc, dyDesc, requestedAlgoCount,
                returnedAlgoCount, (perf_any_t *)perfResults, NULL, NULL, NULL, 0, NULL, 0);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnTensorDescriptor_t dyDesc, const void *y, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnFilterDescriptor_t dwDesc, void *dw, const int requestedAlgoCount,
    int *returnedAlgoCount, cudnnConvolutionBwdFilterAlgoPerf_t *perfResults, void *workSpace,
    size_t workSpaceSizeInBytes)
{
    return find(SIM_DIR_BWD_FILTER, handle, xDesc, dwDesc, convDesc, dyDesc, requestedAlgoCount,
                returnedAlgoCount, (perf_any_t *)perfResults, x, y, dw, 1, workSpace,
                workSpaceSizeInBytes);
}

static cudnnStatus_t ws_size(int dir, cudnnHandle_t handle, const cudnnTensorDescriptor_t xd,
                             const cudnnFilterDescriptor_t wd, const cudnnConvolutionDescriptor_t cd,
                             const cudnnTensorDescriptor_t yd, int algo, size_t *size)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    sim_conv_t p;
    if ((st = sim_cudnn_conv_problem(xd, wd, cd, yd, &p)))
        return st;
    if (!size)
        return NULLP("sizeInBytes");
    if (algo < 0 || algo >= sim_conv_algo_count(dir))
        return FAIL(CUDNN_STATUS_BAD_PARAM, "bad %s algorithm %d", dir_name(dir), algo);
    if (!sim_conv_algo_supported(dir, algo, &p))
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "%s algorithm %d does not support this problem",
                    dir_name(dir), algo);
    *size = sim_conv_workspace(dir, algo, &p);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle,
                                                      const cudnnTensorDescriptor_t xDesc,
                                                      const cudnnFilterDescriptor_t wDesc,
                                                      const cudnnConvolutionDescriptor_t convDesc,
                                                      const cudnnTensorDescriptor_t yDesc,
                                                      cudnnConvolutionFwdAlgo_t algo,
                                                      size_t *sizeInBytes)
{
    return ws_size(SIM_DIR_FWD, handle, xDesc, wDesc, convDesc, yDesc, (int)algo, sizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc,
    cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes)
{
    return ws_size(SIM_DIR_BWD_DATA, handle, dxDesc, wDesc, convDesc, dyDesc, (int)algo,
                   sizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc,
    cudnnConvolutionBwdFilterAlgo_t algo, size_t *sizeInBytes)
{
    return ws_size(SIM_DIR_BWD_FILTER, handle, xDesc, gradDesc, convDesc, dyDesc, (int)algo,
                   sizeInBytes);
}
