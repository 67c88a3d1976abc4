/* Test of the move orchestrator (move/mover.h) with the door: an
 * "application" of two threads works through virtual handles and passes the
 * door on every driver call, as the shim's wrappers will make it; moves
 * requested from outside (device to device, park, unpark, by a signal) run
 * at its safe points; its results, pointers and handles are those of a run
 * without moves. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "move/door.h"
#include "move/drv.h"
#include "move/memreg.h"
#include "move/mover.h"
#include "move/swap.h"
#include "move/vhandle.h"
#include "kernels/swapsum.h"
#include "tests/move/movetest.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS 24
#define NCH 2 /* chunks hashed per step */

extern const unsigned char es_swapsum_fatbin[];

/* A wrapped driver call: through the door. */
#define CALL(expr)                                                                             \
    ({                                                                                         \
        if (es_door_enter())                                                                   \
            es_door_slow();                                                                    \
        CUresult r_ = (expr);                                                                  \
        es_door_leave();                                                                       \
        r_;                                                                                    \
    })

typedef struct app {
    CUcontext ctx;
    CUstream s;
    CUmodule m;
    CUfunction f;
    CUdeviceptr data, sums; /* sums: STEPS * NCH hashes, written step by step */
    uint64_t *host;         /* host buffer of one step's data */
    int devs_seen[8];
    int step;
} app_t;

static app_t A;

static void fill(uint64_t *h, int step)
{
    for (size_t i = 0; i < NCH * ES_SWAPSUM_CHUNK / 8; i++)
        h[i] = (uint64_t)(i * 2654435761u) ^ ((uint64_t)step << 40);
}

/* The application's thread: STEPS steps of several calls each. */
static void *worker(void *arg)
{
    (void)arg;
    CALL(es_vh_set_current(A.ctx));
    for (A.step = 0; A.step < STEPS; A.step++) {
        fill(A.host, A.step);
        CK(CALL(cuMemcpyHtoDAsync(A.data, A.host, NCH * ES_SWAPSUM_CHUNK, es_vh_stream(A.s))));
        es_swapsum_args_t a = { (const es_u64 *)A.data,
                                (es_u64 *)(A.sums + (size_t)A.step * NCH * 8), NCH };
        void *params[] = { &a };
        CK(CALL(cuLaunchKernel(es_vh_real(A.f), NCH, 1, 1, ES_SWAPSUM_THREADS, 1, 1, 0,
                               es_vh_stream(A.s), params, NULL)));
        CK(CALL(cuStreamSynchronize(es_vh_stream(A.s))));
        int ord = -1;
        CALL(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, A.data));
        if (ord >= 0 && ord < 8)
            A.devs_seen[ord] = 1;
        usleep(5000);
    }
    return NULL;
}

/* Another application thread, calling now and then. */
static volatile int stop_other;
static void *other(void *arg)
{
    (void)arg;
    CALL(es_vh_set_current(A.ctx));
    while (!stop_other) {
        CUdevice d;
        CALL(cuCtxGetDevice(&d));
        usleep(2000);
    }
    return NULL;
}

static void app_make(void)
{
    memset(&A, 0, sizeof(A));
    CK(CALL(es_vh_primary_retain(&A.ctx, 0, 0)));
    CK(CALL(es_vh_set_current(A.ctx)));
    CK(CALL(es_vh_stream_create(&A.s, CU_STREAM_NON_BLOCKING, 0, 0)));
    CK(CALL(es_vh_module_load(&A.m, es_swapsum_fatbin, 0, 0, NULL, NULL)));
    CK(CALL(es_vh_module_get_function(&A.f, A.m, "es_swapsum")));
    CK(CALL(es_mem_alloc(0, NCH * ES_SWAPSUM_CHUNK, ES_ALLOC_PLAIN, &A.data)));
    CK(CALL(es_mem_alloc(0, STEPS * NCH * 8, ES_ALLOC_PLAIN, &A.sums)));
    CK(CALL(es_host_alloc((void **)&A.host, NCH * ES_SWAPSUM_CHUNK, 0)));
}

/* Every step's hashes, read at the end, against the host's. */
static void app_check(void)
{
    uint64_t got[STEPS * NCH];
    CK(CALL(cuMemcpyDtoH(got, A.sums, sizeof(got))));
    for (int s = 0; s < STEPS; s++) {
        fill(A.host, s);
        for (int c = 0; c < NCH; c++)
            assert_true(got[s * NCH + c] == es_ss_chunk(A.host + c * (ES_SWAPSUM_CHUNK / 8)));
    }
}

static int wait_result(long tk, char *msg, size_t len)
{
    int rc = -1;
    assert_true(tk > 0);
    assert_int_equal(es_door_result(tk, 60000, &rc, msg, len), 0);
    return rc;
}

static void test_moves_during_a_run(void **state)
{
    (void)state;
    app_make();
    CUdeviceptr data0 = A.data;
    CUstream s0 = A.s;
    pthread_t w, o;
    stop_other = 0;
    pthread_create(&w, NULL, worker, NULL);
    pthread_create(&o, NULL, other, NULL);
    char msg[256];
    int targets[] = { 1, ES_MOVER_PARK, 2, 0, 2 };
    for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
        while (es_mover_where(0) != ES_MOVER_PARK && A.step < (int)(3 + 4 * i))
            usleep(1000);
        int rc = wait_result(es_mover_post(0, targets[i]), msg, sizeof(msg));
        assert_int_equal(rc, 0);
        assert_int_equal(es_mover_where(0), targets[i]);
        if (targets[i] == ES_MOVER_PARK) {
            /* parked: no device memory of the EST anywhere, threads held */
            assert_int_equal(es_memreg_resident_bytes(0), 0);
            int st = A.step;
            usleep(30000);
            assert_int_equal(A.step, st);
        }
    }
    pthread_join(w, NULL);
    stop_other = 1;
    pthread_join(o, NULL);
    /* the same pointers and handles all along; it ran on devices 0, 1, 2 */
    assert_true(A.data == data0 && A.s == s0);
    assert_true(A.devs_seen[0] && A.devs_seen[1] && A.devs_seen[2]);
    app_check();
}

static void on_sig(int sig)
{
    (void)sig;
    es_door_request_from_signal();
}

static void test_signal_request(void **state)
{
    (void)state;
    /* the same application, moved by a signal carrying no data: the target
     * was stored beforehand */
    assert_int_equal(es_mover_where(0), 2);
    es_mover_signal_target(0, 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sig;
    sigaction(SIGUSR1, &sa, NULL);
    raise(SIGUSR1);
    CUdevice d = -1;
    CALL(cuCtxGetDevice(&d)); /* the next call moves */
    assert_int_equal(es_mover_where(0), 1);
    CALL(cuCtxGetDevice(&d));
    assert_int_equal(d, 1);
    app_check();
}

static void test_failed_move_stays(void **state)
{
    (void)state;
    /* the only thread left is at a safe point: moves run right here.
     * Device 3 is too small for the EST's memory: it stays on device 1 */
    char msg[256];
    assert_int_equal(es_mover_run(0, 3, msg, sizeof(msg)), -ENOMEM);
    assert_non_null(strstr(msg, "stays on device 1"));
    assert_int_equal(es_mover_where(0), 1);
    app_check();
    /* parked, then an unpark onto the small device fails: still parked,
     * nothing of it on any device */
    assert_int_equal(es_mover_run(0, ES_MOVER_PARK, msg, sizeof(msg)), 0);
    assert_int_equal(es_mover_run(0, 3, msg, sizeof(msg)), -ENOMEM);
    assert_non_null(strstr(msg, "stays parked"));
    assert_int_equal(es_mover_where(0), ES_MOVER_PARK);
    assert_null(es_vh_real(A.s));
    assert_null(es_vh_real(A.ctx));
    assert_int_equal(es_memreg_resident_bytes(0), 0);
    assert_int_equal(es_mover_run(0, 0, msg, sizeof(msg)), 0);
    app_check();
}

/* Negative control: memory the registry does not know (allocated with the
 * driver directly, as without the shim) does not survive a move. */
static void test_unregistered_memory_is_lost(void **state)
{
    (void)state;
    CUdeviceptr raw;
    CK(cuMemAlloc(&raw, 1 << 20));
    ct_fill(raw, 1 << 20, 5);
    assert_true(ct_check(raw, 1 << 20, 5));
    char msg[256];
    assert_int_equal(es_mover_run(0, 1, msg, sizeof(msg)), 0);
    assert_int_equal(es_mover_run(0, 0, msg, sizeof(msg)), 0);
    /* gone with the context that held it; the registry's memory is whole */
    uint32_t buf[16];
    assert_int_not_equal(cuMemcpyDtoH(buf, raw, sizeof(buf)), CUDA_SUCCESS);
    app_check();
}

int main(void)
{
    setenv("SIMCUDA_DEVICES", "a100:2G,h100:2G,t4:2G,a10:2M", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    ct_setup("move");
    es_mover_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moves_during_a_run),
        cmocka_unit_test(test_signal_request),
        cmocka_unit_test(test_failed_move_stays),
        cmocka_unit_test(test_unregistered_memory_is_lost),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
