/* Memory pools of the shim (see mempool.h): pool objects with their
 * attributes and accounting, over the registry's allocator. */
#include "move/mempool.h"
#include "lib/hmap.h"
#include "move/memreg.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct es_pool {
    uint32_t magic;
    int vdev;
    CUmemPoolProps props;
    cuuint64_t threshold;
    int reuse[3];           /* FOLLOW_EVENT_DEPENDENCIES, OPPORTUNISTIC, INTERNAL */
    cuuint64_t used, used_high, reserved_high;
    unsigned char access[ES_MEMREG_MAX_VDEV];
    int is_default;
};

static pthread_mutex_t es_pool_mu = PTHREAD_MUTEX_INITIALIZER;
static es_hmap_t es_pools = ES_HMAP_INIT;    /* pool -> pool */
static es_hmap_t es_owner = ES_HMAP_INIT;    /* allocation base -> pool */
static es_hmap_t es_sizes = ES_HMAP_INIT;    /* allocation base -> size + 1 (as a pointer) */
static es_pool_t *es_defaults[ES_MEMREG_MAX_VDEV];
static es_pool_t *es_currents[ES_MEMREG_MAX_VDEV];

static int es_vdev_ok(int v) { return v >= 0 && v < ES_MEMREG_MAX_VDEV; }

static es_pool_t *es_pool_of(CUmemoryPool p) /* lock held */
{
    es_pool_t *x = p ? es_hmap_get(&es_pools, (uint64_t)(uintptr_t)p) : NULL;
    return x && x->magic == ES_POOL_MAGIC ? x : NULL;
}

int es_pool_valid(CUmemoryPool p)
{
    pthread_mutex_lock(&es_pool_mu);
    int ok = es_pool_of(p) != NULL;
    pthread_mutex_unlock(&es_pool_mu);
    return ok;
}

static es_pool_t *es_pool_new(const CUmemPoolProps *props) /* lock held */
{
    es_pool_t *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->magic = ES_POOL_MAGIC;
    p->props = *props;
    p->vdev = props->location.id;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1; /* the driver's defaults */
    p->access[p->vdev] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (es_hmap_put(&es_pools, (uint64_t)(uintptr_t)p, p) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

CUresult es_pool_create(CUmemoryPool *out, const CUmemPoolProps *props)
{
    if (!out || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !es_vdev_ok(props->location.id) ||
        es_memreg_device(props->location.id) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE)
        return CUDA_ERROR_NOT_SUPPORTED; /* pool IPC */
    pthread_mutex_lock(&es_pool_mu);
    es_pool_t *p = es_pool_new(props);
    pthread_mutex_unlock(&es_pool_mu);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

CUresult es_pool_destroy(CUmemoryPool pool)
{
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&es_pool_mu);
    es_pool_t *p = es_pool_of(pool);
    if (!p || p->is_default) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    /* the driver frees a pool's memory once its allocations are freed;
     * ours go back at their own frees: the pool object only goes */
    for (int v = 0; v < ES_MEMREG_MAX_VDEV; v++)
        if (es_currents[v] == p)
            es_currents[v] = es_defaults[v];
    es_hmap_del(&es_pools, (uint64_t)(uintptr_t)p);
    p->magic = 0;
    free(p);
out:
    pthread_mutex_unlock(&es_pool_mu);
    return r;
}

static es_pool_t *es_default_locked(int vdev)
{
    if (!es_defaults[vdev]) {
        CUmemPoolProps props;
        memset(&props, 0, sizeof(props));
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = vdev;
        es_pool_t *p = es_pool_new(&props);
        if (!p)
            return NULL;
        p->is_default = 1;
        es_defaults[vdev] = p;
    }
    return es_defaults[vdev];
}

CUresult es_pool_default(CUmemoryPool *out, int vdev)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!es_vdev_ok(vdev) || es_memreg_device(vdev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&es_pool_mu);
    es_pool_t *p = es_default_locked(vdev);
    pthread_mutex_unlock(&es_pool_mu);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

CUresult es_pool_current(CUmemoryPool *out, int vdev)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!es_vdev_ok(vdev) || es_memreg_device(vdev) < 0)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&es_pool_mu);
    es_pool_t *p = es_currents[vdev] ? es_currents[vdev] : es_default_locked(vdev);
    pthread_mutex_unlock(&es_pool_mu);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

CUresult es_pool_set_current(int vdev, CUmemoryPool pool)
{
    CUresult r = CUDA_SUCCESS;
    if (!es_vdev_ok(vdev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&es_pool_mu);
    es_pool_t *p = es_pool_of(pool);
    if (!p)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (p->vdev != vdev)
        r = CUDA_ERROR_INVALID_DEVICE; /* a pool of another device */
    else
        es_currents[vdev] = p;
    pthread_mutex_unlock(&es_pool_mu);
    return r;
}

CUresult es_pool_set_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult r = CUDA_SUCCESS;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&es_pool_mu);
    es_pool_t *p = es_pool_of(pool);
    if (!p) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(int *)value != 0;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        p->threshold = *(cuuint64_t *)value;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        /* only 0 is allowed: the watermark restarts from the current value */
        if (*(cuuint64_t *)value != 0) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        if (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH)
            p->used_high = p->used;
        else
            p->reserved_high = p->used;
        break;
    default:
        r = CUDA_ERROR_INVALID_VALUE; /* read-only, or unknown */
    }
out:
    pthread_mutex_unlock(&es_pool_mu);
    return r;
}

CUresult es_pool_get_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    CUresult r = CUDA_SUCCESS;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&es_pool_mu);
    es_pool_t *p = es_pool_of(pool);
    if (!p) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *(cuuint64_t *)value = p->threshold;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        *(cuuint64_t *)value = p->used;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
        *(cuuint64_t *)value = p->reserved_high;
        break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
        *(cuuint64_t *)value = p->used_high;
        break;
    default:
        r = CUDA_ERROR_INVALID_VALUE;
    }
out:
    pthread_mutex_unlock(&es_pool_mu);
    return r;
}

CUresult es_pool_trim(CUmemoryPool pool, size_t keep)
{
    (void)keep; /* nothing is kept in reserve */
    return es_pool_valid(pool) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult es_pool_set_access(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    CUresult r = CUDA_SUCCESS;
    if (!map || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&es_pool_mu);
    es_pool_t *p = es_pool_of(pool);
    if (!p) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    for (size_t i = 0; i < count; i++)
        if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            !es_vdev_ok(map[i].location.id) || es_memreg_device(map[i].location.id) < 0) {
            r = CUDA_ERROR_INVALID_DEVICE;
            goto out;
        }
    for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++) {
        int v = map[i].location.id;
        if (v == p->vdev) {
            if (map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
                r = CUDA_ERROR_INVALID_VALUE; /* the owner keeps read-write */
            continue;
        }
        r = map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ? es_memreg_peer_disable(p->vdev, v)
                                                           : es_memreg_peer_enable(p->vdev, v);
        if (r == CUDA_SUCCESS)
            p->access[v] = (unsigned char)map[i].flags;
    }
out:
    pthread_mutex_unlock(&es_pool_mu);
    return r;
}

CUresult es_pool_get_access(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *loc)
{
    CUresult r = CUDA_SUCCESS;
    if (!flags || !loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE || !es_vdev_ok(loc->id))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&es_pool_mu);
    es_pool_t *p = es_pool_of(pool);
    if (!p)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        *flags = (CUmemAccess_flags)p->access[loc->id];
    pthread_mutex_unlock(&es_pool_mu);
    return r;
}

CUresult es_pool_alloc_async(CUdeviceptr *out, size_t size, CUmemoryPool pool, int vdev,
                             CUstream stream)
{
    (void)stream; /* fresh memory: nothing on any stream uses it yet */
    CUresult r;
    if (!out || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&es_pool_mu);
    es_pool_t *p;
    if (pool) {
        p = es_pool_of(pool);
    } else if (es_vdev_ok(vdev)) {
        p = es_currents[vdev] ? es_currents[vdev] : es_default_locked(vdev);
    } else {
        p = NULL;
    }
    if (!p) {
        pthread_mutex_unlock(&es_pool_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUdeviceptr d = 0;
    r = es_mem_alloc(p->vdev, size, ES_ALLOC_POOL, &d);
    if (r == CUDA_SUCCESS &&
        (es_hmap_put(&es_owner, (uint64_t)d, p) != 0 ||
         es_hmap_put(&es_sizes, (uint64_t)d, (void *)(uintptr_t)(size + 1)) != 0)) {
        es_hmap_del(&es_owner, (uint64_t)d);
        es_mem_free(d);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS) {
        p->used += size;
        if (p->used > p->used_high)
            p->used_high = p->used;
        if (p->used > p->reserved_high)
            p->reserved_high = p->used;
        *out = d;
    }
    pthread_mutex_unlock(&es_pool_mu);
    return r;
}

static void es_pool_account_free(CUdeviceptr d)
{
    pthread_mutex_lock(&es_pool_mu);
    es_pool_t *p = es_hmap_del(&es_owner, (uint64_t)d);
    uintptr_t sz = (uintptr_t)es_hmap_del(&es_sizes, (uint64_t)d);
    /* a pool destroyed meanwhile is not in es_pools any more */
    if (p && sz && es_hmap_get(&es_pools, (uint64_t)(uintptr_t)p) == p)
        p->used -= sz - 1 <= p->used ? sz - 1 : p->used;
    pthread_mutex_unlock(&es_pool_mu);
}

CUresult es_pool_free_async(CUdeviceptr d, CUstream stream)
{
    CUresult r = es_mem_free_async(d, stream);
    if (r == CUDA_SUCCESS)
        es_pool_account_free(d);
    return r;
}

CUresult es_pool_free(CUdeviceptr d)
{
    CUresult r = es_mem_free(d);
    if (r == CUDA_SUCCESS)
        es_pool_account_free(d);
    return r;
}

void es_pool_reset(void)
{
    pthread_mutex_lock(&es_pool_mu);
    for (size_t i = 0; i < es_pools.cap; i++) {
        uint64_t k = es_pools.keys[i];
        if (k && k != UINT64_MAX) {
            es_pool_t *p = es_pools.vals[i];
            p->magic = 0;
            free(p);
        }
    }
    es_hmap_free(&es_pools);
    es_hmap_free(&es_owner);
    es_hmap_free(&es_sizes);
    memset(es_defaults, 0, sizeof(es_defaults));
    memset(es_currents, 0, sizeof(es_currents));
    pthread_mutex_unlock(&es_pool_mu);
}
