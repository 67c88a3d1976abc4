/* Client run by tests/intercept/capture_test.c under libeasyscale.so (and
 * without it): the library calls a framework makes while capturing a CUDA
 * graph (PyTorch's torch.cuda.graph sets its capture stream on the cuBLAS
 * and cuDNN handles, then runs the step), and whether the capture
 * survives. One fact per line.
 *
 *   cap_client blas [appalloc]  cublasSetStream on a stream first met while
 *                               it captures, an SGEMM, end of capture,
 *                               replay; then the same on another new stream
 *                               (the spare made again outside capture).
 *                               appalloc: the client itself calls cuMemAlloc
 *                               where the shim used to (the invalidation the
 *                               test must be able to see)
 *   cap_client dnn              cudnnSetStream during a capture, a backward
 *                               filter with ALGO_0 and no workspace (d1: run
 *                               as ALGO_1 on the shim's workspace)
 * Lines: "end N" (cuStreamEndCapture's CUresult), "replay_match 0|1".
 */
#include <cublas_v2.h>
#include <cuda.h>
#include <cudnn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../clients/ck.h"

enum { M = 64, N = 48, K = 256 };

static void fill(float *v, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((int)(seed >> 9) % 2001 - 1000) / 997.0f;
    }
}

static CUdeviceptr upload(const float *h, size_t n)
{
    CUdeviceptr p;
    CK(cuMemAlloc(&p, n * 4));
    CK(cuMemcpyHtoD(p, h, n * 4));
    return p;
}

static int same(CUdeviceptr a, CUdeviceptr b, size_t n)
{
    float *x = malloc(n * 4), *y = malloc(n * 4);
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH(x, a, n * 4));
    CK(cuMemcpyDtoH(y, b, n * 4));
    int r = memcmp(x, y, n * 4) == 0;
    free(x);
    free(y);
    return r;
}

/* Captures one GEMM on a stream new to the handle; returns the end status
 * and replays the graph once (simcuda's library work is host functions
 * that release their arguments when they run). */
static CUresult capture_gemm(cublasHandle_t h, CUdeviceptr A, CUdeviceptr B, CUdeviceptr C,
                             CUdeviceptr ref, int appalloc, const char *tag)
{
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const float one = 1.0f, zero = 0.0f;
    CK(cuMemsetD32(C, 0, M * N));
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cublasSetStream(h, (cudaStream_t)s));
    if (appalloc) {
        CUdeviceptr tmp = 0;
        CUresult r = cuMemAlloc(&tmp, 4 << 20);
        printf("%s_appalloc %d\n", tag, (int)r);
    }
    cublasStatus_t bs = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, (float *)A, M,
                                    (float *)B, K, &zero, (float *)C, M);
    printf("%s_sgemm %d\n", tag, (int)bs);
    CUgraph g = NULL;
    CUresult end = cuStreamEndCapture(s, &g);
    printf("%s_end %d\n", tag, (int)end);
    if (end == CUDA_SUCCESS) {
        CUgraphExec x;
        CK(cuGraphInstantiate(&x, g, 0));
        CK(cuGraphLaunch(x, s));
        CK(cuStreamSynchronize(s));
        printf("%s_replay_match %d\n", tag, same(C, ref, M * N));
        CK(cuGraphExecDestroy(x));
        CK(cuGraphDestroy(g));
    }
    CK(cublasSetStream(h, NULL));
    CK(cuStreamDestroy(s));
    return end;
}

static int mode_blas(int appalloc)
{
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    fill(a, (size_t)M * K, 1);
    fill(b, (size_t)K * N, 2);
    CUdeviceptr A = upload(a, (size_t)M * K), B = upload(b, (size_t)K * N), C, ref;
    CK(cuMemAlloc(&C, M * N * 4));
    CK(cuMemAlloc(&ref, M * N * 4));
    cublasHandle_t h;
    CK(cublasCreate(&h));
    const float one = 1.0f, zero = 0.0f;
    /* the same GEMM outside capture, on a stream of its own (the same
     * workspace-per-stream arrangement as the captured one) */
    CUstream r;
    CK(cuStreamCreate(&r, CU_STREAM_NON_BLOCKING));
    CK(cublasSetStream(h, (cudaStream_t)r));
    CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, (float *)A, M, (float *)B, K,
                   &zero, (float *)ref, M));
    CK(cuStreamSynchronize(r));
    capture_gemm(h, A, B, C, ref, appalloc, "first");
    /* outside capture again (a new stream: a workspace and a new spare are
     * made), then a capture on yet another new stream */
    CUstream t;
    CK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    CK(cublasSetStream(h, (cudaStream_t)t));
    CK(cublasSetStream(h, NULL));
    capture_gemm(h, A, B, C, ref, 0, "second");
    CK(cublasDestroy(h));
    CK(cuStreamDestroy(t));
    CK(cuStreamDestroy(r));
    return 0;
}

static int mode_dnn(void)
{
    enum { NB = 2, CI = 3, H = 16, W = 16, KO = 4, R = 3 };
    cudnnHandle_t h;
    CK(cudnnCreate(&h));
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    CK(cudnnCreateTensorDescriptor(&xd));
    CK(cudnnCreateTensorDescriptor(&yd));
    CK(cudnnCreateFilterDescriptor(&wd));
    CK(cudnnCreateConvolutionDescriptor(&cd));
    CK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, NB, CI, H, W));
    CK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, NB, KO, H, W));
    CK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, KO, CI, R, R));
    CK(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                       CUDNN_DATA_FLOAT));
    size_t nx = NB * CI * H * W, ny = NB * KO * H * W, nw = KO * CI * R * R;
    float *hx = malloc(nx * 4), *hy = malloc(ny * 4);
    fill(hx, nx, 3);
    fill(hy, ny, 4);
    CUdeviceptr x = upload(hx, nx), dy = upload(hy, ny), dw, ref, ws;
    CK(cuMemAlloc(&dw, nw * 4));
    CK(cuMemAlloc(&ref, nw * 4));
    CK(cuMemAlloc(&ws, 1 << 20));
    const float one = 1.0f, zero = 0.0f;
    CK(cudnnConvolutionBackwardFilter(h, &one, xd, (void *)x, yd, (void *)dy, cd,
                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, (void *)ws, 1 << 20,
                                      &zero, wd, (void *)ref));
    CK(cuCtxSynchronize());
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cudnnSetStream(h, (cudaStream_t)s));
    cudnnStatus_t st = cudnnConvolutionBackwardFilter(h, &one, xd, (void *)x, yd, (void *)dy, cd,
                                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, NULL,
                                                      0, &zero, wd, (void *)dw);
    printf("dnn_conv %d\n", (int)st);
    CUgraph g = NULL;
    CUresult end = cuStreamEndCapture(s, &g);
    printf("dnn_end %d\n", (int)end);
    if (end == CUDA_SUCCESS) {
        CUgraphExec gx;
        CK(cuGraphInstantiate(&gx, g, 0));
        CK(cuGraphLaunch(gx, s));
        CK(cuStreamSynchronize(s));
        printf("dnn_replay_match %d\n", same(dw, ref, nw));
        CK(cuGraphExecDestroy(gx));
        CK(cuGraphDestroy(g));
    }
    CK(cudnnSetStream(h, NULL));
    CK(cudnnDestroy(h));
    CK(cuStreamDestroy(s));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: cap_client blas [appalloc] | dnn\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    CUdevice d;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&d, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, d));
    CK(cuCtxSetCurrent(ctx));
    if (!strcmp(argv[1], "blas"))
        return mode_blas(argc > 2 && !strcmp(argv[2], "appalloc"));
    if (!strcmp(argv[1], "dnn"))
        return mode_dnn();
    fprintf(stderr, "cap_client: unknown mode %s\n", argv[1]);
    return 2;
}
