/* simcuda cuBLAS: the GEMM heuristic (gemm.c, in the library) and the
 * plain-C references of the kernels' summation orders (ref.c, level12.c:
 * tests and bench only; the library computes with the kernels of
 * sim/cublas/kernels.cu, which follow the same orders bit for bit).
 *
 * GEMM model. A GPU GEMM kernel is chosen by a heuristic from the device
 * (compute capability, SM count), the shape and the workspace it may use.
 * sim_gemm_choose() reproduces that: it picks an output tile (which fixes the
 * number of thread blocks), a k-chunk kc and a split-K factor. The summation
 * order that the kernels (and sim_gemm_run()) then follow exactly, for
 * every element C(i,j):
 *
 *   chunk partial  p = ((0 + a_k0*b_k0) + a_k0+1*b_k0+1) + ...   (kc products, k ascending)
 *   split sum      s = ((p_0 + p_1) + p_2) + ...                 (chunks of the split, in order)
 *   total          t = ((s_0 + s_1) + s_2) + ...                 (splits, in split order)
 *   result         C = alpha*t + beta*C     (beta == 0: C = alpha*t, C not read)
 *
 * Products and sums are rounded to float one by one (no contraction into
 * FMA, never -ffast-math), so the bits depend only on the plan, never on
 * the compiler or on how a kernel is blocked. Chunks start at the split's
 * first k, splits are kper long (a multiple of kc). With several splits,
 * every split's partial sums live in the workspace (splitk x batch x m x n
 * floats) until the epilogue adds them.
 * alpha == 0 or k == 0: C = beta*C (A and B are not read).
 */
#ifndef SIM_CUBLAS_GEMM_H
#define SIM_CUBLAS_GEMM_H

#include "sim/common/f16.h"

#include <stddef.h>
#include <stdint.h>

/* Element types of GEMM operands. */
typedef enum sim_dtype { SIM_F32 = 0, SIM_F16 = 1, SIM_BF16 = 2 } sim_dtype_t;

/* Down-conversion of inputs done by "fast" compute modes (tensor cores). */
typedef enum sim_round {
    SIM_ROUND_NONE = 0,
    SIM_ROUND_TF32 = 1,   /* 10-bit mantissa, round to nearest even */
    SIM_ROUND_BF16 = 2,
    SIM_ROUND_F16 = 3,
} sim_round_t;

/* The device facts the heuristic reads. */
typedef struct sim_gemm_dev {
    int cc_major, cc_minor;
    int sm_count;
} sim_gemm_dev_t;

/* A chosen kernel. */
typedef struct sim_gemm_plan {
    int tile_m, tile_n;   /* output tile of one thread block */
    int kc;               /* k-chunk (divides SIM_GEMM_KC_MAX) */
    int splitk;           /* number of k-splits actually used (>= 1) */
    int64_t kper;         /* k-range of one split, a multiple of kc */
    int fallback;         /* 1: small-workspace kernel (shared pool contended) */
} sim_gemm_plan_t;

#define SIM_GEMM_KC_MAX 256

/* Default workspace pool of a handle on a device (bytes): 32 MiB on
 * compute capability 9.0 and later, 4 MiB before (cuBLAS documentation). */
size_t sim_gemm_default_workspace(const sim_gemm_dev_t *dev);

/* The heuristic. batch: number of independent GEMMs of one call (>= 1).
 * ws_bytes: workspace the call may use for split-K partials (the split
 * count is lowered until splitk x batch x m x n floats fit). contended: the
 * call uses a shared workspace pool while other streams of its handle have
 * GEMMs in flight; the heuristic then drops to the kernel that needs none
 * (no split, half the k-chunk). */
void sim_gemm_choose(const sim_gemm_dev_t *dev, int64_t m, int64_t n, int64_t k, int64_t batch,
                     size_t ws_bytes, int contended, sim_gemm_plan_t *plan);

/* One GEMM: C = alpha*op(A)*op(B) + beta*C, column-major. trans: 0 = N,
 * 1 = T (for real data C is T). Sizes and leading dimensions are assumed
 * valid (checked by the API layer). */
typedef struct sim_gemm_args {
    int transa, transb;
    int64_t m, n, k;
    sim_dtype_t atype, btype, ctype;
    sim_round_t round;     /* applied to A and B elements as they are read */
    const void *A;
    int64_t lda;
    const void *B;
    int64_t ldb;
    void *C;
    int64_t ldc;
    float alpha, beta;
} sim_gemm_args_t;

/* Reference (ref.c): one GEMM with the plan's summation order, on host
 * memory. Returns 0 or -ENOMEM (C untouched then). */
int sim_gemm_run(const sim_gemm_plan_t *plan, const sim_gemm_args_t *a);

/* f (a float value) rounded to the precision of r (TF32, bf16 or half:
 * round to nearest even), exposed for tests. The half / bf16 element
 * conversions are sim/common/f16.h's float ones. */
float sim_round_input(float f, sim_round_t r);

/* References of level 1 and 2 (level12.c; vectors with increments:
 * negative inc walks backwards from the far end, as in BLAS; inc != 0 is
 * checked by the caller).
 * Summation orders: gemv/symv sum over the matrix's columns (N) or rows (T)
 * in ascending order; dot sums ascending; nrm2 in double. */
void sim_sgemv(int trans, int64_t m, int64_t n, float alpha, const float *A, int64_t lda,
               const float *x, int64_t incx, float beta, float *y, int64_t incy);
void sim_saxpy(int64_t n, float alpha, const float *x, int64_t incx, float *y, int64_t incy);
void sim_sscal(int64_t n, float alpha, float *x, int64_t incx);
float sim_sdot(int64_t n, const float *x, int64_t incx, const float *y, int64_t incy);
float sim_snrm2(int64_t n, const float *x, int64_t incx);
/* upper: 1 when the upper triangle holds A. order: NULL for the
 * deterministic column order 0..n-1, else a permutation of 0..n-1 giving the
 * order in which column contributions are accumulated. Returns 0 or -ENOMEM. */
int sim_ssymv(int upper, int64_t n, float alpha, const float *A, int64_t lda, const float *x,
              int64_t incx, float beta, float *y, int64_t incy, const int64_t *order);

#endif
