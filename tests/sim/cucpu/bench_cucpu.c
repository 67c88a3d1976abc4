/* Bench of the CUDA-on-CPU layer (make bench; figures only): the cost of a
 * launch (a twin called directly, and cuLaunchKernel through simcuda's
 * driver), of a thread in a barrier-free block (an elementwise kernel's
 * throughput, one OS thread and the pool), and of a __syncthreads per
 * thread. Kernels: tests/sim/cucpu/test_kernels.cu. */
#include "sim/include/simcuda_twin.h"
#include "tests/harness.h"

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int simcuda_twin_cucpu_t_axpb(const simcuda_launch_t *L);
int simcuda_twin_cucpu_t_barriers(const simcuda_launch_t *L);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static simcuda_launch_t cfg(unsigned gx, unsigned bx, void **params)
{
    simcuda_launch_t L;
    memset(&L, 0, sizeof(L));
    L.abi = SIMCUDA_TWIN_ABI;
    L.grid[0] = gx;
    L.grid[1] = L.grid[2] = 1;
    L.block[0] = bx;
    L.block[1] = L.block[2] = 1;
    L.params = params;
    return L;
}

/* Median-free but warm: best of 3 rounds of `reps` launches, seconds each. */
static double best(int (*fn)(const simcuda_launch_t *), simcuda_launch_t *L, int reps)
{
    double b = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        for (int i = 0; i < reps; i++) {
            L->nondet_seed = (uint64_t)i * 7919u;
            if (fn(L) != 0) {
                printf("launch failed\n");
                exit(1);
            }
        }
        double t = (now() - t0) / reps;
        if (t < b)
            b = t;
    }
    return b;
}

static void elementwise(const char *how)
{
    enum { N = 1 << 22 };
    float *x = calloc(N, sizeof(float));
    if (!x)
        exit(1);
    float a = 1.0f;
    int n = N;
    void *p[] = {&x, &a, &n};
    simcuda_launch_t L = cfg(N / 256, 256, p);
    double t = best(simcuda_twin_cucpu_t_axpb, &L, 5);
    printf("elementwise x = a*x + 1, 4M floats, %-16s %8.2f ms (%.1f ns/element)\n", how,
           t * 1e3, t * 1e9 / N);
    printf("BENCH cucpu.elementwise-4M.%s %.3f ms # cucpu kernel x = a*x + 1 over 4M floats, %s\n",
           strcmp(how, "the pool") == 0 ? "pool" : "1thread", t * 1e3, how);
    free(x);
}

static void direct(void)
{
    enum { N = 1 << 22 };
    float *x = calloc(N, sizeof(float));
    int *out = calloc(64 * 256, sizeof(int));
    if (!x || !out)
        exit(1);
    float a = 1.0f;
    int n = N;
    void *p[] = {&x, &a, &n};
    simcuda_launch_t L = cfg(1, 1, p);
    printf("launch, 1 block x 1 thread (twin called directly)   %8.0f ns\n",
           best(simcuda_twin_cucpu_t_axpb, &L, 20000) * 1e9);
    L = cfg(1, 256, p);
    double t = best(simcuda_twin_cucpu_t_axpb, &L, 5000);
    printf("launch, 1 block x 256 threads, no barrier           %8.0f ns (%.1f ns/thread)\n",
           t * 1e9, t * 1e9 / 256);
    elementwise("1 OS thread");
    int rounds = 16;
    void *q[] = {&rounds, &out};
    L = cfg(64, 256, q);
    double tb = best(simcuda_twin_cucpu_t_barriers, &L, 5);
    rounds = 0;
    double t0 = best(simcuda_twin_cucpu_t_barriers, &L, 5);
    printf("__syncthreads, 64 blocks x 256 threads x 16           %8.1f ns per thread and barrier\n",
           (tb - t0) * 1e9 / (64.0 * 256 * 16));
    free(x);
    free(out);
}

static void through_driver(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUstream s;
    size_t len;
    void *img = es_read_file(es_build_path(CUCPU_TEST_FATBIN), &len);
    int bad = !img || cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
              cuCtxSetCurrent(ctx) || cuModuleLoadData(&mod, img);
    free(img);
    if (bad || cuModuleGetFunction(&fn, mod, "cucpu_t_axpb") ||
        cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) {
        printf("through the driver: setup failed (SIMCUDA_KERNELS must list %s)\n",
               CUCPU_TEST_TWIN);
        return;
    }
    CUdeviceptr dx;
    if (cuMemAlloc(&dx, 4096))
        return;
    float a = 1.0f;
    int n = 1;
    void *args[] = {&dx, &a, &n};
    enum { R = 20000 };
    cuStreamSynchronize(s);
    double t0 = now();
    for (int i = 0; i < R; i++)
        cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, args, NULL);
    double t1 = now();
    cuStreamSynchronize(s);
    double t2 = now();
    printf("cuLaunchKernel of a cucpu kernel (1x1) via simcuda     %8.0f ns enqueue, %.0f ns "
           "drained\n",
           (t1 - t0) / R * 1e9, (t2 - t0) / R * 1e9);
    printf("BENCH cucpu.launch-1x1 %.0f ns # cuLaunchKernel of a cucpu kernel through simcuda, "
           "drained\n", (t2 - t0) / R * 1e9);
    cuMemFree(dx);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--elementwise") == 0) {
        elementwise("the pool");
        return 0;
    }
    printf("cucpu bench (figures only)\n");
    const char *k = getenv("SIMCUDA_KERNELS");
    char kern[8192];
    snprintf(kern, sizeof(kern), "%s%s%s", k ? k : "", k && *k ? ":" : "",
             es_build_path(CUCPU_TEST_TWIN));
    setenv("SIMCUDA_KERNELS", kern, 1);
    setenv("SIMCUDA_CPU_THREADS", "1", 1);
    direct();
    through_driver();
    /* The pool: SIMCUDA_CPU_THREADS at its default (the CPUs, at most 8). */
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len > 0) {
        self[len] = 0;
        char *av[] = {self, "--elementwise", NULL};
        char *env[] = {"SIMCUDA_CPU_THREADS=", NULL};
        es_proc_result_t r;
        if (es_run(av, env, 120, &r) == 0) {
            fputs(r.out, stdout);
            es_proc_result_free(&r);
        }
    }
    return 0;
}
