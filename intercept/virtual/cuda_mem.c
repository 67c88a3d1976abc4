/* Device memory that moves with its EST (docs/MOVING.md, section 2): the
 * hand-written thunks of the kind-T memory entries of shim/funcs.h,
 * installed in the translating real table while handles are virtual.
 * cuMemAlloc-family memory comes from the registry (move/memreg.h:
 * VMM-backed, so its address outlives its physical memory), pools from
 * move/mempool.h, the application's own VMM gets stand-in handles, and
 * pinned host memory is registered portable. */
#include "shim/real.h"
#include "intercept/virtual/thunks.h"
#include "move/door.h"
#include "move/mempool.h"
#include "move/memreg.h"
#include "move/mover.h"
#include "move/vhandle.h"

#include <string.h>

#define ES_PITCH_ALIGN 512 /* what cuMemAllocPitch rounds a row to */

/* The registry is set up at the first allocation (cuInit has run by then). */
static int es_mem_ready(void)
{
    return es_memreg_granularity() != 0 || es_memreg_init() == 0;
}

/* While a stream capture is in progress, cuMemAlloc and cuMemFree are
 * refused in the capture's interaction mode as the driver refuses them
 * (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, the capture invalidated): the
 * driver is asked itself, with an allocation of its own of one byte. */
static CUresult es_capture_allows(void)
{
    if (!es_door_captures())
        return CUDA_SUCCESS;
    CUdeviceptr p = 0;
    CUresult r = ES_RAW(cuda, cuMemAlloc_v2)(&p, 1);
    if (r == CUDA_SUCCESS)
        ES_RAW(cuda, cuMemFree_v2)(p);
    return r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED || r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
               ? r : CUDA_SUCCESS;
}

/* The vdev the calling thread allocates on: its current context's. */
static int es_cur_vdev(void)
{
    return es_vh_vdev_of(es_vh_current());
}

static CUresult es_m_cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    int v = es_cur_vdev();
    if (v < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!es_mem_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult c = es_capture_allows();
    if (c != CUDA_SUCCESS)
        return c;
    return es_mem_alloc(v, size, ES_ALLOC_PLAIN, dptr);
}

static CUresult es_m_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width,
                                        size_t height, unsigned elem)
{
    int v = es_cur_vdev();
    if (v < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!dptr || !pitch || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    if (!es_mem_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    size_t p = (width + ES_PITCH_ALIGN - 1) / ES_PITCH_ALIGN * ES_PITCH_ALIGN;
    if (height > SIZE_MAX / p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = es_mem_alloc(v, p * height, ES_ALLOC_PITCH, dptr);
    if (r == CUDA_SUCCESS)
        *pitch = p;
    return r;
}

static CUresult es_m_cuMemFree_v2(CUdeviceptr p)
{
    if (p == 0)
        return CUDA_SUCCESS;
    if (es_mem_find(p, NULL, NULL, NULL, NULL) != 0)
        return ES_RAW(cuda, cuMemFree_v2)(p); /* not ours: the driver answers */
    CUresult c = es_capture_allows();
    if (c != CUDA_SUCCESS)
        return c;
    /* as the driver's cuMemFree, wait for work that may still use it */
    ES_RAW(cuda, cuCtxSynchronize)();
    return es_pool_free(p);
}

static CUresult es_m_cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    if (es_mem_find(p, base, size, NULL, NULL) == 0)
        return CUDA_SUCCESS;
    return ES_RAW(cuda, cuMemGetAddressRange_v2)(base, size, p);
}

static CUresult es_m_cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr p)
{
    CUdeviceptr base;
    size_t size;
    if (data && (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
                 attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE) &&
        es_mem_find(p, &base, &size, NULL, NULL) == 0) {
        if (attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
            *(CUdeviceptr *)data = base;
        else
            *(size_t *)data = size;
        return CUDA_SUCCESS;
    }
    int v = -1;
    if (data && attr == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL &&
        es_mem_find(p, NULL, NULL, &v, NULL) == 0 && v >= 0) {
        *(int *)data = v; /* the application's ordinal: a move does not change it */
        return CUDA_SUCCESS;
    }
    CUresult r = ES_RAW(cuda, cuPointerGetAttribute)(data, attr, p);
    if (r == CUDA_SUCCESS && attr == CU_POINTER_ATTRIBUTE_CONTEXT)
        es_va_out_any(data);
    return r;
}

/* ---- stream-ordered allocation and pools ------------------------------------------------- */

static int es_stream_vdev(CUstream s)
{
    int v = (uintptr_t)s > 2 ? es_vh_vdev_of(s) : -1;
    return v >= 0 ? v : es_cur_vdev();
}

static CUresult es_m_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s)
{
    int v = es_stream_vdev(s);
    if (v < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!es_mem_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    return es_pool_alloc_async(dptr, size, NULL, v, es_vh_stream(s));
}

static CUresult es_m_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s)
{
    return es_m_cuMemAllocAsync(dptr, size, s ? s : CU_STREAM_PER_THREAD);
}

static CUresult es_m_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                             CUstream s)
{
    if (!es_mem_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    return es_pool_alloc_async(dptr, size, pool, -1, es_vh_stream(s));
}

static CUresult es_m_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size,
                                                  CUmemoryPool pool, CUstream s)
{
    return es_m_cuMemAllocFromPoolAsync(dptr, size, pool, s ? s : CU_STREAM_PER_THREAD);
}

static CUresult es_m_cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    if (es_mem_find(p, NULL, NULL, NULL, NULL) != 0)
        return ES_RAW(cuda, cuMemFreeAsync)(p, es_vh_stream(s));
    return es_pool_free_async(p, es_vh_stream(s));
}

static CUresult es_m_cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
    return es_m_cuMemFreeAsync(p, s ? s : CU_STREAM_PER_THREAD);
}

static CUresult es_m_cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
    return es_pool_create(pool, props);
}
static CUresult es_m_cuMemPoolDestroy(CUmemoryPool pool) { return es_pool_destroy(pool); }
static CUresult es_m_cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
    return es_pool_default(pool, dev);
}
static CUresult es_m_cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    return es_pool_current(pool, dev);
}
static CUresult es_m_cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    return es_pool_set_current(dev, pool);
}
static CUresult es_m_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v)
{
    return es_pool_set_attribute(pool, a, v);
}
static CUresult es_m_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v)
{
    return es_pool_get_attribute(pool, a, v);
}
static CUresult es_m_cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
    return es_pool_trim(pool, keep);
}
static CUresult es_m_cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *m, size_t n)
{
    return es_pool_set_access(pool, m, n);
}
static CUresult es_m_cuMemPoolGetAccess(CUmemAccess_flags *f, CUmemoryPool pool, CUmemLocation *l)
{
    return es_pool_get_access(f, pool, l);
}

/* ---- pinned host memory ------------------------------------------------------------------- */

static CUresult es_m_cuMemAllocHost_v2(void **pp, size_t size)
{
    if (es_cur_vdev() < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    return es_host_alloc(pp, size, 0);
}

static CUresult es_m_cuMemHostAlloc(void **pp, size_t size, unsigned flags)
{
    if (es_cur_vdev() < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    return es_host_alloc(pp, size, flags);
}

static CUresult es_m_cuMemFreeHost(void *p)
{
    if (es_host_flags(p, NULL) != 0)
        return ES_RAW(cuda, cuMemFreeHost)(p);
    return es_host_free(p);
}

/* The application's own host memory registered: remembered, so that a move
 * registers it again (move/memreg.h). */
static CUresult es_m_cuMemHostRegister_v2(void *p, size_t size, unsigned flags)
{
    /* parked (a time-sliced EST in a collective): registered at its swap-in */
    return es_host_register(p, size, flags, es_mover_where_est() == ES_MOVER_PARK);
}

static CUresult es_m_cuMemHostUnregister(void *p) { return es_host_unregister(p); }

static CUresult es_m_cuMemHostGetFlags(unsigned *flags, void *p)
{
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (es_host_flags(p, flags) == 0)
        return CUDA_SUCCESS;
    return ES_RAW(cuda, cuMemHostGetFlags)(flags, p);
}

/* ---- the application's VMM ---------------------------------------------------------------- */

static CUresult es_m_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (!es_mem_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    return es_vmm_create(h, size, prop, flags);
}
static CUresult es_m_cuMemRelease(CUmemGenericAllocationHandle h) { return es_vmm_release(h); }
static CUresult es_m_cuMemMap(CUdeviceptr va, size_t size, size_t off,
                              CUmemGenericAllocationHandle h, unsigned long long flags)
{
    return es_vmm_map(va, size, off, h, flags);
}
static CUresult es_m_cuMemUnmap(CUdeviceptr va, size_t size) { return es_vmm_unmap(va, size); }
static CUresult es_m_cuMemSetAccess(CUdeviceptr va, size_t size, const CUmemAccessDesc *d,
                                    size_t n)
{
    return es_vmm_set_access(va, size, d, n);
}
static CUresult es_m_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
    return es_vmm_retain(h, addr);
}
static CUresult es_m_cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                            CUmemGenericAllocationHandle h)
{
    return es_vmm_props(prop, h);
}
static CUresult es_m_cuMemExportToShareableHandle(void *sh, CUmemGenericAllocationHandle h,
                                                  CUmemAllocationHandleType t,
                                                  unsigned long long flags)
{
    return es_vmm_export(sh, h, t, flags);
}
static CUresult es_m_cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os,
                                                    CUmemAllocationHandleType t)
{
    int v = es_cur_vdev();
    if (!es_mem_ready())
        return CUDA_ERROR_NOT_INITIALIZED;
    return es_vmm_import(h, os, t, v < 0 ? 0 : v);
}

static CUresult es_m_cuMemAddressFree(CUdeviceptr p, size_t size)
{
    if (es_memreg_owns_range(p, size))
        return CUDA_ERROR_INVALID_VALUE; /* a cuMemAlloc allocation's range */
    return ES_RAW(cuda, cuMemAddressFree)(p, size);
}

static CUresult es_m_cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                                   CUmemAllocationGranularity_flags option)
{
    if (!prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return ES_RAW(cuda, cuMemGetAllocationGranularity)(g, prop, option);
    CUmemAllocationProp p = *prop;
    int d = es_memreg_device(p.location.id);
    if (d < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    p.location.id = d;
    return ES_RAW(cuda, cuMemGetAllocationGranularity)(g, &p, option);
}

/* ---- installing -------------------------------------------------------------------------- */

void es_mem_install(void);
void es_mem_install(void)
{
#define ES_SET(sym) es_real_cuda.sym = es_m_##sym;
    ES_SET(cuMemAlloc_v2)
    ES_SET(cuMemHostRegister_v2)
    ES_SET(cuMemHostUnregister)
    ES_SET(cuMemAllocPitch_v2)
    ES_SET(cuMemFree_v2)
    ES_SET(cuMemGetAddressRange_v2)
    ES_SET(cuPointerGetAttribute)
    ES_SET(cuMemAllocAsync)
    ES_SET(cuMemAllocAsync_ptsz)
    ES_SET(cuMemAllocFromPoolAsync)
    ES_SET(cuMemAllocFromPoolAsync_ptsz)
    ES_SET(cuMemFreeAsync)
    ES_SET(cuMemFreeAsync_ptsz)
    ES_SET(cuMemPoolCreate)
    ES_SET(cuMemPoolDestroy)
    ES_SET(cuDeviceGetDefaultMemPool)
    ES_SET(cuDeviceGetMemPool)
    ES_SET(cuDeviceSetMemPool)
    ES_SET(cuMemPoolSetAttribute)
    ES_SET(cuMemPoolGetAttribute)
    ES_SET(cuMemPoolTrimTo)
    ES_SET(cuMemPoolSetAccess)
    ES_SET(cuMemPoolGetAccess)
    ES_SET(cuMemAllocHost_v2)
    ES_SET(cuMemHostAlloc)
    ES_SET(cuMemFreeHost)
    ES_SET(cuMemHostGetFlags)
    ES_SET(cuMemCreate)
    ES_SET(cuMemRelease)
    ES_SET(cuMemMap)
    ES_SET(cuMemUnmap)
    ES_SET(cuMemSetAccess)
    ES_SET(cuMemRetainAllocationHandle)
    ES_SET(cuMemGetAllocationPropertiesFromHandle)
    ES_SET(cuMemExportToShareableHandle)
    ES_SET(cuMemImportFromShareableHandle)
    ES_SET(cuMemAddressFree)
    ES_SET(cuMemGetAllocationGranularity)
#undef ES_SET
}
