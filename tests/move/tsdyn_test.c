/* Time-slicing a running job (docs/MOVING.md, section 6): examples/train.py
 * with four ESTs under easyscale-ctl, on two A100s and a small GPU whose
 * memory holds one EST of the trainer (32 MiB; an EST is about 22 MiB).
 *
 * - The schedule grants the small GPU, then `timeslice 2 2,3`: ESTs 2 and 3
 *   take turns on it (each parks in host memory at every collective while
 *   the other runs there), then `timeslice off` places them on the A100s
 *   again. Every rank prints the checksum of the job that stayed on four
 *   GPUs; both ESTs parked during the phase (the shim's "moved to host
 *   memory" lines), and the small GPU never held both (it cannot: a second
 *   EST there would find no memory, and the run would fail).
 * - A scale event of the whole job: `timeslice 2 0,1,2,3` puts all four
 *   ESTs in one rotation on the small GPU mid-run (two GPUs -> one that
 *   holds one EST), `timeslice off` puts them back: the same checksum.
 * - Negative control: the same schedule without the memory registry
 *   (EASYSCALE_MOVE=nomem: a park leaves the memory behind) breaks the run.
 * - The controller refuses what does not fit: the same rotation on the
 *   small GPU beside an EST resident there (one EST at a time beside it
 *   would not fit), with a clear message, and the job goes on unchanged. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tests/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TMO 280
/* 60 of the controller's steps (3 all-reduces a training step). The
 * ESTs wait at each scheduled step until its events are done (controller
 * README, run 6.), so the events happen at their steps however fast the
 * machine is, and the job can be short. */
#define STEPS "20"
#define DEVICES "a100:2G,a100:2G,a100:32M"

/* The four ranks' checksums, all equal: that checksum in ck. */
static void checksum4(const es_proc_result_t *r, char *ck, size_t len)
{
    ck[0] = 0;
    for (int k = 0; k < 4; k++) {
        char key[32], v[128];
        snprintf(key, sizeof(key), "[%d] checksum", k);
        if (!es_find_last(r->out, key, v, sizeof(v)))
            fail_msg("rank %d printed no checksum (exit %d):\n%s", k, r->status, r->out);
        const char *t = v + strspn(v, " ");
        if (!ck[0])
            snprintf(ck, len, "%s", t);
        else if (strcmp(ck, t) != 0)
            fail_msg("ranks disagree: %s vs %s\n%s", ck, t, r->out);
    }
}

/* easyscale-ctl run --ests 4 on gpus with the trainer; sched may be NULL. */
static void ctl_run(const char *gpus, const char *sched, const char *more, es_proc_result_t *r)
{
    char *argv[40];
    int n = 0;
    argv[n++] = (char *)es_build_path("bin/easyscale-ctl");
    argv[n++] = "run";
    argv[n++] = "--ests";
    argv[n++] = "4";
    argv[n++] = "--gpus";
    argv[n++] = (char *)gpus;
    argv[n++] = "--determinism";
    argv[n++] = "d1";
    argv[n++] = "--est-memory";
    argv[n++] = "20M";
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
    char *env[] = { "SIMCUDA_DEVICES=" DEVICES, "EASYSCALE_HEARTBEAT_MS=100",
                    "EASYSCALE_LOG=info", (char *)more, NULL };
    assert_int_equal(es_run(argv, env, TMO, r), 0);
}

/* The schedule (the controller's steps: 3 all-reduces a training step):
 * the small GPU granted (nobody moves: it holds one EST, the A100s hold
 * the four already), ESTs 2 and 3 time-sliced on it for 10 training
 * steps, then placed without time-slicing again. */
static void write_schedule(char *path, size_t len, const char *rotation)
{
    snprintf(path, len, "/tmp/es-tsdyn-sched-%d", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "step 6 grant 2\n%s", rotation);
    fclose(f);
}

/* Writes a failed run's output to a file and returns its path (fail_msg
 * truncates what it prints). */
static const char *keep(const es_proc_result_t *r, const char *what)
{
    static char path[160];
    snprintf(path, sizeof(path), "/tmp/es-tsdyn-%s-%d.log", what, (int)getpid());
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(r->out ? r->out : "", f);
        fclose(f);
    }
    return path;
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* Parks of rank r: its "moved to host memory" lines. */
static int parks_of(const char *out, int r)
{
    char prefix[16];
    int n = 0;
    snprintf(prefix, sizeof(prefix), "[%d] ", r);
    for (const char *p = out; (p = strstr(p, "moved to host memory")) != NULL; p++) {
        const char *bol = p;
        while (bol > out && bol[-1] != '\n')
            bol--;
        n += strncmp(bol, prefix, strlen(prefix)) == 0;
    }
    return n;
}

static const char *const ROTATION = "step 15 timeslice 2 2,3\nstep 45 timeslice off\n";

/* The fixed placement's checksum (two ESTs on each A100, no moves): one
 * run for the three tests. */
static char g_want[128];

static int run_reference(void **state)
{
    (void)state;
    es_proc_result_t ref;
    ctl_run("0,1", NULL, NULL, &ref);
    if (ref.status != 0) {
        fprintf(stderr, "the job without moves failed (%d):\n%s", ref.status, ref.out);
        es_proc_result_free(&ref);
        return -1;
    }
    checksum4(&ref, g_want, sizeof(g_want));
    es_proc_result_free(&ref);
    return 0;
}

static void test_timeslice_running_job(void **state)
{
    (void)state;
    es_proc_result_t ts;
    char got[128], sched[128];
    const char *want = g_want;
    write_schedule(sched, sizeof(sched), ROTATION);
    ctl_run("0,1", sched, NULL, &ts);
    unlink(sched);
    if (ts.status != 0)
        fail_msg("the time-sliced job failed (%d; output: %s)", ts.status, keep(&ts, "run"));
    /* both events done, by the ESTs' answers */
    if (!strstr(ts.out, "schedule: step 15 timeslice 2 2,3: time-slice ESTs 2,3 on GPU 2: done"))
        fail_msg("the rotation did not start (output: %s)", keep(&ts, "run"));
    if (!strstr(ts.out, "schedule: step 45 timeslice off: end time-slicing on GPU 2: done"))
        fail_msg("the rotation did not end (output: %s)", keep(&ts, "run"));
    int p2 = parks_of(ts.out, 2), p3 = parks_of(ts.out, 3);
    print_message("time-sliced phase: EST 2 parked %d times, EST 3 %d times\n", p2, p3);
    if (p2 < 2 || p3 < 2)
        fail_msg("the ESTs did not take turns (parks: %d, %d; output: %s)", p2, p3,
                 keep(&ts, "run"));
    assert_int_equal(parks_of(ts.out, 0) + parks_of(ts.out, 1), 0);
    checksum4(&ts, got, sizeof(got));
    if (strcmp(got, want) != 0)
        fail_msg("checksum %s, not the fixed placement's %s (output: %s)", got, want,
                 keep(&ts, "run"));
    es_proc_result_free(&ts);
}

/* A scale event of the whole job: its four ESTs time-sliced together on
 * the small GPU mid-run (the job shrinks from two GPUs to one that holds
 * one EST), then back on their two GPUs: the checksum of the fixed
 * placement. */
static void test_timeslice_all_four(void **state)
{
    (void)state;
    es_proc_result_t ts;
    char got[128], sched[128];
    write_schedule(sched, sizeof(sched), "step 15 timeslice 2 0,1,2,3\nstep 45 timeslice off\n");
    ctl_run("0,1", sched, NULL, &ts);
    unlink(sched);
    if (ts.status != 0)
        fail_msg("the job time-sliced whole failed (%d; output: %s)", ts.status, keep(&ts, "all"));
    if (!strstr(ts.out, "time-slice ESTs 0,1,2,3 on GPU 2: done"))
        fail_msg("the rotation of four did not start (output: %s)", keep(&ts, "all"));
    for (int r = 0; r < 4; r++)
        if (parks_of(ts.out, r) < 2)
            fail_msg("EST %d took no turns (output: %s)", r, keep(&ts, "all"));
    checksum4(&ts, got, sizeof(got));
    if (strcmp(got, g_want) != 0)
        fail_msg("checksum %s, not the fixed placement's %s (output: %s)", got, g_want,
                 keep(&ts, "all"));
    es_proc_result_free(&ts);
}

/* Negative control: the same rotation without the memory registry. */
static void test_timeslice_without_registry_breaks(void **state)
{
    (void)state;
    es_proc_result_t ts;
    char sched[128];
    const char *want = g_want;
    write_schedule(sched, sizeof(sched), ROTATION);
    ctl_run("0,1", sched, "EASYSCALE_MOVE=nomem", &ts);
    unlink(sched);
    int same = ts.status == 0;
    for (int k = 0; k < 4 && same; k++) {
        char key[32], v[128];
        snprintf(key, sizeof(key), "[%d] checksum", k);
        same = es_find_last(ts.out, key, v, sizeof(v)) && strcmp(v + strspn(v, " "), want) == 0;
    }
    if (same)
        fail_msg("the rotation survived without the memory registry:\n%s", ts.out);
    es_proc_result_free(&ts);
}

/* What does not fit is refused before anything moves: EST 1 migrated onto
 * the small GPU first, then ESTs 2 and 3 time-sliced there beside it. */
static void test_timeslice_refused_when_it_cannot_fit(void **state)
{
    (void)state;
    es_proc_result_t r;
    char got[128], sched[128];
    const char *want = g_want;
    write_schedule(sched, sizeof(sched), "step 15 migrate 1 2\nstep 21 timeslice 2 2,3\n");
    ctl_run("0,1", sched, NULL, &r);
    unlink(sched);
    /* the event failed (exit 1), with the reason; the job itself finished */
    assert_int_equal(r.status, 1);
    if (!strstr(r.out, "timeslice refused: GPU 2 has 0.03 GiB; one EST of 0.02 GiB at a time "
                       "beside the 1 other there would not fit; nothing moved"))
        fail_msg("no refusal that names the memory (output: %s)", keep(&r, "refused"));
    assert_int_equal(parks_of(r.out, 2) + parks_of(r.out, 3), 0);
    checksum4(&r, got, sizeof(got));
    assert_string_equal(got, want);
    assert_int_equal(count(r.out, "] checksum"), 4);
    es_proc_result_free(&r);
}

int main(void)
{
    unsetenv("CUDA_VISIBLE_DEVICES");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timeslice_running_job),
        cmocka_unit_test(test_timeslice_all_four),
        cmocka_unit_test(test_timeslice_without_registry_breaks),
        cmocka_unit_test(test_timeslice_refused_when_it_cannot_fit),
    };
    return cmocka_run_group_tests(tests, run_reference, NULL);
}
