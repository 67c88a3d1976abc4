/* simcuda stream capture and CUDA graphs (the subset frameworks use to
 * capture a training step and replay it).
 *
 * cuStreamBeginCapture(_v2) puts a stream in capture mode: the operations
 * then enqueued on it (kernels, copies, memsets, host functions, frees)
 * are not run but recorded as nodes of a graph, each depending on the
 * stream's previous node; an event recorded in the capture and waited for
 * by another stream joins that stream to the capture (a fork), and a wait
 * of the origin stream on an event recorded on a fork joins it back.
 * cuStreamEndCapture hands the graph out (CUDA_ERROR_STREAM_CAPTURE_UNJOINED
 * when a fork did not join back). cuGraphInstantiate copies it into an
 * executable graph; cuGraphLaunch enqueues its nodes, in the order they
 * were captured (a topological order), on the launch stream.
 *
 * NVIDIA's rules (cuda.h, cuThreadExchangeStreamCaptureMode and the
 * programming guide's "Prohibited and Unhandled Operations"):
 *  - synchronising or querying a capturing stream, synchronising a context
 *    with a capturing stream, or using the legacy stream while a blocking
 *    stream of its context captures fails (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
 *    _IMPLICIT for the legacy stream) and invalidates the capture;
 *  - a potentially unsafe call (cuMemAlloc, cuMemFree, host allocation, a
 *    synchronous copy or memset) fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
 *    and invalidates the capture when the calling thread's interaction mode
 *    forbids it: GLOBAL (the default) while this thread has a capture not
 *    begun RELAXED or any thread has one begun GLOBAL; THREAD_LOCAL while
 *    this thread has one not begun RELAXED; RELAXED never;
 *  - once invalidated, work enqueued on the capture's streams fails with
 *    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and cuStreamEndCapture ends the
 *    capture with that error and no graph.
 * Not simulated: capture into an existing graph, dependency updates,
 * waits on events recorded outside the capture (ignored), queries of an
 * event recorded in a capture (it reports complete).
 */
#include "sim/driver/capture.h"

#include <stdlib.h>
#include <string.h>

#define GRAPH_MAGIC 0x68707267u /* "grph" */
#define EXEC_MAGIC 0x63657867u  /* "gxec" */

typedef struct sim_gnode {
    sim_op_t op;      /* the captured operation (its own parameter block) */
    int ndeps;
    struct sim_gnode **deps;
} sim_gnode_t;

typedef struct sim_graph {
    uint32_t magic;
    sim_ctx_t *ctx;
    int n, cap;
    sim_gnode_t **nodes;
} sim_graph_t;

typedef struct sim_capture {
    unsigned long long id;
    int mode;          /* CUstreamCaptureMode it was begun with */
    int invalid;
    pthread_t thread;
    sim_ctx_t *ctx;
    sim_stream_t *origin;
    sim_graph_t *g;
} sim_capture_t;

/* A stream taking part in a capture, and the nodes its next one depends on. */
typedef struct cap_stream {
    sim_stream_t *s;
    sim_capture_t *cap;
    int ntips;
    sim_gnode_t **tips;
} cap_stream_t;

/* An event recorded in a capture: the nodes a wait on it depends on. */
typedef struct cap_event {
    sim_event_t *e;
    sim_capture_t *cap;
    int ntips;
    sim_gnode_t **tips;
} cap_event_t;

#define MAX_CAP_STREAMS 256
#define MAX_CAP_EVENTS 256

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_ncap; /* captures in progress: the hooks' fast path */
static unsigned long long g_next_id;
static cap_stream_t g_streams[MAX_CAP_STREAMS];
static int g_nstreams;
static cap_event_t g_events[MAX_CAP_EVENTS];
static int g_nevents;
static __thread int t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* ---- operations ------------------------------------------------------------------------ */

/* dst becomes an independent copy of src (parameters rebased, the
 * parameter block and staging buffer duplicated, a module reference
 * taken). Returns 0 or -1 (no memory). */
static int op_clone(sim_op_t *dst, const sim_op_t *src)
{
    sim_op_t *next = dst->next;
    *dst = *src;
    dst->next = next;
    if (src->type == SIM_OP_KERNEL) {
        int n = src->u.k.fn->nparams;
        if (src->u.k.heap) {
            size_t psize = src->u.k.fn->psize;
            size_t head = ((size_t)n * sizeof(void *) + 15) / 16 * 16;
            void *h = malloc((size_t)n * sizeof(void *) + psize + 16);
            if (!h)
                return -1;
            memcpy(h, src->u.k.heap, head + psize);
            unsigned char *ob = (unsigned char *)src->u.k.heap + head, *nb = (unsigned char *)h + head;
            void **np = h;
            for (int i = 0; i < n; i++)
                np[i] = nb + ((unsigned char *)((void **)src->u.k.heap)[i] - ob);
            dst->u.k.heap = h;
            dst->u.k.params = np;
        } else {
            for (int i = 0; i < n; i++)
                dst->pptr[i] = dst->pbuf + ((unsigned char *)src->pptr[i] - src->pbuf);
            dst->u.k.params = dst->pptr;
        }
        atomic_fetch_add(&src->u.k.fn->mod->refs, 1);
    } else if (src->type == SIM_OP_COPY && src->u.copy.stage) {
        void *st = malloc(src->u.copy.n);
        if (!st)
            return -1;
        memcpy(st, src->u.copy.stage, src->u.copy.n);
        dst->u.copy.stage = st;
        dst->u.copy.src = st;
    }
    return 0;
}

/* Releases what op holds (not op itself). */
static void op_release(sim_op_t *op)
{
    switch (op->type) {
    case SIM_OP_KERNEL:
        free(op->u.k.heap);
        op->u.k.heap = NULL;
        sim_module_unref(op->u.k.fn->mod);
        break;
    case SIM_OP_COPY:
        free(op->u.copy.stage);
        op->u.copy.stage = NULL;
        break;
    case SIM_OP_RECORD:
    case SIM_OP_WAIT_EVENT:
        sim_event_unref(op->u.ev.ev);
        break;
    default:
        break;
    }
    op->type = SIM_OP_NOP;
}

void sim_op_discard(sim_op_t *op)
{
    op_release(op);
    free(op);
}

/* ---- graphs ------------------------------------------------------------------------------ */

static sim_graph_t *graph_new(sim_ctx_t *c)
{
    sim_graph_t *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->magic = GRAPH_MAGIC;
    g->ctx = c;
    return g;
}

static void graph_free(sim_graph_t *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n; i++) {
        op_release(&g->nodes[i]->op);
        free(g->nodes[i]->deps);
        free(g->nodes[i]);
    }
    free(g->nodes);
    g->magic = 0;
    free(g);
}

/* Appends a node holding op (moved in) that depends on deps. */
static sim_gnode_t *graph_add(sim_graph_t *g, sim_op_t *op, sim_gnode_t **deps, int ndeps)
{
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 16;
        sim_gnode_t **nn = realloc(g->nodes, (size_t)cap * sizeof(*nn));
        if (!nn)
            return NULL;
        g->nodes = nn;
        g->cap = cap;
    }
    sim_gnode_t *nd = calloc(1, sizeof(*nd));
    if (!nd || (ndeps && !(nd->deps = malloc((size_t)ndeps * sizeof(*deps))))) {
        free(nd);
        return NULL;
    }
    if (op_clone(&nd->op, op)) {
        free(nd->deps);
        free(nd);
        return NULL;
    }
    if (ndeps)
        memcpy(nd->deps, deps, (size_t)ndeps * sizeof(*deps));
    nd->ndeps = ndeps;
    g->nodes[g->n++] = nd;
    return nd;
}

/* A deep copy (NULL on no memory); node i depends on the copies of its
 * dependencies. */
static sim_graph_t *graph_clone(const sim_graph_t *src)
{
    sim_graph_t *g = graph_new(src->ctx);
    if (!g)
        return NULL;
    for (int i = 0; i < src->n; i++) {
        const sim_gnode_t *s = src->nodes[i];
        sim_gnode_t *deps[64], **dp = deps;
        if (s->ndeps > 64 && !(dp = malloc((size_t)s->ndeps * sizeof(*dp)))) {
            graph_free(g);
            return NULL;
        }
        for (int d = 0; d < s->ndeps; d++)
            for (int j = 0; j < i; j++)
                if (src->nodes[j] == s->deps[d])
                    dp[d] = g->nodes[j];
        sim_gnode_t *nd = graph_add(g, (sim_op_t *)&s->op, dp, s->ndeps);
        if (dp != deps)
            free(dp);
        if (!nd) {
            graph_free(g);
            return NULL;
        }
    }
    return g;
}

/* ---- capture state (under g_mu) ----------------------------------------------------------- */

static cap_stream_t *cs_find(const sim_stream_t *s)
{
    for (int i = 0; i < g_nstreams; i++)
        if (g_streams[i].s == s)
            return &g_streams[i];
    return NULL;
}

static cap_event_t *ce_find(const sim_event_t *e)
{
    for (int i = 0; i < g_nevents; i++)
        if (g_events[i].e == e)
            return &g_events[i];
    return NULL;
}

static int set_tips(sim_gnode_t ***tips, int *ntips, sim_gnode_t *const *src, int n)
{
    sim_gnode_t **t = n ? malloc((size_t)n * sizeof(*t)) : NULL;
    if (n && !t)
        return -1;
    memcpy(t, src, (size_t)n * sizeof(*t));
    free(*tips);
    *tips = t;
    *ntips = n;
    return 0;
}

/* Adds the tips src to *tips (a join), without duplicates. */
static int add_tips(sim_gnode_t ***tips, int *ntips, sim_gnode_t *const *src, int n)
{
    sim_gnode_t **t = malloc((size_t)(*ntips + n + 1) * sizeof(*t));
    if (!t)
        return -1;
    int k = *ntips;
    memcpy(t, *tips, (size_t)k * sizeof(*t));
    for (int i = 0; i < n; i++) {
        int dup = 0;
        for (int j = 0; j < k; j++)
            dup |= t[j] == src[i];
        if (!dup)
            t[k++] = src[i];
    }
    free(*tips);
    *tips = t;
    *ntips = k;
    return 0;
}

static void cs_remove(cap_stream_t *c)
{
    free(c->tips);
    *c = g_streams[--g_nstreams];
}

/* Ends a capture's bookkeeping (its streams and events leave capture mode). */
static void cap_finish(sim_capture_t *cap)
{
    for (int i = g_nstreams - 1; i >= 0; i--)
        if (g_streams[i].cap == cap)
            cs_remove(&g_streams[i]);
    for (int i = g_nevents - 1; i >= 0; i--)
        if (g_events[i].cap == cap) {
            free(g_events[i].tips);
            g_events[i] = g_events[--g_nevents];
        }
    atomic_fetch_sub(&g_ncap, 1);
}

static int is_blocking(const sim_stream_t *s)
{
    return s->kind == SIM_STREAM_PTDS ||
           (s->kind == SIM_STREAM_USER && !(s->flags & CU_STREAM_NON_BLOCKING));
}

/* Invalidates the captures a use of the legacy stream of c conflicts with
 * (those of its blocking streams); returns how many. */
static int invalidate_implicit(const sim_ctx_t *c)
{
    int n = 0;
    for (int i = 0; i < g_nstreams; i++)
        if (g_streams[i].s->ctx == c && is_blocking(g_streams[i].s) && !g_streams[i].cap->invalid) {
            g_streams[i].cap->invalid = 1;
            n++;
        }
    return n;
}

/* ---- hooks -------------------------------------------------------------------------------- */

int sim_capture_enqueue(sim_stream_t *s, sim_op_t *op, CUresult *err)
{
    if (atomic_load_explicit(&g_ncap, memory_order_acquire) == 0)
        return 0;
    int taken = 1;
    *err = CUDA_SUCCESS;
    pthread_mutex_lock(&g_mu);
    cap_stream_t *cs = cs_find(s);
    if (!cs) {
        if (s->kind == SIM_STREAM_LEGACY && invalidate_implicit(s->ctx))
            *err = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        else
            taken = 0;
        goto out;
    }
    sim_capture_t *cap = cs->cap;
    if (cap->invalid) {
        *err = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        goto out;
    }
    switch (op->type) {
    case SIM_OP_RECORD: {
        /* the event stands for the stream's current position in the capture */
        sim_event_t *e = op->u.ev.ev;
        cap_event_t *ce = ce_find(e);
        if (!ce && g_nevents < MAX_CAP_EVENTS) {
            ce = &g_events[g_nevents++];
            memset(ce, 0, sizeof(*ce));
            ce->e = e;
        }
        if (!ce || set_tips(&ce->tips, &ce->ntips, cs->tips, cs->ntips)) {
            cap->invalid = 1;
            *err = CUDA_ERROR_OUT_OF_MEMORY;
            break;
        }
        ce->cap = cap;
        /* nothing will complete this record: mark it done, so that no wait
         * outside the capture can hang on it */
        pthread_mutex_lock(&e->mu);
        if (e->done_gen < op->u.ev.gen)
            e->done_gen = op->u.ev.gen;
        pthread_mutex_unlock(&e->mu);
        break;
    }
    case SIM_OP_WAIT_EVENT:  /* an event recorded outside the capture: ignored */
    case SIM_OP_WAIT_STREAM:
    case SIM_OP_NOP:
        break;
    case SIM_OP_CALLBACK:    /* cuStreamAddCallback is not capturable */
        cap->invalid = 1;
        *err = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        break;
    default: {
        sim_gnode_t *nd = graph_add(cap->g, op, cs->tips, cs->ntips);
        if (!nd || set_tips(&cs->tips, &cs->ntips, &nd, 1)) {
            cap->invalid = 1;
            *err = CUDA_ERROR_OUT_OF_MEMORY;
        }
        break;
    }
    }
out:
    pthread_mutex_unlock(&g_mu);
    if (taken)
        sim_op_discard(op); /* a node holds its own copy */
    return taken;
}

int sim_capture_wait_event(sim_stream_t *s, sim_event_t *e, CUresult *err)
{
    if (atomic_load_explicit(&g_ncap, memory_order_acquire) == 0)
        return 0;
    int taken = 0;
    pthread_mutex_lock(&g_mu);
    cap_event_t *ce = ce_find(e);
    cap_stream_t *cs = cs_find(s);
    if (!ce) {
        if (cs && cs->cap->invalid) {
            *err = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
            taken = 1;
        }
        goto out;
    }
    taken = 1;
    *err = CUDA_SUCCESS;
    if (ce->cap->invalid) {
        *err = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    } else if (cs && cs->cap != ce->cap) {
        ce->cap->invalid = cs->cap->invalid = 1;
        *err = CUDA_ERROR_STREAM_CAPTURE_MERGE;
    } else if (cs) { /* a join */
        if (add_tips(&cs->tips, &cs->ntips, ce->tips, ce->ntips))
            *err = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (s->kind == SIM_STREAM_LEGACY) {
        ce->cap->invalid = 1;
        *err = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else if (g_nstreams < MAX_CAP_STREAMS) { /* a fork: s joins the capture */
        cs = &g_streams[g_nstreams++];
        memset(cs, 0, sizeof(*cs));
        cs->s = s;
        cs->cap = ce->cap;
        if (set_tips(&cs->tips, &cs->ntips, ce->tips, ce->ntips)) {
            cs_remove(cs);
            *err = CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else {
        *err = CUDA_ERROR_OUT_OF_MEMORY;
    }
out:
    pthread_mutex_unlock(&g_mu);
    return taken;
}

/* Whether the calling thread may make a potentially unsafe call now;
 * invalidates the captures that forbid it. Under g_mu. */
static int unsafe_forbidden(void)
{
    int bad = 0;
    if (t_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return 0;
    pthread_t me = pthread_self();
    for (int i = 0; i < g_nstreams; i++) {
        sim_capture_t *cap = g_streams[i].cap;
        if (cap->origin != g_streams[i].s)
            continue; /* one entry per capture */
        int mine = pthread_equal(cap->thread, me);
        if ((mine && cap->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
            (t_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && !mine &&
             cap->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
            cap->invalid = 1;
            bad = 1;
        }
    }
    return bad;
}

CUresult sim_capture_sync(sim_stream_t *s, int sync_call)
{
    if (atomic_load_explicit(&g_ncap, memory_order_acquire) == 0)
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&g_mu);
    cap_stream_t *cs = cs_find(s);
    if (cs) {
        cs->cap->invalid = 1;
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    } else if (s->kind == SIM_STREAM_LEGACY && invalidate_implicit(s->ctx)) {
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else if (sync_call && unsafe_forbidden()) {
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    pthread_mutex_unlock(&g_mu);
    return r;
}

CUresult sim_capture_sync_ctx(sim_ctx_t *c)
{
    if (atomic_load_explicit(&g_ncap, memory_order_acquire) == 0)
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_nstreams; i++)
        if (g_streams[i].s->ctx == c) {
            g_streams[i].cap->invalid = 1;
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    pthread_mutex_unlock(&g_mu);
    return r;
}

CUresult sim_capture_unsafe(void)
{
    if (atomic_load_explicit(&g_ncap, memory_order_acquire) == 0)
        return CUDA_SUCCESS;
    pthread_mutex_lock(&g_mu);
    int bad = unsafe_forbidden();
    pthread_mutex_unlock(&g_mu);
    return bad ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

/* ---- the capture API ------------------------------------------------------------------------ */

#define PT(h) ((h) == NULL ? CU_STREAM_PER_THREAD : (h))

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (s->kind == SIM_STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    sim_capture_t *cap = calloc(1, sizeof(*cap));
    sim_graph_t *g = graph_new(s->ctx);
    if (!cap || !g) {
        free(cap);
        graph_free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&g_mu);
    if (cs_find(s)) {
        r = CUDA_ERROR_ILLEGAL_STATE; /* already capturing */
    } else if (g_nstreams == MAX_CAP_STREAMS) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        cap->id = ++g_next_id;
        cap->mode = (int)mode;
        cap->thread = pthread_self();
        cap->ctx = s->ctx;
        cap->origin = s;
        cap->g = g;
        cap_stream_t *cs = &g_streams[g_nstreams++];
        memset(cs, 0, sizeof(*cs));
        cs->s = s;
        cs->cap = cap;
        atomic_fetch_add(&g_ncap, 1);
    }
    pthread_mutex_unlock(&g_mu);
    if (r != CUDA_SUCCESS) {
        free(cap);
        graph_free(g);
    }
    return r;
}
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return cuStreamBeginCapture_v2(PT(hStream), mode);
}
/* The CUDA 10.0 form: global mode. */
CUresult cuStreamBeginCapture(CUstream hStream)
{
    return cuStreamBeginCapture_v2(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    return cuStreamBeginCapture_v2(PT(hStream), CU_STREAM_CAPTURE_MODE_GLOBAL);
}

/* Whether every node reaches the origin's tips (every fork joined back). */
static int all_joined(const sim_graph_t *g, sim_gnode_t *const *tips, int ntips)
{
    if (g->n == 0)
        return 1;
    char *seen = calloc((size_t)g->n, 1);
    int ok = 1;
    if (!seen)
        return 0;
    /* nodes were added in dependency order: walk back from the tips */
    for (int i = g->n - 1; i >= 0; i--) {
        sim_gnode_t *nd = g->nodes[i];
        for (int t = 0; t < ntips; t++)
            seen[i] |= tips[t] == nd;
        if (!seen[i])
            continue;
        for (int d = 0; d < nd->ndeps; d++)
            for (int j = 0; j < i; j++)
                if (g->nodes[j] == nd->deps[d])
                    seen[j] = 1;
    }
    for (int i = 0; i < g->n; i++)
        ok &= seen[i];
    free(seen);
    return ok;
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    sim_graph_t *g = NULL;
    pthread_mutex_lock(&g_mu);
    cap_stream_t *cs = cs_find(s);
    sim_capture_t *cap = cs ? cs->cap : NULL;
    if (!cap || cap->origin != s) {
        r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    } else if (cap->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
               !pthread_equal(cap->thread, pthread_self())) {
        r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    } else {
        if (cap->invalid)
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        else if (!all_joined(cap->g, cs->tips, cs->ntips))
            r = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
        if (r == CUDA_SUCCESS)
            g = cap->g;
        else
            graph_free(cap->g);
        cap_finish(cap);
        free(cap);
    }
    pthread_mutex_unlock(&g_mu);
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ||
        r == CUDA_ERROR_STREAM_CAPTURE_UNJOINED)
        *phGraph = (CUgraph)g;
    if (g)
        sim_reg_add(g, SIM_H_GRAPH);
    return r;
}
CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return cuStreamEndCapture(PT(hStream), phGraph);
}

/* Status, id and (optionally) graph and current dependencies of s. */
static CUresult capture_info(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id,
                             CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (atomic_load_explicit(&g_ncap, memory_order_acquire)) {
        pthread_mutex_lock(&g_mu);
        cap_stream_t *cs = cs_find(s);
        if (!cs && s->kind == SIM_STREAM_LEGACY)
            for (int i = 0; i < g_nstreams; i++) /* cuda.h: not invalidated */
                if (g_streams[i].s->ctx == s->ctx && is_blocking(g_streams[i].s))
                    r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        if (cs) {
            st = cs->cap->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                  : CU_STREAM_CAPTURE_STATUS_ACTIVE;
            if (id)
                *id = cs->cap->id;
            if (graph)
                *graph = (CUgraph)cs->cap->g;
            if (deps)
                *deps = (const CUgraphNode *)cs->tips;
            if (ndeps)
                *ndeps = (size_t)cs->ntips;
        }
        pthread_mutex_unlock(&g_mu);
        if (r != CUDA_SUCCESS)
            return r;
    }
    *status = st;
    if (st == CU_STREAM_CAPTURE_STATUS_NONE) {
        if (graph)
            *graph = NULL;
        if (deps)
            *deps = NULL;
        if (ndeps)
            *ndeps = 0;
    }
    return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return capture_info(hStream, captureStatus, NULL, NULL, NULL, NULL);
}
CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return cuStreamIsCapturing(PT(hStream), captureStatus);
}

CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                cuuint64_t *id_out)
{
    return capture_info(hStream, captureStatus_out, id_out, NULL, NULL, NULL);
}
CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                     cuuint64_t *id_out)
{
    return cuStreamGetCaptureInfo(PT(hStream), captureStatus_out, id_out);
}

CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                   cuuint64_t *id_out, CUgraph *graph_out,
                                   const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                        numDependencies_out);
}
CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out, CUgraph *graph_out,
                                        const CUgraphNode **dependencies_out,
                                        size_t *numDependencies_out)
{
    return cuStreamGetCaptureInfo_v2(PT(hStream), captureStatus_out, id_out, graph_out,
                                     dependencies_out, numDependencies_out);
}

CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                   cuuint64_t *id_out, CUgraph *graph_out,
                                   const CUgraphNode **dependencies_out,
                                   const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
    if (edgeData_out)
        *edgeData_out = NULL; /* default edges only */
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                        numDependencies_out);
}
CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                        cuuint64_t *id_out, CUgraph *graph_out,
                                        const CUgraphNode **dependencies_out,
                                        const CUgraphEdgeData **edgeData_out,
                                        size_t *numDependencies_out)
{
    return cuStreamGetCaptureInfo_v3(PT(hStream), captureStatus_out, id_out, graph_out,
                                     dependencies_out, edgeData_out, numDependencies_out);
}

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    SIM_CHECK_INIT();
    if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL &&
                  *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                  *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
        return CUDA_ERROR_INVALID_VALUE;
    int old = t_mode;
    t_mode = (int)*mode;
    *mode = (CUstreamCaptureMode)old;
    return CUDA_SUCCESS;
}

/* ---- graphs and executable graphs -------------------------------------------------------------- */

static sim_graph_t *graph_of(CUgraph h)
{
    sim_graph_t *g = (sim_graph_t *)h;
    return g && sim_reg_has(g, SIM_H_GRAPH) && g->magic == GRAPH_MAGIC ? g : NULL;
}

static sim_graph_t *exec_of(CUgraphExec h)
{
    sim_graph_t *g = (sim_graph_t *)h;
    return g && sim_reg_has(g, SIM_H_GRAPH_EXEC) && g->magic == EXEC_MAGIC ? g : NULL;
}

CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    SIM_CHECK_INIT();
    sim_graph_t *g = graph_of(hGraph);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    if (!numNodes)
        return CUDA_ERROR_INVALID_VALUE;
    if (nodes) {
        size_t n = *numNodes < (size_t)g->n ? *numNodes : (size_t)g->n;
        for (size_t i = 0; i < n; i++)
            nodes[i] = (CUgraphNode)g->nodes[i];
        for (size_t i = n; i < *numNodes; i++)
            nodes[i] = NULL;
    }
    *numNodes = (size_t)g->n;
    return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph hGraph)
{
    SIM_CHECK_INIT();
    sim_graph_t *g = graph_of(hGraph);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    sim_reg_del(g);
    graph_free(g);
    return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                     unsigned long long flags)
{
    SIM_CHECK_INIT();
    sim_graph_t *g = graph_of(hGraph);
    if (!phGraphExec || !g || flags)
        return CUDA_ERROR_INVALID_VALUE;
    sim_graph_t *x = graph_clone(g);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->magic = EXEC_MAGIC;
    sim_reg_add(x, SIM_H_GRAPH_EXEC);
    *phGraphExec = (CUgraphExec)x;
    return CUDA_SUCCESS;
}

/* The CUDA 10.0 and 11.0 forms. */
CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                            char *logBuffer, size_t bufferSize)
{
    if (phErrorNode)
        *phErrorNode = NULL;
    if (logBuffer && bufferSize)
        logBuffer[0] = '\0';
    return cuGraphInstantiateWithFlags(phGraphExec, hGraph, 0);
}

CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                               char *logBuffer, size_t bufferSize)
{
    return cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    SIM_CHECK_INIT();
    sim_graph_t *x = exec_of(hGraphExec);
    if (!x)
        return CUDA_ERROR_INVALID_VALUE;
    sim_reg_del(x);
    graph_free(x);
    return CUDA_SUCCESS;
}

/* The nodes, in capture order, enqueued on the stream as fresh copies. */
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    sim_stream_t *s;
    CUresult r = sim_stream_resolve(hStream, &s);
    if (r != CUDA_SUCCESS)
        return r;
    sim_graph_t *x = exec_of(hGraphExec);
    if (!x)
        return CUDA_ERROR_INVALID_VALUE;
    if (x->ctx != s->ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult sticky = SIM_STICKY();
    if (sticky)
        return sticky;
    for (int i = 0; i < x->n && r == CUDA_SUCCESS; i++) {
        sim_op_t *op = sim_op_alloc(s);
        if (op_clone(op, &x->nodes[i]->op)) {
            op->type = SIM_OP_NOP;
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
        CUresult e = sim_enqueue(s, op);
        if (r == CUDA_SUCCESS)
            r = e;
    }
    return r;
}
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return cuGraphLaunch(hGraphExec, PT(hStream));
}
