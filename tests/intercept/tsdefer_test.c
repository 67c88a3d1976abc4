/* The time-slicing check before a wrapped call (intercept/tsdefer.c,
 * docs/MOVING.md section 6), against a fake engine: which calls keep an
 * event record, answer not-ready, yield (flush) or go on, and whose calls
 * are never looked at. The engine's side (what is kept) is this file's
 * stand-in for coll/defer.c: a set of streams with kept work, of kept
 * events, and a count of flushes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "intercept/tsdefer.h"
#include "intercept/virtual/libh.h"
#include "move/door.h"
#include "shim/config.h"
#include "shim/real.h"

#include <errno.h>
#include <string.h>

/* ---- the fake engine ------------------------------------------------------------------- */

es_config_t es_cfg;
__thread es_door_tls_t es_door_tls __attribute__((tls_model("initial-exec")));
_Atomic int es_coll_ts_kept;

static struct {
    CUstream streams[8];
    int blocking[8];
    int nst;
    CUevent events[8];
    CUstream event_stream[8];
    int nev;
    int flushes, flush_rc, busy;
} F;

void es_log_write(int level, const char *fmt, ...)
{
    (void)level;
    (void)fmt;
}
const char *es_coll_last_error(void)
{
    return "fake";
}
int es_coll_ts_busy(void)
{
    return F.busy;
}
int es_coll_ts_flush(void)
{
    F.flushes++;
    if (F.flush_rc == 0)
        F.nst = F.nev = 0; /* everything kept ran */
    return F.flush_rc;
}
int es_coll_ts_stream_kept(CUstream s, int legacy_too)
{
    int legacy = s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
    for (int i = 0; i < F.nst; i++)
        if (F.streams[i] == s || (legacy && legacy_too && F.blocking[i]))
            return 1;
    for (int i = 0; i < F.nev; i++)
        if (F.event_stream[i] == s)
            return 1;
    return 0;
}
int es_coll_ts_event_kept(CUevent e)
{
    for (int i = 0; i < F.nev; i++)
        if (F.events[i] == e)
            return 1;
    return 0;
}
int es_coll_ts_keep_record(CUevent e, CUstream s)
{
    F.events[F.nev] = e;
    F.event_stream[F.nev++] = s;
    return 0;
}
void es_coll_ts_forget_event(CUevent e)
{
    for (int i = 0; i < F.nev; i++)
        if (F.events[i] == e) {
            F.events[i] = F.events[--F.nev];
            F.event_stream[i] = F.event_stream[F.nev];
            return;
        }
}
/* a cuBLAS handle 0x900 on stream S2, anything else is none of the shim's */
#define S1 ((CUstream)0x100)
#define S2 ((CUstream)0x200)
#define E1 ((CUevent)0x300)
#define E2 ((CUevent)0x400)
#define BLAS ((const void *)0x900)
int es_libh_stream(const void *h, void **stream)
{
    if (h != BLAS)
        return 0;
    *stream = S2;
    return 1;
}

/* ---- helpers ---------------------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    memset(&F, 0, sizeof(F));
    es_door_tls.depth = 1; /* an application's outermost call */
    es_door_tls.moving = 0;
    es_ts_in_nccl = 0;
    return 0;
}

static void keep_stream(CUstream s, int blocking)
{
    F.streams[F.nst] = s;
    F.blocking[F.nst++] = blocking;
}

/* es_ts_check of a CUDA call idx with the given handles; *status out. */
static int check(int lib, int idx, int kind1, const void *h1, int kind2, const void *h2,
                 int *status)
{
    es_ts_notes_t n = { 0 };
    if (kind1)
        es_ts_note(&n, kind1, h1);
    if (kind2)
        es_ts_note(&n, kind2, h2);
    *status = -1;
    return es_ts_check(lib, idx, &n, status);
}
#define CUDA(idx, k1, h1, k2, h2, st) check(ES_LIB_CUDA, ES_IDX_##idx, k1, h1, k2, h2, st)

/* ---- tests -------------------------------------------------------------------------------- */

static void test_record_on_kept_stream_is_kept(void **state)
{
    (void)state;
    int st;
    keep_stream(S1, 0);
    assert_int_equal(CUDA(cuEventRecord, ES_TS_EVENT, E1, ES_TS_STREAM, S1, &st), 1);
    assert_int_equal(st, CUDA_SUCCESS);
    assert_int_equal(F.nev, 1);
    assert_int_equal(F.flushes, 0);
    /* a query of it: not ready, no yield */
    assert_int_equal(CUDA(cuEventQuery, ES_TS_EVENT, E1, 0, NULL, &st), 1);
    assert_int_equal(st, CUDA_ERROR_NOT_READY);
    assert_int_equal(CUDA(cuStreamQuery, ES_TS_STREAM, S1, 0, NULL, &st), 1);
    assert_int_equal(st, CUDA_ERROR_NOT_READY);
    assert_int_equal(F.flushes, 0);
    /* recorded again on a stream without kept work: the kept record goes */
    assert_int_equal(CUDA(cuEventRecord, ES_TS_EVENT, E1, ES_TS_STREAM, S2, &st), 0);
    assert_int_equal(F.nev, 0);
}

static void test_waits(void **state)
{
    (void)state;
    int st;
    keep_stream(S1, 0);
    /* a stream with kept work waits for an event that is not kept: goes on */
    assert_int_equal(CUDA(cuStreamWaitEvent, ES_TS_STREAM, S1, ES_TS_EVENT, E2, &st), 0);
    assert_int_equal(F.flushes, 0);
    /* another stream waits for a kept event: the EST yields first */
    assert_int_equal(CUDA(cuEventRecord, ES_TS_EVENT, E1, ES_TS_STREAM, S1, &st), 1);
    assert_int_equal(CUDA(cuStreamWaitEvent, ES_TS_STREAM, S2, ES_TS_EVENT, E1, &st), 0);
    assert_int_equal(F.flushes, 1);
}

static void test_work_on_kept_stream_yields(void **state)
{
    (void)state;
    int st;
    keep_stream(S1, 0);
    /* work on another stream goes on */
    assert_int_equal(CUDA(cuMemsetD32Async, ES_TS_STREAM, S2, 0, NULL, &st), 0);
    assert_int_equal(F.flushes, 0);
    /* on the stream with kept work: yields, then goes on */
    assert_int_equal(CUDA(cuMemsetD32Async, ES_TS_STREAM, S1, 0, NULL, &st), 0);
    assert_int_equal(F.flushes, 1);
    /* a cuBLAS call whose handle launches on a kept stream */
    keep_stream(S2, 0);
    assert_int_equal(check(ES_LIB_CUBLAS, 0, ES_TS_LIBH, BLAS, 0, NULL, &st), 0);
    assert_int_equal(F.flushes, 2);
    /* a failed yield: the call does not run, the library's error */
    keep_stream(S1, 0);
    F.flush_rc = -1;
    assert_int_equal(CUDA(cuLaunchHostFunc, ES_TS_STREAM, S1, 0, NULL, &st), 1);
    assert_int_equal(st, CUDA_ERROR_LAUNCH_FAILED);
}

static void test_synchronising_calls(void **state)
{
    (void)state;
    int st;
    keep_stream(S1, 0); /* non-blocking */
    /* a synchronous copy (the legacy stream) does not wait for a
     * non-blocking stream: goes on */
    assert_int_equal(CUDA(cuMemcpyHtoD_v2, 0, NULL, 0, NULL, &st), 0);
    assert_int_equal(F.flushes, 0);
    /* ... but for a blocking one it does */
    keep_stream(S2, 1);
    assert_int_equal(CUDA(cuMemcpyHtoD_v2, 0, NULL, 0, NULL, &st), 0);
    assert_int_equal(F.flushes, 1);
    /* the context's synchronisation and a free always yield */
    keep_stream(S1, 0);
    assert_int_equal(CUDA(cuCtxSynchronize, 0, NULL, 0, NULL, &st), 0);
    assert_int_equal(F.flushes, 2);
    keep_stream(S1, 0);
    assert_int_equal(CUDA(cuMemFree_v2, 0, NULL, 0, NULL, &st), 0);
    assert_int_equal(F.flushes, 3);
    /* an asynchronous free is work on its stream (S2 has none) */
    keep_stream(S1, 0);
    assert_int_equal(CUDA(cuMemFreeAsync, ES_TS_STREAM, S2, 0, NULL, &st), 0);
    assert_int_equal(F.flushes, 3);
}

/* The engine's, a move's, a flush's own calls and a library's calls
 * inside a wrapped one are not the application's: never looked at. */
static void test_not_the_applications(void **state)
{
    (void)state;
    int st;
    keep_stream(S1, 0);
    es_ts_in_nccl = 1;
    assert_int_equal(CUDA(cuCtxSynchronize, 0, NULL, 0, NULL, &st), 0);
    es_ts_in_nccl = 0;
    es_door_tls.depth = 2;
    assert_int_equal(CUDA(cuMemsetD32Async, ES_TS_STREAM, S1, 0, NULL, &st), 0);
    es_door_tls.depth = 1;
    es_door_tls.moving = 1;
    assert_int_equal(CUDA(cuMemsetD32Async, ES_TS_STREAM, S1, 0, NULL, &st), 0);
    es_door_tls.moving = 0;
    F.busy = 1;
    assert_int_equal(CUDA(cuEventRecord, ES_TS_EVENT, E1, ES_TS_STREAM, S1, &st), 0);
    F.busy = 0;
    assert_int_equal(F.flushes, 0);
    assert_int_equal(F.nev, 0);
    /* negative control: the same call from the application yields */
    assert_int_equal(CUDA(cuMemsetD32Async, ES_TS_STREAM, S1, 0, NULL, &st), 0);
    assert_int_equal(F.flushes, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_record_on_kept_stream_is_kept, setup),
        cmocka_unit_test_setup(test_waits, setup),
        cmocka_unit_test_setup(test_work_on_kept_stream_yields, setup),
        cmocka_unit_test_setup(test_synchronising_calls, setup),
        cmocka_unit_test_setup(test_not_the_applications, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
