/* simcuda driver benchmark: cost of the hot paths as a caller sees them
 * (enqueue of a kernel launch, of an async copy, of a host function; a
 * stream synchronisation round trip; alloc/free). Prints figures, never
 * fails on speed. */
#include <cuda.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

#define CU(x)                                                        \
    do {                                                             \
        CUresult r_ = (x);                                           \
        if (r_) {                                                    \
            fprintf(stderr, "%s failed: %d\n", #x, (int)r_);         \
            return 1;                                                \
        }                                                            \
    } while (0)

static void nop(void *arg) { (void)arg; }

int main(void)
{
    char shm[64];
    snprintf(shm, sizeof(shm), "/simcuda-bench-%d", (int)getpid());
    setenv("SIMCUDA_SHM_NAME", shm, 1);
    CUdevice d;
    CUcontext c;
    CU(cuInit(0));
    CU(cuDeviceGet(&d, 0));
    CU(cuDevicePrimaryCtxRetain(&c, d));
    CU(cuCtxSetCurrent(c));
    const char *path = getenv("ES_BUILD");
    char fb[4096];
    snprintf(fb, sizeof(fb), "%s/tests/sim_driver/kernels.fatbin", path ? path : "build");
    FILE *f = fopen(fb, "rb");
    if (!f) {
        fprintf(stderr, "no %s\n", fb);
        return 1;
    }
    static char image[1 << 20];
    size_t n = fread(image, 1, sizeof(image), f);
    fclose(f);
    (void)n;
    CUmodule m;
    CUfunction fn;
    CU(cuModuleLoadData(&m, image));
    CU(cuModuleGetFunction(&fn, m, "sim_add"));
    CUstream s;
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b, cc;
    CU(cuMemAlloc(&a, 4096));
    CU(cuMemAlloc(&b, 4096));
    CU(cuMemAlloc(&cc, 4096));
    int zero = 0;
    void *args[] = {&a, &b, &cc, &zero};
    enum { ITERS = 20000 };
    double t0 = now_ns();
    for (int i = 0; i < ITERS; i++)
        cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s, args, NULL);
    double t1 = now_ns();
    CU(cuStreamSynchronize(s));
    double t2 = now_ns();
    printf("launch enqueue        %8.0f ns/op (drained at %8.0f ns/op)\n", (t1 - t0) / ITERS,
           (t2 - t0) / ITERS);
    void *pinned;
    CU(cuMemAllocHost(&pinned, 4096));
    t0 = now_ns();
    for (int i = 0; i < ITERS; i++)
        cuMemcpyHtoDAsync(a, pinned, 256, s);
    t1 = now_ns();
    CU(cuStreamSynchronize(s));
    printf("async copy enqueue    %8.0f ns/op (256 B from pinned)\n", (t1 - t0) / ITERS);
    t0 = now_ns();
    for (int i = 0; i < ITERS; i++)
        cuLaunchHostFunc(s, nop, NULL);
    t1 = now_ns();
    CU(cuStreamSynchronize(s));
    printf("host function enqueue %8.0f ns/op\n", (t1 - t0) / ITERS);
    t0 = now_ns();
    for (int i = 0; i < 2000; i++) {
        cuLaunchHostFunc(s, nop, NULL);
        cuStreamSynchronize(s);
    }
    t1 = now_ns();
    printf("enqueue + sync        %8.0f ns/op\n", (t1 - t0) / 2000);
    t0 = now_ns();
    for (int i = 0; i < 2000; i++) {
        CUdeviceptr p;
        cuMemAlloc(&p, 1 << 20);
        cuMemFree(p);
    }
    t1 = now_ns();
    printf("alloc + free 1 MiB    %8.0f ns/op\n", (t1 - t0) / 2000);
    cuMemFreeHost(pinned);
    cuStreamDestroy(s);
    cuModuleUnload(m);
    cuDevicePrimaryCtxRelease(d);
    shm_unlink(shm);
    return 0;
}
