/* d2's portable GEMM: fp32 C = alpha * op(A) op(B) + beta * C, column-major,
 * one thread per element of C in 16x16 tiles, the k-sum in ascending order
 * with fused multiply-adds, then alpha * sum + beta * C (beta == 0: C is not
 * read). The same bits on every GPU model and on simcuda (whose twin,
 * kernels/portable_twin.c, runs the same element function).
 *
 * The kernel (kernels/portable.cu, see portable_kernels.h and portable.h)
 * is launched with the real cuLaunchKernel on the cuBLAS handle's stream.
 */
#ifndef ES_CONTEXT_GEMM_H
#define ES_CONTEXT_GEMM_H

#include <cublas_api.h>

/* Runs a (strided batched) SGEMM on the portable kernel. Returns 0 with
 * *status set when it ran (or was rejected as cuBLAS would reject it), or
 * -ENOTSUP when cuBLAS must do it (invalid handle, kernel not loadable).
 * Host and device pointer modes (device: alpha and beta are read by the
 * kernel when it runs, as cuBLAS does). Any m, n, k, batch cuBLAS accepts:
 * n and batch beyond CUDA's 65535 grid.y / grid.z are cut into several
 * launches on the same stream (same bits). Semantics as BLAS: beta == 0
 * does not read C, alpha == 0 reads neither A nor B. */
int es_gemm_sgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                  int k, const float *alpha, const float *A, int lda, long long sA,
                  const float *B, int ldb, long long sB, const float *beta, float *C, int ldc,
                  long long sC, int batch, cublasStatus_t *status);

#endif
