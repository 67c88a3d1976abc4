/* SGEMM bench: simcuda's GEMM against a straightforward blocked C SGEMM
 * built with the same -O3: the plain-C reference of the summation order
 * (ref.c: the packed, register-blocked CPU GEMM that simcuda's cuBLAS ran
 * in a host function before its work became kernels) with the plan
 * cublasSgemm would pick on an a100, and, when the simulated driver and
 * libcublas.so.13 can be loaded, cublasSgemm itself (the GEMM kernel of
 * sim/cublas/kernels.cu through the CUDA-on-CPU layer, on
 * SIMCUDA_CPU_THREADS OS threads). Prints GFLOP/s and the ratio; never
 * fails on time (the target is ratio >= 0.25). */
#include "sim/cublas/gemm.h"

#include <cublas_v2.h>
#include <cuda.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The baseline: column-major C += A*B, blocked for cache, innermost loop
 * over rows so that the compiler vectorises it. */
#define BLK 64
#define REF_BODY                                                                           \
    memset(C, 0, (size_t)n * (size_t)n * sizeof(float));                                  \
    for (int jj = 0; jj < n; jj += BLK)                                                   \
        for (int kk = 0; kk < n; kk += BLK)                                               \
            for (int ii = 0; ii < n; ii += BLK) {                                         \
                int je = jj + BLK < n ? jj + BLK : n, ke = kk + BLK < n ? kk + BLK : n,   \
                    ie = ii + BLK < n ? ii + BLK : n;                                     \
                for (int j = jj; j < je; j++)                                             \
                    for (int p = kk; p < ke; p++) {                                       \
                        float b = B[p + (size_t)j * n];                                   \
                        const float *a = A + (size_t)p * n;                               \
                        float *c = C + (size_t)j * n;                                     \
                        for (int i = ii; i < ie; i++)                                     \
                            c[i] += a[i] * b;                                             \
                    }                                                                     \
            }

/* The same source built for this machine's best ISA (AVX2 + FMA, contraction
 * allowed): the strongest form of the baseline. */
#if defined(__x86_64__)
__attribute__((target("avx2,fma"), optimize("fp-contract=fast")))
static void ref_sgemm_native(int n, const float *A, const float *B, float *C)
{
    REF_BODY
}
#endif

static void ref_sgemm(int n, const float *A, const float *B, float *C)
{
    REF_BODY
}

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*devget_fn)(CUdevice *, int);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*setcur_fn)(CUcontext);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*htod_fn)(CUdeviceptr, const void *, size_t);
typedef CUresult (*sync_fn)(void);
typedef cublasStatus_t (*create_fn)(cublasHandle_t *);
typedef cublasStatus_t (*sgemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                   int, const float *, const float *, int, const float *, int,
                                   const float *, float *, int);

/* cublasSgemm through the libraries, or NULL when they cannot be loaded. */
typedef struct api {
    cublasHandle_t h;
    sgemm_fn sgemm;
    sync_fn sync;
    alloc_fn alloc;
    htod_fn htod;
} api_t;

static int load_api(api_t *a)
{
    void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    void *bl = cu ? dlopen("libcublas.so.13", RTLD_NOW) : NULL;
    if (!bl)
        return -1;
    init_fn init = (init_fn)dlsym(cu, "cuInit");
    devget_fn devget = (devget_fn)dlsym(cu, "cuDeviceGet");
    retain_fn retain = (retain_fn)dlsym(cu, "cuDevicePrimaryCtxRetain");
    setcur_fn setcur = (setcur_fn)dlsym(cu, "cuCtxSetCurrent");
    a->alloc = (alloc_fn)dlsym(cu, "cuMemAlloc_v2");
    a->htod = (htod_fn)dlsym(cu, "cuMemcpyHtoD_v2");
    a->sync = (sync_fn)dlsym(cu, "cuCtxSynchronize");
    create_fn create = (create_fn)dlsym(bl, "cublasCreate_v2");
    a->sgemm = (sgemm_fn)dlsym(bl, "cublasSgemm_v2");
    CUdevice dev;
    CUcontext ctx;
    if (!init || !devget || !retain || !setcur || !a->alloc || !a->htod || !a->sync || !create ||
        !a->sgemm || init(0) || devget(&dev, 0) || retain(&ctx, dev) || setcur(ctx) ||
        create(&a->h))
        return -1;
    return 0;
}

int main(void)
{
    static const int sizes[] = {512, 1024};
    const sim_gemm_dev_t a100 = {8, 0, 108};
    api_t api;
    int have_api = load_api(&api) == 0;
    const char *thr = getenv("SIMCUDA_CPU_THREADS");
    printf("sgemm bench (figures only, target ratio >= 0.25; reference core single thread, "
           "cublasSgemm on SIMCUDA_CPU_THREADS=%s)\n",
           thr && *thr ? thr : "default");
    if (!have_api)
        printf("(simulated driver not loadable: cublasSgemm row skipped; run under scripts/simenv)\n");
    for (size_t s = 0; s < sizeof(sizes) / sizeof(*sizes); s++) {
        int n = sizes[s];
        size_t nn = (size_t)n * (size_t)n;
        int reps = n <= 512 ? 4 : 2;
        float *A = malloc(nn * 4), *B = malloc(nn * 4), *C = malloc(nn * 4);
        for (size_t i = 0; i < nn; i++) {
            A[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
            B[i] = (float)((i * 11) % 17) / 17.0f - 0.5f;
        }
        double flop = 2.0 * n * n * (double)n;

        ref_sgemm(n, A, B, C); /* warm */
        double t0 = now();
        for (int r = 0; r < reps; r++)
            ref_sgemm(n, A, B, C);
        double ref = flop * reps / (now() - t0) / 1e9;
        double refn = 0;
#if defined(__x86_64__)
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
            ref_sgemm_native(n, A, B, C);
            t0 = now();
            for (int r = 0; r < reps; r++)
                ref_sgemm_native(n, A, B, C);
            refn = flop * reps / (now() - t0) / 1e9;
        }
#endif
        double best = refn > ref ? refn : ref;

        sim_gemm_plan_t plan;
        sim_gemm_choose(&a100, n, n, n, 1, sim_gemm_default_workspace(&a100), 0, &plan);
        sim_gemm_args_t g = {0, 0, n, n, n, SIM_F32, SIM_F32, SIM_F32, SIM_ROUND_NONE,
                             A, n, B, n, C, n, 1.0f, 0.0f};
        sim_gemm_run(&plan, &g);
        t0 = now();
        for (int r = 0; r < reps; r++)
            sim_gemm_run(&plan, &g);
        double core = flop * reps / (now() - t0) / 1e9;
        printf("%4d^3  blocked C -O3: %.2f GFLOP/s (baseline ISA), %.2f GFLOP/s (avx2+fma)\n", n,
               ref, refn);
        printf("%4d^3  reference core, the previous host-function GEMM (a100 plan: tile %dx%d kc "
               "%d split %d) %.2f GFLOP/s | ratio to best blocked C %.2f\n",
               n, plan.tile_m, plan.tile_n, plan.kc, plan.splitk, core, core / best);

        if (have_api) {
            CUdeviceptr dA, dB, dC;
            if (api.alloc(&dA, nn * 4) || api.alloc(&dB, nn * 4) || api.alloc(&dC, nn * 4)) {
                printf("cuMemAlloc failed\n");
            } else {
                float one = 1, zero = 0;
                api.htod(dA, A, nn * 4);
                api.htod(dB, B, nn * 4);
                float *pa = (float *)(uintptr_t)dA, *pb = (float *)(uintptr_t)dB,
                      *pc = (float *)(uintptr_t)dC;
                api.sgemm(api.h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, pa, n, pb, n, &zero,
                          pc, n);
                api.sync();
                t0 = now();
                for (int r = 0; r < reps; r++)
                    api.sgemm(api.h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, pa, n, pb, n,
                              &zero, pc, n);
                api.sync();
                double viaapi = flop * reps / (now() - t0) / 1e9;
                printf("%4d^3  cublasSgemm (its GEMM kernel on the CPU layer, simulated a100) %.2f "
                       "GFLOP/s | ratio to best blocked C %.2f\n",
                       n, viaapi, viaapi / best);
            }
        }
        free(A);
        free(B);
        free(C);
    }
    return 0;
}
