/* Run-time kernel audit of libeasyscale.so (EASYSCALE_AUDIT=off|warn|strict).
 *
 * Every module image the application loads (cuModuleLoad*, cuLibraryLoad*,
 * and through them the fatbins the CUDA runtime registers) is audited once,
 * when it is loaded (audit/audit.h), never on the launch path. The names of
 * its float-atomic kernels are kept per module/library handle. When the
 * application gets a handle of such a kernel (cuModuleGetFunction,
 * cuLibraryGetKernel, cuKernelGetFunction) the handle goes into a small hash
 * set; a launch looks there only while the set is not empty
 * (es_launch_gate counts its entries), so launches of a process without flagged kernels
 * stay pass-throughs.
 *
 * Verdicts: float-atomic kernels are flagged (warn: logged with the host call
 * stack the first time each is launched; strict: every launch refused with
 * CUDA_ERROR_NOT_SUPPORTED, the message logged the first time). cas-loop and
 * unknown-arch kernels are logged at info level when the module is loaded,
 * never flagged. An image the audit cannot read is logged (warning) once and
 * loads as without the shim, in strict mode too.
 *
 * Contract: the caller (intercept/cuda.c) calls these only when es_cfg.audit
 * is not ES_AUDIT_MODE_OFF and after the real call succeeded. Thread-safe:
 * registrations take es_state_lock; es_modaudit_launch takes no lock and
 * allocates nothing unless the handle is flagged. Audit records and kernel
 * names are never freed (bounded by the distinct images a process loads), so
 * a lookup racing an unload reads valid memory.
 */
#ifndef ES_MODAUDIT_H
#define ES_MODAUDIT_H

#include <stddef.h>
#include <stdint.h>

/* Live entries of the flagged-handle set (read with an acquire load); each
 * is also counted in es_launch_gate (shim/real.h), the launch path's flag. */
extern unsigned es_modaudit_live;

/* The flagged-handle set: open addressing, keys written last with release
 * stores under es_state_lock, read with acquire loads without a lock. A table
 * that grows is replaced (es_modaudit_set) and kept, never freed. */
#define ES_TOMB ((uintptr_t)1)

struct es_kinfo;
typedef struct es_fent {
    uintptr_t key;          /* 0 empty, ES_TOMB removed (atomic) */
    struct es_kinfo *info;
    const void *owner;
} es_fent_t;

typedef struct es_fset {
    struct es_fset *prev;   /* the table this one replaced (kept reachable) */
    size_t cap;             /* power of two */
    size_t used;            /* live + tombstones */
    es_fent_t e[];
} es_fset_t;

extern es_fset_t *es_modaudit_set;

static inline size_t es_modaudit_hash(uintptr_t k)
{
    uint64_t x = (uint64_t)k;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

/* Whether f is a handle of a flagged kernel: one lookup, no lock (the
 * launch wrappers call it inline, then es_modaudit_launch for a hit). */
static inline int es_modaudit_flagged(const void *f)
{
    es_fset_t *t = __atomic_load_n(&es_modaudit_set, __ATOMIC_ACQUIRE);
    if (!t || !f)
        return 0;
    size_t m = t->cap - 1, i = es_modaudit_hash((uintptr_t)f) & m;
    for (size_t n = 0; n < t->cap; n++, i = (i + 1) & m) {
        uintptr_t key = __atomic_load_n(&t->e[i].key, __ATOMIC_ACQUIRE);
        if (key == (uintptr_t)f)
            return 1;
        if (key == 0)
            break;
    }
    return 0;
}

/* Owners (module or library handles) whose image has flagged kernels. */
extern unsigned es_modaudit_flagged_owners;

/* An image was loaded as `owner` (CUmodule or CUlibrary). size: SIZE_MAX
 * when unknown (cuModuleLoadData). api names the call for the log. */
void es_modaudit_loaded(const void *owner, const void *image, size_t size, const char *api);

/* Same for a file (cuModuleLoad, cuLibraryLoadFromFile): reads it. */
void es_modaudit_loaded_file(const void *owner, const char *path, const char *api);

/* owner (and whatever was derived from it) was unloaded. */
void es_modaudit_unloaded(const void *owner);

/* alias shares owner's audit (cuLibraryGetModule); unloaded with it. */
void es_modaudit_alias(const void *alias, const void *owner);

/* The application got `handle` (CUfunction or CUkernel) for kernel `name`
 * of owner: recorded when the kernel is flagged. */
void es_modaudit_got(const void *handle, const void *owner, const char *name);

/* handle was derived from parent (cuKernelGetFunction): flagged if the
 * parent is. */
void es_modaudit_derived(const void *handle, const void *parent);

/* Launch check of f by api (e.g. "cuLaunchKernel"): 0 to launch, or
 * -EPERM when strict mode refuses it. Logs as described above. */
int es_modaudit_launch(const void *f, const char *api);

/* The host call stack of the caller, outside libeasyscale.so, one frame per
 * line ("    #0 func+0x1c (/path/lib.so)"), into buf. Returns the number of
 * frames written. Uses libunwind (dlopen'ed, RTLD_LOCAL, on first use) and
 * dladdr; falls back to glibc's backtrace() without libunwind. */
int es_modaudit_stack(char *buf, size_t len, int max_frames);

#endif
