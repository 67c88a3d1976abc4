/* Moving ESTs of a multi-rank job (docs/MOVING.md): examples/train.py with
 * four ESTs that meet in the virtual collectives, under easyscale-ctl.
 *
 * - d1, two A100s: ESTs migrated between the GPUs and swapped out and back
 *   at random steps (the controller's schedule): every rank prints the
 *   checksum of the run without moves.
 * - d2, an A100, an H100 and a T4: the same across models (the a100 <->
 *   h100 and t4 pairs): the checksum of the run without moves.
 * - Time-slicing: the four ESTs on one GPU whose memory holds only one of
 *   them (EASYSCALE_TIME_SLICE=on): they take turns, yielding at each
 *   collective; the checksum of the four ESTs each on its own GPU.
 * Negative controls: the same moves without the memory registry
 * (EASYSCALE_MOVE=nomem) break the run; the four ESTs on the small GPU
 * without time-slicing run out of memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tests/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TMO 300
#define STEPS "300"

static char preload[4096];

/* The four ranks' checksums, all equal: that checksum in ck (else a
 * failure that shows the output). */
static void checksum4(const es_proc_result_t *r, const char *prefix_fmt, char *ck, size_t len)
{
    ck[0] = 0;
    for (int k = 0; k < 4; k++) {
        char key[32], v[128];
        snprintf(key, sizeof(key), prefix_fmt, k);
        if (!es_find_last(r->out, key, v, sizeof(v)))
            fail_msg("rank %d printed no checksum (exit %d):\n%s", k, r->status, r->out);
        const char *t = v + strspn(v, " ");
        if (!ck[0])
            snprintf(ck, len, "%s", t);
        else if (strcmp(ck, t) != 0)
            fail_msg("ranks disagree: %s vs %s\n%s", ck, t, r->out);
    }
}

/* easyscale-ctl run --ests 4 with the trainer; sched NULL: no moves. */
static void ctl_run(const char *devices, const char *gpus, const char *det, const char *sched,
                    const char *more, es_proc_result_t *r)
{
    char dev_env[128];
    snprintf(dev_env, sizeof(dev_env), "SIMCUDA_DEVICES=%s", devices);
    char *argv[32];
    int n = 0;
    argv[n++] = (char *)es_build_path("bin/easyscale-ctl");
    argv[n++] = "run";
    argv[n++] = "--ests";
    argv[n++] = "4";
    argv[n++] = "--gpus";
    argv[n++] = (char *)gpus;
    argv[n++] = "--determinism";
    argv[n++] = (char *)det;
    if (sched) {
        argv[n++] = "--schedule";
        argv[n++] = (char *)sched;
    }
    argv[n++] = "--progress";
    argv[n++] = "off";
    argv[n++] = "--shim";
    argv[n++] = (char *)es_build_path("lib/libeasyscale.so");
    argv[n++] = "--";
    argv[n++] = "python3";
    argv[n++] = (char *)es_root_path("examples/train.py");
    argv[n++] = "--steps";
    argv[n++] = STEPS;
    argv[n++] = "--log-every";
    argv[n++] = STEPS;
    argv[n++] = "--deterministic-kernels";
    argv[n] = NULL;
    char *env[] = { dev_env, "EASYSCALE_HEARTBEAT_MS=100", "EASYSCALE_LOG=warn",
                    (char *)more, NULL };
    assert_int_equal(es_run(argv, env, TMO, r), 0);
}

/* A schedule of moves at random steps (the controller counts 3 all-reduces
 * a training step; every move early enough to land within the training). */
static void write_schedule(char *path, size_t len, const char *const *moves, int n,
                           unsigned seed)
{
    snprintf(path, len, "/tmp/es-ests-sched-%d", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    srand(seed);
    int at = 0;
    for (int i = 0; i < n; i++) {
        if (strncmp(moves[i], "swap-in", 7) == 0) {
            fprintf(f, "time 1 %s\n", moves[i]); /* right after the swap-out */
            continue;
        }
        at += 45 + rand() % 75;
        fprintf(f, "step %d %s\n", at, moves[i]);
    }
    fclose(f);
    print_message("schedule (seed %u): moves up to controller step %d of %d\n", seed, at,
                  3 * atoi(STEPS));
}

static void moved_run(const char *devices, const char *gpus, const char *det,
                      const char *const *moves, int n)
{
    es_proc_result_t ref, mv;
    char want[128], got[128], sched[128];
    ctl_run(devices, gpus, det, NULL, NULL, &ref);
    if (ref.status != 0)
        fail_msg("the run without moves failed (%d):\n%s", ref.status, ref.out);
    checksum4(&ref, "[%d] checksum", want, sizeof(want));
    write_schedule(sched, sizeof(sched), moves, n, (unsigned)time(NULL));
    ctl_run(devices, gpus, det, sched, NULL, &mv);
    unlink(sched);
    if (mv.status != 0)
        fail_msg("the moved run failed (%d):\n%s", mv.status, mv.out);
    int done = 0;
    for (const char *p = mv.out; (p = strstr(p, "easyscale-ctl: schedule: ")) != NULL; p++)
        done += strstr(p, "done in") && strstr(p, "done in") < strchr(p, '\n');
    if (done != n)
        fail_msg("%d of %d moves done:\n%s", done, n, mv.out);
    checksum4(&mv, "[%d] checksum", got, sizeof(got));
    assert_string_equal(got, want);
    es_proc_result_free(&ref);
    es_proc_result_free(&mv);
}

static void test_moves_d1(void **state)
{
    (void)state;
    const char *moves[] = { "migrate 0 1", "swap-out 2", "swap-in 2 0", "migrate 3 0",
                            "migrate 1 0" };
    moved_run("a100:2G,a100:2G", "0,1", "d1", moves, 5);
}

static void test_moves_d2_across_models(void **state)
{
    (void)state;
    const char *moves[] = { "migrate 0 1", "migrate 1 2", "swap-out 2", "swap-in 2 1",
                            "migrate 0 2", "migrate 3 0" };
    moved_run("a100:2G,h100:2G,t4:2G", "0,1,2", "d2", moves, 6);
}

/* Negative control: the same moves with the registry off break the run. */
static void test_moves_without_registry_break(void **state)
{
    (void)state;
    const char *moves[] = { "migrate 0 1", "swap-out 2", "swap-in 2 0" };
    char sched[128];
    es_proc_result_t ref, mv;
    char want[128];
    ctl_run("a100:2G,a100:2G", "0,1", "d1", NULL, NULL, &ref);
    checksum4(&ref, "[%d] checksum", want, sizeof(want));
    write_schedule(sched, sizeof(sched), moves, 3, 1);
    ctl_run("a100:2G,a100:2G", "0,1", "d1", sched, "EASYSCALE_MOVE=nomem", &mv);
    unlink(sched);
    int same = mv.status == 0;
    for (int k = 0; k < 4 && same; k++) {
        char key[32], v[128];
        snprintf(key, sizeof(key), "[%d] checksum", k);
        same = es_find_last(mv.out, key, v, sizeof(v)) && strcmp(v + strspn(v, " "), want) == 0;
    }
    if (same)
        fail_msg("the run survived moves without the memory registry:\n%s", mv.out);
    es_proc_result_free(&ref);
    es_proc_result_free(&mv);
}

/* ---- time-slicing ------------------------------------------------------------------- */

/* scripts/launch -n 4 with the trainer (40 steps: 3 collectives each, every
 * one a turn for each EST). */
static void launch_run(const char *devices, const char *more, es_proc_result_t *r)
{
    char dev_env[128];
    snprintf(dev_env, sizeof(dev_env), "SIMCUDA_DEVICES=%s", devices);
    char *argv[] = { "python3", (char *)es_root_path("scripts/launch"), "-n", "4", "--",
                     "python3", (char *)es_root_path("examples/train.py"), "--steps", "40",
                     "--log-every", "40", "--deterministic-kernels", NULL };
    char *env[] = { preload, dev_env, "EASYSCALE_DETERMINISM=d1", "EASYSCALE_LOG=info",
                    (char *)more, NULL };
    assert_int_equal(es_run(argv, env, TMO, r), 0);
}

/* One GPU of 24 MiB holds one EST of the trainer (22 MiB) and no more. */
#define SMALL_GPU "a100:24M"

static void test_time_slicing_four_on_one(void **state)
{
    (void)state;
    es_proc_result_t own, ts;
    char want[128];
    launch_run("a100:2G,a100:2G,a100:2G,a100:2G", NULL, &own); /* each on its own GPU */
    if (own.status != 0)
        fail_msg("four ESTs on four GPUs failed (%d):\n%s", own.status, own.out);
    checksum4(&own, "checksum", want, sizeof(want));
    launch_run(SMALL_GPU, "EASYSCALE_TIME_SLICE=on", &ts);
    if (ts.status != 0)
        fail_msg("four ESTs time-sliced on one GPU failed (%d):\n%s", ts.status, ts.out);
    /* every rank printed the same checksum (the last four checksum lines) */
    int n = 0;
    for (const char *p = ts.out; (p = strstr(p, "\nchecksum ")) != NULL; p++) {
        char v[128];
        if (sscanf(p + 10, "%127s", v) != 1 || strcmp(v, want) != 0)
            fail_msg("a time-sliced rank printed checksum %s, not %s", v, want);
        n++;
    }
    assert_int_equal(n, 4);
    /* they took turns: each parked at every collective (3 a step) */
    int parks = 0;
    for (const char *p = ts.out; (p = strstr(p, "moved to host memory")) != NULL; p++)
        parks++;
    print_message("time-sliced: %d parks\n", parks);
    assert_true(parks >= 4 * 3 * 40);
    es_proc_result_free(&own);
    es_proc_result_free(&ts);
}

/* Negative control: the same four ESTs on the small GPU without
 * time-slicing: no room for the second one (the driver's out of memory, or
 * cuBLAS's failed allocation of its workspace). */
static void test_four_on_one_without_slicing_fail(void **state)
{
    (void)state;
    es_proc_result_t r;
    launch_run(SMALL_GPU, NULL, &r);
    if (r.status == 0)
        fail_msg("four ESTs fit on the small GPU without time-slicing:\n%s", r.out);
    /* the driver's answer, or cuBLAS's when its workspace is what no longer fits */
    if (!strstr(r.out, "OUT_OF_MEMORY") && !strstr(r.out, "ALLOC_FAILED"))
        fail_msg("the small GPU's run failed for another reason:\n%s", r.out);
    es_proc_result_free(&r);
}

int main(void)
{
    es_preload_env(es_build_path("lib/libeasyscale.so"), preload, sizeof(preload));
    unsetenv("CUDA_VISIBLE_DEVICES");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moves_d1),
        cmocka_unit_test(test_moves_d2_across_models),
        cmocka_unit_test(test_moves_without_registry_break),
        cmocka_unit_test(test_time_slicing_four_on_one),
        cmocka_unit_test(test_four_on_one_without_slicing_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
