/* Moving ESTs of a multi-rank job (docs/MOVING.md): examples/train.py with
 * four ESTs that meet in the virtual collectives, under easyscale-ctl.
 *
 * - d1, two A100s: ESTs migrated between the GPUs and swapped out and back
 *   at random steps (the controller's schedule): every rank prints the
 *   checksum of the run without moves.
 * - d2, an A100, an H100 and a T4: the same across models (the a100 <->
 *   h100 and t4 pairs): the checksum of the run without moves.
 * - Time-slicing: the four ESTs on one GPU whose memory holds only one of
 *   them (EASYSCALE_TIME_SLICE=on), 8 gradient buckets a step: they take
 *   turns, one a step each (their collectives kept until they yield); the
 *   checksum of the four ESTs each on its own GPU, also with SIMCUDA_CHAOS,
 *   with one EST resident at a time and with two (EASYSCALE_TIME_SLICE=
 *   overlap, a GPU that holds two): the slot's peak is one or two ESTs.
 * - Scale events, d2 on an A100, an A100, an H100 and a T4: `scale` lines
 *   of the schedule take the job from 4 GPUs to 2, 1 and 3; the controller
 *   daemon is killed with SIGKILL between the second and the third, `run`
 *   starts another, which re-learns the job from the ESTs' registrations,
 *   and the third scale happens on it: every rank prints the checksum of
 *   the job that stayed on its 4 GPUs.
 * - The NCCL carriers (EASYSCALE_COLL_TRANSPORT=nccl) with moves on: the
 *   same moves on two A100s, and scale events 4 -> 2 -> 1 -> 3 GPUs, d1:
 *   the checksum of the run without moves, every rank on the nccl
 *   transport, set up again after the scheduled steps (negative control:
 *   the same moves without the memory registry break the run).
 * Negative controls: the same moves without the memory registry
 * (EASYSCALE_MOVE=nomem) break the run, and so do the same scale events
 * and the same time-slicing;
 * the four ESTs on the small GPU without time-slicing run out of memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tests/harness.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TMO 300
/* Training steps (3 of the controller's steps each). The ESTs wait at
 * each scheduled step until its events are done, so the schedule happens
 * at its steps however fast the machine is, and the jobs can be short. */
#define STEPS "24"
/* A job asked to move while it runs: long enough to be asked mid-run (the
 * request comes once every EST is past collective 40, its hold about 25
 * collectives later: 3 a training step, 210 in all). */
#define LIVE_STEPS "70"

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

/* Whether the run ended well with each of the four ranks at checksum want
 * (what a negative control must not see). */
static int all_reach(const es_proc_result_t *r, const char *want)
{
    for (int k = 0; k < 4; k++) {
        char key[32], v[128];
        snprintf(key, sizeof(key), "[%d] checksum", k);
        if (r->status != 0 || !es_find_last(r->out, key, v, sizeof(v)) ||
            strcmp(v + strspn(v, " "), want) != 0)
            return 0;
    }
    return 1;
}

/* The argv of easyscale-ctl run --ests 4 with the trainer for steps
 * steps; sched NULL: no moves; sock NULL: the default socket. */
static void ctl_argv(char **argv, const char *gpus, const char *det, const char *sched,
                     const char *steps, const char *sock)
{
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
    if (sock) {
        argv[n++] = "--socket";
        argv[n++] = (char *)sock;
    }
    argv[n++] = "--progress";
    argv[n++] = "off";
    argv[n++] = "--shim";
    argv[n++] = (char *)es_build_path("lib/libeasyscale.so");
    argv[n++] = "--";
    argv[n++] = "python3";
    argv[n++] = (char *)es_root_path("examples/train.py");
    argv[n++] = "--steps";
    argv[n++] = (char *)steps;
    argv[n++] = "--log-every";
    argv[n++] = (char *)steps;
    argv[n++] = "--deterministic-kernels";
    argv[n] = NULL;
}

static void ctl_run_steps(const char *devices, const char *gpus, const char *det,
                          const char *sched, const char *more, const char *steps,
                          es_proc_result_t *r)
{
    char dev_env[128];
    snprintf(dev_env, sizeof(dev_env), "SIMCUDA_DEVICES=%s", devices);
    char *argv[32];
    ctl_argv(argv, gpus, det, sched, steps, NULL);
    char *env[] = { dev_env, "EASYSCALE_HEARTBEAT_MS=100", "EASYSCALE_LOG=warn",
                    (char *)more, NULL };
    assert_int_equal(es_run(argv, env, TMO, r), 0);
}

static void ctl_run(const char *devices, const char *gpus, const char *det, const char *sched,
                    const char *more, es_proc_result_t *r)
{
    ctl_run_steps(devices, gpus, det, sched, more, STEPS, r);
}

/* The checksum of the job without moves on devices/gpus at det for steps
 * (into want): run once per configuration, shared by the tests. */
static void ref_checksum(const char *devices, const char *gpus, const char *det,
                         const char *steps, char *want, size_t len)
{
    static struct {
        char key[160], ck[128];
    } cache[8];
    static int n;
    char key[160];
    snprintf(key, sizeof(key), "%s|%s|%s|%s", devices, gpus, det, steps);
    for (int i = 0; i < n; i++)
        if (strcmp(cache[i].key, key) == 0) {
            snprintf(want, len, "%s", cache[i].ck);
            return;
        }
    es_proc_result_t ref;
    ctl_run_steps(devices, gpus, det, NULL, NULL, steps, &ref);
    if (ref.status != 0)
        fail_msg("the run without moves failed (%d):\n%s", ref.status, ref.out);
    checksum4(&ref, "[%d] checksum", want, len);
    es_proc_result_free(&ref);
    if (n < 8) {
        snprintf(cache[n].key, sizeof(cache[n].key), "%s", key);
        snprintf(cache[n].ck, sizeof(cache[n].ck), "%s", want);
        n++;
    }
}

/* A schedule of moves at random steps (the controller counts 3 all-reduces
 * a training step; every move early enough to land within the training);
 * a swap-in at its swap-out's step (the ESTs wait there for both). */
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
            fprintf(f, "step %d %s\n", at, moves[i]); /* right after the swap-out */
            continue;
        }
        at += 3 + rand() % 8; /* 6 moves: by step 60 of 72 */
        fprintf(f, "step %d %s\n", at, moves[i]);
    }
    fclose(f);
    print_message("schedule (seed %u): moves up to controller step %d of %d\n", seed, at,
                  3 * atoi(STEPS));
}

/* The schedule's events the controller said it did ("... done in ..."). */
static int events_done(const char *out)
{
    int done = 0;
    for (const char *p = out; (p = strstr(p, "easyscale-ctl: schedule: ")) != NULL; p++)
        done += strstr(p, "done in") && strstr(p, "done in") < strchr(p, '\n');
    return done;
}

static void moved_run(const char *devices, const char *gpus, const char *det,
                      const char *const *moves, int n)
{
    es_proc_result_t mv;
    char want[128], got[128], sched[128];
    ref_checksum(devices, gpus, det, STEPS, want, sizeof(want));
    write_schedule(sched, sizeof(sched), moves, n, (unsigned)time(NULL));
    ctl_run(devices, gpus, det, sched, NULL, &mv);
    unlink(sched);
    int done = events_done(mv.out);
    if (mv.status != 0 || done != n) /* the whole output first: a failure message is cut short */
        fprintf(stderr, "---- the moved run (exit %d) ----\n%s\n----\n", mv.status, mv.out);
    if (mv.status != 0)
        fail_msg("the moved run failed (%d)", mv.status);
    if (done != n)
        fail_msg("%d of %d moves done", done, n);
    checksum4(&mv, "[%d] checksum", got, sizeof(got));
    assert_string_equal(got, want);
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
    es_proc_result_t mv;
    char want[128];
    ref_checksum("a100:2G,a100:2G", "0,1", "d1", STEPS, want, sizeof(want));
    write_schedule(sched, sizeof(sched), moves, 3, 1);
    ctl_run("a100:2G,a100:2G", "0,1", "d1", sched, "EASYSCALE_MOVE=nomem", &mv);
    unlink(sched);
    if (all_reach(&mv, want))
        fail_msg("the run survived moves without the memory registry:\n%s", mv.out);
    es_proc_result_free(&mv);
}

/* ---- the NCCL carriers while ESTs move ----------------------------------------------
 * EASYSCALE_COLL_TRANSPORT=nccl with moves on: the carriers and the device
 * staging are taken down at each scheduled step and set up again where
 * the ESTs are then (docs/COLLECTIVES.md). */

/* The job over the nccl transport at d1 with schedule lines `lines`, one
 * more assignment (NULL: none), its result in r. */
static void nccl_job(const char *devices, const char *gpus, const char *const *lines, int n,
                     const char *more, es_proc_result_t *r)
{
    char sched[128], dev_env[128];
    snprintf(sched, sizeof(sched), "/tmp/es-ests-nccl-%d", (int)getpid());
    FILE *f = fopen(sched, "w");
    assert_non_null(f);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s\n", lines[i]);
    fclose(f);
    snprintf(dev_env, sizeof(dev_env), "SIMCUDA_DEVICES=%s", devices);
    char *argv[32];
    ctl_argv(argv, gpus, "d1", sched, STEPS, NULL);
    char *env[] = { dev_env, "EASYSCALE_HEARTBEAT_MS=100", "EASYSCALE_LOG=info",
                    "EASYSCALE_COLL_TRANSPORT=nccl", (char *)more, NULL };
    assert_int_equal(es_run(argv, env, TMO, r), 0);
    unlink(sched);
}

/* The job over the nccl transport with schedule lines sched_lines, on
 * devices/gpus at d1 for STEPS: the checksum of the job without moves (on
 * the same GPUs, the host transport: the same bits by definition). */
static void nccl_moved_run(const char *devices, const char *gpus, const char *const *lines,
                           int n)
{
    char want[128], got[128];
    ref_checksum(devices, gpus, "d1", STEPS, want, sizeof(want));
    es_proc_result_t mv;
    nccl_job(devices, gpus, lines, n, NULL, &mv);
    int done = events_done(mv.out);
    int set_up = es_count(mv.out, "nccl transport, chunk");
    int again = es_count(mv.out, "nccl transport set up again after a hold");
    if (mv.status != 0 || done != n || set_up != 4 || again < 1 ||
        strstr(mv.out, "is not possible")) {
        /* the whole output first: a failure message is cut short */
        fprintf(stderr, "---- the run (exit %d) ----\n%s\n----\n", mv.status, mv.out);
        fail_msg("exit %d, %d of %d events done, %d ranks on the nccl transport, set up again "
                 "%d times (output above)", mv.status, done, n, set_up, again);
    }
    checksum4(&mv, "[%d] checksum", got, sizeof(got));
    assert_string_equal(got, want);
    es_proc_result_free(&mv);
}

static void test_nccl_moves(void **state)
{
    (void)state;
    const char *lines[] = { "step 9 migrate 0 1", "step 21 swap-out 2", "step 21 swap-in 2 0",
                            "step 33 migrate 3 0", "step 45 migrate 1 0" };
    nccl_moved_run("a100:2G,a100:2G", "0,1", lines, 5);
}

/* Negative control: the same moves over nccl with the memory registry off
 * (EASYSCALE_MOVE=nomem) do not reach the checksum. */
static void test_nccl_moves_without_registry_break(void **state)
{
    (void)state;
    const char *lines[] = { "step 9 migrate 0 1", "step 21 swap-out 2", "step 21 swap-in 2 0" };
    char want[128];
    ref_checksum("a100:2G,a100:2G", "0,1", "d1", STEPS, want, sizeof(want));
    es_proc_result_t mv;
    nccl_job("a100:2G,a100:2G", "0,1", lines, 3, "EASYSCALE_MOVE=nomem", &mv);
    if (all_reach(&mv, want))
        fail_msg("the nccl run survived moves without the memory registry:\n%.2000s", mv.out);
    es_proc_result_free(&mv);
}

/* 4 GPUs -> 2 -> 1 (no carrier communicator: one GPU) -> 3. */
static void test_nccl_scale(void **state)
{
    (void)state;
    const char *lines[] = { "step 9 scale 0,2", "step 24 scale 3", "step 39 scale 0,1,3" };
    nccl_moved_run("a100:2G,a100:2G,a100:2G,a100:2G", "0-3", lines, 3);
}

/* ---- scale events and a controller restart ------------------------------------------ */

/* d2 on two A100s, an H100 and a T4. */
#define SCALE_DEVICES "a100:2G,a100:2G,h100:2G,t4:2G"
#define SCALE_STEPS "30"
/* Controller steps (3 all-reduces a training step, 90 in all): 4 -> 2 (an
 * A100 and the H100), -> 1 (the T4), -> 3 (both A100s and the T4). The
 * controller is killed once the second has been done; the third comes 10
 * training steps later (the 4 ESTs on the one T4 at d2: seconds), time
 * for the kill (the ESTs wait at its step until the restarted controller
 * has re-learned them and done it). */
static const char *const scale_events[] = { "step 15 scale 0,2", "step 30 scale 3",
                                            "step 60 scale 0,1,3" };

static void write_scale_schedule(char *path, size_t len)
{
    snprintf(path, len, "/tmp/es-ests-scale-%d", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 3; i++)
        fprintf(f, "%s\n", scale_events[i]);
    fclose(f);
}

static void msleep(int ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* The line of out that starts with the schedule's answer to event i, or
 * NULL: "easyscale-ctl: schedule: step 45 scale 0,2: ..." */
static const char *event_line(const char *out, int i)
{
    char key[128];
    snprintf(key, sizeof(key), "easyscale-ctl: schedule: %s: ", scale_events[i]);
    return strstr(out, key);
}

static int event_done(const char *out, int i)
{
    const char *l = event_line(out, i);
    const char *nl = l ? strchr(l, '\n') : NULL;
    const char *d = l ? strstr(l, ": done in ") : NULL;
    return d && nl && d < nl;
}

/* argv started in its own process group with envs (NULL-terminated
 * assignments) added, its output in the file outp; its pid. */
static pid_t bg_job(char *const *argv, char *const *envs, const char *outp)
{
    int fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    pid_t job = fork();
    assert_true(job >= 0);
    if (job == 0) {
        setpgid(0, 0);
        for (int i = 0; envs[i]; i++)
            putenv(envs[i]);
        dup2(fd, 1);
        dup2(fd, 2);
        int nul = open("/dev/null", O_RDONLY);
        dup2(nul, 0);
        execv(argv[0], argv);
        _exit(127);
    }
    setpgid(job, job);
    close(fd);
    return job;
}

/* 1 with its exit status (128 + signal when killed) once job has ended. */
static int bg_ended(pid_t job, int *st)
{
    int w;
    if (waitpid(job, &w, WNOHANG) != job)
        return 0;
    *st = WIFEXITED(w) ? WEXITSTATUS(w) : 128 + WTERMSIG(w);
    return 1;
}

/* status --json of the job at sock (NULL when it does not answer; the
 * caller frees it). */
static char *status_of(const char *sock)
{
    char *argv[] = { (char *)es_build_path("bin/easyscale-ctl"), "status", "--json", "--socket",
                     (char *)sock, NULL };
    es_proc_result_t r;
    if (es_run(argv, NULL, 30, &r) != 0)
        return NULL;
    if (r.status != 0) {
        es_proc_result_free(&r);
        return NULL;
    }
    return r.out; /* es_proc_result_free frees only out */
}

/* The daemon's pid from status --json of the job at sock, or -1. */
static long daemon_pid(const char *sock)
{
    char *j = status_of(sock);
    const char *p = j ? strstr(j, "\"daemon_pid\":") : NULL;
    long pid = p ? strtol(p + 13, NULL, 10) : -1;
    free(j);
    return pid;
}

/* The least step of the 4 ESTs of the job at sock (status --json), or -1
 * while not all of them are registered. */
static long least_step(const char *sock)
{
    char *j = status_of(sock);
    long least = -1;
    int n = 0;
    for (const char *p = j ? j : ""; (p = strstr(p, ",\"step\":")) != NULL; p++, n++) {
        long v = strtol(p + 8, NULL, 10);
        if (least < 0 || v < least)
            least = v;
    }
    free(j);
    return n == 4 ? least : -1;
}

/* The trainer over the nccl transport, d1, 4 ESTs on two GPUs, no
 * schedule; once every EST is past step 40, `easyscale-ctl migrate 1 --gpu
 * 1` while it runs (its answer in mig), then the job to its end (job).
 * more: one more assignment for the ESTs (NULL none). */
/* The job of LIVE_STEPS over the nccl transport (assignment `more`, NULL:
 * none) in the background; once every EST passed step 40, the controller
 * command ask (its argv after the program, ending with NULL: the socket
 * is added) runs, its result in mig. */
static void nccl_live_ask(const char *more, const char *const *ask, es_proc_result_t *job_r,
                          es_proc_result_t *mig)
{
    char sock[128], outp[128];
    snprintf(sock, sizeof(sock), "/tmp/es-ests-live-%d.sock", (int)getpid());
    snprintf(outp, sizeof(outp), "/tmp/es-ests-live-%d.out", (int)getpid());
    char *argv[40];
    ctl_argv(argv, "0,1", "d1", NULL, LIVE_STEPS, sock);
    char *envs[] = { "SIMCUDA_DEVICES=a100:2G,a100:2G", "EASYSCALE_HEARTBEAT_MS=100",
                     "EASYSCALE_LOG=info", "EASYSCALE_COLL_TRANSPORT=nccl", (char *)more, NULL };
    pid_t job = bg_job(argv, envs, outp);
    memset(mig, 0, sizeof(*mig));
    int st = -1, ended = 0, asked = 0;
    for (int i = 0; i < TMO * 20 && !ended; i++) {
        if ((ended = bg_ended(job, &st)) != 0)
            break;
        long least;
        if (!asked && (least = least_step(sock)) > 40) {
            print_message("asked \"%s\" with every EST past step %ld\n", ask[0], least);
            char *mv[16];
            int k = 0;
            mv[k++] = (char *)es_build_path("bin/easyscale-ctl");
            for (int a = 0; ask[a] && k < 12; a++)
                mv[k++] = (char *)ask[a];
            mv[k++] = "--socket";
            mv[k++] = sock;
            mv[k] = NULL;
            assert_int_equal(es_run(mv, NULL, TMO, mig), 0);
            asked = 1;
        }
        msleep(50);
    }
    if (!ended) {
        kill(-job, SIGKILL);
        waitpid(job, NULL, 0);
    }
    kill(-job, SIGKILL); /* anything left behind */
    size_t len;
    char *out = es_read_file(outp, &len);
    assert_non_null(out);
    unlink(outp);
    job_r->status = ended ? st : -1;
    job_r->out = out;
    if (!asked)
        fail_msg("the job ended (status %d) before \"%s\" could be asked:\n%s", st, ask[0],
                 out);
}

/* The request ask made while the job runs over the nccl transport: the
 * controller's answer says it was made at a hold of every EST, the job's
 * output holds said and said2 (NULL: none), every rank prints the
 * checksum of the run without moves. Negative control: the same without
 * the memory registry does not reach it. */
static void live_request_run(const char *const *ask, const char *said, const char *said2)
{
    char want[128], got[128];
    ref_checksum("a100:2G,a100:2G", "0,1", "d1", LIVE_STEPS, want, sizeof(want));
    es_proc_result_t job, rq;
    nccl_live_ask(NULL, ask, &job, &rq);
    const char *at = strstr(rq.out, "(at a hold of every EST at collective ");
    if (at)
        print_message("%.80s\n", at);
    if (rq.status != 0 || !strstr(rq.out, "(at a hold of every EST at collective ") ||
        job.status != 0 || !strstr(job.out, said) || (said2 && !strstr(job.out, said2)))
        fail_msg("%s: status %d:\n%s\nthe job: status %d:\n%s", ask[0], rq.status, rq.out,
                 job.status, job.out);
    checksum4(&job, "[%d] checksum", got, sizeof(got));
    assert_string_equal(got, want);
    es_proc_result_free(&job);
    es_proc_result_free(&rq);
    nccl_live_ask("EASYSCALE_MOVE=nomem", ask, &job, &rq);
    if (all_reach(&job, want))
        fail_msg("\"%s\" at run time without the memory registry reached the checksum:\n%s",
                 ask[0], job.out);
    es_proc_result_free(&job);
    es_proc_result_free(&rq);
}

/* A move asked for while the job runs (no schedule) over the nccl
 * transport: the EST refuses it at first (the staging is device memory the
 * other ESTs map), the controller sets a hold of every EST at a collective
 * they agree on and makes the move there, the carriers are set up again
 * where the ESTs are then: the checksum of the run without moves.
 * Negative control: the same without the memory registry does not reach
 * it. */
static void test_nccl_move_at_run_time(void **state)
{
    (void)state;
    static const char *const ask[] = { "migrate", "1", "--gpu", "1", NULL };
    live_request_run(ask, "nccl transport set up again after a hold", NULL);
}

/* A rotation asked for while the job runs over the nccl transport: the
 * ESTs refuse it at first (their turns are moves, and the staging is
 * device memory the others map), the controller sets a hold of every EST
 * and asks again there; the rotation starts at the hold, where the
 * staging is down, and every communicator comes back on the host
 * transport (a time-sliced EST cannot keep device staging): the checksum
 * of the run without moves. Negative control: the same without the memory
 * registry does not reach it. */
static void test_nccl_timeslice_at_run_time(void **state)
{
    (void)state;
    static const char *const ask[] = { "timeslice", "1", "--ranks", "1,3", NULL };
    live_request_run(ask, "an EST is time-sliced: host transport from here on",
                     "time-sliced on device");
}

static void test_scale_d2_controller_restart(void **state)
{
    (void)state;
    char want[128], got[128], sched[128], sock[128], outp[128];
    ref_checksum(SCALE_DEVICES, "0-3", "d2", SCALE_STEPS, want, sizeof(want));

    /* the scaled run in the background, its output in a file */
    write_scale_schedule(sched, sizeof(sched));
    snprintf(sock, sizeof(sock), "/tmp/es-ests-scale-%d.sock", (int)getpid());
    snprintf(outp, sizeof(outp), "/tmp/es-ests-scale-%d.out", (int)getpid());
    char *argv[40];
    ctl_argv(argv, "0-3", "d2", sched, SCALE_STEPS, sock);
    char *envs[] = { "SIMCUDA_DEVICES=" SCALE_DEVICES, "EASYSCALE_HEARTBEAT_MS=100",
                     "EASYSCALE_LOG=warn", NULL };
    pid_t job = bg_job(argv, envs, outp);

    /* once the second scale is done: SIGKILL to the daemon */
    long killed = -1;
    int st = -1, ended = 0;
    char *out = NULL;
    size_t len;
    for (int i = 0; i < TMO * 20 && !ended; i++) {
        if ((ended = bg_ended(job, &st)) != 0)
            break;
        if (killed < 0) {
            free(out);
            out = es_read_file(outp, &len);
            if (out && event_done(out, 1)) {
                killed = daemon_pid(sock);
                if (killed <= 0 || kill((pid_t)killed, SIGKILL) != 0) {
                    kill(-job, SIGKILL);
                    waitpid(job, NULL, 0);
                    unlink(outp);
                    unlink(sched);
                    fail_msg("no daemon to kill (%ld):\n%s", killed, out);
                }
                print_message("killed the controller (pid %ld) after \"%s\"\n", killed,
                              scale_events[1]);
            }
        }
        msleep(50);
    }
    if (!ended) {
        kill(-job, SIGKILL);
        waitpid(job, NULL, 0);
    }
    kill(-job, SIGKILL); /* anything left behind */
    free(out);
    out = es_read_file(outp, &len); /* kept when the test fails */
    unlink(sched);
    assert_non_null(out);
    if (!ended || st != 0 || killed < 0)
        fail_msg("the scaled run %s (status %d, controller killed: %s; its output: %s):\n%s",
                 ended ? "failed" : "timed out", st, killed > 0 ? "yes" : "no", outp, out);
    /* every scale done; the third after the new daemon started */
    for (int i = 0; i < 3; i++)
        if (!event_done(out, i))
            fail_msg("\"%s\" was not done (output: %s):\n%s", scale_events[i], outp, out);
    char restart[96];
    snprintf(restart, sizeof(restart), "the controller (pid %ld) was killed by signal 9; started "
             "a new one", killed);
    const char *rs = strstr(out, restart);
    if (!rs || rs > event_line(out, 2) || rs < event_line(out, 1))
        fail_msg("no restart between the second and third scale (output: %s):\n%s", outp, out);
    /* the placements: the last scale left the job on GPUs 0,1,3 */
    if (!strstr(event_line(out, 2), "the job runs on GPUs 0,1,3"))
        fail_msg("the third scale did not leave the job on GPUs 0,1,3 (output: %s)", outp);
    checksum4(&(es_proc_result_t){ .out = out }, "[%d] checksum", got, sizeof(got));
    if (strcmp(got, want) != 0)
        fail_msg("checksum %s, not the 4-GPU run's %s (output: %s)", got, want, outp);
    unlink(outp);
    free(out);
}

/* Negative control: the same scale events without the memory registry. */
static void test_scale_without_registry_breaks(void **state)
{
    (void)state;
    es_proc_result_t mv;
    char want[128], sched[128];
    ref_checksum(SCALE_DEVICES, "0-3", "d2", SCALE_STEPS, want, sizeof(want));
    write_scale_schedule(sched, sizeof(sched));
    ctl_run_steps(SCALE_DEVICES, "0-3", "d2", sched, "EASYSCALE_MOVE=nomem", SCALE_STEPS, &mv);
    unlink(sched);
    if (all_reach(&mv, want))
        fail_msg("the run survived scale events without the memory registry:\n%s", mv.out);
    es_proc_result_free(&mv);
}

/* ---- time-slicing ------------------------------------------------------------------- */

/* scripts/launch -n 4 with the trainer: TS_STEPS steps of 8 gradient buckets
 * (8 all-reduces a step). */
#define TS_STEPS 12
#define STR_(x) #x
#define STR(x) STR_(x)
static void launch_run(const char *devices, const char *more, const char *more2,
                       es_proc_result_t *r)
{
    char dev_env[128];
    snprintf(dev_env, sizeof(dev_env), "SIMCUDA_DEVICES=%s", devices);
    char *argv[] = { "python3", (char *)es_root_path("scripts/launch"), "-n", "4", "--",
                     "python3", (char *)es_root_path("examples/train.py"), "--steps",
                     STR(TS_STEPS),
                     "--log-every", "20", "--deterministic-kernels", "--buckets", "8", NULL };
    char *env[] = { preload, dev_env, "EASYSCALE_DETERMINISM=d1", "EASYSCALE_LOG=info",
                    (char *)more, (char *)more2, NULL };
    if (!more)
        env[4] = NULL;
    assert_int_equal(es_run(argv, env, TMO, r), 0);
}

/* One GPU of 32 MiB holds one EST of the trainer (22 MiB, and what it
 * allocates for a while at times) and not two. */
#define SMALL_GPU "a100:32M"

/* The 4-GPU checksum (want): run once, shared by the tests. */
static void own_checksum(char *want, size_t len)
{
    static char own_ck[128];
    if (own_ck[0]) {
        snprintf(want, len, "%s", own_ck);
        return;
    }
    es_proc_result_t own;
    launch_run("a100:2G,a100:2G,a100:2G,a100:2G", NULL, NULL, &own);
    if (own.status != 0)
        fail_msg("four ESTs on four GPUs failed (%d):\n%s", own.status, own.out);
    checksum4(&own, "checksum", want, len);
    snprintf(own_ck, sizeof(own_ck), "%s", want);
    es_proc_result_free(&own);
}

/* The number of "checksum X" lines equal to want (and none different). */
static int checksums_equal(const char *out, const char *want)
{
    int n = 0;
    for (const char *p = out; (p = strstr(p, "\nchecksum ")) != NULL; p++) {
        char v[128];
        if (sscanf(p + 10, "%127s", v) != 1 || strcmp(v, want) != 0)
            return -1;
        n++;
    }
    return n;
}

/* Every rank's yields (the shim's figures at exit): each within
 * [TS_STEPS, TS_STEPS + 8] -- one a step, plus a few outside the training
 * loop (the communicator's rendezvous, the first forward after the
 * broadcast, the statistics, the evaluation, the digests' all-gather).
 * Yielding at every collective would be 8 a step. */
static void check_yields(const char *out)
{
    int n = 0;
    for (const char *p = out; (p = strstr(p, "time-slicing: slot ")) != NULL; p++) {
        int slot;
        unsigned long long y;
        if (sscanf(p, "time-slicing: slot %d: %llu yields", &slot, &y) != 2)
            continue;
        print_message("time-sliced rank: %llu yields in %d steps of 8 all-reduces\n", y,
                      TS_STEPS);
        if (y < TS_STEPS || y > TS_STEPS + 8)
            fail_msg("%llu yields in %d steps (want one a step, not one a collective)", y,
                     TS_STEPS);
        n++;
    }
    assert_int_equal(n, 4);
}

/* One GPU of 56 MiB holds two ESTs and not three (overlap mode). */
#define TWO_GPU "a100:56M"

static void ts_run_same(const char *want, const char *gpu, const char *mode, const char *more,
                        const char *what)
{
    es_proc_result_t ts;
    launch_run(gpu, mode, more, &ts);
    if (ts.status != 0)
        fail_msg("four ESTs time-sliced on one GPU (%s) failed (%d):\n%s", what, ts.status,
                 ts.out);
    int n = checksums_equal(ts.out, want);
    if (n != 4)
        fail_msg("time-sliced (%s): %d checksum(s) equal to the 4-GPU one %s (want 4)\n%s", what,
                 n, want, ts.out);
    check_yields(ts.out);
    /* the slot's peak: one footprint (on), two (overlap) */
    const char *pk = strstr(ts.out, "slot peak ");
    unsigned long long peak = 0;
    if (!pk || sscanf(pk, "slot peak %llu", &peak) != 1)
        fail_msg("no slot peak printed (%s)", what);
    unsigned long long est = 22ull << 20, want_n = strstr(mode, "overlap") ? 2 : 1;
    print_message("%s: slot peak %.1f MiB\n", what, peak / 1048576.0);
    if (peak < want_n * est - (2ull << 20) || peak > want_n * est + (4ull << 20))
        fail_msg("%s: slot peak %llu bytes, want about %llu footprint(s) of 22 MiB", what, peak,
                 want_n);
    es_proc_result_free(&ts);
}

/* Each rank's swap-ins kept memory on the slot (EASYSCALE_TIME_SLICE_KEEP
 * of keep_mib): something, never more than keep_mib a swap-in. */
static void check_kept(const char *out, unsigned long long keep_mib)
{
    int n = 0;
    for (const char *p = out; (p = strstr(p, "time-slicing: slot ")) != NULL; p++) {
        const char *q = strstr(p, " swap-ins (");
        unsigned long long si = 0, in = 0, kept = 0;
        const char *b = q;
        while (b && b > p && b[-1] != ' ')
            b--;
        if (!q || sscanf(b, "%llu swap-ins (%llu bytes copied, %llu kept)", &si, &in, &kept) != 3)
            fail_msg("no swap-in figures: %.200s", p);
        print_message("kept: %llu swap-ins, %.1f MiB copied in, %.1f MiB kept\n", si,
                      in / 1048576.0, kept / 1048576.0);
        if (kept == 0 || kept > si * (keep_mib << 20))
            fail_msg("%llu bytes kept over %llu swap-ins (EASYSCALE_TIME_SLICE_KEEP=%llu)", kept,
                     si, keep_mib);
        n++;
    }
    assert_int_equal(n, 4);
}

/* One resident and, parked, 8 MiB of each EST kept: on a GPU of 64 MiB the
 * same checksum, and each swap-in copies less than the EST's memory; on the
 * small GPU (no room for what they keep) the same checksum, after a warning
 * that none keeps any more. */
static void ts_run_keep(const char *want, const char *gpu, int room, const char *what)
{
    es_proc_result_t ts;
    launch_run(gpu, "EASYSCALE_TIME_SLICE=on", "EASYSCALE_TIME_SLICE_KEEP=8", &ts);
    if (ts.status != 0)
        fail_msg("four ESTs time-sliced (%s) failed (%d):\n%s", what, ts.status, ts.out);
    int n = checksums_equal(ts.out, want);
    if (n != 4)
        fail_msg("time-sliced (%s): %d checksum(s) equal to the 4-GPU one %s (want 4)\n%s", what,
                 n, want, ts.out);
    check_yields(ts.out);
    int warned = strstr(ts.out, "EASYSCALE_TIME_SLICE_KEEP is too large") != NULL;
    if (room) {
        check_kept(ts.out, 8);
        if (warned)
            fail_msg("%s: kept memory said to be too large:\n%s", what, ts.out);
    } else if (!warned) {
        fail_msg("%s: no warning that the kept memory does not fit:\n%s", what, ts.out);
    }
    es_proc_result_free(&ts);
}

static void test_time_slicing_four_on_one(void **state)
{
    (void)state;
    char want[128];
    own_checksum(want, sizeof(want));
    ts_run_same(want, SMALL_GPU, "EASYSCALE_TIME_SLICE=on", NULL, "one resident");
    /* independent streams run in an adversarial order (simcuda) */
    ts_run_same(want, SMALL_GPU, "EASYSCALE_TIME_SLICE=on", "SIMCUDA_CHAOS=7",
                "one resident, SIMCUDA_CHAOS=7");
    /* two footprints: the next one's memory back while the holder runs */
    ts_run_same(want, TWO_GPU, "EASYSCALE_TIME_SLICE=overlap", NULL, "two resident");
    ts_run_same(want, TWO_GPU, "EASYSCALE_TIME_SLICE=overlap", "SIMCUDA_CHAOS=7",
                "two resident, SIMCUDA_CHAOS=7");
    /* parked ESTs keeping part of their memory on the slot */
    ts_run_keep(want, "a100:64M", 1, "one resident, 8 MiB of each kept");
    ts_run_keep(want, SMALL_GPU, 0, "one resident, 8 MiB of each kept, no room for it");
}

/* Negative control: the same, in both modes, without the memory registry
 * (EASYSCALE_MOVE=nomem: memory stays the driver's and does not survive a
 * park): the run fails, or its checksums differ. */
static void test_time_slicing_without_registry_breaks(void **state)
{
    (void)state;
    char want[128];
    own_checksum(want, sizeof(want));
    static const char *const gpu[2] = { SMALL_GPU, TWO_GPU };
    static const char *const mode[2] = { "EASYSCALE_TIME_SLICE=on",
                                         "EASYSCALE_TIME_SLICE=overlap" };
    for (int m = 0; m < 2; m++) { /* one resident, two */
        es_proc_result_t ts;
        launch_run(gpu[m], mode[m], "EASYSCALE_MOVE=nomem", &ts);
        if (ts.status == 0 && checksums_equal(ts.out, want) == 4)
            fail_msg("%s without the registry gave the 4-GPU checksum:\n%s", mode[m], ts.out);
        es_proc_result_free(&ts);
    }
}

/* Negative control: the same four ESTs on the small GPU without
 * time-slicing: no room for the second one (the failure names the memory
 * that was missing; the full output is not shown, fail_msg truncates). */
static void test_four_on_one_without_slicing_fail(void **state)
{
    (void)state;
    es_proc_result_t r;
    launch_run(SMALL_GPU, NULL, NULL, &r);
    if (r.status == 0)
        fail_msg("four ESTs fit on the small GPU without time-slicing:\n%s", r.out);
    /* the driver's answer, or cuBLAS's when its handle is the first to ask */
    if (strstr(r.out, "OUT_OF_MEMORY") == NULL && strstr(r.out, "ALLOC_FAILED") == NULL)
        fail_msg("the run failed, but not for want of memory:\n%s", r.out);
    es_proc_result_free(&r);
}

int main(void)
{
    es_preload_env(es_build_path("lib/libeasyscale.so"), preload, sizeof(preload));
    unsetenv("CUDA_VISIBLE_DEVICES");
    if (getenv("ESTS_TEST")) /* one test by name, when debugging */
        cmocka_set_test_filter(getenv("ESTS_TEST"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moves_d1),
        cmocka_unit_test(test_moves_d2_across_models),
        cmocka_unit_test(test_moves_without_registry_break),
        cmocka_unit_test(test_nccl_moves),
        cmocka_unit_test(test_nccl_scale),
        cmocka_unit_test(test_nccl_moves_without_registry_break),
        cmocka_unit_test(test_nccl_move_at_run_time),
        cmocka_unit_test(test_nccl_timeslice_at_run_time),
        cmocka_unit_test(test_scale_d2_controller_restart),
        cmocka_unit_test(test_scale_without_registry_breaks),
        cmocka_unit_test(test_time_slicing_four_on_one),
        cmocka_unit_test(test_time_slicing_without_registry_breaks),
        cmocka_unit_test(test_four_on_one_without_slicing_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
