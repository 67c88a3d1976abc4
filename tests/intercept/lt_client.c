/* Client run by tests/intercept/lt_test.c under libeasyscale.so (and without
 * it): cuBLASLt matmuls issued the way PyTorch's gemm_and_bias and
 * bgemm_internal_cublaslt issue them (a 1 MiB workspace, the
 * MIN_ALIGNMENT_* preferences taken from each pointer's address, one
 * heuristic result, C = D), printing one fact per line.
 *
 *   lt_client pt DEV     every epilogue PyTorch uses (bias, ReLU + bias,
 *                        GELU + bias, bias gradient, none) on fp32, fp16
 *                        and bf16, with strided batches: "case NAME HASH",
 *                        and d2's result computed on the host by the
 *                        reference of the path EASYSCALE_D2_GEMM names
 *                        (the int8 definition, the default, or the fma
 *                        order): "ref NAME HASH"
 *   lt_client align DEV  the same GEMM on tensors 256-byte aligned and 32
 *                        bytes into their allocation, with a heuristic
 *                        query and with a NULL algorithm:
 *                        "align0 H", "align32 H", "null0 H", "null32 H"
 */
#include <cublasLt.h>
#include <cuda.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/d2int8.h"
#include "kernels/portable_kernels.h"

#include "../clients/ck.h"

#define WS (1u << 20)

static uint64_t hash(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static unsigned g_seed = 1;

static float rnd(void)
{
    g_seed = g_seed * 1103515245u + 12345u;
    return (float)((int)(g_seed >> 9) % 2001 - 1000) / 997.0f;
}

static size_t esz(cudaDataType t)
{
    return t == CUDA_R_32F ? 4 : 2;
}

static int es_dt(cudaDataType t)
{
    return t == CUDA_R_32F ? ES_DT_F32 : t == CUDA_R_16F ? ES_DT_F16 : ES_DT_BF16;
}

static void *host_fill(size_t n, cudaDataType t)
{
    void *p = malloc(n * esz(t));
    for (size_t i = 0; i < n; i++)
        es_st(p, (long long)i, es_dt(t), rnd());
    return p;
}

static CUdeviceptr up(const void *h, size_t bytes, size_t off)
{
    CUdeviceptr p;
    CK(cuMemAlloc(&p, bytes + off + 4));
    CK(cuMemcpyHtoD(p + off, h, bytes));
    return p;
}

static uint32_t pt_align(CUdeviceptr p)
{
    uint32_t a = 256;
    while (a > 1 && p % a)
        a /= 2;
    return a;
}

typedef struct {
    const char *name;
    cudaDataType ab, cd;
    cublasLtEpilogue_t epi;
    int ta, tb, m, n, k, batch;
} lt_case_t;

/* Largest error of D (and of the bias gradient) against a double
 * reference of the matmul's meaning, relative to the reference's largest
 * magnitude. */
static double g_err;

static double exact_err(const lt_case_t *c, const void *ha, const void *hb, const void *hbias,
                        const void *hd, const void *hg)
{
    int lda = c->ta ? c->k : c->m, ldb = c->tb ? c->n : c->k, ldc = c->m;
    size_t na = (size_t)lda * (c->ta ? c->m : c->k), nb = (size_t)ldb * (c->tb ? c->k : c->n);
    size_t nc = (size_t)ldc * c->n;
    int dt = es_dt(c->cd), at = es_dt(c->ab);
    int nbias = c->epi == CUBLASLT_EPILOGUE_BGRADB ? c->n : c->m;
    double err = 0, mag = 1e-30, gerr = 0, gmag = 1e-30;
    for (int b = 0; b < c->batch; b++) {
        for (int j = 0; j < c->n; j++)
            for (int i = 0; i < c->m; i++) {
                double s = 0;
                for (int p = 0; p < c->k; p++)
                    s += (double)es_ld(ha, (long long)(b * na + (c->ta ? p + (size_t)i * lda : i + (size_t)p * lda)), at) *
                         es_ld(hb, (long long)(b * nb + (c->tb ? j + (size_t)p * ldb : p + (size_t)j * ldb)), at);
                if (c->epi == CUBLASLT_EPILOGUE_BIAS || c->epi == CUBLASLT_EPILOGUE_RELU_BIAS ||
                    c->epi == CUBLASLT_EPILOGUE_GELU_BIAS)
                    s += es_ld(hbias, (long long)b * nbias + i, dt);
                if (c->epi == CUBLASLT_EPILOGUE_RELU_BIAS)
                    s = s > 0 ? s : 0;
                if (c->epi == CUBLASLT_EPILOGUE_GELU_BIAS)
                    s = 0.5 * s * (1 + tanh(0.7978845608 * (s + 0.044715 * s * s * s)));
                double g = es_ld(hd, (long long)(b * nc + i + (size_t)j * ldc), dt);
                err = fmax(err, fabs(g - s));
                mag = fmax(mag, fabs(s));
            }
        if (c->epi == CUBLASLT_EPILOGUE_BGRADA || c->epi == CUBLASLT_EPILOGUE_BGRADB)
            for (int x = 0; x < nbias; x++) {
                double s = 0;
                for (int p = 0; p < c->k; p++)
                    s += c->epi == CUBLASLT_EPILOGUE_BGRADA
                             ? es_ld(ha, (long long)(b * na + (c->ta ? p + (size_t)x * lda : x + (size_t)p * lda)), at)
                             : es_ld(hb, (long long)(b * nb + (c->tb ? x + (size_t)p * ldb : p + (size_t)x * ldb)), at);
                gerr = fmax(gerr, fabs(es_ld(hg, (long long)b * nbias + x, dt) - s));
                gmag = fmax(gmag, fabs(s));
            }
    }
    return fmax(err / mag, gerr / gmag);
}

/* One matmul the PyTorch way; returns D's hash (and the bias gradient's
 * hash in *ghash), and the host reference's in *ref, *gref; its error
 * against the exact result in g_err. */
static uint64_t run_case(cublasLtHandle_t h, const lt_case_t *c, size_t off, int null_algo,
                         uint64_t *ghash, uint64_t *ref, uint64_t *gref)
{
    int lda = c->ta ? c->k : c->m, ldb = c->tb ? c->n : c->k, ldc = c->m;
    size_t na = (size_t)lda * (c->ta ? c->m : c->k), nb = (size_t)ldb * (c->tb ? c->k : c->n);
    size_t nc = (size_t)ldc * c->n;
    int bgrad = c->epi == CUBLASLT_EPILOGUE_BGRADA || c->epi == CUBLASLT_EPILOGUE_BGRADB;
    int nbias = c->epi == CUBLASLT_EPILOGUE_BGRADB ? c->n : c->m;
    g_seed = 7;
    void *ha = host_fill(na * c->batch, c->ab), *hb = host_fill(nb * c->batch, c->ab);
    void *hbias = host_fill((size_t)nbias * c->batch, c->cd);
    void *hd = calloc(nc * c->batch, esz(c->cd)), *hg = calloc((size_t)nbias * c->batch, esz(c->cd));
    CUdeviceptr da = up(ha, na * c->batch * esz(c->ab), off);
    CUdeviceptr db = up(hb, nb * c->batch * esz(c->ab), off);
    CUdeviceptr dd = up(hd, nc * c->batch * esz(c->cd), off);
    CUdeviceptr dbias = up(hbias, (size_t)nbias * c->batch * esz(c->cd), off), ws;
    CK(cuMemAlloc(&ws, WS));
    cublasLtMatmulDesc_t desc;
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t oa = c->ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = c->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof(oa)));
    CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof(ob)));
    if (c->epi != CUBLASLT_EPILOGUE_DEFAULT) {
        void *bp = (void *)(dbias + off);
        int64_t bs = nbias;
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c->epi,
                                          sizeof(c->epi)));
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)));
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bs,
                                          sizeof(bs)));
    }
    cublasLtMatrixLayout_t la, lb, lc;
    CK(cublasLtMatrixLayoutCreate(&la, c->ab, c->ta ? c->k : c->m, c->ta ? c->m : c->k, lda));
    CK(cublasLtMatrixLayoutCreate(&lb, c->ab, c->tb ? c->n : c->k, c->tb ? c->k : c->n, ldb));
    CK(cublasLtMatrixLayoutCreate(&lc, c->cd, c->m, c->n, ldc));
    if (c->batch > 1) {
        int64_t sa = (int64_t)na, sb = (int64_t)nb, sc = (int64_t)nc;
        CK(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c->batch, 4));
        CK(cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c->batch, 4));
        CK(cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &c->batch, 4));
        CK(cublasLtMatrixLayoutSetAttribute(la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sa, 8));
        CK(cublasLtMatrixLayoutSetAttribute(lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sb, 8));
        CK(cublasLtMatrixLayoutSetAttribute(lc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &sc, 8));
    }
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t wsz = WS;
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, 8));
    uint32_t al[4] = { pt_align(da + off), pt_align(db + off), pt_align(dd + off),
                       pt_align(dbias + off) };
    for (int i = 0; i < 4; i++)
        CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i,
                                                &al[i], 4));
    cublasLtMatmulHeuristicResult_t hr;
    int got = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &hr, &got));
    if (got != 1) {
        printf("FAIL no heuristic result for %s\n", c->name);
        exit(1);
    }
    float one = 1.0f, zero = 0.0f;
    CK(cublasLtMatmul(h, desc, &one, (void *)(da + off), la, (void *)(db + off), lb, &zero,
                      (void *)(dd + off), lc, (void *)(dd + off), lc, null_algo ? NULL : &hr.algo,
                      (void *)ws, WS, NULL));
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH(hd, dd + off, nc * c->batch * esz(c->cd)));
    CK(cuMemcpyDtoH(hg, dbias + off, (size_t)nbias * c->batch * esz(c->cd)));
    uint64_t r = hash(hd, nc * c->batch * esz(c->cd));
    *ghash = hash(hg, (size_t)nbias * c->batch * esz(c->cd));
    g_err = exact_err(c, ha, hb, hbias, hd, hg);
    if (ref) {
        /* d2's result on the host */
        memset(hd, 0, nc * c->batch * esz(c->cd));
        es_gemm_args_t g = { .A = ha, .B = hb, .C = hd, .D = hd, .sA = (long long)na,
                             .sB = (long long)nb, .sC = (long long)nc, .sD = (long long)nc,
                             .ta = c->ta, .tb = c->tb, .m = c->m, .n = c->n, .k = c->k,
                             .lda = lda, .ldb = ldb, .ldc = ldc, .ldd = ldc, .at = es_dt(c->ab),
                             .bt = es_dt(c->ab), .ct = es_dt(c->cd), .dt = es_dt(c->cd),
                             .alpha = 1.0f, .beta = 0.0f };
        if (c->epi == CUBLASLT_EPILOGUE_BIAS || c->epi == CUBLASLT_EPILOGUE_RELU_BIAS ||
            c->epi == CUBLASLT_EPILOGUE_GELU_BIAS)
            g.ep[g.nep++] = (es_ep_t){ .op = ES_EP_BIAS, .dt = es_dt(c->cd), .b = hbias,
                                       .bs_n = nbias };
        if (c->epi == CUBLASLT_EPILOGUE_RELU_BIAS)
            g.ep[g.nep++].op = ES_EP_RELU;
        if (c->epi == CUBLASLT_EPILOGUE_GELU_BIAS)
            g.ep[g.nep++].op = ES_EP_GELU;
        /* the reference of the path EASYSCALE_D2_GEMM names (int8 when unset) */
        const char *path = getenv("EASYSCALE_D2_GEMM");
        if (!path || strcmp(path, "fma") != 0) {
            CK(es_d2int8_ref_gemm(&g, c->batch));
        } else {
            for (int b = 0; b < c->batch; b++)
                for (int j = 0; j < c->n; j++)
                    for (int i = 0; i < c->m; i++)
                        es_gemm_elem(&g, i, j, b);
        }
        *ref = hash(hd, nc * c->batch * esz(c->cd));
        if (bgrad) {
            es_bgrad_args_t bg = { .M = c->epi == CUBLASLT_EPILOGUE_BGRADA ? ha : hb, .g = hg,
                                   .sM = c->epi == CUBLASLT_EPILOGUE_BGRADA ? (long long)na
                                                                            : (long long)nb,
                                   .sg = nbias, .len = nbias, .k = c->k,
                                   .ld = c->epi == CUBLASLT_EPILOGUE_BGRADA ? lda : ldb,
                                   .trans = c->epi == CUBLASLT_EPILOGUE_BGRADA ? c->ta : c->tb,
                                   .rows = c->epi == CUBLASLT_EPILOGUE_BGRADA,
                                   .mt = es_dt(c->ab), .gt = es_dt(c->cd) };
            for (int b = 0; b < c->batch; b++)
                for (int x = 0; x < nbias; x++)
                    es_bgrad_elem(&bg, x, b);
        }
        *gref = hash(hg, (size_t)nbias * c->batch * esz(c->cd));
    }
    CK(cublasLtMatmulPreferenceDestroy(pref));
    CK(cublasLtMatrixLayoutDestroy(la));
    CK(cublasLtMatrixLayoutDestroy(lb));
    CK(cublasLtMatrixLayoutDestroy(lc));
    CK(cublasLtMatmulDescDestroy(desc));
    CK(cuMemFree(da));
    CK(cuMemFree(db));
    CK(cuMemFree(dd));
    CK(cuMemFree(dbias));
    CK(cuMemFree(ws));
    free(ha);
    free(hb);
    free(hbias);
    free(hd);
    free(hg);
    return r;
}

static const lt_case_t g_cases[] = {
    /* Linear: y = x W^T + b (PyTorch: transpose_mat1, result m x n) */
    { "bias_f32", CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_BIAS, 1, 0, 48, 40, 2048, 1 },
    { "relu_bias_f32", CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_RELU_BIAS, 1, 0, 48, 40, 2048, 1 },
    { "gelu_bias_f32", CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_GELU_BIAS, 1, 0, 48, 40, 2048, 1 },
    { "bias_f16", CUDA_R_16F, CUDA_R_16F, CUBLASLT_EPILOGUE_BIAS, 1, 0, 48, 40, 2048, 1 },
    { "gelu_bias_bf16", CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_GELU_BIAS, 1, 0, 48, 40, 2048, 1 },
    { "mixed_f16_f32", CUDA_R_16F, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, 0, 1, 40, 36, 3000, 1 },
    { "bgradb_f32", CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_BGRADB, 0, 1, 33, 29, 2500, 1 },
    { "bgrada_bf16", CUDA_R_16BF, CUDA_R_16BF, CUBLASLT_EPILOGUE_BGRADA, 1, 0, 30, 31, 2200, 1 },
    { "bmm_f32", CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, 0, 0, 24, 20, 4096, 3 },
};

static int mode_pt(void)
{
    cublasLtHandle_t h;
    CK(cublasLtCreate(&h));
    for (size_t i = 0; i < sizeof(g_cases) / sizeof(g_cases[0]); i++) {
        uint64_t g, ref, gref;
        uint64_t r = run_case(h, &g_cases[i], 0, 0, &g, &ref, &gref);
        printf("case %s %016llx %016llx\n", g_cases[i].name, (unsigned long long)r,
               (unsigned long long)g);
        printf("ref %s %016llx %016llx\n", g_cases[i].name, (unsigned long long)ref,
               (unsigned long long)gref);
        printf("err %s %.3e\n", g_cases[i].name, g_err);
    }
    CK(cublasLtDestroy(h));
    return 0;
}

static int mode_align(void)
{
    cublasLtHandle_t h;
    CK(cublasLtCreate(&h));
    const lt_case_t c = { "align", CUDA_R_32F, CUDA_R_32F, CUBLASLT_EPILOGUE_DEFAULT, 0, 0,
                          64, 48, 4096, 1 };
    uint64_t g;
    printf("align0 %016llx\n", (unsigned long long)run_case(h, &c, 0, 0, &g, NULL, NULL));
    printf("align32 %016llx\n", (unsigned long long)run_case(h, &c, 32, 0, &g, NULL, NULL));
    printf("null0 %016llx\n", (unsigned long long)run_case(h, &c, 0, 1, &g, NULL, NULL));
    printf("null32 %016llx\n", (unsigned long long)run_case(h, &c, 32, 1, &g, NULL, NULL));
    CK(cublasLtDestroy(h));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: lt_client pt|align DEV\n");
        return 2;
    }
    CUdevice d;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&d, atoi(argv[2])));
    CK(cuDevicePrimaryCtxRetain(&ctx, d));
    CK(cuCtxSetCurrent(ctx));
    if (!strcmp(argv[1], "pt"))
        return mode_pt();
    if (!strcmp(argv[1], "align"))
        return mode_align();
    fprintf(stderr, "lt_client: unknown mode %s\n", argv[1]);
    return 2;
}
