/* Tests of simcuda's cuBLAS (build/sim/libcublas.so.13): the GEMM core
 * against a double-precision reference and against the summation order its
 * plan promises (bit for bit), the heuristic, level 1/2 routines, then the
 * public API on the simulated driver (argument checks, async semantics,
 * pointer modes) and the negative controls for every reproduced source of
 * nondeterminism. The test binary re-runs itself as a child ("child-gemm")
 * to try other SIMCUDA_DEVICES settings. */
#include "sim/cublas/gemm.h"
#include "tests/harness.h"
#include "tests/sim/common/abi.h"

#include <cublas_v2.h>
#include <cuda.h>

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

/* ------------------------------------------------------------ utilities */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 - 0.5);
}

static void fill(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = frand();
}

static uint64_t fnv(const void *p, size_t n, uint64_t h)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

static double opv(const float *X, int t, int64_t ld, int64_t r, int64_t c)
{
    return t ? X[c + r * ld] : X[r + c * ld];
}

/* Checks C against alpha*op(A)op(B) + beta*C0 in double with a bound that
 * scales with k and the magnitudes involved. Returns the number of bad
 * elements. */
static int check_gemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                      const float *C0, const float *C, int64_t ldc, double rel)
{
    int bad = 0;
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < m; i++) {
            double s = 0, mag = 0;
            for (int64_t q = 0; q < k; q++) {
                double v = opv(A, ta, lda, i, q) * opv(B, tb, ldb, q, j);
                s += v;
                mag += fabs(v);
            }
            double c0 = beta == 0.0f ? 0.0 : C0[i + j * ldc];
            double ref = alpha * s + beta * c0;
            double tol = rel * (double)(k + 4) * (fabs(alpha) * mag + fabs(beta * c0)) + 1e-30;
            if (!(fabs(ref - C[i + j * ldc]) <= tol)) {
                if (bad < 3)
                    print_error("C(%ld,%ld) = %.9g, reference %.9g (tol %.3g)\n", (long)i,
                                (long)j, C[i + j * ldc], ref, tol);
                bad++;
            }
        }
    return bad;
}

/* The order gemm.h promises, written the obvious way. */
static void spec_gemm(const sim_gemm_plan_t *p, const sim_gemm_args_t *g)
{
    const float *A = g->A, *B = g->B;
    float *C = g->C;
    for (int64_t j = 0; j < g->n; j++)
        for (int64_t i = 0; i < g->m; i++) {
            float t = 0.0f;
            for (int64_t k0 = 0; k0 < g->k; k0 += p->kper) {
                int64_t k1 = k0 + p->kper < g->k ? k0 + p->kper : g->k;
                float s = 0.0f;
                for (int64_t c0 = k0; c0 < k1; c0 += p->kc) {
                    int64_t c1 = c0 + p->kc < k1 ? c0 + p->kc : k1;
                    float pp = 0.0f;
                    for (int64_t q = c0; q < c1; q++) {
                        float a = g->transa ? A[q + i * g->lda] : A[i + q * g->lda];
                        float b = g->transb ? B[j + q * g->ldb] : B[q + j * g->ldb];
                        pp += a * b;
                    }
                    s = c0 == k0 ? pp : s + pp;
                }
                t = k0 == 0 ? s : t + s;
            }
            float *c = &C[i + j * g->ldc];
            *c = g->beta == 0.0f ? g->alpha * t : g->alpha * t + g->beta * *c;
        }
}

static const sim_gemm_dev_t DEV_A100 = {8, 0, 108};
static const sim_gemm_dev_t DEV_T4 = {7, 5, 40};

/* --------------------------------------------------------- core: GEMM */

static void core_gemm_case(int ta, int tb, int64_t m, int64_t n, int64_t k, int pad,
                           const sim_gemm_dev_t *dev, float alpha, float beta)
{
    int64_t lda = (ta ? k : m) + pad, ldb = (tb ? n : k) + pad, ldc = m + pad;
    if (lda < 1)
        lda = 1;
    if (ldb < 1)
        ldb = 1;
    size_t na = (size_t)(lda * (ta ? m : k)), nb = (size_t)(ldb * (tb ? k : n)),
           nc = (size_t)(ldc * n);
    float *A = malloc((na + 1) * 4), *B = malloc((nb + 1) * 4), *C = malloc(nc * 4),
          *C0 = malloc(nc * 4), *S = malloc(nc * 4);
    fill(A, na);
    fill(B, nb);
    fill(C0, nc);
    memcpy(C, C0, nc * 4);
    memcpy(S, C0, nc * 4);
    sim_gemm_plan_t plan;
    sim_gemm_choose(dev, m, n, k, 1, (size_t)4 << 20, 0, &plan);
    sim_gemm_args_t g = {ta, tb, m, n, k, SIM_F32, SIM_F32, SIM_F32, SIM_ROUND_NONE,
                         A, lda, B, ldb, C, ldc, alpha, beta};
    assert_int_equal(sim_gemm_run(&plan, &g), 0);
    assert_int_equal(check_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C0, C, ldc,
                                2e-7), 0);
    /* Bit for bit the promised order. */
    g.C = S;
    spec_gemm(&plan, &g);
    if (memcmp(C, S, nc * 4) != 0)
        fail_msg("kernel order != plan order for %ldx%ldx%ld ta=%d tb=%d (kc %d kper %ld)",
                 (long)m, (long)n, (long)k, ta, tb, plan.kc, (long)plan.kper);
    free(A);
    free(B);
    free(C);
    free(C0);
    free(S);
}

static void test_core_gemm_shapes(void **state)
{
    (void)state;
    static const int64_t dims[] = {1, 3, 16, 17, 33, 70};
    static const int64_t ks[] = {1, 5, 31, 64, 300, 777};
    for (int t = 0; t < 4; t++)
        for (size_t a = 0; a < sizeof(dims) / sizeof(*dims); a++)
            for (size_t b = 0; b < sizeof(ks) / sizeof(*ks); b++) {
                int64_t m = dims[a], n = dims[(a + b) % 6], k = ks[b];
                core_gemm_case(t & 1, t >> 1, m, n, k, (int)(b % 3) * 3,
                               b & 1 ? &DEV_A100 : &DEV_T4, 1.0f, b % 2 ? 0.0f : -0.75f);
            }
    core_gemm_case(0, 0, 200, 150, 600, 5, &DEV_A100, 0.5f, 2.0f);
    core_gemm_case(1, 1, 130, 520, 270, 1, &DEV_T4, -1.25f, 0.0f);
}

/* Every plan the heuristic can return: forced kc/kper combinations. */
static void test_core_gemm_plans(void **state)
{
    (void)state;
    static const int kcs[] = {8, 16, 32, 64};
    int64_t m = 37, n = 21, k = 1000;
    float *A = malloc((size_t)(m * k) * 4), *B = malloc((size_t)(k * n) * 4),
          *C = malloc((size_t)(m * n) * 4), *S = malloc((size_t)(m * n) * 4);
    fill(A, (size_t)(m * k));
    fill(B, (size_t)(k * n));
    for (size_t i = 0; i < 4; i++)
        for (int split = 1; split <= 7; split += 3) {
            sim_gemm_plan_t p = {64, 64, kcs[i], split, 0, 0};
            int64_t kb = (k + kcs[i] - 1) / kcs[i];
            p.kper = (kb + split - 1) / split * kcs[i];
            sim_gemm_args_t g = {0, 1, m, n, k, SIM_F32, SIM_F32, SIM_F32, SIM_ROUND_NONE,
                                 A, m, B, n, C, m, 1.0f, 0.0f};
            assert_int_equal(sim_gemm_run(&p, &g), 0);
            g.C = S;
            spec_gemm(&p, &g);
            assert_memory_equal(C, S, (size_t)(m * n) * 4);
        }
    free(A);
    free(B);
    free(C);
    free(S);
}

static uint64_t core_bits(const sim_gemm_dev_t *dev, int64_t m, int64_t n, int64_t k,
                          int contended, sim_gemm_plan_t *pout)
{
    uint64_t save = g_rng;
    g_rng = 12345;
    float *A = malloc((size_t)(m * k) * 4), *B = malloc((size_t)(k * n) * 4),
          *C = malloc((size_t)(m * n) * 4);
    fill(A, (size_t)(m * k));
    fill(B, (size_t)(k * n));
    sim_gemm_plan_t p;
    sim_gemm_choose(dev, m, n, k, 1, sim_gemm_default_workspace(dev), contended, &p);
    sim_gemm_args_t g = {0, 0, m, n, k, SIM_F32, SIM_F32, SIM_F32, SIM_ROUND_NONE,
                         A, m, B, k, C, m, 1.0f, 0.0f};
    assert_int_equal(sim_gemm_run(&p, &g), 0);
    uint64_t h = fnv(C, (size_t)(m * n) * 4, 1469598103934665603ull);
    free(A);
    free(B);
    free(C);
    g_rng = save;
    if (pout)
        *pout = p;
    return h;
}

/* Vendor fact (cuBLAS docs "Results Reproducibility", VENDOR-FACTS cuBLAS):
 * reproducible run to run on the same architecture and SM count, never
 * across architectures; the split-K/tile choice depends on shape, SM count
 * and architecture. */
static void test_core_heuristic(void **state)
{
    (void)state;
    sim_gemm_plan_t pa, pv, ph;
    sim_gemm_dev_t half_a100 = {8, 0, 54};
    /* same model, same bits, run to run */
    assert_true(core_bits(&DEV_A100, 64, 64, 1024, 0, &pa) ==
                core_bits(&DEV_A100, 64, 64, 1024, 0, NULL));
    /* other architecture: other plan, other bits (negative control) */
    uint64_t a = core_bits(&DEV_A100, 64, 64, 1024, 0, &pa);
    uint64_t v = core_bits(&DEV_T4, 64, 64, 1024, 0, &pv);
    assert_true(pa.kc != pv.kc || pa.splitk != pv.splitk);
    assert_true(a != v);
    /* same architecture, other SM count: other split */
    uint64_t hsm = core_bits(&half_a100, 256, 128, 2048, 0, &ph);
    uint64_t fsm = core_bits(&DEV_A100, 256, 128, 2048, 0, &pa);
    assert_int_not_equal(ph.splitk, pa.splitk);
    assert_true(hsm != fsm);
    /* contended shared workspace: the no-workspace kernel */
    uint64_t c = core_bits(&DEV_A100, 64, 64, 1024, 1, &ph);
    assert_int_equal(ph.splitk, 1);
    assert_int_equal(ph.fallback, 1);
    assert_true(c != a);
    /* big problems fill the machine without split-K */
    sim_gemm_choose(&DEV_A100, 4096, 4096, 4096, 1, (size_t)4 << 20, 0, &pa);
    assert_int_equal(pa.splitk, 1);
    /* workspace bounds the split */
    sim_gemm_choose(&DEV_A100, 64, 64, 4096, 1, 3 * 64 * 64 * 4 + 100, 0, &pa);
    assert_int_equal(pa.splitk, 3); /* every split's partials in the workspace */
    sim_gemm_choose(&DEV_A100, 64, 64, 4096, 1, 64 * 64 * 4, 0, &pa);
    assert_int_equal(pa.splitk, 1);
}

static void test_core_types(void **state)
{
    (void)state;
    /* conversions: exact values, rounding to nearest even, specials */
    assert_true(sim_f16_half_to_float(0x3c00) == 1.0f);
    assert_true(sim_f16_half_to_float(0xc000) == -2.0f);
    assert_true(sim_f16_half_to_float(0x0001) == ldexpf(1.0f, -24));
    assert_true(sim_f16_half_to_float(0x7bff) == 65504.0f);
    assert_int_equal(sim_f16_float_to_half(1.0f), 0x3c00);
    assert_int_equal(sim_f16_float_to_half(65504.0f), 0x7bff);
    assert_int_equal(sim_f16_float_to_half(65520.0f), 0x7c00);
    assert_int_equal(sim_f16_float_to_half(1.0f + ldexpf(1.0f, -11)), 0x3c00); /* tie -> even */
    assert_int_equal(sim_f16_float_to_half(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02);
    assert_int_equal(sim_f16_float_to_half(ldexpf(1.0f, -24)), 0x0001);
    assert_int_equal(sim_f16_float_to_half(ldexpf(1.0f, -25)), 0x0000);
    assert_int_equal(sim_f16_float_to_half(ldexpf(3.0f, -26)), 0x0001);
    for (uint32_t h = 0; h < 0x7c00; h++)
        assert_int_equal(sim_f16_float_to_half(sim_f16_half_to_float((uint16_t)h)), h);
    assert_int_equal(sim_f16_float_to_bf16(1.0f), 0x3f80);
    assert_true(sim_f16_bf16_to_float(0x4049) == 3.140625f);
    assert_int_equal(sim_f16_float_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3f80);
    assert_true(sim_round_input(1.0f + ldexpf(1.0f, -12), SIM_ROUND_TF32) == 1.0f);
    assert_true(sim_round_input(1.0f + ldexpf(1.0f, -10), SIM_ROUND_TF32) ==
                1.0f + ldexpf(1.0f, -10));

    /* f16 / bf16 GEMM with float compute: the reference uses the converted
     * inputs; f16 output is checked against the rounded reference. */
    for (int t = 0; t < 2; t++) {
        sim_dtype_t dt = t ? SIM_BF16 : SIM_F16;
        int64_t m = 23, n = 19, k = 150;
        uint16_t *A = malloc((size_t)(m * k) * 2), *B = malloc((size_t)(k * n) * 2),
                 *C16 = malloc((size_t)(m * n) * 2);
        float *Af = malloc((size_t)(m * k) * 4), *Bf = malloc((size_t)(k * n) * 4),
              *C = malloc((size_t)(m * n) * 4), *C0 = calloc((size_t)(m * n), 4);
        for (int64_t i = 0; i < m * k; i++) {
            A[i] = t ? sim_f16_float_to_bf16(frand()) : sim_f16_float_to_half(frand());
            Af[i] = t ? sim_f16_bf16_to_float(A[i]) : sim_f16_half_to_float(A[i]);
        }
        for (int64_t i = 0; i < k * n; i++) {
            B[i] = t ? sim_f16_float_to_bf16(frand()) : sim_f16_float_to_half(frand());
            Bf[i] = t ? sim_f16_bf16_to_float(B[i]) : sim_f16_half_to_float(B[i]);
        }
        sim_gemm_plan_t p;
        sim_gemm_choose(&DEV_A100, m, n, k, 1, (size_t)4 << 20, 0, &p);
        sim_gemm_args_t g = {1, 0, m, n, k, dt, dt, SIM_F32, SIM_ROUND_NONE,
                             A, k, B, k, C, m, 1.0f, 0.0f};
        assert_int_equal(sim_gemm_run(&p, &g), 0);
        assert_int_equal(check_gemm(1, 0, m, n, k, 1.0f, Af, k, Bf, k, 0.0f, C0, C, m, 2e-7), 0);
        g.ctype = dt;
        g.C = C16;
        assert_int_equal(sim_gemm_run(&p, &g), 0);
        for (int64_t i = 0; i < m * n; i++) {
            uint16_t want = t ? sim_f16_float_to_bf16(C[i]) : sim_f16_float_to_half(C[i]);
            assert_int_equal(C16[i], want);
        }
        free(A);
        free(B);
        free(C16);
        free(Af);
        free(Bf);
        free(C);
        free(C0);
    }
}

/* alpha == 0 or k == 0: C = beta*C and A, B are not read (NaN stays out);
 * beta == 0: C is not read. */
static void test_core_special_scalars(void **state)
{
    (void)state;
    float A[4] = {NAN, NAN, NAN, NAN}, B[4] = {1, 2, 3, 4}, C[4] = {1, 2, 3, 4};
    sim_gemm_plan_t p;
    sim_gemm_choose(&DEV_A100, 2, 2, 2, 1, 0, 0, &p);
    sim_gemm_args_t g = {0, 0, 2, 2, 2, SIM_F32, SIM_F32, SIM_F32, SIM_ROUND_NONE,
                         A, 2, B, 2, C, 2, 0.0f, 2.0f};
    assert_int_equal(sim_gemm_run(&p, &g), 0);
    assert_true(C[0] == 2.0f && C[3] == 8.0f);
    float A2[4] = {1, 0, 0, 1}, C2[4] = {NAN, NAN, NAN, NAN};
    g.A = A2;
    g.C = C2;
    g.alpha = 1.0f;
    g.beta = 0.0f;
    assert_int_equal(sim_gemm_run(&p, &g), 0);
    assert_true(C2[0] == 1.0f && C2[1] == 2.0f && C2[2] == 3.0f && C2[3] == 4.0f);
}

/* ---------------------------------------------------- core: level 1/2 */

static void test_core_level12(void **state)
{
    (void)state;
    int64_t m = 37, n = 29, lda = 41;
    float *A = malloc((size_t)(lda * n) * 4), x[200], y[200], y0[200];
    fill(A, (size_t)(lda * n));
    fill(x, 200);
    fill(y0, 200);
    for (int t = 0; t < 2; t++)
        for (int inc = -2; inc <= 2; inc += 4) {
            int64_t lx = t ? m : n, ly = t ? n : m;
            memcpy(y, y0, sizeof(y));
            sim_sgemv(t, m, n, 1.5f, A, lda, x, inc, 0.5f, y, 1);
            for (int64_t i = 0; i < ly; i++) {
                double s = 0;
                for (int64_t q = 0; q < lx; q++) {
                    int64_t xi = inc > 0 ? q * inc : (lx - 1 - q) * -inc;
                    s += (double)(t ? A[q + i * lda] : A[i + q * lda]) * x[xi];
                }
                assert_float_equal(y[i], 1.5 * s + 0.5 * y0[i], 1e-5);
            }
        }
    memcpy(y, y0, sizeof(y));
    sim_saxpy(50, -2.0f, x, 2, y, 1);
    for (int i = 0; i < 50; i++)
        assert_float_equal(y[i], y0[i] - 2.0f * x[2 * i], 1e-6);
    memcpy(y, y0, sizeof(y));
    sim_sscal(60, 3.0f, y, 3);
    for (int i = 0; i < 180; i++)
        assert_true(y[i] == (i % 3 == 0 ? 3.0f * y0[i] : y0[i]));
    double d = 0, q = 0;
    for (int i = 0; i < 100; i++) {
        d += (double)x[i] * y0[99 - i];
        q += (double)x[i] * x[i];
    }
    assert_float_equal(sim_sdot(100, x, 1, y0, -1), d, 1e-5);
    assert_float_equal(sim_snrm2(100, x, 1), sqrt(q), 1e-5);
    float big[2] = {3e30f, 4e30f};
    assert_float_equal(sim_snrm2(2, big, 1) / 5e30f, 1.0, 1e-6);

    /* symv, both triangles (the other triangle holds garbage) */
    int64_t sn = 31;
    float *S = malloc((size_t)(lda * sn) * 4), *full = malloc((size_t)(sn * sn) * 4);
    for (int up = 0; up < 2; up++) {
        for (int64_t j = 0; j < sn; j++)
            for (int64_t i = 0; i < sn; i++) {
                int stored = up ? i <= j : i >= j;
                S[i + j * lda] = stored ? frand() : NAN;
            }
        for (int64_t j = 0; j < sn; j++)
            for (int64_t i = 0; i < sn; i++) {
                int stored = up ? i <= j : i >= j;
                full[i + j * sn] = stored ? S[i + j * lda] : S[j + i * lda];
            }
        memcpy(y, y0, sizeof(y));
        assert_int_equal(sim_ssymv(up, sn, 2.0f, S, lda, x, 1, -1.0f, y, 1, NULL), 0);
        for (int64_t i = 0; i < sn; i++) {
            double s = 0;
            for (int64_t j = 0; j < sn; j++)
                s += (double)full[i + j * sn] * x[j];
            assert_float_equal(y[i], 2.0 * s - y0[i], 1e-5);
        }
    }
    free(A);
    free(S);
    free(full);
}

/* ------------------------------------------------------- API: fixtures */

static CUcontext g_ctx;

static int api_setup(void **state)
{
    (void)state;
    CUdevice dev;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&g_ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS)
        return -1;
    return 0;
}

/* Device memory with a host mirror: the test fills and checks the mirror
 * and copies explicitly (up/down), as a program must on a GPU, where the
 * host never reads or writes device memory. dalloc returns the mirror;
 * D(p) is the device address of the mirror address p. */
#define MAX_MIRRORS 64
static struct mirror {
    char *h;
    CUdeviceptr d;
    size_t bytes;
} g_mir[MAX_MIRRORS];

static struct mirror *mirror_of(const void *p)
{
    for (int i = 0; i < MAX_MIRRORS; i++)
        if (g_mir[i].h && (const char *)p >= g_mir[i].h &&
            (const char *)p < g_mir[i].h + g_mir[i].bytes)
            return &g_mir[i];
    fail_msg("%p is not a mirrored buffer", p);
    return NULL;
}

static float *dalloc(size_t n)
{
    for (int i = 0; i < MAX_MIRRORS; i++)
        if (!g_mir[i].h) {
            g_mir[i].bytes = n * sizeof(float) + 16;
            g_mir[i].h = calloc(1, g_mir[i].bytes);
            assert_non_null(g_mir[i].h);
            assert_int_equal(cuMemAlloc(&g_mir[i].d, g_mir[i].bytes), CUDA_SUCCESS);
            assert_int_equal(cuMemcpyHtoD(g_mir[i].d, g_mir[i].h, g_mir[i].bytes), CUDA_SUCCESS);
            return (float *)(void *)g_mir[i].h;
        }
    fail_msg("out of mirrors");
    return NULL;
}

/* The device address of mirror address p, typed as p. */
#define D(p) ((__typeof__(p))dev_of(p))
static void *dev_of(const void *p)
{
    struct mirror *m = mirror_of(p);
    return (void *)(uintptr_t)(m->d + (CUdeviceptr)((const char *)p - m->h));
}

/* Mirror -> device, device -> mirror (whole buffers, on the legacy
 * stream). */
static void up(const void *p)
{
    struct mirror *m = mirror_of(p);
    assert_int_equal(cuMemcpyHtoD(m->d, m->h, m->bytes), CUDA_SUCCESS);
}

static void down(const void *p)
{
    struct mirror *m = mirror_of(p);
    assert_int_equal(cuMemcpyDtoH(m->h, m->d, m->bytes), CUDA_SUCCESS);
}

static void dfree(void *p)
{
    struct mirror *m = mirror_of(p);
    cuMemFree(m->d);
    free(m->h);
    memset(m, 0, sizeof(*m));
}

static void CUDA_CB wait_flag(void *p)
{
    volatile int *f = p;
    struct timespec ts = {0, 1000000};
    for (int i = 0; i < 20000 && !__atomic_load_n(f, __ATOMIC_ACQUIRE); i++)
        nanosleep(&ts, NULL);
}

static void release(int *f)
{
    __atomic_store_n(f, 1, __ATOMIC_RELEASE);
}

static const char *self_exe(void);

/* ---------------------------------------------------------- API: handle */

static void test_api_handle(void **state)
{
    (void)state;
    cublasHandle_t h = NULL;
    int v = 0;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    assert_non_null(h);
    assert_int_equal(cublasGetVersion(h, &v), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(v, CUBLAS_VERSION);
    assert_int_equal(cublasGetProperty(MAJOR_VERSION, &v), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(v, CUBLAS_VER_MAJOR);
    assert_int_equal(cublasGetProperty(MINOR_VERSION, &v), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(v, CUBLAS_VER_MINOR);
    assert_int_equal(cublasGetProperty(PATCH_LEVEL, &v), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasGetProperty((libraryPropertyType)7, &v), CUBLAS_STATUS_INVALID_VALUE);

    CUstream s;
    cudaStream_t got = (cudaStream_t)1;
    assert_int_equal(cuStreamCreate(&s, 0), CUDA_SUCCESS);
    assert_int_equal(cublasGetStream(h, &got), CUBLAS_STATUS_SUCCESS);
    assert_null(got);
    assert_int_equal(cublasSetStream(h, (cudaStream_t)s), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasGetStream(h, &got), CUBLAS_STATUS_SUCCESS);
    assert_ptr_equal(got, s);

    cublasPointerMode_t pm;
    assert_int_equal(cublasGetPointerMode(h, &pm), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(pm, CUBLAS_POINTER_MODE_HOST);
    assert_int_equal(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasGetPointerMode(h, &pm), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(pm, CUBLAS_POINTER_MODE_DEVICE);
    assert_int_equal(cublasSetPointerMode(h, (cublasPointerMode_t)5), CUBLAS_STATUS_INVALID_VALUE);
    cublasAtomicsMode_t am;
    assert_int_equal(cublasGetAtomicsMode(h, &am), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(am, CUBLAS_ATOMICS_NOT_ALLOWED);
    assert_int_equal(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_ALLOWED), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasGetAtomicsMode(h, &am), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(am, CUBLAS_ATOMICS_ALLOWED);
    assert_int_equal(cublasSetAtomicsMode(h, (cublasAtomicsMode_t)2), CUBLAS_STATUS_INVALID_VALUE);
    cublasMath_t mm;
    assert_int_equal(cublasGetMathMode(h, &mm), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(mm, CUBLAS_DEFAULT_MATH);
    assert_int_equal(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasSetMathMode(h, (cublasMath_t)(CUBLAS_PEDANTIC_MATH |
                                                         CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasGetMathMode(h, &mm), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(mm, CUBLAS_PEDANTIC_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    assert_int_equal(cublasSetMathMode(h, (cublasMath_t)0x40), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasGetMathMode(h, NULL), CUBLAS_STATUS_INVALID_VALUE);

    char ws[512] __attribute__((aligned(256)));
    assert_int_equal(cublasSetWorkspace(h, ws, sizeof(ws)), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasSetWorkspace(h, ws + 8, 256), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSetWorkspace(h, NULL, 256), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSetWorkspace(h, NULL, 0), CUBLAS_STATUS_SUCCESS);

    assert_string_equal(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE),
                        "CUBLAS_STATUS_INVALID_VALUE");
    assert_string_equal(cublasGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED),
                        "CUBLAS_STATUS_NOT_INITIALIZED");
    assert_non_null(cublasGetStatusString(CUBLAS_STATUS_SUCCESS));
    assert_int_equal(cublasLoggerConfigure(0, 0, 0, NULL), CUBLAS_STATUS_SUCCESS);

    assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    /* destroyed and never-created handles */
    assert_int_equal(cublasSetStream(h, NULL), CUBLAS_STATUS_NOT_INITIALIZED);
    assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_NOT_INITIALIZED);
    assert_int_equal(cublasGetMathMode(NULL, &mm), CUBLAS_STATUS_NOT_INITIALIZED);
    float one = 1, dummy[4] = {0};
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, dummy, 1, dummy, 1,
                                 &one, dummy, 1),
                     CUBLAS_STATUS_NOT_INITIALIZED);
    assert_int_equal(cublasSgemm(NULL, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, dummy, 1, dummy,
                                 1, &one, dummy, 1),
                     CUBLAS_STATUS_NOT_INITIALIZED);

    /* no current context at create (as real cuBLAS): NOT_INITIALIZED */
    assert_int_equal(cuCtxSetCurrent(NULL), CUDA_SUCCESS);
    h = (cublasHandle_t)&v;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_NOT_INITIALIZED);
    assert_int_equal(cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
    assert_int_equal(cublasCreate(NULL), CUBLAS_STATUS_INVALID_VALUE);
    cuStreamDestroy(s);
}

static void test_api_invalid_args(void **state)
{
    (void)state;
    cublasHandle_t h;
    float one = 1, *dm = dalloc(64), *d = D(dm);
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    const cublasOperation_t N = CUBLAS_OP_N, T = CUBLAS_OP_T;
#define SG(ta, tb, m, n, k, lda, ldb, ldc) \
    cublasSgemm(h, ta, tb, m, n, k, &one, d, lda, d, ldb, &one, d, ldc)
    assert_int_equal(SG(N, N, -1, 2, 2, 2, 2, 2), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(SG(N, N, 2, -1, 2, 2, 2, 2), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(SG(N, N, 2, 2, -1, 2, 2, 2), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(SG(N, N, 4, 2, 2, 3, 2, 4), CUBLAS_STATUS_INVALID_VALUE);  /* lda < m */
    assert_int_equal(SG(T, N, 4, 2, 3, 2, 3, 4), CUBLAS_STATUS_INVALID_VALUE);  /* lda < k */
    assert_int_equal(SG(N, N, 4, 2, 3, 4, 2, 4), CUBLAS_STATUS_INVALID_VALUE);  /* ldb < k */
    assert_int_equal(SG(N, T, 4, 5, 3, 4, 4, 4), CUBLAS_STATUS_INVALID_VALUE);  /* ldb < n */
    assert_int_equal(SG(N, N, 4, 2, 3, 4, 3, 3), CUBLAS_STATUS_INVALID_VALUE);  /* ldc < m */
    assert_int_equal(SG(N, N, 0, 2, 2, 0, 2, 0), CUBLAS_STATUS_INVALID_VALUE);  /* lda 0 */
    assert_int_equal(SG((cublasOperation_t)7, N, 2, 2, 2, 2, 2, 2), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(SG(N, CUBLAS_OP_CONJG, 2, 2, 2, 2, 2, 2), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(SG(N, N, 0, 2, 2, 1, 2, 1), CUBLAS_STATUS_SUCCESS);        /* empty */
    assert_int_equal(cublasSgemm(h, N, N, 2, 2, 2, NULL, d, 2, d, 2, &one, d, 2),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSgemmStridedBatched(h, N, N, 2, 2, 2, &one, d, 2, 4, d, 2, 4, &one, d,
                                               2, 4, -1),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSgemmBatched(h, N, N, 2, 2, 2, &one, NULL, 2, NULL, 2, &one, NULL, 2,
                                        1),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasGemmEx(h, N, N, 2, 2, 2, &one, d, CUDA_R_32F, 2, d, CUDA_R_16F, 2,
                                  &one, d, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    assert_int_equal(cublasGemmEx(h, N, N, 2, 2, 2, &one, d, CUDA_R_32F, 2, d, CUDA_R_32F, 2,
                                  &one, d, CUDA_R_32F, 2, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    assert_int_equal(cublasGemmEx(h, N, N, 2, 2, 2, &one, d, CUDA_R_32F, 1, d, CUDA_R_32F, 2,
                                  &one, d, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSgemv(h, N, 4, 2, &one, d, 3, d, 1, &one, d, 1),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSgemv(h, N, 2, 2, &one, d, 2, d, 0, &one, d, 1),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSgemv(h, N, -2, 2, &one, d, 2, d, 1, &one, d, 1),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSsymv(h, CUBLAS_FILL_MODE_FULL, 2, &one, d, 2, d, 1, &one, d, 1),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSsymv(h, CUBLAS_FILL_MODE_LOWER, 3, &one, d, 2, d, 1, &one, d, 1),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSdot(h, 2, d, 1, d, 1, NULL), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSnrm2(h, 2, d, 1, NULL), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSaxpy(h, 2, NULL, d, 1, d, 1), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSscal(h, 2, NULL, d, 1), CUBLAS_STATUS_INVALID_VALUE);
    /* NULL data pointers are refused at the call, never dereferenced later
     * on the stream (where they would take the process down) */
    assert_int_equal(cublasSgemv(h, N, 2, 2, &one, NULL, 2, d, 1, &one, d, 1),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSgemv(h, T, 2, 2, &one, d, 2, NULL, 1, &one, d, 1),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSgemv(h, N, 2, 2, &one, d, 2, d, 1, &one, NULL, 1),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSaxpy(h, 2, &one, NULL, 1, d, 1), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSaxpy(h, 2, &one, d, 1, NULL, 1), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSscal(h, 2, &one, NULL, 1), CUBLAS_STATUS_INVALID_VALUE);
    float res = 0;
    assert_int_equal(cublasSdot(h, 2, NULL, 1, d, 1, &res), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSdot(h, 2, d, 1, NULL, 1, &res), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSnrm2(h, 2, NULL, 1, &res), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSsymv(h, CUBLAS_FILL_MODE_LOWER, 2, &one, NULL, 2, d, 1, &one, d, 1),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSsymv(h, CUBLAS_FILL_MODE_UPPER, 2, &one, d, 2, NULL, 1, &one, d, 1),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSsymv(h, CUBLAS_FILL_MODE_UPPER, 2, &one, d, 2, d, 1, &one, NULL, 1),
                     CUBLAS_STATUS_INVALID_VALUE);
    /* ... while empty problems need no data at all */
    assert_int_equal(cublasSaxpy(h, 0, &one, NULL, 1, NULL, 1), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasSdot(h, 0, NULL, 1, NULL, 1, &res), CUBLAS_STATUS_SUCCESS);
    assert_true(res == 0.0f);
    assert_int_equal(cublasSgemv(h, N, 0, 2, &one, NULL, 1, NULL, 1, &one, NULL, 1),
                     CUBLAS_STATUS_SUCCESS);
#undef SG
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    dfree(dm);
}

/* --------------------------------------------------------- API: compute */

static void api_sgemm_case(cublasHandle_t h, int ta, int tb, int m, int n, int k, int pad,
                           float alpha, float beta)
{
    int lda = (ta ? k : m) + pad, ldb = (tb ? n : k) + pad, ldc = m + pad;
    if (lda < 1)
        lda = 1;
    if (ldb < 1)
        ldb = 1;
    size_t na = (size_t)lda * (size_t)(ta ? m : k), nb = (size_t)ldb * (size_t)(tb ? k : n),
           nc = (size_t)ldc * (size_t)n;
    float *A = dalloc(na), *B = dalloc(nb), *C = dalloc(nc), *C0 = malloc(nc * 4);
    fill(A, na);
    fill(B, nb);
    fill(C0, nc);
    memcpy(C, C0, nc * 4);
    up(A);
    up(B);
    up(C);
    assert_int_equal(cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_C : CUBLAS_OP_N,
                                 m, n, k, &alpha, D(A), lda, D(B), ldb, &beta, D(C), ldc),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    down(C);
    assert_int_equal(check_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C0, C, ldc, 2e-7),
                     0);
    dfree(A);
    dfree(B);
    dfree(C);
    free(C0);
}

static void test_api_sgemm(void **state)
{
    (void)state;
    cublasHandle_t h;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    static const int ms[] = {1, 8, 31, 64, 100};
    static const int ks[] = {1, 17, 128, 513};
    for (int t = 0; t < 4; t++)
        for (int a = 0; a < 5; a++)
            for (int b = 0; b < 4; b++)
                api_sgemm_case(h, t & 1, t >> 1, ms[a], ms[(a + b + t) % 5], ks[b], (a + b) % 3,
                               b == 2 ? 0.5f : 1.0f, a % 2 ? 0.0f : 1.5f);
    assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
}

static void test_api_batched(void **state)
{
    (void)state;
    cublasHandle_t h;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    const int m = 13, n = 9, k = 40, lda = 15, ldb = 41, ldc = 14, batch = 5;
    const long long sa = (long long)lda * k + 7, sb = (long long)ldb * n + 3,
                    sc = (long long)ldc * n + 1;
    float *A = dalloc((size_t)(sa * batch)), *B = dalloc((size_t)(sb * batch)),
          *C = dalloc((size_t)(sc * batch)), *C0 = malloc((size_t)(sc * batch) * 4);
    fill(A, (size_t)(sa * batch));
    fill(B, (size_t)(sb * batch));
    fill(C0, (size_t)(sc * batch));
    memcpy(C, C0, (size_t)(sc * batch) * 4);
    up(A);
    up(B);
    up(C);
    float alpha = 0.75f, beta = -0.5f;
    assert_int_equal(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, D(A),
                                               lda, sa, D(B), ldb, sb, &beta, D(C), ldc, sc, batch),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    down(C);
    for (int b = 0; b < batch; b++)
        assert_int_equal(check_gemm(0, 0, m, n, k, alpha, A + b * sa, lda, B + b * sb, ldb, beta,
                                    C0 + b * sc, C + b * sc, ldc, 2e-7),
                         0);

    /* pointer arrays live in device memory and are read at execution */
    float **parr = (float **)dalloc(3 * (size_t)batch * 2);
    const float **pa = (const float **)parr, **pb = pa + batch;
    float **pc = parr + 2 * batch;
    for (int b = 0; b < batch; b++) {
        pa[b] = D(A) + (batch - 1 - b) * sa;
        pb[b] = D(B) + b * sb;
        pc[b] = D(C) + b * sc;
    }
    up(parr);
    memcpy(C, C0, (size_t)(sc * batch) * 4);
    up(C);
    assert_int_equal(cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, D(pa), lda,
                                        D(pb), ldb, &beta, D(pc), ldc, batch),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    down(C);
    for (int b = 0; b < batch; b++)
        assert_int_equal(check_gemm(0, 0, m, n, k, alpha, A + (batch - 1 - b) * sa, lda,
                                    B + b * sb, ldb, beta, C0 + b * sc, C + b * sc, ldc, 2e-7),
                         0);
    /* GemmStridedBatchedEx fp32 gives the same bits as SgemmStridedBatched */
    float *C2 = malloc((size_t)(sc * batch) * 4);
    memcpy(C, C0, (size_t)(sc * batch) * 4);
    up(C);
    assert_int_equal(cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, D(A),
                                               k, sa, D(B), ldb, sb, &beta, D(C), ldc, sc, batch),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    down(C);
    memcpy(C2, C, (size_t)(sc * batch) * 4);
    memcpy(C, C0, (size_t)(sc * batch) * 4);
    up(C);
    assert_int_equal(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, D(A),
                                                CUDA_R_32F, k, sa, D(B), CUDA_R_32F, ldb, sb, &beta,
                                                D(C), CUDA_R_32F, ldc, sc, batch,
                                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    down(C);
    assert_memory_equal(C, C2, (size_t)(sc * batch) * 4);
    dfree(A);
    dfree(B);
    dfree(C);
    dfree(parr);
    free(C0);
    free(C2);
    assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
}

static void test_api_gemmex(void **state)
{
    (void)state;
    cublasHandle_t h;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    const int m = 33, n = 17, k = 70;
    float alpha = 1.0f, beta = 0.0f;
    /* fp32 GemmEx == Sgemm bit for bit */
    float *A = dalloc(m * k), *B = dalloc(k * n), *C = dalloc(m * n), *C1 = malloc(m * n * 4),
          *Z = calloc(m * n, 4);
    fill(A, m * k);
    fill(B, k * n);
    up(A);
    up(B);
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, D(A), m, D(B), k,
                                 &beta, D(C), m),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    down(C);
    memcpy(C1, C, m * n * 4);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, D(A), CUDA_R_32F,
                                  m, D(B), CUDA_R_32F, k, &beta, D(C), CUDA_R_32F, m,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    down(C);
    assert_memory_equal(C, C1, m * n * 4);
    /* fp16 / bf16 inputs, fp32 compute, fp32 and 16-bit outputs */
    for (int t = 0; t < 2; t++) {
        cudaDataType dt = t ? CUDA_R_16BF : CUDA_R_16F;
        uint16_t *A16 = (uint16_t *)dalloc(m * k), *B16 = (uint16_t *)dalloc(k * n),
                 *C16 = (uint16_t *)dalloc(m * n);
        float *Af = malloc(m * k * 4), *Bf = malloc(k * n * 4);
        for (int i = 0; i < m * k; i++) {
            A16[i] = t ? sim_f16_float_to_bf16(A[i]) : sim_f16_float_to_half(A[i]);
            Af[i] = t ? sim_f16_bf16_to_float(A16[i]) : sim_f16_half_to_float(A16[i]);
        }
        for (int i = 0; i < k * n; i++) {
            B16[i] = t ? sim_f16_float_to_bf16(B[i]) : sim_f16_float_to_half(B[i]);
            Bf[i] = t ? sim_f16_bf16_to_float(B16[i]) : sim_f16_half_to_float(B16[i]);
        }
        up(A16);
        up(B16);
        assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, D(A16), dt, m,
                                      D(B16), dt, k, &beta, D(C), CUDA_R_32F, m,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                         CUBLAS_STATUS_SUCCESS);
        assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, D(A16), dt, m,
                                      D(B16), dt, k, &beta, D(C16), dt, m, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT),
                         CUBLAS_STATUS_SUCCESS);
        assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
        down(C);
        down(C16);
        assert_int_equal(check_gemm(0, 0, m, n, k, alpha, Af, m, Bf, k, beta, Z, C, m, 2e-7), 0);
        for (int i = 0; i < m * n; i++)
            assert_int_equal(C16[i], t ? sim_f16_float_to_bf16(C[i]) : sim_f16_float_to_half(C[i]));
        dfree(A16);
        dfree(B16);
        dfree(C16);
        free(Af);
        free(Bf);
    }
    /* TF32 fast compute: other bits than full fp32, close to them */
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, D(A), CUDA_R_32F,
                                  m, D(B), CUDA_R_32F, k, &beta, D(C), CUDA_R_32F, m,
                                  CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    down(C);
    CUdevice dev;
    int ccmaj = 0;
    assert_int_equal(cuCtxGetDevice(&dev), CUDA_SUCCESS);
    assert_int_equal(cuDeviceGetAttribute(&ccmaj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                     CUDA_SUCCESS);
    if (ccmaj >= 8) /* TF32 tensor cores exist from compute capability 8.0 */
        assert_memory_not_equal(C, C1, m * n * 4);
    assert_int_equal(check_gemm(0, 0, m, n, k, alpha, A, m, B, k, beta, Z, C, m, 2e-3), 0);
    /* the TF32 math mode makes Sgemm do the same on cc >= 8 (simenv's a100);
     * PEDANTIC compute ignores the mode */
    float *Ct = malloc(m * n * 4);
    memcpy(Ct, C, m * n * 4);
    assert_int_equal(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, D(A), m, D(B), k,
                                 &beta, D(C), m),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    down(C);
    assert_memory_equal(C, Ct, m * n * 4);
    assert_int_equal(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, D(A), CUDA_R_32F,
                                  m, D(B), CUDA_R_32F, k, &beta, D(C), CUDA_R_32F, m,
                                  CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    down(C);
    assert_memory_equal(C, C1, m * n * 4);
    free(Ct);
    dfree(A);
    dfree(B);
    dfree(C);
    free(C1);
    free(Z);
    assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
}

static void test_api_level12(void **state)
{
    (void)state;
    cublasHandle_t h;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    const int m = 45, n = 30, lda = 50;
    float *A = dalloc(lda * n), *x = dalloc(2 * m), *y = dalloc(2 * m), *y0 = malloc(2 * m * 4);
    float *r = dalloc(4);
    fill(A, lda * n);
    fill(x, 2 * m);
    fill(y0, 2 * m);
    up(A);
    up(x);
    float alpha = 2.0f, beta = 0.25f, res = 0;
    for (int t = 0; t < 2; t++) {
        memcpy(y, y0, 2 * m * 4);
        up(y);
        assert_int_equal(cublasSgemv(h, t ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, &alpha, D(A), lda,
                                     D(x), 1, &beta, D(y), 2),
                         CUBLAS_STATUS_SUCCESS);
        assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
        down(y);
        int ly = t ? n : m, lx = t ? m : n;
        for (int i = 0; i < ly; i++) {
            double s = 0;
            for (int q = 0; q < lx; q++)
                s += (double)(t ? A[q + i * lda] : A[i + q * lda]) * x[q];
            assert_float_equal(y[2 * i], alpha * s + beta * y0[2 * i], 1e-5);
        }
    }
    memcpy(y, y0, 2 * m * 4);
    up(y);
    assert_int_equal(cublasSaxpy(h, m, &alpha, D(x), 2, D(y), 1), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    down(y);
    for (int i = 0; i < m; i++)
        assert_float_equal(y[i], y0[i] + alpha * x[2 * i], 1e-6);
    memcpy(y, y0, 2 * m * 4);
    up(y);
    assert_int_equal(cublasSscal(h, m, &beta, D(y), 1), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    down(y);
    for (int i = 0; i < m; i++)
        assert_true(y[i] == beta * y0[i]);
    memcpy(y, y0, 2 * m * 4);
    up(y);
    double d = 0, q2 = 0;
    for (int i = 0; i < m; i++) {
        d += (double)x[i] * y0[i];
        q2 += (double)x[i] * x[i];
    }
    /* host pointer mode: the call returns with the result */
    assert_int_equal(cublasSdot(h, m, D(x), 1, D(y), 1, &res), CUBLAS_STATUS_SUCCESS);
    assert_float_equal(res, d, 1e-5);
    assert_int_equal(cublasSnrm2(h, m, D(x), 1, &res), CUBLAS_STATUS_SUCCESS);
    assert_float_equal(res, sqrt(q2), 1e-5);
    /* device pointer mode: written on the stream */
    assert_int_equal(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
    r[0] = -1;
    up(r);
    assert_int_equal(cublasSdot(h, m, D(x), 1, D(y), 1, D(r)), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasSnrm2(h, m, D(x), 1, D(r) + 1), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    down(r);
    assert_float_equal(r[0], d, 1e-5);
    assert_float_equal(r[1], sqrt(q2), 1e-5);
    assert_int_equal(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST), CUBLAS_STATUS_SUCCESS);
    /* symv (lower), through the API */
    int sn = 20;
    memcpy(y, y0, 2 * m * 4);
    up(y);
    assert_int_equal(cublasSsymv(h, CUBLAS_FILL_MODE_LOWER, sn, &alpha, D(A), lda, D(x), 1, &beta,
                                 D(y), 1),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    down(y);
    for (int i = 0; i < sn; i++) {
        double s = 0;
        for (int j = 0; j < sn; j++)
            s += (double)(i >= j ? A[i + j * lda] : A[j + i * lda]) * x[j];
        assert_float_equal(y[i], alpha * s + beta * y0[i], 1e-5);
    }
    dfree(A);
    dfree(x);
    dfree(y);
    dfree(r);
    free(y0);
    assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
}

/* Work is enqueued on the handle's stream and runs later: nothing is
 * written before the stream gets there; device-mode scalars are read at
 * execution time. (Device memory is looked at through copies on a second
 * stream, which does not wait for the held one.) */
static void peek(CUstream side, void *mirror)
{
    struct mirror *m = mirror_of(mirror);
    assert_int_equal(cuMemcpyDtoHAsync(m->h, m->d, m->bytes, side), CUDA_SUCCESS);
    assert_int_equal(cuStreamSynchronize(side), CUDA_SUCCESS);
}

static void poke(CUstream side, const void *mirror)
{
    struct mirror *m = mirror_of(mirror);
    assert_int_equal(cuMemcpyHtoDAsync(m->d, m->h, m->bytes, side), CUDA_SUCCESS);
    assert_int_equal(cuStreamSynchronize(side), CUDA_SUCCESS);
}

static void test_api_async(void **state)
{
    (void)state;
    cublasHandle_t h;
    CUstream s, side;
    int flag = 0;
    const int m = 32, n = 32, k = 32;
    float *A = dalloc(m * k), *B = dalloc(k * n), *C = dalloc(m * n), *ab = dalloc(2);
    float *y = dalloc(m);
    fill(A, m * k);
    fill(B, k * n);
    for (int i = 0; i < m * n; i++)
        C[i] = 42.0f;
    for (int i = 0; i < m; i++)
        y[i] = 7.0f;
    ab[0] = 1.0f;
    ab[1] = 0.0f;
    up(A);
    up(B);
    up(C);
    up(y);
    up(ab);
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuStreamCreate(&s, 0), CUDA_SUCCESS);
    assert_int_equal(cuStreamCreate(&side, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(cublasSetStream(h, (cudaStream_t)s), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuLaunchHostFunc(s, wait_flag, &flag), CUDA_SUCCESS);
    assert_int_equal(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, D(ab), D(A), m, D(B), k,
                                 D(ab) + 1, D(C), m),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasSaxpy(h, m, D(ab), D(C), 1, D(y), 1), CUBLAS_STATUS_SUCCESS);
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    peek(side, C);
    peek(side, y);
    for (int i = 0; i < m * n; i++)
        assert_true(C[i] == 42.0f);
    for (int i = 0; i < m; i++)
        assert_true(y[i] == 7.0f);
    ab[0] = 2.0f; /* read when the GEMM runs */
    poke(side, ab);
    release(&flag);
    assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
    down(C);
    down(y);
    float *Z = calloc(m * n, 4);
    assert_int_equal(check_gemm(0, 0, m, n, k, 2.0f, A, m, B, k, 0.0f, Z, C, m, 2e-7), 0);
    for (int i = 0; i < m; i++)
        assert_true(y[i] == 7.0f + 2.0f * C[i]);
    free(Z);
    assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    cuStreamDestroy(s);
    cuStreamDestroy(side);
    dfree(A);
    dfree(B);
    dfree(C);
    dfree(ab);
    dfree(y);
}

/* cublasSet/GetVector, Set/GetMatrix (and Async): strided copies. */
static void test_api_copies(void **state)
{
    (void)state;
    float host[64], back[64];
    for (int i = 0; i < 64; i++)
        host[i] = (float)i;
    float *d = dalloc(64);
    memset(d, 0, 64 * 4);
    up(d);
    /* 3x4 matrix with lda 5 -> device with ldb 3 (packed) */
    assert_int_equal(cublasSetMatrix(3, 4, 4, host, 5, D(d), 3), CUBLAS_STATUS_SUCCESS);
    down(d);
    for (int c = 0; c < 4; c++)
        for (int r = 0; r < 3; r++)
            assert_true(d[r + c * 3] == host[r + c * 5]);
    memset(back, 0, sizeof(back));
    assert_int_equal(cublasGetMatrix(3, 4, 4, D(d), 3, back, 6), CUBLAS_STATUS_SUCCESS);
    for (int c = 0; c < 4; c++)
        for (int r = 0; r < 3; r++)
            assert_true(back[r + c * 6] == host[r + c * 5]);
    assert_true(back[3] == 0.0f);
    /* vectors with increments, then the async forms on a stream */
    memset(d, 0, 64 * 4);
    up(d);
    assert_int_equal(cublasSetVector(10, 4, host, 2, D(d), 3), CUBLAS_STATUS_SUCCESS);
    down(d);
    for (int i = 0; i < 10; i++)
        assert_true(d[3 * i] == host[2 * i]);
    CUstream s;
    assert_int_equal(cuStreamCreate(&s, 0), CUDA_SUCCESS);
    memset(back, 0, sizeof(back));
    assert_int_equal(cublasGetVectorAsync(10, 4, D(d), 3, back, 1, (cudaStream_t)s),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cublasSetMatrixAsync(2, 2, 4, host, 2, D(d) + 40, 2, (cudaStream_t)s),
                     CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
    down(d);
    for (int i = 0; i < 10; i++)
        assert_true(back[i] == host[2 * i]);
    assert_true(d[40] == 0.0f && d[43] == 3.0f);
    assert_int_equal(cublasSetVector(4, 4, host, 0, D(d), 1), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSetVector(4, 0, host, 1, D(d), 1), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasSetMatrix(4, 2, 4, host, 3, D(d), 4), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasGetMatrix(-1, 2, 4, D(d), 4, back, 4), CUBLAS_STATUS_INVALID_VALUE);
    cuStreamDestroy(s);
    dfree(d);
}

/* cublasSgemm follows the heuristic for the current device's facts (cc,
 * SM count; cublasSetSmCountTarget overrides the SM count): its bits equal
 * the core run with the plan chosen for those facts. */
static void test_api_plan_follows_device(void **state)
{
    (void)state;
    CUdevice dev;
    sim_gemm_dev_t d;
    assert_int_equal(cuCtxGetDevice(&dev), CUDA_SUCCESS);
    assert_int_equal(cuDeviceGetAttribute(&d.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                          dev),
                     CUDA_SUCCESS);
    assert_int_equal(cuDeviceGetAttribute(&d.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                          dev),
                     CUDA_SUCCESS);
    assert_int_equal(cuDeviceGetAttribute(&d.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                          dev),
                     CUDA_SUCCESS);
    const int m = 96, n = 80, k = 1500;
    float *A = dalloc(m * k), *B = dalloc(k * n), *C = dalloc(m * n), *R = malloc(m * n * 4);
    fill(A, m * k);
    fill(B, k * n);
    up(A);
    up(B);
    float one = 1, zero = 0;
    cublasHandle_t h;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    for (int target = 0; target <= 1; target++) {
        sim_gemm_dev_t dd = d;
        if (target) {
            dd.sm_count = 4;
            assert_int_equal(cublasSetSmCountTarget(h, dd.sm_count), CUBLAS_STATUS_SUCCESS);
        }
        assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, D(A), m, D(B), k,
                                     &zero, D(C), m),
                         CUBLAS_STATUS_SUCCESS);
        assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
        down(C);
        sim_gemm_plan_t p;
        sim_gemm_choose(&dd, m, n, k, 1, sim_gemm_default_workspace(&dd), 0, &p);
        sim_gemm_args_t g = {0, 0, m, n, k, SIM_F32, SIM_F32, SIM_F32, SIM_ROUND_NONE,
                             A, m, B, k, R, m, 1.0f, 0.0f};
        assert_int_equal(sim_gemm_run(&p, &g), 0);
        assert_memory_equal(C, R, m * n * 4);
        if (target) { /* the target changed the plan, so it was really read */
            sim_gemm_plan_t p0;
            sim_gemm_choose(&d, m, n, k, 1, sim_gemm_default_workspace(&d), 0, &p0);
            assert_int_not_equal(p0.splitk, p.splitk);
        }
    }
    int t = -1;
    assert_int_equal(cublasGetSmCountTarget(h, &t), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(t, 4);
    assert_int_equal(cublasSetSmCountTarget(h, -1), CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    dfree(A);
    dfree(B);
    dfree(C);
    free(R);
}

/* A handle is bound to the device current at cublasCreate: with another
 * device's context current, or no context current, no work is enqueued and
 * the call fails with CUBLAS_STATUS_NOT_INITIALIZED; back on its device it
 * works again. */
static void test_api_handle_bound_to_device(void **state)
{
    (void)state;
    int n = 0;
    assert_int_equal(cuDeviceGetCount(&n), CUDA_SUCCESS);
    if (n < 2)
        es_test_skip("needs 2 GPUs, the machine has %d (SIMCUDA_DEVICES under simcuda)", n);
    CUdevice d1;
    CUcontext other;
    assert_int_equal(cuDeviceGet(&d1, 1), CUDA_SUCCESS);
    assert_int_equal(cuDevicePrimaryCtxRetain(&other, d1), CUDA_SUCCESS);
    float *A = dalloc(16), *C = dalloc(16);
    fill(A, 16);
    up(A);
    const float one = 1, zero = 0;
    cublasHandle_t h;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
#define GEMM(h) cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, D(A), 4, D(A), 4, &zero, D(C), 4)
    assert_int_equal(GEMM(h), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    assert_int_equal(cuCtxSetCurrent(other), CUDA_SUCCESS);
    assert_int_equal(GEMM(h), CUBLAS_STATUS_NOT_INITIALIZED);
    assert_int_equal(cublasSscal(h, 16, &one, D(C), 1), CUBLAS_STATUS_NOT_INITIALIZED);
    assert_int_equal(cuCtxSetCurrent(NULL), CUDA_SUCCESS);
    assert_int_equal(GEMM(h), CUBLAS_STATUS_NOT_INITIALIZED);
    assert_int_equal(cuCtxSetCurrent(g_ctx), CUDA_SUCCESS);
    assert_int_equal(GEMM(h), CUBLAS_STATUS_SUCCESS);
#undef GEMM
    assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
    assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(cuDevicePrimaryCtxRelease(d1), CUDA_SUCCESS);
    dfree(A);
    dfree(C);
}

/* The library's kernels follow the reference order bit for bit (the
 * plan the heuristic picks for the device, every transposition, edge tiles,
 * split-K through the workspace, batches, 16-bit and rounded inputs,
 * 16-bit outputs, beta != 0, alpha == 0, k == 0): any kernel that sums in
 * another order, or reads a wrong element, fails here. */
static void test_api_bits_match_reference(void **state)
{
    (void)state;
    CUdevice dev;
    sim_gemm_dev_t d;
    assert_int_equal(cuCtxGetDevice(&dev), CUDA_SUCCESS);
    assert_int_equal(cuDeviceGetAttribute(&d.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                          dev),
                     CUDA_SUCCESS);
    assert_int_equal(cuDeviceGetAttribute(&d.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                          dev),
                     CUDA_SUCCESS);
    assert_int_equal(cuDeviceGetAttribute(&d.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                          dev),
                     CUDA_SUCCESS);
    cublasHandle_t h;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    static const struct {
        int ta, tb, m, n, k, batch, type, ctype, round;
        float alpha, beta;
    } cases[] = {
        {0, 0, 64, 64, 1024, 1, SIM_F32, SIM_F32, SIM_ROUND_NONE, 1.0f, 0.0f}, /* split-K */
        {1, 0, 37, 21, 300, 1, SIM_F32, SIM_F32, SIM_ROUND_NONE, 0.5f, 1.5f},
        {0, 1, 70, 9, 77, 1, SIM_F32, SIM_F32, SIM_ROUND_NONE, -1.0f, 0.25f},
        {1, 1, 8, 8, 2000, 3, SIM_F32, SIM_F32, SIM_ROUND_NONE, 1.0f, -1.0f},
        {0, 0, 130, 66, 50, 2, SIM_F32, SIM_F32, SIM_ROUND_TF32, 1.0f, 0.0f},
        {1, 0, 19, 33, 129, 1, SIM_F32, SIM_F32, SIM_ROUND_BF16, 2.0f, 1.0f},
        {0, 0, 40, 40, 40, 1, SIM_F32, SIM_F32, SIM_ROUND_F16, 1.0f, 0.0f},
        {0, 1, 31, 17, 260, 2, SIM_F16, SIM_F32, SIM_ROUND_NONE, 1.0f, 0.5f},
        {1, 1, 25, 12, 64, 1, SIM_F16, SIM_F16, SIM_ROUND_NONE, 0.75f, 0.0f},
        {0, 0, 48, 72, 700, 1, SIM_BF16, SIM_BF16, SIM_ROUND_NONE, 1.0f, 1.0f},
        {0, 0, 9, 5, 0, 2, SIM_F32, SIM_F32, SIM_ROUND_NONE, 1.0f, 2.0f}, /* k == 0 */
        {0, 0, 9, 5, 12, 1, SIM_F32, SIM_F32, SIM_ROUND_NONE, 0.0f, 3.0f}, /* alpha == 0 */
    };
    static const cudaDataType cuda_t[] = {CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF};
    static const cublasComputeType_t compute[] = {CUBLAS_COMPUTE_32F_PEDANTIC,
                                                   CUBLAS_COMPUTE_32F_FAST_TF32,
                                                   CUBLAS_COMPUTE_32F_FAST_16BF,
                                                   CUBLAS_COMPUTE_32F_FAST_16F};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int ta = cases[c].ta, tb = cases[c].tb, m = cases[c].m, n = cases[c].n, k = cases[c].k;
        int batch = cases[c].batch, lda = (ta ? k : m) + 1, ldb = (tb ? n : k) + 2, ldc = m + 3;
        if (lda < 1)
            lda = 1;
        if (ldb < 1)
            ldb = 1;
        sim_dtype_t at = (sim_dtype_t)cases[c].type, ct = (sim_dtype_t)cases[c].ctype;
        size_t es = at == SIM_F32 ? 4 : 2, cs = ct == SIM_F32 ? 4 : 2;
        long long sa = (long long)lda * (ta ? m : k) + 5, sb = (long long)ldb * (tb ? k : n) + 3,
                  sc = (long long)ldc * n + 1;
        size_t na = (size_t)sa * batch + 1, nb = (size_t)sb * batch + 1, nc = (size_t)sc * batch;
        float *A = dalloc(na), *B = dalloc(nb), *C = dalloc(nc);
        char *R = malloc(nc * 4);
        for (size_t i = 0; i < na; i++) {
            float v = frand();
            if (at == SIM_F32)
                A[i] = v;
            else
                ((uint16_t *)A)[i] = at == SIM_F16 ? sim_f16_float_to_half(v)
                                                   : sim_f16_float_to_bf16(v);
        }
        for (size_t i = 0; i < nb; i++) {
            float v = frand();
            if (at == SIM_F32)
                B[i] = v;
            else
                ((uint16_t *)B)[i] = at == SIM_F16 ? sim_f16_float_to_half(v)
                                                   : sim_f16_float_to_bf16(v);
        }
        for (size_t i = 0; i < nc; i++) {
            float v = frand();
            if (ct == SIM_F32)
                C[i] = v;
            else
                ((uint16_t *)C)[i] = ct == SIM_F16 ? sim_f16_float_to_half(v)
                                                   : sim_f16_float_to_bf16(v);
        }
        memcpy(R, C, nc * cs);
        up(A);
        up(B);
        up(C);
        float alpha = cases[c].alpha, beta = cases[c].beta;
        assert_int_equal(cublasGemmStridedBatchedEx(
                             h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m,
                             n, k, &alpha, D(A), cuda_t[at], lda, sa, D(B), cuda_t[at], ldb, sb,
                             &beta, D(C), cuda_t[ct], ldc, sc, batch, compute[cases[c].round],
                             CUBLAS_GEMM_DEFAULT),
                         CUBLAS_STATUS_SUCCESS);
        assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
        down(C);
        sim_gemm_plan_t plan;
        sim_gemm_choose(&d, m, n, k, batch, sim_gemm_default_workspace(&d), 0, &plan);
        for (int b = 0; b < batch; b++) {
            sim_gemm_args_t g = {ta, tb, m, n, k, at, at, ct, (sim_round_t)cases[c].round,
                                 (char *)A + (size_t)b * sa * es, lda,
                                 (char *)B + (size_t)b * sb * es, ldb, R + (size_t)b * sc * cs,
                                 ldc, alpha, beta};
            assert_int_equal(sim_gemm_run(&plan, &g), 0);
        }
        if (memcmp(R, C, nc * cs) != 0)
            fail_msg("case %zu (%dx%dx%d, batch %d, split %d): bits differ from the reference",
                     c, m, n, k, batch, plan.splitk);
        dfree(A);
        dfree(B);
        dfree(C);
        free(R);
    }
    assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
}

/* The build directory: build/tests/sim_cublas_api_test -> build. */
static void build_dir(char *b, size_t len)
{
    const char *exe = self_exe();
    assert_non_null(exe);
    snprintf(b, len, "%s", exe);
    for (int up = 0; up < 2; up++) {
        char *sl = strrchr(b, '/');
        assert_non_null(sl);
        *sl = '\0';
    }
}

/* Vendor fact (the CUDA 13 libraries have code for sm_75 and later only):
 * cublasCreate on an older GPU returns CUBLAS_STATUS_ARCH_MISMATCH.
 * simcuda has no such model, so the child (lib_child.c) runs behind a
 * driver front (old_gpu.c) that reports compute capability 7.0 for a t4;
 * the same child on the plain driver gets a handle on the t4 (sm_75, the
 * oldest supported): the negative control. */
static void run_lib_child(const char *lib, int old_gpu, char *out, size_t len)
{
    char b[4096], child[4200], ldp[8500], real[4200];
    build_dir(b, sizeof(b));
    snprintf(child, sizeof(child), "%s/tests/sim/cublas/lib_child", b);
    if (old_gpu)
        snprintf(ldp, sizeof(ldp), "LD_LIBRARY_PATH=%s/tests/sim/cublas/old_gpu:%s/sim", b, b);
    else
        snprintf(ldp, sizeof(ldp), "LD_LIBRARY_PATH=%s/sim", b);
    snprintf(real, sizeof(real), "SIMTEST_REAL_LIBCUDA=%s/sim/libcuda.so.1", b);
    char *env[] = {ldp, real, (char *)"SIMCUDA_DEVICES=t4:1G", NULL};
    char *argv[] = {child, (char *)lib, NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 60, &r), 0);
    if (r.status != 0)
        fprintf(stderr, "%s\n", r.out);
    assert_int_equal(r.status, 0);
    snprintf(out, len, "%s", r.out);
    es_proc_result_free(&r);
}

static void test_api_arch_refused(void **state)
{
    (void)state;
    char out[256];
    run_lib_child("cublas", 1, out, sizeof(out));
    assert_non_null(strstr(out, "create 8\n")); /* CUBLAS_STATUS_ARCH_MISMATCH */
    run_lib_child("cublas", 0, out, sizeof(out));
    assert_non_null(strstr(out, "create 0\n"));
}

/* The library's kernels are seen by the shim's run-time audit as any
 * application kernel is (its fatbin carries real SASS with the float
 * atomics): with cublasSetAtomicsMode(ALLOWED) Ssymv launches
 * simcublas_symv_atomic, which EASYSCALE_AUDIT=warn logs as float-atomic
 * and strict refuses (CUBLAS_STATUS_EXECUTION_FAILED). Negative controls:
 * atomics not allowed (the deterministic kernel, no log line), and the
 * audit off. The shim runs with EASYSCALE_DETERMINISM=off, which leaves the
 * atomics mode alone. */
static void run_shim_child(const char *audit, const char *atomics, char **out)
{
    char b[4096], child[4200], simenv[4200], eb[4200], ea[64];
    build_dir(b, sizeof(b));
    const char *root = getenv("ES_ROOT");
    snprintf(child, sizeof(child), "%s/tests/sim/cublas/lib_child", b);
    if (root)
        snprintf(simenv, sizeof(simenv), "%s/scripts/simenv", root);
    else
        snprintf(simenv, sizeof(simenv), "%s/../scripts/simenv", b);
    snprintf(eb, sizeof(eb), "ES_BUILD=%s", b);
    snprintf(ea, sizeof(ea), "EASYSCALE_AUDIT=%s", audit);
    char *env[] = {eb, ea, (char *)"EASYSCALE_DETERMINISM=off", (char *)"EASYSCALE_LOG=warn",
                   (char *)"EASYSCALE_LOG_FILE=", (char *)"SIMCUDA_DEVICES=a100:1G", NULL};
    char *argv[] = {simenv, (char *)"--shim", child, (char *)"symv", (char *)atomics, NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 60, &r), 0);
    if (r.status != 0)
        fprintf(stderr, "%s\n", r.out);
    assert_int_equal(r.status, 0);
    *out = r.out;
}

static void test_api_kernels_in_shim_audit(void **state)
{
    (void)state;
    char *out;
    run_shim_child("warn", "1", &out);
    assert_non_null(strstr(out, "kernel simcublas_symv_atomic, which uses float atomics"));
    assert_non_null(strstr(out, "symv 0 sync 0\n"));
    free(out);
    run_shim_child("strict", "1", &out);
    assert_non_null(strstr(out, "refused"));
    assert_non_null(strstr(out, "kernel simcublas_symv_atomic uses float atomics"));
    assert_non_null(strstr(out, "symv 13 sync 0\n")); /* CUBLAS_STATUS_EXECUTION_FAILED */
    free(out);
    run_shim_child("strict", "0", &out); /* deterministic symv: not flagged */
    assert_null(strstr(out, "audit:"));
    assert_non_null(strstr(out, "symv 0 sync 0\n"));
    free(out);
    run_shim_child("off", "1", &out);
    assert_null(strstr(out, "simcublas_symv_atomic"));
    assert_non_null(strstr(out, "symv 0 sync 0\n"));
    free(out);
}

/* A cuBLAS client run with nothing but simcuda's directory on the library
 * path (LD_LIBRARY_PATH=build/sim, SIMCUDA_KERNELS unset, as a user would
 * run it) finds the library's kernel twins beside libcuda.so.1
 * (build/sim/twins): cublasCreate and its GEMMs succeed, on the device
 * server too. Negative control: SIMCUDA_KERNELS naming a twin library
 * without cuBLAS's kernels is obeyed, and cublasCreate fails saying which
 * kernel has no twin. */
static void run_client_on_sim_dir(const char *kernels, es_proc_result_t *r)
{
    char b[4096], client[4200], ldp[4200], kern[4300];
    build_dir(b, sizeof(b));
    snprintf(client, sizeof(client), "%s/tests/sim_cublas_client_test", b);
    snprintf(ldp, sizeof(ldp), "LD_LIBRARY_PATH=%s/sim", b);
    snprintf(kern, sizeof(kern), "SIMCUDA_KERNELS=%s", kernels); /* "": unset */
    char *env[] = {ldp, kern, (char *)"SIMCUDA_DEVICES=a100:1G", (char *)"SIMCUDA_ISOLATION=1",
                   NULL};
    char *argv[] = {client, NULL};
    assert_int_equal(es_run(argv, env, 120, r), 0);
}

static void test_api_twins_beside_driver(void **state)
{
    (void)state;
    es_proc_result_t r;
    run_client_on_sim_dir("", &r);
    if (r.status != 0)
        fprintf(stderr, "%s\n", r.out);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "[       OK ] sgemm_shapes\n"));
    assert_non_null(strstr(r.out, "[  PASSED  ] "));
    assert_null(strstr(r.out, "has no twin"));
    es_proc_result_free(&r);

    char b[4096], other[4300];
    build_dir(b, sizeof(b));
    snprintf(other, sizeof(other), "%s/sim/twins/libsimtwin_simtest.so", b);
    run_client_on_sim_dir(other, &r);
    assert_int_not_equal(r.status, 0);
    assert_non_null(strstr(r.out, "kernel 'simcublas_gemm' has no twin: no "
                                  "simcuda_twin_simcublas_gemm in SIMCUDA_KERNELS"));
    assert_null(strstr(r.out, "[  PASSED  ] "));
    es_proc_result_free(&r);
}

/* Vendor notes: NVIDIA's libcublas.so.13 dlopens libcuda.so.1 (no NEEDED
 * entry) and versions its exports libcublas.so.13; ours exports only names
 * it exports, with that version. */
static void test_library_abi(void **state)
{
    (void)state;
    char why[8192];
    if (sim_abi_check("sim/libcublas.so.13", "libcublas.so.13", "libcublas.so.13", why,
                      sizeof(why)))
        fail_msg("%s", why);
}

/* --------------------------------------------- negative controls (API) */

/* Child mode: one GEMM set on device 0 of whatever SIMCUDA_DEVICES says;
 * prints "model <name>" and "bits <hash>". */
/* Child mode: cublasCreate on device 0; prints "create <status>" (or "no
 * device" when the driver has none of the model asked for). */
static int child_gemm(void)
{
    CUdevice dev;
    CUcontext ctx;
    cublasHandle_t h;
    char name[128];
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx) || cuDeviceGetName(name, sizeof(name), dev) || cublasCreate(&h) ||
        cublasDestroy(h) || cublasCreate(&h)) {
        printf("child: setup failed\n");
        return 1;
    }
    uint64_t hash = 1469598103934665603ull;
    static const int shapes[][3] = {{64, 64, 1024}, {256, 128, 2048}, {100, 37, 300}};
    for (int s = 0; s < 3; s++) {
        int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        float *A = dalloc((size_t)m * k), *B = dalloc((size_t)k * n), *C = dalloc((size_t)m * n);
        g_rng = 777 + (uint64_t)s;
        fill(A, (size_t)m * k);
        fill(B, (size_t)k * n);
        up(A);
        up(B);
        float one = 1, zero = 0;
        if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, D(A), m, D(B), k, &zero, D(C),
                        m) ||
            cuCtxSynchronize())
            return 1;
        down(C);
        hash = fnv(C, (size_t)m * n * 4, hash);
        dfree(A);
        dfree(B);
        dfree(C);
    }
    cublasDestroy(h);
    printf("model %s\nbits %016llx\n", name, (unsigned long long)hash);
    return 0;
}

static const char *self_exe(void)
{
    static char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n <= 0)
        return NULL;
    path[n] = '\0';
    return path;
}

static void run_child(const char *devices, const char *wscfg, char *bits, size_t len,
                      char **out)
{
    char envd[128], envw[128];
    snprintf(envd, sizeof(envd), "SIMCUDA_DEVICES=%s", devices);
    snprintf(envw, sizeof(envw), "CUBLAS_WORKSPACE_CONFIG=%s", wscfg ? wscfg : "");
    char *env[] = {envd, envw, NULL};
    char *argv[] = {(char *)self_exe(), (char *)"child-gemm", NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 120, &r), 0);
    if (r.status != 0)
        fail_msg("child (%s) failed: %s", devices, r.out);
    assert_non_null(es_find_last(r.out, "bits ", bits, len));
    if (out)
        *out = strdup(r.out);
    es_proc_result_free(&r);
}

/* Vendor fact (cuBLAS docs "Results Reproducibility"; VENDOR-FACTS,
 * cuBLAS): bitwise reproducible run to run on GPUs of the same architecture
 * and SM count; not across architectures (the heuristic picks other tiles
 * and split-K). Negative control: a100 vs t4 differ, a100 twice agree. */
static void test_nc_models(void **state)
{
    (void)state;
    char a1[64], a2[64], t1[64], h1[64];
    run_child("a100:8G", NULL, a1, sizeof(a1), NULL);
    run_child("a100:8G", NULL, a2, sizeof(a2), NULL);
    run_child("t4:8G", NULL, t1, sizeof(t1), NULL);
    run_child("h100:8G", NULL, h1, sizeof(h1), NULL);
    assert_string_equal(a1, a2);
    assert_string_not_equal(a1, t1);
    assert_string_not_equal(a1, h1);
}

/* A 64x64x1024 GEMM: split-K on an a100 when it has the workspace. */
#define NC_M 64
#define NC_N 64
#define NC_K 1024

typedef struct nc_bufs {
    float *A, *B, *CA, *CB, *R;
    void *wsA, *wsB;
} nc_bufs_t;

static void nc_gemm(cublasHandle_t h, nc_bufs_t *b, float *C)
{
    float one = 1, zero = 0;
    assert_int_equal(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, NC_M, NC_N, NC_K, &one, D(b->A),
                                 NC_M, D(b->B), NC_K, &zero, D(C), NC_M),
                     CUBLAS_STATUS_SUCCESS);
}

/* Stream A is held by a host function with a GEMM of the handle queued
 * behind it while stream B runs its GEMM; returns whether B's bits differ
 * from the solo result. use_ws: per-stream cublasSetWorkspace. */
static int nc_concurrent(cublasHandle_t h, nc_bufs_t *b, CUstream sa, CUstream sb, int use_ws)
{
    int flag = 0;
    size_t bytes = (size_t)NC_M * NC_N * 4;
    /* solo reference on B */
    assert_int_equal(cublasSetStream(h, (cudaStream_t)sb), CUBLAS_STATUS_SUCCESS);
    if (use_ws)
        assert_int_equal(cublasSetWorkspace(h, D(b->wsB), (size_t)4 << 20), CUBLAS_STATUS_SUCCESS);
    nc_gemm(h, b, b->R);
    assert_int_equal(cuStreamSynchronize(sb), CUDA_SUCCESS);
    down(b->R);
    /* A blocked, with a GEMM in flight; B runs meanwhile */
    assert_int_equal(cuLaunchHostFunc(sa, wait_flag, &flag), CUDA_SUCCESS);
    assert_int_equal(cublasSetStream(h, (cudaStream_t)sa), CUBLAS_STATUS_SUCCESS);
    if (use_ws)
        assert_int_equal(cublasSetWorkspace(h, D(b->wsA), (size_t)4 << 20), CUBLAS_STATUS_SUCCESS);
    nc_gemm(h, b, b->CA);
    assert_int_equal(cublasSetStream(h, (cudaStream_t)sb), CUBLAS_STATUS_SUCCESS);
    if (use_ws)
        assert_int_equal(cublasSetWorkspace(h, D(b->wsB), (size_t)4 << 20), CUBLAS_STATUS_SUCCESS);
    nc_gemm(h, b, b->CB);
    assert_int_equal(cuStreamSynchronize(sb), CUDA_SUCCESS);
    release(&flag);
    assert_int_equal(cuStreamSynchronize(sa), CUDA_SUCCESS);
    down(b->CA);
    down(b->CB);
    /* A ran alone (B had finished): same as solo whatever the setting */
    assert_memory_equal(b->CA, b->R, bytes);
    return memcmp(b->CB, b->R, bytes) != 0;
}

/* Vendor fact (cuBLAS docs "Results Reproducibility"; VENDOR-FACTS):
 * several concurrent streams sharing one handle are not reproducible unless
 * each stream has its own workspace (cublasSetWorkspace) or
 * CUBLAS_WORKSPACE_CONFIG=:4096:8 (or :16:8). Negative control: without
 * either, the same GEMM gives other bits when another stream of the handle
 * has work in flight; with either it does not. */
static void test_nc_streams(void **state)
{
    (void)state;
    nc_bufs_t b;
    CUstream sa, sb;
    cublasHandle_t h;
    b.A = dalloc(NC_M * NC_K);
    b.B = dalloc(NC_K * NC_N);
    b.CA = dalloc(NC_M * NC_N);
    b.CB = dalloc(NC_M * NC_N);
    b.R = dalloc(NC_M * NC_N);
    b.wsA = dalloc(1 << 20); /* 4 MiB each */
    b.wsB = dalloc(1 << 20);
    fill(b.A, NC_M * NC_K);
    fill(b.B, NC_K * NC_N);
    up(b.A);
    up(b.B);
    assert_int_equal(cuStreamCreate(&sa, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(cuStreamCreate(&sb, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);

    unsetenv("CUBLAS_WORKSPACE_CONFIG");
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    assert_true(nc_concurrent(h, &b, sa, sb, 0));  /* varies */
    assert_false(nc_concurrent(h, &b, sa, sb, 1)); /* own workspaces: stable */
    assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);

    static const char *const good[] = {":4096:8", ":16:8", ":4096:8:16:8"};
    for (int i = 0; i < 3; i++) {
        setenv("CUBLAS_WORKSPACE_CONFIG", good[i], 1);
        assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
        assert_false(nc_concurrent(h, &b, sa, sb, 0));
        assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    }
    /* valid but not a documented deterministic setting: shared pool */
    setenv("CUBLAS_WORKSPACE_CONFIG", ":1024:2", 1);
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    assert_true(nc_concurrent(h, &b, sa, sb, 0));
    assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    unsetenv("CUBLAS_WORKSPACE_CONFIG");

    cuStreamDestroy(sa);
    cuStreamDestroy(sb);
    dfree(b.A);
    dfree(b.B);
    dfree(b.CA);
    dfree(b.CB);
    dfree(b.R);
    dfree(b.wsA);
    dfree(b.wsB);
}

/* A malformed CUBLAS_WORKSPACE_CONFIG is treated as unset, with one warning
 * per process (child process: the warning is printed once only). */
static void test_nc_bad_config(void **state)
{
    (void)state;
    char bits[64], ref[64];
    char *out = NULL;
    run_child("a100:8G", ":4096", bits, sizeof(bits), &out);
    const char *w = strstr(out, "CUBLAS_WORKSPACE_CONFIG");
    assert_non_null(w);
    assert_null(strstr(w + 1, "CUBLAS_WORKSPACE_CONFIG")); /* once, for two handles */
    free(out);
    run_child("a100:8G", ":4096:8x", bits, sizeof(bits), &out);
    assert_non_null(strstr(out, "malformed"));
    free(out);
    run_child("a100:8G", NULL, ref, sizeof(ref), &out);
    assert_null(strstr(out, "CUBLAS_WORKSPACE_CONFIG"));
    free(out);
    assert_string_equal(bits, ref); /* same as unset */
}

/* Vendor fact (VENDOR-FACTS cuBLAS; cuBLAS docs "Results
 * Reproducibility"): cublasSetAtomicsMode(CUBLAS_ATOMICS_ALLOWED) lets symv
 * use float atomics, not reproducible; NOT_ALLOWED (default) is. */
static void test_nc_symv_atomics(void **state)
{
    (void)state;
    cublasHandle_t h;
    const int n = 300;
    float *A = dalloc(n * n), *x = dalloc(n), *y = dalloc(n), *first = malloc(n * 4);
    fill(A, n * n);
    fill(x, n);
    up(A);
    up(x);
    float alpha = 1, beta = 0;
    assert_int_equal(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    for (int mode = 0; mode < 2; mode++) {
        assert_int_equal(cublasSetAtomicsMode(h, mode ? CUBLAS_ATOMICS_ALLOWED
                                                      : CUBLAS_ATOMICS_NOT_ALLOWED),
                         CUBLAS_STATUS_SUCCESS);
        int differ = 0;
        for (int t = 0; t < 8; t++) {
            assert_int_equal(cublasSsymv(h, CUBLAS_FILL_MODE_UPPER, n, &alpha, D(A), n, D(x), 1,
                                         &beta, D(y), 1),
                             CUBLAS_STATUS_SUCCESS);
            assert_int_equal(cuCtxSynchronize(), CUDA_SUCCESS);
            down(y);
            if (t == 0)
                memcpy(first, y, n * 4);
            else if (memcmp(first, y, n * 4) != 0)
                differ = 1;
        }
        assert_int_equal(differ, mode);
    }
    assert_int_equal(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    dfree(A);
    dfree(x);
    dfree(y);
    free(first);
}

int main(int argc, char **argv)
{
    /* On simcuda: device memory kept out of this process, as on a GPU
     * machine (a real driver ignores the variable): the library never
     * touches device memory from the host. */
    setenv("SIMCUDA_ISOLATION", "1", 1);
    if (argc > 1 && strcmp(argv[1], "child-gemm") == 0)
        return child_gemm();
    const struct CMUnitTest core[] = {
        cmocka_unit_test(test_core_gemm_shapes),
        cmocka_unit_test(test_core_gemm_plans),
        cmocka_unit_test(test_core_heuristic),
        cmocka_unit_test(test_core_types),
        cmocka_unit_test(test_core_special_scalars),
        cmocka_unit_test(test_core_level12),
    };
    const struct CMUnitTest api[] = {
        cmocka_unit_test(test_library_abi),
        cmocka_unit_test(test_api_handle),
        cmocka_unit_test(test_api_invalid_args),
        cmocka_unit_test(test_api_sgemm),
        cmocka_unit_test(test_api_batched),
        cmocka_unit_test(test_api_gemmex),
        cmocka_unit_test(test_api_level12),
        cmocka_unit_test(test_api_async),
        cmocka_unit_test(test_api_plan_follows_device),
        cmocka_unit_test(test_api_handle_bound_to_device),
        cmocka_unit_test(test_api_bits_match_reference),
        cmocka_unit_test(test_api_arch_refused),
        cmocka_unit_test(test_api_kernels_in_shim_audit),
        cmocka_unit_test(test_api_twins_beside_driver),
        cmocka_unit_test(test_api_copies),
        cmocka_unit_test(test_nc_models),
        cmocka_unit_test(test_nc_streams),
        cmocka_unit_test(test_nc_bad_config),
        cmocka_unit_test(test_nc_symv_atomics),
    };
    int fails = cmocka_run_group_tests_name("sim_cublas_core", core, NULL, NULL);
    if (argc > 1 && strcmp(argv[1], "--core-only") == 0)
        return fails ? 1 : 0;
    fails += cmocka_run_group_tests_name("sim_cublas_api", api, api_setup, NULL);
    return fails ? 1 : 0;
}
