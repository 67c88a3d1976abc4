/* Integration tests of examples/train.py on simcuda (run under
 * scripts/simenv, which sets LD_LIBRARY_PATH, SIMCUDA_KERNELS, ES_ROOT,
 * ES_BUILD): whole data-parallel jobs started with scripts/launch.
 *
 *  - bad arguments and a missing library give one clear line and a non-zero
 *    exit, never a Python traceback;
 *  - training reaches clearly better than chance held-out accuracy;
 *  - with every knob deterministic (--deterministic-kernels,
 *    --cudnn-deterministic, CUBLAS_WORKSPACE_CONFIG=:4096:8) two runs agree
 *    bit for bit, and all ranks agree with each other;
 *  - negative controls, without the shim, each change the checksum: (a) the
 *    float-atomic kernel run to run, (b) another GPU model (cuBLAS/cuDNN
 *    heuristics, SM-count-sized reduction), (c) another rank-to-GPU
 *    placement (NCCL reduction order: VENDOR-FACTS "NCCL", changing the
 *    rank-to-GPU mapping changes the order), (d) cuDNN's heuristic pick of a
 *    nondeterministic algorithm (T4 model) run to run;
 *  - the NCCL id over TCP at MASTER_ADDR:MASTER_PORT (no rendezvous
 *    directory) gives the checksum of the directory's rendezvous, on one
 *    host and across two simulated hosts (scripts/simhosts: no shared
 *    /tmp); a rank alone times out naming the address, rank 0 closes
 *    connections with a bad hello and times out naming the address and
 *    the missing rank; a bad MASTER_PORT is one line and exit 1;
 *  - the same global batch on 1, 2 and 4 ranks is the same update: loss
 *    curves and parameters agree to float rounding (negative control: lr
 *    changed by 1 %);
 *  - with libeasyscale.so preloaded at EASYSCALE_DETERMINISM=d2 an A100 and
 *    a T4 agree, at off they do not; at d1 two runs on the T4 model
 *    agree with no deterministic knob set by the application, at off they
 *    do not;
 *  - d2's two GEMM paths (EASYSCALE_D2_GEMM): int8 (the default) and fma
 *    on an A100 and a T4 give different checksums (they round
 *    differently) and loss curves within D2P_TOL of each other;
 *  - placement: 4 and 8 ESTs on fewer GPUs under the shim give one
 *    checksum, on the three transports of the virtual collectives (the
 *    NCCL carriers: 4 ESTs on 4, 2, 1 GPUs, 8 on 4 and 2), and 4 ESTs
 *    on 2 GPUs under simcuda's adversarial scheduling (SIMCUDA_CHAOS) give
 *    the checksum of the run without it.
 *
 * The runs are short; results are shared between the tests in order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/harness.h"

#define RUN_TIMEOUT 120
/* Short runs for the bit-equality checks, a longer one for learning. */
#define DET_ARGS "--steps", "12", "--batch", "16", "--log-every", "6", "--test-samples", "32"
#define LEARN_STEPS "150"

typedef struct job {
    int status;
    int nsums;
    char sum[80];       /* the checksum all ranks printed ("" if none/disagree) */
    double heldout;     /* held-out accuracy, -1 if not printed */
    char *out;
} job_t;

static job_t learn_run, det_a100, det_t4, atomic_run;

static void job_free(job_t *j)
{
    free(j->out);
    j->out = NULL;
}

/* Fills j from a finished job's result r (taking r->out): its status, the
 * checksum all nranks ranks printed, the held-out accuracy. */
static void job_collect(job_t *j, const es_proc_result_t *r, int nranks)
{
    j->status = r->status;
    j->out = r->out;
    j->heldout = -1;
    /* Every rank prints "checksum <hex>"; they must all be the same. */
    const char *p = r->out;
    int agree = 1;
    while ((p = strstr(p, "checksum ")) != NULL) {
        if (p == r->out || p[-1] == '\n') {
            char s[80];
            if (sscanf(p + 9, "%79s", s) == 1) {
                if (j->nsums == 0)
                    snprintf(j->sum, sizeof j->sum, "%s", s);
                else if (strcmp(s, j->sum) != 0)
                    agree = 0;
                j->nsums++;
            }
        }
        p += 9;
    }
    if (!agree)
        j->sum[0] = '\0';
    char buf[64];
    if (es_find_last(r->out, "held-out accuracy ", buf, sizeof buf))
        j->heldout = strtod(buf, NULL);
    if (j->status != 0 || j->nsums != nranks || !agree || strstr(r->out, "Traceback"))
        fprintf(stderr, "---- job output (status %d) ----\n%s\n----\n", j->status, r->out);
}

/* Runs `scripts/launch -n N [--gpus G] -- python3 examples/train.py ARGS...`
 * with extra environment env, and collects the checksum lines. */
static void run_job(job_t *j, int nranks, const char *gpus, char *const env[], ...)
{
    char *argv[64];
    int n = 0;
    char nbuf[16];
    snprintf(nbuf, sizeof nbuf, "%d", nranks);
    argv[n++] = (char *)es_root_path("scripts/launch");
    argv[n++] = "-n";
    argv[n++] = nbuf;
    if (gpus) {
        argv[n++] = "--gpus";
        argv[n++] = (char *)gpus;
    }
    argv[n++] = "--";
    argv[n++] = "python3";
    argv[n++] = (char *)es_root_path("examples/train.py");
    va_list ap;
    va_start(ap, env);
    const char *a;
    while ((a = va_arg(ap, const char *)) && n < 62)
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;

    es_proc_result_t r;
    memset(j, 0, sizeof *j);
    int rc = es_run(argv, env, RUN_TIMEOUT, &r);
    assert_int_equal(rc, 0);
    job_collect(j, &r, nranks);
}

static void assert_ok_job(const job_t *j, int nranks)
{
    assert_int_equal(j->status, 0);
    assert_int_equal(j->nsums, nranks);
    assert_int_equal(strlen(j->sum), 64);
    assert_null(strstr(j->out, "Traceback"));
}

/* A single-rank train.py run with arguments, for the error paths. */
static es_proc_result_t run_single(char *const env[], const char *const *args)
{
    char *argv[32];
    int n = 0;
    argv[n++] = "python3";
    argv[n++] = (char *)es_root_path("examples/train.py");
    for (; *args && n < 31; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 60, &r), 0);
    return r;
}

static void expect_error(char *const env[], const char *const *args, int status,
                         const char *msg)
{
    es_proc_result_t r = run_single(env, args);
    if (r.status != status || !strstr(r.out, msg) || strstr(r.out, "Traceback"))
        fprintf(stderr, "---- output (status %d), wanted %d and \"%s\" ----\n%s\n", r.status,
                status, msg, r.out);
    assert_int_equal(r.status, status);
    assert_non_null(strstr(r.out, msg));
    assert_null(strstr(r.out, "Traceback"));
    es_proc_result_free(&r);
}

static void test_usage_and_errors(void **state)
{
    (void)state;
    char *single[] = {"WORLD_SIZE=", "RANK=", "LOCAL_RANK=", "ES_RDZV_DIR=", NULL};
    es_proc_result_t r = run_single(single, (const char *[]){"--help", NULL});
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "usage: train.py"));
    assert_non_null(strstr(r.out, "--deterministic-kernels"));
    es_proc_result_free(&r);

    expect_error(single, (const char *[]){"--steps", "0", NULL}, 2, "train.py: error:");
    expect_error(single, (const char *[]){"--lr", "nan", NULL}, 2, "train.py: error:");
    expect_error(single, (const char *[]){"--bogus", NULL}, 2, "unrecognized arguments");
    char *four[] = {"WORLD_SIZE=4", "RANK=0", "LOCAL_RANK=0", "ES_RDZV_DIR=/tmp", NULL};
    expect_error(four, (const char *[]){"--batch", "6", NULL}, 2, "not divisible by WORLD_SIZE");
    /* neither a directory nor MASTER_ADDR/MASTER_PORT: both ways named */
    char *no_rdzv[] = {"WORLD_SIZE=2", "RANK=0", "LOCAL_RANK=0", "ES_RDZV_DIR=", "MASTER_ADDR=",
                       "MASTER_PORT=", NULL};
    expect_error(no_rdzv, (const char *[]){NULL}, 1,
                 "needs a rendezvous directory (--rdzv DIR or ES_RDZV_DIR) or MASTER_ADDR and "
                 "MASTER_PORT");
    char *bad_rank[] = {"WORLD_SIZE=2", "RANK=x1", "ES_RDZV_DIR=/tmp", NULL};
    expect_error(bad_rank, (const char *[]){NULL}, 1, "RANK='x1' is not an integer");
    char *rank_abc[] = {"WORLD_SIZE=2", "RANK=abc", "ES_RDZV_DIR=/tmp", NULL};
    expect_error(rank_abc, (const char *[]){NULL}, 1, "RANK='abc' is not an integer");
    char *rank_range[] = {"WORLD_SIZE=2", "RANK=2", "ES_RDZV_DIR=/tmp", NULL};
    expect_error(rank_range, (const char *[]){NULL}, 1, "RANK=2 out of range");
    char *world0[] = {"WORLD_SIZE=0", "RANK=0", "ES_RDZV_DIR=/tmp", NULL};
    expect_error(world0, (const char *[]){NULL}, 1, "WORLD_SIZE=0 out of range");
    char *world_bad[] = {"WORLD_SIZE=2x", "RANK=0", "ES_RDZV_DIR=/tmp", NULL};
    expect_error(world_bad, (const char *[]){NULL}, 1, "WORLD_SIZE='2x' is not an integer");
    /* Two ranks both defaulting to 0 would hang in NCCL: RANK is required. */
    char *no_rank[] = {"WORLD_SIZE=2", "RANK=", "ES_RDZV_DIR=/tmp", NULL};
    expect_error(no_rank, (const char *[]){NULL}, 1, "RANK is not set");
    char *local_bad[] = {"WORLD_SIZE=2", "RANK=1", "LOCAL_RANK=-1", "ES_RDZV_DIR=/tmp", NULL};
    expect_error(local_bad, (const char *[]){NULL}, 1, "LOCAL_RANK=-1 out of range");
    expect_error(single, (const char *[]){"--kernels", "/nonexistent/k.fatbin", NULL}, 1,
                 "kernels fatbin /nonexistent/k.fatbin not found");
}

/* libcuda.so.1 hidden from the library path: a one-line error naming it.
 * (Only libcuda: NVIDIA's cuBLAS/cuDNN/NCCL are in this machine's ld.so
 * cache, so hiding simcuda's copies would load those instead.) */
static void test_missing_library(void **state)
{
    (void)state;
    char dir[] = "/tmp/es-train-libs-XXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *keep[] = {"libcublas.so.13", "libcudnn.so.9", "libnccl.so.2"};
    for (size_t i = 0; i < 3; i++) {
        char src[512], dst[512];
        snprintf(src, sizeof src, "%s/sim/%s", es_build_path(""), keep[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, keep[i]);
        assert_int_equal(symlink(src, dst), 0);
    }
    char ld[600];
    snprintf(ld, sizeof ld, "LD_LIBRARY_PATH=%s", dir);
    char *env[] = {ld, "WORLD_SIZE=", "RANK=", NULL};
    expect_error(env, (const char *[]){"--steps", "1", NULL}, 1,
                 "train.py: cannot load libcuda.so.1");
    for (size_t i = 0; i < 3; i++) {
        char dst[512];
        snprintf(dst, sizeof dst, "%s/%s", dir, keep[i]);
        unlink(dst);
    }
    rmdir(dir);
}

/* scripts/launch: a failing rank stops the others and its status is the
 * job's. */
static void test_launch_propagates_failure(void **state)
{
    (void)state;
    char *argv[] = {(char *)es_root_path("scripts/launch"), "-n", "3", "--", "bash", "-c",
                    "if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 60", NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, NULL, 30, &r), 0);
    assert_int_equal(r.timed_out, 0);
    assert_int_equal(r.status, 3);
    assert_non_null(strstr(r.out, "rank 1 exited with status 3"));
    es_proc_result_free(&r);
}

/* Two ranks started by hand with different learning rates end with other
 * parameters: both say so and exit non-zero (the all-gathered digests). */
static void test_ranks_disagree(void **state)
{
    (void)state;
    char dir[] = "/tmp/es-train-rdzv-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cmd[2048];
    const char *py = es_root_path("examples/train.py");
    snprintf(cmd, sizeof cmd,
             "a=\"--steps 3 --batch 8 --test-samples 8 --rdzv %s\"; "
             "WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 python3 %s $a --lr 0.05 & p0=$!; "
             "WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 python3 %s $a --lr 0.07; r1=$?; "
             "wait $p0; r0=$?; echo \"status $r0 $r1\"",
             dir, py, py);
    es_proc_result_t r;
    assert_int_equal(es_run_sh(cmd, NULL, RUN_TIMEOUT, &r), 0);
    char buf[32];
    assert_non_null(es_find_last(r.out, "status ", buf, sizeof buf));
    if (strcmp(buf, "1 1") != 0 || !strstr(r.out, "parameters differ across ranks"))
        fprintf(stderr, "---- output ----\n%s\n", r.out);
    assert_string_equal(buf, "1 1");
    assert_non_null(strstr(r.out, "parameters differ across ranks"));
    assert_null(strstr(r.out, "Traceback"));
    es_proc_result_free(&r);
    /* Rank 0 removed the id once every rank had joined, so a later job
     * reusing the directory cannot read a stale one. */
    char f[600];
    snprintf(f, sizeof f, "%s/nccl-unique-id", dir);
    assert_int_not_equal(access(f, F_OK), 0);
    unlink(f);
    rmdir(dir);
}

/* ---- rendezvous over TCP: MASTER_ADDR:MASTER_PORT, no directory ----
 * As torchrun sets them on hosts without a shared directory: rank 0 serves
 * the NCCL id on that address, the other ranks fetch it. */
#define RDZV_ARGS "--steps 12 --batch 16 --log-every 6 --test-samples 32 " \
                  "--deterministic-kernels --cudnn-deterministic"
#define RDZV_VARGS "--steps", "12", "--batch", "16", "--log-every", "6", "--test-samples", "32", \
                   "--deterministic-kernels", "--cudnn-deterministic"

static char rdzv_ref2[80]; /* 2 ranks, RDZV_ARGS, rendezvous directory */

/* A port of 127.0.0.1 the kernel gives out and nothing listens on now;
 * with fd, the socket is kept bound and listening (*fd, to close). */
static int loopback_port(int *fd)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
    if (fd) {
        assert_int_equal(listen(s, 4), 0);
        *fd = s;
    } else {
        close(s);
    }
    return ntohs(a.sin_port);
}

/* nranks ranks of train.py started by hand (no launcher, so no
 * ES_RDZV_DIR), ranks 1.. first and rank 0 half a second later (they retry
 * while it is not listening yet), with MASTER_ADDR=127.0.0.1,
 * MASTER_PORT=port, up to 8 more assignments env and the shell words args;
 * the job's status is the first non-zero one of its ranks. */
static void run_tcp_job(job_t *j, int nranks, int port, char *const env[], const char *args)
{
    char cmd[2048], mp[32];
    const char *py = es_root_path("examples/train.py");
    snprintf(cmd, sizeof cmd,
             "pids=; for r in $(seq %d -1 0); do [ $r -ne 0 ] || sleep 0.5; "
             "WORLD_SIZE=%d RANK=$r LOCAL_RANK=$r python3 %s %s & pids=\"$pids $!\"; done; "
             "st=0; for p in $pids; do wait $p; s=$?; [ $st -ne 0 ] || st=$s; done; exit $st",
             nranks - 1, nranks, py, args);
    snprintf(mp, sizeof mp, "MASTER_PORT=%d", port);
    char *e[16] = {"ES_RDZV_DIR=", "MASTER_ADDR=127.0.0.1", mp};
    int n = 3;
    for (; env && *env && n < 11; env++)
        e[n++] = *env;
    e[n] = NULL;
    es_proc_result_t r;
    memset(j, 0, sizeof *j);
    assert_int_equal(es_run_sh(cmd, e, RUN_TIMEOUT, &r), 0);
    job_collect(j, &r, nranks);
}

/* 2 and 4 ranks: the checksum of the same job through a rendezvous
 * directory (scripts/launch), bit for bit; rank 0 answered every other
 * rank once (4 ranks: three connections) and wrote no id file anywhere. */
static void test_rdzv_tcp_same_checksum(void **state)
{
    (void)state;
    char *env[] = {"SIMCUDA_DEVICES=a100:8G,a100:8G,a100:8G,a100:8G",
                   "CUBLAS_WORKSPACE_CONFIG=:4096:8", "CUDA_VISIBLE_DEVICES=", NULL};
    static const int worlds[2] = {2, 4};
    for (int k = 0; k < 2; k++) {
        job_t dir, tcp;
        run_job(&dir, worlds[k], NULL, env, RDZV_VARGS, NULL);
        assert_ok_job(&dir, worlds[k]);
        run_tcp_job(&tcp, worlds[k], loopback_port(NULL), env, RDZV_ARGS);
        assert_ok_job(&tcp, worlds[k]);
        fprintf(stderr, "note: %d ranks: directory %.16s..., TCP %.16s...\n", worlds[k], dir.sum,
                tcp.sum);
        assert_string_equal(dir.sum, tcp.sum);
        assert_null(strstr(tcp.out, "rendezvous on")); /* no connection was refused */
        if (worlds[k] == 2)
            snprintf(rdzv_ref2, sizeof rdzv_ref2, "%s", dir.sum);
        job_free(&dir);
        job_free(&tcp);
    }
}

/* Across hosts with no shared directory: rank 0 on simulated host 0 (its
 * address as MASTER_ADDR), rank 1 on host 1, each with a /tmp of its own
 * and one A100: the checksum of the 2-rank job on one host. Needs root
 * (scripts/simhosts), as tests/sim/nccl/net_test does: fails without. */
static void test_rdzv_tcp_across_hosts(void **state)
{
    (void)state;
    if (!rdzv_ref2[0]) { /* run alone: the reference through a directory */
        char *env[] = {"SIMCUDA_DEVICES=a100:8G,a100:8G", "CUBLAS_WORKSPACE_CONFIG=:4096:8",
                       "CUDA_VISIBLE_DEVICES=", NULL};
        job_t dir;
        run_job(&dir, 2, NULL, env, RDZV_VARGS, NULL);
        assert_ok_job(&dir, 2);
        snprintf(rdzv_ref2, sizeof rdzv_ref2, "%s", dir.sum);
        job_free(&dir);
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s --hosts 2 --gpus-per-host 1 --gpu a100:8G --grace 2 -- bash -c '"
             "WORLD_SIZE=2 RANK=$SIMHOST_INDEX LOCAL_RANK=0 MASTER_ADDR=${SIMHOST_ADDRS%%%%,*} "
             "MASTER_PORT=29500 exec python3 %s " RDZV_ARGS "'",
             es_root_path("scripts/simhosts"), es_root_path("examples/train.py"));
    char *env[] = {"ES_RDZV_DIR=", "MASTER_ADDR=", "MASTER_PORT=",
                   "CUBLAS_WORKSPACE_CONFIG=:4096:8", "CUDA_VISIBLE_DEVICES=", NULL};
    es_proc_result_t r;
    job_t j;
    memset(&j, 0, sizeof j);
    assert_int_equal(es_run_sh(cmd, env, RUN_TIMEOUT, &r), 0);
    if (r.status == 2 && strstr(r.out, "simhosts")) {
        print_message("%s\n", r.out);
        fail_msg("scripts/simhosts cannot make the hosts (needs root): see above");
    }
    job_collect(&j, &r, 2);
    assert_ok_job(&j, 2);
    assert_string_equal(j.sum, rdzv_ref2);
    job_free(&j);
}

/* Timeouts. Rank 1 alone: it gives up after --rdzv-timeout with one line
 * naming MASTER_ADDR:MASTER_PORT. Rank 0 with only bad hellos (another
 * magic; rank 1 of another world size) from a client that connects from
 * the start: rank 0 closes both connections without an answer and without
 * counting them (and says why), then gives up naming the address and the
 * rank that never got the id. */
static void test_rdzv_tcp_timeouts(void **state)
{
    (void)state;
    int port = loopback_port(NULL);
    char mp[32], want[160];
    snprintf(mp, sizeof mp, "MASTER_PORT=%d", port);
    char *rank1[] = {"WORLD_SIZE=2", "RANK=1", "LOCAL_RANK=1", "ES_RDZV_DIR=",
                     "MASTER_ADDR=127.0.0.1", mp, NULL};
    snprintf(want, sizeof want,
             "train.py: rank 1: timed out after 2 s waiting for rank 0's NCCL id at "
             "127.0.0.1:%d (MASTER_ADDR:MASTER_PORT)", port);
    expect_error(rank1, (const char *[]){"--rdzv-timeout", "2", "--steps", "1", "--batch", "8",
                                         "--test-samples", "8", NULL},
                 1, want);

    /* the client retries while refused: rank 0 listens before its device
     * setup, so both hellos wait in its backlog if they come early; each
     * "answered" line in one write (print writes its pieces apart where
     * PYTHONUNBUFFERED is set, and rank 0's lines may land between them) */
    port = loopback_port(NULL);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import os, socket, struct, sys, time\n"
             "for h in (b\"GARBAGE\\0\" + struct.pack(\"<ii\", 1, 2),\n"
             "          b\"ESRDZV1\\0\" + struct.pack(\"<ii\", 1, 3)):\n"
             "    while True:\n"
             "        try:\n"
             "            s = socket.create_connection((\"127.0.0.1\", %d)); break\n"
             "        except ConnectionRefusedError:\n"
             "            time.sleep(0.05)\n"
             "    s.sendall(h); os.write(1, b\"answered %%d\\n\" %% len(s.recv(256))); s.close()\n"
             "' & pc=$!; "
             "WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d python3 %s "
             "--steps 1 --batch 8 --test-samples 8 --rdzv-timeout 5; echo \"status $?\"; wait $pc",
             port, port, es_root_path("examples/train.py"));
    char *env[] = {"ES_RDZV_DIR=", NULL};
    es_proc_result_t r;
    assert_int_equal(es_run_sh(cmd, env, RUN_TIMEOUT, &r), 0);
    char buf[32], magic[160], world[160], gave_up[200];
    snprintf(magic, sizeof magic,
             "train.py: rank 0: rendezvous on 127.0.0.1:%d: closed a connection from "
             "127.0.0.1: not a rendezvous hello (bad magic)", port);
    snprintf(world, sizeof world,
             "train.py: rank 0: rendezvous on 127.0.0.1:%d: closed a connection from "
             "127.0.0.1: rank 1 has WORLD_SIZE 3, rank 0 has 2", port);
    snprintf(gave_up, sizeof gave_up,
             "train.py: rank 0: timed out after 5 s serving the NCCL id on 127.0.0.1:%d "
             "(MASTER_ADDR:MASTER_PORT): 1 of 1 ranks never got it (rank 1)", port);
    if (!es_find_last(r.out, "status ", buf, sizeof buf) || strcmp(buf, "1") != 0 ||
        !strstr(r.out, magic) || !strstr(r.out, world) || !strstr(r.out, gave_up) ||
        es_count(r.out, "answered 0\n") != 2)
        fprintf(stderr, "---- output ----\n%s\n", r.out);
    assert_non_null(es_find_last(r.out, "status ", buf, sizeof buf));
    assert_string_equal(buf, "1");
    assert_int_equal(es_count(r.out, "answered 0\n"), 2); /* closed, nothing sent */
    assert_non_null(strstr(r.out, magic));
    assert_non_null(strstr(r.out, world));
    assert_non_null(strstr(r.out, gave_up));
    assert_null(strstr(r.out, "Traceback"));
    es_proc_result_free(&r);
}

/* MASTER_PORT parsed strictly (decimal digits, 1..65535), on rank 0 and the
 * others: one line, exit 1, before any device work. One of the two unset:
 * the message names both ways and what is missing. A port in use: rank 0
 * says it cannot listen there. A rendezvous directory wins: MASTER_* are
 * not even read. */
static void test_rdzv_tcp_bad_master(void **state)
{
    (void)state;
    static const struct {
        const char *port, *msg;
    } bad[] = {
        {"MASTER_PORT=x", "MASTER_PORT='x' is not a port number (an integer in [1, 65535])"},
        {"MASTER_PORT=70000", "MASTER_PORT=70000 out of range [1, 65535]"},
        {"MASTER_PORT=0", "MASTER_PORT=0 out of range [1, 65535]"},
        {"MASTER_PORT=-1", "MASTER_PORT='-1' is not a port number"},
        {"MASTER_PORT=+80", "MASTER_PORT='+80' is not a port number"},
        {"MASTER_PORT= 80", "MASTER_PORT=' 80' is not a port number"},
        {"MASTER_PORT=2_9500", "MASTER_PORT='2_9500' is not a port number"},
        {"MASTER_PORT=", "MASTER_PORT is not set"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int rank = 0; rank < 2; rank++) {
            char *env[] = {"WORLD_SIZE=2", rank ? "RANK=1" : "RANK=0", "LOCAL_RANK=0",
                           "ES_RDZV_DIR=", "MASTER_ADDR=127.0.0.1", (char *)bad[i].port, NULL};
            expect_error(env, (const char *[]){NULL}, 1, bad[i].msg);
        }
    }
    char *no_addr[] = {"WORLD_SIZE=2", "RANK=1", "ES_RDZV_DIR=", "MASTER_ADDR=",
                       "MASTER_PORT=29500", NULL};
    expect_error(no_addr, (const char *[]){NULL}, 1,
                 "needs a rendezvous directory (--rdzv DIR or ES_RDZV_DIR) or MASTER_ADDR and "
                 "MASTER_PORT (rank 0 serves the NCCL id over TCP); MASTER_ADDR is not set");

    int fd;
    char mp[32], want[160];
    snprintf(mp, sizeof mp, "MASTER_PORT=%d", loopback_port(&fd));
    snprintf(want, sizeof want, "train.py: rank 0: cannot listen on 127.0.0.1:%s "
             "(MASTER_ADDR:MASTER_PORT) for the rendezvous", mp + 12);
    char *in_use[] = {"WORLD_SIZE=2", "RANK=0", "ES_RDZV_DIR=", "MASTER_ADDR=127.0.0.1", mp,
                      NULL};
    expect_error(in_use, (const char *[]){NULL}, 1, want);
    close(fd);

    char dir[] = "/tmp/es-train-rdzv-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char rd[64];
    snprintf(rd, sizeof rd, "ES_RDZV_DIR=%s", dir);
    snprintf(want, sizeof want, "rank 1: timed out after 1 s waiting for rank 0 in %s", dir);
    char *dir_wins[] = {"WORLD_SIZE=2", "RANK=1", rd, "MASTER_ADDR=127.0.0.1", "MASTER_PORT=x",
                        NULL};
    expect_error(dir_wins, (const char *[]){"--rdzv-timeout", "1", "--steps", "1", "--batch", "8",
                                            "--test-samples", "8", NULL},
                 1, want);
    rmdir(dir);
}

/* --save: a JSON header line, then the tensors; their sha256 is the
 * checksum printed. Also the device choice: LOCAL_RANK 3 on the two
 * simulated GPUs is device 3 % 2 = 1. */
static void test_save(void **state)
{
    (void)state;
    char path[] = "/tmp/es-train-save-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 %s --steps 2 --batch 8 --test-samples 8 --save %s && "
             "python3 -c 'import hashlib,json,sys; f=open(sys.argv[1],\"rb\"); "
             "h=json.loads(f.readline()); raw=f.read(); "
             "assert len(raw)==sum(t[\"bytes\"] for t in h[\"tensors\"]); "
             "assert hashlib.sha256(raw).hexdigest()==h[\"sha256\"]; "
             "print(\"saved-sha256\", h[\"sha256\"])' %s",
             es_root_path("examples/train.py"), path, path);
    char *env[] = {"WORLD_SIZE=", "RANK=", "LOCAL_RANK=3", "SIMCUDA_DEVICES=a100:8G,a100:8G",
                   "CUDA_VISIBLE_DEVICES=", NULL};
    es_proc_result_t r;
    assert_int_equal(es_run_sh(cmd, env, RUN_TIMEOUT, &r), 0);
    if (r.status != 0 || !strstr(r.out, "rank 0: device 1 of 2"))
        fprintf(stderr, "---- output ----\n%s\n", r.out);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.out, "rank 0: device 1 of 2"));
    char a[80], b[80];
    assert_non_null(es_find_last(r.out, "checksum ", a, sizeof a));
    assert_non_null(es_find_last(r.out, "saved-sha256 ", b, sizeof b));
    assert_string_equal(a, b);
    es_proc_result_free(&r);
    unlink(path);
}

/* examples/torch_ddp.py cannot run here (no PyTorch, no GPU): it must at
 * least byte-compile. */
static void test_torch_ddp_compiles(void **state)
{
    (void)state;
    char *argv[] = {"python3", "-c",
                    "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')",
                    (char *)es_root_path("examples/torch_ddp.py"), NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, NULL, 30, &r), 0);
    if (r.status != 0)
        fprintf(stderr, "%s\n", r.out);
    assert_int_equal(r.status, 0);
    es_proc_result_free(&r);
}

/* torch_ddp.py's command line and environment handling work without
 * PyTorch (they come first): --help, bad arguments, bad RANK/WORLD_SIZE are
 * one line and a non-zero exit, never a traceback; where PyTorch is absent
 * a run says so in one line. */
static void torch_expect(char *const env[], const char *const *args, int status, const char *msg)
{
    char *argv[16];
    int n = 0;
    argv[n++] = "python3";
    argv[n++] = (char *)es_root_path("examples/torch_ddp.py");
    for (; *args && n < 15; args++)
        argv[n++] = (char *)*args;
    argv[n] = NULL;
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 60, &r), 0);
    if (r.status != status || !strstr(r.out, msg) || strstr(r.out, "Traceback"))
        fprintf(stderr, "---- output (status %d), wanted %d and \"%s\" ----\n%s\n", r.status,
                status, msg, r.out);
    assert_int_equal(r.status, status);
    assert_non_null(strstr(r.out, msg));
    assert_null(strstr(r.out, "Traceback"));
    es_proc_result_free(&r);
}

static void test_torch_ddp_cli(void **state)
{
    (void)state;
    char *single[] = {"WORLD_SIZE=", "RANK=", "LOCAL_RANK=", NULL};
    torch_expect(single, (const char *[]){"--help", NULL}, 0, "--deterministic");
    torch_expect(single, (const char *[]){"--steps", "0", NULL}, 2, "torch_ddp.py: error:");
    char *bad_rank[] = {"WORLD_SIZE=2", "RANK=abc", NULL};
    torch_expect(bad_rank, (const char *[]){NULL}, 1, "RANK='abc' is not an integer");
    char *world0[] = {"WORLD_SIZE=0", "RANK=0", NULL};
    torch_expect(world0, (const char *[]){NULL}, 1, "WORLD_SIZE=0 out of range");
    char *four[] = {"WORLD_SIZE=4", "RANK=3", NULL};
    torch_expect(four, (const char *[]){"--batch", "6", NULL}, 2, "not divisible by WORLD_SIZE");
    es_proc_result_t r;
    char *probe[] = {"python3", "-c", "import torch", NULL};
    assert_int_equal(es_run(probe, NULL, 60, &r), 0);
    int have_torch = r.status == 0;
    es_proc_result_free(&r);
    if (!have_torch)
        torch_expect(single, (const char *[]){"--steps", "1", NULL}, 1,
                     "torch_ddp.py: PyTorch is required");
}

/* train.dropout_mask (the host reference torch_ddp.py draws its masks
 * with) gives the kernel's bits: the same fingerprint as the C twin in
 * tests/examples/twins_test.c (test_dropout_matches_host_reference). */
static void test_dropout_host_reference(void **state)
{
    (void)state;
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import train\n"
             "m = train.dropout_mask(7, 3, 5, 16, 32, 0.25); h = 0xcbf29ce484222325\n"
             "for v in m: h = ((h ^ (1 if v else 0)) * 0x100000001b3) %% (1 << 64)\n"
             "print(\"fingerprint %%016x %%d\" %% (h, m.count(0.0)))' %s",
             es_root_path("examples"));
    es_proc_result_t r;
    assert_int_equal(es_run_sh(cmd, NULL, 60, &r), 0);
    char buf[64];
    if (r.status != 0 || !es_find_last(r.out, "fingerprint ", buf, sizeof buf))
        fprintf(stderr, "%s\n", r.out);
    assert_int_equal(r.status, 0);
    assert_non_null(es_find_last(r.out, "fingerprint ", buf, sizeof buf));
    assert_string_equal(buf, "6abb585e62bca156 139");
    es_proc_result_free(&r);
}

/* The audit finds exactly one float-atomic kernel in the trainer's fatbin,
 * the default bucket-table gradient, in each SASS image and the PTX. */
static void test_audit_finds_atomic_kernel(void **state)
{
    (void)state;
    const char *tool = es_need_built("bin/easyscale-audit");
    char *argv[] = {(char *)tool, (char *)es_build_path("examples/kernels.fatbin"), NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, NULL, 30, &r), 0);
    int n = 0;
    for (const char *p = r.out; (p = strstr(p, "float-atomic ")) != NULL; p++) {
        const char *eol = strchr(p, '\n');
        const char *k = strstr(p, "es_table_grad_atomic");
        assert_true(k && (!eol || k < eol));
        n++;
    }
    /* sm_75, 80, 86, 89, 90, 100 and compute_100 (CUCPU_GENCODE) */
    if (n != 7)
        fprintf(stderr, "%s\n", r.out);
    assert_int_equal(n, 7);
    assert_null(strstr(r.out, "float-atomic sm_80  es_table_grad_det"));
    es_proc_result_free(&r);
}

/* Learning: 2 ranks, default (non-deterministic) settings. */
static void test_learns(void **state)
{
    (void)state;
    char *env[] = {"SIMCUDA_DEVICES=a100:8G,a100:8G", NULL};
    run_job(&learn_run, 2, NULL, env, "--steps", LEARN_STEPS, "--batch", "32", "--log-every",
            "50", "--test-samples", "256", "--seed", "3", NULL);
    assert_ok_job(&learn_run, 2);
    /* Chance is 1/6; the task is learnable well beyond it. */
    assert_true(learn_run.heldout >= 0.5);
    assert_non_null(strstr(learn_run.out, "step    50/" LEARN_STEPS " loss"));
}

static char *det_env_a100[] = {"SIMCUDA_DEVICES=a100:8G,a100:8G", "CUBLAS_WORKSPACE_CONFIG=:4096:8",
                               NULL};

static void test_deterministic_repeat(void **state)
{
    (void)state;
    job_t again;
    run_job(&det_a100, 2, NULL, det_env_a100, DET_ARGS, "--deterministic-kernels",
            "--cudnn-deterministic", NULL);
    assert_ok_job(&det_a100, 2);
    run_job(&again, 2, NULL, det_env_a100, DET_ARGS, "--deterministic-kernels",
            "--cudnn-deterministic", NULL);
    assert_ok_job(&again, 2);
    assert_string_equal(det_a100.sum, again.sum);
    job_free(&again);
}

/* (a) The float-atomic kernel: otherwise deterministic runs differ. The
 * order of its adds follows the simulated GPU's worker threads, so on a
 * loaded machine two runs now and then agree (their blocks ran one after
 * another alike): up to 3 runs after the first, one must differ (a
 * deterministic kernel never does). */
static void test_control_atomics(void **state)
{
    (void)state;
    run_job(&atomic_run, 2, NULL, det_env_a100, DET_ARGS, "--cudnn-deterministic", NULL);
    assert_ok_job(&atomic_run, 2);
    int differs = 0;
    for (int i = 0; i < 3 && !differs; i++) {
        job_t again;
        run_job(&again, 2, NULL, det_env_a100, DET_ARGS, "--cudnn-deterministic", NULL);
        assert_ok_job(&again, 2);
        differs = strcmp(atomic_run.sum, again.sum) != 0;
        if (!differs)
            fprintf(stderr, "note: float-atomic run %d agreed with the first (%s)\n", i + 2,
                    again.sum);
        job_free(&again);
    }
    assert_true(differs);
}

/* (b) Same ranks, another GPU model. */
static void test_control_gpu_model(void **state)
{
    (void)state;
    char *env[] = {"SIMCUDA_DEVICES=t4:8G,t4:8G", "CUBLAS_WORKSPACE_CONFIG=:4096:8", NULL};
    run_job(&det_t4, 2, NULL, env, DET_ARGS, "--deterministic-kernels",
            "--cudnn-deterministic", NULL);
    assert_ok_job(&det_t4, 2);
    assert_string_not_equal(det_a100.sum, det_t4.sum);
}

/* (d) cuDNN's heuristic choice: on the T4 model it ranks a
 * nondeterministic backward-filter algorithm first (VENDOR-FACTS "cuDNN":
 * BWD_FILTER_ALGO_0/3), so without --cudnn-deterministic two runs differ;
 * with it, they agree (the run of test_control_gpu_model and this one). */
static void test_control_cudnn_algorithm(void **state)
{
    (void)state;
    char *env[] = {"SIMCUDA_DEVICES=t4:8G,t4:8G", "CUBLAS_WORKSPACE_CONFIG=:4096:8", NULL};
    job_t a, b, c;
    run_job(&a, 2, NULL, env, DET_ARGS, "--deterministic-kernels", NULL);
    assert_ok_job(&a, 2);
    run_job(&b, 2, NULL, env, DET_ARGS, "--deterministic-kernels", NULL);
    assert_ok_job(&b, 2);
    assert_string_not_equal(a.sum, b.sum);
    run_job(&c, 2, NULL, env, DET_ARGS, "--deterministic-kernels", "--cudnn-deterministic",
            NULL);
    assert_ok_job(&c, 2);
    assert_string_equal(det_t4.sum, c.sum);
    job_free(&a);
    job_free(&b);
    job_free(&c);
}

/* (c) Same 4 ranks on 4 GPUs of one model, another rank-to-GPU placement;
 * the same placement again gives the same bits (so the difference is the
 * placement's). */
static void test_control_placement(void **state)
{
    (void)state;
    char *env[] = {"SIMCUDA_DEVICES=a100:8G,a100:8G,a100:8G,a100:8G",
                   "CUBLAS_WORKSPACE_CONFIG=:4096:8", "CUDA_VISIBLE_DEVICES=", NULL};
    job_t p1, p2, p3;
    run_job(&p1, 4, "0,1,2,3", env, DET_ARGS, "--deterministic-kernels",
            "--cudnn-deterministic", NULL);
    assert_ok_job(&p1, 4);
    run_job(&p2, 4, "0,1,2,3", env, DET_ARGS, "--deterministic-kernels",
            "--cudnn-deterministic", NULL);
    assert_ok_job(&p2, 4);
    assert_string_equal(p1.sum, p2.sum);
    run_job(&p3, 4, "2,0,3,1", env, DET_ARGS, "--deterministic-kernels",
            "--cudnn-deterministic", NULL);
    assert_ok_job(&p3, 4);
    assert_string_not_equal(p1.sum, p3.sum);
    job_free(&p1);
    job_free(&p2);
    job_free(&p3);
}

/* Loss lines "step N/M loss L ..." of a job's output, in order. */
static int loss_curve(const char *out, double *loss, int max)
{
    int n = 0;
    for (const char *p = out; *p && n < max;) {
        const char *eol = strchr(p, '\n');
        if (!eol)
            eol = p + strlen(p);
        if (strncmp(p, "step ", 5) == 0) {
            const char *l = strstr(p, " loss ");
            if (l && l < eol)
                loss[n++] = strtod(l + 6, NULL);
        }
        p = *eol ? eol + 1 : eol;
    }
    return n;
}

/* Largest |a - b| over the parameters two --save files hold, printed as
 * "maxdiff X" by a small Python check. */
static double param_maxdiff(const char *a, const char *b)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,struct,sys\n"
             "def load(p):\n"
             "    f=open(p,\"rb\"); f.readline(); raw=f.read()\n"
             "    return struct.unpack(\"<%%df\" %% (len(raw)//4), raw)\n"
             "x=load(sys.argv[1]); y=load(sys.argv[2]); assert len(x)==len(y) and x\n"
             "print(\"maxdiff %%.9g\" %% max(abs(u-v) for u,v in zip(x,y)))' %s %s",
             a, b);
    es_proc_result_t r;
    assert_int_equal(es_run_sh(cmd, NULL, 60, &r), 0);
    char buf[64];
    if (r.status != 0 || !es_find_last(r.out, "maxdiff ", buf, sizeof buf)) {
        fprintf(stderr, "---- compare output ----\n%s\n", r.out);
        fail();
    }
    es_proc_result_free(&r);
    return strtod(buf, NULL);
}

/* DDP semantics: the global batch (and so the mathematical update) is
 * defined by --batch alone; 1, 2 and 4 ranks split it into shards (and
 * dropout masks, drawn per rank from the global sample position) without
 * changing it. So the loss curves agree to the printed digits and the
 * final parameters to float rounding (reduction order: cuBLAS/cuDNN shapes,
 * the SM-count-sized reductions and NCCL differ per world size, so the
 * checksums may differ; they are not compared). Negative control: a 1 %
 * change of the learning rate (1 rank) is far outside the tolerance, so
 * a real change of the update (e.g. a rank-local dropout stream, which gave
 * differences of about 0.1) cannot pass. */
#define WS_ARGS "--steps", "30", "--batch", "16", "--log-every", "10", "--test-samples", "32", \
                "--deterministic-kernels", "--cudnn-deterministic"
#define WS_TOL 1e-5

static void test_world_sizes_same_update(void **state)
{
    (void)state;
    char *env[] = {"SIMCUDA_DEVICES=a100:8G,a100:8G,a100:8G,a100:8G",
                   "CUBLAS_WORKSPACE_CONFIG=:4096:8", "CUDA_VISIBLE_DEVICES=", NULL};
    static const int worlds[3] = {1, 2, 4};
    char path[4][64];
    double curve[4][8];
    int npts[4];
    job_t j;
    for (int k = 0; k < 4; k++) {
        snprintf(path[k], sizeof path[k], "/tmp/es-train-ws-XXXXXX");
        int fd = mkstemp(path[k]);
        assert_true(fd >= 0);
        close(fd);
        if (k < 3)
            run_job(&j, worlds[k], NULL, env, WS_ARGS, "--save", path[k], NULL);
        else
            run_job(&j, 1, NULL, env, WS_ARGS, "--lr", "0.0505", "--save", path[k], NULL);
        assert_ok_job(&j, k < 3 ? worlds[k] : 1);
        npts[k] = loss_curve(j.out, curve[k], 8);
        fprintf(stderr, "note: %s: checksum %.16s...\n",
                k < 3 ? (k == 0 ? "1 rank" : k == 1 ? "2 ranks" : "4 ranks") : "1 rank lr+1%",
                j.sum);
        job_free(&j);
        assert_int_equal(npts[k], 3);
    }
    for (int k = 1; k < 3; k++) {
        for (int i = 0; i < 3; i++) {
            if (fabs(curve[k][i] - curve[0][i]) > 2e-4)
                fprintf(stderr, "loss %d: %d ranks %.4f, 1 rank %.4f\n", i, worlds[k],
                        curve[k][i], curve[0][i]);
            assert_true(fabs(curve[k][i] - curve[0][i]) <= 2e-4);
        }
        double d = param_maxdiff(path[0], path[k]);
        fprintf(stderr, "note: 1 vs %d ranks: max parameter difference %.3g\n", worlds[k], d);
        assert_true(d <= WS_TOL);
    }
    double dc = param_maxdiff(path[0], path[3]);
    fprintf(stderr, "note: 1 rank vs 1 rank with lr +1%%: max parameter difference %.3g\n", dc);
    assert_true(dc > 100 * WS_TOL);
    for (int k = 0; k < 4; k++)
        unlink(path[k]);
}

/* "LD_PRELOAD=<sanitizer runtime if any>:<libeasyscale.so>" into buf, keeping
 * what scripts/simenv preloads first. A shim that is not built fails the
 * test: the loader only warns about a preload that does not exist, and the
 * run would go on without it. */
static const char *shim_preload(char *buf, size_t len)
{
    return es_preload_env(es_need_built("lib/libeasyscale.so"), buf, len);
}

/* Two 2-rank runs with --deterministic-kernels (and --cudnn-deterministic
 * when app_knobs), in environments ea and eb; asserts their checksums are
 * equal (same) or differ (!same). */
static void two_runs(char *const ea[], char *const eb[], int app_knobs, int same)
{
    job_t a, b;
    const char *knob = app_knobs ? "--cudnn-deterministic" : NULL;
    run_job(&a, 2, NULL, ea, DET_ARGS, "--deterministic-kernels", knob, NULL);
    assert_ok_job(&a, 2);
    run_job(&b, 2, NULL, eb, DET_ARGS, "--deterministic-kernels", knob, NULL);
    assert_ok_job(&b, 2);
    if (same)
        assert_string_equal(a.sum, b.sum);
    else
        assert_string_not_equal(a.sum, b.sum);
    job_free(&a);
    job_free(&b);
}

/* The shim: d2 (EASYSCALE_CANONICAL_DEVICE naming the job's models) makes
 * an A100 and a T4 agree; off leaves them apart. The
 * application sets no deterministic knob of its own under d2 (no
 * CUBLAS_WORKSPACE_CONFIG, no --cudnn-deterministic): the shim does it. */
static void test_shim_d2_across_models(void **state)
{
    (void)state;
    char pre[1200];
    shim_preload(pre, sizeof pre);
    /* the job's set of models: both report the T4's figures */
    char *a_d2[] = {"SIMCUDA_DEVICES=a100:8G,a100:8G", "CUBLAS_WORKSPACE_CONFIG=", pre,
                    "EASYSCALE_DETERMINISM=d2", "EASYSCALE_CANONICAL_DEVICE=a100,t4", NULL};
    char *t_d2[] = {"SIMCUDA_DEVICES=t4:8G,t4:8G", "CUBLAS_WORKSPACE_CONFIG=", pre,
                    "EASYSCALE_DETERMINISM=d2", "EASYSCALE_CANONICAL_DEVICE=a100,t4", NULL};
    char *a_off[] = {"SIMCUDA_DEVICES=a100:8G,a100:8G", "CUBLAS_WORKSPACE_CONFIG=:4096:8", pre,
                     "EASYSCALE_DETERMINISM=off", NULL};
    char *t_off[] = {"SIMCUDA_DEVICES=t4:8G,t4:8G", "CUBLAS_WORKSPACE_CONFIG=:4096:8", pre,
                     "EASYSCALE_DETERMINISM=off", NULL};
    two_runs(a_d2, t_d2, 0, 1);
    /* Negative control: the shim loaded but off, with every deterministic
     * knob the application has, still differs across models. */
    two_runs(a_off, t_off, 1, 0);
}

/* d2's GEMM paths on the trainer, an A100 and a T4 (canonical device of
 * both): int8 (the default; its cross-model checksum is test_shim_d2_*
 * and the placement tests') and fma. Their checksums differ (negative
 * control: the int8 definition rounds each GEMM and convolution once from
 * an exact sum of 28-bit operands, the fma path k times in fp32) and
 * their loss curves agree within D2P_TOL (the printed losses have 4
 * decimals; both paths' GEMMs are within about 1e-6 of the exact sums on
 * the trainer's data, so 30 steps move the loss by far less than a
 * learning-rate change of 1 %, which the world-size test shows is above
 * 1e-3). */
#define D2P_ARGS "--steps", "30", "--batch", "16", "--log-every", "10", "--test-samples", "32"
#define D2P_TOL 1e-3

static void test_d2_int8_vs_fma(void **state)
{
    (void)state;
    char pre[1200];
    shim_preload(pre, sizeof pre);
    char *e8[] = {"SIMCUDA_DEVICES=a100:8G,t4:8G", "CUBLAS_WORKSPACE_CONFIG=", pre,
                  "EASYSCALE_DETERMINISM=d2", "EASYSCALE_CANONICAL_DEVICE=a100,t4",
                  "EASYSCALE_D2_GEMM=int8", NULL};
    char *ef[] = {"SIMCUDA_DEVICES=a100:8G,t4:8G", "CUBLAS_WORKSPACE_CONFIG=", pre,
                  "EASYSCALE_DETERMINISM=d2", "EASYSCALE_CANONICAL_DEVICE=a100,t4",
                  "EASYSCALE_D2_GEMM=fma", NULL};
    job_t a, b;
    double ca[8], cb[8];
    run_job(&a, 2, NULL, e8, D2P_ARGS, NULL);
    assert_ok_job(&a, 2);
    run_job(&b, 2, NULL, ef, D2P_ARGS, NULL);
    assert_ok_job(&b, 2);
    int na = loss_curve(a.out, ca, 8), nb = loss_curve(b.out, cb, 8);
    assert_int_equal(na, 3);
    assert_int_equal(nb, 3);
    for (int i = 0; i < 3; i++) {
        fprintf(stderr, "note: loss at step %d: int8 %.4f, fma %.4f\n", 10 * (i + 1), ca[i],
                cb[i]);
        assert_true(fabs(ca[i] - cb[i]) <= D2P_TOL);
    }
    assert_string_not_equal(a.sum, b.sum);
    job_free(&a);
    job_free(&b);
}

/* The shim at d1 (the default level) on one GPU model, the application
 * asking for nothing deterministic from the libraries (no
 * CUBLAS_WORKSPACE_CONFIG, cuDNN's heuristic choice, a copy stream beside
 * the compute stream): two runs agree. The same runs with the shim off
 * differ (on the T4 model cuDNN's heuristic ranks a nondeterministic
 * backward-filter algorithm first, VENDOR-FACTS "cuDNN"). */
static void test_shim_d1_repeat(void **state)
{
    (void)state;
    char pre[1200];
    shim_preload(pre, sizeof pre);
    char *d1[] = {"SIMCUDA_DEVICES=t4:8G,t4:8G", "CUBLAS_WORKSPACE_CONFIG=", pre,
                  "EASYSCALE_DETERMINISM=", NULL};
    char *off[] = {"SIMCUDA_DEVICES=t4:8G,t4:8G", "CUBLAS_WORKSPACE_CONFIG=", pre,
                   "EASYSCALE_DETERMINISM=off", NULL};
    two_runs(d1, d1, 0, 1);
    two_runs(off, off, 0, 0);
}

/* ---- placement: N ESTs over fewer GPUs (virtual devices and collectives) ----
 * Jobs of 4 and 8 ESTs under the shim, on every number of GPUs from N down
 * to 1 and in several GPU orders: with the virtual collectives every
 * element of every reduction is summed in rank order, so the checksum is
 * one value per (job, level). Few steps: the buckets' all-reduces of 4 and
 * 8 float sums differ with the order from the first step on. */
#define PLACE_ARGS "--steps", "6", "--batch", "16", "--log-every", "3", "--test-samples", \
                   "16", "--deterministic-kernels"

static char place_ref4[80], place_ref8[80];

/* A job of n ESTs under the shim (pre: its LD_PRELOAD assignment; NULL:
 * without it) at `level` on SIMCUDA_DEVICES=devs, GPU order gpus (NULL: as
 * listed), with up to two more assignments. */
static void placed_job(job_t *j, const char *pre, int n, const char *level, const char *devs,
                       const char *gpus, const char *x1, const char *x2)
{
    char dv[256], lv[64];
    snprintf(dv, sizeof dv, "SIMCUDA_DEVICES=%s", devs);
    snprintf(lv, sizeof lv, "EASYSCALE_DETERMINISM=%s", level);
    char *env[] = {dv, lv, "CUBLAS_WORKSPACE_CONFIG=", "CUDA_VISIBLE_DEVICES=",
                   "EASYSCALE_CANONICAL_DEVICE=a100,h100,t4", (char *)pre, (char *)x1,
                   (char *)x2, NULL};
    if (!pre) /* LD_PRELOAD as scripts/simenv left it (a sanitizer runtime, or none) */
        env[5] = "ES_TEST_NO_SHIM=1";
    run_job(j, n, gpus, env, PLACE_ARGS, NULL);
}

/* Asserts a job succeeded with the expected checksum (or records it). */
static void expect_sum(job_t *j, int n, char *ref, const char *what)
{
    assert_ok_job(j, n);
    if (!ref[0])
        snprintf(ref, 80, "%s", j->sum);
    if (strcmp(ref, j->sum) != 0)
        fprintf(stderr, "placement %s: checksum %.16s..., expected %.16s...\n", what, j->sum,
                ref);
    assert_string_equal(ref, j->sum);
    job_free(j);
}

/* d1, 4 ESTs: 4 A100s in six orders (as listed, reversed, rotated by one
 * and by two, pairs swapped, and one with no GPU in place or in a run),
 * 2 A100s in both orders, 1 A100. */
static void test_placement_d1_4ests(void **state)
{
    (void)state;
    char pre[1200];
    shim_preload(pre, sizeof pre);
    const char *four = "a100:8G,a100:8G,a100:8G,a100:8G";
    static const char *const orders4[] = {"0,1,2,3", "3,2,1,0", "1,2,3,0",
                                          "2,3,0,1", "1,0,3,2", "2,0,3,1"};
    job_t j;
    for (size_t i = 0; i < sizeof orders4 / sizeof orders4[0]; i++) {
        placed_job(&j, pre, 4, "d1", four, orders4[i], NULL, NULL);
        expect_sum(&j, 4, place_ref4, orders4[i]);
    }
    placed_job(&j, pre, 4, "d1", "a100:8G,a100:8G", "0,1", NULL, NULL);
    expect_sum(&j, 4, place_ref4, "2 GPUs 0,1");
    placed_job(&j, pre, 4, "d1", "a100:8G,a100:8G", "1,0", NULL, NULL);
    expect_sum(&j, 4, place_ref4, "2 GPUs 1,0");
    placed_job(&j, pre, 4, "d1", "a100:8G", NULL, NULL, NULL);
    expect_sum(&j, 4, place_ref4, "1 GPU");
    /* the slot given by EASYSCALE_SLOT (the controller's way): all on GPU 1 */
    placed_job(&j, pre, 4, "d1", "a100:8G,a100:8G", NULL, "EASYSCALE_SLOT=1", NULL);
    expect_sum(&j, 4, place_ref4, "EASYSCALE_SLOT=1");
    /* uneven: two ESTs on GPU 2, one on each of GPUs 0 and 1 (scripts/launch
     * --slots sets EASYSCALE_SLOT per rank) */
    char *argv[] = {(char *)es_root_path("scripts/launch"), "-n", "4", "--slots", "2,2,0,1", "--",
                    "python3", (char *)es_root_path("examples/train.py"), PLACE_ARGS, NULL};
    char *env[] = {"SIMCUDA_DEVICES=a100:8G,a100:8G,a100:8G", "EASYSCALE_DETERMINISM=d1",
                   "CUBLAS_WORKSPACE_CONFIG=", "CUDA_VISIBLE_DEVICES=", pre, NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, RUN_TIMEOUT, &r), 0);
    char sum[80];
    if (r.status != 0 || !es_find_last(r.out, "checksum ", sum, sizeof sum))
        fprintf(stderr, "---- --slots 2,2,0,1 ----\n%s\n", r.out);
    assert_int_equal(r.status, 0);
    assert_non_null(es_find_last(r.out, "checksum ", sum, sizeof sum));
    assert_string_equal(sum, place_ref4);
    es_proc_result_free(&r);
}

/* d1, 8 ESTs: 8 A100s in three orders, 3 A100s in two, 1 A100. */
static void test_placement_d1_8ests(void **state)
{
    (void)state;
    char pre[1200];
    shim_preload(pre, sizeof pre);
    const char *eight = "a100:8G,a100:8G,a100:8G,a100:8G,a100:8G,a100:8G,a100:8G,a100:8G";
    static const char *const orders8[] = {"0,1,2,3,4,5,6,7", "7,6,5,4,3,2,1,0",
                                          "3,7,1,5,0,4,2,6"};
    job_t j;
    for (int i = 0; i < 3; i++) {
        placed_job(&j, pre, 8, "d1", eight, orders8[i], NULL, NULL);
        expect_sum(&j, 8, place_ref8, orders8[i]);
    }
    placed_job(&j, pre, 8, "d1", "a100:8G,a100:8G,a100:8G", "0,1,2", NULL, NULL);
    expect_sum(&j, 8, place_ref8, "3 GPUs 0,1,2");
    placed_job(&j, pre, 8, "d1", "a100:8G,a100:8G,a100:8G", "2,0,1", NULL, NULL);
    expect_sum(&j, 8, place_ref8, "3 GPUs 2,0,1");
    placed_job(&j, pre, 8, "d1", "a100:8G", NULL, NULL, NULL);
    expect_sum(&j, 8, place_ref8, "1 GPU");
}

/* d2: mixes of models (canonical device a100,h100,t4) give one checksum
 * per job size, whatever the mix, its order or the number of GPUs. */
static void test_placement_d2_mixes(void **state)
{
    (void)state;
    char pre[1200];
    shim_preload(pre, sizeof pre);
    char ref4[80] = "", ref8[80] = "";
    job_t j;
    static const char *const mixes4[][2] = {
        {"a100:8G,h100:8G,t4:8G", NULL},
        {"a100:8G,h100:8G,t4:8G", "2,1,0"},
        {"t4:8G,a100:8G", NULL},
        {"h100:8G", NULL},
        {"t4:8G", NULL},
        {"a100:8G,h100:8G,t4:8G,a100:8G", "3,2,1,0"},
    };
    for (size_t i = 0; i < sizeof mixes4 / sizeof mixes4[0]; i++) {
        placed_job(&j, pre, 4, "d2", mixes4[i][0], mixes4[i][1], NULL, NULL);
        expect_sum(&j, 4, ref4, mixes4[i][0]);
    }
    static const char *const mixes8[][2] = {
        {"a100:8G,h100:8G,t4:8G", NULL},
        {"t4:8G,h100:8G,a100:8G", NULL},
        {"h100:8G", NULL},
        {"a100:8G,t4:8G,h100:8G,a100:8G,t4:8G,h100:8G,a100:8G,t4:8G", NULL},
    };
    for (size_t i = 0; i < sizeof mixes8 / sizeof mixes8[0]; i++) {
        placed_job(&j, pre, 8, "d2", mixes8[i][0], mixes8[i][1], NULL, NULL);
        expect_sum(&j, 8, ref8, mixes8[i][0]);
    }
    /* the d2 value is not d1's: the GEMMs run the portable kernels */
    assert_string_not_equal(ref4, place_ref4[0] ? place_ref4 : "");
}

/* The transports, and any staging chunk, give the same bits (4 ESTs on 2
 * GPUs; the transport is read from the shim's log). The device transport
 * with moves off, and with moves on (kept: ESTs then move only at holds
 * of the whole job, docs/COLLECTIVES.md section 4); with moves on and no
 * transport asked for, nccl (simcuda's libnccl.so.2 is there). */
static void test_placement_transports(void **state)
{
    (void)state;
    char pre[1200];
    shim_preload(pre, sizeof pre);
    static const char *const cases[][4] = {
        {"EASYSCALE_COLL_TRANSPORT=device", "EASYSCALE_MOVE=off", NULL, "device transport"},
        {"EASYSCALE_COLL_TRANSPORT=host", NULL, NULL, "host transport"},
        {"EASYSCALE_COLL_TRANSPORT=host", "EASYSCALE_COLL_CHUNK=4096", NULL, "host transport"},
        {"EASYSCALE_COLL_TRANSPORT=device", "EASYSCALE_COLL_CHUNK=4096", "EASYSCALE_MOVE=off",
         "device transport"},
        {"EASYSCALE_COLL_TRANSPORT=device", NULL, NULL, "device transport, chunk"},
        {"EASYSCALE_LOG=info", NULL, NULL, "nccl transport, chunk"},
    };
    job_t j;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dv[] = "SIMCUDA_DEVICES=a100:8G,a100:8G";
        char *env[] = {dv, "EASYSCALE_DETERMINISM=d1", "CUBLAS_WORKSPACE_CONFIG=",
                       "CUDA_VISIBLE_DEVICES=", pre, "EASYSCALE_LOG=info",
                       (char *)cases[i][0], (char *)cases[i][1], (char *)cases[i][2], NULL};
        run_job(&j, 4, NULL, env, PLACE_ARGS, NULL);
        int n = 0;
        for (const char *p = j.out; (p = strstr(p, cases[i][3])) != NULL; p++)
            n++;
        if (n != 4)
            fprintf(stderr, "%s: %d ranks said \"%s\"\n", cases[i][0], n, cases[i][3]);
        assert_int_equal(n, 4);
        expect_sum(&j, 4, place_ref4, cases[i][0]);
    }
}

/* The NCCL carriers (EASYSCALE_COLL_TRANSPORT=nccl, while ESTs cannot
 * move): 4 ESTs on 4, 2 and 1 GPUs and 8 ESTs on 4 and 2 GPUs give the
 * checksums of the other transports; every rank says it carries over
 * nccl. */
static void test_placement_nccl(void **state)
{
    (void)state;
    char pre[1200];
    shim_preload(pre, sizeof pre);
    static const struct {
        int n;
        const char *devs;
    } runs[] = {
        {4, "a100:8G,a100:8G,a100:8G,a100:8G"}, {4, "a100:8G,a100:8G"}, {4, "a100:8G"},
        {8, "a100:8G,a100:8G,a100:8G,a100:8G"}, {8, "a100:8G,a100:8G"},
    };
    job_t j;
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char dv[128];
        snprintf(dv, sizeof dv, "SIMCUDA_DEVICES=%s", runs[i].devs);
        char *env[] = {dv, "EASYSCALE_DETERMINISM=d1", "CUBLAS_WORKSPACE_CONFIG=",
                       "CUDA_VISIBLE_DEVICES=", pre, "EASYSCALE_LOG=info",
                       "EASYSCALE_COLL_TRANSPORT=nccl", "EASYSCALE_MOVE=off", NULL};
        run_job(&j, runs[i].n, NULL, env, PLACE_ARGS, NULL);
        int k = es_count(j.out, "nccl transport, chunk");
        if (k != runs[i].n)
            fprintf(stderr, "%d ESTs on %s: %d ranks said \"nccl transport\"\n", runs[i].n,
                    runs[i].devs, k);
        assert_int_equal(k, runs[i].n);
        expect_sum(&j, runs[i].n, runs[i].n == 4 ? place_ref4 : place_ref8, runs[i].devs);
    }
}

/* 4 ESTs on 2 GPUs under simcuda's adversarial scheduling (SIMCUDA_CHAOS:
 * stream work delayed, independent streams run newest first): the checksum
 * of the same job without it. A synchronisation missing in the shim (its
 * collectives, library hooks or moves) or the trainer gives another
 * checksum or a failed run. That the setting reaches simcuda in every
 * rank: a malformed seed makes the job fail with simcuda's message. */
static void test_placement_chaos(void **state)
{
    (void)state;
    char pre[1200];
    shim_preload(pre, sizeof pre);
    const char *two = "a100:8G,a100:8G";
    job_t j;
    if (!place_ref4[0]) { /* run alone: the reference without chaos */
        placed_job(&j, pre, 4, "d1", two, NULL, NULL, NULL);
        expect_sum(&j, 4, place_ref4, "without SIMCUDA_CHAOS");
    }
    placed_job(&j, pre, 4, "d1", two, NULL, "SIMCUDA_CHAOS=21", NULL);
    expect_sum(&j, 4, place_ref4, "SIMCUDA_CHAOS=21");
    placed_job(&j, pre, 4, "d1", two, NULL, "SIMCUDA_CHAOS=x21", NULL);
    if (j.status == 0 || !strstr(j.out, "SIMCUDA_CHAOS='x21' is not a seed"))
        fprintf(stderr, "---- SIMCUDA_CHAOS=x21 (status %d) ----\n%s\n", j.status, j.out);
    assert_int_not_equal(j.status, 0);
    assert_non_null(strstr(j.out, "SIMCUDA_CHAOS='x21' is not a seed"));
    job_free(&j);
}

/* Negative controls. (a) The shim off (plain NCCL, ring order from the
 * placement): two GPU orders differ, and (b) the shim at d1 with
 * EASYSCALE_COLLECTIVES=nccl too: the virtual collectives are what makes
 * the placement irrelevant. (c) 4 ranks on 2 GPUs without the shim: NCCL
 * refuses two ranks on one GPU (docs/VENDOR-FACTS.md, "NCCL"); with it the same job
 * runs (test_placement_d1_4ests). */
static void test_placement_controls(void **state)
{
    (void)state;
    char pre[1200];
    shim_preload(pre, sizeof pre);
    const char *four = "a100:8G,a100:8G,a100:8G,a100:8G";
    job_t a, b;
    placed_job(&a, pre, 4, "off", four, "0,1,2,3", NULL, NULL);
    assert_ok_job(&a, 4);
    placed_job(&b, pre, 4, "off", four, "2,0,3,1", NULL, NULL);
    assert_ok_job(&b, 4);
    assert_string_not_equal(a.sum, b.sum);
    job_free(&a);
    job_free(&b);
    placed_job(&a, pre, 4, "d1", four, "0,1,2,3", "EASYSCALE_COLLECTIVES=nccl", NULL);
    assert_ok_job(&a, 4);
    placed_job(&b, pre, 4, "d1", four, "2,0,3,1", "EASYSCALE_COLLECTIVES=nccl", NULL);
    assert_ok_job(&b, 4);
    assert_string_not_equal(a.sum, b.sum);
    job_free(&a);
    job_free(&b);
    placed_job(&a, NULL, 4, "d1", "a100:8G,a100:8G", NULL, NULL, NULL);
    if (a.status == 0 || !strstr(a.out, "Duplicate GPU detected"))
        fprintf(stderr, "---- output ----\n%s\n", a.out);
    assert_int_not_equal(a.status, 0);
    assert_non_null(strstr(a.out, "Duplicate GPU detected"));
    job_free(&a);
}

static int teardown(void **state)
{
    (void)state;
    job_free(&learn_run);
    job_free(&det_a100);
    job_free(&det_t4);
    job_free(&atomic_run);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_and_errors),
        cmocka_unit_test(test_missing_library),
        cmocka_unit_test(test_launch_propagates_failure),
        cmocka_unit_test(test_ranks_disagree),
        cmocka_unit_test(test_rdzv_tcp_same_checksum),
        cmocka_unit_test(test_rdzv_tcp_across_hosts),
        cmocka_unit_test(test_rdzv_tcp_timeouts),
        cmocka_unit_test(test_rdzv_tcp_bad_master),
        cmocka_unit_test(test_save),
        cmocka_unit_test(test_torch_ddp_compiles),
        cmocka_unit_test(test_torch_ddp_cli),
        cmocka_unit_test(test_dropout_host_reference),
        cmocka_unit_test(test_audit_finds_atomic_kernel),
        cmocka_unit_test(test_learns),
        cmocka_unit_test(test_deterministic_repeat),
        cmocka_unit_test(test_control_atomics),
        cmocka_unit_test(test_control_gpu_model),
        cmocka_unit_test(test_control_cudnn_algorithm),
        cmocka_unit_test(test_control_placement),
        cmocka_unit_test(test_world_sizes_same_update),
        cmocka_unit_test(test_shim_d2_across_models),
        cmocka_unit_test(test_shim_d1_repeat),
    };
    /* the placements: two programs of their own (examples_train_place1_test and
     * examples_train_place2_test, this file built with ES_TRAIN_PLACEMENT 1 and 2),
     * so that each stays well within the runner's time limit, also on a
     * loaded machine, and they can run side by side */
    const struct CMUnitTest placement[] = {
        cmocka_unit_test(test_placement_d1_4ests),
        cmocka_unit_test(test_placement_d1_8ests),
        cmocka_unit_test(test_placement_d2_mixes),
    };
    const struct CMUnitTest placement2[] = {
        cmocka_unit_test(test_d2_int8_vs_fma),
        cmocka_unit_test(test_placement_transports),
        cmocka_unit_test(test_placement_nccl),
        cmocka_unit_test(test_placement_chaos),
        cmocka_unit_test(test_placement_controls),
    };
    if (getenv("TRAIN_TEST")) /* one test by name, when debugging */
        cmocka_set_test_filter(getenv("TRAIN_TEST"));
    (void)tests;
    (void)placement;
    (void)placement2;
#if ES_TRAIN_PLACEMENT == 1
    return cmocka_run_group_tests_name("train placement", placement, NULL, teardown);
#elif ES_TRAIN_PLACEMENT == 2
    return cmocka_run_group_tests_name("train placement 2", placement2, NULL, teardown);
#else
    return cmocka_run_group_tests_name("train", tests, NULL, teardown);
#endif
}
