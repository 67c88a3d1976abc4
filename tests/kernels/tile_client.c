/* Client run by tests/kernels/tile_test.c under libeasyscale.so in d2: the
 * tiled portable kernels (kernels/portable.cu) on many shapes, each result
 * compared bit for bit with the reference element functions
 * (kernels/portable_kernels.h) run on the host, one line per case:
 * "case NAME ok" or "case NAME BAD i got want" (or, for a convolution the
 * library refused, "case NAME status S").
 *
 *   tile_client gemm DEV [REF]
 *                          cublasGemmStridedBatchedEx: odd sizes, partial
 *                          and exact tiles of both kernels (small and large
 *                          tiles), the four transposes, padded leading
 *                          dimensions, batches, fp32 / fp16 / bf16, C in
 *                          fp32, beta 0 over NaN, alpha 0 over NaN, Inf and
 *                          NaN inputs
 *   tile_client int8 DEV [REF]
 *                          the int8 GEMM's own cases: an inner dimension
 *                          past 2^17 (several int32 chunks), k not a
 *                          multiple of 16 or 32, wide-range and adversarial
 *                          operands (one huge element a row), rows and
 *                          columns of zeros, +Inf and -Inf products (NaN),
 *                          sums past fp32's range, subnormal results,
 *                          cublasSgemm, cublasSgemmStridedBatched,
 *                          cublasGemmEx and device-pointer scalars
 * The reference (REF) is the int8 definition (kernels/d2int8.c) or the fma
 * order (the element functions): "int8" or "fma", by default the one
 * EASYSCALE_D2_GEMM names (int8 when unset).
 *   tile_client conv DEV   cudnnConvolutionForward / BackwardData /
 *                          BackwardFilter: odd images, padding, strides,
 *                          dilation, groups (depthwise too), NHWC and
 *                          strided tensors, convolution (flipped) mode,
 *                          fp32 / fp16 / bf16, beta != 0, Inf in the filter
 *                          under padding (a skipped tap must stay skipped)
 */
#include <cublas_v2.h>
#include <cuda.h>
#include <cudnn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/d2int8.h"
#include "kernels/portable_kernels.h"

#include "../clients/ck.h"

static unsigned g_seed = 99;
static int g_ref_int8 = 1; /* the reference: the int8 definition (1) or the fma order (0) */

static float rnd(void)
{
    g_seed = g_seed * 1103515245u + 12345u;
    return (float)((int)(g_seed >> 9) % 2001 - 1000) / 997.0f;
}

static size_t esz(int dt)
{
    return dt == ES_DT_F32 ? 4 : 2;
}

static void *host_fill(size_t n, int dt)
{
    void *p = malloc(n * esz(dt) + 8);
    for (size_t i = 0; i < n; i++)
        es_st(p, (long long)i, dt, rnd());
    return p;
}

static CUdeviceptr up(const void *h, size_t bytes)
{
    CUdeviceptr p;
    CK(cuMemAlloc(&p, bytes + 8));
    CK(cuMemcpyHtoD(p, h, bytes));
    return p;
}

/* Whether element i is a NaN other than the type's canonical one (d2
 * stores every NaN as 0x7fc00000 / 0x7e00 / 0x7fc0: kernels/portable_kernels.h). */
static int odd_nan(const void *p, size_t i, int dt)
{
    if (dt == ES_DT_F32) {
        unsigned u;
        memcpy(&u, (const char *)p + i * 4, 4);
        return (u & 0x7fffffffu) > 0x7f800000u && u != 0x7fc00000u;
    }
    unsigned short h;
    memcpy(&h, (const char *)p + i * 2, 2);
    if (dt == ES_DT_F16)
        return (h & 0x7fffu) > 0x7c00u && h != 0x7e00u;
    return (h & 0x7fffu) > 0x7f80u && h != 0x7fc0u;
}

/* Compares n elements of type dt: prints the case's line. */
static void report(const char *name, const void *got, const void *want, size_t n, int dt)
{
    for (size_t i = 0; i < n; i++) {
        if (memcmp((const char *)got + i * esz(dt), (const char *)want + i * esz(dt), esz(dt))) {
            printf("case %s BAD %zu %a %a\n", name, i, (double)es_ld(got, (long long)i, dt),
                   (double)es_ld(want, (long long)i, dt));
            return;
        }
        if (odd_nan(got, i, dt)) {
            printf("case %s BAD %zu: a NaN that is not the canonical one\n", name, i);
            return;
        }
    }
    printf("case %s ok\n", name);
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

/* ---- GEMM -------------------------------------------------------------------------------- */

static cudaDataType cuda_type(int dt)
{
    return dt == ES_DT_F32 ? CUDA_R_32F : dt == ES_DT_F16 ? CUDA_R_16F : CUDA_R_16BF;
}

typedef struct {
    const char *name;
    int ta, tb, m, n, k, pad, batch, at, ct;
    float alpha, beta;
    int special; /* 1 NaN in C (beta 0), 2 NaN in A (alpha 0), 3 Inf and NaN in A and B,
                    4 wide range (exponents -60 .. 60), 5 one huge element a row of A,
                    6 rows and columns of zeros, 7 +Inf and -Inf products (NaN), 8 sums
                    past fp32's range, 9 subnormal results */
    int api;     /* 0 cublasGemmStridedBatchedEx, 1 cublasSgemm, 2 cublasSgemmStridedBatched,
                    3 cublasGemmEx, 4 cublasSgemm with device-pointer scalars */
} gcase_t;

/* x 2^e, e in [lo, hi] drawn with the values */
static float scaled(float x, int lo, int hi)
{
    g_seed = g_seed * 1103515245u + 12345u;
    return ldexpf(x, lo + (int)((g_seed >> 8) % (unsigned)(hi - lo + 1)));
}

/* The special inputs of the int8 cases (4 to 9). */
static void int8_special(const gcase_t *c, void *a, size_t na, void *b, size_t nb)
{
    int lo = c->at == ES_DT_F16 ? -12 : -60, hi = c->at == ES_DT_F16 ? 12 : 60;
    switch (c->special) {
    case 4:
        for (size_t i = 0; i < na; i++)
            es_st(a, (long long)i, c->at, scaled(es_ld(a, (long long)i, c->at), lo, hi));
        for (size_t i = 0; i < nb; i++)
            es_st(b, (long long)i, c->at, scaled(es_ld(b, (long long)i, c->at), lo, hi));
        break;
    case 5: /* element 0 of each stored column (a row of op(A) when ta) is huge */
        for (size_t i = 0; i < na; i += (size_t)c->m)
            es_st(a, (long long)i, c->at, c->at == ES_DT_F16 ? 30000.0f : 1e30f);
        break;
    case 6:
        for (size_t i = 0; i < na; i += 7)
            es_st(a, (long long)i, c->at, 0.0f);
        for (size_t i = 0; i < (size_t)c->k && i < na; i++)
            es_st(a, (long long)(i * (size_t)(c->ta ? 1 : c->m)), c->at, 0.0f);
        for (size_t i = 0; i < (size_t)c->k && i < nb; i++)
            es_st(b, (long long)(i * (size_t)(c->tb ? c->n : 1)), c->at, 0.0f);
        break;
    case 7:
        es_st(a, 0, c->at, INFINITY);
        es_st(a, (long long)(c->ta ? 1 : c->m), c->at, INFINITY);
        es_st(b, 0, c->at, 1.0f);
        es_st(b, (long long)(c->tb ? c->n : 1), c->at, -1.0f);
        es_st(b, (long long)(c->tb ? 1 : c->k), c->at, 0.0f);
        break;
    case 8:
        for (size_t i = 0; i < na; i++)
            es_st(a, (long long)i, c->at, fabsf(es_ld(a, (long long)i, c->at)) * 3e19f);
        for (size_t i = 0; i < nb; i++)
            es_st(b, (long long)i, c->at, fabsf(es_ld(b, (long long)i, c->at)) * 3e19f);
        break;
    case 9:
        for (size_t i = 0; i < na; i++)
            es_st(a, (long long)i, c->at, es_ld(a, (long long)i, c->at) * 1e-20f);
        for (size_t i = 0; i < nb; i++)
            es_st(b, (long long)i, c->at, es_ld(b, (long long)i, c->at) * 3e-19f);
        break;
    default:
        break;
    }
}

/* The GEMM through the case's cuBLAS call. */
static void gemm_call(cublasHandle_t h, const gcase_t *c, CUdeviceptr dA, int lda, long long sA,
                      CUdeviceptr dB, int ldb, long long sB, CUdeviceptr dC, int ldc,
                      long long sC)
{
    cublasOperation_t ta = c->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = c->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUdeviceptr ds = 0;
    switch (c->api) {
    case 1:
        CK(cublasSgemm(h, ta, tb, c->m, c->n, c->k, &c->alpha, (float *)dA, lda, (float *)dB,
                       ldb, &c->beta, (float *)dC, ldc));
        break;
    case 2:
        CK(cublasSgemmStridedBatched(h, ta, tb, c->m, c->n, c->k, &c->alpha, (float *)dA, lda,
                                     sA, (float *)dB, ldb, sB, &c->beta, (float *)dC, ldc, sC,
                                     c->batch));
        break;
    case 3:
        CK(cublasGemmEx(h, ta, tb, c->m, c->n, c->k, &c->alpha, (void *)dA, cuda_type(c->at),
                        lda, (void *)dB, cuda_type(c->at), ldb, &c->beta, (void *)dC,
                        cuda_type(c->ct), ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        break;
    case 4: {
        float sc[2] = { c->alpha, c->beta };
        ds = up(sc, sizeof(sc));
        CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
        CK(cublasSgemm(h, ta, tb, c->m, c->n, c->k, (float *)ds, (float *)dA, lda, (float *)dB,
                       ldb, (float *)ds + 1, (float *)dC, ldc));
        CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
        break;
    }
    default:
        CK(cublasGemmStridedBatchedEx(h, ta, tb, c->m, c->n, c->k, &c->alpha, (void *)dA,
                                      cuda_type(c->at), lda, sA, (void *)dB, cuda_type(c->at),
                                      ldb, sB, &c->beta, (void *)dC, cuda_type(c->ct), ldc, sC,
                                      c->batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        break;
    }
    CK(cuCtxSynchronize());
    if (ds)
        CK(cuMemFree(ds));
}

static void gemm_case(cublasHandle_t h, const gcase_t *c)
{
    int lda = (c->ta ? c->k : c->m) + c->pad, ldb = (c->tb ? c->n : c->k) + c->pad;
    int ldc = c->m + c->pad;
    long long sA = (long long)lda * (c->ta ? c->m : c->k) + c->pad;
    long long sB = (long long)ldb * (c->tb ? c->k : c->n) + c->pad;
    long long sC = (long long)ldc * c->n + c->pad;
    size_t na = (size_t)sA * c->batch, nb = (size_t)sB * c->batch, nc = (size_t)sC * c->batch;
    void *a = host_fill(na, c->at), *b = host_fill(nb, c->at), *cc = host_fill(nc, c->ct);
    if (c->special == 1)
        for (size_t i = 0; i < nc; i += 3)
            es_st(cc, (long long)i, c->ct, NAN);
    if (c->special == 2)
        for (size_t i = 0; i < na; i += 5)
            es_st(a, (long long)i, c->at, NAN);
    if (c->special == 3) {
        es_st(a, 3, c->at, INFINITY);
        es_st(b, 7, c->at, -INFINITY);
        es_st(a, 11, c->at, NAN);
    }
    int8_special(c, a, na, b, nb);
    void *ref = malloc(nc * esz(c->ct)), *got = malloc(nc * esz(c->ct));
    memcpy(ref, cc, nc * esz(c->ct));
    CUdeviceptr dA = up(a, na * esz(c->at)), dB = up(b, nb * esz(c->at));
    CUdeviceptr dC = up(cc, nc * esz(c->ct));
    gemm_call(h, c, dA, lda, sA, dB, ldb, sB, dC, ldc, sC);
    CK(cuMemcpyDtoH(got, dC, nc * esz(c->ct)));
    es_gemm_args_t g = { .A = a, .B = b, .C = ref, .D = ref, .sA = sA, .sB = sB, .sC = sC,
                         .sD = sC, .ta = c->ta, .tb = c->tb, .m = c->m, .n = c->n, .k = c->k,
                         .lda = lda, .ldb = ldb, .ldc = ldc, .ldd = ldc, .at = c->at,
                         .bt = c->at, .ct = c->ct, .dt = c->ct, .alpha = c->alpha,
                         .beta = c->beta };
    if (g_ref_int8) {
        CK(es_d2int8_ref_gemm(&g, c->batch));
    } else {
        for (int bi = 0; bi < c->batch; bi++)
            for (int j = 0; j < c->n; j++)
                for (int i = 0; i < c->m; i++)
                    es_gemm_elem(&g, i, j, bi);
    }
    report(c->name, got, ref, nc, c->ct);
    CK(cuMemFree(dA));
    CK(cuMemFree(dB));
    CK(cuMemFree(dC));
    free(a);
    free(b);
    free(cc);
    free(ref);
    free(got);
}

static const gcase_t g_int8_cases[] = {
    { "i3x5x131100_nt", 0, 1, 3, 5, 131100, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 0, 0 },
    { "i9x7x70001_bf16_tn", 1, 0, 9, 7, 70001, 1, 1, ES_DT_BF16, ES_DT_F32, 1.0f, 0.5f, 0, 0 },
    { "i100x90x17_tt", 1, 1, 100, 90, 17, 0, 1, ES_DT_F32, ES_DT_F32, -0.3f, 0.7f, 0, 0 },
    { "i65x129x47_f16c", 0, 0, 65, 129, 47, 2, 2, ES_DT_F16, ES_DT_F16, 1.0f, 0.25f, 0, 0 },
    { "i70x66x45_wide", 0, 0, 70, 66, 45, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 4, 0 },
    { "i70x66x45_wide_bf16", 0, 1, 70, 66, 45, 0, 1, ES_DT_BF16, ES_DT_F32, 1.0f, 0.0f, 4, 0 },
    { "i70x66x45_wide_f16", 1, 0, 70, 66, 45, 0, 1, ES_DT_F16, ES_DT_F32, 1.0f, 0.0f, 4, 0 },
    { "i40x30x200_huge", 0, 0, 40, 30, 200, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 5, 0 },
    { "i40x30x200_zeros", 0, 1, 40, 30, 200, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 6, 0 },
    { "i20x20x20_inf_pm", 0, 0, 20, 20, 20, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 7, 0 },
    { "i20x20x20_inf_pm_bf16", 1, 1, 20, 20, 20, 0, 1, ES_DT_BF16, ES_DT_BF16, 1.0f, 0.0f, 7, 0 },
    { "i33x35x64_overflow", 0, 0, 33, 35, 64, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 8, 0 },
    { "i33x35x64_subnormal", 0, 0, 33, 35, 64, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 9, 0 },
    { "i140x130x20_inf_nan", 0, 0, 140, 130, 20, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 3, 0 },
    { "i65x64x33_sgemm_tn", 1, 0, 65, 64, 33, 1, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 0, 1 },
    { "i31x17x96_sgemm_batched", 0, 1, 31, 17, 96, 0, 3, ES_DT_F32, ES_DT_F32, 2.0f, 1.0f, 0, 2 },
    { "i48x50x77_gemmex_bf16", 0, 0, 48, 50, 77, 0, 1, ES_DT_BF16, ES_DT_F32, 1.0f, 0.0f, 0, 3 },
    { "i48x50x77_gemmex_f32", 1, 1, 48, 50, 77, 3, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.5f, 0, 3 },
    { "i40x40x40_devptr", 0, 0, 40, 40, 40, 0, 1, ES_DT_F32, ES_DT_F32, 1.5f, 0.5f, 0, 4 },
    { "i40x40x40_alpha0_nana", 0, 0, 40, 40, 40, 0, 1, ES_DT_F32, ES_DT_F32, 0.0f, 0.5f, 2, 0 },
};

static int mode_int8(int dev)
{
    setup(dev);
    cublasHandle_t h;
    CK(cublasCreate(&h));
    for (size_t i = 0; i < sizeof(g_int8_cases) / sizeof(g_int8_cases[0]); i++)
        gemm_case(h, &g_int8_cases[i]);
    CK(cublasDestroy(h));
    printf("done\n");
    return 0;
}

static int mode_gemm(int dev)
{
    static const gcase_t cases[] = {
        { "g1x1x1", 0, 0, 1, 1, 1, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 0, 0 },
        { "g7x5x3_tt", 1, 1, 7, 5, 3, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.5f, 0, 0 },
        { "g33x65x17_nt", 0, 1, 33, 65, 17, 3, 1, ES_DT_F32, ES_DT_F32, 0.75f, 0.25f, 0, 0 },
        { "g32x32x16_exact_s", 0, 0, 32, 32, 16, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 0, 0 },
        { "g128x128x8_exact_l", 0, 0, 128, 128, 8, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 0, 0 },
        { "g129x131x9_l", 1, 0, 129, 131, 9, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 1.0f, 0, 0 },
        { "g257x130x300_l_tn", 1, 0, 257, 130, 300, 1, 1, ES_DT_F32, ES_DT_F32, -1.5f, 0.0f, 0, 0 },
        { "g200x150x77_l_tt", 1, 1, 200, 150, 77, 2, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 0, 0 },
        { "g127x300x41_s_nn", 0, 0, 127, 300, 41, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 0, 0 },
        { "g45x19x1000_batch5", 0, 1, 45, 19, 1000, 1, 5, ES_DT_F32, ES_DT_F32, 1.0f, 0.5f, 0, 0 },
        { "g130x140x50_batch3_l", 0, 0, 130, 140, 50, 0, 3, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 0, 0 },
        { "g61x67x129_f16", 0, 0, 61, 67, 129, 0, 1, ES_DT_F16, ES_DT_F16, 1.0f, 0.5f, 0, 0 },
        { "g140x135x70_f16_f32c_l", 1, 1, 140, 135, 70, 0, 2, ES_DT_F16, ES_DT_F32, 1.0f, 0.0f, 0, 0 },
        { "g33x29x257_bf16", 0, 1, 33, 29, 257, 2, 2, ES_DT_BF16, ES_DT_BF16, 1.0f, 0.0f, 0, 0 },
        { "g150x160x33_bf16_l", 1, 0, 150, 160, 33, 0, 1, ES_DT_BF16, ES_DT_F32, 1.0f, 1.0f, 0, 0 },
        { "g40x40x40_beta0_nanc", 0, 0, 40, 40, 40, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 1, 0 },
        { "g40x40x40_alpha0_nana", 0, 0, 40, 40, 40, 0, 1, ES_DT_F32, ES_DT_F32, 0.0f, 0.5f, 2, 0 },
        { "g140x130x20_inf_nan_l", 0, 0, 140, 130, 20, 0, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.0f, 3, 0 },
        { "g5x300x0_k0", 0, 0, 5, 300, 0, 1, 1, ES_DT_F32, ES_DT_F32, 1.0f, 0.5f, 0, 0 },
    };
    setup(dev);
    cublasHandle_t h;
    CK(cublasCreate(&h));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        gemm_case(h, &cases[i]);
    CK(cublasDestroy(h));
    printf("done\n");
    return 0;
}

/* ---- convolutions ----------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int n, c, h, w, k, r, s, pad_h, pad_w, u, v, dil_h, dil_w, groups;
    int nhwc, flip, dt;
    float beta;
    int inf_w; /* an Inf in the filter, reached only through padding taps */
} ccase_t;

/* Strides of an n x c x h x w tensor, NCHW or NHWC, with pad elements at
 * the end of each row (a strided view). */
static void strides(int n, int c, int h, int w, int nhwc, int rowpad, int s[4])
{
    (void)n;
    if (nhwc) {
        s[1] = 1, s[3] = c, s[2] = c * w + rowpad, s[0] = s[2] * h;
    } else {
        s[3] = 1, s[2] = w + rowpad, s[1] = s[2] * h, s[0] = s[1] * c;
    }
}

static void conv_case(cudnnHandle_t hd, const ccase_t *c, CUdeviceptr ws, size_t wsz)
{
    int cpg = c->c / c->groups;
    int p = (c->h + 2 * c->pad_h - c->dil_h * (c->r - 1) - 1) / c->u + 1;
    int q = (c->w + 2 * c->pad_w - c->dil_w * (c->s - 1) - 1) / c->v + 1;
    int xs[4], ys[4];
    strides(c->n, c->c, c->h, c->w, c->nhwc, c->nhwc ? 0 : 1, xs);
    strides(c->n, c->k, p, q, c->nhwc, c->nhwc ? 2 : 0, ys);
    size_t nx = (size_t)xs[0] * c->n, ny = (size_t)ys[0] * c->n;
    size_t nw = (size_t)c->k * cpg * c->r * c->s;
    cudnnDataType_t t = c->dt == ES_DT_F32 ? CUDNN_DATA_FLOAT
                        : c->dt == ES_DT_F16 ? CUDNN_DATA_HALF
                                              : CUDNN_DATA_BFLOAT16;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    CK(cudnnCreateTensorDescriptor(&xd));
    CK(cudnnCreateTensorDescriptor(&yd));
    CK(cudnnCreateFilterDescriptor(&wd));
    CK(cudnnCreateConvolutionDescriptor(&cd));
    CK(cudnnSetTensor4dDescriptorEx(xd, t, c->n, c->c, c->h, c->w, xs[0], xs[1], xs[2], xs[3]));
    CK(cudnnSetTensor4dDescriptorEx(yd, t, c->n, c->k, p, q, ys[0], ys[1], ys[2], ys[3]));
    CK(cudnnSetFilter4dDescriptor(wd, t, c->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, c->k,
                                  cpg, c->r, c->s));
    CK(cudnnSetConvolution2dDescriptor(cd, c->pad_h, c->pad_w, c->u, c->v, c->dil_h, c->dil_w,
                                       c->flip ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION,
                                       CUDNN_DATA_FLOAT));
    CK(cudnnSetConvolutionGroupCount(cd, c->groups));
    void *hx = host_fill(nx, c->dt), *hw = host_fill(nw, c->dt), *hy = host_fill(ny, c->dt);
    if (c->inf_w) /* the filter's first tap: reached by the top-left output only through padding */
        es_st(hw, 0, c->dt, INFINITY);
    es_conv_args_t a = {
        .xs_n = xs[0], .xs_c = xs[1], .xs_h = xs[2], .xs_w = xs[3],
        .ys_n = ys[0], .ys_k = ys[1], .ys_p = ys[2], .ys_q = ys[3],
        .n = c->n, .c = c->c, .h = c->h, .w = c->w, .k = c->k, .p = p, .q = q, .r = c->r,
        .s = c->s, .pad_h = c->pad_h, .pad_w = c->pad_w, .u = c->u, .v = c->v,
        .dil_h = c->dil_h, .dil_w = c->dil_w, .flip = c->flip, .groups = c->groups,
        .alpha = 1.0f, .beta = c->beta, .t_in0 = c->dt, .t_in1 = c->dt, .t_out = c->dt,
    };
    if (c->nhwc) /* K, R, S, C/g packed */
        a.ws_c = 1, a.ws_s = cpg, a.ws_r = (long long)c->s * cpg,
        a.ws_k = (long long)c->r * c->s * cpg;
    else
        a.ws_s = 1, a.ws_r = c->s, a.ws_c = (long long)c->r * c->s,
        a.ws_k = (long long)cpg * c->r * c->s;
    static const char *const dn[3] = { "fwd", "bwd_data", "bwd_filter" };
    const float one = 1.0f;
    for (int dir = 0; dir < 3; dir++) {
        size_t n = dir == 0 ? ny : dir == 1 ? nx : nw;
        void *out0 = dir == 0 ? hy : dir == 1 ? hx : hw; /* the output's initial contents */
        void *ref = malloc(n * esz(c->dt) + 8), *got = malloc(n * esz(c->dt) + 8);
        memcpy(ref, out0, n * esz(c->dt));
        CUdeviceptr dx = up(hx, nx * esz(c->dt)), dw = up(hw, nw * esz(c->dt));
        CUdeviceptr dy = up(hy, ny * esz(c->dt));
        cudnnStatus_t st;
        if (dir == 0)
            st = cudnnConvolutionForward(hd, &one, xd, (void *)dx, wd, (void *)dw, cd,
                                         CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, (void *)ws,
                                         wsz, &c->beta, yd, (void *)dy);
        else if (dir == 1)
            st = cudnnConvolutionBackwardData(hd, &one, wd, (void *)dw, yd, (void *)dy, cd,
                                              CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, (void *)ws, wsz,
                                              &c->beta, xd, (void *)dx);
        else
            st = cudnnConvolutionBackwardFilter(hd, &one, xd, (void *)dx, yd, (void *)dy, cd,
                                                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, (void *)ws,
                                                wsz, &c->beta, wd, (void *)dw);
        CK(cuCtxSynchronize());
        CK(cuMemcpyDtoH(got, dir == 0 ? dy : dir == 1 ? dx : dw, n * esz(c->dt)));
        a.out = ref;
        long long total = dir == 0   ? (long long)c->n * c->k * p * q
                          : dir == 1 ? (long long)c->n * c->c * c->h * c->w
                                     : (long long)nw;
        (void)total;
        a.in0 = dir == 1 ? hy : hx;
        a.in1 = dir == 2 ? hy : hw;
        CK(es_d2int8_ref_conv_path(dir, &a, g_ref_int8));
        char name[128];
        snprintf(name, sizeof(name), "%s_%s", c->name, dn[dir]);
        if (st != CUDNN_STATUS_SUCCESS) /* the vendor's refusal (no shim) */
            printf("case %s status %d\n", name, (int)st);
        else
            report(name, got, ref, n, c->dt);
        CK(cuMemFree(dx));
        CK(cuMemFree(dw));
        CK(cuMemFree(dy));
        free(ref);
        free(got);
    }
    free(hx);
    free(hw);
    free(hy);
    CK(cudnnDestroyTensorDescriptor(xd));
    CK(cudnnDestroyTensorDescriptor(yd));
    CK(cudnnDestroyFilterDescriptor(wd));
    CK(cudnnDestroyConvolutionDescriptor(cd));
}

static int mode_conv(int dev)
{
    static const ccase_t cases[] = {
        /* name n c h w k r s ph pw u v dh dw g nhwc flip dt beta inf */
        { "c_basic", 2, 3, 9, 11, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, ES_DT_F32, 0.0f, 0 },
        { "c_odd_stride", 3, 5, 13, 7, 7, 3, 2, 2, 0, 2, 3, 1, 1, 1, 0, 0, ES_DT_F32, 0.5f, 0 },
        { "c_dilated", 1, 4, 17, 15, 6, 3, 3, 2, 3, 1, 2, 2, 3, 1, 0, 0, ES_DT_F32, 0.0f, 0 },
        { "c_groups", 2, 6, 10, 10, 9, 3, 3, 1, 1, 1, 1, 1, 1, 3, 0, 0, ES_DT_F32, 0.0f, 0 },
        { "c_depthwise", 2, 8, 12, 9, 8, 3, 3, 1, 1, 2, 2, 1, 1, 8, 0, 0, ES_DT_F32, 1.0f, 0 },
        { "c_nhwc_flip", 2, 5, 8, 9, 4, 2, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, ES_DT_F32, 0.0f, 0 },
        { "c_many_ch", 1, 40, 6, 5, 70, 1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, ES_DT_F32, 0.0f, 0 },
        { "c_big_tile", 4, 16, 20, 20, 40, 3, 3, 1, 1, 1, 1, 1, 1, 2, 0, 0, ES_DT_F32, 0.0f, 0 },
        { "c_f16", 2, 4, 11, 10, 6, 3, 3, 1, 1, 2, 1, 1, 2, 2, 0, 0, ES_DT_F16, 0.5f, 0 },
        { "c_bf16_nhwc", 2, 6, 9, 9, 6, 3, 3, 1, 1, 1, 1, 1, 1, 3, 1, 0, ES_DT_BF16, 0.0f, 0 },
        { "c_inf_under_pad", 1, 2, 6, 6, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0, ES_DT_F32, 0.0f, 1 },
    };
    setup(dev);
    cudnnHandle_t h;
    CK(cudnnCreate(&h));
    CUdeviceptr ws;
    size_t wsz = 16 << 20;
    CK(cuMemAlloc(&ws, wsz));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        conv_case(h, &cases[i], ws, wsz);
    CK(cuMemFree(ws));
    CK(cudnnDestroy(h));
    printf("done\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3) {
        fprintf(stderr, "usage: tile_client gemm|int8|conv DEV [int8|fma]\n");
        return 2;
    }
    const char *ref = argc > 3 ? argv[3] : getenv("EASYSCALE_D2_GEMM");
    g_ref_int8 = !ref || strcmp(ref, "fma") != 0;
    if (!strcmp(argv[1], "gemm"))
        return mode_gemm(atoi(argv[2]));
    if (!strcmp(argv[1], "int8"))
        return mode_int8(atoi(argv[2]));
    if (!strcmp(argv[1], "conv"))
        return mode_conv(atoi(argv[2]));
    fprintf(stderr, "tile_client: unknown mode %s\n", argv[1]);
    return 2;
}
