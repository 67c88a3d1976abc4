/* Client run by tests/intercept/half_test.c under libeasyscale.so (and without
 * it): half precision through the legacy APIs PyTorch uses for autocast,
 * fp16 / bf16 operands with fp32 accumulation, printing one fact per line.
 *
 *   half_client gemm DEV  cublasGemmEx and cublasGemmStridedBatchedEx with
 *                         A = B in fp16 / bf16, C in the same type or fp32,
 *                         CUBLAS_COMPUTE_32F (PyTorch's at::cuda::blas::gemm
 *                         for Half / BFloat16), both transposes:
 *                         "gemm NAME HASH" and d2's result on the host by
 *                         the reference of the path EASYSCALE_D2_GEMM names
 *                         (int8 by default, or fma) "ref NAME HASH"
 *   half_client conv DEV  cudnnConvolutionForward / BackwardData /
 *                         BackwardFilter on fp16 / bf16 NCHW tensors with a
 *                         CUDNN_DATA_FLOAT convolution (PyTorch's math type
 *                         for half): "conv NAME HASH" or "conv NAME status
 *                         S" when cuDNN refuses, and "ref NAME HASH"
 */
#include <cublas_v2.h>
#include <cuda.h>
#include <cudnn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/d2int8.h"
#include "kernels/portable_kernels.h"

#include "../clients/ck.h"

static uint64_t hash(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static unsigned g_seed = 7;

static float rnd(void)
{
    g_seed = g_seed * 1103515245u + 12345u;
    return (float)((int)(g_seed >> 9) % 2001 - 1000) / 997.0f;
}

static void *host_fill(size_t n, int dt)
{
    void *p = malloc(n * (dt == ES_DT_F32 ? 4 : 2));
    for (size_t i = 0; i < n; i++)
        es_st(p, (long long)i, dt, rnd());
    return p;
}

static CUdeviceptr up(const void *h, size_t bytes)
{
    CUdeviceptr p;
    CK(cuMemAlloc(&p, bytes));
    CK(cuMemcpyHtoD(p, h, bytes));
    return p;
}

static uint64_t down_hash(CUdeviceptr p, size_t bytes)
{
    void *h = malloc(bytes);
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH(h, p, bytes));
    uint64_t r = hash(h, bytes);
    free(h);
    return r;
}

static void setup(int dev)
{
    CUdevice d;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&d, dev));
    CK(cuDevicePrimaryCtxRetain(&ctx, d));
    CK(cuCtxSetCurrent(ctx));
}

/* ---- GEMM ------------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    cudaDataType ab, c;
    int ta, tb, batch;
} gcase_t;

static int es_of(cudaDataType t)
{
    return t == CUDA_R_32F ? ES_DT_F32 : t == CUDA_R_16F ? ES_DT_F16 : ES_DT_BF16;
}

static int mode_gemm(int dev)
{
    enum { M = 40, N = 36, K = 3000 };
    static const gcase_t cases[] = {
        { "f16_nn", CUDA_R_16F, CUDA_R_16F, 0, 0, 1 },
        { "f16_f32c_tn", CUDA_R_16F, CUDA_R_32F, 1, 0, 1 },
        { "bf16_nt", CUDA_R_16BF, CUDA_R_16BF, 0, 1, 1 },
        { "bf16_f32c_nn", CUDA_R_16BF, CUDA_R_32F, 0, 0, 1 },
        { "f16_batched", CUDA_R_16F, CUDA_R_16F, 0, 0, 3 },
        { "bf16_batched_tt", CUDA_R_16BF, CUDA_R_16BF, 1, 1, 2 },
    };
    setup(dev);
    cublasHandle_t h;
    CK(cublasCreate(&h));
    const float alpha = 1.0f, beta = 0.5f;
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const gcase_t *c = &cases[ci];
        int at = es_of(c->ab), ct = es_of(c->c);
        size_t ea = at == ES_DT_F32 ? 4 : 2, ec = ct == ES_DT_F32 ? 4 : 2;
        int lda = c->ta ? K : M, ldb = c->tb ? N : K, ldc = M;
        long long sa = (long long)M * K, sb = (long long)K * N, sc = (long long)M * N;
        size_t na = (size_t)sa * c->batch, nb = (size_t)sb * c->batch, nc = (size_t)sc * c->batch;
        void *ha = host_fill(na, at), *hb = host_fill(nb, at), *hc = host_fill(nc, ct);
        CUdeviceptr da = up(ha, na * ea), db = up(hb, nb * ea), dc = up(hc, nc * ec);
        cublasOperation_t oa = c->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        cublasOperation_t ob = c->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        if (c->batch == 1)
            CK(cublasGemmEx(h, oa, ob, M, N, K, &alpha, (void *)da, c->ab, lda, (void *)db,
                            c->ab, ldb, &beta, (void *)dc, c->c, ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
        else
            CK(cublasGemmStridedBatchedEx(h, oa, ob, M, N, K, &alpha, (void *)da, c->ab, lda, sa,
                                          (void *)db, c->ab, ldb, sb, &beta, (void *)dc, c->c,
                                          ldc, sc, c->batch, CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT));
        printf("gemm %s %016llx\n", c->name, (unsigned long long)down_hash(dc, nc * ec));
        /* d2's result on the host: C = D */
        es_gemm_args_t g = { .A = ha, .B = hb, .C = hc, .D = hc, .sA = sa, .sB = sb, .sC = sc,
                             .sD = sc, .ta = c->ta, .tb = c->tb, .m = M, .n = N, .k = K,
                             .lda = lda, .ldb = ldb, .ldc = ldc, .ldd = ldc, .at = at, .bt = at,
                             .ct = ct, .dt = ct, .alpha = alpha, .beta = beta };
        /* the reference of the path EASYSCALE_D2_GEMM names (int8 when unset) */
        const char *path = getenv("EASYSCALE_D2_GEMM");
        if (!path || strcmp(path, "fma") != 0) {
            CK(es_d2int8_ref_gemm(&g, c->batch));
        } else {
            for (int b = 0; b < c->batch; b++)
                for (int j = 0; j < N; j++)
                    for (int i = 0; i < M; i++)
                        es_gemm_elem(&g, i, j, b);
        }
        printf("ref %s %016llx\n", c->name, (unsigned long long)hash(hc, nc * ec));
        CK(cuMemFree(da));
        CK(cuMemFree(db));
        CK(cuMemFree(dc));
        free(ha);
        free(hb);
        free(hc);
    }
    CK(cublasDestroy(h));
    return 0;
}

/* ---- convolutions ---------------------------------------------------------------------- */

static int mode_conv(int dev)
{
    /* x 4x16x20x20, w 8x16x3x3, pad 1, stride 2, dilation 1: long sums */
    enum { NN = 4, C = 16, H = 20, W = 20, KK = 8, R = 3, S = 3, PAD = 1, STR = 2 };
    enum { P = (H + 2 * PAD - R) / STR + 1, Q = (W + 2 * PAD - S) / STR + 1 };
    static const struct { const char *name; cudnnDataType_t t; int es; } types[] = {
        { "f16", CUDNN_DATA_HALF, ES_DT_F16 }, { "bf16", CUDNN_DATA_BFLOAT16, ES_DT_BF16 },
    };
    static const char *const dirs[3] = { "fwd", "bwd_data", "bwd_filter" };
    setup(dev);
    cudnnHandle_t h;
    CK(cudnnCreate(&h));
    size_t nx = (size_t)NN * C * H * W, nw = (size_t)KK * C * R * S, ny = (size_t)NN * KK * P * Q;
    CUdeviceptr ws;
    CK(cuMemAlloc(&ws, 64 << 20));
    for (int ti = 0; ti < 2; ti++) {
        cudnnTensorDescriptor_t xd, yd;
        cudnnFilterDescriptor_t wd;
        cudnnConvolutionDescriptor_t cd;
        CK(cudnnCreateTensorDescriptor(&xd));
        CK(cudnnCreateTensorDescriptor(&yd));
        CK(cudnnCreateFilterDescriptor(&wd));
        CK(cudnnCreateConvolutionDescriptor(&cd));
        CK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, types[ti].t, NN, C, H, W));
        CK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, types[ti].t, NN, KK, P, Q));
        CK(cudnnSetFilter4dDescriptor(wd, types[ti].t, CUDNN_TENSOR_NCHW, KK, C, R, S));
        CK(cudnnSetConvolution2dDescriptor(cd, PAD, PAD, STR, STR, 1, 1, CUDNN_CROSS_CORRELATION,
                                           CUDNN_DATA_FLOAT));
        int es = types[ti].es;
        void *hx = host_fill(nx, es), *hw = host_fill(nw, es), *hy = host_fill(ny, es);
        CUdeviceptr dx = up(hx, nx * 2), dw = up(hw, nw * 2), dy = up(hy, ny * 2), dout;
        size_t nmax = nx > ny ? (nx > nw ? nx : nw) : (ny > nw ? ny : nw);
        CK(cuMemAlloc(&dout, nmax * 2));
        const float one = 1.0f, zero = 0.0f;
        for (int dir = 0; dir < 3; dir++) {
            size_t n = dir == 0 ? ny : dir == 1 ? nx : nw;
            CK(cuMemsetD8(dout, 0, n * 2));
            cudnnStatus_t st;
            if (dir == 0)
                st = cudnnConvolutionForward(h, &one, xd, (void *)dx, wd, (void *)dw, cd,
                                             CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                             (void *)ws, 64 << 20, &zero, yd, (void *)dout);
            else if (dir == 1)
                st = cudnnConvolutionBackwardData(h, &one, wd, (void *)dw, yd, (void *)dy, cd,
                                                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, (void *)ws,
                                                  64 << 20, &zero, xd, (void *)dout);
            else
                st = cudnnConvolutionBackwardFilter(h, &one, xd, (void *)dx, yd, (void *)dy, cd,
                                                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                                                    (void *)ws, 64 << 20, &zero, wd,
                                                    (void *)dout);
            if (st == CUDNN_STATUS_SUCCESS)
                printf("conv %s_%s %016llx\n", dirs[dir], types[ti].name,
                       (unsigned long long)down_hash(dout, n * 2));
            else
                printf("conv %s_%s status %d\n", dirs[dir], types[ti].name, (int)st);
            es_conv_args_t a = {
                .xs_n = (long long)C * H * W, .xs_c = H * W, .xs_h = W, .xs_w = 1,
                .ys_n = (long long)KK * P * Q, .ys_k = P * Q, .ys_p = Q, .ys_q = 1,
                .ws_k = C * R * S, .ws_c = R * S, .ws_r = S, .ws_s = 1,
                .n = NN, .c = C, .h = H, .w = W, .k = KK, .p = P, .q = Q, .r = R, .s = S,
                .pad_h = PAD, .pad_w = PAD, .u = STR, .v = STR, .dil_h = 1, .dil_w = 1,
                .groups = 1, .alpha = 1.0f, .beta = 0.0f, .t_in0 = es, .t_in1 = es, .t_out = es,
            };
            void *out = calloc(n, 2);
            a.out = out;
            a.in0 = dir == 1 ? hy : hx;
            a.in1 = dir == 2 ? hy : hw;
            CK(es_d2int8_ref_conv_path(dir, &a, es_d2int8_env_int8()));
            printf("ref %s_%s %016llx\n", dirs[dir], types[ti].name,
                   (unsigned long long)hash(out, n * 2));
            free(out);
        }
        CK(cuMemFree(dx));
        CK(cuMemFree(dw));
        CK(cuMemFree(dy));
        CK(cuMemFree(dout));
        free(hx);
        free(hw);
        free(hy);
        CK(cudnnDestroyTensorDescriptor(xd));
        CK(cudnnDestroyTensorDescriptor(yd));
        CK(cudnnDestroyFilterDescriptor(wd));
        CK(cudnnDestroyConvolutionDescriptor(cd));
    }
    CK(cuMemFree(ws));
    CK(cudnnDestroy(h));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: half_client gemm|conv DEV\n");
        return 2;
    }
    if (!strcmp(argv[1], "gemm"))
        return mode_gemm(atoi(argv[2]));
    if (!strcmp(argv[1], "conv"))
        return mode_conv(atoi(argv[2]));
    fprintf(stderr, "half_client: unknown mode %s\n", argv[1]);
    return 2;
}
