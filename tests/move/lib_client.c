/* Client run by tests/move/lib_test.c under libeasyscale.so: a cuBLAS
 * handle (its own stream, workspace, TF32 math, device pointer mode,
 * atomics allowed), a cuBLASLt handle and a cuDNN handle (the same
 * stream), and each step an SGEMM, a cuBLASLt matmul and a convolution on
 * inputs made from the step number; the EST is moved through the control
 * hook (easyscale_move) before the steps named on the command line.
 *
 *   lib_client STEPS [STEP:SLOT]...
 *
 * Prints "move to SLOT: RC", "step I gpu G", "settings kept" when every
 * setting read back with the Get functions before every step is the one
 * set, and "checksum C" (the outputs of every step, hashed in order). A
 * failing call prints "FAIL call = status (line)" and exits 1.
 * Uses NVIDIA's headers only. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                                 \
    do {                                                                                      \
        long long _r = (long long)(x);                                                        \
        if (_r != 0) {                                                                        \
            printf("FAIL %s = %lld (line %d)\n", #x, _r, __LINE__);                          \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)
#define EXPECT(c)                                                                             \
    do {                                                                                      \
        if (!(c)) {                                                                           \
            printf("setting lost: %s (line %d)\n", #c, __LINE__);                            \
            kept = 0;                                                                         \
        }                                                                                     \
    } while (0)

/* GEMM: C[M x N] = A[M x K] B[K x N]; conv: 1 x CI x H x W, CO x CI x 3 x 3, pad 1 */
#define M 48
#define N 40
#define K 64
#define CI 3
#define CO 4
#define H 12
#define W 12
#define WS_BYTES (4u << 20)

static uint64_t g_chain = 1469598103934665603ULL;
static int kept = 1;

static void hash_in(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        g_chain = (g_chain ^ b[i]) * 1099511628211ULL;
}

static void fill(float *v, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((int)(seed >> 9) % 2001 - 1000) / 1013.0f;
    }
}

typedef int (*move_fn)(int);

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int steps = argc > 1 ? atoi(argv[1]) : 4;
    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b, c, d, ws, sc, x, w, y;
    CK(cuMemAlloc(&a, M * K * 4));
    CK(cuMemAlloc(&b, K * N * 4));
    CK(cuMemAlloc(&c, M * N * 4));
    CK(cuMemAlloc(&d, M * N * 4));
    CK(cuMemAlloc(&ws, WS_BYTES));
    CK(cuMemAlloc(&sc, 8));
    CK(cuMemAlloc(&x, CI * H * W * 4));
    CK(cuMemAlloc(&w, CO * CI * 9 * 4));
    CK(cuMemAlloc(&y, CO * H * W * 4));
    const float scal[2] = { 0.75f, 0.0f }; /* alpha, beta in device memory */
    CK(cuMemcpyHtoD(sc, scal, sizeof(scal)));

    /* cuBLAS, every setting */
    cublasHandle_t bh;
    CK(cublasCreate(&bh));
    CK(cublasSetStream(bh, (cudaStream_t)s));
    CK(cublasSetWorkspace(bh, (void *)ws, WS_BYTES));
    CK(cublasSetMathMode(bh, CUBLAS_TF32_TENSOR_OP_MATH));
    CK(cublasSetPointerMode(bh, CUBLAS_POINTER_MODE_DEVICE));
    CK(cublasSetAtomicsMode(bh, CUBLAS_ATOMICS_ALLOWED));

    /* cuBLASLt */
    cublasLtHandle_t lh;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
    CK(cublasLtCreate(&lh));
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, M, K, M));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, K, N, K));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, M, N, M));
    CK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t lt_ws = 0;
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &lt_ws, sizeof(lt_ws)));

    /* cuDNN */
    cudnnHandle_t dh;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    CK(cudnnCreate(&dh));
    CK(cudnnSetStream(dh, (cudaStream_t)s));
    CK(cudnnCreateTensorDescriptor(&xd));
    CK(cudnnCreateTensorDescriptor(&yd));
    CK(cudnnCreateFilterDescriptor(&wd));
    CK(cudnnCreateConvolutionDescriptor(&cd));
    CK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, CI, H, W));
    CK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, CO, H, W));
    CK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CO, CI, 3, 3));
    CK(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                       CUDNN_DATA_FLOAT));

    static float ha[M * K], hb[K * N], hc[M * N], hd[M * N], hx[CI * H * W], hw[CO * CI * 9],
        hy[CO * H * W];
    move_fn mv = (move_fn)dlsym(RTLD_DEFAULT, "easyscale_move");
    int (*where)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "easyscale_where");
    for (int i = 0; i < steps; i++) {
        for (int k = 2; k < argc; k++) {
            int at, slot;
            if (sscanf(argv[k], "%d:%d", &at, &slot) == 2 && at == i)
                printf("move to %d: %d\n", slot, mv ? mv(slot) : -1);
        }
        /* the settings, read back */
        cudaStream_t gs = NULL;
        cublasMath_t gm;
        cublasPointerMode_t gp;
        cublasAtomicsMode_t ga;
        CK(cublasGetStream(bh, &gs));
        EXPECT(gs == (cudaStream_t)s);
        CK(cublasGetMathMode(bh, &gm));
        EXPECT(gm == CUBLAS_TF32_TENSOR_OP_MATH);
        CK(cublasGetPointerMode(bh, &gp));
        EXPECT(gp == CUBLAS_POINTER_MODE_DEVICE);
        CK(cublasGetAtomicsMode(bh, &ga));
        EXPECT(ga == CUBLAS_ATOMICS_ALLOWED);
        gs = NULL;
        CK(cudnnGetStream(dh, &gs));
        EXPECT(gs == (cudaStream_t)s);

        fill(ha, M * K, 11u + (unsigned)i);
        fill(hb, K * N, 23u + (unsigned)i);
        fill(hx, CI * H * W, 31u + (unsigned)i);
        fill(hw, CO * CI * 9, 47u + (unsigned)i);
        CK(cuMemcpyHtoDAsync(a, ha, sizeof(ha), s));
        CK(cuMemcpyHtoDAsync(b, hb, sizeof(hb), s));
        CK(cuMemcpyHtoDAsync(x, hx, sizeof(hx), s));
        CK(cuMemcpyHtoDAsync(w, hw, sizeof(hw), s));
        /* alpha and beta are device pointers (the pointer mode) */
        CK(cublasSgemm(bh, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, (const float *)sc,
                       (const float *)a, M, (const float *)b, K, (const float *)(sc + 4),
                       (float *)c, M));
        const float one = 1.0f, zero = 0.0f;
        cublasLtMatmulHeuristicResult_t hr;
        int got = 0;
        CK(cublasLtMatmulAlgoGetHeuristic(lh, desc, la, lb, lc, lc, pref, 1, &hr, &got));
        if (got != 1)
            CK(got - 1 ? got - 1 : 99);
        CK(cublasLtMatmul(lh, desc, &one, (const void *)a, la, (const void *)b, lb, &zero,
                          (const void *)d, lc, (void *)d, lc, &hr.algo, NULL, 0,
                          (cudaStream_t)s));
        CK(cudnnConvolutionForward(dh, &one, xd, (const void *)x, wd, (const void *)w, cd,
                                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, NULL, 0, &zero, yd,
                                   (void *)y));
        CK(cuMemcpyDtoHAsync(hc, c, sizeof(hc), s));
        CK(cuMemcpyDtoHAsync(hd, d, sizeof(hd), s));
        CK(cuMemcpyDtoHAsync(hy, y, sizeof(hy), s));
        CK(cuStreamSynchronize(s));
        hash_in(hc, sizeof(hc));
        hash_in(hd, sizeof(hd));
        hash_in(hy, sizeof(hy));
        printf("step %d gpu %d\n", i, where ? where() : 0);
    }
    if (kept)
        printf("settings kept\n");
    printf("checksum %016llx\n", (unsigned long long)g_chain);
    CK(cudnnDestroy(dh));
    CK(cublasLtDestroy(lh));
    CK(cublasDestroy(bh));
    /* a destroyed handle: the library's own status, no crash */
    printf("destroyed blas %d\n", (int)cublasSetMathMode(bh, CUBLAS_DEFAULT_MATH));
    printf("destroyed dnn %s\n", cudnnSetStream(dh, (cudaStream_t)s) ? "refused" : "accepted");
    return 0;
}
