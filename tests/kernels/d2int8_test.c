/* The int8 GEMM's definition (kernels/d2int8_kernels.h, docs/D2-GEMM.md)
 * as its element functions and the C reference (kernels/d2int8.c) compute
 * it, against independent computations on the host:
 *   - the one rounding (es_i8_to_f32) against long double arithmetic
 *     (exact for these operands) converted to float: normal, subnormal,
 *     overflowing and tie cases;
 *   - the operand rounding (es_i8_quant) against rintl (ties to even) of
 *     the scaled value, the scale (es_i8_exp) against frexpf;
 *   - the slices put back together give the integer;
 *   - the reference GEMM equals the correctly rounded exact dot product
 *     when every operand is kept exactly (integers of up to 24 bits), and
 *     differs from it (and from fp32 fma accumulation) when small
 *     operands are rounded away: the definition is not an exact GEMM;
 *   - NaN and Inf as IEEE gives them for the sum of the products.
 * Host only: the kernel's bits against this reference are
 * kernels_tile_test's. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/d2int8.h"

static uint64_t g_rs = 0x2545f4914f6cdd1dull;
static uint64_t rnd64(void)
{
    g_rs ^= g_rs << 13;
    g_rs ^= g_rs >> 7;
    g_rs ^= g_rs << 17;
    return g_rs;
}

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* v 2^e through long double (64-bit significand: v below 2^63 is exact,
 * so the conversion to float is the only rounding). */
static float ld_round(long long v, int e)
{
    return (float)ldexpl((long double)v, e);
}

static void test_to_f32(void **state)
{
    (void)state;
    static const struct { long long v; int e; } fixed[] = {
        { 1, 0 }, { -1, 0 }, { 3, -1 }, { (1LL << 24) + 1, 0 }, /* a tie: to even */
        { (1LL << 24) + 3, 0 }, { (1LL << 25) - 1, -1 }, { 1, -149 }, { 3, -150 },
        { 1, -150 }, /* half the least subnormal: ties to 0 */
        { 5, -152 }, { (1LL << 23) - 1, -149 }, { (1LL << 24) - 1, -150 },
        { 1, 127 }, { (1LL << 24) - 1, 104 }, { (1LL << 25) - 1, 103 }, /* rounds to Inf */
        { 1, 128 }, { -(1LL << 40), 100 }, { 0, 5 },
    };
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        float got = es_i8_to_f32((es_i128_t)fixed[i].v, fixed[i].e);
        float want = ld_round(fixed[i].v, fixed[i].e);
        if (fbits(got) != fbits(want))
            fail_msg("%lld 2^%d: %a, want %a", fixed[i].v, fixed[i].e, (double)got, (double)want);
    }
    for (int i = 0; i < 200000; i++) {
        long long v = (long long)(rnd64() >> (1 + rnd64() % 62));
        if (rnd64() & 1)
            v = -v;
        int e = (int)(rnd64() % 360) - 240;
        float got = es_i8_to_f32((es_i128_t)v, e), want = ld_round(v, e);
        if (fbits(got) != fbits(want))
            fail_msg("%lld 2^%d: %a, want %a", v, e, (double)got, (double)want);
    }
    /* beyond 64 bits: 2^100 + 2^76 + 1 rounds up (above the tie) */
    es_i128_t big = ((es_i128_t)1 << 100) + ((es_i128_t)1 << 76) + 1;
    assert_int_equal(fbits(es_i8_to_f32(big, 0)), fbits(ldexpf(1.0f + 0x1p-23f, 100)));
    assert_int_equal(fbits(es_i8_to_f32(big - 1, 0)), fbits(ldexpf(1.0f, 100))); /* tie: even */
}

static void test_quant(void **state)
{
    (void)state;
    for (int i = 0; i < 200000; i++) {
        float x;
        uint32_t u = (uint32_t)rnd64();
        memcpy(&x, &u, 4);
        if (!isfinite(x))
            continue;
        unsigned mag = es_i8_mag(x);
        int e = es_i8_exp(mag), fe;
        frexpf(x, &fe);
        if (x != 0.0f)
            assert_int_equal(e, fe); /* |x| < 2^e, the least such e */
        int eb = e + (int)(rnd64() % 30); /* the row's largest may be larger */
        int q = es_i8_quant(x, eb, 4);
        long double want = rintl(ldexpl((long double)x, 28 - eb)); /* ties to even */
        assert_true((long double)q == want);
        assert_true(q < (1 << 28) && q > -(1 << 28));
        int back = 0;
        for (int s = 0; s < 4; s++) {
            signed char d = es_i8_digit(q, s, 4);
            assert_true(d != -128); /* digits in [-127, 127] */
            back += d * (1 << (7 * (3 - s)));
        }
        assert_int_equal(back, q);
    }
    /* ties on the dropped bits (x 2^28 = 1.5, 2.5, -2.5, 3.5): to even */
    assert_int_equal(es_i8_quant(ldexpf(1.5f, -28), 0, 4), 2);
    assert_int_equal(es_i8_quant(ldexpf(2.5f, -28), 0, 4), 2);
    assert_int_equal(es_i8_quant(ldexpf(-2.5f, -28), 0, 4), -2);
    assert_int_equal(es_i8_quant(ldexpf(3.5f, -28), 0, 4), 4);
    assert_int_equal(es_i8_quant(INFINITY, 1, 4), 0);
    assert_int_equal(es_i8_quant(NAN, 1, 4), 0);
}

/* C = A B, A m x k and B k x n column-major fp32, by the reference. */
static void ref(const float *a, const float *b, float *c, int m, int n, int k)
{
    es_gemm_args_t g = { .A = a, .B = b, .C = c, .D = c, .m = m, .n = n, .k = k, .lda = m,
                         .ldb = k, .ldc = m, .ldd = m, .at = ES_DT_F32, .bt = ES_DT_F32,
                         .ct = ES_DT_F32, .dt = ES_DT_F32, .alpha = 1.0f, .beta = 0.0f };
    assert_int_equal(es_d2int8_ref_gemm(&g, 1), 0);
}

static void test_exact_when_kept(void **state)
{
    (void)state;
    enum { M = 5, N = 4, K = 3000 };
    static float a[M * K], b[K * N], c[M * N];
    /* integers of 24 bits at most whose rows and columns span at most 4
     * binades below their largest: every operand kept, so C is the exact
     * (integer) dot product rounded once */
    for (int i = 0; i < M * K; i++)
        a[i] = (float)((long long)(rnd64() % (1 << 24)) - (1 << 23)) * 16.0f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)((long long)(rnd64() % (1 << 24)) - (1 << 23));
    for (int i = 0; i < M; i++)
        a[i] = 0x1p27f; /* each row's largest */
    for (int j = 0; j < N; j++)
        b[j * K] = -0x1p23f;
    ref(a, b, c, M, N, K);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            __int128 s = 0;
            int kept = 1;
            for (int p = 0; p < K; p++) {
                float x = a[i + p * M], y = b[p + j * K];
                /* kept exactly: at most 4 binades under 2^27 and 2^23 */
                kept &= x == 0.0f || fabsf(x) >= 0x1p22f || fmodf(fabsf(x), 16.0f) == 0.0f;
                s += (__int128)(long long)x * (long long)y;
            }
            assert_true(kept);
            /* s fits in 64 bits here: the long double conversion is exact */
            assert_true(s < ((__int128)1 << 62) && s > -((__int128)1 << 62));
            float want = (float)(long double)(long long)s;
            if (fbits(c[i + j * M]) != fbits(want))
                fail_msg("(%d, %d): %a, exact rounded %a", i, j, (double)c[i + j * M],
                         (double)want);
        }
}

/* Negative control: a row whose largest value is 2^40 times the others
 * (and multiplies zeros) loses them: the definition is not the exact dot
 * product, and here it is further from it than fp32 fma accumulation. */
static void test_not_exact_when_rounded(void **state)
{
    (void)state;
    enum { K = 64 };
    float a[K], b[K], c;
    for (int p = 0; p < K; p++) {
        a[p] = 1.0f + (float)p * 0x1p-10f;
        b[p] = 1.0f - (float)p * 0x1p-9f;
    }
    a[0] = 0x1p40f;
    b[0] = 0.0f;
    ref(a, b, &c, 1, 1, K);
    es_gemm_args_t g = { .A = a, .B = b, .C = &c, .D = &c, .m = 1, .n = 1, .k = K, .lda = 1,
                         .ldb = K, .ldc = 1, .ldd = 1, .alpha = 1.0f };
    long double exact = es_d2int8_exact_dot(&g, 0, 0, 0);
    float fma_acc = 0.0f;
    for (int p = 0; p < K; p++)
        fma_acc = fmaf(a[p], b[p], fma_acc);
    assert_true(fabsl((long double)c - exact) > 0.5L); /* the small terms are gone */
    assert_true(fabsl((long double)c - exact) > fabsl((long double)fma_acc - exact));
}

static void test_nan_inf(void **state)
{
    (void)state;
    /* one row of A, three columns of B: (Inf, 1) . (1, 2) = +Inf;
     * (Inf, 1) . (0, 2) = NaN (Inf * 0); (Inf, -Inf) . (1, 1) = NaN */
    float a[4] = { INFINITY, 1.0f, INFINITY, -INFINITY }; /* two rows, k = 2 */
    float b[6] = { 1.0f, 2.0f, 0.0f, 2.0f, -1.0f, 2.0f };
    float c[6];
    es_gemm_args_t g = { .A = a, .B = b, .C = c, .D = c, .m = 2, .n = 3, .k = 2, .lda = 2,
                         .ldb = 2, .ldc = 2, .ldd = 2, .alpha = 1.0f };
    /* A (column-major, lda 2): row 0 = (Inf, Inf), row 1 = (1, -Inf) */
    assert_int_equal(es_d2int8_ref_gemm(&g, 1), 0);
    /* row 0 . (1, 2) = +Inf + +Inf = +Inf */
    assert_true(isinf(c[0]) && c[0] > 0);
    /* row 1 . (1, 2) = 1 - Inf = -Inf */
    assert_true(isinf(c[1]) && c[1] < 0);
    /* row 0 . (0, 2) = NaN */
    assert_int_equal(fbits(c[2]), ES_I8_QNAN);
    /* row 1 . (0, 2) = 0 + -Inf = -Inf */
    assert_true(isinf(c[3]) && c[3] < 0);
    /* row 0 . (-1, 2) = -Inf + Inf = NaN */
    assert_int_equal(fbits(c[4]), ES_I8_QNAN);
    /* row 1 . (-1, 2) = -1 - Inf = -Inf */
    assert_true(isinf(c[5]) && c[5] < 0);
    /* alpha 0: A and B not read, C = 0 */
    g.alpha = 0.0f;
    assert_int_equal(es_d2int8_ref_gemm(&g, 1), 0);
    for (int i = 0; i < 6; i++)
        assert_int_equal(fbits(c[i]), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_to_f32),
        cmocka_unit_test(test_quant),
        cmocka_unit_test(test_exact_when_kept),
        cmocka_unit_test(test_not_exact_when_rounded),
        cmocka_unit_test(test_nan_inf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
