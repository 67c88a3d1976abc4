/* d2's portable convolutions (see conv.h). */
#include "kernels/conv.h"
#include "kernels/portable.h"
#include "kernels/portable_kernels.h"
#include "shim/shim.h"

#include <errno.h>

int es_conv_run(int dir, cudnnHandle_t h, const void *alpha, const void *beta,
                cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd,
                cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd, const void *in0,
                const void *in1, void *out, cudnnStatus_t *status)
{
    es_conv_args_t a = { 0 };
    cudnnDataType_t xt, yt, wt, ct;
    cudnnTensorFormat_t wf;
    cudnnConvolutionMode_t mode;
    int xs[4], ys[4], yn, yk, wc, groups = 1;
    if (!alpha || !beta || !in0 || !in1 || !out)
        return -ENOTSUP;
    if (ES_REAL(cudnn, cudnnGetTensor4dDescriptor)(xd, &xt, &a.n, &a.c, &a.h, &a.w, &xs[0],
                                                    &xs[1], &xs[2], &xs[3]) ||
        ES_REAL(cudnn, cudnnGetTensor4dDescriptor)(yd, &yt, &yn, &yk, &a.p, &a.q, &ys[0],
                                                    &ys[1], &ys[2], &ys[3]) ||
        ES_REAL(cudnn, cudnnGetFilter4dDescriptor)(wd, &wt, &wf, &a.k, &wc, &a.r, &a.s) ||
        ES_REAL(cudnn, cudnnGetConvolution2dDescriptor)(cd, &a.pad_h, &a.pad_w, &a.u, &a.v,
                                                        &a.dil_h, &a.dil_w, &mode, &ct))
        return -ENOTSUP;
    if (ES_REAL(cudnn, cudnnGetConvolutionGroupCount)(cd, &groups) != CUDNN_STATUS_SUCCESS)
        groups = 1;
    if (xt != CUDNN_DATA_FLOAT || yt != CUDNN_DATA_FLOAT || wt != CUDNN_DATA_FLOAT ||
        ct != CUDNN_DATA_FLOAT || wf != CUDNN_TENSOR_NCHW || groups < 1 || yn != a.n ||
        yk != a.k || a.c != wc * groups || a.k % groups || a.u < 1 || a.v < 1 || a.dil_h < 1 ||
        a.dil_w < 1 || a.pad_h < 0 || a.pad_w < 0 || a.r < 1 || a.s < 1)
        return -ENOTSUP;
    long long ph = (long long)a.h + 2LL * a.pad_h - (long long)a.dil_h * (a.r - 1) - 1,
              pw = (long long)a.w + 2LL * a.pad_w - (long long)a.dil_w * (a.s - 1) - 1;
    if (ph < 0 || pw < 0 || a.p != ph / a.u + 1 || a.q != pw / a.v + 1)
        return -ENOTSUP;
    cudaStream_t stream = NULL;
    if (ES_REAL(cudnn, cudnnGetStream)(h, &stream) != CUDNN_STATUS_SUCCESS)
        return -ENOTSUP;
    a.xs_n = xs[0], a.xs_c = xs[1], a.xs_h = xs[2], a.xs_w = xs[3];
    a.ys_n = ys[0], a.ys_k = ys[1], a.ys_p = ys[2], a.ys_q = ys[3];
    a.groups = groups;
    a.flip = mode == CUDNN_CONVOLUTION;
    a.alpha = *(const float *)alpha;
    a.beta = *(const float *)beta;
    a.in0 = in0;
    a.in1 = in1;
    a.out = out;
    int kernel;
    switch (dir) {
    case ES_CONV_FWD:
        a.total = (long long)a.n * a.k * a.p * a.q;
        kernel = ES_K_CONV_FWD;
        break;
    case ES_CONV_BWD_DATA:
        a.total = (long long)a.n * a.c * a.h * a.w;
        kernel = ES_K_CONV_BWD_DATA;
        break;
    case ES_CONV_BWD_FILTER:
        a.total = (long long)a.k * wc * a.r * a.s;
        kernel = ES_K_CONV_BWD_FILTER;
        break;
    default:
        return -ENOTSUP;
    }
    *status = CUDNN_STATUS_SUCCESS;
    if (a.total == 0)
        return 0;
    long long blocks = (a.total + ES_CONV_BLOCK - 1) / ES_CONV_BLOCK;
    if (blocks > 0x7fffffffLL)
        return -ENOTSUP;
    CUfunction fn = es_portable_function(kernel);
    if (!fn)
        return -ENOTSUP;
    void *params[] = { &a };
    CUresult r = ES_REAL(cuda, cuLaunchKernel)(fn, (unsigned)blocks, 1, 1, ES_CONV_BLOCK, 1, 1, 0,
                                               (CUstream)stream, params, NULL);
    *status = r == CUDA_SUCCESS ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
    return 0;
}
