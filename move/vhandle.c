/* Virtual handles (see vhandle.h): the objects, their records, the reverse
 * map from real handles, per-thread virtual context stacks, and the
 * teardown / re-creation of a virtual device's real objects. */
#include "move/vhandle.h"
#include "move/door.h"
#include "move/drv.h"
#include "move/swap.h"
#include "lib/hmap.h"
#include "fatbin/fatbin.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ES_VH_MAX_VDEV 64
#define ES_MAX_LIMITS 8

int es_vh_on; /* set by the shim's configuration (EASYSCALE_MOVE) */

typedef struct es_vctx {
    es_vobj_t h;
    int primary;
    unsigned flags;
    int retains;        /* primary: the application's retains */
    int real_held;      /* primary: the shim holds one real retain */
    int nlimits;
    struct { CUlimit l; size_t v; } limits[ES_MAX_LIMITS];
    int cache_set;
    CUfunc_cache cache;
} es_vctx_t;

typedef struct es_vstream {
    es_vobj_t h;
    unsigned flags;
    int has_prio, prio;
} es_vstream_t;

typedef struct es_vevent {
    es_vobj_t h;
    unsigned flags;
} es_vevent_t;

typedef struct es_global {
    char *name;
    size_t bytes;
    void *saved;        /* content while torn down */
} es_global_t;

typedef struct es_vmodule {
    es_vobj_t h;
    const void *image;
    size_t size;
    int owned;
    unsigned nopt;
    CUjit_option *opts;
    void **vals;
    es_global_t *globals;
    int nglobals;
    int of_library;     /* cuLibraryGetModule's (parent: the library) */
} es_vmodule_t;

typedef struct es_vfunc {
    es_vobj_t h;        /* parent: module, or kernel (cuKernelGetFunction) */
    char *name;
    struct { int attr, value; } *attrs;
    int nattrs;
    int cache_set;
    CUfunc_cache cache;
} es_vfunc_t;

typedef struct es_vlibrary {
    es_vobj_t h;
    const void *code;
    size_t size;
    int owned;
    unsigned njit, nlib;
    CUjit_option *jopts;
    void **jvals;
    CUlibraryOption *lopts;
    void **lvals;
} es_vlibrary_t;

typedef struct es_vkernel {
    es_vobj_t h;
    char *name;
} es_vkernel_t;

typedef struct es_vforeign {
    es_vobj_t h;
    const es_vforeign_ops_t *ops;
    void *rec;
} es_vforeign_t;

/* Every object fits one slot of the handle arena. */
_Static_assert(sizeof(es_vctx_t) <= ES_HARENA_MAX_OBJ && sizeof(es_vstream_t) <= ES_HARENA_MAX_OBJ &&
                   sizeof(es_vevent_t) <= ES_HARENA_MAX_OBJ &&
                   sizeof(es_vmodule_t) <= ES_HARENA_MAX_OBJ &&
                   sizeof(es_vfunc_t) <= ES_HARENA_MAX_OBJ &&
                   sizeof(es_vlibrary_t) <= ES_HARENA_MAX_OBJ &&
                   sizeof(es_vkernel_t) <= ES_HARENA_MAX_OBJ &&
                   sizeof(es_vforeign_t) <= ES_HARENA_MAX_OBJ,
               "a virtual handle object larger than an arena slot");

static pthread_mutex_t es_vh_mu = PTHREAD_MUTEX_INITIALIZER;
static es_vobj_t *es_first, *es_last;
static es_hmap_t es_by_real = ES_HMAP_INIT; /* real -> object */
static es_hmap_t es_live = ES_HMAP_INIT;    /* object -> object */
static es_vctx_t *es_primaries[ES_VH_MAX_VDEV];
static int es_devs[ES_VH_MAX_VDEV] = { [0 ... ES_VH_MAX_VDEV - 1] = -1 };
static uint64_t es_ids = 1;
static unsigned es_gen = 1;

static __thread struct {
    es_vctx_t *stk[ES_VH_MAX_CTX_STACK];
    int n;
    unsigned gen;
} es_tls;

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

static int es_vdev_ok(int v) { return v >= 0 && v < ES_VH_MAX_VDEV; }

/* ---- the object list --------------------------------------------------------------- */

static void *es_obj_new(size_t size, int kind, int vdev, es_vobj_t *parent) /* lock held */
{
    es_vobj_t *o = es_harena_alloc(size);
    if (!o)
        return NULL;
    o->size = (uint32_t)size;
    o->magic = ES_VOBJ_MAGIC;
    o->kind = kind;
    o->vdev = vdev;
    o->parent = parent;
    o->id = es_ids++;
    if (es_hmap_put(&es_live, (uint64_t)(uintptr_t)o, o) != 0) {
        o->real = o;
        es_harena_free(o, size);
        return NULL;
    }
    o->prev = es_last;
    if (es_last)
        es_last->next = o;
    else
        es_first = o;
    es_last = o;
    return o;
}

static void es_set_real(es_vobj_t *o, void *real) /* lock held */
{
    if (o->real)
        es_hmap_del(&es_by_real, (uint64_t)(uintptr_t)o->real);
    o->real = real;
    if (real)
        es_hmap_put(&es_by_real, (uint64_t)(uintptr_t)real, o);
}

static void es_free_record(es_vobj_t *o)
{
    switch (o->kind) {
    case ES_VK_MODULE: {
        es_vmodule_t *m = (es_vmodule_t *)o;
        if (m->owned)
            free((void *)m->image);
        free(m->opts);
        free(m->vals);
        for (int i = 0; i < m->nglobals; i++) {
            free(m->globals[i].name);
            free(m->globals[i].saved);
        }
        free(m->globals);
        break;
    }
    case ES_VK_FUNC:
        free(((es_vfunc_t *)o)->name);
        free(((es_vfunc_t *)o)->attrs);
        break;
    case ES_VK_LIBRARY: {
        es_vlibrary_t *l = (es_vlibrary_t *)o;
        if (l->owned)
            free((void *)l->code);
        free(l->jopts);
        free(l->jvals);
        free(l->lopts);
        free(l->lvals);
        break;
    }
    case ES_VK_KERNEL:
        free(((es_vkernel_t *)o)->name);
        break;
    default:
        break;
    }
}

static void es_obj_free(es_vobj_t *o) /* lock held */
{
    es_set_real(o, NULL);
    es_hmap_del(&es_live, (uint64_t)(uintptr_t)o);
    if (o->prev)
        o->prev->next = o->next;
    else
        es_first = o->next;
    if (o->next)
        o->next->prev = o->prev;
    else
        es_last = o->prev;
    es_free_record(o);
    o->magic = 0;
    o->real = o; /* a stale handle: an address no driver handed out */
    es_harena_free(o, o->size);
}

static es_vobj_t *es_obj_of(const void *h, int kind) /* lock held */
{
    es_vobj_t *o = h ? es_hmap_get(&es_live, (uint64_t)(uintptr_t)h) : NULL;
    return o && o->magic == ES_VOBJ_MAGIC && o->kind == kind ? o : NULL;
}

void *es_vh_from_real(const void *real)
{
    if (!real)
        return NULL;
    pthread_mutex_lock(&es_vh_mu);
    void *o = es_hmap_get(&es_by_real, (uint64_t)(uintptr_t)real);
    pthread_mutex_unlock(&es_vh_mu);
    return o;
}

int es_vh_vdev_of(const void *h)
{
    pthread_mutex_lock(&es_vh_mu);
    es_vobj_t *o = h ? es_hmap_get(&es_live, (uint64_t)(uintptr_t)h) : NULL;
    int v = o && o->magic == ES_VOBJ_MAGIC ? o->vdev : -1;
    pthread_mutex_unlock(&es_vh_mu);
    return v;
}

int es_vh_valid(const void *h, int kind)
{
    pthread_mutex_lock(&es_vh_mu);
    int ok = es_obj_of(h, kind) != NULL;
    pthread_mutex_unlock(&es_vh_mu);
    return ok;
}

/* Children of o (functions of a module, kernels of a library...). */
static void es_free_children(es_vobj_t *o) /* lock held */
{
    for (es_vobj_t *c = es_first, *next; c; c = next) {
        next = c->next;
        if (c->parent == o) {
            es_free_children(c);
            next = c->next;
            es_obj_free(c);
        }
    }
}

/* ---- contexts ------------------------------------------------------------------------- */

static es_vctx_t *es_primary_obj(int vdev) /* lock held */
{
    if (!es_primaries[vdev]) {
        es_vctx_t *c = es_obj_new(sizeof(*c), ES_VK_CTX, vdev, NULL);
        if (!c)
            return NULL;
        c->primary = 1;
        es_primaries[vdev] = c;
    }
    return es_primaries[vdev];
}

CUcontext es_vh_primary(int vdev)
{
    if (!es_vdev_ok(vdev))
        return NULL;
    pthread_mutex_lock(&es_vh_mu);
    es_vctx_t *c = es_primary_obj(vdev);
    pthread_mutex_unlock(&es_vh_mu);
    return (CUcontext)c;
}

CUresult es_vh_primary_retain(CUcontext *out, int vdev, int dev)
{
    CUresult r = CUDA_SUCCESS;
    if (!out || !es_vdev_ok(vdev))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&es_vh_mu);
    es_vctx_t *c = es_primary_obj(vdev);
    if (!c) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    if (!c->real_held) {
        CUcontext real = NULL;
        r = es_drv.cuDevicePrimaryCtxRetain(&real, dev);
        if (r != CUDA_SUCCESS)
            goto out;
        es_set_real(&c->h, real);
        c->real_held = 1;
        es_devs[vdev] = dev;
    }
    c->retains++;
    *out = (CUcontext)c;
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

CUresult es_vh_primary_release(int vdev)
{
    CUresult r = CUDA_SUCCESS;
    if (!es_vdev_ok(vdev))
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&es_vh_mu);
    es_vctx_t *c = es_primaries[vdev];
    if (!c || c->retains == 0) {
        r = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    if (--c->retains == 0 && c->real_held && es_devs[vdev] >= 0) {
        r = es_drv.cuDevicePrimaryCtxRelease_v2(es_devs[vdev]);
        c->real_held = 0;
    }
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

CUresult es_vh_primary_reset(int vdev)
{
    CUresult r = CUDA_SUCCESS;
    if (!es_vdev_ok(vdev))
        return CUDA_ERROR_INVALID_DEVICE;
    es_swap_drop_streams(); /* the swap engine's kept streams live in it */
    pthread_mutex_lock(&es_vh_mu);
    es_vctx_t *c = es_primaries[vdev];
    if (es_devs[vdev] >= 0)
        r = es_drv.cuDevicePrimaryCtxReset_v2(es_devs[vdev]);
    if (r == CUDA_SUCCESS && c) {
        es_free_children(&c->h);
        es_set_real(&c->h, NULL);
        c->retains = 0;
        c->real_held = 0;
    }
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

int es_vh_primary_retains(int vdev)
{
    if (!es_vdev_ok(vdev))
        return 0;
    pthread_mutex_lock(&es_vh_mu);
    int n = es_primaries[vdev] ? es_primaries[vdev]->retains : 0;
    pthread_mutex_unlock(&es_vh_mu);
    return n;
}

static void es_tls_push(es_vctx_t *c)
{
    if (es_tls.n < ES_VH_MAX_CTX_STACK)
        es_tls.stk[es_tls.n++] = c;
}

CUresult es_vh_ctx_create(CUcontext *out, unsigned flags, int vdev, int dev)
{
    CUresult r;
    if (!out || !es_vdev_ok(vdev))
        return CUDA_ERROR_INVALID_VALUE;
    if (es_tls.n >= ES_VH_MAX_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&es_vh_mu);
    es_vctx_t *c = es_obj_new(sizeof(*c), ES_VK_CTX, vdev, NULL);
    if (!c) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    CUcontext real = NULL;
    r = es_drv.cuCtxCreate_v4(&real, NULL, flags, dev);
    if (r != CUDA_SUCCESS) {
        es_obj_free(&c->h);
        goto out;
    }
    c->flags = flags;
    es_set_real(&c->h, real);
    es_devs[vdev] = dev;
    es_tls_push(c); /* the driver made it current */
    es_tls.gen = es_gen;
    *out = (CUcontext)c;
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

CUresult es_vh_ctx_destroy(CUcontext ctx)
{
    CUresult r;
    pthread_mutex_lock(&es_vh_mu);
    es_vctx_t *c = (es_vctx_t *)es_obj_of(ctx, ES_VK_CTX);
    if (!c || c->primary) {
        r = c ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    r = c->h.real ? es_drv.cuCtxDestroy_v2((CUcontext)c->h.real) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS)
        goto out;
    es_set_real(&c->h, NULL); /* destroyed: out of the reverse map */
    if (es_tls.n > 0 && es_tls.stk[es_tls.n - 1] == c)
        es_tls.n--;
    /* streams, events, modules of the context go with it */
    es_free_children(&c->h);
    es_obj_free(&c->h);
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

static es_vctx_t *es_cur(void)
{
    return es_tls.n ? es_tls.stk[es_tls.n - 1] : NULL;
}

/* A thread whose virtual stack is empty while another holder of real
 * handles (the CUDA runtime) made a context current adopts the virtual
 * context the hook names (es_vh_set_adopt). Unlocked: called at the top of
 * the functions that need the current context. */
static CUcontext (*es_adopt_fn)(void);

void es_vh_set_adopt(CUcontext (*fn)(void))
{
    __atomic_store_n(&es_adopt_fn, fn, __ATOMIC_RELEASE);
}

static void es_adopt(void)
{
    if (es_tls.n) /* the common case: one thread-local read */
        return;
    CUcontext (*fn)(void) = __atomic_load_n(&es_adopt_fn, __ATOMIC_ACQUIRE);
    if (!fn)
        return;
    CUcontext c = fn();
    if (c)
        (void)es_vh_set_current(c);
}

CUresult es_vh_ctx_set_limit(CUlimit limit, size_t value)
{
    es_adopt();
    CUresult r;
    pthread_mutex_lock(&es_vh_mu);
    es_vctx_t *c = es_cur();
    if (!c) {
        r = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    r = es_drv.cuCtxSetLimit(limit, value);
    if (r != CUDA_SUCCESS)
        goto out;
    int i;
    for (i = 0; i < c->nlimits && c->limits[i].l != limit; i++)
        ;
    if (i < ES_MAX_LIMITS) {
        c->limits[i].l = limit;
        c->limits[i].v = value;
        if (i == c->nlimits)
            c->nlimits++;
    }
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

CUresult es_vh_ctx_set_cache_config(CUfunc_cache config)
{
    es_adopt();
    CUresult r;
    pthread_mutex_lock(&es_vh_mu);
    es_vctx_t *c = es_cur();
    r = c ? es_drv.cuCtxSetCacheConfig(config) : CUDA_ERROR_INVALID_CONTEXT;
    if (r == CUDA_SUCCESS) {
        c->cache_set = 1;
        c->cache = config;
    }
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

CUresult es_vh_set_current(CUcontext ctx)
{
    CUresult r;
    pthread_mutex_lock(&es_vh_mu);
    es_vctx_t *c = NULL;
    if (ctx && !(c = (es_vctx_t *)es_obj_of(ctx, ES_VK_CTX))) {
        r = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    r = es_drv.cuCtxSetCurrent(c ? (CUcontext)c->h.real : NULL);
    if (r != CUDA_SUCCESS)
        goto out;
    if (!c) {
        if (es_tls.n > 0)
            es_tls.n--;
    } else if (es_tls.n == 0) {
        es_tls.stk[es_tls.n++] = c;
    } else {
        es_tls.stk[es_tls.n - 1] = c;
    }
    es_tls.gen = es_gen;
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

CUresult es_vh_push_current(CUcontext ctx)
{
    CUresult r;
    pthread_mutex_lock(&es_vh_mu);
    es_vctx_t *c = (es_vctx_t *)es_obj_of(ctx, ES_VK_CTX);
    if (!c) {
        r = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    if (es_tls.n >= ES_VH_MAX_CTX_STACK) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    r = es_drv.cuCtxPushCurrent_v2((CUcontext)c->h.real);
    if (r == CUDA_SUCCESS) {
        es_tls.stk[es_tls.n++] = c;
        es_tls.gen = es_gen;
    }
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

CUresult es_vh_pop_current(CUcontext *out)
{
    if (es_tls.n == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext real = NULL;
    CUresult r = es_drv.cuCtxPopCurrent_v2(&real);
    if (r != CUDA_SUCCESS)
        return r;
    es_vctx_t *c = es_tls.stk[--es_tls.n];
    if (out)
        *out = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUcontext es_vh_current(void)
{
    es_adopt();
    return (CUcontext)es_cur();
}

unsigned es_vh_generation(void)
{
    return __atomic_load_n(&es_gen, __ATOMIC_ACQUIRE);
}

int es_vh_rebind(void)
{
    int rc = 0;
    CUcontext junk;
    /* Empty the driver's stack of this thread (it may hold destroyed
     * contexts), then push the real contexts behind the virtual stack. */
    for (int i = 0; i < 4 * ES_VH_MAX_CTX_STACK; i++)
        if (es_drv.cuCtxPopCurrent_v2(&junk) != CUDA_SUCCESS)
            break;
    pthread_mutex_lock(&es_vh_mu);
    for (int i = 0; i < es_tls.n; i++) {
        void *real = es_tls.stk[i]->h.real;
        if (!real || es_drv.cuCtxPushCurrent_v2((CUcontext)real) != CUDA_SUCCESS)
            rc = -EIO;
    }
    es_tls.gen = es_gen;
    pthread_mutex_unlock(&es_vh_mu);
    return rc;
}

/* ---- streams and events ------------------------------------------------------------------- */

CUresult es_vh_stream_create(CUstream *out, unsigned flags, int has_prio, int priority)
{
    es_adopt();
    CUresult r;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&es_vh_mu);
    es_vctx_t *c = es_cur();
    if (!c) {
        r = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    CUstream real = NULL;
    r = has_prio ? es_drv.cuStreamCreateWithPriority(&real, flags, priority)
                 : es_drv.cuStreamCreate(&real, flags);
    if (r != CUDA_SUCCESS)
        goto out;
    es_vstream_t *s = es_obj_new(sizeof(*s), ES_VK_STREAM, c->h.vdev, &c->h);
    if (!s) {
        es_drv.cuStreamDestroy_v2(real);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    s->flags = flags;
    s->has_prio = has_prio;
    s->prio = priority;
    es_set_real(&s->h, real);
    *out = (CUstream)s;
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

CUresult es_vh_stream_destroy(CUstream s)
{
    CUresult r;
    pthread_mutex_lock(&es_vh_mu);
    es_vobj_t *o = es_obj_of(s, ES_VK_STREAM);
    if (!o) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    r = o->real ? es_drv.cuStreamDestroy_v2((CUstream)o->real) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        es_obj_free(o);
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

CUresult es_vh_event_create(CUevent *out, unsigned flags)
{
    es_adopt();
    CUresult r;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&es_vh_mu);
    es_vctx_t *c = es_cur();
    if (!c) {
        r = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    CUevent real = NULL;
    r = es_drv.cuEventCreate(&real, flags);
    if (r != CUDA_SUCCESS)
        goto out;
    es_vevent_t *e = es_obj_new(sizeof(*e), ES_VK_EVENT, c->h.vdev, &c->h);
    if (!e) {
        es_drv.cuEventDestroy_v2(real);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    e->flags = flags;
    es_set_real(&e->h, real);
    *out = (CUevent)e;
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

CUresult es_vh_event_destroy(CUevent e)
{
    CUresult r;
    pthread_mutex_lock(&es_vh_mu);
    es_vobj_t *o = es_obj_of(e, ES_VK_EVENT);
    if (!o) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    r = o->real ? es_drv.cuEventDestroy_v2((CUevent)o->real) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        es_obj_free(o);
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

/* ---- modules ------------------------------------------------------------------------------- */

/* Whether p lies in a loaded shared object or the executable (then it
 * stays valid while that object is loaded: not copied). */
static int es_in_loaded_object(const void *p)
{
    Dl_info di;
    return dladdr(p, &di) && di.dli_fbase;
}

/* The image and its size; a copy unless it lives in a loaded object. */
static int es_keep_image(const void *image, size_t size, const void **keep, size_t *ksize,
                         int *owned)
{
    if (!image)
        return -EINVAL;
    if (!size && es_image_probe(image, SIZE_MAX, &size) <= 0)
        return -EINVAL;
    *ksize = size;
    if (es_in_loaded_object(image)) {
        *keep = image;
        *owned = 0;
        return 0;
    }
    void *c = malloc(size + 1);
    if (!c)
        return -ENOMEM;
    memcpy(c, image, size);
    ((char *)c)[size] = 0; /* PTX: terminated */
    *keep = c;
    *owned = 1;
    return 0;
}

static int es_jit_output_only(CUjit_option o)
{
    return o == CU_JIT_WALL_TIME || o == CU_JIT_INFO_LOG_BUFFER ||
           o == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES || o == CU_JIT_ERROR_LOG_BUFFER ||
           o == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
}

/* Keeps the input options (a re-load writes no log into the application's
 * buffers, long gone by then). */
static int es_keep_jit(unsigned n, const CUjit_option *o, void *const *v, unsigned *kn,
                       CUjit_option **ko, void ***kv)
{
    *kn = 0;
    *ko = NULL;
    *kv = NULL;
    if (!n || !o || !v)
        return 0;
    *ko = calloc(n, sizeof(**ko));
    *kv = calloc(n, sizeof(**kv));
    if (!*ko || !*kv)
        return -ENOMEM;
    for (unsigned i = 0; i < n; i++)
        if (!es_jit_output_only(o[i])) {
            (*ko)[*kn] = o[i];
            (*kv)[*kn] = v[i];
            (*kn)++;
        }
    return 0;
}

static CUresult es_module_load_real(es_vmodule_t *m, CUmodule *real)
{
    if (m->of_library)
        return es_drv.cuLibraryGetModule(real, (CUlibrary)m->h.parent->real);
    if (m->nopt)
        return es_drv.cuModuleLoadDataEx(real, m->image, m->nopt, m->opts, m->vals);
    return es_drv.cuModuleLoadData(real, m->image);
}

CUresult es_vh_module_load(CUmodule *out, const void *image, size_t size, unsigned nopt,
                           CUjit_option *opts, void **vals)
{
    es_adopt();
    CUresult r;
    if (!out || !image)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&es_vh_mu);
    es_vctx_t *c = es_cur();
    if (!c) {
        r = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    CUmodule real = NULL;
    r = nopt ? es_drv.cuModuleLoadDataEx(&real, image, nopt, opts, vals)
             : es_drv.cuModuleLoadData(&real, image);
    if (r != CUDA_SUCCESS)
        goto out;
    es_vmodule_t *m = es_obj_new(sizeof(*m), ES_VK_MODULE, c->h.vdev, &c->h);
    if (!m || es_keep_image(image, size, &m->image, &m->size, &m->owned) != 0 ||
        es_keep_jit(nopt, opts, vals, &m->nopt, &m->opts, &m->vals) != 0) {
        es_drv.cuModuleUnload(real);
        if (m)
            es_obj_free(&m->h);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    es_set_real(&m->h, real);
    *out = (CUmodule)m;
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

CUresult es_vh_module_load_file(CUmodule *out, const char *fname)
{
    if (!out || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    FILE *f = fopen(fname, "rb");
    if (!f)
        return CUDA_ERROR_FILE_NOT_FOUND;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            buf = b;
        }
        size_t n = fread(buf + len, 1, 65536, f);
        len += n;
        if (n == 0)
            break;
    }
    fclose(f);
    buf[len] = 0;
    /* the file's content is the image (re-read nothing after a move) */
    CUresult r = es_vh_module_load(out, buf, len, 0, NULL, NULL);
    free(buf);
    return r;
}

CUresult es_vh_module_unload(CUmodule mod)
{
    CUresult r;
    pthread_mutex_lock(&es_vh_mu);
    es_vmodule_t *m = (es_vmodule_t *)es_obj_of(mod, ES_VK_MODULE);
    if (!m || m->of_library) {
        r = CUDA_ERROR_INVALID_HANDLE; /* a library's module goes with the library */
        goto out;
    }
    r = m->h.real ? es_drv.cuModuleUnload((CUmodule)m->h.real) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) {
        es_free_children(&m->h);
        es_obj_free(&m->h);
    }
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

/* The child of parent of kind (lock held): the one named name when name_off
 * (the offset of its name in the object) is non-zero, else the first. */
static es_vobj_t *es_child_find(es_vobj_t *parent, int kind, size_t name_off, const char *name)
{
    for (es_vobj_t *o = es_first; o; o = o->next) {
        if (o->parent != parent || o->kind != kind)
            continue;
        if (!name_off)
            return o;
        const char *n = *(char **)((char *)o + name_off);
        if ((!n && !name) || (n && name && strcmp(n, name) == 0))
            return o;
    }
    return NULL;
}

/* How a child's real handle is had from its parent's (es_child_get). */
typedef CUresult (*es_child_real_fn)(void **real, void *parent_real, const char *name);

/* The virtual child of kind of the parent handle h (of parent_kind) named
 * name, made with get() the first time it is asked for; size and name_off:
 * the child object's (name_off 0: no name, one child of that kind). The
 * get-or-create of cuModuleGetFunction, cuLibraryGetKernel,
 * cuLibraryGetModule and cuKernelGetFunction. */
static CUresult es_child_get(void **out, const void *h, int parent_kind, int kind,
                             const char *name, size_t size, size_t name_off,
                             es_child_real_fn get)
{
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&es_vh_mu);
    es_vobj_t *p = es_obj_of(h, parent_kind);
    if (!p) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    if (parent_kind == ES_VK_KERNEL)
        name = ((es_vkernel_t *)p)->name; /* its function has its name */
    es_vobj_t *c = es_child_find(p, kind, name_off, name);
    if (!c) {
        void *real = NULL;
        if ((r = get(&real, p->real, name)) != CUDA_SUCCESS)
            goto out;
        if (!(c = es_obj_new(size, kind, p->vdev, p)) ||
            (name_off && !(*(char **)((char *)c + name_off) = strdup(name)))) {
            if (c)
                es_obj_free(c);
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        if (kind == ES_VK_MODULE)
            ((es_vmodule_t *)c)->of_library = 1;
        es_set_real(c, real);
    }
    *out = c;
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

static CUresult es_real_func_of_module(void **real, void *mod, const char *name)
{
    return es_drv.cuModuleGetFunction((CUfunction *)real, (CUmodule)mod, name);
}

static CUresult es_real_kernel_of_library(void **real, void *lib, const char *name)
{
    return es_drv.cuLibraryGetKernel((CUkernel *)real, (CUlibrary)lib, name);
}

static CUresult es_real_module_of_library(void **real, void *lib, const char *name)
{
    (void)name;
    return es_drv.cuLibraryGetModule((CUmodule *)real, (CUlibrary)lib);
}

static CUresult es_real_func_of_kernel(void **real, void *kern, const char *name)
{
    (void)name;
    return es_drv.cuKernelGetFunction((CUfunction *)real, (CUkernel)kern);
}

CUresult es_vh_module_get_function(CUfunction *out, CUmodule mod, const char *name)
{
    if (!out || !name)
        return CUDA_ERROR_INVALID_VALUE;
    return es_child_get((void **)out, mod, ES_VK_MODULE, ES_VK_FUNC, name, sizeof(es_vfunc_t),
                        offsetof(es_vfunc_t, name), es_real_func_of_module);
}

CUresult es_vh_module_get_global(CUdeviceptr *dptr, size_t *bytes, CUmodule mod, const char *name)
{
    CUresult r;
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&es_vh_mu);
    es_vmodule_t *m = (es_vmodule_t *)es_obj_of(mod, ES_VK_MODULE);
    if (!m) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    CUdeviceptr p = 0;
    size_t n = 0;
    r = es_drv.cuModuleGetGlobal_v2(&p, &n, (CUmodule)m->h.real, name);
    if (r != CUDA_SUCCESS)
        goto out;
    int i;
    for (i = 0; i < m->nglobals && strcmp(m->globals[i].name, name) != 0; i++)
        ;
    if (i == m->nglobals) {
        es_global_t *g = realloc(m->globals, (size_t)(i + 1) * sizeof(*g));
        char *nm = strdup(name);
        if (g)
            m->globals = g;
        if (!g || !nm) {
            free(nm);
            r = CUDA_ERROR_OUT_OF_MEMORY;
            goto out;
        }
        m->globals[i] = (es_global_t){ nm, n, NULL };
        m->nglobals++;
    }
    if (dptr)
        *dptr = p;
    if (bytes)
        *bytes = n;
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

static int es_attr_record(es_vfunc_t *f, int attr, int value)
{
    int i;
    for (i = 0; i < f->nattrs && f->attrs[i].attr != attr; i++)
        ;
    if (i == f->nattrs) {
        void *a = realloc(f->attrs, (size_t)(i + 1) * sizeof(*f->attrs));
        if (!a)
            return -ENOMEM;
        f->attrs = a;
        f->nattrs++;
    }
    f->attrs[i].attr = attr;
    f->attrs[i].value = value;
    return 0;
}

CUresult es_vh_func_set_attribute(CUfunction fn, CUfunction_attribute attr, int value)
{
    CUresult r;
    pthread_mutex_lock(&es_vh_mu);
    es_vfunc_t *f = (es_vfunc_t *)es_obj_of(fn, ES_VK_FUNC);
    r = f ? es_drv.cuFuncSetAttribute((CUfunction)f->h.real, attr, value)
          : CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS && es_attr_record(f, (int)attr, value) != 0)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

CUresult es_vh_func_set_cache_config(CUfunction fn, CUfunc_cache config)
{
    CUresult r;
    pthread_mutex_lock(&es_vh_mu);
    es_vfunc_t *f = (es_vfunc_t *)es_obj_of(fn, ES_VK_FUNC);
    r = f ? es_drv.cuFuncSetCacheConfig((CUfunction)f->h.real, config)
          : CUDA_ERROR_INVALID_HANDLE;
    if (r == CUDA_SUCCESS) {
        f->cache_set = 1;
        f->cache = config;
    }
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

/* ---- libraries and kernels ------------------------------------------------------------------ */

static CUresult es_library_load_real(es_vlibrary_t *l, CUlibrary *real)
{
    return es_drv.cuLibraryLoadData(real, l->code, l->jopts, l->jvals, l->njit, l->lopts,
                                    l->lvals, l->nlib);
}

CUresult es_vh_library_load(CUlibrary *out, const void *code, size_t size, unsigned njit,
                            CUjit_option *jopts, void **jvals, unsigned nlib,
                            CUlibraryOption *lopts, void **lvals)
{
    es_adopt();
    CUresult r;
    if (!out || !code)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&es_vh_mu);
    CUlibrary real = NULL;
    r = es_drv.cuLibraryLoadData(&real, code, jopts, jvals, njit, lopts, lvals, nlib);
    if (r != CUDA_SUCCESS)
        goto out;
    /* Libraries are context-independent: they follow the current vdev. */
    es_vctx_t *c = es_cur();
    es_vlibrary_t *l = es_obj_new(sizeof(*l), ES_VK_LIBRARY, c ? c->h.vdev : 0, NULL);
    int bad = !l || es_keep_image(code, size, &l->code, &l->size, &l->owned) != 0 ||
              es_keep_jit(njit, jopts, jvals, &l->njit, &l->jopts, &l->jvals) != 0;
    if (!bad && nlib && lopts && lvals) {
        l->lopts = calloc(nlib, sizeof(*l->lopts));
        l->lvals = calloc(nlib, sizeof(*l->lvals));
        bad = !l->lopts || !l->lvals;
        if (!bad) {
            memcpy(l->lopts, lopts, nlib * sizeof(*lopts));
            memcpy(l->lvals, lvals, nlib * sizeof(*lvals));
            l->nlib = nlib;
        }
    }
    if (bad) {
        es_drv.cuLibraryUnload(real);
        if (l)
            es_obj_free(&l->h);
        r = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    es_set_real(&l->h, real);
    *out = (CUlibrary)l;
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

CUresult es_vh_library_unload(CUlibrary lib)
{
    CUresult r;
    pthread_mutex_lock(&es_vh_mu);
    es_vobj_t *l = es_obj_of(lib, ES_VK_LIBRARY);
    if (!l) {
        r = CUDA_ERROR_INVALID_HANDLE;
        goto out;
    }
    r = l->real ? es_drv.cuLibraryUnload((CUlibrary)l->real) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) {
        es_free_children(l);
        es_obj_free(l);
    }
out:
    pthread_mutex_unlock(&es_vh_mu);
    return r;
}

CUresult es_vh_library_get_kernel(CUkernel *out, CUlibrary lib, const char *name)
{
    if (!out || !name)
        return CUDA_ERROR_INVALID_VALUE;
    return es_child_get((void **)out, lib, ES_VK_LIBRARY, ES_VK_KERNEL, name,
                        sizeof(es_vkernel_t), offsetof(es_vkernel_t, name),
                        es_real_kernel_of_library);
}

/* One module object per library (its module in the current context). */
CUresult es_vh_library_get_module(CUmodule *out, CUlibrary lib)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    return es_child_get((void **)out, lib, ES_VK_LIBRARY, ES_VK_MODULE, NULL,
                        sizeof(es_vmodule_t), 0, es_real_module_of_library);
}

CUresult es_vh_kernel_get_function(CUfunction *out, CUkernel kern)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    return es_child_get((void **)out, kern, ES_VK_KERNEL, ES_VK_FUNC, NULL, sizeof(es_vfunc_t),
                        offsetof(es_vfunc_t, name), es_real_func_of_kernel);
}

/* ---- foreign objects ----------------------------------------------------------------------- */

int es_vh_foreign_new(void **out, void *real, const es_vforeign_ops_t *ops, void *rec)
{
    es_adopt();
    int rc = 0;
    if (!out || !real || !ops || !ops->create || !ops->destroy)
        return -EINVAL;
    pthread_mutex_lock(&es_vh_mu);
    es_vctx_t *c = es_cur();
    es_vforeign_t *f = es_obj_new(sizeof(*f), ES_VK_FOREIGN, c ? c->h.vdev : 0,
                                  c ? &c->h : NULL);
    if (!f) {
        rc = -ENOMEM;
        goto out;
    }
    f->ops = ops;
    f->rec = rec;
    es_set_real(&f->h, real);
    *out = f;
out:
    pthread_mutex_unlock(&es_vh_mu);
    return rc;
}

int es_vh_foreign_free(void *h, void **rec)
{
    int rc = 0;
    pthread_mutex_lock(&es_vh_mu);
    es_vforeign_t *f = (es_vforeign_t *)es_obj_of(h, ES_VK_FOREIGN);
    if (!f) {
        rc = -EINVAL;
        goto out;
    }
    if (f->h.real)
        rc = f->ops->destroy(f->h.real, f->rec);
    if (rec)
        *rec = f->rec;
    es_obj_free(&f->h);
out:
    pthread_mutex_unlock(&es_vh_mu);
    return rc;
}

/* ---- moving --------------------------------------------------------------------------------- */

int es_vh_device(int vdev)
{
    if (!es_vdev_ok(vdev))
        return -1;
    pthread_mutex_lock(&es_vh_mu);
    int d = es_devs[vdev];
    pthread_mutex_unlock(&es_vh_mu);
    return d;
}

static es_hmap_t es_graphs = ES_HMAP_INIT;

void es_vh_graph_made(const void *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&es_vh_mu);
    int fresh = !es_hmap_get(&es_graphs, (uint64_t)(uintptr_t)g) &&
                es_hmap_put(&es_graphs, (uint64_t)(uintptr_t)g, (void *)g) == 0;
    pthread_mutex_unlock(&es_vh_mu);
    if (fresh)
        es_door_hold_begin(); /* moves wait until it is gone */
}

void es_vh_graph_gone(const void *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&es_vh_mu);
    int was = es_hmap_del(&es_graphs, (uint64_t)(uintptr_t)g) != NULL;
    pthread_mutex_unlock(&es_vh_mu);
    if (was)
        es_door_hold_end();
}

int es_vh_graphs(void)
{
    pthread_mutex_lock(&es_vh_mu);
    int n = (int)es_graphs.live;
    pthread_mutex_unlock(&es_vh_mu);
    return n;
}

size_t es_vh_count(int vdev, int kind)
{
    size_t n = 0;
    pthread_mutex_lock(&es_vh_mu);
    for (es_vobj_t *o = es_first; o; o = o->next)
        if ((vdev < 0 || o->vdev == vdev) && o->kind == kind)
            n++;
    pthread_mutex_unlock(&es_vh_mu);
    return n;
}

/* Makes context c current (real) for work on its objects. */
static CUresult es_bind(es_vobj_t *c)
{
    return es_drv.cuCtxSetCurrent(c ? (CUcontext)c->real : NULL);
}

int es_vh_drain(int vdev, char *msg, size_t msglen)
{
    int rc = 0;
    pthread_mutex_lock(&es_vh_mu);
    CUcontext prev = NULL;
    es_drv.cuCtxGetCurrent(&prev);
    for (es_vobj_t *o = es_first; o; o = o->next) {
        if (o->vdev != vdev || !o->real)
            continue;
        CUresult r = CUDA_SUCCESS;
        if (o->kind == ES_VK_STREAM)
            r = es_drv.cuStreamSynchronize((CUstream)o->real);
        else if (o->kind == ES_VK_CTX &&
                 (!((es_vctx_t *)o)->primary || ((es_vctx_t *)o)->real_held)) {
            r = es_bind(o);
            if (r == CUDA_SUCCESS)
                r = es_drv.cuCtxSynchronize();
        }
        if (r != CUDA_SUCCESS && !rc) {
            es_msg(msg, msglen, "draining vdev %d: %s", vdev, es_drv_errname(r));
            rc = -EIO;
        }
    }
    es_drv.cuCtxSetCurrent(prev);
    pthread_mutex_unlock(&es_vh_mu);
    return rc;
}

/* Saves a module's globals the application asked for (lock held, context
 * of the module current). */
static void es_globals_save(es_vmodule_t *m)
{
    for (int i = 0; i < m->nglobals; i++) {
        es_global_t *g = &m->globals[i];
        CUdeviceptr p;
        size_t n;
        free(g->saved);
        g->saved = NULL;
        if (es_drv.cuModuleGetGlobal_v2(&p, &n, (CUmodule)m->h.real, g->name) != CUDA_SUCCESS ||
            !(g->saved = malloc(n ? n : 1)))
            continue;
        g->bytes = n;
        CUstream s = NULL;
        if (es_drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
            es_drv.cuMemcpyDtoHAsync_v2(g->saved, p, n, s) != CUDA_SUCCESS ||
            es_drv.cuStreamSynchronize(s) != CUDA_SUCCESS) {
            free(g->saved);
            g->saved = NULL;
        }
        if (s)
            es_drv.cuStreamDestroy_v2(s);
    }
}

static CUresult es_globals_restore(es_vmodule_t *m)
{
    for (int i = 0; i < m->nglobals; i++) {
        es_global_t *g = &m->globals[i];
        CUdeviceptr p;
        size_t n;
        if (!g->saved)
            continue;
        CUresult r = es_drv.cuModuleGetGlobal_v2(&p, &n, (CUmodule)m->h.real, g->name);
        if (r != CUDA_SUCCESS)
            return r;
        CUstream s = NULL;
        r = es_drv.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
        if (r == CUDA_SUCCESS)
            r = es_drv.cuMemcpyHtoDAsync_v2(p, g->saved, n < g->bytes ? n : g->bytes, s);
        if (r == CUDA_SUCCESS)
            r = es_drv.cuStreamSynchronize(s);
        if (s)
            es_drv.cuStreamDestroy_v2(s);
        if (r != CUDA_SUCCESS)
            return r;
        free(g->saved);
        g->saved = NULL;
    }
    return CUDA_SUCCESS;
}

/* Destroys the real object behind o (lock held). */
static void es_teardown_one(es_vobj_t *o)
{
    void *real = o->real;
    if (!real)
        return;
    switch (o->kind) {
    case ES_VK_FOREIGN: {
        es_vforeign_t *f = (es_vforeign_t *)o;
        es_bind(o->parent);
        f->ops->destroy(real, f->rec);
        break;
    }
    case ES_VK_FUNC:
    case ES_VK_KERNEL:
        break; /* go with their module or library */
    case ES_VK_MODULE:
        if (((es_vmodule_t *)o)->of_library)
            break; /* goes with its library */
        es_bind(o->parent);
        es_globals_save((es_vmodule_t *)o);
        es_drv.cuModuleUnload((CUmodule)real);
        break;
    case ES_VK_LIBRARY:
        es_drv.cuLibraryUnload((CUlibrary)real);
        break;
    case ES_VK_EVENT:
        es_drv.cuEventDestroy_v2((CUevent)real);
        break;
    case ES_VK_STREAM:
        es_drv.cuStreamDestroy_v2((CUstream)real);
        break;
    case ES_VK_CTX: {
        es_vctx_t *c = (es_vctx_t *)o;
        if (!c->primary) {
            es_drv.cuCtxDestroy_v2((CUcontext)real);
        } else if (c->real_held) {
            int dev = es_devs[o->vdev];
            es_drv.cuDevicePrimaryCtxRelease_v2(dev);
            c->real_held = 0;
        }
        break;
    }
    default:
        break;
    }
    es_set_real(o, NULL);
}

int es_vh_teardown(int vdev, char *msg, size_t msglen)
{
    if (!es_vdev_ok(vdev)) {
        es_msg(msg, msglen, "no vdev %d", vdev);
        return -EINVAL;
    }
    es_swap_drop_streams(); /* before the contexts they were made in go */
    pthread_mutex_lock(&es_vh_mu);
    for (es_vobj_t *o = es_last; o; o = o->prev)
        if (o->vdev == vdev)
            es_teardown_one(o);
    es_devs[vdev] = -1;
    es_drv.cuCtxSetCurrent(NULL);
    CUcontext junk;
    for (int i = 0; i < 4 * ES_VH_MAX_CTX_STACK; i++)
        if (es_drv.cuCtxPopCurrent_v2(&junk) != CUDA_SUCCESS)
            break;
    __atomic_add_fetch(&es_gen, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&es_vh_mu);
    return 0;
}

/* Re-creates the real object behind o on device dev (lock held). */
static CUresult es_recreate_one(es_vobj_t *o, int dev)
{
    CUresult r = CUDA_SUCCESS;
    void *real = NULL;
    switch (o->kind) {
    case ES_VK_CTX: {
        es_vctx_t *c = (es_vctx_t *)o;
        if (c->primary) {
            if (c->retains == 0)
                return CUDA_SUCCESS; /* not held by the application now */
            r = es_drv.cuDevicePrimaryCtxRetain((CUcontext *)&real, dev);
            if (r == CUDA_SUCCESS)
                c->real_held = 1;
        } else {
            r = es_drv.cuCtxCreate_v4((CUcontext *)&real, NULL, c->flags, dev);
            if (r == CUDA_SUCCESS) {
                CUcontext junk;
                es_drv.cuCtxPopCurrent_v2(&junk);
            }
        }
        if (r != CUDA_SUCCESS)
            break;
        es_set_real(o, real);
        r = es_bind(o);
        for (int i = 0; r == CUDA_SUCCESS && i < c->nlimits; i++)
            r = es_drv.cuCtxSetLimit(c->limits[i].l, c->limits[i].v);
        if (r == CUDA_SUCCESS && c->cache_set)
            r = es_drv.cuCtxSetCacheConfig(c->cache);
        return r;
    }
    case ES_VK_STREAM: {
        es_vstream_t *s = (es_vstream_t *)o;
        r = es_bind(o->parent);
        if (r != CUDA_SUCCESS)
            break;
        if (s->has_prio) {
            /* the new device's range: the same place in it */
            int least = 0, greatest = 0, p = s->prio;
            if (es_drv.cuCtxGetStreamPriorityRange(&least, &greatest) == CUDA_SUCCESS) {
                if (p > least)
                    p = least;
                if (p < greatest)
                    p = greatest;
            }
            r = es_drv.cuStreamCreateWithPriority((CUstream *)&real, s->flags, p);
        } else {
            r = es_drv.cuStreamCreate((CUstream *)&real, s->flags);
        }
        break;
    }
    case ES_VK_EVENT:
        r = es_bind(o->parent);
        if (r == CUDA_SUCCESS)
            r = es_drv.cuEventCreate((CUevent *)&real, ((es_vevent_t *)o)->flags);
        break;
    case ES_VK_MODULE:
        /* a library's module: in the current context (the vdev's) */
        r = ((es_vmodule_t *)o)->of_library ? CUDA_SUCCESS : es_bind(o->parent);
        if (r == CUDA_SUCCESS)
            r = es_module_load_real((es_vmodule_t *)o, (CUmodule *)&real);
        if (r == CUDA_SUCCESS) {
            es_set_real(o, real);
            return es_globals_restore((es_vmodule_t *)o);
        }
        break;
    case ES_VK_LIBRARY:
        r = es_library_load_real((es_vlibrary_t *)o, (CUlibrary *)&real);
        break;
    case ES_VK_FUNC: {
        es_vfunc_t *f = (es_vfunc_t *)o;
        if (!o->parent || !o->parent->real)
            return CUDA_ERROR_INVALID_HANDLE;
        if (o->parent->kind == ES_VK_KERNEL)
            r = es_drv.cuKernelGetFunction((CUfunction *)&real, (CUkernel)o->parent->real);
        else
            r = es_drv.cuModuleGetFunction((CUfunction *)&real, (CUmodule)o->parent->real,
                                           f->name);
        for (int i = 0; r == CUDA_SUCCESS && i < f->nattrs; i++)
            r = es_drv.cuFuncSetAttribute((CUfunction)real, (CUfunction_attribute)f->attrs[i].attr,
                                          f->attrs[i].value);
        if (r == CUDA_SUCCESS && f->cache_set)
            r = es_drv.cuFuncSetCacheConfig((CUfunction)real, f->cache);
        break;
    }
    case ES_VK_KERNEL:
        if (!o->parent || !o->parent->real)
            return CUDA_ERROR_INVALID_HANDLE;
        r = es_drv.cuLibraryGetKernel((CUkernel *)&real, (CUlibrary)o->parent->real,
                                      ((es_vkernel_t *)o)->name);
        break;
    case ES_VK_FOREIGN: {
        es_vforeign_t *f = (es_vforeign_t *)o;
        r = es_bind(o->parent);
        if (r == CUDA_SUCCESS && f->ops->create(&real, f->rec, dev) != 0)
            r = CUDA_ERROR_UNKNOWN;
        break;
    }
    default:
        break;
    }
    if (r == CUDA_SUCCESS)
        es_set_real(o, real);
    return r;
}

static const char *es_kind_name(int k)
{
    static const char *const n[] = { "?", "context", "stream", "event", "module",
                                     "function", "library", "kernel", "foreign object" };
    return k > 0 && k < ES_VK_COUNT ? n[k] : "?";
}

int es_vh_recreate(int vdev, int dev, char *msg, size_t msglen)
{
    int rc = 0;
    if (!es_vdev_ok(vdev)) {
        es_msg(msg, msglen, "no vdev %d", vdev);
        return -EINVAL;
    }
    pthread_mutex_lock(&es_vh_mu);
    es_devs[vdev] = dev;
    for (es_vobj_t *o = es_first; o; o = o->next) {
        if (o->vdev != vdev || o->real)
            continue;
        CUresult r = es_recreate_one(o, dev);
        if (r != CUDA_SUCCESS) {
            es_msg(msg, msglen, "re-creating a %s of vdev %d on device %d: %s%s",
                   es_kind_name(o->kind), vdev, dev, es_drv_errname(r),
                   o->kind == ES_VK_MODULE ? " (no code in its image for that device)" : "");
            rc = r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
            break;
        }
    }
    if (rc) {
        for (es_vobj_t *o = es_last; o; o = o->prev)
            if (o->vdev == vdev)
                es_teardown_one(o);
        es_devs[vdev] = -1;
    }
    __atomic_add_fetch(&es_gen, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&es_vh_mu);
    if (!rc)
        rc = es_vh_rebind() ? -EIO : 0;
    return rc;
}

void es_vh_reset(void)
{
    pthread_mutex_lock(&es_vh_mu);
    while (es_last) {
        es_vobj_t *o = es_last;
        if (o->kind == ES_VK_CTX && ((es_vctx_t *)o)->primary)
            es_primaries[o->vdev] = NULL;
        es_teardown_one(o);
        es_obj_free(o);
    }
    for (int v = 0; v < ES_VH_MAX_VDEV; v++)
        es_devs[v] = -1;
    es_tls.n = 0;
    pthread_mutex_unlock(&es_vh_mu);
}
