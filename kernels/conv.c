/* d2's portable convolutions (see conv.h). */
#include "kernels/conv.h"
#include "kernels/portable.h"
#include "shim/config.h"
#include "shim/real.h"

#include <errno.h>

int es_conv_dtype(cudnnDataType_t t)
{
    switch (t) {
    case CUDNN_DATA_FLOAT: return ES_DT_F32;
    case CUDNN_DATA_HALF: return ES_DT_F16;
    case CUDNN_DATA_BFLOAT16: return ES_DT_BF16;
    default: return -1;
    }
}

int es_conv_check(int dir, es_conv_args_t *a)
{
    if (a->groups < 1 || a->n < 1 || a->c < 1 || a->h < 1 || a->w < 1 || a->k < 1 ||
        a->r < 1 || a->s < 1 || a->c % a->groups || a->k % a->groups || a->u < 1 || a->v < 1 ||
        a->dil_h < 1 || a->dil_w < 1 || a->pad_h < 0 || a->pad_w < 0 || a->nep < 0 ||
        a->nep > ES_MAX_EP || (a->nep && dir != ES_CONV_FWD))
        return -EINVAL;
    long long ph = (long long)a->h + 2LL * a->pad_h - (long long)a->dil_h * (a->r - 1) - 1,
              pw = (long long)a->w + 2LL * a->pad_w - (long long)a->dil_w * (a->s - 1) - 1;
    if (ph < 0 || pw < 0 || a->p != ph / a->u + 1 || a->q != pw / a->v + 1)
        return -EINVAL;
    switch (dir) {
    case ES_CONV_FWD: a->total = (long long)a->n * a->k * a->p * a->q; break;
    case ES_CONV_BWD_DATA: a->total = (long long)a->n * a->c * a->h * a->w; break;
    case ES_CONV_BWD_FILTER: a->total = (long long)a->k * (a->c / a->groups) * a->r * a->s; break;
    default: return -EINVAL;
    }
    return 0;
}

int es_conv_launch_kernel(int dir, int which, const es_conv_args_t *args, CUstream stream)
{
    static const int tk[3] = { ES_K_CONV_FWD, ES_K_CONV_BWD_DATA, ES_K_CONV_BWD_FILTER };
    static const int rk[3] = { ES_K_REF_CONV_FWD, ES_K_REF_CONV_BWD_DATA,
                               ES_K_REF_CONV_BWD_FILTER };
    static const int ik[3] = { ES_K_CONV_FWD_I8, ES_K_CONV_BWD_DATA_I8,
                               ES_K_CONV_BWD_FILTER_I8 };
    if (dir < 0 || dir > 2 || which < ES_CONV_REF || which > ES_CONV_INT8)
        return -EINVAL;
    if (args->total == 0)
        return CUDA_SUCCESS;
    const es_conv_args_t *a = args;
    long long rows = es_conv_rows(a, dir), cols = es_conv_cols(a, dir);
    int bm = which == ES_CONV_INT8 ? ES_I8_BM : ES_CONV_BM;
    int bn = which == ES_CONV_INT8 ? ES_I8_BN : ES_CONV_BN;
    long long gx = which != ES_CONV_REF ? (rows + bm - 1) / bm
                                        : (a->total + ES_CONV_BLOCK - 1) / ES_CONV_BLOCK;
    long long gy = which != ES_CONV_REF ? (cols + bn - 1) / bn : 1;
    long long gz = which != ES_CONV_REF ? a->groups : 1;
    if (gx > 0x7fffffffLL || gy > 65535 || gz > 65535)
        return -ENOTSUP;
    CUfunction fn = es_portable_function(which == ES_CONV_TILED ? tk[dir]
                                         : which == ES_CONV_REF ? rk[dir] : ik[dir]);
    if (!fn)
        return CUDA_ERROR_NO_BINARY_FOR_GPU; /* logged; never the vendor's */
    es_conv_args_t c = *args;
    void *params[] = { &c };
    unsigned bx = which == ES_CONV_TILED ? ES_CONV_BN / ES_CONV_TN
                  : which == ES_CONV_REF ? ES_CONV_BLOCK : ES_I8_BN;
    unsigned by = which == ES_CONV_TILED ? ES_CONV_BM / ES_CONV_TM
                  : which == ES_CONV_REF ? 1 : ES_I8_THREADS / ES_I8_BN;
    return (int)ES_REAL(cuda, cuLaunchKernel)(fn, (unsigned)gx, (unsigned)gy, (unsigned)gz, bx,
                                              by, 1, 0, stream, params, NULL);
}

int es_conv_launch(int dir, const es_conv_args_t *args, CUstream stream)
{
    return es_conv_launch_kernel(dir, es_cfg.d2_gemm == ES_D2_GEMM_INT8 ? ES_CONV_INT8
                                                                         : ES_CONV_TILED,
                                 args, stream);
}

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
    int dx = es_conv_dtype(xt), dy = es_conv_dtype(yt), dw = es_conv_dtype(wt);
    /* fp32 accumulation only (a half compute type is the vendor's) */
    if (dx < 0 || dy < 0 || dw < 0 || ct != CUDNN_DATA_FLOAT ||
        (wf != CUDNN_TENSOR_NCHW && wf != CUDNN_TENSOR_NHWC) || yn != a.n || yk != a.k ||
        wc < 1 || a.c != wc * groups)
        return -ENOTSUP;
    a.groups = groups;
    if (es_conv_check(dir, &a))
        return -ENOTSUP;
    cudaStream_t stream = NULL;
    if (ES_REAL(cudnn, cudnnGetStream)(h, &stream) != CUDNN_STATUS_SUCCESS)
        return -ENOTSUP;
    a.xs_n = xs[0], a.xs_c = xs[1], a.xs_h = xs[2], a.xs_w = xs[3];
    a.ys_n = ys[0], a.ys_k = ys[1], a.ys_p = ys[2], a.ys_q = ys[3];
    if (wf == CUDNN_TENSOR_NCHW) { /* K, C/g, R, S packed */
        a.ws_s = 1, a.ws_r = a.s, a.ws_c = (long long)a.r * a.s, a.ws_k = (long long)wc * a.r * a.s;
    } else { /* K, R, S, C/g packed */
        a.ws_c = 1, a.ws_s = wc, a.ws_r = (long long)a.s * wc, a.ws_k = (long long)a.r * a.s * wc;
    }
    a.flip = mode == CUDNN_CONVOLUTION;
    /* alpha/beta are floats for float and half data (cuDNN's rule) */
    a.alpha = *(const float *)alpha;
    a.beta = *(const float *)beta;
    a.in0 = in0;
    a.in1 = in1;
    a.out = out;
    switch (dir) {
    case ES_CONV_FWD: a.t_in0 = dx, a.t_in1 = dw, a.t_out = dy; break;
    case ES_CONV_BWD_DATA: a.t_in0 = dy, a.t_in1 = dw, a.t_out = dx; break;
    default: a.t_in0 = dx, a.t_in1 = dy, a.t_out = dw; break;
    }
    int r = es_conv_launch(dir, &a, (CUstream)stream);
    if (r < 0)
        return r;
    *status = r == CUDA_SUCCESS ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
    return 0;
}
