/* cuDNN backend (graph) API wrappers, d1 and d2 (off: pass-through).
 *
 * Heuristics (d1, d2). cudnn-frontend asks CUDNN_ATTR_ENGINEHEUR_RESULTS
 * for a count, creates that many engine-config descriptors, passes a
 * temporary copy of their handles and keeps the first `returned count` of
 * its own list: so the answer must be in the caller's descriptors, in
 * order, with the reduced count (moving handles around inside the
 * caller's array changes nothing the frontend sees). And a framework that
 * benchmarks (PyTorch's cudnn.benchmark: every plan built from the INSTANT
 * and FALLBACK lists is timed and the fastest kept) would pick by time
 * among engines that round differently. So every heuristics query on an
 * operation graph answers with ONE engine config: the first config without
 * CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC in cuDNN's own INSTANT ranking of
 * that graph (the "canonical engine", found when the heuristics descriptor
 * is finalized; a query in another mode answers with its config of the
 * same engine, else with its own first deterministic one). The count query
 * says 1 (0 when no engine is deterministic). Plan choice therefore never
 * depends on timing, benchmark mode included, and the plan a framework
 * builds without benchmarking is the one it would have built first anyway
 * among the deterministic ones.
 *
 * Plans (d1, d2): finalizing an execution plan whose engine carries the
 * nondeterministic note returns CUDNN_STATUS_NOT_SUPPORTED (an engine
 * config the application built by hand).
 *
 * d2: every execution plan whose operation graph is a convolution (forward
 * with an optional pointwise chain ADD / ReLU / clipped ReLU / identity as
 * PyTorch fuses bias and activation, backward data, backward filter) on
 * fp32 / fp16 / bf16 tensors with fp32 compute runs on the shim's portable
 * kernels (kernels/conv.h) on the handle's stream, whatever engine the plan
 * names: the same bits on every GPU model. Other graphs go to cuDNN.
 *
 * The graph is known without asking cuDNN to read its descriptors back:
 * the shim keeps a shadow of every backend descriptor the application
 * creates (type and the attributes above, filled as they are set;
 * descriptor-valued attributes copied, as cuDNN copies them), and a
 * refcounted, immutable snapshot of each operation graph that follows it
 * to the heuristics, engines, engine configs and plans made from it. The
 * shadows live in a hash table under es_state_lock; d2's execute takes the
 * lock once to find the plan's snapshot.
 *
 * Engines, notes and the heuristics answer: intercept/cudnn_heur.c. While
 * descriptors are virtual (moves on), the wrappers also tell the journal
 * that re-makes them after a move (intercept/virtual/cudnn_journal.c).
 */
#include "intercept/enter.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/real.h"
#include "intercept/cudnn_heur.h"
#include "intercept/virtual/cudnn_vdesc.h"
#include "move/vhandle.h"
#include "kernels/conv.h"

#include <stdlib.h>
#include <string.h>

#define ES_BK_MAX_VP 16
#define ES_BK_BUCKETS 1024

static int es_det(void)
{
    return es_cfg.determinism != ES_DET_OFF;
}

/* ---- shadows ------------------------------------------------------------------------ */

typedef struct es_bk_tensor {
    int set;
    int64_t uid;
    int nd;
    int64_t dims[CUDNN_DIM_MAX], strides[CUDNN_DIM_MAX];
    int dtype, virt;
} es_bk_tensor_t;

typedef struct es_bk_conv {
    int set, mode, comp;
    int64_t spatial;
    int npre, npost, nstr, ndil;
    int64_t pre[CUDNN_DIM_MAX], post[CUDNN_DIM_MAX], str[CUDNN_DIM_MAX], dil[CUDNN_DIM_MAX];
} es_bk_conv_t;

typedef struct es_bk_pw {
    int set, mode, prec, hi_set;
    double lo, hi, slope;
} es_bk_pw_t;

typedef struct es_bk_op {
    int type;               /* cudnnBackendDescriptorType_t */
    double alpha, beta;     /* pointwise: alpha1, alpha2 */
    es_bk_tensor_t t[3];    /* conv: x, w, y (dx, w, dy; x, dw, dy); pointwise: x, b, y */
    es_bk_conv_t conv;
    es_bk_pw_t pw;
} es_bk_op_t;

/* An operation graph as it was set: immutable once made, shared by the
 * descriptors derived from it. */
typedef struct es_bk_snap {
    int refs;
    int nops;
    es_bk_op_t ops[ES_BK_MAX_OPS];
} es_bk_snap_t;

typedef struct es_bk_node {
    cudnnBackendDescriptor_t d;
    struct es_bk_node *next;
    int type;
    es_bk_tensor_t tensor;      /* TENSOR */
    es_bk_conv_t conv;          /* CONVOLUTION */
    es_bk_pw_t pw;              /* POINTWISE */
    es_bk_op_t op;              /* OPERATION_* */
    es_bk_snap_t *snap;         /* graph, heuristics, engine, engine config, plan */
    cudnnBackendDescriptor_t graph; /* heuristics: the application's graph descriptor */
    int heur_mode;
    int pick, picked;           /* heuristics: the kept result (-1: none) */
    int finalized;              /* plan, variant pack: finalized by cuDNN */
    cudnnBackendDescriptor_t cfg;   /* plan: its engine config */
    int nvp;                    /* variant pack */
    int64_t uids[ES_BK_MAX_VP];
    void *ptrs[ES_BK_MAX_VP];
} es_bk_node_t;

static es_bk_node_t *es_bk_table[ES_BK_BUCKETS];

static unsigned es_bk_hash(const void *p)
{
    uintptr_t v = (uintptr_t)p;
    return (unsigned)((v >> 4) ^ (v >> 14)) & (ES_BK_BUCKETS - 1);
}

/* Under es_state_lock. */
static es_bk_node_t *es_bk_find(const void *d)
{
    for (es_bk_node_t *n = es_bk_table[es_bk_hash(d)]; n; n = n->next)
        if (n->d == d)
            return n;
    return NULL;
}

static es_bk_snap_t *es_snap_ref(es_bk_snap_t *s)
{
    if (s)
        __atomic_fetch_add(&s->refs, 1, __ATOMIC_RELAXED);
    return s;
}

static void es_snap_unref(es_bk_snap_t *s)
{
    if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0)
        free(s);
}

/* Under es_state_lock: *dst = ref(s), dropping what it held. */
static void es_snap_set(es_bk_snap_t **dst, es_bk_snap_t *s)
{
    es_bk_snap_t *old = *dst;
    *dst = es_snap_ref(s);
    es_snap_unref(old);
}

static void es_bk_add(cudnnBackendDescriptor_t d, int type)
{
    es_bk_node_t *n = calloc(1, sizeof(*n));
    if (!n) {
        ES_WARN("cudnn backend: no memory to follow descriptor %p", d);
        return;
    }
    n->d = d;
    n->type = type;
    n->pick = -1;
    /* cuDNN's defaults: alpha 1 (pointwise alpha1 and alpha2 1), beta 0 */
    n->op.alpha = 1.0;
    n->op.beta = type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR ? 1.0 : 0.0;
    pthread_mutex_lock(&es_state_lock);
    unsigned b = es_bk_hash(d);
    n->next = es_bk_table[b];
    es_bk_table[b] = n;
    pthread_mutex_unlock(&es_state_lock);
}

static void es_bk_remove(cudnnBackendDescriptor_t d)
{
    es_bk_node_t *gone = NULL;
    pthread_mutex_lock(&es_state_lock);
    for (es_bk_node_t **pp = &es_bk_table[es_bk_hash(d)]; *pp; pp = &(*pp)->next)
        if ((*pp)->d == d) {
            gone = *pp;
            *pp = gone->next;
            break;
        }
    pthread_mutex_unlock(&es_state_lock);
    if (gone) {
        es_snap_unref(gone->snap);
        free(gone);
    }
}

static int es_real_scalar(cudnnBackendAttributeType_t t, const void *v, double *out)
{
    if (t == CUDNN_TYPE_FLOAT)
        *out = *(const float *)v;
    else if (t == CUDNN_TYPE_DOUBLE)
        *out = *(const double *)v;
    else
        return -1;
    return 0;
}

static void es_i64s(int64_t *dst, int *n, int64_t count, const void *v)
{
    if (count < 0 || count > CUDNN_DIM_MAX)
        return;
    memcpy(dst, v, (size_t)count * sizeof(int64_t));
    *n = (int)count;
}

/* The node of the descriptor held in v (a one-element descriptor array),
 * under es_state_lock. */
static es_bk_node_t *es_bk_arg(cudnnBackendAttributeType_t t, int64_t count, const void *v)
{
    if (t != CUDNN_TYPE_BACKEND_DESCRIPTOR || count != 1 || !v)
        return NULL;
    return es_bk_find(*(cudnnBackendDescriptor_t const *)v);
}

/* Records an attribute the real library accepted. Under es_state_lock. */
static void es_bk_record(es_bk_node_t *n, cudnnBackendAttributeName_t name,
                         cudnnBackendAttributeType_t t, int64_t count, const void *v)
{
    es_bk_node_t *a;
    switch (n->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
        n->tensor.set = 1;
        if (name == CUDNN_ATTR_TENSOR_DATA_TYPE && t == CUDNN_TYPE_DATA_TYPE)
            n->tensor.dtype = *(const cudnnDataType_t *)v;
        else if (name == CUDNN_ATTR_TENSOR_DIMENSIONS && t == CUDNN_TYPE_INT64)
            es_i64s(n->tensor.dims, &n->tensor.nd, count, v);
        else if (name == CUDNN_ATTR_TENSOR_STRIDES && t == CUDNN_TYPE_INT64) {
            int ns = 0;
            es_i64s(n->tensor.strides, &ns, count, v);
        } else if (name == CUDNN_ATTR_TENSOR_UNIQUE_ID && t == CUDNN_TYPE_INT64 && count == 1)
            n->tensor.uid = *(const int64_t *)v;
        else if (name == CUDNN_ATTR_TENSOR_IS_VIRTUAL && t == CUDNN_TYPE_BOOLEAN)
            n->tensor.virt = *(const _Bool *)v;
        break;
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
        n->conv.set = 1;
        if (name == CUDNN_ATTR_CONVOLUTION_COMP_TYPE && t == CUDNN_TYPE_DATA_TYPE)
            n->conv.comp = *(const cudnnDataType_t *)v;
        else if (name == CUDNN_ATTR_CONVOLUTION_CONV_MODE && t == CUDNN_TYPE_CONVOLUTION_MODE)
            n->conv.mode = *(const cudnnConvolutionMode_t *)v;
        else if (name == CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS && t == CUDNN_TYPE_INT64)
            n->conv.spatial = *(const int64_t *)v;
        else if (name == CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS && t == CUDNN_TYPE_INT64)
            es_i64s(n->conv.pre, &n->conv.npre, count, v);
        else if (name == CUDNN_ATTR_CONVOLUTION_POST_PADDINGS && t == CUDNN_TYPE_INT64)
            es_i64s(n->conv.post, &n->conv.npost, count, v);
        else if (name == CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES && t == CUDNN_TYPE_INT64)
            es_i64s(n->conv.str, &n->conv.nstr, count, v);
        else if (name == CUDNN_ATTR_CONVOLUTION_DILATIONS && t == CUDNN_TYPE_INT64)
            es_i64s(n->conv.dil, &n->conv.ndil, count, v);
        break;
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
        n->pw.set = 1;
        if (name == CUDNN_ATTR_POINTWISE_MODE && t == CUDNN_TYPE_POINTWISE_MODE)
            n->pw.mode = (int)*(const cudnnPointwiseMode_t *)v;
        else if (name == CUDNN_ATTR_POINTWISE_MATH_PREC && t == CUDNN_TYPE_DATA_TYPE)
            n->pw.prec = *(const cudnnDataType_t *)v;
        else if (name == CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP)
            es_real_scalar(t, v, &n->pw.lo);
        else if (name == CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP)
            n->pw.hi_set = es_real_scalar(t, v, &n->pw.hi) == 0;
        else if (name == CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE)
            es_real_scalar(t, v, &n->pw.slope);
        break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: {
        int base = n->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR
                       ? CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA
                   : n->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
                       ? CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA
                       : CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA;
        int k = (int)name - base;
        n->op.type = n->type;
        if (k == 0 || k == 1)
            es_real_scalar(t, v, k == 0 ? &n->op.alpha : &n->op.beta);
        else if (k == 2 && (a = es_bk_arg(t, count, v)) != NULL)
            n->op.conv = a->conv;
        else if (k >= 3 && k <= 5 && (a = es_bk_arg(t, count, v)) != NULL)
            n->op.t[k == 3 ? 1 : k == 4 ? 0 : 2] = a->tensor; /* w, x-like, y-like */
        break;
    }
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
        n->op.type = n->type;
        if (name == CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1)
            es_real_scalar(t, v, &n->op.alpha);
        else if (name == CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2)
            es_real_scalar(t, v, &n->op.beta);
        else if ((a = es_bk_arg(t, count, v)) != NULL) {
            if (name == CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR)
                n->op.pw = a->pw;
            else if (name == CUDNN_ATTR_OPERATION_POINTWISE_XDESC)
                n->op.t[0] = a->tensor;
            else if (name == CUDNN_ATTR_OPERATION_POINTWISE_BDESC)
                n->op.t[1] = a->tensor;
            else if (name == CUDNN_ATTR_OPERATION_POINTWISE_YDESC)
                n->op.t[2] = a->tensor;
        }
        break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
        if (name == CUDNN_ATTR_OPERATIONGRAPH_OPS && t == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
            es_bk_snap_t *s = NULL;
            if (count >= 1 && count <= ES_BK_MAX_OPS && (s = calloc(1, sizeof(*s))) != NULL) {
                s->refs = 1;
                for (int64_t i = 0; i < count && s; i++) {
                    es_bk_node_t *o = es_bk_find(((cudnnBackendDescriptor_t const *)v)[i]);
                    if (!o || !o->op.type) { /* an operation the shim did not follow */
                        free(s);
                        s = NULL;
                    } else {
                        s->ops[s->nops++] = o->op;
                    }
                }
            }
            es_snap_unref(n->snap);
            n->snap = s;
        }
        break;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
        if (name == CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH && (a = es_bk_arg(t, count, v))) {
            es_snap_set(&n->snap, a->snap);
            n->graph = a->d;
        } else if (name == CUDNN_ATTR_ENGINEHEUR_MODE && t == CUDNN_TYPE_HEUR_MODE) {
            n->heur_mode = (int)*(const cudnnBackendHeurMode_t *)v;
        }
        break;
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
        if (name == CUDNN_ATTR_ENGINE_OPERATION_GRAPH && (a = es_bk_arg(t, count, v)))
            es_snap_set(&n->snap, a->snap);
        break;
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
        if (name == CUDNN_ATTR_ENGINECFG_ENGINE && (a = es_bk_arg(t, count, v)))
            es_snap_set(&n->snap, a->snap);
        break;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
        if (name == CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG && t == CUDNN_TYPE_BACKEND_DESCRIPTOR &&
            count == 1) {
            n->cfg = *(cudnnBackendDescriptor_t const *)v;
            a = es_bk_find(n->cfg);
            es_snap_set(&n->snap, a ? a->snap : NULL);
        }
        break;
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
        if (name == CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS && t == CUDNN_TYPE_INT64 &&
            count <= ES_BK_MAX_VP) {
            memcpy(n->uids, v, (size_t)count * sizeof(int64_t));
            n->nvp = (int)count;
        } else if (name == CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS && t == CUDNN_TYPE_VOID_PTR &&
                   count <= ES_BK_MAX_VP) {
            memcpy(n->ptrs, v, (size_t)count * sizeof(void *));
        }
        break;
    default:
        break;
    }
}

/* The journal re-chose a heuristics descriptor's answer after a move: the
 * application's shadow follows (it keeps answering its queries). */
static void es_bk_repicked(const void *d, int pick)
{
    pthread_mutex_lock(&es_state_lock);
    es_bk_node_t *n = es_bk_find(d);
    if (n) {
        n->pick = pick;
        n->picked = 1;
    }
    pthread_mutex_unlock(&es_state_lock);
}

/* ---- the wrappers ---------------------------------------------------------------------- */

ES_EXPORT cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t descriptorType,
                                                     cudnnBackendDescriptor_t *descriptor)
{
    ES_ENTER(cudnn, cudnnBackendCreateDescriptor);
    cudnnStatus_t st = ES_REAL(cudnn, cudnnBackendCreateDescriptor)(descriptorType, descriptor);
    if (st != CUDNN_STATUS_SUCCESS || !descriptor || !*descriptor)
        return st;
    if (es_dnnd_on) {
        void *o = es_dnnd_new(*descriptor, (int)descriptorType, es_bk_repicked);
        if (!o) {
            ES_REAL(cudnn, cudnnBackendDestroyDescriptor)(*descriptor);
            *descriptor = NULL;
            return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
        }
        *descriptor = o;
    }
    if (es_det())
        es_bk_add(*descriptor, (int)descriptorType);
    return st;
}

ES_EXPORT cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor)
{
    ES_ENTER(cudnn, cudnnBackendDestroyDescriptor);
    if (es_det() && descriptor)
        es_bk_remove(descriptor);
    if (!es_dnnd_is(descriptor))
        return ES_REAL(cudnn, cudnnBackendDestroyDescriptor)(descriptor);
    return es_dnnd_destroy(descriptor);
}

ES_EXPORT cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t descriptor)
{
    ES_ENTER(cudnn, cudnnBackendInitialize);
    cudnnStatus_t st = ES_REAL(cudnn, cudnnBackendInitialize)(es_dnnd_real(descriptor));
    if (st == CUDNN_STATUS_SUCCESS)
        es_dnnd_initialized(descriptor);
    return st;
}

ES_EXPORT cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                                 cudnnBackendAttributeName_t attributeName,
                                                 cudnnBackendAttributeType_t attributeType,
                                                 int64_t elementCount,
                                                 const void *arrayOfElements)
{
    ES_ENTER(cudnn, cudnnBackendSetAttribute);
    void *tmp[ES_BK_MAX_OPS], *heap = NULL;
    const void *arr = es_dnnd_in(attributeType, elementCount, arrayOfElements, tmp,
                                ES_BK_MAX_OPS, &heap);
    cudnnStatus_t st = ES_REAL(cudnn, cudnnBackendSetAttribute)(
        es_dnnd_real(descriptor), attributeName, attributeType, elementCount, arr);
    free(heap);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    es_dnnd_set(descriptor, (int)attributeName, (int)attributeType, elementCount, arrayOfElements);
    if (!es_det() || !arrayOfElements || elementCount < 0)
        return st;
    pthread_mutex_lock(&es_state_lock);
    es_bk_node_t *n = es_bk_find(descriptor);
    if (n)
        es_bk_record(n, attributeName, attributeType, elementCount, arrayOfElements);
    pthread_mutex_unlock(&es_state_lock);
    return st;
}

/* The real GetAttribute with the caller's descriptor elements translated,
 * then the descriptors cuDNN filled noted (where from, for a move). */
static cudnnStatus_t es_bk_get(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                               cudnnBackendAttributeType_t type, int64_t req, int64_t *count,
                               void *arr)
{
    void *tmp[ES_BK_MAX_RES], *heap = NULL;
    int64_t n = 0;
    void *rd = es_dnnd_real(d);
    void *rarr = (void *)es_dnnd_in(type, req, arr, tmp, ES_BK_MAX_RES, &heap);
    cudnnStatus_t st = ES_REAL(cudnn, cudnnBackendGetAttribute)(rd, name, type, req, count, rarr);
    free(heap);
    if (st != CUDNN_STATUS_SUCCESS || !es_dnnd_is(d) || type != CUDNN_TYPE_BACKEND_DESCRIPTOR || !arr ||
        req < 1)
        return st;
    if (count)
        n = *count;
    else if (ES_REAL(cudnn, cudnnBackendGetAttribute)(rd, name, type, 0, &n, NULL) !=
             CUDNN_STATUS_SUCCESS)
        n = req;
    es_dnnd_filled(d, (int)name, n < req ? n : req, (void *const *)arr, -1);
    return st;
}

ES_EXPORT cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                                 cudnnBackendAttributeName_t attributeName,
                                                 cudnnBackendAttributeType_t attributeType,
                                                 int64_t requestedElementCount,
                                                 int64_t *elementCount, void *arrayOfElements)
{
    ES_ENTER(cudnn, cudnnBackendGetAttribute);
    if (!es_det() || attributeName != CUDNN_ATTR_ENGINEHEUR_RESULTS ||
        attributeType != CUDNN_TYPE_BACKEND_DESCRIPTOR || requestedElementCount < 0)
        return es_bk_get(descriptor, attributeName, attributeType, requestedElementCount,
                         elementCount, arrayOfElements);
    void *rd = es_dnnd_real(descriptor);
    /* the real count query validates the call (descriptor, finalized) */
    int64_t total = 0;
    cudnnStatus_t st = ES_REAL(cudnn, cudnnBackendGetAttribute)(
        rd, attributeName, attributeType, 0, &total, NULL);
    if (st != CUDNN_STATUS_SUCCESS || (!elementCount && !arrayOfElements))
        return es_bk_get(descriptor, attributeName, attributeType, requestedElementCount,
                         elementCount, arrayOfElements);
    int pick = -1, known = 0;
    pthread_mutex_lock(&es_state_lock);
    es_bk_node_t *n = es_bk_find(descriptor);
    if (n) {
        known = n->picked;
        pick = n->pick;
    }
    pthread_mutex_unlock(&es_state_lock);
    if (!known) /* finalized before the shim followed it: no canonical engine known */
        pick = es_heur_choose(rd, NULL);
    if (pick >= ES_BK_MAX_RES)
        pick = -1;
    int64_t count = pick >= 0 ? 1 : 0;
    if (arrayOfElements && requestedElementCount >= 1 && pick >= 0) {
        cudnnBackendDescriptor_t out = ((cudnnBackendDescriptor_t *)arrayOfElements)[0];
        st = es_heur_fill(rd, pick, es_dnnd_real(out));
        if (st != CUDNN_STATUS_SUCCESS)
            return st;
        /* a move asks the heuristics again: the shim's answer there */
        es_dnnd_filled(descriptor, CUDNN_ATTR_ENGINEHEUR_RESULTS, 1, &out, pick);
        pthread_mutex_lock(&es_state_lock);
        es_bk_node_t *h = es_bk_find(descriptor), *c = es_bk_find(out);
        if (h && c)
            es_snap_set(&c->snap, h->snap);
        pthread_mutex_unlock(&es_state_lock);
    } else if (arrayOfElements) {
        count = 0; /* nothing requested or nothing deterministic */
    }
    if (elementCount)
        *elementCount = count;
    if (total > count)
        ES_DEBUG("cudnn heuristics: %lld engine config(s) of %lld given", (long long)count,
                 (long long)total);
    return CUDNN_STATUS_SUCCESS;
}

ES_EXPORT cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor)
{
    ES_ENTER(cudnn, cudnnBackendFinalize);
    void *rd = es_dnnd_real(descriptor);
    if (!es_det())
        return ES_REAL(cudnn, cudnnBackendFinalize)(rd);
    int type = -1;
    cudnnBackendDescriptor_t cfg = NULL, graph = NULL;
    pthread_mutex_lock(&es_state_lock);
    es_bk_node_t *n = es_bk_find(descriptor);
    if (n) {
        type = n->type;
        cfg = n->cfg;
        graph = n->graph;
    }
    pthread_mutex_unlock(&es_state_lock);
    if (type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && cfg) {
        int nondet = 0;
        es_cfg_engine(es_dnnd_real(cfg), &nondet);
        if (nondet) {
            ES_INFO("cudnn: execution plan on a nondeterministic engine refused");
            return CUDNN_STATUS_NOT_SUPPORTED;
        }
    }
    cudnnStatus_t st = ES_REAL(cudnn, cudnnBackendFinalize)(rd);
    if (st != CUDNN_STATUS_SUCCESS)
        return st;
    es_dnnd_finalized(descriptor, rd);
    if (type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR ||
        type == CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) {
        pthread_mutex_lock(&es_state_lock);
        if ((n = es_bk_find(descriptor)) != NULL)
            n->finalized = 1;
        pthread_mutex_unlock(&es_state_lock);
    }
    if (type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR) {
        /* the graph is alive now (it is set and finalized with the
         * heuristics): the canonical engine is found here */
        int pick = es_heur_choose(rd, es_dnnd_real(graph));
        pthread_mutex_lock(&es_state_lock);
        if ((n = es_bk_find(descriptor)) != NULL) {
            n->pick = pick;
            n->picked = 1;
        }
        pthread_mutex_unlock(&es_state_lock);
        es_dnnd_picked(descriptor, pick);
    }
    return st;
}

/* ---- d2: backend graphs on the portable kernels --------------------------------------- */

static void *es_vp_ptr(const es_bk_node_t *vp, int64_t uid)
{
    for (int i = 0; i < vp->nvp; i++)
        if (vp->uids[i] == uid)
            return vp->ptrs[i];
    return NULL;
}

/* Fills a from the graph and the variant pack; returns the direction, or
 * -1 when the portable kernels cannot run the graph. */
static int es_bk_args(const es_bk_snap_t *s, const es_bk_node_t *vp, es_conv_args_t *a)
{
    int conv = -1;
    for (int i = 0; i < s->nops; i++)
        if (s->ops[i].type != CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) {
            if (conv >= 0)
                return -1;
            conv = i;
        }
    if (conv < 0)
        return -1;
    const es_bk_op_t *op = &s->ops[conv];
    const es_bk_conv_t *cv = &op->conv;
    const es_bk_tensor_t *x = &op->t[0], *w = &op->t[1], *y = &op->t[2];
    int dir = op->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ? ES_CONV_FWD
              : op->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
                  ? ES_CONV_BWD_DATA
                  : ES_CONV_BWD_FILTER;
    if (!cv->set || cv->comp != CUDNN_DATA_FLOAT || cv->spatial != 2 || cv->npre != 2 ||
        cv->nstr != 2 || cv->ndil != 2 || (cv->npost == 2 && (cv->post[0] != cv->pre[0] ||
                                                             cv->post[1] != cv->pre[1])) ||
        x->nd != 4 || w->nd != 4 || y->nd != 4 || x->virt || w->virt)
        return -1;
    for (int i = 0; i < 2; i++)
        if (cv->pre[i] < 0 || cv->pre[i] > INT32_MAX || cv->str[i] < 1 ||
            cv->str[i] > INT32_MAX || cv->dil[i] < 1 || cv->dil[i] > INT32_MAX)
            return -1;
    int tx = es_conv_dtype(x->dtype), tw = es_conv_dtype(w->dtype), ty = es_conv_dtype(y->dtype);
    if (tx < 0 || tw < 0 || ty < 0)
        return -1;
    memset(a, 0, sizeof(*a));
    a->n = (int)x->dims[0], a->c = (int)x->dims[1], a->h = (int)x->dims[2], a->w = (int)x->dims[3];
    a->k = (int)w->dims[0], a->r = (int)w->dims[2], a->s = (int)w->dims[3];
    a->p = (int)y->dims[2], a->q = (int)y->dims[3];
    if (w->dims[1] < 1 || x->dims[1] % w->dims[1] || y->dims[0] != x->dims[0] ||
        y->dims[1] != w->dims[0])
        return -1;
    a->groups = (int)(x->dims[1] / w->dims[1]);
    a->pad_h = (int)cv->pre[0], a->pad_w = (int)cv->pre[1];
    a->u = (int)cv->str[0], a->v = (int)cv->str[1];
    a->dil_h = (int)cv->dil[0], a->dil_w = (int)cv->dil[1];
    a->flip = cv->mode == CUDNN_CONVOLUTION;
    a->xs_n = x->strides[0], a->xs_c = x->strides[1], a->xs_h = x->strides[2], a->xs_w = x->strides[3];
    a->ws_k = w->strides[0], a->ws_c = w->strides[1], a->ws_r = w->strides[2], a->ws_s = w->strides[3];
    a->ys_n = y->strides[0], a->ys_k = y->strides[1], a->ys_p = y->strides[2], a->ys_q = y->strides[3];
    a->alpha = (float)op->alpha;
    a->beta = (float)op->beta;
    void *px = es_vp_ptr(vp, x->uid), *pw = es_vp_ptr(vp, w->uid), *py = NULL;
    /* the pointwise chain: each operation consumes the previous virtual output */
    const es_bk_tensor_t *out = y;
    int used[ES_BK_MAX_OPS] = { 0 };
    used[conv] = 1;
    while (out->virt) {
        int next = -1;
        for (int i = 0; i < s->nops; i++)
            if (!used[i] && s->ops[i].type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR &&
                s->ops[i].t[0].uid == out->uid)
                next = i;
        if (next < 0 || dir != ES_CONV_FWD || a->nep >= ES_MAX_EP)
            return -1;
        const es_bk_op_t *pw = &s->ops[next];
        es_ep_t *e = &a->ep[a->nep];
        used[next] = 1;
        if (pw->pw.prec != CUDNN_DATA_FLOAT)
            return -1;
        switch (pw->pw.mode) {
        case CUDNN_POINTWISE_ADD: {
            const es_bk_tensor_t *b = &pw->t[1];
            if (b->nd != 4 || b->virt || (e->dt = es_conv_dtype(b->dtype)) < 0 ||
                !(e->b = es_vp_ptr(vp, b->uid)))
                return -1;
            for (int d = 0; d < 4; d++)
                if (b->dims[d] != 1 && b->dims[d] != y->dims[d])
                    return -1;
            e->op = ES_EP_ADD;
            e->a1 = (float)pw->alpha;
            e->a2 = (float)pw->beta;
            e->bs_n = b->dims[0] == 1 ? 0 : b->strides[0];
            e->bs_k = b->dims[1] == 1 ? 0 : b->strides[1];
            e->bs_p = b->dims[2] == 1 ? 0 : b->strides[2];
            e->bs_q = b->dims[3] == 1 ? 0 : b->strides[3];
            a->nep++;
            break;
        }
        case CUDNN_POINTWISE_RELU_FWD:
            if (pw->pw.lo != 0.0 || pw->pw.slope != 0.0)
                return -1;
            e->op = pw->pw.hi_set ? ES_EP_CLIP : ES_EP_RELU;
            e->hi = (float)pw->pw.hi;
            a->nep++;
            break;
        case CUDNN_POINTWISE_IDENTITY:
            break;
        default:
            return -1;
        }
        out = &pw->t[2];
        if (out->nd != 4 || out->dims[0] != y->dims[0] || out->dims[1] != y->dims[1] ||
            out->dims[2] != y->dims[2] || out->dims[3] != y->dims[3])
            return -1;
    }
    for (int i = 0; i < s->nops; i++)
        if (!used[i])
            return -1;
    if (out != y) { /* fused: the chain's last output is stored; no beta */
        if ((ty = es_conv_dtype(out->dtype)) < 0)
            return -1;
        a->ys_n = out->strides[0], a->ys_k = out->strides[1];
        a->ys_p = out->strides[2], a->ys_q = out->strides[3];
        a->beta = 0.0f;
    }
    py = es_vp_ptr(vp, out->uid);
    if (!px || !pw || !py)
        return -1;
    switch (dir) {
    case ES_CONV_FWD:
        a->in0 = px, a->in1 = pw, a->out = py;
        a->t_in0 = tx, a->t_in1 = tw, a->t_out = ty;
        break;
    case ES_CONV_BWD_DATA:
        a->in0 = py, a->in1 = pw, a->out = px;
        a->t_in0 = ty, a->t_in1 = tw, a->t_out = tx;
        break;
    default:
        a->in0 = px, a->in1 = py, a->out = pw;
        a->t_in0 = tx, a->t_in1 = ty, a->t_out = tw;
        break;
    }
    if (es_conv_check(dir, a))
        return -1;
    return dir;
}

/* Runs the plan's graph on the portable kernels. Returns 0 with *status
 * set, or -1 when cuDNN must run it. */
static int es_bk_portable(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                          cudnnBackendDescriptor_t vpd, cudnnStatus_t *status)
{
    es_bk_snap_t *s = NULL;
    es_bk_node_t vp;
    int have_vp = 0;
    pthread_mutex_lock(&es_state_lock);
    es_bk_node_t *p = es_bk_find(plan), *v = es_bk_find(vpd);
    if (p && p->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR && p->finalized)
        s = es_snap_ref(p->snap);
    if (v && v->type == CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR && v->finalized) {
        vp.nvp = v->nvp;
        memcpy(vp.uids, v->uids, sizeof(vp.uids));
        memcpy(vp.ptrs, v->ptrs, sizeof(vp.ptrs));
        have_vp = 1;
    }
    pthread_mutex_unlock(&es_state_lock);
    int ret = -1;
    es_conv_args_t a;
    cudaStream_t stream = NULL;
    if (!s || !have_vp)
        goto out;
    int dir = es_bk_args(s, &vp, &a);
    if (dir < 0 || ES_REAL(cudnn, cudnnGetStream)(handle, &stream) != CUDNN_STATUS_SUCCESS)
        goto out;
    int r = es_conv_launch(dir, &a, (CUstream)stream);
    if (r < 0)
        goto out;
    *status = r == CUDA_SUCCESS ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED;
    ret = 0;
out:
    if (ret < 0)
        ES_DEBUG("d2: cudnn backend plan %p not portable: cuDNN runs it", plan);
    es_snap_unref(s);
    return ret;
}

ES_EXPORT cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle,
                                            cudnnBackendDescriptor_t executionPlan,
                                            cudnnBackendDescriptor_t variantPack)
{
    ES_ENTER(cudnn, cudnnBackendExecute);
    cudnnStatus_t st;
    if (es_cfg.determinism == ES_DET_D2 && handle && executionPlan && variantPack &&
        es_bk_portable(handle, executionPlan, variantPack, &st) == 0)
        return st;
    void *rp = es_dnnd_real(executionPlan), *rv = es_dnnd_real(variantPack);
    if (__builtin_expect(!rp || !rv, 0) && (st = es_dnnd_lost(executionPlan, variantPack)))
        return st;
    return ES_REAL(cudnn, cudnnBackendExecute)(handle, rp, rv);
}

/* CUDA graphs of a plan: the descriptors translated (simcuda answers
 * NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API; a move refuses while CUDA graphs
 * are alive, docs/MOVING.md). */
ES_EXPORT cudnnStatus_t cudnnBackendPopulateCudaGraph(cudnnHandle_t handle,
                                                      cudnnBackendDescriptor_t executionPlan,
                                                      cudnnBackendDescriptor_t variantPack,
                                                      cudaGraph_t graph)
{
    ES_ENTER(cudnn, cudnnBackendPopulateCudaGraph);
    return ES_REAL(cudnn, cudnnBackendPopulateCudaGraph)(handle, es_dnnd_real(executionPlan),
                                                         es_dnnd_real(variantPack), graph);
}

ES_EXPORT cudnnStatus_t cudnnBackendUpdateCudaGraph(cudnnHandle_t handle,
                                                    cudnnBackendDescriptor_t executionPlan,
                                                    cudnnBackendDescriptor_t variantPack,
                                                    cudaGraph_t graph)
{
    ES_ENTER(cudnn, cudnnBackendUpdateCudaGraph);
    return ES_REAL(cudnn, cudnnBackendUpdateCudaGraph)(handle, es_dnnd_real(executionPlan),
                                                       es_dnnd_real(variantPack), graph);
}
