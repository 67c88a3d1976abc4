/* The shim's own device memory, never disturbing a capture (see devmem.h). */
#include "device/devmem.h"
#include "shim/real.h"

CUresult es_devmem_alloc(CUdeviceptr *p, size_t bytes)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CUresult mr = ES_REAL(cuda, cuThreadExchangeStreamCaptureMode)(&mode);
    CUresult r = ES_REAL(cuda, cuMemAlloc_v2)(p, bytes);
    if (mr == CUDA_SUCCESS)
        ES_REAL(cuda, cuThreadExchangeStreamCaptureMode)(&mode);
    return r;
}

CUresult es_devmem_free(CUdeviceptr p)
{
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CUresult mr = ES_REAL(cuda, cuThreadExchangeStreamCaptureMode)(&mode);
    CUresult r = ES_REAL(cuda, cuMemFree_v2)(p);
    if (mr == CUDA_SUCCESS)
        ES_REAL(cuda, cuThreadExchangeStreamCaptureMode)(&mode);
    return r;
}

int es_devmem_capturing(CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = ES_REAL(cuda, cuStreamIsCapturing)(s, &st);
    if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
        return 1; /* the legacy stream while a blocking stream captures */
    return r == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}
