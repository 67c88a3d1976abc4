/* simcuda VMM tests (SIMCUDA_ISOLATION=1): reservations, memfd-backed
 * physical allocations on a device or on the host, map/unmap/remap at the
 * same address, access rights (a device reaches a mapping only with access
 * granted to it: otherwise ILLEGAL_ADDRESS, checked in child processes
 * since the error is sticky; the host never reaches device memory, and
 * host-located memory only with host access), properties, retained
 * handles, export/import of a file descriptor between processes,
 * capacity. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "tests/sim/driver/common.h"

#define GRAN ((size_t)2 << 20)

static CUmemAllocationProp prop_for(int dev, int shareable)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    if (shareable)
        p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

static void grant(CUdeviceptr va, size_t size, int dev, CUmemAccess_flags f)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof(d));
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = dev;
    d.flags = f;
    CK(cuMemSetAccess(va, size, &d, 1));
}

static volatile int *g_touch;
static int touch_child(void *arg)
{
    (void)arg;
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    return g_touch[0] == 0x5a5a ? 7 : 8;
}

/* One device access to a fresh mapping on device 0, in a child process
 * (an illegal address is sticky): grant f to device 0, then write
 * (memset) or read (copy to the host). Exit 0 when it worked, 2 when it was
 * an illegal address, other codes for setup failures. */
typedef struct { CUmemAccess_flags f; int write; } access_case_t;
static int access_child(void *arg)
{
    const access_case_t *c = arg;
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    CUmemAllocationProp p = prop_for(0, 0);
    st_primary(0);
    if (cuMemAddressReserve(&va, GRAN, 0, 0, 0) || cuMemCreate(&h, GRAN, &p, 0) ||
        cuMemMap(va, GRAN, 0, h, 0))
        return 10;
    if (c->f != CU_MEM_ACCESS_FLAGS_PROT_NONE) {
        CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                             .flags = c->f};
        if (cuMemSetAccess(va, GRAN, &d, 1))
            return 11;
    }
    int v = 0;
    CUresult r = c->write ? cuMemsetD32(va, 1, 1) : cuMemcpyDtoH(&v, va, sizeof(v));
    if (r == CUDA_SUCCESS)
        return 0;
    if (r != CUDA_ERROR_ILLEGAL_ADDRESS)
        return 12;
    /* Sticky: the process is done with CUDA. */
    return cuCtxSynchronize() == CUDA_ERROR_ILLEGAL_ADDRESS ? 2 : 13;
}

static int access_result(CUmemAccess_flags f, int write)
{
    access_case_t c = {f, write};
    return st_wait(st_fork(access_child, &c));
}

static void test_granularity_and_props(void **state)
{
    (void)state;
    st_primary(0);
    CUmemAllocationProp p = prop_for(0, 0);
    size_t g;
    CK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    assert_int_equal(g, GRAN);
    CK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    assert_int_equal(g, GRAN);
    CUmemAllocationProp bad = prop_for(9, 0);
    assert_int_equal(cuMemGetAllocationGranularity(&g, &bad, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                     CUDA_ERROR_INVALID_VALUE);
    CUmemGenericAllocationHandle h;
    CK(cuMemCreate(&h, 2 * GRAN, &p, 0));
    CUmemAllocationProp back;
    CK(cuMemGetAllocationPropertiesFromHandle(&back, h));
    assert_int_equal(back.location.id, 0);
    assert_int_equal(back.type, CU_MEM_ALLOCATION_TYPE_PINNED);
    assert_int_equal(cuMemCreate(&h, GRAN + 4096, &p, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemCreate(&h, 0, &p, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemCreate(&h, GRAN, &bad, 0), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemRelease(h));
    assert_int_equal(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemGetAllocationPropertiesFromHandle(&back, h), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr va;
    assert_int_equal(cuMemAddressReserve(&va, GRAN + 1, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemAddressReserve(NULL, GRAN, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemAddressFree(12345, GRAN), CUDA_ERROR_INVALID_VALUE);
}

static void test_map_access_unmap_remap(void **state)
{
    (void)state;
    st_primary(0);
    CUmemAllocationProp p = prop_for(0, 0);
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, 4 * GRAN, 0, 0, 0));
    assert_int_equal(va % GRAN, 0);
    CUmemGenericAllocationHandle h;
    CK(cuMemCreate(&h, 2 * GRAN, &p, 0));
    CK(cuMemMap(va + GRAN, 2 * GRAN, 0, h, 0));
    /* cuMemMap documents CUDA_ERROR_INVALID_VALUE (not ALREADY_MAPPED or
     * INVALID_HANDLE) for these, and an offset that "currently must be zero". */
    assert_int_equal(cuMemMap(va + GRAN, 2 * GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* mapped */
    assert_int_equal(cuMemMap(va + 3 * GRAN, 2 * GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* beyond */
    assert_int_equal(cuMemMap(va, GRAN, 0, (CUmemGenericAllocationHandle)&p, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemMap(va, GRAN, GRAN, h, 0), CUDA_ERROR_INVALID_VALUE); /* offset */
    /* Mapped but not granted: no access yet, as on a GPU; read-only access
     * lets the device read but not write; read-write both. */
    assert_int_equal(access_result(CU_MEM_ACCESS_FLAGS_PROT_NONE, 0), 2);
    assert_int_equal(access_result(CU_MEM_ACCESS_FLAGS_PROT_NONE, 1), 2);
    assert_int_equal(access_result(CU_MEM_ACCESS_FLAGS_PROT_READ, 0), 0);
    assert_int_equal(access_result(CU_MEM_ACCESS_FLAGS_PROT_READ, 1), 2);
    assert_int_equal(access_result(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 0), 0);
    assert_int_equal(access_result(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 1), 0);
    g_touch = (volatile int *)(uintptr_t)(va + GRAN);
    assert_int_equal(st_wait(st_fork(touch_child, NULL)), 128 + SIGSEGV);
    unsigned long long flags = 99;
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    CK(cuMemGetAccess(&flags, &loc, va + GRAN));
    assert_int_equal(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    grant(va + GRAN, 2 * GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    grant(va + GRAN, 2 * GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CK(cuMemGetAccess(&flags, &loc, va + GRAN));
    assert_int_equal(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    /* Device memory in every sense: copies, memset, attributes. */
    CK(cuMemsetD32(va + GRAN, 0x5a5a, 1));
    int v[4] = {1, 2, 3, 4}, w[4];
    CK(cuMemcpyHtoD(va + 2 * GRAN + 64, v, sizeof(v)));
    CK(cuMemcpyDtoH(w, va + 2 * GRAN + 64, sizeof(w)));
    assert_memory_equal(v, w, sizeof(v));
    /* Device memory, granted or not, is never host memory. */
    assert_int_equal(st_wait(st_fork(touch_child, NULL)), 128 + SIGSEGV);
    unsigned type;
    CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + GRAN + 8));
    assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
    CUdeviceptr start;
    size_t rsize;
    CK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + GRAN + 8));
    assert_true(start == va);
    CK(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + GRAN + 8));
    assert_int_equal(rsize, 4 * GRAN);
    CUdeviceptr base;
    size_t size;
    CK(cuMemGetAddressRange(&base, &size, va + GRAN + 8));
    assert_true(base == va + GRAN);
    assert_int_equal(size, 2 * GRAN);
    /* A retained handle is the same allocation. */
    CUmemGenericAllocationHandle h2;
    CK(cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)(va + GRAN + 100)));
    assert_true(h2 == h);
    CK(cuMemRelease(h2));
    /* Unmap: a reservation again, faults again; the handle keeps the bytes. */
    assert_int_equal(cuMemUnmap(va + GRAN, GRAN), CUDA_ERROR_INVALID_VALUE); /* part of a mapping */
    CK(cuMemUnmap(va + GRAN, 2 * GRAN));
    assert_int_equal(st_wait(st_fork(touch_child, NULL)), 128 + SIGSEGV);
    assert_int_equal(cuMemcpyDtoH(w, va + GRAN, 4), CUDA_ERROR_INVALID_VALUE);
    /* Remap at the same address: same bytes, access must be granted again. */
    CK(cuMemMap(va + GRAN, 2 * GRAN, 0, h, 0));
    CK(cuMemGetAccess(&flags, &loc, va + GRAN));
    assert_int_equal(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    grant(va + GRAN, 2 * GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CK(cuMemcpyDtoH(w, va + GRAN, sizeof(int)));
    assert_int_equal(w[0], 0x5a5a);
    CK(cuMemcpyDtoH(w, va + 2 * GRAN + 64, sizeof(w)));
    assert_memory_equal(v, w, sizeof(v));
    /* Release the handle while mapped: the memory lives until unmapped. */
    CK(cuMemRelease(h));
    CK(cuMemcpyDtoH(w, va + GRAN, sizeof(int)));
    assert_int_equal(w[0], 0x5a5a);
    assert_int_equal(cuMemAddressFree(va, 4 * GRAN), CUDA_ERROR_INVALID_VALUE); /* still mapped */
    CK(cuMemUnmap(va + GRAN, 2 * GRAN));
    CK(cuMemAddressFree(va, 4 * GRAN));
    assert_int_equal(cuMemUnmap(va + GRAN, 2 * GRAN), CUDA_ERROR_INVALID_VALUE);
}

static void test_two_handles_one_range(void **state)
{
    (void)state;
    st_primary(0);
    CUmemAllocationProp p0 = prop_for(0, 0), p1 = prop_for(1, 0);
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0));
    CUmemGenericAllocationHandle a, b;
    CK(cuMemCreate(&a, GRAN, &p0, 0));
    CK(cuMemCreate(&b, GRAN, &p1, 0)); /* another device's memory in the same range */
    CK(cuMemMap(va, GRAN, 0, a, 0));
    CK(cuMemMap(va + GRAN, GRAN, 0, b, 0));
    CK(cuMemRelease(a));
    CK(cuMemRelease(b));
    grant(va, 2 * GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    int ord;
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va + GRAN));
    assert_int_equal(ord, 1);
    /* ACCESS_FLAGS are "the access flags the device associated with the
     * current context has": device 0 was granted device 1's memory, device 1
     * itself was not. */
    unsigned long long acc = 99;
    CK(cuPointerGetAttribute(&acc, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, va + GRAN));
    assert_int_equal(acc, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUcontext c0, c1;
    CK(cuCtxGetCurrent(&c0));
    c1 = st_primary(1);
    CK(cuPointerGetAttribute(&acc, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, va + GRAN));
    assert_int_equal(acc, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    (void)c1;
    CK(cuCtxSetCurrent(c0));
    /* One copy across both mappings. */
    static char buf[2 * GRAN / 4];
    memset(buf, 3, sizeof(buf));
    CK(cuMemcpyHtoD(va + GRAN - sizeof(buf) / 2, buf, sizeof(buf)));
    char back3 = 0;
    CK(cuMemcpyDtoH(&back3, va + GRAN, 1));
    assert_int_equal(back3, 3);
    CK(cuMemUnmap(va, 2 * GRAN));
    CK(cuMemAddressFree(va, 2 * GRAN));
}

static int g_fd;
static CUdeviceptr g_va_hint;
static int import_child(void *arg)
{
    (void)arg;
    /* A fresh process view: initialise, import the fd, map, read, write. */
    if (cuInit(0) != CUDA_SUCCESS)
        return 10;
    st_primary(0);
    CUmemGenericAllocationHandle h;
    if (cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)g_fd,
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS)
        return 11;
    CUmemAllocationProp pr;
    if (cuMemGetAllocationPropertiesFromHandle(&pr, h) != CUDA_SUCCESS || pr.location.id != 1)
        return 12;
    CUdeviceptr va;
    if (cuMemAddressReserve(&va, GRAN, 0, 0, 0) != CUDA_SUCCESS)
        return 13;
    if (cuMemMap(va, GRAN, 0, h, 0) != CUDA_SUCCESS)
        return 14;
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (cuMemSetAccess(va, GRAN, &d, 1) != CUDA_SUCCESS)
        return 15;
    int w[2];
    if (cuMemcpyDtoH(w, va + 4096, sizeof(w)) != CUDA_SUCCESS || w[0] != 1234 || w[1] != 5678)
        return 16;
    int mine = 4321;
    if (cuMemcpyHtoD(va + 8192, &mine, sizeof(mine)) != CUDA_SUCCESS)
        return 17;
    return 0;
}

static void test_export_import_between_processes(void **state)
{
    (void)state;
    st_primary(0);
    CUmemAllocationProp p = prop_for(1, 1), np = prop_for(1, 0);
    CUmemGenericAllocationHandle h, nh;
    CK(cuMemCreate(&h, GRAN, &p, 0));
    CK(cuMemCreate(&nh, GRAN, &np, 0));
    int fd = -1;
    assert_int_equal(cuMemExportToShareableHandle(&fd, nh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                     CUDA_ERROR_INVALID_VALUE); /* not requested at creation */
    assert_int_equal(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_WIN32, 0),
                     CUDA_ERROR_NOT_SUPPORTED);
    CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    assert_true(fd >= 0);
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, GRAN, 0, 0, 0));
    CK(cuMemMap(va, GRAN, 0, h, 0));
    grant(va, GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    int v[2] = {1234, 5678};
    CK(cuMemcpyHtoD(va + 4096, v, sizeof(v)));
    g_fd = fd;
    g_va_hint = va;
    assert_int_equal(st_wait(st_fork(import_child, NULL)), 0);
    /* The child's write is in our mapping: one physical allocation. */
    int back = 0;
    CK(cuMemcpyDtoH(&back, va + 8192, sizeof(back)));
    assert_int_equal(back, 4321);
    /* Importing in this process too gives another handle to the same bytes. */
    CUmemGenericAllocationHandle h2;
    CK(cuMemImportFromShareableHandle(&h2, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CUdeviceptr va2;
    CK(cuMemAddressReserve(&va2, GRAN, 0, 0, 0));
    CK(cuMemMap(va2, GRAN, 0, h2, 0));
    grant(va2, GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    back = 0;
    CK(cuMemcpyDtoH(&back, va2 + 8192, sizeof(back)));
    assert_int_equal(back, 4321);
    int junk = open("/dev/null", 0);
    assert_int_equal(cuMemImportFromShareableHandle(&h2, (void *)(uintptr_t)junk,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                     CUDA_ERROR_INVALID_VALUE);
    close(junk);
    CK(cuMemUnmap(va2, GRAN));
    CK(cuMemAddressFree(va2, GRAN));
    CK(cuMemRelease(h2));
    CK(cuMemUnmap(va, GRAN));
    CK(cuMemAddressFree(va, GRAN));
    CK(cuMemRelease(h));
    CK(cuMemRelease(nh));
    close(fd);
}

static void test_vmm_capacity(void **state)
{
    (void)state;
    st_primary(2); /* 64M device in this program */
    CUmemAllocationProp p = prop_for(2, 0);
    size_t f0, f1, tot;
    CK(cuMemGetInfo(&f0, &tot));
    CUmemGenericAllocationHandle h[40];
    int n = 0;
    CUresult r;
    while ((r = cuMemCreate(&h[n], GRAN, &p, 0)) == CUDA_SUCCESS)
        n++;
    assert_int_equal(r, CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(n, 32);
    CK(cuMemGetInfo(&f1, &tot));
    assert_int_equal(f1, 0);
    CUdeviceptr d;
    assert_int_equal(cuMemAlloc(&d, 4096), CUDA_ERROR_OUT_OF_MEMORY);
    for (int i = 0; i < n; i++)
        CK(cuMemRelease(h[i]));
    CK(cuMemGetInfo(&f1, &tot));
    assert_int_equal(f1, f0);
}

/* Memory located on the host (cuMemCreate with CU_MEM_LOCATION_TYPE_HOST
 * or HOST_NUMA, as cuda.h documents them): the host reaches it only with
 * access granted to a host location, a device only with access granted to
 * it; a HOST_NUMA allocation is exportable as a file descriptor, a HOST one
 * is not. */
static CUmemAllocationProp host_prop(int numa, int shareable)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = numa ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_HOST;
    p.location.id = 0;
    if (shareable)
        p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

static int g_host_fd;
static int host_import_child(void *arg)
{
    (void)arg;
    st_primary(0);
    CUmemGenericAllocationHandle h;
    if (cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)g_host_fd,
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS)
        return 11;
    CUmemAllocationProp pr;
    if (cuMemGetAllocationPropertiesFromHandle(&pr, h) != CUDA_SUCCESS ||
        pr.location.type != CU_MEM_LOCATION_TYPE_HOST_NUMA)
        return 12;
    CUdeviceptr va;
    if (cuMemAddressReserve(&va, GRAN, 0, 0, 0) || cuMemMap(va, GRAN, 0, h, 0))
        return 13;
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_HOST_NUMA, .id = 0},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (cuMemSetAccess(va, GRAN, &d, 1))
        return 14;
    volatile int *p = (volatile int *)(uintptr_t)va;
    if (p[10] != 777)
        return 15;
    p[11] = 888; /* seen by the exporter: one allocation */
    return 0;
}

static void test_host_location(void **state)
{
    (void)state;
    st_primary(0);
    CUmemAllocationProp hp = host_prop(0, 0), hs = host_prop(0, 1), np = host_prop(1, 1);
    CUmemGenericAllocationHandle h, hn;
    size_t g;
    CK(cuMemGetAllocationGranularity(&g, &hp, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    assert_int_equal(g, GRAN);
    assert_int_equal(cuMemCreate(&h, GRAN, &hs, 0), CUDA_ERROR_INVALID_VALUE); /* HOST: not IPC */
    CUmemAllocationProp bad = np;
    bad.location.id = 1;
    assert_int_equal(cuMemCreate(&h, GRAN, &bad, 0), CUDA_ERROR_INVALID_VALUE); /* no node 1 */
    bad.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
    assert_int_equal(cuMemCreate(&h, GRAN, &bad, 0), CUDA_ERROR_INVALID_VALUE);
    size_t f0, f1, tot;
    CK(cuMemGetInfo(&f0, &tot));
    CK(cuMemCreate(&h, GRAN, &hp, 0));
    CK(cuMemCreate(&hn, GRAN, &np, 0));
    CK(cuMemGetInfo(&f1, &tot));
    assert_true(f1 == f0); /* host memory: no device capacity */
    int on;
    CK(cuDeviceGetAttribute(&on, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    assert_int_equal(on, 1);
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0));
    CK(cuMemMap(va, GRAN, 0, h, 0));
    CK(cuMemMap(va + GRAN, GRAN, 0, hn, 0));
    /* No host access yet: the host faults. */
    g_touch = (volatile int *)(uintptr_t)va;
    assert_int_equal(st_wait(st_fork(touch_child, NULL)), 128 + SIGSEGV);
    CUmemAccessDesc d = {.location = {.type = CU_MEM_LOCATION_TYPE_HOST, .id = 0},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CK(cuMemSetAccess(va, 2 * GRAN, &d, 1));
    unsigned long long fl;
    CK(cuMemGetAccess(&fl, &d.location, va));
    assert_int_equal(fl, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    volatile int *p = (volatile int *)(uintptr_t)va;
    p[0] = 0x5a5a;
    assert_int_equal(st_wait(st_fork(touch_child, NULL)), 7);
    /* Host access is for host memory only. */
    CUmemGenericAllocationHandle dh;
    CUmemAllocationProp dp = prop_for(0, 0);
    CUdeviceptr dva;
    CK(cuMemAddressReserve(&dva, GRAN, 0, 0, 0));
    CK(cuMemCreate(&dh, GRAN, &dp, 0));
    CK(cuMemMap(dva, GRAN, 0, dh, 0));
    assert_int_equal(cuMemSetAccess(dva, GRAN, &d, 1), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemUnmap(dva, GRAN));
    CK(cuMemRelease(dh));
    CK(cuMemAddressFree(dva, GRAN));
    /* Device 0 reaches it once granted: its memset is seen by the host. */
    grant(va, 2 * GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CK(cuMemsetD32(va + 4, 0x77, 1));
    assert_int_equal(p[1], 0x77);
    unsigned type;
    CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va));
    assert_int_equal(type, CU_MEMORYTYPE_HOST);
    /* HOST_NUMA: exported to another process, one allocation. */
    volatile int *q = (volatile int *)(uintptr_t)(va + GRAN);
    q[10] = 777;
    g_host_fd = -1;
    assert_int_equal(cuMemExportToShareableHandle(&g_host_fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                     CUDA_ERROR_INVALID_VALUE);
    CK(cuMemExportToShareableHandle(&g_host_fd, hn, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    assert_int_equal(st_wait(st_fork(host_import_child, NULL)), 0);
    assert_int_equal(q[11], 888);
    close(g_host_fd);
    CK(cuMemUnmap(va, 2 * GRAN));
    CK(cuMemRelease(h));
    CK(cuMemRelease(hn));
    CK(cuMemAddressFree(va, 2 * GRAN));
}

/* ---- recycled physical memory (sim/driver/README.md) -------------------------- */

#define RSZ (4 * GRAN)

/* Creates RSZ on dev, maps it at a fresh reservation with read-write access
 * for dev. */
static CUdeviceptr make_mapped(int dev, int shareable, CUmemGenericAllocationHandle *h)
{
    CUmemAllocationProp p = prop_for(dev, shareable);
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, RSZ, 0, 0, 0));
    CK(cuMemCreate(h, RSZ, &p, 0));
    CK(cuMemMap(va, RSZ, 0, *h, 0));
    grant(va, RSZ, dev, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    return va;
}

static void fill_words(CUdeviceptr va, unsigned v)
{
    CK(cuMemsetD32(va, v, RSZ / 4));
}

/* Every word of [va, +RSZ) is v (read back through the host). */
static int all_words(CUdeviceptr va, unsigned v)
{
    static unsigned buf[RSZ / 4];
    CK(cuMemcpyDtoH(buf, va, RSZ));
    for (size_t i = 0; i < RSZ / 4; i++)
        if (buf[i] != v)
            return 0;
    return 1;
}

static void unmap_free(CUdeviceptr va, CUmemGenericAllocationHandle h)
{
    CK(cuMemUnmap(va, RSZ));
    CK(cuMemAddressFree(va, RSZ));
    CK(cuMemRelease(h));
}

/* Memory released and created again on the same GPU with the same size
 * works like fresh memory wherever it is mapped; the capacity comes back at
 * the release; the range it was mapped at before is unreachable. With the
 * pool on (the default) the new allocation is the old file (it still holds
 * the old words: proof that the files are recycled at all); with
 * SIMCUDA_PHYS_POOL_MIB=0 it is new (zeroed by the kernel). */
static int recycle_child(void *arg)
{
    int pool = arg != NULL;
    if (!pool)
        setenv("SIMCUDA_PHYS_POOL_MIB", "0", 1);
    if (cuInit(0) != CUDA_SUCCESS)
        return 10;
    st_primary(0);
    size_t free0, free1, total;
    CUmemGenericAllocationHandle a, b;
    if (cuMemGetInfo(&free0, &total))
        return 11;
    CUdeviceptr va = make_mapped(0, 0, &a);
    fill_words(va, 0x11111111u);
    CK(cuMemUnmap(va, RSZ));
    CK(cuMemRelease(a));
    if (cuMemGetInfo(&free1, &total) || free1 != free0)
        return 12; /* a kept file holds no device capacity */
    CUdeviceptr vb = make_mapped(0, 0, &b); /* another reservation */
    if (vb == va)
        return 13;
    int old = all_words(vb, 0x11111111u), zero = all_words(vb, 0);
    if (pool ? !old : !zero)
        return 14;
    fill_words(vb, 0x22222222u);
    if (!all_words(vb, 0x22222222u))
        return 15;
    /* the old range is a bare reservation again: no copy reaches it, and
     * new memory mapped there (a fresh file: the pool is empty) shows its
     * own zeros, not the pages that were there */
    unsigned w = 0;
    if (cuMemcpyDtoH(&w, va, sizeof(w)) == CUDA_SUCCESS)
        return 16;
    CUmemAllocationProp p = prop_for(0, 0);
    CUmemGenericAllocationHandle c;
    CK(cuMemCreate(&c, RSZ, &p, 0));
    CK(cuMemMap(va, RSZ, 0, c, 0));
    grant(va, RSZ, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    if (!all_words(va, 0) || !all_words(vb, 0x22222222u))
        return 17;
    return 0;
}

static void test_recycled_memory(void **state)
{
    (void)state;
    assert_int_equal(st_wait(st_fork(recycle_child, (void *)1)), 0);
    assert_int_equal(st_wait(st_fork(recycle_child, NULL)), 0);
}

/* The same handle unmapped and mapped again at another address keeps its
 * content (its parked pages come back). */
static void test_remap_elsewhere_keeps_content(void **state)
{
    (void)state;
    st_primary(0);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va = make_mapped(0, 0, &h);
    fill_words(va, 0x5eed5eedu);
    CK(cuMemUnmap(va, RSZ));
    CUdeviceptr vb;
    CK(cuMemAddressReserve(&vb, RSZ, 0, 0, 0));
    CK(cuMemMap(vb, RSZ, 0, h, 0));
    grant(vb, RSZ, 0, CU_MEM_ACCESS_FLAGS_PROT_READ); /* read-only now */
    assert_true(all_words(vb, 0x5eed5eedu));
    grant(vb, RSZ, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    fill_words(vb, 0x600d600du);
    assert_true(all_words(vb, 0x600d600du));
    /* and back at the first address */
    CK(cuMemUnmap(vb, RSZ));
    CK(cuMemAddressFree(vb, RSZ));
    CK(cuMemMap(va, RSZ, 0, h, 0));
    grant(va, RSZ, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    assert_true(all_words(va, 0x600d600du));
    unmap_free(va, h);
}

/* An exported allocation is never handed to a later cuMemCreate: the
 * process that imported it still sees its own words. */
static int g_exp_fd;
static int exported_reader(void *arg)
{
    (void)arg;
    if (cuInit(0) != CUDA_SUCCESS)
        return 10;
    st_primary(0);
    CUmemGenericAllocationHandle h;
    if (cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)g_exp_fd,
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS)
        return 11;
    CUdeviceptr va;
    if (cuMemAddressReserve(&va, RSZ, 0, 0, 0) || cuMemMap(va, RSZ, 0, h, 0))
        return 12;
    grant(va, RSZ, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
    return all_words(va, 0xe4e4e4e4u) ? 0 : 13;
}

static void test_exported_not_recycled(void **state)
{
    (void)state;
    st_primary(0);
    CUmemGenericAllocationHandle a, b;
    CUdeviceptr va = make_mapped(0, 1, &a);
    fill_words(va, 0xe4e4e4e4u);
    CK(cuMemExportToShareableHandle(&g_exp_fd, a, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    unmap_free(va, a);
    CUdeviceptr vb = make_mapped(0, 0, &b); /* same size, same GPU */
    fill_words(vb, 0x0b0b0b0bu);
    assert_int_equal(st_wait(st_fork(exported_reader, NULL)), 0);
    close(g_exp_fd);
    unmap_free(vb, b);
}

static int bad_pool_child(void *arg)
{
    setenv("SIMCUDA_PHYS_POOL_MIB", (const char *)arg, 1);
    return cuInit(0) == CUDA_ERROR_INVALID_VALUE ? 0 : 1;
}

static void test_pool_env_strict(void **state)
{
    (void)state;
    const char *bad[] = {"", "-1", "12x", "0x10", "99999999999", " 5"};
    for (size_t i = 1; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(st_wait(st_fork(bad_pool_child, (void *)bad[i])), 0);
}

int main(void)
{
    st_private_shm("vmm");
    setenv("SIMCUDA_DEVICES", "a100:8G,h100:8G,t4:64M", 1);
    setenv("SIMCUDA_ISOLATION", "1", 1); /* device memory is not host memory */
    unsetenv("CUDA_VISIBLE_DEVICES");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_granularity_and_props),
        cmocka_unit_test(test_map_access_unmap_remap),
        cmocka_unit_test(test_two_handles_one_range),
        cmocka_unit_test(test_export_import_between_processes),
        cmocka_unit_test(test_vmm_capacity),
        cmocka_unit_test(test_host_location),
        cmocka_unit_test(test_recycled_memory),
        cmocka_unit_test(test_remap_elsewhere_keeps_content),
        cmocka_unit_test(test_exported_not_recycled),
        cmocka_unit_test(test_pool_env_strict),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
