/* d2's portable GEMM (see gemm.h): argument checks as cuBLAS makes them,
 * then one launch of es_sgemm_portable on the handle's stream. */
#include "kernels/gemm.h"
#include "kernels/portable.h"
#include "kernels/portable_kernels.h"
#include "shim/shim.h"

#include <errno.h>

/* CUDA's limit on gridDim.y and gridDim.z. */
#define ES_GRID_YZ_MAX 65535LL
/* Columns of C one launch covers (grid.y tiles of ES_GEMM_TILE). */
#define ES_GEMM_COLS_MAX (ES_GRID_YZ_MAX * ES_GEMM_TILE)

static int es_op(cublasOperation_t op, int *t)
{
    switch (op) {
    case CUBLAS_OP_N: *t = 0; return 0;
    case CUBLAS_OP_T:
    case CUBLAS_OP_C: *t = 1; return 0;
    default: return -EINVAL;
    }
}

int es_gemm_sgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                  int k, const float *alpha, const float *A, int lda, long long sA,
                  const float *B, int ldb, long long sB, const float *beta, float *C, int ldc,
                  long long sC, int batch, cublasStatus_t *status)
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
    CUfunction fn = es_portable_function(ES_K_SGEMM);
    if (!fn)
        return -ENOTSUP;
    int dev_scalars = pm == CUBLAS_POINTER_MODE_DEVICE;
    es_gemm_args_t a = {
        .palpha = dev_scalars ? alpha : NULL, .pbeta = dev_scalars ? beta : NULL,
        .sA = sA, .sB = sB, .sC = sC,
        .ta = ta_i, .tb = tb_i, .m = m, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
        .alpha = dev_scalars ? 0.0f : *alpha, .beta = dev_scalars ? 0.0f : *beta,
    };
    void *params[] = { &a };
    /* grid.x = m tiles (at most 2^31 - 1: always fits); grid.y and grid.z
     * are limited to 65535: larger n and batch counts are cut into chunks
     * (pointer offsets), each element still computed by the same thread
     * code, so the bits do not depend on the chunking. */
    unsigned gx = (unsigned)(((long long)m + ES_GEMM_TILE - 1) / ES_GEMM_TILE);
    CUresult r = CUDA_SUCCESS;
    for (long long b0 = 0; r == CUDA_SUCCESS && b0 < batch; b0 += ES_GRID_YZ_MAX) {
        long long nb = batch - b0 < ES_GRID_YZ_MAX ? batch - b0 : ES_GRID_YZ_MAX;
        for (long long j0 = 0; r == CUDA_SUCCESS && j0 < n; j0 += ES_GEMM_COLS_MAX) {
            long long nj = n - j0 < ES_GEMM_COLS_MAX ? n - j0 : ES_GEMM_COLS_MAX;
            a.A = A + b0 * sA;
            a.B = B + b0 * sB + (tb_i ? j0 : j0 * ldb);
            a.C = C + b0 * sC + j0 * ldc;
            a.n = (int)nj;
            r = ES_REAL(cuda, cuLaunchKernel)(fn, gx, (unsigned)((nj + ES_GEMM_TILE - 1) /
                                                                 ES_GEMM_TILE),
                                              (unsigned)nb, ES_GEMM_TILE, ES_GEMM_TILE, 1, 0,
                                              (CUstream)stream, params, NULL);
        }
    }
    *status = r == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
    return 0;
}
