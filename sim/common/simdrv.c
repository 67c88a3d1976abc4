/* Loading of the driver by simcuda's libraries, through cuGetProcAddress. */
#include "sim/common/simdrv.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);

static simdrv_t g_drv;
static int g_ok;
static char g_err[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        snprintf(g_err, sizeof(g_err), "cannot load libcuda.so.1: %s", dlerror());
        return;
    }
    getproc_fn gp = (getproc_fn)dlsym(h, "cuGetProcAddress_v2");
    if (!gp) {
        snprintf(g_err, sizeof(g_err), "libcuda.so.1 has no cuGetProcAddress_v2");
        return;
    }
#define SIMDRV_LOAD(name, ver, args)                                                  \
    do {                                                                              \
        void *fn = NULL;                                                              \
        CUdriverProcAddressQueryResult st;                                            \
        if (gp(#name, &fn, ver, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS ||   \
            !fn) {                                                                    \
            snprintf(g_err, sizeof(g_err), "driver entry point %s not found", #name); \
            return;                                                                   \
        }                                                                             \
        memcpy(&g_drv.name, &fn, sizeof(fn));                                         \
    } while (0);
    SIMDRV_FUNCS(SIMDRV_LOAD)
#undef SIMDRV_LOAD
    g_ok = 1;
}

const simdrv_t *simdrv_get(void)
{
    pthread_once(&g_once, load);
    return g_ok ? &g_drv : NULL;
}

const char *simdrv_error(void)
{
    return g_err[0] ? g_err : "driver not loaded";
}

int simdrv_current_device(simdrv_devinfo_t *info)
{
    const simdrv_t *d = simdrv_get();
    CUdevice dev;
    memset(info, 0, sizeof(*info));
    if (!d)
        return -ENOSYS;
    if (d->cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return -ENODEV;
    info->dev = dev;
    info->ordinal = (int)dev;
    if (d->cuDeviceGetAttribute(&info->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) ||
        d->cuDeviceGetAttribute(&info->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) ||
        d->cuDeviceGetAttribute(&info->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) ||
        d->cuDeviceGetName(info->name, sizeof(info->name), dev) ||
        d->cuDeviceGetPCIBusId(info->bus_id, sizeof(info->bus_id), dev) ||
        d->cuDeviceGetUuid(&info->uuid, dev))
        return -EIO;
    /* Short model from the marketing name: "NVIDIA A100-SXM4-40GB" -> "a100". */
    const char *p = info->name;
    if (strncmp(p, "NVIDIA ", 7) == 0)
        p += 7;
    if (strncmp(p, "Tesla ", 6) == 0)
        p += 6;
    size_t i = 0;
    for (; p[i] && isalnum((unsigned char)p[i]) && i + 1 < sizeof(info->model); i++)
        info->model[i] = (char)tolower((unsigned char)p[i]);
    info->model[i] = '\0';
    return 0;
}

int simdrv_bound_here(const CUuuid *uuid)
{
    const simdrv_t *d = simdrv_get();
    CUdevice dev;
    CUuuid u;
    if (!d || !uuid || d->cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
        d->cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS)
        return 0;
    return memcmp(u.bytes, uuid->bytes, sizeof(u.bytes)) == 0;
}
