/* simcuda's cuDNN backend with 16-bit tensors (build/sim/libcudnn.so.9):
 * fp16 / bf16 operands with an fp32 compute type, as PyTorch's autocast
 * convolutions build them. simcuda runs them as: the 16-bit operands
 * widened (exactly) into the plan's workspace, the same fp32 engine, the
 * result rounded once to the output's type (nearest even). So a 16-bit
 * plan's bits equal, per engine, the fp32 plan run on the widened data and
 * rounded on the host: checked for every deterministic engine of the three
 * directions (packed and NHWC-strided tensors, beta 0 and beta != 0) and
 * for PyTorch's fused conv + add + bias + ReLU graph. Negative control:
 * the rounding really loses bits (the fp32 results are not all
 * representable), and a virtual 16-bit intermediate is refused as cuDNN's
 * fp32-compute graphs would have it fp32. */
#include "tests/harness.h"
#include "kernels/portable_kernels.h"

#include <cuda.h>
#include <cudnn.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#define CK(x) assert_int_equal((int)(x), 0)

typedef cudnnBackendDescriptor_t bd_t;

static CUcontext g_ctx;
static cudnnHandle_t g_h;

/* The problem: x N,C,H,W; w K,C,R,S; y N,K,P,Q (3x3, pad 1, stride 1). */
enum { N = 2, C = 5, H = 9, W = 7, K = 6, R = 3, S = 3, P = 9, Q = 7 };
static const int64_t XD[4] = { N, C, H, W }, WD[4] = { K, C, R, S }, YD[4] = { N, K, P, Q };
static const int64_t BD[4] = { 1, K, 1, 1 };

static size_t count(const int64_t *d)
{
    return (size_t)(d[0] * d[1] * d[2] * d[3]);
}

static int es_type(cudnnDataType_t t)
{
    return t == CUDNN_DATA_HALF ? ES_DT_F16 : t == CUDNN_DATA_BFLOAT16 ? ES_DT_BF16 : ES_DT_F32;
}

static size_t esize(cudnnDataType_t t)
{
    return t == CUDNN_DATA_FLOAT ? 4 : 2;
}

/* Packed NCHW strides, or NHWC ones. */
static void strides(const int64_t *d, int nhwc, int64_t *s)
{
    if (nhwc) {
        s[1] = 1, s[3] = d[1], s[2] = d[1] * d[3], s[0] = d[1] * d[2] * d[3];
    } else {
        s[3] = 1, s[2] = d[3], s[1] = d[2] * d[3], s[0] = d[1] * d[2] * d[3];
    }
}

static bd_t tensor(int64_t uid, const int64_t *dims, int nhwc, cudnnDataType_t dt, int virt)
{
    bd_t t;
    int64_t str[4], al = 16;
    _Bool v = virt != 0;
    strides(dims, nhwc, str);
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

enum { DIR_FWD, DIR_DATA, DIR_FILTER, DIR_FUSED };

/* A graph of direction dir with tensors of type dt (the one written by the
 * convolution NHWC-strided when nhwc), beta for the convolution; the fused
 * graph: conv -> add(z, 0.5) -> add(bias) -> ReLU, intermediates of type
 * vdt (fp32 as PyTorch builds it). Returns the finalize status of the
 * graph's last operation (0: the graph in *out). */
static int graph(int dir, cudnnDataType_t dt, int nhwc, float beta, cudnnDataType_t vdt,
                 bd_t *out)
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
    int cd = dir == DIR_FUSED ? DIR_FWD : dir, fused = dir == DIR_FUSED;
    bd_t x = tensor('x', XD, nhwc && dir == DIR_DATA, dt, 0);
    bd_t w = tensor('w', WD, nhwc && dir == DIR_FILTER, dt, 0);
    bd_t y = tensor(fused ? 'C' : 'y', YD, nhwc && dir == DIR_FWD, fused ? vdt : dt, fused);
    bd_t c = conv_desc(), op, ops[4], extra[12], g;
    float one = 1.0f, half = 0.5f;
    int nops = 1, nextra = 0, st = 0;
    CK(cudnnBackendCreateDescriptor(ot[cd], &op));
    CK(cudnnBackendSetAttribute(op, base[cd] + 0, CUDNN_TYPE_FLOAT, 1, &one));
    CK(cudnnBackendSetAttribute(op, base[cd] + 1, CUDNN_TYPE_FLOAT, 1, &beta));
    CK(cudnnBackendSetAttribute(op, base[cd] + 2, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c));
    CK(cudnnBackendSetAttribute(op, base[cd] + 3, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
    CK(cudnnBackendSetAttribute(op, base[cd] + 4, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    CK(cudnnBackendSetAttribute(op, base[cd] + 5, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    ops[0] = op;
    if ((st = (int)cudnnBackendFinalize(op)))
        goto out;
    if (fused) {
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
            bd_t o = tensor(i == 0 ? 'A' : i == 1 ? 'B' : 'y', YD, 0, i < 2 ? vdt : dt, i < 2);
            CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &pop));
            CK(cudnnBackendSetAttribute(pop, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
            CK(cudnnBackendSetAttribute(pop, CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &in));
            if (i < 2) {
                bd_t b = i == 0 ? tensor('z', YD, 0, dt, 0) : tensor('b', BD, 0, dt, 0);
                CK(cudnnBackendSetAttribute(pop, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
                extra[nextra++] = b;
            }
            CK(cudnnBackendSetAttribute(pop, CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o));
            if (i == 0) {
                CK(cudnnBackendSetAttribute(pop, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1,
                                            CUDNN_TYPE_FLOAT, 1, &one));
                CK(cudnnBackendSetAttribute(pop, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2,
                                            CUDNN_TYPE_FLOAT, 1, &half));
            }
            CK(cudnnBackendFinalize(pop));
            ops[nops++] = pop;
            extra[nextra++] = pw;
            extra[nextra++] = o;
            in = o;
        }
    }
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g_h));
    CK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                nops, ops));
    CK(cudnnBackendFinalize(g));
    *out = g;
out:
    for (int i = 0; i < nops; i++)
        CK(cudnnBackendDestroyDescriptor(ops[i]));
    for (int i = 0; i < nextra; i++)
        CK(cudnnBackendDestroyDescriptor(extra[i]));
    CK(cudnnBackendDestroyDescriptor(c));
    CK(cudnnBackendDestroyDescriptor(x));
    CK(cudnnBackendDestroyDescriptor(w));
    CK(cudnnBackendDestroyDescriptor(y));
    return st;
}

/* The deterministic engines of g (heuristics mode INSTANT), in order. */
static int engines(bd_t g, int64_t *idx, int max)
{
    bd_t heur, cfgs[16];
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_INSTANT;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g));
    CK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    CK(cudnnBackendFinalize(heur));
    int64_t n = 0, k;
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL));
    assert_true(n > 0 && n <= 16);
    for (int i = 0; i < n; i++)
        CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]));
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &n, cfgs));
    int m = 0;
    for (int i = 0; i < n; i++) {
        bd_t e;
        cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
        int64_t gi, nn = 0;
        int nondet = 0;
        CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e));
        CK(cudnnBackendGetAttribute(cfgs[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k, &e));
        CK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &k,
                                    &gi));
        CK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                                    CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT,
                                    &nn, notes));
        for (int j = 0; j < nn; j++)
            nondet |= notes[j] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
        if (!nondet && m < max)
            idx[m++] = gi;
        CK(cudnnBackendDestroyDescriptor(e));
        CK(cudnnBackendDestroyDescriptor(cfgs[i]));
    }
    CK(cudnnBackendDestroyDescriptor(heur));
    return m;
}

/* A plan of engine gi on g; its workspace size in *ws. */
static bd_t plan(bd_t g, int64_t gi, int64_t *ws)
{
    bd_t e, cfg, p;
    int64_t k;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e));
    CK(cudnnBackendSetAttribute(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g));
    CK(cudnnBackendSetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &gi));
    CK(cudnnBackendFinalize(e));
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg));
    CK(cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                1, &e));
    CK(cudnnBackendFinalize(cfg));
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p));
    CK(cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
    CK(cudnnBackendFinalize(p));
    CK(cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                &k, ws));
    CK(cudnnBackendDestroyDescriptor(cfg));
    CK(cudnnBackendDestroyDescriptor(e));
    return p;
}

/* Host data of every tensor, in fp32 (values of the 16-bit type). */
typedef struct {
    float *v[5]; /* x, w, y (dy, or y's initial value), z, b */
    size_t n[5];
} data_t;

static const int64_t *const DIMS[5] = { XD, WD, YD, YD, BD };
static const int64_t UIDS[5] = { 'x', 'w', 'y', 'z', 'b' };

static void data_init(data_t *d, cudnnDataType_t dt, unsigned seed)
{
    for (int t = 0; t < 5; t++) {
        d->n[t] = count(DIMS[t]);
        d->v[t] = malloc(d->n[t] * sizeof(float));
        for (size_t i = 0; i < d->n[t]; i++) {
            seed = seed * 1103515245u + 12345u;
            float f = (float)((int)(seed >> 9) % 2001 - 1000) / 997.0f, r;
            es_st(&r, 0, es_type(dt), f);
            d->v[t][i] = es_ld(&r, 0, es_type(dt));
        }
    }
}

static void data_free(data_t *d)
{
    for (int t = 0; t < 5; t++)
        free(d->v[t]);
}

/* Host fp32 values of a packed-NCHW tensor laid out with strides(nhwc) in
 * type dt (malloc'ed). */
static void *lay_out(const float *v, const int64_t *d, int nhwc, cudnnDataType_t dt)
{
    int64_t s[4];
    strides(d, nhwc, s);
    void *o = calloc(count(d), esize(dt));
    size_t i = 0;
    for (int64_t a = 0; a < d[0]; a++)
        for (int64_t b = 0; b < d[1]; b++)
            for (int64_t c = 0; c < d[2]; c++)
                for (int64_t e = 0; e < d[3]; e++)
                    es_st(o, a * s[0] + b * s[1] + c * s[2] + e * s[3], es_type(dt), v[i++]);
    return o;
}

/* Runs plan p on d's data in type dt (the output NHWC when nhwc); the
 * output back in packed NCHW fp32 values (malloc'ed). */
static float *run(bd_t p, int64_t ws, int dir, const data_t *d, cudnnDataType_t dt, int nhwc)
{
    int out = dir == DIR_DATA ? 0 : dir == DIR_FILTER ? 1 : 2;
    CUdeviceptr dp[5], dws = 0;
    void *ptrs[5];
    for (int t = 0; t < 5; t++) {
        int tn = t == out && nhwc;
        void *h = lay_out(d->v[t], DIMS[t], tn, dt);
        size_t bytes = d->n[t] * esize(dt);
        CK(cuMemAlloc(&dp[t], bytes));
        CK(cuMemcpyHtoD(dp[t], h, bytes));
        free(h);
        ptrs[t] = (void *)dp[t];
    }
    if (ws)
        CK(cuMemAlloc(&dws, (size_t)ws));
    void *wsp = (void *)dws;
    bd_t vp;
    int nt = dir == DIR_FUSED ? 5 : 3;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
    CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                                &wsp));
    CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, nt,
                                ptrs));
    CK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, nt,
                                UIDS));
    CK(cudnnBackendFinalize(vp));
    CK(cudnnBackendExecute(g_h, p, vp));
    CK(cuCtxSynchronize());
    CK(cudnnBackendDestroyDescriptor(vp));
    size_t n = d->n[out];
    void *h = malloc(n * esize(dt));
    CK(cuMemcpyDtoH(h, dp[out], n * esize(dt)));
    int64_t s[4];
    const int64_t *dm = DIMS[out];
    strides(dm, nhwc, s);
    float *r = malloc(n * sizeof(float));
    size_t i = 0;
    for (int64_t a = 0; a < dm[0]; a++)
        for (int64_t b = 0; b < dm[1]; b++)
            for (int64_t c = 0; c < dm[2]; c++)
                for (int64_t e = 0; e < dm[3]; e++)
                    r[i++] = es_ld(h, a * s[0] + b * s[1] + c * s[2] + e * s[3], es_type(dt));
    free(h);
    for (int t = 0; t < 5; t++)
        CK(cuMemFree(dp[t]));
    if (dws)
        CK(cuMemFree(dws));
    return r;
}

/* For every deterministic engine: the 16-bit plan's output equals the fp32
 * plan's (same engine, widened data) rounded to the 16-bit type. Returns
 * how many fp32 outputs the rounding changed (the control). */
static size_t check(int dir, cudnnDataType_t dt, int nhwc, float beta)
{
    bd_t g16, g32;
    data_t d;
    size_t changed = 0;
    data_init(&d, dt, 77u + (unsigned)dir);
    assert_int_equal(graph(dir, dt, nhwc, beta, CUDNN_DATA_FLOAT, &g16), 0);
    assert_int_equal(graph(dir, CUDNN_DATA_FLOAT, nhwc, beta, CUDNN_DATA_FLOAT, &g32), 0);
    int64_t idx[16];
    int ne = engines(g32, idx, 16);
    assert_true(ne > 0);
    for (int i = 0; i < ne; i++) {
        int64_t ws16, ws32;
        bd_t p16 = plan(g16, idx[i], &ws16), p32 = plan(g32, idx[i], &ws32);
        assert_true(ws16 >= ws32); /* the fp32 copies come on top */
        float *r16 = run(p16, ws16, dir, &d, dt, nhwc);
        float *r32 = run(p32, ws32, dir, &d, CUDNN_DATA_FLOAT, nhwc);
        int out = dir == DIR_DATA ? 0 : dir == DIR_FILTER ? 1 : 2;
        for (size_t j = 0; j < d.n[out]; j++) {
            float e;
            es_st(&e, 0, es_type(dt), r32[j]);
            e = es_ld(&e, 0, es_type(dt));
            changed += e != r32[j];
            if (memcmp(&e, &r16[j], 4))
                fail_msg("dir %d type %d engine %lld element %zu: %a, expected %a", dir, (int)dt,
                         (long long)idx[i], j, (double)r16[j], (double)e);
        }
        free(r16);
        free(r32);
        CK(cudnnBackendDestroyDescriptor(p16));
        CK(cudnnBackendDestroyDescriptor(p32));
    }
    CK(cudnnBackendDestroyDescriptor(g16));
    CK(cudnnBackendDestroyDescriptor(g32));
    data_free(&d);
    return changed;
}

static void test_forward(void **state)
{
    (void)state;
    assert_true(check(DIR_FWD, CUDNN_DATA_HALF, 0, 0.0f) > 0);
    assert_true(check(DIR_FWD, CUDNN_DATA_BFLOAT16, 1, 0.5f) > 0);
}

static void test_backward_data(void **state)
{
    (void)state;
    assert_true(check(DIR_DATA, CUDNN_DATA_HALF, 1, 0.0f) > 0);
    assert_true(check(DIR_DATA, CUDNN_DATA_BFLOAT16, 0, 1.0f) > 0);
}

static void test_backward_filter(void **state)
{
    (void)state;
    assert_true(check(DIR_FILTER, CUDNN_DATA_BFLOAT16, 0, 0.0f) > 0);
    assert_true(check(DIR_FILTER, CUDNN_DATA_HALF, 1, 0.25f) > 0);
}

static void test_fused(void **state)
{
    (void)state;
    assert_true(check(DIR_FUSED, CUDNN_DATA_HALF, 0, 0.0f) > 0);
    assert_true(check(DIR_FUSED, CUDNN_DATA_BFLOAT16, 0, 0.0f) > 0);
}

/* Refused: a 16-bit virtual intermediate (fp32 compute graphs keep it
 * fp32); the same graph with fp32 intermediates builds. */
static void test_refused(void **state)
{
    (void)state;
    bd_t g;
    assert_int_equal(graph(DIR_FUSED, CUDNN_DATA_HALF, 0, 0.0f, CUDNN_DATA_HALF, &g),
                     CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE);
    assert_int_equal(graph(DIR_FUSED, CUDNN_DATA_HALF, 0, 0.0f, CUDNN_DATA_FLOAT, &g), 0);
    CK(cudnnBackendDestroyDescriptor(g));
}

static int setup(void **state)
{
    (void)state;
    CUdevice dev;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&g_ctx, dev) ||
        cuCtxSetCurrent(g_ctx) || cudnnCreate(&g_h))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cudnnDestroy(g_h);
    return 0;
}

static char g_shm[64];

static void unlink_shm(void)
{
    shm_unlink(g_shm);
}

int main(void)
{
    /* a capacity table of its own */
    snprintf(g_shm, sizeof(g_shm), "/simcuda-test-bkhalf-%d", (int)getpid());
    setenv("SIMCUDA_SHM_NAME", g_shm, 1);
    shm_unlink(g_shm);
    atexit(unlink_shm);
    /* On simcuda: device memory kept out of this process, as on a GPU
     * machine (a real driver ignores the variable): the library never
     * touches device memory from the host. */
    setenv("SIMCUDA_ISOLATION", "1", 1);
    setenv("SIMCUDA_DEVICES", "a100:2G", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward),
        cmocka_unit_test(test_backward_data),
        cmocka_unit_test(test_backward_filter),
        cmocka_unit_test(test_fused),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
