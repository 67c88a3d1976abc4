/* Virtual handles (docs/MOVING.md, section 4): the CUDA handles an
 * application holds are pointers to shim objects whose first member is the
 * current real handle, so that the real objects can be destroyed on one
 * device and re-created on another while the application's values stay.
 *
 * Kinds: contexts (primary per virtual device, and created), streams,
 * events, modules (with their image), functions, libraries, kernels, and
 * "foreign" objects whose creation and destruction the caller supplies
 * (cuBLAS and cuDNN handles). Each object records what re-creating it needs.
 * Every object belongs to a virtual device (vdev): the device ordinal the
 * application uses; es_vh_recreate puts a vdev's objects on a real device.
 *
 * Translation (the hot path): es_vh_real(h) is two compares and one load.
 * Objects live in the handle arena (lib/harena.h): a value outside it
 * (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD, a value the shim never
 * handed out) passes through unchanged, and the driver judges it. A
 * destroyed object's real handle is its own address, which no driver
 * handed out: a call on a stale handle gets the driver's invalid-handle
 * status, never a read of freed memory and never the NULL (default)
 * stream or context.
 *
 * Current contexts: the driver's current context is per thread; so is the
 * shim's record of it (a stack of virtual contexts per thread). After a move
 * each thread calls es_vh_rebind() before its next driver call (the door
 * does it, move/door.h): that binds the real contexts behind its
 * virtual stack.
 *
 * Contract: es_drv_load() first. Creation and destruction functions stand
 * for driver entry points and return that entry point's CUresult; they take
 * one registry lock (never on a translation). es_vh_drain, es_vh_teardown
 * and es_vh_recreate run at a safe point (no other thread uses the vdev's
 * handles) and return 0 or a negative errno with a one-line reason in msg.
 * A handle used after its destruction reaches the driver as an invalid
 * handle (see Translation) until its slot is reused by a new object.
 */
#ifndef ES_MOVE_VHANDLE_H
#define ES_MOVE_VHANDLE_H

#include "lib/harena.h"

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#define ES_VOBJ_MAGIC 0x45535648u /* "ESVH" */
#define ES_VH_MAX_CTX_STACK 16

enum es_vkind {
    ES_VK_CTX = 1,
    ES_VK_STREAM,
    ES_VK_EVENT,
    ES_VK_MODULE,
    ES_VK_FUNC,
    ES_VK_LIBRARY,
    ES_VK_KERNEL,
    ES_VK_FOREIGN,
    ES_VK_COUNT
};

typedef struct es_vobj {
    void *real;                  /* first member: the current real handle
                                    (NULL while torn down) */
    uint32_t magic;
    int kind;
    int vdev;
    uint32_t size;               /* bytes of the whole object (its arena slot) */
    struct es_vobj *parent;      /* context of a stream/event/module, module
                                    of a function, library of a kernel,
                                    kernel of a function got from it */
    struct es_vobj *next, *prev; /* every object, in creation order */
    uint64_t id;
} es_vobj_t;

/* The operations of a foreign object (cuBLAS/cuDNN handle...): create a
 * real object on the current context (device dev) from rec, destroy one.
 * Return 0 or a negative errno. */
typedef struct es_vforeign_ops {
    const char *name;
    int (*create)(void **real, void *rec, int dev);
    int (*destroy)(void *real, void *rec);
} es_vforeign_ops_t;

/* ---- translation (no lock, no allocation) ---------------------------------------- */

/* Whether handles are virtual (set once at start-up, before any handle is
 * made; 0 by default: every translation is then the identity). */
extern int es_vh_on;

static inline void *es_vh_real(const void *h)
{
    return (__builtin_expect(es_vh_on, 1) && __builtin_expect(es_harena_has(h), 1))
               ? es_harena_word(h)
               : (void *)h;
}

/* (NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are never in the arena.) */
static inline CUstream es_vh_stream(CUstream s)
{
    return (__builtin_expect(es_vh_on, 1) && __builtin_expect(es_harena_has(s), 1))
               ? (CUstream)es_harena_word(s)
               : s;
}

/* The vdev of a live virtual object, or -1. */
int es_vh_vdev_of(const void *h);

/* The virtual object of a real handle (getters that return a handle), or
 * NULL when the shim did not hand it out. */
void *es_vh_from_real(const void *real);
/* Whether h is a live virtual object of kind (validation off the hot path). */
int es_vh_valid(const void *h, int kind);

/* ---- contexts ------------------------------------------------------------------------ */

/* The primary context of vdev (one object per vdev, the same value for the
 * life of the process); the real one is retained while the application
 * holds at least one retain. dev: the real device of vdev now. */
CUresult es_vh_primary_retain(CUcontext *out, int vdev, int dev);
CUresult es_vh_primary_release(int vdev);
/* The retain count the application holds on vdev's primary context. */
int es_vh_primary_retains(int vdev);
/* cuDevicePrimaryCtxReset: the real primary context reset, every object
 * of it freed, the application's retains dropped (the handle value stays
 * vdev's primary context). */
CUresult es_vh_primary_reset(int vdev);
/* The primary context object of vdev, created if needed (no retain). */
CUcontext es_vh_primary(int vdev);

CUresult es_vh_ctx_create(CUcontext *out, unsigned flags, int vdev, int dev);
CUresult es_vh_ctx_destroy(CUcontext ctx);
/* Settings of the current context, recorded and re-applied after a move. */
CUresult es_vh_ctx_set_limit(CUlimit limit, size_t value);
CUresult es_vh_ctx_set_cache_config(CUfunc_cache config);

/* Adoption: fn, called when a thread needs its current context while its
 * virtual stack is empty, returns the virtual context standing for the
 * real one current there (made current by a holder of real handles: the
 * CUDA runtime, intercept/cuda.c), or NULL; that context is then made the
 * thread's current (es_vh_set_current). NULL: none (the default). */
void es_vh_set_adopt(CUcontext (*fn)(void));

/* The calling thread's virtual context stack (NULL when empty / none). */
CUresult es_vh_set_current(CUcontext ctx);
CUresult es_vh_push_current(CUcontext ctx);
CUresult es_vh_pop_current(CUcontext *out);
CUcontext es_vh_current(void);
/* Binds the real contexts behind the calling thread's virtual stack (after
 * a move). Returns 0 or -EIO. */
int es_vh_rebind(void);
/* Bumped by every es_vh_recreate: a thread whose stack was bound before
 * must call es_vh_rebind. */
unsigned es_vh_generation(void);

/* ---- streams and events ------------------------------------------------------------------ */

/* priority: as cuStreamCreateWithPriority; has_prio 0 for cuStreamCreate. */
CUresult es_vh_stream_create(CUstream *out, unsigned flags, int has_prio, int priority);
CUresult es_vh_stream_destroy(CUstream s);
CUresult es_vh_event_create(CUevent *out, unsigned flags);
CUresult es_vh_event_destroy(CUevent e);

/* ---- modules, functions, libraries, kernels -------------------------------------------- */

/* image: a fatbin, cubin or PTX image; size 0 when unknown (read from its
 * headers). Options are recorded for the re-load (output-only options, the
 * logs and wall time, are given to this load only). */
CUresult es_vh_module_load(CUmodule *out, const void *image, size_t size, unsigned nopt,
                           CUjit_option *opts, void **vals);
CUresult es_vh_module_load_file(CUmodule *out, const char *fname);
CUresult es_vh_module_unload(CUmodule m);
/* The same function object for the same (module, name). */
CUresult es_vh_module_get_function(CUfunction *out, CUmodule m, const char *name);
/* A global's address now (it changes with a move; its content is carried). */
CUresult es_vh_module_get_global(CUdeviceptr *dptr, size_t *bytes, CUmodule m, const char *name);
CUresult es_vh_func_set_attribute(CUfunction f, CUfunction_attribute attr, int value);
CUresult es_vh_func_set_cache_config(CUfunction f, CUfunc_cache config);

CUresult es_vh_library_load(CUlibrary *out, const void *code, size_t size, unsigned njit,
                            CUjit_option *jopts, void **jvals, unsigned nlib,
                            CUlibraryOption *lopts, void **lvals);
CUresult es_vh_library_unload(CUlibrary l);
CUresult es_vh_library_get_kernel(CUkernel *out, CUlibrary l, const char *name);
/* The library's module in the current context (one object per library). */
CUresult es_vh_library_get_module(CUmodule *out, CUlibrary l);
CUresult es_vh_kernel_get_function(CUfunction *out, CUkernel k);

/* ---- foreign objects ----------------------------------------------------------------------- */

/* Wraps a real object made by the caller on the current context; rec is
 * the caller's record (kept, passed to ops). */
int es_vh_foreign_new(void **out, void *real, const es_vforeign_ops_t *ops, void *rec);
/* Destroys the real object (ops->destroy) and the wrapper; returns the
 * record through *rec for the caller to free. */
int es_vh_foreign_free(void *h, void **rec);

/* ---- moving --------------------------------------------------------------------------------- */

/* Waits for all work of vdev's streams and contexts. */
int es_vh_drain(int vdev, char *msg, size_t msglen);
/* Destroys every real object of vdev (foreign objects, functions, modules,
 * libraries, events, streams, contexts; module globals' contents saved
 * first); the virtual objects stay. The calling thread is left with no
 * current context. */
int es_vh_teardown(int vdev, char *msg, size_t msglen);
/* Re-creates every real object of vdev on real device dev, in creation
 * order; on failure what was re-created is torn down again (the vdev stays
 * torn down). Binds the calling thread's stack (es_vh_rebind). */
int es_vh_recreate(int vdev, int dev, char *msg, size_t msglen);
/* The real device of vdev's objects now (-1: torn down, or never set). */
int es_vh_device(int vdev);

/* CUDA graphs alive (captured or instantiated): they hold real handles,
 * so while any is alive moves wait (move/door.h holds them off). es_vh_graph_made records a
 * graph or executable graph handle; es_vh_graph_gone forgets it (a handle
 * never recorded is ignored). */
void es_vh_graph_made(const void *g);
void es_vh_graph_gone(const void *g);
int es_vh_graphs(void);

/* Counts of live objects of a kind for vdev (-1: every vdev). */
size_t es_vh_count(int vdev, int kind);

/* Frees every object (tests). */
void es_vh_reset(void);

#endif
