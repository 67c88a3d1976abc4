/* cuBLAS wrappers.
 *
 * d1 and d2:
 * - atomics are always CUBLAS_ATOMICS_NOT_ALLOWED on the real handle; the
 *   application's setting is remembered per handle and reported back by
 *   cublasGetAtomicsMode;
 * - every (handle, stream) gets a workspace of the shim's own (a device
 *   allocation of ES_BLAS_WS bytes, freed with the handle), applied after
 *   cublasCreate and after every cublasSetStream (cuBLAS resets the
 *   workspace there); a workspace the application sets is replaced by the
 *   shim's for the current stream. No allocation ever happens in a call on
 *   a capturing stream (device/devmem.h): cublasCreate makes the default
 *   stream's workspace and one spare; a stream first met while it captures
 *   (a framework setting its graph-capture stream) gets the spare, and the
 *   next call outside capture makes a new spare. A capturing stream met
 *   when the spare is used up keeps cuBLAS's own workspace (logged);
 * d2: SGEMM, SGEMM strided batched, GemmEx and GemmStridedBatchedEx
 *   with A = B in fp32 / fp16 / bf16, C of A's type or fp32 and a 32F
 *   compute type (the reduced-precision FAST_* ones included: they get full
 *   fp32) run on the shim's portable kernels (kernels/gemm.c). Not routed
 *   (vendor's choice kept, bits may differ across models): other types,
 *   pointer-array batched GEMMs, the _64 API. cuBLASLt is wrapped in
 *   intercept/cublaslt.c.
 * off: pass-through.
 *
 * The registry of handles is taken under es_state_lock, never on a GEMM.
 */
#include "intercept/enter.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/real.h"
#include "kernels/gemm.h"
#include "device/devmem.h"
#include "intercept/virtual/libh.h"

#include <stdlib.h>

#define ES_BLAS_WS (4u << 20)

typedef struct es_blas_ws {
    CUstream stream;
    CUdeviceptr ptr;
    struct es_blas_ws *next;
} es_blas_ws_t;

typedef struct es_blas {
    cublasHandle_t h;
    cublasAtomicsMode_t app_atomics;
    es_blas_ws_t *ws;
    CUdeviceptr spare;  /* made ahead for a stream first met while capturing */
    struct es_blas *next;
} es_blas_t;

static es_blas_t *es_blas_list;

/* Frameworks call cublasSetStream before every GEMM: each thread remembers
 * the last (handle, stream) it pinned, valid while no handle was destroyed
 * since (es_blas_gen), so the common case takes no lock. */
static unsigned long es_blas_gen;
static __thread struct {
    cublasHandle_t h;
    CUstream s;
    CUdeviceptr ptr;
    unsigned long gen;
} es_blas_last;

/* Under es_state_lock. */
static es_blas_t *es_blas_find(cublasHandle_t h, int create)
{
    for (es_blas_t *b = es_blas_list; b; b = b->next)
        if (b->h == h)
            return b;
    if (!create)
        return NULL;
    es_blas_t *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->h = h;
    b->app_atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
    b->next = es_blas_list;
    es_blas_list = b;
    return b;
}

static int es_det(void)
{
    return es_cfg.determinism != ES_DET_OFF;
}

/* Gives (h, stream) its own workspace: the one it has, else the spare
 * when s is capturing (no allocation then), else a new one; outside
 * capture a used spare is replaced. */
static cublasStatus_t es_blas_pin(cublasHandle_t h, CUstream s)
{
    CUdeviceptr ptr = 0, spare = 0;
    unsigned long gen = __atomic_load_n(&es_blas_gen, __ATOMIC_ACQUIRE);
    if (es_blas_last.h == h && es_blas_last.s == s && es_blas_last.gen == gen &&
        es_blas_last.ptr)
        return ES_REAL(cublas, cublasSetWorkspace_v2)(h, (void *)es_blas_last.ptr, ES_BLAS_WS);
    pthread_mutex_lock(&es_state_lock);
    es_blas_t *b = es_blas_find(h, 1);
    for (es_blas_ws_t *w = b ? b->ws : NULL; w; w = w->next)
        if (w->stream == s)
            ptr = w->ptr;
    int need_spare = b && !b->spare;
    pthread_mutex_unlock(&es_state_lock);
    if (!b)
        return CUBLAS_STATUS_ALLOC_FAILED;
    if (!es_lib_ready(ES_LIB_CUDA))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int capturing = es_devmem_capturing(s);
    if (!ptr || need_spare) {
        es_blas_ws_t *w = ptr ? NULL : calloc(1, sizeof(*w));
        if (!ptr && !w)
            return CUBLAS_STATUS_ALLOC_FAILED;
        CUdeviceptr fresh = 0, fresh_spare = 0;
        if (!capturing) {
            if (!ptr && es_devmem_alloc(&fresh, ES_BLAS_WS) != CUDA_SUCCESS)
                fresh = 0;
            if (need_spare && es_devmem_alloc(&fresh_spare, ES_BLAS_WS) != CUDA_SUCCESS)
                fresh_spare = 0;
        }
        pthread_mutex_lock(&es_state_lock);
        b = es_blas_find(h, 1);
        if (b && !ptr) {
            if (fresh) {
                ptr = fresh;
            } else if (capturing && b->spare) {
                ptr = b->spare;
                b->spare = 0;
            }
            if (ptr) {
                w->stream = s;
                w->ptr = ptr;
                w->next = b->ws;
                b->ws = w;
                w = NULL;
            }
        }
        if (b && fresh_spare && !b->spare) {
            b->spare = fresh_spare;
            fresh_spare = 0;
        }
        pthread_mutex_unlock(&es_state_lock);
        free(w);
        if (fresh_spare)
            spare = fresh_spare; /* the handle went away meanwhile */
        if (spare)
            es_devmem_free(spare);
        if (!b || !ptr) {
            if (b && fresh == 0 && !capturing)
                ES_WARN("cuBLAS handle %p: no device memory for a per-stream workspace",
                        (void *)h);
            else if (b)
                ES_WARN("cuBLAS handle %p: stream %p first used while it captures and no "
                        "spare workspace left: cuBLAS's own workspace is kept", (void *)h,
                        (void *)s);
            return CUBLAS_STATUS_ALLOC_FAILED;
        }
        ES_DEBUG("cuBLAS handle %p stream %p: workspace %#llx (%u bytes)%s", (void *)h, (void *)s,
                 (unsigned long long)ptr, ES_BLAS_WS, capturing ? " (the spare: capturing)" : "");
    }
    es_blas_last.h = h;
    es_blas_last.s = s;
    es_blas_last.ptr = ptr;
    es_blas_last.gen = gen;
    return ES_REAL(cublas, cublasSetWorkspace_v2)(h, (void *)ptr, ES_BLAS_WS);
}

ES_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    ES_ENTER(cublas, cublasCreate_v2);
    cublasStatus_t st = ES_REAL(cublas, cublasCreate_v2)(handle);
    if (st != CUBLAS_STATUS_SUCCESS || !es_det())
        return st;
    ES_REAL(cublas, cublasSetAtomicsMode)(*handle, CUBLAS_ATOMICS_NOT_ALLOWED);
    cudaStream_t s = NULL;
    ES_REAL(cublas, cublasGetStream_v2)(*handle, &s);
    cublasStatus_t ws = es_blas_pin(*handle, (CUstream)s);
    if (ws != CUBLAS_STATUS_SUCCESS)
        ES_WARN("cuBLAS handle %p: per-stream workspace not set (status %d)", (void *)*handle,
                (int)ws);
    return st;
}

ES_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    ES_ENTER(cublas, cublasDestroy_v2);
    es_blas_t *b = NULL;
    if (handle) {
        pthread_mutex_lock(&es_state_lock);
        for (es_blas_t **pp = &es_blas_list; *pp; pp = &(*pp)->next)
            if ((*pp)->h == handle) {
                b = *pp;
                *pp = b->next;
                break;
            }
        __atomic_fetch_add(&es_blas_gen, 1, __ATOMIC_ACQ_REL);
        pthread_mutex_unlock(&es_state_lock);
    }
    cublasStatus_t st = ES_REAL(cublas, cublasDestroy_v2)(handle);
    if (b) {
        /* cuMemFree waits for the work that may use the memory; a
         * capturing stream's workspace (its graph may use it) is kept */
        for (es_blas_ws_t *w = b->ws, *nx; w; w = nx) {
            nx = w->next;
            if (w->stream && es_devmem_capturing(w->stream))
                ES_WARN("cuBLAS handle %p destroyed while stream %p captures: its workspace "
                        "is kept", (void *)handle, (void *)w->stream);
            else
                es_devmem_free(w->ptr);
            free(w);
        }
        if (b->spare)
            es_devmem_free(b->spare);
        free(b);
    }
    return st;
}

ES_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId)
{
    ES_ENTER(cublas, cublasSetStream_v2);
    cublasStatus_t st = ES_REAL(cublas, cublasSetStream_v2)(handle, streamId);
    if (st != CUBLAS_STATUS_SUCCESS || !es_det())
        return st;
    cublasStatus_t ws = es_blas_pin(handle, (CUstream)streamId);
    if (ws != CUBLAS_STATUS_SUCCESS)
        ES_WARN("cuBLAS handle %p: per-stream workspace not set (status %d)", (void *)handle,
                (int)ws);
    return st;
}

ES_EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace,
                                               size_t workspaceSizeInBytes)
{
    ES_ENTER(cublas, cublasSetWorkspace_v2);
    if (!es_det())
        return ES_REAL(cublas, cublasSetWorkspace_v2)(handle, workspace, workspaceSizeInBytes);
    cudaStream_t s = NULL;
    cublasStatus_t st = ES_REAL(cublas, cublasGetStream_v2)(handle, &s);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    ES_DEBUG("cuBLAS handle %p: the application's workspace replaced by the shim's",
             (void *)handle);
    return es_blas_pin(handle, (CUstream)s);
}

ES_EXPORT cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode)
{
    ES_ENTER(cublas, cublasSetAtomicsMode);
    if (!es_det())
        return ES_REAL(cublas, cublasSetAtomicsMode)(handle, mode);
    if (mode != CUBLAS_ATOMICS_NOT_ALLOWED && mode != CUBLAS_ATOMICS_ALLOWED)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = ES_REAL(cublas, cublasSetAtomicsMode)(handle, CUBLAS_ATOMICS_NOT_ALLOWED);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    pthread_mutex_lock(&es_state_lock);
    es_blas_t *b = es_blas_find(handle, 1);
    if (b)
        b->app_atomics = mode;
    pthread_mutex_unlock(&es_state_lock);
    if (mode == CUBLAS_ATOMICS_ALLOWED)
        ES_INFO("cuBLAS handle %p: atomics kept NOT_ALLOWED (determinism)", (void *)handle);
    return st;
}

ES_EXPORT cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t *mode)
{
    ES_ENTER(cublas, cublasGetAtomicsMode);
    cublasStatus_t st = ES_REAL(cublas, cublasGetAtomicsMode)(handle, mode);
    if (st != CUBLAS_STATUS_SUCCESS || !es_det() || !mode)
        return st;
    pthread_mutex_lock(&es_state_lock);
    es_blas_t *b = es_blas_find(handle, 0);
    if (b)
        *mode = b->app_atomics;
    pthread_mutex_unlock(&es_state_lock);
    return st;
}

/* The GEMMs: one branch on the pass-through path (es_slow[cublas] is set in
 * d2 and with statistics, see shim/resolve.c), then a tail call of the real
 * function; everything else is in the out-of-line slow variant. */
#define ES_GEMM_WRAPPER(sym, params, args, d2_cond, d2_call)                            \
    __attribute__((noinline, cold)) static cublasStatus_t es_slow_##sym params           \
    {                                                                                    \
        es_slowpath(ES_LIB_CUBLAS, ES_IDX_##sym);                                        \
        cublasStatus_t st;                                                               \
        if (es_cfg.determinism == ES_DET_D2 && (d2_cond) && (d2_call) == 0)              \
            return st;                                                                   \
        return ES_REAL(cublas, sym) args;                                                \
    }                                                                                    \
    ES_EXPORT cublasStatus_t sym params                                                  \
    {                                                                                    \
        if (__builtin_expect(__atomic_load_n(&es_slow[ES_LIB_CUBLAS], __ATOMIC_ACQUIRE), 0)) \
            return es_slow_##sym args;                                                   \
        /* the handle translated inline (intercept/virtual/libh.h): one load */                  \
        cublasHandle_t const es_real_h_ = (cublasHandle_t)es_libh_real(handle);          \
        {                                                                                \
            cublasHandle_t const handle = es_real_h_;                                    \
            return ES_RAW(cublas, sym) args;                                             \
        }                                                                                \
    }

ES_GEMM_WRAPPER(cublasSgemm_v2,
                (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                 int m, int n, int k, const float *alpha, const float *A, int lda,
                 const float *B, int ldb, const float *beta, float *C, int ldc),
                (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc), 1,
                es_gemm_cublas(handle, transa, transb, m, n, k, alpha, A, ES_DT_F32, lda, 0, B,
                               ES_DT_F32, ldb, 0, beta, C, ES_DT_F32, ldc, 0, 1, &st))

ES_GEMM_WRAPPER(cublasSgemmStridedBatched,
                (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                 int m, int n, int k, const float *alpha, const float *A, int lda,
                 long long int strideA, const float *B, int ldb, long long int strideB,
                 const float *beta, float *C, int ldc, long long int strideC, int batchCount),
                (handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta,
                 C, ldc, strideC, batchCount),
                1,
                es_gemm_cublas(handle, transa, transb, m, n, k, alpha, A, ES_DT_F32, lda,
                               strideA, B, ES_DT_F32, ldb, strideB, beta, C, ES_DT_F32, ldc,
                               strideC, batchCount, &st))

/* GemmEx types the portable kernel takes: A = B in {32F, 16F, 16BF}, C = A's
 * type or 32F, accumulation in fp32 (the combinations cuBLAS documents for
 * a 32F compute type; others go to cuBLAS, which rejects or runs them). */
static int es_gemmex_portable(cudaDataType a, cudaDataType b, cudaDataType c,
                              cublasComputeType_t t)
{
    return es_gemm_dtype(a) >= 0 && a == b && (c == a || c == CUDA_R_32F) &&
           es_gemm_compute_f32(t);
}

ES_GEMM_WRAPPER(cublasGemmEx,
                (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                 int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                 int lda, const void *B, cudaDataType Btype, int ldb, const void *beta, void *C,
                 cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                 cublasGemmAlgo_t algo),
                (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C,
                 Ctype, ldc, computeType, algo),
                es_gemmex_portable(Atype, Btype, Ctype, computeType),
                es_gemm_cublas(handle, transa, transb, m, n, k, alpha, A, es_gemm_dtype(Atype),
                               lda, 0, B, es_gemm_dtype(Btype), ldb, 0, beta, C,
                               es_gemm_dtype(Ctype), ldc, 0, 1, &st))

ES_GEMM_WRAPPER(cublasGemmStridedBatchedEx,
                (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                 int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                 int lda, long long int strideA, const void *B, cudaDataType Btype, int ldb,
                 long long int strideB, const void *beta, void *C, cudaDataType Ctype, int ldc,
                 long long int strideC, int batchCount, cublasComputeType_t computeType,
                 cublasGemmAlgo_t algo),
                (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
                 strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo),
                es_gemmex_portable(Atype, Btype, Ctype, computeType),
                es_gemm_cublas(handle, transa, transb, m, n, k, alpha, A, es_gemm_dtype(Atype),
                               lda, strideA, B, es_gemm_dtype(Btype), ldb, strideB, beta, C,
                               es_gemm_dtype(Ctype), ldc, strideC, batchCount, &st))
