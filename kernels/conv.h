/* d2's portable convolutions: cudnnConvolutionForward / BackwardData /
 * BackwardFilter on fp32 NCHW(-strided) tensors and KCRS filters (any
 * padding, stride, dilation, groups, convolution or cross-correlation) run
 * on the shim's own kernels (kernels/portable_kernels.h) on the cuDNN
 * handle's stream, whatever algorithm the caller named: the same bits on
 * every GPU model. */
#ifndef ES_CONTEXT_CONV_H
#define ES_CONTEXT_CONV_H

#include <cudnn.h>

enum es_conv_dir { ES_CONV_FWD = 0, ES_CONV_BWD_DATA, ES_CONV_BWD_FILTER };

/* xd/yd: the image and output tensor descriptors (for BWD_DATA xd is dx's,
 * yd dy's; for BWD_FILTER yd is dy's); in0/in1/out as in es_conv_args_t.
 * Returns 0 with *status set when the portable kernel ran, -ENOTSUP when
 * cuDNN must do it (another data type, layout or a descriptor cuDNN would
 * reject). */
int es_conv_run(int dir, cudnnHandle_t h, const void *alpha, const void *beta,
                cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd,
                cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd, const void *in0,
                const void *in1, void *out, cudnnStatus_t *status);

#endif
