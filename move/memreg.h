/* The device-memory registry of an EST process (docs/MOVING.md, section 2):
 * every device allocation the application makes, so that the swap engine
 * (move/swap.h) can move its content while its address stays.
 *
 * - cuMemAlloc, cuMemAllocPitch, cuMemAllocAsync and pool allocations are
 *   backed by the registry itself with VMM (reserve + create + map + access):
 *   es_mem_alloc. Requests of at most half a granule share slabs (one granule
 *   cut in ES_MEMREG_UNIT-byte units); larger ones get their own
 *   reservation, rounded up to the granule.
 * - The application's own VMM allocations get stand-in handles: the
 *   CUmemGenericAllocationHandle the application holds is a pointer to the
 *   registry's es_phys_t, whose first member is the current real handle
 *   (es_vmm_*).
 * - Pinned host memory is an anonymous mapping registered portable
 *   (es_host_*), valid in every context and across context teardown.
 *
 * Devices: the registry speaks of virtual devices (vdev: the ordinal the
 * application uses) and maps each to a real device ordinal of the driver
 * with es_memreg_set_device; until set, the resolver's answer (the virtual
 * devices of device/vdev.h: several ESTs' ordinals on one GPU), else the
 * same ordinal. A vdev whose device is -1 is parked: it has no physical
 * memory.
 *
 * Contract: call es_memreg_init() after es_drv_load() (move/drv.h) and
 * cuInit. Every es_mem_/es_vmm_/es_host_ function implements a driver entry
 * point and returns that entry point's CUresult; the others return 0 or a
 * negative errno. All functions are thread-safe (one recursive registry
 * lock, never held across a wait for device work except by the swap
 * engine, which holds it for a whole move at a safe point). The functions
 * that need a context (allocation on a device, host registration) use the
 * calling thread's current context, as the driver entry points they stand
 * for do.
 */
#ifndef ES_MOVE_MEMREG_H
#define ES_MOVE_MEMREG_H

#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define ES_MEMREG_MAX_VDEV 64
#define ES_MEMREG_UNIT 512        /* slab unit: cuMemAllocPitch's alignment */
#define ES_PHYS_MAGIC 0x45535048u /* "ESPH" */

enum es_phys_owner {
    ES_OWN_ALLOC = 1, /* one cuMemAlloc-family allocation, own reservation */
    ES_OWN_SLAB,      /* a slab of small cuMemAlloc-family allocations */
    ES_OWN_APP,       /* the application's cuMemCreate (stand-in handle) */
    ES_OWN_IMPORT,    /* the application's cuMemImportFromShareableHandle */
};

enum es_alloc_kind { ES_ALLOC_PLAIN = 1, ES_ALLOC_PITCH, ES_ALLOC_ASYNC, ES_ALLOC_POOL };

/* One mapping of a physical object: [va, va + size) shows the object from
 * byte off. access[v] is the CUmemAccess_flags the application granted to
 * vdev v (application mappings; shim-owned memory is read-write for its
 * vdev and its peers, computed when applied). */
typedef struct es_map {
    uintptr_t va;
    size_t size;
    size_t off;
    unsigned char access[ES_MEMREG_MAX_VDEV];
} es_map_t;

/* A physical object: the unit the swap engine moves. */
typedef struct es_phys {
    CUmemGenericAllocationHandle real; /* first member: the current real
                                          handle; 0 while parked */
    uint32_t magic;                    /* ES_PHYS_MAGIC while alive */
    int owner;                         /* enum es_phys_owner */
    int vdev;
    size_t size;                       /* a multiple of the granule */
    CUmemAllocationProp prop;          /* as the application gave it (APP) */
    int app_refs;                      /* application handle references */
    int fd;                            /* IMPORT: our duplicate, else -1 */
    es_map_t *maps;
    int nmaps, cmaps;
    uintptr_t resv;                    /* ALLOC/SLAB: the registry's reservation */
    /* slab bookkeeping (SLAB): one bit per unit, and units in use */
    uint64_t *bits;
    size_t used_units;
    /* swap state (move/swap.c) */
    void *park;                        /* host copy (shared mapping of a memfd) or NULL */
    int park_fd;                       /* the memfd behind park, or -1 */
    int park_valid;                    /* park holds the device content */
    int park_registered;               /* registered with the current context */
    unsigned long long park_h;         /* park is VMM host memory: its handle (else 0) */
    uint64_t park_devs;                /* ... and the devices granted access to it */
    uint64_t *sums;                    /* per-chunk hashes of the park content */
    size_t nsums;
    int sums_valid;
    /* kept memory (es_swap_out_keep): the real memory of a parked object
     * left on device kept_dev, and per chunk whether its host copy was
     * written since (es_swap_park_write); kept is 0 otherwise */
    CUmemGenericAllocationHandle kept;
    int kept_dev;
    unsigned char *stale;
    uint64_t id;                       /* creation order */
    int uncounted;                     /* not in the footprint (es_memreg_uncounted) */
    struct es_phys *next, *prev;       /* the vdev's list */
} es_phys_t;

/* ---- configuration -------------------------------------------------------- */

/* Reads the VMM granularity of every device (the largest is used, so that
 * an address range fits every device an EST may move to). Idempotent.
 * Returns 0, or -ENODEV / -EIO. */
int es_memreg_init(void);
size_t es_memreg_granularity(void);

/* Real device of vdev (-1: parked); es_memreg_set_device returns 0 or
 * -EINVAL. */
int es_memreg_set_device(int vdev, int dev);
int es_memreg_device(int vdev);
/* The real device of a vdev not set (yet): resolve(vdev), a device or -1;
 * NULL: the same ordinal when the driver has it. */
void es_memreg_set_resolver(int (*resolve)(int vdev));

/* Peers: vdev accessor may access vdev owner's memory (cuCtxEnablePeerAccess
 * seen from the owner's memory). Granted at once on resident memory and
 * again after every move. Returns a CUresult. */
CUresult es_memreg_peer_enable(int owner, int accessor);
CUresult es_memreg_peer_disable(int owner, int accessor);

/* ---- cuMemAlloc family ------------------------------------------------------ */

/* size > 0; kind an es_alloc_kind (reported by es_mem_find). */
CUresult es_mem_alloc(int vdev, size_t size, int kind, CUdeviceptr *out);
/* Frees an allocation at its base now (the caller has synchronised what may
 * still use it, as cuMemFree does). CUDA_ERROR_INVALID_VALUE when p is not
 * the base of a live allocation of the registry. */
CUresult es_mem_free(CUdeviceptr p);
/* Stream-ordered free: the memory is freed once the work queued on stream
 * (a real handle of the current context) so far has completed. */
CUresult es_mem_free_async(CUdeviceptr p, CUstream stream);
/* Completes pending stream-ordered frees whose work is done (wait: all of
 * them, synchronising). Returns the number still pending. */
int es_mem_poll_frees(int wait);
/* The allocation containing p: 0 and its base, requested size, vdev, kind
 * (any out pointer may be NULL), or -ENOENT. */
int es_mem_find(CUdeviceptr p, CUdeviceptr *base, size_t *size, int *vdev, int *kind);

/* Whether [p, p + n) starts inside an allocation of the cuMemAlloc family
 * and runs past its end (requested size): the copy and memset wrappers then
 * answer CUDA_ERROR_INVALID_VALUE, as the driver does for its own
 * allocations (the VMM backing maps whole granules, so the driver alone
 * would let such a copy through). 0 for addresses in no such allocation
 * (host memory, the application's VMM: the driver decides). Lock-free (a
 * sequence counter over a sorted copy of the allocations' ranges); a few
 * loads when nothing is allocated. Any thread, any time. */
typedef struct es_span {
    uint64_t lo, hi;
} es_span_t;
extern size_t es_memreg_nspans;
extern unsigned es_memreg_span_seq;
extern es_span_t *es_memreg_spans;
static inline int es_memreg_range_bad(CUdeviceptr p, size_t n)
{
    if (!__atomic_load_n(&es_memreg_nspans, __ATOMIC_RELAXED))
        return 0;
    for (;;) {
        unsigned s = __atomic_load_n(&es_memreg_span_seq, __ATOMIC_ACQUIRE);
        if (s & 1)
            continue;
        const es_span_t *v = __atomic_load_n(&es_memreg_spans, __ATOMIC_ACQUIRE);
        size_t lo = 0, hi = __atomic_load_n(&es_memreg_nspans, __ATOMIC_RELAXED);
        while (lo < hi) { /* the first entry starting after p */
            size_t mid = (lo + hi) / 2;
            if (__atomic_load_n(&v[mid].lo, __ATOMIC_RELAXED) <= (uint64_t)p)
                lo = mid + 1;
            else
                hi = mid;
        }
        int bad = 0;
        if (lo > 0) {
            uint64_t end = __atomic_load_n(&v[lo - 1].hi, __ATOMIC_RELAXED);
            bad = (uint64_t)p < end && n > end - (uint64_t)p;
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&es_memreg_span_seq, __ATOMIC_RELAXED) == s)
            return bad;
    }
}

/* ---- the application's VMM ----------------------------------------------------- */

/* prop->location.id is a vdev. */
CUresult es_vmm_create(CUmemGenericAllocationHandle *out, size_t size,
                       const CUmemAllocationProp *prop, unsigned long long flags);
CUresult es_vmm_release(CUmemGenericAllocationHandle h);
CUresult es_vmm_map(CUdeviceptr va, size_t size, size_t off, CUmemGenericAllocationHandle h,
                    unsigned long long flags);
CUresult es_vmm_unmap(CUdeviceptr va, size_t size);
/* desc[i].location.id are vdevs. */
CUresult es_vmm_set_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc,
                           size_t count);
CUresult es_vmm_retain(CUmemGenericAllocationHandle *out, void *addr);
CUresult es_vmm_props(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h);
CUresult es_vmm_export(void *shareable, CUmemGenericAllocationHandle h,
                       CUmemAllocationHandleType type, unsigned long long flags);
CUresult es_vmm_import(CUmemGenericAllocationHandle *out, void *os_handle,
                       CUmemAllocationHandleType type, int vdev);
/* Whether [va, va + size) meets memory the registry reserved for the
 * cuMemAlloc family (the application may not unmap, re-protect or free
 * those ranges). */
int es_memreg_owns_range(CUdeviceptr va, size_t size);

/* The live stand-in h names, or NULL (never dereferences an unknown h). */
es_phys_t *es_vmm_lookup(CUmemGenericAllocationHandle h);

/* ---- pinned host memory ------------------------------------------------------------ */

/* flags: CU_MEMHOSTALLOC_* as given to cuMemHostAlloc (remembered). */
CUresult es_host_alloc(void **out, size_t size, unsigned flags);
CUresult es_host_free(void *p);
/* The application's flags of the allocation containing p: 0, or -ENOENT. */
int es_host_flags(const void *p, unsigned *flags);
/* cuMemHostRegister / cuMemHostUnregister of the application's own memory:
 * registered (portable added, so it is valid in every context) and
 * remembered, so that a move registers it again; its flags as given
 * (CU_MEMHOSTREGISTER_*). defer: only remembered, registered by the next
 * es_host_register_all (the EST is parked: no context to register in).
 * Unregistering memory not registered here is the driver's call (and its
 * error). */
CUresult es_host_register(void *p, size_t size, unsigned flags, int defer);
CUresult es_host_unregister(void *p);
/* Drops / renews every registration with the driver (before the contexts go
 * away, and in the new current context after a move). Return 0 or -EIO
 * (the first failure; the others are still tried). */
int es_host_unregister_all(void);
int es_host_register_all(void);

/* ---- for the swap engine --------------------------------------------------------------- */

/* The registry's lock and the vdev's list of physical objects (creation
 * order). Hold the lock while walking. */
void es_memreg_lock(void);
void es_memreg_unlock(void);
es_phys_t *es_memreg_first(int vdev);

/* Builds the access descriptors of mapping m of ph for the current device
 * table (dedup per real device, parked vdevs skipped) and applies them.
 * Lock held. */
CUresult es_memreg_apply_access(es_phys_t *ph, const es_map_t *m);

/* The swap engine's primitives on one object (lock held):
 * create its real memory on device dev (an imported object is imported
 * again from its descriptor; dev is then ignored); map it at every
 * recorded mapping and apply the access rights (all or none: on failure
 * the mappings made are undone); unmap every mapping; release the real
 * memory (real becomes 0). */
CUresult es_phys_create_real(es_phys_t *ph, int dev);
CUresult es_phys_map_real(es_phys_t *ph);
/* Frees ph's host copy (move/swap.c made it): unregistered or unmapped,
 * released. Lock held. */
void es_phys_park_free(es_phys_t *ph);
CUresult es_phys_unmap_real(es_phys_t *ph);
void es_phys_release_real(es_phys_t *ph);
/* Releases an object's kept memory (es_phys_t.kept), if any. */
void es_phys_release_kept(es_phys_t *ph);

/* Physical bytes the registry holds on real devices for vdev (0 when
 * parked) and in total. */
size_t es_memreg_resident_bytes(int vdev);

/* Physical bytes the registry holds on any device (the application's own
 * memory and the shim's cuMemAlloc backing; imports and what was made
 * uncounted excluded): one atomic load, no lock (heartbeats read it from
 * another thread). It is what the controller places an EST by. */
uint64_t es_memreg_footprint(void);
/* On the calling thread: the cuMemCreate objects made while on (>0 calls
 * more than off) stay out of the footprint for their lifetime. For memory
 * the shim's own machinery holds and gives up again where it does not fit
 * (the collectives' device staging: set up at every hold, the host
 * transport where it cannot be had), so that a heartbeat sent while it is
 * set up does not make the EST look larger than what it must bring. */
void es_memreg_uncounted(int on);
/* For the swap engine: physical memory of an object released outside
 * es_phys_release_real (a migration's old memory). */
void es_memreg_footprint_sub(const es_phys_t *ph);

/* Frees everything of every vdev (tests; at exit the driver does it). */
void es_memreg_reset(void);

#endif
