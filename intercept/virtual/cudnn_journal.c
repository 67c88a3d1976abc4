/* The cuDNN descriptor journal (intercept/virtual/cudnn_vdesc.h,
 * docs/MOVING.md section 4): while backend descriptors are virtual, every
 * one the application holds is an object of this file that records what
 * re-creating it needs (its attributes, with descriptor elements as
 * references; whether and in which order and context it was finalized;
 * where cuDNN filled it from); a move destroys the real descriptors while
 * the old context exists (es_dnnd_down) and re-makes them on the new GPU,
 * finalized there (es_dnnd_up). The backend's wrappers
 * (intercept/cudnn_backend.c) tell it what the application does; it knows
 * the determinism rule only through intercept/cudnn_heur.h. */
#include "intercept/virtual/cudnn_vdesc.h"

#include "intercept/cudnn_heur.h"
#include "move/vhandle.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/real.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

int es_dnnd_on;

/* How the backend's shadow of a heuristics descriptor follows the shim's
 * answer re-chosen after a move (es_dnnd_new's caller; the same every time). */
static void (*es_dnnd_repicked)(const void *d, int pick);

static int es_det(void)
{
    return es_cfg.determinism != ES_DET_OFF;
}

void es_dnnd_setup(int libh_on)
{
    es_dnnd_on = libh_on && es_det();
}

/* One attribute as it was set: the bytes of its elements, descriptor
 * elements as the objects they name (each holding a reference). */
typedef struct es_bkv_attr {
    int name, type;
    int64_t count;
    void *bytes;
} es_bkv_attr_t;

typedef struct es_bkv es_bkv_t;
struct es_bkv {
    void *real;          /* first: cuDNN's descriptor now (NULL: destroyed or not re-made) */
    uint32_t magic;
    int type;            /* cudnnBackendDescriptorType_t */
    int dead;            /* destroyed by the application */
    int refs;            /* the application's (until destroyed) + journals naming it */
    int vdev;            /* of the context current at creation (-1: none) */
    int bad;             /* an attribute the shim cannot copy: not re-made */
    int building;        /* re-creation in progress (a cycle guard) */
    int temp;            /* re-made only as a source for others: destroyed afterwards */
    uint64_t fin;        /* finalize order (0: not finalized) */
    CUcontext ctx;       /* current at finalize (virtual) */
    es_bkv_attr_t *attrs;
    int nattrs, cap;
    es_bkv_t *src;       /* filled by cuDNN from src's attribute src_name, element src_idx */
    int src_name;
    int64_t src_idx;
    int src_pick;        /* src's heuristics answer of the shim (d1/d2: its canonical result) */
    int pick;            /* heuristics: the result the shim gives (-1 none) */
    int64_t ws;          /* plan: workspace size at finalize (-1: unknown) */
    cudnnStatus_t lost;  /* why it could not be re-made (0: it was, or never tried) */
    es_bkv_t *prev, *next;
};
_Static_assert(offsetof(es_bkv_t, real) == offsetof(es_dnnd_head_t, real) &&
                   offsetof(es_bkv_t, magic) == offsetof(es_dnnd_head_t, magic),
               "a virtual backend descriptor starts with es_dnnd_head_t");

_Static_assert(sizeof(es_bkv_t) <= ES_HARENA_MAX_OBJ, "es_bkv_t fits an arena slot");

static pthread_mutex_t es_bkv_mu = PTHREAD_MUTEX_INITIALIZER;
static es_bkv_t *es_bkv_head, *es_bkv_tail;
static uint64_t es_bkv_seq;

/* The live object d names (the application's handle), or NULL: not one of
 * the shim's, or virtual descriptors are off. */
static es_bkv_t *es_bkv_of(const void *d)
{
    es_bkv_t *o = (es_bkv_t *)d;
    return es_dnnd_on && es_harena_has(o) && o->magic == ES_DNND_MAGIC ? o : NULL;
}

/* Bytes per element of an attribute type (0: a type the shim does not know). */
static size_t es_bkv_elem(int t)
{
    switch (t) {
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
        return sizeof(void *);
    case CUDNN_TYPE_INT64:
        return sizeof(int64_t);
    case CUDNN_TYPE_DOUBLE:
        return sizeof(double);
    case CUDNN_TYPE_FLOAT:
        return sizeof(float);
    case CUDNN_TYPE_INT32:
        return sizeof(int32_t);
    case CUDNN_TYPE_BOOLEAN:
        return sizeof(_Bool);
    case CUDNN_TYPE_CHAR:
        return 1;
    case CUDNN_TYPE_FRACTION:
        return sizeof(cudnnFraction_t);
    default: /* the other types are enumerations */
        return t >= 0 && t <= CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE ? sizeof(int) : 0;
    }
}

static void es_bkv_unref(es_bkv_t *o);

static void es_bkv_clear(es_bkv_t *o)
{
    for (int i = 0; i < o->nattrs; i++) {
        es_bkv_attr_t *a = &o->attrs[i];
        if (a->type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
            for (int64_t k = 0; k < a->count; k++)
                es_bkv_unref(((es_bkv_t **)a->bytes)[k]);
        free(a->bytes);
    }
    o->nattrs = 0;
    es_bkv_unref(o->src);
    o->src = NULL;
}

/* Lock held. Frees o once neither the application nor a journal names it. */
static void es_bkv_unref(es_bkv_t *o)
{
    if (!o || --o->refs > 0)
        return;
    es_bkv_clear(o);
    free(o->attrs);
    if (o->prev)
        o->prev->next = o->next;
    else
        es_bkv_head = o->next;
    if (o->next)
        o->next->prev = o->prev;
    else
        es_bkv_tail = o->prev;
    o->magic = 0;
    o->real = NULL; /* a stale descriptor reaches cuDNN as NULL */
    es_harena_free(o, sizeof(*o));
}

/* The vdev of the current context (-1: none). */
static int es_bkv_vdev_now(CUcontext *ctx)
{
    CUcontext c = NULL;
    if (!es_lib_ready(ES_LIB_CUDA) || ES_REAL(cuda, cuCtxGetCurrent)(&c) != CUDA_SUCCESS)
        c = NULL;
    if (ctx)
        *ctx = c;
    return c ? es_vh_vdev_of(c) : -1;
}

/* A new object over real descriptor r; NULL on no memory. */
static es_bkv_t *es_bkv_new(void *r, int type)
{
    es_bkv_t *o = es_harena_alloc(sizeof(*o));
    if (!o)
        return NULL;
    o->real = r;
    o->magic = ES_DNND_MAGIC;
    o->type = type;
    o->refs = 1;
    o->pick = -1;
    o->ws = -1;
    o->vdev = es_bkv_vdev_now(NULL);
    pthread_mutex_lock(&es_bkv_mu);
    o->prev = es_bkv_tail;
    if (es_bkv_tail)
        es_bkv_tail->next = o;
    else
        es_bkv_head = o;
    es_bkv_tail = o;
    pthread_mutex_unlock(&es_bkv_mu);
    return o;
}

/* Descriptor elements of an array, virtual -> real, into tmp (max
 * elements) or a heap copy (*heap, freed by the caller). Returns the array
 * to give cuDNN: arr itself when nothing is to translate. */
const void *es_dnnd_in(int type, int64_t count, const void *arr, void **tmp, int max,
                       void **heap)
{
    *heap = NULL;
    if (!es_dnnd_on || type != CUDNN_TYPE_BACKEND_DESCRIPTOR || !arr || count < 1)
        return arr;
    void **out = tmp;
    if (count > max) {
        if ((size_t)count > SIZE_MAX / sizeof(void *) || !(out = malloc((size_t)count * sizeof(void *))))
            return arr; /* cuDNN refuses the virtual descriptors itself */
        *heap = out;
    }
    for (int64_t i = 0; i < count; i++)
        out[i] = es_dnnd_real(((void *const *)arr)[i]);
    return out;
}

/* Records an attribute cuDNN accepted on o (it replaces one of the same
 * name set before). */
static void es_bkv_set(es_bkv_t *o, int name, int type, int64_t count, const void *arr)
{
    size_t es = es_bkv_elem(type);
    pthread_mutex_lock(&es_bkv_mu);
    if (!es || count < 0 || (count && !arr) || (uint64_t)count > SIZE_MAX / 64) {
        o->bad = 1;
        goto out;
    }
    for (int i = 0; i < o->nattrs; i++)
        if (o->attrs[i].name == name) { /* the earlier setting: dropped */
            es_bkv_attr_t a = o->attrs[i];
            if (a.type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
                for (int64_t k = 0; k < a.count; k++)
                    es_bkv_unref(((es_bkv_t **)a.bytes)[k]);
            free(a.bytes);
            memmove(&o->attrs[i], &o->attrs[i + 1], (size_t)(o->nattrs - i - 1) * sizeof(a));
            o->nattrs--;
            break;
        }
    if (o->nattrs == o->cap) {
        int cap = o->cap ? 2 * o->cap : 8;
        es_bkv_attr_t *n = realloc(o->attrs, (size_t)cap * sizeof(*n));
        if (!n) {
            o->bad = 1;
            goto out;
        }
        o->attrs = n;
        o->cap = cap;
    }
    es_bkv_attr_t a = { name, type, count, malloc(count ? (size_t)count * es : 1) };
    if (!a.bytes) {
        o->bad = 1;
        goto out;
    }
    if (count)
        memcpy(a.bytes, arr, (size_t)count * es);
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        for (int64_t k = 0; k < count; k++) {
            es_bkv_t *c = es_bkv_of(((void **)a.bytes)[k]);
            if (c)
                c->refs++;
            else
                o->bad = 1; /* a descriptor the shim did not make */
            ((es_bkv_t **)a.bytes)[k] = c;
        }
    o->attrs[o->nattrs++] = a;
out:
    pthread_mutex_unlock(&es_bkv_mu);
}

/* o was finalized by cuDNN (or filled: src set before). */
static void es_bkv_finalized(es_bkv_t *o, void *real)
{
    CUcontext c = NULL;
    es_bkv_vdev_now(&c);
    int64_t ws = -1, n = 0;
    if (o->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR &&
        ES_REAL(cudnn, cudnnBackendGetAttribute)(real, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                 CUDNN_TYPE_INT64, 1, &n, &ws) !=
            CUDNN_STATUS_SUCCESS)
        ws = -1;
    pthread_mutex_lock(&es_bkv_mu);
    o->fin = ++es_bkv_seq;
    o->ctx = c;
    o->ws = ws;
    pthread_mutex_unlock(&es_bkv_mu);
}

/* cuDNN filled the first n elements of the application's array arr from
 * attribute name of src (pick: the shim's heuristics answer, -1 none). */
static void es_bkv_filled(es_bkv_t *src, int name, int64_t n, void *const *arr, int pick)
{
    for (int64_t i = 0; i < n; i++) {
        es_bkv_t *o = es_bkv_of(arr[i]);
        if (!o)
            continue;
        pthread_mutex_lock(&es_bkv_mu);
        es_bkv_clear(o); /* cuDNN replaced the whole content */
        src->refs++;
        o->src = src;
        o->src_name = name;
        o->src_idx = i;
        o->src_pick = pick;
        pthread_mutex_unlock(&es_bkv_mu);
        es_bkv_finalized(o, o->real);
    }
}

/* ---- re-creation at a move ------------------------------------------------------------- */

static int es_bkv_in_group(const es_bkv_t *o, int vdev)
{
    return o->vdev == vdev || o->vdev < 0;
}

/* A plan or variant pack a move could not re-make: the status cuDNN gave
 * then (0: neither is such a one). */
cudnnStatus_t es_dnnd_lost(const void *plan, const void *vp)
{
    const es_bkv_t *p = es_bkv_of(plan), *v = es_bkv_of(vp);
    if (p && !p->dead && !p->real && p->lost)
        return p->lost;
    if (v && !v->dead && !v->real && v->lost)
        return v->lost;
    return CUDNN_STATUS_SUCCESS;
}

int es_dnnd_down(int vdev, char *msg, size_t msglen)
{
    (void)msg;
    (void)msglen;
    if (!es_dnnd_on)
        return 0;
    pthread_mutex_lock(&es_bkv_mu);
    /* newest first: what was made from a descriptor goes before it */
    for (es_bkv_t *o = es_bkv_tail; o; o = o->prev) {
        if (!o->real || !es_bkv_in_group(o, vdev))
            continue;
        cudnnStatus_t st = ES_REAL(cudnn, cudnnBackendDestroyDescriptor)(o->real);
        if (st != CUDNN_STATUS_SUCCESS)
            ES_WARN("cudnn backend: destroying descriptor %p at a move: status %d", (void *)o,
                    (int)st);
        o->real = NULL;
        o->lost = CUDNN_STATUS_SUCCESS;
    }
    pthread_mutex_unlock(&es_bkv_mu);
    return 0;
}

/* The operation graph a heuristics, engine, engine config or plan was made
 * from (lock held; NULL: unknown). */
static es_bkv_t *es_bkv_graph_of(es_bkv_t *o, int depth)
{
    if (!o || depth > 8)
        return NULL;
    if (o->type == CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)
        return o;
    for (int i = 0; i < o->nattrs; i++) {
        const es_bkv_attr_t *a = &o->attrs[i];
        if (a->type != CUDNN_TYPE_BACKEND_DESCRIPTOR || a->count != 1)
            continue;
        if (a->name == CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG ||
            a->name == CUDNN_ATTR_ENGINECFG_ENGINE || a->name == CUDNN_ATTR_ENGINE_OPERATION_GRAPH ||
            a->name == CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH)
            return es_bkv_graph_of(((es_bkv_t **)a->bytes)[0], depth + 1);
    }
    return es_bkv_graph_of(o->src, depth + 1);
}

static cudnnStatus_t es_bkv_build(es_bkv_t *o);

/* Makes sure c has a real descriptor (lock held): a descriptor the
 * application destroyed but another one names is re-made for the time of
 * the move. */
static cudnnStatus_t es_bkv_need(es_bkv_t *c)
{
    if (!c)
        return CUDNN_STATUS_BAD_PARAM;
    if (c->real)
        return CUDNN_STATUS_SUCCESS;
    if (c->dead)
        c->temp = 1;
    return es_bkv_build(c);
}

/* The shim's heuristics answer (d1/d2) of a heuristics descriptor re-made
 * here: its result of the graph's canonical engine on this GPU. */
static void es_bkv_pick(es_bkv_t *h)
{
    es_bkv_t *g = es_bkv_graph_of(h, 0);
    h->pick = es_heur_choose(h->real, g ? g->real : NULL);
    /* the application's shadow follows (it keeps answering its queries) */
    void (*repicked)(const void *, int) = __atomic_load_n(&es_dnnd_repicked, __ATOMIC_ACQUIRE);
    if (repicked)
        repicked(h, h->pick);
}

/* Fills descriptor out (real) from element idx of attribute name of src
 * (real): cuDNN copies element i of the attribute into element i of the
 * array, so descriptors of the shim's own stand before it. */
static cudnnStatus_t es_bkv_fill_at(void *src, int name, int type, int64_t idx, void *out)
{
    void *arr[ES_BK_MAX_RES] = { NULL };
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    int64_t got = 0;
    if (idx < 0 || idx >= ES_BK_MAX_RES)
        return CUDNN_STATUS_NOT_SUPPORTED;
    for (int64_t i = 0; i < idx && !st; i++)
        st = ES_REAL(cudnn, cudnnBackendCreateDescriptor)(type, &arr[i]);
    if (!st) {
        arr[idx] = out;
        st = ES_REAL(cudnn, cudnnBackendGetAttribute)(src, name, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                      idx + 1, &got, arr);
        arr[idx] = NULL;
    }
    es_dnn_destroy_all(arr, (int)idx);
    if (!st && got < idx + 1)
        st = CUDNN_STATUS_NOT_SUPPORTED;
    return st;
}

/* Gives real descriptor r o's attributes (lock held); skip: an attribute
 * left out, with: its replacement (the plan's engine config). */
static cudnnStatus_t es_bkv_replay(es_bkv_t *o, void *r, int skip, void *with)
{
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    for (int i = 0; i < o->nattrs && !st; i++) {
        const es_bkv_attr_t *a = &o->attrs[i];
        if (a->name == skip) {
            st = ES_REAL(cudnn, cudnnBackendSetAttribute)(r, a->name, a->type, 1, &with);
            continue;
        }
        if (a->type != CUDNN_TYPE_BACKEND_DESCRIPTOR) {
            /* handles: the application's (virtual), translated to the new
             * real ones by the handles' thunk under ES_REAL */
            st = ES_REAL(cudnn, cudnnBackendSetAttribute)(r, a->name, a->type, a->count, a->bytes);
            continue;
        }
        void *tmp[ES_BK_MAX_OPS], **arr = tmp;
        if (a->count > ES_BK_MAX_OPS && !(arr = malloc((size_t)a->count * sizeof(void *))))
            return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
        for (int64_t k = 0; k < a->count && !st; k++) {
            es_bkv_t *c = ((es_bkv_t **)a->bytes)[k];
            if ((st = es_bkv_need(c)) == CUDNN_STATUS_SUCCESS)
                arr[k] = c->real;
        }
        if (!st)
            st = ES_REAL(cudnn, cudnnBackendSetAttribute)(r, a->name, a->type, a->count, arr);
        if (arr != tmp)
            free(arr);
    }
    return st;
}

/* Finalizes r (o's new real descriptor) in the context o was finalized in. */
static cudnnStatus_t es_bkv_finalize_in_ctx(const es_bkv_t *o, void *r)
{
    int pushed = o->ctx && ES_REAL(cuda, cuCtxPushCurrent_v2)(o->ctx) == CUDA_SUCCESS;
    cudnnStatus_t st = ES_REAL(cudnn, cudnnBackendFinalize)(r);
    CUcontext junk;
    if (pushed)
        ES_REAL(cuda, cuCtxPopCurrent_v2)(&junk);
    return st;
}

/* A plan whose engine config cannot be finalized on this GPU: the
 * heuristics of its graph run again here, and the plan takes the config
 * the application would get now (lock held). */
static cudnnStatus_t es_bkv_plan_fallback(es_bkv_t *o, void **out)
{
    es_bkv_t *g = es_bkv_graph_of(o, 0);
    void *h = NULL, *cfg = NULL, *r = NULL;
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_INSTANT;
    cudnnStatus_t st = g ? es_bkv_need(g) : CUDNN_STATUS_NOT_SUPPORTED;
    if (st)
        goto out;
    if ((st = ES_REAL(cudnn, cudnnBackendCreateDescriptor)(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &h)) ||
        (st = ES_REAL(cudnn, cudnnBackendSetAttribute)(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g->real)) ||
        (st = ES_REAL(cudnn, cudnnBackendSetAttribute)(h, CUDNN_ATTR_ENGINEHEUR_MODE,
                                                       CUDNN_TYPE_HEUR_MODE, 1, &mode)) ||
        (st = es_bkv_finalize_in_ctx(o, h)) ||
        (st = ES_REAL(cudnn, cudnnBackendCreateDescriptor)(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg)))
        goto out;
    int pick = es_heur_choose(h, g->real);
    if (pick < 0) {
        st = CUDNN_STATUS_NOT_SUPPORTED;
        goto out;
    }
    if ((st = es_heur_fill(h, pick, cfg)) ||
        (st = ES_REAL(cudnn, cudnnBackendCreateDescriptor)(o->type, &r)) ||
        (st = es_bkv_replay(o, r, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg)) ||
        (st = es_bkv_finalize_in_ctx(o, r)))
        goto out;
    *out = r;
    r = NULL;
out:
    if (r)
        ES_REAL(cudnn, cudnnBackendDestroyDescriptor)(r);
    if (cfg)
        ES_REAL(cudnn, cudnnBackendDestroyDescriptor)(cfg);
    if (h)
        ES_REAL(cudnn, cudnnBackendDestroyDescriptor)(h);
    return st;
}

/* Re-creates o's real descriptor here (lock held): created, given its
 * attributes (or filled from its source), finalized if it was. */
static cudnnStatus_t es_bkv_build(es_bkv_t *o)
{
    void *r = NULL;
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    if (o->real)
        return CUDNN_STATUS_SUCCESS;
    if (o->lost)
        return o->lost;
    if (o->bad || o->building) {
        st = CUDNN_STATUS_NOT_SUPPORTED;
        goto out;
    }
    o->building = 1;
    if ((st = ES_REAL(cudnn, cudnnBackendCreateDescriptor)(o->type, &r)))
        goto out;
    if (o->src) {
        if ((st = es_bkv_need(o->src)))
            goto out;
        if (o->src_pick >= 0 && o->src->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR &&
            o->src_name == CUDNN_ATTR_ENGINEHEUR_RESULTS)
            /* the shim's answer: the canonical result on this GPU */
            st = o->src->pick >= 0 ? es_heur_fill(o->src->real, o->src->pick, r)
                                   : CUDNN_STATUS_NOT_SUPPORTED;
        else
            st = es_bkv_fill_at(o->src->real, o->src_name, o->type, o->src_idx, r);
        goto out;
    }
    if ((st = es_bkv_replay(o, r, -1, NULL)) || !o->fin)
        goto out;
    st = es_bkv_finalize_in_ctx(o, r);
    if (st && o->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
        void *nr = NULL;
        cudnnStatus_t st2 = es_bkv_plan_fallback(o, &nr);
        ES_WARN("cudnn backend: plan %p does not finalize on this GPU (status %d)%s", (void *)o,
                (int)st, st2 ? "; nor with the heuristics' engine" : ": the heuristics' engine taken");
        if (!st2) {
            ES_REAL(cudnn, cudnnBackendDestroyDescriptor)(r);
            r = nr;
            st = CUDNN_STATUS_SUCCESS;
        }
    }
out:
    o->building = 0;
    if (st) {
        if (r)
            ES_REAL(cudnn, cudnnBackendDestroyDescriptor)(r);
        o->lost = st;
        return st;
    }
    o->real = r;
    if (o->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && o->fin && es_det())
        es_bkv_pick(o);
    if (o->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && o->fin && o->ws >= 0) {
        int64_t ws = -1, n = 0;
        if (ES_REAL(cudnn, cudnnBackendGetAttribute)(r, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                     CUDNN_TYPE_INT64, 1, &n, &ws) ==
                CUDNN_STATUS_SUCCESS &&
            ws > o->ws)
            ES_WARN("cudnn backend: plan %p needs %lld workspace bytes on this GPU, %lld before "
                    "the move", (void *)o, (long long)ws, (long long)o->ws);
    }
    return CUDNN_STATUS_SUCCESS;
}

static int es_bkv_cmp_fin(const void *a, const void *b)
{
    const es_bkv_t *x = *(es_bkv_t *const *)a, *y = *(es_bkv_t *const *)b;
    uint64_t fx = x->fin ? x->fin : UINT64_MAX, fy = y->fin ? y->fin : UINT64_MAX;
    return fx < fy ? -1 : fx > fy;
}

int es_dnnd_up(int vdev, char *msg, size_t msglen)
{
    (void)msg;
    (void)msglen;
    if (!es_dnnd_on)
        return 0;
    pthread_mutex_lock(&es_bkv_mu);
    size_t n = 0, k = 0;
    for (es_bkv_t *o = es_bkv_head; o; o = o->next)
        n++;
    es_bkv_t **v = n ? malloc(n * sizeof(*v)) : NULL;
    for (es_bkv_t *o = es_bkv_head; o && v; o = o->next)
        if (!o->dead && !o->real && es_bkv_in_group(o, vdev)) {
            o->lost = CUDNN_STATUS_SUCCESS;
            v[k++] = o;
        }
    if (n && !v)
        ES_WARN("cudnn backend: no memory to re-make the descriptors");
    /* in the order they were finalized (the ones never finalized last) */
    if (k)
        qsort(v, k, sizeof(*v), es_bkv_cmp_fin);
    int lost = 0;
    for (size_t i = 0; i < k; i++) {
        cudnnStatus_t st = es_bkv_build(v[i]);
        if (st) {
            lost++;
            ES_WARN("cudnn backend: descriptor %p (type %d) not re-made on the new GPU: status %d "
                    "(its next use returns it)", (void *)v[i], v[i]->type, (int)st);
        }
    }
    /* the application's destroyed descriptors re-made only as sources */
    for (es_bkv_t *o = es_bkv_head; o; o = o->next)
        if (o->temp) {
            if (o->real)
                ES_REAL(cudnn, cudnnBackendDestroyDescriptor)(o->real);
            o->real = NULL;
            o->temp = 0;
            o->lost = CUDNN_STATUS_SUCCESS;
        }
    ES_DEBUG("cudnn backend: %zu descriptor(s) re-made, %d lost", k - (size_t)lost, lost);
    pthread_mutex_unlock(&es_bkv_mu);
    free(v);
    return 0;
}

/* ---- what the backend's wrappers call (intercept/virtual/cudnn_vdesc.h) ---------------- */

void *es_dnnd_new(void *real, int type, void (*repicked)(const void *d, int pick))
{
    __atomic_store_n(&es_dnnd_repicked, repicked, __ATOMIC_RELEASE);
    return es_bkv_new(real, type);
}

int es_dnnd_is(const void *d)
{
    return es_bkv_of(d) != NULL;
}

cudnnStatus_t es_dnnd_destroy(void *d)
{
    es_bkv_t *o = es_bkv_of(d);
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    pthread_mutex_lock(&es_bkv_mu);
    if (o->dead) {
        st = CUDNN_STATUS_BAD_PARAM; /* destroyed already */
    } else {
        if (o->real)
            st = ES_REAL(cudnn, cudnnBackendDestroyDescriptor)(o->real);
        o->real = NULL;
        o->dead = 1;
        es_bkv_unref(o); /* the application's reference */
    }
    pthread_mutex_unlock(&es_bkv_mu);
    return st;
}

void es_dnnd_initialized(void *d)
{
    es_bkv_t *o = es_bkv_of(d);
    if (!o)
        return;
    pthread_mutex_lock(&es_bkv_mu); /* back to a descriptor with nothing set */
    es_bkv_clear(o);
    o->fin = 0;
    o->bad = 0;
    pthread_mutex_unlock(&es_bkv_mu);
}

void es_dnnd_set(void *d, int name, int type, int64_t count, const void *arr)
{
    es_bkv_t *o = es_bkv_of(d);
    if (o)
        es_bkv_set(o, name, type, count, arr);
}

void es_dnnd_filled(const void *src, int name, int64_t n, void *const *arr, int pick)
{
    es_bkv_t *o = es_bkv_of(src);
    if (o)
        es_bkv_filled(o, name, n, arr, pick);
}

void es_dnnd_finalized(void *d, void *real)
{
    es_bkv_t *o = es_bkv_of(d);
    if (o)
        es_bkv_finalized(o, real);
}

void es_dnnd_picked(void *d, int pick)
{
    es_bkv_t *o = es_bkv_of(d);
    if (!o)
        return;
    pthread_mutex_lock(&es_bkv_mu);
    o->pick = pick;
    pthread_mutex_unlock(&es_bkv_mu);
}
