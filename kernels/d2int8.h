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
