/* d2's portable kernels, one source for the GPU (kernels/portable.cu, nvcc)
 * and for simcuda's twins (kernels/portable_twin.c, gcc -ffp-contract=off):
 * each output element is computed by ES_* element functions below, whose
 * float operations are spelled out (correctly rounded fused multiply-add,
 * multiply), so both compilers produce the same bits on every GPU model.
 *
 * Order: a GEMM element sums k ascending; a convolution forward element
 * sums (input channel, filter row, filter column) ascending, backward data
 * (output channel, row, column), backward filter (image, output row, output
 * column); then out = alpha * sum, and when beta != 0,
 * out = fma(beta, old out, alpha * sum) (beta == 0: out is not read, so NaN
 * in it does not propagate; a GEMM with alpha == 0 reads neither A nor B,
 * as BLAS specifies). Out-of-range taps are skipped. Indices are 64-bit
 * (lda * k and batch strides may pass 2^31).
 *
 * Kernel arguments are one struct passed by value (the same layout for the
 * host, the device and the twin). Launch shapes: GEMM 16x16 blocks over
 * (m, n), grid.z = batch (kernels/gemm.c cuts n and batch into launches
 * within CUDA's 65535 limit of grid.y / grid.z); convolutions 1-D, ES_CONV_BLOCK threads a block,
 * one thread per output element.
 */
#ifndef ES_PORTABLE_KERNELS_H
#define ES_PORTABLE_KERNELS_H

#ifdef __CUDACC__
#define ES_HD __device__ __forceinline__
#define ES_FMA(a, b, c) __fmaf_rn((a), (b), (c))
#define ES_MUL(a, b) __fmul_rn((a), (b))
#else
#include <math.h>
#define ES_HD static inline
#define ES_FMA(a, b, c) fmaf((a), (b), (c))
#define ES_MUL(a, b) ((a) * (b))
#endif

#define ES_GEMM_TILE 16
#define ES_CONV_BLOCK 256

typedef struct es_gemm_args {
    const float *A, *B;
    float *C;
    const float *palpha, *pbeta; /* device pointer mode: read here (else NULL) */
    long long sA, sB, sC;  /* batch strides (elements) */
    int ta, tb, m, n, k, lda, ldb, ldc;
    float alpha, beta;
} es_gemm_args_t;

typedef struct es_conv_args {
    const float *in0, *in1; /* fwd: x, w; bwd data: dy, w; bwd filter: x, dy */
    float *out;             /* fwd: y; bwd data: dx; bwd filter: dw */
    long long xs_n, xs_c, xs_h, xs_w; /* x (and dx) strides */
    long long ys_n, ys_k, ys_p, ys_q; /* y (and dy) strides */
    long long total;        /* output elements */
    int n, c, h, w;         /* x */
    int k, p, q;            /* y: n x k x p x q */
    int r, s;               /* filter: k x (c / groups) x r x s, packed */
    int pad_h, pad_w, u, v, dil_h, dil_w, flip, groups;
    float alpha, beta;
} es_conv_args_t;

ES_HD void es_store(float *o, float alpha, float acc, float beta)
{
    float r = ES_MUL(alpha, acc);
    if (beta != 0.0f)
        r = ES_FMA(beta, *o, r);
    *o = r;
}

ES_HD void es_gemm_elem(const es_gemm_args_t *a, long long i, long long j, long long b)
{
    const float *A = a->A + b * a->sA, *B = a->B + b * a->sB;
    float alpha = a->palpha ? *a->palpha : a->alpha, beta = a->pbeta ? *a->pbeta : a->beta;
    float acc = 0.0f;
    /* alpha == 0: A and B are not read (BLAS: they need not be set) */
    for (int p = 0; alpha != 0.0f && p < a->k; p++) {
        float x = a->ta ? A[p + i * a->lda] : A[i + (long long)p * a->lda];
        float y = a->tb ? B[j + (long long)p * a->ldb] : B[p + j * a->ldb];
        acc = ES_FMA(x, y, acc);
    }
    es_store(a->C + b * a->sC + i + j * a->ldc, alpha, acc, beta);
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
                float x = a->in0[n * a->xs_n + c * a->xs_c + hh * a->xs_h + ww * a->xs_w];
                float f = a->in1[(((long long)k * cpg + cc) * a->r + fr) * a->s + fs];
                acc = ES_FMA(x, f, acc);
            }
        }
    }
    es_store(a->out + n * a->ys_n + k * a->ys_k + p * a->ys_p + q * a->ys_q, a->alpha, acc,
             a->beta);
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
                float dy = a->in0[n * a->ys_n + k * a->ys_k + p * a->ys_p + q * a->ys_q];
                float f = a->in1[(((long long)k * cpg + cc) * a->r + fr) * a->s + fs];
                acc = ES_FMA(dy, f, acc);
            }
        }
    }
    es_store(a->out + n * a->xs_n + c * a->xs_c + h * a->xs_h + w * a->xs_w, a->alpha, acc,
             a->beta);
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
                float x = a->in0[n * a->xs_n + c * a->xs_c + hh * a->xs_h + ww * a->xs_w];
                float dy = a->in1[n * a->ys_n + k * a->ys_k + p * a->ys_p + q * a->ys_q];
                acc = ES_FMA(x, dy, acc);
            }
        }
    es_store(a->out + idx, a->alpha, acc, a->beta);
}

#endif
