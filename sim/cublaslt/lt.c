/* simcuda cuBLASLt (build/sim/libcublasLt.so.13): the part of cuBLASLt
 * PyTorch uses for addmm / Linear (at::cuda::blas::gemm_and_bias and
 * bgemm_internal_cublaslt): handles, matmul descriptors, matrix layouts,
 * preferences, cublasLtMatmulAlgoGetHeuristic, cublasLtMatmul with the
 * DEFAULT, RELU, BIAS, RELU_BIAS, GELU, GELU_BIAS, BGRADA and BGRADB
 * epilogues on fp32 / fp16 / bf16 data with fp32 compute, strided batches,
 * and the algorithm configuration attributes (id, tile, split-K, reduction
 * scheme).
 *
 * Like NVIDIA's, the library reaches the driver only through
 * cuGetProcAddress (sim/common/simdrv.h) and runs its work as kernels of
 * its own module (sim/cublaslt/kernels.cu, embedded; on simcuda the
 * launches run the same bodies, sim/cublaslt/lt_kernels.h, through the
 * twin library) launched on the caller's stream: no host function ever
 * touches device memory.
 *
 * The heuristic (lt_choose) reproduces what makes cuBLASLt's bits differ:
 * it reads the device (compute capability, SM count or the descriptor's
 * SM_COUNT_TARGET), the shape, the workspace the preference allows, the
 * reduction schemes it allows and the pointer alignments it promises, and
 * picks a k-chunk, a split-K factor and a reduction scheme (see
 * lt_kernels.h for the order each implies). So bits differ between GPU
 * models, between workspace sizes and between alignments (PyTorch derives
 * the alignments from the tensors' addresses), and are the same run to run
 * for the same inputs on one model.
 */
#include "sim/cublaslt/lt_kernels.h"
#include "sim/common/cublas_status.h"
#include "sim/common/kmod.h"
#include "sim/common/live.h"
#include "sim/common/simdrv.h"

#include <cublasLt.h>
#include <pthread.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define API __attribute__((visibility("default")))

#define LT_HANDLE_MAGIC 0x4c746868u /* "hhtL" */
#define LT_DESC_MAGIC 0x4c746464u
#define LT_LAYOUT_MAGIC 0x4c746c6cu
#define LT_PREF_MAGIC 0x4c747070u
#define LT_ALGO_MAGIC 0x4c746161u
#define LT_GRID_MAX 65535LL

struct cublasLtContext {
    uint32_t magic;
    /* the device current at cublasLtCreate (or, created with no context
     * current, at the handle's first heuristic or matmul): the handle
     * refuses work anywhere else (bound_ok) */
    pthread_mutex_t lock;
    int bound;
    CUuuid uuid;
};

/* What lives inside NVIDIA's semi-opaque structures (their sizes are part
 * of the ABI: applications may hold them on the stack and Init them). */
typedef struct lt_desc {
    uint32_t magic;
    int32_t compute, scale, pointer_mode, transa, transb, transc, fill;
    uint32_t epilogue;
    int32_t sm_target, bias_type;
    int32_t aux_type;
    const void *bias;
    int64_t bias_stride, aux_ld, aux_stride, alpha_stride;
    void *aux;
    int8_t fast_accum;
} lt_desc_t;
_Static_assert(sizeof(lt_desc_t) <= sizeof(cublasLtMatmulDescOpaque_t), "matmul descriptor");

typedef struct lt_layout {
    uint32_t magic;
    uint32_t type;
    int32_t order, batch, batch_mode;
    uint64_t rows, cols;
    int64_t ld, stride, plane;
} lt_layout_t;
_Static_assert(sizeof(lt_layout_t) <= sizeof(cublasLtMatrixLayoutOpaque_t), "matrix layout");

typedef struct lt_pref {
    uint32_t magic;
    uint32_t search, mask;
    uint32_t align[4]; /* A, B, C, D */
    float waves;
    uint64_t workspace, impl;
} lt_pref_t;
_Static_assert(sizeof(lt_pref_t) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "preference");

/* An algorithm: the kernel family and its configuration. */
typedef struct lt_algo {
    uint32_t magic;
    int32_t id;      /* LT_ALGO_WIDE (128-byte aligned operands), LT_ALGO_VEC (16) or
                      * LT_ALGO_SCALAR (any) */
    uint32_t tile;   /* tile id (descriptive: rows * 1000 + cols of the block's tile) */
    uint32_t splitk; /* requested split-K (1: none) */
    uint32_t scheme; /* reduction scheme for splitk > 1 */
} lt_algo_t;
_Static_assert(sizeof(lt_algo_t) <= sizeof(cublasLtMatmulAlgo_t), "algorithm");

enum { LT_ALGO_SCALAR = 0, LT_ALGO_VEC = 1, LT_ALGO_WIDE = 2, LT_NALGOS = 3 };

/* The alignment (bytes) each kernel family needs of every operand. */
static const unsigned g_family_align[LT_NALGOS] = { 1, 16, 128 };

static sim_live_t g_handles = SIM_LIVE_INIT;

/* ---- small helpers -------------------------------------------------------------------- */

static lt_desc_t *desc_of(cublasLtMatmulDesc_t d)
{
    lt_desc_t *x = (lt_desc_t *)d;
    return x && x->magic == LT_DESC_MAGIC ? x : NULL;
}

static lt_layout_t *layout_of(cublasLtMatrixLayout_t l)
{
    lt_layout_t *x = (lt_layout_t *)l;
    return x && x->magic == LT_LAYOUT_MAGIC ? x : NULL;
}

static lt_pref_t *pref_of(cublasLtMatmulPreference_t p)
{
    lt_pref_t *x = (lt_pref_t *)p;
    return x && x->magic == LT_PREF_MAGIC ? x : NULL;
}

static int handle_ok(cublasLtHandle_t h)
{
    return h && sim_live_has(&g_handles, h);
}

/* Whether a live handle may work in the current context: its device is the
 * current one. A handle made with no context current binds here. */
static int bound_ok(cublasLtHandle_t h)
{
    simdrv_devinfo_t info;
    int ok;
    pthread_mutex_lock(&h->lock);
    if (!h->bound && simdrv_current_device(&info) == 0) {
        h->uuid = info.uuid;
        h->bound = 1;
    }
    ok = h->bound && simdrv_bound_here(&h->uuid);
    pthread_mutex_unlock(&h->lock);
    return ok;
}

/* The LT_* data type of a cudaDataType (-1: not supported). */
static int lt_type(uint32_t t)
{
    switch (t) {
    case CUDA_R_32F: return LT_F32;
    case CUDA_R_16F: return LT_F16;
    case CUDA_R_16BF: return LT_BF16;
    default: return -1;
    }
}

static size_t type_size(int t)
{
    return t == LT_F32 ? 4 : 2;
}

static int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Copies an attribute value of exactly `want` bytes (set). */
static cublasStatus_t put(void *dst, size_t want, const void *buf, size_t size)
{
    if (!buf || size != want)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(dst, buf, want);
    return CUBLAS_STATUS_SUCCESS;
}

/* Reads an attribute of `have` bytes (get): a size query with buf NULL and
 * size 0, else the buffer must hold it. */
static cublasStatus_t get(const void *src, size_t have, void *buf, size_t size, size_t *written)
{
    if (size == 0 && !buf) {
        if (!written)
            return CUBLAS_STATUS_INVALID_VALUE;
        *written = have;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!buf || size < have)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, src, have);
    if (written)
        *written = have;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- library ---------------------------------------------------------------------------- */

API cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle)
{
    if (!lightHandle)
        return CUBLAS_STATUS_INVALID_VALUE;
    const simdrv_t *d = simdrv_get();
    if (!d || d->cuInit(0) != CUDA_SUCCESS)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    struct cublasLtContext *h = calloc(1, sizeof(*h));
    if (!h)
        return CUBLAS_STATUS_ALLOC_FAILED;
    h->magic = LT_HANDLE_MAGIC;
    pthread_mutex_init(&h->lock, NULL);
    simdrv_devinfo_t info;
    if (simdrv_current_device(&info) == 0) {
        h->uuid = info.uuid;
        h->bound = 1;
    }
    if (sim_live_add(&g_handles, h)) {
        pthread_mutex_destroy(&h->lock);
        free(h);
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    *lightHandle = h;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle)
{
    if (!lightHandle || !sim_live_remove(&g_handles, lightHandle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    lightHandle->magic = 0;
    pthread_mutex_destroy(&lightHandle->lock);
    free(lightHandle);
    return CUBLAS_STATUS_SUCCESS;
}

API size_t cublasLtGetVersion(void)
{
    return CUBLAS_VER_MAJOR * 10000 + CUBLAS_VER_MINOR * 100 + CUBLAS_VER_PATCH;
}

API size_t cublasLtGetCudartVersion(void)
{
    return 13000;
}

API cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int *value)
{
    if (!value)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
}

API const char *cublasLtGetStatusName(cublasStatus_t status)
{
    return sim_cublas_status_name(status);
}

API const char *cublasLtGetStatusString(cublasStatus_t status)
{
    return sim_cublas_status_string(status);
}

/* ---- matmul descriptor ------------------------------------------------------------------ */

API cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t matmulDesc, size_t size,
                                                   cublasComputeType_t computeType,
                                                   cudaDataType_t scaleType)
{
    if (!matmulDesc || size < sizeof(cublasLtMatmulDescOpaque_t))
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_desc_t d = { 0 };
    d.magic = LT_DESC_MAGIC;
    d.compute = (int32_t)computeType;
    d.scale = (int32_t)scaleType;
    d.transa = d.transb = d.transc = CUBLAS_OP_N;
    d.fill = CUBLAS_FILL_MODE_FULL;
    d.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    d.bias_type = -1; /* D's type */
    memset(matmulDesc, 0, sizeof(cublasLtMatmulDescOpaque_t));
    memcpy(matmulDesc, &d, sizeof(d));
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                            cublasComputeType_t computeType,
                                            cudaDataType_t scaleType)
{
    if (!matmulDesc)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulDesc_t d = malloc(sizeof(*d));
    if (!d)
        return CUBLAS_STATUS_ALLOC_FAILED;
    cublasLtMatmulDescInit_internal(d, sizeof(*d), computeType, scaleType);
    *matmulDesc = d;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc)
{
    lt_desc_t *d = desc_of(matmulDesc);
    if (!matmulDesc)
        return CUBLAS_STATUS_SUCCESS;
    if (!d)
        return CUBLAS_STATUS_INVALID_VALUE;
    d->magic = 0;
    free(matmulDesc);
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                  cublasLtMatmulDescAttributes_t attr,
                                                  const void *buf, size_t sizeInBytes)
{
    lt_desc_t *d = desc_of(matmulDesc);
    if (!d)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return put(&d->compute, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return put(&d->scale, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return put(&d->pointer_mode, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSA: return put(&d->transa, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSB: return put(&d->transb, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_TRANSC: return put(&d->transc, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_FILL_MODE: return put(&d->fill, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return put(&d->epilogue, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return put(&d->bias, sizeof(void *), buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return put(&d->bias_stride, 8, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        return put(&d->aux, sizeof(void *), buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return put(&d->aux_ld, 8, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
        return put(&d->aux_stride, 8, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
        return put(&d->aux_type, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE:
        return put(&d->alpha_stride, 8, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: return put(&d->sm_target, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return put(&d->bias_type, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return put(&d->fast_accum, 1, buf, sizeInBytes);
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
}

API cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                  cublasLtMatmulDescAttributes_t attr, void *buf,
                                                  size_t sizeInBytes, size_t *sizeWritten)
{
    lt_desc_t *d = desc_of(matmulDesc);
    if (!d)
        return CUBLAS_STATUS_INVALID_VALUE;
    int32_t bias_type = d->bias_type;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return get(&d->compute, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return get(&d->scale, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
        return get(&d->pointer_mode, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_TRANSA: return get(&d->transa, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_TRANSB: return get(&d->transb, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_TRANSC: return get(&d->transc, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_FILL_MODE: return get(&d->fill, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return get(&d->epilogue, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        return get(&d->bias, sizeof(void *), buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
        return get(&d->bias_stride, 8, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        return get(&d->aux, sizeof(void *), buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        return get(&d->aux_ld, 8, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
        return get(&d->aux_stride, 8, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
        return get(&d->aux_type, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE:
        return get(&d->alpha_stride, 8, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET:
        return get(&d->sm_target, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        return get(&bias_type, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM:
        return get(&d->fast_accum, 1, buf, sizeInBytes, sizeWritten);
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
}

/* ---- matrix layout ----------------------------------------------------------------------- */

API cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t matLayout, size_t size,
                                                     cudaDataType type, uint64_t rows,
                                                     uint64_t cols, int64_t ld)
{
    if (!matLayout || size < sizeof(cublasLtMatrixLayoutOpaque_t))
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_layout_t l = { 0 };
    l.magic = LT_LAYOUT_MAGIC;
    l.type = (uint32_t)type;
    l.order = CUBLASLT_ORDER_COL;
    l.batch = 1;
    l.rows = rows;
    l.cols = cols;
    l.ld = ld;
    memset(matLayout, 0, sizeof(cublasLtMatrixLayoutOpaque_t));
    memcpy(matLayout, &l, sizeof(l));
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                              uint64_t rows, uint64_t cols, int64_t ld)
{
    if (!matLayout)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatrixLayout_t l = malloc(sizeof(*l));
    if (!l)
        return CUBLAS_STATUS_ALLOC_FAILED;
    cublasLtMatrixLayoutInit_internal(l, sizeof(*l), type, rows, cols, ld);
    *matLayout = l;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout)
{
    lt_layout_t *l = layout_of(matLayout);
    if (!matLayout)
        return CUBLAS_STATUS_SUCCESS;
    if (!l)
        return CUBLAS_STATUS_INVALID_VALUE;
    l->magic = 0;
    free(matLayout);
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                    cublasLtMatrixLayoutAttribute_t attr,
                                                    const void *buf, size_t sizeInBytes)
{
    lt_layout_t *l = layout_of(matLayout);
    if (!l)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return put(&l->type, 4, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return put(&l->order, 4, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return put(&l->rows, 8, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return put(&l->cols, 8, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_LD: return put(&l->ld, 8, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return put(&l->batch, 4, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return put(&l->stride, 8, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: return put(&l->plane, 8, buf, sizeInBytes);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: return put(&l->batch_mode, 4, buf, sizeInBytes);
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
}

API cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout,
                                                    cublasLtMatrixLayoutAttribute_t attr,
                                                    void *buf, size_t sizeInBytes,
                                                    size_t *sizeWritten)
{
    lt_layout_t *l = layout_of(matLayout);
    if (!l)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return get(&l->type, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return get(&l->order, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return get(&l->rows, 8, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return get(&l->cols, 8, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_LD: return get(&l->ld, 8, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
        return get(&l->batch, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
        return get(&l->stride, 8, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET:
        return get(&l->plane, 8, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE:
        return get(&l->batch_mode, 4, buf, sizeInBytes, sizeWritten);
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
}

/* ---- preference --------------------------------------------------------------------------- */

API cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref,
                                                         size_t size)
{
    if (!pref || size < sizeof(cublasLtMatmulPreferenceOpaque_t))
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_pref_t p = { 0 };
    p.magic = LT_PREF_MAGIC;
    p.search = CUBLASLT_SEARCH_BEST_FIT;
    p.mask = CUBLASLT_REDUCTION_SCHEME_MASK;
    for (int i = 0; i < 4; i++)
        p.align[i] = 256;
    p.impl = ~0ull;
    memset(pref, 0, sizeof(cublasLtMatmulPreferenceOpaque_t));
    memcpy(pref, &p, sizeof(p));
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    if (!pref)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasLtMatmulPreference_t p = malloc(sizeof(*p));
    if (!p)
        return CUBLAS_STATUS_ALLOC_FAILED;
    cublasLtMatmulPreferenceInit_internal(p, sizeof(*p));
    *pref = p;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    lt_pref_t *p = pref_of(pref);
    if (!pref)
        return CUBLAS_STATUS_SUCCESS;
    if (!p)
        return CUBLAS_STATUS_INVALID_VALUE;
    p->magic = 0;
    free(pref);
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                        cublasLtMatmulPreferenceAttributes_t attr,
                                                        const void *buf, size_t sizeInBytes)
{
    lt_pref_t *p = pref_of(pref);
    if (!p)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return put(&p->search, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return put(&p->workspace, 8, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return put(&p->mask, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return put(&p->align[0], 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return put(&p->align[1], 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return put(&p->align[2], 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return put(&p->align[3], 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return put(&p->waves, 4, buf, sizeInBytes);
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: return put(&p->impl, 8, buf, sizeInBytes);
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
}

API cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                        cublasLtMatmulPreferenceAttributes_t attr,
                                                        void *buf, size_t sizeInBytes,
                                                        size_t *sizeWritten)
{
    lt_pref_t *p = pref_of(pref);
    if (!p)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return get(&p->search, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        return get(&p->workspace, 8, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
        return get(&p->mask, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
        return get(&p->align[0], 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
        return get(&p->align[1], 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
        return get(&p->align[2], 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
        return get(&p->align[3], 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return get(&p->waves, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: return get(&p->impl, 8, buf, sizeInBytes, sizeWritten);
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
}

/* ---- the problem ---------------------------------------------------------------------------- */

/* Checks a matmul's descriptors (as cuBLASLt would) and fills the kernel
 * arguments that do not depend on the algorithm or the data pointers. */
static cublasStatus_t problem(const lt_desc_t *d, const lt_layout_t *la, const lt_layout_t *lb,
                              const lt_layout_t *lc, const lt_layout_t *ld, lt_args_t *a)
{
    memset(a, 0, sizeof(*a));
    if (!d || !la || !lb || !lc || !ld)
        return CUBLAS_STATUS_INVALID_VALUE;
    if ((d->transa != CUBLAS_OP_N && d->transa != CUBLAS_OP_T && d->transa != CUBLAS_OP_C) ||
        (d->transb != CUBLAS_OP_N && d->transb != CUBLAS_OP_T && d->transb != CUBLAS_OP_C))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (d->transc != CUBLAS_OP_N || la->order != CUBLASLT_ORDER_COL ||
        lb->order != CUBLASLT_ORDER_COL || lc->order != CUBLASLT_ORDER_COL ||
        ld->order != CUBLASLT_ORDER_COL || la->plane || lb->plane || lc->plane || ld->plane ||
        la->batch_mode || lb->batch_mode || lc->batch_mode || ld->batch_mode)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->scale != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    switch (d->compute) {
    case CUBLAS_COMPUTE_32F: case CUBLAS_COMPUTE_32F_PEDANTIC: a->round = LT_ROUND_NONE; break;
    case CUBLAS_COMPUTE_32F_FAST_TF32: a->round = LT_ROUND_TF32; break;
    case CUBLAS_COMPUTE_32F_FAST_16F: a->round = LT_ROUND_F16; break;
    case CUBLAS_COMPUTE_32F_FAST_16BF: a->round = LT_ROUND_BF16; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST &&
        d->pointer_mode != CUBLASLT_POINTER_MODE_DEVICE)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    a->at = lt_type(la->type), a->bt = lt_type(lb->type);
    a->ct = lt_type(lc->type), a->dt = lt_type(ld->type);
    if (a->at < 0 || a->at != a->bt || a->ct != a->dt || (a->dt != a->at && a->dt != LT_F32))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (a->round != LT_ROUND_NONE && a->at != LT_F32)
        a->round = LT_ROUND_NONE; /* 16-bit inputs are already that precision */
    a->ta = d->transa != CUBLAS_OP_N;
    a->tb = d->transb != CUBLAS_OP_N;
    uint64_t m = ld->rows, n = ld->cols, k = a->ta ? la->rows : la->cols;
    if ((a->ta ? la->cols : la->rows) != m || (a->tb ? lb->rows : lb->cols) != n ||
        (a->tb ? lb->cols : lb->rows) != k || lc->rows != m || lc->cols != n)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m > 0x7fffffffu || n > 0x7fffffffu || k > 0x7fffffffu)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (la->ld < (int64_t)(la->rows > 1 ? la->rows : 1) ||
        lb->ld < (int64_t)(lb->rows > 1 ? lb->rows : 1) ||
        lc->ld < (int64_t)(m > 1 ? m : 1) || ld->ld < (int64_t)(m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (la->batch < 1 || la->batch != lb->batch || la->batch != lc->batch ||
        la->batch != ld->batch)
        return CUBLAS_STATUS_INVALID_VALUE;
    a->m = (int)m, a->n = (int)n, a->k = (int)k, a->batch = la->batch;
    a->lda = la->ld, a->ldb = lb->ld, a->ldc = lc->ld, a->ldd = ld->ld;
    a->sA = la->stride, a->sB = lb->stride, a->sC = lc->stride, a->sD = ld->stride;
    switch (d->epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: break;
    case CUBLASLT_EPILOGUE_RELU: a->epi = LT_EPI_RELU; break;
    case CUBLASLT_EPILOGUE_BIAS: a->epi = LT_EPI_BIAS; break;
    case CUBLASLT_EPILOGUE_RELU_BIAS: a->epi = LT_EPI_BIAS | LT_EPI_RELU; break;
    case CUBLASLT_EPILOGUE_GELU: a->epi = LT_EPI_GELU; break;
    case CUBLASLT_EPILOGUE_GELU_BIAS: a->epi = LT_EPI_BIAS | LT_EPI_GELU; break;
    case CUBLASLT_EPILOGUE_BGRADA: a->epi = LT_EPI_BGRADA; break;
    case CUBLASLT_EPILOGUE_BGRADB: a->epi = LT_EPI_BGRADB; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED; /* AUX, DRELU, DGELU */
    }
    a->biast = d->bias_type < 0 ? a->dt : lt_type((uint32_t)d->bias_type);
    if (a->biast < 0)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    a->sbias = d->bias_stride;
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- the heuristic ------------------------------------------------------------------------------ */

typedef struct lt_arch {
    int tile_m, tile_n, kc, cap;
} lt_arch_t;

/* Per architecture: the kernels' tile, k-chunk and largest split-K. */
static lt_arch_t arch_for(int cc)
{
    if (cc >= 100)
        return (lt_arch_t){ 256, 256, 128, 16 };
    if (cc >= 90)
        return (lt_arch_t){ 256, 128, 64, 16 };
    if (cc >= 89)
        return (lt_arch_t){ 128, 128, 32, 8 };
    if (cc >= 86)
        return (lt_arch_t){ 128, 64, 32, 8 };
    if (cc >= 80)
        return (lt_arch_t){ 128, 128, 16, 8 };
    return (lt_arch_t){ 128, 64, 8, 4 };
}

typedef struct lt_plan {
    lt_algo_t algo;
    int kc;
    long long kper;
    int splitk;
    size_t workspace;
    float waves;
} lt_plan_t;

/* The device facts: the current context's device. */
static int cur_dev(simdrv_devinfo_t *dev)
{
    return simdrv_current_device(dev);
}

/* The kernel family's k-chunk and tile: the scalar kernels load one
 * element at a time (half the k-chunk, half the tile), the wide ones a
 * 128-byte line (twice the k-chunk). */
static void family(int cc, int id, int *kc, int *tm, int *tn)
{
    lt_arch_t ak = arch_for(cc);
    *kc = id == LT_ALGO_WIDE ? 2 * ak.kc : id == LT_ALGO_VEC ? ak.kc
                                                             : (ak.kc / 2 >= 4 ? ak.kc / 2 : 4);
    *tm = id == LT_ALGO_SCALAR ? ak.tile_m / 2 : ak.tile_m;
    *tn = id == LT_ALGO_SCALAR ? ak.tile_n / 2 : ak.tile_n;
}

/* The plan an algorithm gives a problem: its split-K turned into a k-range
 * per split, the workspace it needs. */
static void plan_of(int cc, int sms, const lt_algo_t *al, const lt_args_t *a, lt_plan_t *p)
{
    int tm, tn;
    p->algo = *al;
    family(cc, al->id, &p->kc, &tm, &tn);
    int64_t kblocks = a->k > 0 ? cdiv(a->k, p->kc) : 1;
    int64_t split = al->splitk >= 1 && !(a->epi & (LT_EPI_BGRADA | LT_EPI_BGRADB)) ? al->splitk : 1;
    if (split > kblocks)
        split = kblocks;
    p->kper = cdiv(kblocks, split) * p->kc;
    p->splitk = a->k > 0 ? (int)cdiv(a->k, p->kper) : 1;
    if (p->splitk <= 1)
        p->algo.scheme = LT_RED_NONE;
    int64_t tiles = cdiv(a->m ? a->m : 1, tm) * cdiv(a->n ? a->n : 1, tn) * a->batch;
    p->workspace = p->splitk <= 1 ? 0
                   : p->algo.scheme == LT_RED_COMPUTE
                       ? (size_t)p->splitk * (size_t)a->m * (size_t)a->n * (size_t)a->batch * 4u
                       : (size_t)tiles * 4u; /* INPLACE: one counter per tile */
    p->waves = (float)((double)tiles * p->splitk / (sms > 0 ? sms : 1));
}

/* The widest kernel family the promised alignments (and the leading
 * dimensions, whose columns must stay aligned) allow. */
static int widest(const lt_args_t *a, const uint32_t align[4])
{
    int best = LT_ALGO_WIDE;
    int64_t es = (int64_t)type_size(a->at);
    while (best > LT_ALGO_SCALAR) {
        unsigned need = g_family_align[best];
        int ok = (a->lda * es) % need == 0 && (a->ldb * es) % need == 0;
        for (int i = 0; i < 4; i++)
            ok &= align[i] >= need;
        if (ok)
            break;
        best--;
    }
    return best;
}

/* The ranked algorithms for a problem: the heuristic's choice first (the
 * widest family the alignments allow), then the same kernel without
 * split-K, then the narrower families. */
static int lt_choose(int cc, int sms, const lt_args_t *a, const lt_pref_t *pf, lt_plan_t *out,
                     int max)
{
    int n = 0;
    for (int id = widest(a, pf->align); id >= LT_ALGO_SCALAR && n < max; id--) {
        int kc, tm, tn;
        family(cc, id, &kc, &tm, &tn);
        int64_t tiles = cdiv(a->m ? a->m : 1, tm) * cdiv(a->n ? a->n : 1, tn) * a->batch;
        int64_t kblocks = a->k > 0 ? cdiv(a->k, kc) : 1;
        lt_algo_t al = { LT_ALGO_MAGIC, id, (uint32_t)(tm * 1000 + tn), 1, LT_RED_NONE };
        if (tiles < sms && kblocks >= 8 && !(a->epi & (LT_EPI_BGRADA | LT_EPI_BGRADB))) {
            int64_t split = sms / tiles;
            lt_arch_t ak = arch_for(cc);
            if (split > ak.cap)
                split = ak.cap;
            if (split > kblocks / 4)
                split = kblocks / 4;
            for (; split > 1; split--) {
                lt_plan_t p;
                al.splitk = (uint32_t)split;
                al.scheme = LT_RED_COMPUTE;
                plan_of(cc, sms, &al, a, &p);
                if ((pf->mask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) &&
                    p.workspace <= pf->workspace)
                    break;
                al.scheme = LT_RED_INPLACE;
                plan_of(cc, sms, &al, a, &p);
                if ((pf->mask & CUBLASLT_REDUCTION_SCHEME_INPLACE) && p.workspace <= pf->workspace)
                    break;
            }
            if (split <= 1)
                al.splitk = 1, al.scheme = LT_RED_NONE;
        }
        plan_of(cc, sms, &al, a, &out[n]);
        n++;
        if (al.splitk > 1 && n < max) {
            lt_algo_t ns = al;
            ns.splitk = 1;
            ns.scheme = LT_RED_NONE;
            plan_of(cc, sms, &ns, a, &out[n]);
            n++;
        }
    }
    return n;
}

API cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount)
{
    if (!handle_ok(lightHandle) || !bound_ok(lightHandle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    lt_pref_t *pf = pref_of(preference);
    if (!pf || requestedAlgoCount < 1 || !heuristicResultsArray || !returnAlgoCount)
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_args_t a;
    const lt_desc_t *d = desc_of(operationDesc);
    cublasStatus_t st = problem(d, layout_of(Adesc), layout_of(Bdesc), layout_of(Cdesc),
                                layout_of(Ddesc), &a);
    if (st)
        return st;
    simdrv_devinfo_t dev;
    if (cur_dev(&dev))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int cc = dev.cc_major * 10 + dev.cc_minor;
    int sms = d->sm_target > 0 ? d->sm_target : dev.sm_count;
    lt_plan_t plans[8];
    int n = lt_choose(cc, sms, &a, pf, plans, requestedAlgoCount < 8 ? requestedAlgoCount : 8);
    for (int i = 0; i < n; i++) {
        cublasLtMatmulHeuristicResult_t *r = &heuristicResultsArray[i];
        memset(r, 0, sizeof(*r));
        memcpy(&r->algo, &plans[i].algo, sizeof(plans[i].algo));
        r->workspaceSize = plans[i].workspace;
        r->state = CUBLAS_STATUS_SUCCESS;
        r->wavesCount = plans[i].waves;
    }
    *returnAlgoCount = n;
    return n ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

/* ---- algorithms ------------------------------------------------------------------------------ */

static const lt_algo_t *algo_of(const cublasLtMatmulAlgo_t *algo)
{
    const lt_algo_t *x = (const lt_algo_t *)algo;
    return x && x->magic == LT_ALGO_MAGIC && x->id >= 0 && x->id < LT_NALGOS ? x : NULL;
}

API cublasStatus_t cublasLtMatmulAlgoGetIds(cublasLtHandle_t lightHandle,
                                            cublasComputeType_t computeType,
                                            cudaDataType_t scaleType, cudaDataType_t Atype,
                                            cudaDataType_t Btype, cudaDataType_t Ctype,
                                            cudaDataType_t Dtype, int requestedAlgoCount,
                                            int algoIdsArray[], int *returnAlgoCount)
{
    (void)computeType;
    if (!handle_ok(lightHandle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requestedAlgoCount < 0 || !returnAlgoCount || (requestedAlgoCount && !algoIdsArray))
        return CUBLAS_STATUS_INVALID_VALUE;
    int n = 0;
    if (scaleType == CUDA_R_32F && lt_type(Atype) >= 0 && Atype == Btype && Ctype == Dtype &&
        (Dtype == Atype || Dtype == CUDA_R_32F))
        for (int id = LT_ALGO_WIDE; id >= LT_ALGO_SCALAR && n < requestedAlgoCount; id--)
            algoIdsArray[n++] = id;
    *returnAlgoCount = n;
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatmulAlgoInit(cublasLtHandle_t lightHandle,
                                          cublasComputeType_t computeType,
                                          cudaDataType_t scaleType, cudaDataType_t Atype,
                                          cudaDataType_t Btype, cudaDataType_t Ctype,
                                          cudaDataType_t Dtype, int algoId,
                                          cublasLtMatmulAlgo_t *algo)
{
    (void)computeType;
    (void)scaleType;
    (void)Atype;
    (void)Btype;
    (void)Ctype;
    (void)Dtype;
    if (!handle_ok(lightHandle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!algo || algoId < 0 || algoId >= LT_NALGOS)
        return CUBLAS_STATUS_INVALID_VALUE;
    lt_algo_t al = { LT_ALGO_MAGIC, algoId, 0, 1, LT_RED_NONE };
    memset(algo, 0, sizeof(*algo));
    memcpy(algo, &al, sizeof(al));
    return CUBLAS_STATUS_SUCCESS;
}

API cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(cublasLtMatmulAlgo_t *algo,
                                                        cublasLtMatmulAlgoConfigAttributes_t attr,
                                                        const void *buf, size_t sizeInBytes)
{
    lt_algo_t *al = (lt_algo_t *)algo_of(algo);
    if (!al)
        return CUBLAS_STATUS_INVALID_VALUE;
    uint32_t v;
    cublasStatus_t st = put(&v, 4, buf, sizeInBytes);
    if (st)
        return st;
    switch (attr) {
    case CUBLASLT_ALGO_CONFIG_TILE_ID: al->tile = v; return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_ALGO_CONFIG_SPLITK_NUM:
        if (v < 1)
            return CUBLAS_STATUS_INVALID_VALUE;
        al->splitk = v;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME:
        if (v != LT_RED_NONE && v != LT_RED_INPLACE && v != LT_RED_COMPUTE)
            return CUBLAS_STATUS_INVALID_VALUE;
        al->scheme = v;
        return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
}

API cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t *algo,
                                                        cublasLtMatmulAlgoConfigAttributes_t attr,
                                                        void *buf, size_t sizeInBytes,
                                                        size_t *sizeWritten)
{
    const lt_algo_t *al = algo_of(algo);
    if (!al)
        return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_ALGO_CONFIG_ID: return get(&al->id, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_ALGO_CONFIG_TILE_ID: return get(&al->tile, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_ALGO_CONFIG_SPLITK_NUM: return get(&al->splitk, 4, buf, sizeInBytes, sizeWritten);
    case CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME:
        return get(&al->scheme, 4, buf, sizeInBytes, sizeWritten);
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
}

/* ---- the module --------------------------------------------------------------------------- */

/* sim/cublaslt/kernels.cu built by nvcc, in this library's .nv_fatbin
 * section (blob.c). */
extern const unsigned char sim_cublaslt_fatbin[];

enum { K_GEMM = 0, K_REDUCE, K_BGRAD, K_COUNT };
static const char *const g_knames[K_COUNT] = { "simlt_gemm", "simlt_reduce", "simlt_bgrad" };

/* The module of each context (sim/common/kmod.h). */
static sim_kmods_t g_kmods = SIM_KMODS_INIT(sim_cublaslt_fatbin, g_knames, K_COUNT);

/* The kernels in the current context (the module loaded on first use):
 * 0, -ENODEV without a current context, -ENOEXEC when the module does not
 * load on its device. */
static int kernels(const simdrv_t *drv, const CUfunction **fn)
{
    CUcontext ctx = NULL;
    const sim_kmod_t *km = NULL;
    if (drv->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
        return -ENODEV;
    if (sim_kmod_get(&g_kmods, ctx, &km) != CUDA_SUCCESS)
        return -ENOEXEC;
    *fn = km->fn;
    return 0;
}

/* ---- matmul ------------------------------------------------------------------------------- */

static unsigned align_of(const void *p)
{
    uintptr_t v = (uintptr_t)p;
    unsigned al = 256;
    while (al > 1 && v % al)
        al /= 2;
    return al;
}

API cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                                  const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                                  const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                                  const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                                  cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                                  void *workspace, size_t workspaceSizeInBytes,
                                  cudaStream_t stream)
{
    if (!handle_ok(lightHandle) || !bound_ok(lightHandle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    const lt_desc_t *d = desc_of(computeDesc);
    lt_args_t a;
    cublasStatus_t st = problem(d, layout_of(Adesc), layout_of(Bdesc), layout_of(Cdesc),
                                layout_of(Ddesc), &a);
    if (st)
        return st;
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    simdrv_devinfo_t dev;
    const simdrv_t *drv = simdrv_get();
    if (!drv || cur_dev(&dev))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    int cc = dev.cc_major * 10 + dev.cc_minor;
    int sms = d->sm_target > 0 ? d->sm_target : dev.sm_count;
    lt_plan_t plan;
    const lt_algo_t *al = NULL;
    if (algo) {
        if (!(al = algo_of(algo)))
            return CUBLAS_STATUS_INVALID_VALUE;
        plan_of(cc, sms, al, &a, &plan);
    } else {
        /* the implicit heuristic: the pointers' own alignments, the
         * workspace given */
        lt_pref_t pf = { LT_PREF_MAGIC, 0, CUBLASLT_REDUCTION_SCHEME_MASK,
                         { align_of(A), align_of(B), align_of(C), align_of(D) }, 0,
                         workspaceSizeInBytes, ~0ull };
        lt_choose(cc, sms, &a, &pf, &plan, 1);
    }
    unsigned need = g_family_align[plan.algo.id];
    if (align_of(A) < need || align_of(B) < need || align_of(C) < need || align_of(D) < need)
        return CUBLAS_STATUS_NOT_SUPPORTED; /* the kernel's vector loads need aligned data */
    if (plan.workspace > workspaceSizeInBytes || (plan.workspace && !workspace))
        return CUBLAS_STATUS_INVALID_VALUE;
    if ((a.epi & (LT_EPI_BIAS | LT_EPI_BGRADA | LT_EPI_BGRADB)) && !d->bias)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (a.m == 0 || a.n == 0)
        return CUBLAS_STATUS_SUCCESS;
    if ((a.k && (!A || !B)) || !D || !C)
        return CUBLAS_STATUS_INVALID_VALUE;
    int64_t gx = cdiv(a.m, LT_TILE), gy = cdiv(a.n, LT_TILE);
    int64_t gz = (int64_t)a.batch * (plan.algo.scheme == LT_RED_COMPUTE ? plan.splitk : 1);
    if (gy > LT_GRID_MAX || gz > LT_GRID_MAX || a.batch > LT_GRID_MAX)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    const CUfunction *fn = NULL;
    if (kernels(drv, &fn))
        return CUBLAS_STATUS_ARCH_MISMATCH; /* no image for this device */
    a.A = A, a.B = B, a.C = C, a.D = D;
    a.ws = workspace;
    a.bias = d->bias;
    a.bgrad = (void *)d->bias;
    a.kc = plan.kc, a.kper = plan.kper, a.splitk = plan.splitk, a.scheme = (int)plan.algo.scheme;
    if (d->pointer_mode == CUBLASLT_POINTER_MODE_DEVICE) {
        a.palpha = alpha;
        a.pbeta = beta;
    } else {
        a.alpha = *(const float *)alpha;
        a.beta = *(const float *)beta;
    }
    void *params[] = { &a };
    CUstream s = (CUstream)stream;
    CUresult r = drv->cuLaunchKernel(fn[K_GEMM], (unsigned)gx, (unsigned)gy, (unsigned)gz, LT_TILE,
                                     LT_TILE, 1, 0, s, params, NULL);
    if (r == CUDA_SUCCESS && plan.algo.scheme == LT_RED_COMPUTE)
        r = drv->cuLaunchKernel(fn[K_REDUCE], (unsigned)gx, (unsigned)gy, (unsigned)a.batch,
                                LT_TILE, LT_TILE, 1, 0, s, params, NULL);
    if (r == CUDA_SUCCESS && (a.epi & (LT_EPI_BGRADA | LT_EPI_BGRADB))) {
        int64_t len = (a.epi & LT_EPI_BGRADA) ? a.m : a.n;
        r = drv->cuLaunchKernel(fn[K_BGRAD], (unsigned)cdiv(len, 256), (unsigned)a.batch, 1, 256,
                                1, 1, 0, s, params, NULL);
    }
    return r == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
