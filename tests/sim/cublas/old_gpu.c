/* A driver front for the architecture tests of simcuda's cuBLAS and cuDNN:
 * a libcuda.so.1 whose only export, cuGetProcAddress_v2, hands out
 * simcuda's driver functions ($SIMTEST_REAL_LIBCUDA, loaded by path) except
 * cuDeviceGetAttribute, which reports compute capability 7.0 (Volta, a GPU
 * no CUDA 13 library has code for). Placed first on the library path, it
 * is the driver the libraries find with dlopen("libcuda.so.1") +
 * cuGetProcAddress. Test code only. */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);
typedef CUresult (*getattr_fn)(int *, CUdevice_attribute, CUdevice);

static getproc_fn g_real_getproc;
static getattr_fn g_real_getattr;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void)
{
    const char *path = getenv("SIMTEST_REAL_LIBCUDA");
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!h)
        return;
    g_real_getproc = (getproc_fn)dlsym(h, "cuGetProcAddress_v2");
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    if (g_real_getproc &&
        g_real_getproc("cuDeviceGetAttribute", &fn, 2000, CU_GET_PROC_ADDRESS_DEFAULT, &st) ==
            CUDA_SUCCESS)
        memcpy(&g_real_getattr, &fn, sizeof(fn));
}

static CUresult old_getattr(int *v, CUdevice_attribute a, CUdevice dev)
{
    CUresult r = g_real_getattr(v, a, dev);
    if (r == CUDA_SUCCESS && a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        *v = 7;
    if (r == CUDA_SUCCESS && a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        *v = 0;
    return r;
}

__attribute__((visibility("default"))) CUresult
cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                    CUdriverProcAddressQueryResult *status)
{
    pthread_once(&g_once, load);
    if (!g_real_getproc || !g_real_getattr)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = g_real_getproc(symbol, pfn, version, flags, status);
    if (r == CUDA_SUCCESS && symbol && strcmp(symbol, "cuDeviceGetAttribute") == 0) {
        getattr_fn f = old_getattr;
        memcpy(pfn, &f, sizeof(f));
    }
    return r;
}
