/* simcuda cuBLAS: the public API of libcublas.so.13 (handles, modes,
 * workspaces, GEMM family, Sgemv, Saxpy, Sscal, Sdot, Snrm2, Ssymv, the
 * Set/Get Vector/Matrix copy helpers).
 *
 * Every computation is enqueued on the handle's stream with the driver's
 * cuLaunchHostFunc and runs later on the driver's stream thread, reading the
 * (device = host) operands, and in device pointer mode the scalars, at
 * execution time. The driver is reached only through sim/common/simdrv
 * (dlopen + cuGetProcAddress), as NVIDIA's library does.
 *
 * Reproduced nondeterminism (cuBLAS documentation, "Results
 * Reproducibility"; docs/VENDOR-FACTS.md):
 *  - the GEMM heuristic reads the device (cc, SM count) and the shape, so
 *    bits differ across models and SM counts (gemm.c);
 *  - GEMMs that use the handle's shared workspace pool while GEMMs of the
 *    same handle are in flight on other streams get the no-workspace
 *    kernel, so their bits depend on what else runs. "In flight" is counted
 *    from enqueue to completion (a GPU overlaps kernels of ready streams; on
 *    the simulator this makes the effect reproducible in a test: hold one
 *    stream with a host function and run the other).
 *    A workspace of their own (cublasSetWorkspace after cublasSetStream) or
 *    CUBLAS_WORKSPACE_CONFIG=:4096:8 / :16:8 (per-stream pools) avoids it;
 *  - Ssymv with CUBLAS_ATOMICS_ALLOWED accumulates the column contributions
 *    in an order drawn from getrandom() per call.
 */
#include "sim/common/live.h"
#include "sim/common/simdrv.h"
#include "sim/cublas/gemm.h"

#include <cublas_v2.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

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
    pthread_cond_t idle;
    int outstanding;                 /* jobs enqueued and not finished */
    struct inflight inflight[MAX_STREAMS]; /* shared-pool GEMMs per stream */
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

/* ----------------------------------------------------------------- jobs */

typedef enum { JOB_GEMM, JOB_GEMV, JOB_AXPY, JOB_SCAL, JOB_DOT, JOB_NRM2, JOB_SYMV } job_kind_t;

typedef struct job {
    job_kind_t kind;
    struct cublasContext *h;
    CUstream stream;
    int dev_scalars;           /* read alpha/beta through the pointers at execution */
    float alpha, beta;
    const float *palpha, *pbeta;
    /* GEMM */
    sim_gemm_args_t g;
    int64_t batch;
    long long sa, sb, sc;      /* element strides (strided batched) */
    int ptr_array;             /* A, B, C are arrays of pointers (batched) */
    int shared_ws;             /* counted in the handle's in-flight table */
    size_t ws_bytes;
    sim_gemm_dev_t dev;
    /* level 1/2 */
    int mode;                  /* trans (gemv) or upper (symv) */
    int64_t m, n, lda, incx, incy;
    const float *A, *x;
    float *y, *result;
    int atomics;
} job_t;

static size_t elem_size(sim_dtype_t t)
{
    return t == SIM_F32 ? 4 : 2;
}

static int other_streams_busy(struct cublasContext *h, CUstream self)
{
    int busy = 0;
    pthread_mutex_lock(&h->lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (h->inflight[i].count > 0 && h->inflight[i].stream != self)
            busy = 1;
    pthread_mutex_unlock(&h->lock);
    return busy;
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

static void run_gemm(job_t *j)
{
    int contended = j->shared_ws && other_streams_busy(j->h, j->stream);
    sim_gemm_plan_t plan;
    sim_gemm_choose(&j->dev, j->g.m, j->g.n, j->g.k, j->batch, contended ? 0 : j->ws_bytes,
                    contended, &plan);
    sim_gemm_args_t g = j->g;
    if (j->dev_scalars) {
        g.alpha = *j->palpha;
        g.beta = *j->pbeta;
    } else {
        g.alpha = j->alpha;
        g.beta = j->beta;
    }
    for (int64_t b = 0; b < j->batch; b++) {
        sim_gemm_args_t gb = g;
        if (j->ptr_array) {
            gb.A = ((const void *const *)g.A)[b];
            gb.B = ((const void *const *)g.B)[b];
            gb.C = ((void *const *)g.C)[b];
        } else {
            gb.A = (const char *)g.A + (ptrdiff_t)(b * j->sa) * (ptrdiff_t)elem_size(g.atype);
            gb.B = (const char *)g.B + (ptrdiff_t)(b * j->sb) * (ptrdiff_t)elem_size(g.btype);
            gb.C = (char *)g.C + (ptrdiff_t)(b * j->sc) * (ptrdiff_t)elem_size(g.ctype);
        }
        if (sim_gemm_run(&plan, &gb) != 0)
            fprintf(stderr, "simcuda cuBLAS: GEMM out of host memory (result not written)\n");
    }
}

static void run_symv(job_t *j, float alpha, float beta)
{
    int64_t *order = NULL;
    if (j->atomics && j->n > 1) {
        /* Float atomics: the order in which column contributions land
         * varies per call (real entropy, never a fixed seed). */
        order = malloc((size_t)j->n * sizeof(*order));
        if (order) {
            uint64_t st = 0;
            while (getrandom(&st, sizeof(st), 0) != (ssize_t)sizeof(st))
                ;
            st |= 1;
            for (int64_t i = 0; i < j->n; i++)
                order[i] = i;
            for (int64_t i = j->n - 1; i > 0; i--) {
                st ^= st >> 12;
                st ^= st << 25;
                st ^= st >> 27;
                uint64_t r = (st * 0x2545F4914F6CDD1DULL) % (uint64_t)(i + 1);
                int64_t t = order[i];
                order[i] = order[r];
                order[r] = t;
            }
        }
    }
    if (sim_ssymv(j->mode, j->n, alpha, j->A, j->lda, j->x, j->incx, beta, j->y, j->incy,
                  order) != 0)
        fprintf(stderr, "simcuda cuBLAS: Ssymv out of host memory (result not written)\n");
    free(order);
}

static void CUDA_CB run_job(void *p)
{
    job_t *j = p;
    struct cublasContext *h = j->h;
    float alpha = j->alpha, beta = j->beta;
    if (j->kind != JOB_GEMM && j->dev_scalars) {
        if (j->palpha)
            alpha = *j->palpha;
        if (j->pbeta)
            beta = *j->pbeta;
    }
    switch (j->kind) {
    case JOB_GEMM: run_gemm(j); break;
    case JOB_GEMV:
        sim_sgemv(j->mode, j->m, j->n, alpha, j->A, j->lda, j->x, j->incx, beta, j->y, j->incy);
        break;
    case JOB_AXPY: sim_saxpy(j->n, alpha, j->x, j->incx, j->y, j->incy); break;
    case JOB_SCAL: sim_sscal(j->n, alpha, j->y, j->incy); break;
    case JOB_DOT:
        *j->result = j->n > 0 ? sim_sdot(j->n, j->x, j->incx, j->A, j->incy) : 0.0f;
        break;
    case JOB_NRM2: *j->result = j->n > 0 && j->incx > 0 ? sim_snrm2(j->n, j->x, j->incx) : 0.0f; break;
    case JOB_SYMV: run_symv(j, alpha, beta); break;
    }
    pthread_mutex_lock(&h->lock);
    if (j->shared_ws)
        inflight_add_locked(h, j->stream, -1);
    if (--h->outstanding == 0)
        pthread_cond_broadcast(&h->idle);
    pthread_mutex_unlock(&h->lock);
    free(j);
}

/* Takes the handle's stream, scalars and workspace into j and enqueues it.
 * Frees j on failure. */
static cublasStatus_t enqueue(struct cublasContext *h, job_t *j, const float *alpha,
                              const float *beta)
{
    const simdrv_t *d = drv();
    if (!d) {
        free(j);
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    j->h = h;
    j->stream = h->stream;
    if (h->pmode == CUBLAS_POINTER_MODE_DEVICE) {
        j->dev_scalars = 1;
        j->palpha = alpha;
        j->pbeta = beta;
    } else {
        j->alpha = alpha ? *alpha : 0.0f;
        j->beta = beta ? *beta : 0.0f;
    }
    if (j->kind == JOB_GEMM) {
        j->dev = h->dev;
        if (h->sm_target > 0)
            j->dev.sm_count = h->sm_target;
        if (h->ws_user) {
            j->ws_bytes = h->ws_size;
        } else if (h->cfg_valid && h->cfg_deterministic) {
            j->ws_bytes = h->cfg_size; /* a pool per stream */
        } else {
            j->shared_ws = 1;
            j->ws_bytes = h->cfg_valid ? h->cfg_size : sim_gemm_default_workspace(&h->dev);
        }
    }
    pthread_mutex_lock(&h->lock);
    if (j->shared_ws && inflight_add_locked(h, j->stream, 1) != 0)
        j->shared_ws = 0; /* table full: not counted */
    h->outstanding++;
    pthread_mutex_unlock(&h->lock);
    if (d->cuLaunchHostFunc(j->stream, run_job, j) != CUDA_SUCCESS) {
        pthread_mutex_lock(&h->lock);
        if (j->shared_ws)
            inflight_add_locked(h, j->stream, -1);
        if (--h->outstanding == 0)
            pthread_cond_broadcast(&h->idle);
        pthread_mutex_unlock(&h->lock);
        free(j);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    return CUBLAS_STATUS_SUCCESS;
}

static job_t *job_new(job_kind_t kind)
{
    job_t *j = calloc(1, sizeof(*j));
    if (j)
        j->kind = kind;
    return j;
}

/* ------------------------------------------------------ handle functions */

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
    h = calloc(1, sizeof(*h));
    if (!h) {
        st = CUBLAS_STATUS_ALLOC_FAILED;
        goto out;
    }
    h->magic = HANDLE_MAGIC;
    h->ctx = ctx;
    h->dev.cc_major = info.cc_major;
    h->dev.cc_minor = info.cc_minor;
    h->dev.sm_count = info.sm_count;
    h->pmode = CUBLAS_POINTER_MODE_HOST;
    h->amode = CUBLAS_ATOMICS_NOT_ALLOWED;
    h->math = CUBLAS_DEFAULT_MATH;
    read_ws_config(h);
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->idle, NULL);
    if (sim_live_add(&g_handles, h) != 0) {
        pthread_mutex_destroy(&h->lock);
        pthread_cond_destroy(&h->idle);
        free(h);
        h = NULL;
        st = CUBLAS_STATUS_ALLOC_FAILED;
        goto out;
    }
out:
    *handle = h;
    return st;
}

API cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    if (!sim_live_remove(&g_handles, h))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    /* Like the real one (which synchronises the device): work already
     * enqueued finishes before the handle goes away. */
    pthread_mutex_lock(&h->lock);
    while (h->outstanding > 0)
        pthread_cond_wait(&h->idle, &h->lock);
    pthread_mutex_unlock(&h->lock);
    h->magic = 0;
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->idle);
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
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

API const char *cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
    }
    return "unknown error";
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
    job_t *j = job_new(JOB_GEMM);
    if (!j)
        return CUBLAS_STATUS_ALLOC_FAILED;
    j->g = (sim_gemm_args_t){.transa = ta, .transb = tb, .m = m, .n = n, .k = k,
                             .atype = at, .btype = bt, .ctype = ct, .round = round,
                             .A = A, .lda = lda, .B = B, .ldb = ldb, .C = C, .ldc = ldc};
    j->batch = batch;
    j->sa = sa;
    j->sb = sb;
    j->sc = sc;
    j->ptr_array = ptr_array;
    if (math_mode_applies && round == SIM_ROUND_NONE && at == SIM_F32) {
        unsigned base = (unsigned)h->math & 0xfu;
        if (base == CUBLAS_TF32_TENSOR_OP_MATH && h->dev.cc_major >= 8)
            j->g.round = SIM_ROUND_TF32; /* TF32 tensor cores allowed for fp32 */
        else if (base == CUBLAS_TENSOR_OP_MATH && h->dev.cc_major >= 7)
            j->g.round = SIM_ROUND_F16;  /* cublas_api.h: same as COMPUTE_32F_FAST_16F */
    }
    return enqueue(h, j, alpha, beta);
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
    job_t *j = job_new(JOB_GEMV);
    if (!j)
        return CUBLAS_STATUS_ALLOC_FAILED;
    j->mode = t;
    j->m = m;
    j->n = n;
    j->A = A;
    j->lda = lda;
    j->x = x;
    j->incx = incx;
    j->y = y;
    j->incy = incy;
    return enqueue(h, j, alpha, beta);
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
    job_t *j = job_new(JOB_AXPY);
    if (!j)
        return CUBLAS_STATUS_ALLOC_FAILED;
    j->n = n;
    j->x = x;
    j->incx = incx;
    j->y = y;
    j->incy = incy;
    return enqueue(h, j, alpha, NULL);
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
    job_t *j = job_new(JOB_SCAL);
    if (!j)
        return CUBLAS_STATUS_ALLOC_FAILED;
    j->n = n;
    j->y = x;
    j->incy = incx;
    return enqueue(h, j, alpha, NULL);
}

API cublasStatus_t cublasSscal_v2(cublasHandle_t h, int n, const float *alpha, float *x, int incx)
{
    return cublasSscal_v2_64(h, n, alpha, x, incx);
}

/* Scalar results: written at execution time; in host pointer mode the call
 * waits for its stream, as the real one does. */
static cublasStatus_t scalar_result(cublasHandle_t h, job_t *j)
{
    int host = h->pmode == CUBLAS_POINTER_MODE_HOST;
    CUstream s = h->stream;
    cublasStatus_t st = enqueue(h, j, NULL, NULL);
    if (st == CUBLAS_STATUS_SUCCESS && host && drv()->cuStreamSynchronize(s) != CUDA_SUCCESS)
        st = CUBLAS_STATUS_EXECUTION_FAILED;
    return st;
}

API cublasStatus_t cublasSdot_v2_64(cublasHandle_t h, int64_t n, const float *x, int64_t incx,
                                    const float *y, int64_t incy, float *result)
{
    CHECK_HANDLE(h);
    if (!result || (n > 0 && (!x || !y)))
        return CUBLAS_STATUS_INVALID_VALUE;
    job_t *j = job_new(JOB_DOT);
    if (!j)
        return CUBLAS_STATUS_ALLOC_FAILED;
    j->n = n;
    j->x = x;
    j->incx = incx;
    j->A = y;
    j->incy = incy;
    j->result = result;
    return scalar_result(h, j);
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
    job_t *j = job_new(JOB_NRM2);
    if (!j)
        return CUBLAS_STATUS_ALLOC_FAILED;
    j->n = n;
    j->x = x;
    j->incx = incx;
    j->result = result;
    return scalar_result(h, j);
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
    job_t *j = job_new(JOB_SYMV);
    if (!j)
        return CUBLAS_STATUS_ALLOC_FAILED;
    j->mode = uplo == CUBLAS_FILL_MODE_UPPER;
    j->n = n;
    j->A = A;
    j->lda = lda;
    j->x = x;
    j->incx = incx;
    j->y = y;
    j->incy = incy;
    j->atomics = h->amode == CUBLAS_ATOMICS_ALLOWED;
    return enqueue(h, j, alpha, beta);
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
