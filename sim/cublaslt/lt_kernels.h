/* simcuda cuBLASLt: the device kernels' arguments and per-thread bodies,
 * included by the kernels (sim/cublaslt/kernels.cu, built for the GPU by
 * nvcc and for simcuda through the CUDA-on-CPU layer) and by the library's
 * C code (the argument structure).
 *
 * A launch computes, for a chosen algorithm (tile, k-chunk kc, split-K
 * factor, reduction scheme), every element D(i,j) of every batch b in this
 * order, products and sums rounded to float one by one (the GPU build
 * spells every operation with _rn intrinsics, the CPU build is not
 * contracted):
 *
 *   chunk partial  p = ((0 + a0*b0) + a1*b1) + ...       (kc products, k ascending)
 *   split sum      s = ((p0 + p1) + p2) + ...            (chunks of the split, in order)
 *   total          NONE: t = s (one split)
 *                  COMPUTE_TYPE: t = ((s0 + s1) + s2) + ... (fp32 partials in the
 *                      workspace, summed in split order by a second kernel)
 *                  INPLACE: d = out(s0); d = out(d + s1); ... t = d (each step
 *                      rounded to D's type: the output buffer accumulates)
 *   result         r = alpha*t, then r = r + beta*C (beta != 0; C not read
 *                  otherwise), then + bias[i] (BIAS epilogues), then ReLU
 *                  (max(r, 0), NaN kept) or GELU (tanh form, libm tanhf),
 *                  then D = round to D's type.
 *   bias gradient  BGRADA: g[i] = sum over p of op(A)(i,p); BGRADB: g[j] =
 *                  sum over p of op(B)(p,j); both in kc-chunks as above.
 * Inputs are widened exactly from their type and, for the FAST compute
 * types, rounded to TF32 / bf16 / half as they are read.
 */
#ifndef SIM_CUBLASLT_KERNELS_H
#define SIM_CUBLASLT_KERNELS_H

#ifdef __CUDACC__
#define LT_HD __device__ __forceinline__
#define LT_MUL(a, b) __fmul_rn((a), (b))
#define LT_ADD(a, b) __fadd_rn((a), (b))
#else
#include <math.h>
#include <string.h>
#define LT_HD static inline
#define LT_MUL(a, b) ((a) * (b))
#define LT_ADD(a, b) ((a) + (b))
#endif

#include "sim/common/f16_impl.h"

#define LT_TILE 16

enum { LT_F32 = 0, LT_F16 = 1, LT_BF16 = 2 };
enum { LT_ROUND_NONE = 0, LT_ROUND_TF32, LT_ROUND_BF16, LT_ROUND_F16 };
/* Reduction schemes (cublasLtReductionScheme_t values). */
enum { LT_RED_NONE = 0, LT_RED_INPLACE = 1, LT_RED_COMPUTE = 2 };
/* Epilogue flags. */
enum { LT_EPI_BIAS = 1, LT_EPI_RELU = 2, LT_EPI_GELU = 4, LT_EPI_BGRADA = 8, LT_EPI_BGRADB = 16 };

typedef struct lt_args {
    const void *A, *B, *C;
    void *D;
    float *ws;                   /* COMPUTE_TYPE: split partials [batch][split][n][m] */
    const void *bias;            /* BIAS: the vector (m elements per batch) */
    void *bgrad;                 /* BGRADA / BGRADB: the gradient output */
    const float *palpha, *pbeta; /* device pointer mode (else NULL) */
    long long sA, sB, sC, sD, sbias;
    long long lda, ldb, ldc, ldd;
    long long kper;              /* k-range of one split, a multiple of kc */
    int m, n, k, batch;
    int ta, tb;
    int at, bt, ct, dt, biast;   /* LT_F32 / LT_F16 / LT_BF16 */
    int round;                   /* LT_ROUND_* */
    int kc, splitk, scheme, epi;
    float alpha, beta;
} lt_args_t;

/* ---- 16-bit formats: sim/common/f16_impl.h's float conversions (round to nearest
 * even; NaN quiet, sign and top payload bits kept) ---------------------------------- */

LT_HD unsigned lt_fbits(float f)
{
#ifdef __CUDACC__
    return __float_as_uint(f);
#else
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

LT_HD float lt_bitsf(unsigned u)
{
#ifdef __CUDACC__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

LT_HD float lt_ld(const void *p, long long i, int t)
{
    if (t == LT_F16)
        return sim_f16_half_to_float_(((const unsigned short *)p)[i]);
    if (t == LT_BF16)
        return sim_f16_bf16_to_float_(((const unsigned short *)p)[i]);
    return ((const float *)p)[i];
}

LT_HD void lt_st(void *p, long long i, int t, float v)
{
    if (t == LT_F16)
        ((unsigned short *)p)[i] = sim_f16_float_to_half_(v);
    else if (t == LT_BF16)
        ((unsigned short *)p)[i] = sim_f16_float_to_bf16_(v);
    else
        ((float *)p)[i] = v;
}

/* v rounded to the type t (its value as a float). */
LT_HD float lt_to(float v, int t)
{
    if (t == LT_F16)
        return sim_f16_half_to_float_(sim_f16_float_to_half_(v));
    if (t == LT_BF16)
        return sim_f16_bf16_to_float_(sim_f16_float_to_bf16_(v));
    return v;
}

LT_HD float lt_round_in(float v, int r)
{
    if (r == LT_ROUND_TF32) {
        unsigned x = lt_fbits(v);
        if ((x & 0x7f800000u) == 0x7f800000u)
            return v;
        return lt_bitsf((x + 0xfffu + ((x >> 13) & 1u)) & ~0x1fffu);
    }
    if (r == LT_ROUND_BF16)
        return lt_to(v, LT_BF16);
    if (r == LT_ROUND_F16)
        return lt_to(v, LT_F16);
    return v;
}

LT_HD float lt_a(const lt_args_t *a, long long i, long long p, long long b)
{
    long long o = b * a->sA + (a->ta ? p + i * a->lda : i + p * a->lda);
    return lt_round_in(lt_ld(a->A, o, a->at), a->round);
}

LT_HD float lt_b(const lt_args_t *a, long long p, long long j, long long b)
{
    long long o = b * a->sB + (a->tb ? j + p * a->ldb : p + j * a->ldb);
    return lt_round_in(lt_ld(a->B, o, a->bt), a->round);
}

/* ---- per-thread bodies -------------------------------------------------------------- */

/* The sum s of split `sp` of element (i, j) of batch b. */
LT_HD float lt_split_sum(const lt_args_t *a, long long i, long long j, long long b, int sp)
{
    long long k0 = (long long)sp * a->kper, k1 = k0 + a->kper;
    if (k1 > a->k)
        k1 = a->k;
    float s = 0.0f;
    for (long long c0 = k0; c0 < k1; c0 += a->kc) {
        long long c1 = c0 + a->kc < k1 ? c0 + a->kc : k1;
        float p = 0.0f;
        for (long long q = c0; q < c1; q++)
            p = LT_ADD(p, LT_MUL(lt_a(a, i, q, b), lt_b(a, q, j, b)));
        s = c0 == k0 ? p : LT_ADD(s, p);
    }
    return s;
}

LT_HD float lt_gelu(float r)
{
    float in = LT_MUL(0.7978845608f, LT_ADD(r, LT_MUL(0.044715f, LT_MUL(LT_MUL(r, r), r))));
    return LT_MUL(LT_MUL(0.5f, r), LT_ADD(1.0f, tanhf(in)));
}

/* alpha, beta, bias, activation, store. */
LT_HD void lt_finish(const lt_args_t *a, long long i, long long j, long long b, float t)
{
    float alpha = a->palpha ? *a->palpha : a->alpha, beta = a->pbeta ? *a->pbeta : a->beta;
    float r = LT_MUL(alpha, t);
    if (beta != 0.0f)
        r = LT_ADD(r, LT_MUL(beta, lt_ld(a->C, b * a->sC + i + j * a->ldc, a->ct)));
    if (a->epi & LT_EPI_BIAS)
        r = LT_ADD(r, lt_ld(a->bias, b * a->sbias + i, a->biast));
    if (a->epi & LT_EPI_RELU)
        r = r > 0.0f ? r : (r != r ? r : 0.0f);
    if (a->epi & LT_EPI_GELU)
        r = lt_gelu(r);
    lt_st(a->D, b * a->sD + i + j * a->ldd, a->dt, r);
}

/* Kernel lt_gemm, thread (i, j) of grid layer z: NONE and INPLACE finish
 * the element (z = batch); COMPUTE_TYPE stores the split partial (z =
 * batch * splitk + split). alpha == 0 or k == 0: t = 0 (A, B not read). */
LT_HD void lt_gemm_thread(const lt_args_t *a, long long i, long long j, long long z)
{
    float alpha = a->palpha ? *a->palpha : a->alpha;
    if (a->scheme == LT_RED_COMPUTE) {
        long long b = z / a->splitk;
        int sp = (int)(z % a->splitk);
        a->ws[((b * a->splitk + sp) * a->n + j) * a->m + i] = lt_split_sum(a, i, j, b, sp);
        return;
    }
    float t = 0.0f;
    for (int sp = 0; alpha != 0.0f && sp < a->splitk; sp++) {
        float s = lt_split_sum(a, i, j, z, sp);
        t = a->scheme == LT_RED_INPLACE ? lt_to(sp ? LT_ADD(t, s) : s, a->dt) : s;
    }
    lt_finish(a, i, j, z, t);
}

/* Kernel lt_reduce (COMPUTE_TYPE), thread (i, j) of batch b. */
LT_HD void lt_reduce_thread(const lt_args_t *a, long long i, long long j, long long b)
{
    float alpha = a->palpha ? *a->palpha : a->alpha, t = 0.0f;
    for (int sp = 0; alpha != 0.0f && sp < a->splitk; sp++) {
        float s = a->ws[((b * a->splitk + sp) * a->n + j) * a->m + i];
        t = sp ? LT_ADD(t, s) : s;
    }
    lt_finish(a, i, j, b, t);
}

/* Kernel lt_bgrad, thread x of batch b: BGRADA x = row i (m of them),
 * BGRADB x = column j (n of them); stored in the bias type. */
LT_HD void lt_bgrad_thread(const lt_args_t *a, long long x, long long b)
{
    float s = 0.0f;
    for (long long c0 = 0; c0 < a->k; c0 += a->kc) {
        long long c1 = c0 + a->kc < a->k ? c0 + a->kc : a->k;
        float p = 0.0f;
        for (long long q = c0; q < c1; q++)
            p = LT_ADD(p, (a->epi & LT_EPI_BGRADA) ? lt_a(a, x, q, b) : lt_b(a, q, x, b));
        s = c0 == 0 ? p : LT_ADD(s, p);
    }
    lt_st(a->bgrad, b * a->sbias + x, a->biast, s);
}

#endif
