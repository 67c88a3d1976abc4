/* Tests of the shim's memory pools (move/mempool.h) over the registry's
 * allocator on simcuda's driver (which has no pools of its own). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "move/mempool.h"
#include "move/memreg.h"
#include "tests/move/movetest.h"

#include <string.h>

#define MiB (1024UL * 1024)

static CUstream s;

static int setup(void **state)
{
    (void)state;
    ct_primary(0);
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cuStreamDestroy(s);
    es_mem_poll_frees(1);
    es_pool_reset();
    es_memreg_reset();
    return 0;
}

static void test_driver_has_none(void **state)
{
    (void)state;
    /* why the shim answers pools itself */
    CUmemoryPool p;
    assert_int_equal(cuDeviceGetDefaultMemPool(&p, 0), CUDA_ERROR_NOT_SUPPORTED);
}

static void test_default_and_current(void **state)
{
    (void)state;
    CUmemoryPool d, d2, c;
    CK(es_pool_default(&d, 0));
    CK(es_pool_default(&d2, 0));
    assert_ptr_equal(d, d2);
    CK(es_pool_current(&c, 0));
    assert_ptr_equal(c, d);
    CUmemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CUmemoryPool mine;
    CK(es_pool_create(&mine, &props));
    CK(es_pool_set_current(0, mine));
    CK(es_pool_current(&c, 0));
    assert_ptr_equal(c, mine);
    assert_int_equal(es_pool_set_current(1, mine), CUDA_ERROR_INVALID_DEVICE);
    /* cuMemAllocAsync: the current pool */
    CUdeviceptr p;
    CK(es_pool_alloc_async(&p, 3 * MiB, NULL, 0, s));
    cuuint64_t used = 0;
    CK(es_pool_get_attribute(mine, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    assert_int_equal(used, 3 * MiB);
    CK(es_pool_get_attribute(d, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    assert_int_equal(used, 0);
    int kind = 0;
    assert_int_equal(es_mem_find(p, NULL, NULL, NULL, &kind), 0);
    assert_int_equal(kind, ES_ALLOC_POOL);
    CK(es_pool_free_async(p, s));
    CK(es_pool_destroy(mine));
    /* destroyed: the default is current again; the default cannot go */
    CK(es_pool_current(&c, 0));
    assert_ptr_equal(c, d);
    assert_int_equal(es_pool_destroy(d), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(es_pool_destroy(mine), CUDA_ERROR_INVALID_VALUE);
}

static void test_attributes(void **state)
{
    (void)state;
    CUmemoryPool d;
    CK(es_pool_default(&d, 0));
    cuuint64_t v = 64 * MiB, got = 0;
    CK(es_pool_set_attribute(d, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
    CK(es_pool_get_attribute(d, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &got));
    assert_int_equal(got, 64 * MiB);
    int off = 0, on = 1;
    CK(es_pool_get_attribute(d, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &on));
    assert_int_equal(on, 1);
    CK(es_pool_set_attribute(d, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &off));
    CK(es_pool_get_attribute(d, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &on));
    assert_int_equal(on, 0);
    CUdeviceptr a, b;
    CK(es_pool_alloc_async(&a, 5 * MiB, d, 0, s));
    CK(es_pool_alloc_async(&b, 1 * MiB, d, 0, s));
    CK(es_pool_free(a));
    cuuint64_t high = 0, cur = 0;
    CK(es_pool_get_attribute(d, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high));
    CK(es_pool_get_attribute(d, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &cur));
    assert_int_equal(high, 6 * MiB);
    assert_int_equal(cur, 1 * MiB);
    /* the watermark resets to the current value; only 0 may be written */
    cuuint64_t zero = 0, one = 1;
    assert_int_equal(es_pool_set_attribute(d, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &one),
                     CUDA_ERROR_INVALID_VALUE);
    CK(es_pool_set_attribute(d, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
    CK(es_pool_get_attribute(d, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &high));
    assert_int_equal(high, 1 * MiB);
    assert_int_equal(es_pool_set_attribute(d, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero),
                     CUDA_ERROR_INVALID_VALUE);
    CK(es_pool_trim(d, 0));
    CK(es_pool_free_async(b, s));
    assert_int_equal(es_mem_poll_frees(1), 0);
    assert_int_equal(es_memreg_resident_bytes(0), 0);
}

static void test_access_and_errors(void **state)
{
    (void)state;
    CUmemoryPool d;
    CK(es_pool_default(&d, 0));
    CUmemAccessDesc a = { { CU_MEM_LOCATION_TYPE_DEVICE, 1 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CK(es_pool_set_access(d, &a, 1));
    CUmemLocation l1 = { CU_MEM_LOCATION_TYPE_DEVICE, 1 };
    CUmemAccess_flags f = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CK(es_pool_get_access(&f, d, &l1));
    assert_int_equal(f, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUdeviceptr p;
    CK(es_pool_alloc_async(&p, 2 * MiB, d, 0, s));
    unsigned long long fl = 0;
    CK(cuMemGetAccess(&fl, &l1, p));
    assert_int_equal(fl, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CK(es_pool_free_async(p, s));
    CUmemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemoryPool x;
    assert_int_equal(es_pool_create(&x, &props), CUDA_ERROR_NOT_SUPPORTED);
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.id = 99;
    assert_int_equal(es_pool_create(&x, &props), CUDA_ERROR_INVALID_VALUE);
    cuuint64_t v;
    assert_int_equal(es_pool_get_attribute((CUmemoryPool)&v, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(es_pool_alloc_async(&p, 0, d, 0, s), CUDA_ERROR_INVALID_VALUE);
    assert_false(es_pool_valid((CUmemoryPool)&v));
}

int main(void)
{
    ct_setup("mempool");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_driver_has_none, setup, teardown),
        cmocka_unit_test_setup_teardown(test_default_and_current, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attributes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_access_and_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
