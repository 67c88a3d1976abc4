/* The vendor libraries see the physical devices while virtual devices are
 * on (device/vdev.h). NVIDIA's cuBLAS carries a static copy of the CUDA
 * runtime, which sets up state for every device the driver reports through
 * private driver functions that know only the physical devices: with four
 * ESTs on one H200 (four virtual devices) every cublasCreate failed with
 * CUBLAS_STATUS_NOT_INITIALIZED, on rank 0 too. So their lookups get:
 *   - the count, the ordinals and every query naming a device: the
 *     driver's own functions (physical ordinals, true values: also what d2
 *     gives them, device/device.h);
 *   - the device of a context: the physical device it runs on;
 *   - a primary context, or a context made, on a physical ordinal: the
 *     application's answer for the virtual device standing on it
 *     (es_vdev_virt), so that the library and the application share the
 *     context (virtual when handles are). */
#include "intercept/vendordev.h"
#include "intercept/enter.h"
#include "shim/real.h"
#include "device/vdev.h"
#include "move/vhandle.h"
#include "shim/log.h"

static CUresult es_vd_cuCtxGetDevice(CUdevice *device)
{
    ES_ENTER(cuda, cuCtxGetDevice);
    CUresult r = ES_REAL(cuda, cuCtxGetDevice)(device);
    /* with virtual handles the thunk answers the virtual device */
    if (r == CUDA_SUCCESS && device && es_vh_on)
        *device = es_vdev_phys(*device);
    return r;
}

static CUresult es_vd_cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    ES_ENTER(cuda, cuCtxGetDevice_v2);
    CUresult r = ES_REAL(cuda, cuCtxGetDevice_v2)(device, ctx);
    if (r == CUDA_SUCCESS && device && es_vh_on)
        *device = es_vdev_phys(*device);
    return r;
}

static CUresult es_vd_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    return cuDevicePrimaryCtxRetain(pctx, es_vdev_virt(dev));
}

static CUresult es_vd_cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(es_vdev_virt(dev));
}

static CUresult es_vd_cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(es_vdev_virt(dev));
}

static CUresult es_vd_cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params,
                                     unsigned int flags, CUdevice dev)
{
    return cuCtxCreate_v4(pctx, params, flags, es_vdev_virt(dev));
}

/* The CUDA runtime holds real handles (intercept/cuda.c): its contexts are
 * the driver's, on physical ordinals; the first one it makes fixes the
 * EST's slot (device/vdev.h), as the application's own would: a PyTorch
 * process never makes one itself. */
static void es_rt_select(CUdevice dev)
{
    es_vdev_select(dev);
    int slot = es_vdev_slot();
    static int said;
    if (slot >= 0 && slot != (int)dev && !__atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL))
        ES_WARN("the CUDA runtime made a context on GPU %d, not on this EST's GPU %d "
                "(EASYSCALE_SLOT): the framework chose its device itself; make the EST's GPU "
                "the only one visible (CUDA_VISIBLE_DEVICES) for such a process",
                (int)dev, slot);
}

static CUresult es_rt_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult r = ES_RAW(cuda, cuDevicePrimaryCtxRetain)(pctx, dev);
    if (r == CUDA_SUCCESS)
        es_rt_select(dev);
    return r;
}

static CUresult es_rt_cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params,
                                     unsigned int flags, CUdevice dev)
{
    CUresult r = ES_RAW(cuda, cuCtxCreate_v4)(pctx, params, flags, dev);
    if (r == CUDA_SUCCESS)
        es_rt_select(dev);
    return r;
}

void *es_runtime_dev_fn(int idx)
{
    if (!es_vdev_active())
        return NULL;
    switch (idx) {
    case ES_IDX_cuDevicePrimaryCtxRetain: return (void *)es_rt_cuDevicePrimaryCtxRetain;
    case ES_IDX_cuCtxCreate_v4: return (void *)es_rt_cuCtxCreate_v4;
    default: return NULL;
    }
}

void *es_vendor_dev_fn(int idx)
{
    if (!es_vdev_active())
        return NULL;
    switch (idx) {
    case ES_IDX_cuDeviceGetCount:
    case ES_IDX_cuDeviceGet:
    case ES_IDX_cuDeviceGetName:
    case ES_IDX_cuDeviceTotalMem_v2:
    case ES_IDX_cuDeviceGetUuid_v2:
    case ES_IDX_cuDeviceGetPCIBusId:
    case ES_IDX_cuDeviceCanAccessPeer:
    case ES_IDX_cuDeviceGetAttribute:
    case ES_IDX_cuDeviceComputeCapability:
    case ES_IDX_cuDevicePrimaryCtxGetState:
    case ES_IDX_cuDevicePrimaryCtxSetFlags_v2:
        return es_raw_ptr(ES_LIB_CUDA, idx);
    case ES_IDX_cuCtxGetDevice: return (void *)es_vd_cuCtxGetDevice;
    case ES_IDX_cuCtxGetDevice_v2: return (void *)es_vd_cuCtxGetDevice_v2;
    case ES_IDX_cuDevicePrimaryCtxRetain: return (void *)es_vd_cuDevicePrimaryCtxRetain;
    case ES_IDX_cuDevicePrimaryCtxRelease_v2: return (void *)es_vd_cuDevicePrimaryCtxRelease_v2;
    case ES_IDX_cuDevicePrimaryCtxReset_v2: return (void *)es_vd_cuDevicePrimaryCtxReset_v2;
    case ES_IDX_cuCtxCreate_v4: return (void *)es_vd_cuCtxCreate_v4;
    default: return NULL;
    }
}
