/* d2's int8 GEMM: the plain C reference of its definition
 * (kernels/d2int8_kernels.h, docs/D2-GEMM.md) on host memory. The kernel
 * (kernels/portable.cu, es_gemm_int8, launched by es_gemm_launch when
 * EASYSCALE_D2_GEMM=int8) gives its bits; the tests compare the two. */
#ifndef ES_KERNELS_D2INT8_H
#define ES_KERNELS_D2INT8_H

#include "kernels/d2int8_kernels.h"

/* Computes the GEMM *a (host pointers; palpha/pbeta, when set, host
 * pointers too) for `batch` matrices by the definition: 128-bit integer
 * sums of the rounded scaled operands, one rounding to fp32, then the
 * finishing step. Returns 0, -EINVAL for bad sizes, -ENOMEM. */
int es_d2int8_ref_gemm(const es_gemm_args_t *a, int batch);

/* Computes the convolution *a of direction dir (ES_CONV_FWD 0, BWD_DATA 1,
 * BWD_FILTER 2; geometry checked, a->total set; host pointers) by the
 * definition applied to its implicit GEMM (kernels/portable_kernels.h,
 * es_conv_ia / es_conv_ib: a row's exponent over its taps inside the
 * image; skipped taps add nothing), then the fma path's finishing step.
 * Returns 0, -EINVAL or -ENOMEM. */
int es_d2int8_ref_conv(int dir, const es_conv_args_t *a);

/* d2's convolution on either path, for the tests: es_d2int8_ref_conv
 * (int8 1) or the fma order's element functions (int8 0). */
int es_d2int8_ref_conv_path(int dir, const es_conv_args_t *a, int int8);

/* 1 unless EASYSCALE_D2_GEMM is "fma": whether d2 takes the int8 path. */
int es_d2int8_env_int8(void);

/* acc(i, j) of batch b by the definition (steps 1 to 5; 0 when alpha is
 * 0), element by element: O(k) per element, for spot checks of large
 * GEMMs. */
float es_d2int8_ref_acc(const es_gemm_args_t *a, long long i, long long j, long long b);

/* The sum over p of op(A)(i,p) op(B)(p,j) of batch b (finite operands),
 * for error measurements: every product exact, summed exactly in a
 * fixed-point accumulator covering 2^-300 .. 2^300, returned as a long
 * double (relative error below 2^-62). */
long double es_d2int8_exact_dot(const es_gemm_args_t *a, long long i, long long j, long long b);

#endif
