/* d2's portable GEMM: C = epilogue(alpha * op(A) op(B) + beta * C),
 * column-major, fp32 / fp16 / bf16 operands, by the path EASYSCALE_D2_GEMM
 * names: int8 (the default: the definition of kernels/d2int8_kernels.h,
 * exact integer sums of rounded operands, one rounding) or fma (fp32
 * accumulation in the order documented in kernels/portable_kernels.h, k
 * ascending with fused multiply-adds). The same bits on every GPU model
 * and on simcuda (whose twin is the same source, kernels/portable.cu,
 * through the CUDA-on-CPU layer).
 *
 * The tiled kernels (kernels/portable.cu, see portable.h) are launched with
 * the real cuLaunchKernel on the caller's stream.
 */
#ifndef ES_KERNELS_GEMM_H
#define ES_KERNELS_GEMM_H

#include <cublas_api.h>
#include <cuda.h>

#include "kernels/d2int8_kernels.h"
#include "kernels/portable_kernels.h"

/* ES_DT_* of a cudaDataType (-1 for one the portable kernels do not take). */
int es_gemm_dtype(cudaDataType t);

/* Whether a cuBLAS compute type accumulates in fp32 (32F, PEDANTIC and the
 * FAST_* ones, which get full fp32 here). */
int es_gemm_compute_f32(cublasComputeType_t t);

/* Launches the GEMM described by *a (alpha/beta/palpha/pbeta, types,
 * epilogue filled in; m, n, k, leading dimensions already validated) for
 * `batch` matrices on stream s, on the kernel EASYSCALE_D2_GEMM names: the
 * int8 GEMM (ES_K_GEMM_I8, the bits of kernels/d2int8_kernels.h's
 * definition) or the fma ones (es_gemm_kernel: kernels/portable_kernels.h's
 * order). n and batch beyond CUDA's 65535 grid.y /
 * grid.z limits are cut into several launches on the same stream, each
 * element still computed by the same code (same bits). Returns the first
 * failing launch's CUresult (CUDA_ERROR_NO_BINARY_FOR_GPU when the kernels
 * cannot be loaded in the current context: the caller fails the call, it
 * never hands it to the vendor library). */
int es_gemm_launch(const es_gemm_args_t *a, int batch, CUstream s);

/* The tiled fma kernel es_gemm_launch uses for an m x n GEMM (ES_K_GEMM_L
 * or ES_K_GEMM_S), and a launch of a given one (ES_K_GEMM_L, ES_K_GEMM_S
 * or the per-element ES_K_REF_GEMM, all with the same bits; or
 * ES_K_GEMM_I8, the int8 GEMM). */
int es_gemm_kernel(int m, int n);
int es_gemm_launch_kernel(int which, const es_gemm_args_t *a, int batch, CUstream s);

/* Launches the bias gradient *a for `batch` batches on stream s (batch at
 * most 65535). Returns as es_gemm_launch. */
int es_bgrad_launch(const es_bgrad_args_t *a, int batch, CUstream s);

/* Runs a cuBLAS (strided batched) GEMM on the portable kernel: A, B, C of
 * the given cudaDataTypes (validated by the caller with es_gemm_dtype),
 * alpha and beta floats in the handle's pointer mode. Returns 0 with
 * *status set when it ran (or was rejected as cuBLAS would reject it; an
 * execution failure when the kernels do not load), or -ENOTSUP when cuBLAS
 * must do it (an invalid handle, which cuBLAS reports).
 * Semantics as BLAS: beta == 0 does not read C, alpha == 0 reads neither A
 * nor B. */
int es_gemm_cublas(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                   int k, const float *alpha, const void *A, int at, int lda, long long sA,
                   const void *B, int bt, int ldb, long long sB, const float *beta, void *C,
                   int ct, int ldc, long long sC, int batch, cublasStatus_t *status);

#endif
