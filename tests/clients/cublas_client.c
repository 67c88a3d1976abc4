/* cuBLAS client written only against NVIDIA's cublas_v2.h and cuda.h: the
 * same program runs on simcuda and on a real GPU. SGEMM over many shapes,
 * both transposes and padded leading dimensions, strided batched, GemmEx
 * (fp32, and fp16 inputs with fp32 compute), invalid arguments. Prints
 * "[  PASSED  ] N test(s)." or "[  FAILED  ] N test(s)." and exits non-zero
 * on failure. */
#include <cublas_v2.h>
#include <cuda.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_pass, g_fail;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            printf("  check failed at line %d: %s: ", __LINE__, #cond);                    \
            printf(__VA_ARGS__);                                                           \
            printf("\n");                                                                  \
            return 1;                                                                      \
        }                                                                                  \
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
}

static uint32_t g_seed = 12345;

static float frand(void)
{
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)(g_seed >> 8) / 16777216.0f - 0.5f;
}

static cublasHandle_t g_h;

static CUdeviceptr upload(const void *host, size_t bytes)
{
    CUdeviceptr d = 0;
    if (cuMemAlloc(&d, bytes ? bytes : 4) != CUDA_SUCCESS)
        return 0;
    if (bytes && cuMemcpyHtoD(d, host, bytes) != CUDA_SUCCESS) {
        cuMemFree(d);
        return 0;
    }
    return d;
}

#define DP(d) ((float *)(uintptr_t)(d))

/* |C - (alpha op(A) op(B) + beta C0)| within a k-scaled bound, in double. */
static int verify(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, const float *C0, const float *C, int ldc,
                  double rel)
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0, mag = 0;
            for (int p = 0; p < k; p++) {
                double a = ta ? A[p + (size_t)i * lda] : A[i + (size_t)p * lda];
                double b = tb ? B[j + (size_t)p * ldb] : B[p + (size_t)j * ldb];
                s += a * b;
                mag += fabs(a * b);
            }
            double c0 = beta == 0.0f ? 0.0 : C0[i + (size_t)j * ldc];
            double ref = alpha * s + beta * c0;
            double tol = rel * (k + 4) * (fabs(alpha) * mag + fabs(beta * c0)) + 1e-30;
            double got = C[i + (size_t)j * ldc];
            if (!(fabs(got - ref) <= tol)) {
                printf("  C(%d,%d) = %.9g, expected %.9g (m %d n %d k %d ta %d tb %d)\n", i, j,
                       got, ref, m, n, k, ta, tb);
                return 1;
            }
        }
    return 0;
}

static int sgemm_case(int ta, int tb, int m, int n, int k, int pad, float alpha, float beta)
{
    int lda = (ta ? k : m) + pad, ldb = (tb ? n : k) + pad, ldc = m + pad;
    if (lda < 1)
        lda = 1;
    if (ldb < 1)
        ldb = 1;
    size_t na = (size_t)lda * (ta ? m : k), nb = (size_t)ldb * (tb ? k : n),
           nc = (size_t)ldc * n;
    float *A = malloc(na * 4 + 4), *B = malloc(nb * 4 + 4), *C0 = malloc(nc * 4),
          *C = malloc(nc * 4);
    for (size_t i = 0; i < na; i++)
        A[i] = frand();
    for (size_t i = 0; i < nb; i++)
        B[i] = frand();
    for (size_t i = 0; i < nc; i++)
        C0[i] = frand();
    CUdeviceptr dA = upload(A, na * 4), dB = upload(B, nb * 4), dC = upload(C0, nc * 4);
    int bad = 1;
    if (dA && dB && dC &&
        cublasSgemm(g_h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
                    &alpha, DP(dA), lda, DP(dB), ldb, &beta, DP(dC), ldc) == CUBLAS_STATUS_SUCCESS &&
        cuCtxSynchronize() == CUDA_SUCCESS && cuMemcpyDtoH(C, dC, nc * 4) == CUDA_SUCCESS)
        bad = verify(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C0, C, ldc, 2e-7);
    else
        printf("  sgemm %dx%dx%d failed to run\n", m, n, k);
    cuMemFree(dA);
    cuMemFree(dB);
    cuMemFree(dC);
    free(A);
    free(B);
    free(C0);
    free(C);
    return bad;
}

static int test_sgemm_shapes(void)
{
    static const int dims[] = {1, 2, 7, 16, 33, 64, 127};
    static const int ks[] = {1, 3, 32, 100, 513};
    for (int t = 0; t < 4; t++)
        for (int a = 0; a < 7; a++)
            for (int b = 0; b < 5; b++) {
                int m = dims[a], n = dims[(a + 2 * b + t) % 7], k = ks[b];
                if (sgemm_case(t & 1, t >> 1, m, n, k, (a + b) % 4, b % 2 ? 0.5f : 1.0f,
                               a % 3 == 0 ? 0.0f : -1.0f))
                    return 1;
            }
    return sgemm_case(0, 1, 300, 200, 700, 3, 1.0f, 1.0f);
}

static int test_strided_batched(void)
{
    const int m = 20, n = 11, k = 35, lda = 37, ldb = 36, ldc = 21, batch = 6;
    const long long sa = (long long)lda * m + 5, sb = (long long)ldb * n + 2,
                    sc = (long long)ldc * n + 9;
    size_t na = (size_t)(sa * batch), nb = (size_t)(sb * batch), nc = (size_t)(sc * batch);
    float *A = malloc(na * 4), *B = malloc(nb * 4), *C0 = malloc(nc * 4), *C = malloc(nc * 4);
    for (size_t i = 0; i < na; i++)
        A[i] = frand();
    for (size_t i = 0; i < nb; i++)
        B[i] = frand();
    for (size_t i = 0; i < nc; i++)
        C0[i] = frand();
    CUdeviceptr dA = upload(A, na * 4), dB = upload(B, nb * 4), dC = upload(C0, nc * 4);
    float alpha = 1.25f, beta = 0.5f;
    CHECK(dA && dB && dC, "upload");
    CHECK(cublasSgemmStridedBatched(g_h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, DP(dA), lda,
                                    sa, DP(dB), ldb, sb, &beta, DP(dC), ldc, sc,
                                    batch) == CUBLAS_STATUS_SUCCESS,
          "status");
    CHECK(cuCtxSynchronize() == CUDA_SUCCESS && cuMemcpyDtoH(C, dC, nc * 4) == CUDA_SUCCESS,
          "sync");
    for (int b = 0; b < batch; b++)
        CHECK(!verify(1, 0, m, n, k, alpha, A + b * sa, lda, B + b * sb, ldb, beta, C0 + b * sc,
                      C + b * sc, ldc, 2e-7),
              "batch %d", b);
    /* bytes between the matrices are untouched */
    for (int b = 0; b < batch; b++)
        for (long long i = (long long)ldc * n; i < sc; i++)
            CHECK(C[b * sc + i] == C0[b * sc + i], "gap written");
    cuMemFree(dA);
    cuMemFree(dB);
    cuMemFree(dC);
    free(A);
    free(B);
    free(C0);
    free(C);
    return 0;
}

/* Exact float -> half for normal values with <= 11 significant bits. */
static uint16_t half_exact(float f)
{
    if (f == 0.0f)
        return 0;
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t e = (x >> 23) & 0xff;
    return (uint16_t)(((x >> 16) & 0x8000u) | ((e - 112) << 10) | ((x >> 13) & 0x3ffu));
}

static int test_gemmex(void)
{
    const int m = 24, n = 16, k = 48;
    float *A = malloc(m * k * 4), *B = malloc(k * n * 4), *C = malloc(m * n * 4),
          *C2 = malloc(m * n * 4), *Z = calloc(m * n, 4);
    uint16_t *A16 = malloc(m * k * 2), *B16 = malloc(k * n * 2);
    for (int i = 0; i < m * k; i++) {
        A[i] = (float)(i % 9 - 4) * 0.125f;
        A16[i] = half_exact(A[i]);
    }
    for (int i = 0; i < k * n; i++) {
        B[i] = (float)(i % 7 - 3) * 0.25f;
        B16[i] = half_exact(B[i]);
    }
    CUdeviceptr dA = upload(A, m * k * 4), dB = upload(B, k * n * 4), dC = upload(Z, m * n * 4),
                dA16 = upload(A16, m * k * 2), dB16 = upload(B16, k * n * 2);
    CHECK(dA && dB && dC && dA16 && dB16, "upload");
    float alpha = 1, beta = 0;
    CHECK(cublasGemmEx(g_h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, DP(dA), CUDA_R_32F, m,
                       DP(dB), CUDA_R_32F, k, &beta, DP(dC), CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
          "fp32 GemmEx");
    CHECK(cuCtxSynchronize() == CUDA_SUCCESS && cuMemcpyDtoH(C, dC, m * n * 4) == CUDA_SUCCESS,
          "sync");
    CHECK(!verify(0, 0, m, n, k, alpha, A, m, B, k, beta, Z, C, m, 2e-7), "fp32 values");
    CHECK(cublasGemmEx(g_h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha, (void *)(uintptr_t)dA16,
                       CUDA_R_16F, m, (void *)(uintptr_t)dB16, CUDA_R_16F, k, &beta, DP(dC),
                       CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
          "fp16 GemmEx");
    CHECK(cuCtxSynchronize() == CUDA_SUCCESS && cuMemcpyDtoH(C2, dC, m * n * 4) == CUDA_SUCCESS,
          "sync");
    /* every product and partial sum is exact here: identical results */
    CHECK(memcmp(C, C2, m * n * 4) == 0, "fp16 inputs give other values than fp32");
    cuMemFree(dA);
    cuMemFree(dB);
    cuMemFree(dC);
    cuMemFree(dA16);
    cuMemFree(dB16);
    free(A);
    free(B);
    free(C);
    free(C2);
    free(Z);
    free(A16);
    free(B16);
    return 0;
}

static int test_invalid(void)
{
    float one = 1;
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 4096) == CUDA_SUCCESS, "alloc");
    float *p = DP(d);
    const cublasOperation_t N = CUBLAS_OP_N;
    CHECK(cublasSgemm(g_h, N, N, -1, 2, 2, &one, p, 2, p, 2, &one, p, 2) ==
              CUBLAS_STATUS_INVALID_VALUE, "m < 0");
    CHECK(cublasSgemm(g_h, N, N, 2, 2, -3, &one, p, 2, p, 2, &one, p, 2) ==
              CUBLAS_STATUS_INVALID_VALUE, "k < 0");
    CHECK(cublasSgemm(g_h, N, N, 4, 2, 2, &one, p, 3, p, 2, &one, p, 4) ==
              CUBLAS_STATUS_INVALID_VALUE, "lda < m");
    CHECK(cublasSgemm(g_h, CUBLAS_OP_T, N, 4, 2, 5, &one, p, 4, p, 5, &one, p, 4) ==
              CUBLAS_STATUS_INVALID_VALUE, "lda < k (transposed)");
    CHECK(cublasSgemm(g_h, N, N, 4, 2, 2, &one, p, 4, p, 1, &one, p, 4) ==
              CUBLAS_STATUS_INVALID_VALUE, "ldb < k");
    CHECK(cublasSgemm(g_h, N, N, 4, 2, 2, &one, p, 4, p, 2, &one, p, 2) ==
              CUBLAS_STATUS_INVALID_VALUE, "ldc < m");
    CHECK(cublasSgemm(g_h, (cublasOperation_t)9, N, 2, 2, 2, &one, p, 2, p, 2, &one, p, 2) ==
              CUBLAS_STATUS_INVALID_VALUE, "bad transa");
    CHECK(cublasSgemmStridedBatched(g_h, N, N, 2, 2, 2, &one, p, 2, 4, p, 2, 4, &one, p, 2, 4,
                                    -2) == CUBLAS_STATUS_INVALID_VALUE, "batch < 0");
    CHECK(cublasGemmEx(g_h, N, N, 2, 2, 2, &one, p, CUDA_R_32F, 1, p, CUDA_R_32F, 2, &one, p,
                       CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) ==
              CUBLAS_STATUS_INVALID_VALUE, "GemmEx lda < m");
    CHECK(cublasSgemm(NULL, N, N, 2, 2, 2, &one, p, 2, p, 2, &one, p, 2) ==
              CUBLAS_STATUS_NOT_INITIALIZED, "NULL handle");
    CHECK(cublasSgemm(g_h, N, N, 0, 0, 0, &one, p, 1, p, 1, &one, p, 1) ==
              CUBLAS_STATUS_SUCCESS, "empty GEMM");
    CHECK(cuCtxSynchronize() == CUDA_SUCCESS, "sync");
    cuMemFree(d);
    return 0;
}

static int test_handle(void)
{
    int v = 0;
    cudaStream_t got = (cudaStream_t)1;
    CUstream s;
    cublasHandle_t h2;
    CHECK(cublasGetVersion(g_h, &v) == CUBLAS_STATUS_SUCCESS && v / 10000 == CUBLAS_VER_MAJOR,
          "version %d", v);
    CHECK(cublasGetProperty(MAJOR_VERSION, &v) == CUBLAS_STATUS_SUCCESS &&
              v == CUBLAS_VER_MAJOR, "property");
    CHECK(cuStreamCreate(&s, 0) == CUDA_SUCCESS, "stream");
    CHECK(cublasCreate(&h2) == CUBLAS_STATUS_SUCCESS, "create");
    CHECK(cublasSetStream(h2, (cudaStream_t)s) == CUBLAS_STATUS_SUCCESS, "set stream");
    CHECK(cublasGetStream(h2, &got) == CUBLAS_STATUS_SUCCESS && got == (cudaStream_t)s,
          "get stream");
    CHECK(cublasDestroy(h2) == CUBLAS_STATUS_SUCCESS, "destroy");
    CHECK(cuStreamDestroy(s) == CUDA_SUCCESS, "stream destroy");
    CHECK(strcmp(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE),
                 "CUBLAS_STATUS_INVALID_VALUE") == 0, "status name");
    return 0;
}

int main(void)
{
    /* On simcuda: device memory kept out of this process, as on a GPU
     * machine (a real driver ignores the variable): the library never
     * touches device memory from the host. */
    setenv("SIMCUDA_ISOLATION", "1", 1);
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cublasCreate(&g_h) != CUBLAS_STATUS_SUCCESS) {
        printf("setup failed (no device / cuBLAS)\n[  FAILED  ] 1 test(s).\n");
        return 1;
    }
    printf("[==========] Running 5 test(s).\n");
    run("handle", test_handle);
    run("sgemm_shapes", test_sgemm_shapes);
    run("strided_batched", test_strided_batched);
    run("gemmex", test_gemmex);
    run("invalid_args", test_invalid);
    cublasDestroy(g_h);
    if (g_fail) {
        printf("[  FAILED  ] %d test(s).\n", g_fail);
        return 1;
    }
    printf("[  PASSED  ] %d test(s).\n", g_pass);
    return 0;
}
