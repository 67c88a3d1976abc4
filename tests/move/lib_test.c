/* Whole-process tests of the vendor libraries' handles across moves
 * (intercept/libh.h, docs/MOVING.md) with tests/move/lib_client.c: a
 * client holding a cuBLAS handle (stream, workspace, TF32 math, device
 * pointer mode, atomics allowed), a cuBLASLt handle and a cuDNN handle,
 * moved between simulated GPUs (d1: A100 -> the other A100 -> back; d2: A100
 * -> H100 -> back), runs its GEMM, matmul and convolution after each move
 * with the checksum of the run without moves, reads back every setting it
 * gave, and a destroyed handle gets the library's status. Negative
 * control: with the handles left the vendors' (EASYSCALE_MOVE=nolib) the
 * same move makes the strict simcuda libraries refuse the handles (their
 * device is gone), so the run fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tests/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TMO 240
#define DEVICES "SIMCUDA_DEVICES=a100:2G,a100:2G,h100:2G"

static char preload[4096];

static const char *client(void) { return es_build_path("tests/move/lib_client"); }

static void run(char *const argv[], es_proc_result_t *r, const char *e1, const char *e2,
                const char *e3)
{
    char *env[] = { preload, DEVICES, "EASYSCALE_LOG=warn", (char *)e1, (char *)e2, (char *)e3,
                    NULL };
    assert_int_equal(es_run(argv, env, TMO, r), 0);
    assert_false(r->timed_out);
}

static const char *val(es_proc_result_t *r, const char *key, char *buf, size_t len)
{
    const char *v = es_find_last(r->out, key, buf, len);
    if (!v)
        fail_msg("no \"%s\" line in:\n%s", key, r->out);
    return v;
}

/* The checksum of a run without moves (and its settings kept). */
static void reference(const char *det, const char *canon, char *sum, size_t len)
{
    char *argv[] = { (char *)client(), "5", NULL };
    es_proc_result_t r;
    run(argv, &r, det, canon, NULL);
    if (r.status != 0)
        fail_msg("exit %d\n%s", r.status, r.out);
    assert_non_null(strstr(r.out, "settings kept\n"));
    val(&r, "checksum", sum, len);
    es_proc_result_free(&r);
}

static void check_moved(es_proc_result_t *r, const char *ref, int there)
{
    char v[64], line[64];
    if (r->status != 0)
        fail_msg("exit %d\n%s", r->status, r->out);
    snprintf(line, sizeof(line), "move to %d: 0\n", there);
    assert_non_null(strstr(r->out, line));
    assert_non_null(strstr(r->out, "move to 0: 0\n"));
    /* it ran on the other GPU between the moves */
    snprintf(line, sizeof(line), "step 1 gpu %d\n", there);
    assert_non_null(strstr(r->out, line));
    assert_non_null(strstr(r->out, "step 3 gpu 0\n"));
    assert_non_null(strstr(r->out, "settings kept\n"));
    assert_string_equal(val(r, "checksum", v, sizeof(v)), ref);
    /* destroyed handles: the libraries' own answers */
    assert_non_null(strstr(r->out, "destroyed blas 1\n")); /* CUBLAS_STATUS_NOT_INITIALIZED */
    assert_non_null(strstr(r->out, "destroyed dnn refused\n"));
}

static void test_d1_a100_to_a100(void **state)
{
    (void)state;
    char ref[64];
    reference("EASYSCALE_DETERMINISM=d1", NULL, ref, sizeof(ref));
    char *argv[] = { (char *)client(), "5", "1:1", "3:0", NULL };
    es_proc_result_t r;
    run(argv, &r, "EASYSCALE_DETERMINISM=d1", NULL, NULL);
    check_moved(&r, ref, 1);
    es_proc_result_free(&r);
}

static void test_d2_a100_to_h100(void **state)
{
    (void)state;
    char ref[64];
    reference("EASYSCALE_DETERMINISM=d2", "EASYSCALE_CANONICAL_DEVICE=a100,h100", ref,
              sizeof(ref));
    char *argv[] = { (char *)client(), "5", "1:2", "3:0", NULL };
    es_proc_result_t r;
    run(argv, &r, "EASYSCALE_DETERMINISM=d2", "EASYSCALE_CANONICAL_DEVICE=a100,h100", NULL);
    check_moved(&r, ref, 2);
    es_proc_result_free(&r);
}

/* The same move with the vendors' handles left behind: the strict
 * libraries refuse them on the new GPU. */
static void test_negative_control_nolib(void **state)
{
    (void)state;
    char *argv[] = { (char *)client(), "5", "1:1", "3:0", NULL };
    es_proc_result_t r;
    run(argv, &r, "EASYSCALE_DETERMINISM=d1", "EASYSCALE_MOVE=nolib", NULL);
    if (r.status == 0)
        fail_msg("the run survived a move with the vendors' handles left behind:\n%s", r.out);
    assert_non_null(strstr(r.out, "move to 1: 0\n")); /* the move itself worked */
    assert_non_null(strstr(r.out, "FAIL "));          /* then a library call failed */
    es_proc_result_free(&r);
}

int main(void)
{
    es_preload_env(es_build_path("lib/libeasyscale.so"), preload, sizeof(preload));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_d1_a100_to_a100),
        cmocka_unit_test(test_d2_a100_to_h100),
        cmocka_unit_test(test_negative_control_nolib),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
