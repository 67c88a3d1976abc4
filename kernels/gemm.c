/* d2's portable GEMM (see gemm.h): argument checks as cuBLAS makes them,
 * then launches of the tiled kernels on the caller's stream: the int8 one
 * or the fma ones, as EASYSCALE_D2_GEMM says. */
#include "kernels/gemm.h"
#include "kernels/portable.h"
#include "shim/config.h"
#include "shim/real.h"

#include <errno.h>

/* CUDA's limit on gridDim.y and gridDim.z. */
#define ES_GRID_YZ_MAX 65535LL

int es_gemm_dtype(cudaDataType t)
{
    switch (t) {
    case CUDA_R_32F: return ES_DT_F32;
    case CUDA_R_16F: return ES_DT_F16;
    case CUDA_R_16BF: return ES_DT_BF16;
    default: return -1;
    }
}

int es_gemm_compute_f32(cublasComputeType_t t)
{
    return t == CUBLAS_COMPUTE_32F || t == CUBLAS_COMPUTE_32F_PEDANTIC ||
           t == CUBLAS_COMPUTE_32F_FAST_TF32 || t == CUBLAS_COMPUTE_32F_FAST_16F ||
           t == CUBLAS_COMPUTE_32F_FAST_16BF;
}

static int es_op(cublasOperation_t op, int *t)
{
    switch (op) {
    case CUBLAS_OP_N: *t = 0; return 0;
    case CUBLAS_OP_T:
    case CUBLAS_OP_C: *t = 1; return 0;
    default: return -EINVAL;
    }
}

static size_t es_dt_size(int dt)
{
    return dt == ES_DT_F32 ? 4 : 2;
}

/* The tiled kernel for an m x n GEMM: large tiles when both sides fill one,
 * small ones otherwise (the same bits either way: each element's order is
 * the reference's). */
int es_gemm_kernel(int m, int n)
{
    return m >= ES_GEMM_L_BM && n >= ES_GEMM_L_BN ? ES_K_GEMM_L : ES_K_GEMM_S;
}

int es_gemm_launch_kernel(int which, const es_gemm_args_t *args, int batch, CUstream stream)
{
    int bm, bn, tm, tn;
    switch (which) {
    case ES_K_GEMM_L:
        bm = ES_GEMM_L_BM, bn = ES_GEMM_L_BN, tm = ES_GEMM_L_TM, tn = ES_GEMM_L_TN;
        break;
    case ES_K_GEMM_S:
        bm = ES_GEMM_S_BM, bn = ES_GEMM_S_BN, tm = ES_GEMM_S_TM, tn = ES_GEMM_S_TN;
        break;
    case ES_K_REF_GEMM:
        bm = bn = ES_GEMM_TILE, tm = tn = 1;
        break;
    case ES_K_GEMM_I8: /* ES_I8_THREADS threads: (bn / tn) x (bm / tm) */
        bm = ES_I8_BM, bn = ES_I8_BN, tm = ES_I8_BM * ES_I8_BN / ES_I8_THREADS, tn = 1;
        break;
    default:
        return -EINVAL;
    }
    CUfunction fn = es_portable_function(which);
    if (!fn)
        return CUDA_ERROR_NO_BINARY_FOR_GPU; /* logged; never the vendor's */
    es_gemm_args_t a = *args;
    void *params[] = { &a };
    /* grid.x = m tiles (at most 2^31 - 1: always fits); grid.y and grid.z
     * are limited to 65535: larger n and batch counts are cut into chunks
     * (pointer offsets), each element still computed by the same code, so
     * the bits do not depend on the chunking. */
    long long cols_max = ES_GRID_YZ_MAX * bn;
    unsigned gx = (unsigned)(((long long)a.m + bm - 1) / bm);
    size_t esa = es_dt_size(a.at), esb = es_dt_size(a.bt), esc = es_dt_size(a.ct);
    size_t esd = es_dt_size(a.dt);
    CUresult r = CUDA_SUCCESS;
    for (long long b0 = 0; r == CUDA_SUCCESS && b0 < batch; b0 += ES_GRID_YZ_MAX) {
        long long nb = batch - b0 < ES_GRID_YZ_MAX ? batch - b0 : ES_GRID_YZ_MAX;
        for (long long j0 = 0; r == CUDA_SUCCESS && j0 < args->n; j0 += cols_max) {
            long long nj = args->n - j0 < cols_max ? args->n - j0 : cols_max;
            long long boff = b0 * args->sB + (args->tb ? j0 : j0 * args->ldb);
            a.A = (const char *)args->A + (size_t)(b0 * args->sA) * esa;
            a.B = (const char *)args->B + (size_t)boff * esb;
            a.C = (const char *)args->C + (size_t)(b0 * args->sC + j0 * args->ldc) * esc;
            a.D = (char *)args->D + (size_t)(b0 * args->sD + j0 * args->ldd) * esd;
            for (int e = 0; e < a.nep; e++)
                if (args->ep[e].op == ES_EP_BIAS)
                    a.ep[e].b = (const char *)args->ep[e].b +
                                (size_t)(b0 * args->ep[e].bs_n) * es_dt_size(args->ep[e].dt);
            a.n = (int)nj;
            r = ES_REAL(cuda, cuLaunchKernel)(fn, gx, (unsigned)((nj + bn - 1) / bn),
                                              (unsigned)nb, (unsigned)(bn / tn),
                                              (unsigned)(bm / tm), 1, 0, stream, params, NULL);
        }
    }
    return (int)r;
}

int es_gemm_launch(const es_gemm_args_t *args, int batch, CUstream stream)
{
    int which = es_cfg.d2_gemm == ES_D2_GEMM_INT8 ? ES_K_GEMM_I8
                                                  : es_gemm_kernel(args->m, args->n);
    return es_gemm_launch_kernel(which, args, batch, stream);
}

int es_bgrad_launch(const es_bgrad_args_t *args, int batch, CUstream stream)
{
    if (batch < 1 || batch > ES_GRID_YZ_MAX || args->len < 1)
        return batch == 0 || args->len == 0 ? CUDA_SUCCESS : -EINVAL;
    CUfunction fn = es_portable_function(ES_K_BGRAD);
    if (!fn)
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    es_bgrad_args_t a = *args;
    void *params[] = { &a };
    long long blocks = (a.len + ES_CONV_BLOCK - 1) / ES_CONV_BLOCK;
    return (int)ES_REAL(cuda, cuLaunchKernel)(fn, (unsigned)blocks, (unsigned)batch, 1,
                                              ES_CONV_BLOCK, 1, 1, 0, stream, params, NULL);
}

int es_gemm_cublas(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                   int k, const float *alpha, const void *A, int at, int lda, long long sA,
                   const void *B, int bt, int ldb, long long sB, const float *beta, void *C,
                   int ct, int ldc, long long sC, int batch, cublasStatus_t *status)
{
    cublasPointerMode_t pm;
    cudaStream_t stream = NULL;
    int ta_i, tb_i;
    if (ES_REAL(cublas, cublasGetPointerMode_v2)(h, &pm) != CUBLAS_STATUS_SUCCESS)
        return -ENOTSUP; /* invalid handle: cuBLAS reports it */
    if (ES_REAL(cublas, cublasGetStream_v2)(h, &stream) != CUBLAS_STATUS_SUCCESS)
        return -ENOTSUP;
    *status = CUBLAS_STATUS_INVALID_VALUE;
    if (es_op(ta, &ta_i) || es_op(tb, &tb_i) || m < 0 || n < 0 || k < 0 || batch < 0 ||
        lda < (ta_i ? (k > 1 ? k : 1) : (m > 1 ? m : 1)) ||
        ldb < (tb_i ? (n > 1 ? n : 1) : (k > 1 ? k : 1)) || ldc < (m > 1 ? m : 1))
        return 0;
    *status = CUBLAS_STATUS_SUCCESS;
    if (m == 0 || n == 0 || batch == 0)
        return 0;
    if (!alpha || !beta) {
        *status = CUBLAS_STATUS_INVALID_VALUE;
        return 0;
    }
    int dev_scalars = pm == CUBLAS_POINTER_MODE_DEVICE;
    es_gemm_args_t a = {
        .A = A, .B = B, .C = C, .D = C, .sD = sC, .ldd = ldc, .dt = ct,
        .palpha = dev_scalars ? alpha : NULL, .pbeta = dev_scalars ? beta : NULL,
        .sA = sA, .sB = sB, .sC = sC,
        .ta = ta_i, .tb = tb_i, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
        .at = at, .bt = bt, .ct = ct,
        .alpha = dev_scalars ? 0.0f : *alpha, .beta = dev_scalars ? 0.0f : *beta,
    };
    int r = es_gemm_launch(&a, batch, (CUstream)stream);
    if (r < 0)
        return r;
    *status = r == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
    return 0;
}
