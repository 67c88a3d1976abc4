/* Child of the library tests that need a process of their own
 * (sim_cublas_api_test, sim_cudnn_api_test). It reaches the driver as the
 * libraries do (dlopen("libcuda.so.1") + cuGetProcAddress), so a driver
 * front first on the library path (old_gpu.c) or a preloaded shim is what
 * it and the libraries see. Modes, each on device 0, printing one line:
 *   cublas | cudnn     create a handle: "create STATUS"
 *   symv ATOMICS       cublasSsymv (n 300) with cublasSetAtomicsMode(ATOMICS):
 *                      "symv STATUS sync CURESULT"
 *   bwdfilter ALGO     cudnnConvolutionBackwardFilter with that algorithm:
 *                      "bwdfilter STATUS sync CURESULT"
 * Exit 2: no driver, device or memory. */
#include <cublas_v2.h>
#include <cuda.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);

static getproc_fn g_gp;

static void *proc(const char *name)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    if (g_gp(name, &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS)
        return NULL;
    return fn;
}

static CUresult (*p_alloc)(CUdeviceptr *, size_t);
static CUresult (*p_htod)(CUdeviceptr, const void *, size_t);
static CUresult (*p_sync)(void);

/* A device buffer of n floats, i-th value ((i * 37) % 101 - 50) / 64. */
static void *dev_floats(size_t n)
{
    float *h = malloc(n * sizeof(float));
    CUdeviceptr d = 0;
    if (!h)
        return NULL;
    for (size_t i = 0; i < n; i++)
        h[i] = (float)((long)((i * 37) % 101) - 50) / 64.0f;
    if (p_alloc(&d, n * sizeof(float)) != CUDA_SUCCESS ||
        p_htod(d, h, n * sizeof(float)) != CUDA_SUCCESS)
        d = 0;
    free(h);
    return (void *)(uintptr_t)d;
}

static int run_symv(int atomics)
{
    const int n = 300;
    cublasHandle_t h;
    float alpha = 1.0f, beta = 0.0f;
    float *A = dev_floats((size_t)n * n), *x = dev_floats(n), *y = dev_floats(n);
    if (!A || !x || !y || cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
        return 2;
    int st = (int)cublasSetAtomicsMode(h, atomics ? CUBLAS_ATOMICS_ALLOWED
                                                  : CUBLAS_ATOMICS_NOT_ALLOWED);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = (int)cublasSsymv(h, CUBLAS_FILL_MODE_UPPER, n, &alpha, A, n, x, 1, &beta, y, 1);
    printf("symv %d sync %d\n", st, (int)p_sync());
    cublasDestroy(h);
    return 0;
}

static int run_bwdfilter(int algo)
{
    cudnnHandle_t h;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS || cudnnCreateTensorDescriptor(&xd) ||
        cudnnCreateTensorDescriptor(&yd) || cudnnCreateFilterDescriptor(&wd) ||
        cudnnCreateConvolutionDescriptor(&cd) ||
        cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 4, 8, 8) ||
        cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 4, 8, 8) ||
        cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 4, 3, 3) ||
        cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT))
        return 2;
    size_t ws = 0;
    if (cudnnGetConvolutionBackwardFilterWorkspaceSize(
            h, xd, yd, cd, wd, (cudnnConvolutionBwdFilterAlgo_t)algo, &ws))
        return 2;
    void *x = dev_floats(2 * 4 * 8 * 8), *dy = dev_floats(2 * 4 * 8 * 8),
         *dw = dev_floats(4 * 4 * 3 * 3), *w = dev_floats(ws / sizeof(float) + 1);
    if (!x || !dy || !dw || !w)
        return 2;
    float one = 1.0f, zero = 0.0f;
    int st = (int)cudnnConvolutionBackwardFilter(h, &one, xd, x, yd, dy, cd,
                                                 (cudnnConvolutionBwdFilterAlgo_t)algo, w, ws,
                                                 &zero, wd, dw);
    printf("bwdfilter %d sync %d\n", st, (int)p_sync());
    cudnnDestroy(h);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int arg = argc > 2 ? atoi(argv[2]) : 0;
    int ok = (argc == 2 && (!strcmp(mode, "cublas") || !strcmp(mode, "cudnn"))) ||
             (argc == 3 && (!strcmp(mode, "symv") || !strcmp(mode, "bwdfilter")));
    if (!ok) {
        fprintf(stderr, "usage: lib_child cublas|cudnn | symv ATOMICS | bwdfilter ALGO\n");
        return 2;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    g_gp = lib ? (getproc_fn)dlsym(lib, "cuGetProcAddress_v2") : NULL;
    if (!g_gp) {
        printf("no driver\n");
        return 2;
    }
    CUresult (*init)(unsigned int) = (CUresult(*)(unsigned int))proc("cuInit");
    CUresult (*get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))proc("cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) =
        (CUresult(*)(CUcontext *, CUdevice))proc("cuDevicePrimaryCtxRetain");
    CUresult (*setcur)(CUcontext) = (CUresult(*)(CUcontext))proc("cuCtxSetCurrent");
    p_alloc = (CUresult(*)(CUdeviceptr *, size_t))proc("cuMemAlloc");
    p_htod = (CUresult(*)(CUdeviceptr, const void *, size_t))proc("cuMemcpyHtoD");
    p_sync = (CUresult(*)(void))proc("cuCtxSynchronize");
    CUdevice dev;
    CUcontext ctx;
    if (!init || !get || !retain || !setcur || !p_alloc || !p_htod || !p_sync || init(0) ||
        get(&dev, 0) || retain(&ctx, dev) || setcur(ctx)) {
        printf("no device\n");
        return 2;
    }
    if (!strcmp(mode, "symv"))
        return run_symv(arg);
    if (!strcmp(mode, "bwdfilter"))
        return run_bwdfilter(arg);
    int st;
    if (!strcmp(mode, "cublas")) {
        cublasHandle_t h;
        st = (int)cublasCreate(&h);
        if (st == CUBLAS_STATUS_SUCCESS)
            cublasDestroy(h);
    } else {
        cudnnHandle_t h;
        st = (int)cudnnCreate(&h);
        if (st == CUDNN_STATUS_SUCCESS)
            cudnnDestroy(h);
    }
    printf("create %d\n", st);
    return 0;
}
