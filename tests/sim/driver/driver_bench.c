/* simcuda driver benchmark: cost of the hot paths as a caller sees them,
 * without isolation (device work in the process) and with it
 * (SIMCUDA_ISOLATION=1: device work in the device server): enqueue of a
 * kernel launch, of an async copy, of a host function; a stream
 * synchronisation with nothing to do; a launch and its synchronisation (a
 * round trip through the device); a small synchronous copy; alloc/free.
 * The program runs itself once per mode. Prints figures, never fails on
 * speed. */
#include <cuda.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

static int measure(const char *mode)
{
    CUdevice d;
    CUcontext c;
    CU(cuInit(0));
    CU(cuDeviceGet(&d, 0));
    CU(cuDevicePrimaryCtxRetain(&c, d));
    CU(cuCtxSetCurrent(c));
    const char *path = getenv("ES_BUILD");
    char fb[4096];
    snprintf(fb, sizeof(fb), "%s/tests/sim/driver/kernels.fatbin", path ? path : "build");
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
    enum { ITERS = 20000, RT = 2000 };
    printf("-- %s\n", mode);
    const char *tag = getenv("SIMCUDA_ISOLATION"); /* the BENCH lines' suffix */
    if (!tag || strcmp(tag, "1") != 0)
        tag = "0";
    double t0 = now_ns();
    for (int i = 0; i < ITERS; i++)
        cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s, args, NULL);
    double t1 = now_ns();
    CU(cuStreamSynchronize(s));
    double t2 = now_ns();
    printf("launch enqueue        %8.0f ns/op (drained at %8.0f ns/op)\n", (t1 - t0) / ITERS,
           (t2 - t0) / ITERS);
    printf("BENCH simcuda.launch-enqueue.iso%s %.0f ns # simcuda cuLaunchKernel enqueue, %s\n",
           tag, (t1 - t0) / ITERS, mode);
    void *pinned;
    CU(cuMemAllocHost(&pinned, 4096));
    t0 = now_ns();
    for (int i = 0; i < ITERS; i++)
        cuMemcpyHtoDAsync(a, pinned, 256, s);
    t1 = now_ns();
    CU(cuStreamSynchronize(s));
    t2 = now_ns();
    printf("async copy enqueue    %8.0f ns/op (256 B from pinned; drained at %8.0f ns/op)\n",
           (t1 - t0) / ITERS, (t2 - t0) / ITERS);
    t0 = now_ns();
    for (int i = 0; i < ITERS; i++)
        cuLaunchHostFunc(s, nop, NULL);
    t1 = now_ns();
    CU(cuStreamSynchronize(s));
    printf("host function enqueue %8.0f ns/op\n", (t1 - t0) / ITERS);
    t0 = now_ns();
    for (int i = 0; i < RT; i++)
        cuStreamSynchronize(s);
    t1 = now_ns();
    printf("synchronise (idle)    %8.0f ns/op\n", (t1 - t0) / RT);
    t0 = now_ns();
    for (int i = 0; i < RT; i++) {
        cuLaunchHostFunc(s, nop, NULL);
        cuStreamSynchronize(s);
    }
    t1 = now_ns();
    printf("host fn + sync        %8.0f ns/op\n", (t1 - t0) / RT);
    t0 = now_ns();
    for (int i = 0; i < RT; i++) {
        cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s, args, NULL);
        cuStreamSynchronize(s);
    }
    t1 = now_ns();
    printf("launch + sync         %8.0f ns/op (round trip through the device)\n", (t1 - t0) / RT);
    printf("BENCH simcuda.launch-sync.iso%s %.0f ns # simcuda launch + cuStreamSynchronize, %s\n",
           tag, (t1 - t0) / RT, mode);
    int word = 0;
    t0 = now_ns();
    for (int i = 0; i < RT; i++)
        cuMemcpyDtoH(&word, a, sizeof(word));
    t1 = now_ns();
    printf("sync copy 4 B to host %8.0f ns/op\n", (t1 - t0) / RT);
    t0 = now_ns();
    for (int i = 0; i < RT; i++) {
        CUdeviceptr p;
        cuMemAlloc(&p, 1 << 20);
        cuMemFree(p);
    }
    t1 = now_ns();
    printf("alloc + free 1 MiB    %8.0f ns/op\n", (t1 - t0) / RT);
    cuMemFreeHost(pinned);
    cuStreamDestroy(s);
    cuModuleUnload(m);
    cuDevicePrimaryCtxRelease(d);
    return 0;
}

int main(int argc, char **argv)
{
    (void)argc;
    if (getenv("SIMCUDA_ISOLATION"))
        return measure(strcmp(getenv("SIMCUDA_ISOLATION"), "1") == 0
                           ? "SIMCUDA_ISOLATION=1 (device work in the device server)"
                           : "SIMCUDA_ISOLATION=0 (device work in the process)");
    char shm[64];
    snprintf(shm, sizeof(shm), "/simcuda-bench-%d", (int)getpid());
    setenv("SIMCUDA_SHM_NAME", shm, 1);
    int rc = 0;
    const char *modes[] = {"0", "1"};
    for (int i = 0; i < 2; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("SIMCUDA_ISOLATION", modes[i], 1);
            execv("/proc/self/exe", argv);
            _exit(127);
        }
        int st;
        if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
            rc = 1;
    }
    shm_unlink(shm);
    return rc;
}
