/* Client run by tests/move/vendor_test.c under libeasyscale.so: a cuBLAS
 * handle (its own stream, workspace, TF32 math, device pointer mode,
 * atomics allowed), a cuBLASLt handle and a cuDNN handle (the same
 * stream), a cuDNN backend convolution plan built once before the steps
 * (operation graph given the handle, heuristics, the first engine config,
 * plan without a handle, variant pack: what PyTorch caches and runs every
 * step; the heuristics, tensor, convolution and operation descriptors
 * destroyed once the plan is made, as the frontend's temporaries are), and
 * each step the plan executed with a cuDNN handle made in that step and
 * with the first one, an SGEMM, a cuBLASLt matmul and a convolution on
 * inputs made from the step number; the EST is moved through the control
 * hook (easyscale_move) before the steps named on the command line.
 *
 *   lib_client STEPS [STEP:SLOT]... [lost]
 *
 * lost: a second plan is made of a graph given a second cuDNN handle, which
 * is destroyed at once; each step executes it too and prints "lost plan
 * STATUS" (a move cannot re-make that graph: its handle is gone).
 *
 * Prints "move to SLOT: RC", "step I gpu G", "plan engine E cfg engine F
 * ws W" (the engine and workspace size read back each step through the
 * plan, and the engine through the engine config the plan was made of),
 * "settings kept" when every setting read back with the Get functions
 * before every step is the one set, and "checksum C" (the outputs of every
 * step, hashed in order). A failing call prints "FAIL call = status
 * (line)" and exits 1. Uses NVIDIA's headers only. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../clients/ck.h"
#define EXPECT(c)                                                                             \
    do {                                                                                      \
        if (!(c)) {                                                                           \
            printf("setting lost: %s (line %d)\n", #c, __LINE__);                            \
            kept = 0;                                                                         \
        }                                                                                     \
    } while (0)

/* GEMM: C[M x N] = A[M x K] B[K x N]; conv: 1 x CI x H x W, CO x CI x 3 x 3, pad 1 */
#define M 48
#define N 40
#define K 64
#define CI 3
#define CO 4
#define H 12
#define W 12
#define WS_BYTES (4u << 20)

static uint64_t g_chain = 1469598103934665603ULL;
static int kept = 1;

static void hash_in(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        g_chain = (g_chain ^ b[i]) * 1099511628211ULL;
}

static void fill(float *v, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (float)((int)(seed >> 9) % 2001 - 1000) / 1013.0f;
    }
}

typedef int (*move_fn)(int);

static cudnnBackendDescriptor_t bk_make(cudnnBackendDescriptorType_t t)
{
    cudnnBackendDescriptor_t d = NULL;
    CK(cudnnBackendCreateDescriptor(t, &d));
    return d;
}

static void bk_set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t n,
                   cudnnBackendAttributeType_t t, int64_t count, const void *v)
{
    CK(cudnnBackendSetAttribute(d, n, t, count, v));
}

static cudnnBackendDescriptor_t bk_tensor(int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w)
{
    cudnnBackendDescriptor_t d = bk_make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    cudnnDataType_t dt = CUDNN_DATA_FLOAT;
    int64_t dims[4] = { n, c, h, w }, str[4] = { c * h * w, h * w, w, 1 }, al = 16;
    bk_set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    bk_set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    bk_set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str);
    bk_set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    bk_set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al);
    CK(cudnnBackendFinalize(d));
    return d;
}

/* The engine (global index) of an engine config, read through a
 * descriptor made for the purpose (cuDNN fills it). */
static int64_t bk_cfg_engine(cudnnBackendDescriptor_t cfg)
{
    cudnnBackendDescriptor_t eng = bk_make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t n = 0, idx = -1;
    CK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                &n, &eng));
    CK(cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &idx));
    CK(cudnnBackendDestroyDescriptor(eng));
    return idx;
}

/* The plan's engine and workspace size, read back through the plan. */
static void bk_plan_info(cudnnBackendDescriptor_t plan, int64_t *engine, int64_t *ws)
{
    cudnnBackendDescriptor_t cfg = bk_make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t n = 0;
    CK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &cfg));
    *engine = bk_cfg_engine(cfg);
    CK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                &n, ws));
    CK(cudnnBackendDestroyDescriptor(cfg));
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int steps = argc > 1 ? atoi(argv[1]) : 4;
    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr a, b, c, d, ws, sc, x, w, y;
    CK(cuMemAlloc(&a, M * K * 4));
    CK(cuMemAlloc(&b, K * N * 4));
    CK(cuMemAlloc(&c, M * N * 4));
    CK(cuMemAlloc(&d, M * N * 4));
    CK(cuMemAlloc(&ws, WS_BYTES));
    CK(cuMemAlloc(&sc, 8));
    CK(cuMemAlloc(&x, CI * H * W * 4));
    CK(cuMemAlloc(&w, CO * CI * 9 * 4));
    CK(cuMemAlloc(&y, CO * H * W * 4));
    CUdeviceptr yb, bws;
    CK(cuMemAlloc(&yb, CO * H * W * 4));
    CK(cuMemAlloc(&bws, WS_BYTES));
    const float scal[2] = { 0.75f, 0.0f }; /* alpha, beta in device memory */
    CK(cuMemcpyHtoD(sc, scal, sizeof(scal)));

    /* cuBLAS, every setting */
    cublasHandle_t bh;
    CK(cublasCreate(&bh));
    CK(cublasSetStream(bh, (cudaStream_t)s));
    CK(cublasSetWorkspace(bh, (void *)ws, WS_BYTES));
    CK(cublasSetMathMode(bh, CUBLAS_TF32_TENSOR_OP_MATH));
    CK(cublasSetPointerMode(bh, CUBLAS_POINTER_MODE_DEVICE));
    CK(cublasSetAtomicsMode(bh, CUBLAS_ATOMICS_ALLOWED));

    /* cuBLASLt */
    cublasLtHandle_t lh;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
    CK(cublasLtCreate(&lh));
    CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, M, K, M));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, K, N, K));
    CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, M, N, M));
    CK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t lt_ws = 0;
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &lt_ws, sizeof(lt_ws)));

    /* cuDNN */
    cudnnHandle_t dh;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    CK(cudnnCreate(&dh));
    CK(cudnnSetStream(dh, (cudaStream_t)s));
    CK(cudnnCreateTensorDescriptor(&xd));
    CK(cudnnCreateTensorDescriptor(&yd));
    CK(cudnnCreateFilterDescriptor(&wd));
    CK(cudnnCreateConvolutionDescriptor(&cd));
    CK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, CI, H, W));
    CK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, CO, H, W));
    CK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, CO, CI, 3, 3));
    CK(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                       CUDNN_DATA_FLOAT));

    /* cuDNN backend: the plan, built once */
    cudnnBackendDescriptor_t tx = bk_tensor(1, 1, CI, H, W), tw = bk_tensor(2, CO, CI, 3, 3),
                             ty = bk_tensor(3, 1, CO, H, W);
    cudnnBackendDescriptor_t cv = bk_make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    {
        cudnnDataType_t ct = CUDNN_DATA_FLOAT;
        cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
        int64_t sd = 2, pad[2] = { 1, 1 }, one2[2] = { 1, 1 };
        bk_set(cv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct);
        bk_set(cv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
        bk_set(cv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd);
        bk_set(cv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
        bk_set(cv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
        bk_set(cv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one2);
        bk_set(cv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one2);
        CK(cudnnBackendFinalize(cv));
    }
    cudnnBackendDescriptor_t op = bk_make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    {
        float alpha = 1.0f, beta = 0.0f;
        bk_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
        bk_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
        bk_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cv);
        bk_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx);
        bk_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw);
        bk_set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty);
        CK(cudnnBackendFinalize(op));
    }
    cudnnBackendDescriptor_t graph = bk_make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    bk_set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &dh);
    bk_set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
    CK(cudnnBackendFinalize(graph));
    cudnnBackendDescriptor_t heur = bk_make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR), cfgs[16];
    {
        cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_INSTANT;
        bk_set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
        bk_set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm);
        CK(cudnnBackendFinalize(heur));
    }
    int64_t ncfg = 0, got = 0;
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                0, &ncfg, NULL));
    if (ncfg < 1 || ncfg > 16)
        CK(1000 + ncfg);
    for (int64_t i = 0; i < ncfg; i++)
        cfgs[i] = bk_make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    CK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                ncfg, &got, cfgs));
    if (got < 1)
        CK(2000 + got);
    for (int64_t i = 1; i < ncfg; i++) /* the first one is kept */
        CK(cudnnBackendDestroyDescriptor(cfgs[i]));
    cudnnBackendDescriptor_t plan = bk_make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    bk_set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[0]);
    CK(cudnnBackendFinalize(plan));
    int64_t eng0 = -1, ws0 = -1;
    bk_plan_info(plan, &eng0, &ws0);
    if (ws0 < 0 || ws0 > (int64_t)WS_BYTES)
        CK(3000);
    cudnnBackendDescriptor_t vp = bk_make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    {
        int64_t uids[3] = { 1, 2, 3 };
        void *ptrs[3] = { (void *)x, (void *)w, (void *)yb }, *wsp = (void *)bws;
        bk_set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
        bk_set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
        bk_set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &wsp);
        CK(cudnnBackendFinalize(vp));
    }
    cudnnBackendDescriptor_t lgraph = NULL, lcfg = NULL, lplan = NULL;
    int lost = 0;
    for (int k = 2; k < argc; k++)
        lost |= strcmp(argv[k], "lost") == 0;
    if (lost) {
        cudnnHandle_t dh2;
        CK(cudnnCreate(&dh2));
        lgraph = bk_make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
        bk_set(lgraph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &dh2);
        bk_set(lgraph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
        CK(cudnnBackendFinalize(lgraph));
        cudnnBackendDescriptor_t lh = bk_make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_INSTANT;
        bk_set(lh, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &lgraph);
        bk_set(lh, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm);
        CK(cudnnBackendFinalize(lh));
        lcfg = bk_make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        CK(cudnnBackendGetAttribute(lh, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &lcfg));
        lplan = bk_make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        bk_set(lplan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &lcfg);
        CK(cudnnBackendFinalize(lplan));
        CK(cudnnBackendDestroyDescriptor(lh));
        CK(cudnnDestroy(dh2));
    }
    /* the frontend's temporaries: cuDNN keeps its own copies */
    CK(cudnnBackendDestroyDescriptor(heur));
    CK(cudnnBackendDestroyDescriptor(op));
    CK(cudnnBackendDestroyDescriptor(cv));
    CK(cudnnBackendDestroyDescriptor(tx));
    CK(cudnnBackendDestroyDescriptor(tw));
    CK(cudnnBackendDestroyDescriptor(ty));

    static float ha[M * K], hb[K * N], hc[M * N], hd[M * N], hx[CI * H * W], hw[CO * CI * 9],
        hy[CO * H * W], hb1[CO * H * W], hb2[CO * H * W];
    move_fn mv = (move_fn)dlsym(RTLD_DEFAULT, "easyscale_move");
    int (*where)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "easyscale_where");
    for (int i = 0; i < steps; i++) {
        for (int k = 2; k < argc; k++) {
            int at, slot;
            if (sscanf(argv[k], "%d:%d", &at, &slot) == 2 && at == i)
                printf("move to %d: %d\n", slot, mv ? mv(slot) : -1);
        }
        /* the settings, read back */
        cudaStream_t gs = NULL;
        cublasMath_t gm;
        cublasPointerMode_t gp;
        cublasAtomicsMode_t ga;
        CK(cublasGetStream(bh, &gs));
        EXPECT(gs == (cudaStream_t)s);
        CK(cublasGetMathMode(bh, &gm));
        EXPECT(gm == CUBLAS_TF32_TENSOR_OP_MATH);
        CK(cublasGetPointerMode(bh, &gp));
        EXPECT(gp == CUBLAS_POINTER_MODE_DEVICE);
        CK(cublasGetAtomicsMode(bh, &ga));
        EXPECT(ga == CUBLAS_ATOMICS_ALLOWED);
        gs = NULL;
        CK(cudnnGetStream(dh, &gs));
        EXPECT(gs == (cudaStream_t)s);

        fill(ha, M * K, 11u + (unsigned)i);
        fill(hb, K * N, 23u + (unsigned)i);
        fill(hx, CI * H * W, 31u + (unsigned)i);
        fill(hw, CO * CI * 9, 47u + (unsigned)i);
        CK(cuMemcpyHtoDAsync(a, ha, sizeof(ha), s));
        CK(cuMemcpyHtoDAsync(b, hb, sizeof(hb), s));
        CK(cuMemcpyHtoDAsync(x, hx, sizeof(hx), s));
        CK(cuMemcpyHtoDAsync(w, hw, sizeof(hw), s));
        /* the plan made before any move: with a handle made now, then with
         * the first one (the same plan and variant pack descriptors) */
        cudnnHandle_t fh;
        CK(cudnnCreate(&fh));
        CK(cudnnSetStream(fh, (cudaStream_t)s));
        CK(cudnnBackendExecute(fh, plan, vp));
        CK(cuMemcpyDtoHAsync(hb1, yb, sizeof(hb1), s));
        CK(cudnnBackendExecute(dh, plan, vp));
        CK(cuMemcpyDtoHAsync(hb2, yb, sizeof(hb2), s));
        CK(cuStreamSynchronize(s));
        CK(cudnnDestroy(fh));
        int64_t eng = -1, wsz = -1;
        bk_plan_info(plan, &eng, &wsz);
        /* the descriptors the application holds answer for the plan now */
        printf("plan engine %lld cfg engine %lld ws %lld\n", (long long)eng,
               (long long)bk_cfg_engine(cfgs[0]), (long long)wsz);
        hash_in(hb1, sizeof(hb1));
        hash_in(hb2, sizeof(hb2));
        if (lost) {
            printf("lost plan %d\n", (int)cudnnBackendExecute(dh, lplan, vp));
            CK(cuStreamSynchronize(s));
        }
        /* alpha and beta are device pointers (the pointer mode) */
        CK(cublasSgemm(bh, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, (const float *)sc,
                       (const float *)a, M, (const float *)b, K, (const float *)(sc + 4),
                       (float *)c, M));
        const float one = 1.0f, zero = 0.0f;
        cublasLtMatmulHeuristicResult_t hr;
        int got = 0;
        CK(cublasLtMatmulAlgoGetHeuristic(lh, desc, la, lb, lc, lc, pref, 1, &hr, &got));
        if (got != 1)
            CK(got - 1 ? got - 1 : 99);
        CK(cublasLtMatmul(lh, desc, &one, (const void *)a, la, (const void *)b, lb, &zero,
                          (const void *)d, lc, (void *)d, lc, &hr.algo, NULL, 0,
                          (cudaStream_t)s));
        CK(cudnnConvolutionForward(dh, &one, xd, (const void *)x, wd, (const void *)w, cd,
                                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, NULL, 0, &zero, yd,
                                   (void *)y));
        CK(cuMemcpyDtoHAsync(hc, c, sizeof(hc), s));
        CK(cuMemcpyDtoHAsync(hd, d, sizeof(hd), s));
        CK(cuMemcpyDtoHAsync(hy, y, sizeof(hy), s));
        CK(cuStreamSynchronize(s));
        hash_in(hc, sizeof(hc));
        hash_in(hd, sizeof(hd));
        hash_in(hy, sizeof(hy));
        printf("step %d gpu %d\n", i, where ? where() : 0);
    }
    CK(cudnnBackendDestroyDescriptor(vp));
    CK(cudnnBackendDestroyDescriptor(plan));
    CK(cudnnBackendDestroyDescriptor(cfgs[0]));
    CK(cudnnBackendDestroyDescriptor(graph));
    if (lost) {
        CK(cudnnBackendDestroyDescriptor(lplan));
        CK(cudnnBackendDestroyDescriptor(lcfg));
        CK(cudnnBackendDestroyDescriptor(lgraph));
    }
    if (kept)
        printf("settings kept\n");
    printf("checksum %016llx\n", (unsigned long long)g_chain);
    CK(cudnnDestroy(dh));
    CK(cublasLtDestroy(lh));
    CK(cublasDestroy(bh));
    /* a destroyed handle: the library's own status, no crash */
    printf("destroyed blas %d\n", (int)cublasSetMathMode(bh, CUBLAS_DEFAULT_MATH));
    printf("destroyed dnn %s\n", cudnnSetStream(dh, (cudaStream_t)s) ? "refused" : "accepted");
    return 0;
}
