/* Client run by tests/device/identity_test.c under libeasyscale.so (and
 * without it): the device attributes d2 lowers, as seen by the program
 * itself and by libraries of the callers d2 tells apart (tests/device/id_caller.c
 * built as a JIT library, as Triton's utilities, as a plain library).
 *
 *   id_client DEV LIBDIR   "app sm S cc M.m optin B smsm B l2 B thr T blk K"
 *                          (cuDeviceGetAttribute from the program), "capi
 *                          M.m" (cuDeviceComputeCapability), then for each
 *                          library NAME in LIBDIR: "NAME sm S cc M.m optin B
 *                          capi M.m"
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* cuDeviceComputeCapability */

#include "../clients/ck.h"

typedef int (*attr_fn)(int, int, int *);
typedef int (*cc_fn)(int, int *, int *);

static int app_attr(int attr, int dev, int *v)
{
    return (int)cuDeviceGetAttribute(v, (CUdevice_attribute)attr, (CUdevice)dev);
}

static void show(const char *who, attr_fn q, cc_fn c, int dev)
{
    int sm, ma, mi, optin, smsm, l2, thr, blk, cma, cmi;
    CK(q(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev, &sm));
    CK(q(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev, &ma));
    CK(q(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev, &mi));
    CK(q(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev, &optin));
    CK(q(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev, &smsm));
    CK(q(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev, &l2));
    CK(q(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev, &thr));
    CK(q(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, dev, &blk));
    CK(c(dev, &cma, &cmi));
    printf("%s sm %d cc %d.%d optin %d smsm %d l2 %d thr %d blk %d capi %d.%d\n", who, sm, ma,
           mi, optin, smsm, l2, thr, blk, cma, cmi);
}

static int app_cc(int dev, int *ma, int *mi)
{
    return (int)cuDeviceComputeCapability(ma, mi, (CUdevice)dev);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: id_client DEV LIBDIR\n");
        return 2;
    }
    int dev = atoi(argv[1]);
    CK(cuInit(0));
    show("app", app_attr, app_cc, dev);
    static const char *const libs[][2] = {
        { "nvrtc", "libnvrtc-estest.so" },
        { "triton", "triton/cuda_utils.so" },
        { "plain", "libplain-estest.so" },
    };
    for (int i = 0; i < 3; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", argv[2], libs[i][1]);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            printf("FAIL dlopen %s: %s\n", path, dlerror());
            return 1;
        }
        attr_fn q = (attr_fn)dlsym(h, "es_id_caller_attr");
        cc_fn c = (cc_fn)dlsym(h, "es_id_caller_cc");
        if (!q || !c) {
            printf("FAIL dlsym in %s\n", path);
            return 1;
        }
        show(libs[i][0], q, c, dev);
    }
    return 0;
}
