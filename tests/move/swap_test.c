/* Tests of the swap engine (move/swap.h) on simcuda's real driver: an
 * EST's memory (slab and large cuMemAlloc-family allocations, the
 * application's own VMM objects mapped or only held, imported memory)
 * swapped out to host memory and back in on the same or another device,
 * migrated device to device and through host memory, with addresses that
 * never change; checksums on the device skip unchanged chunks; failures
 * leave the EST whole where it was; a parked EST's content read and written
 * from the host; memory kept on the device while parked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "move/drv.h"
#include "move/memreg.h"
#include "move/swap.h"
#include "kernels/swapsum.h"
#include "tests/move/movetest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1024UL * 1024)

extern const unsigned char es_swapsum_fatbin[];

/* The EST of a test: what it allocated and the pattern seed of each. */
typedef struct est {
    CUdeviceptr small[3], big, vmm_va, held_va;
    size_t small_n[3], big_n;
    CUmemGenericAllocationHandle vmm, held;
    size_t g;
} est_t;

static CUcontext ctx0;

static int setup(void **state)
{
    (void)state;
    ctx0 = ct_primary(0);
    es_swap_opts_t o = { 4, 1, 8 * MiB, 0, 0, 0 };
    assert_int_equal(es_swap_set_opts(&o), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cuCtxSetCurrent(ctx0);
    es_memreg_reset();
    return 0;
}

static CUmemAllocationProp prop_of(int vdev)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = vdev;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

/* Allocates an EST on vdev 0 (its current device) and fills it. */
static void est_make(est_t *e, size_t big)
{
    memset(e, 0, sizeof(*e));
    e->g = es_memreg_granularity();
    size_t sn[3] = { 100, 70000, 512 };
    for (int i = 0; i < 3; i++) {
        e->small_n[i] = sn[i];
        CK(es_mem_alloc(0, sn[i], ES_ALLOC_PLAIN, &e->small[i]));
        ct_fill(e->small[i], sn[i], 100 + i);
    }
    e->big_n = big;
    CK(es_mem_alloc(0, big, ES_ALLOC_PLAIN, &e->big));
    ct_fill(e->big, big, 200);
    /* the application's own VMM: one mapped object, one only held */
    CUmemAllocationProp p = prop_of(0);
    CK(es_vmm_create(&e->vmm, 2 * e->g, &p, 0));
    CK(cuMemAddressReserve(&e->vmm_va, 2 * e->g, 0, 0, 0));
    CK(es_vmm_map(e->vmm_va, 2 * e->g, 0, e->vmm, 0));
    CUmemAccessDesc d = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CK(es_vmm_set_access(e->vmm_va, 2 * e->g, &d, 1));
    ct_fill(e->vmm_va, 2 * e->g, 300);
    CK(es_vmm_create(&e->held, e->g, &p, 0));
    CK(cuMemAddressReserve(&e->held_va, e->g, 0, 0, 0));
    CK(es_vmm_map(e->held_va, e->g, 0, e->held, 0));
    CK(es_vmm_set_access(e->held_va, e->g, &d, 1));
    ct_fill(e->held_va, e->g, 400);
    CK(es_vmm_unmap(e->held_va, e->g)); /* held, not mapped: content must survive */
}

/* Every allocation still has its content, at the same address. */
static void est_check(est_t *e, int dev)
{
    for (int i = 0; i < 3; i++)
        assert_true(ct_check(e->small[i], e->small_n[i], 100 + i));
    assert_true(ct_check(e->big, e->big_n, 200));
    assert_true(ct_check(e->vmm_va, 2 * e->g, 300));
    int ord = -1;
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, e->big));
    assert_int_equal(ord, dev);
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, e->vmm_va));
    assert_int_equal(ord, dev);
    /* the held object: map it again and look */
    CK(es_vmm_map(e->held_va, e->g, 0, e->held, 0));
    CUmemAccessDesc d = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CK(es_vmm_set_access(e->held_va, e->g, &d, 1));
    assert_true(ct_check(e->held_va, e->g, 400));
    CK(es_vmm_unmap(e->held_va, e->g));
}

static void test_checksum_kernel_matches_host(void **state)
{
    (void)state;
    size_t n = 4 * ES_SWAPSUM_CHUNK;
    CUdeviceptr p, out;
    CK(es_mem_alloc(0, n, ES_ALLOC_PLAIN, &p));
    CK(es_mem_alloc(0, 4 * sizeof(uint64_t), ES_ALLOC_PLAIN, &out));
    ct_fill(p, n, 5);
    CUmodule m;
    CUfunction f;
    CK(cuModuleLoadData(&m, es_swapsum_fatbin));
    CK(cuModuleGetFunction(&f, m, "es_swapsum"));
    es_swapsum_args_t a = { (const es_u64 *)p, (es_u64 *)out, 4 };
    void *params[] = { &a };
    CK(cuLaunchKernel(f, 4, 1, 1, ES_SWAPSUM_THREADS, 1, 1, 0, NULL, params, NULL));
    CK(cuCtxSynchronize());
    uint64_t dev_sums[4], host_sums[4];
    CK(cuMemcpyDtoH(dev_sums, out, sizeof(dev_sums)));
    uint64_t *copy = malloc(n);
    CK(cuMemcpyDtoH(copy, p, n));
    for (int c = 0; c < 4; c++)
        host_sums[c] = es_ss_chunk(copy + c * (ES_SWAPSUM_CHUNK / 8));
    assert_memory_equal(dev_sums, host_sums, sizeof(dev_sums));
    assert_true(dev_sums[0] != dev_sums[1] && dev_sums[1] != dev_sums[2]);
    /* one bit of one word of chunk 2 flipped: that hash only changes */
    copy[2 * (ES_SWAPSUM_CHUNK / 8) + 777] ^= 1ULL << 40;
    CK(cuMemcpyHtoD(p, copy, n));
    CK(cuLaunchKernel(f, 4, 1, 1, ES_SWAPSUM_THREADS, 1, 1, 0, NULL, params, NULL));
    uint64_t again[4];
    CK(cuMemcpyDtoH(again, out, sizeof(again)));
    assert_true(again[0] == dev_sums[0] && again[1] == dev_sums[1] && again[3] == dev_sums[3]);
    assert_true(again[2] != dev_sums[2]);
    assert_int_equal(again[2], es_ss_chunk(copy + 2 * (ES_SWAPSUM_CHUNK / 8)));
    free(copy);
    CK(cuModuleUnload(m));
    CK(es_mem_free(p));
    CK(es_mem_free(out));
}

static void test_out_and_back_same_device(void **state)
{
    (void)state;
    size_t base = ct_used(0);
    est_t e;
    est_make(&e, 20 * MiB + 3);
    size_t bytes = es_memreg_resident_bytes(0);
    assert_true(bytes >= 20 * MiB + 3 * e.g);
    assert_int_equal(ct_used(0) - base, bytes);
    es_swap_stats_t st;
    char msg[256] = "";
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes, bytes);
    assert_int_equal(st.bytes_d2h, bytes); /* first time: everything */
    assert_int_equal(st.bytes_skipped, 0);
    /* parked: no device memory at all, the addresses still the EST's */
    assert_int_equal(es_memreg_device(0), -1);
    assert_int_equal(es_memreg_resident_bytes(0), 0);
    assert_int_equal(es_memreg_footprint(), 0);
    assert_int_equal(ct_used(0), base);
    int ord;
    assert_int_not_equal(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, e.big),
                         CUDA_SUCCESS);
    CUdeviceptr b;
    assert_int_equal(es_mem_find(e.big + 5, &b, NULL, NULL, NULL), 0);
    assert_int_equal(b, e.big);
    /* twice: refused, nothing changes */
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), -EALREADY);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes_h2d, bytes);
    assert_int_equal(ct_used(0) - base, bytes);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), -EALREADY);
    est_check(&e, 0);
    /* the host copies are pinned VMM host memory granted to device 0, never
     * registered (a registration is the context's, redone after each move) */
    int n = 0;
    for (es_phys_t *ph = es_memreg_first(0); ph; ph = ph->next, n++) {
        assert_true(ph->park_h != 0);
        assert_int_equal(ph->park_registered, 0);
        assert_int_equal(ph->park_devs, 1);
        CUmemAllocationProp pr;
        CK(cuMemGetAllocationPropertiesFromHandle(&pr, (CUmemGenericAllocationHandle)ph->park_h));
        assert_int_equal(pr.location.type, CU_MEM_LOCATION_TYPE_HOST);
    }
    assert_true(n > 0);
}

static void test_out_and_in_on_another_device(void **state)
{
    (void)state;
    est_t e;
    est_make(&e, 9 * MiB);
    size_t base1 = ct_used(1);
    char msg[256] = "";
    assert_int_equal(es_swap_out(0, NULL, msg, sizeof(msg)), 0);
    /* in on device 1 (an h100): the same addresses, device 1's memory */
    CUcontext c1 = ct_primary(1);
    (void)c1;
    assert_int_equal(es_swap_in(0, 1, NULL, msg, sizeof(msg)), 0);
    assert_int_equal(es_memreg_device(0), 1);
    assert_int_equal(ct_used(1) - base1, es_memreg_resident_bytes(0));
    est_check(&e, 1);
    /* and new allocations go to device 1 */
    CUdeviceptr q;
    CK(es_mem_alloc(0, 5 * MiB, ES_ALLOC_PLAIN, &q));
    int ord = -1;
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, q));
    assert_int_equal(ord, 1);
    assert_int_equal(es_swap_out(0, NULL, msg, sizeof(msg)), 0);
    assert_int_equal(ct_used(1), base1);
    cuCtxSetCurrent(ctx0);
    assert_int_equal(es_swap_in(0, 0, NULL, msg, sizeof(msg)), 0);
    est_check(&e, 0);
    ct_primary_drop(1);
}

static void test_unchanged_chunks_are_not_copied_twice(void **state)
{
    (void)state;
    est_t e;
    est_make(&e, 16 * MiB);
    es_swap_stats_t st;
    char msg[256] = "";
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    size_t bytes = st.bytes;
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    /* nothing written since: nothing copied out again */
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes_d2h, 0);
    assert_int_equal(st.bytes_skipped, bytes);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    est_check(&e, 0);
    /* one chunk of the big allocation written: that chunk only */
    ct_fill(e.big + 3 * ES_SWAPSUM_CHUNK + 100, 8, 999);
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes_d2h, ES_SWAPSUM_CHUNK);
    assert_int_equal(st.bytes_skipped, bytes - ES_SWAPSUM_CHUNK);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    assert_true(ct_check(e.big + 3 * ES_SWAPSUM_CHUNK + 100, 8, 999));
    assert_true(ct_check(e.big, 3 * ES_SWAPSUM_CHUNK + 100, 200));
    /* negative control: without checksums everything is copied */
    es_swap_opts_t o = { 2, 0, 4 * MiB, 0, 0, 0 };
    assert_int_equal(es_swap_set_opts(&o), 0);
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes_d2h, bytes);
    assert_int_equal(st.bytes_skipped, 0);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    assert_true(ct_check(e.big + 3 * ES_SWAPSUM_CHUNK + 100, 8, 999));
}

static void test_migrate_device_to_device(void **state)
{
    (void)state;
    est_t e;
    est_make(&e, 12 * MiB);
    size_t base0 = ct_used(0) - es_memreg_resident_bytes(0);
    CUcontext c1;
    CK(cuDevicePrimaryCtxRetain(&c1, 1));
    es_swap_stats_t st;
    char msg[256] = "";
    size_t bytes = es_memreg_resident_bytes(0);
    assert_int_equal(es_swap_migrate(0, 1, ctx0, c1, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes_d2d, bytes);
    assert_int_equal(st.bytes_d2h + st.bytes_h2d, 0);
    assert_int_equal(es_memreg_device(0), 1);
    assert_int_equal(ct_used(0), base0); /* the old device's memory is given back */
    assert_int_equal(es_memreg_footprint(), bytes);
    cuCtxSetCurrent(c1);
    est_check(&e, 1);
    /* and back, through host memory this time (no source context given) */
    assert_int_equal(es_swap_migrate(0, 0, NULL, ctx0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes_d2d, 0);
    assert_int_equal(st.bytes_h2d, bytes);
    assert_int_equal(es_memreg_device(0), 0);
    cuCtxSetCurrent(ctx0);
    est_check(&e, 0);
    assert_int_equal(es_swap_migrate(0, 0, ctx0, c1, &st, msg, sizeof(msg)), -EALREADY);
    ct_primary_drop(1);
}

static void test_no_memory_on_target_stays_whole(void **state)
{
    (void)state;
    est_t e;
    est_make(&e, 300 * MiB); /* device 2 (a t4) has 256 MiB */
    size_t base2 = ct_used(2);
    char msg[256] = "";
    CUcontext c2;
    CK(cuDevicePrimaryCtxRetain(&c2, 2));
    /* migration: stays on device 0, untouched */
    assert_int_equal(es_swap_migrate(0, 2, ctx0, c2, NULL, msg, sizeof(msg)), -ENOMEM);
    assert_non_null(strstr(msg, "stays on device 0"));
    assert_int_equal(es_memreg_device(0), 0);
    assert_int_equal(ct_used(2), base2);
    est_check(&e, 0);
    /* swap-in: stays parked with its host copy, nothing left on device 2 */
    assert_int_equal(es_swap_out(0, NULL, msg, sizeof(msg)), 0);
    cuCtxSetCurrent(c2);
    msg[0] = '\0';
    assert_int_equal(es_swap_in(0, 2, NULL, msg, sizeof(msg)), -ENOMEM);
    assert_non_null(strstr(msg, "stays parked"));
    assert_int_equal(es_memreg_device(0), -1);
    assert_int_equal(ct_used(2), base2);
    assert_int_equal(es_memreg_resident_bytes(0), 0);
    cuCtxSetCurrent(ctx0);
    assert_int_equal(es_swap_in(0, 0, NULL, msg, sizeof(msg)), 0);
    est_check(&e, 0);
    ct_primary_drop(2);
}

static void test_imported_memory_is_imported_again(void **state)
{
    (void)state;
    size_t g = es_memreg_granularity();
    /* an exporter (vdev 1, on device 1, staying there) */
    CUmemAllocationProp p1 = prop_of(1);
    CUmemGenericAllocationHandle exp, imp;
    CK(es_vmm_create(&exp, g, &p1, 0));
    CUdeviceptr xa, ia;
    CK(cuMemAddressReserve(&xa, g, 0, 0, 0));
    CK(cuMemAddressReserve(&ia, g, 0, 0, 0));
    CK(es_vmm_map(xa, g, 0, exp, 0));
    CUmemAccessDesc d01[2] = { { { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
                                 CU_MEM_ACCESS_FLAGS_PROT_READWRITE },
                               { { CU_MEM_LOCATION_TYPE_DEVICE, 1 },
                                 CU_MEM_ACCESS_FLAGS_PROT_READWRITE } };
    CK(es_vmm_set_access(xa, g, d01, 2));
    ct_fill(xa, g, 77);
    int fd;
    CK(es_vmm_export(&fd, exp, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    /* vdev 0 imports it */
    CK(es_vmm_import(&imp, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    close(fd);
    CK(es_vmm_map(ia, g, 0, imp, 0));
    CK(es_vmm_set_access(ia, g, d01, 1));
    CUdeviceptr own;
    CK(es_mem_alloc(0, 3 * MiB, ES_ALLOC_PLAIN, &own));
    ct_fill(own, 3 * MiB, 78);
    es_swap_stats_t st;
    char msg[256] = "";
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    /* the imported memory is not copied: the exporter owns it */
    assert_int_equal(st.bytes, es_memreg_granularity() * 2);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    assert_true(ct_check(ia, g, 77));
    assert_true(ct_check(own, 3 * MiB, 78));
    /* the exporter writes; the importer sees it: the same memory */
    ct_fill(xa, g, 79);
    assert_true(ct_check(ia, g, 79));
    CK(es_vmm_unmap(ia, g));
    CK(es_vmm_release(imp));
    CK(es_vmm_unmap(xa, g));
    CK(es_vmm_release(exp));
    CK(cuMemAddressFree(xa, g));
    CK(cuMemAddressFree(ia, g));
}

static volatile int gate_open;
static void CUDA_CB gate_fn(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&gate_open, __ATOMIC_ACQUIRE))
        usleep(1000);
}
static void *opener(void *arg)
{
    (void)arg;
    usleep(50000);
    __atomic_store_n(&gate_open, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void test_pending_frees_complete_first(void **state)
{
    (void)state;
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr keep, gone;
    CK(es_mem_alloc(0, 4 * MiB, ES_ALLOC_ASYNC, &keep));
    CK(es_mem_alloc(0, 6 * MiB, ES_ALLOC_ASYNC, &gone));
    ct_fill(keep, 4 * MiB, 3);
    gate_open = 0;
    CK(cuLaunchHostFunc(s, gate_fn, NULL));
    CK(es_mem_free_async(gone, s));
    pthread_t t;
    pthread_create(&t, NULL, opener, NULL);
    es_swap_stats_t st;
    char msg[256] = "";
    /* the free's stream work completes during the swap-out, then it is freed */
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    pthread_join(t, NULL);
    assert_int_equal(st.bytes, es_memreg_granularity() * 2);
    assert_int_equal(es_mem_find(gone, NULL, NULL, NULL, NULL), -ENOENT);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    assert_true(ct_check(keep, 4 * MiB, 3));
    CK(cuStreamDestroy(s));
}

static void test_options(void **state)
{
    (void)state;
    es_swap_opts_t bad[] = { { 0, 1, 8 * MiB, 0, 0, 0 },  { 17, 1, 8 * MiB, 0, 0, 0 },
                             { 4, 2, 8 * MiB, 0, 0, 0 },  { 4, 1, 0, 0, 0, 0 },
                             { 4, 1, 3 * MiB / 2, 0, 0, 0 }, { 4, 1, 8 * MiB, 0, 0, 2 } };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(es_swap_set_opts(&bad[i]), -EINVAL);
    /* one stream and small pieces: the same result */
    es_swap_opts_t o = { 1, 1, 1 * MiB, 0, 0, 0 };
    assert_int_equal(es_swap_set_opts(&o), 0);
    est_t e;
    est_make(&e, 7 * MiB);
    char msg[256] = "";
    assert_int_equal(es_swap_out(0, NULL, msg, sizeof(msg)), 0);
    assert_int_equal(es_swap_in(0, 0, NULL, msg, sizeof(msg)), 0);
    est_check(&e, 0);
}

/* A parked EST's memory read and written through its host copies (a
 * collective taking place while it is parked): reads see the device content,
 * writes are on the device after the swap-in, and a chunk written while
 * parked is copied out again even when the application then puts back the
 * content it had at the previous swap-out (its stored hash would match). */
static void test_parked_content_from_the_host(void **state)
{
    (void)state;
    est_t e;
    est_make(&e, 4 * MiB);
    char msg[256] = "";
    uint32_t buf[64];
    /* resident: refused */
    assert_int_equal(es_swap_park_read(0, buf, e.big, sizeof(buf)), -EINVAL);
    es_swap_stats_t st;
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    /* reads: what the device held (the pattern of seed 200 at offset 4096) */
    uint32_t *want = malloc(ES_SWAPSUM_CHUNK);
    assert_non_null(want);
    assert_int_equal(es_swap_park_read(0, buf, e.big + 4096, sizeof(buf)), 0);
    ct_pattern(want, 64, 4096 / 4, 200);
    assert_memory_equal(buf, want, sizeof(buf));
    assert_int_equal(es_swap_park_read(0, buf, e.small[0], 100), 0);
    ct_pattern(want, 25, 0, 100);
    assert_memory_equal(buf, want, 100);
    /* a range that runs past the last object fails */
    assert_int_equal(es_swap_park_read(0, buf, e.vmm_va + 2 * e.g - 16, 32), -EFAULT);
    /* writes: the first chunk of big set to zeros */
    memset(want, 0, ES_SWAPSUM_CHUNK);
    assert_int_equal(es_swap_park_write(0, e.big, want, ES_SWAPSUM_CHUNK), 0);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    uint32_t *got = malloc(ES_SWAPSUM_CHUNK);
    assert_non_null(got);
    CK(cuMemcpyDtoH(got, e.big, ES_SWAPSUM_CHUNK));
    assert_memory_equal(got, want, ES_SWAPSUM_CHUNK);
    /* the rest as it was: the pattern of seed 200 from offset one chunk */
    CK(cuMemcpyDtoH(got, e.big + ES_SWAPSUM_CHUNK, ES_SWAPSUM_CHUNK));
    ct_pattern(want, ES_SWAPSUM_CHUNK / 4, ES_SWAPSUM_CHUNK / 4, 200);
    assert_memory_equal(got, want, ES_SWAPSUM_CHUNK);
    /* the application puts back what the device had at the swap-out */
    ct_fill(e.big, 4 * MiB, 200);
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    assert_true(ct_check(e.big, 4 * MiB, 200)); /* not the zeros written while parked */
    est_check(&e, 0);
    free(want);
    free(got);
}

/* A probe (opts.probe) hashes a sample only, to time the hashing, and
 * copies everything; without it every chunk is hashed. */
static void test_probe_hashes_a_sample(void **state)
{
    (void)state;
    est_t e;
    est_make(&e, 16 * MiB);
    size_t bytes = es_memreg_resident_bytes(0);
    es_swap_opts_t o = { 4, 1, 8 * MiB, 0, 3 * ES_SWAPSUM_CHUNK + 1, 0 };
    assert_int_equal(es_swap_set_opts(&o), 0);
    es_swap_stats_t st;
    char msg[256] = "";
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes_hashed, 4 * ES_SWAPSUM_CHUNK); /* whole chunks */
    assert_true(st.ms_hash > 0);
    assert_int_equal(st.bytes_d2h, bytes);
    assert_int_equal(st.bytes_skipped, 0);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    est_check(&e, 0);
    /* nothing was recorded: the next hashed swap-out copies everything */
    o.probe = 0;
    assert_int_equal(es_swap_set_opts(&o), 0);
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes_d2h, bytes);
    assert_int_equal(st.bytes_hashed, bytes);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes_skipped, bytes); /* now the hashes are there */
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    est_check(&e, 0);
}


static int primary_active(int dev)
{
    unsigned flags = 0;
    int active = -1;
    CK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
    return active;
}

/* opts.keep_streams (a time-sliced EST's turns): the streams a swap-out
 * makes serve the swap-ins and swap-outs after it on the same device, none
 * made again; they hold a retain of that device's primary context, which so
 * outlives its last other user, until they are dropped (a swap on another
 * device, es_swap_drop_streams). Without the option every call makes its
 * own. */
static void test_kept_streams(void **state)
{
    (void)state;
    est_t e;
    est_make(&e, 3 * MiB);
    es_swap_stats_t st;
    char msg[256] = "";
    es_swap_opts_t o = { 2, 0, 8 * MiB, 0, 0, 0 };
    assert_int_equal(es_swap_set_opts(&o), 0);
    for (int i = 0; i < 2; i++) { /* without: made by every call */
        assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
        assert_int_equal(st.streams_made, 2);
        assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
        assert_int_equal(st.streams_made, 2);
    }
    o.keep_streams = 1;
    assert_int_equal(es_swap_set_opts(&o), 0);
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.streams_made, 2);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
        assert_int_equal(st.streams_made, 0);
        est_check(&e, 0);
        assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
        assert_int_equal(st.streams_made, 0);
    }
    /* onto device 1: new streams there, device 0's dropped */
    ct_primary(1);
    assert_int_equal(es_swap_in(0, 1, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.streams_made, 2);
    est_check(&e, 1);
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.streams_made, 0);
    /* the test lets device 1's context go: the kept streams still hold it */
    CK(cuDevicePrimaryCtxRelease(1));
    assert_int_equal(primary_active(1), 1);
    cuCtxSetCurrent(ctx0);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.streams_made, 2);
    assert_int_equal(primary_active(1), 0); /* dropped with device 1's streams */
    est_check(&e, 0);
    es_swap_drop_streams();
    assert_int_equal(primary_active(0), 1); /* the test's own retain (setup) */
    assert_int_equal(es_swap_out(0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.streams_made, 2); /* dropped: made again */
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    est_check(&e, 0);
    es_swap_drop_streams();
    o.keep_streams = 0;
    es_swap_set_opts(&o);
}

/* es_swap_out_keep: the kept objects' memory stays on the device while
 * parked; a swap-in there copies only the chunks written while parked (and
 * they arrive: a swap-in that skipped them would leave the old bytes). */
static void test_kept_memory_copies_only_what_was_written(void **state)
{
    (void)state;
    size_t base = ct_used(0);
    est_t e;
    est_make(&e, 16 * MiB);
    size_t bytes = es_memreg_resident_bytes(0);
    es_swap_stats_t st;
    char msg[256] = "";
    assert_int_equal(es_swap_out_keep(0, SIZE_MAX, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes_d2h, bytes); /* the host copies are made all the same */
    assert_int_equal(es_memreg_device(0), -1);
    assert_int_equal(es_memreg_resident_bytes(0), 0);
    assert_int_equal(ct_used(0) - base, bytes); /* kept on the device */
    assert_int_equal(es_memreg_footprint(), bytes);
    int ord;
    assert_int_not_equal(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, e.big),
                         CUDA_SUCCESS); /* unmapped: the EST is parked */
    /* its part in a collective while parked writes 8 bytes in chunk 3 */
    uint32_t *want = malloc(ES_SWAPSUM_CHUNK);
    assert_non_null(want);
    uint32_t eight[2] = { 0xdeadbeef, 0x01234567 };
    assert_int_equal(es_swap_park_write(0, e.big + 3 * ES_SWAPSUM_CHUNK + 100, eight, 8), 0);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes_h2d, ES_SWAPSUM_CHUNK);
    assert_int_equal(st.bytes_skipped, bytes - ES_SWAPSUM_CHUNK);
    assert_int_equal(ct_used(0) - base, bytes);
    uint32_t got[2];
    CK(cuMemcpyDtoH(got, e.big + 3 * ES_SWAPSUM_CHUNK + 100, 8));
    assert_memory_equal(got, eight, 8);
    assert_true(ct_check(e.big, 3 * ES_SWAPSUM_CHUNK + 100, 200));
    uint32_t *tail = malloc(ES_SWAPSUM_CHUNK);
    assert_non_null(tail);
    CK(cuMemcpyDtoH(tail, e.big + 4 * ES_SWAPSUM_CHUNK, ES_SWAPSUM_CHUNK));
    ct_pattern(want, ES_SWAPSUM_CHUNK / 4, 4 * ES_SWAPSUM_CHUNK / 4, 200);
    assert_memory_equal(tail, want, ES_SWAPSUM_CHUNK);
    for (int i = 0; i < 3; i++)
        assert_true(ct_check(e.small[i], e.small_n[i], 100 + i));
    assert_true(ct_check(e.vmm_va, 2 * e.g, 300));
    /* a budget: whole objects that fit, the rest released and copied back */
    ct_fill(e.big, 16 * MiB, 200);
    assert_int_equal(es_swap_out_keep(0, 16 * MiB, &st, msg, sizeof(msg)), 0);
    size_t kept = ct_used(0) - base;
    assert_true(kept > 0 && kept <= 16 * MiB);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes_skipped, kept);
    assert_int_equal(st.bytes_h2d, bytes - kept);
    est_check(&e, 0);
    /* negative control: a swap-in onto another device gives the kept memory
     * back and copies everything */
    assert_int_equal(es_swap_out_keep(0, SIZE_MAX, &st, msg, sizeof(msg)), 0);
    size_t base1 = ct_used(1);
    CUcontext c1 = ct_primary(1);
    (void)c1;
    assert_int_equal(es_swap_in(0, 1, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes_h2d, bytes);
    assert_int_equal(st.bytes_skipped, 0);
    assert_int_equal(ct_used(0), base);
    assert_int_equal(ct_used(1) - base1, bytes);
    est_check(&e, 1);
    /* and kept memory released explicitly (an EST that goes elsewhere) */
    assert_int_equal(es_swap_out_keep(0, SIZE_MAX, &st, msg, sizeof(msg)), 0);
    assert_int_equal(ct_used(1) - base1, bytes);
    es_swap_release_kept(0);
    assert_int_equal(ct_used(1), base1);
    assert_int_equal(es_memreg_footprint(), 0);
    cuCtxSetCurrent(ctx0);
    assert_int_equal(es_swap_in(0, 0, &st, msg, sizeof(msg)), 0);
    assert_int_equal(st.bytes_h2d, bytes);
    est_check(&e, 0);
    ct_primary_drop(1);
    free(want);
    free(tail);
}

int main(void)
{
    /* device 2 is small: the out-of-memory cases */
    setenv("SIMCUDA_DEVICES", "a100:4G,h100:4G,t4:256M", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    ct_setup("swap");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_checksum_kernel_matches_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_and_back_same_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_and_in_on_another_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unchanged_chunks_are_not_copied_twice, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_migrate_device_to_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_memory_on_target_stays_whole, setup, teardown),
        cmocka_unit_test_setup_teardown(test_imported_memory_is_imported_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pending_frees_complete_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parked_content_from_the_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kept_memory_copies_only_what_was_written, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_probe_hashes_a_sample, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kept_streams, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
