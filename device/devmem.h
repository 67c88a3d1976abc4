/* The shim's own device memory (cuBLAS and cuDNN workspaces), allocated so
 * that it never disturbs a CUDA graph capture.
 *
 * NVIDIA's rule: while a capture is in progress, a potentially unsafe call
 * such as cuMemAlloc or cuMemFree made by a thread in the (default) GLOBAL
 * capture interaction mode fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
 * and invalidates the capture (of this thread, or any GLOBAL one). The
 * shim therefore (1) allocates and frees with its thread switched to the
 * RELAXED interaction mode for the call (cuThreadExchangeStreamCaptureMode),
 * so another thread's capture is never touched, and (2) never allocates in
 * a call that works on a capturing stream: the wrappers make what such a
 * call needs ahead, at handle creation or at a first use outside capture
 * (es_devmem_capturing tells them).
 */
#ifndef ES_DEVICE_DEVMEM_H
#define ES_DEVICE_DEVMEM_H

#include <cuda.h>
#include <stddef.h>

/* cuMemAlloc in the RELAXED capture mode. Returns its CUresult. */
CUresult es_devmem_alloc(CUdeviceptr *p, size_t bytes);

/* cuMemFree in the RELAXED capture mode. */
CUresult es_devmem_free(CUdeviceptr p);

/* Whether stream s is capturing (or its capture was invalidated), or is the
 * legacy stream while a blocking stream of its context captures: 1, else 0
 * (a stream that no longer exists is not capturing). */
int es_devmem_capturing(CUstream s);

#endif
