/* Tests of simcuda's cuBLASLt (build/sim/libcublasLt.so.13): its exports
 * against NVIDIA's library, descriptors and their attributes, matmuls with
 * every epilogue PyTorch uses against a double-precision reference, the
 * heuristic's dependence on the GPU model, the workspace and the promised
 * alignments (each a source of different bits that the same inputs show),
 * and the errors cuBLASLt documents. Several simulated models in one
 * process (SIMCUDA_DEVICES is set before the driver starts). */
#include "tests/harness.h"
#include "tests/sim/common/abi.h"

#include <cublasLt.h>
#include <cuda.h>

#include <math.h>
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

enum { DEV_A100 = 0, DEV_T4 = 1, DEV_H100 = 2, NDEV = 3 };
static CUcontext g_ctx[NDEV];

#define CK(x) assert_int_equal((int)(x), 0)

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 - 0.5);
}

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *c = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

static uint16_t f2h(float f) /* round to nearest even (normal range is enough here) */
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t s = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a < 0x38800000u)
        return (uint16_t)s;
    return (uint16_t)(s | (((a + 0xfffu + ((a >> 13) & 1u)) >> 13) - (112u << 10)));
}

static float h2f(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    uint32_t x = e ? s | ((e + 112u) << 23) | (m << 13) : s;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static CUdeviceptr dalloc(size_t bytes)
{
    CUdeviceptr p;
    CK(cuMemAlloc(&p, bytes ? bytes : 4));
    return p;
}

static int setup(void **state)
{
    (void)state;
    CK(cuInit(0));
    for (int i = 0; i < NDEV; i++) {
        CUdevice d;
        CK(cuDeviceGet(&d, i));
        CK(cuDevicePrimaryCtxRetain(&g_ctx[i], d));
    }
    CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
    return 0;
}

/* ---- a matmul the way PyTorch's gemm_and_bias issues it -------------------------------------- */

typedef struct {
    int ta, tb, m, n, k, batch;
    cudaDataType type, ctype;     /* A/B type, C/D type */
    cublasLtEpilogue_t epi;
    size_t ws;                    /* preference MAX_WORKSPACE_BYTES */
    uint32_t align;               /* preference MIN_ALIGNMENT_* (0: the pointers') */
    size_t offset;                /* bytes added to every data pointer */
    int devptr;                   /* alpha / beta in device memory */
    float alpha, beta;
} mm_t;

typedef struct {
    uint64_t hash;                /* D's bits */
    uint64_t bgrad_hash;
    double err, bgrad_err;        /* largest error relative to the reference's magnitude */
    uint32_t splitk, scheme, tile;
    int32_t id;
    cublasStatus_t st;
} mm_res_t;

static size_t esize(cudaDataType t)
{
    return t == CUDA_R_32F ? 4 : 2;
}

static float load(const void *p, size_t i, cudaDataType t)
{
    if (t == CUDA_R_32F)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    if (t == CUDA_R_16F)
        return h2f(h);
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static void store(void *p, size_t i, cudaDataType t, float v)
{
    if (t == CUDA_R_32F)
        ((float *)p)[i] = v;
    else if (t == CUDA_R_16F)
        ((uint16_t *)p)[i] = f2h(v);
    else {
        uint32_t x;
        memcpy(&x, &v, 4);
        ((uint16_t *)p)[i] = (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
}

static void run_mm(const mm_t *q, mm_res_t *res)
{
    memset(res, 0, sizeof(*res));
    int lda = q->ta ? q->k : q->m, ldb = q->tb ? q->n : q->k, ldc = q->m;
    size_t na = (size_t)lda * (q->ta ? q->m : q->k), nb = (size_t)ldb * (q->tb ? q->k : q->n);
    size_t nc = (size_t)ldc * q->n, es = esize(q->type), ec = esize(q->ctype);
    int bgrad = q->epi == CUBLASLT_EPILOGUE_BGRADA || q->epi == CUBLASLT_EPILOGUE_BGRADB;
    int nbias = q->epi == CUBLASLT_EPILOGUE_BGRADB ? q->n : q->m;
    char *ha = malloc(na * es * q->batch), *hb = malloc(nb * es * q->batch);
    char *hc = malloc(nc * ec * q->batch), *hd = malloc(nc * ec * q->batch);
    char *hbias = malloc((size_t)nbias * ec * q->batch);
    for (size_t i = 0; i < na * q->batch; i++)
        store(ha, i, q->type, frand());
    for (size_t i = 0; i < nb * q->batch; i++)
        store(hb, i, q->type, frand());
    for (size_t i = 0; i < nc * q->batch; i++)
        store(hc, i, q->ctype, frand());
    for (int i = 0; i < nbias * q->batch; i++)
        store(hbias, (size_t)i, q->ctype, frand());
    size_t off = q->offset;
    CUdeviceptr da = dalloc(na * es * q->batch + off), db = dalloc(nb * es * q->batch + off);
    CUdeviceptr dc = dalloc(nc * ec * q->batch + off), dbias = dalloc((size_t)nbias * ec * q->batch + off);
    CUdeviceptr dws = dalloc(q->ws), dab = dalloc(8);
    CK(cuMemcpyHtoD(da + off, ha, na * es * q->batch));
    CK(cuMemcpyHtoD(db + off, hb, nb * es * q->batch));
    CK(cuMemcpyHtoD(dc + off, hc, nc * ec * q->batch));
    CK(cuMemcpyHtoD(dbias + off, hbias, (size_t)nbias * ec * q->batch));
    float ab[2] = { q->alpha, q->beta };
    CK(cuMemcpyHtoD(dab, ab, 8));
    cublasLtHandle_t h;
    CK(cublasLtCreate(&h));
    cublasLtMatmulDesc_t desc;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t oa = q->ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = q->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof(oa)));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof(ob)));
    if (q->epi != CUBLASLT_EPILOGUE_DEFAULT) {
        void *bp = (void *)(dbias + off);
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &q->epi,
                                          sizeof(q->epi)));
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp,
                                          sizeof(bp)));
        if (q->batch > 1) {
            int64_t bs = nbias;
            CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bs,
                                              sizeof(bs)));
        }
    }
    if (q->devptr) {
        cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_DEVICE;
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof(pm)));
    }
    cublasLtMatrixLayout_t la, lb, lc;
    CK(cublasLtMatrixLayoutCreate(&la, q->type, q->ta ? q->k : q->m, q->ta ? q->m : q->k, lda));
    CK(cublasLtMatrixLayoutCreate(&lb, q->type, q->tb ? q->n : q->k, q->tb ? q->k : q->n, ldb));
    CK(cublasLtMatrixLayoutCreate(&lc, q->ctype, q->m, q->n, ldc));
    if (q->batch > 1) {
        int64_t sa = (int64_t)na, sb = (int64_t)nb, sc = (int64_t)nc;
        CK(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &q->batch, 4));
        CK(cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &q->batch, 4));
        CK(cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &q->batch, 4));
        CK(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, 8));
        CK(cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, 8));
        CK(cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sc, 8));
    }
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t wsz = q->ws;
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, 8));
    uint32_t al[4] = { q->align, q->align, q->align, q->align };
    if (!q->align) /* PyTorch's _getAlignment of each pointer */
        for (int i = 0; i < 4; i++) {
            uintptr_t p = (uintptr_t)(i == 0 ? da : i == 1 ? db : dc) + off;
            for (al[i] = 256; al[i] > 1 && p % al[i]; al[i] /= 2)
                ;
        }
    for (int i = 0; i < 4; i++)
        CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i,
                                                &al[i], 4));
    cublasLtMatmulHeuristicResult_t hr;
    int got = 0;
    res->st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &hr, &got);
    if (res->st == CUBLAS_STATUS_SUCCESS && got == 1) {
        size_t w;
        CK(cublasLtMatmulAlgoConfigGetAttribute(&hr.algo, CUBLASLT_ALGO_CONFIG_ID, &res->id, 4, &w));
        CK(cublasLtMatmulAlgoConfigGetAttribute(&hr.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                &res->splitk, 4, &w));
        CK(cublasLtMatmulAlgoConfigGetAttribute(&hr.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                &res->scheme, 4, &w));
        CK(cublasLtMatmulAlgoConfigGetAttribute(&hr.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &res->tile,
                                                4, &w));
        const void *pa = q->devptr ? (void *)dab : (void *)&ab[0];
        const void *pb = q->devptr ? (void *)(dab + 4) : (void *)&ab[1];
        res->st = cublasLtMatmul(h, desc, pa, (void *)(da + off), la, (void *)(db + off), lb, pb,
                                 (void *)(dc + off), lc, (void *)(dc + off), lc, &hr.algo,
                                 (void *)dws, q->ws, NULL);
    }
    if (res->st == CUBLAS_STATUS_SUCCESS) {
        CK(cuCtxSynchronize());
        CK(cuMemcpyDtoH(hd, dc + off, nc * ec * q->batch));
        res->hash = fnv(hd, nc * ec * q->batch);
        double emax = 0, mag = 1e-30, gmax = 0, gmag = 1e-30;
        char *hg = malloc((size_t)nbias * ec * q->batch);
        CK(cuMemcpyDtoH(hg, dbias + off, (size_t)nbias * ec * q->batch));
        res->bgrad_hash = fnv(hg, (size_t)nbias * ec * q->batch);
        for (int b = 0; b < q->batch; b++) {
            for (int j = 0; j < q->n; j++)
                for (int i = 0; i < q->m; i++) {
                    double s = 0;
                    for (int p = 0; p < q->k; p++) {
                        double x = load(ha, b * na + (q->ta ? p + (size_t)i * lda : i + (size_t)p * lda), q->type);
                        double y = load(hb, b * nb + (q->tb ? j + (size_t)p * ldb : p + (size_t)j * ldb), q->type);
                        s += x * y;
                    }
                    double r = q->alpha * s;
                    if (q->beta != 0.0f)
                        r += q->beta * load(hc, b * nc + i + (size_t)j * ldc, q->ctype);
                    if (q->epi == CUBLASLT_EPILOGUE_BIAS || q->epi == CUBLASLT_EPILOGUE_RELU_BIAS ||
                        q->epi == CUBLASLT_EPILOGUE_GELU_BIAS)
                        r += load(hbias, (size_t)b * nbias + i, q->ctype);
                    if (q->epi == CUBLASLT_EPILOGUE_RELU || q->epi == CUBLASLT_EPILOGUE_RELU_BIAS)
                        r = r > 0 ? r : 0;
                    if (q->epi == CUBLASLT_EPILOGUE_GELU || q->epi == CUBLASLT_EPILOGUE_GELU_BIAS)
                        r = 0.5 * r * (1 + tanh(0.7978845608 * (r + 0.044715 * r * r * r)));
                    double g = load(hd, b * nc + i + (size_t)j * ldc, q->ctype);
                    emax = fmax(emax, fabs(g - r));
                    mag = fmax(mag, fabs(r));
                }
            for (int x = 0; bgrad && x < nbias; x++) {
                double s = 0;
                for (int p = 0; p < q->k; p++)
                    s += q->epi == CUBLASLT_EPILOGUE_BGRADA
                             ? load(ha, b * na + (q->ta ? p + (size_t)x * lda : x + (size_t)p * lda), q->type)
                             : load(hb, b * nb + (q->tb ? x + (size_t)p * ldb : p + (size_t)x * ldb), q->type);
                gmax = fmax(gmax, fabs(load(hg, (size_t)b * nbias + x, q->ctype) - s));
                gmag = fmax(gmag, fabs(s));
            }
        }
        res->err = emax / mag;
        res->bgrad_err = gmax / gmag;
        free(hg);
    }
    CK(cublasLtMatmulPreferenceDestroy(pref));
    CK(cublasLtMatrixLayoutDestroy(la));
    CK(cublasLtMatrixLayoutDestroy(lb));
    CK(cublasLtMatrixLayoutDestroy(lc));
    CK(cublasLtMatmulDescDestroy(desc));
    CK(cublasLtDestroy(h));
    CK(cuMemFree(da));
    CK(cuMemFree(db));
    CK(cuMemFree(dc));
    CK(cuMemFree(dbias));
    CK(cuMemFree(dws));
    CK(cuMemFree(dab));
    free(ha);
    free(hb);
    free(hc);
    free(hd);
    free(hbias);
}

static mm_t mm_default(int m, int n, int k)
{
    mm_t q = { 0, 0, m, n, k, 1, CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, 1 << 20, 0, 0,
               0, 1.0f, 0.0f };
    return q;
}

/* ---- tests ------------------------------------------------------------------------------------ */

static void test_library_abi(void **state)
{
    (void)state;
    char why[8192];
    if (sim_abi_check("sim/libcublasLt.so.13", "libcublasLt.so.13", "libcublasLt.so.13", why,
                      sizeof(why)))
        fail_msg("%s", why);
}

static void test_descriptors(void **state)
{
    (void)state;
    cublasLtMatmulDesc_t d;
    CK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    size_t w = 0;
    int32_t v = -1;
    CK(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, NULL, 0, &w));
    assert_int_equal(w, 4);
    CK(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &v, 4, &w));
    assert_int_equal(v, CUBLAS_OP_N);
    uint32_t epi = CUBLASLT_EPILOGUE_GELU_BIAS, e2 = 0;
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 4));
    CK(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e2, 4, &w));
    assert_int_equal(e2, epi);
    /* a wrong size is refused */
    assert_int_equal(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 8),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasLtMatmulDescGetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &e2, 2, &w),
                     CUBLAS_STATUS_INVALID_VALUE);
    CK(cublasLtMatmulDescDestroy(d));
    /* a descriptor held by the application, set up with Init */
    cublasLtMatmulDescOpaque_t own;
    CK(cublasLtMatmulDescInit(&own, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F));
    CK(cublasLtMatmulDescGetAttribute(&own, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &v, 4, &w));
    assert_int_equal(v, CUBLAS_COMPUTE_32F_FAST_TF32);
    cublasLtMatrixLayout_t l;
    CK(cublasLtMatrixLayoutCreate(&l, CUDA_R_16F, 7, 5, 9));
    uint64_t rows = 0;
    CK(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, 8, &w));
    assert_int_equal(rows, 7);
    CK(cublasLtMatrixLayoutDestroy(l));
    cublasLtMatmulPreference_t p;
    CK(cublasLtMatmulPreferenceCreate(&p));
    uint64_t ws = 1;
    CK(cublasLtMatmulPreferenceGetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, 8, &w));
    assert_int_equal(ws, 0); /* documented default: no workspace */
    uint32_t al = 0;
    CK(cublasLtMatmulPreferenceGetAttribute(p, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, 4, &w));
    assert_int_equal(al, 256);
    CK(cublasLtMatmulPreferenceDestroy(p));
    assert_int_equal(cublasLtMatmulDescDestroy((cublasLtMatmulDesc_t)&ws),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasLtDestroy(NULL), CUBLAS_STATUS_NOT_INITIALIZED);
    assert_true(cublasLtGetVersion() >= 130000);
    assert_string_equal(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED),
                        "CUBLAS_STATUS_NOT_SUPPORTED");
}

/* Every epilogue PyTorch uses, every type combination, transposes,
 * batches, device scalars: within float rounding of a double reference. */
static void test_matmul_correct(void **state)
{
    (void)state;
    static const cublasLtEpilogue_t epis[] = {
        CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_RELU, CUBLASLT_EPILOGUE_BIAS,
        CUBLASLT_EPILOGUE_RELU_BIAS, CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_BIAS,
        CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB,
    };
    static const cudaDataType types[][2] = {
        { CUDA_R_32F, CUDA_R_32F }, { CUDA_R_16F, CUDA_R_16F }, { CUDA_R_16BF, CUDA_R_16BF },
        { CUDA_R_16F, CUDA_R_32F }, { CUDA_R_16BF, CUDA_R_32F },
    };
    for (size_t e = 0; e < sizeof(epis) / sizeof(epis[0]); e++)
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
            mm_t q = mm_default(37, 19, 300);
            q.ta = (int)(e & 1), q.tb = (int)((e >> 1) & 1);
            q.type = types[t][0], q.ctype = types[t][1], q.epi = epis[e];
            q.batch = t == 0 ? 3 : 1;
            q.beta = e == 0 ? 0.5f : 0.0f;
            q.devptr = e == 2;
            mm_res_t r;
            run_mm(&q, &r);
            double tol = types[t][1] == CUDA_R_32F ? 1e-5 : 1e-2;
            if (r.st != CUBLAS_STATUS_SUCCESS || !(r.err < tol) ||
                ((epis[e] == CUBLASLT_EPILOGUE_BGRADA || epis[e] == CUBLASLT_EPILOGUE_BGRADB) &&
                 !(r.bgrad_err < tol)))
                fail_msg("epilogue %d types %d/%d: status %d error %g bgrad error %g",
                         (int)epis[e], (int)types[t][0], (int)types[t][1], (int)r.st, r.err,
                         r.bgrad_err);
        }
}

/* The choice and the bits follow the GPU model; the same model twice gives
 * the same bits. */
static void test_models_differ(void **state)
{
    (void)state;
    mm_res_t r[NDEV], again;
    mm_t q = mm_default(64, 48, 4096);
    for (int d = 0; d < NDEV; d++) {
        CK(cuCtxSetCurrent(g_ctx[d]));
        g_rng = 99;
        run_mm(&q, &r[d]);
        CK(r[d].st);
        assert_true(r[d].err < 1e-5);
    }
    g_rng = 99;
    CK(cuCtxSetCurrent(g_ctx[DEV_T4]));
    run_mm(&q, &again);
    assert_int_equal(again.hash, r[DEV_T4].hash);
    CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
    assert_int_not_equal(r[DEV_A100].hash, r[DEV_T4].hash);
    assert_int_not_equal(r[DEV_A100].hash, r[DEV_H100].hash);
    assert_int_not_equal(r[DEV_T4].hash, r[DEV_H100].hash);
}

/* A handle is bound to the device current at cublasLtCreate (or, made
 * with no context current, at its first heuristic or matmul): with another
 * device current its heuristic and matmul fail with
 * CUBLAS_STATUS_NOT_INITIALIZED; back on its device they work. */
static void test_handle_bound_to_device(void **state)
{
    (void)state;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t l;
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 8, 8, 8));
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CUdeviceptr m = dalloc(8 * 8 * 4);
    CK(cuMemsetD32(m, 0, 64));
    const float one = 1, zero = 0;
    for (int late = 0; late <= 1; late++) {
        cublasLtHandle_t h;
        if (late)
            CK(cuCtxSetCurrent(NULL));
        CK(cublasLtCreate(&h));
        CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
        cublasLtMatmulHeuristicResult_t hr;
        int got = 0;
        CK(cublasLtMatmulAlgoGetHeuristic(h, desc, l, l, l, l, pref, 1, &hr, &got));
        assert_int_equal(got, 1);
        CK(cuCtxSetCurrent(g_ctx[DEV_T4]));
        assert_int_equal(cublasLtMatmulAlgoGetHeuristic(h, desc, l, l, l, l, pref, 1, &hr, &got),
                         CUBLAS_STATUS_NOT_INITIALIZED);
        assert_int_equal(cublasLtMatmul(h, desc, &one, (void *)m, l, (void *)m, l, &zero,
                                        (void *)m, l, (void *)m, l, &hr.algo, NULL, 0, NULL),
                         CUBLAS_STATUS_NOT_INITIALIZED);
        CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
        CK(cublasLtMatmul(h, desc, &one, (void *)m, l, (void *)m, l, &zero, (void *)m, l,
                          (void *)m, l, &hr.algo, NULL, 0, NULL));
        CK(cuCtxSynchronize());
        CK(cublasLtDestroy(h));
    }
    CK(cuMemFree(m));
    CK(cublasLtMatmulPreferenceDestroy(pref));
    CK(cublasLtMatrixLayoutDestroy(l));
    CK(cublasLtMatmulDescDestroy(desc));
}

/* The workspace the preference allows and the alignment it promises change
 * the algorithm (split-K and its reduction scheme; vector or scalar
 * kernel) and so the bits. */
static void test_workspace_and_alignment(void **state)
{
    (void)state;
    mm_res_t big, none, small, a16, a4;
    mm_t q = mm_default(64, 48, 4096);
    /* half output: in-place split-K accumulates in half, the compute-type
     * scheme in float */
    q.type = q.ctype = CUDA_R_16F;
    q.ws = 32 << 20;
    g_rng = 5;
    run_mm(&q, &big);
    q.ws = 0;
    g_rng = 5;
    run_mm(&q, &none);
    q.ws = 4096;
    g_rng = 5;
    run_mm(&q, &small);
    CK(big.st);
    CK(none.st);
    CK(small.st);
    assert_true(big.splitk > 1 && big.scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
    assert_true(none.splitk == 1);
    assert_true(small.splitk > 1 && small.scheme == CUBLASLT_REDUCTION_SCHEME_INPLACE);
    assert_int_not_equal(big.hash, none.hash);
    assert_int_not_equal(big.hash, small.hash);
    mm_res_t a256;
    q = mm_default(64, 48, 4096);
    q.align = 256;
    g_rng = 6;
    run_mm(&q, &a256);
    q.align = 16;
    g_rng = 6;
    run_mm(&q, &a16);
    q.align = 4;
    g_rng = 6;
    run_mm(&q, &a4);
    CK(a256.st);
    CK(a16.st);
    CK(a4.st);
    assert_int_not_equal(a256.id, a16.id);
    assert_int_not_equal(a16.id, a4.id);
    assert_int_not_equal(a256.hash, a16.hash);
    assert_int_not_equal(a16.hash, a4.hash);
    assert_true(a4.err < 1e-5 && a16.err < 1e-5 && a256.err < 1e-5);
    /* PyTorch's alignments from the addresses: a tensor 4 bytes into its
     * allocation gets the scalar kernel, 32 bytes into it the 16-byte one */
    q.align = 0;
    q.offset = 4;
    g_rng = 6;
    run_mm(&q, &a4);
    CK(a4.st);
    assert_int_equal(a4.id, 0);
    q.offset = 32;
    g_rng = 6;
    run_mm(&q, &a4);
    CK(a4.st);
    assert_int_equal(a4.id, 1);
}

/* The errors cuBLASLt documents. */
static void test_errors(void **state)
{
    (void)state;
    cublasLtHandle_t h;
    CK(cublasLtCreate(&h));
    cublasLtMatmulDesc_t d;
    CK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtMatrixLayout_t la, lb, lc, l16;
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 64, 4096, 64));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 4096, 48, 4096));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 64, 48, 64));
    CK(cublasLtMatrixLayoutCreate(&l16, CUDA_R_16F, 64, 48, 64));
    cublasLtMatmulPreference_t p;
    CK(cublasLtMatmulPreferenceCreate(&p));
    uint64_t ws = 32 << 20;
    CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, 8));
    cublasLtMatmulHeuristicResult_t hr[4];
    int got = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, lc, p, 4, hr, &got));
    assert_true(got >= 2 && hr[0].workspaceSize > 0);
    CUdeviceptr A = dalloc(64 * 4096 * 4), B = dalloc(4096 * 48 * 4), C = dalloc(64 * 48 * 4);
    float one = 1, zero = 0;
    /* the workspace the algorithm needs is not given */
    assert_int_equal(cublasLtMatmul(h, d, &one, (void *)A, la, (void *)B, lb, &zero, (void *)C, lc,
                                    (void *)C, lc, &hr[0].algo, NULL, 0, NULL),
                     CUBLAS_STATUS_INVALID_VALUE);
    /* a vector kernel on a pointer it cannot load from */
    assert_int_equal(cublasLtMatmul(h, d, &one, (void *)(A + 4), la, (void *)B, lb, &zero,
                                    (void *)C, lc, (void *)C, lc, &hr[1].algo, NULL, 0, NULL),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    /* a bias epilogue without a bias */
    uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 4));
    assert_int_equal(cublasLtMatmul(h, d, &one, (void *)A, la, (void *)B, lb, &zero, (void *)C, lc,
                                    (void *)C, lc, &hr[1].algo, NULL, 0, NULL),
                     CUBLAS_STATUS_INVALID_VALUE);
    epi = CUBLASLT_EPILOGUE_RELU_AUX;
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 4));
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, lc, p, 4, hr, &got),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    epi = CUBLASLT_EPILOGUE_DEFAULT;
    CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 4));
    /* fp32 inputs with a half output; shapes that do not match */
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, l16, l16, p, 4, hr, &got),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(h, d, la, lc, lc, lc, p, 4, hr, &got),
                     CUBLAS_STATUS_INVALID_VALUE);
    assert_int_equal(cublasLtMatmulAlgoGetHeuristic(NULL, d, la, lb, lc, lc, p, 4, hr, &got),
                     CUBLAS_STATUS_NOT_INITIALIZED);
    CK(cuMemFree(A));
    CK(cuMemFree(B));
    CK(cuMemFree(C));
    CK(cublasLtMatmulPreferenceDestroy(p));
    CK(cublasLtMatrixLayoutDestroy(la));
    CK(cublasLtMatrixLayoutDestroy(lb));
    CK(cublasLtMatrixLayoutDestroy(lc));
    CK(cublasLtMatrixLayoutDestroy(l16));
    CK(cublasLtMatmulDescDestroy(d));
    CK(cublasLtDestroy(h));
    assert_int_equal(cublasLtDestroy(h), CUBLAS_STATUS_NOT_INITIALIZED);
}

static char g_shm[64];

static void unlink_shm(void)
{
    shm_unlink(g_shm);
}

int main(void)
{
    /* a capacity table of its own: other processes' device memory use does
     * not matter here */
    snprintf(g_shm, sizeof(g_shm), "/simcuda-test-lt-%d", (int)getpid());
    setenv("SIMCUDA_SHM_NAME", g_shm, 1);
    shm_unlink(g_shm);
    atexit(unlink_shm);
    /* On simcuda: device memory kept out of this process, as on a GPU
     * machine (a real driver ignores the variable): the library never
     * touches device memory from the host. */
    setenv("SIMCUDA_ISOLATION", "1", 1);
    setenv("SIMCUDA_DEVICES", "a100:2G,t4:2G,h100:2G", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_library_abi),
        cmocka_unit_test(test_descriptors),
        cmocka_unit_test(test_matmul_correct),
        cmocka_unit_test(test_models_differ),
        cmocka_unit_test(test_handle_bound_to_device),
        cmocka_unit_test(test_workspace_and_alignment),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
