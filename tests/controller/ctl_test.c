/* Integration tests of easyscale-ctl on simcuda (run under scripts/simenv):
 * whole processes with time limits. Jobs are either the real trainer
 * (examples/train.py, libeasyscale.so preloaded: the shim's control thread)
 * or stand-in ESTs (tests/controller/fake_est, which speak the protocol
 * themselves and answer moves as told, so the controller's scale paths run
 * before ESTs can really move).
 *
 *  - usage, --help of every command, exit codes (0 ok, 1 failed, 2 usage);
 *  - the GPUs as the controller's probe sees them;
 *  - run: every EST's variables (torchrun's, the slot, d2's canonical
 *    device, the shim preloaded), output prefixed with the rank, a failing
 *    EST named and the others stopped, signals and missing commands;
 *  - status --json on a training job: ranks, pids, steps that advance;
 *    the controller killed with SIGKILL mid-run: run restarts it, the ESTs
 *    register again, and the job ends with the checksum of an undisturbed
 *    run (negative control: another seed gives another checksum);
 *  - a restarted controller re-learns placement and epoch from the ESTs;
 *    the schedule waits for every EST's re-registration with it;
 *  - malformed, oversized and unknown frames close the connection with a
 *    log line and the daemon lives on; another uid is refused (when the
 *    tests run as root: a daemon running as nobody, connected to as root);
 *    two controllers cannot own one job;
 *  - scale refused before anything moves when memory cannot be met, with
 *    time-slicing allowed and without; scale/preempt/grant/migrate with
 *    ESTs that move (fake) and that cannot (the real shim: the reason is
 *    shown, exit 1, the job stays consistent); placement by speed (prior
 *    and measured);
 *  - status shows the ESTs' time-slicing figures (per EST and per GPU:
 *    resident, parked, bytes swapped) as their heartbeats carry them,
 *    also for a job the shim time-slices (EASYSCALE_TIME_SLICE=on: every
 *    EST on its one GPU, across a controller restart);
 *  - an EST that stops answering is reported, then recovers;
 *  - --schedule events at steps and times, failures reported;
 *  - TCP with the shared token; the default socket directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "controller/ctl.h"
#include "wire/proto.h"
#include "tests/harness.h"
#include "tests/controller/bgjob.h"

#define T_CMD 30  /* a CLI command */
#define T_JOB 120 /* a whole job */

static char g_tmp[256];
static pid_t g_daemon_as_nobody; /* killed by teardown if a test failed midway */
/* ---- helpers -------------------------------------------------------------------- */


static const char *ctl_bin(void)
{
    static char p[4096];
    snprintf(p, sizeof(p), "%s", es_build_path("bin/easyscale-ctl"));
    return p;
}

static const char *fake_bin(void)
{
    static char p[4096];
    snprintf(p, sizeof(p), "%s", es_build_path("tests/controller/fake_est"));
    return p;
}

/* easyscale-ctl ARGS... (NULL-terminated) with env; the result in *r. */
static int ctl(es_proc_result_t *r, char *const env[], ...)
{
    char *argv[64];
    int n = 0;
    va_list ap;
    argv[n++] = (char *)ctl_bin();
    va_start(ap, env);
    for (char *a; n < 63 && (a = va_arg(ap, char *)) != NULL;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    memset(r, 0, sizeof(*r));
    assert_int_equal(es_run(argv, env, T_CMD, r), 0);
    return r->status;
}

/* The integer after "key": in s (from the first occurrence), or def. */
static long jint(const char *s, const char *key, long def)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *p = s ? strstr(s, pat) : NULL;
    if (!p)
        return def;
    return strtol(p + strlen(pat), NULL, 10);
}

/* The object of EST r in a status JSON (a pointer into s), or NULL. */
static const char *jest(const char *s, int r)
{
    char pat[32];
    snprintf(pat, sizeof(pat), "{\"rank\":%d,", r);
    return s ? strstr(s, pat) : NULL;
}

/* The string after "key":" in the object at o, into buf. */
static const char *jstr(const char *o, const char *key, char *buf, size_t len)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\":\"", key);
    const char *p = o ? strstr(o, pat) : NULL;
    buf[0] = '\0';
    if (!p)
        return buf;
    p += strlen(pat);
    size_t n = strcspn(p, "\"");
    if (n >= len)
        n = len - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return buf;
}

/* status --json of the job at sock (malloc'ed), NULL when no answer. */
static char *status_json(const char *sock)
{
    es_proc_result_t r;
    ctl(&r, NULL, "status", "--json", "--socket", sock, NULL);
    if (r.status != 0) {
        es_proc_result_free(&r);
        return NULL;
    }
    return r.out;
}

/* Polls status until every one of n ESTs is registered (and, when
 * min_step > 0, each reports at least that step); returns the JSON. */
static char *wait_registered(const char *sock, int n, long min_step, int timeout_s)
{
    for (int i = 0; i < timeout_s * 10; i++) {
        char *j = status_json(sock);
        if (j && jint(j, "registered", -1) == n) {
            int ok = 1;
            for (int r = 0; r < n && min_step > 0; r++)
                if (jint(jest(j, r), "step", 0) < min_step)
                    ok = 0;
            if (ok)
                return j;
        }
        free(j);
        msleep(100);
    }
    fail_msg("the job at %s did not register %d ESTs within %d s", sock, n, timeout_s);
    return NULL;
}

static void sock_path(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s.sock", g_tmp, name);
}

/* A job of n fake ESTs: run ARGS... -- fake_est FAKEARGS... */
static void start_fake_job(bg_t *b, char *const env[], const char *sock, int n,
                           const char *const *run_args, const char *const *fake_args)
{
    char *argv[64], nb[16];
    int k = 0;
    snprintf(nb, sizeof(nb), "%d", n);
    argv[k++] = (char *)ctl_bin();
    argv[k++] = "run";
    argv[k++] = "--ests";
    argv[k++] = nb;
    argv[k++] = "--socket";
    argv[k++] = (char *)sock;
    argv[k++] = "--shim";
    argv[k++] = "none";
    argv[k++] = "--progress";
    argv[k++] = "off";
    for (int i = 0; run_args && run_args[i]; i++)
        argv[k++] = (char *)run_args[i];
    argv[k++] = "--";
    argv[k++] = (char *)fake_bin();
    for (int i = 0; fake_args && fake_args[i]; i++)
        argv[k++] = (char *)fake_args[i];
    static int useq;
    char until[300];
    snprintf(until, sizeof(until), "%s/until-%d", g_tmp, ++useq);
    unlink(until);
    argv[k++] = "--until";
    argv[k++] = until;
    argv[k] = NULL;
    bg_start(b, env, argv);
    snprintf(b->until, sizeof(b->until), "%s", until);
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

/* The UUIDs of the GPUs of SIMCUDA_DEVICES=devices, in ordinal order. */
static int gpu_uuids(const char *devices, char uuids[][48], int max)
{
    char envd[256];
    snprintf(envd, sizeof(envd), "SIMCUDA_DEVICES=%s", devices);
    char *env[] = { envd, NULL };
    es_proc_result_t r;
    ctl(&r, env, "gpus", "--json", NULL);
    assert_int_equal(r.status, 0);
    int n = 0;
    for (const char *p = r.out; n < max && (p = strstr(p, "\"uuid\":\"")) != NULL; n++) {
        p += 8;
        snprintf(uuids[n], 48, "%.*s", (int)strcspn(p, "\""), p);
    }
    es_proc_result_free(&r);
    return n;
}

/* ---- CLI ------------------------------------------------------------------------ */

static void test_usage(void **state)
{
    (void)state;
    es_proc_result_t r;
    char nojob[300];
    sock_path(nojob, sizeof(nojob), "nojob");
    assert_int_equal(ctl(&r, NULL, NULL), 2);
    assert_non_null(strstr(r.out, "usage: easyscale-ctl COMMAND"));
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "--help", NULL), 0);
    assert_non_null(strstr(r.out, "Exit status: 0 ok, 1"));
    es_proc_result_free(&r);
    static const char *const cmds[] = { "run", "status", "scale", "preempt", "grant",
                                        "swap-out", "swap-in", "migrate", "gpus", "daemon" };
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        char want[64];
        snprintf(want, sizeof(want), "usage: easyscale-ctl %s", cmds[i]);
        assert_int_equal(ctl(&r, NULL, cmds[i], "--help", NULL), 0);
        if (!strstr(r.out, want))
            fail_msg("%s --help: %s", cmds[i], r.out);
        es_proc_result_free(&r);
        assert_int_equal(ctl(&r, NULL, "help", cmds[i], NULL), 0);
        assert_non_null(strstr(r.out, want));
        es_proc_result_free(&r);
    }
    struct {
        const char *a[8];
        int want;
        const char *needle;
    } cases[] = {
        { { "frobnicate" }, 2, "unknown command" },
        { { "status", "--bogus" }, 2, "unknown or incomplete option" },
        { { "status", "extra" }, 2, "unexpected argument" },
        { { "status", "--socket" }, 2, "unknown or incomplete option" },
        { { "scale", "--socket", nojob }, 2, "needs --gpus" },
        { { "preempt" }, 2, "takes one GPU" },
        { { "migrate", "x", "--gpu", "1" }, 2, "bad RANK" },
        { { "migrate", "1" }, 2, "needs --gpu" },
        { { "swap-out", "--gpu", "1", "0" }, 2, "takes no --gpu" },
        { { "status", "--timeout", "0" }, 2, "bad --timeout" },
        { { "run", "--", "true" }, 2, "needs --ests" },
        { { "run", "--ests", "0", "--", "true" }, 2, "bad --ests" },
        { { "run", "--ests", "2" }, 2, "needs a command" },
        { { "run", "--ests", "2", "--determinism", "d3", "--", "true" }, 2, "bad --determinism" },
        { { "run", "--ests", "2", "--est-memory", "lots", "--", "true" }, 2, "bad --est-memory" },
        { { "run", "--ests", "1", "--gpus", "0,,1", "--", "true" }, 2, "bad GPU list" },
        { { "run", "--ests", "1", "--gpus", "x", "--", "true" }, 2, "bad GPU" },
        { { "run", "--ests", "1", "--gpus", "0,0", "--", "true" }, 2, "named twice" },
        { { "run", "--ests", "1", "--gpus", "9", "--", "true" }, 1, "no GPU 9" },
        { { "daemon" }, 2, "needs --socket" },
        { { "status", "--socket", nojob }, 1, "no controller at" },
        { { "migrate", "0", "--gpu", "1", "--socket", nojob }, 1, "no controller at" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *argv[12] = { (char *)ctl_bin() };
        int k = 1;
        for (int j = 0; j < 8 && cases[i].a[j]; j++)
            argv[k++] = (char *)cases[i].a[j];
        argv[k] = NULL;
        assert_int_equal(es_run(argv, NULL, T_CMD, &r), 0);
        if (r.status != cases[i].want || !strstr(r.out, cases[i].needle))
            fail_msg("case %zu (%s %s): status %d, output: %s", i, cases[i].a[0],
                     cases[i].a[1] ? cases[i].a[1] : "", r.status, r.out);
        es_proc_result_free(&r);
    }
    /* a schedule that does not parse stops run before anything starts */
    char sched[300];
    snprintf(sched, sizeof(sched), "%s/bad.sched", g_tmp);
    FILE *f = fopen(sched, "w");
    fputs("# comment\nstep 10 scale 0,1\nstep ten preempt 1\n", f);
    fclose(f);
    assert_int_equal(ctl(&r, NULL, "run", "--ests", "2", "--schedule", sched, "--", "true", NULL), 2);
    assert_non_null(strstr(r.out, "bad.sched:3:"));
    es_proc_result_free(&r);
}

static void test_gpus(void **state)
{
    (void)state;
    char *env[] = { "SIMCUDA_DEVICES=a100:8G,a10:16G,t4:4G", NULL };
    es_proc_result_t r;
    assert_int_equal(ctl(&r, env, "gpus", "--json", NULL), 0);
    assert_int_equal(count(r.out, "\"uuid\":\"GPU-"), 3);
    assert_non_null(strstr(r.out, "\"gpu\":0,"));
    assert_non_null(strstr(r.out, "\"model\":\"a100\",\"name\":\"NVIDIA A100-SXM4-40GB\","
                                  "\"memory\":8589934592,\"sms\":108"));
    assert_non_null(strstr(r.out, "\"model\":\"a10\",\"name\":\"NVIDIA A10\""));
    assert_non_null(strstr(r.out, "\"model\":\"t4\",\"name\":\"Tesla T4\",\"memory\":4294967296"));
    es_proc_result_free(&r);
    /* CUDA_VISIBLE_DEVICES is the driver's business: the probe follows it */
    char *env2[] = { "SIMCUDA_DEVICES=a100:8G,a10:16G,t4:4G", "CUDA_VISIBLE_DEVICES=2", NULL };
    assert_int_equal(ctl(&r, env2, "gpus", NULL), 0);
    assert_non_null(strstr(r.out, "Tesla T4"));
    assert_null(strstr(r.out, "A100"));
    es_proc_result_free(&r);
    /* no driver: one line, exit 1 */
    char *env3[] = { "LD_LIBRARY_PATH=/nonexistent", NULL };
    int st = ctl(&r, env3, "gpus", NULL);
    if (st != 0) { /* a machine with a real driver lists its GPUs instead */
        assert_int_equal(st, 1);
        assert_non_null(strstr(r.out, "libcuda.so.1"));
    }
    es_proc_result_free(&r);
}

/* ---- run ------------------------------------------------------------------------ */

static void test_run_env(void **state)
{
    (void)state;
    char uuids[4][48], sock[300];
    assert_int_equal(gpu_uuids("a100:8G,a10:16G,t4:16G", uuids, 4), 3);
    sock_path(sock, sizeof(sock), "env");
    char *env[] = { "SIMCUDA_DEVICES=a100:8G,a10:16G,t4:16G", "EASYSCALE_CANONICAL_DEVICE=",
                    NULL };
    const char *script =
        "echo \"E $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $EASYSCALE_SLOT "
        "$EASYSCALE_DETERMINISM $EASYSCALE_CANONICAL_DEVICE $EASYSCALE_CONTROL\"; "
        "echo \"M $MASTER_PORT\"; echo \"to stderr $RANK\" >&2; "
        "case \"$LD_PRELOAD\" in *libeasyscale.so*) echo \"P yes\";; *) echo \"P no\";; esac; "
        "test -d \"$ES_RDZV_DIR\" && echo \"R yes\"";
    es_proc_result_t r;
    assert_int_equal(ctl(&r, env, "run", "--ests", "3", "--gpus", "0-2", "--determinism", "d2",
                         "--socket", sock, "--progress", "off", "--", "sh", "-c", script, NULL),
                     0);
    /* prior speeds (SMs x clock): the A100 takes two ESTs, the A10 one,
     * the T4 none (two on the A100 beat one on the T4) */
    const char *slot[3] = { uuids[0], uuids[0], uuids[1] };
    for (int k = 0; k < 3; k++) {
        char want[600];
        snprintf(want, sizeof(want), "[%d] E %d 3 %d 3 127.0.0.1 %s d2 a100,a10,t4 %s\n", k, k, k,
                 slot[k], sock);
        if (!strstr(r.out, want))
            fail_msg("missing \"%s\" in:\n%s", want, r.out);
        snprintf(want, sizeof(want), "[%d] to stderr %d\n", k, k);
        assert_non_null(strstr(r.out, want));
        snprintf(want, sizeof(want), "[%d] P yes\n", k);
        assert_non_null(strstr(r.out, want));
        snprintf(want, sizeof(want), "[%d] R yes\n", k);
        assert_non_null(strstr(r.out, want));
    }
    /* one free port for all */
    const char *m0 = strstr(r.out, "[0] M "), *m2 = strstr(r.out, "[2] M ");
    assert_non_null(m0);
    assert_non_null(m2);
    long port = strtol(m0 + 6, NULL, 10);
    assert_true(port > 0 && port < 65536);
    assert_int_equal(port, strtol(m2 + 6, NULL, 10));
    assert_non_null(strstr(r.out, "the job completed"));
    /* run removed the job's files */
    assert_int_equal(access(sock, F_OK), -1);
    es_proc_result_free(&r);

    /* d1, --shim none: nothing preloaded, no canonical device */
    assert_int_equal(ctl(&r, env, "run", "--ests", "1", "--gpus", "2", "--socket", sock,
                         "--shim", "none", "--progress", "off", "--", "sh", "-c", script, NULL),
                     0);
    char want[600];
    snprintf(want, sizeof(want), "[0] E 0 1 0 1 127.0.0.1 %s d1  %s\n", uuids[2], sock);
    if (!strstr(r.out, want))
        fail_msg("missing \"%s\" in:\n%s", want, r.out);
    assert_non_null(strstr(r.out, "[0] P no"));
    es_proc_result_free(&r);

    /* d2 on the newest model simcuda has: its canonical device is known
     * (every simulated model is; the refusal of older ones is unit-tested
     * in test_gpu_spec through es_ctl_d2_model_known) */
    char *env2[] = { "SIMCUDA_DEVICES=a100:8G,b200:16G", "EASYSCALE_CANONICAL_DEVICE=", NULL };
    assert_int_equal(ctl(&r, env2, "run", "--ests", "2", "--determinism", "d2", "--socket", sock,
                         "--progress", "off", "--", "sh", "-c", "echo \"C $EASYSCALE_CANONICAL_DEVICE\"",
                         NULL),
                     0);
    if (!strstr(r.out, "[0] C a100,b200\n") && !strstr(r.out, "[0] C b200,a100\n"))
        fail_msg("no canonical device a100,b200 in:\n%s", r.out);
    es_proc_result_free(&r);

    /* d2's GEMM path: one value for every EST, int8 unless the job's
     * environment says fma; any other value is refused before an EST
     * starts (exit 2, named) */
    static const char *const paths[][2] = { { NULL, "int8" }, { "EASYSCALE_D2_GEMM=fma", "fma" },
                                             { "EASYSCALE_D2_GEMM=int8", "int8" } };
    for (int i = 0; i < 3; i++) {
        char *env3[] = { "SIMCUDA_DEVICES=a100:8G,t4:8G", "EASYSCALE_CANONICAL_DEVICE=",
                         (char *)paths[i][0], NULL };
        assert_int_equal(ctl(&r, env3, "run", "--ests", "2", "--determinism", "d2", "--socket",
                             sock, "--progress", "off", "--", "sh", "-c",
                             "echo \"G $EASYSCALE_D2_GEMM\"", NULL),
                         0);
        for (int k = 0; k < 2; k++) {
            char want[64];
            snprintf(want, sizeof(want), "[%d] G %s\n", k, paths[i][1]);
            if (!strstr(r.out, want))
                fail_msg("missing \"%s\" in:\n%s", want, r.out);
        }
        es_proc_result_free(&r);
    }
    char *env4[] = { "SIMCUDA_DEVICES=a100:8G", "EASYSCALE_D2_GEMM=int4", NULL };
    assert_int_equal(ctl(&r, env4, "run", "--ests", "1", "--determinism", "d2", "--socket", sock,
                         "--progress", "off", "--", "sh", "-c", "echo started", NULL),
                     2);
    assert_non_null(strstr(r.out, "EASYSCALE_D2_GEMM=\"int4\" is not valid"));
    assert_null(strstr(r.out, "started"));
    es_proc_result_free(&r);
}

static void test_run_failure(void **state)
{
    (void)state;
    char sock[300];
    sock_path(sock, sizeof(sock), "fail");
    es_proc_result_t r;
    /* rank 1 fails: named, the others (sleeping) stopped at once */
    time_t t0 = time(NULL);
    assert_int_equal(ctl(&r, NULL, "run", "--ests", "3", "--gpus", "0", "--socket", sock,
                         "--shim", "none", "--progress", "off", "--", "sh", "-c",
                         "if [ $RANK = 1 ]; then echo bye; exit 3; fi; exec sleep 60", NULL),
                     1);
    assert_true(time(NULL) - t0 < 25);
    assert_non_null(strstr(r.out, "[1] bye"));
    assert_non_null(strstr(r.out, "EST 1 (pid "));
    assert_non_null(strstr(r.out, ") exited with status 3; stopping the others"));
    assert_non_null(strstr(r.out, "the job failed after"));
    es_proc_result_free(&r);
    /* a signal */
    assert_int_equal(ctl(&r, NULL, "run", "--ests", "2", "--socket", sock, "--shim", "none",
                         "--progress", "off", "--", "sh", "-c",
                         "if [ $RANK = 0 ]; then kill -9 $$; fi; exec sleep 60", NULL),
                     1);
    assert_non_null(strstr(r.out, "EST 0 (pid "));
    assert_non_null(strstr(r.out, "killed by signal 9"));
    es_proc_result_free(&r);
    /* a command that does not exist */
    assert_int_equal(ctl(&r, NULL, "run", "--ests", "1", "--socket", sock, "--shim", "none",
                         "--progress", "off", "--", "/nonexistent/cmd", NULL),
                     1);
    assert_non_null(strstr(r.out, "[0] cannot run /nonexistent/cmd"));
    assert_non_null(strstr(r.out, "exited with status 127"));
    es_proc_result_free(&r);
    /* an EST that leaves a child holding its output: run ends anyway */
    t0 = time(NULL);
    assert_int_equal(ctl(&r, NULL, "run", "--ests", "1", "--socket", sock, "--shim", "none",
                         "--progress", "off", "--", "sh", "-c", "sleep 60 & echo parent done",
                         NULL),
                     0);
    assert_true(time(NULL) - t0 < 25);
    assert_non_null(strstr(r.out, "[0] parent done"));
    es_proc_result_free(&r);
    /* SIGTERM to run: the ESTs are stopped, exit 1 */
    bg_t job;
    start_fake_job(&job, NULL, sock, 2, NULL, (const char *[]){ "--run-ms", "60000", NULL });
    free(wait_registered(sock, 2, 0, 30));
    kill(job.pid, SIGTERM);
    assert_int_equal(bg_wait(&job, 20), 1);
    char *out = bg_output(&job);
    assert_non_null(strstr(out, "terminated: stopping the ESTs"));
    assert_non_null(strstr(out, "the job was stopped after"));
    free(out);
    /* the shim refuses a bad control variable of the user's: the EST fails */
    char *env[] = { "EASYSCALE_HEARTBEAT_MS=5", NULL };
    assert_int_equal(ctl(&r, env, "run", "--ests", "1", "--socket", sock, "--progress", "off",
                         "--", "true", NULL),
                     1);
    assert_non_null(strstr(r.out, "EASYSCALE_HEARTBEAT_MS=\"5\" is not valid"));
    es_proc_result_free(&r);
}

/* ---- the trainer ------------------------------------------------------------------ */

#define TRAIN_DEVICES "SIMCUDA_DEVICES=a100:8G,a100:8G,a100:8G,a100:8G"

static void train_argv(char **argv, const char *sock, const char *steps, const char *seed)
{
    static char ts[8][64];
    int k = 0;
    argv[k++] = (char *)ctl_bin();
    argv[k++] = "run";
    argv[k++] = "--ests";
    argv[k++] = "4";
    argv[k++] = "--gpus";
    argv[k++] = "0-3";
    argv[k++] = "--socket";
    argv[k++] = (char *)sock;
    argv[k++] = "--progress";
    argv[k++] = "off";
    argv[k++] = "--";
    argv[k++] = "python3";
    snprintf(ts[0], sizeof(ts[0]), "%s", es_root_path("examples/train.py"));
    argv[k++] = ts[0];
    argv[k++] = "--steps";
    argv[k++] = (char *)steps;
    argv[k++] = "--seed";
    argv[k++] = (char *)seed;
    argv[k++] = "--deterministic-kernels";
    argv[k++] = "--log-every";
    argv[k++] = "25";
    argv[k++] = "--test-samples";
    argv[k++] = "32";
    argv[k] = NULL;
}

/* The checksum every rank printed ("" if they differ or one is missing). */
static void checksum_of(const char *out, char *sum, size_t len)
{
    char first[128] = "";
    sum[0] = '\0';
    for (int r = 0; r < 4; r++) {
        char pat[32], got[128];
        snprintf(pat, sizeof(pat), "[%d] checksum ", r);
        const char *p = strstr(out, pat);
        if (!p)
            return;
        p += strlen(pat);
        snprintf(got, sizeof(got), "%.*s", (int)strcspn(p, "\n"), p);
        if (r == 0)
            snprintf(first, sizeof(first), "%s", got);
        else if (strcmp(first, got) != 0)
            return;
    }
    snprintf(sum, len, "%s", first);
}

static void test_train_kill_controller(void **state)
{
    (void)state;
    char sock[300], *argv[32], sum_killed[128], sum_plain[128], sum_other[128];
    /* slow simulated GPUs: the job lasts long enough to kill the
     * controller mid-run and see the ESTs register with the next one */
    char *env[] = { TRAIN_DEVICES, "SIMCUDA_TIME_SCALE=3", "EASYSCALE_HEARTBEAT_MS=100", NULL };
    sock_path(sock, sizeof(sock), "train");
    train_argv(argv, sock, "240", "7");
    bg_t job;
    bg_start(&job, env, argv);

    /* status: 4 ranks with pids of train.py processes and advancing steps */
    char *j = wait_registered(sock, 4, 3, 60);
    long daemon = jint(j, "daemon_pid", -1);
    assert_true(daemon > 0);
    long steps0[4];
    for (int r = 0; r < 4; r++) {
        const char *o = jest(j, r);
        char st[32], path[64], *cmd;
        size_t len;
        assert_non_null(o);
        assert_string_equal(jstr(o, "state", st, sizeof(st)), "running");
        steps0[r] = jint(o, "step", -1);
        snprintf(path, sizeof(path), "/proc/%ld/cmdline", jint(o, "pid", 0));
        cmd = calloc(1, 4096);
        int fd = open(path, O_RDONLY);
        assert_true(fd >= 0);
        ssize_t got = read(fd, cmd, 4095);
        close(fd);
        assert_true(got > 0);
        len = (size_t)got;
        for (size_t i = 0; i + 1 < len; i++)
            if (!cmd[i])
                cmd[i] = ' ';
        if (!strstr(cmd, "train.py"))
            fail_msg("rank %d's pid runs \"%s\"", r, cmd);
        free(cmd);
    }
    assert_int_equal(jint(j, "gpu", -1), 0);
    free(j);
    j = wait_registered(sock, 4, steps0[0] + 3, 60);
    assert_true(jint(jest(j, 0), "step", 0) > steps0[0]);
    free(j);

    /* kill the controller; run starts another, the ESTs register again */
    assert_int_equal(kill((pid_t)daemon, SIGKILL), 0);
    int relearned = 0;
    for (int i = 0; i < 400 && !relearned; i++) {
        j = status_json(sock);
        long d2 = jint(j, "daemon_pid", -1);
        if (j && d2 > 0 && d2 != daemon && jint(j, "registered", 0) == 4)
            relearned = 1;
        free(j);
        if (!relearned) {
            if (bg_ended(&job))
                break;
            msleep(50);
        }
    }
    int st = bg_wait(&job, T_JOB);
    char *out = bg_output(&job);
    if (st != 0 || !relearned)
        fail_msg("status %d, relearned %d:\n%s", st, relearned, out);
    assert_non_null(strstr(out, "was killed by signal 9; started a new one"));
    checksum_of(out, sum_killed, sizeof(sum_killed));
    assert_true(strlen(sum_killed) == 64);
    free(out);

    /* the same job undisturbed (and without slow GPUs): the same bits */
    char *env_fast[] = { TRAIN_DEVICES, NULL };
    bg_start(&job, env_fast, argv);
    assert_int_equal(bg_wait(&job, T_JOB), 0);
    out = bg_output(&job);
    checksum_of(out, sum_plain, sizeof(sum_plain));
    free(out);
    assert_string_equal(sum_killed, sum_plain);
    /* negative control: another seed, another checksum */
    train_argv(argv, sock, "240", "8");
    bg_start(&job, env_fast, argv);
    assert_int_equal(bg_wait(&job, T_JOB), 0);
    out = bg_output(&job);
    checksum_of(out, sum_other, sizeof(sum_other));
    free(out);
    assert_true(strlen(sum_other) == 64);
    assert_string_not_equal(sum_other, sum_plain);
}

/* ---- controller restart with state ------------------------------------------------- */

static void test_restart_relearns(void **state)
{
    (void)state;
    char sock[300];
    sock_path(sock, sizeof(sock), "relearn");
    char *env[] = { "SIMCUDA_DEVICES=a100:8G,a100:8G,a100:8G", NULL };
    const char *fake[] = { "--hb-ms", "50", "--run-ms", "60000", NULL };
    bg_t job;
    start_fake_job(&job, env, sock, 3, (const char *[]){ "--gpus", "0-2", NULL }, fake);
    char *j = wait_registered(sock, 3, 1, 30);
    long daemon = jint(j, "daemon_pid", -1), pids[3];
    for (int r = 0; r < 3; r++)
        pids[r] = jint(jest(j, r), "pid", -1);
    free(j);
    es_proc_result_t r;
    assert_int_equal(ctl(&r, NULL, "migrate", "2", "--gpu", "0", "--socket", sock, NULL), 0);
    assert_non_null(strstr(r.out, "migrate EST 2 to GPU 0: done in"));
    es_proc_result_free(&r);
    j = status_json(sock);
    assert_int_equal(jint(jest(j, 2), "gpu", -1), 0);
    long epoch = jint(j, "epoch", -1);
    assert_int_equal(epoch, 1);
    free(j);

    assert_int_equal(kill((pid_t)daemon, SIGKILL), 0);
    long d2 = -1;
    j = NULL;
    for (int i = 0; i < 100; i++) {
        free(j);
        j = status_json(sock);
        d2 = jint(j, "daemon_pid", -1);
        if (d2 > 0 && d2 != daemon && jint(j, "registered", 0) == 3)
            break;
        msleep(100);
    }
    assert_true(d2 > 0 && d2 != daemon);
    assert_int_equal(jint(j, "registered", 0), 3);
    /* the new controller knows where everyone is and the epoch */
    assert_int_equal(jint(j, "epoch", -1), epoch);
    assert_int_equal(jint(jest(j, 2), "gpu", -1), 0);
    assert_int_equal(jint(jest(j, 1), "gpu", -1), 1);
    for (int k = 0; k < 3; k++)
        assert_int_equal(jint(jest(j, k), "pid", -1), pids[k]);
    free(j);
    assert_int_equal(bg_finish(&job, T_JOB), 0);
    char *out = bg_output(&job);
    assert_non_null(strstr(out, "started a new one"));
    free(out);
}

/* The schedule across a restart: `run` sends no event to a new daemon
 * before every EST has registered with it. Rank 1 comes back 6 s after
 * the kill; the event's step is reached before that (rank 0 waits there
 * from 4.5 s on): sent
 * at once, the new daemon would refuse it ("EST 1 has not registered"). */
static void write_file(const char *path, const char *text);

static void test_schedule_waits_for_reregistration(void **state)
{
    (void)state;
    char sock[300], sched[300];
    sock_path(sock, sizeof(sock), "rejoin");
    snprintf(sched, sizeof(sched), "%s/rejoin.sched", g_tmp);
    write_file(sched, "step 150 preempt 1\n");
    char *env[] = { "SIMCUDA_DEVICES=a100:8G,a100:8G", NULL };
    const char *fake[] = { "--hb-ms", "30", "--run-ms", "14000", "--rejoin-rank", "1",
                           "--rejoin-ms", "6000", NULL };
    bg_t job;
    start_fake_job(&job, env, sock, 2,
                   (const char *[]){ "--gpus", "0,1", "--schedule", sched, NULL }, fake);
    char *j = wait_registered(sock, 2, 1, 30);
    long daemon = jint(j, "daemon_pid", -1);
    long step = jint(jest(j, 0), "step", 0);
    free(j);
    assert_true(daemon > 0);
    if (step >= 150)
        es_test_skip("the fake ESTs reached step 150 before the daemon could be killed (a "
                     "machine too loaded for this test's timing)");
    assert_int_equal(kill((pid_t)daemon, SIGKILL), 0);
    int st = bg_wait(&job, T_JOB);
    char *out = bg_output(&job);
    if (st != 0)
        fail_msg("status %d:\n%s", st, out);
    const char *rs = strstr(out, "started a new one");
    const char *ev = strstr(out, "schedule: step 150 preempt 1: preempt GPU 1: done in");
    if (!rs || !ev || ev < rs)
        fail_msg("the preempt was not done by the new daemon:\n%s", out);
    free(out);
}

/* ---- bad frames, other uids, two controllers ------------------------------------------ */

/* A connection to the socket at path sock, or -1. */
static int unix_connect(const char *sock)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    size_t len = strlen(sock);
    if (len >= sizeof(sa.sun_path))
        return -1;
    memcpy(sa.sun_path, sock, len + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Whether a connection to sock is taken (closed at once). */
static int accepts(const char *sock)
{
    int fd = unix_connect(sock);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

static int raw_connect(const char *sock)
{
    int fd = unix_connect(sock);
    assert_true(fd >= 0);
    struct timeval tv = { 5, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Sends bytes and expects the daemon to close the connection without an
 * answer (EOF, or a reset when it closed with our bytes unread; not a
 * timeout). */
static void expect_closed(const char *sock, const uint8_t *b, size_t n)
{
    int fd = raw_connect(sock);
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    (void)w;
    uint8_t sink[256];
    ssize_t r = recv(fd, sink, sizeof(sink), 0);
    if (r != 0 && !(r < 0 && errno == ECONNRESET))
        fail_msg("expected the daemon to close the connection, got %zd (errno %d)", r, errno);
    close(fd);
}

static void test_bad_frames(void **state)
{
    (void)state;
    char sock[300];
    sock_path(sock, sizeof(sock), "frames");
    bg_t job;
    start_fake_job(&job, NULL, sock, 1, NULL, (const char *[]){ "--run-ms", "60000", NULL });
    char *j = wait_registered(sock, 1, 0, 30);
    long daemon = jint(j, "daemon_pid", -1);
    free(j);

    uint8_t b[2048];
    size_t n;
    es_proto_msg_t m = { .type = ES_MSG_REQUEST };
    m.u.req.verb = ES_VERB_STATUS;
    assert_int_equal(es_proto_encode(&m, b, sizeof(b), &n), 0);
    /* bad magic */
    b[0] = 'X';
    expect_closed(sock, b, n);
    b[0] = 'E';
    /* another version: a newer one, and an older release's (1) */
    b[4] = 9;
    expect_closed(sock, b, n);
    b[4] = 1;
    expect_closed(sock, b, n);
    b[4] = (uint8_t)ES_PROTO_VERSION;
    /* an unknown type */
    b[6] = 42;
    expect_closed(sock, b, n);
    /* a type the daemon never takes (a MOVE) */
    b[6] = ES_MSG_MOVE;
    expect_closed(sock, b, n);
    b[6] = ES_MSG_REQUEST;
    /* oversized: a REQUEST claiming 100 MB, closed on the header alone */
    uint8_t big[16];
    memcpy(big, b, 16);
    big[8] = 0;
    big[9] = 0;
    big[10] = 0;
    big[11] = 6;
    expect_closed(sock, big, 16);
    /* malformed payload: a string length past the frame */
    uint8_t bad[64];
    memcpy(bad, b, n);
    bad[n - 2] = 0x7f; /* the arg's length field */
    expect_closed(sock, bad, n);
    /* a heartbeat before any registration */
    es_proto_msg_t h = { .type = ES_MSG_HEARTBEAT };
    assert_int_equal(es_proto_encode(&h, b, sizeof(b), &n), 0);
    expect_closed(sock, b, n);
    /* a registration for a rank the job does not have */
    es_proto_msg_t g = { .type = ES_MSG_REGISTER };
    g.u.reg.rank = 5;
    g.u.reg.world = 1;
    assert_int_equal(es_proto_encode(&g, b, sizeof(b), &n), 0);
    {
        int fd = raw_connect(sock);
        assert_int_equal(send(fd, b, n, MSG_NOSIGNAL), (ssize_t)n);
        uint8_t rx[1024];
        es_proto_reader_t rd = { .accept = ES_PROTO_ACCEPT_EST, .buf = rx, .cap = sizeof(rx) };
        int rc;
        while ((rc = es_proto_reader_fill(&rd, fd)) == 0)
            ;
        assert_int_equal(rc, 1); /* an ERROR, then the close */
        es_proto_msg_t e;
        assert_int_equal(es_proto_decode(&rd.h, rd.buf, &e), 0);
        assert_int_equal(e.type, ES_MSG_ERROR);
        assert_int_equal(e.u.err.code, -EINVAL);
        assert_non_null(strstr(e.u.err.text, "this job has 1 ESTs"));
        es_proto_reader_reset(&rd);
        while ((rc = es_proto_reader_fill(&rd, fd)) == 0)
            ;
        assert_int_equal(rc, -ECONNRESET);
        close(fd);
    }
    /* a second registration of rank 0 by another process: refused */
    g.u.reg.rank = 0;
    g.u.reg.world = 1;
    assert_int_equal(es_proto_encode(&g, b, sizeof(b), &n), 0);
    {
        int fd = raw_connect(sock);
        assert_int_equal(send(fd, b, n, MSG_NOSIGNAL), (ssize_t)n);
        uint8_t rx[1024];
        es_proto_reader_t rd = { .accept = ES_PROTO_ACCEPT_EST, .buf = rx, .cap = sizeof(rx) };
        int rc;
        while ((rc = es_proto_reader_fill(&rd, fd)) == 0)
            ;
        assert_int_equal(rc, 1);
        es_proto_msg_t e;
        assert_int_equal(es_proto_decode(&rd.h, rd.buf, &e), 0);
        assert_int_equal(e.u.err.code, -EEXIST);
        close(fd);
    }

    /* the daemon lives on and answers */
    j = status_json(sock);
    assert_non_null(j);
    assert_int_equal(jint(j, "daemon_pid", -1), daemon);
    assert_int_equal(jint(j, "registered", -1), 1);
    free(j);
    assert_int_equal(bg_finish(&job, T_JOB), 0);
    char *out = bg_output(&job);
    assert_non_null(strstr(out, "bad magic (not an easyscale control frame)"));
    assert_non_null(strstr(out, "unsupported protocol version"));
    char vline[160];
    snprintf(vline, sizeof(vline), "refused: it speaks control protocol version 1, this "
             "controller %u", ES_PROTO_VERSION);
    assert_non_null(strstr(out, vline));
    assert_non_null(strstr(out, "frame over the size limit"));
    assert_true(count(out, "unknown, unexpected or malformed message") >= 3);
    assert_non_null(strstr(out, "refusing a registration: rank 5 of 1"));
    assert_non_null(strstr(out, "refusing a second registration of rank 0"));
    free(out);
}

static void test_one_registration_per_process(void **state)
{
    (void)state;
    /* fake_est with the shim preloaded: two registrations from one pid
     * (the shim's thread and fake_est's own); one holds the rank, the
     * other is refused and stops trying. (An exec, where the old
     * connection has closed, is a new registration: the trainer's tests
     * start python through a wrapper that execs.) */
    char sock[300];
    sock_path(sock, sizeof(sock), "dup");
    char *argv[] = { (char *)ctl_bin(), "run", "--ests", "1", "--socket", sock, "--progress",
                     "off", "--", (char *)fake_bin(), "--run-ms", "2500", NULL };
    bg_t job;
    bg_start(&job, NULL, argv);
    char *j = wait_registered(sock, 1, 0, 30);
    free(j);
    msleep(500);
    j = status_json(sock);
    assert_int_equal(jint(j, "registered", -1), 1);
    free(j);
    assert_int_equal(bg_wait(&job, T_JOB), 0);
    char *out = bg_output(&job);
    assert_int_equal(count(out, "refusing a second registration of rank 0"), 1);
    free(out);
}

static void test_other_uid(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        /* the check itself is unit-tested through its seam (wire_proto_test) */
        es_test_skip("needs root, to run a daemon as another user");
    }
    /* a daemon running as nobody, on a job file of its own */
    const uid_t nobody = 65534;
    char dir[300], sock[400];
    snprintf(dir, sizeof(dir), "%s/nobody", g_tmp);
    assert_int_equal(chmod(g_tmp, 0711), 0); /* nobody may pass through */
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(chown(dir, nobody, nobody), 0);
    snprintf(sock, sizeof(sock), "%s/job.sock", dir);
    static es_ctl_job_t job;
    memset(&job, 0, sizeof(job));
    job.nests = 1;
    job.determinism = 1;
    job.time_slicing = 1;
    job.hb_timeout_ms = 10000;
    job.move_timeout_ms = 10000;
    job.ngpus = 1;
    snprintf(job.gpus[0].uuid, sizeof(job.gpus[0].uuid), "GPU-00000000-0000-4000-8000-000000000000");
    snprintf(job.gpus[0].name, sizeof(job.gpus[0].name), "NVIDIA A100-SXM4-40GB");
    snprintf(job.gpus[0].model, sizeof(job.gpus[0].model), "a100");
    job.gpus[0].mem = 1ull << 33;
    job.gpus[0].sms = 108;
    job.gpus[0].clock_khz = 1410000;
    job.slots = 1;
    job.place[0] = 0;
    assert_int_equal(es_ctl_job_write(sock, &job), 0);
    char jobf[500];
    snprintf(jobf, sizeof(jobf), "%s.job", sock);
    assert_int_equal(chown(jobf, nobody, nobody), 0);
    char out[400];
    snprintf(out, sizeof(out), "%s/daemon.txt", g_tmp);
    pid_t p = fork();
    if (p > 0)
        g_daemon_as_nobody = p;
    if (p == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0666);
        dup2(fd, 2);
        dup2(fd, 1);
        setpgid(0, 0);
        if (setgid(nobody) < 0 || setuid(nobody) < 0)
            _exit(99);
        execl(ctl_bin(), "easyscale-ctl", "daemon", "--socket", sock, (char *)NULL);
        _exit(127);
    }
    /* up: its socket exists and takes connections (the file is there from
     * the bind on, before the listen) */
    int up = 0;
    for (int i = 0; i < 100 && !up; i++) {
        struct stat st;
        up = stat(sock, &st) == 0 && st.st_uid == nobody && accepts(sock);
        if (!up)
            msleep(50);
    }
    if (!up) {
        size_t len;
        char *log = es_read_file(out, &len);
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
        fail_msg("the daemon running as nobody did not start: %s", log ? log : "");
    }
    /* mode 0600: only its owner (and root, past the permission bits) */
    struct stat st;
    assert_int_equal(stat(sock, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* root connects, the peer check refuses it without an answer */
    es_proto_msg_t m = { .type = ES_MSG_REQUEST };
    uint8_t b[256];
    size_t n;
    m.u.req.verb = ES_VERB_STATUS;
    assert_int_equal(es_proto_encode(&m, b, sizeof(b), &n), 0);
    expect_closed(sock, b, n);
    es_proc_result_t r;
    assert_int_equal(ctl(&r, NULL, "status", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "closed the connection without an answer"));
    es_proc_result_free(&r);
    kill(p, SIGTERM);
    int ws;
    waitpid(p, &ws, 0);
    g_daemon_as_nobody = 0;
    size_t len;
    char *log = es_read_file(out, &len);
    assert_non_null(log);
    if (!strstr(log, "refused a connection from uid 0"))
        fail_msg("daemon log: %s", log);
    free(log);
}

static void test_two_controllers(void **state)
{
    (void)state;
    char sock[300];
    sock_path(sock, sizeof(sock), "two");
    bg_t job;
    start_fake_job(&job, NULL, sock, 1, NULL, (const char *[]){ "--run-ms", "60000", NULL });
    char *j = wait_registered(sock, 1, 0, 30);
    long daemon = jint(j, "daemon_pid", -1);
    free(j);
    es_proc_result_t r;
    assert_int_equal(ctl(&r, NULL, "daemon", "--socket", sock, NULL), 1);
    char want[128];
    snprintf(want, sizeof(want), "another controller (pid %ld) owns the job", daemon);
    if (!strstr(r.out, want))
        fail_msg("%s", r.out);
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "run", "--ests", "1", "--socket", sock, "--shim", "none", "--",
                         "true", NULL),
                     1);
    assert_non_null(strstr(r.out, "a job is already running at"));
    es_proc_result_free(&r);
    /* the first one is untouched */
    j = status_json(sock);
    assert_int_equal(jint(j, "daemon_pid", -1), daemon);
    free(j);
    assert_int_equal(bg_finish(&job, T_JOB), 0);
}

/* ---- placement, scale, moves ----------------------------------------------------------- */

static void test_scale_refused(void **state)
{
    (void)state;
    char sock[300];
    sock_path(sock, sizeof(sock), "refuse");
    char *env[] = { "SIMCUDA_DEVICES=a100:8G,a100:8G,t4:4G", NULL };
    es_proc_result_t r;
    /* without time-slicing 3 ESTs of 6 GiB do not fit on two 8 GiB GPUs */
    assert_int_equal(ctl(&r, env, "run", "--ests", "3", "--gpus", "0,1", "--est-memory", "6G",
                         "--no-time-slicing", "--socket", sock, "--shim", "none", "--",
                         fake_bin(), NULL),
                     1);
    assert_non_null(strstr(r.out, "cannot place the job: not enough GPU memory without "
                                  "time-slicing: 2 of 3 ESTs of 6.00 GiB fit"));
    es_proc_result_free(&r);

    bg_t job;
    start_fake_job(&job, env, sock, 2, (const char *[]){ "--gpus", "0,1", "--est-memory", "6G", NULL },
                   (const char *[]){ "--run-ms", "60000", "--mem", "6442450944", NULL });
    free(wait_registered(sock, 2, 0, 30));
    /* the T4 has 4 GiB: not even time-slicing helps */
    assert_int_equal(ctl(&r, NULL, "scale", "--gpus", "2", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "scale to GPUs 2 refused: not enough GPU memory: one EST needs "
                                  "6.00 GiB, the largest GPU has 4.00 GiB; nothing moved"));
    es_proc_result_free(&r);
    /* nor can one EST be migrated there */
    assert_int_equal(ctl(&r, NULL, "grant", "2", "--socket", sock, NULL), 0); /* no move needed */
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "migrate", "0", "--gpu", "2", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "nothing moved"));
    es_proc_result_free(&r);
    /* nothing was sent: epoch 0, ESTs where they were */
    char *j = status_json(sock);
    assert_int_equal(jint(j, "epoch", -1), 0);
    assert_int_equal(jint(jest(j, 0), "gpu", -1), 0);
    assert_int_equal(jint(jest(j, 1), "gpu", -1), 1);
    free(j);
    /* with time-slicing (the job's default) both fit on one 8 GiB GPU,
     * taking turns */
    assert_int_equal(ctl(&r, NULL, "scale", "--gpus", "0", "--socket", sock, NULL), 0);
    assert_non_null(strstr(r.out, "(1 EST moved); the job runs on GPUs 0"));
    es_proc_result_free(&r);
    assert_int_equal(bg_finish(&job, T_JOB), 0);
    char *out = bg_output(&job);
    assert_int_equal(count(out, "fake_est: rank"), 3); /* 1 move + 2 "done" lines */
    free(out);
}

/* easyscale-ctl timeslice: what it refuses (exit 2 usage and bad input, 1
 * what cannot be done now), then a rotation started and ended with the
 * stand-in ESTs' answers, re-learned by a controller restarted meanwhile,
 * the job's other moves refused while it lasts. */
static void test_timeslice_commands(void **state)
{
    (void)state;
    char sock[300], missing[320];
    sock_path(sock, sizeof(sock), "tslice");
    snprintf(missing, sizeof(missing), "%s/none.sock", g_tmp);
    char *env[] = { "SIMCUDA_DEVICES=a100:16G,a100:16G,t4:4G", NULL };
    es_proc_result_t r;
    /* no job */
    assert_int_equal(ctl(&r, NULL, "timeslice", "0", "--socket", missing, NULL), 1);
    assert_non_null(strstr(r.out, "easyscale-ctl: "));
    es_proc_result_free(&r);

    bg_t job;
    start_fake_job(&job, env, sock, 4, (const char *[]){ "--gpus", "0,1", "--est-memory", "5G", NULL },
                   (const char *[]){ "--run-ms", "60000", "--hb-ms", "50", "--mem", "5368709120",
                                     NULL });
    char *j = wait_registered(sock, 4, 0, 30);
    /* ESTs 0,1 on GPU 0 and 2,3 on GPU 1 */
    assert_int_equal(jint(jest(j, 0), "gpu", -1), 0);
    assert_int_equal(jint(jest(j, 1), "gpu", -1), 0);
    assert_int_equal(jint(jest(j, 3), "gpu", -1), 1);
    free(j);
    /* usage */
    assert_int_equal(ctl(&r, NULL, "timeslice", "--socket", sock, NULL), 2);
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "timeslice", "0", "--off", "--socket", sock, NULL), 2);
    assert_non_null(strstr(r.out, "--off takes no GPU and no --ranks"));
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "timeslice", "--help", NULL), 0);
    assert_non_null(strstr(r.out, "usage: easyscale-ctl timeslice GPU [--ranks LIST]"));
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "migrate", "1", "--gpu", "0", "--ranks", "1", NULL), 2);
    es_proc_result_free(&r);
    /* bad ranks: not in the job, out of order, malformed */
    assert_int_equal(ctl(&r, NULL, "timeslice", "0", "--ranks", "0,9", "--socket", sock, NULL), 2);
    assert_non_null(strstr(r.out, "no EST 9 (the job has 4)"));
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "timeslice", "0", "--ranks", "1,0", "--socket", sock, NULL), 2);
    assert_non_null(strstr(r.out, "ascending order"));
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "timeslice", "0", "--ranks", "1,x", "--socket", sock, NULL), 2);
    assert_non_null(strstr(r.out, "bad rank list"));
    es_proc_result_free(&r);
    /* unknown GPU, a GPU not the job's, one EST, nothing to end */
    assert_int_equal(ctl(&r, NULL, "timeslice", "7", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "no such GPU \"7\""));
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "timeslice", "2", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "GPU 2 is not one of the job's (grant it first)"));
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "timeslice", "0", "--ranks", "3", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "one EST takes no turns"));
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "timeslice", "--off", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "the job is not time-sliced"));
    es_proc_result_free(&r);
    /* a parked EST reaches no collective: swap it in first */
    assert_int_equal(ctl(&r, NULL, "swap-out", "3", "--socket", sock, NULL), 0);
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "timeslice", "1", "--ranks", "2,3", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "EST 3 is swapped out (swap it in first"));
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "swap-in", "3", "--gpu", "1", "--socket", sock, NULL), 0);
    es_proc_result_free(&r);
    /* memory: the T4 holds no EST of 5 GiB, even one at a time */
    assert_int_equal(ctl(&r, NULL, "grant", "2", "--socket", sock, NULL), 0);
    es_proc_result_free(&r);
    j = status_json(sock);
    long epoch0 = jint(j, "epoch", -1);
    free(j);
    assert_int_equal(ctl(&r, NULL, "timeslice", "2", "--ranks", "2,3", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "timeslice refused: GPU 2 has 4.00 GiB; one EST of 5.00 GiB at a "
                                  "time beside the 0 others there would not fit; nothing moved"));
    es_proc_result_free(&r);
    j = status_json(sock);
    assert_int_equal(jint(j, "epoch", -1), epoch0); /* nothing was sent */
    free(j);
    /* a rotation: the ESTs on GPU 0 by default */
    assert_int_equal(ctl(&r, NULL, "timeslice", "0", "--socket", sock, NULL), 0);
    assert_non_null(strstr(r.out, "time-slice ESTs 0,1 on GPU 0: done"));
    assert_non_null(strstr(r.out, "rank 1: time-slice 0 -> 0: ok"));
    es_proc_result_free(&r);
    j = status_json(sock);
    char st[32];
    assert_non_null(jstr(jest(j, 0), "state", st, sizeof(st)));
    assert_string_equal(st, "time-sliced");
    assert_non_null(jstr(jest(j, 2), "state", st, sizeof(st)));
    assert_string_equal(st, "running");
    assert_non_null(strstr(j, "\"rotation\":{\"gpu\":0,\"ranks\":[0,1]}"));
    long daemon = jint(j, "daemon_pid", -1);
    free(j);
    /* the controller killed: the next one re-learns the rotation from the
     * ESTs' registrations */
    assert_int_equal(kill((pid_t)daemon, SIGKILL), 0);
    j = NULL;
    for (int i = 0; i < 100; i++) {
        free(j);
        j = status_json(sock);
        long d2 = jint(j, "daemon_pid", -1);
        if (d2 > 0 && d2 != daemon && jint(j, "registered", 0) == 4)
            break;
        msleep(100);
    }
    assert_int_equal(jint(j, "registered", 0), 4);
    assert_non_null(strstr(j, "\"rotation\":{\"gpu\":0,\"ranks\":[0,1]}"));
    assert_non_null(jstr(jest(j, 1), "state", st, sizeof(st)));
    assert_string_equal(st, "time-sliced");
    free(j);
    /* meanwhile the job's other moves are refused, and a second rotation */
    assert_int_equal(ctl(&r, NULL, "migrate", "2", "--gpu", "0", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "busy: the job is time-sliced on GPU 0"));
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "timeslice", "1", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "time-sliced on GPU 0 already"));
    es_proc_result_free(&r);
    /* ended: 0 and 1 placed without turns (both on GPU 0 again: 2 and 3 stay) */
    assert_int_equal(ctl(&r, NULL, "timeslice", "--off", "--socket", sock, NULL), 0);
    assert_non_null(strstr(r.out, "end time-slicing on GPU 0: done"));
    es_proc_result_free(&r);
    j = status_json(sock);
    assert_non_null(jstr(jest(j, 0), "state", st, sizeof(st)));
    assert_string_equal(st, "running");
    assert_non_null(strstr(j, "\"rotation\":null"));
    free(j);
    assert_int_equal(bg_finish(&job, T_JOB), 0);
    char *out = bg_output(&job);
    assert_int_equal(count(out, ": time-slice -> "), 2);
    assert_int_equal(count(out, ": swap-out -> host: ok"), 1);
    assert_int_equal(count(out, ": end time-slicing -> "), 2);
    free(out);
}

/* The time-slicing figures the ESTs' heartbeats carry, in status and
 * status --json: per EST (where its memory is, yields, swaps and bytes out
 * and in), per GPU (who is resident, who is parked, the bytes its ESTs
 * swapped). Values the test chooses, each rank its own. */
static void test_status_ts_figures(void **state)
{
    (void)state;
    char sock[300];
    sock_path(sock, sizeof(sock), "tsfigs");
    char *env[] = { "SIMCUDA_DEVICES=a100:16G,a100:16G", NULL };
    /* rank 0 resident, 1 parked (both on GPU 0), 2 resident, 3 unknown (GPU 1) */
    const char *figs = "r:12:13:11:3221225472:2952790016/p:7:8:7:1073741824:536870912/"
                       "r:3:2:2:5242880:4194304/u:0:0:0:0:0";
    bg_t job;
    start_fake_job(&job, env, sock, 4, (const char *[]){ "--gpus", "0,1", NULL },
                   (const char *[]){ "--run-ms", "60000", "--hb-ms", "50", "--ts-by-rank", figs,
                                     NULL });
    char *j = wait_registered(sock, 4, 0, 30);
    for (int i = 0; i < 100 && (jint(jest(j, 0), "yields", 0) != 12 ||
                                jint(jest(j, 2), "yields", 0) != 3); i++) {
        free(j);
        msleep(100);
        j = status_json(sock);
    }
    assert_int_equal(jint(jest(j, 0), "gpu", -1), 0);
    assert_int_equal(jint(jest(j, 1), "gpu", -1), 0);
    assert_int_equal(jint(jest(j, 2), "gpu", -1), 1);
    assert_int_equal(jint(jest(j, 3), "gpu", -1), 1);
    char w[32];
    static const char *const where[] = { "resident", "parked", "resident", "unknown" };
    for (int r = 0; r < 4; r++)
        assert_string_equal(jstr(jest(j, r), "where", w, sizeof(w)), where[r]);
    const char *e0 = jest(j, 0), *e1 = jest(j, 1);
    assert_int_equal(jint(e0, "yields", -1), 12);
    assert_int_equal(jint(e0, "swaps_out", -1), 13);
    assert_int_equal(jint(e0, "swaps_in", -1), 11);
    assert_int_equal(jint(e0, "bytes_out", -1), 3221225472L);
    assert_int_equal(jint(e0, "bytes_in", -1), 2952790016L);
    assert_int_equal(jint(e1, "yields", -1), 7);
    assert_int_equal(jint(e1, "bytes_in", -1), 536870912L);
    /* GPU 0: 0 resident, 1 parked, 3 + 2.75 + 1 + 0.5 GiB; GPU 1: 2 resident,
     * 3 neither (its memory's place not known) */
    const char *slots = strstr(j, "\"slots\":[");
    assert_non_null(slots);
    assert_non_null(strstr(slots, "\"ests\":[0,1],"));
    assert_non_null(strstr(slots, "\"resident\":[0],\"parked\":[1],\"bytes_out\":4294967296,"
                                  "\"bytes_in\":3489660928,\"bytes_swapped\":7784628224}"));
    assert_non_null(strstr(slots, "\"resident\":[2],\"parked\":[],\"bytes_out\":5242880,"
                                  "\"bytes_in\":4194304,\"bytes_swapped\":9437184}"));
    free(j);
    es_proc_result_t r;
    assert_int_equal(ctl(&r, NULL, "status", "--socket", sock, NULL), 0);
    assert_non_null(strstr(r.out, "rank  memory    yields     swaps out/in      bytes out/in\n"));
    assert_non_null(strstr(r.out, "\n0     resident  12         13/11             "
                                  "3.00 GiB/2.75 GiB\n"));
    assert_non_null(strstr(r.out, "\n1     parked    7          8/7               "
                                  "1.00 GiB/512.0 MiB\n"));
    assert_non_null(strstr(r.out, "\n3     -         0          0/0               0 B/0 B\n"));
    assert_non_null(strstr(r.out, "      resident: ranks 0; parked: ranks 1; swapped 7.25 GiB "
                                  "(4.00 GiB out, 3.25 GiB in)\n"));
    assert_non_null(strstr(r.out, "      resident: ranks 2; parked: none; swapped 9.0 MiB "
                                  "(5.0 MiB out, 4.0 MiB in)\n"));
    es_proc_result_free(&r);
    assert_int_equal(bg_finish(&job, T_JOB), 0);
}

/* A job the shim time-slices (EASYSCALE_TIME_SLICE=on: one GPU, the ESTs
 * given no slot): status counts every EST on that GPU, resident or parked
 * as its heartbeats say, with the bytes they swapped; so does a controller
 * restarted meanwhile (the job file says so); `timeslice` is refused.
 * Values the test chooses. */
static void test_status_shim_time_slice(void **state)
{
    (void)state;
    char sock[300];
    sock_path(sock, sizeof(sock), "shimts");
    char *env[] = { "SIMCUDA_DEVICES=a100:16G", "EASYSCALE_TIME_SLICE=on", NULL };
    /* rank 0 parked (1 GiB out, 768 MiB in), 1 resident (2 GiB, 2.25 GiB),
     * 2 parked (512 MiB, 256 MiB) */
    const char *figs = "p:5:6:5:1073741824:805306368/r:9:9:10:2147483648:2415919104/"
                       "p:4:5:4:536870912:268435456";
    bg_t job;
    start_fake_job(&job, env, sock, 3, NULL,
                   (const char *[]){ "--run-ms", "60000", "--hb-ms", "50", "--ts-by-rank", figs,
                                     NULL });
    char *j = wait_registered(sock, 3, 0, 30);
    long daemon = jint(j, "daemon_pid", -1);
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 100 && (jint(jest(j, 0), "yields", 0) != 5 ||
                                    jint(jest(j, 1), "yields", 0) != 9 ||
                                    jint(jest(j, 2), "yields", 0) != 4); i++) {
            free(j);
            msleep(100);
            j = status_json(sock);
        }
        assert_non_null(j);
        assert_non_null(strstr(j, "\"shim_time_slice\":true,"));
        char w[32];
        static const char *const where[] = { "parked", "resident", "parked" };
        for (int r = 0; r < 3; r++) {
            /* no slot reported, GPU 0 (not "host") */
            assert_non_null(strstr(jest(j, r), "\"gpu\":0,\"slot\":\"\","));
            assert_string_equal(jstr(jest(j, r), "where", w, sizeof(w)), where[r]);
        }
        /* GPU 0: 1 resident, 0 and 2 parked; 3.5 GiB out, 3.25 GiB in */
        const char *slots = strstr(j, "\"slots\":[");
        assert_non_null(slots);
        assert_non_null(strstr(slots, "{\"gpu\":0,"));
        assert_non_null(strstr(slots, "\"ests\":[0,1,2],"));
        assert_non_null(strstr(slots, "\"resident\":[1],\"parked\":[0,2],\"bytes_out\":3758096384,"
                                      "\"bytes_in\":3489660928,\"bytes_swapped\":7247757312}"));
        free(j);
        j = NULL;
        es_proc_result_t r;
        assert_int_equal(ctl(&r, NULL, "status", "--socket", sock, NULL), 0);
        assert_non_null(strstr(r.out, "\ntime-sliced by the shim (EASYSCALE_TIME_SLICE): "
                                      "every EST takes turns on GPU 0\n"));
        assert_non_null(strstr(r.out, "\n0     parked    5          6/5               "
                                      "1.00 GiB/768.0 MiB\n"));
        assert_non_null(strstr(r.out, "\n1     resident  9          9/10              "
                                      "2.00 GiB/2.25 GiB\n"));
        assert_non_null(strstr(r.out, "\n0     a100   16.0 GiB   yes  0,1,2"));
        assert_non_null(strstr(r.out, "      resident: ranks 1; parked: ranks 0,2; swapped "
                                      "6.75 GiB (3.50 GiB out, 3.25 GiB in)\n"));
        assert_null(strstr(r.out, " host "));
        es_proc_result_free(&r);
        /* the shim's rotation is the job's from start to end */
        assert_int_equal(ctl(&r, NULL, "timeslice", "0", "--socket", sock, NULL), 1);
        assert_non_null(strstr(r.out, "the shim time-slices this job on GPU 0"));
        es_proc_result_free(&r);
        if (pass)
            break;
        /* a new controller learns it from the job file */
        assert_int_equal(kill((pid_t)daemon, SIGKILL), 0);
        long d2 = -1;
        for (int i = 0; i < 100; i++) {
            free(j);
            j = status_json(sock);
            d2 = jint(j, "daemon_pid", -1);
            if (d2 > 0 && d2 != daemon && jint(j, "registered", 0) == 3)
                break;
            msleep(100);
        }
        assert_true(d2 > 0 && d2 != daemon);
    }
    assert_int_equal(bg_finish(&job, T_JOB), 0);
    char *out = bg_output(&job);
    assert_non_null(strstr(out, "started a new one"));
    free(out);
}

static void test_scale_moves(void **state)
{
    (void)state;
    char sock[300], uuids[4][48];
    sock_path(sock, sizeof(sock), "moves");
    assert_int_equal(gpu_uuids("a100:8G,a100:8G,a100:8G,a100:8G", uuids, 4), 4);
    char *env[] = { "SIMCUDA_DEVICES=a100:8G,a100:8G,a100:8G,a100:8G", NULL };
    bg_t job;
    start_fake_job(&job, env, sock, 4, (const char *[]){ "--gpus", "all", NULL },
                   (const char *[]){ "--run-ms", "60000", NULL });
    char *j = wait_registered(sock, 4, 0, 30);
    for (int r = 0; r < 4; r++)
        assert_int_equal(jint(jest(j, r), "gpu", -1), r);
    free(j);
    es_proc_result_t r;
    /* preempt 3: only rank 3 moves, onto GPU 0 */
    assert_int_equal(ctl(&r, NULL, "preempt", "3", "--socket", sock, NULL), 0);
    assert_non_null(strstr(r.out, "preempt GPU 3: done in"));
    assert_non_null(strstr(r.out, "(1 EST moved); the job runs on GPUs 0,1,2"));
    assert_non_null(strstr(r.out, "rank 3: place 3 -> 0: ok"));
    es_proc_result_free(&r);
    /* grant it back: rank 3 (the higher rank of GPU 0) returns */
    assert_int_equal(ctl(&r, NULL, "grant", "3", "--socket", sock, NULL), 0);
    assert_non_null(strstr(r.out, "rank 3: place 0 -> 3: ok"));
    es_proc_result_free(&r);
    /* errors before anything moves */
    assert_int_equal(ctl(&r, NULL, "grant", "3", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "already the job's"));
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "preempt", "7", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "no such GPU"));
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "scale", "--gpus", "0,x", "--socket", sock, NULL), 2);
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "migrate", "9", "--gpu", "0", "--socket", sock, NULL), 2);
    assert_non_null(strstr(r.out, "no EST 9"));
    es_proc_result_free(&r);
    /* 4 -> 2 GPUs: ranks 2 and 3 move, one to each */
    assert_int_equal(ctl(&r, NULL, "scale", "--gpus", "0,1", "--socket", sock, NULL), 0);
    assert_non_null(strstr(r.out, "(2 ESTs moved); the job runs on GPUs 0,1"));
    es_proc_result_free(&r);
    j = status_json(sock);
    int want[4] = { 0, 1, 0, 1 };
    for (int k = 0; k < 4; k++)
        assert_int_equal(jint(jest(j, k), "gpu", -1), want[k]);
    assert_non_null(strstr(j, "\"gpus\":\"0,1\""));
    assert_int_equal(jint(j, "epoch", -1), 3);
    free(j);
    /* swap-out / swap-in by UUID */
    assert_int_equal(ctl(&r, NULL, "swap-out", "1", "--socket", sock, NULL), 0);
    es_proc_result_free(&r);
    j = status_json(sock);
    char st[32];
    assert_string_equal(jstr(jest(j, 1), "state", st, sizeof(st)), "swapped-out");
    assert_string_equal(jstr(jest(j, 1), "gpu", st, sizeof(st)), "host");
    free(j);
    assert_int_equal(ctl(&r, NULL, "swap-in", "1", "--gpu", uuids[0], "--socket", sock, NULL), 0);
    es_proc_result_free(&r);
    j = status_json(sock);
    assert_int_equal(jint(jest(j, 1), "gpu", -1), 0);
    free(j);
    /* a GPU outside the job */
    assert_int_equal(ctl(&r, NULL, "migrate", "0", "--gpu", "3", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "not one of the job's (grant it first)"));
    es_proc_result_free(&r);
    assert_int_equal(bg_finish(&job, T_JOB), 0);
    char *out = bg_output(&job);
    char line[200];
    snprintf(line, sizeof(line), "[3] fake_est: rank 3: place -> %s: ok", uuids[0]);
    assert_non_null(strstr(out, line));
    free(out);

    /* ESTs that refuse: the command fails with their reason, the job stays
     * where it is, consistent */
    start_fake_job(&job, env, sock, 2, (const char *[]){ "--gpus", "0,1", NULL },
                   (const char *[]){ "--run-ms", "60000", "--move", "fail", NULL });
    free(wait_registered(sock, 2, 0, 30));
    assert_int_equal(ctl(&r, NULL, "preempt", "1", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "preempt GPU 1: failed after"));
    assert_non_null(strstr(r.out, "rank 1: place 1 -> 0: failed: fake_est: refused on purpose"));
    assert_non_null(strstr(r.out, "the job runs on GPUs 0,1"));
    es_proc_result_free(&r);
    j = status_json(sock);
    assert_int_equal(jint(jest(j, 1), "gpu", -1), 1);
    assert_non_null(strstr(j, "\"gpus\":\"0,1\""));
    free(j);
    assert_int_equal(bg_finish(&job, T_JOB), 0);

    /* an EST that never answers: the move times out */
    start_fake_job(&job, env, sock, 2, (const char *[]){ "--gpus", "0,1", "--move-timeout", "0.5",
                                                         NULL },
                   (const char *[]){ "--run-ms", "60000", "--move", "hang", NULL });
    free(wait_registered(sock, 2, 0, 30));
    assert_int_equal(ctl(&r, NULL, "migrate", "0", "--gpu", "1", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "failed: no answer within"));
    es_proc_result_free(&r);
    assert_int_equal(bg_finish(&job, T_JOB), 0);
}

static void test_placement_by_speed(void **state)
{
    (void)state;
    char sock[300];
    sock_path(sock, sizeof(sock), "speed");
    char *env[] = { "SIMCUDA_DEVICES=a100:8G,t4:16G", NULL };
    bg_t job;
    /* prior (SMs x clock): an A100 EST step ~6.6, a T4's ~15.7 -> 3 + 1.
     * Measured: step 15 ms, of which waited 3 ms on the A100 (12 / 3 ESTs
     * = 4 ms each) and 11 ms on the T4 (4 ms): as fast -> 2 + 2. */
    start_fake_job(&job, env, sock, 4, NULL,
                   (const char *[]){ "--run-ms", "60000", "--hb-ms", "50", "--step-ns", "15000000",
                                     "--wait-ns-by-rank", "3000000,3000000,3000000,11000000",
                                     NULL });
    char *j = wait_registered(sock, 4, 3, 30);
    int want[4] = { 0, 0, 0, 1 };
    for (int r = 0; r < 4; r++)
        assert_int_equal(jint(jest(j, r), "gpu", -1), want[r]);
    free(j);
    for (int i = 0; i < 50; i++) { /* the estimate settles */
        j = status_json(sock);
        int measured = j && strstr(j, "\"speed_source\":\"measured\"");
        free(j);
        if (measured)
            break;
        msleep(100);
    }
    msleep(500);
    es_proc_result_t r;
    assert_int_equal(ctl(&r, NULL, "scale", "--gpus", "0,1", "--socket", sock, NULL), 0);
    assert_non_null(strstr(r.out, "(1 EST moved)"));
    assert_non_null(strstr(r.out, "rank 2: place 0 -> 1: ok"));
    es_proc_result_free(&r);
    j = status_json(sock);
    assert_non_null(strstr(j, "\"speed_source\":\"measured\""));
    free(j);
    assert_int_equal(bg_finish(&job, T_JOB), 0);

    /* the same job without measurements keeps the prior's 3 + 1 */
    start_fake_job(&job, env, sock, 4, NULL, (const char *[]){ "--run-ms", "60000", NULL });
    free(wait_registered(sock, 4, 0, 30));
    assert_int_equal(ctl(&r, NULL, "scale", "--gpus", "0,1", "--socket", sock, NULL), 0);
    assert_non_null(strstr(r.out, "no EST needs to move"));
    es_proc_result_free(&r);
    assert_int_equal(bg_finish(&job, T_JOB), 0);
}

static void test_moves_of_ests_without_gpu_state(void **state)
{
    (void)state;
    /* the real shim: its control thread answers through shim/move.h; ESTs
     * that never touched a GPU have nothing to move: the CLI shows the
     * shim's reason and exits 1 (moves themselves: tests/move/est_test.c) */
    char sock[300];
    sock_path(sock, sizeof(sock), "real");
    char *env[] = { "EASYSCALE_HEARTBEAT_MS=100", NULL };
    char *argv[] = { (char *)ctl_bin(), "run", "--ests", "2", "--socket", sock, "--progress",
                     "off", "--", "sleep", "6", NULL };
    bg_t job;
    bg_start(&job, env, argv);
    char *j = wait_registered(sock, 2, 0, 30);
    free(j);
    es_proc_result_t r;
    assert_int_equal(ctl(&r, NULL, "migrate", "0", "--gpu", "1", "--socket", sock, NULL), 1);
    if (!strstr(r.out, "rank 0: migrate 0 -> 1: failed: migrate: the EST holds nothing on a GPU "
                       "yet"))
        fail_msg("%s", r.out);
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "swap-out", "1", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "swap-out: the EST holds nothing on a GPU yet"));
    es_proc_result_free(&r);
    assert_int_equal(ctl(&r, NULL, "preempt", "1", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "place: the EST holds nothing on a GPU yet"));
    assert_non_null(strstr(r.out, "the job runs on GPUs 0,1"));
    es_proc_result_free(&r);
    j = status_json(sock);
    assert_int_equal(jint(jest(j, 0), "gpu", -1), 0);
    assert_int_equal(jint(jest(j, 1), "gpu", -1), 1);
    assert_int_equal(jint(jest(j, 0), "epoch", -1), 0); /* nothing applied */
    free(j);
    assert_int_equal(bg_wait(&job, T_JOB), 0);
}

static void test_unresponsive(void **state)
{
    (void)state;
    char sock[300];
    sock_path(sock, sizeof(sock), "stall");
    bg_t job;
    start_fake_job(&job, NULL, sock, 2, (const char *[]){ "--heartbeat-timeout", "0.5", NULL },
                   (const char *[]){ "--run-ms", "60000", "--hb-ms", "50", NULL });
    char *j = wait_registered(sock, 2, 1, 30);
    pid_t p1 = (pid_t)jint(jest(j, 1), "pid", -1);
    free(j);
    assert_int_equal(kill(p1, SIGSTOP), 0);
    int seen = 0;
    char st[32];
    for (int i = 0; i < 60 && !seen; i++) {
        msleep(100);
        j = status_json(sock);
        seen = j && strcmp(jstr(jest(j, 1), "state", st, sizeof(st)), "unresponsive") == 0 &&
               strcmp(jstr(jest(j, 0), "state", st, sizeof(st)), "running") == 0;
        free(j);
    }
    /* a move is refused while it does not answer */
    es_proc_result_t r;
    assert_int_equal(ctl(&r, NULL, "migrate", "1", "--gpu", "0", "--socket", sock, NULL), 1);
    assert_non_null(strstr(r.out, "EST 1 is unresponsive"));
    es_proc_result_free(&r);
    kill(p1, SIGCONT);
    assert_true(seen);
    int back = 0;
    for (int i = 0; i < 60 && !back; i++) {
        msleep(100);
        j = status_json(sock);
        back = j && strcmp(jstr(jest(j, 1), "state", st, sizeof(st)), "running") == 0;
        free(j);
    }
    assert_true(back);
    assert_int_equal(bg_finish(&job, T_JOB), 0);
    char *out = bg_output(&job);
    char want[96];
    snprintf(want, sizeof(want), "EST 1 (pid %d) is unresponsive", (int)p1);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof(want), "EST 1 (pid %d) answers again", (int)p1);
    assert_non_null(strstr(out, want));
    free(out);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_schedule(void **state)
{
    (void)state;
    char sock[300], sched[300];
    sock_path(sock, sizeof(sock), "sched");
    snprintf(sched, sizeof(sched), "%s/ok.sched", g_tmp);
    write_file(sched, "# 2 GPUs, then 1, then 2 again\n"
                      "time 0.2 scale 0,1      # nothing to move\n"
                      "step 10 preempt 1\n"
                      "step 30 grant 1\n");
    bg_t job;
    start_fake_job(&job, NULL, sock, 2,
                   (const char *[]){ "--schedule", sched, "--progress", "0.3", NULL },
                   (const char *[]){ "--run-ms", "5000", "--hb-ms", "30", NULL });
    int st = bg_wait(&job, T_JOB);
    char *out = bg_output(&job);
    if (st != 0)
        fail_msg("status %d:\n%s", st, out);
    assert_non_null(strstr(out, "schedule: time 0.2 scale 0,1: scale to GPUs 0,1: done (no EST "
                                "needs to move)"));
    assert_non_null(strstr(out, "schedule: step 10 preempt 1: preempt GPU 1: done in"));
    assert_non_null(strstr(out, "schedule: step 30 grant 1: grant GPU 1: done in"));
    /* plain progress lines (not a terminal) */
    assert_non_null(strstr(out, "ESTs | gpu0:0 gpu1:1"));
    assert_non_null(strstr(out, "the job completed"));
    free(out);

    /* refused moves and an event that never comes: reported, exit 1 */
    write_file(sched, "step 5 preempt 1\nstep 1000000 grant 1\n");
    start_fake_job(&job, NULL, sock, 2, (const char *[]){ "--schedule", sched, NULL },
                   (const char *[]){ "--run-ms", "3000", "--hb-ms", "30", "--move", "fail",
                                     NULL });
    st = bg_wait(&job, T_JOB);
    out = bg_output(&job);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "schedule: step 5 preempt 1: preempt GPU 1: failed after"));
    assert_non_null(strstr(out, "schedule: 1 of 2 events did not happen"));
    assert_non_null(strstr(out, "2 scheduled events failed"));
    free(out);
}

/* ---- scheduled holds: exact schedules ---------------------------------------------- */

/* The ESTs wait at a step event's step until its events are done, so an
 * event at the job's last steps happens there, whatever the speed. The
 * fake ESTs jump 5 steps a heartbeat (0, 5, ..., 35, 40 and out): without
 * the hold none is ever at step 37. */
static void test_schedule_holds(void **state)
{
    (void)state;
    char sock[300], sched[300];
    sock_path(sock, sizeof(sock), "hold");
    snprintf(sched, sizeof(sched), "%s/hold.sched", g_tmp);
    write_file(sched, "step 37 preempt 1\nstep 37 grant 1\n");
    char *env[] = { "SIMCUDA_DEVICES=a100:8G,a100:8G", NULL };
    const char *fake[] = { "--hb-ms", "10", "--steps-per-hb", "5", "--end-step", "40",
                           "--run-ms", "60000", NULL };
    bg_t job;
    start_fake_job(&job, env, sock, 4,
                   (const char *[]){ "--gpus", "0,1", "--schedule", sched, NULL }, fake);
    int st = bg_wait(&job, T_JOB);
    char *out = bg_output(&job);
    if (st != 0)
        fail_msg("status %d:\n%s", st, out);
    for (int r = 0; r < 4; r++) {
        char l[96];
        snprintf(l, sizeof(l), "fake_est: rank %d: held at step 37", r);
        if (!strstr(out, l))
            fail_msg("rank %d did not wait at step 37:\n%s", r, out);
        snprintf(l, sizeof(l), "fake_est: rank %d: done at step 42", r); /* 37 + 5 */
        assert_non_null(strstr(out, l));
    }
    const char *p = strstr(out, "schedule: step 37 preempt 1: preempt GPU 1: done in");
    const char *g = strstr(out, "schedule: step 37 grant 1: grant GPU 1: done in");
    const char *rel = strstr(out, "released step 37 (4 ESTs told)");
    if (!p || !g || !rel || !(p < g && g < rel))
        fail_msg("not both events, then the release:\n%s", out);
    free(out);

    /* negative control: ESTs that do not wait; the events miss the step */
    const char *fake_nohold[] = { "--hb-ms", "10", "--steps-per-hb", "5", "--end-step", "40",
                                  "--run-ms", "60000", "--ignore-holds", "1", NULL };
    start_fake_job(&job, env, sock, 4,
                   (const char *[]){ "--gpus", "0,1", "--schedule", sched, NULL }, fake_nohold);
    st = bg_wait(&job, T_JOB);
    out = bg_output(&job);
    if (st != 1 || (!strstr(out, "events did not happen (the job ended first)") &&
                    !strstr(out, "not at its step")))
        fail_msg("ESTs that do not wait: status %d:\n%s", st, out);
    free(out);

    /* step events out of order: a usage error before anything starts */
    write_file(sched, "step 30 preempt 1\nstep 20 grant 1\n");
    es_proc_result_t r;
    ctl(&r, env, "run", "--ests", "2", "--schedule", sched, "--shim", "none", "--", "true", NULL);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.out, "step events must be in ascending order"));
    es_proc_result_free(&r);
}

/* The least step the ESTs of the job at sock report (status). */
static long least_step(const char *sock, int n)
{
    char *j = status_json(sock);
    long least = -1;
    for (int r = 0; r < n; r++) {
        long v = jint(jest(j, r), "step", -1);
        if (least < 0 || v < least)
            least = v;
    }
    free(j);
    return least;
}

/* Waits until every EST of the job at sock reports a step past `past`. */
static void wait_steps_past(const char *sock, int n, long past)
{
    for (int i = 0; i < 3000; i++) {
        if (least_step(sock, n) > past)
            return;
        msleep(20);
    }
    fail_msg("the ESTs did not go on past step %ld", past);
}

/* A job of 4 stand-in ESTs (--move xdev, plus `flag rank`) asked to
 * migrate EST 1 to gpu, which fails with reason: the request says so and
 * every EST goes on past where it stopped. The job stays up in *job. */
static void refused_hold(bg_t *job, char *env[], const char *sock, const char *gpu,
                         const char *flag, const char *rank, const char *reason)
{
    start_fake_job(job, env, sock, 4, (const char *[]){ "--gpus", "0,1", NULL },
                   (const char *[]){ "--hb-ms", "20", "--run-ms", "60000", "--move", "xdev",
                                     flag, rank, NULL });
    free(wait_registered(sock, 4, 0, 30));
    es_proc_result_t r;
    ctl(&r, NULL, "migrate", "1", "--gpu", gpu, "--socket", sock, NULL);
    char want[200];
    snprintf(want, sizeof(want), "no hold of every EST could be set: %s; nothing moved", reason);
    if (r.status != 1 || !strstr(r.out, want))
        fail_msg("%s %s: status %d:\n%s", flag, rank, r.status, r.out);
    es_proc_result_free(&r);
    wait_steps_past(sock, 4, least_step(sock, 4) + 3); /* nobody stays stopped */
}

/* A move the ESTs refuse because their collectives' staging is device
 * memory (-EXDEV) is made at a hold of every EST, which the controller sets
 * in two rounds: each offers where it stopped, all hold at the greatest
 * offer, the move is made there, then they go on. Negative control: an EST
 * that refuses to offer fails the request with its reason, nothing moves,
 * and every EST goes on (no hold left behind). */
static void test_hold_at_run_time(void **state)
{
    (void)state;
    char sock[300];
    sock_path(sock, sizeof(sock), "rdv");
    char *env[] = { "SIMCUDA_DEVICES=a100:8G,a100:8G", NULL };
    char uuids[2][48];
    assert_int_equal(gpu_uuids("a100:8G,a100:8G", uuids, 2), 2);
    bg_t job;
    start_fake_job(&job, env, sock, 4, (const char *[]){ "--gpus", "0,1", NULL },
                   (const char *[]){ "--hb-ms", "20", "--run-ms", "60000", "--move", "xdev",
                                     NULL });
    free(wait_registered(sock, 4, 0, 30));
    char *j = status_json(sock);
    int from = (int)jint(jest(j, 1), "gpu", -1), to = 1 - from;
    free(j);
    char gpu[16];
    snprintf(gpu, sizeof(gpu), "%d", to);
    es_proc_result_t r;
    ctl(&r, NULL, "migrate", "1", "--gpu", gpu, "--socket", sock, NULL);
    if (r.status != 0 || !strstr(r.out, "(at a hold of every EST at collective "))
        fail_msg("migrate at a hold: status %d:\n%s", r.status, r.out);
    unsigned long long at = 0;
    assert_int_equal(sscanf(strstr(r.out, "at collective ") + 14, "%llu", &at), 1);
    es_proc_result_free(&r);
    j = status_json(sock);
    assert_int_equal(jint(jest(j, 1), "gpu", -1), to);
    free(j);
    wait_steps_past(sock, 4, (long)at); /* released: every EST goes on */
    /* a GPU verb takes the same road: GPU `to` taken back, its ESTs moved */
    ctl(&r, NULL, "preempt", gpu, "--socket", sock, NULL);
    if (r.status != 0 || !strstr(r.out, "(at a hold of every EST at collective "))
        fail_msg("preempt at a hold: status %d:\n%s", r.status, r.out);
    es_proc_result_free(&r);
    j = status_json(sock);
    for (int k = 0; k < 4; k++)
        assert_int_equal(jint(jest(j, k), "gpu", -1), from);
    free(j);
    assert_int_equal(bg_finish(&job, T_JOB), 0);
    char *out = bg_output(&job);
    for (int k = 0; k < 4; k++) {
        char l[96];
        snprintf(l, sizeof(l), "fake_est: rank %d: hold offer at step ", k);
        assert_non_null(strstr(out, l));
        snprintf(l, sizeof(l), "fake_est: rank %d: hold at step %llu", k, at);
        if (!strstr(out, l))
            fail_msg("rank %d did not hold at step %llu:\n%s", k, at, out);
        snprintf(l, sizeof(l), "fake_est: rank %d: held at step %llu", k, at);
        assert_non_null(strstr(out, l));
    }
    char l[160];
    snprintf(l, sizeof(l), "fake_est: rank 1: migrate -> %s: ok", uuids[to]);
    assert_non_null(strstr(out, l));
    assert_int_equal(count(out, "migrate -> "), 2); /* refused once, then made */
    free(out);

    /* negative control: rank 2 makes no offer */
    refused_hold(&job, env, sock, gpu, "--hold-refuse-rank", "2",
                 "EST 2: fake_est: no offer on purpose");
    j = status_json(sock);
    assert_int_equal(jint(jest(j, 1), "gpu", -1), from); /* nothing moved */
    free(j);
    assert_int_equal(bg_finish(&job, T_JOB), 0);
    out = bg_output(&job);
    assert_int_equal(count(out, "hold withdrawn"), 4);
    assert_int_equal(count(out, "held at step"), 0);
    free(out);

    /* negative control, second round: rank 3 refuses the hold the others
     * took (they may be waiting there already): they are released */
    refused_hold(&job, env, sock, gpu, "--hold-at-refuse-rank", "3",
                 "EST 3: fake_est: step passed");
    assert_int_equal(bg_finish(&job, T_JOB), 0);
    out = bg_output(&job);
    assert_int_equal(count(out, "fake_est: rank 3: hold at step"), 0);
    assert_int_equal(count(out, "hold at step"), 3);
    free(out);
}

/* An event in flight when the daemon dies is sent again to the next one,
 * which takes it as a desired state: the EST moved already, so nothing
 * moves, and the event counts as done. */
static void test_schedule_event_survives_daemon(void **state)
{
    (void)state;
    char sock[300], sched[300];
    sock_path(sock, sizeof(sock), "again");
    snprintf(sched, sizeof(sched), "%s/again.sched", g_tmp);
    write_file(sched, "step 10 migrate 1 0\n");
    char *env[] = { "SIMCUDA_DEVICES=a100:8G,a100:8G", NULL };
    const char *fake[] = { "--hb-ms", "20", "--end-step", "20", "--ack-delay-ms", "1500",
                           "--run-ms", "60000", NULL };
    bg_t job;
    start_fake_job(&job, env, sock, 2,
                   (const char *[]){ "--gpus", "0,1", "--schedule", sched, NULL }, fake);
    long daemon = -1;
    int killed = 0;
    for (int i = 0; i < 600 && !killed && !bg_ended(&job); i++) {
        char *j = status_json(sock);
        if (j && strstr(j, "\"busy\":true")) {
            daemon = jint(j, "daemon_pid", -1);
            killed = daemon > 0 && kill((pid_t)daemon, SIGKILL) == 0;
        }
        free(j);
        if (!killed)
            msleep(20);
    }
    int st = bg_wait(&job, T_JOB);
    char *out = bg_output(&job);
    if (!killed || st != 0)
        fail_msg("killed %d, status %d:\n%s", killed, st, out);
    const char *lost = strstr(out, "schedule: step 10 migrate 1 0: no answer from the controller");
    const char *again = strstr(out, "sending it again");
    const char *done = strstr(out, "schedule: step 10 migrate 1 0: migrate EST 1 to GPU 0: done "
                                   "already");
    if (!lost || !again || !done || done < again)
        fail_msg("the event was not sent again and found done:\n%s", out);
    assert_non_null(strstr(out, "fake_est: rank 1: done at step 20"));
    free(out);
}

/* Daemons that served a request do not count toward the restart limit:
 * killed six times within a minute, each after it re-learned the job. */
static void test_restarts_counted_only_before_serving(void **state)
{
    (void)state;
    char sock[300];
    sock_path(sock, sizeof(sock), "restarts");
    char *env[] = { "SIMCUDA_DEVICES=a100:8G", NULL };
    const char *fake[] = { "--hb-ms", "20", "--run-ms", "60000", "--end-step", "1000000", NULL };
    bg_t job;
    start_fake_job(&job, env, sock, 2, (const char *[]){ "--gpus", "0", NULL }, fake);
    long last = -1;
    int kills = 0;
    for (int i = 0; i < 3000 && kills < 6; i++) {
        char *j = status_json(sock);
        long d = jint(j, "daemon_pid", -1);
        /* a new daemon that re-learned both ESTs (and so served `status`) */
        if (j && d > 0 && d != last && jint(j, "registered", 0) == 2) {
            assert_int_equal(kill((pid_t)d, SIGKILL), 0);
            last = d;
            kills++;
        }
        free(j);
        msleep(10);
    }
    assert_int_equal(kills, 6);
    char *j = NULL;
    long d = -1;
    for (int i = 0; i < 500 && (d <= 0 || d == last); i++) {
        free(j);
        j = status_json(sock);
        d = jint(j, "daemon_pid", -1);
        msleep(20);
    }
    free(j);
    kill(job.pid, SIGTERM); /* run stops the ESTs and the daemon */
    bg_wait(&job, T_JOB);
    char *out = bg_output(&job);
    if (d <= 0 || d == last || count(out, "started a new one") != 6 ||
        strstr(out, "not restarting it again"))
        fail_msg("after 6 kills of serving daemons: daemon %ld (last killed %ld):\n%s", d, last,
                 out);
    free(out);
}

static void test_progress_tty(void **state)
{
    (void)state;
    /* on a terminal (a pty from script(1)): one line, redrawn in place */
    if (access("/usr/bin/script", X_OK) != 0)
        fail_msg("/usr/bin/script (bsdutils) is missing: it gives this test a terminal");
    char sock[300], cmd[10000];
    sock_path(sock, sizeof(sock), "tty");
    snprintf(cmd, sizeof(cmd),
             "/usr/bin/script -qefc '%s run --ests 2 --socket %s --shim none -- %s --run-ms 3000 "
             "--hb-ms 50' /dev/null",
             ctl_bin(), sock, fake_bin());
    es_proc_result_t r;
    assert_int_equal(es_run_sh(cmd, NULL, T_JOB, &r), 0);
    assert_non_null(strstr(r.out, "\r\033[Kstep "));
    assert_non_null(strstr(r.out, "| 2/2 ESTs | gpu0:0 gpu1:1"));
    assert_non_null(strstr(r.out, "[1] fake_est: rank 1: done at step"));
    es_proc_result_free(&r);
}

static void test_tcp(void **state)
{
    (void)state;
    char sock[300], target[128], tcp[96];
    sock_path(sock, sizeof(sock), "tcp");
    char *env[] = { "EASYSCALE_TOKEN=0123456789abcdef-token", NULL };
    bg_t job;
    start_fake_job(&job, env, sock, 1, (const char *[]){ "--tcp", "127.0.0.1:0", NULL },
                   (const char *[]){ "--run-ms", "60000", NULL });
    char *j = wait_registered(sock, 1, 0, 30);
    char st[32];
    (void)st;
    const char *p = strstr(j, "\"tcp\":\"");
    assert_non_null(p);
    snprintf(tcp, sizeof(tcp), "%.*s", (int)strcspn(p + 7, "\""), p + 7);
    free(j);
    assert_non_null(strstr(tcp, "127.0.0.1:"));
    snprintf(target, sizeof(target), "tcp:%s", tcp);
    es_proc_result_t r;
    assert_int_equal(ctl(&r, env, "status", "--json", "--socket", target, NULL), 0);
    assert_non_null(strstr(r.out, "\"registered\":1"));
    es_proc_result_free(&r);
    char *bad[] = { "EASYSCALE_TOKEN=0123456789abcdef-wrong", NULL };
    assert_int_equal(ctl(&r, bad, "status", "--socket", target, NULL), 1);
    assert_non_null(strstr(r.out, "closed the connection without an answer"));
    es_proc_result_free(&r);
    char *none[] = { "EASYSCALE_TOKEN=", NULL };
    assert_int_equal(ctl(&r, none, "status", "--socket", target, NULL), 1);
    assert_non_null(strstr(r.out, "needs EASYSCALE_TOKEN"));
    es_proc_result_free(&r);
    assert_int_equal(bg_finish(&job, T_JOB), 0);
    char *out = bg_output(&job);
    assert_non_null(strstr(out, "bad token"));
    free(out);
    /* --tcp without a token is a usage error */
    assert_int_equal(ctl(&r, none, "run", "--ests", "1", "--tcp", "127.0.0.1:0", "--", "true",
                         NULL),
                     2);
    es_proc_result_free(&r);
}

static void test_default_socket(void **state)
{
    (void)state;
    char xdg[300], envx[320], dir[400];
    snprintf(xdg, sizeof(xdg), "%s/xdg", g_tmp);
    assert_int_equal(mkdir(xdg, 0700), 0);
    snprintf(envx, sizeof(envx), "XDG_RUNTIME_DIR=%s", xdg);
    char *env[] = { envx, NULL };
    char *argv[] = { (char *)ctl_bin(), "run", "--ests", "1", "--shim", "none", "--progress",
                     "off", "--", (char *)fake_bin(), "--run-ms", "4000", NULL };
    /* files a run killed with SIGKILL left: removed by the next run; those
     * of a live process stay */
    char stale[600], live[600];
    snprintf(dir, sizeof(dir), "%s/easyscale", xdg);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(stale, sizeof(stale), "%s/job-2147483.sock.job", dir);
    write_file(stale, "x");
    snprintf(stale, sizeof(stale), "%s/job-2147483.sock", dir);
    write_file(stale, "x");
    snprintf(live, sizeof(live), "%s/job-%d.sock", dir, (int)getpid());
    write_file(live, "x");
    bg_t job, job2;
    bg_start(&job, env, argv);
    es_proc_result_t r;
    int ok = 0;
    for (int i = 0; i < 100 && !ok; i++) {
        ctl(&r, env, "status", "--json", NULL);
        ok = r.status == 0 && strstr(r.out, "\"registered\":1");
        es_proc_result_free(&r);
        if (!ok)
            msleep(100);
    }
    assert_true(ok);
    assert_int_equal(access(stale, F_OK), -1);
    strcat(stale, ".job");
    assert_int_equal(access(stale, F_OK), -1);
    assert_int_equal(access(live, F_OK), 0);
    unlink(live);
    /* a private directory and a private socket */
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    char sockp[500];
    snprintf(sockp, sizeof(sockp), "%s/job-%d.sock", dir, (int)job.pid);
    assert_int_equal(stat(sockp, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0600);
    /* two jobs: the default is ambiguous */
    bg_start(&job2, env, argv);
    ok = 0;
    for (int i = 0; i < 100 && !ok; i++) {
        ctl(&r, env, "status", NULL);
        ok = r.status == 1 && strstr(r.out, "2 jobs are running; name one with --socket");
        es_proc_result_free(&r);
        if (!ok)
            msleep(100);
    }
    assert_true(ok);
    assert_int_equal(bg_wait(&job, T_JOB), 0);
    assert_int_equal(bg_wait(&job2, T_JOB), 0);
    /* no job */
    assert_int_equal(ctl(&r, env, "status", NULL), 1);
    assert_non_null(strstr(r.out, "no job is running"));
    es_proc_result_free(&r);
    /* a directory others can enter is refused */
    assert_int_equal(chmod(dir, 0755), 0);
    assert_int_equal(ctl(&r, env, "status", NULL), 1);
    assert_non_null(strstr(r.out, "is not a private directory"));
    es_proc_result_free(&r);
}

/* One request of a node's link, as node 0's daemon would take it: its
 * argument into arg, answered with TEXT and exit status rc. */
static void nlink_serve(int lfd, char *arg, size_t cap, int rc, const char *text)
{
    int fd = accept(lfd, NULL, NULL);
    assert_true(fd >= 0);
    struct timeval tv = { 10, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    static uint8_t rx[4096], tx[4096];
    es_proto_reader_t rd = { .accept = ES_PROTO_ACCEPT_DAEMON, .buf = rx, .cap = sizeof(rx) };
    int r;
    while ((r = es_proto_reader_fill(&rd, fd)) == 0)
        ;
    assert_int_equal(r, 1);
    es_proto_msg_t m, a = { .type = ES_MSG_REPLY };
    assert_int_equal(es_proto_decode(&rd.h, rd.buf, &m), 0);
    assert_int_equal(m.type, ES_MSG_REQUEST);
    assert_int_equal(m.u.req.verb, ES_VERB_NODE);
    snprintf(arg, cap, "%s", m.u.req.arg);
    a.seq = m.seq;
    a.u.reply.rc = rc;
    a.u.reply.text = text;
    a.u.reply.text_len = (uint32_t)strlen(text);
    size_t n;
    assert_int_equal(es_proto_encode(&a, tx, sizeof(tx), &n), 0);
    assert_int_equal(es_proto_send_all(fd, tx, n, NULL), 0);
    close(fd);
}

/* Steps the link until its request in flight has its answer. */
static void nlink_until_answered(es_ctl_nlink_t *l)
{
    for (int i = 0; i < 10000 && es_ctl_nlink_fd(l) >= 0; i++) {
        es_ctl_nlink_step(l, es_ctl_now_ms());
        if (es_ctl_nlink_fd(l) >= 0)
            usleep(1000);
    }
    assert_true(es_ctl_nlink_fd(l) < 0);
}

static void test_nlink_state_told(void **state)
{
    (void)state;
    /* a node's EST fails while its "running" report is in flight: the
     * answer to that report does not count as the daemon told of the
     * failure (a run that believed it ended before node 0 heard why) */
    char sock[300], arg[700];
    sock_path(sock, sizeof(sock), "nlink");
    unlink(sock);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    assert_true(strlen(sock) < sizeof(sa.sun_path));
    memcpy(sa.sun_path, sock, strlen(sock) + 1);
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(lfd >= 0);
    assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(lfd, 4), 0);
    static es_ctl_nlink_t l;
    es_ctl_gpu_t g = { .ordinal = 1, .mem = 8ull << 30 };
    snprintf(g.model, sizeof(g.model), "a100");
    snprintf(g.uuid, sizeof(g.uuid), "GPU-test");
    es_ctl_nlink_init(&l, sock, NULL, 1, "hostb", "1", 60000, es_ctl_now_ms());
    assert_int_equal(es_ctl_nlink_add_gpu(&l, 0, 1, &g, 1), 0);
    es_ctl_nlink_step(&l, es_ctl_now_ms());
    assert_true(es_ctl_nlink_fd(&l) >= 0);
    es_ctl_nlink_set(&l, ES_NODE_FAILED, "EST 3 (pid 9) exited with status 3");
    nlink_serve(lfd, arg, sizeof(arg), 0, "running 0/2");
    assert_string_equal(arg, "running hostb 1 gpu=0/1,1,8192,a100,1,GPU-test");
    nlink_until_answered(&l);
    assert_int_equal(l.told, 0);
    assert_int_equal(l.job, ES_NODE_RUNNING);
    /* the failure goes next, and its answer tells it */
    es_ctl_nlink_step(&l, es_ctl_now_ms());
    assert_true(es_ctl_nlink_fd(&l) >= 0);
    nlink_serve(lfd, arg, sizeof(arg), 1, "failed 1/2 node 1: EST 3 (pid 9) exited with status 3");
    assert_string_equal(arg, "failed hostb 1 EST 3 (pid 9) exited with status 3");
    nlink_until_answered(&l);
    assert_int_equal(l.told, 1);
    assert_int_equal(l.job, ES_NODE_FAILED);
    assert_int_equal(l.ended, 1);
    es_ctl_nlink_free(&l);
    close(lfd);
    unlink(sock);
}

static void test_job_file(void **state)
{
    (void)state;
    /* the job file round-trips, and a damaged one is refused */
    char sock[300], err[512];
    sock_path(sock, sizeof(sock), "jobfile");
    static es_ctl_job_t a, b;
    memset(&a, 0, sizeof(a));
    a.nests = 2;
    a.determinism = 2;
    snprintf(a.canonical, sizeof(a.canonical), "a100,t4");
    a.est_mem = 256ull << 20;
    a.time_slicing = 1;
    a.shim_time_slice = 1;
    a.xhost_host = 1;
    a.hb_timeout_ms = 1500;
    a.move_timeout_ms = 9000;
    snprintf(a.tcp, sizeof(a.tcp), "127.0.0.1:5000");
    a.epoch = 12;
    a.ngpus = 2;
    for (int g = 0; g < 2; g++) {
        a.gpus[g].ordinal = g;
        snprintf(a.gpus[g].uuid, sizeof(a.gpus[g].uuid), "GPU-0000000%d-0000-4000-8000-000000000000", g);
        snprintf(a.gpus[g].name, sizeof(a.gpus[g].name), g ? "Tesla T4" : "NVIDIA A100-SXM4-40GB");
        snprintf(a.gpus[g].model, sizeof(a.gpus[g].model), g ? "t4" : "a100");
        a.gpus[g].mem = 8ull << 30;
        a.gpus[g].sms = 40 + g;
        a.gpus[g].clock_khz = 1000 + g;
    }
    a.slots = 3;
    a.place[0] = 0;
    a.place[1] = 1;
    a.pids[0] = 100;
    a.pids[1] = 101;
    /* across hosts: a GPU of node 1 (its reports told it), and the failure */
    a.nnodes = 2;
    a.ests_per_node = 1;
    a.gpus[2] = a.gpus[0];
    a.gpus[2].node = 1;
    a.ngpus = 3;
    a.slots = 7;
    a.failed_node = 1;
    snprintf(a.failed, sizeof(a.failed), "host h1 (node 1): EST 1 (pid 7) exited with status 3");
    assert_int_equal(es_ctl_job_write(sock, &a), 0);
    assert_int_equal(es_ctl_job_read(sock, &b, err, sizeof(err)), 0);
    assert_true(b.nnodes == 2 && b.ngpus == 3 && b.gpus[2].node == 1 && b.gpus[0].node == 0);
    assert_int_equal(b.failed_node, 1);
    assert_string_equal(b.failed, a.failed);
    assert_int_equal(b.nests, 2);
    assert_int_equal(b.determinism, 2);
    assert_string_equal(b.canonical, "a100,t4");
    assert_true(b.est_mem == a.est_mem && b.epoch == 12 && b.slots == 7);
    assert_true(b.time_slicing == 1 && b.shim_time_slice == 1 && b.xhost_host == 1);
    assert_string_equal(b.tcp, "127.0.0.1:5000");
    assert_string_equal(b.gpus[1].name, "Tesla T4");
    assert_string_equal(b.gpus[1].uuid, a.gpus[1].uuid);
    assert_int_equal(b.place[1], 1);
    assert_int_equal(b.pids[1], 101);
    char path[400];
    snprintf(path, sizeof(path), "%s.job", sock);
    size_t len;
    char *text = es_read_file(path, &len);
    assert_non_null(text);
    const char *breaks[][2] = { { "ests 2", "ests 0" }, { "determinism d2", "determinism d9" },
                                { "epoch 12", "epoch -1" }, { "end\n", "" },
                                { "est 1 1 101", "est 1 7 101" }, { "time_slicing 1", "bogus 1" },
                                { "shim_time_slice 1", "shim_time_slice 2" },
                                { "shim_time_slice 1\n", "" },
                                { "xhost_host 1", "xhost_host 3" }, { "xhost_host 1\n", "" },
                                { "node_gpu 1 gpu", "node_gpu 0 gpu" },
                                { "node_gpu 1 gpu", "node_gpu 1 gpx" },
                                { "failed 1 host", "failed x host" },
                                { "failed 1 host h1 (node 1): EST 1 (pid 7) exited with status 3",
                                  "failed 1" } };
    for (size_t i = 0; i < sizeof(breaks) / sizeof(breaks[0]); i++) {
        char *bad = malloc(len + 32), *p = strstr(text, breaks[i][0]);
        assert_non_null(p);
        size_t off = (size_t)(p - text);
        memcpy(bad, text, off);
        strcpy(bad + off, breaks[i][1]);
        strcat(bad + off, p + strlen(breaks[i][0]));
        write_file(path, bad);
        free(bad);
        if (es_ctl_job_read(sock, &b, err, sizeof(err)) != -EINVAL)
            fail_msg("damage %zu accepted", i);
    }
    free(text);
}

static void test_gpu_spec(void **state)
{
    (void)state;
    es_ctl_gpu_t g[3];
    memset(g, 0, sizeof(g));
    for (int i = 0; i < 3; i++) {
        g[i].ordinal = i;
        snprintf(g[i].uuid, sizeof(g[i].uuid), "GPU-0000000%d-0000-4000-8000-000000000000", i);
    }
    uint64_t m;
    char err[256];
    assert_int_equal(es_ctl_gpus_parse("all", g, 3, &m, err, sizeof(err)), 0);
    assert_true(m == 7);
    assert_int_equal(es_ctl_gpus_parse("2,0", g, 3, &m, err, sizeof(err)), 0);
    assert_true(m == 5);
    assert_int_equal(es_ctl_gpus_parse("0-1", g, 3, &m, err, sizeof(err)), 0);
    assert_true(m == 3);
    assert_int_equal(es_ctl_gpus_parse("GPU-00000002-0000-4000-8000-000000000000,0", g, 3, &m, err,
                                       sizeof(err)), 0);
    assert_true(m == 5);
    assert_int_equal(es_ctl_gpus_parse("3", g, 3, &m, err, sizeof(err)), -ENOENT);
    assert_int_equal(es_ctl_gpus_parse("GPU-dead", g, 3, &m, err, sizeof(err)), -ENOENT);
    const char *bad[] = { "", ",", "0,", ",0", "0,,1", "1-0", "0-x", "-1", "1 ", "a", "0,0" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (es_ctl_gpus_parse(bad[i], g, 3, &m, err, sizeof(err)) != -EINVAL)
            fail_msg("\"%s\" accepted", bad[i]);
    /* model keys from driver names */
    assert_string_equal(es_ctl_gpu_model("NVIDIA A100-SXM4-80GB"), "a100");
    assert_string_equal(es_ctl_gpu_model("NVIDIA A10"), "a10");
    assert_string_equal(es_ctl_gpu_model("NVIDIA L4"), "l4");
    assert_string_equal(es_ctl_gpu_model("NVIDIA L40S"), "");
    assert_string_equal(es_ctl_gpu_model("Tesla V100-SXM2-16GB"), "v100");
    /* d2's canonical device: the shim's models, not older ones */
    assert_false(es_ctl_d2_model_known("v100"));
    assert_false(es_ctl_d2_model_known("p100"));
    assert_false(es_ctl_d2_model_known(""));
    assert_false(es_ctl_d2_model_known(NULL));
    assert_true(es_ctl_d2_model_known("b200"));
    assert_true(es_ctl_d2_model_known("t4"));
    assert_true(es_ctl_d2_model_known("a10"));
    assert_string_equal(es_ctl_gpu_model("NVIDIA H100 80GB HBM3"), "h100");
    assert_string_equal(es_ctl_gpu_model("NVIDIA H200"), "h200");
    assert_string_equal(es_ctl_gpu_model("NVIDIA B200"), "b200");
    assert_string_equal(es_ctl_gpu_model("Tesla T4"), "t4");
    assert_string_equal(es_ctl_gpu_model("NVIDIA GeForce RTX 4090"), "");
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/es-ctl-test-XXXXXX");
    if (!mkdtemp(g_tmp))
        return -1;
    signal(SIGPIPE, SIG_IGN);
    bg_dir(g_tmp);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (g_daemon_as_nobody > 0) {
        kill(g_daemon_as_nobody, SIGKILL);
        waitpid(g_daemon_as_nobody, NULL, 0);
    }
    bg_kill_all();
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_spec),
        cmocka_unit_test(test_job_file),
        cmocka_unit_test(test_nlink_state_told),
        cmocka_unit_test(test_usage),
        cmocka_unit_test(test_gpus),
        cmocka_unit_test(test_run_env),
        cmocka_unit_test(test_run_failure),
        cmocka_unit_test(test_two_controllers),
        cmocka_unit_test(test_bad_frames),
        cmocka_unit_test(test_one_registration_per_process),
        cmocka_unit_test(test_other_uid),
        cmocka_unit_test(test_scale_refused),
        cmocka_unit_test(test_scale_moves),
        cmocka_unit_test(test_timeslice_commands),
        cmocka_unit_test(test_status_ts_figures),
        cmocka_unit_test(test_status_shim_time_slice),
        cmocka_unit_test(test_placement_by_speed),
        cmocka_unit_test(test_moves_of_ests_without_gpu_state),
        cmocka_unit_test(test_unresponsive),
        cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_schedule_holds),
        cmocka_unit_test(test_hold_at_run_time),
        cmocka_unit_test(test_schedule_event_survives_daemon),
        cmocka_unit_test(test_restarts_counted_only_before_serving),
        cmocka_unit_test(test_progress_tty),
        cmocka_unit_test(test_tcp),
        cmocka_unit_test(test_default_socket),
        cmocka_unit_test(test_restart_relearns),
        cmocka_unit_test(test_schedule_waits_for_reregistration),
        cmocka_unit_test(test_train_kill_controller),
    };
    if (getenv("CTL_TEST")) /* one test by name, when debugging */
        cmocka_set_test_filter(getenv("CTL_TEST"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
