/* d2's int8 GEMM (EASYSCALE_D2_GEMM=int8, kernels/d2int8_kernels.h):
 * its accuracy, its cost and its speed.
 *
 *   d2int8_bench [FATBIN] [--large] [--accuracy-only]
 *
 * 1. Accuracy (host only): on random, wide-range and adversarial matrices,
 *    the largest error of the int8 definition (kernels/d2int8.c) and of
 *    fp32 fma accumulation (es_gemm_elem) against the exact dot product
 *    (es_d2int8_exact_dot), relative to |exact| and to sum |a b|: the
 *    figures of docs/D2-GEMM.md.
 * 2. Cost and speed (a device: simcuda under scripts/simenv, or a GPU): the
 *    int8 kernel (es_gemm_int8) and the fma tiled kernel loaded from FATBIN
 *    (default $ES_BUILD/gen/es_portable.fatbin), cuBLAS SGEMM and cuBLAS
 *    bf16 GEMM (cublasGemmEx, fp32 compute) on the same data, in
 *    "GFLOP/s" of the GEMM computed (2 m n k over the time); int8 slice
 *    MMAs per output, the kernels' global-memory bytes; and the int8
 *    kernel's bits against the CPU reference (every output on the small
 *    sizes, 4096 sampled ones on the large). Sizes: small ones on simcuda
 *    (`make bench`), --large 4096^3 on a GPU (scripts/gpu-check).
 * Prints BENCH lines (scripts/bench); exits 1 when the kernel's bits
 * differ from the reference or a call fails, never because of a time.
 */
#include <cublas_v2.h>
#include <cuda.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/d2int8.h"
#include "kernels/portable_kernels.h"

#include "../clients/ck.h"

static unsigned g_seed = 7;
static int g_mismatch;

static float rnd(void)
{
    g_seed = g_seed * 1103515245u + 12345u;
    return (float)((int)(g_seed >> 9) % 2001 - 1000) / 997.0f;
}

static int rnd_int(int lo, int hi)
{
    g_seed = g_seed * 1103515245u + 12345u;
    return lo + (int)((g_seed >> 8) % (unsigned)(hi - lo + 1));
}

static size_t esz(int dt)
{
    return dt == ES_DT_F32 ? 4 : 2;
}

/* ---- 1. accuracy ------------------------------------------------------------------------ */

enum { M_RANDOM = 0, M_WIDE, M_HUGE, M_CANCEL, M_COUNT };
static const char *const g_mname[M_COUNT] = { "random", "wide", "huge", "cancel" };
static const char *const g_mwhat[M_COUNT] = {
    "uniform in [-1, 1]",
    "uniform in [-1, 1] times 2^e, e uniform in [-20, 20]",
    "random, and one element of each row of A 2^20 times the others (B zero there for "
    "half the columns)",
    "random, plus pairs +x, -x with |x| 2^12 times the others (cancelling products)",
};

/* Fills column-major A (m x k) and B (k x n) of type dt for kind. */
static void acc_fill(int kind, int dt, int m, int n, int k, void *a, void *b)
{
    for (long long i = 0; i < (long long)m * k; i++) {
        float x = rnd();
        if (kind == M_WIDE)
            x = ldexpf(x, rnd_int(dt == ES_DT_F16 ? -7 : -20, dt == ES_DT_F16 ? 7 : 20));
        es_st(a, i, dt, x);
    }
    for (long long i = 0; i < (long long)k * n; i++) {
        float x = rnd();
        if (kind == M_WIDE)
            x = ldexpf(x, rnd_int(dt == ES_DT_F16 ? -7 : -20, dt == ES_DT_F16 ? 7 : 20));
        es_st(b, i, dt, x);
    }
    if (kind == M_HUGE)
        for (int i = 0; i < m; i++) {
            int p = rnd_int(0, k - 1);
            es_st(a, i + (long long)p * m, dt, ldexpf(rnd(), dt == ES_DT_F16 ? 12 : 20));
            for (int j = 0; j < n; j += 2)
                es_st(b, p + (long long)j * k, dt, 0.0f);
        }
    if (kind == M_CANCEL)
        for (int i = 0; i < m; i++)
            for (int p = 0; p + 1 < k; p += 16) {
                float x = ldexpf(rnd(), 12);
                es_st(a, i + (long long)p * m, dt, x);
                es_st(a, i + (long long)(p + 1) * m, dt, -x);
                for (int j = 0; j < n; j++)
                    es_st(b, p + 1 + (long long)j * k, dt, es_ld(b, p + (long long)j * k, dt));
            }
}

/* One matrix kind and type: prints the errors. */
static void accuracy(int kind, int dt, int m, int n, int k)
{
    void *a = malloc((size_t)m * k * esz(dt)), *b = malloc((size_t)k * n * esz(dt));
    float *d8 = malloc((size_t)m * n * 4), *df = malloc((size_t)m * n * 4);
    acc_fill(kind, dt, m, n, k, a, b);
    es_gemm_args_t g = { .A = a, .B = b, .C = d8, .D = d8, .m = m, .n = n, .k = k, .lda = m,
                         .ldb = k, .ldc = m, .ldd = m, .at = dt, .bt = dt, .ct = ES_DT_F32,
                         .dt = ES_DT_F32, .alpha = 1.0f, .beta = 0.0f };
    CK(es_d2int8_ref_gemm(&g, 1));
    g.C = g.D = df;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++)
            es_gemm_elem(&g, i, j, 0);
    long double r8 = 0, rf = 0, s8 = 0, sf = 0;
    int worse = 0;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            long double x = es_d2int8_exact_dot(&g, i, j, 0), abs = 0;
            for (int p = 0; p < k; p++)
                abs += fabsl((long double)es_ld(a, i + (long long)p * m, dt) *
                             es_ld(b, p + (long long)j * k, dt));
            long double e8 = fabsl(d8[i + j * m] - x), ef = fabsl(df[i + j * m] - x);
            worse += e8 > ef;
            if (x != 0) {
                r8 = fmaxl(r8, e8 / fabsl(x));
                rf = fmaxl(rf, ef / fabsl(x));
            }
            if (abs != 0) {
                s8 = fmaxl(s8, e8 / abs);
                sf = fmaxl(sf, ef / abs);
            }
        }
    const char *tn = dt == ES_DT_F32 ? "f32" : dt == ES_DT_F16 ? "f16" : "bf16";
    printf("accuracy %s %s %dx%dx%d: max |err|/|exact| int8 %.3Le fma %.3Le; max "
           "|err|/sum|ab| int8 %.3Le fma %.3Le; int8 worse on %d of %d\n",
           g_mname[kind], tn, m, n, k, r8, rf, s8, sf, worse, m * n);
    printf("BENCH d2int8.err.%s-%s-k%d.fma %.3Le rel # fp32 fma accumulation, max |err|/|exact|, "
           "%s %s\n", g_mname[kind], tn, k, rf, tn, g_mwhat[kind]);
    printf("BENCH d2int8.err.%s-%s-k%d.int8 %.3Le rel vs d2int8.err.%s-%s-k%d.fma # the int8 "
           "definition, max |err|/|exact|\n", g_mname[kind], tn, k, r8, g_mname[kind], tn, k);
    free(a);
    free(b);
    free(d8);
    free(df);
}

/* ---- 2. cost and speed ------------------------------------------------------------------ */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *x, const void *y)
{
    double u = *(const double *)x, v = *(const double *)y;
    return u < v ? -1 : u > v;
}

typedef struct {
    es_gemm_args_t a;
    CUfunction f;
    unsigned gx, gy, bx, by;
    cublasHandle_t h;
    int n, vendor; /* 1 cublasSgemm, 2 cublasGemmEx bf16 */
} run_t;

static void run_once(run_t *r)
{
    if (r->vendor) {
        const float one = 1.0f, zero = 0.0f;
        cudaDataType t = r->vendor == 1 ? CUDA_R_32F : CUDA_R_16BF;
        CK(cublasGemmEx(r->h, CUBLAS_OP_N, CUBLAS_OP_N, r->n, r->n, r->n, &one, r->a.A, t,
                        r->n, r->a.B, t, r->n, &zero, r->a.D, CUDA_R_32F, r->n,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return;
    }
    void *params[] = { &r->a };
    CK(cuLaunchKernel(r->f, r->gx, r->gy, 1, r->bx, r->by, 1, 0, NULL, params, NULL));
}

/* The median seconds of reps runs (after a warm-up). */
static double timed(run_t *r, int reps)
{
    double t[16];
    run_once(r);
    CK(cuCtxSynchronize());
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        run_once(r);
        CK(cuCtxSynchronize());
        t[i] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_d);
    return t[reps / 2];
}

static CUdeviceptr up(const void *h, size_t bytes)
{
    CUdeviceptr p;
    CK(cuMemAlloc(&p, bytes));
    CK(cuMemcpyHtoD(p, h, bytes));
    return p;
}

/* The int8 kernel's outputs against the reference: all of them, or
 * `sample` spread over the matrix. Returns 1 when equal. */
static int check_bits(const es_gemm_args_t *dev, const void *ha, const void *hb, int n,
                      long long sample)
{
    float *got = malloc((size_t)n * n * 4);
    CK(cuMemcpyDtoH(got, (CUdeviceptr)dev->D, (size_t)n * n * 4));
    es_gemm_args_t g = *dev;
    g.A = ha, g.B = hb;
    long long total = (long long)n * n, step = sample && sample < total ? total / sample : 1;
    int ok = 1;
    for (long long e = 0; e < total && ok; e += step) {
        long long i = e % n, j = e / n;
        float want = es_d2int8_ref_acc(&g, i, j, 0); /* alpha 1, beta 0, fp32 D */
        ok = memcmp(&want, &got[e], 4) == 0;
        if (!ok)
            printf("int8 kernel (%lld, %lld): %a, reference %a\n", i, j, (double)got[e],
                   (double)want);
    }
    free(got);
    return ok;
}

static void speed(CUmodule mod, cublasHandle_t h, int n, int dt, int reps, long long sample)
{
    size_t nn = (size_t)n * n;
    void *ha = malloc(nn * esz(dt)), *hb = malloc(nn * esz(dt));
    for (size_t i = 0; i < nn; i++) {
        es_st(ha, (long long)i, dt, rnd());
        es_st(hb, (long long)i, dt, rnd());
    }
    CUdeviceptr dA = up(ha, nn * esz(dt)), dB = up(hb, nn * esz(dt)), dD;
    CK(cuMemAlloc(&dD, nn * 4));
    const char *tn = dt == ES_DT_F32 ? "f32" : "bf16";
    run_t r = { .h = h, .n = n };
    r.a = (es_gemm_args_t){ .A = (void *)dA, .B = (void *)dB, .C = (void *)dD, .D = (void *)dD,
                            .m = n, .n = n, .k = n, .lda = n, .ldb = n, .ldc = n, .ldd = n,
                            .at = dt, .bt = dt, .ct = ES_DT_F32, .dt = ES_DT_F32, .alpha = 1.0f };
    /* the int8 kernel */
    CK(cuModuleGetFunction(&r.f, mod, "es_gemm_int8"));
    r.gx = r.gy = (unsigned)((n + ES_I8_BM - 1) / ES_I8_BM);
    r.bx = ES_I8_BN, r.by = ES_I8_THREADS / ES_I8_BN;
    double t8 = timed(&r, reps);
    int ok = check_bits(&r.a, ha, hb, n, sample);
    g_mismatch |= !ok;
    /* the fma tiled kernel */
    int large = n >= ES_GEMM_L_BM;
    CK(cuModuleGetFunction(&r.f, mod, large ? "es_gemm_tiled_l" : "es_gemm_tiled_s"));
    int bm = large ? ES_GEMM_L_BM : ES_GEMM_S_BM, bn = large ? ES_GEMM_L_BN : ES_GEMM_S_BN;
    r.gx = (unsigned)((n + bm - 1) / bm), r.gy = (unsigned)((n + bn - 1) / bn);
    r.bx = (unsigned)(bn / (large ? ES_GEMM_L_TN : ES_GEMM_S_TN));
    r.by = (unsigned)(bm / (large ? ES_GEMM_L_TM : ES_GEMM_S_TM));
    double tf = timed(&r, reps);
    /* cuBLAS on the same data: SGEMM for fp32, the bf16 GEMM for bf16 */
    r.vendor = dt == ES_DT_F32 ? 1 : 2;
    double tv = timed(&r, reps);
    int s = es_i8_slices(dt);
    double fl = 2.0 * n * (double)n * n * 1e-9;
    long long kt = ((long long)n + 15) / 16;
    double mma = (double)s * s * (double)kt / 256.0; /* m16n16k16 MMAs per output */
    /* global bytes: the int8 kernel reads its rows and columns twice (exponents,
     * then tiles) per block; the fma kernel once per block; both write D */
    double blk8 = (double)((n + ES_I8_BM - 1) / ES_I8_BM), blkf = (double)((n + bm - 1) / bm);
    double by8 = 2.0 * 2.0 * blk8 * nn * esz(dt) + nn * 4.0;
    double byf = 2.0 * blkf * nn * esz(dt) + nn * 4.0;
    const char *vn = dt == ES_DT_F32 ? "cublas-sgemm" : "cublas-bf16";
    printf("gemm %s N=%d int8 %.2f fma %.2f %s %.2f GFLOP/s; int8 MMAs/output %.1f (%d slice "
           "products a term); bytes int8 %.3g fma %.3g; bits %s\n", tn, n, fl / t8, fl / tf, vn,
           fl / tv, mma, s * s, by8, byf, ok ? "equal to the reference" : "DIFFERENT");
    printf("BENCH d2int8.gemm%d-%s.%s %.2f GFLOP/s # cuBLAS %s %d^3 (fp32 compute)\n", n, tn, vn,
           fl / tv, dt == ES_DT_F32 ? "SGEMM" : "bf16 GemmEx", n);
    printf("BENCH d2int8.gemm%d-%s.fma %.2f GFLOP/s vs d2int8.gemm%d-%s.%s # d2's fma tiled "
           "kernel %d^3\n", n, tn, fl / tf, n, tn, vn, n);
    printf("BENCH d2int8.gemm%d-%s.int8 %.2f GFLOP/s vs d2int8.gemm%d-%s.fma # d2's int8 kernel "
           "%d^3, bits %s the CPU reference\n", n, tn, fl / t8, n, tn, n,
           ok ? "equal to" : "DIFFERENT from");
    printf("BENCH d2int8.gemm%d-%s.mma-per-output %.1f MMAs # int8 m16n16k16 MMAs per output "
           "(%d slice products a term, k %d)\n", n, tn, mma, s * s, n);
    printf("BENCH d2int8.gemm%d-%s.bytes-int8 %.4g bytes # global memory the int8 kernel moves "
           "(operands twice per block row/column, D once)\n", n, tn, by8);
    printf("BENCH d2int8.gemm%d-%s.bytes-fma %.4g bytes # global memory the fma kernel moves\n",
           n, tn, byf);
    CK(cuMemFree(dA));
    CK(cuMemFree(dB));
    CK(cuMemFree(dD));
    free(ha);
    free(hb);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *image = NULL;
    int large = 0, acc_only = 0;
    char def[4096];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--large"))
            large = 1;
        else if (!strcmp(argv[i], "--accuracy-only"))
            acc_only = 1;
        else
            image = argv[i];
    }
    if (!large) {
        static const int dts[3] = { ES_DT_F32, ES_DT_BF16, ES_DT_F16 };
        for (int t = 0; t < 3; t++)
            for (int kind = 0; kind < M_COUNT; kind++)
                accuracy(kind, dts[t], 32, 32, kind == M_RANDOM && t == 0 ? 16384 : 1024);
    }
    if (acc_only)
        return 0;
    if (!image) {
        const char *b = getenv("ES_BUILD");
        snprintf(def, sizeof(def), "%s/gen/es_portable.fatbin", b ? b : "build");
        image = def;
    }
    CUdevice d;
    CUcontext ctx;
    CUmodule mod;
    char name[256];
    CK(cuInit(0));
    CK(cuDeviceGet(&d, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, d));
    CK(cuCtxSetCurrent(ctx));
    CK(cuDeviceGetName(name, sizeof(name), d));
    CUresult lr = cuModuleLoad(&mod, image);
    if (lr != CUDA_SUCCESS) {
        printf("FAIL cannot load %s (CUresult %d)\n", image, (int)lr);
        return 1;
    }
    printf("device %s, %s sizes, image %s\n", name, large ? "large" : "small", image);
    cublasHandle_t h;
    CK(cublasCreate(&h));
    CK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    if (large) {
        speed(mod, h, 4096, ES_DT_F32, 5, 4096);
        speed(mod, h, 4096, ES_DT_BF16, 5, 4096);
    } else {
        speed(mod, h, 128, ES_DT_F32, 3, 0);
        speed(mod, h, 256, ES_DT_F32, 3, 0);
        speed(mod, h, 256, ES_DT_BF16, 3, 0);
    }
    CK(cublasDestroy(h));
    printf("%s\n", g_mismatch ? "MISMATCH between the int8 kernel and the CPU reference" : "done");
    return g_mismatch;
}
