/* simcuda cuBLAS: the public API of libcublas.so.13 (handles, modes,
 * workspaces, GEMM family, Sgemv, Saxpy, Sscal, Sdot, Snrm2, Ssymv, the
 * Set/Get Vector/Matrix copy helpers).
 *
 * The work is done by kernels of the library's own module
 * (sim/cublas/kernels.cu, a fatbin in this library's .nv_fatbin section),
 * loaded once per context with cuModuleLoadData and launched with
 * cuLaunchKernel on the handle's stream, both reached through
 * sim/common/simdrv (dlopen + cuGetProcAddress), as NVIDIA's library does.
 * The host side never reads or writes device memory: scalars in device
 * pointer mode, pointer arrays and results are the kernels' business, a
 * host-mode scalar result comes back with cuMemcpyDtoHAsync.
 *
 * Reproduced nondeterminism (cuBLAS documentation, "Results
 * Reproducibility"; docs/VENDOR-FACTS.md):
 *  - the GEMM heuristic reads the device (cc, SM count) and the shape, so
 *    bits differ across models and SM counts (gemm.c);
 *  - GEMMs that use the handle's shared workspace pool while GEMMs of the
 *    same handle are in flight on other streams get the no-workspace
 *    kernel, so their bits depend on what else runs. "In flight" is counted
 *    from enqueue to completion (a host function after the kernels); the
 *    choice is made at enqueue, as the real library makes it at the call.
 *    A workspace of their own (cublasSetWorkspace after cublasSetStream) or
 *    CUBLAS_WORKSPACE_CONFIG=:4096:8 / :16:8 (per-stream pools) avoids it;
 *  - Ssymv with CUBLAS_ATOMICS_ALLOWED adds the column contributions with
 *    float atomics in a kernel: their order is the thread schedule's.
 */
#include "sim/common/cublas_status.h"
#include "sim/common/kmod.h"
#include "sim/common/live.h"
#include "sim/common/simdrv.h"
#include "sim/cublas/gemm.h"
#include "sim/cublas/kparams.h"

#include <cublas_v2.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#undef cublasGetVersion

#define API __attribute__((visibility("default")))
#define HANDLE_MAGIC 0x53424c43u /* "CLBS" */
#define MAX_STREAMS 64

struct inflight {
    CUstream stream;
    int count;
};

struct cublasContext {
    uint32_t magic;
    CUcontext ctx;
    CUuuid uuid;                     /* the device current at cublasCreate */
    sim_gemm_dev_t dev;
    int sm_target;
    CUstream stream;
    cublasPointerMode_t pmode;
    cublasAtomicsMode_t amode;
    cublasMath_t math;
    /* workspace for the current stream: user's (cublasSetWorkspace) or not */
    int ws_user;
    void *ws;
    size_t ws_size;
    /* CUBLAS_WORKSPACE_CONFIG as read at create */
    int cfg_valid, cfg_deterministic;
    size_t cfg_size;
    pthread_mutex_t lock;
    struct inflight inflight[MAX_STREAMS]; /* shared-pool GEMMs per stream */
    const sim_kmod_t *km;            /* the kernels of ctx */
    CUdeviceptr scratch;             /* host-mode scalar results */
    CUdeviceptr pool;                /* the shared workspace pool (lazily) */
    struct {
        CUstream stream;
        CUdeviceptr p;
    } spool[MAX_STREAMS];            /* per-stream pools (deterministic config) */
};

/* ------------------------------------------------------- handle registry */

static sim_live_t g_handles = SIM_LIVE_INIT;

/* A live handle: created and not destroyed (never dereferences others). */
static int handle_ok(cublasHandle_t h)
{
    return sim_live_has(&g_handles, h) && h->magic == HANDLE_MAGIC;
}

#define CHECK_HANDLE(h)                                                                     \
    do {                                                                                    \
        if (!handle_ok(h))                                                                  \
            return CUBLAS_STATUS_NOT_INITIALIZED;                                           \
    } while (0)

/* ------------------------------------------------ CUBLAS_WORKSPACE_CONFIG */

/* Parses ":SIZE_KiB:COUNT" pairs (one or more). Returns 0 and the first
 * pair's size in bytes, and whether every pair is a documented
 * deterministic setting (:4096:8 or :16:8); -EINVAL when malformed. */
static int parse_ws_config(const char *s, size_t *first_size, int *deterministic)
{
    int pairs = 0, det = 1;
    const char *p = s;
    while (*p) {
        unsigned long long v[2];
        for (int i = 0; i < 2; i++) {
            if (*p != ':' || p[1] < '0' || p[1] > '9')
                return -EINVAL;
            char *end;
            errno = 0;
            v[i] = strtoull(p + 1, &end, 10);
            if (errno || v[i] == 0 || v[i] > (1ull << 24))
                return -EINVAL;
            p = end;
        }
        if (pairs == 0)
            *first_size = (size_t)v[0] * 1024u;
        if (!((v[0] == 4096 && v[1] == 8) || (v[0] == 16 && v[1] == 8)))
            det = 0;
        pairs++;
    }
    if (pairs == 0)
        return -EINVAL;
    *deterministic = det;
    return 0;
}

static void read_ws_config(struct cublasContext *h)
{
    static int warned;
    const char *s = getenv("CUBLAS_WORKSPACE_CONFIG");
    h->cfg_valid = 0;
    h->cfg_deterministic = 0;
    if (!s || !*s)
        return;
    size_t size = 0;
    int det = 0;
    if (parse_ws_config(s, &size, &det) == 0) {
        h->cfg_valid = 1;
        h->cfg_deterministic = det;
        h->cfg_size = size;
    } else if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED)) {
        fprintf(stderr,
                "simcuda cuBLAS: CUBLAS_WORKSPACE_CONFIG=\"%s\" is malformed (expected "
                ":SIZE_KiB:COUNT pairs, e.g. :4096:8); ignored\n",
                s);
    }
}

/* ------------------------------------------------------------- helpers */

static const simdrv_t *drv(void)
{
    return simdrv_get();
}

/* cublasOperation_t for real data: 0 = N, 1 = T (C is T), -1 invalid. */
static int op_of(cublasOperation_t op)
{
    switch (op) {
    case CUBLAS_OP_N: return 0;
    case CUBLAS_OP_T:
    case CUBLAS_OP_C: return 1;
    default: return -1;
    }
}

static int64_t max1(int64_t v)
{
    return v > 1 ? v : 1;
}

/* ------------------------------------------------- the module of kernels */

/* sim/cublas/kernels.cu built by nvcc, in this library's .nv_fatbin
 * section (fatbin_blob.c). */
extern const unsigned char simcublas_fatbin[];

static const char *const g_kname[SIMCUBLAS_K_COUNT] = {
#define SIMCUBLAS_K_NAME(id, name) name,
    SIMCUBLAS_KERNELS(SIMCUBLAS_K_NAME)
#undef SIMCUBLAS_K_NAME
};

/* The module of each context (sim/common/kmod.h). */
static sim_kmods_t g_kmods = SIM_KMODS_INIT(simcublas_fatbin, g_kname, SIMCUBLAS_K_COUNT);

/* Blocks of `per` threads for n elements (grid-stride kernels beyond). */
static unsigned int grid_for(int64_t n, unsigned int per)
{
    int64_t g = n > 0 ? (n + per - 1) / per : 1;
    return g > (1 << 20) ? 1u << 20 : (unsigned int)g;
}

/* Every kernel of a handle goes through here. The handle is bound to the
 * device current at cublasCreate ("the cuBLAS library context is tied to
 * the current CUDA device"): with no current context (its context
 * destroyed) or another device current, no work is enqueued and the call
 * fails with CUBLAS_STATUS_NOT_INITIALIZED (README, status codes). */
static cublasStatus_t launch(struct cublasContext *h, int k, unsigned int gx, unsigned int gy,
                             unsigned int gz, unsigned int bx, void **args)
{
    if (!simdrv_bound_here(&h->uuid))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    CUresult r = drv()->cuLaunchKernel(h->km->fn[k], gx, gy, gz, bx, 1, 1, 0, h->stream, args,
                                       NULL);
    return r == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

/* ------------------------------------------- workspaces and GEMMs in flight */

static int other_streams_busy_locked(struct cublasContext *h, CUstream self)
{
    for (int i = 0; i < MAX_STREAMS; i++)
        if (h->inflight[i].count > 0 && h->inflight[i].stream != self)
            return 1;
    return 0;
}

/* Adds d (+1/-1) to the stream's in-flight count; -1 when the table is full. */
static int inflight_add_locked(struct cublasContext *h, CUstream s, int d)
{
    int free_slot = -1;
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (h->inflight[i].count > 0 && h->inflight[i].stream == s) {
            h->inflight[i].count += d;
            return 0;
        }
        if (h->inflight[i].count == 0 && free_slot < 0)
            free_slot = i;
    }
    if (d < 0 || free_slot < 0)
        return -1;
    h->inflight[free_slot].stream = s;
    h->inflight[free_slot].count = d;
    return 0;
}

typedef struct inflight_token {
    struct cublasContext *h;
    CUstream stream;
} inflight_token_t;

/* Host function after a shared-pool GEMM's kernels: it is no longer in
 * flight (touches only host memory). */
static void CUDA_CB inflight_done(void *p)
{
    inflight_token_t *t = p;
    pthread_mutex_lock(&t->h->lock);
    inflight_add_locked(t->h, t->stream, -1);
    pthread_mutex_unlock(&t->h->lock);
    free(t);
}

/* The handle's workspace pool (shared, or the stream's own with a
 * deterministic CUBLAS_WORKSPACE_CONFIG), allocated at its first use. */
static CUdeviceptr pool_for(struct cublasContext *h, size_t bytes, int per_stream)
{
    const simdrv_t *d = drv();
    CUdeviceptr p = 0;
    pthread_mutex_lock(&h->lock);
    if (!per_stream) {
        if (!h->pool && d->cuMemAlloc(&h->pool, bytes) != CUDA_SUCCESS)
            h->pool = 0;
        p = h->pool;
    } else {
        int slot = -1;
        for (int i = 0; i < MAX_STREAMS && !p; i++) {
            if (h->spool[i].p && h->spool[i].stream == h->stream)
                p = h->spool[i].p;
            else if (!h->spool[i].p && slot < 0)
                slot = i;
        }
        if (!p && slot >= 0 && d->cuMemAlloc(&h->spool[slot].p, bytes) == CUDA_SUCCESS) {
            h->spool[slot].stream = h->stream;
            p = h->spool[slot].p;
        }
    }
    pthread_mutex_unlock(&h->lock);
    return p;
}

/* Enqueues one GEMM call (batch of them) on the handle's stream: the
 * heuristic's plan, the GEMM kernel, the split-K epilogue. */
static cublasStatus_t gemm_enqueue(struct cublasContext *h, const sim_gemm_args_t *g,
                                   int64_t batch, long long sa, long long sb, long long sc,
                                   int ptr_array, const float *alpha, const float *beta)
{
    /* before any pool or accounting (launch() checks again for the rest) */
    if (!simdrv_bound_here(&h->uuid))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    simcublas_gemm_kp_t kp;
    memset(&kp, 0, sizeof(kp));
    kp.A = g->A;
    kp.B = g->B;
    kp.C = g->C;
    kp.m = g->m;
    kp.n = g->n;
    kp.k = g->k;
    kp.lda = g->lda;
    kp.ldb = g->ldb;
    kp.ldc = g->ldc;
    kp.sa = sa;
    kp.sb = sb;
    kp.sc = sc;
    kp.batch = (int32_t)batch;
    kp.transa = g->transa;
    kp.transb = g->transb;
    kp.atype = (int32_t)g->atype;
    kp.ctype = (int32_t)g->ctype;
    kp.round = (int32_t)g->round;
    kp.ptr_array = ptr_array;
    if (h->pmode == CUBLAS_POINTER_MODE_DEVICE) {
        kp.palpha = alpha;
        kp.pbeta = beta;
    } else {
        kp.alpha = *alpha;
        kp.beta = *beta;
    }
    sim_gemm_dev_t dev = h->dev;
    if (h->sm_target > 0)
        dev.sm_count = h->sm_target;
    int shared = 0, per_stream = 0;
    size_t ws_bytes;
    CUdeviceptr ws = 0;
    if (h->ws_user) {
        ws_bytes = h->ws_size;
        ws = (CUdeviceptr)(uintptr_t)h->ws;
    } else if (h->cfg_valid && h->cfg_deterministic) {
        ws_bytes = h->cfg_size; /* a pool per stream */
        per_stream = 1;
    } else {
        shared = 1;
        ws_bytes = h->cfg_valid ? h->cfg_size : sim_gemm_default_workspace(&h->dev);
    }
    /* The shared pool while GEMMs of this handle are in flight on another
     * stream: the kernel that needs no workspace. */
    pthread_mutex_lock(&h->lock);
    int contended = shared && other_streams_busy_locked(h, h->stream);
    if (shared && inflight_add_locked(h, h->stream, 1) != 0)
        shared = 0; /* table full: not counted */
    pthread_mutex_unlock(&h->lock);
    sim_gemm_plan_t plan;
    sim_gemm_choose(&dev, g->m, g->n, g->k, batch, contended ? 0 : ws_bytes, contended, &plan);
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (plan.splitk > 1 && !ws) {
        ws = pool_for(h, ws_bytes, per_stream);
        if (!ws)
            st = CUBLAS_STATUS_ALLOC_FAILED;
    }
    void *args[] = {&kp};
    if (st == CUBLAS_STATUS_SUCCESS && g->k == 0) {
        kp.splitk = 0; /* C = beta*C */
        st = launch(h, SIMCUBLAS_K_GEMM_EPILOGUE, grid_for(g->m * g->n * batch, SIMCUBLAS_EW_THREADS),
                    1, 1, SIMCUBLAS_EW_THREADS, args);
    } else if (st == CUBLAS_STATUS_SUCCESS) {
        kp.kc = plan.kc;
        kp.kper = plan.kper;
        kp.splitk = plan.splitk;
        kp.ws = (float *)(uintptr_t)ws;
        int64_t tm = (g->m + SIMCUBLAS_GEMM_TILE - 1) / SIMCUBLAS_GEMM_TILE;
        int64_t tn = (g->n + SIMCUBLAS_GEMM_TILE - 1) / SIMCUBLAS_GEMM_TILE;
        int64_t z = batch * plan.splitk;
        if (tm > 0x7fffffff)
            st = CUBLAS_STATUS_NOT_SUPPORTED;
        else
            st = launch(h, SIMCUBLAS_K_GEMM, (unsigned int)tm,
                        tn > 65535 ? 65535u : (unsigned int)tn,
                        z > 65535 ? 65535u : (unsigned int)z, SIMCUBLAS_GEMM_THREADS, args);
        if (st == CUBLAS_STATUS_SUCCESS && plan.splitk > 1)
            st = launch(h, SIMCUBLAS_K_GEMM_EPILOGUE,
                        grid_for(g->m * g->n * batch, SIMCUBLAS_EW_THREADS), 1, 1,
                        SIMCUBLAS_EW_THREADS, args);
    }
    if (shared) {
        inflight_token_t *t = malloc(sizeof(*t));
        CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
        if (t) {
            t->h = h;
            t->stream = h->stream;
            r = drv()->cuLaunchHostFunc(h->stream, inflight_done, t);
        }
        if (r != CUDA_SUCCESS) {
            free(t);
            pthread_mutex_lock(&h->lock);
            inflight_add_locked(h, h->stream, -1);
            pthread_mutex_unlock(&h->lock);
        }
    }
    return st;
}

/* ------------------------------------------------------ handle functions */

/* The oldest architecture CUDA 13's cuBLAS has code for: the installed
 * libcublas.so.13 carries SASS for sm_75, 80, 86, 90, 100, 120 and PTX of
 * a newer one (easyscale-audit's per-architecture listing), so its kernels
 * cannot run on an older GPU. */
#define CUBLAS_MIN_CC 75

API cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    struct cublasContext *h = NULL;
    simdrv_devinfo_t info;
    CUcontext ctx = NULL;
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    const simdrv_t *d = drv();
    if (!d || d->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx ||
        simdrv_current_device(&info) != 0) {
        st = CUBLAS_STATUS_NOT_INITIALIZED;
        goto out;
    }
    /* An architecture the library has no kernels for: refused here, where
     * it loads its kernels (CUBLAS_STATUS_ARCH_MISMATCH: "the function
     * requires a feature absent from the device architecture"). */
    if (info.cc_major * 10 + info.cc_minor < CUBLAS_MIN_CC) {
        st = CUBLAS_STATUS_ARCH_MISMATCH;
        goto out;
    }
    h = calloc(1, sizeof(*h));
    if (!h) {
        st = CUBLAS_STATUS_ALLOC_FAILED;
        goto out;
    }
    CUresult r = sim_kmod_get(&g_kmods, ctx, &h->km);
    if (r != CUDA_SUCCESS) {
        st = r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE
                 ? CUBLAS_STATUS_ARCH_MISMATCH
             : r == CUDA_ERROR_OUT_OF_MEMORY ? CUBLAS_STATUS_ALLOC_FAILED
                                             : CUBLAS_STATUS_NOT_INITIALIZED;
        /* what failed, for a failure a test cannot reproduce at will */
        fprintf(stderr, "simcublas: cublasCreate: loading its kernels failed (CUresult %d)\n",
                (int)r);
        goto out;
    }
    if ((r = d->cuMemAlloc(&h->scratch, 256)) != CUDA_SUCCESS) {
        fprintf(stderr, "simcublas: cublasCreate: its 256-byte scratch: cuMemAlloc failed "
                "(CUresult %d)\n", (int)r);
        st = CUBLAS_STATUS_ALLOC_FAILED;
        goto out;
    }
    h->magic = HANDLE_MAGIC;
    h->ctx = ctx;
    h->uuid = info.uuid;
    h->dev.cc_major = info.cc_major;
    h->dev.cc_minor = info.cc_minor;
    h->dev.sm_count = info.sm_count;
    h->pmode = CUBLAS_POINTER_MODE_HOST;
    h->amode = CUBLAS_ATOMICS_NOT_ALLOWED;
    h->math = CUBLAS_DEFAULT_MATH;
    read_ws_config(h);
    pthread_mutex_init(&h->lock, NULL);
    if (sim_live_add(&g_handles, h) != 0) {
        pthread_mutex_destroy(&h->lock);
        st = CUBLAS_STATUS_ALLOC_FAILED;
        goto out;
    }
out:
    if (st != CUBLAS_STATUS_SUCCESS && h) {
        if (h->scratch)
            d->cuMemFree(h->scratch);
        free(h);
        h = NULL;
    }
    *handle = h;
    return st;
}

API cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    if (!sim_live_remove(&g_handles, h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    /* As documented for the real one: it synchronises the device, so the
     * handle's queued work (and its host functions) finish before its
     * memory goes. */
    const simdrv_t *d = drv();
    CUcontext prev = NULL;
    d->cuCtxGetCurrent(&prev);
    if (prev != h->ctx)
        d->cuCtxSetCurrent(h->ctx);
    d->cuCtxSynchronize();
    if (h->pool)
        d->cuMemFree(h->pool);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (h->spool[i].p)
            d->cuMemFree(h->spool[i].p);
    d->cuMemFree(h->scratch);
    if (prev != h->ctx)
        d->cuCtxSetCurrent(prev);
    h->magic = 0;
    pthread_mutex_destroy(&h->lock);
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasGetVersion_v2(cublasHandle_t h, int *version)
{
    (void)h;
    if (!version)
        return CUBLAS_STATUS_INVALID_VALUE;
    *version = CUBLAS_VER_MAJOR * 10000 + CUBLAS_VER_MINOR * 100 + CUBLAS_VER_PATCH;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasGetVersion(int *version)
{
    return cublasGetVersion_v2(NULL, version);
}

API cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value)
{
    if (!value)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; break;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; break;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

API size_t cublasGetCudartVersion(void)
{
    return 13000;
}

API cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *workspace, size_t size)
{
    CHECK_HANDLE(h);
    if ((!workspace && size > 0) || ((uintptr_t)workspace % 256) != 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->ws_user = 1;
    h->ws = workspace;
    h->ws_size = workspace ? size : 0;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t stream)
{
    CHECK_HANDLE(h);
    h->stream = (CUstream)stream;
    /* Documented: setting the stream resets the workspace to the default pool. */
    h->ws_user = 0;
    h->ws = NULL;
    h->ws_size = 0;
    return CUBLAS_STATUS_SUCCESS;
}

/* The handle getters: a live handle's setting into *out (NULL out:
 * INVALID_VALUE). */
#define HANDLE_GETTER(name, type, field)                                                    \
    API cublasStatus_t name(cublasHandle_t h, type *out)                                    \
    {                                                                                       \
        CHECK_HANDLE(h);                                                                    \
        if (!out)                                                                           \
            return CUBLAS_STATUS_INVALID_VALUE;                                             \
        *out = (type)h->field;                                                              \
        return CUBLAS_STATUS_SUCCESS;                                                       \
    }

HANDLE_GETTER(cublasGetStream_v2, cudaStream_t, stream)
HANDLE_GETTER(cublasGetPointerMode_v2, cublasPointerMode_t, pmode)
HANDLE_GETTER(cublasGetAtomicsMode, cublasAtomicsMode_t, amode)
HANDLE_GETTER(cublasGetMathMode, cublasMath_t, math)
HANDLE_GETTER(cublasGetSmCountTarget, int, sm_target)

API cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t h, cublasPointerMode_t mode)
{
    CHECK_HANDLE(h);
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->pmode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasSetAtomicsMode(cublasHandle_t h, cublasAtomicsMode_t mode)
{
    CHECK_HANDLE(h);
    if (mode != CUBLAS_ATOMICS_NOT_ALLOWED && mode != CUBLAS_ATOMICS_ALLOWED)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->amode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    CHECK_HANDLE(h);
    unsigned base = (unsigned)mode & 0xfu, flags = (unsigned)mode & ~0xfu;
    if ((base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH &&
         base != CUBLAS_PEDANTIC_MATH && base != CUBLAS_TF32_TENSOR_OP_MATH &&
         base != CUBLAS_FP32_EMULATED_BF16X9_MATH && base != CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH) ||
        (flags & ~(unsigned)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION))
        return CUBLAS_STATUS_INVALID_VALUE;
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasSetSmCountTarget(cublasHandle_t h, int target)
{
    CHECK_HANDLE(h);
    if (target < 0 || target > h->dev.sm_count)
        return CUBLAS_STATUS_INVALID_VALUE;
    h->sm_target = target;
    return CUBLAS_STATUS_SUCCESS;
}

API const char *cublasGetStatusName(cublasStatus_t status)
{
    return sim_cublas_status_name(status);
}

API const char *cublasGetStatusString(cublasStatus_t status)
{
    return sim_cublas_status_string(status);
}

static cublasLogCallback g_log_cb;

API cublasStatus_t cublasLoggerConfigure(int logIsOn, int logToStdOut, int logToStdErr,
                                         const char *logFileName)
{
    /* simcuda logs nothing; the configuration is accepted. */
    (void)logIsOn;
    (void)logToStdOut;
    (void)logToStdErr;
    (void)logFileName;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasSetLoggerCallback(cublasLogCallback cb)
{
    g_log_cb = cb;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasGetLoggerCallback(cublasLogCallback *cb)
{
    if (!cb)
        return CUBLAS_STATUS_INVALID_VALUE;
    *cb = g_log_cb;
    return CUBLAS_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------ GEMM */

/* The common GEMM path. ptr_array: A, B, C are device arrays of pointers.
 * round: input down-conversion requested by the compute type. */
static cublasStatus_t gemm_common(cublasHandle_t h, cublasOperation_t transa,
                                  cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                                  const float *alpha, const void *A, sim_dtype_t at, int64_t lda,
                                  long long sa, const void *B, sim_dtype_t bt, int64_t ldb,
                                  long long sb, const float *beta, void *C, sim_dtype_t ct,
                                  int64_t ldc, long long sc, int64_t batch, int ptr_array,
                                  sim_round_t round, int math_mode_applies)
{
    CHECK_HANDLE(h);
    int ta = op_of(transa), tb = op_of(transb);
    if (ta < 0 || tb < 0 || m < 0 || n < 0 || k < 0 || batch < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < max1(ta ? k : m) || ldb < max1(tb ? n : k) || ldc < max1(m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batch == 0)
        return CUBLAS_STATUS_SUCCESS;
    if (!C || ((!A || !B) && k > 0))
        return CUBLAS_STATUS_INVALID_VALUE;
    sim_gemm_args_t g = {.transa = ta, .transb = tb, .m = m, .n = n, .k = k,
                         .atype = at, .btype = bt, .ctype = ct, .round = round,
                         .A = A, .lda = lda, .B = B, .ldb = ldb, .C = C, .ldc = ldc};
    if (math_mode_applies && round == SIM_ROUND_NONE && at == SIM_F32) {
        unsigned base = (unsigned)h->math & 0xfu;
        if (base == CUBLAS_TF32_TENSOR_OP_MATH && h->dev.cc_major >= 8)
            g.round = SIM_ROUND_TF32; /* TF32 tensor cores allowed for fp32 */
        else if (base == CUBLAS_TENSOR_OP_MATH && h->dev.cc_major >= 7)
            g.round = SIM_ROUND_F16;  /* cublas_api.h: same as COMPUTE_32F_FAST_16F */
    }
    if (batch > 0x7fffffff)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm_enqueue(h, &g, batch, sa, sb, sc, ptr_array, alpha, beta);
}

API cublasStatus_t cublasSgemm_v2_64(cublasHandle_t h, cublasOperation_t transa,
                                     cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                                     const float *alpha, const float *A, int64_t lda,
                                     const float *B, int64_t ldb, const float *beta, float *C,
                                     int64_t ldc)
{
    return gemm_common(h, transa, transb, m, n, k, alpha, A, SIM_F32, lda, 0, B, SIM_F32, ldb,
                       0, beta, C, SIM_F32, ldc, 0, 1, 0, SIM_ROUND_NONE, 1);
}

API cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t transa,
                                  cublasOperation_t transb, int m, int n, int k,
                                  const float *alpha, const float *A, int lda, const float *B,
                                  int ldb, const float *beta, float *C, int ldc)
{
    return cublasSgemm_v2_64(h, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

API cublasStatus_t cublasSgemmStridedBatched_64(
    cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int64_t m, int64_t n,
    int64_t k, const float *alpha, const float *A, int64_t lda, long long sa, const float *B,
    int64_t ldb, long long sb, const float *beta, float *C, int64_t ldc, long long sc,
    int64_t batch)
{
    return gemm_common(h, transa, transb, m, n, k, alpha, A, SIM_F32, lda, sa, B, SIM_F32, ldb,
                       sb, beta, C, SIM_F32, ldc, sc, batch, 0, SIM_ROUND_NONE, 1);
}

API cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t transa,
                                             cublasOperation_t transb, int m, int n, int k,
                                             const float *alpha, const float *A, int lda,
                                             long long sa, const float *B, int ldb, long long sb,
                                             const float *beta, float *C, int ldc, long long sc,
                                             int batch)
{
    return cublasSgemmStridedBatched_64(h, transa, transb, m, n, k, alpha, A, lda, sa, B, ldb, sb,
                                        beta, C, ldc, sc, batch);
}

API cublasStatus_t cublasSgemmBatched_64(cublasHandle_t h, cublasOperation_t transa,
                                         cublasOperation_t transb, int64_t m, int64_t n,
                                         int64_t k, const float *alpha,
                                         const float *const Aarray[], int64_t lda,
                                         const float *const Barray[], int64_t ldb,
                                         const float *beta, float *const Carray[], int64_t ldc,
                                         int64_t batch)
{
    CHECK_HANDLE(h);
    if (batch > 0 && (!Aarray || !Barray || !Carray))
        return CUBLAS_STATUS_INVALID_VALUE;
    return gemm_common(h, transa, transb, m, n, k, alpha, Aarray, SIM_F32, lda, 0, Barray,
                       SIM_F32, ldb, 0, beta, (void *)Carray, SIM_F32, ldc, 0, batch, 1,
                       SIM_ROUND_NONE, 1);
}

API cublasStatus_t cublasSgemmBatched(cublasHandle_t h, cublasOperation_t transa,
                                      cublasOperation_t transb, int m, int n, int k,
                                      const float *alpha, const float *const Aarray[], int lda,
                                      const float *const Barray[], int ldb, const float *beta,
                                      float *const Carray[], int ldc, int batch)
{
    return cublasSgemmBatched_64(h, transa, transb, m, n, k, alpha, Aarray, lda, Barray, ldb,
                                 beta, Carray, ldc, batch);
}

static int dtype_of(cudaDataType t, sim_dtype_t *out)
{
    switch (t) {
    case CUDA_R_32F: *out = SIM_F32; return 0;
    case CUDA_R_16F: *out = SIM_F16; return 0;
    case CUDA_R_16BF: *out = SIM_BF16; return 0;
    default: return -1;
    }
}

/* Supported type combinations with float compute (cuBLAS's GemmEx table):
 * A = B in {32F, 16F, 16BF}; C = A's type or 32F. */
static cublasStatus_t ex_types(cudaDataType at, cudaDataType bt, cudaDataType ct,
                               sim_dtype_t *a, sim_dtype_t *b, sim_dtype_t *c)
{
    if (dtype_of(at, a) || dtype_of(bt, b) || dtype_of(ct, c) || *a != *b ||
        (*c != *a && *c != SIM_F32))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

/* Compute type -> input rounding; NOT_SUPPORTED for non-float compute. */
static cublasStatus_t ex_compute(cublasHandle_t h, cublasComputeType_t ctype, sim_dtype_t at,
                                 cublasGemmAlgo_t algo, sim_round_t *round)
{
    *round = SIM_ROUND_NONE;
    if (!((algo >= CUBLAS_GEMM_DEFAULT && algo <= CUBLAS_GEMM_ALGO23) ||
          (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= CUBLAS_GEMM_ALGO15_TENSOR_OP)))
        return CUBLAS_STATUS_INVALID_VALUE;
    int cc = h->dev.cc_major;
    switch (ctype) {
    case CUBLAS_COMPUTE_32F: return CUBLAS_STATUS_SUCCESS;
    case CUBLAS_COMPUTE_32F_PEDANTIC:
        /* the pedantic kind never down-converts, whatever the math mode */
        *round = SIM_ROUND_NONE;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLAS_COMPUTE_32F_FAST_TF32:
        if (at == SIM_F32 && cc >= 8)
            *round = SIM_ROUND_TF32;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLAS_COMPUTE_32F_FAST_16F:
        if (at == SIM_F32 && cc >= 7)
            *round = SIM_ROUND_F16;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLAS_COMPUTE_32F_FAST_16BF:
        if (at == SIM_F32 && cc >= 8)
            *round = SIM_ROUND_BF16;
        return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

static cublasStatus_t gemm_ex_common(cublasHandle_t h, cublasOperation_t transa,
                                     cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                                     const void *alpha, const void *A, cudaDataType Atype,
                                     int64_t lda, long long sa, const void *B, cudaDataType Btype,
                                     int64_t ldb, long long sb, const void *beta, void *C,
                                     cudaDataType Ctype, int64_t ldc, long long sc, int64_t batch,
                                     int ptr_array, cublasComputeType_t ctype,
                                     cublasGemmAlgo_t algo)
{
    CHECK_HANDLE(h);
    sim_dtype_t at, bt, ct;
    sim_round_t round;
    cublasStatus_t st = ex_types(Atype, Btype, Ctype, &at, &bt, &ct);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = ex_compute(h, ctype, at, algo, &round);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (ptr_array && batch > 0 && (!A || !B || !C))
        return CUBLAS_STATUS_INVALID_VALUE;
    /* Only the default float compute type follows the handle's TF32 math
     * mode; PEDANTIC never down-converts, FAST_* say it themselves. */
    return gemm_common(h, transa, transb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta,
                       C, ct, ldc, sc, batch, ptr_array, round, ctype == CUBLAS_COMPUTE_32F);
}

API cublasStatus_t cublasGemmEx_64(cublasHandle_t h, cublasOperation_t transa,
                                   cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                                   const void *alpha, const void *A, cudaDataType Atype,
                                   int64_t lda, const void *B, cudaDataType Btype, int64_t ldb,
                                   const void *beta, void *C, cudaDataType Ctype, int64_t ldc,
                                   cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    return gemm_ex_common(h, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0,
                          beta, C, Ctype, ldc, 0, 1, 0, computeType, algo);
}

API cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa,
                                cublasOperation_t transb, int m, int n, int k, const void *alpha,
                                const void *A, cudaDataType Atype, int lda, const void *B,
                                cudaDataType Btype, int ldb, const void *beta, void *C,
                                cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                cublasGemmAlgo_t algo)
{
    return cublasGemmEx_64(h, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta,
                           C, Ctype, ldc, computeType, algo);
}

API cublasStatus_t cublasGemmStridedBatchedEx_64(
    cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int64_t m, int64_t n,
    int64_t k, const void *alpha, const void *A, cudaDataType Atype, int64_t lda, long long sa,
    const void *B, cudaDataType Btype, int64_t ldb, long long sb, const void *beta, void *C,
    cudaDataType Ctype, int64_t ldc, long long sc, int64_t batch,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    return gemm_ex_common(h, transa, transb, m, n, k, alpha, A, Atype, lda, sa, B, Btype, ldb,
                          sb, beta, C, Ctype, ldc, sc, batch, 0, computeType, algo);
}

API cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType Atype, int lda, long long sa, const void *B,
    cudaDataType Btype, int ldb, long long sb, const void *beta, void *C, cudaDataType Ctype,
    int ldc, long long sc, int batch, cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    return cublasGemmStridedBatchedEx_64(h, transa, transb, m, n, k, alpha, A, Atype, lda, sa, B,
                                         Btype, ldb, sb, beta, C, Ctype, ldc, sc, batch,
                                         computeType, algo);
}

API cublasStatus_t cublasGemmBatchedEx_64(cublasHandle_t h, cublasOperation_t transa,
                                          cublasOperation_t transb, int64_t m, int64_t n,
                                          int64_t k, const void *alpha,
                                          const void *const Aarray[], cudaDataType Atype,
                                          int64_t lda, const void *const Barray[],
                                          cudaDataType Btype, int64_t ldb, const void *beta,
                                          void *const Carray[], cudaDataType Ctype, int64_t ldc,
                                          int64_t batch, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo)
{
    return gemm_ex_common(h, transa, transb, m, n, k, alpha, Aarray, Atype, lda, 0, Barray,
                          Btype, ldb, 0, beta, (void *)Carray, Ctype, ldc, 0, batch, 1,
                          computeType, algo);
}

API cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t transa,
                                       cublasOperation_t transb, int m, int n, int k,
                                       const void *alpha, const void *const Aarray[],
                                       cudaDataType Atype, int lda, const void *const Barray[],
                                       cudaDataType Btype, int ldb, const void *beta,
                                       void *const Carray[], cudaDataType Ctype, int ldc,
                                       int batch, cublasComputeType_t computeType,
                                       cublasGemmAlgo_t algo)
{
    return cublasGemmBatchedEx_64(h, transa, transb, m, n, k, alpha, Aarray, Atype, lda, Barray,
                                  Btype, ldb, beta, Carray, Ctype, ldc, batch, computeType, algo);
}

API cublasStatus_t cublasSgemmEx_64(cublasHandle_t h, cublasOperation_t transa,
                                    cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                                    const float *alpha, const void *A, cudaDataType Atype,
                                    int64_t lda, const void *B, cudaDataType Btype, int64_t ldb,
                                    const float *beta, void *C, cudaDataType Ctype, int64_t ldc)
{
    return gemm_ex_common(h, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0,
                          beta, C, Ctype, ldc, 0, 1, 0, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

API cublasStatus_t cublasSgemmEx(cublasHandle_t h, cublasOperation_t transa,
                                 cublasOperation_t transb, int m, int n, int k,
                                 const float *alpha, const void *A, cudaDataType Atype, int lda,
                                 const void *B, cudaDataType Btype, int ldb, const float *beta,
                                 void *C, cudaDataType Ctype, int ldc)
{
    return cublasSgemmEx_64(h, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb,
                            beta, C, Ctype, ldc);
}

/* ------------------------------------------------------- level 1 and 2 */

/* alpha/beta as the kernels take them: the value (host pointer mode) or
 * the device pointer. */
typedef struct scal {
    float v;
    const float *p;
} scal_t;

static scal_t scal_of(struct cublasContext *h, const float *x)
{
    scal_t s = {0.0f, NULL};
    if (!x)
        return s;
    if (h->pmode == CUBLAS_POINTER_MODE_DEVICE)
        s.p = x;
    else
        s.v = *x;
    return s;
}

API cublasStatus_t cublasSgemv_v2_64(cublasHandle_t h, cublasOperation_t trans, int64_t m,
                                     int64_t n, const float *alpha, const float *A, int64_t lda,
                                     const float *x, int64_t incx, const float *beta, float *y,
                                     int64_t incy)
{
    CHECK_HANDLE(h);
    int t = op_of(trans);
    if (t < 0 || m < 0 || n < 0 || lda < max1(m) || incx == 0 || incy == 0 || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    if (!A || !x || !y)
        return CUBLAS_STATUS_INVALID_VALUE;
    scal_t al = scal_of(h, alpha), be = scal_of(h, beta);
    long long mm = m, nn = n, la = lda, ix = incx, iy = incy;
    void *args[] = {&t, &mm, &nn, &al.v, &al.p, &A, &la, &x, &ix, &be.v, &be.p, &y, &iy};
    return launch(h, SIMCUBLAS_K_GEMV, grid_for(t ? n : m, SIMCUBLAS_EW_THREADS), 1, 1,
                  SIMCUBLAS_EW_THREADS, args);
}

API cublasStatus_t cublasSgemv_v2(cublasHandle_t h, cublasOperation_t trans, int m, int n,
                                  const float *alpha, const float *A, int lda, const float *x,
                                  int incx, const float *beta, float *y, int incy)
{
    return cublasSgemv_v2_64(h, trans, m, n, alpha, A, lda, x, incx, beta, y, incy);
}

API cublasStatus_t cublasSaxpy_v2_64(cublasHandle_t h, int64_t n, const float *alpha,
                                     const float *x, int64_t incx, float *y, int64_t incy)
{
    CHECK_HANDLE(h);
    if (!alpha)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (n <= 0)
        return CUBLAS_STATUS_SUCCESS;
    if (!x || !y)
        return CUBLAS_STATUS_INVALID_VALUE;
    scal_t al = scal_of(h, alpha);
    long long nn = n, ix = incx, iy = incy;
    void *args[] = {&nn, &al.v, &al.p, &x, &ix, &y, &iy};
    return launch(h, SIMCUBLAS_K_AXPY, grid_for(n, SIMCUBLAS_EW_THREADS), 1, 1,
                  SIMCUBLAS_EW_THREADS, args);
}

API cublasStatus_t cublasSaxpy_v2(cublasHandle_t h, int n, const float *alpha, const float *x,
                                  int incx, float *y, int incy)
{
    return cublasSaxpy_v2_64(h, n, alpha, x, incx, y, incy);
}

API cublasStatus_t cublasSscal_v2_64(cublasHandle_t h, int64_t n, const float *alpha, float *x,
                                     int64_t incx)
{
    CHECK_HANDLE(h);
    if (!alpha)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (n <= 0 || incx <= 0)
        return CUBLAS_STATUS_SUCCESS;
    if (!x)
        return CUBLAS_STATUS_INVALID_VALUE;
    scal_t al = scal_of(h, alpha);
    long long nn = n, ix = incx;
    void *args[] = {&nn, &al.v, &al.p, &x, &ix};
    return launch(h, SIMCUBLAS_K_SCAL, grid_for(n, SIMCUBLAS_EW_THREADS), 1, 1,
                  SIMCUBLAS_EW_THREADS, args);
}

API cublasStatus_t cublasSscal_v2(cublasHandle_t h, int n, const float *alpha, float *x, int incx)
{
    return cublasSscal_v2_64(h, n, alpha, x, incx);
}

/* Scalar results: in device pointer mode the kernel writes *result; in
 * host mode it writes the handle's device scratch, copied back on the
 * handle's stream, and the call waits for it, as the real one does. */
static cublasStatus_t scalar_result(cublasHandle_t h, int k, void **args, float **slot,
                                    float *result)
{
    const simdrv_t *d = drv();
    int host = h->pmode == CUBLAS_POINTER_MODE_HOST;
    *slot = host ? (float *)(uintptr_t)h->scratch : result;
    cublasStatus_t st = launch(h, k, 1, 1, 1, 1, args);
    if (st != CUBLAS_STATUS_SUCCESS || !host)
        return st;
    if (d->cuMemcpyDtoHAsync(result, h->scratch, sizeof(float), h->stream) != CUDA_SUCCESS ||
        d->cuStreamSynchronize(h->stream) != CUDA_SUCCESS)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasSdot_v2_64(cublasHandle_t h, int64_t n, const float *x, int64_t incx,
                                    const float *y, int64_t incy, float *result)
{
    CHECK_HANDLE(h);
    if (!result || (n > 0 && (!x || !y)))
        return CUBLAS_STATUS_INVALID_VALUE;
    long long nn = n > 0 ? n : 0, ix = incx, iy = incy;
    float *out = NULL;
    void *args[] = {&nn, &x, &ix, &y, &iy, &out};
    return scalar_result(h, SIMCUBLAS_K_DOT, args, &out, result);
}

API cublasStatus_t cublasSdot_v2(cublasHandle_t h, int n, const float *x, int incx,
                                 const float *y, int incy, float *result)
{
    return cublasSdot_v2_64(h, n, x, incx, y, incy, result);
}

API cublasStatus_t cublasSnrm2_v2_64(cublasHandle_t h, int64_t n, const float *x, int64_t incx,
                                     float *result)
{
    CHECK_HANDLE(h);
    if (!result || (n > 0 && incx > 0 && !x))
        return CUBLAS_STATUS_INVALID_VALUE;
    long long nn = n > 0 ? n : 0, ix = incx;
    float *out = NULL;
    void *args[] = {&nn, &x, &ix, &out};
    return scalar_result(h, SIMCUBLAS_K_NRM2, args, &out, result);
}

API cublasStatus_t cublasSnrm2_v2(cublasHandle_t h, int n, const float *x, int incx,
                                  float *result)
{
    return cublasSnrm2_v2_64(h, n, x, incx, result);
}

API cublasStatus_t cublasSsymv_v2_64(cublasHandle_t h, cublasFillMode_t uplo, int64_t n,
                                     const float *alpha, const float *A, int64_t lda,
                                     const float *x, int64_t incx, const float *beta, float *y,
                                     int64_t incy)
{
    CHECK_HANDLE(h);
    if ((uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER) || n < 0 ||
        lda < max1(n) || incx == 0 || incy == 0 || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (n == 0)
        return CUBLAS_STATUS_SUCCESS;
    if (!A || !x || !y)
        return CUBLAS_STATUS_INVALID_VALUE;
    int upper = uplo == CUBLAS_FILL_MODE_UPPER;
    scal_t al = scal_of(h, alpha), be = scal_of(h, beta);
    long long nn = n, la = lda, ix = incx, iy = incy;
    unsigned int g = grid_for(n, SIMCUBLAS_EW_THREADS);
    if (h->amode != CUBLAS_ATOMICS_ALLOWED) {
        void *args[] = {&upper, &nn, &al.v, &al.p, &A, &la, &x, &ix, &be.v, &be.p, &y, &iy};
        return launch(h, SIMCUBLAS_K_SYMV, g, 1, 1, SIMCUBLAS_EW_THREADS, args);
    }
    /* CUBLAS_ATOMICS_ALLOWED: y = beta*y, then every column's contribution
     * added with float atomics. */
    void *sargs[] = {&nn, &be.v, &be.p, &y, &iy};
    cublasStatus_t st = launch(h, SIMCUBLAS_K_SYMV_SCALE, g, 1, 1, SIMCUBLAS_EW_THREADS, sargs);
    void *aargs[] = {&upper, &nn, &al.v, &al.p, &A, &la, &x, &ix, &y, &iy};
    if (st == CUBLAS_STATUS_SUCCESS)
        st = launch(h, SIMCUBLAS_K_SYMV_ATOMIC, g, 1, 1, SIMCUBLAS_EW_THREADS, aargs);
    return st;
}

API cublasStatus_t cublasSsymv_v2(cublasHandle_t h, cublasFillMode_t uplo, int n,
                                  const float *alpha, const float *A, int lda, const float *x,
                                  int incx, const float *beta, float *y, int incy)
{
    return cublasSsymv_v2_64(h, uplo, n, alpha, A, lda, x, incx, beta, y, incy);
}

/* ------------------------------------------- host <-> device copy helpers */

/* cols blocks of `rows` elements; block c starts at src + c*lds and
 * dst + c*ldd (strides in elements). Through the driver's cuMemcpy (or
 * cuMemcpyAsync on stream), as the real helpers go through the runtime. */
static cublasStatus_t copy_blocks(int64_t rows, int64_t cols, int64_t esize, const void *src,
                                  int64_t lds, void *dst, int64_t ldd, int async, CUstream s)
{
    const simdrv_t *d = drv();
    if (!d)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (rows <= 0 || cols <= 0)
        return CUBLAS_STATUS_SUCCESS;
    size_t bytes = (size_t)rows * (size_t)esize;
    int64_t nblocks = cols;
    if (lds == rows && ldd == rows) { /* contiguous: one copy */
        bytes *= (size_t)cols;
        nblocks = 1;
    }
    for (int64_t c = 0; c < nblocks; c++) {
        CUdeviceptr from = (CUdeviceptr)(uintptr_t)((const char *)src + c * lds * esize);
        CUdeviceptr to = (CUdeviceptr)(uintptr_t)((char *)dst + c * ldd * esize);
        CUresult r = async ? d->cuMemcpyAsync(to, from, bytes, s) : d->cuMemcpy(to, from, bytes);
        if (r != CUDA_SUCCESS)
            return CUBLAS_STATUS_MAPPING_ERROR;
    }
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t vector_copy(int64_t n, int64_t esize, const void *x, int64_t incx, void *y,
                                  int64_t incy, int async, cudaStream_t s)
{
    if (n < 0 || esize <= 0 || incx <= 0 || incy <= 0 || (n > 0 && (!x || !y)))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (incx == 1 && incy == 1)
        return copy_blocks(n, 1, esize, x, n, y, n, async, (CUstream)s);
    return copy_blocks(1, n, esize, x, incx, y, incy, async, (CUstream)s);
}

static cublasStatus_t matrix_copy(int64_t rows, int64_t cols, int64_t esize, const void *a,
                                  int64_t lda, void *b, int64_t ldb, int async, cudaStream_t s)
{
    if (rows < 0 || cols < 0 || esize <= 0 || lda < max1(rows) || ldb < max1(rows) ||
        (rows > 0 && cols > 0 && (!a || !b)))
        return CUBLAS_STATUS_INVALID_VALUE;
    return copy_blocks(rows, cols, esize, a, lda, b, ldb, async, (CUstream)s);
}

API cublasStatus_t cublasSetVector_64(int64_t n, int64_t esize, const void *x, int64_t incx,
                                      void *y, int64_t incy)
{
    return vector_copy(n, esize, x, incx, y, incy, 0, NULL);
}

API cublasStatus_t cublasSetVector(int n, int esize, const void *x, int incx, void *y, int incy)
{
    return vector_copy(n, esize, x, incx, y, incy, 0, NULL);
}

API cublasStatus_t cublasGetVector_64(int64_t n, int64_t esize, const void *x, int64_t incx,
                                      void *y, int64_t incy)
{
    return vector_copy(n, esize, x, incx, y, incy, 0, NULL);
}

API cublasStatus_t cublasGetVector(int n, int esize, const void *x, int incx, void *y, int incy)
{
    return vector_copy(n, esize, x, incx, y, incy, 0, NULL);
}

API cublasStatus_t cublasSetVectorAsync_64(int64_t n, int64_t esize, const void *x, int64_t incx,
                                           void *y, int64_t incy, cudaStream_t s)
{
    return vector_copy(n, esize, x, incx, y, incy, 1, s);
}

API cublasStatus_t cublasSetVectorAsync(int n, int esize, const void *x, int incx, void *y,
                                        int incy, cudaStream_t s)
{
    return vector_copy(n, esize, x, incx, y, incy, 1, s);
}

API cublasStatus_t cublasGetVectorAsync_64(int64_t n, int64_t esize, const void *x, int64_t incx,
                                           void *y, int64_t incy, cudaStream_t s)
{
    return vector_copy(n, esize, x, incx, y, incy, 1, s);
}

API cublasStatus_t cublasGetVectorAsync(int n, int esize, const void *x, int incx, void *y,
                                        int incy, cudaStream_t s)
{
    return vector_copy(n, esize, x, incx, y, incy, 1, s);
}

API cublasStatus_t cublasSetMatrix_64(int64_t rows, int64_t cols, int64_t esize, const void *a,
                                      int64_t lda, void *b, int64_t ldb)
{
    return matrix_copy(rows, cols, esize, a, lda, b, ldb, 0, NULL);
}

API cublasStatus_t cublasSetMatrix(int rows, int cols, int esize, const void *a, int lda, void *b,
                                   int ldb)
{
    return matrix_copy(rows, cols, esize, a, lda, b, ldb, 0, NULL);
}

API cublasStatus_t cublasGetMatrix_64(int64_t rows, int64_t cols, int64_t esize, const void *a,
                                      int64_t lda, void *b, int64_t ldb)
{
    return matrix_copy(rows, cols, esize, a, lda, b, ldb, 0, NULL);
}

API cublasStatus_t cublasGetMatrix(int rows, int cols, int esize, const void *a, int lda, void *b,
                                   int ldb)
{
    return matrix_copy(rows, cols, esize, a, lda, b, ldb, 0, NULL);
}

API cublasStatus_t cublasSetMatrixAsync_64(int64_t rows, int64_t cols, int64_t esize,
                                           const void *a, int64_t lda, void *b, int64_t ldb,
                                           cudaStream_t s)
{
    return matrix_copy(rows, cols, esize, a, lda, b, ldb, 1, s);
}

API cublasStatus_t cublasSetMatrixAsync(int rows, int cols, int esize, const void *a, int lda,
                                        void *b, int ldb, cudaStream_t s)
{
    return matrix_copy(rows, cols, esize, a, lda, b, ldb, 1, s);
}

API cublasStatus_t cublasGetMatrixAsync_64(int64_t rows, int64_t cols, int64_t esize,
                                           const void *a, int64_t lda, void *b, int64_t ldb,
                                           cudaStream_t s)
{
    return matrix_copy(rows, cols, esize, a, lda, b, ldb, 1, s);
}

API cublasStatus_t cublasGetMatrixAsync(int rows, int cols, int esize, const void *a, int lda,
                                        void *b, int ldb, cudaStream_t s)
{
    return matrix_copy(rows, cols, esize, a, lda, b, ldb, 1, s);
}
