/* A framework on the CUDA runtime, as PyTorch is, run under the shim by
 * tests/move/runtime_test.c: its device, context, stream and memory come
 * from the runtime (LIB: a stand-in looked up like libcudart, so it gets
 * the real driver: intercept/cuda.c), and it calls cuBLAS and cuDNN on
 * them through NVIDIA's API (the vendor libraries keep the shim's virtual
 * handles and see the physical devices). The runtime's device is
 * LOCAL_RANK modulo the devices it sees, as torch.cuda.set_device(local_rank
 * % device_count()) chooses.
 *
 *   rt_client LIB
 *
 * Prints "runtime devices N", "sgemm ok" (the product against the host's
 * within 1e-4), "cudnn ok" and "framework ok"; "FAIL ..." and exit 1 on a
 * failing call. Uses NVIDIA's headers only. */
#include <cublas_v2.h>
#include <cuda.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../clients/ck.h"

#define N 64

typedef void *(*lookup_fn)(const char *, int);
static lookup_fn rt;

/* The runtime's driver function NAME, of version V, as type T. */
#define RT(T, name, v) ((T)rt_fn(name, v))
static void *rt_fn(const char *name, int v)
{
    void *f = rt(name, v);
    if (!f) {
        printf("FAIL the runtime has no %s\n", name);
        exit(1);
    }
    return f;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h || !(*(void **)&rt = dlsym(h, "rt_probe_lookup"))) {
        printf("FAIL %s: %s\n", argv[1], dlerror());
        return 1;
    }
    /* the runtime: its device, its primary context current, its stream and memory */
    int ndev = 0;
    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    CUdeviceptr a, b, c;
    CK(RT(CUresult (*)(unsigned), "cuInit", 2000)(0));
    CK(RT(CUresult (*)(int *), "cuDeviceGetCount", 2000)(&ndev));
    printf("runtime devices %d\n", ndev);
    const char *lr = getenv("LOCAL_RANK");
    CK(RT(CUresult (*)(CUdevice *, int), "cuDeviceGet", 2000)(&dev, (lr ? atoi(lr) : 0) % ndev));
    CK(RT(CUresult (*)(CUcontext *, CUdevice), "cuDevicePrimaryCtxRetain", 7000)(&ctx, dev));
    CK(RT(CUresult (*)(CUcontext), "cuCtxSetCurrent", 4000)(ctx));
    CK(RT(CUresult (*)(CUstream *, unsigned), "cuStreamCreate", 2000)(&s, CU_STREAM_NON_BLOCKING));
    CUresult (*alloc)(CUdeviceptr *, size_t) = RT(CUresult (*)(CUdeviceptr *, size_t), "cuMemAlloc", 3020);
    CK(alloc(&a, N * N * 4));
    CK(alloc(&b, N * N * 4));
    CK(alloc(&c, N * N * 4));
    static float ha[N * N], hb[N * N], hc[N * N];
    for (int i = 0; i < N * N; i++) {
        ha[i] = (float)((i * 7) % 13) / 8.0f;
        hb[i] = (float)((i * 5) % 11) / 16.0f;
    }
    CUresult (*htod)(CUdeviceptr, const void *, size_t) =
        RT(CUresult (*)(CUdeviceptr, const void *, size_t), "cuMemcpyHtoD", 3020);
    CK(htod(a, ha, sizeof(ha)));
    CK(htod(b, hb, sizeof(hb)));
    /* the framework: cuBLAS and cuDNN on the runtime's stream and memory */
    cublasHandle_t bl;
    CK(cublasCreate(&bl));
    CK(cublasSetStream(bl, (cudaStream_t)s));
    const float one = 1.0f, zero = 0.0f;
    CK(cublasSgemm(bl, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, (const float *)a, N,
                   (const float *)b, N, &zero, (float *)c, N));
    CK(RT(CUresult (*)(CUstream), "cuStreamSynchronize", 2000)(s));
    CK(RT(CUresult (*)(void *, CUdeviceptr, size_t), "cuMemcpyDtoH", 3020)(hc, c, sizeof(hc)));
    for (int j = 0; j < N; j++)
        for (int i = 0; i < N; i++) {
            double want = 0;
            for (int p = 0; p < N; p++)
                want += (double)ha[i + p * N] * hb[p + j * N];
            if (fabs(want - hc[i + j * N]) > 1e-4 * (1 + fabs(want))) {
                printf("FAIL sgemm (%d, %d): %g, not %g\n", i, j, hc[i + j * N], want);
                return 1;
            }
        }
    printf("sgemm ok\n");
    CK(cublasDestroy(bl));
    cudnnHandle_t dn;
    CK(cudnnCreate(&dn));
    CK(cudnnSetStream(dn, (cudaStream_t)s));
    CK(cudnnDestroy(dn));
    printf("cudnn ok\n");
    printf("framework ok\n");
    return 0;
}
