/* simcuda adversarial scheduling (SIMCUDA_CHAOS=SEED, with isolation on):
 * a program that forgets the cuStreamWaitEvent between a producer stream and
 * a consumer stream gets a wrong result in nearly every one of 100 runs
 * under chaos, and the right one in all 100 with the wait. Without chaos the
 * same program is mostly right on a CPU: the reason chaos exists (the count
 * is printed, not asserted: it depends on the machine's load).
 * Each run: x = 1; producer stream a sets x = 2 and records event e;
 * consumer stream b (waiting for e or not) copies x to y; y must be 2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "tests/sim_driver/common.h"

#define RUNS 100
#define N 1024

static const char *g_self;

static int child(int wait)
{
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) {
        printf("init %d\n", (int)r);
        return 0;
    }
    st_primary(0);
    CUstream a, b;
    CUevent e;
    CUdeviceptr x, y;
    if (cuStreamCreate(&a, CU_STREAM_NON_BLOCKING) || cuStreamCreate(&b, CU_STREAM_NON_BLOCKING) ||
        cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) || cuMemAlloc(&x, N * 4) || cuMemAlloc(&y, N * 4))
        return 10;
    int wrong = 0;
    for (int i = 0; i < RUNS; i++) {
        unsigned last = 0;
        if (cuMemsetD32(x, 1, N) || cuMemsetD32(y, 0, N) || cuMemsetD32Async(x, 2, N, a) ||
            cuEventRecord(e, a) || (wait && cuStreamWaitEvent(b, e, 0)) ||
            cuMemcpyDtoDAsync(y, x, N * 4, b) || cuStreamSynchronize(b) ||
            cuStreamSynchronize(a) || cuMemcpyDtoH(&last, y + (N - 1) * 4, 4))
            return 11;
        wrong += last != 2;
    }
    printf("wrong %d of %d\n", wrong, RUNS);
    return 0;
}

/* Runs the child; returns its count of wrong results (or fails). */
static int wrong_runs(const char *chaos, int wait)
{
    char env_chaos[64];
    snprintf(env_chaos, sizeof(env_chaos), "SIMCUDA_CHAOS=%s", chaos ? chaos : "");
    char *env[] = {env_chaos, NULL};
    char *argv[] = {(char *)g_self, (char *)(wait ? "--child-wait" : "--child-omit"), NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 120, &r), 0);
    if (r.status != 0)
        fail_msg("child exited %d:\n%s", r.status, r.out);
    char buf[64];
    const char *w = es_find_last(r.out, "wrong", buf, sizeof(buf));
    if (!w)
        fail_msg("no count in:\n%s", r.out);
    int n = (int)strtol(w, NULL, 10);
    es_proc_result_free(&r);
    return n;
}

static void test_missing_wait_caught(void **state)
{
    (void)state;
    int seeds_wrong[2] = {wrong_runs("1", 0), wrong_runs("20240611", 0)};
    printf("# missing wait under chaos: %d and %d of %d runs wrong\n", seeds_wrong[0],
           seeds_wrong[1], RUNS);
    assert_true(seeds_wrong[0] >= 95);
    assert_true(seeds_wrong[1] >= 95);
}

static void test_with_wait_always_right(void **state)
{
    (void)state;
    assert_int_equal(wrong_runs("1", 1), 0);
    assert_int_equal(wrong_runs("20240611", 1), 0);
    assert_int_equal(wrong_runs(NULL, 1), 0);
}

static void test_without_chaos_for_comparison(void **state)
{
    (void)state;
    printf("# missing wait without chaos: %d of %d runs wrong\n", wrong_runs(NULL, 0), RUNS);
}

static void test_bad_seed_refused(void **state)
{
    (void)state;
    char *env[] = {(char *)"SIMCUDA_CHAOS=12x", NULL};
    char *argv[] = {(char *)g_self, (char *)"--child-omit", NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 60, &r), 0);
    assert_non_null(strstr(r.out, "SIMCUDA_CHAOS='12x'"));
    assert_non_null(strstr(r.out, "init 1\n")); /* CUDA_ERROR_INVALID_VALUE */
    es_proc_result_free(&r);
}

int main(int argc, char **argv)
{
    g_self = argv[0];
    setenv("SIMCUDA_DEVICES", "a100:1G", 1);
    setenv("SIMCUDA_ISOLATION", "1", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    if (argc > 1 && strcmp(argv[1], "--child-omit") == 0)
        return child(0);
    if (argc > 1 && strcmp(argv[1], "--child-wait") == 0)
        return child(1);
    st_private_shm("chaos");
    unsetenv("SIMCUDA_CHAOS");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_wait_caught),
        cmocka_unit_test(test_with_wait_always_right),
        cmocka_unit_test(test_without_chaos_for_comparison),
        cmocka_unit_test(test_bad_seed_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
