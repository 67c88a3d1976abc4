/* d2's portable kernels: the kernel argument structures and the reference
 * element functions, one source for the GPU and for simcuda's twin
 * (kernels/portable.cu, built by nvcc and through the CUDA-on-CPU layer;
 * its tiled kernels keep each element's order and end with the finishing
 * functions below) and for the tests (which compute the expected bits with
 * these functions on the host). Every float
 * operation is spelled out (correctly rounded fused multiply-add, multiply,
 * add; 16-bit conversions in integer arithmetic), so every compiler and
 * every GPU model produce the same bits.
 *
 * Data types: fp32, fp16 and bf16 operands (ES_DT_*), widened exactly to
 * fp32; accumulation always in fp32; results rounded once to the output's
 * type (round to nearest even; every NaN stored as the canonical quiet NaN
 * of the type, es_st: processors differ in the NaNs they make).
 *
 * Order (the documented one; any faster kernel must keep it per element):
 *   GEMM element (i, j): acc = 0; for p = 0 .. k-1 ascending:
 *     acc = fma(A(i,p), B(p,j), acc); then r = alpha * acc, and when
 *     beta != 0, r = fma(beta, C(i,j), r) (beta == 0: C is not read, so a
 *     NaN in it does not propagate; alpha == 0: A and B are not read, as
 *     BLAS specifies); then the epilogue (below); then C(i,j) = round(r).
 *   Convolution forward element: the sum over (input channel of the group,
 *     filter row, filter column) ascending; backward data: over (output
 *     channel of the group, row, column); backward filter: over (image,
 *     output row, output column); each term acc = fma(a, b, acc); taps
 *     outside the image are skipped (not added as zero); then as GEMM:
 *     alpha, beta, epilogue, store.
 *   Epilogue steps, in order (ES_EP_*): ADD r = a1 * r + a2 * b (two
 *     rounded products, one rounded sum; b broadcast through its strides,
 *     0 along a broadcast dimension), RELU r = r > 0 ? r : 0 (NaN kept),
 *     CLIP r = min(max(r, 0), hi) (NaN kept), BIAS (GEMM: r = r + bias[i],
 *     the cuBLASLt bias epilogue), GELU (GEMM: the tanh form
 *     0.5 r (1 + tanh(sqrt(2/pi) (r + 0.044715 r^3))), every operation
 *     spelled out, tanh computed by es_tanh below).
 * Indices are 64-bit (lda * k and batch strides may pass 2^31).
 *
 * Kernel arguments are one struct passed by value (the same layout for the
 * host, the device and the twin).
 */
#ifndef ES_PORTABLE_KERNELS_H
#define ES_PORTABLE_KERNELS_H

#ifdef __CUDACC__
#define ES_HD __device__ __forceinline__
#define ES_FMA(a, b, c) __fmaf_rn((a), (b), (c))
#define ES_MUL(a, b) __fmul_rn((a), (b))
#define ES_ADD(a, b) __fadd_rn((a), (b))
#define ES_DIV(a, b) __fdiv_rn((a), (b))
#else
#include <math.h>
#include <string.h>
#define ES_HD static inline
#define ES_FMA(a, b, c) fmaf((a), (b), (c))
#define ES_MUL(a, b) ((a) * (b))
#define ES_ADD(a, b) ((a) + (b))
#define ES_DIV(a, b) ((a) / (b))
#endif

#include "lib/half.h"

#define ES_GEMM_TILE 16
#define ES_CONV_BLOCK 256
#define ES_MAX_EP 4

/* The tiled kernels' shapes (kernels/portable.cu): a block computes BM x BN
 * outputs, reduced BK terms per shared-memory tile, TM x TN per thread;
 * blocks of (BN / TN, BM / TM) threads. Large GEMMs, small ones and the
 * convolutions (implicit GEMMs). */
#define ES_GEMM_L_BM 128
#define ES_GEMM_L_BN 128
#define ES_GEMM_L_BK 8
#define ES_GEMM_L_TM 8
#define ES_GEMM_L_TN 8
#define ES_GEMM_S_BM 32
#define ES_GEMM_S_BN 32
#define ES_GEMM_S_BK 16
#define ES_GEMM_S_TM 4
#define ES_GEMM_S_TN 4
#define ES_CONV_BM 64
#define ES_CONV_BN 32
#define ES_CONV_BK 16
#define ES_CONV_TM 4
#define ES_CONV_TN 2

/* Operand data types. */
enum { ES_DT_F32 = 0, ES_DT_F16 = 1, ES_DT_BF16 = 2 };
/* Epilogue steps. */
enum { ES_EP_NONE = 0, ES_EP_ADD, ES_EP_RELU, ES_EP_CLIP, ES_EP_BIAS, ES_EP_GELU };

typedef struct es_ep {
    int op;                 /* ES_EP_* */
    int dt;                 /* b's data type (ADD, BIAS) */
    float a1, a2, hi;       /* ADD: a1 * r + a2 * b; CLIP: upper bound */
    const void *b;          /* ADD: the tensor; BIAS: the vector (one per row i) */
    long long bs_n, bs_k, bs_p, bs_q; /* ADD: b's strides over y's (n, k, p, q), 0 if broadcast */
} es_ep_t;

typedef struct es_gemm_args {
    const void *A, *B, *C; /* C: read when beta != 0 */
    void *D;               /* the result (cuBLAS: D = C) */
    const float *palpha, *pbeta; /* device pointer mode: read here (else NULL) */
    long long sA, sB, sC, sD;    /* batch strides (elements) */
    int ta, tb, m, n, k, lda, ldb, ldc, ldd;
    int at, bt, ct, dt;    /* ES_DT_* of A, B, C, D */
    float alpha, beta;
    int nep;
    es_ep_t ep[ES_MAX_EP]; /* GEMM epilogues: BIAS (bs_n: batch stride), RELU, GELU */
} es_gemm_args_t;

/* The bias gradient of cuBLASLt's BGRADA / BGRADB epilogues: g[x] = sum
 * over p ascending of op(A)(x, p) (rows, BGRADA) or op(B)(p, x) (columns,
 * BGRADB), one rounded add per term, stored in g's type. */
typedef struct es_bgrad_args {
    const void *M;          /* A (rows) or B (columns) */
    void *g;
    long long sM, sg;       /* batch strides */
    long long len;          /* m (BGRADA) or n (BGRADB) */
    int k, ld, trans, rows; /* rows: 1 for op(A) rows, 0 for op(B) columns */
    int mt, gt;             /* ES_DT_* of M and g */
} es_bgrad_args_t;

typedef struct es_conv_args {
    const void *in0, *in1; /* fwd: x, w; bwd data: dy, w; bwd filter: x, dy */
    void *out;             /* fwd: y; bwd data: dx; bwd filter: dw */
    int t_in0, t_in1, t_out; /* ES_DT_* of in0, in1, out */
    long long xs_n, xs_c, xs_h, xs_w; /* x (and dx) strides */
    long long ys_n, ys_k, ys_p, ys_q; /* y (and dy) strides */
    long long ws_k, ws_c, ws_r, ws_s; /* w (and dw) strides */
    long long total;        /* output elements */
    int n, c, h, w;         /* x */
    int k, p, q;            /* y: n x k x p x q */
    int r, s;               /* filter: k x (c / groups) x r x s */
    int pad_h, pad_w, u, v, dil_h, dil_w, flip, groups;
    float alpha, beta;
    int nep;
    es_ep_t ep[ES_MAX_EP]; /* forward only: ADD, RELU, CLIP */
} es_conv_args_t;

/* ---- 16-bit formats: lib/half.h (round to nearest even; NaN kept quiet with its
 * sign and top payload bits) --------------------------------------------------------- */

ES_HD float es_ld(const void *p, long long i, int dt)
{
    if (dt == ES_DT_F16)
        return es_half_f16_to_f(((const unsigned short *)p)[i]);
    if (dt == ES_DT_BF16)
        return es_half_bf16_to_f(((const unsigned short *)p)[i]);
    return ((const float *)p)[i];
}

/* Every NaN is stored as one value (fp32 0x7fc00000, fp16 0x7e00, bf16
 * 0x7fc0): the NaN an operation makes differs between processors (x86
 * 0xffc00000, NVIDIA GPUs 0x7fffffff, which also do not pass a NaN
 * operand's payload on), so only a canonical NaN is the same bits on
 * every one of them. */
ES_HD void es_st(void *p, long long i, int dt, float v)
{
    if ((es_half_fbits(v) & 0x7fffffffu) > 0x7f800000u) {
        if (dt == ES_DT_F16)
            ((unsigned short *)p)[i] = 0x7e00u;
        else if (dt == ES_DT_BF16)
            ((unsigned short *)p)[i] = 0x7fc0u;
        else
            ((float *)p)[i] = es_half_bitsf(0x7fc00000u);
        return;
    }
    if (dt == ES_DT_F16)
        ((unsigned short *)p)[i] = es_half_f_to_f16(v);
    else if (dt == ES_DT_BF16)
        ((unsigned short *)p)[i] = es_half_f_to_bf16(v);
    else
        ((float *)p)[i] = v;
}

/* ---- epilogue -------------------------------------------------------------------- */

/* tanh(x) = 1 - 2 / (exp(2x) + 1) with exp from 2^(x log2 e) split into an
 * integer power and a degree-6 polynomial on [-0.5, 0.5], every operation
 * correctly rounded: the same bits everywhere (never the libm or device
 * tanhf, whose last bits differ). Saturates beyond |x| > 9. */
ES_HD float es_exp_poly(float x)
{
    float t = ES_MUL(x, 1.44269504f);
    float n = t >= 0.0f ? (float)(int)ES_ADD(t, 0.5f) : -(float)(int)ES_ADD(-t, 0.5f);
    float f = ES_FMA(n, -0.693145752f, x);
    f = ES_FMA(n, -1.42860677e-6f, f);
    float p = 1.38888889e-3f;
    p = ES_FMA(p, f, 8.33333333e-3f);
    p = ES_FMA(p, f, 4.16666667e-2f);
    p = ES_FMA(p, f, 1.66666667e-1f);
    p = ES_FMA(p, f, 0.5f);
    p = ES_FMA(p, f, 1.0f);
    p = ES_FMA(p, f, 1.0f);
    return ES_MUL(p, es_half_bitsf((unsigned)((int)n + 127) << 23));
}

ES_HD float es_tanh(float x)
{
    if (x != x)
        return x;
    if (x > 9.0f)
        return 1.0f;
    if (x < -9.0f)
        return -1.0f;
    float e = es_exp_poly(ES_MUL(2.0f, x));
    return ES_ADD(1.0f, -ES_DIV(2.0f, ES_ADD(e, 1.0f)));
}

ES_HD float es_gelu(float r)
{
    float r3 = ES_MUL(ES_MUL(r, r), r);
    float in = ES_MUL(0.797884561f, ES_FMA(0.044715f, r3, r));
    return ES_MUL(ES_MUL(0.5f, r), ES_ADD(1.0f, es_tanh(in)));
}

ES_HD float es_relu(float r)
{
    return r > 0.0f ? r : (r != r ? r : 0.0f);
}

/* The epilogue of an output element: (n, k, p, q) locate an ADD operand,
 * row is the GEMM row for BIAS. */
ES_HD float es_epilogue(const es_ep_t *ep, int nep, float r, long long n, long long k,
                        long long p, long long q, long long row)
{
    for (int i = 0; i < nep; i++) {
        const es_ep_t *e = &ep[i];
        switch (e->op) {
        case ES_EP_ADD: {
            float b = es_ld(e->b, n * e->bs_n + k * e->bs_k + p * e->bs_p + q * e->bs_q, e->dt);
            r = ES_ADD(ES_MUL(e->a1, r), ES_MUL(e->a2, b));
            break;
        }
        case ES_EP_RELU:
            r = es_relu(r);
            break;
        case ES_EP_CLIP:
            r = es_relu(r);
            r = r > e->hi ? e->hi : r;
            break;
        case ES_EP_BIAS: /* n: the batch */
            r = ES_ADD(r, es_ld(e->b, n * e->bs_n + row, e->dt));
            break;
        case ES_EP_GELU:
            r = es_gelu(r);
            break;
        default:
            break;
        }
    }
    return r;
}

/* ---- reference element functions --------------------------------------------------- */

/* r = alpha * acc, blended with the old value when beta != 0. */
ES_HD float es_blend(const void *o, long long oi, int dt, float alpha, float acc, float beta)
{
    float r = ES_MUL(alpha, acc);
    if (beta != 0.0f)
        r = ES_FMA(beta, es_ld(o, oi, dt), r);
    return r;
}

/* Element (i, j) of batch b from its sum acc: alpha, beta, epilogue, store. */
ES_HD void es_gemm_finish(const es_gemm_args_t *a, long long i, long long j, long long b,
                          float acc)
{
    float alpha = a->palpha ? *a->palpha : a->alpha, beta = a->pbeta ? *a->pbeta : a->beta;
    float r = es_blend(a->C, b * a->sC + i + j * a->ldc, a->ct, alpha, acc, beta);
    r = es_epilogue(a->ep, a->nep, r, b, 0, 0, 0, i);
    es_st(a->D, b * a->sD + i + j * a->ldd, a->dt, r);
}

ES_HD void es_gemm_elem(const es_gemm_args_t *a, long long i, long long j, long long b)
{
    long long ao = b * a->sA, bo = b * a->sB;
    float alpha = a->palpha ? *a->palpha : a->alpha;
    float acc = 0.0f;
    /* alpha == 0: A and B are not read (BLAS: they need not be set) */
    for (int p = 0; alpha != 0.0f && p < a->k; p++) {
        float x = es_ld(a->A, ao + (a->ta ? p + i * a->lda : i + (long long)p * a->lda), a->at);
        float y = es_ld(a->B, bo + (a->tb ? j + (long long)p * a->ldb : p + j * a->ldb), a->bt);
        acc = ES_FMA(x, y, acc);
    }
    es_gemm_finish(a, i, j, b, acc);
}

ES_HD void es_bgrad_elem(const es_bgrad_args_t *a, long long x, long long b)
{
    float s = 0.0f;
    for (int p = 0; p < a->k; p++) {
        /* rows of op(A): A(x, p) is A[x + p ld] (N) or A[p + x ld] (T);
         * columns of op(B): B(p, x) is B[p + x ld] (N) or B[x + p ld] (T) */
        int xm = a->rows ? !a->trans : a->trans; /* x runs along M's leading dimension */
        long long o = xm ? x + (long long)p * a->ld : p + x * a->ld;
        s = ES_ADD(s, es_ld(a->M, b * a->sM + o, a->mt));
    }
    es_st(a->g, b * a->sg + x, a->gt, s);
}

/* The finishing steps of a convolution output element from its sum acc
 * (forward: y at (n, k, p, q), with the epilogue; backward data: dx at
 * (n, c, h, w); backward filter: dw at (k, c of the group, r, s)). */
ES_HD void es_conv_fwd_finish(const es_conv_args_t *a, long long n, long long k, long long p,
                              long long q, float acc)
{
    long long o = n * a->ys_n + k * a->ys_k + p * a->ys_p + q * a->ys_q;
    float r = es_blend(a->out, o, a->t_out, a->alpha, acc, a->beta);
    r = es_epilogue(a->ep, a->nep, r, n, k, p, q, 0);
    es_st(a->out, o, a->t_out, r);
}

ES_HD void es_conv_bwd_data_finish(const es_conv_args_t *a, long long n, long long c,
                                   long long h, long long w, float acc)
{
    long long o = n * a->xs_n + c * a->xs_c + h * a->xs_h + w * a->xs_w;
    es_st(a->out, o, a->t_out, es_blend(a->out, o, a->t_out, a->alpha, acc, a->beta));
}

ES_HD void es_conv_bwd_filter_finish(const es_conv_args_t *a, long long k, long long cc,
                                     long long fr, long long fs, float acc)
{
    long long o = k * a->ws_k + cc * a->ws_c + fr * a->ws_r + fs * a->ws_s;
    es_st(a->out, o, a->t_out, es_blend(a->out, o, a->t_out, a->alpha, acc, a->beta));
}

/* ---- convolutions as implicit GEMMs --------------------------------------------------
 * The tiled kernels' view (kernels/portable.cu) and the int8 path's
 * (kernels/d2int8_kernels.h), per group g (dir: ES_CONV_FWD 0,
 * ES_CONV_BWD_DATA 1, ES_CONV_BWD_FILTER 2):
 *   forward:         rows (n, p, q), columns k of the group, t = (c of the group, r, s)
 *   backward data:   rows (n, h, w), columns c of the group, t = (k of the group, r, s)
 *   backward filter: rows k of the group, columns (c of the group, r, s), t = (n, p, q)
 * es_conv_ia(row, t) and es_conv_ib(t, col) load the operands (x / dy /
 * w by direction) as types t0 (in0) and t1 (in1), returning 0 for a term
 * the reference skips (a tap outside the image); es_conv_ifinish is the
 * reference's finishing step of output (row, col). */
ES_HD long long es_conv_rows(const es_conv_args_t *c, int dir)
{
    return dir == 0 ? (long long)c->n * c->p * c->q
                    : dir == 1 ? (long long)c->n * c->h * c->w : c->k / c->groups;
}

ES_HD long long es_conv_cols(const es_conv_args_t *c, int dir)
{
    return dir == 0 ? c->k / c->groups
                    : dir == 1 ? c->c / c->groups : (long long)(c->c / c->groups) * c->r * c->s;
}

ES_HD long long es_conv_depth(const es_conv_args_t *c, int dir)
{
    return dir == 0 ? (long long)(c->c / c->groups) * c->r * c->s
                    : dir == 1 ? (long long)(c->k / c->groups) * c->r * c->s
                               : (long long)c->n * c->p * c->q;
}

/* x at (n, channel cc of group g, output position (p, q), filter tap (rr, ss)
 * unflipped): 0 outside the image. */
ES_HD int es_conv_x_at(const es_conv_args_t *c, int g, long long n, long long cc, long long p,
                       long long q, int rr, int ss, int t0, float *v)
{
    long long hh = p * c->u - c->pad_h + (long long)rr * c->dil_h;
    long long ww = q * c->v - c->pad_w + (long long)ss * c->dil_w;
    if (hh < 0 || hh >= c->h || ww < 0 || ww >= c->w)
        return 0;
    long long ch = (long long)g * (c->c / c->groups) + cc;
    *v = es_ld(c->in0, n * c->xs_n + ch * c->xs_c + hh * c->xs_h + ww * c->xs_w, t0);
    return 1;
}

/* w at (k of group g, channel cc of the group, tap (rr, ss) unflipped). */
ES_HD float es_conv_w_at(const es_conv_args_t *c, int g, long long kk, long long cc, int rr,
                         int ss, int t1)
{
    int fr = c->flip ? c->r - 1 - rr : rr, fs = c->flip ? c->s - 1 - ss : ss;
    long long k = (long long)g * (c->k / c->groups) + kk;
    return es_ld(c->in1, k * c->ws_k + cc * c->ws_c + fr * c->ws_r + fs * c->ws_s, t1);
}

ES_HD int es_conv_ia(const es_conv_args_t *c, int dir, int g, long long row, long long t, int t0,
                     int t1, float *v)
{
    int ss = (int)(t % c->s), rr = (int)(t / c->s % c->r);
    if (dir == 0) {
        long long q = row % c->q, p = row / c->q % c->p, n = row / c->q / c->p;
        return es_conv_x_at(c, g, n, t / c->s / c->r, p, q, rr, ss, t0, v);
    }
    if (dir == 1) {
        int w = (int)(row % c->w), h = (int)(row / c->w % c->h), n = (int)(row / c->w / c->h);
        int kk = (int)(t / c->s / c->r);
        int th = h + c->pad_h - rr * c->dil_h, tw = w + c->pad_w - ss * c->dil_w;
        if (th < 0 || th % c->u || th / c->u >= c->p || tw < 0 || tw % c->v || tw / c->v >= c->q)
            return 0;
        long long k = (long long)g * (c->k / c->groups) + kk;
        long long o = n * c->ys_n + k * c->ys_k + (th / c->u) * c->ys_p + (tw / c->v) * c->ys_q;
        *v = es_ld(c->in0, o, t0);
        return 1;
    }
    long long q = t % c->q, p = t / c->q % c->p, n = t / c->q / c->p;
    long long k = (long long)g * (c->k / c->groups) + row;
    *v = es_ld(c->in1, n * c->ys_n + k * c->ys_k + p * c->ys_p + q * c->ys_q, t1);
    return 1;
}

ES_HD int es_conv_ib(const es_conv_args_t *c, int dir, int g, long long t, long long col, int t0,
                     int t1, float *v)
{
    if (dir == 0 || dir == 1) {
        int ss = (int)(t % c->s), rr = (int)(t / c->s % c->r);
        long long it = t / c->s / c->r; /* c (forward) or k (backward data) of the group */
        *v = dir == 0 ? es_conv_w_at(c, g, col, it, rr, ss, t1)
                      : es_conv_w_at(c, g, it, col, rr, ss, t1);
        return 1;
    }
    long long q = t % c->q, p = t / c->q % c->p, n = t / c->q / c->p;
    int fs = (int)(col % c->s), fr = (int)(col / c->s % c->r);
    long long cc = col / c->s / c->r;
    int rr = c->flip ? c->r - 1 - fr : fr, ss = c->flip ? c->s - 1 - fs : fs;
    return es_conv_x_at(c, g, n, cc, p, q, rr, ss, t0, v);
}

ES_HD void es_conv_ifinish(const es_conv_args_t *c, int dir, int g, long long row,
                           long long col, float acc)
{
    if (dir == 0) {
        long long q = row % c->q, p = row / c->q % c->p, n = row / c->q / c->p;
        es_conv_fwd_finish(c, n, (long long)g * (c->k / c->groups) + col, p, q, acc);
    } else if (dir == 1) {
        long long w = row % c->w, h = row / c->w % c->h, n = row / c->w / c->h;
        es_conv_bwd_data_finish(c, n, (long long)g * (c->c / c->groups) + col, h, w, acc);
    } else {
        long long fs = col % c->s, fr = col / c->s % c->r, cc = col / c->s / c->r;
        es_conv_bwd_filter_finish(c, (long long)g * (c->k / c->groups) + row, cc, fr, fs, acc);
    }
}

ES_HD void es_conv_fwd_elem(const es_conv_args_t *a, long long idx)
{
    int q = (int)(idx % a->q);
    long long t = idx / a->q;
    int p = (int)(t % a->p);
    t /= a->p;
    int k = (int)(t % a->k);
    int n = (int)(t / a->k);
    int cpg = a->c / a->groups, kpg = a->k / a->groups, g = k / kpg;
    float acc = 0.0f;
    for (int cc = 0; cc < cpg; cc++) {
        int c = g * cpg + cc;
        for (int rr = 0; rr < a->r; rr++) {
            int hh = p * a->u - a->pad_h + rr * a->dil_h;
            if (hh < 0 || hh >= a->h)
                continue;
            int fr = a->flip ? a->r - 1 - rr : rr;
            for (int ss = 0; ss < a->s; ss++) {
                int ww = q * a->v - a->pad_w + ss * a->dil_w;
                if (ww < 0 || ww >= a->w)
                    continue;
                int fs = a->flip ? a->s - 1 - ss : ss;
                float x = es_ld(a->in0, n * a->xs_n + c * a->xs_c + hh * a->xs_h + ww * a->xs_w,
                                a->t_in0);
                float f = es_ld(a->in1, k * a->ws_k + cc * a->ws_c + fr * a->ws_r + fs * a->ws_s,
                                a->t_in1);
                acc = ES_FMA(x, f, acc);
            }
        }
    }
    es_conv_fwd_finish(a, n, k, p, q, acc);
}

ES_HD void es_conv_bwd_data_elem(const es_conv_args_t *a, long long idx)
{
    int w = (int)(idx % a->w);
    long long t = idx / a->w;
    int h = (int)(t % a->h);
    t /= a->h;
    int c = (int)(t % a->c);
    int n = (int)(t / a->c);
    int cpg = a->c / a->groups, kpg = a->k / a->groups, g = c / cpg, cc = c % cpg;
    float acc = 0.0f;
    for (int kk = 0; kk < kpg; kk++) {
        int k = g * kpg + kk;
        for (int rr = 0; rr < a->r; rr++) {
            int th = h + a->pad_h - rr * a->dil_h;
            if (th < 0 || th % a->u)
                continue;
            int p = th / a->u;
            if (p >= a->p)
                continue;
            int fr = a->flip ? a->r - 1 - rr : rr;
            for (int ss = 0; ss < a->s; ss++) {
                int tw = w + a->pad_w - ss * a->dil_w;
                if (tw < 0 || tw % a->v)
                    continue;
                int q = tw / a->v;
                if (q >= a->q)
                    continue;
                int fs = a->flip ? a->s - 1 - ss : ss;
                float dy = es_ld(a->in0, n * a->ys_n + k * a->ys_k + p * a->ys_p + q * a->ys_q,
                                 a->t_in0);
                float f = es_ld(a->in1, k * a->ws_k + cc * a->ws_c + fr * a->ws_r + fs * a->ws_s,
                                a->t_in1);
                acc = ES_FMA(dy, f, acc);
            }
        }
    }
    es_conv_bwd_data_finish(a, n, c, h, w, acc);
}

ES_HD void es_conv_bwd_filter_elem(const es_conv_args_t *a, long long idx)
{
    int cpg = a->c / a->groups, kpg = a->k / a->groups;
    int fs = (int)(idx % a->s);
    long long t = idx / a->s;
    int fr = (int)(t % a->r);
    t /= a->r;
    int cc = (int)(t % cpg);
    int k = (int)(t / cpg);
    int c = (k / kpg) * cpg + cc;
    int rr = a->flip ? a->r - 1 - fr : fr, ss = a->flip ? a->s - 1 - fs : fs;
    float acc = 0.0f;
    for (int n = 0; n < a->n; n++)
        for (int p = 0; p < a->p; p++) {
            int hh = p * a->u - a->pad_h + rr * a->dil_h;
            if (hh < 0 || hh >= a->h)
                continue;
            for (int q = 0; q < a->q; q++) {
                int ww = q * a->v - a->pad_w + ss * a->dil_w;
                if (ww < 0 || ww >= a->w)
                    continue;
                float x = es_ld(a->in0, n * a->xs_n + c * a->xs_c + hh * a->xs_h + ww * a->xs_w,
                                a->t_in0);
                float dy = es_ld(a->in1, n * a->ys_n + k * a->ys_k + p * a->ys_p + q * a->ys_q,
                                 a->t_in1);
                acc = ES_FMA(x, dy, acc);
            }
        }
    es_conv_bwd_filter_finish(a, k, cc, fr, fs, acc);
}

#endif
