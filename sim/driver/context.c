/* simcuda contexts: primary contexts, created contexts, the per-thread
 * context stack. Context objects are never freed (a destroyed one is only
 * removed from the handle registry), so a stale handle is safe to compare
 * and is refused with CUDA_ERROR_INVALID_CONTEXT; a destroyed context's
 * object is reused only after many more contexts have been destroyed. */
#include "sim/driver/internal.h"
#include "sim/driver/capture.h"

#include <cudaProfiler.h>

#include <stdlib.h>
#include <string.h>

#define CTX_STACK_MAX 64
static __thread sim_ctx_t *t_stack[CTX_STACK_MAX];
static __thread int t_depth;
static _Atomic unsigned long long g_ctx_ids;
static pthread_mutex_t g_ctx_mu = PTHREAD_MUTEX_INITIALIZER;

/* Destroyed contexts wait in a ring before their objects are reused, so that
 * a thread that still has a recently destroyed one current is told
 * CUDA_ERROR_CONTEXT_IS_DESTROYED; the number of objects stays bounded. */
#define CTX_QUARANTINE 256
static sim_ctx_t *g_ctx_ring[CTX_QUARANTINE];
static unsigned g_ctx_ring_n;     /* contexts retired so far */
static sim_ctx_t *g_ctx_free;     /* out of quarantine, to reuse */

/* Active contexts, for the peer-access matrix. */
static pthread_mutex_t g_live_mu = PTHREAD_MUTEX_INITIALIZER;
static sim_ctx_t **g_live;
static size_t g_nlive, g_clive;

static void live_add(sim_ctx_t *c)
{
    pthread_mutex_lock(&g_live_mu);
    if (g_nlive == g_clive) {
        size_t n = g_clive ? g_clive * 2 : 64;
        sim_ctx_t **a = realloc(g_live, n * sizeof(*a));
        if (a) {
            g_live = a;
            g_clive = n;
        }
    }
    if (g_nlive < g_clive)
        g_live[g_nlive++] = c;
    pthread_mutex_unlock(&g_live_mu);
}

static void live_del(sim_ctx_t *c)
{
    pthread_mutex_lock(&g_live_mu);
    for (size_t i = 0; i < g_nlive; i++)
        if (g_live[i] == c) {
            g_live[i] = g_live[--g_nlive];
            break;
        }
    pthread_mutex_unlock(&g_live_mu);
}

/* m[x][y] = 1 when a live context of device x has peer access to a live
 * context of device y: then device x's work reaches device y's memory. */
void sim_ctx_peer_matrix(unsigned char m[SIM_MAX_DEVICES][SIM_MAX_DEVICES])
{
    memset(m, 0, (size_t)SIM_MAX_DEVICES * SIM_MAX_DEVICES);
    pthread_mutex_lock(&g_live_mu);
    for (size_t i = 0; i < g_nlive; i++) {
        sim_ctx_t *c = g_live[i];
        pthread_mutex_lock(&c->mu);
        for (int k = 0; k < c->npeers; k++) {
            sim_ctx_t *p = c->peers[k].c;
            if (sim_ctx_valid(p) && p->id == c->peers[k].id)
                m[c->dev][p->dev] = 1;
        }
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&g_live_mu);
}

void sim_ctx_fork_reset(void)
{
    pthread_mutex_init(&g_ctx_mu, NULL);
    pthread_mutex_init(&g_live_mu, NULL);
    g_live = NULL;
    g_nlive = g_clive = 0;
    /* The parent's dead contexts (their locks as they were) are not reused. */
    memset(g_ctx_ring, 0, sizeof(g_ctx_ring));
    g_ctx_ring_n = 0;
    g_ctx_free = NULL;
    /* The calling thread's stack referred to the parent's contexts. */
    t_depth = 0;
}

int sim_ctx_valid(sim_ctx_t *c)
{
    return c && sim_reg_has(c, SIM_H_CTX);
}

sim_ctx_t *sim_ctx_current(void)
{
    return t_depth > 0 ? t_stack[t_depth - 1] : NULL;
}

void sim_ctx_bind(sim_ctx_t *c)
{
    t_stack[0] = c;
    t_depth = 1;
}

CUresult sim_ctx_get(sim_ctx_t **out)
{
    SIM_CHECK_INIT();
    sim_ctx_t *c = sim_ctx_current();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!sim_ctx_valid(c))
        /* cuCtxDestroy: a context destroyed while current to other threads
         * "will remain current to those threads, and attempting to access
         * ctx from those threads will result in the error
         * CUDA_ERROR_CONTEXT_IS_DESTROYED". A released primary context is
         * only inactive. */
        return c->is_primary ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_CONTEXT_IS_DESTROYED;
    CUresult sticky = SIM_STICKY();
    if (sticky)
        return sticky;
    *out = c;
    return CUDA_SUCCESS;
}

/* The context named by a handle, or the current one for NULL. */
static CUresult ctx_or_current(CUcontext ctx, sim_ctx_t **out)
{
    SIM_CHECK_INIT();
    if (!ctx)
        return sim_ctx_get(out);
    if (!sim_ctx_valid((sim_ctx_t *)ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult sticky = SIM_STICKY();
    if (sticky)
        return sticky;
    *out = (sim_ctx_t *)ctx;
    return CUDA_SUCCESS;
}

/* Context creation flags: known bits only, and one scheduling mode (AUTO,
 * SPIN, YIELD or BLOCKING_SYNC; the SCHED field is not a bit set). */
static int ctx_flags_ok(unsigned flags)
{
    unsigned valid = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX |
                     CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE | CU_CTX_SYNC_MEMOPS;
    unsigned sched = flags & CU_CTX_SCHED_MASK;
    return !(flags & ~valid) && (sched == CU_CTX_SCHED_AUTO || sched == CU_CTX_SCHED_SPIN ||
                                 sched == CU_CTX_SCHED_YIELD || sched == CU_CTX_SCHED_BLOCKING_SYNC);
}

static CUresult ctx_activate(sim_ctx_t *c, unsigned flags)
{
    /* Its device's server first (isolation): a device that cannot start
     * (or was lost) has no context. */
    CUresult r = sim_dc_start(c->dev);
    if (r != CUDA_SUCCESS)
        return r;
    c->flags = flags;
    c->id = atomic_fetch_add(&g_ctx_ids, 1) + 1;
    memset(c->limits, 0, sizeof(c->limits));
    c->limits[CU_LIMIT_STACK_SIZE] = 1024;
    c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
    c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
    c->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
    c->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
    c->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
    pthread_mutex_lock(&c->mu);
    c->streams = NULL;
    c->npeers = 0;
    pthread_mutex_unlock(&c->mu);
    c->legacy = sim_stream_new(c, SIM_STREAM_LEGACY, 0, 0);
    if (!c->legacy)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->active = 1;
    sim_reg_add(c, SIM_H_CTX);
    live_add(c);
    return CUDA_SUCCESS;
}

/* Waits for all work, destroys streams, frees the context's memory. */
void sim_ctx_teardown(sim_ctx_t *c)
{
    sim_ctx_sync(c);
    sim_reg_del(c);
    live_del(c);
    c->active = 0;
    /* Under the list's lock: a stopping worker takes itself off the list
     * (under that lock) before its object can be reused. */
    pthread_mutex_lock(&c->mu);
    for (sim_stream_t *s = c->streams; s; s = s->next)
        sim_stream_release(s);
    c->streams = NULL;
    pthread_mutex_unlock(&c->mu);
    if (c->legacy) {
        sim_stream_release(c->legacy);
        c->legacy = NULL;
    }
    sim_mem_ctx_destroyed(c);
    sim_dc_peers_changed(); /* its peer access, and access to it, are gone */
}

/* ---- primary contexts ---------------------------------------------------------- */
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    SIM_CHECK_INIT();
    CUresult sticky = SIM_STICKY();
    if (sticky)
        return sticky;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    sim_device_t *d = sim_dev(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&g_ctx_mu);
    sim_ctx_t *c = d->primary;
    if (!c->active)
        r = ctx_activate(c, d->primary_flags);
    if (r == CUDA_SUCCESS) {
        c->refs++;
        *pctx = (CUcontext)c;
    }
    pthread_mutex_unlock(&g_ctx_mu);
    return r;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    SIM_CHECK_INIT();
    sim_device_t *d = sim_dev(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&g_ctx_mu);
    sim_ctx_t *c = d->primary;
    if (c->refs <= 0)
        r = CUDA_ERROR_INVALID_CONTEXT; /* "has not been previously retained" */
    else if (--c->refs == 0 && c->active)
        sim_ctx_teardown(c);
    pthread_mutex_unlock(&g_ctx_mu);
    return r;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    SIM_CHECK_INIT();
    sim_device_t *d = sim_dev(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&g_ctx_mu);
    sim_ctx_t *c = d->primary;
    if (c->active)
        sim_ctx_teardown(c);
    /* "Resetting the primary context does not release it": the retain count
     * stays, and releasing after a reset is safe. */
    d->primary_flags = 0;
    pthread_mutex_unlock(&g_ctx_mu);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    SIM_CHECK_INIT();
    sim_device_t *d = sim_dev(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_ctx_mu);
    *flags = d->primary->active ? d->primary->flags : d->primary_flags;
    *active = d->primary->active;
    pthread_mutex_unlock(&g_ctx_mu);
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    SIM_CHECK_INIT();
    sim_device_t *d = sim_dev(dev);
    if (!d)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!ctx_flags_ok(flags))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_ctx_mu);
    d->primary_flags = flags;
    if (d->primary->active)
        d->primary->flags = flags;
    pthread_mutex_unlock(&g_ctx_mu);
    return CUDA_SUCCESS;
}

/* ---- created contexts ------------------------------------------------------------- */

static void ctx_retire(sim_ctx_t *c) /* g_ctx_mu held */
{
    sim_ctx_teardown(c);
    sim_ctx_t **slot = &g_ctx_ring[g_ctx_ring_n++ % CTX_QUARANTINE];
    if (*slot) {
        (*slot)->next_free = g_ctx_free;
        g_ctx_free = *slot;
    }
    *slot = c;
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    SIM_CHECK_INIT();
    CUresult sticky = SIM_STICKY();
    if (sticky)
        return sticky;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_dev(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!ctx_flags_ok(flags))
        return CUDA_ERROR_INVALID_VALUE;
    if (t_depth >= CTX_STACK_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&g_ctx_mu);
    sim_ctx_t *c = g_ctx_free;
    if (c)
        g_ctx_free = c->next_free;
    pthread_mutex_unlock(&g_ctx_mu);
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c)
            return CUDA_ERROR_OUT_OF_MEMORY;
        pthread_mutex_init(&c->mu, NULL);
    }
    c->dev = dev;
    CUresult r = ctx_activate(c, flags);
    if (r != CUDA_SUCCESS) {
        pthread_mutex_lock(&g_ctx_mu);
        c->next_free = g_ctx_free;
        g_ctx_free = c;
        pthread_mutex_unlock(&g_ctx_mu);
        return r;
    }
    t_stack[t_depth++] = c;
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                        unsigned int flags, CUdevice dev)
{
    if (numParams < 0 || (numParams > 0 && !paramsArray))
        return CUDA_ERROR_INVALID_VALUE;
    if (numParams > 0)
        return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
    return ctx_create(pctx, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    if (params && (params->numExecAffinityParams > 0 || params->cigParams))
        return CUDA_ERROR_NOT_SUPPORTED;
    return ctx_create(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    SIM_CHECK_INIT();
    sim_ctx_t *c = (sim_ctx_t *)ctx;
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_ctx_mu);
    CUresult r = CUDA_SUCCESS;
    if (!sim_ctx_valid(c))
        r = CUDA_ERROR_INVALID_CONTEXT;
    else if (c->is_primary)
        r = CUDA_ERROR_INVALID_CONTEXT; /* a primary context is released, not destroyed */
    else
        ctx_retire(c);
    /* Popped if current to the calling thread, as documented. */
    if (r == CUDA_SUCCESS && t_depth > 0 && t_stack[t_depth - 1] == c)
        t_depth--;
    pthread_mutex_unlock(&g_ctx_mu);
    return r;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    SIM_CHECK_INIT();
    sim_ctx_t *c = (sim_ctx_t *)ctx;
    if (!c || !sim_ctx_valid(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (t_depth >= CTX_STACK_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    t_stack[t_depth++] = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    SIM_CHECK_INIT();
    if (t_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    sim_ctx_t *c = t_stack[--t_depth];
    if (pctx)
        *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    SIM_CHECK_INIT();
    sim_ctx_t *c = (sim_ctx_t *)ctx;
    if (!c) {
        if (t_depth > 0)
            t_depth--;
        return CUDA_SUCCESS;
    }
    if (!sim_ctx_valid(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (t_depth == 0)
        t_depth = 1;
    t_stack[t_depth - 1] = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    SIM_CHECK_INIT();
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)sim_ctx_current();
    return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device) { return cuCtxGetDevice_v2(device, NULL); }

/* CUDA 13 form: the device of ctx, or of the current context for NULL. */
CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    sim_ctx_t *c;
    CUresult r = ctx_or_current(ctx, &c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = c->dev;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetFlags(unsigned int *flags)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetFlags(unsigned int flags)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!ctx_flags_ok(flags))
        return CUDA_ERROR_INVALID_VALUE;
    c->flags = flags;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    sim_ctx_t *c;
    CUresult r = ctx_or_current(ctx, &c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!ctxId)
        return CUDA_ERROR_INVALID_VALUE;
    *ctxId = c->id;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    sim_ctx_t *c;
    CUresult r = ctx_or_current(ctx, &c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 3020;
    return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) { return cuCtxSynchronize_v2(NULL); }

/* CUDA 13 form: waits for ctx's work (the current context's for NULL). */
CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    sim_ctx_t *c;
    CUresult r = ctx_or_current(ctx, &c);
    if (r != CUDA_SUCCESS)
        return r;
    CUresult cr = sim_capture_sync_ctx(c);
    if (cr != CUDA_SUCCESS)
        return cr;
    return sim_ctx_sync(c);
}

CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = -5;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if ((int)limit < 0 || (int)limit > CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    c->limits[limit] = value;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pvalue)
        return CUDA_ERROR_INVALID_VALUE;
    if ((int)limit < 0 || (int)limit > CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
        return CUDA_ERROR_UNSUPPORTED_LIMIT;
    *pvalue = c->limits[limit];
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pconfig)
        return CUDA_ERROR_INVALID_VALUE;
    *pconfig = CU_FUNC_CACHE_PREFER_NONE;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if ((int)config < 0 || (int)config > CU_FUNC_CACHE_PREFER_EQUAL)
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* Index of peer in c's peer list, or -1. c->mu held. */
static int peer_find(sim_ctx_t *c, sim_ctx_t *peer)
{
    for (int i = 0; i < c->npeers; i++)
        if (c->peers[i].c == peer && c->peers[i].id == peer->id)
            return i;
    return -1;
}

CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int flags)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    sim_ctx_t *peer = (sim_ctx_t *)peerContext;
    if (!sim_ctx_valid(peer))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (peer->dev == c->dev)
        return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED; /* cuDeviceCanAccessPeer(d, d) is 0 */
    pthread_mutex_lock(&c->mu);
    int j = 0;
    for (int i = 0; i < c->npeers; i++) /* forget destroyed peers */
        if (sim_ctx_valid(c->peers[i].c) && c->peers[i].c->id == c->peers[i].id)
            c->peers[j++] = c->peers[i];
    c->npeers = j;
    if (peer_find(c, peer) >= 0)
        r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    else if (c->npeers == SIM_MAX_PEERS)
        r = CUDA_ERROR_TOO_MANY_PEERS;
    else
        c->peers[c->npeers++] = (typeof(c->peers[0])){peer, peer->id};
    pthread_mutex_unlock(&c->mu);
    if (r == CUDA_SUCCESS)
        sim_dc_peers_changed(); /* the device's server maps the peer's memory */
    return r;
}

CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
    sim_ctx_t *c;
    CUresult r = sim_ctx_get(&c);
    if (r != CUDA_SUCCESS)
        return r;
    sim_ctx_t *peer = (sim_ctx_t *)peerContext;
    if (!sim_ctx_valid(peer))
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&c->mu);
    int i = peer_find(c, peer);
    if (i < 0)
        r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
    else
        c->peers[i] = c->peers[--c->npeers];
    pthread_mutex_unlock(&c->mu);
    if (r == CUDA_SUCCESS)
        sim_dc_peers_changed();
    return r;
}

/* cudaProfiler.h: enable/disable "profile collection by the active profiling
 * tool for the current context"; starting when started (or stopping when
 * stopped) has no effect. No profiling tool ever attaches to simcuda, so
 * both only check that a context is current. */
CUresult cuProfilerStart(void)
{
    sim_ctx_t *c;
    return sim_ctx_get(&c);
}

CUresult cuProfilerStop(void)
{
    sim_ctx_t *c;
    return sim_ctx_get(&c);
}
