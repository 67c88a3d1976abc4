/* d2's portable kernels on the device: the fatbin embedded in
 * libeasyscale.so (kernels/portable.cu: SASS for every architecture the
 * toolkit builds, PTX of the newest; the arithmetic is explicit
 * round-to-nearest operations, so JIT or SASS, the bits are the same) is
 * loaded with the real cuModuleLoadData once per context; launches go
 * through the real cuLaunchKernel. The table of loaded contexts is
 * append-only and read without a lock.
 *
 * d2 never falls back to the vendor libraries because of the module: at
 * cuInit every device is checked against the fatbin's architectures
 * (es_portable_startup_check; a GPU it cannot serve fails cuInit with a
 * message), and a module that does not load in a context fails the call
 * that needed it (CUDA_ERROR_NO_BINARY_FOR_GPU from the launchers, the
 * library's execution-failed status to the application). */
#ifndef ES_KERNELS_PORTABLE_H
#define ES_KERNELS_PORTABLE_H

#include <cuda.h>

enum es_portable_kernel {
    ES_K_GEMM_L = 0,   /* tiled GEMM, large tiles */
    ES_K_GEMM_S,       /* tiled GEMM, small tiles */
    ES_K_CONV_FWD,     /* tiled implicit-GEMM convolutions */
    ES_K_CONV_BWD_DATA,
    ES_K_CONV_BWD_FILTER,
    ES_K_BGRAD,
    ES_K_REF_GEMM,     /* per-element reference kernels */
    ES_K_REF_CONV_FWD,
    ES_K_REF_CONV_BWD_DATA,
    ES_K_REF_CONV_BWD_FILTER,
    ES_K_GEMM_I8,      /* the int8 GEMM (kernels/d2int8_kernels.h) */
    ES_K_CONV_FWD_I8,  /* the int8 implicit-GEMM convolutions */
    ES_K_CONV_BWD_DATA_I8,
    ES_K_CONV_BWD_FILTER_I8,
    ES_K_COUNT
};

/* The kernel's symbol in the fatbin. */
const char *es_portable_name(int which);

/* The kernel in the current context (loading the module on first use), or
 * NULL when there is no current context or the module does not load (then
 * logged as an error, once per context). */
CUfunction es_portable_function(int which);

/* d2 at cuInit: 0 when the fatbin can run on every device the driver
 * lists, else CUDA_ERROR_NO_BINARY_FOR_GPU with an error logged naming the
 * device and the architectures the fatbin holds. */
CUresult es_portable_startup_check(void);

/* The embedded fatbin (for tests and tools). */
extern const unsigned char es_portable_fatbin[];

#endif
