/* What a process sees of its devices, written only against cuda.h: the
 * count, each ordinal's name, UUID and PCI bus id, then (after making a
 * context on device LOCAL_RANK, default 0) the context's device, each
 * ordinal's UUID and PCI bus id again ("selected-device" lines), each
 * ordinal's attributes (SM count, compute capability, opt-in shared memory
 * per block), a device pointer's device ordinal, cuMemGetInfo and
 * cuDeviceTotalMem. One
 * "key value" line each; exit 0, or 1 at the first failing call. Run by
 * tests/device/vdev_test.c with and without libeasyscale.so. */
#include <cuda.h>

#include <stdio.h>
#include <stdlib.h>

#define CU(call)                                                                               \
    do {                                                                                       \
        CUresult r_ = (call);                                                                  \
        if (r_ != CUDA_SUCCESS) {                                                              \
            printf("error %s %d\n", #call, (int)r_);                                           \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

int main(void)
{
    int n = 0;
    CU(cuInit(0));
    CU(cuDeviceGetCount(&n));
    printf("count %d\n", n);
    for (int v = 0; v < n; v++) {
        CUdevice d;
        char name[128], bus[32];
        CUuuid u;
        CU(cuDeviceGet(&d, v));
        CU(cuDeviceGetName(name, sizeof(name), d));
        CU(cuDeviceGetUuid(&u, d));
        CU(cuDeviceGetPCIBusId(bus, sizeof(bus), d));
        printf("device %d handle %d bus %s uuid ", v, (int)d, bus);
        for (int i = 0; i < 16; i++)
            printf("%02x", (unsigned char)u.bytes[i]);
        printf(" name %s\n", name);
    }
    CUdevice bad;
    printf("get-out-of-range %d\n", (int)cuDeviceGet(&bad, n));
    const char *lr = getenv("LOCAL_RANK");
    int want = lr && *lr ? atoi(lr) : 0;
    CUdevice d;
    CUcontext ctx;
    CU(cuDeviceGet(&d, want));
    CU(cuDevicePrimaryCtxRetain(&ctx, d));
    CU(cuCtxSetCurrent(ctx));
    CUdevice cd;
    CU(cuCtxGetDevice(&cd));
    printf("ctxdev %d\n", (int)cd);
    /* after the selection: each ordinal's UUID and bus id again */
    for (int v = 0; v < n; v++) {
        CUdevice dv;
        char bus[32];
        CUuuid u;
        CU(cuDeviceGet(&dv, v));
        CU(cuDeviceGetUuid(&u, dv));
        CU(cuDeviceGetPCIBusId(bus, sizeof(bus), dv));
        printf("selected-device %d bus %s uuid ", v, bus);
        for (int i = 0; i < 16; i++)
            printf("%02x", (unsigned char)u.bytes[i]);
        printf("\n");
    }
    for (int v = 0; v < n; v++) {
        CUdevice dv;
        int sm = 0, ma = 0, mi = 0, optin = 0;
        CU(cuDeviceGet(&dv, v));
        CU(cuDeviceGetAttribute(&sm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dv));
        CU(cuDeviceGetAttribute(&ma, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dv));
        CU(cuDeviceGetAttribute(&mi, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dv));
        CU(cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                dv));
        printf("attr %d sm %d cc %d.%d optin %d\n", v, sm, ma, mi, optin);
    }
    CUdeviceptr p;
    CU(cuMemAlloc(&p, 4096));
    int ord = -1;
    CU(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    printf("ptrdev %d\n", ord);
    CU(cuMemFree(p));
    size_t fr = 0, tot = 0, dtot = 0;
    CU(cuMemGetInfo(&fr, &tot));
    CU(cuDeviceTotalMem(&dtot, d));
    printf("meminfo %zu %zu\n", fr, tot);
    printf("totalmem %zu\n", dtot);
    printf("done\n");
    return 0;
}
