/* The swap engine (see swap.h): host copies ("parks") of physical objects,
 * copies cut in pieces over several streams, chunk checksums on the device
 * (kernels/swapsum.cu), all-or-nothing creation of the new physical memory,
 * and the switch of a mapping from old to new memory for migrations. */
#include "move/swap.h"
#include "move/drv.h"
#include "move/memreg.h"
#include "kernels/swapsum.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define ES_MAX_STREAMS 16

extern const unsigned char es_swapsum_fatbin[];

static es_swap_opts_t es_opts = { .streams = 2, .sums = 1, .piece = 8u << 20 };

int es_swap_set_opts(const es_swap_opts_t *o)
{
    if (!o || o->streams < 1 || o->streams > ES_MAX_STREAMS || (o->sums != 0 && o->sums != 1) ||
        o->piece == 0 || o->piece % ES_SWAPSUM_CHUNK || (o->keep_streams != 0 && o->keep_streams != 1))
        return -EINVAL;
    es_opts = *o;
    return 0;
}

void es_swap_get_opts(es_swap_opts_t *o)
{
    *o = es_opts;
}

static double es_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void es_msg(char *msg, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void es_msg(char *msg, size_t len, const char *fmt, ...)
{
    if (!msg || !len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
}

/* ---- one call's resources ----------------------------------------------------- */

typedef struct es_obj {
    es_phys_t *ph;
    uintptr_t view;        /* where the whole object is visible (old memory) */
    uintptr_t temp;        /* a reservation of ours for view or the new memory, or 0 */
    int temp_mapped;
    CUmemGenericAllocationHandle fresh; /* migration: the new memory */
    uint64_t *sums;        /* this call's hashes (nchunks) */
    unsigned char *dirty;  /* per chunk: to copy */
} es_obj_t;

typedef struct es_run {
    es_obj_t *o;
    size_t n;
    CUstream s[ES_MAX_STREAMS];
    int ns;
    int keep_dev;          /* where s may be kept after the call, or -1 */
    CUmodule mod;
    CUfunction fn;
    uintptr_t sums_va;     /* scratch for the hashes: reservation + memory */
    size_t sums_size;
    CUmemGenericAllocationHandle sums_h;
    int sums_mapped;
    es_swap_stats_t *st;
} es_run_t;

static size_t es_nchunks(const es_phys_t *ph) { return ph->size / ES_SWAPSUM_CHUNK; }

/* The objects of vdev to move (imported ones too when with_imports). */
static int es_run_collect(es_run_t *R, int vdev, int with_imports)
{
    size_t n = 0;
    for (es_phys_t *ph = es_memreg_first(vdev); ph; ph = ph->next)
        if (with_imports || ph->owner != ES_OWN_IMPORT)
            n++;
    R->o = calloc(n ? n : 1, sizeof(*R->o));
    if (!R->o)
        return -ENOMEM;
    for (es_phys_t *ph = es_memreg_first(vdev); ph; ph = ph->next)
        if (with_imports || ph->owner != ES_OWN_IMPORT)
            R->o[R->n++].ph = ph;
    return 0;
}

/* Streams kept between calls (opts.keep_streams): made in the primary
 * context of device dev, retained here (ctx) so that they stay valid. */
static struct {
    pthread_mutex_t mu;
    int dev, n;
    CUcontext ctx;
    CUstream s[ES_MAX_STREAMS];
} es_kept = { .mu = PTHREAD_MUTEX_INITIALIZER, .dev = -1 };

static void es_kept_drop_locked(void)
{
    for (int i = 0; i < es_kept.n; i++)
        es_drv.cuStreamDestroy_v2(es_kept.s[i]);
    if (es_kept.dev >= 0)
        es_drv.cuDevicePrimaryCtxRelease_v2(es_kept.dev);
    es_kept.n = 0;
    es_kept.dev = -1;
    es_kept.ctx = NULL;
}

void es_swap_drop_streams(void)
{
    pthread_mutex_lock(&es_kept.mu);
    es_kept_drop_locked();
    pthread_mutex_unlock(&es_kept.mu);
}

/* The kept streams, when they are dev's and the current context is the
 * one they were made in; 1 when taken. */
static int es_kept_take(es_run_t *R, int dev)
{
    CUcontext cur = NULL;
    int taken = 0;
    pthread_mutex_lock(&es_kept.mu);
    if (es_kept.n == es_opts.streams && es_kept.dev == dev &&
        es_drv.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == es_kept.ctx) {
        memcpy(R->s, es_kept.s, sizeof(CUstream) * (size_t)es_kept.n);
        R->ns = es_kept.n;
        es_kept.n = 0; /* the retain stays: they come back at the call's end */
        taken = 1;
    }
    pthread_mutex_unlock(&es_kept.mu);
    return taken;
}

/* R's streams kept for the next call on dev when made in dev's primary
 * context (current): 1, or 0 (the caller destroys them). */
static int es_kept_put(es_run_t *R, int dev)
{
    CUcontext cur = NULL, prim = NULL;
    int kept = 0;
    if (es_drv.cuCtxGetCurrent(&cur) != CUDA_SUCCESS || !cur)
        return 0;
    pthread_mutex_lock(&es_kept.mu);
    if (es_kept.dev != dev || es_kept.ctx != cur) {
        es_kept_drop_locked();
        if (es_drv.cuDevicePrimaryCtxRetain(&prim, dev) != CUDA_SUCCESS)
            goto out;
        if (prim != cur) { /* not the primary context: not kept */
            es_drv.cuDevicePrimaryCtxRelease_v2(dev);
            goto out;
        }
        es_kept.dev = dev;
        es_kept.ctx = cur;
    }
    for (int i = 0; i < es_kept.n; i++) /* others left over: one set is enough */
        es_drv.cuStreamDestroy_v2(es_kept.s[i]);
    memcpy(es_kept.s, R->s, sizeof(CUstream) * (size_t)R->ns);
    es_kept.n = R->ns;
    kept = 1;
out:
    pthread_mutex_unlock(&es_kept.mu);
    return kept;
}

/* The call's copy streams: the kept ones (dev >= 0, opts.keep_streams), or
 * new ones. dev: where they may be kept afterwards, or -1. */
static int es_run_streams(es_run_t *R, int dev)
{
    R->keep_dev = es_opts.keep_streams ? dev : -1;
    if (R->keep_dev >= 0 && es_kept_take(R, dev))
        return 0;
    for (R->ns = 0; R->ns < es_opts.streams; R->ns++)
        if (es_drv.cuStreamCreate(&R->s[R->ns], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
            break;
    R->st->streams_made = R->ns;
    return R->ns ? 0 : -EIO;
}

static CUresult es_run_sync(es_run_t *R)
{
    CUresult res = CUDA_SUCCESS;
    for (int i = 0; i < R->ns; i++) {
        CUresult r = es_drv.cuStreamSynchronize(R->s[i]);
        if (r != CUDA_SUCCESS && res == CUDA_SUCCESS)
            res = r;
    }
    return res;
}

/* Back to the kept ones (drained: every caller synchronised them), or
 * destroyed. */
static void es_run_free_streams(es_run_t *R)
{
    if (R->ns && R->keep_dev >= 0 && es_kept_put(R, R->keep_dev)) {
        R->ns = 0;
        return;
    }
    for (int i = 0; i < R->ns; i++)
        es_drv.cuStreamDestroy_v2(R->s[i]);
    R->ns = 0;
}

/* A reservation of size bytes with h mapped, read-write for dev and, when
 * peer >= 0, for device peer too (a peer copy is then one transfer between
 * the two devices rather than one staged through host memory). */
static CUresult es_temp_map_peer(uintptr_t *va, size_t size, CUmemGenericAllocationHandle h,
                                 int dev, int peer)
{
    CUdeviceptr p = 0;
    CUresult r = es_drv.cuMemAddressReserve(&p, size, es_memreg_granularity(), 0, 0);
    if (r != CUDA_SUCCESS)
        return r;
    r = es_drv.cuMemMap(p, size, 0, h, 0);
    if (r == CUDA_SUCCESS) {
        CUmemAccessDesc d[2] = { { { CU_MEM_LOCATION_TYPE_DEVICE, dev },
                                   CU_MEM_ACCESS_FLAGS_PROT_READWRITE },
                                 { { CU_MEM_LOCATION_TYPE_DEVICE, peer },
                                   CU_MEM_ACCESS_FLAGS_PROT_READWRITE } };
        r = es_drv.cuMemSetAccess(p, size, d, peer >= 0 && peer != dev ? 2 : 1);
        if (r != CUDA_SUCCESS)
            es_drv.cuMemUnmap(p, size);
    }
    if (r != CUDA_SUCCESS) {
        es_drv.cuMemAddressFree(p, size);
        return r;
    }
    *va = (uintptr_t)p;
    return CUDA_SUCCESS;
}

static CUresult es_temp_map(uintptr_t *va, size_t size, CUmemGenericAllocationHandle h, int dev)
{
    return es_temp_map_peer(va, size, h, dev, -1);
}

static void es_temp_unmap(uintptr_t va, size_t size)
{
    es_drv.cuMemUnmap((CUdeviceptr)va, size);
    es_drv.cuMemAddressFree((CUdeviceptr)va, size);
}

/* Where the whole of o's current memory can be read: a mapping at offset 0
 * of the full size, or a temporary one of ours. */
static CUresult es_obj_view(es_obj_t *o, int dev)
{
    es_phys_t *ph = o->ph;
    for (int i = 0; i < ph->nmaps; i++)
        if (ph->maps[i].off == 0 && ph->maps[i].size == ph->size) {
            o->view = ph->maps[i].va;
            return CUDA_SUCCESS;
        }
    CUresult r = es_temp_map(&o->temp, ph->size, ph->real, dev);
    if (r == CUDA_SUCCESS) {
        o->view = o->temp;
        o->temp_mapped = 1;
    }
    return r;
}

static void es_obj_unview(es_obj_t *o)
{
    if (o->temp_mapped)
        es_temp_unmap(o->temp, o->ph->size);
    o->temp = o->view = 0;
    o->temp_mapped = 0;
}

/* ---- checksums ------------------------------------------------------------------ */

/* Hashes every chunk of every object on the device (the current context);
 * fills o->sums and o->dirty (chunks that differ from the park, or all when
 * the park has no valid hashes). Returns 0, or -1 when checksums are off or
 * unavailable (then every chunk is dirty). */
static int es_run_sums(es_run_t *R, int dev)
{
    size_t total = 0;
    for (size_t i = 0; i < R->n; i++) {
        es_obj_t *o = &R->o[i];
        size_t nc = es_nchunks(o->ph);
        o->dirty = malloc(nc ? nc : 1);
        if (!o->dirty)
            return -ENOMEM;
        memset(o->dirty, 1, nc);
        total += nc;
    }
    if (!es_opts.sums || total == 0)
        return -1;
    size_t g = es_memreg_granularity();
    R->sums_size = (total * sizeof(uint64_t) + g - 1) / g * g;
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    /* Scratch memory, the module: without them, copy everything. */
    if (es_drv.cuMemCreate(&R->sums_h, R->sums_size, &p, 0) != CUDA_SUCCESS) {
        R->sums_h = 0;
        return -1;
    }
    if (es_temp_map(&R->sums_va, R->sums_size, R->sums_h, dev) != CUDA_SUCCESS)
        return -1;
    R->sums_mapped = 1;
    if (es_drv.cuModuleLoadData(&R->mod, es_swapsum_fatbin) != CUDA_SUCCESS) {
        R->mod = NULL;
        return -1;
    }
    if (es_drv.cuModuleGetFunction(&R->fn, R->mod, "es_swapsum") != CUDA_SUCCESS)
        return -1;
    /* a probe hashes a sample only (whole chunks), to time the hashing */
    size_t budget = es_opts.probe ? (es_opts.probe + ES_SWAPSUM_CHUNK - 1) / ES_SWAPSUM_CHUNK
                                  : total;
    size_t at = 0;
    double t0 = es_now_ms();
    for (size_t i = 0; i < R->n && at < budget; i++) {
        es_obj_t *o = &R->o[i];
        size_t nc = es_nchunks(o->ph);
        if (nc > budget - at)
            nc = budget - at;
        if (!nc)
            continue;
        es_swapsum_args_t a = { (const es_u64 *)o->view,
                                (es_u64 *)(R->sums_va + at * sizeof(uint64_t)), nc };
        void *params[] = { &a };
        CUstream s = R->s[i % (size_t)R->ns];
        if (es_drv.cuLaunchKernel(R->fn, (unsigned)nc, 1, 1, ES_SWAPSUM_THREADS, 1, 1, 0, s,
                                  params, NULL) != CUDA_SUCCESS)
            return -1;
        at += nc;
    }
    if (es_opts.probe) {
        int ok = es_run_sync(R) == CUDA_SUCCESS;
        R->st->ms_hash = es_now_ms() - t0;
        R->st->bytes_hashed = ok ? at * ES_SWAPSUM_CHUNK : 0;
        return -1; /* nothing to compare with: every chunk is copied */
    }
    uint64_t *all = malloc(total * sizeof(uint64_t));
    if (!all)
        return -1;
    /* The hashes only: the host never reads device memory. */
    int synced = es_run_sync(R) == CUDA_SUCCESS;
    R->st->ms_hash = es_now_ms() - t0;
    R->st->bytes_hashed = synced ? total * ES_SWAPSUM_CHUNK : 0;
    if (!synced ||
        es_drv.cuMemcpyDtoHAsync_v2(all, (CUdeviceptr)R->sums_va, total * sizeof(uint64_t),
                                    R->s[0]) != CUDA_SUCCESS ||
        es_drv.cuStreamSynchronize(R->s[0]) != CUDA_SUCCESS) {
        free(all);
        return -1;
    }
    at = 0;
    for (size_t i = 0; i < R->n; i++) {
        es_obj_t *o = &R->o[i];
        es_phys_t *ph = o->ph;
        size_t nc = es_nchunks(ph);
        o->sums = malloc(nc * sizeof(uint64_t) + 1);
        if (o->sums)
            memcpy(o->sums, all + at, nc * sizeof(uint64_t));
        if (o->sums && ph->park && ph->park_valid && ph->sums_valid && ph->nsums == nc)
            for (size_t c = 0; c < nc; c++)
                o->dirty[c] = ph->sums[c] != o->sums[c];
        at += nc;
    }
    free(all);
    return 0;
}

/* ---- parks ------------------------------------------------------------------------ */

/* A host copy is a shared mapping of a memfd of its own, kept open while
 * the copy lives. Registering it (pinning) then pins the pages where they
 * are: a driver that must make registered memory reachable from elsewhere
 * (simcuda's device servers map the same file) shares the file instead of
 * moving private pages into one and back at every registration. */
/* The host copy in VMM memory located on the host: pinned once, readable
 * and writable by the host and, once granted (es_park_pin), by each device
 * that copies to or from it, across contexts, so that no swap pays for
 * pinning again. Memory registered with cuMemHostRegister belongs to the
 * context that registered it: after a move it would be registered anew,
 * which costs about as much as copying it. 0, or -1 where the driver has no
 * such memory (the caller then takes a memfd). */
static int es_park_vmm(es_phys_t *ph)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_HOST;
    size_t g = 0;
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr va = 0;
    int reserved = 0, mapped = 0;
    if (es_drv.cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
            CUDA_SUCCESS || g == 0 || ph->size % g)
        return -1;
    if (es_drv.cuMemCreate(&h, ph->size, &p, 0) != CUDA_SUCCESS) {
        h = 0;
        goto fail;
    }
    if (es_drv.cuMemAddressReserve(&va, ph->size, g, 0, 0) != CUDA_SUCCESS)
        goto fail;
    reserved = 1;
    if (es_drv.cuMemMap(va, ph->size, 0, h, 0) != CUDA_SUCCESS)
        goto fail;
    mapped = 1;
    CUmemAccessDesc d;
    memset(&d, 0, sizeof(d));
    d.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (es_drv.cuMemSetAccess(va, ph->size, &d, 1) != CUDA_SUCCESS)
        goto fail;
    ph->park = (void *)(uintptr_t)va;
    ph->park_h = (unsigned long long)h;
    ph->park_devs = 0;
    ph->park_fd = -1;
    /* the EST's own: a child the application forks (data-loader workers)
     * neither shares nor inherits it */
    madvise(ph->park, ph->size, MADV_DONTFORK);
    return 0;
fail:
    if (mapped)
        es_drv.cuMemUnmap(va, ph->size);
    if (reserved)
        es_drv.cuMemAddressFree(va, ph->size);
    if (h)
        es_drv.cuMemRelease(h);
    return -1;
}

static int es_park_ensure(es_phys_t *ph)
{
    if (ph->park)
        return 0;
    ph->park_valid = 0;
    ph->sums_valid = 0;
    if (es_park_vmm(ph) == 0)
        return 0;
    int fd = memfd_create("easyscale-park", MFD_CLOEXEC);
    if (fd < 0)
        return -ENOMEM;
    if (ftruncate(fd, (off_t)ph->size) != 0) {
        close(fd);
        return -ENOMEM;
    }
    void *p = mmap(NULL, ph->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return -ENOMEM;
    }
    /* large pages where shared memory may have them: a host copy is
     * written whole, and pinned */
    madvise(p, ph->size, MADV_HUGEPAGE);
    madvise(p, ph->size, MADV_DONTFORK);
    ph->park = p;
    ph->park_fd = fd;
    return 0;
}

static void es_park_drop(es_phys_t *ph)
{
    es_phys_park_free(ph);
}

/* Makes the host copy usable by copies on device dev: VMM host memory is
 * granted to dev once; a memfd is registered (portable) until
 * es_park_unpin. */
static CUresult es_park_pin(es_phys_t *ph, int dev)
{
    if (ph->park_h) {
        if (dev < 0 || dev >= 64 || (ph->park_devs >> dev & 1))
            return dev < 0 || dev >= 64 ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
        CUmemAccessDesc d;
        memset(&d, 0, sizeof(d));
        d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        d.location.id = dev;
        d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        CUresult r = es_drv.cuMemSetAccess((CUdeviceptr)(uintptr_t)ph->park, ph->size, &d, 1);
        if (r == CUDA_SUCCESS)
            ph->park_devs |= 1ULL << dev;
        return r;
    }
    if (ph->park_registered)
        return CUDA_SUCCESS;
    CUresult r = es_drv.cuMemHostRegister_v2(ph->park, ph->size, CU_MEMHOSTREGISTER_PORTABLE);
    if (r == CUDA_SUCCESS)
        ph->park_registered = 1;
    return r;
}

/* Before the contexts that registered a memfd copy go: unregistered. (VMM
 * host memory stays pinned and granted.) */
static void es_park_unpin(es_phys_t *ph)
{
    if (ph->park_registered)
        es_drv.cuMemHostUnregister(ph->park);
    ph->park_registered = 0;
}

void es_swap_drop_parks(int vdev)
{
    es_memreg_lock();
    for (es_phys_t *ph = es_memreg_first(vdev); ph; ph = ph->next)
        if (ph->real || !ph->park_valid) /* a parked EST's only copy stays */
            es_park_drop(ph);
    es_memreg_unlock();
}

/* ---- a parked EST's content, from the host ---------------------------------------- */

/* The park address of va for len bytes inside one mapping of vdev's parked
 * objects (how many bytes of it lie there in *run), or NULL. Lock held. */
static unsigned char *es_park_at(int vdev, uintptr_t va, size_t len, size_t *run, es_phys_t **obj)
{
    for (es_phys_t *ph = es_memreg_first(vdev); ph; ph = ph->next) {
        if (ph->owner == ES_OWN_IMPORT || !ph->park || !ph->park_valid || ph->real)
            continue;
        for (int m = 0; m < ph->nmaps; m++) {
            const es_map_t *mp = &ph->maps[m];
            if (va < mp->va || va - mp->va >= mp->size)
                continue;
            size_t in = mp->size - (va - mp->va);
            *run = in < len ? in : len;
            *obj = ph;
            return (unsigned char *)ph->park + mp->off + (va - mp->va);
        }
    }
    return NULL;
}

/* Reads into out (in NULL) or writes from in (out NULL). */
static int es_park_copy(int vdev, uintptr_t va, void *out, const void *in, size_t len)
{
    int rc = 0;
    es_memreg_lock();
    if (es_memreg_device(vdev) != -1) {
        rc = -EINVAL;
        goto out;
    }
    while (len) {
        size_t run = 0;
        es_phys_t *ph = NULL;
        unsigned char *p = es_park_at(vdev, va, len, &run, &ph);
        if (!p) {
            rc = -EFAULT;
            goto out;
        }
        if (in) {
            memcpy(p, in, run);
            ph->sums_valid = 0; /* the next swap-out copies it whole */
            if (ph->stale) {
                size_t off = (size_t)(p - (unsigned char *)ph->park);
                memset(ph->stale + off / ES_SWAPSUM_CHUNK, 1,
                       (off + run - 1) / ES_SWAPSUM_CHUNK - off / ES_SWAPSUM_CHUNK + 1);
            }
            in = (const unsigned char *)in + run;
        } else {
            memcpy(out, p, run);
            out = (unsigned char *)out + run;
        }
        va += run;
        len -= run;
    }
out:
    es_memreg_unlock();
    return rc;
}

int es_swap_park_read(int vdev, void *dst, CUdeviceptr src, size_t len)
{
    return es_park_copy(vdev, (uintptr_t)src, dst, NULL, len);
}

int es_swap_park_write(int vdev, CUdeviceptr dst, const void *src, size_t len)
{
    return es_park_copy(vdev, (uintptr_t)dst, NULL, src, len);
}

/* ---- copies -------------------------------------------------------------------------- */

enum { ES_D2H = 1, ES_H2D, ES_D2D };

/* Enqueues the copies of o's chunks (dirty ones only for D2H), in pieces of
 * opts.piece over the run's streams, starting at stream *next. */
static CUresult es_copy_obj(es_run_t *R, es_obj_t *o, int dir, uintptr_t dst_dev,
                            CUcontext dctx, CUcontext sctx, int *next)
{
    es_phys_t *ph = o->ph;
    size_t nc = es_nchunks(ph), per = es_opts.piece / ES_SWAPSUM_CHUNK;
    /* o->dirty: the chunks to copy (swap-out: changed since the last one;
     * swap-in into kept memory: written while parked) */
    const unsigned char *only = dir != ES_D2D ? o->dirty : NULL;
    for (size_t c = 0; c < nc;) {
        if (only && !only[c]) {
            R->st->bytes_skipped += ES_SWAPSUM_CHUNK;
            c++;
            continue;
        }
        size_t e = c + 1;
        while (e < nc && e - c < per && !(only && !only[e]))
            e++;
        size_t off = c * ES_SWAPSUM_CHUNK, len = (e - c) * ES_SWAPSUM_CHUNK;
        CUstream s = R->s[(*next)++ % R->ns];
        CUresult r;
        if (dir == ES_D2H) {
            r = es_drv.cuMemcpyDtoHAsync_v2((char *)ph->park + off, (CUdeviceptr)(o->view + off),
                                            len, s);
            R->st->bytes_d2h += len;
        } else if (dir == ES_H2D) {
            r = es_drv.cuMemcpyHtoDAsync_v2((CUdeviceptr)(dst_dev + off), (char *)ph->park + off,
                                            len, s);
            R->st->bytes_h2d += len;
        } else {
            r = es_drv.cuMemcpyPeerAsync((CUdeviceptr)(dst_dev + off), dctx,
                                         (CUdeviceptr)(o->view + off), sctx, len, s);
            R->st->bytes_d2d += len;
        }
        if (r != CUDA_SUCCESS)
            return r;
        c = e;
    }
    /* sizes not a multiple of the chunk (never with the VMM granule) */
    size_t tail = ph->size - nc * ES_SWAPSUM_CHUNK;
    if (tail) {
        CUstream s = R->s[(*next)++ % R->ns];
        size_t off = nc * ES_SWAPSUM_CHUNK;
        if (dir == ES_D2H)
            return es_drv.cuMemcpyDtoHAsync_v2((char *)ph->park + off,
                                               (CUdeviceptr)(o->view + off), tail, s);
        if (dir == ES_H2D)
            return es_drv.cuMemcpyHtoDAsync_v2((CUdeviceptr)(dst_dev + off),
                                               (char *)ph->park + off, tail, s);
        return es_drv.cuMemcpyPeerAsync((CUdeviceptr)(dst_dev + off), dctx,
                                        (CUdeviceptr)(o->view + off), sctx, tail, s);
    }
    return CUDA_SUCCESS;
}

/* ---- run teardown ---------------------------------------------------------------------- */

static void es_run_end(es_run_t *R)
{
    for (size_t i = 0; i < R->n; i++) {
        es_obj_unview(&R->o[i]);
        free(R->o[i].sums);
        free(R->o[i].dirty);
    }
    if (R->sums_mapped)
        es_temp_unmap(R->sums_va, R->sums_size);
    if (R->sums_h)
        es_drv.cuMemRelease(R->sums_h);
    if (R->mod)
        es_drv.cuModuleUnload(R->mod);
    es_run_free_streams(R);
    free(R->o);
    memset(R, 0, sizeof(*R));
}

static void es_stats_begin(es_swap_stats_t *st, double *t0)
{
    memset(st, 0, sizeof(*st));
    *t0 = es_now_ms();
}

/* ---- swap-out -------------------------------------------------------------------------- */

/* Copies the objects of R (viewed) to their parks: registration, sums,
 * copies, sync; the parks' hashes updated. Lock held. */
static int es_out_copies(es_run_t *R, int dev, char *msg, size_t msglen)
{
    int rc = 0, next = 0;
    CUresult r = CUDA_SUCCESS;
    double t = es_now_ms();
    int sums = es_run_sums(R, dev);
    R->st->ms_sums = es_now_ms() - t;
    t = es_now_ms();
    if (sums == -ENOMEM) {
        es_msg(msg, msglen, "out of host memory");
        return -ENOMEM;
    }
    for (size_t i = 0; i < R->n; i++) {
        es_obj_t *o = &R->o[i];
        if (es_park_ensure(o->ph) != 0) {
            es_msg(msg, msglen, "no host memory for a copy of %zu bytes", o->ph->size);
            return -ENOMEM;
        }
        /* a park without valid content must be copied whole */
        if (!o->ph->park_valid)
            memset(o->dirty, 1, es_nchunks(o->ph));
        r = es_park_pin(o->ph, dev);
        if (r != CUDA_SUCCESS) {
            es_msg(msg, msglen, "cannot pin a host copy for device %d: %s", dev,
                   es_drv_errname(r));
            return -EIO;
        }
        r = es_copy_obj(R, o, ES_D2H, 0, NULL, NULL, &next);
        if (r != CUDA_SUCCESS)
            break;
    }
    CUresult rs = es_run_sync(R);
    R->st->ms_copy = es_now_ms() - t;
    if (r == CUDA_SUCCESS)
        r = rs;
    if (r != CUDA_SUCCESS) {
        /* the parks may be half-written: they are not valid copies */
        for (size_t i = 0; i < R->n; i++)
            R->o[i].ph->park_valid = 0;
        es_msg(msg, msglen, "copy to host memory failed: %s", es_drv_errname(r));
        return -EIO;
    }
    for (size_t i = 0; i < R->n; i++) {
        es_phys_t *ph = R->o[i].ph;
        ph->park_valid = 1;
        ph->sums_valid = 0;
        if (sums == 0 && R->o[i].sums) {
            free(ph->sums);
            ph->sums = R->o[i].sums;
            ph->nsums = es_nchunks(ph);
            ph->sums_valid = 1;
            R->o[i].sums = NULL;
        }
    }
    return rc;
}

/* After the copies of a swap-out: ph's real memory kept on dev (unmapped,
 * its stale chunks none yet), or 0 (-ENOMEM: released instead). */
static int es_keep(es_phys_t *ph, int dev)
{
    size_t nc = es_nchunks(ph);
    ph->stale = calloc(nc ? nc : 1, 1);
    if (!ph->stale)
        return -ENOMEM;
    ph->kept = ph->real;
    ph->kept_dev = dev;
    ph->real = 0;
    return 0;
}

int es_swap_out(int vdev, es_swap_stats_t *st, char *msg, size_t msglen)
{
    return es_swap_out_keep(vdev, 0, st, msg, msglen);
}

void es_swap_release_kept(int vdev)
{
    es_memreg_lock();
    for (es_phys_t *ph = es_memreg_first(vdev); ph; ph = ph->next)
        es_phys_release_kept(ph);
    es_memreg_unlock();
}

int es_swap_out_keep(int vdev, size_t keep, es_swap_stats_t *st, char *msg, size_t msglen)
{
    es_swap_stats_t local;
    double t0;
    es_run_t R;
    int rc = 0;
    if (!st)
        st = &local;
    es_stats_begin(st, &t0);
    memset(&R, 0, sizeof(R));
    R.st = st;
    es_mem_poll_frees(1);
    es_memreg_lock();
    int dev = es_memreg_device(vdev);
    if (dev < 0) {
        es_msg(msg, msglen, "vdev %d is not resident", vdev);
        rc = -EALREADY;
        goto out;
    }
    rc = es_run_collect(&R, vdev, 1);
    if (rc)
        goto nomem;
    /* imported objects are the exporter's: dropped, not copied */
    size_t own = 0;
    es_obj_t *imports = calloc(R.n ? R.n : 1, sizeof(*imports));
    size_t nimp = 0;
    if (!imports)
        goto nomem;
    for (size_t i = 0; i < R.n; i++) {
        if (R.o[i].ph->owner == ES_OWN_IMPORT)
            imports[nimp++] = R.o[i];
        else
            R.o[own++] = R.o[i];
    }
    R.n = own;
    if (es_run_streams(&R, dev) != 0) {
        free(imports);
        es_msg(msg, msglen, "no stream for the copies");
        rc = -EIO;
        goto out;
    }
    for (size_t i = 0; i < R.n; i++) {
        CUresult r = es_obj_view(&R.o[i], dev);
        if (r != CUDA_SUCCESS) {
            free(imports);
            es_msg(msg, msglen, "cannot map an object to copy it: %s", es_drv_errname(r));
            rc = -EIO;
            goto out;
        }
    }
    rc = es_out_copies(&R, dev, msg, msglen);
    if (rc) {
        R.keep_dev = -1; /* streams that failed are not kept */
        for (size_t i = 0; i < R.n; i++)
            es_park_unpin(R.o[i].ph);
        free(imports);
        goto out; /* still resident, nothing released */
    }
    for (size_t i = 0; i < R.n; i++) {
        es_phys_t *ph = R.o[i].ph;
        es_park_unpin(ph);
        es_obj_unview(&R.o[i]);
        es_phys_unmap_real(ph);
        if (ph->size <= keep && es_keep(ph, dev) == 0)
            keep -= ph->size;
        else
            es_phys_release_real(ph);
        st->objects++;
        st->bytes += ph->size;
    }
    for (size_t i = 0; i < nimp; i++) {
        es_phys_unmap_real(imports[i].ph);
        es_phys_release_real(imports[i].ph);
    }
    free(imports);
    es_memreg_set_device(vdev, -1);
    goto out;
nomem:
    es_msg(msg, msglen, "out of host memory");
    rc = -ENOMEM;
out:
    es_run_end(&R);
    es_memreg_unlock();
    st->ms = es_now_ms() - t0;
    return rc;
}

/* ---- swap-in ----------------------------------------------------------------------------- */

int es_swap_in(int vdev, int dev, es_swap_stats_t *st, char *msg, size_t msglen)
{
    es_swap_stats_t local;
    double t0;
    es_run_t R;
    int rc = 0, mapped = 0, next = 0;
    size_t created = 0;
    CUresult r = CUDA_SUCCESS;
    if (!st)
        st = &local;
    es_stats_begin(st, &t0);
    memset(&R, 0, sizeof(R));
    R.st = st;
    es_memreg_lock();
    if (es_memreg_device(vdev) >= 0) {
        es_msg(msg, msglen, "vdev %d is resident already", vdev);
        rc = -EALREADY;
        goto out;
    }
    if (es_run_collect(&R, vdev, 1) != 0) {
        es_msg(msg, msglen, "out of host memory");
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < R.n; i++) {
        es_phys_t *ph = R.o[i].ph;
        if (ph->owner != ES_OWN_IMPORT && !ph->park_valid) {
            es_msg(msg, msglen, "object %llu has no host copy", (unsigned long long)ph->id);
            rc = -EIO;
            goto out;
        }
    }
    /* All the memory first: the EST moves whole or not at all. Memory kept
     * on dev is taken back (only what was written while parked is copied). */
    for (created = 0; created < R.n; created++) {
        es_phys_t *ph = R.o[created].ph;
        if (ph->kept && ph->kept_dev == dev) {
            ph->real = ph->kept;
            ph->kept = 0;
            R.o[created].dirty = ph->stale;
            ph->stale = NULL;
            continue;
        }
        es_phys_release_kept(ph);
        r = es_phys_create_real(ph, dev);
        if (r != CUDA_SUCCESS) {
            es_msg(msg, msglen, "cannot get %zu bytes on device %d (%s): vdev %d stays parked",
                   R.o[created].ph->size, dev, es_drv_errname(r), vdev);
            rc = r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
            goto undo;
        }
    }
    es_memreg_set_device(vdev, dev);
    for (mapped = 0; (size_t)mapped < R.n; mapped++) {
        r = es_phys_map_real(R.o[mapped].ph);
        if (r != CUDA_SUCCESS) {
            es_msg(msg, msglen, "cannot map memory at the EST's addresses (%s): vdev %d stays "
                   "parked", es_drv_errname(r), vdev);
            rc = -EIO;
            goto undo;
        }
    }
    if (es_run_streams(&R, dev) != 0) {
        es_msg(msg, msglen, "no stream for the copies");
        rc = -EIO;
        goto undo;
    }
    double tc = es_now_ms();
    for (size_t i = 0; i < R.n && r == CUDA_SUCCESS; i++) {
        es_obj_t *o = &R.o[i];
        if (o->ph->owner == ES_OWN_IMPORT)
            continue;
        r = es_obj_view(o, dev);
        if (r == CUDA_SUCCESS)
            r = es_park_pin(o->ph, dev);
        if (r == CUDA_SUCCESS)
            r = es_copy_obj(&R, o, ES_H2D, o->view, NULL, NULL, &next);
    }
    CUresult rs = es_run_sync(&R);
    st->ms_copy = es_now_ms() - tc;
    if (r == CUDA_SUCCESS)
        r = rs;
    if (r != CUDA_SUCCESS) {
        es_msg(msg, msglen, "copy from host memory failed (%s): vdev %d stays parked",
               es_drv_errname(r), vdev);
        rc = -EIO;
        goto undo;
    }
    /* The host copies stay registered while the EST is resident: the next
     * swap-out copies into them at once (swap.h). */
    for (size_t i = 0; i < R.n; i++) {
        es_phys_t *ph = R.o[i].ph;
        if (ph->owner == ES_OWN_IMPORT)
            continue;
        st->objects++;
        st->bytes += ph->size;
    }
    goto out;
undo:
    for (size_t i = 0; i < R.n; i++) {
        es_obj_unview(&R.o[i]);
        es_park_unpin(R.o[i].ph);
    }
    R.keep_dev = -1;
    es_run_free_streams(&R);
    for (int i = 0; i < mapped; i++)
        es_phys_unmap_real(R.o[i].ph);
    for (size_t i = 0; i < created; i++)
        es_phys_release_real(R.o[i].ph);
    es_memreg_set_device(vdev, -1);
out:
    es_run_end(&R);
    es_memreg_unlock();
    st->ms = es_now_ms() - t0;
    return rc;
}

/* ---- migration ------------------------------------------------------------------------------ */

/* Creates fresh memory for every object on dev, each mapped at a temporary
 * reservation. All or nothing. */
static CUresult es_mig_fresh(es_run_t *R, int dev, size_t *made)
{
    for (*made = 0; *made < R->n; (*made)++) {
        es_obj_t *o = &R->o[*made];
        es_phys_t *ph = o->ph;
        CUmemGenericAllocationHandle keep = ph->real;
        ph->real = 0;
        CUresult r = es_phys_create_real(ph, dev);
        o->fresh = ph->real;
        ph->real = keep;
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}

static void es_mig_fresh_free(es_run_t *R, size_t made)
{
    for (size_t i = 0; i < made; i++) {
        es_obj_t *o = &R->o[i];
        if (o->fresh) {
            es_drv.cuMemRelease(o->fresh);
            es_memreg_footprint_sub(o->ph);
        }
        o->fresh = 0;
    }
}

int es_swap_migrate(int vdev, int dev, CUcontext from_ctx, CUcontext to_ctx,
                    es_swap_stats_t *st, char *msg, size_t msglen)
{
    es_swap_stats_t local;
    double t0;
    es_run_t R;
    int rc = 0, can = 0, next = 0;
    size_t made = 0, switched = 0;
    uintptr_t *dst = NULL;
    CUresult r;
    if (!st)
        st = &local;
    memset(&R, 0, sizeof(R));
    int src = es_memreg_device(vdev);
    if (src < 0) {
        es_msg(msg, msglen, "vdev %d is not resident", vdev);
        return -EALREADY;
    }
    if (src == dev) {
        es_msg(msg, msglen, "vdev %d is on device %d already", vdev, dev);
        return -EALREADY;
    }
    if (from_ctx && to_ctx)
        es_drv.cuDeviceCanAccessPeer(&can, dev, src);
    if (!can) {
        /* Through host memory. */
        if (!to_ctx) {
            es_msg(msg, msglen, "a context on device %d is needed", dev);
            return -EINVAL;
        }
        es_swap_stats_t a, b;
        rc = es_swap_out(vdev, &a, msg, msglen);
        if (rc)
            return rc;
        CUcontext prev = NULL;
        es_drv.cuCtxGetCurrent(&prev);
        es_drv.cuCtxSetCurrent(to_ctx);
        rc = es_swap_in(vdev, dev, &b, msg, msglen);
        *st = a;
        st->bytes_h2d = b.bytes_h2d;
        st->ms = a.ms + b.ms;
        st->ms_copy = a.ms_copy + b.ms_copy;
        return rc;
    }
    es_stats_begin(st, &t0);
    R.st = st;
    es_mem_poll_frees(1);
    es_memreg_lock();
    if (es_run_collect(&R, vdev, 0) != 0 || !(dst = calloc(R.n ? R.n : 1, sizeof(*dst)))) {
        es_msg(msg, msglen, "out of host memory");
        rc = -ENOMEM;
        goto out;
    }
    /* the host copies were registered in contexts of the old device */
    for (size_t i = 0; i < R.n; i++)
        es_park_unpin(R.o[i].ph);
    r = es_mig_fresh(&R, dev, &made);
    if (r != CUDA_SUCCESS) {
        es_msg(msg, msglen, "cannot get %zu bytes on device %d (%s): vdev %d stays on device %d",
               R.o[made].ph->size, dev, es_drv_errname(r), vdev, src);
        rc = r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
        goto undo;
    }
    if (es_run_streams(&R, -1) != 0) {
        es_msg(msg, msglen, "no stream for the copies");
        rc = -EIO;
        goto undo;
    }
    double tc = es_now_ms();
    for (size_t i = 0; i < R.n; i++) {
        es_obj_t *o = &R.o[i];
        r = es_obj_view(o, src);
        if (r == CUDA_SUCCESS)
            r = es_temp_map_peer(&dst[i], o->ph->size, o->fresh, dev, src);
        if (r == CUDA_SUCCESS)
            r = es_copy_obj(&R, o, ES_D2D, dst[i], to_ctx, from_ctx, &next);
        if (r != CUDA_SUCCESS)
            break;
    }
    CUresult rs = es_run_sync(&R);
    st->ms_copy = es_now_ms() - tc;
    if (r == CUDA_SUCCESS)
        r = rs;
    if (r != CUDA_SUCCESS) {
        es_msg(msg, msglen, "device-to-device copy failed (%s): vdev %d stays on device %d",
               es_drv_errname(r), vdev, src);
        rc = -EIO;
        goto undo;
    }
    /* Switch: old memory off the EST's addresses, the new one on. */
    for (size_t i = 0; i < R.n; i++) {
        es_obj_unview(&R.o[i]);
        es_temp_unmap(dst[i], R.o[i].ph->size);
        dst[i] = 0;
        es_phys_unmap_real(R.o[i].ph);
    }
    es_memreg_set_device(vdev, dev);
    for (switched = 0; switched < R.n; switched++) {
        es_phys_t *ph = R.o[switched].ph;
        CUmemGenericAllocationHandle old = ph->real;
        ph->real = R.o[switched].fresh;
        r = es_phys_map_real(ph);
        R.o[switched].fresh = old; /* from here on, fresh is the one to release */
        if (r != CUDA_SUCCESS)
            break;
    }
    if (r != CUDA_SUCCESS) {
        /* Back onto the old memory, which is still whole. */
        es_phys_t *ph = R.o[switched].ph;
        CUmemGenericAllocationHandle nw = ph->real;
        ph->real = R.o[switched].fresh;
        R.o[switched].fresh = nw;
        for (size_t i = 0; i < switched; i++) {
            es_phys_t *q = R.o[i].ph;
            es_phys_unmap_real(q);
            CUmemGenericAllocationHandle t = q->real;
            q->real = R.o[i].fresh;
            R.o[i].fresh = t;
        }
        es_memreg_set_device(vdev, src);
        for (size_t i = 0; i < R.n; i++)
            es_phys_map_real(R.o[i].ph);
        es_msg(msg, msglen, "cannot map the new memory (%s): vdev %d stays on device %d",
               es_drv_errname(r), vdev, src);
        rc = -EIO;
        goto undo;
    }
    es_mig_fresh_free(&R, R.n); /* the old memory */
    /* imported objects stay where the exporter has them; the new device
     * gets the access the EST's vdev had */
    for (es_phys_t *ph = es_memreg_first(vdev); ph; ph = ph->next)
        if (ph->owner == ES_OWN_IMPORT && ph->real)
            for (int m = 0; m < ph->nmaps; m++)
                es_memreg_apply_access(ph, &ph->maps[m]);
    for (size_t i = 0; i < R.n; i++) {
        st->objects++;
        st->bytes += R.o[i].ph->size;
    }
    goto out;
undo:
    for (size_t i = 0; i < R.n; i++) {
        es_obj_unview(&R.o[i]);
        if (dst && dst[i])
            es_temp_unmap(dst[i], R.o[i].ph->size);
    }
    es_run_free_streams(&R);
    es_mig_fresh_free(&R, made > R.n ? R.n : made);
out:
    free(dst);
    es_run_end(&R);
    es_memreg_unlock();
    st->ms = es_now_ms() - t0;
    return rc;
}
