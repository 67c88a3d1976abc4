/* The collective digests' hash on the device (kernels/digest.cu, embedded
 * in libeasyscale.so as a fatbin: SASS for sm_75 to sm_100 and compute_100
 * PTX; integer arithmetic only, so every model gives the same value).
 * Loaded with the real cuModuleLoadData once per context; launched with the
 * real cuLaunchKernel. The host never reads the hashed memory. */
#ifndef ES_KERNELS_DIGEST_H
#define ES_KERNELS_DIGEST_H

#include <cuda.h>
#include <stddef.h>

/* Loads the kernel in the current context if needed. Returns 0, or -ENXIO
 * when there is no current context or the module does not load there. */
int es_digest_kernel_ready(void);

/* Enqueues on stream s (current context): *out += hash of the nbytes at
 * device address p (8 bytes at out, device memory, zeroed by the caller
 * before, on the same stream). Returns the launch's CUresult
 * (CUDA_ERROR_NOT_FOUND when the kernel is not loadable). */
CUresult es_digest_kernel_launch(CUdeviceptr p, size_t nbytes, CUdeviceptr out, CUstream s);

#endif
