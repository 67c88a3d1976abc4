/* libeasyscale.so never invalidates a CUDA graph capture in progress
 * (tests/intercept/cap_client.c makes the library calls a framework makes while
 * capturing). NVIDIA's rule (cuda.h, cuThreadExchangeStreamCaptureMode):
 * cuMemAlloc during a capture in the GLOBAL interaction mode fails with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900) and invalidates it, so the
 * end of the capture reports CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (901).
 * The shim pins a workspace per (cuBLAS handle, stream) and gives cuDNN's
 * substituted algorithms a workspace; both are made ahead, never in a call
 * on a capturing stream. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/harness.h"

#define TMO 120

static char g_preload[4096];

static void cap(const char *mode, const char *arg, const char *det, es_proc_result_t *r)
{
    char detenv[64];
    snprintf(detenv, sizeof(detenv), "EASYSCALE_DETERMINISM=%s", det);
    char *argv[] = { (char *)es_build_path("tests/intercept/cap_client"), (char *)mode, (char *)arg,
                     NULL };
    char *env[] = {
        (char *)es_preload_env(es_build_path("lib/libeasyscale.so"), g_preload, sizeof(g_preload)),
        detenv, NULL,
    };
    assert_int_equal(es_run(argv, env, TMO, r), 0);
    assert_false(r->timed_out);
    if (r->status != 0)
        fail_msg("cap_client %s (%s): exit %d\n%s", mode, det, r->status, r->out);
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

/* cublasSetStream on a stream first met while it captures (the shim pins a
 * workspace there) keeps the capture valid and the replay right, in d1
 * and d2, twice (the spare is made again outside capture); no warning.
 * Negative control: the allocation the shim used to make at that point
 * (made here by the client) invalidates the capture. */
static void test_blas_capture(void **state)
{
    (void)state;
    static const char *const dets[2] = { "d1", "d2" };
    char v[64];
    es_proc_result_t r;
    for (int i = 0; i < 2; i++) {
        cap("blas", NULL, dets[i], &r);
        assert_string_equal(val(&r, "first_end", v, sizeof(v)), "0");
        assert_string_equal(val(&r, "first_replay_match", v, sizeof(v)), "1");
        assert_string_equal(val(&r, "second_end", v, sizeof(v)), "0");
        assert_string_equal(val(&r, "second_replay_match", v, sizeof(v)), "1");
        if (strstr(r.out, "warn"))
            fail_msg("%s: %s", dets[i], r.out);
        es_proc_result_free(&r);
    }
    cap("blas", "appalloc", "d1", &r);
    assert_string_equal(val(&r, "first_appalloc", v, sizeof(v)), "900");
    assert_string_equal(val(&r, "first_end", v, sizeof(v)), "901");
    assert_string_equal(val(&r, "second_end", v, sizeof(v)), "0");
    es_proc_result_free(&r);
}

/* cuDNN: a nondeterministic algorithm named during a capture runs as the
 * deterministic one on the workspace made with the handle; the capture
 * stays valid and replays ALGO_1's bits (off: the nondeterministic
 * algorithm's, which differ). */
static void test_dnn_capture(void **state)
{
    (void)state;
    char v[64];
    es_proc_result_t r;
    cap("dnn", NULL, "d1", &r);
    assert_string_equal(val(&r, "dnn_end", v, sizeof(v)), "0");
    assert_string_equal(val(&r, "dnn_replay_match", v, sizeof(v)), "1");
    if (strstr(r.out, "warn"))
        fail_msg("d1: %s", r.out);
    es_proc_result_free(&r);
    cap("dnn", NULL, "off", &r);
    assert_string_equal(val(&r, "dnn_end", v, sizeof(v)), "0");
    assert_string_equal(val(&r, "dnn_replay_match", v, sizeof(v)), "0");
    es_proc_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blas_capture),
        cmocka_unit_test(test_dnn_capture),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
