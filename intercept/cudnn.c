/* cuDNN wrappers (d1 and d2; off is pass-through).
 *
 * Legacy API:
 * - cudnnGet*Algorithm_v7 and cudnnFind*Algorithm[Ex] return only
 *   deterministic algorithms (perf.determinism == CUDNN_DETERMINISTIC and
 *   not one of the documented nondeterministic ones), asked of cuDNN in full
 *   so a deterministic algorithm is not cut off by requestedAlgoCount;
 *   Get keeps cuDNN's order, Find is ranked by a fixed rule (successful
 *   first, then by algorithm id), never by measured time;
 * - cudnnConvolutionBackwardFilter with ALGO_0 / ALGO_3 and
 *   cudnnConvolutionBackwardData with ALGO_0 run ALGO_1 instead, with a
 *   workspace of the shim's own when the caller's is too small (per
 *   handle: ES_DNN_WS made at cudnnCreate, grown on demand, but never in a
 *   call whose stream is capturing: device/devmem.h);
 * - CUDNN_POOLING_MAX becomes CUDNN_POOLING_MAX_DETERMINISTIC when a pooling
 *   descriptor is set (same forward results; cudnnGetPooling*Descriptor then
 *   reports the deterministic mode).
 * d2: the three convolutions run on the shim's portable kernels
 *   (kernels/conv.c) for fp32 / fp16 / bf16 tensors (any strides, NCHW or
 *   NHWC filters, groups, dilation) with an fp32 convolution type,
 *   whatever algorithm was named; a half compute type stays cuDNN's.
 * The backend (graph) API is in intercept/cudnn_backend.c.
 */
#include "intercept/enter.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/real.h"
#include "kernels/conv.h"
#include "intercept/vargs.h"
#include "device/devmem.h"

#include <stdlib.h>
#include <string.h>

#define ES_MAX_ALGOS 16
/* The substitution workspace made with each handle. */
#define ES_DNN_WS (8u << 20)

static int es_det(void)
{
    return es_cfg.determinism != ES_DET_OFF;
}

/* ---- algorithm lists ------------------------------------------------------------ */

static int es_fwd_nondet(int a) { (void)a; return 0; }
static int es_bwd_data_nondet(int a) { return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0; }
static int es_bwd_filter_nondet(int a)
{
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

/* Filters (and for Find ranks) perf[0..n) into out[0..requested), returns
 * the count. Works for the three perf struct types (same layout head). */
#define ES_FILTER(T, nondet)                                                                  \
    static int es_filter_##T(const T *all, int n, T *out, int requested, int rank)             \
    {                                                                                          \
        T keep[ES_MAX_ALGOS];                                                                  \
        int k = 0;                                                                             \
        for (int i = 0; i < n && i < ES_MAX_ALGOS; i++)                                        \
            if (all[i].determinism == CUDNN_DETERMINISTIC && !nondet((int)all[i].algo))       \
                keep[k++] = all[i];                                                            \
        if (rank) /* insertion sort: success first, then algorithm id */                      \
            for (int i = 1; i < k; i++) {                                                      \
                T x = keep[i];                                                                 \
                int j = i - 1;                                                                 \
                while (j >= 0 &&                                                               \
                       ((keep[j].status != CUDNN_STATUS_SUCCESS) >                             \
                            (x.status != CUDNN_STATUS_SUCCESS) ||                              \
                        ((keep[j].status != CUDNN_STATUS_SUCCESS) ==                           \
                             (x.status != CUDNN_STATUS_SUCCESS) &&                             \
                         keep[j].algo > x.algo))) {                                            \
                    keep[j + 1] = keep[j];                                                     \
                    j--;                                                                       \
                }                                                                              \
                keep[j + 1] = x;                                                               \
            }                                                                                  \
        if (k > requested)                                                                     \
            k = requested;                                                                     \
        memcpy(out, keep, sizeof(T) * (size_t)(k > 0 ? k : 0));                                \
        return k;                                                                              \
    }
ES_FILTER(cudnnConvolutionFwdAlgoPerf_t, es_fwd_nondet)
ES_FILTER(cudnnConvolutionBwdDataAlgoPerf_t, es_bwd_data_nondet)
ES_FILTER(cudnnConvolutionBwdFilterAlgoPerf_t, es_bwd_filter_nondet)

/* The kind-A functions of shim/funcs.h: the real query for all
 * algorithms into a local list, then the filter of the perf struct's type
 * (Find: ranked). */
#define ES_FILTER_OF(p)                                                                        \
    _Generic((p), cudnnConvolutionFwdAlgoPerf_t *: es_filter_cudnnConvolutionFwdAlgoPerf_t,    \
             cudnnConvolutionBwdDataAlgoPerf_t *: es_filter_cudnnConvolutionBwdDataAlgoPerf_t, \
             cudnnConvolutionBwdFilterAlgoPerf_t *: es_filter_cudnnConvolutionBwdFilterAlgoPerf_t)
#define ES_ALGO_QUERY_A(sym, call_params, call_args)                                           \
    ES_EXPORT cudnnStatus_t sym call_params                                                    \
    {                                                                                          \
        ES_ENTER(cudnn, sym);                                                                  \
        if (!es_det() || !returnedAlgoCount || !perfResults || requestedAlgoCount < 1)         \
            return ES_REAL(cudnn, sym) call_args;                                              \
        __typeof__(*perfResults) all[ES_MAX_ALGOS];                                            \
        int n = 0;                                                                             \
        const int req = requestedAlgoCount;                                                    \
        int *const out_count = returnedAlgoCount;                                              \
        __typeof__(perfResults) const out = perfResults;                                       \
        {                                                                                      \
            const int requestedAlgoCount = ES_MAX_ALGOS;                                       \
            int *returnedAlgoCount = &n;                                                       \
            __typeof__(*perfResults) *perfResults = all;                                       \
            cudnnStatus_t st = ES_REAL(cudnn, sym) call_args;                                  \
            if (st != CUDNN_STATUS_SUCCESS)                                                    \
                return st;                                                                     \
        }                                                                                      \
        *out_count = ES_FILTER_OF(out)(all, n, out, req, strncmp(#sym, "cudnnFind", 9) == 0);  \
        if (*out_count < n)                                                                    \
            ES_DEBUG("%s: %d of %d algorithms kept (deterministic)", #sym, *out_count, n);     \
        return CUDNN_STATUS_SUCCESS;                                                           \
    }
#define ES_ALGO_QUERY_P(sym, call_params, call_args)
#define ES_ALGO_QUERY_C(sym, call_params, call_args)
#define ES_ALGO_QUERY_I(sym, call_params, call_args)
#define ES_ALGO_QUERY_H(sym, call_params, call_args)
#define ES_ALGO_QUERY_T(sym, call_params, call_args)
#define ES_ALGO_QUERY(kind, sym, gp, ver, fl, ret, params, args, err)                          \
    ES_ALGO_QUERY_##kind(sym, params, ES_VA_NAMES args)
ES_CUDNN_FUNCS(ES_ALGO_QUERY)
#undef ES_ALGO_QUERY

/* ---- per-handle workspace for substituted algorithms ------------------------------- */

typedef struct es_dnn {
    cudnnHandle_t h;
    CUdeviceptr ws;
    size_t ws_size;
    struct es_dnn *next;
} es_dnn_t;

static es_dnn_t *es_dnn_list;

/* Returns a workspace of at least `need` bytes for h (NULL on failure, or
 * when it would have to grow while h's stream captures). */
static void *es_dnn_workspace(cudnnHandle_t h, size_t need)
{
    CUdeviceptr old = 0, ptr = 0;
    cudaStream_t s = NULL;
    if (ES_REAL(cudnn, cudnnGetStream)(h, &s) != CUDNN_STATUS_SUCCESS)
        return NULL;
    pthread_mutex_lock(&es_state_lock);
    es_dnn_t *d = es_dnn_list;
    while (d && d->h != h)
        d = d->next;
    if (!d && (d = calloc(1, sizeof(*d))) != NULL) {
        d->h = h;
        d->next = es_dnn_list;
        es_dnn_list = d;
    }
    int grow = d && d->ws_size < need;
    if (d && !grow)
        ptr = d->ws;
    pthread_mutex_unlock(&es_state_lock);
    if (ptr || !d || !es_lib_ready(ES_LIB_CUDA))
        return (void *)ptr;
    if (es_devmem_capturing((CUstream)s)) {
        ES_WARN("cuDNN handle %p: %zu bytes of workspace needed while its stream captures",
                (void *)h, need);
        return NULL;
    }
    pthread_mutex_lock(&es_state_lock);
    old = d->ws;
    d->ws = 0;
    d->ws_size = 0;
    pthread_mutex_unlock(&es_state_lock);
    if (old)
        es_devmem_free(old); /* waits for the work that may use it */
    if (es_devmem_alloc(&ptr, need) != CUDA_SUCCESS)
        return NULL;
    pthread_mutex_lock(&es_state_lock);
    d->ws = ptr;
    d->ws_size = need;
    pthread_mutex_unlock(&es_state_lock);
    return (void *)ptr;
}

/* The algorithm a call with the nondeterministic algorithm `algo` runs:
 * `sub` (deterministic) when its workspace need (query status qs, size
 * need) fits the caller's workspace or one of the shim's own, which then
 * replaces *ws / *ws_size; otherwise `algo` itself, with a warning. */
static int es_dnn_substitute(const char *fn, cudnnHandle_t h, int algo, int sub,
                             cudnnStatus_t qs, size_t need, void **ws, size_t *ws_size)
{
    int ret = algo;
    if (qs != CUDNN_STATUS_SUCCESS)
        goto out;
    if (need > *ws_size) {
        void *own = es_dnn_workspace(h, need);
        if (!own)
            goto out;
        *ws = own;
        *ws_size = need;
    }
    ES_DEBUG("%s: ALGO_%d replaced by ALGO_%d", fn, algo, sub);
    ret = sub;
out:
    if (ret != sub)
        ES_WARN("%s: nondeterministic ALGO_%d kept (ALGO_%d not runnable: status %d, %zu bytes "
                "of workspace needed)", fn, algo, sub, (int)qs, need);
    return ret;
}

ES_EXPORT cudnnStatus_t cudnnCreate(cudnnHandle_t *handle)
{
    ES_ENTER(cudnn, cudnnCreate);
    cudnnStatus_t st = ES_REAL(cudnn, cudnnCreate)(handle);
    if (st == CUDNN_STATUS_SUCCESS && es_det() && !es_dnn_workspace(*handle, ES_DNN_WS))
        ES_DEBUG("cuDNN handle %p: no substitution workspace made ahead", (void *)*handle);
    return st;
}

ES_EXPORT cudnnStatus_t cudnnDestroy(cudnnHandle_t handle)
{
    ES_ENTER(cudnn, cudnnDestroy);
    es_dnn_t *d = NULL;
    pthread_mutex_lock(&es_state_lock);
    for (es_dnn_t **pp = &es_dnn_list; *pp; pp = &(*pp)->next)
        if ((*pp)->h == handle) {
            d = *pp;
            *pp = d->next;
            break;
        }
    pthread_mutex_unlock(&es_state_lock);
    int keep = 0;
    if (d && d->ws) {
        cudaStream_t s = NULL;
        ES_REAL(cudnn, cudnnGetStream)(handle, &s);
        if ((keep = s && es_devmem_capturing((CUstream)s)) != 0)
            ES_WARN("cuDNN handle %p destroyed while its stream captures: its workspace is "
                    "kept", (void *)handle);
    }
    cudnnStatus_t st = ES_REAL(cudnn, cudnnDestroy)(handle);
    if (d) {
        if (d->ws && !keep)
            es_devmem_free(d->ws); /* waits for the work that may use it */
        free(d);
    }
    return st;
}

ES_EXPORT cudnnStatus_t cudnnConvolutionForward(
    cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
    void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t yDesc, void *y)
{
    ES_ENTER(cudnn, cudnnConvolutionForward);
    cudnnStatus_t st;
    if (es_cfg.determinism == ES_DET_D2 &&
        es_conv_run(ES_CONV_FWD, handle, alpha, beta, xDesc, wDesc, convDesc, yDesc, x, w, y,
                    &st) == 0)
        return st;
    return ES_REAL(cudnn, cudnnConvolutionForward)(handle, alpha, xDesc, x, wDesc, w, convDesc,
                                                   algo, workSpace, workSpaceSizeInBytes, beta,
                                                   yDesc, y);
}

ES_EXPORT cudnnStatus_t cudnnConvolutionBackwardData(
    cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo,
    void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t dxDesc, void *dx)
{
    ES_ENTER(cudnn, cudnnConvolutionBackwardData);
    cudnnStatus_t dst;
    if (es_cfg.determinism == ES_DET_D2 &&
        es_conv_run(ES_CONV_BWD_DATA, handle, alpha, beta, dxDesc, wDesc, convDesc, dyDesc, dy, w,
                    dx, &dst) == 0)
        return dst;
    if (es_det() && es_bwd_data_nondet((int)algo)) {
        size_t need = 0;
        cudnnStatus_t qs = ES_REAL(cudnn, cudnnGetConvolutionBackwardDataWorkspaceSize)(
            handle, wDesc, dyDesc, convDesc, dxDesc, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, &need);
        algo = (cudnnConvolutionBwdDataAlgo_t)es_dnn_substitute(
            "cudnnConvolutionBackwardData", handle, (int)algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
            qs, need, &workSpace, &workSpaceSizeInBytes);
    }
    return ES_REAL(cudnn, cudnnConvolutionBackwardData)(handle, alpha, wDesc, w, dyDesc, dy,
                                                        convDesc, algo, workSpace,
                                                        workSpaceSizeInBytes, beta, dxDesc, dx);
}

ES_EXPORT cudnnStatus_t cudnnConvolutionBackwardFilter(
    cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo,
    void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnFilterDescriptor_t dwDesc, void *dw)
{
    ES_ENTER(cudnn, cudnnConvolutionBackwardFilter);
    cudnnStatus_t dst;
    if (es_cfg.determinism == ES_DET_D2 &&
        es_conv_run(ES_CONV_BWD_FILTER, handle, alpha, beta, xDesc, dwDesc, convDesc, dyDesc, x,
                    dy, dw, &dst) == 0)
        return dst;
    if (es_det() && es_bwd_filter_nondet((int)algo)) {
        size_t need = 0;
        cudnnStatus_t qs = ES_REAL(cudnn, cudnnGetConvolutionBackwardFilterWorkspaceSize)(
            handle, xDesc, dyDesc, convDesc, dwDesc, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, &need);
        algo = (cudnnConvolutionBwdFilterAlgo_t)es_dnn_substitute(
            "cudnnConvolutionBackwardFilter", handle, (int)algo,
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, qs, need, &workSpace, &workSpaceSizeInBytes);
    }
    return ES_REAL(cudnn, cudnnConvolutionBackwardFilter)(handle, alpha, xDesc, x, dyDesc, dy,
                                                          convDesc, algo, workSpace,
                                                          workSpaceSizeInBytes, beta, dwDesc, dw);
}

ES_EXPORT cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t poolingDesc,
                                                    cudnnPoolingMode_t mode,
                                                    cudnnNanPropagation_t maxpoolingNanOpt,
                                                    int windowHeight, int windowWidth,
                                                    int verticalPadding, int horizontalPadding,
                                                    int verticalStride, int horizontalStride)
{
    ES_ENTER(cudnn, cudnnSetPooling2dDescriptor);
    if (es_det() && mode == CUDNN_POOLING_MAX)
        mode = CUDNN_POOLING_MAX_DETERMINISTIC;
    return ES_REAL(cudnn, cudnnSetPooling2dDescriptor)(poolingDesc, mode, maxpoolingNanOpt,
                                                       windowHeight, windowWidth,
                                                       verticalPadding, horizontalPadding,
                                                       verticalStride, horizontalStride);
}

ES_EXPORT cudnnStatus_t cudnnSetPoolingNdDescriptor(cudnnPoolingDescriptor_t poolingDesc,
                                                    const cudnnPoolingMode_t mode,
                                                    const cudnnNanPropagation_t maxpoolingNanOpt,
                                                    int nbDims, const int windowDimA[],
                                                    const int paddingA[], const int strideA[])
{
    ES_ENTER(cudnn, cudnnSetPoolingNdDescriptor);
    cudnnPoolingMode_t m = mode;
    if (es_det() && m == CUDNN_POOLING_MAX)
        m = CUDNN_POOLING_MAX_DETERMINISTIC;
    return ES_REAL(cudnn, cudnnSetPoolingNdDescriptor)(poolingDesc, m, maxpoolingNanOpt, nbDims,
                                                       windowDimA, paddingA, strideA);
}
