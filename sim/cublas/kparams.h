/* simcuda cuBLAS: what the library (C) passes to its kernels
 * (sim/cublas/kernels.cu, nvcc or the host compiler): the kernel names,
 * their order in the library's function table, and the GEMM parameter
 * block, one layout for C, C++ and the device. */
#ifndef SIM_CUBLAS_KPARAMS_H
#define SIM_CUBLAS_KPARAMS_H

#include <stdint.h>

/* Kernels of the library's module, in table order (cublas.c). */
#define SIMCUBLAS_KERNELS(X)                                                   \
    X(SIMCUBLAS_K_GEMM, "simcublas_gemm")                                      \
    X(SIMCUBLAS_K_GEMM_EPILOGUE, "simcublas_gemm_epilogue")                    \
    X(SIMCUBLAS_K_GEMV, "simcublas_gemv")                                      \
    X(SIMCUBLAS_K_AXPY, "simcublas_axpy")                                      \
    X(SIMCUBLAS_K_SCAL, "simcublas_scal")                                      \
    X(SIMCUBLAS_K_DOT, "simcublas_dot")                                        \
    X(SIMCUBLAS_K_NRM2, "simcublas_nrm2")                                      \
    X(SIMCUBLAS_K_SYMV, "simcublas_symv")                                      \
    X(SIMCUBLAS_K_SYMV_SCALE, "simcublas_symv_scale")                          \
    X(SIMCUBLAS_K_SYMV_ATOMIC, "simcublas_symv_atomic")

#define SIMCUBLAS_K_ENUM(id, name) id,
enum { SIMCUBLAS_KERNELS(SIMCUBLAS_K_ENUM) SIMCUBLAS_K_COUNT };
#undef SIMCUBLAS_K_ENUM

/* Thread block of the GEMM kernel: 64 threads, each an 8x8 tile of C, so a
 * block covers SIMCUBLAS_GEMM_TILE x SIMCUBLAS_GEMM_TILE. The summation
 * order of every element is the plan's (gemm.h) whatever the blocking. */
#define SIMCUBLAS_GEMM_THREADS 64
#define SIMCUBLAS_GEMM_TILE 64
/* Threads per block of the elementwise kernels. */
#define SIMCUBLAS_EW_THREADS 256

/* One GEMM call (possibly batched). Types: 0 float, 1 half, 2 bfloat16
 * (sim_dtype_t); round: sim_round_t applied to A and B elements. A, B, C are
 * device arrays of device pointers when ptr_array is set, else the first
 * matrix with batch strides sa, sb, sc (elements). palpha / pbeta: device
 * pointer mode (read by the kernel), else alpha / beta. ws: the split-K
 * partials, splitk x batch x m x n floats, when splitk > 1. */
typedef struct simcublas_gemm_kp {
    const void *A, *B;
    void *C;
    const float *palpha, *pbeta;
    float *ws;
    int64_t m, n, k, lda, ldb, ldc;
    int64_t sa, sb, sc;
    int64_t kper;
    int32_t batch, splitk, kc;
    int32_t transa, transb, atype, ctype, round, ptr_array;
    float alpha, beta;
    int32_t pad;
} simcublas_gemm_kp_t;

#ifdef __cplusplus
static_assert(sizeof(simcublas_gemm_kp_t) == 176, "simcublas_gemm_kp_t layout");
#else
_Static_assert(sizeof(simcublas_gemm_kp_t) == 176, "simcublas_gemm_kp_t layout");
#endif

#endif
