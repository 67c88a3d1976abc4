/* Tests of the virtual handles (move/vhandle.h) on simcuda's real
 * driver: the application's handle values survive a teardown on one device
 * and a re-creation on another, with every recorded setting; kernels launched
 * through the same handles compute the same results there; threads re-bind
 * their contexts; failures leave nothing half re-created. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "move/drv.h"
#include "move/memreg.h"
#include "move/swap.h"
#include "move/vhandle.h"
#include "fatbin/fatbin.h"
#include "kernels/swapsum.h"
#include "tests/move/movetest.h"
#include "tests/harness.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1024UL * 1024)

extern const unsigned char es_swapsum_fatbin[];

static int teardown(void **state)
{
    (void)state;
    es_vh_reset();
    es_memreg_reset();
    es_memreg_set_device(0, 0);
    return 0;
}

/* A foreign object type: counts its creations and destructions. */
typedef struct fake_rec {
    int created, destroyed, last_dev, fail_on_dev;
    int setting;
} fake_rec_t;

static int fake_create(void **real, void *rec, int dev)
{
    fake_rec_t *f = rec;
    if (dev == f->fail_on_dev)
        return -EIO;
    f->created++;
    f->last_dev = dev;
    *real = (void *)(uintptr_t)(0x1000 + 16 * f->created); /* a "real handle" */
    return 0;
}

static int fake_destroy(void *real, void *rec)
{
    (void)real;
    ((fake_rec_t *)rec)->destroyed++;
    return 0;
}

static const es_vforeign_ops_t fake_ops = { "fake", fake_create, fake_destroy };

static void test_translation(void **state)
{
    (void)state;
    void *real = (void *)0x1234;
    void **obj = es_harena_alloc(64); /* where the shim's objects live */
    assert_non_null(obj);
    obj[0] = real;
    assert_ptr_equal(es_vh_real(obj), real);
    assert_null(es_vh_real(NULL));
    assert_ptr_equal(es_vh_stream((CUstream)obj), (CUstream)real);
    assert_ptr_equal(es_vh_stream(CU_STREAM_LEGACY), CU_STREAM_LEGACY);
    assert_ptr_equal(es_vh_stream(CU_STREAM_PER_THREAD), CU_STREAM_PER_THREAD);
    assert_null(es_vh_stream(NULL));
    /* A value the shim never handed out is passed on unread (the driver
     * judges it): the address of a 4-byte variable, a heap block. */
    int small = 7;
    void *heap[1] = { real };
    assert_ptr_equal(es_vh_stream((CUstream)&small), (CUstream)&small);
    assert_ptr_equal(es_vh_real(&small), (void *)&small);
    assert_ptr_equal(es_vh_real(heap), (void *)heap);
    es_vh_on = 0; /* handles are real: nothing translated */
    assert_ptr_equal(es_vh_real(obj), (void *)obj);
    assert_ptr_equal(es_vh_stream((CUstream)obj), (CUstream)obj);
    es_vh_on = 1;
    es_harena_free(obj, 64);
}

static void test_primary_is_one_value(void **state)
{
    (void)state;
    CUcontext a, b;
    CK(es_vh_primary_retain(&a, 0, 0));
    CK(es_vh_primary_retain(&b, 0, 0));
    assert_ptr_equal(a, b);
    assert_int_equal(es_vh_primary_retains(0), 2);
    unsigned fl;
    int active = 0;
    CK(cuDevicePrimaryCtxGetState(0, &fl, &active));
    assert_true(active);
    CK(es_vh_primary_release(0));
    CK(es_vh_primary_release(0));
    assert_int_equal(es_vh_primary_release(0), CUDA_ERROR_INVALID_CONTEXT);
    CK(cuDevicePrimaryCtxGetState(0, &fl, &active));
    assert_false(active); /* the real one went with the last retain */
    CK(es_vh_primary_retain(&b, 0, 0));
    assert_ptr_equal(a, b);
    CK(es_vh_primary_release(0));
}

/* Runs the checksum kernel through virtual handles over buf (nchunks
 * chunks) into out; returns the hashes. */
static void run_kernel(CUfunction f, CUstream s, CUdeviceptr buf, CUdeviceptr out, int n,
                       uint64_t *h)
{
    es_swapsum_args_t a = { (const es_u64 *)buf, (es_u64 *)out, (es_u64)n };
    void *params[] = { &a };
    CK(cuLaunchKernel(es_vh_real(f), (unsigned)n, 1, 1, ES_SWAPSUM_THREADS, 1, 1, 0,
                      es_vh_stream(s), params, NULL));
    CK(cuStreamSynchronize(es_vh_stream(s)));
    CK(cuMemcpyDtoH(h, out, (size_t)n * sizeof(uint64_t)));
}

typedef struct app {
    CUcontext prim, created;
    CUstream s_plain, s_prio;
    CUevent ev;
    CUmodule m_embedded, m_copied, m_file;
    CUfunction f1, f2, f3, kf;
    CUlibrary lib;
    CUkernel kern;
    void *foreign;
    fake_rec_t rec;
    CUdeviceptr buf, out;
    uint64_t want[2];
} app_t;

static void app_make(app_t *A)
{
    memset(A, 0, sizeof(*A));
    A->rec.fail_on_dev = -1;
    CK(es_vh_primary_retain(&A->prim, 0, 0));
    CK(es_vh_set_current(A->prim));
    CK(es_vh_stream_create(&A->s_plain, CU_STREAM_NON_BLOCKING, 0, 0));
    int least, greatest;
    CK(cuCtxGetStreamPriorityRange(&least, &greatest));
    CK(es_vh_stream_create(&A->s_prio, 0, 1, greatest));
    CK(es_vh_event_create(&A->ev, CU_EVENT_DISABLE_TIMING));
    CK(es_vh_module_load(&A->m_embedded, es_swapsum_fatbin, 0, 0, NULL, NULL));
    /* an image in the application's heap, freed after the load */
    size_t sz = 0;
    assert_true(es_image_probe(es_swapsum_fatbin, SIZE_MAX, &sz) > 0);
    void *copy = malloc(sz);
    memcpy(copy, es_swapsum_fatbin, sz);
    CK(es_vh_module_load(&A->m_copied, copy, 0, 0, NULL, NULL));
    memset(copy, 0, sz);
    free(copy);
    char path[512];
    snprintf(path, sizeof(path), "%s/gen/es_swapsum.fatbin",
             getenv("ES_BUILD") ? getenv("ES_BUILD") : "build");
    CK(es_vh_module_load_file(&A->m_file, path));
    CK(es_vh_module_get_function(&A->f1, A->m_embedded, "es_swapsum"));
    CUfunction again;
    CK(es_vh_module_get_function(&again, A->m_embedded, "es_swapsum"));
    assert_ptr_equal(again, A->f1);
    CK(es_vh_module_get_function(&A->f2, A->m_copied, "es_swapsum"));
    CK(es_vh_module_get_function(&A->f3, A->m_file, "es_swapsum"));
    CK(es_vh_func_set_attribute(A->f1, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 4096));
    CK(es_vh_library_load(&A->lib, es_swapsum_fatbin, 0, 0, NULL, NULL, 0, NULL, NULL));
    CK(es_vh_library_get_kernel(&A->kern, A->lib, "es_swapsum"));
    CK(es_vh_kernel_get_function(&A->kf, A->kern));

    void *real = NULL;
    assert_int_equal(fake_create(&real, &A->rec, 0), 0);
    assert_int_equal(es_vh_foreign_new(&A->foreign, real, &fake_ops, &A->rec), 0);
    /* memory and a reference result */
    CK(es_mem_alloc(0, 2 * ES_SWAPSUM_CHUNK, ES_ALLOC_PLAIN, &A->buf));
    CK(es_mem_alloc(0, 64, ES_ALLOC_PLAIN, &A->out));
    ct_fill(A->buf, 2 * ES_SWAPSUM_CHUNK, 42);
    run_kernel(A->f1, A->s_plain, A->buf, A->out, 2, A->want);
}

/* The whole move of vdev 0 to device dev, as the orchestrator will do it. */
static void move_to(int dev)
{
    char msg[256] = "";
    assert_int_equal(es_vh_drain(0, msg, sizeof(msg)), 0);
    CK(cuCtxSetCurrent(es_vh_real(es_vh_primary(0))));
    assert_int_equal(es_swap_out(0, NULL, msg, sizeof(msg)), 0);
    assert_int_equal(es_vh_teardown(0, msg, sizeof(msg)), 0);
    assert_int_equal(es_vh_recreate(0, dev, msg, sizeof(msg)), 0);
    CK(cuCtxSetCurrent(es_vh_real(es_vh_primary(0))));
    assert_int_equal(es_swap_in(0, dev, NULL, msg, sizeof(msg)), 0);
    CK(cuCtxSetCurrent(es_vh_real(es_vh_current())));
}

static void test_move_keeps_handles(void **state)
{
    (void)state;
    static app_t A; /* static: the foreign record outlives the test */
    app_make(&A);
    void *old_stream = es_vh_real(A.s_plain);
    void *old_prim = es_vh_real(A.prim);
    CUcontext app_values[] = { A.prim };
    (void)app_values;
    char msg[256] = "";
    assert_int_equal(es_vh_drain(0, msg, sizeof(msg)), 0);
    assert_int_equal(es_swap_out(0, NULL, msg, sizeof(msg)), 0);
    assert_int_equal(es_vh_teardown(0, msg, sizeof(msg)), 0);
    /* torn down: no real object behind any handle, device 0 released */
    assert_null(es_vh_real(A.s_plain));
    assert_null(es_vh_real(A.f1));
    assert_null(es_vh_real(A.m_file));
    assert_null(es_vh_real(A.prim));
    assert_int_equal(A.rec.destroyed, 1);
    assert_int_equal(es_vh_device(0), -1);
    unsigned fl;
    int active = 1;
    CK(cuDevicePrimaryCtxGetState(0, &fl, &active));
    assert_false(active);
    assert_null(es_vh_from_real(old_stream));
    /* on device 1 (an h100) */
    assert_int_equal(es_vh_recreate(0, 1, msg, sizeof(msg)), 0);
    CK(cuCtxSetCurrent(es_vh_real(A.prim)));
    assert_int_equal(es_swap_in(0, 1, NULL, msg, sizeof(msg)), 0);
    assert_int_equal(es_vh_device(0), 1);
    assert_non_null(es_vh_real(A.prim));
    CUdevice d = -1;
    CK(cuCtxGetDevice(&d));
    assert_int_equal(d, 1);
    (void)old_prim;
    /* every setting came along */
    int least, greatest, prio = 99;
    CK(cuCtxGetStreamPriorityRange(&least, &greatest));
    CK(cuStreamGetPriority(es_vh_stream(A.s_prio), &prio));
    assert_int_equal(prio, greatest);
    unsigned sf = 99;
    CK(cuStreamGetFlags(es_vh_stream(A.s_plain), &sf));
    assert_int_equal(sf, CU_STREAM_NON_BLOCKING);
    int smem = 0;
    CK(cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                          es_vh_real(A.f1)));
    assert_int_equal(smem, 4096);
    CK(cuEventQuery(es_vh_real(A.ev)));
    assert_int_equal(A.rec.created, 2);
    assert_int_equal(A.rec.last_dev, 1);
    /* the reverse map knows the new real handles */
    assert_ptr_equal(es_vh_from_real(es_vh_real(A.s_plain)), A.s_plain);
    assert_ptr_equal(es_vh_from_real(es_vh_real(A.prim)), A.prim);
    /* the same kernel through the same handles, on the new device: the
     * same result, from every module (the copied image was freed) */
    CUfunction fs[] = { A.f1, A.f2, A.f3, A.kf };
    for (int i = 0; i < 4; i++) {
        uint64_t got[2] = { 0, 0 };
        run_kernel(fs[i], i % 2 ? A.s_prio : A.s_plain, A.buf, A.out, 2, got);
        assert_memory_equal(got, A.want, sizeof(got));
    }
    /* and back */
    move_to(0);
    CK(cuCtxGetDevice(&d));
    assert_int_equal(d, 0);
    uint64_t got[2];
    run_kernel(A.kf, A.s_plain, A.buf, A.out, 2, got);
    assert_memory_equal(got, A.want, sizeof(got));
}

static CUcontext thread_saw;
static int thread_rc[3];
static void *other_thread(void *arg)
{
    CUcontext prim = arg;
    thread_rc[0] = es_vh_set_current(prim);
    unsigned gen = es_vh_generation();
    __atomic_store_n(&thread_rc[2], 1, __ATOMIC_RELEASE);
    /* wait for the move done by the main thread */
    while (es_vh_generation() == gen || es_vh_device(0) < 0)
        usleep(1000);
    usleep(20000);
    /* the driver still has the destroyed real context for this thread */
    thread_rc[1] = es_vh_rebind();
    cuCtxGetCurrent(&thread_saw);
    return NULL;
}

static void test_other_threads_rebind(void **state)
{
    (void)state;
    static app_t A; /* static: the foreign record outlives the test */
    app_make(&A);
    pthread_t t;
    pthread_create(&t, NULL, other_thread, A.prim);
    while (!__atomic_load_n(&thread_rc[2], __ATOMIC_ACQUIRE))
        usleep(1000);
    move_to(1);
    pthread_join(t, NULL);
    assert_int_equal(thread_rc[0], CUDA_SUCCESS);
    assert_int_equal(thread_rc[1], 0);
    assert_ptr_equal(thread_saw, es_vh_real(A.prim));
    assert_ptr_equal(es_vh_current(), A.prim);
}

static void test_created_context_moves(void **state)
{
    (void)state;
    CUcontext prim, c;
    CK(es_vh_primary_retain(&prim, 0, 0));
    CK(es_vh_set_current(prim));
    CK(es_vh_ctx_create(&c, 0, 0, 0));
    assert_ptr_equal(es_vh_current(), c); /* created contexts are pushed */
    CK(es_vh_ctx_set_limit(CU_LIMIT_STACK_SIZE, 4096));
    CUstream s;
    CK(es_vh_stream_create(&s, 0, 0, 0));
    CUcontext pushed = NULL;
    CK(es_vh_pop_current(&pushed));
    assert_ptr_equal(pushed, c);
    CK(es_vh_push_current(c));
    move_to(1);
    assert_ptr_equal(es_vh_current(), c);
    CUcontext real;
    CK(cuCtxGetCurrent(&real));
    assert_ptr_equal(real, es_vh_real(c));
    size_t v = 0;
    CK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
    assert_int_equal(v, 4096);
    CUcontext sctx = NULL;
    CK(cuStreamGetCtx(es_vh_stream(s), &sctx));
    assert_ptr_equal(es_vh_from_real(sctx), c);
    /* destroying the context takes its stream along */
    CK(es_vh_ctx_destroy(c));
    assert_int_equal(es_vh_count(0, ES_VK_STREAM), 0);
    assert_int_equal(es_vh_ctx_destroy(c), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(es_vh_ctx_destroy(prim), CUDA_ERROR_INVALID_CONTEXT);
}

static void test_failed_recreate_leaves_nothing(void **state)
{
    (void)state;
    static app_t A; /* static: the foreign record outlives the test */
    app_make(&A);
    A.rec.fail_on_dev = 2;
    char msg[256] = "";
    assert_int_equal(es_vh_drain(0, msg, sizeof(msg)), 0);
    assert_int_equal(es_swap_out(0, NULL, msg, sizeof(msg)), 0);
    assert_int_equal(es_vh_teardown(0, msg, sizeof(msg)), 0);
    assert_int_equal(es_vh_recreate(0, 2, msg, sizeof(msg)), -EIO);
    assert_non_null(strstr(msg, "foreign object"));
    /* nothing re-created stays: the EST is still wholly torn down */
    assert_null(es_vh_real(A.prim));
    assert_null(es_vh_real(A.s_plain));
    assert_null(es_vh_real(A.m_embedded));
    assert_int_equal(es_vh_device(0), -1);
    unsigned fl;
    int active = 1;
    CK(cuDevicePrimaryCtxGetState(2, &fl, &active));
    assert_false(active);
    /* elsewhere it works */
    assert_int_equal(es_vh_recreate(0, 0, msg, sizeof(msg)), 0);
    CK(cuCtxSetCurrent(es_vh_real(A.prim)));
    assert_int_equal(es_swap_in(0, 0, NULL, msg, sizeof(msg)), 0);
    uint64_t got[2];
    run_kernel(A.f2, A.s_plain, A.buf, A.out, 2, got);
    assert_memory_equal(got, A.want, sizeof(got));
}

static void test_destroy_and_bad_handles(void **state)
{
    (void)state;
    static app_t A; /* static: the foreign record outlives the test */
    app_make(&A);
    size_t nf = es_vh_count(0, ES_VK_FUNC);
    CK(es_vh_module_unload(A.m_embedded)); /* its function goes with it */
    assert_int_equal(es_vh_count(0, ES_VK_FUNC), nf - 1);
    assert_int_equal(es_vh_module_unload(A.m_embedded), CUDA_ERROR_INVALID_HANDLE);
    CK(es_vh_stream_destroy(A.s_prio));
    assert_int_equal(es_vh_stream_destroy(A.s_prio), CUDA_ERROR_INVALID_HANDLE);
    /* A stale stream reaches the driver as an invalid handle: never the
     * NULL (default) stream, never a read of freed memory. */
    CUstream stale = es_vh_stream(A.s_prio);
    assert_ptr_not_equal(stale, NULL);
    assert_int_equal(cuStreamSynchronize(stale), CUDA_ERROR_INVALID_HANDLE);
    int small = 0;
    assert_int_equal(cuStreamSynchronize(es_vh_stream((CUstream)&small)),
                     CUDA_ERROR_INVALID_HANDLE);
    CK(es_vh_event_destroy(A.ev));
    assert_int_equal(es_vh_event_destroy((CUevent)0x42), CUDA_ERROR_INVALID_HANDLE);
    CUfunction f;
    assert_int_equal(es_vh_module_get_function(&f, (CUmodule)&A, "x"), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(es_vh_module_get_function(&f, A.m_file, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
    assert_false(es_vh_valid(A.s_prio, ES_VK_STREAM));
    assert_true(es_vh_valid(A.s_plain, ES_VK_STREAM));
    assert_false(es_vh_valid(A.s_plain, ES_VK_EVENT));
    void *rec = NULL;
    assert_int_equal(es_vh_foreign_free(A.foreign, &rec), 0);
    assert_ptr_equal(rec, &A.rec);
    assert_int_equal(A.rec.destroyed, 1);
    CK(es_vh_library_unload(A.lib));
    assert_int_equal(es_vh_count(0, ES_VK_KERNEL), 0);
}

static void test_library_module(void **state)
{
    (void)state;
    static app_t A; /* static: the foreign record outlives the test */
    app_make(&A);
    CUmodule lm, lm2;
    CUresult r = es_vh_library_get_module(&lm, A.lib);
    if (r == CUDA_ERROR_NOT_SUPPORTED)
        es_test_skip("the driver does not support cuLibraryGetModule (simcuda's returns "
                     "CUDA_ERROR_NOT_SUPPORTED: sim/driver/module.c)");
    CK(r);
    CK(es_vh_library_get_module(&lm2, A.lib));
    assert_ptr_equal(lm2, lm);
    assert_int_equal(es_vh_module_unload(lm), CUDA_ERROR_INVALID_HANDLE);
    CUfunction lf;
    CK(es_vh_module_get_function(&lf, lm, "es_swapsum"));
    move_to(1);
    uint64_t got[2];
    run_kernel(lf, A.s_plain, A.buf, A.out, 2, got);
    assert_memory_equal(got, A.want, sizeof(got));
}

int main(void)
{
    setenv("SIMCUDA_DEVICES", "a100:2G,h100:2G,t4:1G", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    ct_setup("vhandle");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_translation),
        cmocka_unit_test_teardown(test_primary_is_one_value, teardown),
        cmocka_unit_test_teardown(test_move_keeps_handles, teardown),
        cmocka_unit_test_teardown(test_other_threads_rebind, teardown),
        cmocka_unit_test_teardown(test_created_context_moves, teardown),
        cmocka_unit_test_teardown(test_failed_recreate_leaves_nothing, teardown),
        cmocka_unit_test_teardown(test_destroy_and_bad_handles, teardown),
        cmocka_unit_test_teardown(test_library_module, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
