/* es-devices: a small tour of the CUDA Driver API on whatever libcuda.so.1
 * is found (simcuda under scripts/simenv, or a real GPU): lists the devices,
 * then on each one allocates, copies, runs a vector-add kernel from a
 * module image and checks the result.
 *
 *   scripts/simenv build/bin/es-devices [KERNELS.fatbin]
 *
 * The image defaults to $ES_BUILD/tests/sim/driver/kernels.fatbin (its
 * kernel sim_add runs on simcuda as the twin in libsimtwin_simtest.so).
 * Exit status 0 when every device computed the right sum. */
#include <cuda.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU(call)                                                                      \
    do {                                                                              \
        CUresult r_ = (call);                                                         \
        if (r_ != CUDA_SUCCESS) {                                                     \
            const char *n_ = "?";                                                     \
            cuGetErrorName(r_, &n_);                                                  \
            fprintf(stderr, "es-devices: %s failed: %s\n", #call, n_);                \
            goto out;                                                                 \
        }                                                                             \
    } while (0)

static void *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n > 0 ? malloc((size_t)n) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    return b;
}

static int run_on(CUdevice dev, const void *image)
{
    enum { N = 1 << 20 };
    int ok = 0;
    CUcontext ctx = NULL;
    CUmodule mod = NULL;
    CUstream s = NULL;
    CUevent t0 = NULL, t1 = NULL;
    CUdeviceptr a = 0, b = 0, c = 0;
    float *h = NULL;
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    CU(cuMemAllocHost((void **)&h, 3 * N * sizeof(float)));
    for (int i = 0; i < N; i++) {
        h[i] = (float)i;
        h[N + i] = 2.0f * (float)i;
    }
    CU(cuMemAlloc(&a, N * sizeof(float)));
    CU(cuMemAlloc(&b, N * sizeof(float)));
    CU(cuMemAlloc(&c, N * sizeof(float)));
    CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU(cuEventCreate(&t0, 0));
    CU(cuEventCreate(&t1, 0));
    CU(cuModuleLoadData(&mod, image));
    CUfunction add;
    CU(cuModuleGetFunction(&add, mod, "sim_add"));
    int n = N;
    void *args[] = {&a, &b, &c, &n};
    CU(cuEventRecord(t0, s));
    CU(cuMemcpyHtoDAsync(a, h, N * sizeof(float), s));
    CU(cuMemcpyHtoDAsync(b, h + N, N * sizeof(float), s));
    CU(cuLaunchKernel(add, (N + 255) / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
    CU(cuMemcpyDtoHAsync(h + 2 * N, c, N * sizeof(float), s));
    CU(cuEventRecord(t1, s));
    CU(cuStreamSynchronize(s));
    float ms = 0;
    CU(cuEventElapsedTime(&ms, t0, t1));
    ok = 1;
    for (int i = 0; i < N; i++)
        if (h[2 * N + i] != 3.0f * (float)i) {
            ok = 0;
            break;
        }
    size_t fr, total;
    CU(cuMemGetInfo(&fr, &total));
    printf("    vector add of %d floats: %s in %.3f ms; memory in use %zu of %zu MiB\n", N,
           ok ? "correct" : "WRONG", ms, (total - fr) >> 20, total >> 20);
out:
    if (mod)
        cuModuleUnload(mod);
    if (t0)
        cuEventDestroy(t0);
    if (t1)
        cuEventDestroy(t1);
    if (s)
        cuStreamDestroy(s);
    if (a)
        cuMemFree(a);
    if (b)
        cuMemFree(b);
    if (c)
        cuMemFree(c);
    if (h)
        cuMemFreeHost(h);
    if (ctx)
        cuDevicePrimaryCtxRelease(dev);
    return ok;
}

int main(int argc, char **argv)
{
    char path[4096];
    const char *build = getenv("ES_BUILD");
    if (argc > 1)
        snprintf(path, sizeof(path), "%s", argv[1]);
    else
        snprintf(path, sizeof(path), "%s/tests/sim/driver/kernels.fatbin", build ? build : "build");
    void *image = read_all(path);
    if (!image) {
        fprintf(stderr, "es-devices: cannot read module image %s\n", path);
        return 2;
    }
    int version = 0, n = 0, good = 0;
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) {
        const char *s = "?";
        cuGetErrorName(r, &s);
        fprintf(stderr, "es-devices: cuInit failed: %s\n", s);
        free(image);
        return 1;
    }
    cuDriverGetVersion(&version);
    cuDeviceGetCount(&n);
    printf("driver API %d.%d, %d device(s)\n", version / 1000, version % 1000 / 10, n);
    for (int i = 0; i < n; i++) {
        CUdevice d;
        char name[128], bus[32];
        int major = 0, minor = 0, sms = 0, clock = 0;
        size_t total = 0;
        CUuuid u;
        cuDeviceGet(&d, i);
        cuDeviceGetName(name, sizeof(name), d);
        cuDeviceTotalMem(&total, d);
        cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
        cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
        cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
        cuDeviceGetAttribute(&clock, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, d);
        cuDeviceGetPCIBusId(bus, sizeof(bus), d);
        cuDeviceGetUuid(&u, d);
        printf("  [%d] %s  cc %d.%d  %d SMs @ %d MHz  %zu MiB  %s  GPU-", i, name, major, minor,
               sms, clock / 1000, total >> 20, bus);
        for (int k = 0; k < 16; k++)
            printf("%02x%s", (unsigned char)u.bytes[k], k == 3 || k == 5 || k == 7 || k == 9 ? "-" : "");
        printf("\n");
        good += run_on(d, image);
    }
    free(image);
    printf("%d of %d device(s) computed the right result\n", good, n);
    return good == n ? 0 : 1;
}
