/* simcuda cuBLAS: the plain-C reference of the GEMM kernels' summation
 * order (gemm.h), for the tests (bit-for-bit comparison with the library's
 * kernels, sim/cublas/kernels.cu) and the bench. It packs A and B into
 * panels and runs a 16x4 register-blocked micro-kernel written with GCC
 * vector extensions, cloned for AVX2 and baseline x86-64 (vectorising
 * across rows never changes the per-element order, and contraction into
 * FMA is off). Not part of the library. */
#include "sim/cublas/gemm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MR 16
#define NR 4
#define KCP SIM_GEMM_KC_MAX /* packing depth; every plan kc divides it */
#define MCB 128
#define NCB 512

#if defined(__x86_64__) && !defined(SIM_GEMM_NO_CLONES) && !defined(__SANITIZE_ADDRESS__)
#define SIM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SIM_CLONES
#endif

typedef float v8 __attribute__((vector_size(32)));

/* ---------------------------------------------------------------- types */

static inline float load_elem(const void *p, int64_t idx, sim_dtype_t t)
{
    switch (t) {
    case SIM_F16: return sim_f16_half_to_float(((const uint16_t *)p)[idx]);
    case SIM_BF16: return sim_f16_bf16_to_float(((const uint16_t *)p)[idx]);
    default: return ((const float *)p)[idx];
    }
}

static inline void store_elem(void *p, int64_t idx, sim_dtype_t t, float v)
{
    switch (t) {
    case SIM_F16: ((uint16_t *)p)[idx] = sim_f16_float_to_half(v); break;
    case SIM_BF16: ((uint16_t *)p)[idx] = sim_f16_float_to_bf16(v); break;
    default: ((float *)p)[idx] = v; break;
    }
}

static int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* --------------------------------------------------------------- kernel */

/* op(A) block rows [i0, i0+mc) x cols [p0, p0+kk) into MR-row panels:
 * panel r holds, for each p, MR consecutive rows (zero padded). */
static void pack_a(const sim_gemm_args_t *g, int64_t i0, int64_t mc, int64_t p0, int64_t kk,
                   float *restrict dst)
{
    for (int64_t ir = 0; ir < mc; ir += MR) {
        int64_t mr = mc - ir < MR ? mc - ir : MR;
        float *d = dst + ir * kk;
        for (int64_t p = 0; p < kk; p++) {
            int64_t i = i0 + ir;
            for (int64_t r = 0; r < mr; r++) {
                int64_t idx = g->transa ? (p0 + p) + (i + r) * g->lda : (i + r) + (p0 + p) * g->lda;
                float v = g->atype == SIM_F32 ? ((const float *)g->A)[idx]
                                              : load_elem(g->A, idx, g->atype);
                d[p * MR + r] = g->round ? sim_round_input(v, g->round) : v;
            }
            for (int64_t r = mr; r < MR; r++)
                d[p * MR + r] = 0.0f;
        }
    }
}

/* op(B) block rows [p0, p0+kk) x cols [j0, j0+nc) into NR-column panels. */
static void pack_b(const sim_gemm_args_t *g, int64_t p0, int64_t kk, int64_t j0, int64_t nc,
                   float *restrict dst)
{
    for (int64_t jr = 0; jr < nc; jr += NR) {
        int64_t nr = nc - jr < NR ? nc - jr : NR;
        float *d = dst + jr * kk;
        for (int64_t p = 0; p < kk; p++) {
            for (int64_t c = 0; c < nr; c++) {
                int64_t j = j0 + jr + c;
                int64_t idx = g->transb ? j + (p0 + p) * g->ldb : (p0 + p) + j * g->ldb;
                float v = g->btype == SIM_F32 ? ((const float *)g->B)[idx]
                                              : load_elem(g->B, idx, g->btype);
                d[p * NR + c] = g->round ? sim_round_input(v, g->round) : v;
            }
            for (int64_t c = nr; c < NR; c++)
                d[p * NR + c] = 0.0f;
        }
    }
}

/* Unaligned load of 8 floats (a macro: a function returning a 32-byte
 * vector would change the ABI of the baseline clone). */
#define VLOAD(dst, p) __builtin_memcpy(&(dst), (p), sizeof(v8))

/* MR x NR tile over kk packed k-steps in chunks of kc. c: MR x NR tile,
 * column-major with ld MR. first: the block starts the split, so its first
 * chunk's partial is stored instead of added. */
static inline __attribute__((always_inline)) void micro(int64_t kk, int64_t kc,
                                                        const float *restrict a,
                                                        const float *restrict b,
                                                        float *restrict c, int first)
{
    for (int64_t k0 = 0; k0 < kk; k0 += kc) {
        int64_t kn = kk - k0 < kc ? kk - k0 : kc;
        v8 z = {0, 0, 0, 0, 0, 0, 0, 0};
        v8 p00 = z, p10 = z, p01 = z, p11 = z, p02 = z, p12 = z, p03 = z, p13 = z;
        for (int64_t k = 0; k < kn; k++) {
            v8 a0, a1;
            VLOAD(a0, a);
            VLOAD(a1, a + 8);
            float b0 = b[0], b1 = b[1], b2 = b[2], b3 = b[3];
            p00 += a0 * b0;
            p10 += a1 * b0;
            p01 += a0 * b1;
            p11 += a1 * b1;
            p02 += a0 * b2;
            p12 += a1 * b2;
            p03 += a0 * b3;
            p13 += a1 * b3;
            a += MR;
            b += NR;
        }
        v8 r[8] = {p00, p10, p01, p11, p02, p12, p03, p13};
        if (first && k0 == 0) {
            __builtin_memcpy(c, r, sizeof(r));
        } else {
            v8 cv[8];
            __builtin_memcpy(cv, c, sizeof(cv));
            for (int q = 0; q < 8; q++)
                cv[q] += r[q];
            __builtin_memcpy(c, cv, sizeof(cv));
        }
    }
}

/* The split's sum s over [k0, k1) into buf (m x n, ld m). */
SIM_CLONES
static void split_sum(const sim_gemm_args_t *g, int64_t kc, int64_t k0, int64_t k1, float *buf,
                      float *apack, float *bpack)
{
    int64_t m = g->m, n = g->n;
    float ct[MR * NR] __attribute__((aligned(32)));
    for (int64_t pc = k0; pc < k1; pc += KCP) {
        int64_t kk = k1 - pc < KCP ? k1 - pc : KCP;
        int first = pc == k0;
        for (int64_t jc = 0; jc < n; jc += NCB) {
            int64_t nc = n - jc < NCB ? n - jc : NCB;
            pack_b(g, pc, kk, jc, nc, bpack);
            for (int64_t ic = 0; ic < m; ic += MCB) {
                int64_t mc = m - ic < MCB ? m - ic : MCB;
                pack_a(g, ic, mc, pc, kk, apack);
                for (int64_t jr = 0; jr < nc; jr += NR) {
                    int64_t nr = nc - jr < NR ? nc - jr : NR;
                    for (int64_t ir = 0; ir < mc; ir += MR) {
                        int64_t mr = mc - ir < MR ? mc - ir : MR;
                        float *cb = buf + (ic + ir) + (jc + jr) * m;
                        if (!first) {
                            if (mr < MR || nr < NR)
                                memset(ct, 0, sizeof(ct));
                            for (int64_t j = 0; j < nr; j++)
                                memcpy(ct + j * MR, cb + j * m, (size_t)mr * sizeof(float));
                        }
                        micro(kk, kc, apack + ir * kk, bpack + jr * kk, ct, first);
                        for (int64_t j = 0; j < nr; j++)
                            memcpy(cb + j * m, ct + j * MR, (size_t)mr * sizeof(float));
                    }
                }
            }
        }
    }
}

SIM_CLONES
static void add_into(float *restrict t, const float *restrict w, int64_t len)
{
    for (int64_t i = 0; i < len; i++)
        t[i] += w[i];
}

static void scale_c(const sim_gemm_args_t *g)
{
    for (int64_t j = 0; j < g->n; j++)
        for (int64_t i = 0; i < g->m; i++) {
            int64_t idx = i + j * g->ldc;
            float v = g->beta == 0.0f ? 0.0f : g->beta * load_elem(g->C, idx, g->ctype);
            store_elem(g->C, idx, g->ctype, v);
        }
}

int sim_gemm_run(const sim_gemm_plan_t *plan, const sim_gemm_args_t *g)
{
    int rc = 0;
    float *t = NULL, *w = NULL, *apack = NULL, *bpack = NULL;
    int64_t m = g->m, n = g->n, k = g->k;
    if (m <= 0 || n <= 0)
        return 0;
    if (k <= 0 || g->alpha == 0.0f) {
        scale_c(g);
        return 0;
    }
    int64_t kc = plan->kc, kper = plan->kper;
    if (kc <= 0 || KCP % kc != 0 || kper <= 0 || kper % kc != 0)
        return -EINVAL;
    int64_t kmax = k < KCP ? k : KCP;
    int64_t mpad = (m < MCB ? cdiv(m, MR) * MR : MCB);
    int64_t npad = (n < NCB ? cdiv(n, NR) * NR : NCB);
    size_t tsz = (size_t)m * (size_t)n * sizeof(float);
    t = malloc(tsz);
    /* aligned_alloc wants a size that is a multiple of the alignment */
    apack = aligned_alloc(64, ((size_t)(mpad * kmax) * sizeof(float) + 127) & ~(size_t)63);
    bpack = aligned_alloc(64, ((size_t)(npad * kmax) * sizeof(float) + 127) & ~(size_t)63);
    if (!t || !apack || !bpack) {
        rc = -ENOMEM;
        goto out;
    }
    for (int64_t k0 = 0, s = 0; k0 < k; k0 += kper, s++) {
        int64_t k1 = k0 + kper < k ? k0 + kper : k;
        if (s == 0) {
            split_sum(g, kc, k0, k1, t, apack, bpack);
        } else {
            if (!w && !(w = malloc(tsz))) {
                rc = -ENOMEM;
                goto out;
            }
            split_sum(g, kc, k0, k1, w, apack, bpack);
            add_into(t, w, m * n);
        }
    }
    /* Epilogue: C = alpha*t + beta*C. */
    for (int64_t j = 0; j < n; j++) {
        const float *tc = t + j * m;
        if (g->ctype == SIM_F32) {
            float *cc = (float *)g->C + j * g->ldc;
            if (g->beta == 0.0f)
                for (int64_t i = 0; i < m; i++)
                    cc[i] = g->alpha * tc[i];
            else
                for (int64_t i = 0; i < m; i++)
                    cc[i] = g->alpha * tc[i] + g->beta * cc[i];
        } else {
            for (int64_t i = 0; i < m; i++) {
                int64_t idx = i + j * g->ldc;
                float v = g->alpha * tc[i];
                if (g->beta != 0.0f)
                    v = v + g->beta * load_elem(g->C, idx, g->ctype);
                store_elem(g->C, idx, g->ctype, v);
            }
        }
    }
out:
    free(t);
    free(w);
    free(apack);
    free(bpack);
    return rc;
}
