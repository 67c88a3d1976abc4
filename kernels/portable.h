/* d2's portable kernels on the device: the fatbin embedded in
 * libeasyscale.so (kernels/portable.cu, sm_80 + sm_90 SASS, compute_75 +
 * compute_90 PTX: sm_75 and sm_100+ JIT it; the arithmetic is explicit
 * round-to-nearest intrinsics, so JIT or SASS, the bits are the same) is
 * loaded with the real cuModuleLoadData once per context; launches go
 * through the real cuLaunchKernel. The table of loaded contexts is
 * append-only and read without a lock. */
#ifndef ES_CONTEXT_PORTABLE_H
#define ES_CONTEXT_PORTABLE_H

#include <cuda.h>

enum es_portable_kernel {
    ES_K_GEMM = 0,
    ES_K_CONV_FWD,
    ES_K_CONV_BWD_DATA,
    ES_K_CONV_BWD_FILTER,
    ES_K_BGRAD,
    ES_K_COUNT
};

/* The kernel in the current context (loading the module on first use), or
 * NULL when there is no current context or the module does not load. */
CUfunction es_portable_function(int which);

#endif
