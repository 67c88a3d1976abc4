/* simcuda cuDNN: the problem descriptions shared by the library (C) and its
 * kernels (sim/cudnn/kernels.cu), the algorithm tables and per-architecture
 * summation orders (algo.c, in the library), and the plain-C reference of
 * the kernels (kern.c: pure CPU functions on host pointers, for the tests;
 * not in the library).
 *
 * Every algorithm has its own fixed accumulation order (so algorithms differ
 * from each other in the low bits, as real ones do), except the ones NVIDIA
 * documents as nondeterministic (BWD_FILTER ALGO_0 and ALGO_3, BWD_DATA
 * ALGO_0, POOLING_MAX backward): their kernels add partial results into the
 * output with float atomics; the reference models them with an order
 * permuted from `seed`.
 *
 * Output blending everywhere: out = alpha * result + beta * out, and with
 * beta == 0 the prior content of out is never read (even NaN is ignored).
 * This header is included by C and by C++ (the kernels): plain structs.
 */
#ifndef SIM_CUDNN_KERN_H
#define SIM_CUDNN_KERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define SIM_CUDNN_LAYOUT(cond, msg) static_assert(cond, msg)
#else
#define SIM_CUDNN_LAYOUT(cond, msg) _Static_assert(cond, msg)
#endif

/* A 4-d strided view (element strides). */
typedef struct sim_t4 {
    int n, c, h, w;
    int64_t sn, sc, sh, sw;
} sim_t4_t;
SIM_CUDNN_LAYOUT(sizeof(sim_t4_t) == 48, "sim_t4_t layout (a kernel parameter)");

/* A 2-d convolution problem. x: N,C,H,W; w: K, C/groups, R, S (in sim_t4_t
 * n=K, c=C/groups, h=R, w=S); y: N,K,P,Q. flip: CUDNN_CONVOLUTION mode (the
 * filter is mirrored), 0 for CUDNN_CROSS_CORRELATION. */
typedef struct sim_conv {
    sim_t4_t x, w, y;
    int pad_h, pad_w, str_h, str_w, dil_h, dil_w;
    int groups;
    int flip;
    /* The device's architecture, cc_major * 10 + cc_minor (0: none given).
     * Each architecture has its own kernels: a fixed-order algorithm sums
     * in an order that depends on (algorithm, architecture), so results are
     * reproducible on one architecture and never across architectures. */
    int arch;
} sim_conv_t;
SIM_CUDNN_LAYOUT(sizeof(sim_conv_t) == 184, "sim_conv_t layout (a kernel parameter)");

/* Accumulation schemes of the fixed-order algorithms. */
enum {
    SIM_RED_SEQ,   /* left to right */
    SIM_RED_REV,   /* right to left */
    SIM_RED_L2,    /* 2 interleaved partial sums, combined at the end */
    SIM_RED_L4,    /* 4 lanes */
    SIM_RED_PAIR,  /* pairwise tree (level by level, an odd last one carried) */
    SIM_RED_B8,    /* blocks of 8 summed, block sums added left to right */
    SIM_RED_B16,   /* blocks of 16 */
};

enum { SIM_DIR_FWD = 0, SIM_DIR_BWD_DATA = 1, SIM_DIR_BWD_FILTER = 2 };
#define SIM_FWD_ALGOS 8
#define SIM_BWD_DATA_ALGOS 6
#define SIM_BWD_FILTER_ALGOS 7

/* Number of algorithms of a direction (cuDNN's *_ALGO_COUNT). */
int sim_conv_algo_count(int dir);
/* 1 if algo of dir can run problem p, 0 if not supported for it. */
int sim_conv_algo_supported(int dir, int algo, const sim_conv_t *p);
/* 1 if the algorithm accumulates in a fixed order, 0 if not (float atomics). */
int sim_conv_algo_deterministic(int dir, int algo);
/* Workspace bytes the algorithm needs for p (0 for some). */
size_t sim_conv_workspace(int dir, int algo, const sim_conv_t *p);
/* Output size of a forward convolution along one dimension (may be <= 0). */
int sim_conv_out_dim(int in, int pad, int filt, int dil, int str);
/* The summation order of a fixed-order algorithm on architecture arch (cc
 * major * 10 + minor): product order (forward, backward data: 0 channel-
 * major, 1 tap-major) and accumulation scheme (SIM_RED_*). */
void sim_conv_fold_params(int dir, int algo, int arch, int *order, int *scheme);

/* ---- plain-C reference (kern.c; tests only) ---- */

/* The convolutions. Return 0, -EINVAL for a bad algo, -ENOTSUP if the algo
 * cannot run p, -ENOMEM. */
int sim_conv_fwd(const sim_conv_t *p, int algo, float alpha, const float *x, const float *w,
                 float beta, float *y, uint64_t seed);
int sim_conv_bwd_data(const sim_conv_t *p, int algo, float alpha, const float *w,
                      const float *dy, float beta, float *dx, uint64_t seed);
int sim_conv_bwd_filter(const sim_conv_t *p, int algo, float alpha, const float *x,
                        const float *dy, float beta, float *dw, uint64_t seed);
/* db (1,K,1,1 view in db) = alpha * sum over n,h,w of dy + beta * db. */
int sim_conv_bwd_bias(const sim_t4_t *dyv, const sim_t4_t *dbv, float alpha, const float *dy,
                      float beta, float *db);

/* Pooling. mode: cudnnPoolingMode_t values; nan_prop: 1 to propagate NaN. */
typedef struct sim_pool {
    sim_t4_t x, y;
    int mode, nan_prop;
    int win_h, win_w, pad_h, pad_w, str_h, str_w;
} sim_pool_t;
SIM_CUDNN_LAYOUT(sizeof(sim_pool_t) == 128, "sim_pool_t layout (a kernel parameter)");
int sim_pool_fwd(const sim_pool_t *p, float alpha, const float *x, float beta, float *y);
/* dy has the y view, dx the x view (given separately: they may differ in
 * strides). MAX accumulates in an order permuted from seed. */
int sim_pool_bwd(const sim_pool_t *p, const sim_t4_t *dyv, const sim_t4_t *dxv, float alpha,
                 const float *y, const float *dy, const float *x, float beta, float *dx,
                 uint64_t seed);

/* Activations: mode is cudnnActivationMode_t (SIGMOID, RELU, TANH,
 * CLIPPED_RELU, IDENTITY, ELU supported); coef as in cuDNN. */
int sim_act_supported(int mode);
int sim_act_fwd(int mode, double coef, const sim_t4_t *xv, const sim_t4_t *yv, float alpha,
                const float *x, float beta, float *y);
int sim_act_bwd(int mode, double coef, const sim_t4_t *yv, const sim_t4_t *dyv,
                const sim_t4_t *xv, const sim_t4_t *dxv, float alpha, const float *y,
                const float *dy, const float *x, float beta, float *dx);

/* C = alpha * A + beta * C, A broadcast along its dimensions of size 1. */
int sim_add_tensor(const sim_t4_t *av, const sim_t4_t *cv, float alpha, const float *a,
                   float beta, float *c);

/* y = value everywhere (set), or y = alpha * y (scale). */
int sim_set_tensor(const sim_t4_t *yv, float value, float *y);
int sim_scale_tensor(const sim_t4_t *yv, float alpha, float *y);

/* A seed from real entropy (getrandom), for the nondeterministic paths. */
uint64_t sim_cudnn_entropy(void);

#endif
