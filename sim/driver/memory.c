/* simcuda memory: device allocations, pinned and registered host memory, the
 * virtual memory management API (reservations, memfd-backed physical
 * allocations on a device or on the host, map/unmap, access, export/import as
 * file descriptors), copies, memsets and pointer attributes.
 *
 * Placement (devclient.c): every address handed out lies in the address
 * window; cuMemAlloc memory is a range of its device's backing file, pinned
 * memory a range of the host file. Without isolation the process maps
 * device memory itself (read and write); with SIMCUDA_ISOLATION=1 only the
 * device servers map it and the process keeps the addresses reserved
 * PROT_NONE, so a host access faults as on a GPU machine. A freed range
 * becomes a reservation again: a use after free faults too. */
#include "sim/driver/internal.h"
#include "sim/driver/capture.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define PAGE 4096UL
#define ROUND_UP(x, a) (((x) + (a) - 1) / (a) * (a))

/* ---- tables: allocations/reservations and VMM mappings, under one lock ------- */
typedef struct sim_phys {
    int fd;
    int backing;           /* its id for the servers */
    size_t size;
    int dev;               /* visible ordinal; -1: located on the host */
    int phys_dev;          /* index in SIMCUDA_DEVICES (capacity); -1: host */
    unsigned long long accounted;
    int handles;           /* cuMemCreate/Retain/Import references */
    int maps;              /* live mappings */
    int shared;            /* exported or imported: another process may hold its file */
    CUmemAllocationProp prop;
} sim_phys_t;

typedef struct sim_map {
    uintptr_t va;
    size_t size;
    sim_phys_t *ph;
    size_t off;
    unsigned char access[SIM_MAX_DEVICES];
    unsigned char host_access;
    unsigned long long id;
    int sync_memops;
} sim_map_t;

/* Registered host memory with isolation: each part of the range as it is
 * backed now (a shared file mapping as it was, or private pages moved into
 * the host file). */
typedef struct reg_seg {
    uintptr_t va;
    size_t len;
    int backing;           /* shared file: our id for it; copied: the host file */
    uint64_t off;
    int copied;            /* private pages moved into the host file */
    int prot;
} reg_seg_t;
typedef struct reg_info {
    int n;
    reg_seg_t seg[];
} reg_info_t;

static pthread_mutex_t g_mem_mu = PTHREAD_MUTEX_INITIALIZER;
static sim_range_t *g_ranges;
static size_t g_nranges, g_cranges;
static sim_map_t *g_maps;
static size_t g_nmaps, g_cmaps;
static unsigned long long g_next_id = 1;

/* ---- recycled physical memory ---------------------------------------------------------
 * A GPU's memory exists before cuMemCreate and is recycled after
 * cuMemRelease; here physical memory is a file whose pages are allocated
 * and cleared at first touch, one fault per page, several times slower than
 * a copy. So the files of released device allocations are kept, up to
 * SIMCUDA_PHYS_POOL_MIB (default 1024, 0 keeps none), and handed to the next
 * cuMemCreate of the same size on the same GPU, with their device servers'
 * page tables (devserver.c parks them). The device's capacity is given back
 * at the release as before, and the contents are what the last user left
 * (a GPU's new allocation holds garbage too). A file that was exported or
 * imported is never kept: another process may still map it. */
#define POOL_MAX 64

typedef struct pool_ent {
    int fd, backing;
    size_t size;
    int phys_dev;
} pool_ent_t;

static pool_ent_t g_pool[POOL_MAX]; /* the oldest first */
static int g_npool;
static size_t g_pool_bytes;
static size_t g_pool_cap = 1024ULL << 20;

int sim_phys_pool_parse(void)
{
    const char *s = getenv("SIMCUDA_PHYS_POOL_MIB");
    g_pool_cap = 1024ULL << 20;
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || errno || *end || v < 0 || v > (1LL << 24)) {
        sim_log("SIMCUDA_PHYS_POOL_MIB='%s' is not a number of MiB in [0, 16777216]", s);
        return -1;
    }
    g_pool_cap = (size_t)v << 20;
    return 0;
}

static void pool_evict_oldest(void) /* lock held */
{
    sim_dc_backing_put(g_pool[0].backing);
    close(g_pool[0].fd);
    g_pool_bytes -= g_pool[0].size;
    memmove(&g_pool[0], &g_pool[1], (size_t)(--g_npool) * sizeof(g_pool[0]));
}

/* Keeps ph's file for a later cuMemCreate: 1, or 0 (not kept). Lock held. */
static int pool_put(const sim_phys_t *ph)
{
    if (ph->dev < 0 || ph->shared || ph->size > g_pool_cap)
        return 0;
    while (g_npool && (g_npool == POOL_MAX || g_pool_bytes + ph->size > g_pool_cap))
        pool_evict_oldest();
    g_pool[g_npool++] = (pool_ent_t){ph->fd, ph->backing, ph->size, ph->phys_dev};
    g_pool_bytes += ph->size;
    return 1;
}

/* A kept file of size bytes of physical GPU phys_dev: 1 (fd and backing
 * set), or 0. Lock held. */
static int pool_take(int phys_dev, size_t size, int *fd, int *backing)
{
    for (int i = g_npool - 1; i >= 0; i--) { /* the newest: its pages are likeliest parked */
        if (g_pool[i].phys_dev != phys_dev || g_pool[i].size != size)
            continue;
        *fd = g_pool[i].fd;
        *backing = g_pool[i].backing;
        g_pool_bytes -= size;
        memmove(&g_pool[i], &g_pool[i + 1], (size_t)(g_npool - i - 1) * sizeof(g_pool[0]));
        g_npool--;
        return 1;
    }
    return 0;
}

void sim_mem_fork_reset(void)
{
    pthread_mutex_init(&g_mem_mu, NULL);
    /* the parent's files: the child must not hand them out again */
    for (int i = 0; i < g_npool; i++)
        close(g_pool[i].fd);
    g_npool = 0;
    g_pool_bytes = 0;
    /* The child keeps the parent's mappings (copy-on-write or shared) but
     * owns no allocation: its tables start empty. */
    g_ranges = NULL;
    g_nranges = g_cranges = 0;
    g_maps = NULL;
    g_nmaps = g_cmaps = 0;
}

static size_t range_pos(uintptr_t p) /* first index with base > p */
{
    size_t lo = 0, hi = g_nranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g_ranges[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static sim_range_t *range_at(uintptr_t p)
{
    size_t i = range_pos(p);
    if (i == 0)
        return NULL;
    sim_range_t *r = &g_ranges[i - 1];
    size_t len = r->span ? r->span : r->size;
    return p - r->base < len ? r : NULL;
}

static int range_overlaps(uintptr_t base, size_t len)
{
    size_t i = range_pos(base + len - 1);
    if (i == 0)
        return 0;
    sim_range_t *r = &g_ranges[i - 1];
    size_t rlen = r->span ? r->span : r->size;
    return r->base + rlen > base;
}

static int range_insert(const sim_range_t *r)
{
    if (g_nranges == g_cranges) {
        size_t n = g_cranges ? g_cranges * 2 : 256;
        sim_range_t *a = realloc(g_ranges, n * sizeof(*a));
        if (!a)
            return -ENOMEM;
        g_ranges = a;
        g_cranges = n;
    }
    size_t i = range_pos(r->base);
    memmove(&g_ranges[i + 1], &g_ranges[i], (g_nranges - i) * sizeof(*g_ranges));
    g_ranges[i] = *r;
    g_ranges[i].id = g_next_id++;
    g_nranges++;
    return 0;
}

static void range_remove(sim_range_t *r)
{
    size_t i = (size_t)(r - g_ranges);
    memmove(&g_ranges[i], &g_ranges[i + 1], (g_nranges - i - 1) * sizeof(*g_ranges));
    g_nranges--;
}

static size_t map_pos(uintptr_t p)
{
    size_t lo = 0, hi = g_nmaps;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g_maps[mid].va <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static sim_map_t *map_at(uintptr_t p)
{
    size_t i = map_pos(p);
    if (i == 0)
        return NULL;
    sim_map_t *m = &g_maps[i - 1];
    return p - m->va < m->size ? m : NULL;
}

int sim_range_find(uintptr_t p, sim_range_t *out)
{
    pthread_mutex_lock(&g_mem_mu);
    sim_range_t *r = range_at(p);
    if (r)
        *out = *r;
    pthread_mutex_unlock(&g_mem_mu);
    return r != NULL;
}

static sim_ctx_t *primary_of(int dev)
{
    sim_device_t *d = sim_dev(dev);
    return d ? d->primary : NULL;
}

/* Device memory at p: a cuMemAlloc range or a VMM mapping (on a device or
 * on the host). Caller holds the lock. */
static int dev_lookup_locked(uintptr_t p, uintptr_t *base, size_t *size, sim_ctx_t **ctx, int *dev)
{
    sim_range_t *r = range_at(p);
    if (r && r->kind == SIM_R_DEVICE) {
        *base = r->base;
        *size = r->size;
        *ctx = r->ctx;
        *dev = r->dev;
        return SIM_R_DEVICE;
    }
    sim_map_t *m = map_at(p);
    if (m) {
        *base = m->va;
        *size = m->size;
        *ctx = primary_of(m->ph->dev);
        *dev = m->ph->dev;
        return SIM_R_RESERVE;
    }
    return 0;
}

int sim_mem_lookup(uintptr_t p, int *kind, uintptr_t *base, size_t *size, sim_ctx_t **ctx)
{
    int dev = -1;
    pthread_mutex_lock(&g_mem_mu);
    int k = dev_lookup_locked(p, base, size, ctx, &dev);
    pthread_mutex_unlock(&g_mem_mu);
    if (kind)
        *kind = k;
    return k ? (dev >= 0 ? dev : SIM_MEM_HOST_VMM) : -1;
}

/* Checks that [p, p+n) starts in device memory (and, for a cuMemAlloc
 * allocation, ends inside it). */
static CUresult check_dev(CUdeviceptr p, size_t n)
{
    uintptr_t base;
    size_t size;
    sim_ctx_t *c;
    int kind;
    if (sim_mem_lookup((uintptr_t)p, &kind, &base, &size, &c) < 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (kind == SIM_R_DEVICE && (n > size || (uintptr_t)p - base > size - n))
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* ---- cuMemAlloc ---------------------------------------------------------------------- */
static CUresult mem_alloc(sim_ctx_t *c, CUdeviceptr *dptr, size_t bytesize)
{
    CUresult cr = sim_capture_unsafe();
    if (cr != CUDA_SUCCESS)
        return cr;
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_device_t *d = sim_dev(c->dev);
    if (bytesize > d->capacity)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t span = ROUND_UP(bytesize, PAGE);
    if (sim_cap_take(d->phys, d->capacity, span) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult res = CUDA_ERROR_OUT_OF_MEMORY;
    int b;
    uint64_t off;
    uintptr_t va;
    int added = 0;
    if (sim_file_alloc(c->dev, span, &b, &off) != 0)
        goto fail_cap;
    if (sim_va_alloc(span, span >= (2u << 20) ? (2u << 20) : PAGE, 0, &va) != 0)
        goto fail_file;
    if (!sim_isolation && mmap((void *)va, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                               sim_backing_fd(b), (off_t)off) == MAP_FAILED)
        goto fail_va;
    int rc = sim_dc_add(va, span, b, off, SIM_DC_DEVICE, c->dev, 0);
    if (rc != 0) {
        res = rc == -ENODEV ? CUDA_ERROR_DEVICE_UNAVAILABLE : CUDA_ERROR_OUT_OF_MEMORY;
        goto fail_va;
    }
    added = 1;
    sim_range_t r = {.base = va, .size = bytesize, .span = span, .kind = SIM_R_DEVICE,
                     .dev = c->dev, .ctx = c, .backing = b, .off = off};
    pthread_mutex_lock(&g_mem_mu);
    rc = range_insert(&r);
    pthread_mutex_unlock(&g_mem_mu);
    if (rc != 0)
        goto fail_va;
    *dptr = (CUdeviceptr)va;
    return CUDA_SUCCESS;
fail_va:
    if (added)
        sim_dc_remove(va, span);
    sim_va_free(va, span);
fail_file:
    sim_file_free(c->dev, off, span);
fail_cap:
    sim_cap_give(d->phys, span);
    return res;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    return mem_alloc(c, dptr, bytesize);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                            unsigned int ElementSizeBytes)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = ROUND_UP(WidthInBytes, 512);
    if (Height > SIZE_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = mem_alloc(c, dptr, pitch * Height);
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}

/* Frees a cuMemAlloc allocation now (no synchronisation). */
CUresult sim_mem_free_now(CUdeviceptr p)
{
    pthread_mutex_lock(&g_mem_mu);
    sim_range_t *r = range_at((uintptr_t)p);
    if (!r || r->kind != SIM_R_DEVICE || r->base != (uintptr_t)p) {
        pthread_mutex_unlock(&g_mem_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    sim_range_t copy = *r;
    range_remove(r);
    pthread_mutex_unlock(&g_mem_mu);
    /* The devices first, then this process: the range is a reservation
     * again (a use after free faults), then its pages go back. */
    sim_dc_remove(copy.base, copy.span);
    sim_va_free(copy.base, copy.span);
    sim_file_free(copy.dev, copy.off, copy.span);
    sim_device_t *d = sim_dev(copy.dev);
    if (d)
        sim_cap_give(d->phys, copy.span);
    return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    SIM_CHECK_INIT();
    if (dptr == 0)
        return CUDA_SUCCESS;
    CUresult cr = sim_capture_unsafe();
    if (cr != CUDA_SUCCESS)
        return cr;
    sim_range_t r;
    if (!sim_range_find((uintptr_t)dptr, &r) || r.kind != SIM_R_DEVICE || r.base != (uintptr_t)dptr)
        return CUDA_ERROR_INVALID_VALUE;
    /* Like the real driver, freeing waits for work that may use the memory. */
    if (sim_ctx_valid(r.ctx))
        sim_ctx_sync(r.ctx);
    CUresult res = sim_mem_free_now(dptr);
    return res == CUDA_SUCCESS ? SIM_STICKY() : res;
}

CUresult cuMemGetInfo_v2(size_t *free_out, size_t *total)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!free_out || !total)
        return CUDA_ERROR_INVALID_VALUE;
    sim_device_t *d = sim_dev(c->dev);
    unsigned long long used = sim_cap_used(d->phys);
    *total = (size_t)d->capacity;
    *free_out = used >= d->capacity ? 0 : (size_t)(d->capacity - used);
    return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    SIM_CHECK_INIT();
    uintptr_t base;
    size_t size;
    sim_ctx_t *c;
    if (sim_mem_lookup((uintptr_t)dptr, NULL, &base, &size, &c) < 0)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = (CUdeviceptr)base;
    if (psize)
        *psize = size;
    return CUDA_SUCCESS;
}

/* stream-ordered allocation: allocated at once, freed when the stream gets there */
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    return mem_alloc(s->ctx, dptr, bytesize);
}
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return cuMemAllocAsync(dptr, bytesize, hStream ? hStream : CU_STREAM_PER_THREAD);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    sim_range_t rg;
    if (!sim_range_find((uintptr_t)dptr, &rg) || rg.kind != SIM_R_DEVICE ||
        rg.base != (uintptr_t)dptr)
        return CUDA_ERROR_INVALID_VALUE;
    sim_op_t *op = sim_op_alloc(s);
    op->type = SIM_OP_FREE;
    op->u.fr.p = dptr;
    return sim_enqueue(s, op);
}
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return cuMemFreeAsync(dptr, hStream ? hStream : CU_STREAM_PER_THREAD);
}

/* ---- host memory --------------------------------------------------------------------- */
/* Pinned memory: a range of the host file, mapped here and (with
 * isolation) in every device server, at one address. With unified
 * addressing it is portable and mapped whatever the flags say. */
static CUresult host_alloc(void **pp, size_t bytesize, unsigned flags)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if ((r = sim_capture_unsafe()) != CUDA_SUCCESS)
        return r;
    if (!pp || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t span = ROUND_UP(bytesize, PAGE);
    int b;
    uint64_t off;
    uintptr_t va;
    if (sim_file_alloc(-1, span, &b, &off) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (sim_va_alloc(span, PAGE, 0, &va) != 0) {
        sim_file_free(-1, off, span);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (mmap((void *)va, span, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, sim_backing_fd(b),
             (off_t)off) == MAP_FAILED ||
        sim_dc_add(va, span, b, off, SIM_DC_HOST, -1, PROT_READ | PROT_WRITE) != 0)
        goto fail;
    sim_range_t rg = {.base = va, .size = bytesize, .span = span, .kind = SIM_R_HOST,
                      .dev = c->dev, .ctx = c, .flags = flags, .backing = b, .off = off};
    pthread_mutex_lock(&g_mem_mu);
    int rc = range_insert(&rg);
    pthread_mutex_unlock(&g_mem_mu);
    if (rc != 0) {
        sim_dc_remove(va, span);
        goto fail;
    }
    *pp = (void *)va;
    return CUDA_SUCCESS;
fail:
    sim_va_free(va, span);
    sim_file_free(-1, off, span);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { return host_alloc(pp, bytesize, 0); }

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    if (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                            CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(pp, bytesize, Flags);
}

static void host_free(const sim_range_t *r)
{
    sim_dc_remove(r->base, r->span);
    sim_va_free(r->base, r->span);
    sim_file_free(-1, r->off, r->span);
}

CUresult cuMemFreeHost(void *p)
{
    SIM_CHECK_INIT();
    pthread_mutex_lock(&g_mem_mu);
    sim_range_t *r = range_at((uintptr_t)p);
    if (!p || !r || r->kind != SIM_R_HOST || r->base != (uintptr_t)p) {
        pthread_mutex_unlock(&g_mem_mu);
        return CUDA_ERROR_INVALID_VALUE;
    }
    sim_range_t copy = *r;
    range_remove(r);
    pthread_mutex_unlock(&g_mem_mu);
    host_free(&copy);
    return CUDA_SUCCESS;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pdptr || Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_range_t rg;
    if (!sim_range_find((uintptr_t)p, &rg) || (rg.kind != SIM_R_HOST && rg.kind != SIM_R_REGISTERED))
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    SIM_CHECK_INIT();
    sim_range_t rg;
    if (!pFlags || !sim_range_find((uintptr_t)p, &rg) || rg.kind != SIM_R_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    *pFlags = rg.flags;
    return CUDA_SUCCESS;
}

/* ---- registration (isolation): making host pages reachable by the servers ----------
 * The servers map the registered pages at the same addresses, from the file
 * behind them:
 * - a shared file mapping (a file, POSIX shared memory, a memfd) stays as it
 *   is: its file is found by path (/proc/self/maps, checked by device and
 *   inode), else among this process's open descriptors, else through
 *   /proc/self/map_files (which needs privileges); the servers map the same
 *   file, so the memory stays shared with whoever else maps it. Shared
 *   memory whose file cannot be found (MAP_SHARED|MAP_ANONYMOUS inherited
 *   over a fork) is refused with CUDA_ERROR_NOT_SUPPORTED.
 * - private pages (heap, stack, anonymous or private file mappings) are
 *   moved into the host file: copied, then the host file is mapped over them
 *   (MAP_FIXED) with the same protection. Limits: a write by another thread
 *   to those pages while they are copied is lost; after a fork the pages are
 *   shared with the child instead of copied on write; pages are whole, so
 *   two registrations may not share a page (the second one gets
 *   CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED). cuMemHostUnregister copies
 *   them back into private pages.
 * - a device server that already has something of its own at those
 *   addresses cannot map them there: the registration is refused with
 *   CUDA_ERROR_OPERATING_SYSTEM, and the memory stays as it was (private
 *   pages moved back, a shared mapping untouched): pageable memory, whose
 *   copies the workers stage. Servers keep their own mappings away from
 *   where a process's mmaps, heap and stack land (devserver.c,
 *   sim/driver/README.md: practically never for ordinary memory;
 *   systematic under AddressSanitizer, whose heap lies at one fixed place
 *   in every process). A server started after the registration that
 *   cannot map it leaves its device without access to that memory (said on
 *   stderr). */
typedef struct {
    uintptr_t lo, hi;
    int prot, shared;
    unsigned long long off, ino;
    unsigned dev_major, dev_minor;
    char path[512];
} vma_t;

static int read_vmas(uintptr_t lo, uintptr_t hi, vma_t **out, int *n)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f)
        return -errno;
    vma_t *v = NULL;
    int cnt = 0, cap = 0, rc = 0;
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        unsigned long a, b;
        char perms[8];
        unsigned long long off, ino;
        unsigned maj, min;
        int pos = 0;
        if (sscanf(line, "%lx-%lx %7s %llx %x:%x %llu %n", &a, &b, perms, &off, &maj, &min, &ino,
                   &pos) < 7)
            continue;
        if (b <= lo || a >= hi)
            continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 8;
            vma_t *x = realloc(v, (size_t)cap * sizeof(*x));
            if (!x) {
                rc = -ENOMEM;
                break;
            }
            v = x;
        }
        vma_t *e = &v[cnt++];
        memset(e, 0, sizeof(*e));
        e->lo = a;
        e->hi = b;
        e->prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0);
        e->shared = perms[3] == 's';
        e->off = off;
        e->dev_major = maj;
        e->dev_minor = min;
        e->ino = ino;
        char *path = line + pos;
        path[strcspn(path, "\n")] = '\0';
        snprintf(e->path, sizeof(e->path), "%s", path);
    }
    fclose(f);
    if (rc) {
        free(v);
        return rc;
    }
    *out = v;
    *n = cnt;
    return 0;
}

static int same_file(int fd, const vma_t *v)
{
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_ino == v->ino && major(st.st_dev) == v->dev_major &&
           minor(st.st_dev) == v->dev_minor;
}

/* An open descriptor of the file behind a shared mapping, or -1. */
static int vma_file(const vma_t *v)
{
    int fd;
    if (v->path[0] == '/' && !strstr(v->path, " (deleted)")) {
        fd = open(v->path, (v->prot & PROT_WRITE ? O_RDWR : O_RDONLY) | O_CLOEXEC);
        if (fd >= 0 && same_file(fd, v))
            return fd;
        if (fd >= 0)
            close(fd);
    }
    char p[300];
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *e;
    while (dir && (e = readdir(dir)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
        struct stat st;
        if (stat(p, &st) != 0 || st.st_ino != v->ino)
            continue;
        fd = open(p, (v->prot & PROT_WRITE ? O_RDWR : O_RDONLY) | O_CLOEXEC);
        if (fd >= 0 && same_file(fd, v)) {
            closedir(dir);
            return fd;
        }
        if (fd >= 0)
            close(fd);
    }
    if (dir)
        closedir(dir);
    snprintf(p, sizeof(p), "/proc/self/map_files/%lx-%lx", (unsigned long)v->lo,
             (unsigned long)v->hi);
    fd = open(p, (v->prot & PROT_WRITE ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd >= 0 && same_file(fd, v))
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Whole pages, whatever a sanitizer thinks of their parts (its redzones
 * are data like any other here). */
__attribute__((no_sanitize_address)) static void page_copy(void *dst, const void *src, size_t n)
{
    volatile uint64_t *d = dst;
    const volatile uint64_t *s = src;
    for (size_t i = 0; i < n / 8; i++)
        d[i] = s[i];
}

/* Moves private pages [va, va+len) into the host file. */
static int move_private(uintptr_t va, size_t len, int prot, reg_seg_t *s)
{
    int b;
    uint64_t off;
    if (sim_file_alloc(-1, len, &b, &off) != 0)
        return -ENOMEM;
    void *tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, sim_backing_fd(b), (off_t)off);
    if (tmp == MAP_FAILED) {
        sim_file_free(-1, off, len);
        return -ENOMEM;
    }
    page_copy(tmp, (void *)va, len);
    munmap(tmp, len);
    if (mmap((void *)va, len, prot, MAP_SHARED | MAP_FIXED, sim_backing_fd(b), (off_t)off) ==
        MAP_FAILED) {
        sim_file_free(-1, off, len);
        return -errno;
    }
    *s = (reg_seg_t){va, len, b, off, 1, prot};
    return 0;
}

/* Back into private pages, with their contents. */
static void move_back(const reg_seg_t *s)
{
    void *tmp = mmap(NULL, s->len, PROT_READ, MAP_SHARED, sim_backing_fd(s->backing), (off_t)s->off);
    if (tmp != MAP_FAILED &&
        mmap((void *)s->va, s->len, s->prot | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
             0) != MAP_FAILED) {
        page_copy((void *)s->va, tmp, s->len);
        if (!(s->prot & PROT_WRITE))
            mprotect((void *)s->va, s->len, s->prot);
    }
    if (tmp != MAP_FAILED)
        munmap(tmp, s->len);
    sim_file_free(-1, s->off, s->len);
}

static void unregister_segs(reg_info_t *ri)
{
    for (int i = 0; ri && i < ri->n; i++) {
        reg_seg_t *s = &ri->seg[i];
        sim_dc_remove(s->va, s->len);
        if (s->copied)
            move_back(s);
    }
    free(ri);
}

static CUresult register_segs(uintptr_t lo, uintptr_t hi, int read_only, reg_info_t **out)
{
    vma_t *v = NULL;
    int nv = 0;
    CUresult res = CUDA_SUCCESS;
    if (read_vmas(lo, hi, &v, &nv) != 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    reg_info_t *ri = calloc(1, sizeof(*ri) + (size_t)(nv ? nv : 1) * sizeof(reg_seg_t));
    if (!ri) {
        free(v);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uintptr_t at = lo;
    for (int i = 0; i < nv && res == CUDA_SUCCESS; i++) {
        if (v[i].lo > at || !(v[i].prot & PROT_READ)) {
            res = CUDA_ERROR_INVALID_VALUE; /* a hole or inaccessible: not usable memory */
            break;
        }
        uintptr_t a = at, b = v[i].hi < hi ? v[i].hi : hi;
        reg_seg_t s = {0};
        if (v[i].shared) {
            int fd = vma_file(&v[i]);
            if (fd < 0) {
                sim_log("cuMemHostRegister: the shared mapping [%#lx, %#lx) has no file this "
                        "process can reopen", (unsigned long)v[i].lo, (unsigned long)v[i].hi);
                res = CUDA_ERROR_NOT_SUPPORTED;
                break;
            }
            int id = sim_dc_backing_add(fd);
            close(fd);
            if (id < 0) {
                res = CUDA_ERROR_OUT_OF_MEMORY;
                break;
            }
            s = (reg_seg_t){a, b - a, id, v[i].off + (a - v[i].lo), 0, v[i].prot};
        } else if (move_private(a, b - a, v[i].prot, &s) != 0) {
            res = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        int prot = read_only ? PROT_READ : PROT_READ | PROT_WRITE;
        int rc = sim_dc_add(s.va, s.len, s.backing, s.off, SIM_DC_HOST, -1, prot);
        if (!s.copied)
            sim_dc_backing_put(s.backing); /* the record holds it now */
        ri->seg[ri->n++] = s;
        if (rc == -EEXIST) {
            sim_log("cuMemHostRegister: a device server has its own memory at [%#lx, %#lx): "
                    "registration refused", (unsigned long)s.va, (unsigned long)(s.va + s.len));
            res = CUDA_ERROR_OPERATING_SYSTEM;
        } else if (rc != 0) {
            res = CUDA_ERROR_OUT_OF_MEMORY;
        }
        at = b;
    }
    free(v);
    if (res == CUDA_SUCCESS && at < hi)
        res = CUDA_ERROR_INVALID_VALUE;
    if (res != CUDA_SUCCESS) {
        unregister_segs(ri);
        return res;
    }
    *out = ri;
    return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    unsigned valid = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                     CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
    if (!p || bytesize == 0 || (Flags & ~valid) || (uintptr_t)p + bytesize < (uintptr_t)p)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_win_contains((uintptr_t)p, 1))
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED; /* pinned or device memory */
    uintptr_t lo = (uintptr_t)p & ~(PAGE - 1), hi = ROUND_UP((uintptr_t)p + bytesize, PAGE);
    sim_range_t rg = {.base = (uintptr_t)p, .size = bytesize, .span = bytesize,
                      .kind = SIM_R_REGISTERED, .dev = c->dev, .ctx = c, .flags = Flags,
                      .backing = -1};
    pthread_mutex_lock(&g_mem_mu);
    int clash = range_overlaps((uintptr_t)p, bytesize);
    for (size_t i = 0; sim_isolation && !clash && i < g_nranges; i++) {
        const sim_range_t *o = &g_ranges[i];
        uintptr_t olo = o->base & ~(PAGE - 1), ohi = ROUND_UP(o->base + o->size, PAGE);
        clash = o->kind == SIM_R_REGISTERED && olo < hi && lo < ohi;
    }
    if (clash) {
        pthread_mutex_unlock(&g_mem_mu);
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
    if (sim_isolation) {
        reg_info_t *ri = NULL;
        r = register_segs(lo, hi, !!(Flags & CU_MEMHOSTREGISTER_READ_ONLY), &ri);
        if (r != CUDA_SUCCESS) {
            pthread_mutex_unlock(&g_mem_mu);
            return r;
        }
        rg.segs = ri;
    }
    int rc = range_insert(&rg);
    pthread_mutex_unlock(&g_mem_mu);
    if (rc) {
        unregister_segs(rg.segs);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return cuMemHostRegister_v2(p, bytesize, Flags);
}

CUresult cuMemHostUnregister(void *p)
{
    SIM_CHECK_INIT();
    pthread_mutex_lock(&g_mem_mu);
    sim_range_t *r = range_at((uintptr_t)p);
    CUresult res = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    reg_info_t *ri = NULL;
    if (p && r && r->kind == SIM_R_REGISTERED && r->base == (uintptr_t)p) {
        ri = r->segs;
        range_remove(r);
        res = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&g_mem_mu);
    unregister_segs(ri);
    return res;
}

/* ---- context teardown: free what the context allocated -------------------------- */
void sim_mem_ctx_destroyed(sim_ctx_t *c)
{
    for (;;) {
        sim_range_t copy;
        int found = 0;
        pthread_mutex_lock(&g_mem_mu);
        for (size_t i = 0; i < g_nranges; i++) {
            if (g_ranges[i].ctx == c && g_ranges[i].kind != SIM_R_RESERVE) {
                copy = g_ranges[i];
                found = 1;
                if (copy.kind != SIM_R_DEVICE)
                    range_remove(&g_ranges[i]);
                break;
            }
        }
        pthread_mutex_unlock(&g_mem_mu);
        if (!found)
            break;
        if (copy.kind == SIM_R_DEVICE)
            sim_mem_free_now((CUdeviceptr)copy.base);
        else if (copy.kind == SIM_R_HOST)
            host_free(&copy);
        else if (copy.kind == SIM_R_REGISTERED)
            unregister_segs(copy.segs);
    }
}

/* ---- VMM --------------------------------------------------------------------------------- */
static int valid_phys(CUmemGenericAllocationHandle h)
{
    return h && sim_reg_has((void *)(uintptr_t)h, SIM_H_PHYS);
}

static void phys_maybe_free(sim_phys_t *ph) /* lock held */
{
    if (ph->handles > 0 || ph->maps > 0)
        return;
    if (!pool_put(ph)) {
        sim_dc_backing_put(ph->backing);
        close(ph->fd);
    }
    if (ph->accounted)
        sim_cap_give(ph->phys_dev, ph->accounted);
    free(ph);
}

static int host_location(int type)
{
    return type == CU_MEM_LOCATION_TYPE_HOST || type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
}

/* cuda.h (cuMemCreate): a HOST allocation is not IPC capable (its
 * requestedHandleTypes must be 0); a HOST_NUMA one names NUMA node 0 (the
 * only one here) and may be exported; HOST_NUMA_CURRENT is invalid. */
static CUresult check_prop(const CUmemAllocationProp *prop)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
        return CUDA_ERROR_INVALID_VALUE;
    switch ((int)prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (!sim_dev(prop->location.id))
            return CUDA_ERROR_INVALID_VALUE;
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
        if (prop->requestedHandleTypes != 0)
            return CUDA_ERROR_INVALID_VALUE;
        break;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        if (prop->location.id != 0)
            return CUDA_ERROR_INVALID_VALUE;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    SIM_CHECK_INIT();
    if (!granularity)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_prop(prop);
    if (r != CUDA_SUCCESS)
        return r;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = SIM_VMM_GRANULARITY;
    return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    SIM_CHECK_INIT();
    if (!ptr || size == 0 || size % SIM_VMM_GRANULARITY || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (alignment == 0)
        alignment = SIM_VMM_GRANULARITY;
    if (alignment & (alignment - 1) || alignment % PAGE)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t va;
    /* addr is a hint, honoured when free (inside the window). */
    if (sim_va_alloc(size, alignment, (uintptr_t)addr, &va) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    sim_range_t rg = {.base = va, .size = size, .span = size, .kind = SIM_R_RESERVE, .dev = -1,
                      .backing = -1};
    pthread_mutex_lock(&g_mem_mu);
    int rc = range_insert(&rg);
    pthread_mutex_unlock(&g_mem_mu);
    if (rc) {
        sim_va_free(va, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = (CUdeviceptr)va;
    return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    SIM_CHECK_INIT();
    CUresult res = CUDA_SUCCESS;
    pthread_mutex_lock(&g_mem_mu);
    sim_range_t *r = range_at((uintptr_t)ptr);
    if (!ptr || !r || r->kind != SIM_R_RESERVE || r->base != (uintptr_t)ptr || r->size != size) {
        res = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    size_t i = map_pos((uintptr_t)ptr + size - 1);
    if (i > 0 && g_maps[i - 1].va + g_maps[i - 1].size > (uintptr_t)ptr) {
        res = CUDA_ERROR_INVALID_VALUE; /* still mapped */
        goto out;
    }
    range_remove(r);
    sim_va_free((uintptr_t)ptr, size);
out:
    pthread_mutex_unlock(&g_mem_mu);
    return res;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    SIM_CHECK_INIT();
    if (!handle || flags != 0 || size == 0 || size % SIM_VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_prop(prop);
    if (r != CUDA_SUCCESS)
        return r;
    int on_dev = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
    sim_device_t *d = on_dev ? sim_dev(prop->location.id) : NULL;
    if (d && sim_cap_take(d->phys, d->capacity, size) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    char name[48];
    if (d)
        snprintf(name, sizeof(name), "simcuda:phys=%d", d->phys);
    else
        snprintf(name, sizeof(name), "simcuda:host");
    sim_phys_t *ph = calloc(1, sizeof(*ph));
    int fd = -1, b = -1, kept = 0;
    if (ph && d) {
        pthread_mutex_lock(&g_mem_mu);
        kept = pool_take(d->phys, size, &fd, &b);
        pthread_mutex_unlock(&g_mem_mu);
    }
    if (ph && !kept && (fd = memfd_create(name, MFD_CLOEXEC)) >= 0 &&
        ftruncate(fd, (off_t)size) == 0)
        b = sim_dc_backing_add(fd);
    if (b < 0) {
        free(ph);
        if (fd >= 0)
            close(fd);
        if (d)
            sim_cap_give(d->phys, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ph->fd = fd;
    ph->backing = b;
    ph->size = size;
    ph->dev = d ? prop->location.id : -1;
    ph->phys_dev = d ? d->phys : -1;
    ph->accounted = d ? size : 0;
    ph->handles = 1;
    ph->prop = *prop;
    sim_reg_add(ph, SIM_H_PHYS);
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
    return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    SIM_CHECK_INIT();
    CUresult res = CUDA_SUCCESS;
    pthread_mutex_lock(&g_mem_mu);
    if (!valid_phys(handle)) {
        res = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    sim_phys_t *ph = (sim_phys_t *)(uintptr_t)handle;
    if (--ph->handles == 0) {
        sim_reg_del(ph);
        phys_maybe_free(ph);
    }
out:
    pthread_mutex_unlock(&g_mem_mu);
    return res;
}

/* This process maps a VMM mapping itself (PROT_NONE until access is set)
 * without isolation, and with it only for memory located on the host. */
static int client_maps(const sim_phys_t *ph)
{
    return !sim_isolation || ph->dev < 0;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    SIM_CHECK_INIT();
    CUresult res = CUDA_SUCCESS;
    uintptr_t va = (uintptr_t)ptr;
    /* cuda.h: offset "currently must be zero"; every failure cuMemMap
     * documents for bad arguments (an unknown handle, a range not inside one
     * reservation, or already mapped) is CUDA_ERROR_INVALID_VALUE. */
    if (!ptr || size == 0 || flags != 0 || size % SIM_VMM_GRANULARITY || va % SIM_VMM_GRANULARITY ||
        offset != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_mem_mu);
    if (!valid_phys(handle)) {
        res = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    sim_phys_t *ph = (sim_phys_t *)(uintptr_t)handle;
    sim_range_t *r = range_at(va);
    if (!r || r->kind != SIM_R_RESERVE || va + size > r->base + r->size || offset > ph->size ||
        size > ph->size - offset) {
        res = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    size_t i = map_pos(va + size - 1);
    if (i > 0 && g_maps[i - 1].va + g_maps[i - 1].size > va) {
        res = CUDA_ERROR_INVALID_VALUE; /* already mapped */
        goto out;
    }
    if (g_nmaps == g_cmaps) {
        size_t n = g_cmaps ? g_cmaps * 2 : 64;
        sim_map_t *a = realloc(g_maps, n * sizeof(*a));
        if (!a) {
            res = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        g_maps = a;
        g_cmaps = n;
    }
    if (client_maps(ph) &&
        mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED, ph->fd, (off_t)offset) == MAP_FAILED) {
        res = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    if (sim_dc_add(va, size, ph->backing, offset, SIM_DC_VMM, ph->dev, PROT_NONE) != 0) {
        mmap((void *)va, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
             -1, 0);
        res = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    i = map_pos(va);
    memmove(&g_maps[i + 1], &g_maps[i], (g_nmaps - i) * sizeof(*g_maps));
    memset(&g_maps[i], 0, sizeof(g_maps[i]));
    g_maps[i].va = va;
    g_maps[i].size = size;
    g_maps[i].ph = ph;
    g_maps[i].off = offset;
    g_maps[i].id = g_next_id++;
    g_nmaps++;
    ph->maps++;
out:
    pthread_mutex_unlock(&g_mem_mu);
    return res;
}

/* Finds the mappings exactly covering [va, va+size): first index and count. */
static int maps_cover(uintptr_t va, size_t size, size_t *first, size_t *count)
{
    size_t i = map_pos(va);
    if (i == 0 || g_maps[i - 1].va != va)
        return 0;
    i--;
    size_t j = i;
    uintptr_t at = va;
    while (j < g_nmaps && g_maps[j].va == at && at < va + size) {
        at += g_maps[j].size;
        j++;
    }
    if (at != va + size)
        return 0;
    *first = i;
    *count = j - i;
    return 1;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    SIM_CHECK_INIT();
    CUresult res = CUDA_SUCCESS;
    size_t first, count;
    pthread_mutex_lock(&g_mem_mu);
    if (!ptr || size == 0 || !maps_cover((uintptr_t)ptr, size, &first, &count)) {
        res = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    /* Back to a PROT_NONE reservation: the physical pages are no longer
     * reachable, by the devices first. */
    sim_dc_remove((uintptr_t)ptr, size);
    mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
         -1, 0);
    for (size_t k = 0; k < count; k++) {
        sim_phys_t *ph = g_maps[first + k].ph;
        ph->maps--;
        phys_maybe_free(ph);
    }
    memmove(&g_maps[first], &g_maps[first + count], (g_nmaps - first - count) * sizeof(*g_maps));
    g_nmaps -= count;
out:
    pthread_mutex_unlock(&g_mem_mu);
    return res;
}

static int prot_of(unsigned flags)
{
    return flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
         : flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? PROT_READ : PROT_NONE;
}

/* cuda.h (cuMemSetAccess): access for a host location only for memory
 * located on the host. */
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    SIM_CHECK_INIT();
    CUresult res = CUDA_SUCCESS;
    size_t first, n;
    if (!desc || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < count; k++) {
        if (desc[k].location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
            if (!sim_dev(desc[k].location.id))
                return CUDA_ERROR_INVALID_DEVICE;
        } else if (!host_location(desc[k].location.type)) {
            return CUDA_ERROR_INVALID_DEVICE;
        }
        if (desc[k].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            desc[k].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[k].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&g_mem_mu);
    if (!ptr || size == 0 || !maps_cover((uintptr_t)ptr, size, &first, &n)) {
        res = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    for (size_t i = first; i < first + n; i++)
        for (size_t k = 0; k < count; k++)
            if (host_location(desc[k].location.type) && g_maps[i].ph->dev >= 0) {
                res = CUDA_ERROR_INVALID_VALUE;
                goto out;
            }
    for (size_t i = first; i < first + n; i++) {
        sim_map_t *m = &g_maps[i];
        for (size_t k = 0; k < count; k++) {
            if (host_location(desc[k].location.type)) {
                m->host_access = (unsigned char)desc[k].flags;
                continue;
            }
            m->access[desc[k].location.id] = (unsigned char)desc[k].flags;
            if (sim_dc_set_access(m->va, m->size, desc[k].location.id, prot_of(desc[k].flags)) != 0)
                res = CUDA_ERROR_OUT_OF_MEMORY;
        }
        /* This process's own view: without isolation any access granted (a
         * device's work runs here); with it, the host's access only. */
        int prot = prot_of(m->host_access);
        if (!sim_isolation)
            for (int d = 0; d < sim_ndevices; d++)
                prot |= prot_of(m->access[d]);
        sim_dc_set_host_prot(m->va, m->size, prot);
        if (client_maps(m->ph) && mprotect((void *)m->va, m->size, prot) != 0)
            res = CUDA_ERROR_INVALID_VALUE;
    }
out:
    pthread_mutex_unlock(&g_mem_mu);
    return res;
}

CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    SIM_CHECK_INIT();
    if (!flags || !location)
        return CUDA_ERROR_INVALID_VALUE;
    int host = host_location(location->type);
    if (!host && (location->type != CU_MEM_LOCATION_TYPE_DEVICE || !sim_dev(location->id)))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult res = CUDA_SUCCESS;
    pthread_mutex_lock(&g_mem_mu);
    sim_map_t *m = map_at((uintptr_t)ptr);
    if (!m)
        res = CUDA_ERROR_INVALID_VALUE;
    else
        *flags = host ? m->host_access : m->access[location->id];
    pthread_mutex_unlock(&g_mem_mu);
    return res;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                CUmemGenericAllocationHandle handle)
{
    SIM_CHECK_INIT();
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult res = CUDA_SUCCESS;
    pthread_mutex_lock(&g_mem_mu);
    if (!valid_phys(handle))
        res = CUDA_ERROR_INVALID_VALUE;
    else
        *prop = ((sim_phys_t *)(uintptr_t)handle)->prop;
    pthread_mutex_unlock(&g_mem_mu);
    return res;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    SIM_CHECK_INIT();
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult res = CUDA_SUCCESS;
    pthread_mutex_lock(&g_mem_mu);
    sim_map_t *m = map_at((uintptr_t)addr);
    if (!m) {
        res = CUDA_ERROR_INVALID_VALUE;
    } else {
        if (m->ph->handles++ == 0)
            sim_reg_add(m->ph, SIM_H_PHYS);
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->ph;
    }
    pthread_mutex_unlock(&g_mem_mu);
    return res;
}

CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType, unsigned long long flags)
{
    SIM_CHECK_INIT();
    if (!shareableHandle || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult res = CUDA_SUCCESS;
    pthread_mutex_lock(&g_mem_mu);
    if (!valid_phys(handle)) {
        res = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    sim_phys_t *ph = (sim_phys_t *)(uintptr_t)handle;
    if (!(ph->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
        res = CUDA_ERROR_INVALID_VALUE; /* not requested at cuMemCreate */
        goto out;
    }
    int fd = fcntl(ph->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        res = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    *(int *)shareableHandle = fd;
    ph->shared = 1;
out:
    pthread_mutex_unlock(&g_mem_mu);
    return res;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        CUmemAllocationHandleType shHandleType)
{
    SIM_CHECK_INIT();
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    int src = (int)(intptr_t)osHandle;
    struct stat st;
    if (src < 0 || fstat(src, &st) != 0 || st.st_size <= 0 ||
        (size_t)st.st_size % SIM_VMM_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    /* Where it lives is in the memfd's name: "simcuda:phys=N" or "simcuda:host". */
    char link[64], target[128];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", src);
    ssize_t n = readlink(link, target, sizeof(target) - 1);
    int phys = -1, host = 0;
    if (n > 0) {
        target[n] = '\0';
        const char *k = strstr(target, "simcuda:phys=");
        if (k) {
            char *end;
            errno = 0;
            long v = strtol(k + 13, &end, 10);
            if (!errno && end != k + 13 && (*end == '\0' || *end == ' ') && v >= 0 &&
                v < SIM_MAX_DEVICES)
                phys = (int)v;
        } else if (strstr(target, "simcuda:host")) {
            host = 1;
        }
    }
    if (phys < 0 && !host)
        return CUDA_ERROR_INVALID_VALUE; /* not a simcuda allocation */
    /* Its device as this process numbers it; one this process does not see
     * (another CUDA_VISIBLE_DEVICES) is attributed to device 0, so that the
     * memory can still be mapped. */
    int dev = 0;
    for (int i = 0; i < sim_ndevices; i++)
        if (sim_devices[i].phys == phys)
            dev = i;
    sim_phys_t *ph = calloc(1, sizeof(*ph));
    int fd = fcntl(src, F_DUPFD_CLOEXEC, 0);
    int b = fd >= 0 && ph ? sim_dc_backing_add(fd) : -1;
    if (b < 0) {
        free(ph);
        if (fd >= 0)
            close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    ph->fd = fd;
    ph->backing = b;
    ph->size = (size_t)st.st_size;
    ph->dev = host ? -1 : dev;
    ph->phys_dev = host ? -1 : phys;
    ph->handles = 1;
    ph->shared = 1;
    ph->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    ph->prop.location.type = host ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_DEVICE;
    ph->prop.location.id = host ? 0 : dev;
    ph->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    sim_reg_add(ph, SIM_H_PHYS);
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)ph;
    return CUDA_SUCCESS;
}

/* ---- copies and memsets ----------------------------------------------------------------
 * Between devices: a device reaches another device's memory only with peer
 * access (or VMM access granted to it); cuMemcpyPeer* works without (the
 * driver stages it, as NVIDIA's does), any other copy between two devices
 * that cannot reach each other is an illegal address (with isolation). */
/* Host memory the driver does not know (not pinned, not registered, not
 * device memory): "pageable". */
static int pageable(const void *p)
{
    sim_range_t r;
    int kind;
    uintptr_t base;
    size_t size;
    sim_ctx_t *c;
    if (sim_range_find((uintptr_t)p, &r) && r.kind != SIM_R_RESERVE)
        return 0;
    return sim_mem_lookup((uintptr_t)p, &kind, &base, &size, &c) < 0;
}

/* Copy semantics of the real driver's asynchronous copies: from pageable
 * memory the source is staged at once (the caller may reuse it when the call
 * returns); to pageable memory the call returns when the copy is done. */
static CUresult copy_on(CUstream h, void *dst, const void *src, size_t n, int sync, int peer)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(h, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (n == 0)
        return sync ? sim_stream_sync(s) : CUDA_SUCCESS;
    void *stage = NULL;
    if (!sync) {
        if (pageable(dst)) {
            sync = 1;
        } else if (pageable(src)) {
            stage = malloc(n);
            if (!stage)
                return CUDA_ERROR_OUT_OF_MEMORY;
            memcpy(stage, src, n);
            src = stage;
        }
    }
    sim_op_t *op = sim_op_alloc(s);
    op->type = SIM_OP_COPY;
    op->u.copy.dst = dst;
    op->u.copy.src = src;
    op->u.copy.n = n;
    op->u.copy.stage = stage;
    op->u.copy.peer = peer;
    if (sync)
        return sim_run_sync(s, op);
    return sim_enqueue(s, op);
}

#define DS CU_STREAM_LEGACY
#define PS CU_STREAM_PER_THREAD
#define PT(h) ((h) == NULL ? CU_STREAM_PER_THREAD : (h))

static CUresult htod(CUdeviceptr dst, const void *src, size_t n, CUstream h, int sync)
{
    SIM_CHECK_INIT();
    if (n && !src)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_dev(dst, n);
    if (r != CUDA_SUCCESS)
        return r;
    return copy_on(h, (void *)(uintptr_t)dst, src, n, sync, 0);
}

static CUresult dtoh(void *dst, CUdeviceptr src, size_t n, CUstream h, int sync)
{
    SIM_CHECK_INIT();
    if (n && !dst)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = check_dev(src, n);
    if (r != CUDA_SUCCESS)
        return r;
    return copy_on(h, dst, (const void *)(uintptr_t)src, n, sync, 0);
}

static CUresult dtod_on(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, int sync, int peer)
{
    SIM_CHECK_INIT();
    CUresult r = check_dev(dst, n);
    if (r == CUDA_SUCCESS)
        r = check_dev(src, n);
    if (r != CUDA_SUCCESS)
        return r;
    return copy_on(h, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n, sync, peer);
}

static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, int sync)
{
    return dtod_on(dst, src, n, h, sync, 0);
}

static CUresult anyd(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, int sync)
{
    SIM_CHECK_INIT();
    if (n && (!dst || !src))
        return CUDA_ERROR_INVALID_VALUE;
    return copy_on(h, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n, sync, 0);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { return htod(d, s, n, DS, 1); }
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n) { return htod(d, s, n, PS, 1); }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { return dtoh(d, s, n, DS, 1); }
CUresult cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n) { return dtoh(d, s, n, PS, 1); }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { return dtod(d, s, n, DS, 1); }
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return dtod(d, s, n, PS, 1); }
CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { return anyd(d, s, n, DS, 1); }
CUresult cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return anyd(d, s, n, PS, 1); }

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream h)
{
    return htod(d, s, n, h, 0);
}
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream h)
{
    return htod(d, s, n, PT(h), 0);
}
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream h)
{
    return dtoh(d, s, n, h, 0);
}
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream h)
{
    return dtoh(d, s, n, PT(h), 0);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h)
{
    return dtod(d, s, n, h, 0);
}
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h)
{
    return dtod(d, s, n, PT(h), 0);
}
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h)
{
    return anyd(d, s, n, h, 0);
}
CUresult cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h)
{
    return anyd(d, s, n, PT(h), 0);
}

static CUresult peer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream h,
                     int sync)
{
    SIM_CHECK_INIT();
    if (!sim_ctx_valid((sim_ctx_t *)dc) || !sim_ctx_valid((sim_ctx_t *)sc))
        return CUDA_ERROR_INVALID_CONTEXT;
    return dtod_on(d, s, n, h, sync, 1);
}
CUresult cuMemcpyPeer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n)
{
    return peer(d, dc, s, sc, n, DS, 1);
}
CUresult cuMemcpyPeer_ptds(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n)
{
    return peer(d, dc, s, sc, n, PS, 1);
}
CUresult cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n,
                           CUstream h)
{
    return peer(d, dc, s, sc, n, h, 0);
}
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n,
                                CUstream h)
{
    return peer(d, dc, s, sc, n, PT(h), 0);
}

static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream h, int sync)
{
    SIM_CHECK_INIT();
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    const char *src;
    char *dst;
    switch (c->srcMemoryType) {
    case CU_MEMORYTYPE_HOST: src = c->srcHost; break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: src = (const char *)(uintptr_t)c->srcDevice; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    switch (c->dstMemoryType) {
    case CU_MEMORYTYPE_HOST: dst = c->dstHost; break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: dst = (char *)(uintptr_t)c->dstDevice; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    if (c->Height && c->WidthInBytes && (!src || !dst))
        return CUDA_ERROR_INVALID_VALUE;
    size_t spitch = c->srcPitch ? c->srcPitch : c->WidthInBytes;
    size_t dpitch = c->dstPitch ? c->dstPitch : c->WidthInBytes;
    if (spitch < c->WidthInBytes || dpitch < c->WidthInBytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (c->srcMemoryType == CU_MEMORYTYPE_DEVICE && check_dev((CUdeviceptr)(uintptr_t)src, 0))
        return CUDA_ERROR_INVALID_VALUE;
    if (c->dstMemoryType == CU_MEMORYTYPE_DEVICE && check_dev((CUdeviceptr)(uintptr_t)dst, 0))
        return CUDA_ERROR_INVALID_VALUE;
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(h, &s);
    if (r != CUDA_SUCCESS)
        return r;
    sim_op_t *op = sim_op_alloc(s);
    op->type = SIM_OP_COPY2D;
    op->u.copy2d.src = src + c->srcY * spitch + c->srcXInBytes;
    op->u.copy2d.dst = dst + c->dstY * dpitch + c->dstXInBytes;
    op->u.copy2d.spitch = spitch;
    op->u.copy2d.dpitch = dpitch;
    op->u.copy2d.width = c->WidthInBytes;
    op->u.copy2d.height = c->Height;
    if (sync)
        return sim_run_sync(s, op);
    return sim_enqueue(s, op);
}
CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *c) { return copy2d(c, DS, 1); }
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *c) { return copy2d(c, PS, 1); }
CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *c) { return copy2d(c, DS, 1); }
CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *c) { return copy2d(c, PS, 1); }
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream h) { return copy2d(c, h, 0); }
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *c, CUstream h) { return copy2d(c, PT(h), 0); }

static CUresult memset2d(CUdeviceptr dst, size_t pitch, uint32_t val, int elem, size_t width,
                         size_t height, CUstream h, int sync)
{
    SIM_CHECK_INIT();
    if (dst % (unsigned)elem || (height > 1 && pitch % (unsigned)elem))
        return CUDA_ERROR_INVALID_VALUE;
    if (width > SIZE_MAX / 4 || (height > 1 && (pitch < width * (size_t)elem ||
                                                 height - 1 > (SIZE_MAX / 2) / pitch)))
        return CUDA_ERROR_INVALID_VALUE;
    size_t total = height ? (height - 1) * pitch + width * (size_t)elem : 0;
    CUresult r = check_dev(dst, total);
    if (r != CUDA_SUCCESS)
        return r;
    sim_stream_t *s;
    r = sim_stream_resolve(h, &s);
    if (r != CUDA_SUCCESS)
        return r;
    sim_op_t *op = sim_op_alloc(s);
    op->type = SIM_OP_SET;
    op->u.set.dst = (char *)(uintptr_t)dst;
    op->u.set.pitch = pitch;
    op->u.set.width = width;
    op->u.set.height = height;
    op->u.set.val = val;
    op->u.set.elem = elem;
    if (sync)
        return sim_run_sync(s, op);
    return sim_enqueue(s, op);
}

CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return memset2d(d, n, v, 1, n, 1, DS, 1); }
CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) { return memset2d(d, n, v, 1, n, 1, PS, 1); }
CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { return memset2d(d, n * 2, v, 2, n, 1, DS, 1); }
CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) { return memset2d(d, n * 2, v, 2, n, 1, PS, 1); }
CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) { return memset2d(d, n * 4, v, 4, n, 1, DS, 1); }
CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) { return memset2d(d, n * 4, v, 4, n, 1, PS, 1); }
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream h) { return memset2d(d, n, v, 1, n, 1, h, 0); }
CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream h) { return memset2d(d, n, v, 1, n, 1, PT(h), 0); }
CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream h) { return memset2d(d, n * 2, v, 2, n, 1, h, 0); }
CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream h) { return memset2d(d, n * 2, v, 2, n, 1, PT(h), 0); }
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream h) { return memset2d(d, n * 4, v, 4, n, 1, h, 0); }
CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream h) { return memset2d(d, n * 4, v, 4, n, 1, PT(h), 0); }
CUresult cuMemsetD2D8_v2(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t hh) { return memset2d(d, p, v, 1, w, hh, DS, 1); }
CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t hh) { return memset2d(d, p, v, 1, w, hh, PS, 1); }
CUresult cuMemsetD2D16_v2(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t hh) { return memset2d(d, p, v, 2, w, hh, DS, 1); }
CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t hh) { return memset2d(d, p, v, 2, w, hh, PS, 1); }
CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t hh, CUstream h) { return memset2d(d, p, v, 2, w, hh, h, 0); }
CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t hh, CUstream h) { return memset2d(d, p, v, 2, w, hh, PT(h), 0); }
CUresult cuMemsetD2D32_v2(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t hh) { return memset2d(d, p, v, 4, w, hh, DS, 1); }
CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t hh) { return memset2d(d, p, v, 4, w, hh, PS, 1); }
CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t hh, CUstream h) { return memset2d(d, p, v, 1, w, hh, h, 0); }
CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t hh, CUstream h) { return memset2d(d, p, v, 1, w, hh, PT(h), 0); }
CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t hh, CUstream h) { return memset2d(d, p, v, 4, w, hh, h, 0); }
CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t hh, CUstream h) { return memset2d(d, p, v, 4, w, hh, PT(h), 0); }

/* ---- pointer attributes ------------------------------------------------------------------ */
typedef struct {
    int found;
    int kind;          /* SIM_R_* or 0 for a VMM mapping */
    uintptr_t base;    /* allocation (or mapping) start */
    size_t size;
    uintptr_t rbase;   /* reservation start for VMM, else base */
    size_t rsize;
    int dev;
    sim_ctx_t *ctx;
    unsigned long long id;
    int mapped;
    unsigned long long access;
    unsigned long long handle_types;
    int sync_memops;
} ptrinfo_t;

/* Facts about p; access flags as seen by device cur_dev (-1: the memory's
 * own device). */
static void ptr_info(uintptr_t p, int cur_dev, ptrinfo_t *pi)
{
    memset(pi, 0, sizeof(*pi));
    pthread_mutex_lock(&g_mem_mu);
    sim_map_t *m = map_at(p);
    sim_range_t *r = range_at(p);
    if (m) {
        pi->found = 1;
        pi->kind = 0;
        pi->base = m->va;
        pi->size = m->size;
        pi->rbase = r ? r->base : m->va;
        pi->rsize = r ? r->size : m->size;
        pi->dev = m->ph->dev;
        pi->ctx = primary_of(m->ph->dev);
        pi->id = m->id;
        pi->mapped = 1;
        pi->access = cur_dev >= 0 ? m->access[cur_dev]
                   : m->ph->dev >= 0 ? m->access[m->ph->dev] : m->host_access;
        pi->handle_types = m->ph->prop.requestedHandleTypes;
        pi->sync_memops = m->sync_memops;
    } else if (r && r->kind != SIM_R_RESERVE) {
        pi->found = 1;
        pi->kind = r->kind;
        pi->base = pi->rbase = r->base;
        pi->size = pi->rsize = r->size;
        pi->dev = r->dev;
        pi->ctx = r->ctx;
        pi->id = r->id;
        pi->mapped = 1;
        pi->access = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        pi->sync_memops = r->sync_memops;
    }
    pthread_mutex_unlock(&g_mem_mu);
}

static CUresult ptr_attr(void *data, CUpointer_attribute a, const ptrinfo_t *pi, uintptr_t p,
                         int have_ctx)
{
    int dev_mem = (pi->kind == 0 && pi->dev >= 0) || pi->kind == SIM_R_DEVICE;
    if (!pi->found)
        return CUDA_ERROR_INVALID_VALUE;
    switch ((int)a) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = pi->kind == 0 ? NULL : (CUcontext)pi->ctx;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = dev_mem ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        if (!have_ctx) /* "If there is no current CUcontext then CUDA_ERROR_INVALID_CONTEXT" */
            return CUDA_ERROR_INVALID_CONTEXT;
        *(CUdeviceptr *)data = (CUdeviceptr)p;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (dev_mem)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)p;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *(unsigned char *)data = (unsigned char)pi->sync_memops;
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        *(unsigned char *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(unsigned char *)data = pi->kind == SIM_R_DEVICE;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned char *)data = (unsigned char)pi->mapped;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = pi->id;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = pi->dev;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)pi->rbase;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = pi->rsize;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(void **)data = (void *)pi->base;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = pi->size;
        break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = pi->handle_types;
        break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned long long *)data = pi->access;
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(void **)data = NULL;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    SIM_CHECK_INIT();
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    sim_ctx_t *c = sim_ctx_current();
    int have_ctx = c && sim_ctx_valid(c);
    ptrinfo_t pi;
    ptr_info((uintptr_t)ptr, have_ctx ? c->dev : -1, &pi);
    return ptr_attr(data, attribute, &pi, (uintptr_t)ptr, have_ctx);
}

/* Only CU_POINTER_ATTRIBUTE_SYNC_MEMOPS can be set. Synchronous memory
 * operations in simcuda always complete before they return, so it changes
 * nothing but what cuPointerGetAttribute reports. */
CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    SIM_CHECK_INIT();
    if (!value || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
        return CUDA_ERROR_INVALID_VALUE;
    int on = *(const unsigned int *)value != 0;
    CUresult res = CUDA_SUCCESS;
    pthread_mutex_lock(&g_mem_mu);
    sim_map_t *m = map_at((uintptr_t)ptr);
    sim_range_t *r = range_at((uintptr_t)ptr);
    if (m)
        m->sync_memops = on;
    else if (r && r->kind != SIM_R_RESERVE)
        r->sync_memops = on;
    else
        res = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&g_mem_mu);
    return res;
}

CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                void **data, CUdeviceptr ptr)
{
    SIM_CHECK_INIT();
    if (!attributes || !data || numAttributes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_ctx_t *c = sim_ctx_current();
    int have_ctx = c && sim_ctx_valid(c);
    ptrinfo_t pi;
    ptr_info((uintptr_t)ptr, have_ctx ? c->dev : -1, &pi);
    for (unsigned i = 0; i < numAttributes; i++) {
        if (!data[i])
            continue;
        if (!pi.found) {
            /* Not a CUDA pointer: defaults, no error (as documented). */
            switch ((int)attributes[i]) {
            case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned int *)data[i] = 0; break;
            case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[i] = -2; break;
            case CU_POINTER_ATTRIBUTE_CONTEXT:
            case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
            case CU_POINTER_ATTRIBUTE_HOST_POINTER:
            case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
            case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
            case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: *(void **)data[i] = NULL; break;
            case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
            case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: *(size_t *)data[i] = 0; break;
            case CU_POINTER_ATTRIBUTE_BUFFER_ID:
            case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
            case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
            case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *(unsigned long long *)data[i] = 0; break;
            default: *(unsigned char *)data[i] = 0; break;
            }
            continue;
        }
        CUresult r = ptr_attr(data[i], attributes[i], &pi, (uintptr_t)ptr, have_ctx);
        if (r != CUDA_SUCCESS && attributes[i] != CU_POINTER_ATTRIBUTE_HOST_POINTER)
            return r;
        if (r != CUDA_SUCCESS)
            *(void **)data[i] = NULL;
    }
    return CUDA_SUCCESS;
}
