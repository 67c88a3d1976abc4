/* Client run by tests/intercept/dnn_test.c under libeasyscale.so (and without
 * it): drives the cuDNN backend API exactly as cudnn-frontend (1.x, the
 * v0.x-style builders PyTorch's Conv_v8.cpp uses) and PyTorch do, and
 * prints what the frontend sees, one fact per line.
 *
 * The call sequences follow cudnn-frontend's sources:
 *   EngineHeuristics_v8::getEngineConfigCount: GetAttribute(RESULTS,
 *     requested 0, NULL array) for the count;
 *   getEngineConfig(count): `count` ENGINECFG descriptors created into the
 *     frontend's own list, a temporary array of their handles passed to
 *     GetAttribute(RESULTS, count), then the list resized to the returned
 *     count (descriptors past it destroyed);
 *   cudnn_frontend::filter + hasNumericalNote (PyTorch's
 *     filterEngineConfigs, deterministic mode): ENGINECFG_ENGINE read into
 *     a new ENGINE descriptor, NUMERICAL_NOTE read with CUDNN_NUMERICAL_NOTE_TYPE_COUNT;
 *   ExecutionPlanBuilder_v8::build: ENGINE_CONFIG set, no HANDLE (not set
 *     since frontend 1.13), finalize; ENGINECFG_ENGINE read; buildTag:
 *     CUDNN_KNOB_TYPE_COUNTS KNOB_CHOICE descriptors, GLOBAL_INDEX,
 *     KNOB_CHOICES read into them, each knob's type and value; fetchNotes:
 *     a count query (requested CUDNN_NUMERICAL_NOTE_TYPE_COUNT, NULL array)
 *     then the notes, same for behaviour notes; WORKSPACE_SIZE with a NULL
 *     count pointer;
 *   PyTorch run_conv_plan: variant pack of uids 'x', 'y', 'w' (and 'z', 'b'
 *     for the fused graph) with the plan's workspace, cudnnBackendExecute.
 *   PyTorch get_plans_from_heuristics / get_plans_from_find: configs from
 *     heuristics (INSTANT) then the fallback list (FALLBACK), filtered,
 *     plans built; benchmark mode times every plan (time_sorted_plan).
 *
 *   fe_client view DEV [det]   the heuristics as the frontend sees them
 *   fe_client run DEV [det]    plans of every direction (and the fused
 *                              graph) built and executed the frontend's way;
 *                              hashes, and d2's result computed on the
 *                              host (the reference of the path
 *                              EASYSCALE_D2_GEMM names: int8 unless fma)
 *   fe_client bench DEV [det]  benchmark mode: every candidate plan
 *                              executed, the distinct engines and results
 * det: PyTorch's deterministic mode (nondeterministic engines filtered by
 * PyTorch itself); without it, PyTorch's default. half / bf16 (after det
 * or in its place): the tensors in that type (PyTorch's autocast
 * convolutions: fp32 compute type, the fused graph's virtual tensors fp32),
 * data rounded to the type on the host.
 */
#include <cuda.h>
#include <cudnn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/d2int8.h"
#include "kernels/portable_kernels.h"

#include "../clients/ck.h"

#define MAXCFG 32

/* The tensors' data type (CUDNN_DATA_*) and its ES_DT_* and size. */
static cudnnDataType_t g_dt = CUDNN_DATA_FLOAT;
static int g_es_dt = ES_DT_F32;
static size_t g_esz = 4;

static uint64_t hash(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

/* Values in [-1, 1], exactly representable in the tensors' type. */
static void fill(float *v, size_t n, unsigned seed)
{
    float t; /* room for any of the types */
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((int)(seed >> 9) % 2001 - 1000) / 997.0f;
        if (g_es_dt != ES_DT_F32) {
            es_st(&t, 0, g_es_dt, v[i]);
            v[i] = es_ld(&t, 0, g_es_dt);
        }
    }
}

/* The host copy in the tensors' type (malloc'ed). */
static void *typed(const float *h, size_t n)
{
    void *t = malloc(n * g_esz);
    for (size_t i = 0; i < n; i++)
        es_st(t, (long long)i, g_es_dt, h[i]);
    return t;
}

static void setup(int dev)
{
    CUdevice d;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&d, dev));
    CK(cuDevicePrimaryCtxRetain(&ctx, d));
    CK(cuCtxSetCurrent(ctx));
}

static CUdeviceptr upload(const void *h, size_t n)
{
    CUdeviceptr p;
    CK(cuMemAlloc(&p, n * g_esz));
    CK(cuMemcpyHtoD(p, h, n * g_esz));
    return p;
}

/* The hash of n elements of the tensors' type at p (and their values
 * widened into keep). */
static uint64_t dl_hash(CUdeviceptr p, size_t n, float *keep)
{
    void *h = malloc(n * g_esz);
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH(h, p, n * g_esz));
    uint64_t r = hash(h, n * g_esz);
    for (size_t i = 0; keep && i < n; i++)
        keep[i] = es_ld(h, (long long)i, g_es_dt);
    free(h);
    return r;
}

/* ---- graphs (as PyTorch's build_opgraph / build_opgraph_fused) ------------------------ */

typedef cudnnBackendDescriptor_t bd_t;

static bd_t tensor(int64_t uid, const int64_t *dims, int virt)
{
    bd_t t;
    int64_t str[4] = { dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1 }, al = 16;
    cudnnDataType_t dt = virt ? CUDNN_DATA_FLOAT : g_dt;
    _Bool v = virt != 0;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al));
    CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    if (virt)
        CK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v));
    CK(cudnnBackendFinalize(t));
    return t;
}

static bd_t conv_desc(void)
{
    bd_t c;
    int64_t two = 2, pad[2] = { 1, 1 }, one2[2] = { 1, 1 };
    cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &c));
    CK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct));
    CK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE,
                                1, &mode));
    CK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &two));
    CK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    CK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    CK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one2));
    CK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2,
                                one2));
    CK(cudnnBackendFinalize(c));
    return c;
}

/* The shapes: a 3x3 convolution with 3 input channels on 8 64x64 images
 * (for which every simulated model's heuristics rank a nondeterministic
 * backward-filter engine first: on sm_80 and later from N * P * Q = 16384,
 * sim/cudnn/heur.c). */
static const int64_t XD[4] = { 8, 3, 64, 64 }, WD[4] = { 8, 3, 3, 3 }, YD[4] = { 8, 8, 64, 64 };
static const int64_t BD[4] = { 1, 8, 1, 1 };

enum { DIR_FWD, DIR_DATA, DIR_FILTER, DIR_FUSED, NDIRS };
static const char *const dir_name[NDIRS] = { "fwd", "bwd_data", "bwd_filter", "fused" };

/* One convolution (dir) or PyTorch's fused conv + add(z, alpha2) +
 * add(bias) + ReLU graph. */
static bd_t graph(cudnnHandle_t h, int dir, float alpha2)
{
    static const cudnnBackendDescriptorType_t ot[3] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
    };
    static const cudnnBackendAttributeName_t base[3] = {
        CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
    };
    int cd = dir == DIR_FUSED ? DIR_FWD : dir;
    bd_t x = tensor('x', XD, 0), w = tensor('w', WD, 0), y = tensor(dir == DIR_FUSED ? 'C' : 'y',
                                                                  YD, dir == DIR_FUSED);
    bd_t c = conv_desc(), op, ops[4], g;
    float one = 1.0f, zero = 0.0f;
    int nops = 1;
    CK(cudnnBackendCreateDescriptor(ot[cd], &op));
    CK(cudnnBackendSetAttribute(op, base[cd] + 0, CUDNN_TYPE_FLOAT, 1, &one));
    CK(cudnnBackendSetAttribute(op, base[cd] + 1, CUDNN_TYPE_FLOAT, 1, &zero));
    CK(cudnnBackendSetAttribute(op, base[cd] + 2, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c));
    CK(cudnnBackendSetAttribute(op, base[cd] + 3, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    CK(cudnnBackendSetAttribute(op, base[cd] + 4, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    CK(cudnnBackendSetAttribute(op, base[cd] + 5, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    CK(cudnnBackendFinalize(op));
    ops[0] = op;
    bd_t extra[8];
    int nextra = 0;
    if (dir == DIR_FUSED) {
        /* add(z, alpha2) -> add(bias) -> ReLU, as build_opgraph_fused */
        static const cudnnPointwiseMode_t modes[3] = { CUDNN_POINTWISE_ADD, CUDNN_POINTWISE_ADD,
                                                       CUDNN_POINTWISE_RELU_FWD };
        bd_t in = y;
        for (int i = 0; i < 3; i++) {
            bd_t pw, pop;
            cudnnDataType_t prec = CUDNN_DATA_FLOAT;
            CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw));
            CK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE,
                                        1, &modes[i]));
            CK(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE,
                                        1, &prec));
            CK(cudnnBackendFinalize(pw));
            bd_t out = tensor(i == 0 ? 'A' : i == 1 ? 'B' : 'y', YD, i < 2);
            CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &pop));
            CK(cudnnBackendSetAttribute(pop, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
            CK(cudnnBackendSetAttribute(pop, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in));
            if (i < 2) {
                bd_t b = i == 0 ? tensor('z', YD, 0) : tensor('b', BD, 0);
                CK(cudnnBackendSetAttribute(pop, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
                extra[nextra++] = b;
            }
            CK(cudnnBackendSetAttribute(pop, CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &out));
            if (i == 0) {
                CK(cudnnBackendSetAttribute(pop, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1,
                                            CUDNN_TYPE_FLOAT, 1, &one));
                CK(cudnnBackendSetAttribute(pop, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2,
                                            CUDNN_TYPE_FLOAT, 1, &alpha2));
            }
            CK(cudnnBackendFinalize(pop));
            ops[nops++] = pop;
            extra[nextra++] = pw;
            extra[nextra++] = out;
            in = out;
        }
    }
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                nops, ops));
    CK(cudnnBackendFinalize(g));
    /* the graph holds copies: everything else may go */
    for (int i = 0; i < nops; i++)
        CK(cudnnBackendDestroyDescriptor(ops[i]));
    for (int i = 0; i < nextra; i++)
        CK(cudnnBackendDestroyDescriptor(extra[i]));
    CK(cudnnBackendDestroyDescriptor(c));
    CK(cudnnBackendDestroyDescriptor(x));
    CK(cudnnBackendDestroyDescriptor(w));
    CK(cudnnBackendDestroyDescriptor(y));
    return g;
}

/* ---- the frontend's heuristics --------------------------------------------------------- */

/* EngineHeuristicsBuilder_v8().setOperationGraph().setHeurMode().build(),
 * getEngineConfigCount(), getEngineConfig(count): the frontend's own list
 * of configs (its vector, resized to the returned count) into list; the
 * temporary array's handles into tmp (the "raw" view). Returns the count. */
static int fe_heuristics(bd_t g, cudnnBackendHeurMode_t mode, bd_t *list, bd_t *tmp, int *ntmp)
{
    bd_t heur;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g));
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    CK(cudnnBackendFinalize(heur));
    int64_t count = -1;
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                0, &count, NULL));
    if (count < 0 || count > MAXCFG) {
        printf("FAIL count %lld\n", (long long)count);
        exit(1);
    }
    for (int i = 0; i < count; i++)
        CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &list[i]));
    for (int i = 0; i < count; i++)
        tmp[i] = list[i]; /* heuristic_results_: a copy of the handles */
    int64_t result = -1;
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                count, &result, tmp));
    if (result < 0 || result > count) {
        printf("FAIL result %lld of %lld\n", (long long)result, (long long)count);
        exit(1);
    }
    *ntmp = (int)result;
    for (int i = (int)result; i < count; i++) /* m_heuristic_results.resize(result) */
        CK(cudnnBackendDestroyDescriptor(list[i]));
    CK(cudnnBackendDestroyDescriptor(heur));
    return (int)result;
}

/* hasNumericalNote<note>(config) as the frontend writes it. */
static int fe_has_note(bd_t cfg, cudnnBackendNumericalNote_t note, int64_t *gidx)
{
    bd_t eng;
    int64_t n = -1;
    int has = 0;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 1, &n, &eng) == CUDNN_STATUS_SUCCESS) {
        cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
        for (int i = 0; i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; i++)
            notes[i] = CUDNN_NUMERICAL_NOTE_TYPE_COUNT;
        int64_t ec = 0;
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &ec, notes);
        for (int64_t i = 0; i < ec; i++)
            has |= notes[i] == note;
        if (gidx)
            CK(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                        &n, gidx));
    }
    CK(cudnnBackendDestroyDescriptor(eng));
    return has;
}

static int64_t engine_of(bd_t cfg)
{
    int64_t g = -1;
    fe_has_note(cfg, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC, &g);
    return g;
}

/* torch.backends.cudnn.deterministic (fe_client's third argument "det"). */
static int g_pt_deterministic;

/* PyTorch's filterEngineConfigs: drops configs with the down-convert note,
 * for fp32 data those with the tensor-core note (allow_tf32 off), and in
 * deterministic mode those with the nondeterministic note, keeping the
 * order (std::stable_partition). */
static int pt_filter(bd_t *list, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if ((g_pt_deterministic &&
             fe_has_note(list[i], CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC, NULL)) ||
            fe_has_note(list[i], CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS, NULL) ||
            (g_dt == CUDNN_DATA_FLOAT &&
             fe_has_note(list[i], CUDNN_NUMERICAL_NOTE_TENSOR_CORE, NULL))) {
            CK(cudnnBackendDestroyDescriptor(list[i]));
            continue;
        }
        list[k++] = list[i];
    }
    return k;
}

/* ---- the frontend's plans ------------------------------------------------------------ */

typedef struct {
    bd_t plan;
    int64_t engine, ws;
} plan_t;

/* ExecutionPlanBuilder_v8().setEngineConfig(cfg).build(). Returns the
 * finalize status (0 with *p filled). */
static int fe_plan(bd_t cfg, plan_t *p)
{
    bd_t plan, eng;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan));
    CK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
    cudnnStatus_t st = cudnnBackendFinalize(plan);
    if (st != CUDNN_STATUS_SUCCESS) {
        CK(cudnnBackendDestroyDescriptor(plan));
        return (int)st;
    }
    int64_t n = 0;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng));
    CK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                &n, &eng));
    /* buildTag */
    bd_t knobs[CUDNN_KNOB_TYPE_COUNTS];
    for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; i++)
        CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &knobs[i]));
    CK(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                &p->engine));
    int64_t nknobs = 0;
    CK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, CUDNN_KNOB_TYPE_COUNTS, &nknobs,
                                knobs));
    for (int64_t i = 0; i < nknobs && i < CUDNN_KNOB_TYPE_COUNTS; i++) {
        cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
        int64_t choice = -2;
        CK(cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                    CUDNN_TYPE_KNOB_TYPE, 1, NULL, &type));
        CK(cudnnBackendGetAttribute(knobs[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64,
                                    1, NULL, &choice));
    }
    for (int i = 0; i < CUDNN_KNOB_TYPE_COUNTS; i++)
        CK(cudnnBackendDestroyDescriptor(knobs[i]));
    /* fetchNotes: count query with a NULL array, then the notes */
    int64_t ec = 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    CK(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &ec, NULL));
    CK(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &ec, notes));
    cudnnBackendBehaviorNote_t bnotes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    CK(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &ec, NULL));
    CK(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &ec, bnotes));
    CK(cudnnBackendDestroyDescriptor(eng));
    /* computeWorkSpaceSize */
    CK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                1, NULL, &p->ws));
    p->plan = plan;
    return 0;
}

/* The configs PyTorch builds plans from: heuristics (INSTANT) then the
 * fallback list, each filtered (deterministic mode); the plans that build. */
static int pt_plans(bd_t g, plan_t *plans)
{
    bd_t list[2 * MAXCFG], tmp[MAXCFG];
    int ntmp, n = fe_heuristics(g, CUDNN_HEUR_MODE_INSTANT, list, tmp, &ntmp);
    n = pt_filter(list, n);
    int m = fe_heuristics(g, CUDNN_HEUR_MODE_FALLBACK, list + n, tmp, &ntmp);
    n += pt_filter(list + n, m);
    int np = 0;
    for (int i = 0; i < n; i++) {
        if (fe_plan(list[i], &plans[np]) == 0)
            np++;
        CK(cudnnBackendDestroyDescriptor(list[i]));
    }
    return np;
}

/* ---- data ---------------------------------------------------------------------------- */

typedef struct {
    size_t nx, nw, ny;
    float *hx, *hw, *hy, *hz, *hb;
    void *tx, *tw, *ty, *tz, *tb; /* in the tensors' type */
    CUdeviceptr x, w, y, dy, z, b, ws;
} bufs_t;

static void bufs_init(bufs_t *d)
{
    d->nx = (size_t)(XD[0] * XD[1] * XD[2] * XD[3]);
    d->nw = (size_t)(WD[0] * WD[1] * WD[2] * WD[3]);
    d->ny = (size_t)(YD[0] * YD[1] * YD[2] * YD[3]);
    d->hx = malloc(d->nx * 4), d->hw = malloc(d->nw * 4), d->hy = malloc(d->ny * 4);
    d->hz = malloc(d->ny * 4), d->hb = malloc(8 * 4);
    fill(d->hx, d->nx, 51);
    fill(d->hw, d->nw, 52);
    fill(d->hy, d->ny, 53);
    fill(d->hz, d->ny, 54);
    fill(d->hb, 8, 55);
    d->tx = typed(d->hx, d->nx), d->tw = typed(d->hw, d->nw), d->ty = typed(d->hy, d->ny);
    d->tz = typed(d->hz, d->ny), d->tb = typed(d->hb, 8);
    d->x = upload(d->tx, d->nx), d->w = upload(d->tw, d->nw), d->dy = upload(d->ty, d->ny);
    d->z = upload(d->tz, d->ny), d->b = upload(d->tb, 8);
    CK(cuMemAlloc(&d->y, d->ny * 4));
    CK(cuMemAlloc(&d->ws, 64 << 20));
}

/* PyTorch's run_conv_plan: returns the output's hash (and its contents). */
static uint64_t run_plan(cudnnHandle_t h, const plan_t *p, int dir, bufs_t *d, float *keep)
{
    bd_t vp;
    void *ptrs[5];
    int64_t uids[5] = { 'x', 'y', 'w', 'z', 'b' };
    int n = dir == DIR_FUSED ? 5 : 3;
    CUdeviceptr out;
    size_t nout;
    switch (dir) {
    case DIR_DATA:
        CK(cuMemsetD8(d->y, 0, d->nx * g_esz));
        out = d->y, nout = d->nx; /* dx in y's buffer (large enough) */
        ptrs[0] = (void *)d->y, ptrs[1] = (void *)d->dy, ptrs[2] = (void *)d->w;
        break;
    case DIR_FILTER:
        CK(cuMemsetD8(d->y, 0, d->nw * g_esz));
        out = d->y, nout = d->nw;
        ptrs[0] = (void *)d->x, ptrs[1] = (void *)d->dy, ptrs[2] = (void *)d->y;
        break;
    default:
        CK(cuMemsetD8(d->y, 0, d->ny * g_esz));
        out = d->y, nout = d->ny;
        ptrs[0] = (void *)d->x, ptrs[1] = (void *)d->y, ptrs[2] = (void *)d->w;
        ptrs[3] = (void *)d->z, ptrs[4] = (void *)d->b;
        break;
    }
    if (p->ws > (64 << 20)) {
        printf("FAIL workspace %lld\n", (long long)p->ws);
        exit(1);
    }
    void *ws = p->ws ? (void *)d->ws : NULL;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
    CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n,
                                ptrs));
    CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
    CK(cudnnBackendFinalize(vp));
    CK(cudnnBackendExecute(h, p->plan, vp));
    CK(cudnnBackendDestroyDescriptor(vp));
    return dl_hash(out, nout, keep);
}

/* d2's result on the host: the int8 definition's reference or the fma
 * order (kernels/d2int8.c, es_d2int8_ref_conv_path). */
static uint64_t reference(int dir, const bufs_t *d, float alpha2)
{
    es_conv_args_t a = {
        .xs_n = XD[1] * XD[2] * XD[3], .xs_c = XD[2] * XD[3], .xs_h = XD[3], .xs_w = 1,
        .ys_n = YD[1] * YD[2] * YD[3], .ys_k = YD[2] * YD[3], .ys_p = YD[3], .ys_q = 1,
        .ws_k = WD[1] * WD[2] * WD[3], .ws_c = WD[2] * WD[3], .ws_r = WD[3], .ws_s = 1,
        .n = (int)XD[0], .c = (int)XD[1], .h = (int)XD[2], .w = (int)XD[3], .k = (int)WD[0],
        .p = (int)YD[2], .q = (int)YD[3], .r = 3, .s = 3, .pad_h = 1, .pad_w = 1, .u = 1, .v = 1,
        .dil_h = 1, .dil_w = 1, .groups = 1, .alpha = 1.0f, .beta = 0.0f,
        .t_in0 = g_es_dt, .t_in1 = g_es_dt, .t_out = g_es_dt,
    };
    size_t n = dir == DIR_DATA ? d->nx : dir == DIR_FILTER ? d->nw : d->ny;
    void *out = calloc(n, g_esz);
    a.out = out;
    (void)n;
    switch (dir) {
    case DIR_DATA:
        a.in0 = d->ty, a.in1 = d->tw;
        CK(es_d2int8_ref_conv_path(1, &a, es_d2int8_env_int8()));
        break;
    case DIR_FILTER:
        a.in0 = d->tx, a.in1 = d->ty;
        CK(es_d2int8_ref_conv_path(2, &a, es_d2int8_env_int8()));
        break;
    default:
        a.in0 = d->tx, a.in1 = d->tw;
        if (dir == DIR_FUSED) {
            a.nep = 3;
            a.ep[0] = (es_ep_t){ .op = ES_EP_ADD, .dt = g_es_dt, .a1 = 1.0f, .a2 = alpha2,
                                 .b = d->tz, .bs_n = a.ys_n, .bs_k = a.ys_k, .bs_p = a.ys_p,
                                 .bs_q = 1 };
            a.ep[1] = (es_ep_t){ .op = ES_EP_ADD, .dt = g_es_dt, .a1 = 1.0f, .a2 = 1.0f,
                                 .b = d->tb, .bs_k = 1 };
            a.ep[2] = (es_ep_t){ .op = ES_EP_RELU };
        }
        CK(es_d2int8_ref_conv_path(0, &a, es_d2int8_env_int8()));
        break;
    }
    uint64_t r = hash(out, n * g_esz);
    free(out);
    return r;
}

/* ---- modes ----------------------------------------------------------------------------- */

static int mode_view(void)
{
    cudnnHandle_t h;
    CK(cudnnCreate(&h));
    static const struct { cudnnBackendHeurMode_t m; const char *name; } modes[] = {
        { CUDNN_HEUR_MODE_INSTANT, "instant" }, { CUDNN_HEUR_MODE_A, "a" },
        { CUDNN_HEUR_MODE_B, "b" }, { CUDNN_HEUR_MODE_FALLBACK, "fallback" },
    };
    for (int dir = 0; dir < 3; dir++) {
        bd_t g = graph(h, dir, 0.0f);
        for (size_t mi = 0; mi < sizeof(modes) / sizeof(modes[0]); mi++) {
            bd_t list[MAXCFG], tmp[MAXCFG];
            int ntmp, n = fe_heuristics(g, modes[mi].m, list, tmp, &ntmp);
            int nondet = 0;
            /* the frontend's view: its own list */
            printf("view %s %s", dir_name[dir], modes[mi].name);
            for (int i = 0; i < n; i++) {
                int64_t e = -1;
                nondet += fe_has_note(list[i], CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC, &e);
                printf(" %lld", (long long)e);
            }
            printf("\nnondet %s %s %d\n", dir_name[dir], modes[mi].name, nondet);
            /* the temporary array's view (what a caller reading its raw
             * array would see; the frontend never looks at it again) */
            printf("raw %s %s", dir_name[dir], modes[mi].name);
            for (int i = 0; i < ntmp; i++)
                printf(" %lld", (long long)engine_of(tmp[i]));
            printf("\n");
            n = pt_filter(list, n);
            printf("filtered %s %s %d\n", dir_name[dir], modes[mi].name, n);
            for (int i = 0; i < n; i++)
                CK(cudnnBackendDestroyDescriptor(list[i]));
        }
        CK(cudnnBackendDestroyDescriptor(g));
    }
    CK(cudnnDestroy(h));
    return 0;
}

static int mode_run(void)
{
    cudnnHandle_t h;
    CK(cudnnCreate(&h));
    bufs_t d;
    bufs_init(&d);
    const float alpha2 = 0.5f;
    for (int dir = 0; dir < NDIRS; dir++) {
        bd_t g = graph(h, dir, alpha2);
        plan_t plans[2 * MAXCFG];
        int np = pt_plans(g, plans);
        /* try_plans: the first plan that executes */
        if (np < 1) {
            printf("noplan %s\n", dir_name[dir]);
        } else {
            uint64_t r = run_plan(h, &plans[0], dir, &d, NULL);
            printf("exec %s %016llx engine %lld plans %d\n", dir_name[dir], (unsigned long long)r,
                   (long long)plans[0].engine, np);
        }
        printf("ref %s %016llx\n", dir_name[dir], (unsigned long long)reference(dir, &d, alpha2));
        for (int i = 0; i < np; i++)
            CK(cudnnBackendDestroyDescriptor(plans[i].plan));
        CK(cudnnBackendDestroyDescriptor(g));
    }
    /* the fused graph against a host fp64 reference of its meaning */
    {
        bd_t g = graph(h, DIR_FUSED, alpha2);
        plan_t plans[2 * MAXCFG];
        int np = pt_plans(g, plans);
        float *got = malloc(d.ny * 4);
        if (np > 0) {
            run_plan(h, &plans[0], DIR_FUSED, &d, got);
            double err = 0, mx = 1e-30;
            const int N = (int)XD[0], C = (int)XD[1], H = (int)XD[2], W = (int)XD[3],
                      K = (int)WD[0];
            for (int n = 0; n < N; n++)
                for (int k = 0; k < K; k++)
                    for (int p = 0; p < H; p++)
                        for (int q = 0; q < W; q++) {
                            double s = 0;
                            for (int c = 0; c < C; c++)
                                for (int r = 0; r < 3; r++)
                                    for (int t = 0; t < 3; t++) {
                                        int hh = p - 1 + r, ww = q - 1 + t;
                                        if (hh < 0 || hh >= H || ww < 0 || ww >= W)
                                            continue;
                                        s += (double)d.hx[((n * C + c) * H + hh) * W + ww] *
                                             d.hw[((k * C + c) * 3 + r) * 3 + t];
                                    }
                            size_t yi = (((size_t)n * K + k) * H + p) * W + q;
                            s += alpha2 * d.hz[yi] + d.hb[k];
                            s = s > 0 ? s : 0;
                            err = fmax(err, fabs(got[yi] - s));
                            mx = fmax(mx, fabs(s));
                        }
            printf("fused_err %.2e\n", err / mx);
        }
        free(got);
        for (int i = 0; i < np; i++)
            CK(cudnnBackendDestroyDescriptor(plans[i].plan));
        CK(cudnnBackendDestroyDescriptor(g));
    }
    CK(cudnnDestroy(h));
    return 0;
}

/* Benchmark mode: every candidate plan is executed (PyTorch times them all
 * and keeps the fastest): how many distinct engines and distinct results
 * the choice by time could land on. */
static int mode_bench(void)
{
    cudnnHandle_t h;
    CK(cudnnCreate(&h));
    bufs_t d;
    bufs_init(&d);
    for (int dir = 0; dir < NDIRS; dir++) {
        bd_t g = graph(h, dir, 0.5f);
        plan_t plans[2 * MAXCFG];
        int np = pt_plans(g, plans);
        int64_t engines[2 * MAXCFG];
        uint64_t results[2 * MAXCFG];
        int ne = 0, nr = 0;
        for (int i = 0; i < np; i++) {
            int seen = 0;
            for (int j = 0; j < ne; j++)
                seen |= engines[j] == plans[i].engine;
            if (!seen)
                engines[ne++] = plans[i].engine;
            uint64_t r = run_plan(h, &plans[i], dir, &d, NULL);
            seen = 0;
            for (int j = 0; j < nr; j++)
                seen |= results[j] == r;
            if (!seen)
                results[nr++] = r;
            CK(cudnnBackendDestroyDescriptor(plans[i].plan));
        }
        printf("bench %s plans %d engines %d results %d\n", dir_name[dir], np, ne, nr);
        CK(cudnnBackendDestroyDescriptor(g));
    }
    CK(cudnnDestroy(h));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: fe_client view|run|bench DEV [det] [half|bf16]\n");
        return 2;
    }
    setup(atoi(argv[2]));
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "det"))
            g_pt_deterministic = 1;
        else if (!strcmp(argv[i], "half"))
            g_dt = CUDNN_DATA_HALF, g_es_dt = ES_DT_F16, g_esz = 2;
        else if (!strcmp(argv[i], "bf16"))
            g_dt = CUDNN_DATA_BFLOAT16, g_es_dt = ES_DT_BF16, g_esz = 2;
    }
    if (!strcmp(argv[1], "view"))
        return mode_view();
    if (!strcmp(argv[1], "run"))
        return mode_run();
    if (!strcmp(argv[1], "bench"))
        return mode_bench();
    fprintf(stderr, "fe_client: unknown mode %s\n", argv[1]);
    return 2;
}
