/* The device-memory registry (see memreg.h): cuMemAlloc-family memory backed
 * by VMM (slabs for small requests), stand-in handles for the application's
 * own VMM allocations, pinned host memory registered portable. */
#include "move/memreg.h"
#include "move/drv.h"
#include "lib/hmap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ES_PAGE 4096UL
#define ES_ROUND_UP(x, a) (((x) + (a) - 1) / (a) * (a))

typedef struct es_alloc {
    uintptr_t va;
    size_t size;          /* requested */
    es_phys_t *ph;
    int kind;
    size_t unit, nunits;  /* slab allocations */
} es_alloc_t;

typedef struct es_pending_free {
    CUdeviceptr p;
    CUevent ev;
} es_pending_free_t;

typedef struct es_host {
    void *p;
    size_t span;
    unsigned flags;       /* the application's cuMemHostAlloc flags (cuMemHostRegister
                             flags when app) */
    int registered;
    int app;              /* the application's memory, registered (never unmapped here) */
} es_host_t;

/* Recursive: the swap engine holds it for a whole move and calls the
 * registry's own functions. */
static pthread_mutex_t es_mr_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static size_t es_gran;
static int es_ndev;
static int es_dev_of[ES_MEMREG_MAX_VDEV]; /* ES_DEV_UNSET: the resolver's */
#define ES_DEV_UNSET (-100)
static uint64_t es_peers[ES_MEMREG_MAX_VDEV]; /* accessors of each owner */
static es_phys_t *es_head[ES_MEMREG_MAX_VDEV], *es_tail[ES_MEMREG_MAX_VDEV];
static es_hmap_t es_standins = ES_HMAP_INIT;
static es_alloc_t *es_allocs;
static size_t es_nallocs, es_callocs;
static es_pending_free_t *es_pend;
static size_t es_npend, es_cpend;
static es_host_t *es_hosts;
static size_t es_nhosts, es_chosts;
static uint64_t es_next_id = 1;
static uint64_t es_footprint; /* bytes with real memory behind (atomic) */
static __thread int es_uncounted; /* es_memreg_uncounted nesting */

uint64_t es_memreg_footprint(void)
{
    return __atomic_load_n(&es_footprint, __ATOMIC_RELAXED);
}

void es_memreg_uncounted(int on)
{
    es_uncounted += on ? 1 : -1;
}

static int es_counts(const es_phys_t *ph)
{
    return ph->owner != ES_OWN_IMPORT && !ph->uncounted;
}

static void es_fp_add(const es_phys_t *ph)
{
    if (es_counts(ph))
        __atomic_add_fetch(&es_footprint, ph->size, __ATOMIC_RELAXED);
}

void es_memreg_footprint_sub(const es_phys_t *ph)
{
    if (es_counts(ph))
        __atomic_sub_fetch(&es_footprint, ph->size, __ATOMIC_RELAXED);
}

void es_memreg_lock(void) { pthread_mutex_lock(&es_mr_mu); }
void es_memreg_unlock(void) { pthread_mutex_unlock(&es_mr_mu); }

static int es_vdev_ok(int v) { return v >= 0 && v < ES_MEMREG_MAX_VDEV; }

/* ---- configuration ---------------------------------------------------------- */

int es_memreg_init(void)
{
    int rc = 0;
    es_memreg_lock();
    if (es_gran)
        goto out;
    int n = 0;
    if (es_drv.cuDeviceGetCount(&n) != CUDA_SUCCESS || n <= 0) {
        rc = -ENODEV;
        goto out;
    }
    size_t g = 0;
    for (int d = 0; d < n; d++) {
        CUmemAllocationProp p = { 0 };
        p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.location.id = d;
        size_t gd = 0;
        if (es_drv.cuMemGetAllocationGranularity(&gd, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
                CUDA_SUCCESS || gd == 0 || (gd & (gd - 1))) {
            rc = -EIO;
            goto out;
        }
        if (gd > g)
            g = gd;
    }
    es_ndev = n;
    for (int v = 0; v < ES_MEMREG_MAX_VDEV; v++)
        es_dev_of[v] = ES_DEV_UNSET;
    es_gran = g;
out:
    es_memreg_unlock();
    return rc;
}

size_t es_memreg_granularity(void) { return es_gran; }

static int (*es_resolve)(int vdev);

void es_memreg_set_resolver(int (*resolve)(int vdev))
{
    es_memreg_lock();
    es_resolve = resolve;
    es_memreg_unlock();
}

/* Lock held. */
static int es_dev_get(int vdev)
{
    int d = es_dev_of[vdev];
    if (d != ES_DEV_UNSET)
        return d;
    if (es_resolve)
        d = es_resolve(vdev);
    else
        d = vdev;
    return d >= 0 && d < es_ndev ? d : -1;
}

int es_memreg_set_device(int vdev, int dev)
{
    if (!es_vdev_ok(vdev) || dev < -1 || (es_ndev && dev >= es_ndev))
        return -EINVAL;
    es_memreg_lock();
    es_dev_of[vdev] = dev;
    es_memreg_unlock();
    return 0;
}

int es_memreg_device(int vdev)
{
    if (!es_vdev_ok(vdev))
        return -1;
    es_memreg_lock();
    int d = es_dev_get(vdev);
    es_memreg_unlock();
    return d;
}

/* ---- physical objects ----------------------------------------------------------- */

static void es_phys_link(es_phys_t *ph)
{
    int v = ph->vdev;
    ph->id = es_next_id++;
    ph->prev = es_tail[v];
    ph->next = NULL;
    if (es_tail[v])
        es_tail[v]->next = ph;
    else
        es_head[v] = ph;
    es_tail[v] = ph;
}

static void es_phys_unlink(es_phys_t *ph)
{
    int v = ph->vdev;
    if (ph->prev)
        ph->prev->next = ph->next;
    else
        es_head[v] = ph->next;
    if (ph->next)
        ph->next->prev = ph->prev;
    else
        es_tail[v] = ph->prev;
    ph->next = ph->prev = NULL;
}

es_phys_t *es_memreg_first(int vdev)
{
    return es_vdev_ok(vdev) ? es_head[vdev] : NULL;
}

static int es_add_map(es_phys_t *ph, uintptr_t va, size_t size, size_t off)
{
    if (ph->nmaps == ph->cmaps) {
        int n = ph->cmaps ? ph->cmaps * 2 : 2;
        es_map_t *m = realloc(ph->maps, (size_t)n * sizeof(*m));
        if (!m)
            return -ENOMEM;
        ph->maps = m;
        ph->cmaps = n;
    }
    es_map_t *m = &ph->maps[ph->nmaps++];
    memset(m, 0, sizeof(*m));
    m->va = va;
    m->size = size;
    m->off = off;
    return 0;
}

static void es_add_desc(CUmemAccessDesc *d, int *n, int dev, CUmemAccess_flags f)
{
    for (int i = 0; i < *n; i++)
        if (d[i].location.id == dev) {
            if (f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
                d[i].flags = f;
            return;
        }
    d[*n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d[*n].location.id = dev;
    d[*n].flags = f;
    (*n)++;
}

CUresult es_memreg_apply_access(es_phys_t *ph, const es_map_t *m)
{
    CUmemAccessDesc d[ES_MEMREG_MAX_VDEV];
    int n = 0;
    if (ph->owner == ES_OWN_APP || ph->owner == ES_OWN_IMPORT) {
        for (int v = 0; v < ES_MEMREG_MAX_VDEV; v++)
            if (m->access[v] != CU_MEM_ACCESS_FLAGS_PROT_NONE && es_dev_get(v) >= 0)
                es_add_desc(d, &n, es_dev_get(v), (CUmemAccess_flags)m->access[v]);
    } else {
        if (es_dev_get(ph->vdev) >= 0)
            es_add_desc(d, &n, es_dev_get(ph->vdev), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
        for (int v = 0; v < ES_MEMREG_MAX_VDEV; v++)
            if ((es_peers[ph->vdev] >> v & 1) && es_dev_get(v) >= 0)
                es_add_desc(d, &n, es_dev_get(v), CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    }
    if (n == 0)
        return CUDA_SUCCESS;
    return es_drv.cuMemSetAccess((CUdeviceptr)m->va, m->size, d, (size_t)n);
}

CUresult es_phys_create_real(es_phys_t *ph, int dev)
{
    if (ph->real)
        return CUDA_SUCCESS;
    if (ph->owner == ES_OWN_IMPORT) {
        if (ph->fd < 0)
            return CUDA_ERROR_NOT_SUPPORTED;
        return es_drv.cuMemImportFromShareableHandle(&ph->real, (void *)(intptr_t)ph->fd,
                                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    }
    CUmemAllocationProp p = ph->prop;
    if (ph->owner != ES_OWN_APP) {
        memset(&p, 0, sizeof(p));
        p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    }
    p.location.id = dev;
    CUresult r = es_drv.cuMemCreate(&ph->real, ph->size, &p, 0);
    if (r == CUDA_SUCCESS)
        es_fp_add(ph);
    return r;
}

CUresult es_phys_map_real(es_phys_t *ph)
{
    for (int i = 0; i < ph->nmaps; i++) {
        es_map_t *m = &ph->maps[i];
        CUresult r = es_drv.cuMemMap((CUdeviceptr)m->va, m->size, m->off, ph->real, 0);
        if (r == CUDA_SUCCESS) {
            r = es_memreg_apply_access(ph, m);
            if (r != CUDA_SUCCESS)
                es_drv.cuMemUnmap((CUdeviceptr)m->va, m->size);
        }
        if (r != CUDA_SUCCESS) {
            for (int j = 0; j < i; j++)
                es_drv.cuMemUnmap((CUdeviceptr)ph->maps[j].va, ph->maps[j].size);
            return r;
        }
    }
    return CUDA_SUCCESS;
}

CUresult es_phys_unmap_real(es_phys_t *ph)
{
    CUresult res = CUDA_SUCCESS;
    for (int i = 0; i < ph->nmaps; i++) {
        CUresult r = es_drv.cuMemUnmap((CUdeviceptr)ph->maps[i].va, ph->maps[i].size);
        if (r != CUDA_SUCCESS && res == CUDA_SUCCESS)
            res = r;
    }
    return res;
}

void es_phys_release_real(es_phys_t *ph)
{
    if (ph->real) {
        es_drv.cuMemRelease(ph->real);
        es_memreg_footprint_sub(ph);
    }
    ph->real = 0;
}

void es_phys_release_kept(es_phys_t *ph)
{
    if (ph->kept) {
        es_drv.cuMemRelease(ph->kept);
        es_memreg_footprint_sub(ph);
    }
    ph->kept = 0;
    ph->kept_dev = -1;
    free(ph->stale);
    ph->stale = NULL;
}

void es_phys_park_free(es_phys_t *ph)
{
    if (ph->park && ph->park_h) {
        es_drv.cuMemUnmap((CUdeviceptr)(uintptr_t)ph->park, ph->size);
        es_drv.cuMemAddressFree((CUdeviceptr)(uintptr_t)ph->park, ph->size);
        es_drv.cuMemRelease((CUmemGenericAllocationHandle)ph->park_h);
    } else if (ph->park) {
        if (ph->park_registered)
            es_drv.cuMemHostUnregister(ph->park);
        munmap(ph->park, ph->size);
    }
    if (ph->park_fd >= 0)
        close(ph->park_fd);
    ph->park = NULL;
    ph->park_fd = -1;
    ph->park_h = 0;
    ph->park_devs = 0;
    ph->park_registered = 0;
    ph->park_valid = 0;
    ph->sums_valid = 0;
}

/* Frees the object: mappings, real memory, reservation, park. Lock held. */
static void es_phys_destroy(es_phys_t *ph)
{
    if (ph->real)
        es_phys_unmap_real(ph);
    es_phys_release_real(ph);
    es_phys_release_kept(ph);
    if (ph->resv)
        es_drv.cuMemAddressFree((CUdeviceptr)ph->resv, ph->size);
    es_phys_park_free(ph);
    if (ph->fd >= 0)
        close(ph->fd);
    if (ph->owner == ES_OWN_APP || ph->owner == ES_OWN_IMPORT)
        es_hmap_del(&es_standins, (uint64_t)(uintptr_t)ph);
    es_phys_unlink(ph);
    ph->magic = 0;
    free(ph->maps);
    free(ph->bits);
    free(ph->sums);
    free(ph);
}

/* A shim-owned object of size bytes on vdev's device: reservation, memory,
 * mapping, access. Lock held. */
static CUresult es_phys_new_shim(int vdev, int owner, size_t size, es_phys_t **out)
{
    int dev = es_dev_get(vdev);
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    if (dev < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    es_phys_t *ph = calloc(1, sizeof(*ph));
    if (!ph)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ph->magic = ES_PHYS_MAGIC;
    ph->owner = owner;
    ph->vdev = vdev;
    ph->size = size;
    ph->fd = -1;
    ph->park_fd = -1;
    if (owner == ES_OWN_SLAB) {
        size_t units = size / ES_MEMREG_UNIT;
        ph->bits = calloc((units + 63) / 64, sizeof(uint64_t));
        if (!ph->bits)
            goto fail;
    }
    CUdeviceptr va = 0;
    r = es_drv.cuMemAddressReserve(&va, size, es_gran, 0, 0);
    if (r != CUDA_SUCCESS)
        goto fail;
    ph->resv = (uintptr_t)va;
    if (es_add_map(ph, ph->resv, size, 0) != 0) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail;
    }
    r = es_phys_create_real(ph, dev);
    if (r != CUDA_SUCCESS)
        goto fail;
    r = es_phys_map_real(ph);
    if (r != CUDA_SUCCESS)
        goto fail;
    es_phys_link(ph);
    *out = ph;
    return CUDA_SUCCESS;
fail:
    es_phys_release_real(ph);
    if (ph->resv)
        es_drv.cuMemAddressFree((CUdeviceptr)ph->resv, size);
    free(ph->maps);
    free(ph->bits);
    free(ph);
    return r;
}

/* ---- the cuMemAlloc family ------------------------------------------------------ */

static size_t es_alloc_pos(uintptr_t va) /* first index with va > given */
{
    size_t lo = 0, hi = es_nallocs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (es_allocs[mid].va <= va)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static es_alloc_t *es_alloc_at(uintptr_t p)
{
    size_t i = es_alloc_pos(p);
    if (i == 0)
        return NULL;
    es_alloc_t *a = &es_allocs[i - 1];
    return p - a->va < (a->size ? a->size : 1) ? a : NULL;
}

/* ---- the span index (es_memreg_range_bad) ----------------------------------------
 * A copy of the allocations' ranges in es_allocs' order, read without the
 * lock under a sequence counter (odd while a writer changes it). Entries
 * are written with atomic stores so readers never see torn values; an array
 * outgrown is kept (never freed: a reader may still be in it; the arrays
 * double, so all of them together are less than twice the last). */
size_t es_memreg_nspans;
unsigned es_memreg_span_seq;
es_span_t *es_memreg_spans;
#define es_span_seq es_memreg_span_seq
#define es_spans es_memreg_spans
static size_t es_cspans;

static void es_span_begin(void)
{
    __atomic_store_n(&es_span_seq, es_span_seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static void es_span_end(void)
{
    __atomic_store_n(&es_span_seq, es_span_seq + 1, __ATOMIC_RELEASE);
}

static void es_span_put(size_t i, uint64_t lo, uint64_t hi)
{
    __atomic_store_n(&es_spans[i].lo, lo, __ATOMIC_RELAXED);
    __atomic_store_n(&es_spans[i].hi, hi, __ATOMIC_RELAXED);
}

/* Lock held: es_spans mirrors es_allocs (after an insert at i, or a removal
 * at i). Returns -ENOMEM when the index cannot grow (the allocation then
 * fails). */
static int es_span_reserve(size_t n)
{
    if (n <= es_cspans)
        return 0;
    size_t c = es_cspans ? es_cspans * 2 : 64;
    while (c < n)
        c *= 2;
    es_span_t *x = calloc(c, sizeof(*x));
    if (!x)
        return -ENOMEM;
    for (size_t i = 0; i < es_memreg_nspans; i++)
        x[i] = es_spans[i];
    __atomic_store_n(&es_spans, x, __ATOMIC_RELEASE); /* the old one stays */
    es_cspans = c;
    return 0;
}

static void es_span_sync(size_t from)
{
    es_span_begin();
    for (size_t i = from; i < es_nallocs; i++)
        es_span_put(i, es_allocs[i].va, es_allocs[i].va + es_allocs[i].size);
    __atomic_store_n(&es_memreg_nspans, es_nallocs, __ATOMIC_RELAXED);
    es_span_end();
}

static int es_alloc_insert(const es_alloc_t *a)
{
    if (es_span_reserve(es_nallocs + 1) != 0)
        return -ENOMEM;
    if (es_nallocs == es_callocs) {
        size_t n = es_callocs ? es_callocs * 2 : 64;
        es_alloc_t *x = realloc(es_allocs, n * sizeof(*x));
        if (!x)
            return -ENOMEM;
        es_allocs = x;
        es_callocs = n;
    }
    size_t i = es_alloc_pos(a->va);
    memmove(&es_allocs[i + 1], &es_allocs[i], (es_nallocs - i) * sizeof(*es_allocs));
    es_allocs[i] = *a;
    es_nallocs++;
    es_span_sync(i);
    return 0;
}

static int es_bit(const uint64_t *b, size_t i) { return (int)(b[i / 64] >> (i % 64) & 1); }

static void es_bits_set(uint64_t *b, size_t first, size_t n, int on)
{
    for (size_t i = first; i < first + n; i++) {
        if (on)
            b[i / 64] |= 1ULL << (i % 64);
        else
            b[i / 64] &= ~(1ULL << (i % 64));
    }
}

/* First run of n free units in the slab, or SIZE_MAX. */
static size_t es_slab_find(const es_phys_t *ph, size_t n)
{
    size_t units = ph->size / ES_MEMREG_UNIT, run = 0;
    if (units - ph->used_units < n)
        return SIZE_MAX;
    for (size_t i = 0; i < units; i++) {
        if (i % 64 == 0 && ph->bits[i / 64] == UINT64_MAX) {
            run = 0;
            i += 63;
            continue;
        }
        run = es_bit(ph->bits, i) ? 0 : run + 1;
        if (run == n)
            return i + 1 - n;
    }
    return SIZE_MAX;
}

CUresult es_mem_alloc(int vdev, size_t size, int kind, CUdeviceptr *out)
{
    CUresult r = CUDA_SUCCESS;
    if (!out || size == 0 || !es_vdev_ok(vdev))
        return CUDA_ERROR_INVALID_VALUE;
    if (!es_gran)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (size > SIZE_MAX - es_gran)
        return CUDA_ERROR_OUT_OF_MEMORY;
    es_memreg_lock();
    es_alloc_t a = { 0 };
    a.size = size;
    a.kind = kind;
    if (size <= es_gran / 2) {
        size_t n = ES_ROUND_UP(size, ES_MEMREG_UNIT) / ES_MEMREG_UNIT, at = SIZE_MAX;
        es_phys_t *ph;
        for (ph = es_head[vdev]; ph; ph = ph->next)
            if (ph->owner == ES_OWN_SLAB && (at = es_slab_find(ph, n)) != SIZE_MAX)
                break;
        if (!ph) {
            r = es_phys_new_shim(vdev, ES_OWN_SLAB, es_gran, &ph);
            if (r != CUDA_SUCCESS)
                goto out;
            at = 0;
        }
        a.ph = ph;
        a.unit = at;
        a.nunits = n;
        a.va = ph->resv + at * ES_MEMREG_UNIT;
        if (es_alloc_insert(&a) != 0) {
            if (ph->used_units == 0)
                es_phys_destroy(ph);
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        es_bits_set(ph->bits, at, n, 1);
        ph->used_units += n;
    } else {
        es_phys_t *ph;
        r = es_phys_new_shim(vdev, ES_OWN_ALLOC, ES_ROUND_UP(size, es_gran), &ph);
        if (r != CUDA_SUCCESS)
            goto out;
        a.ph = ph;
        a.va = ph->resv;
        if (es_alloc_insert(&a) != 0) {
            es_phys_destroy(ph);
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
    }
    *out = (CUdeviceptr)a.va;
out:
    es_memreg_unlock();
    return r;
}

/* Lock held. */
static CUresult es_mem_free_locked(CUdeviceptr p)
{
    es_alloc_t *a = es_alloc_at((uintptr_t)p);
    if (!p || !a || a->va != (uintptr_t)p)
        return CUDA_ERROR_INVALID_VALUE;
    es_alloc_t copy = *a;
    size_t i = (size_t)(a - es_allocs);
    memmove(&es_allocs[i], &es_allocs[i + 1], (es_nallocs - i - 1) * sizeof(*es_allocs));
    es_nallocs--;
    es_span_sync(i);
    es_phys_t *ph = copy.ph;
    if (ph->owner == ES_OWN_SLAB) {
        es_bits_set(ph->bits, copy.unit, copy.nunits, 0);
        ph->used_units -= copy.nunits;
        if (ph->used_units == 0)
            es_phys_destroy(ph);
    } else {
        es_phys_destroy(ph);
    }
    return CUDA_SUCCESS;
}

CUresult es_mem_free(CUdeviceptr p)
{
    es_memreg_lock();
    CUresult r = es_mem_free_locked(p);
    es_memreg_unlock();
    return r;
}

CUresult es_mem_free_async(CUdeviceptr p, CUstream stream)
{
    CUresult r;
    CUevent ev = NULL;
    es_memreg_lock();
    es_alloc_t *a = es_alloc_at((uintptr_t)p);
    if (!p || !a || a->va != (uintptr_t)p) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    for (size_t i = 0; i < es_npend; i++)
        if (es_pend[i].p == p) {
            r = CUDA_ERROR_INVALID_VALUE; /* freed twice */
            goto out;
        }
    if (es_npend == es_cpend) {
        size_t n = es_cpend ? es_cpend * 2 : 16;
        es_pending_free_t *x = realloc(es_pend, n * sizeof(*x));
        if (!x) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        es_pend = x;
        es_cpend = n;
    }
    r = es_drv.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS)
        r = es_drv.cuEventRecord(ev, stream);
    if (r != CUDA_SUCCESS) {
        if (ev)
            es_drv.cuEventDestroy_v2(ev);
        goto out;
    }
    es_pend[es_npend++] = (es_pending_free_t){ p, ev };
out:
    es_memreg_unlock();
    return r;
}

int es_mem_poll_frees(int wait)
{
    es_memreg_lock();
    for (size_t i = 0; i < es_npend;) {
        CUresult q = es_drv.cuEventQuery(es_pend[i].ev);
        if (q == CUDA_ERROR_NOT_READY && wait) {
            /* Wait without the lock: copy the entry out. */
            CUevent ev = es_pend[i].ev;
            es_memreg_unlock();
            q = es_drv.cuEventSynchronize(ev);
            es_memreg_lock();
            i = 0; /* the list may have changed */
            continue;
        }
        if (q == CUDA_ERROR_NOT_READY) {
            i++;
            continue;
        }
        /* Done (or the event failed: the work is over either way). */
        es_drv.cuEventDestroy_v2(es_pend[i].ev);
        es_mem_free_locked(es_pend[i].p);
        es_pend[i] = es_pend[--es_npend];
    }
    int left = (int)es_npend;
    es_memreg_unlock();
    return left;
}

int es_mem_find(CUdeviceptr p, CUdeviceptr *base, size_t *size, int *vdev, int *kind)
{
    int rc = -ENOENT;
    es_memreg_lock();
    es_alloc_t *a = es_alloc_at((uintptr_t)p);
    if (a) {
        if (base)
            *base = (CUdeviceptr)a->va;
        if (size)
            *size = a->size;
        if (vdev)
            *vdev = a->ph->vdev;
        if (kind)
            *kind = a->kind;
        rc = 0;
    }
    es_memreg_unlock();
    return rc;
}

/* ---- peers ------------------------------------------------------------------------ */

static CUresult es_peer_apply(int owner, int accessor, int on)
{
    CUresult res = CUDA_SUCCESS;
    int adev = es_dev_get(accessor), odev = es_dev_get(owner);
    if (adev < 0 || odev < 0 || adev == odev)
        return CUDA_SUCCESS;
    for (es_phys_t *ph = es_head[owner]; ph; ph = ph->next) {
        if (!ph->real || (ph->owner != ES_OWN_ALLOC && ph->owner != ES_OWN_SLAB))
            continue;
        CUmemAccessDesc d = { { CU_MEM_LOCATION_TYPE_DEVICE, adev },
                              on ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                 : CU_MEM_ACCESS_FLAGS_PROT_NONE };
        CUresult r = es_drv.cuMemSetAccess((CUdeviceptr)ph->resv, ph->size, &d, 1);
        if (r != CUDA_SUCCESS && res == CUDA_SUCCESS)
            res = r;
    }
    return res;
}

CUresult es_memreg_peer_enable(int owner, int accessor)
{
    if (!es_vdev_ok(owner) || !es_vdev_ok(accessor) || owner == accessor)
        return CUDA_ERROR_INVALID_VALUE;
    es_memreg_lock();
    es_peers[owner] |= 1ULL << accessor;
    CUresult r = es_peer_apply(owner, accessor, 1);
    es_memreg_unlock();
    return r;
}

CUresult es_memreg_peer_disable(int owner, int accessor)
{
    if (!es_vdev_ok(owner) || !es_vdev_ok(accessor) || owner == accessor)
        return CUDA_ERROR_INVALID_VALUE;
    es_memreg_lock();
    es_peers[owner] &= ~(1ULL << accessor);
    CUresult r = es_peer_apply(owner, accessor, 0);
    es_memreg_unlock();
    return r;
}

/* ---- the application's VMM ------------------------------------------------------------ */

static es_phys_t *es_standin(CUmemGenericAllocationHandle h) /* lock held */
{
    es_phys_t *ph = es_hmap_get(&es_standins, (uint64_t)h);
    return ph && ph->magic == ES_PHYS_MAGIC && ph->app_refs > 0 ? ph : NULL;
}

es_phys_t *es_vmm_lookup(CUmemGenericAllocationHandle h)
{
    es_memreg_lock();
    es_phys_t *ph = es_standin(h);
    es_memreg_unlock();
    return ph;
}

/* Whether [va, va + size) meets memory the registry backs for cuMemAlloc:
 * the application may not unmap it or change its access (the driver refuses
 * both on cuMemAlloc memory). Lock held. */
static int es_meets_shim_memory(uintptr_t va, size_t size)
{
    for (int v = 0; v < ES_MEMREG_MAX_VDEV; v++)
        for (es_phys_t *ph = es_head[v]; ph; ph = ph->next)
            if ((ph->owner == ES_OWN_ALLOC || ph->owner == ES_OWN_SLAB) &&
                va < ph->resv + ph->size && ph->resv < va + size)
                return 1;
    return 0;
}

int es_memreg_owns_range(CUdeviceptr va, size_t size)
{
    es_memreg_lock();
    int r = es_meets_shim_memory((uintptr_t)va, size ? size : 1);
    es_memreg_unlock();
    return r;
}

CUresult es_vmm_create(CUmemGenericAllocationHandle *out, size_t size,
                       const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult r;
    if (!out || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        !es_vdev_ok(prop->location.id))
        return CUDA_ERROR_INVALID_VALUE;
    es_phys_t *ph = calloc(1, sizeof(*ph));
    if (!ph)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ph->magic = ES_PHYS_MAGIC;
    ph->owner = ES_OWN_APP;
    ph->vdev = prop->location.id;
    ph->size = size;
    ph->prop = *prop;
    ph->fd = -1;
    ph->park_fd = -1;
    ph->app_refs = 1;
    ph->uncounted = es_uncounted > 0;
    es_memreg_lock();
    int dev = es_dev_get(ph->vdev);
    if (dev < 0) {
        r = CUDA_ERROR_INVALID_DEVICE;
        goto fail;
    }
    CUmemAllocationProp p = *prop;
    p.location.id = dev;
    r = es_drv.cuMemCreate(&ph->real, size, &p, flags);
    if (r != CUDA_SUCCESS)
        goto fail;
    if (es_hmap_put(&es_standins, (uint64_t)(uintptr_t)ph, ph) != 0) {
        es_drv.cuMemRelease(ph->real);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail;
    }
    es_fp_add(ph);
    es_phys_link(ph);
    es_memreg_unlock();
    *out = (CUmemGenericAllocationHandle)(uintptr_t)ph;
    return CUDA_SUCCESS;
fail:
    es_memreg_unlock();
    free(ph);
    return r;
}

CUresult es_vmm_release(CUmemGenericAllocationHandle h)
{
    CUresult r = CUDA_SUCCESS;
    es_memreg_lock();
    es_phys_t *ph = es_standin(h);
    if (!ph) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (--ph->app_refs == 0 && ph->nmaps == 0)
        es_phys_destroy(ph);
out:
    es_memreg_unlock();
    return r;
}

CUresult es_vmm_map(CUdeviceptr va, size_t size, size_t off, CUmemGenericAllocationHandle h,
                    unsigned long long flags)
{
    CUresult r;
    es_memreg_lock();
    es_phys_t *ph = es_standin(h);
    if (!ph) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    r = es_drv.cuMemMap(va, size, off, ph->real, flags);
    if (r == CUDA_SUCCESS && es_add_map(ph, (uintptr_t)va, size, off) != 0) {
        es_drv.cuMemUnmap(va, size);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
out:
    es_memreg_unlock();
    return r;
}

CUresult es_vmm_unmap(CUdeviceptr va, size_t size)
{
    CUresult r;
    uintptr_t lo = (uintptr_t)va, hi = lo + size;
    es_memreg_lock();
    if (size == 0 || es_meets_shim_memory(lo, size)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    r = es_drv.cuMemUnmap(va, size);
    if (r != CUDA_SUCCESS)
        goto out;
    for (int v = 0; v < ES_MEMREG_MAX_VDEV; v++) {
        es_phys_t *next;
        for (es_phys_t *ph = es_head[v]; ph; ph = next) {
            next = ph->next;
            if (ph->owner != ES_OWN_APP && ph->owner != ES_OWN_IMPORT)
                continue;
            for (int i = 0; i < ph->nmaps;) {
                if (ph->maps[i].va >= lo && ph->maps[i].va + ph->maps[i].size <= hi)
                    ph->maps[i] = ph->maps[--ph->nmaps];
                else
                    i++;
            }
            if (ph->nmaps == 0 && ph->app_refs == 0)
                es_phys_destroy(ph);
        }
    }
out:
    es_memreg_unlock();
    return r;
}

CUresult es_vmm_set_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc,
                           size_t count)
{
    CUresult r;
    CUmemAccessDesc d[ES_MEMREG_MAX_VDEV];
    int n = 0;
    uintptr_t lo = (uintptr_t)va, hi = lo + size;
    if (!desc || count == 0 || count > ES_MEMREG_MAX_VDEV)
        return CUDA_ERROR_INVALID_VALUE;
    es_memreg_lock();
    if (size == 0 || es_meets_shim_memory(lo, size)) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    for (size_t k = 0; k < count; k++) {
        int v = desc[k].location.id;
        if (desc[k].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !es_vdev_ok(v) ||
            es_dev_get(v) < 0) {
            r = CUDA_ERROR_INVALID_DEVICE;
            goto out;
        }
        /* Two vdevs on one device: that device gets the wider right. */
        int dev = es_dev_get(v), found = 0;
        for (int i = 0; i < n; i++)
            if (d[i].location.id == dev) {
                found = 1;
                if (desc[k].flags > d[i].flags)
                    d[i].flags = desc[k].flags;
            }
        if (!found) {
            d[n] = desc[k];
            d[n].location.id = dev;
            n++;
        }
    }
    r = es_drv.cuMemSetAccess(va, size, d, (size_t)n);
    if (r != CUDA_SUCCESS)
        goto out;
    for (int v = 0; v < ES_MEMREG_MAX_VDEV; v++)
        for (es_phys_t *ph = es_head[v]; ph; ph = ph->next) {
            if (ph->owner != ES_OWN_APP && ph->owner != ES_OWN_IMPORT)
                continue;
            for (int i = 0; i < ph->nmaps; i++) {
                es_map_t *m = &ph->maps[i];
                if (m->va < hi && lo < m->va + m->size)
                    for (size_t k = 0; k < count; k++)
                        m->access[desc[k].location.id] = (unsigned char)desc[k].flags;
            }
        }
out:
    es_memreg_unlock();
    return r;
}

CUresult es_vmm_retain(CUmemGenericAllocationHandle *out, void *addr)
{
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    uintptr_t a = (uintptr_t)addr;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    es_memreg_lock();
    for (int v = 0; v < ES_MEMREG_MAX_VDEV; v++)
        for (es_phys_t *ph = es_head[v]; ph; ph = ph->next) {
            if (ph->owner != ES_OWN_APP && ph->owner != ES_OWN_IMPORT)
                continue;
            for (int i = 0; i < ph->nmaps; i++)
                if (a - ph->maps[i].va < ph->maps[i].size) {
                    ph->app_refs++;
                    *out = (CUmemGenericAllocationHandle)(uintptr_t)ph;
                    r = CUDA_SUCCESS;
                    goto out;
                }
        }
out:
    es_memreg_unlock();
    return r;
}

CUresult es_vmm_props(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h)
{
    CUresult r = CUDA_SUCCESS;
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    es_memreg_lock();
    es_phys_t *ph = es_standin(h);
    if (!ph)
        r = CUDA_ERROR_INVALID_VALUE;
    else
        *prop = ph->prop;
    es_memreg_unlock();
    return r;
}

CUresult es_vmm_export(void *shareable, CUmemGenericAllocationHandle h,
                       CUmemAllocationHandleType type, unsigned long long flags)
{
    CUresult r;
    es_memreg_lock();
    es_phys_t *ph = es_standin(h);
    r = ph ? es_drv.cuMemExportToShareableHandle(shareable, ph->real, type, flags)
           : CUDA_ERROR_INVALID_VALUE;
    es_memreg_unlock();
    return r;
}

CUresult es_vmm_import(CUmemGenericAllocationHandle *out, void *os_handle,
                       CUmemAllocationHandleType type, int vdev)
{
    CUresult r;
    if (!out || !es_vdev_ok(vdev))
        return CUDA_ERROR_INVALID_VALUE;
    es_phys_t *ph = calloc(1, sizeof(*ph));
    if (!ph)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ph->magic = ES_PHYS_MAGIC;
    ph->owner = ES_OWN_IMPORT;
    ph->vdev = vdev;
    ph->fd = -1;
    ph->park_fd = -1;
    ph->app_refs = 1;
    es_memreg_lock();
    r = es_drv.cuMemImportFromShareableHandle(&ph->real, os_handle, type);
    if (r != CUDA_SUCCESS)
        goto fail;
    /* Keep the descriptor: a swap-in imports it again. */
    if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        ph->fd = fcntl((int)(intptr_t)os_handle, F_DUPFD_CLOEXEC, 0);
    es_drv.cuMemGetAllocationPropertiesFromHandle(&ph->prop, ph->real);
    ph->prop.location.id = vdev;
    if (es_hmap_put(&es_standins, (uint64_t)(uintptr_t)ph, ph) != 0) {
        es_drv.cuMemRelease(ph->real);
        if (ph->fd >= 0)
            close(ph->fd);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail;
    }
    es_phys_link(ph);
    es_memreg_unlock();
    *out = (CUmemGenericAllocationHandle)(uintptr_t)ph;
    return CUDA_SUCCESS;
fail:
    es_memreg_unlock();
    free(ph);
    return r;
}

/* ---- pinned host memory ----------------------------------------------------------------- */

static es_host_t *es_host_at(uintptr_t p) /* lock held */
{
    for (size_t i = 0; i < es_nhosts; i++)
        if (p - (uintptr_t)es_hosts[i].p < es_hosts[i].span)
            return &es_hosts[i];
    return NULL;
}

static unsigned es_host_reg_flags(const es_host_t *h)
{
    if (h->app)
        return h->flags | CU_MEMHOSTREGISTER_PORTABLE;
    return CU_MEMHOSTREGISTER_PORTABLE |
           (h->flags & CU_MEMHOSTALLOC_DEVICEMAP ? CU_MEMHOSTREGISTER_DEVICEMAP : 0);
}

/* Lock held: room for one more. */
static int es_host_room(void)
{
    if (es_nhosts < es_chosts)
        return 0;
    size_t n = es_chosts ? es_chosts * 2 : 16;
    es_host_t *x = realloc(es_hosts, n * sizeof(*x));
    if (!x)
        return -ENOMEM;
    es_hosts = x;
    es_chosts = n;
    return 0;
}

CUresult es_host_register(void *p, size_t size, unsigned flags, int defer)
{
    CUresult r;
    es_memreg_lock();
    if (es_host_room() != 0) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    es_host_t h = { p, size, flags, 0, 1 };
    r = defer ? CUDA_SUCCESS : es_drv.cuMemHostRegister_v2(p, size, es_host_reg_flags(&h));
    if (r == CUDA_SUCCESS) {
        h.registered = !defer;
        es_hosts[es_nhosts++] = h;
    }
out:
    es_memreg_unlock();
    return r;
}

CUresult es_host_unregister(void *p)
{
    CUresult r;
    es_memreg_lock();
    for (size_t i = 0; i < es_nhosts; i++)
        if (es_hosts[i].app && es_hosts[i].p == p) {
            es_host_t h = es_hosts[i];
            es_hosts[i] = es_hosts[--es_nhosts];
            r = h.registered ? es_drv.cuMemHostUnregister(p) : CUDA_SUCCESS;
            goto out;
        }
    r = es_drv.cuMemHostUnregister(p);
out:
    es_memreg_unlock();
    return r;
}

CUresult es_host_alloc(void **out, size_t size, unsigned flags)
{
    CUresult r;
    if (!out || size == 0 ||
        (flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                             CU_MEMHOSTALLOC_WRITECOMBINED)))
        return CUDA_ERROR_INVALID_VALUE;
    if (size > SIZE_MAX - ES_PAGE)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t span = ES_ROUND_UP(size, ES_PAGE);
    void *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    es_memreg_lock();
    if (es_host_room() != 0) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto fail;
    }
    es_host_t h = { p, span, flags, 1, 0 };
    r = es_drv.cuMemHostRegister_v2(p, span, es_host_reg_flags(&h));
    if (r != CUDA_SUCCESS)
        goto fail;
    es_hosts[es_nhosts++] = h;
    es_memreg_unlock();
    *out = p;
    return CUDA_SUCCESS;
fail:
    es_memreg_unlock();
    munmap(p, span);
    return r;
}

CUresult es_host_free(void *p)
{
    CUresult r = CUDA_SUCCESS;
    es_memreg_lock();
    es_host_t *h = p ? es_host_at((uintptr_t)p) : NULL;
    if (!h || h->p != p || h->app) {
        r = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    es_host_t copy = *h;
    *h = es_hosts[--es_nhosts];
    if (copy.registered)
        es_drv.cuMemHostUnregister(copy.p);
    munmap(copy.p, copy.span);
out:
    es_memreg_unlock();
    return r;
}

int es_host_flags(const void *p, unsigned *flags)
{
    int rc = -ENOENT;
    es_memreg_lock();
    es_host_t *h = es_host_at((uintptr_t)p);
    if (h && !h->app) {
        if (flags)
            *flags = h->flags;
        rc = 0;
    }
    es_memreg_unlock();
    return rc;
}

int es_host_unregister_all(void)
{
    int rc = 0;
    es_memreg_lock();
    for (size_t i = 0; i < es_nhosts; i++) {
        if (!es_hosts[i].registered)
            continue;
        if (es_drv.cuMemHostUnregister(es_hosts[i].p) != CUDA_SUCCESS && !rc)
            rc = -EIO;
        es_hosts[i].registered = 0;
    }
    es_memreg_unlock();
    return rc;
}

int es_host_register_all(void)
{
    int rc = 0;
    es_memreg_lock();
    for (size_t i = 0; i < es_nhosts; i++) {
        if (es_hosts[i].registered)
            continue;
        if (es_drv.cuMemHostRegister_v2(es_hosts[i].p, es_hosts[i].span,
                                        es_host_reg_flags(&es_hosts[i])) == CUDA_SUCCESS)
            es_hosts[i].registered = 1;
        else if (!rc)
            rc = -EIO;
    }
    es_memreg_unlock();
    return rc;
}

/* ---- accounting and reset --------------------------------------------------------------------- */

size_t es_memreg_resident_bytes(int vdev)
{
    size_t n = 0;
    es_memreg_lock();
    for (int v = 0; v < ES_MEMREG_MAX_VDEV; v++) {
        if (vdev >= 0 && v != vdev)
            continue;
        for (es_phys_t *ph = es_head[v]; ph; ph = ph->next)
            if (ph->real && ph->owner != ES_OWN_IMPORT)
                n += ph->size;
    }
    es_memreg_unlock();
    return n;
}

void es_memreg_reset(void)
{
    es_memreg_lock();
    for (size_t i = 0; i < es_npend; i++)
        es_drv.cuEventDestroy_v2(es_pend[i].ev);
    es_npend = 0;
    es_nallocs = 0;
    es_span_sync(0);
    for (int v = 0; v < ES_MEMREG_MAX_VDEV; v++) {
        while (es_head[v])
            es_phys_destroy(es_head[v]);
        es_peers[v] = 0;
        es_dev_of[v] = ES_DEV_UNSET;
    }
    while (es_nhosts) {
        es_host_t h = es_hosts[--es_nhosts];
        if (h.registered)
            es_drv.cuMemHostUnregister(h.p);
        if (!h.app)
            munmap(h.p, h.span);
    }
    es_memreg_unlock();
}
