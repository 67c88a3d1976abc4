/* Tests of the device-memory registry (move/memreg.h) on simcuda's real
 * driver: VMM-backed cuMemAlloc memory (slabs and own reservations), the
 * stand-in handles of the application's VMM allocations, stream-ordered
 * frees, peers, pinned host memory that outlives its context, the span
 * index of the copy wrappers' range check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "move/drv.h"
#include "move/memreg.h"
#include "tests/move/movetest.h"
#include "tests/harness.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#define MiB (1024UL * 1024)

static int setup(void **state)
{
    (void)state;
    ct_primary(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    es_memreg_reset();
    return 0;
}

static void test_small_share_a_slab(void **state)
{
    (void)state;
    size_t g = es_memreg_granularity();
    assert_true(g >= 4096 && (g & (g - 1)) == 0);
    CUdeviceptr a, b, c;
    CK(es_mem_alloc(0, 100, ES_ALLOC_PLAIN, &a));
    CK(es_mem_alloc(0, 3000, ES_ALLOC_PLAIN, &b));
    CK(es_mem_alloc(0, 1, ES_ALLOC_PLAIN, &c));
    assert_int_equal(a % ES_MEMREG_UNIT, 0);
    assert_int_equal(b % ES_MEMREG_UNIT, 0);
    /* one slab: three allocations, one granule of physical memory */
    assert_int_equal(es_memreg_resident_bytes(0), g);
    assert_true(b >= a + 100 && c >= b + 3000 && c < a + g);
    ct_fill(a, 100, 1);
    ct_fill(b, 3000, 2);
    ct_fill(c, 1, 3);
    assert_true(ct_check(a, 100, 1));
    assert_true(ct_check(b, 3000, 2));
    CUdeviceptr base;
    size_t size;
    int vdev, kind;
    assert_int_equal(es_mem_find(b + 2999, &base, &size, &vdev, &kind), 0);
    assert_true(base == b && size == 3000 && vdev == 0 && kind == ES_ALLOC_PLAIN);
    /* b + 3000 lies in b's last unit but past its size */
    assert_int_equal(es_mem_find(b + 3000, &base, NULL, NULL, NULL), -ENOENT);
    /* a freed unit is reused */
    CK(es_mem_free(b));
    CUdeviceptr d;
    CK(es_mem_alloc(0, 2048, ES_ALLOC_PITCH, &d));
    assert_int_equal(d, b);
    CK(es_mem_free(a));
    CK(es_mem_free(c));
    CK(es_mem_free(d));
    assert_int_equal(es_memreg_resident_bytes(0), 0);
}

static void test_large_own_reservation(void **state)
{
    (void)state;
    size_t g = es_memreg_granularity();
    size_t used0 = ct_used(0);
    CUdeviceptr p;
    CK(es_mem_alloc(0, 3 * MiB + 5, ES_ALLOC_PLAIN, &p));
    assert_int_equal(p % g, 0);
    size_t span = (3 * MiB + 5 + g - 1) / g * g;
    assert_int_equal(es_memreg_resident_bytes(0), span);
    assert_int_equal(ct_used(0) - used0, span);
    ct_fill(p, 3 * MiB + 5, 7);
    assert_true(ct_check(p, 3 * MiB + 5, 7));
    /* the driver sees it as device memory of device 0 */
    int ord = -1;
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p + MiB));
    assert_int_equal(ord, 0);
    CUdeviceptr base;
    size_t size;
    assert_int_equal(es_mem_find(p + 3 * MiB, &base, &size, NULL, NULL), 0);
    assert_true(base == p && size == 3 * MiB + 5);
    CK(es_mem_free(p));
    assert_int_equal(ct_used(0), used0);
}

static void test_free_errors(void **state)
{
    (void)state;
    CUdeviceptr p, q;
    CK(es_mem_alloc(0, 4 * MiB, ES_ALLOC_PLAIN, &p));
    CK(es_mem_alloc(0, 64, ES_ALLOC_PLAIN, &q));
    assert_int_equal(es_mem_free(p + 8), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(es_mem_free(0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(es_mem_free(12345), CUDA_ERROR_INVALID_VALUE);
    CK(es_mem_free(p));
    assert_int_equal(es_mem_free(p), CUDA_ERROR_INVALID_VALUE);
    CK(es_mem_free(q));
    assert_int_equal(es_mem_free(q), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr r;
    assert_int_equal(es_mem_alloc(0, 0, ES_ALLOC_PLAIN, &r), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(es_mem_alloc(-1, 8, ES_ALLOC_PLAIN, &r), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(es_mem_alloc(0, 8, ES_ALLOC_PLAIN, NULL), CUDA_ERROR_INVALID_VALUE);
    /* more than the device holds: the driver's out-of-memory, nothing kept */
    assert_int_equal(es_mem_alloc(0, (size_t)1 << 46, ES_ALLOC_PLAIN, &r),
                     CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(es_memreg_resident_bytes(0), 0);
}

/* A host function that holds its stream until released. */
static volatile int gate_open;
static void CUDA_CB gate_fn(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&gate_open, __ATOMIC_ACQUIRE))
        usleep(1000);
}

static void test_free_async_waits_for_stream(void **state)
{
    (void)state;
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p;
    CK(es_mem_alloc(0, 5 * MiB, ES_ALLOC_ASYNC, &p));
    gate_open = 0;
    CK(cuLaunchHostFunc(s, gate_fn, NULL));
    CK(es_mem_free_async(p, s));
    assert_int_equal(es_mem_free_async(p, s), CUDA_ERROR_INVALID_VALUE); /* twice */
    /* the stream has not got there: still allocated */
    assert_int_equal(es_mem_poll_frees(0), 1);
    assert_int_equal(es_mem_find(p, NULL, NULL, NULL, NULL), 0);
    __atomic_store_n(&gate_open, 1, __ATOMIC_RELEASE);
    assert_int_equal(es_mem_poll_frees(1), 0);
    assert_int_equal(es_mem_find(p, NULL, NULL, NULL, NULL), -ENOENT);
    assert_int_equal(es_memreg_resident_bytes(0), 0);
    CK(cuStreamDestroy(s));
}

static CUmemAllocationProp app_prop(int dev, int exportable)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    if (exportable)
        p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

static void test_app_vmm_standin(void **state)
{
    (void)state;
    size_t g = es_memreg_granularity();
    CUmemAllocationProp prop = app_prop(0, 0);
    CUmemGenericAllocationHandle h;
    CK(es_vmm_create(&h, 2 * g, &prop, 0));
    es_phys_t *ph = es_vmm_lookup(h);
    assert_non_null(ph);
    /* the application's handle is the registry's object, the real one inside */
    assert_int_equal((uintptr_t)ph, (uintptr_t)h);
    assert_true(ph->real != 0 && ph->real != h);
    assert_int_equal(*(CUmemGenericAllocationHandle *)(uintptr_t)h, ph->real);
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, 4 * g, 0, 0, 0));
    CK(es_vmm_map(va + g, 2 * g, 0, h, 0));
    CUmemAccessDesc d = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CK(es_vmm_set_access(va + g, 2 * g, &d, 1));
    assert_int_equal(ph->nmaps, 1);
    assert_int_equal(ph->maps[0].access[0], CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    ct_fill(va + g, 2 * g, 11);
    assert_true(ct_check(va + g, 2 * g, 11));
    /* retain from an address inside: the same stand-in */
    CUmemGenericAllocationHandle h2 = 0;
    CK(es_vmm_retain(&h2, (void *)(uintptr_t)(va + g + 100)));
    assert_int_equal(h2, h);
    CUmemAllocationProp got;
    CK(es_vmm_props(&got, h));
    assert_int_equal(got.location.id, 0);
    /* released twice while mapped: the memory stays until unmapped */
    CK(es_vmm_release(h));
    CK(es_vmm_release(h));
    assert_null(es_vmm_lookup(h));
    assert_int_equal(es_vmm_release(h), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(es_memreg_resident_bytes(0), 2 * g);
    assert_true(ct_check(va + g, 2 * g, 11));
    CK(es_vmm_unmap(va + g, 2 * g));
    assert_int_equal(es_memreg_resident_bytes(0), 0);
    CK(cuMemAddressFree(va, 4 * g));
}

/* The footprint (what the controller places an EST by) counts the
 * application's objects, and not those made while the calling thread had
 * them uncounted (the collectives' staging): neither while they live nor
 * when they go. */
static void test_footprint_uncounted(void **state)
{
    (void)state;
    size_t g = es_memreg_granularity();
    CUmemAllocationProp prop = app_prop(0, 0);
    CUmemGenericAllocationHandle app, own;
    assert_int_equal(es_memreg_footprint(), 0);
    CK(es_vmm_create(&app, 2 * g, &prop, 0));
    assert_int_equal(es_memreg_footprint(), 2 * g);
    es_memreg_uncounted(1);
    CK(es_vmm_create(&own, 3 * g, &prop, 0));
    es_memreg_uncounted(0);
    assert_int_equal(es_memreg_footprint(), 2 * g);
    assert_int_equal(es_memreg_resident_bytes(0), 5 * g);
    CK(es_vmm_release(own));
    assert_int_equal(es_memreg_footprint(), 2 * g);
    /* the marker ended with the off call: the next object counts */
    CK(es_vmm_create(&own, g, &prop, 0));
    assert_int_equal(es_memreg_footprint(), 3 * g);
    CK(es_vmm_release(own));
    CK(es_vmm_release(app));
    assert_int_equal(es_memreg_footprint(), 0);
}

static void test_app_vmm_bad_handles(void **state)
{
    (void)state;
    size_t g = es_memreg_granularity();
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, g, 0, 0, 0));
    /* values the registry never handed out: refused, never dereferenced */
    assert_int_equal(es_vmm_map(va, g, 0, 0x1234, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(es_vmm_release(0xdeadbeef000ULL), CUDA_ERROR_INVALID_VALUE);
    CUmemAllocationProp got;
    assert_int_equal(es_vmm_props(&got, 8), CUDA_ERROR_INVALID_VALUE);
    int fd;
    assert_int_equal(es_vmm_export(&fd, 16, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                     CUDA_ERROR_INVALID_VALUE);
    CUmemAllocationProp prop = app_prop(ES_MEMREG_MAX_VDEV, 0);
    CUmemGenericAllocationHandle h;
    assert_int_equal(es_vmm_create(&h, g, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemAddressFree(va, g));
}

static void test_shim_memory_is_not_the_apps_vmm(void **state)
{
    (void)state;
    size_t g = es_memreg_granularity();
    CUdeviceptr p;
    CK(es_mem_alloc(0, 2 * g, ES_ALLOC_PLAIN, &p));
    ct_fill(p, 2 * g, 5);
    /* as the driver refuses it on cuMemAlloc memory */
    assert_int_equal(es_vmm_unmap(p, 2 * g), CUDA_ERROR_INVALID_VALUE);
    CUmemAccessDesc d = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_NONE };
    assert_int_equal(es_vmm_set_access(p, 2 * g, &d, 1), CUDA_ERROR_INVALID_VALUE);
    CUmemGenericAllocationHandle h;
    assert_int_equal(es_vmm_retain(&h, (void *)(uintptr_t)p), CUDA_ERROR_INVALID_VALUE);
    assert_true(ct_check(p, 2 * g, 5));
    CK(es_mem_free(p));
}

static void test_export_import(void **state)
{
    (void)state;
    size_t g = es_memreg_granularity();
    CUmemAllocationProp prop = app_prop(0, 1);
    CUmemGenericAllocationHandle h, hi;
    CK(es_vmm_create(&h, g, &prop, 0));
    CUdeviceptr a, b;
    CK(cuMemAddressReserve(&a, g, 0, 0, 0));
    CK(cuMemAddressReserve(&b, g, 0, 0, 0));
    CK(es_vmm_map(a, g, 0, h, 0));
    CUmemAccessDesc d = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CK(es_vmm_set_access(a, g, &d, 1));
    ct_fill(a, g, 21);
    int fd = -1;
    CK(es_vmm_export(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    assert_true(fd >= 0);
    CK(es_vmm_import(&hi, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    close(fd); /* the registry keeps its own duplicate */
    es_phys_t *ph = es_vmm_lookup(hi);
    assert_non_null(ph);
    assert_int_equal(ph->owner, ES_OWN_IMPORT);
    assert_true(ph->fd >= 0);
    CK(es_vmm_map(b, g, 0, hi, 0));
    CK(es_vmm_set_access(b, g, &d, 1));
    assert_true(ct_check(b, g, 21));
    /* imported memory is the exporter's: not counted as this EST's */
    assert_int_equal(es_memreg_resident_bytes(0), g);
    CK(es_vmm_unmap(b, g));
    CK(es_vmm_release(hi));
    CK(es_vmm_unmap(a, g));
    CK(es_vmm_release(h));
    CK(cuMemAddressFree(a, g));
    CK(cuMemAddressFree(b, g));
}

static void test_peer_access(void **state)
{
    (void)state;
    int n = 0;
    CK(cuDeviceGetCount(&n));
    if (n < 2)
        es_test_skip("needs 2 GPUs, the machine has %d (SIMCUDA_DEVICES under simcuda)", n);
    size_t g = es_memreg_granularity();
    CUdeviceptr p;
    CK(es_mem_alloc(0, g, ES_ALLOC_PLAIN, &p));
    unsigned long long fl = 99;
    CUmemLocation l1 = { CU_MEM_LOCATION_TYPE_DEVICE, 1 };
    CK(cuMemGetAccess(&fl, &l1, p));
    assert_int_equal(fl, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    CK(es_memreg_peer_enable(0, 1));
    CK(cuMemGetAccess(&fl, &l1, p));
    assert_int_equal(fl, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    /* memory allocated later gets the peer too */
    CUdeviceptr q;
    CK(es_mem_alloc(0, 3 * g, ES_ALLOC_PLAIN, &q));
    CK(cuMemGetAccess(&fl, &l1, q));
    assert_int_equal(fl, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CK(es_memreg_peer_disable(0, 1));
    CK(cuMemGetAccess(&fl, &l1, q));
    assert_int_equal(fl, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    assert_int_equal(es_memreg_peer_enable(0, 0), CUDA_ERROR_INVALID_VALUE);
    CK(es_mem_free(p));
    CK(es_mem_free(q));
}

static void test_vdev_mapping(void **state)
{
    (void)state;
    int n = 0;
    CK(cuDeviceGetCount(&n));
    if (n < 2)
        es_test_skip("needs 2 GPUs, the machine has %d (SIMCUDA_DEVICES under simcuda)", n);
    /* vdev 3 lives on device 1 */
    assert_int_equal(es_memreg_set_device(3, 1), 0);
    CUdeviceptr p;
    CK(es_mem_alloc(3, 4 * MiB, ES_ALLOC_PLAIN, &p));
    int ord = -1;
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    assert_int_equal(ord, 1);
    assert_int_equal(es_memreg_resident_bytes(3), es_memreg_resident_bytes(-1));
    CK(es_mem_free(p));
    /* a parked vdev has no device to allocate on */
    assert_int_equal(es_memreg_set_device(3, -1), 0);
    assert_int_equal(es_mem_alloc(3, 64, ES_ALLOC_PLAIN, &p), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(es_memreg_set_device(3, n), -EINVAL);
}

static void test_host_memory_outlives_context(void **state)
{
    (void)state;
    void *p;
    CK(es_host_alloc(&p, 10000, CU_MEMHOSTALLOC_DEVICEMAP));
    unsigned fl = 0;
    assert_int_equal(es_host_flags((char *)p + 9999, &fl), 0);
    assert_int_equal(fl, CU_MEMHOSTALLOC_DEVICEMAP);
    assert_int_equal(es_host_flags((char *)p + 20000, &fl), -ENOENT);
    /* the driver knows it as pinned memory of every context */
    memset(p, 0x5a, 10000);
    CUdeviceptr d;
    CK(es_mem_alloc(0, 10000, ES_ALLOC_PLAIN, &d));
    CUstream s;
    CK(cuStreamCreate(&s, 0));
    CK(cuMemcpyHtoDAsync(d, p, 10000, s));
    CK(cuStreamSynchronize(s));
    CK(cuStreamDestroy(s));
    /* every context goes away: the memory and its content stay */
    CK(es_mem_free(d));
    assert_int_equal(es_host_unregister_all(), 0);
    ct_primary_drop(0);
    for (int i = 0; i < 10000; i++)
        if (((unsigned char *)p)[i] != 0x5a)
            fail_msg("byte %d changed", i);
    /* a new context: registered again, copies work */
    ct_primary(0);
    assert_int_equal(es_host_register_all(), 0);
    CK(es_mem_alloc(0, 10000, ES_ALLOC_PLAIN, &d));
    CK(cuMemcpyHtoD(d, p, 10000));
    memset(p, 0, 10000);
    CK(cuMemcpyDtoH(p, d, 10000));
    assert_int_equal(((unsigned char *)p)[1234], 0x5a);
    CK(es_mem_free(d));
    CK(es_host_free(p));
    assert_int_equal(es_host_free(p), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(es_host_alloc(&p, 10, 0x100), CUDA_ERROR_INVALID_VALUE);
}

/* The range check of the copy wrappers: a range that starts in an
 * allocation and runs past its requested end is refused; anything that
 * starts outside every allocation is the driver's to judge. */
static void test_range_past_the_end(void **state)
{
    (void)state;
    CUdeviceptr small, big;
    int host = 0;
    assert_int_equal(es_memreg_range_bad(0x1000, 1 << 20), 0); /* nothing allocated */
    CK(es_mem_alloc(0, 64, ES_ALLOC_PLAIN, &small));
    CK(es_mem_alloc(0, 3 * MiB, ES_ALLOC_PLAIN, &big));
    assert_int_equal(es_memreg_range_bad(small, 64), 0);
    assert_int_equal(es_memreg_range_bad(small, 65), 1);
    assert_int_equal(es_memreg_range_bad(small + 63, 1), 0);
    assert_int_equal(es_memreg_range_bad(small + 63, 2), 1);
    assert_int_equal(es_memreg_range_bad(small, 0), 0);
    assert_int_equal(es_memreg_range_bad(small + 64, 4096), 0); /* not in it */
    assert_int_equal(es_memreg_range_bad(big, 3 * MiB), 0);
    assert_int_equal(es_memreg_range_bad(big + MiB, 2 * MiB + 1), 1);
    assert_int_equal(es_memreg_range_bad(big, SIZE_MAX), 1);
    assert_int_equal(es_memreg_range_bad((CUdeviceptr)(uintptr_t)&host, 1 << 20), 0);
    CK(es_mem_free(small));
    assert_int_equal(es_memreg_range_bad(small, 65), 0); /* gone: the driver's call */
    assert_int_equal(es_memreg_range_bad(big, 3 * MiB + 1), 1);
    CK(es_mem_free(big));
    assert_int_equal(es_memreg_range_bad(big, 3 * MiB + 1), 0);
}

/* Readers without the lock while another thread allocates and frees (the
 * index grows and shifts): a stable allocation always answers right. */
typedef struct range_reader {
    CUdeviceptr p;
    size_t size;
    volatile int stop;
    long wrong, reads;
} range_reader_t;

static void *range_reader(void *arg)
{
    range_reader_t *r = arg;
    while (!r->stop) {
        if (es_memreg_range_bad(r->p, r->size) != 0 || es_memreg_range_bad(r->p, r->size + 1) != 1 ||
            es_memreg_range_bad(r->p + r->size - 8, 8) != 0)
            __atomic_add_fetch(&r->wrong, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&r->reads, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void test_range_readers_while_allocating(void **state)
{
    (void)state;
    range_reader_t r = { 0 };
    r.size = 40000;
    CK(es_mem_alloc(0, r.size, ES_ALLOC_PLAIN, &r.p));
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, range_reader, &r), 0);
    CUdeviceptr d[300];
    /* readers going first, then rounds until they read through some */
    while (__atomic_load_n(&r.reads, __ATOMIC_RELAXED) == 0)
        sched_yield();
    long before = __atomic_load_n(&r.reads, __ATOMIC_RELAXED);
    for (int round = 0; round < 4 || (round < 200 && __atomic_load_n(&r.reads, __ATOMIC_RELAXED) -
                                                         before < 1000); round++) {
        for (int i = 0; i < 300; i++) /* below and above r.p, in slabs */
            CK(es_mem_alloc(0, 512 + (size_t)(i % 7) * 1000, ES_ALLOC_PLAIN, &d[i]));
        for (int i = 0; i < 300; i += 2)
            CK(es_mem_free(d[i]));
        for (int i = 1; i < 300; i += 2)
            CK(es_mem_free(d[i]));
    }
    r.stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    assert_true(r.reads > 0);
    assert_int_equal(r.wrong, 0);
    CK(es_mem_free(r.p));
}

int main(void)
{
    ct_setup("memreg");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_small_share_a_slab, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_own_reservation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_async_waits_for_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_app_vmm_standin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_footprint_uncounted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_app_vmm_bad_handles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shim_memory_is_not_the_apps_vmm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_import, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peer_access, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vdev_mapping, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_memory_outlives_context, setup, teardown),
        cmocka_unit_test_setup_teardown(test_range_past_the_end, setup, teardown),
        cmocka_unit_test_setup_teardown(test_range_readers_while_allocating, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
