/* simcuda stream capture and graphs (sim/driver/capture.c): capture,
 * replay, fork and join through events, and NVIDIA's rules for calls that
 * are not allowed during a capture (cuda.h, cuThreadExchangeStreamCaptureMode;
 * the programming guide's "Prohibited and Unhandled Operations"): the
 * error codes, the invalidation, and the interaction modes. */
#include "tests/harness.h"
#include "tests/sim/driver/common.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define N 256

static CUmodule g_mod;
static CUfunction g_add;

static int setup(void **state)
{
    (void)state;
    st_primary(0);
    size_t len = 0;
    void *img = es_read_file(es_build_path("tests/sim/driver/kernels.fatbin"), &len);
    assert_non_null(img);
    CK(cuModuleLoadData(&g_mod, img));
    free(img);
    CK(cuModuleGetFunction(&g_add, g_mod, "sim_add"));
    return 0;
}

static void host_count(void *arg)
{
    __atomic_fetch_add((int *)arg, 1, __ATOMIC_SEQ_CST);
}

static void launch_add(CUstream s, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUresult want)
{
    int n = N;
    void *params[] = { &a, &b, &c, &n };
    assert_int_equal(cuLaunchKernel(g_add, 1, 1, 1, N, 1, 1, 0, s, params, NULL), want);
}

/* Captured work does not run; the graph replays it, as often as launched. */
static void test_capture_replay(void **state)
{
    (void)state;
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b, c, d;
    CK(cuMemAlloc(&a, N * 4));
    CK(cuMemAlloc(&b, N * 4));
    CK(cuMemAlloc(&c, N * 4));
    CK(cuMemAlloc(&d, N * 4));
    float ha[N], hb[N], hd[N];
    for (int i = 0; i < N; i++)
        ha[i] = (float)i, hb[i] = 0.5f;
    CK(cuMemcpyHtoD(a, ha, sizeof(ha)));
    CK(cuMemcpyHtoD(b, hb, sizeof(hb)));
    CK(cuMemsetD32(d, 0, N));
    int count = 0;
    CUstreamCaptureStatus cs;
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuStreamIsCapturing(s, &cs));
    assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    cuuint64_t id = 0;
    CK(cuStreamGetCaptureInfo(s, &cs, &id, NULL, NULL, NULL, NULL));
    assert_true(id > 0);
    CK(cuMemsetD32Async(c, 0x7f800000u, N, s));
    launch_add(s, a, b, c, CUDA_SUCCESS);
    CK(cuMemcpyDtoDAsync(d, c, N * 4, s));
    CK(cuLaunchHostFunc(s, host_count, &count));
    CUgraph g = NULL;
    CK(cuStreamEndCapture(s, &g));
    assert_non_null(g);
    CK(cuStreamIsCapturing(s, &cs));
    assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_NONE);
    CK(cuCtxSynchronize());
    assert_int_equal(count, 0);
    CK(cuMemcpyDtoH(hd, d, sizeof(hd)));
    assert_true(hd[5] == 0.0f); /* nothing ran */
    size_t nn = 0;
    CK(cuGraphGetNodes(g, NULL, &nn));
    assert_int_equal(nn, 4);
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuGraphDestroy(g)); /* the executable graph stands alone */
    for (int r = 1; r <= 3; r++) {
        for (int i = 0; i < N; i++)
            ha[i] = (float)(i * r);
        CK(cuMemcpyHtoD(a, ha, sizeof(ha)));
        CK(cuGraphLaunch(x, s));
        CK(cuStreamSynchronize(s));
        CK(cuMemcpyDtoH(hd, d, sizeof(hd)));
        for (int i = 0; i < N; i++)
            assert_true(hd[i] == (float)(i * r) + 0.5f);
        assert_int_equal(count, r);
    }
    CK(cuGraphExecDestroy(x));
    assert_int_equal(cuGraphExecDestroy(x), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemFree(a));
    CK(cuMemFree(b));
    CK(cuMemFree(c));
    CK(cuMemFree(d));
    CK(cuStreamDestroy(s));
}

/* A fork (a second stream waits for an event recorded in the capture)
 * becomes part of the graph; it must join back (the origin waits for an
 * event recorded on it) or the capture ends with UNJOINED. */
static void test_fork_join(void **state)
{
    (void)state;
    CUstream s1, s2;
    CUevent e1, e2;
    CK(cuStreamCreate(&s1, 0));
    CK(cuStreamCreate(&s2, 0));
    CK(cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));
    CUdeviceptr a, b, c;
    CK(cuMemAlloc(&a, N * 4));
    CK(cuMemAlloc(&b, N * 4));
    CK(cuMemAlloc(&c, N * 4));
    CK(cuMemsetD32(a, 0x3f800000u, N)); /* 1.0f */
    CK(cuMemsetD32(b, 0x40000000u, N)); /* 2.0f */
    for (int joined = 1; joined >= 0; joined--) {
        CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CK(cuMemsetD32Async(c, 0, N, s1));
        CK(cuEventRecord(e1, s1));
        CK(cuStreamWaitEvent(s2, e1, 0));
        CUstreamCaptureStatus cs;
        CK(cuStreamIsCapturing(s2, &cs));
        assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_ACTIVE);
        launch_add(s2, a, b, c, CUDA_SUCCESS);
        CK(cuEventRecord(e2, s2));
        if (joined)
            CK(cuStreamWaitEvent(s1, e2, 0));
        CUgraph g = NULL;
        CUresult r = cuStreamEndCapture(s1, &g);
        CK(cuStreamIsCapturing(s2, &cs));
        assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_NONE);
        if (!joined) {
            assert_int_equal(r, CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
            assert_null(g);
            break;
        }
        CK(r);
        CUgraphExec x;
        CK(cuGraphInstantiate(&x, g, 0));
        CK(cuGraphLaunch(x, s1));
        CK(cuStreamSynchronize(s1));
        float hc[N];
        CK(cuMemcpyDtoH(hc, c, sizeof(hc)));
        assert_true(hc[0] == 3.0f && hc[N - 1] == 3.0f);
        CK(cuGraphExecDestroy(x));
        CK(cuGraphDestroy(g));
    }
    CK(cuEventDestroy(e1));
    CK(cuEventDestroy(e2));
    CK(cuMemFree(a));
    CK(cuMemFree(b));
    CK(cuMemFree(c));
    CK(cuStreamDestroy(s1));
    CK(cuStreamDestroy(s2));
}

typedef CUresult (*bad_fn)(CUstream s);

static CUresult bad_alloc(CUstream s)
{
    (void)s;
    CUdeviceptr p = 0;
    CUresult r = cuMemAlloc(&p, 4096);
    if (r == CUDA_SUCCESS)
        cuMemFree(p);
    return r;
}
static CUresult bad_sync(CUstream s) { return cuStreamSynchronize(s); }
static CUresult bad_query(CUstream s) { return cuStreamQuery(s); }
static CUresult bad_ctx_sync(CUstream s) { (void)s; return cuCtxSynchronize(); }
/* Each prohibited call fails with NVIDIA's code and invalidates the
 * capture: later work on the stream fails with INVALIDATED and
 * cuStreamEndCapture returns INVALIDATED without a graph; the stream then
 * works normally again. */
static void test_prohibited_calls(void **state)
{
    (void)state;
    static const struct { const char *name; bad_fn fn; } bad[] = {
        { "cuMemAlloc", bad_alloc }, { "cuStreamSynchronize", bad_sync },
        { "cuStreamQuery", bad_query }, { "cuCtxSynchronize", bad_ctx_sync },
    };
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a;
    CK(cuMemAlloc(&a, N * 4));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CUresult r = bad[i].fn(s);
        if (r != CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
            fail_msg("%s during capture: %d", bad[i].name, (int)r);
        CUstreamCaptureStatus cs;
        CK(cuStreamIsCapturing(s, &cs));
        assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
        assert_int_equal(cuMemsetD32Async(a, 0, N, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        CUgraph g = (CUgraph)1;
        assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        assert_null(g);
        CK(cuMemsetD32Async(a, 0, N, s)); /* a plain stream again */
        CK(cuStreamSynchronize(s));
    }
    /* a synchronous copy (the legacy stream) during a global capture */
    float h[N];
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(cuMemcpyDtoH(h, a, sizeof(h)), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUgraph g;
    assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    /* the legacy stream while a blocking stream captures */
    CUstream blk;
    CK(cuStreamCreate(&blk, 0));
    CK(cuStreamBeginCapture(blk, CU_STREAM_CAPTURE_MODE_RELAXED));
    assert_int_equal(cuMemsetD32Async(a, 0, N, NULL), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    assert_int_equal(cuStreamEndCapture(blk, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CK(cuStreamDestroy(blk));
    CK(cuMemFree(a));
    CK(cuStreamDestroy(s));
}

typedef struct {
    int mode;      /* this thread's interaction mode */
    CUresult got;
    CUcontext ctx;
} other_t;

static void *other_thread(void *arg)
{
    other_t *o = arg;
    cuCtxSetCurrent(o->ctx);
    CUstreamCaptureMode m = (CUstreamCaptureMode)o->mode;
    cuThreadExchangeStreamCaptureMode(&m);
    o->got = bad_alloc(NULL);
    return NULL;
}

static CUresult alloc_from_other_thread(int mode)
{
    other_t o = { mode, CUDA_SUCCESS, NULL };
    pthread_t t;
    CK(cuCtxGetCurrent(&o.ctx));
    assert_int_equal(pthread_create(&t, NULL, other_thread, &o), 0);
    pthread_join(t, NULL);
    return o.got;
}

/* The interaction modes: a GLOBAL capture forbids cuMemAlloc in every
 * thread whose mode is GLOBAL; a THREAD_LOCAL one only in its own thread;
 * a RELAXED one nowhere; a thread in RELAXED mode may always. */
static void test_modes(void **state)
{
    (void)state;
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUgraph g;
    /* GLOBAL capture: another (GLOBAL) thread's allocation is refused */
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(alloc_from_other_thread(CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    /* ... but not a RELAXED thread's */
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(alloc_from_other_thread(CU_STREAM_CAPTURE_MODE_RELAXED));
    CK(cuStreamEndCapture(s, &g));
    CK(cuGraphDestroy(g));
    /* THREAD_LOCAL capture: other threads may, this one may not */
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CK(alloc_from_other_thread(CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(bad_alloc(NULL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    /* RELAXED capture: allowed everywhere */
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    CK(bad_alloc(NULL));
    CK(alloc_from_other_thread(CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuStreamEndCapture(s, &g));
    CK(cuGraphDestroy(g));
    /* this thread switched to RELAXED: allowed during its own GLOBAL capture */
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    CK(cuThreadExchangeStreamCaptureMode(&m));
    assert_int_equal(m, CU_STREAM_CAPTURE_MODE_GLOBAL);
    CK(bad_alloc(NULL));
    CK(cuThreadExchangeStreamCaptureMode(&m));
    CK(cuStreamEndCapture(s, &g));
    CK(cuGraphDestroy(g));
    CK(cuStreamDestroy(s));
}

static void test_capture_errors(void **state)
{
    (void)state;
    CUstream s;
    CUgraph g;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    assert_int_equal(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
    assert_int_equal(cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    assert_int_equal(cuStreamBeginCapture(s, (CUstreamCaptureMode)7), CUDA_ERROR_INVALID_VALUE);
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_ERROR_ILLEGAL_STATE);
    CK(cuStreamEndCapture(s, &g));
    size_t nn = 1;
    CK(cuGraphGetNodes(g, NULL, &nn));
    assert_int_equal(nn, 0);
    CK(cuGraphDestroy(g));
    assert_int_equal(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
    CUgraphExec x;
    assert_int_equal(cuGraphInstantiate(&x, NULL, 0), CUDA_ERROR_INVALID_VALUE);
    CK(cuStreamDestroy(s));
}

int main(void)
{
    st_private_shm("capt");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_replay),
        cmocka_unit_test(test_fork_join),
        cmocka_unit_test(test_prohibited_calls),
        cmocka_unit_test(test_modes),
        cmocka_unit_test(test_capture_errors),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
