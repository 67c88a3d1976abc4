/* Memory pools (cuMemPool*, cuMemAllocAsync, cuMemAllocFromPoolAsync)
 * answered by the shim on top of its own allocator (move/memreg.h), so
 * that pool memory moves with the EST like every other allocation
 * (docs/MOVING.md, section 2). simcuda has no pools (it answers
 * CUDA_ERROR_NOT_SUPPORTED); a real driver's pool memory could not be
 * moved.
 *
 * A CUmemoryPool the application holds is a pointer to an es_pool_t. Each
 * virtual device has a default pool (cuDeviceGetDefaultMemPool) and a
 * current pool (cuDeviceSetMemPool / cuDeviceGetMemPool; cuMemAllocAsync
 * allocates from it). Allocations come from the registry's allocator
 * (kind ES_ALLOC_POOL); a stream-ordered free gives the memory back when
 * the stream gets there, so a pool never keeps memory in reserve: reserved
 * equals used, trimming has nothing to do, and the release threshold is
 * recorded and reported only. Peer access set on a pool is granted on all
 * of its device's memory. Pool export and import (IPC) are refused with
 * CUDA_ERROR_NOT_SUPPORTED.
 *
 * Every function stands for the driver entry point of the same name and
 * returns its CUresult; devices are virtual devices (vdev). Thread-safe.
 */
#ifndef ES_MOVE_MEMPOOL_H
#define ES_MOVE_MEMPOOL_H

#include <cuda.h>
#include <stdint.h>

#define ES_POOL_MAGIC 0x4553504fu /* "ESPO" */

typedef struct es_pool es_pool_t;

CUresult es_pool_create(CUmemoryPool *out, const CUmemPoolProps *props);
CUresult es_pool_destroy(CUmemoryPool pool);
CUresult es_pool_default(CUmemoryPool *out, int vdev);
CUresult es_pool_current(CUmemoryPool *out, int vdev);
CUresult es_pool_set_current(int vdev, CUmemoryPool pool);
CUresult es_pool_set_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult es_pool_get_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult es_pool_trim(CUmemoryPool pool, size_t keep);
CUresult es_pool_set_access(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count);
CUresult es_pool_get_access(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *loc);

/* stream: the real stream the allocation is ordered on (allocation is
 * immediate: fresh memory has no pending use). pool NULL: vdev's current
 * pool. */
CUresult es_pool_alloc_async(CUdeviceptr *out, size_t size, CUmemoryPool pool, int vdev,
                             CUstream stream);
/* Any stream-ordered free (cuMemFreeAsync): pool memory or not. */
CUresult es_pool_free_async(CUdeviceptr p, CUstream stream);
/* Any free at once (cuMemFree, after its synchronisation): pool memory or
 * not. */
CUresult es_pool_free(CUdeviceptr p);

/* Whether p is a pool of the shim (never dereferences an unknown p). */
int es_pool_valid(CUmemoryPool p);

/* Frees every pool (tests). */
void es_pool_reset(void);

#endif
