/* d2's portable kernels against the vendor libraries: GFLOP/s of the tiled
 * kernels (kernels/portable.cu), of the per-element reference kernels and
 * of cuBLAS SGEMM / cuDNN convolutions on the same data, and whether the
 * tiled and reference kernels agree bit for bit on the device.
 *
 *   portable_bench [FATBIN] [--large]
 *
 * FATBIN: the shim's kernel image (default $ES_BUILD/gen/es_portable.fatbin;
 * scripts/gpu-pack puts it in .gpu/share). Sizes: small ones on simcuda
 * (`make bench`, under scripts/simenv), --large the real-GPU ones
 * (scripts/gpu-check step g: square SGEMMs up to 8192, ResNet-sized
 * convolutions). cuBLAS runs with CUBLAS_DEFAULT_MATH (no TF32: gpu-check
 * also sets NVIDIA_TF32_OVERRIDE=0) and cuDNN with fp32 math. One line
 * per case:
 *   gemm N=... tiled G ref G cublas G ratio R match 0|1
 *   conv DIR ... tiled G ref G cudnn G ratio R match 0|1
 * ratio: tiled / vendor. Timing: the median of several runs, host clock
 * around a synchronised stream. Never fails because something is slow;
 * exits 1 when the tiled and reference kernels disagree or a call fails.
 */
#include <cublas_v2.h>
#include <cuda.h>
#include <cudnn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/portable_kernels.h"

#include "../clients/ck.h"

static int g_mismatch;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median seconds of reps runs of fn (after one warm-up). */
typedef void (*run_fn)(void *arg);
static double timed(run_fn fn, void *arg, int reps)
{
    double t[16];
    fn(arg);
    CK(cuCtxSynchronize());
    for (int i = 0; i < reps; i++) {
        double t0 = now();
        fn(arg);
        CK(cuCtxSynchronize());
        t[i] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmp_d);
    return t[reps / 2];
}

static void fill(float *v, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((int)(seed >> 9) % 2001 - 1000) / 997.0f;
    }
}

static CUdeviceptr up(size_t n, unsigned seed)
{
    float *h = malloc(n * sizeof(float));
    fill(h, n, seed);
    CUdeviceptr p;
    CK(cuMemAlloc(&p, n * sizeof(float)));
    CK(cuMemcpyHtoD(p, h, n * sizeof(float)));
    free(h);
    return p;
}

static int same(CUdeviceptr a, CUdeviceptr b, size_t n)
{
    float *x = malloc(n * 4), *y = malloc(n * 4);
    CK(cuMemcpyDtoH(x, a, n * 4));
    CK(cuMemcpyDtoH(y, b, n * 4));
    int r = memcmp(x, y, n * 4) == 0;
    free(x);
    free(y);
    return r;
}

static CUmodule g_mod;

static CUfunction fn(const char *name)
{
    CUfunction f;
    CK(cuModuleGetFunction(&f, g_mod, name));
    return f;
}

/* ---- GEMM ------------------------------------------------------------------------------- */

typedef struct {
    es_gemm_args_t a;
    CUfunction f;
    unsigned gx, gy, bx, by;
    cublasHandle_t h;
    CUdeviceptr A, B, C;
    int n;
} gemm_t;

static void run_kernel(void *p)
{
    gemm_t *g = p;
    void *params[] = { &g->a };
    CK(cuLaunchKernel(g->f, g->gx, g->gy, 1, g->bx, g->by, 1, 0, NULL, params, NULL));
}

static void run_cublas(void *p)
{
    gemm_t *g = p;
    const float one = 1.0f, zero = 0.0f;
    CK(cublasSgemm(g->h, CUBLAS_OP_N, CUBLAS_OP_N, g->n, g->n, g->n, &one, (float *)g->A, g->n,
                   (float *)g->B, g->n, &zero, (float *)g->C, g->n));
}

static void gemm(cublasHandle_t h, int n, int reps)
{
    size_t nn = (size_t)n * n;
    gemm_t g = { .h = h, .n = n };
    g.A = up(nn, 1), g.B = up(nn, 2);
    CUdeviceptr dt, dr;
    CK(cuMemAlloc(&g.C, nn * 4));
    CK(cuMemAlloc(&dt, nn * 4));
    CK(cuMemAlloc(&dr, nn * 4));
    g.a = (es_gemm_args_t){ .A = (void *)g.A, .B = (void *)g.B, .C = (void *)dt, .D = (void *)dt,
                            .m = n, .n = n, .k = n, .lda = n, .ldb = n, .ldc = n, .ldd = n,
                            .alpha = 1.0f, .beta = 0.0f };
    int large = n >= ES_GEMM_L_BM;
    g.f = fn(large ? "es_gemm_tiled_l" : "es_gemm_tiled_s");
    int bm = large ? ES_GEMM_L_BM : ES_GEMM_S_BM, bn = large ? ES_GEMM_L_BN : ES_GEMM_S_BN;
    g.gx = (unsigned)((n + bm - 1) / bm), g.gy = (unsigned)((n + bn - 1) / bn);
    g.bx = (unsigned)(bn / (large ? ES_GEMM_L_TN : ES_GEMM_S_TN));
    g.by = (unsigned)(bm / (large ? ES_GEMM_L_TM : ES_GEMM_S_TM));
    double tt = timed(run_kernel, &g, reps);
    gemm_t r = g;
    r.a.C = r.a.D = (void *)dr;
    r.f = fn("es_gemm_portable");
    r.gx = r.gy = (unsigned)((n + ES_GEMM_TILE - 1) / ES_GEMM_TILE);
    r.bx = r.by = ES_GEMM_TILE;
    double tr = timed(run_kernel, &r, reps > 3 ? 3 : reps);
    double tc = timed(run_cublas, &g, reps);
    int m = same(dt, dr, nn);
    g_mismatch |= !m;
    double fl = 2.0 * n * (double)n * n * 1e-9;
    printf("gemm N=%d tiled %.1f ref %.1f cublas %.1f ratio %.2f match %d\n", n, fl / tt,
           fl / tr, fl / tc, tc / tt, m);
    printf("BENCH portable.gemm%d.cublas %.2f GFLOP/s # cublasSgemm %d^3\n", n, fl / tc, n);
    printf("BENCH portable.gemm%d.tiled %.2f GFLOP/s vs portable.gemm%d.cublas # the shim's tiled "
           "portable GEMM (d2) %d^3, bits %s the per-element kernel's\n", n, fl / tt, n, n,
           m ? "equal to" : "DIFFERENT from");
    CK(cuMemFree(g.A));
    CK(cuMemFree(g.B));
    CK(cuMemFree(g.C));
    CK(cuMemFree(dt));
    CK(cuMemFree(dr));
}

/* ---- convolutions ------------------------------------------------------------------------ */

typedef struct {
    es_conv_args_t a;
    CUfunction f;
    unsigned gx, gy, gz, bx, by;
    int dir;
    cudnnHandle_t h;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    CUdeviceptr x, w, y, out, ws;
    size_t wsz;
    int algo;
} conv_t;

static void run_conv_kernel(void *p)
{
    conv_t *c = p;
    void *params[] = { &c->a };
    CK(cuLaunchKernel(c->f, c->gx, c->gy, c->gz, c->bx, c->by, 1, 0, NULL, params, NULL));
}

static void run_cudnn(void *p)
{
    conv_t *c = p;
    const float one = 1.0f, zero = 0.0f;
    if (c->dir == 0)
        CK(cudnnConvolutionForward(c->h, &one, c->xd, (void *)c->x, c->wd, (void *)c->w, c->cd,
                                   (cudnnConvolutionFwdAlgo_t)c->algo, (void *)c->ws, c->wsz,
                                   &zero, c->yd, (void *)c->out));
    else if (c->dir == 1)
        CK(cudnnConvolutionBackwardData(c->h, &one, c->wd, (void *)c->w, c->yd, (void *)c->y,
                                        c->cd, (cudnnConvolutionBwdDataAlgo_t)c->algo,
                                        (void *)c->ws, c->wsz, &zero, c->xd, (void *)c->out));
    else
        CK(cudnnConvolutionBackwardFilter(c->h, &one, c->xd, (void *)c->x, c->yd, (void *)c->y,
                                          c->cd, (cudnnConvolutionBwdFilterAlgo_t)c->algo,
                                          (void *)c->ws, c->wsz, &zero, c->wd, (void *)c->out));
}

static void conv(cudnnHandle_t h, int N, int C, int H, int K, int reps)
{
    static const char *const dn[3] = { "fwd", "bwd_data", "bwd_filter" };
    static const char *const tk[3] = { "es_conv_fwd_tiled", "es_conv_bwd_data_tiled",
                                       "es_conv_bwd_filter_tiled" };
    static const char *const rk[3] = { "es_conv_fwd_portable", "es_conv_bwd_data_portable",
                                       "es_conv_bwd_filter_portable" };
    const int R = 3, P = H;
    size_t nx = (size_t)N * C * H * H, nw = (size_t)K * C * R * R, ny = (size_t)N * K * P * P;
    conv_t c = { .h = h };
    c.x = up(nx, 3), c.w = up(nw, 4), c.y = up(ny, 5);
    size_t nmax = nx > ny ? nx : ny;
    nmax = nmax > nw ? nmax : nw;
    CUdeviceptr dt, dr;
    CK(cuMemAlloc(&dt, nmax * 4));
    CK(cuMemAlloc(&dr, nmax * 4));
    CK(cuMemAlloc(&c.out, nmax * 4));
    c.wsz = 256u << 20;
    CK(cuMemAlloc(&c.ws, c.wsz));
    CK(cudnnCreateTensorDescriptor(&c.xd));
    CK(cudnnCreateTensorDescriptor(&c.yd));
    CK(cudnnCreateFilterDescriptor(&c.wd));
    CK(cudnnCreateConvolutionDescriptor(&c.cd));
    CK(cudnnSetTensor4dDescriptor(c.xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, H));
    CK(cudnnSetTensor4dDescriptor(c.yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, P, P));
    CK(cudnnSetFilter4dDescriptor(c.wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, R, R));
    CK(cudnnSetConvolution2dDescriptor(c.cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                       CUDNN_DATA_FLOAT));
    CK(cudnnSetConvolutionMathType(c.cd, CUDNN_FMA_MATH)); /* no TF32 */
    es_conv_args_t a = {
        .xs_n = (long long)C * H * H, .xs_c = (long long)H * H, .xs_h = H, .xs_w = 1,
        .ys_n = (long long)K * P * P, .ys_k = (long long)P * P, .ys_p = P, .ys_q = 1,
        .ws_k = C * R * R, .ws_c = R * R, .ws_r = R, .ws_s = 1,
        .n = N, .c = C, .h = H, .w = H, .k = K, .p = P, .q = P, .r = R, .s = R,
        .pad_h = 1, .pad_w = 1, .u = 1, .v = 1, .dil_h = 1, .dil_w = 1, .groups = 1,
        .alpha = 1.0f, .beta = 0.0f,
    };
    static const int algos[3] = { CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 };
    for (int dir = 0; dir < 3; dir++) {
        size_t n = dir == 0 ? ny : dir == 1 ? nx : nw;
        long long rows = dir == 0 ? (long long)N * P * P : dir == 1 ? (long long)N * H * H : K;
        long long cols = dir == 0 ? K : dir == 1 ? C : (long long)C * R * R;
        c.dir = dir;
        c.algo = algos[dir];
        c.a = a;
        c.a.in0 = (void *)(dir == 1 ? c.y : c.x);
        c.a.in1 = (void *)(dir == 2 ? c.y : c.w);
        c.a.out = (void *)dt;
        c.a.total = (long long)n;
        c.f = fn(tk[dir]);
        c.gx = (unsigned)((rows + ES_CONV_BM - 1) / ES_CONV_BM);
        c.gy = (unsigned)((cols + ES_CONV_BN - 1) / ES_CONV_BN);
        c.gz = 1;
        c.bx = ES_CONV_BN / ES_CONV_TN, c.by = ES_CONV_BM / ES_CONV_TM;
        double tt = timed(run_conv_kernel, &c, reps);
        conv_t r = c;
        r.a.out = (void *)dr;
        r.f = fn(rk[dir]);
        r.gx = (unsigned)((n + ES_CONV_BLOCK - 1) / ES_CONV_BLOCK);
        r.gy = r.gz = 1;
        r.bx = ES_CONV_BLOCK, r.by = 1;
        double tr = timed(run_conv_kernel, &r, reps > 3 ? 3 : reps);
        double tc = timed(run_cudnn, &c, reps);
        int m = same(dt, dr, n);
        g_mismatch |= !m;
        double fl = 2.0 * (double)N * K * P * P * C * R * R * 1e-9;
        printf("conv %s N=%d C=%d H=%d K=%d 3x3 tiled %.1f ref %.1f cudnn %.1f ratio %.2f "
               "match %d\n", dn[dir], N, C, H, K, fl / tt, fl / tr, fl / tc, tc / tt, m);
        printf("BENCH portable.conv-%s-N%dC%dH%dK%d.cudnn %.2f GFLOP/s # cuDNN convolution %s "
               "3x3\n", dn[dir], N, C, H, K, fl / tc, dn[dir]);
        printf("BENCH portable.conv-%s-N%dC%dH%dK%d.tiled %.2f GFLOP/s vs "
               "portable.conv-%s-N%dC%dH%dK%d.cudnn # the shim's tiled portable convolution (d2) "
               "%s 3x3\n", dn[dir], N, C, H, K, fl / tt, dn[dir], N, C, H, K, dn[dir]);
    }
    CK(cudnnDestroyTensorDescriptor(c.xd));
    CK(cudnnDestroyTensorDescriptor(c.yd));
    CK(cudnnDestroyFilterDescriptor(c.wd));
    CK(cudnnDestroyConvolutionDescriptor(c.cd));
    CK(cuMemFree(c.x));
    CK(cuMemFree(c.w));
    CK(cuMemFree(c.y));
    CK(cuMemFree(c.out));
    CK(cuMemFree(c.ws));
    CK(cuMemFree(dt));
    CK(cuMemFree(dr));
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *image = NULL;
    int large = 0;
    char def[4096];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--large"))
            large = 1;
        else
            image = argv[i];
    }
    if (!image) {
        const char *b = getenv("ES_BUILD");
        snprintf(def, sizeof(def), "%s/gen/es_portable.fatbin", b ? b : "build");
        image = def;
    }
    CUdevice d;
    CUcontext ctx;
    char name[256];
    CK(cuInit(0));
    CK(cuDeviceGet(&d, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, d));
    CK(cuCtxSetCurrent(ctx));
    CK(cuDeviceGetName(name, sizeof(name), d));
    CUresult lr = cuModuleLoad(&g_mod, image);
    if (lr != CUDA_SUCCESS) {
        printf("FAIL cannot load %s (CUresult %d)\n", image, (int)lr);
        return 1;
    }
    printf("device %s, %s sizes, image %s\n", name, large ? "large" : "small", image);
    cublasHandle_t bh;
    cudnnHandle_t dh;
    CK(cublasCreate(&bh));
    CK(cublasSetMathMode(bh, CUBLAS_DEFAULT_MATH));
    CK(cudnnCreate(&dh));
    if (large) {
        static const int sizes[] = { 1024, 2048, 4096, 8192 };
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
            gemm(bh, sizes[i], 5);
        conv(dh, 32, 64, 56, 64, 5);
        conv(dh, 32, 256, 14, 256, 5);
    } else {
        gemm(bh, 96, 3);
        gemm(bh, 256, 3);
        conv(dh, 2, 16, 16, 16, 3);
    }
    CK(cublasDestroy(bh));
    CK(cudnnDestroy(dh));
    printf("%s\n", g_mismatch ? "MISMATCH between the tiled and reference kernels" : "done");
    return g_mismatch;
}
