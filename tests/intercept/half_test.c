/* libeasyscale.so and half precision through the legacy APIs PyTorch's
 * autocast uses (tests/intercept/half_client.c): cublasGemmEx and
 * cublasGemmStridedBatchedEx on fp16 / bf16 operands with fp32
 * accumulation, and the three cuDNN convolutions on fp16 / bf16 tensors
 * with an fp32 convolution type. d2 runs them on the portable kernels:
 * the same bits on a100, t4 and h100, equal to d2's result computed on
 * the host (the int8 definition, kernels/d2int8_kernels.h, d2's default
 * path, applied to the GEMMs and to the convolutions' implicit GEMMs; one
 * rounding to the output type). Negative controls:
 * without the shim and with d1 simcuda's cuBLAS gives different bits on
 * a100 and t4 for these GEMMs (another kernel per architecture). simcuda's
 * legacy cuDNN has no 16-bit convolutions (it answers NOT_SUPPORTED; real
 * cuDNN runs them with per-architecture kernels): the control there is
 * that without d2 the call is the vendor's (the status shows), with d2 the
 * portable kernels compute it. The backend API's 16-bit graphs are
 * tested in tests/intercept/dnn_test.c (test_d2_half). */
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

static const char *const models[3] = { "a100", "t4", "h100" };
static const char *const gcases[] = { "f16_nn", "f16_f32c_tn", "bf16_nt", "bf16_f32c_nn",
                                      "f16_batched", "bf16_batched_tt" };
#define NG (sizeof(gcases) / sizeof(gcases[0]))
static const char *const ccases[] = { "fwd_f16", "bwd_data_f16", "bwd_filter_f16",
                                      "fwd_bf16", "bwd_data_bf16", "bwd_filter_bf16" };
#define NC (sizeof(ccases) / sizeof(ccases[0]))

static char g_preload[4096];

static void half(const char *mode, int dev, const char *det, es_proc_result_t *r)
{
    char d[16], detenv[64];
    snprintf(d, sizeof(d), "%d", dev);
    snprintf(detenv, sizeof(detenv), "EASYSCALE_DETERMINISM=%s", det);
    char *argv[] = { (char *)es_build_path("tests/intercept/half_client"), (char *)mode, d, NULL };
    char *env[] = {
        (char *)es_preload_env(es_build_path("lib/libeasyscale.so"), g_preload, sizeof(g_preload)),
        detenv, DEVS, NULL,
    };
    assert_int_equal(es_run(argv, env, TMO, r), 0);
    assert_false(r->timed_out);
    if (r->status != 0)
        fail_msg("half_client %s %d (%s): exit %d\n%s", mode, dev, det, r->status, r->out);
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

static void test_gemm(void **state)
{
    (void)state;
    char got[3][NG][64], ref[64], k[64];
    es_proc_result_t r;
    static const char *const dets[2] = { "off", "d1" };
    for (int d = 0; d < 2; d++) {
        for (int dev = 0; dev < 2; dev++) {
            half("gemm", dev, dets[d], &r);
            for (size_t i = 0; i < NG; i++) {
                snprintf(k, sizeof(k), "gemm %s", gcases[i]);
                val(&r, k, got[dev][i], 64);
            }
            es_proc_result_free(&r);
        }
        for (size_t i = 0; i < NG; i++)
            if (!strcmp(got[0][i], got[1][i]))
                fail_msg("%s %s: a100 and t4 agree (%s)", dets[d], gcases[i], got[0][i]);
    }
    for (int dev = 0; dev < 3; dev++) {
        half("gemm", dev, "d2", &r);
        for (size_t i = 0; i < NG; i++) {
            snprintf(k, sizeof(k), "gemm %s", gcases[i]);
            val(&r, k, got[dev][i], 64);
            snprintf(k, sizeof(k), "ref %s", gcases[i]);
            val(&r, k, ref, sizeof(ref));
            if (strcmp(got[dev][i], ref))
                fail_msg("d2 %s %s: %s, host order %s", models[dev], gcases[i], got[dev][i], ref);
        }
        es_proc_result_free(&r);
    }
}

static void test_conv(void **state)
{
    (void)state;
    char got[64], ref[64], k[64];
    es_proc_result_t r;
    half("conv", 0, "off", &r);
    for (size_t i = 0; i < NC; i++) {
        snprintf(k, sizeof(k), "conv %s", ccases[i]);
        if (strncmp(val(&r, k, got, sizeof(got)), "status", 6))
            fail_msg("off %s: %s (simcuda's legacy cuDNN has no 16-bit convolutions)", ccases[i],
                     got);
    }
    es_proc_result_free(&r);
    for (int dev = 0; dev < 3; dev++) {
        half("conv", dev, "d2", &r);
        for (size_t i = 0; i < NC; i++) {
            snprintf(k, sizeof(k), "conv %s", ccases[i]);
            val(&r, k, got, sizeof(got));
            snprintf(k, sizeof(k), "ref %s", ccases[i]);
            val(&r, k, ref, sizeof(ref));
            if (strcmp(got, ref))
                fail_msg("d2 %s %s: %s, host order %s", models[dev], ccases[i], got, ref);
        }
        es_proc_result_free(&r);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_conv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
