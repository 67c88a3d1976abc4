/* CUDA Driver API client written only against NVIDIA's cuda.h: the same
 * program runs on simcuda and on a real GPU. Device enumeration, contexts,
 * allocation, copies, memset, stream ordering with events, pinned memory,
 * VMM reserve/map/unmap/remap at the same address, error codes for bad
 * arguments and over-allocation, an entry point obtained through
 * cuGetProcAddress. Answers NVIDIA's documentation leaves undefined (a
 * destroyed context pushed, a freed or host pointer, a copy past the end of
 * an allocation, a stream handle that is not one: NVIDIA's driver may
 * crash or let them through) are checked only on simcuda, which defines
 * them (SIMCUDA_DEVICES set). Prints "[  PASSED  ] N test(s)." or
 * "[  FAILED  ] N test(s)." and exits non-zero on failure.
 *
 *   cc -I$CUDA_HOME/include cuda_client.c -L<dir of libcuda.so> -lcuda
 */
#include <cuda.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_pass, g_fail;
static int g_strict; /* simcuda: undefined answers are defined there */
static CUdevice g_dev;
static CUcontext g_ctx;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            printf("  check failed at line %d: %s\n", __LINE__, #cond);                \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

#define CU(call)                                                                       \
    do {                                                                               \
        CUresult r_ = (call);                                                          \
        if (r_ != CUDA_SUCCESS) {                                                      \
            const char *n_ = "?";                                                      \
            cuGetErrorName(r_, &n_);                                                   \
            printf("  %s failed at line %d: %s (%d)\n", #call, __LINE__, n_, (int)r_); \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

static void run(const char *name, int (*fn)(void))
{
    printf("[ RUN      ] %s\n", name);
    fflush(stdout);
    if (fn() == 0) {
        g_pass++;
        printf("[       OK ] %s\n", name);
    } else {
        g_fail++;
        printf("[  FAILED  ] %s\n", name);
    }
    fflush(stdout);
}

static int t_devices(void)
{
    int n = 0, v;
    CU(cuDeviceGetCount(&n));
    CHECK(n >= 1);
    for (int i = 0; i < n; i++) {
        CUdevice d;
        char name[256], bus[32];
        size_t total;
        int major, minor, sms;
        CUuuid u;
        CU(cuDeviceGet(&d, i));
        CU(cuDeviceGetName(name, sizeof(name), d));
        CU(cuDeviceTotalMem(&total, d));
        CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
        CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d));
        CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
        CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, d));
        CHECK(v == 32);
        CU(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, d));
        CHECK(v == 1024);
        CU(cuDeviceGetUuid(&u, d));
        CU(cuDeviceGetPCIBusId(bus, sizeof(bus), d));
        CHECK(strlen(name) > 0 && total > 0 && major >= 7 && sms > 0); /* CUDA 13: Turing on */
        printf("  device %d: %s, cc %d.%d, %d SMs, %zu MiB, %s\n", i, name, major, minor, sms,
               total >> 20, bus);
    }
    CUdevice d;
    CHECK(cuDeviceGet(&d, n) == CUDA_ERROR_INVALID_DEVICE);
    CHECK(cuDeviceGetAttribute(&v, (CUdevice_attribute)100000, 0) == CUDA_ERROR_INVALID_VALUE);
    return 0;
}

static int t_contexts(void)
{
    CUcontext c, cur;
    CUdevice d;
    unsigned flags;
    int active;
    CU(cuDevicePrimaryCtxGetState(g_dev, &flags, &active));
    CHECK(active == 1); /* retained in main */
    CU(cuCtxCreate(&c, NULL, 0, g_dev));
    CU(cuCtxGetCurrent(&cur));
    CHECK(cur == c);
    CU(cuCtxGetDevice(&d));
    CHECK(d == g_dev);
    CU(cuCtxPopCurrent(&cur));
    CHECK(cur == c);
    CU(cuCtxPushCurrent(c));
    CU(cuCtxSynchronize());
    CU(cuCtxDestroy(c));
    if (g_strict)
        CHECK(cuCtxPushCurrent(c) == CUDA_ERROR_INVALID_CONTEXT);
    CU(cuCtxSetCurrent(g_ctx));
    return 0;
}

static int t_memory_copies(void)
{
    enum { N = 1 << 16 };
    unsigned *h = malloc(N * sizeof(unsigned)), *g = malloc(N * sizeof(unsigned));
    CHECK(h && g);
    for (unsigned i = 0; i < N; i++)
        h[i] = i * 2654435761u;
    CUdeviceptr a, b;
    size_t fr, total;
    CU(cuMemAlloc(&a, N * sizeof(unsigned)));
    CU(cuMemAlloc(&b, N * sizeof(unsigned)));
    CU(cuMemGetInfo(&fr, &total));
    CHECK(fr < total);
    CU(cuMemcpyHtoD(a, h, N * sizeof(unsigned)));
    CU(cuMemcpyDtoD(b, a, N * sizeof(unsigned)));
    CU(cuMemcpyDtoH(g, b, N * sizeof(unsigned)));
    CHECK(memcmp(h, g, N * sizeof(unsigned)) == 0);
    CU(cuMemsetD32(b, 0xcafef00d, N));
    CU(cuMemsetD8(b, 0x11, 3));
    CU(cuMemcpyDtoH(g, b, N * sizeof(unsigned)));
    CHECK(g[0] == 0xca111111u && g[1] == 0xcafef00du && g[N - 1] == 0xcafef00du);
    CU(cuMemsetD16(b, 0x2222, 2));
    CU(cuMemcpyDtoH(g, b, 8));
    CHECK(g[0] == 0x22222222u && g[1] == 0xcafef00du);
    CUdeviceptr base;
    size_t size;
    CU(cuMemGetAddressRange(&base, &size, a + 100));
    CHECK(base == a && size == N * sizeof(unsigned));
    unsigned type;
    CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a));
    CHECK(type == CU_MEMORYTYPE_DEVICE);
    CU(cuMemFree(a));
    CU(cuMemFree(b));
    free(h);
    free(g);
    return 0;
}

static int t_pinned_stream_events(void)
{
    enum { N = 1 << 20 };
    float *h;
    CU(cuMemAllocHost((void **)&h, N * sizeof(float)));
    for (int i = 0; i < N; i++)
        h[i] = (float)i;
    CUstream s1, s2;
    CU(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CU(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b;
    CU(cuMemAlloc(&a, N * sizeof(float)));
    CU(cuMemAlloc(&b, N * sizeof(float)));
    CUevent done_a, t0, t1;
    CU(cuEventCreate(&done_a, CU_EVENT_DISABLE_TIMING));
    CU(cuEventCreate(&t0, 0));
    CU(cuEventCreate(&t1, 0));
    CU(cuEventRecord(t0, s1));
    CU(cuMemcpyHtoDAsync(a, h, N * sizeof(float), s1));
    CU(cuEventRecord(done_a, s1));
    CU(cuStreamWaitEvent(s2, done_a, 0)); /* s2 must see s1's copy */
    CU(cuMemcpyDtoDAsync(b, a, N * sizeof(float), s2));
    CU(cuMemsetD32Async(a, 0, N, s2));
    CU(cuMemcpyDtoHAsync(h, b, N * sizeof(float), s2));
    CU(cuEventRecord(t1, s2));
    CU(cuEventSynchronize(t1));
    CU(cuStreamSynchronize(s1));
    for (int i = 0; i < N; i += 4097)
        CHECK(h[i] == (float)i);
    float ms = -1;
    CU(cuEventElapsedTime(&ms, t0, t1));
    CHECK(ms >= 0);
    CHECK(cuEventElapsedTime(&ms, done_a, t1) == CUDA_ERROR_INVALID_HANDLE); /* timing disabled */
    CU(cuStreamQuery(s2));
    CU(cuEventDestroy(done_a));
    CU(cuEventDestroy(t0));
    CU(cuEventDestroy(t1));
    CU(cuStreamDestroy(s1));
    CU(cuStreamDestroy(s2));
    CU(cuMemFree(a));
    CU(cuMemFree(b));
    CU(cuMemFreeHost(h));
    return 0;
}

static int t_vmm(void)
{
    int vmm = 0;
    CU(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, g_dev));
    CHECK(vmm == 1);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = g_dev;
    size_t gran;
    CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(gran > 0);
    size_t size = 2 * gran;
    CUdeviceptr va;
    CU(cuMemAddressReserve(&va, size, 0, 0, 0));
    CUmemGenericAllocationHandle h;
    CU(cuMemCreate(&h, size, &prop, 0));
    CU(cuMemMap(va, size, 0, h, 0));
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof(acc));
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(cuMemSetAccess(va, size, &acc, 1));
    unsigned pattern[64], back[64];
    for (int i = 0; i < 64; i++)
        pattern[i] = 0x1000u + (unsigned)i;
    CU(cuMemcpyHtoD(va + gran + 256, pattern, sizeof(pattern)));
    CU(cuCtxSynchronize());
    /* Unmap keeps the address reserved and the physical memory in the handle. */
    CU(cuMemUnmap(va, size));
    CU(cuMemMap(va, size, 0, h, 0));
    CU(cuMemSetAccess(va, size, &acc, 1));
    CU(cuMemcpyDtoH(back, va + gran + 256, sizeof(back)));
    CHECK(memcmp(pattern, back, sizeof(back)) == 0);
    CU(cuMemUnmap(va, size));
    CU(cuMemRelease(h));
    CU(cuMemAddressFree(va, size));
    return 0;
}

static int t_errors(void)
{
    CUdeviceptr p;
    int x = 0;
    size_t fr, total;
    CU(cuMemGetInfo(&fr, &total));
    CHECK(cuMemAlloc(&p, total + ((size_t)1 << 30)) == CUDA_ERROR_OUT_OF_MEMORY);
    CHECK(cuMemAlloc(NULL, 64) == CUDA_ERROR_INVALID_VALUE);
    CU(cuMemAlloc(&p, 64));
    CU(cuMemFree(p));
    if (g_strict) {
        CHECK(cuMemFree(p) == CUDA_ERROR_INVALID_VALUE); /* already freed */
        CHECK(cuMemFree((CUdeviceptr)(uintptr_t)&x) == CUDA_ERROR_INVALID_VALUE); /* not device memory */
        /* Copies from or to memory that is not (or no longer) device memory. */
        int y = 0;
        CHECK(cuMemcpyDtoH(&y, p, sizeof(y)) == CUDA_ERROR_INVALID_VALUE);
        CHECK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)&x, &y, sizeof(y)) == CUDA_ERROR_INVALID_VALUE);
        CU(cuMemAlloc(&p, 64));
        char big[128] = {0};
        CHECK(cuMemcpyHtoD(p, big, sizeof(big)) == CUDA_ERROR_INVALID_VALUE); /* past its end */
        CHECK(cuMemsetD32(p + 1, 0, 1) == CUDA_ERROR_INVALID_VALUE);        /* misaligned */
        CU(cuMemFree(p));
        CHECK(cuStreamSynchronize((CUstream)(uintptr_t)&x) == CUDA_ERROR_INVALID_HANDLE ||
              cuStreamSynchronize((CUstream)(uintptr_t)&x) == CUDA_ERROR_INVALID_CONTEXT);
    }
    const char *s = NULL;
    CU(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &s));
    CHECK(s && strcmp(s, "CUDA_ERROR_INVALID_VALUE") == 0);
    CU(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
    CHECK(s && strlen(s) > 0);
    CU(cuCtxSynchronize()); /* refused calls leave the context usable */
    return 0;
}

typedef CUresult (*memalloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*memfree_fn)(CUdeviceptr);
typedef CUresult (*sync_fn)(CUstream);

static int t_get_proc_address(void)
{
    void *fa = NULL, *ff = NULL, *fs = NULL, *fs_pt = NULL;
    CUdriverProcAddressQueryResult st;
    CU(cuGetProcAddress("cuMemAlloc", &fa, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS && fa);
    CU(cuGetProcAddress("cuMemFree", &ff, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    CU(cuGetProcAddress("cuStreamSynchronize", &fs, 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st));
    CU(cuGetProcAddress("cuStreamSynchronize", &fs_pt, 12000,
                        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    CHECK(fs && fs_pt && fs != fs_pt);
    memalloc_fn alloc;
    memfree_fn fr;
    sync_fn sync;
    memcpy(&alloc, &fa, sizeof(fa));
    memcpy(&fr, &ff, sizeof(ff));
    memcpy(&sync, &fs_pt, sizeof(fs_pt));
    CUdeviceptr p;
    CU(alloc(&p, 4096));
    CU(cuMemsetD8Async(p, 7, 4096, CU_STREAM_PER_THREAD));
    CU(sync(NULL));
    unsigned char c = 0;
    CU(cuMemcpyDtoH(&c, p + 4095, 1));
    CHECK(c == 7);
    CU(fr(p));
    void *none = (void *)1;
    /* cuda.h: an invalid symbol gives CUDA_SUCCESS with pfn set to NULL and
     * the reason in symbolStatus. */
    CHECK(cuGetProcAddress("cuDefinitelyNotAFunction", &none, 12000, 0, &st) == CUDA_SUCCESS);
    CHECK(none == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    return 0;
}

int main(void)
{
    /* On simcuda: device memory kept out of this process, as on a GPU
     * machine (a real driver ignores the variable). */
    setenv("SIMCUDA_ISOLATION", "1", 1);
    g_strict = getenv("SIMCUDA_DEVICES") != NULL;
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) {
        printf("cuInit failed: %d\n[  FAILED  ] 1 test(s).\n", (int)r);
        return 1;
    }
    if (cuDeviceGet(&g_dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&g_ctx, g_dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS) {
        printf("no context\n[  FAILED  ] 1 test(s).\n");
        return 1;
    }
    run("devices", t_devices);
    run("contexts", t_contexts);
    run("memory_copies", t_memory_copies);
    run("pinned_stream_events", t_pinned_stream_events);
    run("vmm", t_vmm);
    run("errors", t_errors);
    run("get_proc_address", t_get_proc_address);
    cuDevicePrimaryCtxRelease(g_dev);
    if (g_fail) {
        printf("[  PASSED  ] %d test(s).\n[  FAILED  ] %d test(s).\n", g_pass, g_fail);
        return 1;
    }
    printf("[  PASSED  ] %d test(s).\n", g_pass);
    return 0;
}
