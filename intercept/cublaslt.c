/* cuBLASLt wrappers (libcublasLt.so.13: PyTorch's addmm / Linear path).
 *
 * d1 and d2: cuBLASLt's heuristic reads, besides the device and the shape,
 * the workspace the preference allows and the pointer alignments it
 * promises; PyTorch derives those alignments from the tensors' addresses
 * (at::cuda::blas::gemm_and_bias sets CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*
 * from each pointer), so the same GEMM on tensors placed differently in
 * memory can get another kernel and other bits. The shim answers
 * cublasLtMatmulAlgoGetHeuristic from a preference of its own: the
 * application's workspace limit, reduction-scheme mask, search mode, waves
 * and implementation masks, and every MIN_ALIGNMENT_* lowered to at most
 * 16 bytes (ES_LT_ALIGN; never below the element size): where an
 * allocation starts (on a 256- or a 16-byte boundary, which depends on what
 * else the process allocated) no longer changes the kernel; an operand less
 * than 16-byte aligned (a view at an element offset, the same in every run
 * of a program) keeps its own alignment. Lowering a promise is always safe:
 * the algorithm runs on any better-aligned data. The choice then depends on
 * the device, the shape, the types, the workspace limit and the program's
 * views only: the same on every run on one GPU model. cublasLtMatmul with a
 * NULL algorithm (cuBLASLt's implicit heuristic, from the pointers) gets
 * its algorithm from the same pinned query. The split-K reduction schemes
 * cuBLASLt documents are all sequential (deterministic), so the mask is
 * left as the application set it.
 *
 * d2: cublasLtMatmul runs on the shim's portable GEMM (kernels/gemm.h),
 * whatever algorithm was given, for column-major fp32 / fp16 / bf16 data
 * (C and D of A's type or fp32) with a 32F compute type (the FAST_* ones
 * get full fp32) and a 32F scale type, host or device scalars, strided
 * batches, and the epilogues PyTorch uses: DEFAULT, RELU, BIAS, RELU_BIAS,
 * GELU, GELU_BIAS (the portable tanh form), BGRADA and BGRADB (the portable
 * bias gradient). Anything else goes to cuBLASLt (its bits may differ
 * across models), and so do the calls cuBLAS itself makes into cuBLASLt
 * (libcublas imports cublasLtMatmul; the shim decided at the cuBLAS call).
 * The shim allocates nothing here (no capture hazard).
 *
 * Handles: while ESTs can move the application's cuBLASLt handles are the
 * shim's (intercept/virtual/libh.h); cuBLAS's own handles (libcublas creates and
 * uses cuBLASLt handles inside its calls) stay cuBLASLt's: a call whose
 * caller is a vendor library is passed to cuBLASLt as it is.
 */
#include "intercept/enter.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/real.h"
#include "kernels/gemm.h"
#include "intercept/virtual/libh.h"

#include <errno.h>
#include <string.h>

/* The most alignment the shim ever promises cuBLASLt (bytes). */
#define ES_LT_ALIGN 16

static int es_det(void)
{
    return es_cfg.determinism != ES_DET_OFF;
}

/* Whether a call comes from a vendor library (its cuBLASLt handles are
 * real ones) while the application's are virtual. */
static int es_vendor_caller(const void *ret)
{
    return es_libh_on && es_addr_in_vendor_lib(ret);
}

ES_EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle)
{
    ES_ENTER(cublaslt, cublasLtCreate);
    if (es_vendor_caller(__builtin_return_address(0)))
        return ES_RAW(cublaslt, cublasLtCreate)(lightHandle);
    return ES_REAL(cublaslt, cublasLtCreate)(lightHandle);
}

ES_EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle)
{
    ES_ENTER(cublaslt, cublasLtDestroy);
    if (es_vendor_caller(__builtin_return_address(0)))
        return ES_RAW(cublaslt, cublasLtDestroy)(lightHandle);
    return ES_REAL(cublaslt, cublasLtDestroy)(lightHandle);
}

/* The largest power of two (up to 256) dividing a pointer. */
static uint32_t es_addr_align(const void *p)
{
    uintptr_t v = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && v % al)
        al /= 2;
    return al;
}

/* An attribute of a descriptor, through the real Get function (sizes are
 * the documented ones). */
#define ES_LT_GET(kind, obj, attr, var)                                                          \
    (ES_REAL(cublaslt, cublasLt##kind##GetAttribute)((obj), (attr), &(var), sizeof(var),         \
                                                     &(size_t){ 0 }) == CUBLAS_STATUS_SUCCESS)

/* Element size of a layout's type (0 when unknown). */
static uint32_t es_lt_elem(cublasLtMatrixLayout_t l)
{
    uint32_t t = 0;
    if (!l || !ES_LT_GET(MatrixLayout, l, CUBLASLT_MATRIX_LAYOUT_TYPE, t))
        return 0;
    switch ((cudaDataType)t) {
    case CUDA_R_64F: case CUDA_C_32F: return 8;
    case CUDA_C_64F: return 16;
    case CUDA_R_32F: case CUDA_R_32I: return 4;
    case CUDA_R_16F: case CUDA_R_16BF: return 2;
    case CUDA_R_8I: case CUDA_R_8U: return 1;
    default: return 0;
    }
}

/* The alignment the shim promises cuBLASLt for an operand aligned to `al`
 * bytes: at most ES_LT_ALIGN, at least the element size. */
static uint32_t es_lt_pin(uint32_t al, uint32_t elem)
{
    uint32_t p = ES_LT_ALIGN;
    while (p > elem && p > al)
        p /= 2;
    return p;
}

/* A preference of the shim's own: the application's (or, with app NULL,
 * the default one with workspace ws and the pointers' alignments in ptr)
 * with the alignments pinned (es_lt_pin). NULL when it cannot be made. */
static cublasLtMatmulPreference_t es_lt_pref(cublasLtMatmulPreference_t app, uint64_t ws,
                                             cublasLtMatrixLayout_t l[4], const uint32_t ptr[4])
{
    cublasLtMatmulPreference_t p = NULL;
    if (ES_REAL(cublaslt, cublasLtMatmulPreferenceCreate)(&p) != CUBLAS_STATUS_SUCCESS)
        return NULL;
    uint32_t search, mask;
    uint64_t impl;
    float waves;
    int ok = 1;
    if (app) {
        /* every attribute the application may have set, but the alignments */
        if (ES_LT_GET(MatmulPreference, app, CUBLASLT_MATMUL_PREF_SEARCH_MODE, search))
            ok &= !ES_REAL(cublaslt, cublasLtMatmulPreferenceSetAttribute)(
                p, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &search, sizeof(search));
        ok &= ES_LT_GET(MatmulPreference, app, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ws);
        if (ES_LT_GET(MatmulPreference, app, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, mask))
            ok &= !ES_REAL(cublaslt, cublasLtMatmulPreferenceSetAttribute)(
                p, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask));
        if (ES_LT_GET(MatmulPreference, app, CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, waves))
            ok &= !ES_REAL(cublaslt, cublasLtMatmulPreferenceSetAttribute)(
                p, CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, &waves, sizeof(waves));
        if (ES_LT_GET(MatmulPreference, app, CUBLASLT_MATMUL_PREF_IMPL_MASK, impl))
            ok &= !ES_REAL(cublaslt, cublasLtMatmulPreferenceSetAttribute)(
                p, CUBLASLT_MATMUL_PREF_IMPL_MASK, &impl, sizeof(impl));
    }
    ok &= !ES_REAL(cublaslt, cublasLtMatmulPreferenceSetAttribute)(
        p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    for (int i = 0; i < 4 && ok; i++) {
        uint32_t elem = es_lt_elem(l[i]), al = ptr ? ptr[i] : 256;
        if (app)
            ok &= ES_LT_GET(MatmulPreference, app,
                            (cublasLtMatmulPreferenceAttributes_t)(
                                CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i), al);
        al = es_lt_pin(al, elem);
        ok &= elem != 0 && !ES_REAL(cublaslt, cublasLtMatmulPreferenceSetAttribute)(
                               p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i, &al, sizeof(al));
    }
    if (!ok) {
        ES_REAL(cublaslt, cublasLtMatmulPreferenceDestroy)(p);
        p = NULL;
    }
    return p;
}

ES_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount)
{
    ES_ENTER(cublaslt, cublasLtMatmulAlgoGetHeuristic);
    if (es_vendor_caller(__builtin_return_address(0)))
        return ES_RAW(cublaslt, cublasLtMatmulAlgoGetHeuristic)(
            lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference,
            requestedAlgoCount, heuristicResultsArray, returnAlgoCount);
    cublasLtMatrixLayout_t l[4] = { Adesc, Bdesc, Cdesc, Ddesc };
    cublasLtMatmulPreference_t own = NULL;
    if (es_det() && preference && (own = es_lt_pref(preference, 0, l, NULL)) == NULL)
        ES_DEBUG("cuBLASLt: the preference cannot be pinned; the application's is used");
    cublasStatus_t st = ES_REAL(cublaslt, cublasLtMatmulAlgoGetHeuristic)(
        lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, own ? own : preference,
        requestedAlgoCount, heuristicResultsArray, returnAlgoCount);
    if (own)
        ES_REAL(cublaslt, cublasLtMatmulPreferenceDestroy)(own);
    return st;
}

/* ---- d2: cublasLtMatmul on the portable kernels ------------------------------------------ */

typedef struct es_lt_mat {
    int dt;
    uint64_t rows, cols;
    int64_t ld, stride;
    int batch;
} es_lt_mat_t;

static int es_lt_layout(cublasLtMatrixLayout_t l, es_lt_mat_t *m)
{
    uint32_t type;
    int32_t order, mode;
    int64_t plane;
    if (!l || !ES_LT_GET(MatrixLayout, l, CUBLASLT_MATRIX_LAYOUT_TYPE, type) ||
        !ES_LT_GET(MatrixLayout, l, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, mode) ||
        !ES_LT_GET(MatrixLayout, l, CUBLASLT_MATRIX_LAYOUT_ORDER, order) ||
        !ES_LT_GET(MatrixLayout, l, CUBLASLT_MATRIX_LAYOUT_ROWS, m->rows) ||
        !ES_LT_GET(MatrixLayout, l, CUBLASLT_MATRIX_LAYOUT_COLS, m->cols) ||
        !ES_LT_GET(MatrixLayout, l, CUBLASLT_MATRIX_LAYOUT_LD, m->ld) ||
        !ES_LT_GET(MatrixLayout, l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, m->batch) ||
        !ES_LT_GET(MatrixLayout, l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, m->stride) ||
        !ES_LT_GET(MatrixLayout, l, CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, plane))
        return -EINVAL;
    m->dt = es_gemm_dtype((cudaDataType)type);
    if (m->dt < 0 || order != CUBLASLT_ORDER_COL || plane != 0 || mode != 0 || m->batch < 1 ||
        m->rows > 0x7fffffff || m->cols > 0x7fffffff || m->ld < 1 || m->ld > 0x7fffffff ||
        m->ld < (int64_t)m->rows)
        return -EINVAL;
    return 0;
}

/* Returns 0 with *status set when the portable kernels ran the matmul, or
 * -ENOTSUP when cuBLASLt must (anything it might reject or the portable
 * kernels do not take). */
static int es_lt_portable(cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                          cublasLtMatrixLayout_t Ad, const void *B, cublasLtMatrixLayout_t Bd,
                          const void *beta, const void *C, cublasLtMatrixLayout_t Cd, void *D,
                          cublasLtMatrixLayout_t Dd, cudaStream_t stream, cublasStatus_t *status)
{
    int32_t compute, scale, pmode, ta, tb, tc, bias_type;
    uint32_t epi;
    const void *bias;
    int64_t bias_stride;
    es_lt_mat_t a, b, c, d;
    if (!desc || !alpha || !beta || !D || !C ||
        !ES_LT_GET(MatmulDesc, desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, compute) ||
        !ES_LT_GET(MatmulDesc, desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, scale) ||
        !ES_LT_GET(MatmulDesc, desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, pmode) ||
        !ES_LT_GET(MatmulDesc, desc, CUBLASLT_MATMUL_DESC_TRANSA, ta) ||
        !ES_LT_GET(MatmulDesc, desc, CUBLASLT_MATMUL_DESC_TRANSB, tb) ||
        !ES_LT_GET(MatmulDesc, desc, CUBLASLT_MATMUL_DESC_TRANSC, tc) ||
        !ES_LT_GET(MatmulDesc, desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epi) ||
        !ES_LT_GET(MatmulDesc, desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias) ||
        !ES_LT_GET(MatmulDesc, desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, bias_stride) ||
        !ES_LT_GET(MatmulDesc, desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type) ||
        es_lt_layout(Ad, &a) || es_lt_layout(Bd, &b) || es_lt_layout(Cd, &c) ||
        es_lt_layout(Dd, &d))
        return -ENOTSUP;
    if (!es_gemm_compute_f32((cublasComputeType_t)compute) || scale != CUDA_R_32F ||
        (pmode != CUBLASLT_POINTER_MODE_HOST && pmode != CUBLASLT_POINTER_MODE_DEVICE) ||
        tc != CUBLAS_OP_N || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || a.dt != b.dt || c.dt != d.dt ||
        (d.dt != a.dt && d.dt != ES_DT_F32))
        return -ENOTSUP;
    uint64_t m = d.rows, n = d.cols, k = ta == CUBLAS_OP_T ? a.rows : a.cols;
    if ((ta == CUBLAS_OP_T ? a.cols : a.rows) != m || (tb == CUBLAS_OP_T ? b.rows : b.cols) != n ||
        (tb == CUBLAS_OP_T ? b.cols : b.rows) != k || c.rows != m || c.cols != n ||
        a.batch != d.batch || b.batch != d.batch || c.batch != d.batch || d.batch > 65535)
        return -ENOTSUP;
    es_gemm_args_t g = {
        .A = A, .B = B, .C = C, .D = D, .sA = a.stride, .sB = b.stride, .sC = c.stride,
        .sD = d.stride, .ta = ta == CUBLAS_OP_T, .tb = tb == CUBLAS_OP_T, .m = (int)m,
        .n = (int)n, .k = (int)k, .lda = (int)a.ld, .ldb = (int)b.ld, .ldc = (int)c.ld,
        .ldd = (int)d.ld, .at = a.dt, .bt = b.dt, .ct = c.dt, .dt = d.dt,
    };
    int bt = bias_type < 0 ? d.dt : es_gemm_dtype((cudaDataType)bias_type);
    es_bgrad_args_t bg = { 0 };
    int bgrad = 0;
    switch (epi) {
    case CUBLASLT_EPILOGUE_DEFAULT: break;
    case CUBLASLT_EPILOGUE_RELU: g.ep[g.nep++].op = ES_EP_RELU; break;
    case CUBLASLT_EPILOGUE_GELU: g.ep[g.nep++].op = ES_EP_GELU; break;
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
        if (!bias || bt < 0)
            return -ENOTSUP;
        g.ep[g.nep++] = (es_ep_t){ .op = ES_EP_BIAS, .dt = bt, .b = bias, .bs_n = bias_stride };
        if (epi != CUBLASLT_EPILOGUE_BIAS)
            g.ep[g.nep++].op = epi == CUBLASLT_EPILOGUE_RELU_BIAS ? ES_EP_RELU : ES_EP_GELU;
        break;
    case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB:
        if (!bias || bt < 0)
            return -ENOTSUP;
        bgrad = 1;
        bg.rows = epi == CUBLASLT_EPILOGUE_BGRADA;
        bg.M = bg.rows ? A : B;
        bg.sM = bg.rows ? a.stride : b.stride;
        bg.ld = (int)(bg.rows ? a.ld : b.ld);
        bg.trans = bg.rows ? g.ta : g.tb;
        bg.mt = a.dt;
        bg.g = (void *)bias;
        bg.gt = bt;
        bg.sg = bias_stride;
        bg.len = bg.rows ? (long long)m : (long long)n;
        bg.k = (int)k;
        break;
    default:
        return -ENOTSUP; /* AUX, DRELU, DGELU epilogues */
    }
    if (pmode == CUBLASLT_POINTER_MODE_DEVICE) {
        g.palpha = alpha;
        g.pbeta = beta;
    } else {
        g.alpha = *(const float *)alpha;
        g.beta = *(const float *)beta;
    }
    *status = CUBLAS_STATUS_SUCCESS;
    if (m == 0 || n == 0)
        return 0;
    if (k && (!A || !B))
        return -ENOTSUP;
    int r = es_gemm_launch(&g, d.batch, (CUstream)stream);
    if (r == CUDA_SUCCESS && bgrad)
        r = es_bgrad_launch(&bg, d.batch, (CUstream)stream);
    if (r < 0)
        return r;
    *status = r == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
    return 0;
}

ES_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle,
                                        cublasLtMatmulDesc_t computeDesc, const void *alpha,
                                        const void *A, cublasLtMatrixLayout_t Adesc,
                                        const void *B, cublasLtMatrixLayout_t Bdesc,
                                        const void *beta, const void *C,
                                        cublasLtMatrixLayout_t Cdesc, void *D,
                                        cublasLtMatrixLayout_t Ddesc,
                                        const cublasLtMatmulAlgo_t *algo, void *workspace,
                                        size_t workspaceSizeInBytes, cudaStream_t stream)
{
    ES_ENTER(cublaslt, cublasLtMatmul);
    cublasStatus_t st;
    /* cuBLAS runs some of its own GEMMs through cuBLASLt: those calls are
     * the vendor's business (the shim decided at the cuBLAS call) */
    if ((es_det() || es_libh_on) && es_addr_in_vendor_lib(__builtin_return_address(0)))
        return ES_RAW(cublaslt, cublasLtMatmul)(lightHandle, computeDesc, alpha, A, Adesc, B,
                                                 Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                                                 workspace, workspaceSizeInBytes, stream);
    if (es_cfg.determinism == ES_DET_D2 && lightHandle &&
        es_lt_portable(computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, stream,
                       &st) == 0)
        return st;
    cublasLtMatmulHeuristicResult_t pinned;
    if (es_det() && !algo) {
        /* the implicit heuristic would read the pointers' alignments */
        cublasLtMatrixLayout_t l[4] = { Adesc, Bdesc, Cdesc, Ddesc };
        uint32_t al[4] = { es_addr_align(A), es_addr_align(B), es_addr_align(C),
                           es_addr_align(D) };
        cublasLtMatmulPreference_t p = es_lt_pref(NULL, workspaceSizeInBytes, l, al);
        int got = 0;
        if (p && ES_REAL(cublaslt, cublasLtMatmulAlgoGetHeuristic)(
                     lightHandle, computeDesc, Adesc, Bdesc, Cdesc, Ddesc, p, 1, &pinned,
                     &got) == CUBLAS_STATUS_SUCCESS &&
            got == 1)
            algo = &pinned.algo;
        if (p)
            ES_REAL(cublaslt, cublasLtMatmulPreferenceDestroy)(p);
    }
    return ES_REAL(cublaslt, cublasLtMatmul)(lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc,
                                             beta, C, Cdesc, D, Ddesc, algo, workspace,
                                             workspaceSizeInBytes, stream);
}
