/* Child of the architecture tests (sim_cublas_test, sim_cudnn_test):
 * creates a cuBLAS ("cublas") or cuDNN ("cudnn") handle on device 0 and
 * prints "create STATUS". It reaches the driver as the libraries do
 * (dlopen("libcuda.so.1") + cuGetProcAddress), so a driver front first on
 * the library path (old_gpu.c) is the driver both see. Exit 2: no driver
 * or device. */
#include <cublas_v2.h>
#include <cuda.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);

static void *proc(getproc_fn gp, const char *name)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    if (gp(name, &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS)
        return NULL;
    return fn;
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "cublas") != 0 && strcmp(argv[1], "cudnn") != 0)) {
        fprintf(stderr, "usage: arch_child cublas|cudnn\n");
        return 2;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    getproc_fn gp = lib ? (getproc_fn)dlsym(lib, "cuGetProcAddress_v2") : NULL;
    if (!gp) {
        printf("no driver\n");
        return 2;
    }
    CUresult (*init)(unsigned int) = (CUresult(*)(unsigned int))proc(gp, "cuInit");
    CUresult (*get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))proc(gp, "cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) =
        (CUresult(*)(CUcontext *, CUdevice))proc(gp, "cuDevicePrimaryCtxRetain");
    CUresult (*setcur)(CUcontext) = (CUresult(*)(CUcontext))proc(gp, "cuCtxSetCurrent");
    CUdevice dev;
    CUcontext ctx;
    if (!init || !get || !retain || !setcur || init(0) || get(&dev, 0) || retain(&ctx, dev) ||
        setcur(ctx)) {
        printf("no device\n");
        return 2;
    }
    int st;
    if (strcmp(argv[1], "cublas") == 0) {
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
