/* d2's portable convolutions: forward (with an optional pointwise
 * epilogue), backward data and backward filter on fp32 / fp16 / bf16
 * tensors with fp32 accumulation, any strides (NCHW, NHWC or other), any
 * padding, stride, dilation, groups, convolution or cross-correlation, as
 * implicit GEMMs: by the int8 definition (kernels/d2int8_kernels.h) or in
 * the order documented in kernels/portable_kernels.h (EASYSCALE_D2_GEMM):
 * the same bits on every GPU model. Used by the legacy cuDNN calls (es_conv_run) and by the
 * backend API's execution plans (intercept/cudnn_backend.c, through
 * es_conv_launch). */
#ifndef ES_KERNELS_CONV_H
#define ES_KERNELS_CONV_H

#include <cuda.h>
#include <cudnn.h>

#include "kernels/d2int8_kernels.h"
#include "kernels/portable_kernels.h"

enum es_conv_dir { ES_CONV_FWD = 0, ES_CONV_BWD_DATA, ES_CONV_BWD_FILTER };
/* The kernels of a direction: the per-element reference, the tiled fma
 * one, the int8 one (kernels/d2int8_kernels.h's definition on the
 * implicit GEMM's rows and columns). */
enum es_conv_which { ES_CONV_REF = 0, ES_CONV_TILED = 1, ES_CONV_INT8 = 2 };

/* ES_DT_* of a cuDNN data type (-1 for one the portable kernels do not take). */
int es_conv_dtype(cudnnDataType_t t);

/* Checks the geometry of *a (sizes, groups, output size) and sets
 * a->total for direction dir. Returns 0 or -EINVAL. */
int es_conv_check(int dir, es_conv_args_t *a);

/* Launches the convolution *a (checked by es_conv_check) on stream s with
 * the implicit-GEMM kernel of EASYSCALE_D2_GEMM's path: int8
 * (ES_CONV_INT8) or the tiled fma one (ES_CONV_TILED). Returns the CUresult of the launch
 * (CUDA_ERROR_NO_BINARY_FOR_GPU when the kernels cannot be loaded in the
 * current context: the caller fails the call, never hands it to cuDNN), or
 * -ENOTSUP (as a negative int) for a grid beyond CUDA's limits (groups or
 * channel counts past 65535 tiles), which cuDNN then runs. */
int es_conv_launch(int dir, const es_conv_args_t *a, CUstream s);

/* The same with a given kernel (enum es_conv_which): the tiled fma kernel
 * and the per-element reference give the same bits, the int8 one its
 * definition's. */
int es_conv_launch_kernel(int dir, int which, const es_conv_args_t *a, CUstream s);

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
