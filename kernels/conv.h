/* d2's portable convolutions: forward (with an optional pointwise
 * epilogue), backward data and backward filter on fp32 / fp16 / bf16
 * tensors with fp32 accumulation, any strides (NCHW, NHWC or other), any
 * padding, stride, dilation, groups, convolution or cross-correlation, in
 * the order documented in kernels/portable_kernels.h: the same bits on
 * every GPU model. Used by the legacy cuDNN calls (es_conv_run) and by the
 * backend API's execution plans (intercept/cudnn_backend.c, through
 * es_conv_launch). */
#ifndef ES_KERNELS_CONV_H
#define ES_KERNELS_CONV_H

#include <cuda.h>
#include <cudnn.h>

#include "kernels/portable_kernels.h"

enum es_conv_dir { ES_CONV_FWD = 0, ES_CONV_BWD_DATA, ES_CONV_BWD_FILTER };

/* ES_DT_* of a cuDNN data type (-1 for one the portable kernels do not take). */
int es_conv_dtype(cudnnDataType_t t);

/* Checks the geometry of *a (sizes, groups, output size) and sets
 * a->total for direction dir. Returns 0 or -EINVAL. */
int es_conv_check(int dir, es_conv_args_t *a);

/* Launches the convolution *a (checked by es_conv_check) on stream s with
 * the tiled implicit-GEMM kernel. Returns the CUresult of the launch
 * (CUDA_ERROR_NO_BINARY_FOR_GPU when the kernels cannot be loaded in the
 * current context: the caller fails the call, never hands it to cuDNN), or
 * -ENOTSUP (as a negative int) for a grid beyond CUDA's limits (groups or
 * channel counts past 65535 tiles), which cuDNN then runs. */
int es_conv_launch(int dir, const es_conv_args_t *a, CUstream s);

/* The same with the tiled kernel (tiled 1) or the per-element reference
 * kernel (tiled 0): the same bits. */
int es_conv_launch_kernel(int dir, int tiled, const es_conv_args_t *a, CUstream s);

/* The legacy API: xd/yd the image and output tensor descriptors (for
 * BWD_DATA xd is dx's, yd dy's; for BWD_FILTER yd is dy's); in0/in1/out as
 * in es_conv_args_t. Returns 0 with *status set when the portable kernel
 * ran, -ENOTSUP when cuDNN must do it (a data type, layout or compute type
 * it does not take, or a descriptor cuDNN would reject). */
int es_conv_run(int dir, cudnnHandle_t h, const void *alpha, const void *beta,
                cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd,
                cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd, const void *in0,
                const void *in1, void *out, cudnnStatus_t *status);

#endif
