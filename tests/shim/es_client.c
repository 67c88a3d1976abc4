/* Client run by tests/shim/preload_test.c under libeasyscale.so (and without
 * it): reaches the driver, cuBLAS and cuDNN by direct calls, dlopen + dlsym
 * and cuGetProcAddress, and prints what it saw, one fact per line
 * ("key value..."), for the test to compare across runs and settings.
 *
 *   es_client paths          the three lookup paths (needs EASYSCALE_LOG=debug)
 *   es_client blas-contend [noenv]  a GEMM alone, then the same GEMM while
 *                            another stream of the handle has GEMMs in flight
 *                            (noenv: CUBLAS_WORKSPACE_CONFIG unset first)
 *   es_client symv           Ssymv with atomics allowed, twice
 *   es_client cudnn          nondeterministic conv algorithms, twice; lists
 *   es_client gemm DEV       one SGEMM (and GemmEx, strided batched) on device DEV
 *   es_client gemm-edges     d2 GEMM edge cases against d2's reference
 *   es_client threads        lazy loading raced by 8 threads
 *   es_client fork           wrappers in a forked child
 */
#include <cublas_v2.h>
#include <cuda.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/d2int8.h"
#include "kernels/portable_kernels.h"
#include "shim/easyscale.h"

#undef cuGetProcAddress

#include "../clients/ck.h"

static uint64_t hash(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static void fill(float *v, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((int)(seed >> 9) % 2001 - 1000) / 997.0f;
    }
}

static CUcontext setup(int dev)
{
    CUdevice d;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&d, dev));
    CK(cuDevicePrimaryCtxRetain(&ctx, d));
    CK(cuCtxSetCurrent(ctx));
    return ctx;
}

static CUdeviceptr upload(const float *h, size_t n)
{
    CUdeviceptr p;
    CK(cuMemAlloc(&p, n * sizeof(float)));
    CK(cuMemcpyHtoD(p, h, n * sizeof(float)));
    return p;
}

static uint64_t download_hash(CUdeviceptr p, size_t n)
{
    float *h = malloc(n * sizeof(float));
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH(h, p, n * sizeof(float)));
    uint64_t r = hash(h, n * sizeof(float));
    free(h);
    return r;
}

/* ---- paths ---------------------------------------------------------------- */

static easyscale_stats_fn stats_fn(void)
{
    easyscale_stats_fn f;
    void *p = dlsym(RTLD_DEFAULT, "easyscale_stats");
    memcpy(&f, &p, sizeof(f));
    return f;
}

static void print_stat(const char *sym)
{
    easyscale_stats_fn f = stats_fn();
    easyscale_stat_t s = { 0, 0, 0 };
    if (!f) {
        printf("stat %s none\n", sym);
        return;
    }
    int rc = f(sym, &s);
    printf("stat %s %d %llu %llu %llu\n", sym, rc, (unsigned long long)s.calls,
           (unsigned long long)s.by_dlsym, (unsigned long long)s.by_getproc);
}

typedef CUresult (*getproc2_t)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);
typedef CUresult (*getproc1_t)(const char *, void **, int, cuuint64_t);
typedef CUresult (*count_t)(int *);
typedef CUresult (*alloc_t)(CUdeviceptr *, size_t);
typedef CUresult (*sync_t)(CUstream);

/* Whether p is libeasyscale.so's wrapper of sym. */
static int is_shim(const void *p, const char *sym)
{
    void *w = dlsym(RTLD_DEFAULT, sym); /* the preloaded shim's export, if any */
    Dl_info a;
    if (!p || p != w || !dladdr(p, &a) || !a.dli_fname)
        return 0;
    return strstr(a.dli_fname, "libeasyscale") != NULL;
}

static int mode_paths(void)
{
    int n = 0;
    setup(0);
    /* 1. direct call */
    CK(cuDeviceGetCount(&n));
    printf("direct cuDeviceGetCount %d\n", n);
    print_stat("cuDeviceGetCount");

    /* 2. dlopen + dlsym */
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    void *p = dlsym(h, "cuDriverGetVersion");
    printf("dlsym cuDriverGetVersion shim=%d\n", is_shim(p, "cuDriverGetVersion"));
    int v = 0;
    CK(((count_t)p)(&v));
    print_stat("cuDriverGetVersion");
    p = dlsym(RTLD_DEFAULT, "cuDeviceGetCount");
    printf("dlsym-default cuDeviceGetCount shim=%d\n", is_shim(p, "cuDeviceGetCount"));
    printf("dlsym-unwrapped cuCtxGetFlags found=%d\n", dlsym(h, "cuCtxGetFlags") != NULL);
    /* RTLD_NEXT still means "after the caller" for names the shim does not wrap */
    printf("rtld-next getpid ok=%d\n", dlsym(RTLD_NEXT, "getpid") == (void *)getpid);

    /* 3. cuGetProcAddress, several versions and flags */
    getproc2_t gp = (getproc2_t)dlsym(h, "cuGetProcAddress_v2");
    printf("dlsym cuGetProcAddress_v2 shim=%d\n", is_shim((void *)gp, "cuGetProcAddress_v2"));
    CUdriverProcAddressQueryResult st;
    void *f = NULL;
    CK(gp("cuMemAlloc", &f, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    printf("getproc cuMemAlloc 13000 -> shim_v2=%d\n", is_shim(f, "cuMemAlloc_v2"));
    CUdeviceptr d;
    CK(((alloc_t)f)(&d, 1024));
    print_stat("cuMemAlloc_v2");
    f = NULL;
    if (gp("cuMemAlloc", &f, 3000, CU_GET_PROC_ADDRESS_DEFAULT, &st) == CUDA_SUCCESS && f)
        printf("getproc cuMemAlloc 3000 -> shim_v2=%d\n", is_shim(f, "cuMemAlloc_v2"));
    else
        printf("getproc cuMemAlloc 3000 -> none\n");
    f = NULL;
    CK(gp("cuStreamSynchronize", &f, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    printf("getproc cuStreamSynchronize ptsz -> shim_ptsz=%d shim_legacy=%d\n",
           is_shim(f, "cuStreamSynchronize_ptsz"), is_shim(f, "cuStreamSynchronize"));
    CK(((sync_t)f)(NULL));
    print_stat("cuStreamSynchronize_ptsz");
    f = NULL;
    CK(gp("cuStreamSynchronize", &f, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st));
    printf("getproc cuStreamSynchronize legacy -> shim_ptsz=%d shim_legacy=%d\n",
           is_shim(f, "cuStreamSynchronize_ptsz"), is_shim(f, "cuStreamSynchronize"));
    f = NULL;
    CK(gp("cuLaunchKernel", &f, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    printf("getproc cuLaunchKernel ptsz -> shim_ptsz=%d\n", is_shim(f, "cuLaunchKernel_ptsz"));
    f = NULL;
    CK(gp("cuLaunchKernel", &f, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    printf("getproc cuLaunchKernel default -> shim=%d\n", is_shim(f, "cuLaunchKernel"));
    f = NULL;
    CK(gp("cuCtxGetFlags", &f, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    printf("getproc cuCtxGetFlags (unwrapped) -> found=%d\n", f != NULL);
    f = NULL;
    CK(gp("cuGetProcAddress", &f, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    printf("getproc cuGetProcAddress -> shim_v2=%d\n", is_shim(f, "cuGetProcAddress_v2"));
    getproc1_t gp1 = (getproc1_t)dlsym(h, "cuGetProcAddress");
    if (gp1) {
        f = NULL;
        CK(gp1("cuDeviceGetCount", &f, 13000, CU_GET_PROC_ADDRESS_DEFAULT));
        printf("getproc1 cuDeviceGetCount -> shim=%d\n", is_shim(f, "cuDeviceGetCount"));
        CK(((count_t)f)(&n));
    }
    print_stat("cuDeviceGetCount");
    print_stat("cuGetProcAddress_v2");

    /* cuBLAS reaches the driver through dlsym + cuGetProcAddress. */
    cublasHandle_t bh;
    CK(cublasCreate(&bh));
    float *x = calloc(64, sizeof(float));
    CUdeviceptr dx = upload(x, 64);
    float r = 0;
    CK(cublasSdot(bh, 64, (float *)dx, 1, (float *)dx, 1, &r));
    CK(cuCtxSynchronize());
    CK(cublasDestroy(bh));
    print_stat("cublasCreate_v2");
    print_stat("cuLaunchKernel");
    print_stat("cuGetProcAddress_v2");
    printf("done\n");
    return 0;
}

/* ---- cuBLAS ------------------------------------------------------------------ */

static void host_sleep(void *arg)
{
    (void)arg;
    usleep(300000);
}

static int mode_blas_contend(int noenv)
{
    enum { M = 96, N = 96, K = 2048, BIG = 256 };
    /* "noenv": cuBLAS reads CUBLAS_WORKSPACE_CONFIG at cublasCreate; without
     * it only the shim's per-stream workspace (re-applied after each
     * cublasSetStream) keeps the contended GEMM off the shared pool. */
    if (noenv)
        unsetenv("CUBLAS_WORKSPACE_CONFIG");
    setup(0);
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *big = malloc(sizeof(float) * BIG * BIG);
    fill(a, M * K, 1);
    fill(b, K * N, 2);
    fill(big, BIG * BIG, 3);
    CUdeviceptr dA = upload(a, M * K), dB = upload(b, K * N), dBig = upload(big, BIG * BIG);
    CUdeviceptr dC, dC2, dBigC;
    CK(cuMemAlloc(&dC, sizeof(float) * M * N));
    CK(cuMemAlloc(&dC2, sizeof(float) * M * N));
    CK(cuMemAlloc(&dBigC, sizeof(float) * BIG * BIG));
    CUstream s1, s2;
    CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    cublasHandle_t h;
    CK(cublasCreate(&h));
    const float one = 1.0f, zero = 0.0f;

    /* alone */
    CK(cublasSetStream(h, (cudaStream_t)s2));
    CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, (float *)dA, M, (float *)dB, K,
                   &zero, (float *)dC, M));
    printf("alone %016llx\n", (unsigned long long)download_hash(dC, M * N));

    /* while stream s1 has a GEMM of the same handle in flight */
    CK(cuLaunchHostFunc(s1, host_sleep, NULL));
    CK(cublasSetStream(h, (cudaStream_t)s1));
    CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, BIG, BIG, BIG, &one, (float *)dBig, BIG,
                   (float *)dBig, BIG, &zero, (float *)dBigC, BIG));
    CK(cublasSetStream(h, (cudaStream_t)s2));
    CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, (float *)dA, M, (float *)dB, K,
                   &zero, (float *)dC2, M));
    printf("contended %016llx\n", (unsigned long long)download_hash(dC2, M * N));
    CK(cublasDestroy(h));
    return 0;
}

static int mode_symv(void)
{
    enum { N = 512 };
    setup(0);
    float *a = malloc(sizeof(float) * N * N), *x = malloc(sizeof(float) * N);
    fill(a, N * N, 5);
    fill(x, N, 6);
    CUdeviceptr dA = upload(a, N * N), dx = upload(x, N), dy;
    CK(cuMemAlloc(&dy, sizeof(float) * N));
    cublasHandle_t h;
    CK(cublasCreate(&h));
    CK(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_ALLOWED));
    cublasAtomicsMode_t m = CUBLAS_ATOMICS_NOT_ALLOWED;
    CK(cublasGetAtomicsMode(h, &m));
    printf("atomics_mode %d\n", (int)m);
    const float one = 1.0f, zero = 0.0f;
    for (int i = 0; i < 3; i++) {
        CK(cublasSsymv(h, CUBLAS_FILL_MODE_LOWER, N, &one, (float *)dA, N, (float *)dx, 1, &zero,
                       (float *)dy, 1));
        printf("symv%d %016llx\n", i, (unsigned long long)download_hash(dy, N));
    }
    CK(cublasDestroy(h));
    return 0;
}

/* One SGEMM, one fp32 GemmEx and one strided batched SGEMM on device dev. */
static int mode_gemm(int dev)
{
    enum { M = 64, N = 48, K = 4096, BATCH = 3 };
    setup(dev);
    float *a = malloc(sizeof(float) * M * K * BATCH), *b = malloc(sizeof(float) * K * N * BATCH);
    fill(a, (size_t)M * K * BATCH, 11);
    fill(b, (size_t)K * N * BATCH, 12);
    CUdeviceptr dA = upload(a, (size_t)M * K * BATCH), dB = upload(b, (size_t)K * N * BATCH), dC;
    CK(cuMemAlloc(&dC, sizeof(float) * M * N * BATCH));
    cublasHandle_t h;
    CK(cublasCreate(&h));
    const float one = 1.0f, zero = 0.0f;
    CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, (float *)dA, M, (float *)dB, K,
                   &zero, (float *)dC, M));
    printf("sgemm %016llx\n", (unsigned long long)download_hash(dC, M * N));
    CK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K / 4, &one, (float *)dA, K / 4,
                   (float *)dB, K / 4, &zero, (float *)dC, M));
    printf("sgemm_tn %016llx\n", (unsigned long long)download_hash(dC, M * N));
    CK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, (void *)dA, CUDA_R_32F, M,
                    (void *)dB, CUDA_R_32F, K, &zero, (void *)dC, CUDA_R_32F, M,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    printf("gemmex %016llx\n", (unsigned long long)download_hash(dC, M * N));
    CK(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, (float *)dA, M,
                                 (long long)M * K, (float *)dB, K, (long long)K * N, &zero,
                                 (float *)dC, M, (long long)M * N, BATCH));
    printf("batched %016llx\n", (unsigned long long)download_hash(dC, M * N * BATCH));
    CK(cuMemsetD8(dC, 0, sizeof(float) * M * N * BATCH));
    CK(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, (void *)dA,
                                  CUDA_R_32F, M, (long long)M * K, (void *)dB, CUDA_R_32F, K,
                                  (long long)K * N, &zero, (void *)dC, CUDA_R_32F, M,
                                  (long long)M * N, BATCH, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
    printf("batchedex %016llx\n", (unsigned long long)download_hash(dC, M * N * BATCH));
    /* scalars in device memory */
    float ab[2] = { 1.0f, 0.0f };
    CUdeviceptr dab = upload(ab, 2);
    CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
    CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, (float *)dab, (float *)dA, M,
                   (float *)dB, K, (float *)dab + 1, (float *)dC, M));
    printf("sgemm_devptr %016llx\n", (unsigned long long)download_hash(dC, M * N));
    CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
    /* Reference on the host in the portable kernel's order (k ascending,
     * fmaf): the d2 result must equal it. */
    float *ref = malloc(sizeof(float) * M * N);
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            float acc = 0.0f;
            for (int p = 0; p < K; p++)
                acc = __builtin_fmaf(a[i + (size_t)p * M], b[p + (size_t)j * K], acc);
            ref[i + j * M] = 1.0f * acc;
        }
    printf("reference %016llx\n", (unsigned long long)hash(ref, sizeof(float) * M * N));
    for (int j = 0; j < N; j++) /* op(A) = A^T with lda = K / 4 */
        for (int i = 0; i < M; i++) {
            float acc = 0.0f;
            for (int p = 0; p < K / 4; p++)
                acc = __builtin_fmaf(a[p + (size_t)i * (K / 4)], b[p + (size_t)j * (K / 4)], acc);
            ref[i + j * M] = 1.0f * acc;
        }
    printf("reference_tn %016llx\n", (unsigned long long)hash(ref, sizeof(float) * M * N));
    CK(cublasDestroy(h));
    return 0;
}

/* d2 GEMM edge cases against the reference of the path EASYSCALE_D2_GEMM
 * names run on the host (the int8 definition, kernels/d2int8.c, or the
 * portable element function)
 * (same header, -ffp-contract=off): padded leading dimensions, both
 * transposes, beta != 0, beta == 0 over NaN in C, alpha == 0 over NaN in A,
 * a batch count and an n beyond CUDA's 65535 limit of grid.z / grid.y.
 * Prints "edge NAME match=0|1 nan=0|1". */
static void edge_case(cublasHandle_t h, const char *name, int ta, int tb, int m, int n, int k,
                      int lda, int ldb, int ldc, float alpha, float beta, int batch, int nan_a,
                      int nan_c)
{
    size_t arows = ta ? (size_t)k : (size_t)m, acols = ta ? (size_t)m : (size_t)k;
    size_t brows = tb ? (size_t)n : (size_t)k, bcols = tb ? (size_t)k : (size_t)n;
    long long sA = (long long)lda * acols, sB = (long long)ldb * bcols, sC = (long long)ldc * n;
    size_t na = (size_t)sA * batch, nb = (size_t)sB * batch, nc = (size_t)sC * batch;
    (void)arows;
    (void)brows;
    float *a = malloc(na * sizeof(float)), *b = malloc(nb * sizeof(float));
    float *c = malloc(nc * sizeof(float)), *ref = malloc(nc * sizeof(float));
    fill(a, na, 21);
    fill(b, nb, 22);
    fill(c, nc, 23);
    if (nan_a)
        for (size_t i = 0; i < na; i += 7)
            a[i] = NAN;
    if (nan_c)
        for (size_t i = 0; i < nc; i += 3)
            c[i] = NAN;
    memcpy(ref, c, nc * sizeof(float));
    CUdeviceptr dA = upload(a, na), dB = upload(b, nb), dC = upload(c, nc);
    if (batch == 1)
        CK(cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n,
                       k, &alpha, (float *)dA, lda, (float *)dB, ldb, &beta, (float *)dC, ldc));
    else
        CK(cublasSgemmStridedBatched(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha,
                                     (float *)dA, lda, sA, (float *)dB, ldb, sB, &beta,
                                     (float *)dC, ldc, sC, batch));
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH(c, dC, nc * sizeof(float)));
    es_gemm_args_t g = { .A = a, .B = b, .C = ref, .D = ref, .sA = sA, .sB = sB, .sC = sC,
                         .sD = sC, .ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda,
                         .ldb = ldb, .ldc = ldc, .ldd = ldc,
                         .alpha = alpha, .beta = beta };
    /* the reference of the path EASYSCALE_D2_GEMM names (int8 when unset) */
    const char *path = getenv("EASYSCALE_D2_GEMM");
    if (!path || strcmp(path, "fma") != 0) {
        CK(es_d2int8_ref_gemm(&g, batch));
    } else {
        for (int bi = 0; bi < batch; bi++)
            for (long long j = 0; j < n; j++)
                for (long long i = 0; i < m; i++)
                    es_gemm_elem(&g, i, j, bi);
    }
    int nan = 0;
    for (int bi = 0; bi < batch; bi++)
        for (long long j = 0; j < n; j++)
            for (long long i = 0; i < m; i++)
                nan |= isnan(c[bi * sC + i + j * ldc]);
    printf("edge %s match=%d nan=%d\n", name, memcmp(c, ref, nc * sizeof(float)) == 0, nan);
    CK(cuMemFree(dA));
    CK(cuMemFree(dB));
    CK(cuMemFree(dC));
    free(a);
    free(b);
    free(c);
    free(ref);
}

static int mode_gemm_edges(void)
{
    setup(0);
    cublasHandle_t h;
    CK(cublasCreate(&h));
    edge_case(h, "padded_tt", 1, 1, 37, 29, 300, 310, 40, 45, 1.5f, 0.5f, 1, 0, 0);
    edge_case(h, "padded_nt", 0, 1, 37, 29, 300, 41, 33, 40, -0.75f, 0.0f, 1, 0, 0);
    edge_case(h, "beta0_nan_c", 0, 0, 33, 17, 300, 33, 300, 33, 1.0f, 0.0f, 1, 0, 1);
    edge_case(h, "alpha0_nan_a", 0, 0, 33, 17, 300, 33, 300, 33, 0.0f, 2.0f, 1, 1, 0);
    edge_case(h, "batch_70000", 0, 0, 3, 2, 8, 3, 8, 3, 1.0f, 0.0f, 70000, 0, 0);
    edge_case(h, "n_1048600", 1, 1, 2, 1048600, 16, 16, 1048600, 2, 1.0f, 0.0f, 1, 0, 0);
    CK(cublasDestroy(h));
    printf("done\n");
    return 0;
}

/* ---- cuDNN ------------------------------------------------------------------- */

/* A handle and the descriptors of an fp32 NCHW "same" convolution (pad 1,
 * stride 1, cross-correlation) of an nb x c x hh x ww image by ko x c x r x r
 * filters; yd created, not set. */
static void conv_descs(int nb, int c, int hh, int ww, int ko, int r, cudnnHandle_t *h,
                       cudnnTensorDescriptor_t *xd, cudnnTensorDescriptor_t *yd,
                       cudnnFilterDescriptor_t *wd, cudnnConvolutionDescriptor_t *cd)
{
    CK(cudnnCreate(h));
    CK(cudnnCreateTensorDescriptor(xd));
    CK(cudnnCreateTensorDescriptor(yd));
    CK(cudnnCreateFilterDescriptor(wd));
    CK(cudnnCreateConvolutionDescriptor(cd));
    CK(cudnnSetTensor4dDescriptor(*xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, nb, c, hh, ww));
    CK(cudnnSetFilter4dDescriptor(*wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, ko, c, r, r));
    CK(cudnnSetConvolution2dDescriptor(*cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                       CUDNN_DATA_FLOAT));
}

static int mode_cudnn(void)
{
    /* Small channel counts and many output positions: the shapes for which
     * the heuristics pick the atomics-based backward algorithms. */
    enum { NB = 8, C = 3, H = 64, W = 64, KO = 8, R = 3 };
    setup(0);
    cudnnHandle_t h;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    conv_descs(NB, C, H, W, KO, R, &h, &xd, &yd, &wd, &cd);
    int on, oc, oh, ow;
    CK(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &on, &oc, &oh, &ow));
    CK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, oh, ow));
    size_t nx = (size_t)NB * C * H * W, nw = (size_t)KO * C * R * R,
           ny = (size_t)on * oc * oh * ow;
    float *hx = malloc(nx * 4), *hw = malloc(nw * 4), *hy = malloc(ny * 4);
    fill(hx, nx, 21);
    fill(hw, nw, 22);
    fill(hy, ny, 23);
    CUdeviceptr x = upload(hx, nx), w = upload(hw, nw), dy = upload(hy, ny), dw, dx;
    CK(cuMemAlloc(&dw, nw * 4));
    CK(cuMemAlloc(&dx, nx * 4));
    const float one = 1.0f, zero = 0.0f;

    cudnnConvolutionBwdFilterAlgoPerf_t fp[8];
    int n = 0;
    CK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, yd, cd, wd, 8, &n, fp));
    printf("bwd_filter_v7");
    for (int i = 0; i < n; i++)
        printf(" %d/%d", (int)fp[i].algo, (int)fp[i].determinism);
    printf("\n");
    CK(cudnnFindConvolutionBackwardFilterAlgorithm(h, xd, yd, cd, wd, 8, &n, fp));
    printf("bwd_filter_find");
    for (int i = 0; i < n; i++)
        printf(" %d/%d", (int)fp[i].algo, (int)fp[i].determinism);
    printf("\n");
    printf("bwd_filter_find_status"); /* algo:status */
    for (int i = 0; i < n; i++)
        printf(" %d:%d", (int)fp[i].algo, (int)fp[i].status);
    printf("\n");
    cudnnConvolutionBwdDataAlgoPerf_t dp[8];
    CK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, yd, cd, xd, 8, &n, dp));
    printf("bwd_data_v7");
    for (int i = 0; i < n; i++)
        printf(" %d/%d", (int)dp[i].algo, (int)dp[i].determinism);
    printf("\n");

    /* Nondeterministic algorithms, each run three times, no workspace. */
    static const int falgos[] = { CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 };
    for (int a = 0; a < 2; a++)
        for (int i = 0; i < 3; i++) {
            cudnnStatus_t st = cudnnConvolutionBackwardFilter(
                h, &one, xd, (void *)x, yd, (void *)dy, cd,
                (cudnnConvolutionBwdFilterAlgo_t)falgos[a], NULL, 0, &zero, wd, (void *)dw);
            if (st != CUDNN_STATUS_SUCCESS) {
                printf("bwd_filter_algo%d_run%d status %d\n", falgos[a], i, (int)st);
                continue;
            }
            printf("bwd_filter_algo%d_run%d %016llx\n", falgos[a], i,
                   (unsigned long long)download_hash(dw, nw));
        }
    for (int i = 0; i < 3; i++) {
        cudnnStatus_t st = cudnnConvolutionBackwardData(
            h, &one, wd, (void *)w, yd, (void *)dy, cd, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, NULL, 0,
            &zero, xd, (void *)dx);
        if (st != CUDNN_STATUS_SUCCESS) {
            printf("bwd_data_algo0_run%d status %d\n", i, (int)st);
            continue;
        }
        printf("bwd_data_algo0_run%d %016llx\n", i, (unsigned long long)download_hash(dx, nx));
    }

    cudnnPoolingDescriptor_t pd;
    CK(cudnnCreatePoolingDescriptor(&pd));
    CK(cudnnSetPooling2dDescriptor(pd, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
    cudnnPoolingMode_t pm;
    cudnnNanPropagation_t np;
    int wh, ww, ph, pw, sh, sw;
    CK(cudnnGetPooling2dDescriptor(pd, &pm, &np, &wh, &ww, &ph, &pw, &sh, &sw));
    printf("pooling_mode %d\n", (int)pm);

    /* Max-pooling backward with overlapping windows (3x3, stride 1): a
     * maximum shared by several windows sums their gradients, in an order
     * that varies per call unless the mode is the deterministic one. */
    enum { PH = 32, PW = 32, PO = PH - 2 };
    cudnnTensorDescriptor_t pxd, pyd;
    CK(cudnnCreateTensorDescriptor(&pxd));
    CK(cudnnCreateTensorDescriptor(&pyd));
    CK(cudnnSetTensor4dDescriptor(pxd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 3, PH, PW));
    CK(cudnnSetTensor4dDescriptor(pyd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 3, PO, PO));
    CK(cudnnSetPooling2dDescriptor(pd, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN, 3, 3, 0, 0, 1, 1));
    size_t npx = 2 * 3 * PH * PW, npy = 2 * 3 * PO * PO;
    float *hpx = malloc(npx * 4), *hpdy = malloc(npy * 4);
    fill(hpx, npx, 31);
    fill(hpdy, npy, 32);
    CUdeviceptr px = upload(hpx, npx), pdy = upload(hpdy, npy), py, pdx;
    CK(cuMemAlloc(&py, npy * 4));
    CK(cuMemAlloc(&pdx, npx * 4));
    CK(cudnnPoolingForward(h, pd, &one, pxd, (void *)px, &zero, pyd, (void *)py));
    for (int i = 0; i < 3; i++) {
        CK(cudnnPoolingBackward(h, pd, &one, pyd, (void *)py, pyd, (void *)pdy, pxd, (void *)px,
                                &zero, pxd, (void *)pdx));
        printf("pool_bwd_run%d %016llx\n", i, (unsigned long long)download_hash(pdx, npx));
    }
    CK(cudnnDestroy(h));
    return 0;
}

/* Forward, backward data and backward filter with the algorithms the
 * heuristic names first (what a framework does), on device dev; plus d2's
 * result computed on the host (the reference of EASYSCALE_D2_GEMM's path). */
static int mode_conv(int dev)
{
    enum { NB = 4, C = 8, H = 16, W = 16, KO = 16, R = 3 };
    setup(dev);
    cudnnHandle_t h;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    conv_descs(NB, C, H, W, KO, R, &h, &xd, &yd, &wd, &cd);
    CK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, NB, KO, H, W));
    size_t nx = (size_t)NB * C * H * W, nw = (size_t)KO * C * R * R, ny = (size_t)NB * KO * H * W;
    float *hx = malloc(nx * 4), *hw = malloc(nw * 4), *hy = malloc(ny * 4);
    fill(hx, nx, 31);
    fill(hw, nw, 32);
    fill(hy, ny, 33);
    CUdeviceptr x = upload(hx, nx), w = upload(hw, nw), dy = upload(hy, ny), y, dx, dw, ws;
    CK(cuMemAlloc(&y, ny * 4));
    CK(cuMemAlloc(&dx, nx * 4));
    CK(cuMemAlloc(&dw, nw * 4));
    CK(cuMemAlloc(&ws, 64 << 20));
    const float one = 1.0f, zero = 0.0f;
    cudnnConvolutionFwdAlgoPerf_t fp[8];
    cudnnConvolutionBwdDataAlgoPerf_t dp[8];
    cudnnConvolutionBwdFilterAlgoPerf_t wp[8];
    int n;
    CK(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 8, &n, fp));
    CK(cudnnConvolutionForward(h, &one, xd, (void *)x, wd, (void *)w, cd, fp[0].algo, (void *)ws,
                               64 << 20, &zero, yd, (void *)y));
    printf("conv_fwd %016llx algo %d\n", (unsigned long long)download_hash(y, ny), (int)fp[0].algo);
    CK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, yd, cd, xd, 8, &n, dp));
    CK(cudnnConvolutionBackwardData(h, &one, wd, (void *)w, yd, (void *)dy, cd, dp[0].algo,
                                    (void *)ws, 64 << 20, &zero, xd, (void *)dx));
    printf("conv_bwd_data %016llx algo %d\n", (unsigned long long)download_hash(dx, nx),
           (int)dp[0].algo);
    CK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, yd, cd, wd, 8, &n, wp));
    CK(cudnnConvolutionBackwardFilter(h, &one, xd, (void *)x, yd, (void *)dy, cd, wp[0].algo,
                                      (void *)ws, 64 << 20, &zero, wd, (void *)dw));
    printf("conv_bwd_filter %016llx algo %d\n", (unsigned long long)download_hash(dw, nw),
           (int)wp[0].algo);
    /* host reference of d2's path (EASYSCALE_D2_GEMM: int8 unless fma) */
    float *ry = malloc(ny * 4), *rdx = malloc(nx * 4), *rdw = malloc(nw * 4);
    es_conv_args_t a = {
        .in0 = hx, .in1 = hw, .out = ry,
        .xs_n = (long long)C * H * W, .xs_c = H * W, .xs_h = W, .xs_w = 1,
        .ys_n = (long long)KO * H * W, .ys_k = H * W, .ys_p = W, .ys_q = 1,
        .ws_k = (long long)C * R * R, .ws_c = R * R, .ws_r = R, .ws_s = 1,
        .total = (long long)ny, .n = NB, .c = C, .h = H, .w = W, .k = KO, .p = H, .q = W,
        .r = R, .s = R, .pad_h = 1, .pad_w = 1, .u = 1, .v = 1, .dil_h = 1, .dil_w = 1,
        .flip = 0, .groups = 1, .alpha = 1.0f, .beta = 0.0f,
    };
    int int8 = es_d2int8_env_int8();
    CK(es_d2int8_ref_conv_path(0, &a, int8));
    a.in0 = hy, a.out = rdx, a.total = (long long)nx;
    CK(es_d2int8_ref_conv_path(1, &a, int8));
    a.in0 = hx, a.in1 = hy, a.out = rdw, a.total = (long long)nw;
    CK(es_d2int8_ref_conv_path(2, &a, int8));
    printf("ref_fwd %016llx\n", (unsigned long long)hash(ry, ny * 4));
    printf("ref_bwd_data %016llx\n", (unsigned long long)hash(rdx, nx * 4));
    printf("ref_bwd_filter %016llx\n", (unsigned long long)hash(rdw, nw * 4));
    CK(cudnnDestroy(h));
    return 0;
}

/* Portable convolutions against a double-precision host reference written
 * independently (scatter form), for strides, dilations, paddings, groups
 * and both convolution modes: "convcheck I fwd E bwd_data E bwd_filter E"
 * with E the largest error relative to the largest reference value. */
typedef struct {
    int n, c, h, w, k, r, s, ph, pw, u, v, dh, dw, g, conv;
} cc_t;

static double rel_err(const float *got, const double *ref, size_t n)
{
    double mx = 1e-30, e = 0;
    for (size_t i = 0; i < n; i++)
        mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
    for (size_t i = 0; i < n; i++)
        e = fabs(got[i] - ref[i]) > e ? fabs(got[i] - ref[i]) : e;
    return e / mx;
}

static int mode_convcheck(void)
{
    static const cc_t cfgs[] = {
        { 2, 4, 9, 11, 6, 3, 2, 1, 0, 2, 1, 1, 2, 2, 1 },
        { 2, 3, 8, 8, 4, 3, 3, 0, 1, 1, 2, 2, 1, 1, 0 },
        { 1, 6, 7, 7, 6, 1, 1, 0, 0, 1, 1, 1, 1, 3, 0 },
        { 3, 2, 10, 6, 5, 4, 3, 2, 1, 3, 2, 1, 1, 1, 1 },
    };
    setup(0);
    cudnnHandle_t hd;
    CK(cudnnCreate(&hd));
    CUdeviceptr ws;
    CK(cuMemAlloc(&ws, 64 << 20));
    for (size_t ci = 0; ci < sizeof(cfgs) / sizeof(cfgs[0]); ci++) {
        const cc_t *q = &cfgs[ci];
        int cpg = q->c / q->g, kpg = q->k / q->g;
        cudnnTensorDescriptor_t xd, yd;
        cudnnFilterDescriptor_t wd;
        cudnnConvolutionDescriptor_t cd;
        CK(cudnnCreateTensorDescriptor(&xd));
        CK(cudnnCreateTensorDescriptor(&yd));
        CK(cudnnCreateFilterDescriptor(&wd));
        CK(cudnnCreateConvolutionDescriptor(&cd));
        CK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, q->n, q->c, q->h, q->w));
        CK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, q->k, cpg, q->r, q->s));
        CK(cudnnSetConvolution2dDescriptor(cd, q->ph, q->pw, q->u, q->v, q->dh, q->dw,
                                           q->conv ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION,
                                           CUDNN_DATA_FLOAT));
        CK(cudnnSetConvolutionGroupCount(cd, q->g));
        int on, oc, P, Q;
        CK(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &on, &oc, &P, &Q));
        CK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, P, Q));
        size_t nx = (size_t)q->n * q->c * q->h * q->w, nw = (size_t)q->k * cpg * q->r * q->s,
               ny = (size_t)q->n * q->k * P * Q;
        float *hx = malloc(nx * 4), *hw = malloc(nw * 4), *hy = malloc(ny * 4);
        float *gy = malloc(ny * 4), *gx = malloc(nx * 4), *gw = malloc(nw * 4);
        double *ry = calloc(ny, 8), *rx = calloc(nx, 8), *rw = calloc(nw, 8);
        fill(hx, nx, 41 + (unsigned)ci);
        fill(hw, nw, 42 + (unsigned)ci);
        fill(hy, ny, 43 + (unsigned)ci);
        /* reference: scatter over every (image, output position, tap) */
        for (int n = 0; n < q->n; n++)
            for (int k = 0; k < q->k; k++)
                for (int p = 0; p < P; p++)
                    for (int o = 0; o < Q; o++)
                        for (int cc = 0; cc < cpg; cc++)
                            for (int r = 0; r < q->r; r++)
                                for (int t = 0; t < q->s; t++) {
                                    int y = p * q->u - q->ph + r * q->dh, z = o * q->v - q->pw + t * q->dw;
                                    if (y < 0 || y >= q->h || z < 0 || z >= q->w)
                                        continue;
                                    int c = (k / kpg) * cpg + cc;
                                    int fr = q->conv ? q->r - 1 - r : r, fs = q->conv ? q->s - 1 - t : t;
                                    size_t xi = (((size_t)n * q->c + c) * q->h + y) * q->w + z;
                                    size_t wi = (((size_t)k * cpg + cc) * q->r + fr) * q->s + fs;
                                    size_t yi = (((size_t)n * q->k + k) * P + p) * Q + o;
                                    ry[yi] += (double)hx[xi] * hw[wi];
                                    rx[xi] += (double)hy[yi] * hw[wi];
                                    rw[wi] += (double)hx[xi] * hy[yi];
                                }
        CUdeviceptr x = upload(hx, nx), w = upload(hw, nw), dy = upload(hy, ny), y, dx, dwp;
        CK(cuMemAlloc(&y, ny * 4));
        CK(cuMemAlloc(&dx, nx * 4));
        CK(cuMemAlloc(&dwp, nw * 4));
        const float one = 1.0f, zero = 0.0f;
        CK(cudnnConvolutionForward(hd, &one, xd, (void *)x, wd, (void *)w, cd,
                                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, (void *)ws, 64 << 20,
                                   &zero, yd, (void *)y));
        CK(cudnnConvolutionBackwardData(hd, &one, wd, (void *)w, yd, (void *)dy, cd,
                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, (void *)ws, 64 << 20,
                                        &zero, xd, (void *)dx));
        CK(cudnnConvolutionBackwardFilter(hd, &one, xd, (void *)x, yd, (void *)dy, cd,
                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, (void *)ws,
                                          64 << 20, &zero, wd, (void *)dwp));
        CK(cuCtxSynchronize());
        CK(cuMemcpyDtoH(gy, y, ny * 4));
        CK(cuMemcpyDtoH(gx, dx, nx * 4));
        CK(cuMemcpyDtoH(gw, dwp, nw * 4));
        printf("convcheck %zu fwd %.2e bwd_data %.2e bwd_filter %.2e\n", ci, rel_err(gy, ry, ny),
               rel_err(gx, rx, nx), rel_err(gw, rw, nw));
    }
    CK(cudnnDestroy(hd));
    return 0;
}

/* ---- cuDNN backend API ----------------------------------------------------------- */

#define BK(x) CK(x)

static cudnnBackendDescriptor_t bk_tensor(int64_t uid, const int64_t *dims)
{
    cudnnBackendDescriptor_t t;
    int64_t str[4] = { dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1 }, al = 16;
    cudnnDataType_t dt = CUDNN_DATA_FLOAT;
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
    BK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    BK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    BK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
    BK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    BK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al));
    BK(cudnnBackendFinalize(t));
    return t;
}

/* Backward filter graph (shapes for which the heuristics rank the
 * nondeterministic engines first): the engine configs the heuristics
 * return, and whether a plan on engine 3 (nondeterministic) finalizes. */
static int mode_backend(void)
{
    setup(0);
    cudnnHandle_t h;
    CK(cudnnCreate(&h));
    int64_t xd[4] = { 8, 3, 64, 64 }, wd[4] = { 8, 3, 3, 3 }, yd[4] = { 8, 8, 64, 64 };
    cudnnBackendDescriptor_t x = bk_tensor(1, xd), dw = bk_tensor(2, wd), dy = bk_tensor(3, yd);
    cudnnBackendDescriptor_t conv, op, graph, heur;
    int64_t two = 2, pad[2] = { 1, 1 }, one2[2] = { 1, 1 };
    cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv));
    BK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct));
    BK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                                CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    BK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &two));
    BK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    BK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    BK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one2));
    BK(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one2));
    BK(cudnnBackendFinalize(conv));
    float alpha = 1.0f, beta = 0.0f;
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                                    &op));
    BK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    BK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dw));
    BK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dy));
    BK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv));
    BK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                                CUDNN_TYPE_FLOAT, 1, &alpha));
    BK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                                CUDNN_TYPE_FLOAT, 1, &beta));
    BK(cudnnBackendFinalize(op));
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &graph));
    BK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                1, &op));
    BK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    BK(cudnnBackendFinalize(graph));
    cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    BK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
    BK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm));
    BK(cudnnBackendFinalize(heur));
    int64_t count = 0;
    BK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                0, &count, NULL));
    cudnnBackendDescriptor_t cfgs[16];
    if (count > 16)
        count = 16;
    for (int i = 0; i < count; i++)
        BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]));
    int64_t got = 0;
    BK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                count, &got, cfgs));
    printf("heur_engines");
    for (int i = 0; i < got; i++) {
        cudnnBackendDescriptor_t eng;
        int64_t n = 0, gidx = -1;
        BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
        BK(cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng));
        BK(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                    &gidx));
        printf(" %lld", (long long)gidx);
        BK(cudnnBackendDestroyDescriptor(eng));
    }
    printf("\n");
    /* A plan on engine 3 (carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC). */
    cudnnBackendDescriptor_t eng, cfg, plan;
    int64_t g3 = 3;
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
    BK(cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
    BK(cudnnBackendSetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &g3));
    BK(cudnnBackendFinalize(eng));
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg));
    BK(cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                &eng));
    BK(cudnnBackendFinalize(cfg));
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan));
    BK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    BK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
    printf("plan_engine3 %d\n", (int)cudnnBackendFinalize(plan));
    BK(cudnnBackendDestroyDescriptor(plan));
    for (int i = 0; i < count; i++)
        BK(cudnnBackendDestroyDescriptor(cfgs[i]));
    CK(cudnnDestroy(h));
    return 0;
}

/* ---- threads and fork ---------------------------------------------------------- */

static void *thread_body(void *arg)
{
    (void)arg;
    int n = 0, v = 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    getproc2_t gp = (getproc2_t)dlsym(h, "cuGetProcAddress_v2");
    for (int i = 0; i < 2000; i++) {
        if (cuDeviceGetCount(&n) != CUDA_SUCCESS || n < 1)
            return (void *)1;
        void *f = NULL;
        CUdriverProcAddressQueryResult st;
        if (gp("cuDriverGetVersion", &f, 13000, 0, &st) != CUDA_SUCCESS || !f ||
            ((count_t)f)(&v) != CUDA_SUCCESS)
            return (void *)2;
    }
    return NULL;
}

static int mode_threads(void)
{
    CK(cuInit(0));
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, thread_body, NULL);
    int bad = 0;
    for (int i = 0; i < 8; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += r != NULL;
    }
    printf("threads bad %d\n", bad);
    print_stat("cuDeviceGetCount");
    return bad != 0;
}

static int mode_fork(void)
{
    pid_t pid = fork(); /* before the driver was ever used */
    if (pid == 0) {
        int n = 0;
        _exit(cuInit(0) == CUDA_SUCCESS && cuDeviceGetCount(&n) == CUDA_SUCCESS && n > 0 ? 0 : 3);
    }
    int st;
    waitpid(pid, &st, 0);
    printf("fork-before child %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128);
    int v = 0;
    CK(cuDriverGetVersion(&v));
    pid = fork(); /* after */
    if (pid == 0) {
        int v2 = 0;
        _exit(cuDriverGetVersion(&v2) == CUDA_SUCCESS && v2 == v ? 0 : 4);
    }
    waitpid(pid, &st, 0);
    printf("fork-after child %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2)
        return 2;
    int dev = argc > 2 ? atoi(argv[2]) : 0;
    if (!strcmp(argv[1], "paths"))
        return mode_paths();
    if (!strcmp(argv[1], "blas-contend"))
        return mode_blas_contend(argc > 2 && !strcmp(argv[2], "noenv"));
    if (!strcmp(argv[1], "symv"))
        return mode_symv();
    if (!strcmp(argv[1], "gemm"))
        return mode_gemm(dev);
    if (!strcmp(argv[1], "gemm-edges"))
        return mode_gemm_edges();
    if (!strcmp(argv[1], "convcheck"))
        return mode_convcheck();
    if (!strcmp(argv[1], "backend"))
        return mode_backend();
    if (!strcmp(argv[1], "conv"))
        return mode_conv(dev);
    if (!strcmp(argv[1], "cudnn"))
        return mode_cudnn();
    if (!strcmp(argv[1], "threads"))
        return mode_threads();
    if (!strcmp(argv[1], "fork"))
        return mode_fork();
    return 2;
}
