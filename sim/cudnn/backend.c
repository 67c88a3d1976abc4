/* simcuda cuDNN backend API: the part of the graph API that a framework
 * (PyTorch through cudnn-frontend) uses for convolutions: tensor,
 * convolution and pointwise descriptors, operation graphs of one
 * convolution (forward, backward data, backward filter), a forward
 * convolution followed by a chain of pointwise operations (PyTorch's fused
 * conv + add + bias + ReLU), engine heuristics returning engine configs,
 * engines with CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, knob choices and knob
 * information, engine configs, execution plans, variant packs and
 * cudnnBackendExecute.
 *
 * Engine global index i of a graph is legacy algorithm i of the
 * convolution's direction (so backward filter engines 0 and 3 and backward
 * data engine 0 carry CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC and really
 * accumulate in a varying order); the heuristics rank them with the legacy
 * _v7 rules.
 *
 * What cudnn-frontend does and this file accepts: a count query with a
 * NULL array (numerical and behaviour notes: requestedElementCount > 0,
 * arrayOfElements NULL), knob-choice descriptors it reads the engine
 * config's knobs into, an execution plan without CUDNN_ATTR_EXECUTION_PLAN_HANDLE
 * (deprecated in cuDNN 9; frontends since 1.13 never set it: the plan runs
 * on the handle given to cudnnBackendExecute).
 *
 * Data: fp32, and fp16 / bf16 tensors with fp32 compute: a 16-bit operand
 * is widened into the workspace by the conversion kernel of the library's
 * module (simcudnn_convert, sim/cudnn/kernels.cu), the engine computes in
 * fp32 as for an fp32 graph, and a 16-bit result is rounded into its tensor by the same
 * kernel (so a 16-bit graph gives the fp32 engine's bits, rounded once).
 *
 * All the work (convolution, pointwise steps, conversions) is kernels of
 * the library's module launched on the handle's stream (sim_cudnn_enqueue);
 * this file never touches device memory.
 *
 * Descriptor-valued attributes are stored as private copies (so the caller
 * may destroy what it set), and getting one copies into descriptors the
 * caller created, as cuDNN does.
 */
#include "sim/cudnn/cudnn_int.h"
#include "sim/cudnn/backend_kernels.h"
#include "sim/cudnn/kparams.h"

#include <stdlib.h>
#include <string.h>

#define BD_MAGIC 0x646b6e62u /* "bnkd" */
#define BD_MAX_OPS 8
#define BD_MAX_RES 8
#define BD_MAX_VP 16
#define BD_MAX_KNOBS 8
#define BD_ALIGN 256

typedef struct bd bd_t;
struct bd {
    uint32_t magic;
    cudnnBackendDescriptorType_t type;
    int finalized;
    /* tensor */
    cudnnDataType_t dtype;
    int nd, nstrides;
    int64_t dims[CUDNN_DIM_MAX], strides[CUDNN_DIM_MAX];
    int64_t uid, align;
    int uid_set, is_virtual;
    /* convolution */
    cudnnDataType_t comp;
    cudnnConvolutionMode_t mode;
    int64_t spatial;
    int npre, npost, nstr, ndil;
    int64_t pre[CUDNN_DIM_MAX], post[CUDNN_DIM_MAX], str[CUDNN_DIM_MAX], dil[CUDNN_DIM_MAX];
    /* pointwise descriptor */
    int pw_mode, pw_mode_set;
    cudnnDataType_t pw_prec;
    double relu_lo, relu_hi, relu_slope;
    int relu_hi_set;
    /* operations. Convolution: t[0] x (or dx), t[1] w (or dw), t[2] y (or
     * dy). Pointwise: t[0] x, t[1] b, t[2] y; alpha1 in alpha, alpha2 in
     * beta. */
    double alpha, beta;
    bd_t *conv, *pw, *t[3];
    int dir;
    sim_conv_t prob;
    /* operation graph: the operations; after finalize, the convolution and
     * the pointwise chain after it, in order */
    cudnnHandle_t handle;
    uint64_t hserial;     /* the handle's serial when it was set */
    CUcontext hctx;       /* its context and device then */
    CUuuid huuid;
    /* execution plan, once finalized: the context and device it is for */
    CUcontext pctx;
    CUuuid puuid;
    bd_t *ops[BD_MAX_OPS];
    int nops;
    int conv_op, chain[BD_MAX_OPS], nchain;
    /* engine heuristics, engine, engine config, plan: the chain */
    bd_t *graph;   /* engine heuristics, engine */
    int64_t gidx;  /* engine */
    int heur_mode; /* engine heuristics */
    bd_t *res[BD_MAX_RES];
    int nres;
    bd_t *engine;  /* engine config */
    bd_t *knobs[BD_MAX_KNOBS];
    int nknobs;
    bd_t *cfg;     /* plan */
    /* knob choice */
    int64_t knob_type, knob_value;
    int knob_type_set;
    /* variant pack */
    int nuids, nptrs;
    int64_t uids[BD_MAX_VP];
    void *ptrs[BD_MAX_VP];
    void *workspace;
};

#define FAIL(st, ...) sim_cudnn_fail((st), __VA_ARGS__)

/* SIMBK_* of a tensor data type (-1: not one the engines take). */
static int bk_type(cudnnDataType_t t)
{
    switch (t) {
    case CUDNN_DATA_FLOAT: return SIMBK_F32;
    case CUDNN_DATA_HALF: return SIMBK_F16;
    case CUDNN_DATA_BFLOAT16: return SIMBK_BF16;
    default: return -1;
    }
}

static bd_t *bd_cast(cudnnBackendDescriptor_t d)
{
    bd_t *b = d;
    return b && b->magic == BD_MAGIC ? b : NULL;
}

static void bd_free_children(bd_t *b);

static void bd_free(bd_t *b)
{
    if (!b)
        return;
    bd_free_children(b);
    b->magic = 0;
    free(b);
}

static void bd_free_children(bd_t *b)
{
    bd_free(b->conv);
    bd_free(b->pw);
    for (int i = 0; i < 3; i++)
        bd_free(b->t[i]);
    for (int i = 0; i < b->nops; i++)
        bd_free(b->ops[i]);
    bd_free(b->graph);
    for (int i = 0; i < b->nres; i++)
        bd_free(b->res[i]);
    for (int i = 0; i < b->nknobs; i++)
        bd_free(b->knobs[i]);
    bd_free(b->engine);
    bd_free(b->cfg);
    b->conv = b->pw = b->graph = b->engine = b->cfg = NULL;
    memset(b->t, 0, sizeof(b->t));
    b->nops = b->nres = b->nknobs = 0;
}

/* A deep copy (NULL on no memory). */
static bd_t *bd_clone(const bd_t *s)
{
    if (!s)
        return NULL;
    bd_t *b = malloc(sizeof(*b));
    if (!b)
        return NULL;
    *b = *s;
    int ok = 1;
#define CL(f)                          \
    if (s->f) {                        \
        b->f = bd_clone(s->f);         \
        ok &= b->f != NULL;            \
    }
    CL(conv);
    CL(pw);
    CL(t[0]);
    CL(t[1]);
    CL(t[2]);
    CL(graph);
    CL(engine);
    CL(cfg);
    for (int i = 0; i < s->nops; i++)
        CL(ops[i]);
    for (int i = 0; i < s->nres; i++)
        CL(res[i]);
    for (int i = 0; i < s->nknobs; i++)
        CL(knobs[i]);
#undef CL
    if (!ok) {
        bd_free(b);
        return NULL;
    }
    return b;
}

/* Copies s into the caller's descriptor d (same type), keeping d itself. */
static cudnnStatus_t bd_copy_into(bd_t *d, const bd_t *s)
{
    bd_t *c = bd_clone(s);
    if (!c)
        return FAIL(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "no memory");
    bd_free_children(d);
    *d = *c;
    free(c); /* children now belong to d */
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t descriptorType,
                                           cudnnBackendDescriptor_t *descriptor)
{
    if (!descriptor)
        return FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "descriptor is NULL");
    switch (descriptorType) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR:
    case CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR:
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
        break;
    default:
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "backend descriptor type %d is not supported",
                    (int)descriptorType);
    }
    bd_t *b = calloc(1, sizeof(*b));
    if (!b)
        return FAIL(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "no memory");
    b->magic = BD_MAGIC;
    b->type = descriptorType;
    b->dtype = CUDNN_DATA_FLOAT;
    b->comp = CUDNN_DATA_FLOAT;
    b->pw_prec = CUDNN_DATA_FLOAT;
    b->mode = CUDNN_CROSS_CORRELATION;
    b->alpha = 1.0;
    /* pointwise: alpha1 = alpha2 = 1 unless set */
    b->beta = descriptorType == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR ? 1.0 : 0.0;
    b->gidx = -1;
    b->conv_op = -1;
    *descriptor = b;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor)
{
    if (!descriptor)
        return CUDNN_STATUS_SUCCESS;
    bd_t *b = bd_cast(descriptor);
    if (!b)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "not a backend descriptor");
    bd_free(b);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t descriptor)
{
    bd_t *b = bd_cast(descriptor);
    if (!b)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "not a backend descriptor");
    return CUDNN_STATUS_SUCCESS;
}

/* ---- attribute helpers -------------------------------------------------------------- */

static cudnnStatus_t want_type(cudnnBackendAttributeType_t got, cudnnBackendAttributeType_t want)
{
    if (got != want)
        return FAIL(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "attribute type %d, expected %d",
                    (int)got, (int)want);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t set_i64s(cudnnBackendAttributeType_t type, int64_t count, const void *v,
                              int64_t *dst, int *n)
{
    cudnnStatus_t st = want_type(type, CUDNN_TYPE_INT64);
    if (st)
        return st;
    if (count < 0 || count > CUDNN_DIM_MAX)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "element count %lld", (long long)count);
    memcpy(dst, v, (size_t)count * sizeof(int64_t));
    *n = (int)count;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t set_i64(cudnnBackendAttributeType_t type, int64_t count, const void *v,
                             int64_t *dst)
{
    cudnnStatus_t st = want_type(type, CUDNN_TYPE_INT64);
    if (st)
        return st;
    if (count != 1)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "element count %lld, expected 1", (long long)count);
    memcpy(dst, v, sizeof(int64_t));
    return CUDNN_STATUS_SUCCESS;
}

/* A FLOAT or DOUBLE scalar (the frontend passes either). */
static cudnnStatus_t set_real(cudnnBackendAttributeType_t type, int64_t count, const void *v,
                              double *dst)
{
    if (type == CUDNN_TYPE_FLOAT)
        *dst = *(const float *)v;
    else if (type == CUDNN_TYPE_DOUBLE)
        *dst = *(const double *)v;
    else
        return want_type(type, CUDNN_TYPE_FLOAT);
    if (count != 1)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "element count %lld", (long long)count);
    return CUDNN_STATUS_SUCCESS;
}

/* Checks that v holds one finalized descriptor of type want. */
static cudnnStatus_t get_desc_arg(cudnnBackendAttributeType_t type, int64_t count, const void *v,
                                  cudnnBackendDescriptorType_t want, bd_t **out)
{
    cudnnStatus_t st = want_type(type, CUDNN_TYPE_BACKEND_DESCRIPTOR);
    if (st)
        return st;
    if (count != 1)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "element count %lld, expected 1", (long long)count);
    bd_t *s = bd_cast(*(cudnnBackendDescriptor_t const *)v);
    if (!s)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "not a backend descriptor");
    if (s->type != want)
        return FAIL(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "descriptor type %d, expected %d",
                    (int)s->type, (int)want);
    if (!s->finalized)
        return FAIL(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "descriptor not finalized");
    *out = s;
    return CUDNN_STATUS_SUCCESS;
}

/* Stores a private copy of a finalized descriptor of type want. */
static cudnnStatus_t set_desc(cudnnBackendAttributeType_t type, int64_t count, const void *v,
                              cudnnBackendDescriptorType_t want, bd_t **dst)
{
    bd_t *s = NULL;
    cudnnStatus_t st = get_desc_arg(type, count, v, want, &s);
    if (st)
        return st;
    bd_t *c = bd_clone(s);
    if (!c)
        return FAIL(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "no memory");
    bd_free(*dst);
    *dst = c;
    return CUDNN_STATUS_SUCCESS;
}

/* Stores copies of count finalized descriptors of type want (replacing). */
static cudnnStatus_t set_descs(cudnnBackendAttributeType_t type, int64_t count, const void *v,
                               cudnnBackendDescriptorType_t want, int any_op, bd_t **dst,
                               int *n, int max)
{
    cudnnStatus_t st = want_type(type, CUDNN_TYPE_BACKEND_DESCRIPTOR);
    if (st)
        return st;
    if (count < 0 || count > max)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "%lld descriptors (at most %d)", (long long)count,
                    max);
    bd_t *copies[BD_MAX_OPS > BD_MAX_KNOBS ? BD_MAX_OPS : BD_MAX_KNOBS];
    int k = 0;
    for (int64_t i = 0; i < count; i++) {
        bd_t *s = bd_cast(((cudnnBackendDescriptor_t const *)v)[i]);
        if (!s)
            st = FAIL(CUDNN_STATUS_BAD_PARAM, "element %lld is not a descriptor", (long long)i);
        else if (!any_op && s->type != want)
            st = FAIL(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "element %lld: type %d, expected %d",
                      (long long)i, (int)s->type, (int)want);
        else if (!s->finalized)
            st = FAIL(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "element %lld not finalized",
                      (long long)i);
        else if (!(copies[k] = bd_clone(s)))
            st = FAIL(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "no memory");
        else
            k++;
        if (st)
            break;
    }
    if (st) {
        while (k > 0)
            bd_free(copies[--k]);
        return st;
    }
    for (int i = 0; i < *n; i++)
        bd_free(dst[i]);
    memcpy(dst, copies, (size_t)k * sizeof(copies[0]));
    *n = k;
    return CUDNN_STATUS_SUCCESS;
}

static int is_conv_op(cudnnBackendDescriptorType_t t)
{
    return t == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ||
           t == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
           t == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
}

static int is_op(cudnnBackendDescriptorType_t t)
{
    return is_conv_op(t) || t == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR;
}

static cudnnStatus_t set_tensor_attr(bd_t *b, cudnnBackendAttributeName_t name,
                                     cudnnBackendAttributeType_t type, int64_t count,
                                     const void *v, int *handled)
{
    cudnnStatus_t st;
    *handled = 1;
    switch (name) {
    case CUDNN_ATTR_TENSOR_DATA_TYPE:
        if ((st = want_type(type, CUDNN_TYPE_DATA_TYPE)))
            return st;
        b->dtype = *(const cudnnDataType_t *)v;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_TENSOR_DIMENSIONS:
        return set_i64s(type, count, v, b->dims, &b->nd);
    case CUDNN_ATTR_TENSOR_STRIDES:
        return set_i64s(type, count, v, b->strides, &b->nstrides);
    case CUDNN_ATTR_TENSOR_UNIQUE_ID:
        b->uid_set = 1;
        return set_i64(type, count, v, &b->uid);
    case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT:
        return set_i64(type, count, v, &b->align);
    case CUDNN_ATTR_TENSOR_IS_VIRTUAL:
        if ((st = want_type(type, CUDNN_TYPE_BOOLEAN)))
            return st;
        b->is_virtual = *(const _Bool *)v;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_TENSOR_IS_BY_VALUE:
        if ((st = want_type(type, CUDNN_TYPE_BOOLEAN)))
            return st;
        if (*(const _Bool *)v)
            return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "by-value tensors are not supported");
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_TENSOR_REORDERING_MODE:
        if ((st = want_type(type, CUDNN_TYPE_TENSOR_REORDERING_MODE)))
            return st;
        if (*(const cudnnBackendTensorReordering_t *)v != CUDNN_TENSOR_REORDERING_NONE)
            return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "tensor reordering is not supported");
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_TENSOR_VECTOR_COUNT: {
        int64_t vc = 1;
        if ((st = set_i64(type, count, v, &vc)))
            return st;
        if (vc != 1)
            return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "vectorized tensors are not supported");
        return CUDNN_STATUS_SUCCESS;
    }
    case CUDNN_ATTR_TENSOR_VECTORIZED_DIMENSION: {
        int64_t vd;
        return set_i64(type, count, v, &vd);
    }
    default:
        *handled = 0;
        return CUDNN_STATUS_SUCCESS;
    }
}

static cudnnStatus_t set_pointwise_attr(bd_t *b, cudnnBackendAttributeName_t name,
                                        cudnnBackendAttributeType_t type, int64_t count,
                                        const void *v, int *handled)
{
    cudnnStatus_t st;
    *handled = 1;
    switch (name) {
    case CUDNN_ATTR_POINTWISE_MODE:
        if ((st = want_type(type, CUDNN_TYPE_POINTWISE_MODE)))
            return st;
        b->pw_mode = (int)*(const cudnnPointwiseMode_t *)v;
        b->pw_mode_set = 1;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_POINTWISE_MATH_PREC:
        if ((st = want_type(type, CUDNN_TYPE_DATA_TYPE)))
            return st;
        b->pw_prec = *(const cudnnDataType_t *)v;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_ATTR_POINTWISE_NAN_PROPAGATION:
        return want_type(type, CUDNN_TYPE_NAN_PROPOGATION);
    case CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP:
        return set_real(type, count, v, &b->relu_lo);
    case CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP:
        b->relu_hi_set = 1;
        return set_real(type, count, v, &b->relu_hi);
    case CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE:
        return set_real(type, count, v, &b->relu_slope);
    default:
        *handled = 0;
        return CUDNN_STATUS_SUCCESS;
    }
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count,
                                       const void *v)
{
    bd_t *b = bd_cast(descriptor);
    if (!b)
        return FAIL(descriptor ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_BAD_PARAM_NULL_POINTER,
                    "not a backend descriptor");
    if (!v && count > 0)
        return FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "arrayOfElements is NULL");
    if (b->finalized)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "descriptor already finalized");
    cudnnStatus_t st;
    int handled = 0;
    switch (b->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
        st = set_tensor_attr(b, name, type, count, v, &handled);
        if (handled)
            return st;
        break;
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
        st = set_pointwise_attr(b, name, type, count, v, &handled);
        if (handled)
            return st;
        break;
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
        switch (name) {
        case CUDNN_ATTR_CONVOLUTION_COMP_TYPE:
            if ((st = want_type(type, CUDNN_TYPE_DATA_TYPE)))
                return st;
            b->comp = *(const cudnnDataType_t *)v;
            return CUDNN_STATUS_SUCCESS;
        case CUDNN_ATTR_CONVOLUTION_CONV_MODE:
            if ((st = want_type(type, CUDNN_TYPE_CONVOLUTION_MODE)))
                return st;
            b->mode = *(const cudnnConvolutionMode_t *)v;
            return CUDNN_STATUS_SUCCESS;
        case CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS:
            return set_i64(type, count, v, &b->spatial);
        case CUDNN_ATTR_CONVOLUTION_DILATIONS:
            return set_i64s(type, count, v, b->dil, &b->ndil);
        case CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES:
            return set_i64s(type, count, v, b->str, &b->nstr);
        case CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS:
            return set_i64s(type, count, v, b->pre, &b->npre);
        case CUDNN_ATTR_CONVOLUTION_POST_PADDINGS:
            return set_i64s(type, count, v, b->post, &b->npost);
        default:
            break;
        }
        break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: {
        /* attribute ids: base + 0 alpha, 1 beta, 2 conv, 3 w, 4 x/dx, 5 y/dy
         * (forward 700.., data 706.., filter 712.. with dw, x, dy order) */
        int base = b->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ? 700
                   : b->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
                       ? 706
                       : 712;
        int k = (int)name - base;
        if (k < 0 || k > 5)
            break;
        if (k <= 1)
            return set_real(type, count, v, k == 0 ? &b->alpha : &b->beta);
        if (k == 2)
            return set_desc(type, count, v, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &b->conv);
        /* which tensor slot: x-like 0, w-like 1, y-like 2 */
        /* forward W X Y, data W DX DY, filter DW X DY: the same order */
        int slot = k == 3 ? 1 : k == 4 ? 0 : 2;
        return set_desc(type, count, v, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &b->t[slot]);
    }
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
        switch (name) {
        case CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR:
            return set_desc(type, count, v, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &b->pw);
        case CUDNN_ATTR_OPERATION_POINTWISE_XDESC:
            return set_desc(type, count, v, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &b->t[0]);
        case CUDNN_ATTR_OPERATION_POINTWISE_BDESC:
            return set_desc(type, count, v, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &b->t[1]);
        case CUDNN_ATTR_OPERATION_POINTWISE_YDESC:
            return set_desc(type, count, v, CUDNN_BACKEND_TENSOR_DESCRIPTOR, &b->t[2]);
        case CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1:
            return set_real(type, count, v, &b->alpha);
        case CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2:
            return set_real(type, count, v, &b->beta);
        default:
            break;
        }
        break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
        if (name == CUDNN_ATTR_OPERATIONGRAPH_HANDLE) {
            if ((st = want_type(type, CUDNN_TYPE_HANDLE)))
                return st;
            cudnnHandle_t h = *(const cudnnHandle_t *)v;
            if ((st = sim_cudnn_check_handle(h)))
                return st;
            b->handle = h;
            b->hserial = h->serial;
            b->hctx = h->ctx;
            b->huuid = h->uuid;
            return CUDNN_STATUS_SUCCESS;
        }
        if (name == CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED) {
            if ((st = want_type(type, CUDNN_TYPE_BOOLEAN)))
                return st;
            if (*(const _Bool *)v)
                return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "dynamic shapes are not supported");
            return CUDNN_STATUS_SUCCESS;
        }
        if (name == CUDNN_ATTR_OPERATIONGRAPH_OPS) {
            if (count < 1)
                return FAIL(CUDNN_STATUS_BAD_PARAM, "%lld operations", (long long)count);
            for (int64_t i = 0; i < count && v; i++) {
                bd_t *op = bd_cast(((cudnnBackendDescriptor_t const *)v)[i]);
                if (op && !is_op(op->type))
                    return FAIL(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE,
                                "operation %lld: descriptor type %d is not an operation",
                                (long long)i, (int)op->type);
            }
            return set_descs(type, count, v, 0, 1, b->ops, &b->nops, BD_MAX_OPS);
        }
        break;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
        if (name == CUDNN_ATTR_ENGINEHEUR_MODE) {
            if ((st = want_type(type, CUDNN_TYPE_HEUR_MODE)))
                return st;
            int m = *(const cudnnBackendHeurMode_t *)v;
            if (m < 0 || m >= CUDNN_HEUR_MODES_COUNT)
                return FAIL(CUDNN_STATUS_BAD_PARAM, "heuristics mode %d", m);
            b->heur_mode = m;
            return CUDNN_STATUS_SUCCESS;
        }
        if (name == CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH)
            return set_desc(type, count, v, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &b->graph);
        if (name == CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET)
            return want_type(type, CUDNN_TYPE_INT32); /* accepted, not used */
        break;
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
        if (name == CUDNN_ATTR_ENGINE_OPERATION_GRAPH)
            return set_desc(type, count, v, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &b->graph);
        if (name == CUDNN_ATTR_ENGINE_GLOBAL_INDEX)
            return set_i64(type, count, v, &b->gidx);
        if (name == CUDNN_ATTR_ENGINE_SM_COUNT_TARGET)
            return want_type(type, CUDNN_TYPE_INT32);
        break;
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
        if (name == CUDNN_ATTR_ENGINECFG_ENGINE)
            return set_desc(type, count, v, CUDNN_BACKEND_ENGINE_DESCRIPTOR, &b->engine);
        if (name == CUDNN_ATTR_ENGINECFG_KNOB_CHOICES)
            /* stored, reported back; the engines have no knobs to tune */
            return set_descs(type, count, v, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, 0, b->knobs,
                             &b->nknobs, BD_MAX_KNOBS);
        break;
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR:
        if (name == CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE) {
            if ((st = want_type(type, CUDNN_TYPE_KNOB_TYPE)))
                return st;
            int kt = (int)*(const cudnnBackendKnobType_t *)v;
            if (kt < 0 || kt >= CUDNN_KNOB_TYPE_COUNTS)
                return FAIL(CUDNN_STATUS_BAD_PARAM, "knob type %d", kt);
            b->knob_type = kt;
            b->knob_type_set = 1;
            return CUDNN_STATUS_SUCCESS;
        }
        if (name == CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE)
            return set_i64(type, count, v, &b->knob_value);
        break;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
        if (name == CUDNN_ATTR_EXECUTION_PLAN_HANDLE) {
            if ((st = want_type(type, CUDNN_TYPE_HANDLE)))
                return st;
            cudnnHandle_t h = *(const cudnnHandle_t *)v;
            if ((st = sim_cudnn_check_handle(h)))
                return st;
            b->handle = h;
            b->hserial = h->serial;
            b->hctx = h->ctx;
            b->huuid = h->uuid;
            return CUDNN_STATUS_SUCCESS;
        }
        if (name == CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG)
            return set_desc(type, count, v, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &b->cfg);
        break;
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
        if (name == CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS) {
            if ((st = want_type(type, CUDNN_TYPE_INT64)))
                return st;
            if (count < 0 || count > BD_MAX_VP)
                return FAIL(CUDNN_STATUS_BAD_PARAM, "%lld unique ids", (long long)count);
            memcpy(b->uids, v, (size_t)count * sizeof(int64_t));
            b->nuids = (int)count;
            return CUDNN_STATUS_SUCCESS;
        }
        if (name == CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS) {
            if ((st = want_type(type, CUDNN_TYPE_VOID_PTR)))
                return st;
            if (count < 0 || count > BD_MAX_VP)
                return FAIL(CUDNN_STATUS_BAD_PARAM, "%lld data pointers", (long long)count);
            memcpy(b->ptrs, v, (size_t)count * sizeof(void *));
            b->nptrs = (int)count;
            return CUDNN_STATUS_SUCCESS;
        }
        if (name == CUDNN_ATTR_VARIANT_PACK_WORKSPACE) {
            if ((st = want_type(type, CUDNN_TYPE_VOID_PTR)))
                return st;
            b->workspace = count ? *(void *const *)v : NULL;
            return CUDNN_STATUS_SUCCESS;
        }
        if (name == CUDNN_ATTR_VARIANT_PACK_INTERMEDIATES)
            return CUDNN_STATUS_SUCCESS;
        break;
    default:
        break;
    }
    return FAIL(CUDNN_STATUS_BAD_PARAM, "attribute %d does not apply to descriptor type %d",
                (int)name, (int)b->type);
}

/* ---- finalize ------------------------------------------------------------------- */

static void t4_from(const bd_t *t, sim_t4_t *v)
{
    v->n = (int)t->dims[0];
    v->c = (int)t->dims[1];
    v->h = (int)t->dims[2];
    v->w = (int)t->dims[3];
    v->sn = t->strides[0];
    v->sc = t->strides[1];
    v->sh = t->strides[2];
    v->sw = t->strides[3];
}

static cudnnStatus_t finalize_conv_op(bd_t *b)
{
    if (!b->conv || !b->t[0] || !b->t[1] || !b->t[2])
        return FAIL(CUDNN_STATUS_BAD_PARAM, "convolution operation lacks a descriptor");
    const bd_t *cv = b->conv, *x = b->t[0], *w = b->t[1], *y = b->t[2];
    if (bk_type(x->dtype) < 0 || bk_type(w->dtype) < 0 || bk_type(y->dtype) < 0 ||
        cv->comp != CUDNN_DATA_FLOAT || (y->is_virtual && y->dtype != CUDNN_DATA_FLOAT))
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
                    "fp32 / fp16 / bf16 tensors with fp32 compute only");
    b->dir = b->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR ? SIM_DIR_FWD
             : b->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
                 ? SIM_DIR_BWD_DATA
                 : SIM_DIR_BWD_FILTER;
    /* only a forward convolution's output may be virtual (fused epilogue) */
    if (x->is_virtual || w->is_virtual || (y->is_virtual && b->dir != SIM_DIR_FWD))
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "virtual convolution operands");
    sim_conv_t *p = &b->prob;
    memset(p, 0, sizeof(*p));
    t4_from(x, &p->x);
    t4_from(w, &p->w);
    t4_from(y, &p->y);
    if (p->w.c <= 0 || p->x.c % p->w.c)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "input channels %d not a multiple of filter's %d",
                    p->x.c, p->w.c);
    p->groups = p->x.c / p->w.c;
    if (p->w.n % p->groups)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "output channels not a multiple of the groups");
    p->pad_h = (int)cv->pre[0];
    p->pad_w = (int)cv->pre[1];
    p->str_h = (int)cv->str[0];
    p->str_w = (int)cv->str[1];
    p->dil_h = (int)cv->dil[0];
    p->dil_w = (int)cv->dil[1];
    p->flip = cv->mode == CUDNN_CONVOLUTION;
    int oh = sim_conv_out_dim(p->x.h, p->pad_h, p->w.h, p->dil_h, p->str_h);
    int ow = sim_conv_out_dim(p->x.w, p->pad_w, p->w.w, p->dil_w, p->str_w);
    if (p->y.n != p->x.n || p->y.c != p->w.n || p->y.h != oh || p->y.w != ow)
        return FAIL(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                    "output %dx%dx%dx%d does not match the convolution's %dx%dx%dx%d", p->y.n,
                    p->y.c, p->y.h, p->y.w, p->x.n, p->w.n, oh, ow);
    if ((long long)p->w.h * p->w.w > SIMCUDNN_MAX_TAPS)
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "filters of more than %d taps are not supported",
                    SIMCUDNN_MAX_TAPS);
    return CUDNN_STATUS_SUCCESS;
}

static int same_dims(const bd_t *a, const bd_t *b)
{
    if (a->nd != b->nd)
        return 0;
    for (int i = 0; i < a->nd; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return 1;
}

static cudnnStatus_t finalize_pw_op(bd_t *b)
{
    if (!b->pw || !b->t[0] || !b->t[2])
        return FAIL(CUDNN_STATUS_BAD_PARAM, "pointwise operation needs a mode, x and y");
    const bd_t *pw = b->pw, *x = b->t[0], *bt = b->t[1], *y = b->t[2];
    switch (pw->pw_mode) {
    case CUDNN_POINTWISE_ADD:
        if (!bt)
            return FAIL(CUDNN_STATUS_BAD_PARAM, "pointwise ADD needs a b tensor");
        break;
    case CUDNN_POINTWISE_RELU_FWD:
        if (pw->relu_lo != 0.0 || pw->relu_slope != 0.0)
            return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "ReLU with a lower clip or slope");
        break;
    case CUDNN_POINTWISE_IDENTITY:
        break;
    default:
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "pointwise mode %d is not supported",
                    pw->pw_mode);
    }
    if (pw->pw_prec != CUDNN_DATA_FLOAT || x->dtype != CUDNN_DATA_FLOAT ||
        bk_type(y->dtype) < 0 || (y->is_virtual && y->dtype != CUDNN_DATA_FLOAT) ||
        (bt && bk_type(bt->dtype) < 0))
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
                    "fp32 pointwise operations on fp32 / fp16 / bf16 tensors only");
    if (!same_dims(x, y) || x->nd != 4)
        return FAIL(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "pointwise x and y dimensions differ");
    if (bt) {
        if (bt->is_virtual || bt->nd != 4)
            return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "pointwise b must be a real 4-d tensor");
        for (int i = 0; i < 4; i++)
            if (bt->dims[i] != 1 && bt->dims[i] != y->dims[i])
                return FAIL(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                            "pointwise b does not broadcast to y");
    }
    return CUDNN_STATUS_SUCCESS;
}

/* A graph runs one convolution; a forward convolution may be followed by a
 * chain of pointwise operations, each taking the previous one's (virtual)
 * output as x, the last writing a real tensor. */
static cudnnStatus_t finalize_graph(bd_t *g)
{
    int conv = -1, used[BD_MAX_OPS] = { 0 };
    for (int i = 0; i < g->nops; i++)
        if (is_conv_op(g->ops[i]->type)) {
            if (conv >= 0)
                conv = -2;
            else if (conv == -1)
                conv = i;
        }
    if (conv < 0)
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                    "only graphs of one convolution (and a pointwise chain) are supported");
    used[conv] = 1;
    g->conv_op = conv;
    g->nchain = 0;
    const bd_t *out = g->ops[conv]->t[2];
    while (out->is_virtual) {
        int next = -1;
        for (int i = 0; i < g->nops; i++)
            if (!used[i] && g->ops[i]->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR &&
                g->ops[i]->t[0]->uid == out->uid)
                next = i;
        if (next < 0)
            return FAIL(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                        "virtual tensor %lld is not consumed by a pointwise operation",
                        (long long)out->uid);
        if (!same_dims(g->ops[next]->t[0], out))
            return FAIL(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "pointwise chain dimensions");
        used[next] = 1;
        g->chain[g->nchain++] = next;
        out = g->ops[next]->t[2];
    }
    for (int i = 0; i < g->nops; i++)
        if (!used[i])
            return FAIL(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN,
                        "operation %d is not part of the convolution's chain", i);
    return CUDNN_STATUS_SUCCESS;
}

/* The device facts the heuristics use: the graph's handle's device, else
 * the current context's. */
/* A graph given a handle works where that handle works: the handle
 * destroyed, its context destroyed or its device changed (README) is a
 * driver failure, as the handle's own work would be. */
static cudnnStatus_t graph_live(const bd_t *g)
{
    if (!g->handle)
        return CUDNN_STATUS_SUCCESS;
    if (!sim_cudnn_handle_is(g->handle, g->hserial))
        return FAIL(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER,
                    "the operation graph's handle was destroyed");
    if (!sim_cudnn_ctx_on(g->hctx, &g->huuid))
        return FAIL(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER,
                    "the operation graph's handle: its context is gone or its device changed");
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t graph_dev(const bd_t *g, sim_heur_dev_t *dev)
{
    if (g->handle) {
        cudnnStatus_t st = graph_live(g);
        if (st)
            return st;
        *dev = g->handle->dev;
        return CUDNN_STATUS_SUCCESS;
    }
    simdrv_devinfo_t info;
    if (simdrv_current_device(&info))
        return FAIL(CUDNN_STATUS_NOT_INITIALIZED, "no handle on the graph and no CUDA context");
    dev->cc_major = info.cc_major;
    dev->cc_minor = info.cc_minor;
    dev->sm_count = info.sm_count;
    memcpy(dev->model, info.model, sizeof(dev->model));
    return CUDNN_STATUS_SUCCESS;
}

static const bd_t *graph_conv(const bd_t *g)
{
    return g->ops[g->conv_op];
}

static cudnnStatus_t new_engine(const bd_t *graph, int gidx, bd_t **out)
{
    cudnnBackendDescriptor_t e = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e);
    if (st)
        return st;
    bd_t *b = e;
    b->graph = bd_clone(graph);
    b->gidx = gidx;
    b->finalized = 1;
    if (!b->graph) {
        bd_free(b);
        return FAIL(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "no memory");
    }
    *out = b;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t finalize_heur(bd_t *b)
{
    cudnnStatus_t st;
    if (!b->graph)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "engine heuristics need an operation graph");
    const bd_t *op = graph_conv(b->graph);
    sim_heur_dev_t dev;
    if ((st = graph_dev(b->graph, &dev)))
        return st;
    int algos[8], order[8], n = 0;
    int nsup = sim_heur_rank(op->dir, &dev, &op->prob, algos);
    if (b->heur_mode == CUDNN_HEUR_MODE_FALLBACK) {
        /* fallback engines: the deterministic ones by id, then the rest */
        for (int pass = 0; pass < 2; pass++)
            for (int a = 0; a < sim_conv_algo_count(op->dir); a++)
                if (sim_conv_algo_supported(op->dir, a, &op->prob) &&
                    sim_conv_algo_deterministic(op->dir, a) == !pass)
                    order[n++] = a;
    } else {
        for (int i = 0; i < nsup; i++)
            order[n++] = algos[i];
    }
    for (int i = 0; i < b->nres; i++)
        bd_free(b->res[i]);
    b->nres = 0;
    for (int i = 0; i < n && i < BD_MAX_RES; i++) {
        cudnnBackendDescriptor_t c;
        bd_t *e = NULL;
        if ((st = new_engine(b->graph, order[i], &e)))
            return st;
        if ((st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &c))) {
            bd_free(e);
            return st;
        }
        bd_t *cfg = c;
        cfg->engine = e;
        cfg->finalized = 1;
        b->res[b->nres++] = cfg;
    }
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor)
{
    bd_t *b = bd_cast(descriptor);
    if (!b)
        return FAIL(descriptor ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_BAD_PARAM_NULL_POINTER,
                    "not a backend descriptor");
    if (b->finalized)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "descriptor already finalized");
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    switch (b->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
        if (!b->uid_set || b->nd == 0 || b->nstrides != b->nd)
            return FAIL(CUDNN_STATUS_BAD_PARAM, "tensor needs a unique id, dimensions, strides");
        if (b->nd != 4)
            return FAIL(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "only 4-d tensors are supported");
        for (int i = 0; i < b->nd; i++)
            if (b->dims[i] <= 0 || b->dims[i] > INT32_MAX || b->strides[i] <= 0 ||
                b->strides[i] > INT32_MAX)
                return FAIL(CUDNN_STATUS_BAD_PARAM, "bad dimension or stride %d", i);
        break;
    case CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR:
        if (b->spatial != 2 || b->npre != 2 || b->npost != 2 || b->nstr != 2 || b->ndil != 2)
            return FAIL(b->spatial && b->spatial != 2 ? CUDNN_STATUS_NOT_SUPPORTED
                                                      : CUDNN_STATUS_BAD_PARAM,
                        "2 spatial dimensions with paddings, strides and dilations are needed");
        for (int i = 0; i < 2; i++) {
            if (b->pre[i] < 0 || b->str[i] <= 0 || b->dil[i] <= 0 || b->pre[i] > INT32_MAX ||
                b->str[i] > INT32_MAX || b->dil[i] > INT32_MAX)
                return FAIL(CUDNN_STATUS_BAD_PARAM, "bad padding, stride or dilation");
            if (b->post[i] != b->pre[i])
                return FAIL(CUDNN_STATUS_NOT_SUPPORTED_PADDING, "asymmetric padding");
        }
        if (b->mode != CUDNN_CONVOLUTION && b->mode != CUDNN_CROSS_CORRELATION)
            return FAIL(CUDNN_STATUS_BAD_PARAM, "bad convolution mode");
        break;
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR:
        if (!b->pw_mode_set)
            return FAIL(CUDNN_STATUS_BAD_PARAM, "pointwise descriptor needs a mode");
        break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
        st = finalize_conv_op(b);
        break;
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR:
        st = finalize_pw_op(b);
        break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
        st = finalize_graph(b);
        break;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
        st = finalize_heur(b);
        break;
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR: {
        if (!b->graph || b->gidx < 0)
            return FAIL(CUDNN_STATUS_BAD_PARAM, "engine needs an operation graph and an index");
        if ((st = graph_live(b->graph)))
            return st;
        const bd_t *op = graph_conv(b->graph);
        if (b->gidx >= sim_conv_algo_count(op->dir))
            return FAIL(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND, "engine index %lld out of range",
                        (long long)b->gidx);
        if (!sim_conv_algo_supported(op->dir, (int)b->gidx, &op->prob))
            return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "engine %lld does not support this graph",
                        (long long)b->gidx);
        break;
    }
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
        if (!b->engine)
            return FAIL(CUDNN_STATUS_BAD_PARAM, "engine config needs an engine");
        break;
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR:
        if (!b->knob_type_set)
            return FAIL(CUDNN_STATUS_BAD_PARAM, "knob choice needs a knob type");
        break;
    case CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR:
        break;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
        /* the handle is optional (deprecated): execution uses the one given,
         * which must be on the device the plan is finalized for: the plan
         * handle's, else the current context's */
        if (!b->cfg)
            return FAIL(CUDNN_STATUS_BAD_PARAM, "execution plan needs an engine config");
        if (b->handle) {
            if (!sim_cudnn_handle_is(b->handle, b->hserial))
                return FAIL(CUDNN_STATUS_BAD_PARAM, "the plan's handle was destroyed");
            b->pctx = b->hctx;
            b->puuid = b->huuid;
        } else {
            const simdrv_t *d = simdrv_get();
            simdrv_devinfo_t info;
            if (!d || d->cuCtxGetCurrent(&b->pctx) != CUDA_SUCCESS || !b->pctx ||
                simdrv_current_device(&info) != 0)
                return FAIL(CUDNN_STATUS_NOT_INITIALIZED,
                            "no handle on the plan and no CUDA context current");
            b->puuid = info.uuid;
        }
        break;
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
        if (b->nuids != b->nptrs)
            return FAIL(CUDNN_STATUS_BAD_PARAM, "%d unique ids but %d data pointers", b->nuids,
                        b->nptrs);
        break;
    default:
        return FAIL(CUDNN_STATUS_NOT_SUPPORTED, "descriptor type %d", (int)b->type);
    }
    if (st == CUDNN_STATUS_SUCCESS)
        b->finalized = 1;
    return st;
}

/* ---- get attribute ---------------------------------------------------------------- */

/* Fills the caller's count (when given) and up to req elements of the
 * array (when given): a NULL array is a count query, whatever req says. */
static cudnnStatus_t out_i64s(cudnnBackendAttributeType_t type, int64_t req, int64_t *count,
                              void *arr, const int64_t *src, int n)
{
    cudnnStatus_t st = want_type(type, CUDNN_TYPE_INT64);
    if (st)
        return st;
    if (count)
        *count = arr && req < n ? req : n;
    if (arr)
        memcpy(arr, src, (size_t)(req < n ? req : n) * sizeof(int64_t));
    return CUDNN_STATUS_SUCCESS;
}

static size_t align_up(size_t n)
{
    return (n + BD_ALIGN - 1) / BD_ALIGN * BD_ALIGN;
}

/* Where things live in a plan's workspace: the convolution's own, then an
 * fp32 copy of every 16-bit operand (slot 0 x / dx, 1 w / dw, 2 y / dy,
 * 3.. the pointwise b tensors), the fused intermediate in slot 2. */
#define BK_SLOTS (3 + BD_MAX_OPS)
typedef struct bk_layout {
    size_t conv_ws;
    size_t off[BK_SLOTS];
    int has[BK_SLOTS];    /* whether the slot is used */
    size_t total;
} bk_layout_t;

static size_t tensor_count(const bd_t *t)
{
    size_t n = 1;
    for (int i = 0; i < t->nd; i++)
        n *= (size_t)t->dims[i];
    return n;
}

static size_t engine_workspace(const bd_t *engine, bk_layout_t *lay)
{
    bk_layout_t l;
    memset(&l, 0, sizeof(l));
    const bd_t *g = engine->graph, *op = graph_conv(g);
    l.conv_ws = sim_conv_workspace(op->dir, (int)engine->gidx, &op->prob);
    size_t end = l.conv_ws;
    for (int i = 0; i < 3; i++)
        if (op->t[i]->dtype != CUDNN_DATA_FLOAT || (i == 2 && g->nchain)) {
            l.off[i] = align_up(end);
            l.has[i] = 1;
            end = l.off[i] + tensor_count(op->t[i]) * sizeof(float);
        }
    for (int i = 0; i < g->nchain; i++) {
        const bd_t *b = g->ops[g->chain[i]]->t[1];
        if (b && b->dtype != CUDNN_DATA_FLOAT) {
            l.off[3 + i] = align_up(end);
            l.has[3 + i] = 1;
            end = l.off[3 + i] + tensor_count(b) * sizeof(float);
        }
    }
    l.total = end;
    if (lay)
        *lay = l;
    return end;
}

static int engine_notes(const bd_t *e, cudnnBackendNumericalNote_t *notes)
{
    const bd_t *op = graph_conv(e->graph);
    int a = (int)e->gidx, n = 0;
    if (!sim_conv_algo_deterministic(op->dir, a))
        notes[n++] = CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    int fft = (op->dir == SIM_DIR_FWD && (a == 4 || a == 5)) ||
              (op->dir == SIM_DIR_BWD_DATA && (a == 2 || a == 3)) ||
              (op->dir == SIM_DIR_BWD_FILTER && (a == 2 || a == 6));
    int wino = (op->dir == SIM_DIR_FWD && (a == 6 || a == 7)) ||
               (op->dir == SIM_DIR_BWD_DATA && (a == 4 || a == 5)) ||
               (op->dir == SIM_DIR_BWD_FILTER && (a == 4 || a == 5));
    if (fft)
        notes[n++] = CUDNN_NUMERICAL_NOTE_FFT;
    if (wino)
        notes[n++] = CUDNN_NUMERICAL_NOTE_WINOGRAD;
    return n;
}

static cudnnStatus_t out_desc(cudnnBackendAttributeType_t type, int64_t req, int64_t *count,
                              void *arr, bd_t *const *src, int n)
{
    cudnnStatus_t st = want_type(type, CUDNN_TYPE_BACKEND_DESCRIPTOR);
    if (st)
        return st;
    if (count)
        *count = n;
    if (!arr)
        return CUDNN_STATUS_SUCCESS;
    for (int64_t i = 0; i < req && i < n; i++) {
        bd_t *d = bd_cast(((cudnnBackendDescriptor_t *)arr)[i]);
        if (!d)
            return FAIL(CUDNN_STATUS_BAD_PARAM, "output element %lld is not a descriptor",
                        (long long)i);
        if (d->type != src[i]->type)
            return FAIL(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "output descriptor type %d, need %d",
                        (int)d->type, (int)src[i]->type);
        if ((st = bd_copy_into(d, src[i])))
            return st;
    }
    if (count && req < n)
        *count = req;
    return CUDNN_STATUS_SUCCESS;
}

/* A scalar of enum-like type t (4 bytes) into the caller's array. */
static cudnnStatus_t out_enum(cudnnBackendAttributeType_t type, cudnnBackendAttributeType_t want,
                              int64_t req, int64_t *count, void *arr, int32_t value)
{
    cudnnStatus_t st = want_type(type, want);
    if (st)
        return st;
    if (count)
        *count = 1;
    if (arr && req >= 1)
        memcpy(arr, &value, sizeof(value));
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t req,
                                       int64_t *count, void *arr)
{
    bd_t *b = bd_cast(descriptor);
    if (!b)
        return FAIL(descriptor ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_BAD_PARAM_NULL_POINTER,
                    "not a backend descriptor");
    if (req < 0)
        return FAIL(CUDNN_STATUS_BAD_PARAM, "requestedElementCount < 0");
    if (!count && !arr)
        return FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "elementCount and arrayOfElements are NULL");
    if (!b->finalized)
        return FAIL(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "descriptor not finalized");
    cudnnStatus_t st;
    switch (b->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR:
        switch (name) {
        case CUDNN_ATTR_TENSOR_DIMENSIONS:
            return out_i64s(type, req, count, arr, b->dims, b->nd);
        case CUDNN_ATTR_TENSOR_STRIDES:
            return out_i64s(type, req, count, arr, b->strides, b->nd);
        case CUDNN_ATTR_TENSOR_UNIQUE_ID:
            return out_i64s(type, req, count, arr, &b->uid, 1);
        case CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT:
            return out_i64s(type, req, count, arr, &b->align, 1);
        case CUDNN_ATTR_TENSOR_DATA_TYPE:
            return out_enum(type, CUDNN_TYPE_DATA_TYPE, req, count, arr, (int32_t)b->dtype);
        case CUDNN_ATTR_TENSOR_IS_VIRTUAL:
            if ((st = want_type(type, CUDNN_TYPE_BOOLEAN)))
                return st;
            if (count)
                *count = 1;
            if (arr && req >= 1)
                *(_Bool *)arr = b->is_virtual != 0;
            return CUDNN_STATUS_SUCCESS;
        default:
            break;
        }
        break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR:
        if (name == CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT) {
            int64_t n = sim_conv_algo_count(graph_conv(b)->dir);
            return out_i64s(type, req, count, arr, &n, 1);
        }
        if (name == CUDNN_ATTR_OPERATIONGRAPH_OPS)
            return out_desc(type, req, count, arr, b->ops, b->nops);
        break;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR:
        if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS)
            return out_desc(type, req, count, arr, b->res, b->nres);
        if (name == CUDNN_ATTR_ENGINEHEUR_MODE)
            return out_enum(type, CUDNN_TYPE_HEUR_MODE, req, count, arr, b->heur_mode);
        break;
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR:
        switch (name) {
        case CUDNN_ATTR_ENGINE_GLOBAL_INDEX:
            return out_i64s(type, req, count, arr, &b->gidx, 1);
        case CUDNN_ATTR_ENGINE_NUMERICAL_NOTE: {
            if ((st = want_type(type, CUDNN_TYPE_NUMERICAL_NOTE)))
                return st;
            cudnnBackendNumericalNote_t notes[4];
            int n = engine_notes(b, notes);
            if (count)
                *count = arr && req < n ? req : n;
            if (arr)
                memcpy(arr, notes, (size_t)(req < n ? req : n) * sizeof(notes[0]));
            return CUDNN_STATUS_SUCCESS;
        }
        case CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE:
            if ((st = want_type(type, CUDNN_TYPE_BEHAVIOR_NOTE)))
                return st;
            if (count)
                *count = 0;
            return CUDNN_STATUS_SUCCESS;
        case CUDNN_ATTR_ENGINE_KNOB_INFO:
        case CUDNN_ATTR_ENGINE_LAYOUT_INFO:
            /* the engines have no knobs and no layout requirements */
            if ((st = want_type(type, CUDNN_TYPE_BACKEND_DESCRIPTOR)))
                return st;
            if (count)
                *count = 0;
            return CUDNN_STATUS_SUCCESS;
        case CUDNN_ATTR_ENGINE_OPERATION_GRAPH:
            return out_desc(type, req, count, arr, &b->graph, 1);
        default:
            break;
        }
        break;
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
        if (name == CUDNN_ATTR_ENGINECFG_ENGINE)
            return out_desc(type, req, count, arr, &b->engine, 1);
        if (name == CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE) {
            int64_t ws = (int64_t)engine_workspace(b->engine, NULL);
            return out_i64s(type, req, count, arr, &ws, 1);
        }
        if (name == CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED)
            return out_enum(type, CUDNN_TYPE_INT32, req, count, arr, 0);
        if (name == CUDNN_ATTR_ENGINECFG_KNOB_CHOICES)
            return out_desc(type, req, count, arr, b->knobs, b->nknobs);
        break;
    case CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR:
        if (name == CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE)
            return out_enum(type, CUDNN_TYPE_KNOB_TYPE, req, count, arr, (int32_t)b->knob_type);
        if (name == CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE)
            return out_i64s(type, req, count, arr, &b->knob_value, 1);
        break;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
        if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
            int64_t ws = (int64_t)engine_workspace(b->cfg->engine, NULL);
            return out_i64s(type, req, count, arr, &ws, 1);
        }
        if (name == CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG)
            return out_desc(type, req, count, arr, &b->cfg, 1);
        break;
    default:
        break;
    }
    return FAIL(CUDNN_STATUS_BAD_PARAM, "attribute %d cannot be read from descriptor type %d",
                (int)name, (int)b->type);
}

/* ---- execute ------------------------------------------------------------------------ */

static void *vp_ptr(const bd_t *vp, int64_t uid)
{
    for (int i = 0; i < vp->nuids; i++)
        if (vp->uids[i] == uid)
            return vp->ptrs[i];
    return NULL;
}

/* ---- 16-bit operands ------------------------------------------------------------- */

static sim_t4_t packed(sim_t4_t v)
{
    v.sw = 1;
    v.sh = v.w;
    v.sc = (int64_t)v.h * v.w;
    v.sn = (int64_t)v.c * v.sc;
    return v;
}

/* dst (type dt, view dv) = src (type st, view sv): the library module's
 * conversion kernel on the handle's stream. */
static cudnnStatus_t convert(cudnnHandle_t h, const void *src, int st, const sim_t4_t *sv,
                             void *dst, int dt, const sim_t4_t *dv)
{
    sim_job_t j;
    memset(&j, 0, sizeof(j));
    if ((long long)sv->n * sv->c * sv->h * sv->w == 0)
        return CUDNN_STATUS_SUCCESS;
    j.kind = SIM_JOB_CONVERT;
    j.v[0] = *sv;
    j.v[1] = *dv;
    j.types[0] = st;
    j.types[1] = dt;
    j.in[0] = src;
    j.out = dst;
    return sim_cudnn_enqueue(h, &j);
}

/* The pointwise chain after the convolution, on the fp32 intermediate t
 * (packed N,K,P,Q): ADD t = alpha1 * t + alpha2 * b (b broadcast, widened
 * into its workspace slot when 16-bit), ReLU t = max(t, 0) (NaN kept) or
 * clipped; the last operation writes y (a 16-bit y: in place into t, then
 * rounded into y). Each step is work on the handle's stream, after the
 * convolution. */
static cudnnStatus_t run_chain(cudnnHandle_t h, const bd_t *g, const bd_t *vp,
                               const bk_layout_t *l, float *t, const sim_t4_t *tv)
{
    cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
    for (int i = 0; i < g->nchain && !st; i++) {
        const bd_t *op = g->ops[g->chain[i]], *pw = op->pw;
        int last = i == g->nchain - 1;
        sim_job_t j;
        memset(&j, 0, sizeof(j));
        if (pw->pw_mode == CUDNN_POINTWISE_ADD) {
            void *b = vp_ptr(vp, op->t[1]->uid);
            if (!b)
                return FAIL(CUDNN_STATUS_BAD_PARAM, "the variant pack lacks tensor %lld",
                            (long long)op->t[1]->uid);
            j.kind = SIM_JOB_ADD;
            t4_from(op->t[1], &j.v[0]);
            if (l->has[3 + i]) {
                sim_t4_t pv = packed(j.v[0]);
                void *slot = (char *)vp->workspace + l->off[3 + i];
                if ((st = convert(h, b, bk_type(op->t[1]->dtype), &j.v[0], slot, SIMBK_F32, &pv)))
                    return st;
                j.v[0] = pv;
                b = slot;
            }
            j.v[1] = *tv;
            j.alpha = (float)op->beta;  /* alpha2 * b */
            j.beta = (float)op->alpha;  /* + alpha1 * t */
            j.in[0] = b;
            j.out = t;
            if ((st = sim_cudnn_enqueue(h, &j)))
                return st;
            memset(&j, 0, sizeof(j));
            if (!last)
                continue;
            /* the last operation also stores: identity into y */
            j.act_mode = CUDNN_ACTIVATION_IDENTITY;
        } else if (pw->pw_mode == CUDNN_POINTWISE_RELU_FWD) {
            j.act_mode = pw->relu_hi_set ? CUDNN_ACTIVATION_CLIPPED_RELU : CUDNN_ACTIVATION_RELU;
            j.coef = pw->relu_hi;
        } else {
            j.act_mode = CUDNN_ACTIVATION_IDENTITY;
        }
        j.kind = SIM_JOB_ACT_FWD;
        j.v[0] = *tv;
        j.alpha = 1.0f;
        j.beta = 0.0f;
        j.in[0] = t;
        j.v[1] = *tv;
        j.out = t;
        void *y = NULL;
        if (last) {
            y = vp_ptr(vp, op->t[2]->uid);
            if (!y)
                return FAIL(CUDNN_STATUS_BAD_PARAM, "the variant pack lacks tensor %lld",
                            (long long)op->t[2]->uid);
            if (op->t[2]->dtype == CUDNN_DATA_FLOAT) {
                t4_from(op->t[2], &j.v[1]);
                j.out = y;
                y = NULL;
            }
        }
        if ((st = sim_cudnn_enqueue(h, &j)))
            return st;
        if (y) {
            sim_t4_t yv;
            t4_from(op->t[2], &yv);
            st = convert(h, t, SIMBK_F32, tv, y, bk_type(op->t[2]->dtype), &yv);
        }
    }
    return st;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan,
                                  cudnnBackendDescriptor_t variantPack)
{
    cudnnStatus_t st = sim_cudnn_check_handle(handle);
    if (st)
        return st;
    bd_t *plan = bd_cast(executionPlan), *vp = bd_cast(variantPack);
    if (!plan || !vp)
        return FAIL(executionPlan && variantPack ? CUDNN_STATUS_BAD_PARAM
                                                 : CUDNN_STATUS_BAD_PARAM_NULL_POINTER,
                    "bad execution plan or variant pack");
    if (plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR ||
        vp->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
        return FAIL(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "wrong descriptor types");
    if (!plan->finalized || !vp->finalized)
        return FAIL(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "plan or variant pack not finalized");
    /* the plan's engine is loaded for the device it was finalized for */
    if (memcmp(plan->puuid.bytes, handle->uuid.bytes, sizeof(plan->puuid.bytes)) != 0 ||
        !sim_cudnn_ctx_on(plan->pctx, &plan->puuid))
        return FAIL(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER,
                    "the plan was finalized for another device, or its context is gone");
    const bd_t *engine = plan->cfg->engine, *g = engine->graph, *op = graph_conv(g);
    bk_layout_t l;
    size_t ws = engine_workspace(engine, &l);
    sim_job_t j;
    memset(&j, 0, sizeof(j));
    j.conv = op->prob;
    j.conv.arch = handle->dev.cc_major * 10 + handle->dev.cc_minor;
    j.algo = (int)engine->gidx;
    j.alpha = (float)op->alpha;
    j.beta = (float)op->beta;
    /* operands 0 x, 1 w, 2 y; the one written and the ones read */
    void *p[3] = { vp_ptr(vp, op->t[0]->uid), vp_ptr(vp, op->t[1]->uid),
                   g->nchain ? NULL : vp_ptr(vp, op->t[2]->uid) };
    sim_t4_t *view[3] = { &j.conv.x, &j.conv.w, &j.conv.y };
    int out = op->dir == SIM_DIR_FWD ? 2 : op->dir == SIM_DIR_BWD_DATA ? 0 : 1;
    if (!p[0] || !p[1] || (!p[2] && !g->nchain))
        return FAIL(CUDNN_STATUS_BAD_PARAM, "the variant pack lacks a tensor's data pointer");
    if (ws && !vp->workspace)
        return FAIL(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "the engine needs a workspace");
    void *real_out = p[out];
    sim_t4_t real_view = *view[out];
    /* 16-bit operands: widened into their fp32 slots (the output too when
     * beta accumulates into it); the engine runs on the packed slots */
    for (int i = 0; i < 3; i++) {
        if (!l.has[i] || (i == 2 && g->nchain))
            continue;
        void *slot = (char *)vp->workspace + l.off[i];
        sim_t4_t pv = packed(*view[i]);
        if ((i != out || j.beta != 0.0f) &&
            (st = convert(handle, p[i], bk_type(op->t[i]->dtype), view[i], slot, SIMBK_F32, &pv)))
            return st;
        *view[i] = pv;
        p[i] = slot;
    }
    sim_t4_t tv = { 0 };
    if (g->nchain) {
        /* the convolution writes the packed fp32 intermediate (slot 2) */
        tv = packed(op->prob.y);
        j.conv.y = tv;
        j.beta = 0.0f;
        p[2] = (char *)vp->workspace + l.off[2];
    }
    switch (op->dir) {
    case SIM_DIR_FWD:
        j.kind = SIM_JOB_CONV_FWD;
        j.in[0] = p[0];
        j.in[1] = p[1];
        j.out = p[2];
        break;
    case SIM_DIR_BWD_DATA:
        j.kind = SIM_JOB_CONV_BWD_DATA;
        j.in[0] = p[1];
        j.in[1] = p[2];
        j.out = p[0];
        break;
    default:
        j.kind = SIM_JOB_CONV_BWD_FILTER;
        j.in[0] = p[0];
        j.in[1] = p[2];
        j.out = p[1];
        break;
    }
    if ((st = sim_cudnn_enqueue(handle, &j)))
        return st;
    if (g->nchain)
        return run_chain(handle, g, vp, &l, p[2], &tv);
    if (p[out] != real_out)
        st = convert(handle, p[out], SIMBK_F32, view[out], real_out,
                     bk_type(op->t[out]->dtype), &real_view);
    return st;
}

cudnnStatus_t cudnnBackendPopulateCudaGraph(cudnnHandle_t handle,
                                            cudnnBackendDescriptor_t executionPlan,
                                            cudnnBackendDescriptor_t variantPack, cudaGraph_t graph)
{
    (void)handle;
    (void)executionPlan;
    (void)variantPack;
    (void)graph;
    return FAIL(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API, "native CUDA graphs are not supported");
}

cudnnStatus_t cudnnBackendUpdateCudaGraph(cudnnHandle_t handle,
                                          cudnnBackendDescriptor_t executionPlan,
                                          cudnnBackendDescriptor_t variantPack, cudaGraph_t graph)
{
    return cudnnBackendPopulateCudaGraph(handle, executionPlan, variantPack, graph);
}
