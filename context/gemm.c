/* d2's portable GEMM (see gemm.h): argument checks as cuBLAS makes them,
 * then one launch of es_sgemm_portable on the handle's stream. */
#include "context/gemm.h"
#include "context/portable.h"
#include "context/portable_kernels.h"
#include "shim/shim.h"

#include <errno.h>

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
        ldb < (tb_i ? (n > 1 ? n : 1) : (k > 1 ? k : 1)) || ldc < (m > 1 ? m : 1) ||
        batch > 65535)
        return 0;
    *status = CUBLAS_STATUS_SUCCESS;
    if (m == 0 || n == 0 || batch == 0)
        return 0;
    if (!alpha || !beta) {
        *status = CUBLAS_STATUS_INVALID_VALUE;
        return 0;
    }
    if ((n + ES_GEMM_TILE - 1) / ES_GEMM_TILE > 65535)
        return -ENOTSUP; /* beyond gridDim.y */
    CUfunction fn = es_portable_function(ES_K_SGEMM);
    if (!fn)
        return -ENOTSUP;
    int dev_scalars = pm == CUBLAS_POINTER_MODE_DEVICE;
    es_gemm_args_t a = {
        .A = A, .B = B, .C = C,
        .palpha = dev_scalars ? alpha : NULL, .pbeta = dev_scalars ? beta : NULL,
        .sA = sA, .sB = sB, .sC = sC,
        .ta = ta_i, .tb = tb_i, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
        .alpha = dev_scalars ? 0.0f : *alpha, .beta = dev_scalars ? 0.0f : *beta,
    };
    void *params[] = { &a };
    CUresult r = ES_REAL(cuda, cuLaunchKernel)(
        fn, (unsigned)(m + ES_GEMM_TILE - 1) / ES_GEMM_TILE,
        (unsigned)(n + ES_GEMM_TILE - 1) / ES_GEMM_TILE, (unsigned)batch, ES_GEMM_TILE,
        ES_GEMM_TILE, 1, 0, (CUstream)stream, params, NULL);
    *status = r == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
    return 0;
}
