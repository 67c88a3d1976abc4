/* A client written against cuda.h only, run under the shim by
 * tests/move/est_test.c: an "EST" with every kind of state a move must
 * carry (contexts, streams with flags and a priority, an event, modules
 * loaded from a file and from a freed copy of an image, cuMemAlloc, pitch,
 * stream-ordered and pool memory, its own VMM allocation, pinned host
 * memory), doing steps whose state chains through device memory. It checks
 * from its own side that its handles and pointers never change, and prints
 * a checksum of the whole run.
 *
 *   move_client run STEPS [STEP:SLOT]...   moves through easyscale_move
 *                                          (SLOT -1 parks: not from here)
 *   move_client wait STEPS                 steps of 50 ms; moves come from
 *                                          signals (EASYSCALE_MOVE_SIGNAL)
 *   move_client capture                    a move requested during a stream
 *                                          capture runs after it
 *   move_client coverage                   every driver function that takes a
 *                                          virtual handle, asked for through
 *                                          cuGetProcAddress and dlsym: the
 *                                          answers that are the driver's own
 *                                          ("leak NAME")
 *   move_client occupancy                  the occupancy calculator on a
 *                                          function of the EST's module
 *   move_client runtime LIB                LIB (a stand-in for libcudart)
 *                                          asks the driver for the current
 *                                          context; then a move to slot 1
 *   move_client devices LIB                the device count, the device of the
 *                                          current context and its primary
 *                                          context, as the client and as LIB
 *                                          (looked up like a library) see them
 *
 * The module image: $ES_SWAPSUM_FATBIN, else $ES_BUILD/gen/es_swapsum.fatbin.
 *
 * Output lines: "ready", "step N device D gpu G" (D: the device as the
 * client sees it, G: the GPU the shim runs it on), "checksum HEX", "handles same",
 * "FAIL ..." (exit 1). */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_handle_fns.h"
#include "kernels/swapsum.h"
#include "shim/easyscale.h"

#define MiB (1024UL * 1024)
#define NCH 2 /* chunks hashed per step */

#define CK(x)                                                                  \
    do {                                                                       \
        CUresult r_ = (x);                                                     \
        if (r_ != CUDA_SUCCESS) {                                              \
            const char *n_ = "?";                                              \
            cuGetErrorName(r_, &n_);                                           \
            printf("FAIL %s = %s (line %d)\n", #x, n_, __LINE__);              \
            fflush(stdout);                                                    \
            exit(1);                                                           \
        }                                                                      \
    } while (0)
#define EXPECT(c)                                                              \
    do {                                                                       \
        if (!(c)) {                                                            \
            printf("FAIL %s (line %d)\n", #c, __LINE__);                       \
            fflush(stdout);                                                    \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

typedef struct est {
    CUcontext ctx;
    CUstream s1, s2;
    CUevent ev;
    CUmodule mfile, mcopy;
    CUfunction f1, f2;
    CUdeviceptr big, small, pitched, async, sums, vmm_va;
    size_t pitch, vmm_size;
    CUmemGenericAllocationHandle vmm;
    CUmemoryPool pool;
    uint64_t *host;         /* pinned */
    uint64_t chain;
    int dev;                /* the device it selected */
} est_t;

static est_t E, E0;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x9e3779b97f4a7c15ULL;
    return x ^ (x >> 29);
}

static void pattern(uint64_t *h, size_t words, uint64_t seed)
{
    for (size_t i = 0; i < words; i++)
        h[i] = mix(seed + i);
}

static void *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static const char *image_path(void)
{
    static char path[512];
    if (getenv("ES_SWAPSUM_FATBIN")) /* the GPU check's pack */
        snprintf(path, sizeof(path), "%s", getenv("ES_SWAPSUM_FATBIN"));
    else
        snprintf(path, sizeof(path), "%s/gen/es_swapsum.fatbin",
                 getenv("ES_BUILD") ? getenv("ES_BUILD") : "build");
    return path;
}

static void est_make(int dev)
{
    const char *path = image_path();
    E.dev = dev;
    CK(cuInit(0));
    CK(cuDevicePrimaryCtxRetain(&E.ctx, dev));
    CK(cuCtxSetCurrent(E.ctx));
    CK(cuStreamCreate(&E.s1, CU_STREAM_NON_BLOCKING));
    int least, greatest;
    CK(cuCtxGetStreamPriorityRange(&least, &greatest));
    CK(cuStreamCreateWithPriority(&E.s2, 0, greatest));
    CK(cuEventCreate(&E.ev, CU_EVENT_DISABLE_TIMING));
    CK(cuModuleLoad(&E.mfile, path));
    size_t len;
    void *img = read_file(path, &len);
    EXPECT(img != NULL);
    CK(cuModuleLoadData(&E.mcopy, img));
    memset(img, 0, len); /* the driver (and the shim) keep their own copy */
    free(img);
    CK(cuModuleGetFunction(&E.f1, E.mfile, "es_swapsum"));
    CK(cuModuleGetFunction(&E.f2, E.mcopy, "es_swapsum"));
    CK(cuMemAlloc(&E.big, 6 * MiB));
    CK(cuMemAlloc(&E.small, 4096));
    CK(cuMemAllocPitch(&E.pitched, &E.pitch, 1000, 64, 4));
    CK(cuMemAllocAsync(&E.async, NCH * ES_SWAPSUM_CHUNK, E.s1));
    CK(cuMemAlloc(&E.sums, 4096));
    CK(cuMemAllocHost((void **)&E.host, NCH * ES_SWAPSUM_CHUNK));
    /* the application's own VMM */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t g = 0;
    CK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    E.vmm_size = 2 * g;
    CK(cuMemCreate(&E.vmm, E.vmm_size, &prop, 0));
    CK(cuMemAddressReserve(&E.vmm_va, E.vmm_size, 0, 0, 0));
    CK(cuMemMap(E.vmm_va, E.vmm_size, 0, E.vmm, 0));
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, dev },
                            CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CK(cuMemSetAccess(E.vmm_va, E.vmm_size, &acc, 1));
    /* pools: the shim's (simcuda has none: without the shim, none here) */
    CUresult pr = cuDeviceGetDefaultMemPool(&E.pool, dev);
    if (pr != CUDA_ERROR_NOT_SUPPORTED)
        CK(pr);
    /* static content, checked at the end */
    pattern(E.host, NCH * ES_SWAPSUM_CHUNK / 8, 7);
    CK(cuMemcpyHtoDAsync(E.big, E.host, NCH * ES_SWAPSUM_CHUNK, E.s1));
    size_t n = E.vmm_size < NCH * ES_SWAPSUM_CHUNK ? E.vmm_size : NCH * ES_SWAPSUM_CHUNK;
    CK(cuMemcpyHtoDAsync(E.vmm_va, E.host, n, E.s1));
    CK(cuMemsetD32Async(E.small, 0x5a5a5a5a, 1024, E.s2));
    CK(cuMemsetD2D32Async(E.pitched, E.pitch, 0x01020304, 250, 64, E.s2));
    CK(cuStreamSynchronize(E.s1));
    CK(cuStreamSynchronize(E.s2));
    E0 = E;
    printf("ready\n");
    fflush(stdout);
}

/* One step: the data is a function of the chain; its hashes, computed on
 * the device by both modules, feed the chain. */
static void est_step(int i)
{
    pattern(E.host, NCH * ES_SWAPSUM_CHUNK / 8, E.chain ^ (uint64_t)i);
    CK(cuMemcpyHtoDAsync(E.async, E.host, NCH * ES_SWAPSUM_CHUNK, E.s1));
    CK(cuEventRecord(E.ev, E.s1));
    CK(cuStreamWaitEvent(E.s2, E.ev, 0));
    es_swapsum_args_t a1 = { (const es_u64 *)E.async, (es_u64 *)E.sums, NCH };
    es_swapsum_args_t a2 = { (const es_u64 *)E.async, (es_u64 *)(E.sums + NCH * 8), NCH };
    void *p1[] = { &a1 }, *p2[] = { &a2 };
    CK(cuLaunchKernel(E.f1, NCH, 1, 1, ES_SWAPSUM_THREADS, 1, 1, 0, E.s2, p1, NULL));
    CK(cuLaunchKernel(E.f2, NCH, 1, 1, ES_SWAPSUM_THREADS, 1, 1, 0, E.s2, p2, NULL));
    uint64_t got[2 * NCH];
    CK(cuMemcpyDtoHAsync(got, E.sums, sizeof(got), E.s2));
    CK(cuStreamSynchronize(E.s2));
    for (int c = 0; c < NCH; c++) {
        EXPECT(got[c] == got[NCH + c]); /* both modules, the same kernel */
        E.chain = mix(E.chain ^ got[c]);
    }
    CUdevice d = -1;
    CK(cuCtxGetDevice(&d));
    int (*where)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "easyscale_where");
    printf("step %d device %d gpu %d\n", i, (int)d, where ? where() : (int)d);
    fflush(stdout);
}

/* From the application's side: the same values, and the getters agree. */
static void est_check(void)
{
    EXPECT(memcmp(&E, &E0, offsetof(est_t, chain)) == 0);
    CUcontext c = NULL;
    CK(cuCtxGetCurrent(&c));
    EXPECT(c == E.ctx);
    CK(cuStreamGetCtx(E.s1, &c));
    EXPECT(c == E.ctx);
    CUdeviceptr base;
    size_t size;
    CK(cuMemGetAddressRange(&base, &size, E.big + 100));
    EXPECT(base == E.big && size == 6 * MiB);
    CUmemGenericAllocationHandle h = 0;
    CK(cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)E.vmm_va));
    EXPECT(h == E.vmm);
    CK(cuMemRelease(h));
    int prio = 0, least, greatest;
    CK(cuStreamGetPriority(E.s2, &prio));
    CK(cuCtxGetStreamPriorityRange(&least, &greatest));
    EXPECT(prio == greatest);
    unsigned fl = 0;
    CK(cuStreamGetFlags(E.s1, &fl));
    EXPECT(fl == CU_STREAM_NON_BLOCKING);
    CUmemoryPool p = NULL;
    if (E.pool) {
        CK(cuDeviceGetDefaultMemPool(&p, E.dev)); /* the device it selected */
        EXPECT(p == E.pool); /* one default pool, wherever the EST is */
    }
    /* the static content */
    uint64_t *want = malloc(NCH * ES_SWAPSUM_CHUNK), *got = malloc(NCH * ES_SWAPSUM_CHUNK);
    pattern(want, NCH * ES_SWAPSUM_CHUNK / 8, 7);
    CK(cuMemcpyDtoH(got, E.big, NCH * ES_SWAPSUM_CHUNK));
    EXPECT(memcmp(got, want, NCH * ES_SWAPSUM_CHUNK) == 0);
    size_t n = E.vmm_size < NCH * ES_SWAPSUM_CHUNK ? E.vmm_size : NCH * ES_SWAPSUM_CHUNK;
    CK(cuMemcpyDtoH(got, E.vmm_va, n));
    EXPECT(memcmp(got, want, n) == 0);
    uint32_t w[1024];
    CK(cuMemcpyDtoH(w, E.small, sizeof(w)));
    for (int i = 0; i < 1024; i++)
        EXPECT(w[i] == 0x5a5a5a5a);
    CK(cuMemcpyDtoH(w, E.pitched + E.pitch * 63, 1000));
    EXPECT(w[0] == 0x01020304 && w[249] == 0x01020304);
    free(want);
    free(got);
    printf("handles same\n");
}

static easyscale_move_fn hook(void)
{
    return (easyscale_move_fn)dlsym(RTLD_DEFAULT, "easyscale_move");
}

/* ---- capture ---------------------------------------------------------------------------- */

static volatile int helper_rc = 99;
static void *request_move(void *arg)
{
    helper_rc = hook()((int)(intptr_t)arg);
    return NULL;
}

static int capture_mode(void)
{
    est_make(0);
    CUstream cs;
    CK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
    CUresult r = cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_RELAXED);
    if (r == CUDA_ERROR_NOT_SUPPORTED) {
        printf("capture not supported\n");
        return 0;
    }
    CK(r);
    unsigned (*moves)(void) = (unsigned (*)(void))dlsym(RTLD_DEFAULT, "easyscale_moves");
    unsigned m0 = moves ? moves() : 0;
    pthread_t t;
    pthread_create(&t, NULL, request_move, (void *)(intptr_t)1);
    pthread_join(t, NULL);
    /* during the capture: asked, not done */
    printf("requested %d moves %u\n", helper_rc, moves ? moves() - m0 : 0);
    CK(cuMemsetD32Async(E.small, 1, 16, cs));
    CUgraph g = NULL;
    CK(cuStreamEndCapture(cs, &g));
    printf("captured moves %u\n", moves ? moves() - m0 : 0);
    /* a graph holds real handles: a move waits for it to go */
    CK(cuGraphDestroy(g));
    est_step(0); /* the next call moves */
    printf("after moves %u\n", moves ? moves() - m0 : 0);
    return 0;
}

/* ---- coverage ------------------------------------------------------------------------------ */

/* Whether p is a function of the driver itself (not the shim's). */
static int in_driver(const void *p)
{
    Dl_info di;
    if (!p || !dladdr(p, &di) || !di.dli_fname)
        return 0;
    const char *b = strrchr(di.dli_fname, '/');
    b = b ? b + 1 : di.dli_fname;
    return strncmp(b, "libcuda.so", 10) == 0;
}

static int coverage_mode(void)
{
    int n = 0, leaks = 0;
    CK(cuInit(0));
#define ES_ASK(sym, base)                                                                      \
    {                                                                                          \
        void *p = NULL;                                                                        \
        CUdriverProcAddressQueryResult st;                                                     \
        n++;                                                                                   \
        if (cuGetProcAddress(base, &p, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st) ==             \
                CUDA_SUCCESS && in_driver(p)) {                                                \
            printf("leak getproc %s\n", base);                                                 \
            leaks++;                                                                           \
        }                                                                                      \
        if (in_driver(dlsym(RTLD_DEFAULT, #sym))) {                                            \
            printf("leak dlsym %s\n", #sym);                                                   \
            leaks++;                                                                           \
        }                                                                                      \
    }
    ES_CUDA_HANDLE_FNS(ES_ASK)
#undef ES_ASK
    printf("coverage %d functions, leaks %d\n", n, leaks);
    return 0;
}

/* ---- occupancy and the runtime ------------------------------------------------------------- */

static size_t dyn_smem(int block)
{
    return (size_t)block * 16;
}

static int occupancy_mode(void)
{
    est_make(0);
    int blocks = -1, grid = -1, best = -1;
    size_t avail = 0;
    CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, E.f1, 256, 4096));
    CK(cuOccupancyAvailableDynamicSMemPerBlock(&avail, E.f1, 4, 256));
    CK(cuOccupancyMaxPotentialBlockSize(&grid, &best, E.f1, dyn_smem, 0, 0));
    printf("occupancy blocks %d avail %zu grid %d block %d\n", blocks, avail, grid, best);
    /* a library's global (simcuda has none: not found, on a valid handle) */
    size_t len;
    void *img = read_file(image_path(), &len);
    EXPECT(img != NULL);
    CUlibrary lib;
    CK(cuLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0));
    CUdeviceptr g;
    size_t gb;
    const char *n = "?";
    cuGetErrorName(cuLibraryGetGlobal(&g, &gb, lib, "es_no_such_global"), &n);
    printf("library global %s\n", n);
    CK(cuLibraryUnload(lib));
    free(img);
    return 0;
}

static int (*rt_bind)(int);
static CUcontext rt_seen;

static void *rt_thread(void *arg)
{
    (void)arg;
    CUstream s = NULL;
    if (rt_bind(0) == 0 && cuCtxGetCurrent(&rt_seen) == CUDA_SUCCESS && rt_seen &&
        cuStreamCreate(&s, 0) == CUDA_SUCCESS)
        cuStreamDestroy(s);
    return NULL;
}

static int runtime_mode(const char *lib)
{
    est_make(0);
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("FAIL dlopen %s: %s\n", lib, dlerror());
        return 1;
    }
    int (*probe)(CUcontext *);
    *(void **)&probe = dlsym(h, "rt_probe_current");
    EXPECT(probe != NULL);
    CUcontext mine = NULL, theirs = NULL;
    CK(cuCtxGetCurrent(&mine));
    EXPECT(probe(&theirs) == 0 && theirs != NULL);
    printf("runtime ctx %s\n", theirs == mine ? "same" : "real");
    /* a thread the runtime bound, then the application's call there */
    pthread_t t;
    rt_bind = (int (*)(int))dlsym(h, "rt_probe_bind");
    EXPECT(rt_bind != NULL);
    rt_seen = NULL;
    pthread_create(&t, NULL, rt_thread, NULL);
    pthread_join(t, NULL);
    printf("runtime thread %s\n", rt_seen == mine ? "same" : rt_seen ? "other" : "none");
    easyscale_move_fn mv = hook();
    printf("move to 1: %d\n", mv ? mv(1) : -1);
    est_step(0);
    est_check();
    return 0;
}

static int devices_mode(const char *lib)
{
    const char *lr = getenv("LOCAL_RANK");
    est_make(lr ? atoi(lr) : 0);
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("FAIL dlopen %s: %s\n", lib, dlerror());
        return 1;
    }
    int (*probe)(int *, int *, CUcontext *);
    *(void **)&probe = dlsym(h, "rt_probe_devices");
    EXPECT(probe != NULL);
    int n_app, n_lib, d_lib;
    CUdevice d_app;
    CUcontext mine, theirs = NULL;
    CK(cuDeviceGetCount(&n_app));
    CK(cuCtxGetDevice(&d_app));
    CK(cuCtxGetCurrent(&mine));
    int pr = probe(&n_lib, &d_lib, &theirs);
    if (pr != 0) {
        printf("FAIL the library's device calls: %d\n", pr);
        return 1;
    }
    printf("devices count %d/%d dev %d/%d ctx %s\n", n_app, n_lib, (int)d_app, d_lib,
           theirs == mine ? "same" : "other");
    est_step(0);
    est_check();
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2)
        return 2;
    if (!strcmp(argv[1], "capture"))
        return capture_mode();
    if (!strcmp(argv[1], "coverage"))
        return coverage_mode();
    if (!strcmp(argv[1], "occupancy"))
        return occupancy_mode();
    if (!strcmp(argv[1], "runtime") && argc > 2)
        return runtime_mode(argv[2]);
    if (!strcmp(argv[1], "devices") && argc > 2)
        return devices_mode(argv[2]);
    int steps = argc > 2 ? atoi(argv[2]) : 10;
    est_make(0);
    int wait = !strcmp(argv[1], "wait");
    for (int i = 0; i < steps; i++) {
        for (int k = 3; !wait && k < argc; k++) {
            int at, slot;
            if (sscanf(argv[k], "%d:%d", &at, &slot) == 2 && at == i) {
                easyscale_move_fn mv = hook();
                int rc = mv ? mv(slot) : -1;
                printf("move to %d: %d\n", slot, rc);
            }
        }
        est_step(i);
        if (wait)
            usleep(50000);
    }
    est_check();
    printf("checksum %016llx\n", (unsigned long long)E.chain);
    return 0;
}
