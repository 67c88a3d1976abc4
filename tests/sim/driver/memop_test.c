/* simcuda stream memory operations (sim/driver/memop.c): cuStreamWaitValue32/64,
 * cuStreamWriteValue32/64 and cuStreamBatchMemOp: the device attributes,
 * argument checks and their error codes, each wait condition, stream order
 * with copies and memsets, a wait that never comes true (the enqueuing
 * thread and other streams go on), a wait released by another process
 * writing host-mapped shared memory, and capture into a graph.
 *
 * Runs with isolation (device memory is not host memory). */
#include "tests/harness.h"
#include "tests/sim/driver/common.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A pinned host word (its device pointer is its address). */
typedef struct {
    volatile uint64_t *h;
    CUdeviceptr d;
} word_t;

static word_t pinned_words(size_t n)
{
    word_t w;
    void *p;
    CK(cuMemHostAlloc(&p, n * 8, CU_MEMHOSTALLOC_DEVICEMAP));
    memset(p, 0, n * 8);
    w.h = p;
    CK(cuMemHostGetDevicePointer(&w.d, p, 0));
    return w;
}

static void test_attributes(void **state)
{
    (void)state;
    int v = -1;
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0));
    assert_int_equal(v, 1);
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 0));
    assert_int_equal(v, 1);
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, 0));
    assert_int_equal(v, 0);
    /* cuGetProcAddress answers the v2 entry points */
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CK(cuGetProcAddress("cuStreamBatchMemOp", &fn, 12000, 0, &st));
    assert_int_equal(st, CU_GET_PROC_ADDRESS_SUCCESS);
    assert_ptr_equal(fn, (void *)cuStreamBatchMemOp);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    word_t w = pinned_words(2);
    CUdeviceptr dev;
    CK(cuMemAlloc(&dev, 64));
    static uint64_t pageable[2];
    const CUresult INV = CUDA_ERROR_INVALID_VALUE;
    /* not a device address */
    assert_int_equal(cuStreamWriteValue32(s, (CUdeviceptr)(uintptr_t)pageable, 1, 0), INV);
    assert_int_equal(cuStreamWaitValue32(s, 0, 1, 0), INV);
    /* past the end of an allocation */
    assert_int_equal(cuStreamWriteValue64(s, dev + 64, 1, 0), INV);
    /* misaligned */
    assert_int_equal(cuStreamWriteValue32(s, w.d + 2, 1, 0), INV);
    assert_int_equal(cuStreamWaitValue64(s, w.d + 4, 1, 0), INV);
    assert_int_equal(cuStreamWriteValue64(s, dev + 4, 1, 0), INV);
    /* flags */
    assert_int_equal(cuStreamWaitValue32(s, w.d, 1, 4), INV);
    assert_int_equal(cuStreamWaitValue32(s, w.d, 1, CU_STREAM_WAIT_VALUE_FLUSH),
                     CUDA_ERROR_NOT_SUPPORTED);
    assert_int_equal(cuStreamWriteValue32(s, w.d, 1, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER), INV);
    assert_int_equal(cuStreamWaitValue32((CUstream)&w, w.d, 1, 0), CUDA_ERROR_INVALID_HANDLE);
    /* batches: limits, flags, and a bad entry enqueues nothing */
    CUstreamBatchMemOpParams p[256];
    memset(p, 0, sizeof(p));
    for (int i = 0; i < 256; i++) {
        p[i].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
        p[i].writeValue.address = w.d;
        p[i].writeValue.value = 7;
    }
    assert_int_equal(cuStreamBatchMemOp(s, 256, p, 0), INV);
    assert_int_equal(cuStreamBatchMemOp(s, 2, p, 1), INV);
    assert_int_equal(cuStreamBatchMemOp(s, 2, NULL, 0), INV);
    p[1].writeValue.address = w.d + 1;
    assert_int_equal(cuStreamBatchMemOp(s, 2, p, 0), INV);
    p[1].operation = CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES;
    p[1].flushRemoteWrites.flags = 0;
    assert_int_equal(cuStreamBatchMemOp(s, 2, p, 0), CUDA_ERROR_NOT_SUPPORTED);
    p[1].operation = CU_STREAM_MEM_OP_BARRIER;
    p[1].memoryBarrier.flags = 5;
    assert_int_equal(cuStreamBatchMemOp(s, 2, p, 0), INV);
    p[1].operation = 99;
    assert_int_equal(cuStreamBatchMemOp(s, 2, p, 0), INV);
    CK(cuStreamSynchronize(s));
    assert_int_equal(w.h[0], 0); /* nothing of the refused batches ran */
    CK(cuStreamBatchMemOp(s, 0, NULL, 0));
    CK(cuStreamDestroy(s));
    CK(cuMemFree(dev));
    CK(cuMemFreeHost((void *)w.h));
}

typedef struct {
    int bits64;
    unsigned flags;
    uint64_t value;
    uint64_t no, yes; /* a word value that keeps the wait, one that releases it */
} cond_case_t;

/* Each condition: the stream stays waiting while the word holds `no`, and
 * goes on (a write behind the wait lands) once it holds `yes`. */
static void test_conditions(void **state)
{
    (void)state;
    const cond_case_t cases[] = {
        {0, CU_STREAM_WAIT_VALUE_GEQ, 10, 9, 10},
        {0, CU_STREAM_WAIT_VALUE_GEQ, 0xfffffff0u, 0xffffffe0u, 0x5}, /* cyclic */
        {0, CU_STREAM_WAIT_VALUE_GEQ, 0x10, 0x80000010u, 0x7fffffffu},
        {1, CU_STREAM_WAIT_VALUE_GEQ, 1ull << 40, (1ull << 40) - 1, 1ull << 41},
        {1, CU_STREAM_WAIT_VALUE_GEQ, UINT64_MAX - 1, UINT64_MAX - 5, 3}, /* cyclic */
        {0, CU_STREAM_WAIT_VALUE_EQ, 42, 43, 42},
        {1, CU_STREAM_WAIT_VALUE_EQ, 1ull << 33, 1, 1ull << 33}, /* high half counts */
        {0, CU_STREAM_WAIT_VALUE_AND, 0x6, 0x9, 0x4},
        {1, CU_STREAM_WAIT_VALUE_AND, 1ull << 50, 0xffffffffu, 1ull << 50},
        {0, CU_STREAM_WAIT_VALUE_NOR, 0x0f, 0xfffffff0u, 0x7ffffff0u},
        {1, CU_STREAM_WAIT_VALUE_NOR, 0, UINT64_MAX, UINT64_MAX >> 1},
    };
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    word_t w = pinned_words(2);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const cond_case_t *c = &cases[i];
        __atomic_store_n(&w.h[0], c->no, __ATOMIC_SEQ_CST);
        w.h[1] = 0;
        if (c->bits64)
            CK(cuStreamWaitValue64(s, w.d, c->value, c->flags));
        else
            CK(cuStreamWaitValue32(s, w.d, (uint32_t)c->value, c->flags));
        CK(cuStreamWriteValue32(s, w.d + 8, (uint32_t)(i + 1), 0));
        nap_ms(20);
        assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
        assert_int_equal(w.h[1], 0);
        __atomic_store_n(&w.h[0], c->yes, __ATOMIC_SEQ_CST);
        CK(cuStreamSynchronize(s));
        assert_int_equal(w.h[1], i + 1);
    }
    CK(cuStreamDestroy(s));
    CK(cuMemFreeHost((void *)w.h));
}

static void count_fn(void *arg)
{
    __atomic_fetch_add((int *)arg, 1, __ATOMIC_SEQ_CST);
}

/* A wait that never comes true (until the test releases it) blocks its
 * stream only: the call returns, the stream's query says NOT_READY, work
 * behind it does not run, another stream's host function and copies run. */
static void test_wait_blocks_stream_only(void **state)
{
    (void)state;
    CUstream s, t;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    word_t w = pinned_words(1);
    CUdeviceptr dev;
    CK(cuMemAlloc(&dev, 4096));
    CK(cuMemsetD32(dev, 0, 1024));
    CK(cuStreamWaitValue32(s, w.d, 1, CU_STREAM_WAIT_VALUE_EQ));
    CK(cuMemsetD32Async(dev, 0x11111111u, 1024, s));
    int ran = 0;
    CK(cuLaunchHostFunc(t, count_fn, &ran));
    unsigned v = 0xdead;
    CK(cuMemcpyDtoHAsync(&v, dev, 4, t));
    CK(cuStreamSynchronize(t));
    assert_int_equal(ran, 1);
    assert_int_equal(v, 0);
    nap_ms(20);
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    /* released by a plain host store */
    __atomic_store_n(&w.h[0], 1, __ATOMIC_SEQ_CST);
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(&v, dev + 4092, 4));
    assert_int_equal(v, 0x11111111u);
    CK(cuStreamDestroy(s));
    CK(cuStreamDestroy(t));
    CK(cuMemFree(dev));
    CK(cuMemFreeHost((void *)w.h));
}

/* Stream order between two streams through device memory: B waits for the
 * flag A writes after its memset, then copies what A wrote. */
static void test_order_device_memory(void **state)
{
    (void)state;
    CUstream a, b;
    CK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    const size_t n = 1 << 20;
    CUdeviceptr buf, flag;
    CK(cuMemAlloc(&buf, n * 4));
    CK(cuMemAlloc(&flag, 8));
    CK(cuMemsetD32(flag, 0, 2));
    unsigned *out; /* pinned: an asynchronous copy to pageable memory would wait */
    CK(cuMemAllocHost((void **)&out, n * 4));
    for (unsigned round = 1; round <= 3; round++) {
        CK(cuStreamWaitValue64(b, flag, round, CU_STREAM_WAIT_VALUE_GEQ));
        CK(cuMemcpyDtoHAsync(out, buf, n * 4, b));
        nap_ms(5);
        CK(cuMemsetD32Async(buf, 0x01010101u * round, n, a));
        CK(cuStreamWriteValue64(a, flag, round, 0));
        CK(cuStreamSynchronize(b));
        assert_int_equal(out[0], 0x01010101u * round);
        assert_int_equal(out[n - 1], 0x01010101u * round);
    }
    unsigned v[2];
    CK(cuMemcpyDtoH(v, flag, 8));
    assert_int_equal(v[0], 3);
    assert_int_equal(v[1], 0);
    /* a 32-bit write changes 4 bytes only */
    CK(cuMemsetD32(flag, 0xffffffffu, 2));
    CK(cuStreamWriteValue32(a, flag + 4, 5, 0));
    CK(cuStreamSynchronize(a));
    CK(cuMemcpyDtoH(v, flag, 8));
    assert_int_equal(v[0], 0xffffffffu);
    assert_int_equal(v[1], 5);
    CK(cuMemFreeHost(out));
    CK(cuStreamDestroy(a));
    CK(cuStreamDestroy(b));
    CK(cuMemFree(buf));
    CK(cuMemFree(flag));
}

/* A batch runs in array order: two writes, a barrier, a wait on the first
 * word, a write behind it. */
static void test_batch(void **state)
{
    (void)state;
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    word_t w = pinned_words(3);
    CUstreamBatchMemOpParams p[5];
    memset(p, 0, sizeof(p));
    p[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    p[0].writeValue.address = w.d;
    p[0].writeValue.value64 = 1ull << 36;
    p[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    p[1].writeValue.address = w.d + 8;
    p[1].writeValue.value = 9;
    p[2].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    p[2].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_SYS;
    p[3].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
    p[3].waitValue.address = w.d + 16;
    p[3].waitValue.value64 = 2;
    p[3].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
    p[4].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    p[4].writeValue.address = w.d + 12;
    p[4].writeValue.value = 4;
    CK(cuStreamBatchMemOp(s, 5, p, 0));
    nap_ms(20);
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    assert_int_equal(w.h[0], 1ull << 36);
    assert_int_equal(w.h[1], 9);
    __atomic_store_n(&w.h[2], 2, __ATOMIC_SEQ_CST);
    CK(cuStreamSynchronize(s));
    assert_int_equal(w.h[1], 9 | (4ull << 32));
    CK(cuStreamDestroy(s));
    CK(cuMemFreeHost((void *)w.h));
}

/* Captured operations become graph nodes and run at every launch. */
static void test_capture(void **state)
{
    (void)state;
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    word_t w = pinned_words(2);
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuStreamWaitValue32(s, w.d, 1, CU_STREAM_WAIT_VALUE_GEQ));
    CK(cuStreamWriteValue32(s, w.d + 8, 77, 0));
    CUgraph g;
    CK(cuStreamEndCapture(s, &g));
    assert_int_equal(w.h[1], 0); /* captured, not run */
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    for (int i = 0; i < 2; i++) {
        w.h[0] = w.h[1] = 0;
        CK(cuGraphLaunch(x, s));
        nap_ms(10);
        assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
        assert_int_equal(w.h[1], 0);
        __atomic_store_n(&w.h[0], 1, __ATOMIC_SEQ_CST);
        CK(cuStreamSynchronize(s));
        assert_int_equal(w.h[1], 77);
    }
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));
    CK(cuStreamDestroy(s));
    CK(cuMemFreeHost((void *)w.h));
}

/* ---- two processes: shared memory registered on each side ---------------------------- */
static volatile uint32_t *g_shared; /* [0] parent -> child, [1] child -> parent */

static int child_cross(void *arg)
{
    (void)arg;
    st_primary(0);
    CUdeviceptr d;
    if (cuMemHostRegister((void *)g_shared, 4096, CU_MEMHOSTREGISTER_DEVICEMAP) != CUDA_SUCCESS ||
        cuMemHostGetDevicePointer(&d, (void *)g_shared, 0) != CUDA_SUCCESS)
        return 10;
    CUstream s;
    if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
        return 11;
    /* wait for the parent's stream to write 1, then answer 2 */
    if (cuStreamWaitValue32(s, d, 1, CU_STREAM_WAIT_VALUE_EQ) != CUDA_SUCCESS ||
        cuStreamWriteValue32(s, d + 4, 2, 0) != CUDA_SUCCESS)
        return 12;
    if (cuStreamSynchronize(s) != CUDA_SUCCESS)
        return 13;
    return 0;
}

static void test_cross_process(void **state)
{
    (void)state;
    int fd = memfd_create("memop-test", 0);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 4096), 0);
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(m != MAP_FAILED);
    close(fd);
    g_shared = m;
    g_shared[0] = g_shared[1] = 0;
    CK(cuMemHostRegister(m, 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
    CUdeviceptr d;
    CK(cuMemHostGetDevicePointer(&d, m, 0));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int pid = st_fork(child_cross, NULL);
    /* the parent's stream waits for the child's answer; its write releases
     * the child */
    CK(cuStreamWaitValue32(s, d + 4, 2, CU_STREAM_WAIT_VALUE_EQ));
    CK(cuStreamWriteValue32(s, d + 4, 3, 0));
    nap_ms(20);
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CUstream t;
    CK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    CK(cuStreamWriteValue32(t, d, 1, 0));
    CK(cuStreamSynchronize(t));
    CK(cuStreamSynchronize(s));
    assert_int_equal(g_shared[1], 3);
    assert_int_equal(st_wait(pid), 0);
    CK(cuStreamDestroy(s));
    CK(cuStreamDestroy(t));
    CK(cuMemHostUnregister(m));
    munmap(m, 4096);
}

int main(void)
{
    st_private_shm("memop");
    setenv("SIMCUDA_DEVICES", "a100:1G", 1);
    setenv("SIMCUDA_ISOLATION", "1", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    st_primary(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attributes),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_conditions),
        cmocka_unit_test(test_wait_blocks_stream_only),
        cmocka_unit_test(test_order_device_memory),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_capture),
        cmocka_unit_test(test_cross_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
