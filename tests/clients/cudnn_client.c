/* A cuDNN client written only against NVIDIA's cudnn.h and cuda.h, as a
 * framework would use the library: a convolution forward and backward
 * (data, filter) with the heuristics' algorithms, max pooling forward and
 * backward, each checked against a naive reference, and a bad-parameter
 * check. Runs on simcuda or on a real GPU unchanged. Prints a cmocka-style
 * summary and exits non-zero on failure. */
#include <cuda.h>
#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define CHECK(cond, ...)                                  \
    do {                                                  \
        if (!(cond)) {                                    \
            fprintf(stderr, "FAILED %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                 \
            fprintf(stderr, "\n");                        \
            return 1;                                     \
        }                                                 \
    } while (0)
#define CU(x) CHECK((x) == CUDA_SUCCESS, "%s", #x)
#define DNN(x)                                                                  \
    do {                                                                        \
        cudnnStatus_t st_ = (x);                                                \
        CHECK(st_ == CUDNN_STATUS_SUCCESS, "%s: %s", #x, cudnnGetErrorString(st_)); \
    } while (0)

enum { N = 2, C = 3, H = 9, W = 8, K = 4, R = 3, S = 3, PAD = 1, STR = 2 };

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static cudnnHandle_t h;
static CUcontext ctx;

static int close_to(const float *got, const double *want, size_t n, const char *what)
{
    double scale = 1e-30;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++)
        CHECK(fabs(got[i] - want[i]) <= 1e-5 * scale, "%s[%zu]: got %g want %g", what, i,
              (double)got[i], want[i]);
    return 0;
}

static int test_conv(void)
{
    int P = (H + 2 * PAD - R) / STR + 1, Q = (W + 2 * PAD - S) / STR + 1;
    size_t nx = N * C * H * W, nw = K * C * R * S, ny = (size_t)N * K * P * Q;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *dy = malloc(ny * 4);
    float *y = malloc(ny * 4), *dx = malloc(nx * 4), *dw = malloc(nw * 4);
    double *ry = calloc(ny, 8), *rdx = calloc(nx, 8), *rdw = calloc(nw, 8);
    unsigned seed = 7;
    for (size_t i = 0; i < nx; i++) x[i] = frand(&seed);
    for (size_t i = 0; i < nw; i++) w[i] = frand(&seed);
    for (size_t i = 0; i < ny; i++) dy[i] = frand(&seed);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            for (int p = 0; p < P; p++)
                for (int q = 0; q < Q; q++)
                    for (int c = 0; c < C; c++)
                        for (int r = 0; r < R; r++)
                            for (int s = 0; s < S; s++) {
                                int hh = p * STR - PAD + r, ww = q * STR - PAD + s;
                                if (hh < 0 || hh >= H || ww < 0 || ww >= W)
                                    continue;
                                size_t xi = ((size_t)(n * C + c) * H + hh) * W + ww;
                                size_t wi = ((size_t)(k * C + c) * R + r) * S + s;
                                size_t yi = ((size_t)(n * K + k) * P + p) * Q + q;
                                ry[yi] += (double)x[xi] * w[wi];
                                rdx[xi] += (double)dy[yi] * w[wi];
                                rdw[wi] += (double)dy[yi] * x[xi];
                            }
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    DNN(cudnnCreateTensorDescriptor(&xd));
    DNN(cudnnCreateTensorDescriptor(&yd));
    DNN(cudnnCreateFilterDescriptor(&wd));
    DNN(cudnnCreateConvolutionDescriptor(&cd));
    DNN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
    DNN(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, R, S));
    DNN(cudnnSetConvolution2dDescriptor(cd, PAD, PAD, STR, STR, 1, 1, CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT));
    int on, oc, oh, ow;
    DNN(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &on, &oc, &oh, &ow));
    CHECK(on == N && oc == K && oh == P && ow == Q, "output dims %d %d %d %d", on, oc, oh, ow);
    DNN(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, P, Q));
    cudnnConvolutionFwdAlgoPerf_t fp;
    cudnnConvolutionBwdDataAlgoPerf_t dp;
    cudnnConvolutionBwdFilterAlgoPerf_t wp;
    int got;
    DNN(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 1, &got, &fp));
    DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd, yd, cd, xd, 1, &got, &dp));
    DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, xd, yd, cd, wd, 1, &got, &wp));
    size_t ws = 0, sz;
    DNN(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, fp.algo, &sz));
    ws = sz > ws ? sz : ws;
    DNN(cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd, yd, cd, xd, dp.algo, &sz));
    ws = sz > ws ? sz : ws;
    DNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd, yd, cd, wd, wp.algo, &sz));
    ws = sz > ws ? sz : ws;
    CUdeviceptr dX, dW, dY, dDY, dDX, dDW, dWS;
    CU(cuMemAlloc(&dX, nx * 4));
    CU(cuMemAlloc(&dW, nw * 4));
    CU(cuMemAlloc(&dY, ny * 4));
    CU(cuMemAlloc(&dDY, ny * 4));
    CU(cuMemAlloc(&dDX, nx * 4));
    CU(cuMemAlloc(&dDW, nw * 4));
    CU(cuMemAlloc(&dWS, ws ? ws : 4));
    CU(cuMemcpyHtoD(dX, x, nx * 4));
    CU(cuMemcpyHtoD(dW, w, nw * 4));
    CU(cuMemcpyHtoD(dDY, dy, ny * 4));
    float one = 1.0f, zero = 0.0f;
    DNN(cudnnConvolutionForward(h, &one, xd, (void *)dX, wd, (void *)dW, cd, fp.algo,
                                (void *)dWS, ws, &zero, yd, (void *)dY));
    DNN(cudnnConvolutionBackwardData(h, &one, wd, (void *)dW, yd, (void *)dDY, cd, dp.algo,
                                     (void *)dWS, ws, &zero, xd, (void *)dDX));
    DNN(cudnnConvolutionBackwardFilter(h, &one, xd, (void *)dX, yd, (void *)dDY, cd, wp.algo,
                                       (void *)dWS, ws, &zero, wd, (void *)dDW));
    CU(cuCtxSynchronize());
    CU(cuMemcpyDtoH(y, dY, ny * 4));
    CU(cuMemcpyDtoH(dx, dDX, nx * 4));
    CU(cuMemcpyDtoH(dw, dDW, nw * 4));
    if (close_to(y, ry, ny, "y") || close_to(dx, rdx, nx, "dx") || close_to(dw, rdw, nw, "dw"))
        return 1;
    cuMemFree(dX); cuMemFree(dW); cuMemFree(dY); cuMemFree(dDY);
    cuMemFree(dDX); cuMemFree(dDW); cuMemFree(dWS);
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyConvolutionDescriptor(cd);
    free(x); free(w); free(dy); free(y); free(dx); free(dw);
    free(ry); free(rdx); free(rdw);
    return 0;
}

static int test_pool(void)
{
    enum { WH = 3, PS = 2 };
    int P = (H - WH) / PS + 1, Q = (W - WH) / PS + 1;
    size_t nx = N * C * H * W, ny = (size_t)N * C * P * Q;
    float *x = malloc(nx * 4), *dy = malloc(ny * 4), *y = malloc(ny * 4), *dx = malloc(nx * 4);
    double *ry = calloc(ny, 8), *rdx = calloc(nx, 8);
    unsigned seed = 11;
    for (size_t i = 0; i < nx; i++) x[i] = frand(&seed);
    for (size_t i = 0; i < ny; i++) dy[i] = frand(&seed);
    for (int nc = 0; nc < N * C; nc++)
        for (int p = 0; p < P; p++)
            for (int q = 0; q < Q; q++) {
                size_t best = 0;
                float m = -INFINITY;
                for (int i = 0; i < WH; i++)
                    for (int j = 0; j < WH; j++) {
                        size_t xi = ((size_t)nc * H + p * PS + i) * W + q * PS + j;
                        if (x[xi] > m) {
                            m = x[xi];
                            best = xi;
                        }
                    }
                size_t yi = ((size_t)nc * P + p) * Q + q;
                ry[yi] = m;
                rdx[best] += dy[yi];
            }
    cudnnTensorDescriptor_t xd, yd;
    cudnnPoolingDescriptor_t pd;
    DNN(cudnnCreateTensorDescriptor(&xd));
    DNN(cudnnCreateTensorDescriptor(&yd));
    DNN(cudnnCreatePoolingDescriptor(&pd));
    DNN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
    DNN(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, P, Q));
    DNN(cudnnSetPooling2dDescriptor(pd, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_NOT_PROPAGATE_NAN,
                                    WH, WH, 0, 0, PS, PS));
    CUdeviceptr dX, dY, dDY, dDX;
    CU(cuMemAlloc(&dX, nx * 4));
    CU(cuMemAlloc(&dDX, nx * 4));
    CU(cuMemAlloc(&dY, ny * 4));
    CU(cuMemAlloc(&dDY, ny * 4));
    CU(cuMemcpyHtoD(dX, x, nx * 4));
    CU(cuMemcpyHtoD(dDY, dy, ny * 4));
    float one = 1.0f, zero = 0.0f;
    DNN(cudnnPoolingForward(h, pd, &one, xd, (void *)dX, &zero, yd, (void *)dY));
    DNN(cudnnPoolingBackward(h, pd, &one, yd, (void *)dY, yd, (void *)dDY, xd, (void *)dX, &zero,
                             xd, (void *)dDX));
    CU(cuCtxSynchronize());
    CU(cuMemcpyDtoH(y, dY, ny * 4));
    CU(cuMemcpyDtoH(dx, dDX, nx * 4));
    if (close_to(y, ry, ny, "pool y") || close_to(dx, rdx, nx, "pool dx"))
        return 1;
    cuMemFree(dX); cuMemFree(dY); cuMemFree(dDY); cuMemFree(dDX);
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyPoolingDescriptor(pd);
    free(x); free(dy); free(y); free(dx); free(ry); free(rdx);
    return 0;
}

static int test_bad_param(void)
{
    cudnnTensorDescriptor_t t;
    DNN(cudnnCreateTensorDescriptor(&t));
    cudnnStatus_t st = cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, -1, 2, 3, 4);
    CHECK(CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_BAD_PARAM, "negative size: %s",
          cudnnGetErrorString(st));
    st = cudnnCreate(NULL);
    CHECK(CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_BAD_PARAM, "cudnnCreate(NULL): %s",
          cudnnGetErrorString(st));
    cudnnDestroyTensorDescriptor(t);
    CHECK(cudnnGetVersion() / 10000 == 9, "version %zu", cudnnGetVersion());
    return 0;
}

int main(void)
{
    /* On simcuda: device memory kept out of this process, as on a GPU
     * machine (a real driver ignores the variable): the library never
     * touches device memory from the host. */
    setenv("SIMCUDA_ISOLATION", "1", 1);
    CUdevice dev;
    int passed = 0, failed = 0;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS || cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) {
        fprintf(stderr, "cannot start CUDA/cuDNN\n");
        printf("[  FAILED  ] 1 test(s).\n");
        return 1;
    }
    struct { const char *name; int (*fn)(void); } tests[] = {
        {"conv_forward_backward", test_conv},
        {"max_pooling", test_pool},
        {"bad_param", test_bad_param},
    };
    for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        printf("[ RUN      ] %s\n", tests[i].name);
        if (tests[i].fn() == 0) {
            printf("[       OK ] %s\n", tests[i].name);
            passed++;
        } else {
            printf("[  FAILED  ] %s\n", tests[i].name);
            failed++;
        }
    }
    cudnnDestroy(h);
    printf("[  PASSED  ] %d test(s).\n", passed);
    if (failed)
        printf("[  FAILED  ] %d test(s).\n", failed);
    return failed ? 1 : 0;
}
