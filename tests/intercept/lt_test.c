/* libeasyscale.so and cuBLASLt (libcublasLt.so.13), driven as PyTorch's
 * gemm_and_bias / bgemm_internal_cublaslt drive it (tests/intercept/lt_client.c):
 * d1 takes the placement of tensors in memory out of the algorithm choice,
 * d2 gives every epilogue PyTorch uses the same bits on every GPU model;
 * each with its negative control (EASYSCALE_DETERMINISM=off, or d1 across
 * models). Vendor facts (docs/VENDOR-FACTS.md, "cuBLAS"): cuBLASLt's
 * heuristic reads the workspace and the promised alignments; bits are never
 * reproducible across architectures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/harness.h"

#define TMO 180
#define DEVS "SIMCUDA_DEVICES=a100:8G,t4:8G,h100:8G"

static const char *const cases[] = { "bias_f32", "relu_bias_f32", "gelu_bias_f32",
                                     "bias_f16", "gelu_bias_bf16", "mixed_f16_f32",
                                     "bgradb_f32", "bgrada_bf16", "bmm_f32" };
#define NCASES (sizeof(cases) / sizeof(cases[0]))

static char g_preload[4096];

static void lt(const char *mode, int dev, const char *det, es_proc_result_t *r)
{
    char d[16], detenv[64];
    snprintf(d, sizeof(d), "%d", dev);
    snprintf(detenv, sizeof(detenv), "EASYSCALE_DETERMINISM=%s", det);
    char *argv[] = { (char *)es_build_path("tests/intercept/lt_client"), (char *)mode, d, NULL };
    char *env[] = {
        (char *)es_preload_env(es_build_path("lib/libeasyscale.so"), g_preload, sizeof(g_preload)),
        detenv, DEVS, NULL,
    };
    assert_int_equal(es_run(argv, env, TMO, r), 0);
    assert_false(r->timed_out);
    if (r->status != 0)
        fail_msg("lt_client %s %d (%s): exit %d\n%s", mode, dev, det, r->status, r->out);
}

static const char *val(const es_proc_result_t *r, const char *key, char *buf, size_t len)
{
    char k[128];
    snprintf(k, sizeof(k), "%s ", key);
    const char *v = es_find_last(r->out, k, buf, len);
    if (!v)
        fail_msg("no line '%s' in output:\n%s", key, r->out);
    return v;
}

/* The same GEMM on a tensor at the start of its allocation (256-byte
 * aligned) and 32 bytes into it: without the shim cuBLASLt picks another
 * kernel (other bits); with d1 the same, through a heuristic query and
 * through a NULL algorithm. */
static void test_d1_alignment(void **state)
{
    (void)state;
    char a[64], b[64], c[64], d[64];
    es_proc_result_t r;
    for (int dev = 0; dev < 2; dev++) {
        lt("align", dev, "off", &r);
        assert_string_not_equal(val(&r, "align0", a, sizeof(a)), val(&r, "align32", b, sizeof(b)));
        es_proc_result_free(&r);
        lt("align", dev, "d1", &r);
        val(&r, "align0", a, sizeof(a));
        assert_string_equal(a, val(&r, "align32", b, sizeof(b)));
        assert_string_equal(a, val(&r, "null0", c, sizeof(c)));
        assert_string_equal(a, val(&r, "null32", d, sizeof(d)));
        es_proc_result_free(&r);
    }
}

/* d2: every case (bias, ReLU + bias, GELU + bias, bias gradients, fp32 /
 * fp16 / bf16, batched) has the same bits on a100, t4 and h100, equal to
 * the int8 GEMM's definition (d2's default path; kernels/d2int8.c)
 * computed on the host, and is correct; off and d1
 * differ across models and are correct too. */
static void test_d2_across_models(void **state)
{
    (void)state;
    char got[3][NCASES][64], ref[64], k[64], e[32];
    es_proc_result_t r;
    static const char *const dets[2] = { "off", "d1" };
    for (int i = 0; i < 2; i++) {
        for (int dev = 0; dev < 2; dev++) {
            lt("pt", dev, dets[i], &r);
            for (size_t c = 0; c < NCASES; c++) {
                snprintf(k, sizeof(k), "case %s", cases[c]);
                val(&r, k, got[dev][c], 64);
                snprintf(k, sizeof(k), "err %s", cases[c]);
                double err = atof(val(&r, k, e, sizeof(e)));
                if (!(err < (strstr(cases[c], "16") ? 1e-2 : 1e-5)))
                    fail_msg("%s %s dev %d: error %g", dets[i], cases[c], dev, err);
            }
            es_proc_result_free(&r);
        }
        assert_string_not_equal(got[0][0], got[1][0]);
        assert_string_not_equal(got[0][8], got[1][8]);
    }
    for (int dev = 0; dev < 3; dev++) {
        lt("pt", dev, "d2", &r);
        for (size_t c = 0; c < NCASES; c++) {
            snprintf(k, sizeof(k), "case %s", cases[c]);
            val(&r, k, got[dev][c], 64);
            snprintf(k, sizeof(k), "ref %s", cases[c]);
            assert_string_equal(got[dev][c], val(&r, k, ref, sizeof(ref)));
            snprintf(k, sizeof(k), "err %s", cases[c]);
            double err = atof(val(&r, k, e, sizeof(e)));
            if (!(err < (strstr(cases[c], "16") ? 1e-2 : 1e-5)))
                fail_msg("d2 %s dev %d: error %g", cases[c], dev, err);
            if (dev)
                assert_string_equal(got[dev][c], got[0][c]);
        }
        es_proc_result_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_d1_alignment),
        cmocka_unit_test(test_d2_across_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
