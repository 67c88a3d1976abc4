/* Whole-process tests of the vendor libraries' handles across moves
 * (intercept/virtual/libh.h, docs/MOVING.md) with tests/move/lib_client.c: a
 * client holding a cuBLAS handle (stream, workspace, TF32 math, device
 * pointer mode, atomics allowed), a cuBLASLt handle and a cuDNN handle,
 * moved between simulated GPUs (d1: A100 -> the other A100 -> back; d2: A100
 * -> H100 -> back), runs its GEMM, matmul and convolution after each move
 * with the checksum of the run without moves, reads back every setting it
 * gave, and a destroyed handle gets the library's status. The client's
 * cuDNN backend plan and variant pack, made before the first move, are
 * executed after each one (with a handle made then and with the first
 * one) with the unmoved run's bits: the shim re-made and re-finalized them
 * on the new GPU (d2: on the H100 the plan reads back the H100's canonical
 * engine, on the A100 again the A100's). Negative control: with the
 * handles and descriptors left the vendors' (EASYSCALE_MOVE=nolib) the
 * same move makes the strict simcuda cuDNN refuse the plan (finalized for
 * the old device) even with a handle made on the new one, so the run
 * fails. */
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

/* The engine the plan reads back on the last step (and that every step
 * read the same through the plan and through its engine config). */
static long last_engine(es_proc_result_t *r)
{
    long e = -1, f = -1, last = -1;
    for (const char *p = r->out; (p = strstr(p, "plan engine ")) != NULL; p++) {
        if (sscanf(p, "plan engine %ld cfg engine %ld", &e, &f) != 2 || e != f)
            fail_msg("plan and engine config disagree: %.60s", p);
        last = e;
    }
    return last;
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
    /* one model: the same engine everywhere */
    assert_int_equal(last_engine(&r), 1); /* IMPLICIT_PRECOMP_GEMM, sim/cudnn/README.md */
    assert_null(strstr(r.out, "plan engine 7"));
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
    /* re-finalized on the H100 with its heuristics (unit 3x3 forward:
     * WINOGRAD_NONFUSED, 7), and on the A100 again (1) */
    assert_non_null(strstr(r.out, "plan engine 7 cfg engine 7"));
    assert_int_equal(last_engine(&r), 1);
    es_proc_result_free(&r);
}

/* A plan whose graph names a cuDNN handle the application destroyed
 * cannot be re-made at a move: the move goes on, and the plan's next
 * execute returns the status cuDNN gave when the shim tried (the graph's
 * handle NULL: CUDNN_STATUS_BAD_PARAM_NULL_POINTER), not a crash nor a
 * plan bound to the old GPU; the other plan is unaffected. */
static void test_d1_plan_not_remade(void **state)
{
    (void)state;
    char ref[64];
    reference("EASYSCALE_DETERMINISM=d1", NULL, ref, sizeof(ref));
    char *argv[] = { (char *)client(), "5", "1:1", "3:0", "lost", NULL };
    es_proc_result_t r;
    run(argv, &r, "EASYSCALE_DETERMINISM=d1", NULL, NULL);
    check_moved(&r, ref, 1);
    const char *before = strstr(r.out, "lost plan 0\n"), *moved = strstr(r.out, "move to 1: 0\n");
    assert_non_null(before);
    assert_non_null(moved);
    assert_true(before < moved);
    assert_non_null(strstr(moved, "lost plan 2002\n"));
    assert_null(strstr(moved, "lost plan 0\n"));
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
    /* then the plan, even with a handle made on the new GPU:
     * CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER */
    assert_non_null(strstr(r.out, "FAIL cudnnBackendExecute(fh, plan, vp) = 5001"));
    es_proc_result_free(&r);
}

int main(void)
{
    es_preload_env(es_build_path("lib/libeasyscale.so"), preload, sizeof(preload));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_d1_a100_to_a100),
        cmocka_unit_test(test_d2_a100_to_h100),
        cmocka_unit_test(test_d1_plan_not_remade),
        cmocka_unit_test(test_negative_control_nolib),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
