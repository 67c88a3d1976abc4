/* Whole-process tests of moving an EST under the shim (docs/MOVING.md),
 * with tests/move/move_client.c (cuda.h only): moves through the control
 * hook across GPU models (a100 -> h100 -> t4 -> a100: the module re-loaded
 * from its image for sm_90 and sm_75) give the checksum of the run without
 * moves, and the client sees the same handles and pointers; a parked EST
 * (requested by a signal) holds no device memory, as another process sees
 * with cuMemGetInfo, and makes no progress until it comes back; a move
 * requested during a stream capture waits for its end; the clients written
 * against NVIDIA's headers alone pass unchanged with moves on (the driver's
 * error answers included: a copy past the end of an allocation, which the
 * VMM backing alone would let through). Negative control: with the memory
 * registry off (EASYSCALE_MOVE=nomem) the same moves break the run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "tests/harness.h"

#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TMO 240
#define DEVICES "SIMCUDA_DEVICES=a100:2G,h100:2G,t4:2G"

static char preload[4096];

static const char *client(void) { return es_build_path("tests/move/move_client"); }

static void run(char *const argv[], es_proc_result_t *r, const char *e1, const char *e2)
{
    char *env[] = { preload, DEVICES, "EASYSCALE_LOG=warn", (char *)e1, (char *)e2, NULL };
    assert_int_equal(es_run(argv, env, TMO, r), 0);
}

static const char *val(es_proc_result_t *r, const char *key, char *buf, size_t len)
{
    const char *v = es_find_last(r->out, key, buf, len);
    if (!v)
        fail_msg("no \"%s\" line in:\n%s", key, r->out);
    return v;
}

static char reference[64];

static void test_reference(void **state)
{
    (void)state;
    char *argv[] = { (char *)client(), "run", "10", NULL };
    es_proc_result_t r;
    run(argv, &r, NULL, NULL);
    if (r.status != 0)
        fail_msg("exit %d\n%s", r.status, r.out);
    assert_non_null(strstr(r.out, "handles same"));
    val(&r, "checksum", reference, sizeof(reference));
    /* without the shim: the same bits (the shim changes nothing of it) */
    char *env[] = { DEVICES, NULL };
    es_proc_result_t b;
    assert_int_equal(es_run(argv, env, TMO, &b), 0);
    char v[64];
    if (b.status != 0)
        fail_msg("without the shim: exit %d\n%s", b.status, b.out);
    assert_string_equal(val(&b, "checksum", v, sizeof(v)), reference);
    es_proc_result_free(&r);
    es_proc_result_free(&b);
}

static void test_hook_moves_across_models(void **state)
{
    (void)state;
    char *argv[] = { (char *)client(), "run", "10", "2:1", "4:2", "7:0", NULL };
    es_proc_result_t r;
    run(argv, &r, NULL, NULL);
    if (r.status != 0)
        fail_msg("exit %d\n%s", r.status, r.out);
    char v[64];
    assert_string_equal(val(&r, "checksum", v, sizeof(v)), reference);
    assert_non_null(strstr(r.out, "handles same"));
    /* it ran on each GPU in turn, its device always 0 as it sees it */
    assert_non_null(strstr(r.out, "step 1 device 0 gpu 0\n"));
    assert_non_null(strstr(r.out, "step 2 device 0 gpu 1\n"));
    assert_non_null(strstr(r.out, "step 4 device 0 gpu 2\n"));
    assert_non_null(strstr(r.out, "step 7 device 0 gpu 0\n"));
    assert_non_null(strstr(r.out, "move to 1: 0\n"));
    es_proc_result_free(&r);
}

static void test_negative_control_without_registry(void **state)
{
    (void)state;
    char *argv[] = { (char *)client(), "run", "10", "2:1", "4:2", "7:0", NULL };
    es_proc_result_t r;
    run(argv, &r, "EASYSCALE_MOVE=nomem", NULL);
    /* the memory stayed behind: the run fails or gives other bits */
    char v[64] = "";
    int broken = r.status != 0 || !es_find_last(r.out, "checksum", v, sizeof(v)) ||
                 strcmp(v, reference) != 0;
    if (!broken)
        fail_msg("the run survived moves without the memory registry:\n%s", r.out);
    es_proc_result_free(&r);
}

/* ---- a client run in the background ---------------------------------------------------- */

typedef struct bg {
    pid_t pid;
    int fd;
    char buf[65536];
    size_t len;
} bg_t;

static void bg_start(bg_t *b, char *const argv[], char *const extra[])
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    b->len = 0;
    b->buf[0] = 0;
    b->pid = fork();
    assert_true(b->pid >= 0);
    if (b->pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[0]);
        putenv(preload);
        putenv(DEVICES);
        for (int i = 0; extra && extra[i]; i++)
            putenv(extra[i]);
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    b->fd = p[0];
    fcntl(b->fd, F_SETFL, O_NONBLOCK);
}

/* Reads what the client printed; 1 when `what` has appeared. */
static int bg_seen(bg_t *b, const char *what, int timeout_ms)
{
    for (int t = 0; t <= timeout_ms; t += 10) {
        ssize_t n;
        while ((n = read(b->fd, b->buf + b->len, sizeof(b->buf) - 1 - b->len)) > 0) {
            b->len += (size_t)n;
            b->buf[b->len] = 0;
        }
        if (strstr(b->buf, what))
            return 1;
        struct pollfd pf = { b->fd, POLLIN, 0 };
        poll(&pf, 1, 10);
    }
    return 0;
}

static int bg_wait(bg_t *b)
{
    bg_seen(b, "checksum", TMO * 1000);
    int st = 0;
    waitpid(b->pid, &st, 0);
    bg_seen(b, "\x01", 0);
    close(b->fd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void send_move(pid_t pid, int slot)
{
    union sigval v = { .sival_int = slot };
    assert_int_equal(sigqueue(pid, SIGUSR2, v), 0);
}

/* Device memory in use on device dev, as this process sees it. */
static size_t used_on(int dev)
{
    CUcontext c;
    size_t fr = 0, tot = 0;
    if (cuDevicePrimaryCtxRetain(&c, dev) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS ||
        cuMemGetInfo(&fr, &tot) != CUDA_SUCCESS)
        fail_msg("cuMemGetInfo on device %d failed", dev);
    cuDevicePrimaryCtxRelease(dev);
    return tot - fr;
}

static void test_parked_holds_no_device_memory(void **state)
{
    (void)state;
    size_t base = used_on(0);
    char *argv[] = { (char *)client(), "wait", "10", NULL };
    char *extra[] = { "EASYSCALE_MOVE_SIGNAL=SIGUSR2", NULL };
    bg_t b;
    bg_start(&b, argv, extra);
    assert_true(bg_seen(&b, "step 2 device 0 gpu 0", TMO * 1000));
    assert_true(used_on(0) > base); /* resident: its memory is there */
    send_move(b.pid, -1);
    /* parked: nothing of it on the device, seen from this other process */
    int zero = 0;
    for (int i = 0; i < 500 && !zero; i++) {
        zero = used_on(0) <= base;
        if (!zero)
            usleep(10000);
    }
    if (!zero)
        fail_msg("still %zu bytes on device 0 after the park\n%s", used_on(0) - base, b.buf);
    /* and no progress while parked */
    bg_seen(&b, "", 0);
    int steps = es_count(b.buf, "step ");
    usleep(400000);
    bg_seen(&b, "", 0);
    assert_int_equal(es_count(b.buf, "step "), steps);
    /* back, on GPU 1 */
    send_move(b.pid, 1);
    assert_int_equal(bg_wait(&b), 0);
    assert_non_null(strstr(b.buf, "device 0 gpu 1\n"));
    assert_non_null(strstr(b.buf, "handles same"));
    char v[64];
    es_proc_result_t r = { .out = b.buf };
    assert_string_equal(val(&r, "checksum", v, sizeof(v)), reference);
}

static void test_move_waits_for_capture(void **state)
{
    (void)state;
    char *argv[] = { (char *)client(), "capture", NULL };
    es_proc_result_t r;
    run(argv, &r, NULL, NULL);
    if (r.status != 0)
        fail_msg("exit %d\n%s", r.status, r.out);
    if (strstr(r.out, "capture not supported"))
        es_test_skip("the driver has no stream capture (a GPU driver run; simcuda has it)");
    /* asked during the capture: pending, not done; done at the first call
     * after the capture ended */
    assert_non_null(strstr(r.out, "requested 1 moves 0\n"));
    assert_non_null(strstr(r.out, "captured moves 0\n"));
    assert_non_null(strstr(r.out, "after moves 1\n"));
    assert_non_null(strstr(r.out, "step 0 device 0 gpu 1\n"));
    es_proc_result_free(&r);
}

/* The controller's moves (easyscale-ctl, through the shim's moves seam):
 * migrate, swap-out and swap-in of a running EST from a schedule; every
 * answer "done", the run's checksum the reference's. */
static void test_controller_moves(void **state)
{
    (void)state;
    char sched[256];
    snprintf(sched, sizeof(sched), "/tmp/es-move-sched-%d", (int)getpid());
    FILE *f = fopen(sched, "w");
    assert_non_null(f);
    fprintf(f, "time 1 migrate 0 1\ntime 2 swap-out 0\ntime 3 swap-in 0 2\n");
    fclose(f);
    char *argv[] = { (char *)es_build_path("bin/easyscale-ctl"), "run", "--ests", "1", "--gpus",
                     "0,1,2", "--schedule", sched, "--progress", "off", "--shim",
                     (char *)es_build_path("lib/libeasyscale.so"), "--",
                     (char *)client(), "wait", "80", NULL };
    char *env[] = { DEVICES, NULL };
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, TMO, &r), 0);
    unlink(sched);
    if (r.status != 0)
        fail_msg("exit %d\n%s", r.status, r.out);
    assert_non_null(strstr(r.out, "migrate EST 0 to GPU 1: done in"));
    assert_non_null(strstr(r.out, "swap-out EST 0: done in"));
    assert_non_null(strstr(r.out, "swap-in EST 0 to GPU 2: done in"));
    assert_non_null(strstr(r.out, "device 0 gpu 1\n"));
    assert_non_null(strstr(r.out, "device 0 gpu 2\n"));
    char v[64];
    es_proc_result_t ref;
    char *rargv[] = { (char *)client(), "run", "80", NULL };
    run(rargv, &ref, NULL, NULL);
    assert_int_equal(ref.status, 0);
    char want[64];
    val(&ref, "checksum", want, sizeof(want));
    assert_string_equal(val(&r, "[0] checksum", v, sizeof(v)), want);
    es_proc_result_free(&r);
    es_proc_result_free(&ref);
}

/* ---- the trainer ---------------------------------------------------------------------- */

/* examples/train.py, one EST, with moves sent as signals at random times
 * (the targets in order); returns its checksum line's value in ck. */
static int train_run_env(const char *det, const char *devices, const int *targets, int n,
                         unsigned seed, char *ck, size_t len, const char *more)
{
    char rdzv[] = "/tmp/es-move-rdzv-XXXXXX";
    assert_non_null(mkdtemp(rdzv));
    char rdzv_env[64], dev_env[128], det_env[64];
    snprintf(rdzv_env, sizeof(rdzv_env), "ES_RDZV_DIR=%s", rdzv);
    snprintf(dev_env, sizeof(dev_env), "SIMCUDA_DEVICES=%s", devices);
    snprintf(det_env, sizeof(det_env), "EASYSCALE_DETERMINISM=%s", det);
    /* the moves start at step 25 and take a few seconds; the steps after
     * them several times that (d2's steps cost about 3 times d1's) */
    const char *steps = strcmp(det, "d2") == 0 ? "250" : "400";
    char *argv[] = { "/usr/bin/env", "python3", (char *)es_root_path("examples/train.py"),
                     "--steps", (char *)steps, "--deterministic-kernels", "--log-every", "25",
                     NULL };
    char *extra[] = { "RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1",
                      "EASYSCALE_MOVE_SIGNAL=SIGUSR2", "EASYSCALE_LOG=info", rdzv_env, det_env,
                      dev_env, (char *)more, NULL };
    bg_t b;
    bg_start(&b, argv, extra);
    assert_true(bg_seen(&b, "step    25/", TMO * 1000));
    srand(seed);
    for (int i = 0; i < n; i++) {
        usleep((useconds_t)(50000 + rand() % 300000));
        send_move(b.pid, targets[i]);
        char want[64];
        if (targets[i] < 0)
            snprintf(want, sizeof(want), "moved to host memory");
        else
            snprintf(want, sizeof(want), "moved to device %d", targets[i]);
        if (!bg_seen(&b, want, more ? 5000 : TMO * 1000) && !more)
            fail_msg("no \"%s\":\n%s", want, b.buf);
        /* one move at a time: the next one once this is done */
        b.buf[0] = 0;
        b.len = 0;
    }
    int st = bg_wait(&b);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", rdzv);
    if (system(cmd) != 0)
        fail_msg("%s failed", cmd);
    ck[0] = 0;
    if (!es_find_last(b.buf, "checksum", ck, len))
        ck[0] = 0;
    if (st != 0 && !more)
        fail_msg("train.py exit %d\n%s", st, b.buf);
    return st;
}

static void train_run(const char *det, const char *devices, const int *targets, int n,
                      unsigned seed, char *ck, size_t len)
{
    train_run_env(det, devices, targets, n, seed, ck, len, NULL);
    if (!ck[0])
        fail_msg("train.py printed no checksum");
}

/* The checksum of the trainer without moves at det on devices: run once
 * per configuration, shared by the tests. */
static void train_fixed(const char *det, const char *devices, char *ck, size_t len)
{
    static struct {
        char key[128], ck[128];
    } cache[4];
    static int n;
    char key[128];
    snprintf(key, sizeof(key), "%s|%s", det, devices);
    for (int i = 0; i < n; i++)
        if (strcmp(cache[i].key, key) == 0) {
            snprintf(ck, len, "%s", cache[i].ck);
            return;
        }
    train_run(det, devices, NULL, 0, 0, ck, len);
    if (n < 4) {
        snprintf(cache[n].key, sizeof(cache[n].key), "%s", key);
        snprintf(cache[n].ck, sizeof(cache[n].ck), "%s", ck);
        n++;
    }
}

/* d1: moves between two GPUs of one model, out to host memory and back:
 * the checksum of the run that stayed on its first GPU. */
static void test_train_moves_d1(void **state)
{
    (void)state;
    char fixed[128], moved[128];
    train_fixed("d1", "a100:2G,a100:2G", fixed, sizeof(fixed));
    int targets[] = { 1, -1, 0, 1 };
    train_run("d1", "a100:2G,a100:2G", targets, 4, (unsigned)time(NULL), moved, sizeof(moved));
    assert_string_equal(moved, fixed);
}

/* d2: moves across models (a100 <-> h100, and a t4): the checksum of the
 * run that stayed on the a100. */
static void test_train_moves_d2_across_models(void **state)
{
    (void)state;
    char fixed[128], moved[128];
    const char *devs = "a100:2G,h100:2G,t4:2G";
    train_fixed("d2", devs, fixed, sizeof(fixed));
    int targets[] = { 1, 0, 2, -1, 1 };
    train_run("d2", devs, targets, 5, (unsigned)time(NULL) ^ 7u, moved, sizeof(moved));
    assert_string_equal(moved, fixed);
}

/* Negative control: the same moves without the memory registry break the
 * trainer (a crash, or other bits). */
static void test_train_negative_control(void **state)
{
    (void)state;
    char fixed[128], moved[128];
    train_fixed("d1", "a100:2G,a100:2G", fixed, sizeof(fixed));
    int targets[] = { 1 };
    int st = train_run_env("d1", "a100:2G,a100:2G", targets, 1, 1, moved, sizeof(moved),
                           "EASYSCALE_MOVE=nomem");
    if (st == 0 && strcmp(moved, fixed) == 0)
        fail_msg("the trainer survived a move without the memory registry");
}

/* Every driver function that takes a handle the shim makes virtual reaches
 * the shim (its wrapper, or the refusing stub), by cuGetProcAddress and by
 * dlsym. Negative control: with handles real (EASYSCALE_MOVE=off) the
 * driver's own functions come back. */
static void test_no_virtual_handle_reaches_the_driver(void **state)
{
    (void)state;
    char *argv[] = { (char *)client(), "coverage", NULL };
    es_proc_result_t r;
    char v[64];
    run(argv, &r, NULL, NULL);
    assert_int_equal(r.status, 0);
    if (strcmp(val(&r, "coverage", v, sizeof(v)), "") == 0)
        fail_msg("%s", r.out);
    if (!strstr(r.out, "leaks 0\n"))
        fail_msg("driver functions handed out with virtual handles:\n%s", r.out);
    es_proc_result_free(&r);
    run(argv, &r, "EASYSCALE_MOVE=off", NULL);
    assert_int_equal(r.status, 0);
    assert_null(strstr(r.out, "leaks 0\n"));
    assert_non_null(strstr(r.out, "leak getproc cuCtxRecordEvent\n"));
    es_proc_result_free(&r);
}

/* The NVIDIA-header-only clients (tests/clients/) under the shim with moves
 * on (every allocation VMM-backed, every handle virtual): every test of
 * theirs passes, error answers included. */
static void test_clients_unchanged(void **state)
{
    (void)state;
    const char *names[] = { "tests/sim_driver_client_test", "tests/sim_cublas_client_test",
                            "tests/sim_cudnn_client_test" };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char *argv[] = { (char *)es_build_path(names[i]), NULL };
        es_proc_result_t r;
        run(argv, &r, "EASYSCALE_DETERMINISM=d1", NULL);
        if (r.status != 0 || !strstr(r.out, "[  PASSED  ]") || strstr(r.out, "[  FAILED  ]"))
            fail_msg("%s under the shim: exit %d\n%s", names[i], r.status, r.out);
        es_proc_result_free(&r);
    }
}

int main(void)
{
    es_preload_env(es_build_path("lib/libeasyscale.so"), preload, sizeof(preload));
    /* this process queries the devices too (cuMemGetInfo) */
    setenv("SIMCUDA_DEVICES", DEVICES + strlen("SIMCUDA_DEVICES="), 1);
    if (cuInit(0) != CUDA_SUCCESS) {
        fprintf(stderr, "move_est_test: no driver\n");
        return 1;
    }
    /* Two programs of one source (move_est_test and move_est2_test,
     * ES_TEST_PART 1 and 2), each well within the runner's time limit on a
     * loaded machine: the client, the trainer's negative control and its
     * moves at d1; the trainer's moves at d2 across GPU models. */
    const struct CMUnitTest part1[] = {
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_hook_moves_across_models),
        cmocka_unit_test(test_parked_holds_no_device_memory),
        cmocka_unit_test(test_move_waits_for_capture),
        cmocka_unit_test(test_no_virtual_handle_reaches_the_driver),
        cmocka_unit_test(test_clients_unchanged),
        cmocka_unit_test(test_controller_moves),
        cmocka_unit_test(test_train_moves_d1),
        /* last: their crashed processes may leave memory accounted for a while */
        cmocka_unit_test(test_negative_control_without_registry),
        cmocka_unit_test(test_train_negative_control),
    };
    const struct CMUnitTest part2[] = {
        cmocka_unit_test(test_train_moves_d2_across_models),
    };
#if ES_TEST_PART == 2
    (void)part1;
    return cmocka_run_group_tests_name("move est 2", part2, NULL, NULL);
#else
    (void)part2;
    return cmocka_run_group_tests_name("move est", part1, NULL, NULL);
#endif
}
