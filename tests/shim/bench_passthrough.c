/* Added cost of libeasyscale.so on a pass-through call: cuLaunchKernel,
 * cuMemcpyHtoDAsync (_v2) and cublasSgemm (_v2), each called many times
 * directly into simcuda and through the shim's wrapper, in one run (the
 * bench re-runs itself with and without the shim preloaded and prints both
 * medians and their difference). Prints figures, never fails on time.
 *
 * The calls are ones the library answers at once (an invalid function, a
 * zero-byte copy, an m = 0 GEMM), so the figure is the call path itself and
 * not the simulated work.
 */
#include <cublas_v2.h>
#include <cuda.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BATCH 2000
#define ROUNDS 201

typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*htod_t)(CUdeviceptr, const void *, size_t, CUstream);
typedef cublasStatus_t (*sgemm_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                  int, const float *, const float *, int, const float *, int,
                                  const float *, float *, int);
typedef CUresult (*init_t)(unsigned);
typedef CUresult (*devget_t)(CUdevice *, int);
typedef CUresult (*retain_t)(CUcontext *, CUdevice);
typedef CUresult (*setcur_t)(CUcontext);
typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef cublasStatus_t (*create_t)(cublasHandle_t *);

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void *sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    if (!p) {
        fprintf(stderr, "bench: %s not found\n", name);
        exit(1);
    }
    return p;
}

/* Measures in this process (with or without the shim): prints
 * "NAME median_ns" lines. */
static int measure(void)
{
    void *hc = dlopen("libcuda.so.1", RTLD_NOW), *hb = dlopen("libcublas.so.13", RTLD_NOW);
    if (!hc || !hb) {
        fprintf(stderr, "bench: simcuda not found (run under scripts/simenv)\n");
        return 1;
    }
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr d;
    cublasHandle_t h;
    if (((init_t)sym(hc, "cuInit"))(0) || ((devget_t)sym(hc, "cuDeviceGet"))(&dev, 0) ||
        ((retain_t)sym(hc, "cuDevicePrimaryCtxRetain"))(&ctx, dev) ||
        ((setcur_t)sym(hc, "cuCtxSetCurrent"))(ctx) ||
        ((alloc_t)sym(hc, "cuMemAlloc_v2"))(&d, 4096) ||
        ((create_t)sym(hb, "cublasCreate_v2"))(&h)) {
        fprintf(stderr, "bench: set-up failed\n");
        return 1;
    }
    /* Through dlsym, as frameworks do: the shim answers with its wrapper. */
    launch_t launch = (launch_t)sym(hc, "cuLaunchKernel");
    htod_t htod = (htod_t)sym(hc, "cuMemcpyHtoDAsync_v2");
    sgemm_t sgemm = (sgemm_t)sym(hb, "cublasSgemm_v2");
    static double t[ROUNDS];
    const float one = 1.0f;
    char src[8] = { 0 };
    const char *names[3] = { "cuLaunchKernel", "cuMemcpyHtoDAsync", "cublasSgemm" };
    for (int which = 0; which < 3; which++) {
        for (int r = 0; r < ROUNDS; r++) {
            double t0 = now_ns();
            for (int i = 0; i < BATCH; i++) {
                switch (which) {
                case 0: launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL); break;
                case 1: htod(d, src, 0, NULL); break;
                case 2:
                    sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 0, 0, &one, (float *)d, 1,
                          (float *)d, 1, &one, (float *)d, 1);
                    break;
                }
                __asm__ volatile("" ::: "memory");
            }
            t[r] = (now_ns() - t0) / BATCH;
        }
        qsort(t, ROUNDS, sizeof(t[0]), cmp_d);
        printf("%s %.2f\n", names[which], t[ROUNDS / 2]);
    }
    return 0;
}

/* Runs this program in measure mode, with the shim when shim != NULL. */
static int child(const char *self, const char *shim, double out[3])
{
    int pfd[2];
    if (pipe(pfd))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        if (shim) {
            const char *cur = getenv("LD_PRELOAD");
            char buf[PATH_MAX * 2];
            snprintf(buf, sizeof(buf), "%s%s%s", cur ? cur : "", cur ? ":" : "", shim);
            setenv("LD_PRELOAD", buf, 1);
        }
        execl(self, self, "--measure", (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    FILE *f = fdopen(pfd[0], "r");
    char name[64];
    double v;
    int n = 0;
    while (f && fscanf(f, "%63s %lf", name, &v) == 2 && n < 3)
        out[n++] = v;
    if (f)
        fclose(f);
    int st;
    waitpid(pid, &st, 0);
    return n == 3 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--measure"))
        return measure();
    char self[PATH_MAX], shim[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        return 1;
    self[n] = '\0';
    /* $(B)/bench/passthrough_bench -> $(B)/lib/libeasyscale.so */
    char *slash = strrchr(self, '/');
    *slash = '\0';
    snprintf(shim, sizeof(shim), "%s/../lib/libeasyscale.so", self);
    *slash = '/';
    if (access(shim, R_OK) != 0) {
        fprintf(stderr, "bench: %s not built\n", shim);
        return 1;
    }
    double direct[3], wrapped[3];
    setenv("EASYSCALE_DETERMINISM", "d1", 1);
    unsetenv("EASYSCALE_LOG");
    if (child(self, NULL, direct) || child(self, shim, wrapped)) {
        fprintf(stderr, "bench: a measuring run failed\n");
        return 1;
    }
    const char *names[3] = { "cuLaunchKernel", "cuMemcpyHtoDAsync", "cublasSgemm" };
    printf("passthrough_bench: median of %d rounds x %d calls, d1, calls answered at once\n",
           ROUNDS, BATCH);
    for (int i = 0; i < 3; i++)
        printf("  %-18s direct %7.2f ns  via shim %7.2f ns  added %6.2f ns/call\n", names[i],
               direct[i], wrapped[i], wrapped[i] - direct[i]);
    /* The machine-readable lines scripts/bench gathers (format there). */
    for (int i = 0; i < 3; i++) {
        printf("BENCH intercept.%s.direct %.2f ns # %s answered at once, no shim\n", names[i],
               direct[i], names[i]);
        printf("BENCH intercept.%s.shim %.2f ns vs intercept.%s.direct # %s through "
               "libeasyscale.so (d1)\n", names[i], wrapped[i], names[i], names[i]);
    }
    return 0;
}
