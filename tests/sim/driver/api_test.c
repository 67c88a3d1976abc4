/* simcuda driver tests: initialisation, errors, devices (SIMCUDA_DEVICES,
 * CUDA_VISIBLE_DEVICES), contexts, memory, copies, streams, events,
 * cuGetProcAddress, threads and processes sharing one simulated GPU.
 *
 * Runs with its own SIMCUDA_DEVICES and a private capacity table. Child
 * programs (this binary with --child ...) check environment-dependent
 * start-up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim/common/simdrv.h"
#include "tests/harness.h"
#include "tests/sim/driver/common.h"

#include <cudaProfiler.h>

#define DEVICES "a100:40G,a100:40G,l4:24G,t4:16G,h100:80G,b200:180G"

static const char *g_self;

/* A word of device memory, read as a program must on a GPU: with a copy. */
static unsigned peek32(CUdeviceptr p)
{
    unsigned v = 0;
    CK(cuMemcpyDtoH(&v, p, sizeof(v)));
    return v;
}

/* The same through stream s (to pageable memory: returns when done). */
static unsigned peek32_on(CUstream s, CUdeviceptr p)
{
    unsigned v = 0;
    CK(cuMemcpyDtoHAsync(&v, p, sizeof(v), s));
    return v;
}

/* ---- child mode: print what the driver shows under the given environment -- */
static int child_devices(void)
{
    CUresult r = cuInit(0);
    printf("init %d\n", (int)r);
    if (r != CUDA_SUCCESS)
        return 0;
    int n = 0;
    cuDeviceGetCount(&n);
    printf("count %d\n", n);
    for (int i = 0; i < n; i++) {
        char name[128];
        CUuuid u;
        cuDeviceGetName(name, sizeof(name), i);
        cuDeviceGetUuid(&u, i);
        printf("dev%d %s uuid ", i, name);
        for (int k = 0; k < 16; k++)
            printf("%02x", (unsigned char)u.bytes[k]);
        printf("\n");
    }
    return 0;
}

/* Under a preloaded interposer (tests/sim/driver/interposer.c) the driver
 * still calls and hands out its own functions. */
static CUresult stream_sync_ptsz_via_getproc(void)
{
    void *fn;
    CUdriverProcAddressQueryResult st;
    CUresult r = cuGetProcAddress("cuStreamSynchronize", &fn, 13000,
                                  CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st);
    if (r != CUDA_SUCCESS)
        return r;
    CUresult (*f)(CUstream);
    memcpy(&f, &fn, sizeof(f));
    return f(NULL);
}

static int child_interposed(void)
{
    CUdevice d;
    CUcontext c;
    if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) || cuCtxSetCurrent(c))
        return 10;
    /* The interposer answers the direct calls... */
    CUdeviceptr p;
    if (cuMemAlloc(&p, 64) != CUDA_ERROR_UNKNOWN)
        return 11; /* not actually interposed: the test would prove nothing */
    /* ... but not what simcuda resolves for itself. */
    void *fn;
    CUdriverProcAddressQueryResult st;
    if (cuGetProcAddress("cuMemAlloc", &fn, 13000, 0, &st) != CUDA_SUCCESS)
        return 12;
    CUresult (*alloc)(CUdeviceptr *, size_t);
    memcpy(&alloc, &fn, sizeof(alloc));
    if (alloc(&p, 64) != CUDA_SUCCESS)
        return 13;
    if (stream_sync_ptsz_via_getproc() != CUDA_SUCCESS)
        return 14;
    if (cuStreamSynchronize_ptsz(CU_STREAM_LEGACY) != CUDA_SUCCESS) /* calls the legacy one inside */
        return 15;
    /* The v1 name forwards to _v2 inside the library. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *v1 = lib ? dlsym(lib, "cuDevicePrimaryCtxRelease") : NULL;
    if (!v1)
        return 16;
    CUresult (*rel)(CUdevice);
    memcpy(&rel, &v1, sizeof(rel));
    if (rel(d) != CUDA_SUCCESS)
        return 17;
    printf("interposed ok\n");
    return 0;
}

static char *run_child(const char *devices, const char *visible)
{
    char dev_env[256], vis_env[256];
    snprintf(dev_env, sizeof(dev_env), "SIMCUDA_DEVICES=%s", devices ? devices : "");
    if (visible)
        snprintf(vis_env, sizeof(vis_env), "CUDA_VISIBLE_DEVICES=%s", visible);
    else
        snprintf(vis_env, sizeof(vis_env), "CUDA_VISIBLE_DEVICES=");
    char *env[] = {dev_env, vis_env, NULL};
    char *argv[] = {(char *)g_self, (char *)"--child-devices", NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 60, &r), 0);
    assert_int_equal(r.status, 0);
    return r.out;
}

/* An empty CUDA_VISIBLE_DEVICES must be passed as such, not unset. */
static char *run_child_empty_visible(void)
{
    char *env[] = {(char *)"SIMCUDA_DEVICES=" DEVICES, NULL};
    es_proc_result_t r;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "CUDA_VISIBLE_DEVICES= exec '%s' --child-devices", g_self);
    assert_int_equal(es_run_sh(cmd, env, 60, &r), 0);
    return r.out;
}

/* ---- init and errors ------------------------------------------------------------ */
static void test_not_initialized(void **state)
{
    (void)state;
    int n;
    CUdevice d;
    CUcontext c;
    CUdeviceptr p;
    /* Every call before cuInit fails so. This test runs first. */
    assert_int_equal(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    assert_int_equal(cuDeviceGet(&d, 0), CUDA_ERROR_NOT_INITIALIZED);
    assert_int_equal(cuCtxGetCurrent(&c), CUDA_ERROR_NOT_INITIALIZED);
    assert_int_equal(cuMemAlloc(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
    assert_int_equal(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    CK(cuInit(0));
    CK(cuInit(0));
    CK(cuDeviceGetCount(&n));
    assert_int_equal(n, 6);
}

static void test_version_errors(void **state)
{
    (void)state;
    int v = 0;
    const char *s;
    CK(cuDriverGetVersion(&v));
    assert_int_equal(v, 13000);
    assert_int_equal(cuDriverGetVersion(NULL), CUDA_ERROR_INVALID_VALUE);
    CK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
    assert_string_equal(s, "CUDA_ERROR_OUT_OF_MEMORY");
    CK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
    assert_string_equal(s, "out of memory");
    CK(cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s));
    assert_string_equal(s, "CUDA_ERROR_ILLEGAL_ADDRESS");
    CK(cuGetErrorName(CUDA_SUCCESS, &s));
    assert_string_equal(s, "CUDA_SUCCESS");
    CK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
    assert_string_equal(s, "invalid argument");
    assert_int_equal(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuGetErrorName(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* ---- devices ---------------------------------------------------------------------- */
static void check_model(int dev, const char *name, int major, int minor, int sms)
{
    char buf[128];
    int v, maj, min;
    CK(cuDeviceGetName(buf, sizeof(buf), dev));
    assert_string_equal(buf, name);
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    assert_int_equal(v, major);
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    assert_int_equal(v, minor);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    CK(cuDeviceComputeCapability(&maj, &min, dev));
#pragma GCC diagnostic pop
    assert_int_equal(maj * 10 + min, major * 10 + minor);
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    assert_int_equal(v, sms);
}

static void test_device_models(void **state)
{
    (void)state;
    check_model(0, "NVIDIA A100-SXM4-40GB", 8, 0, 108);
    check_model(1, "NVIDIA A100-SXM4-40GB", 8, 0, 108);
    check_model(2, "NVIDIA L4", 8, 9, 58);
    check_model(3, "Tesla T4", 7, 5, 40);
    check_model(4, "NVIDIA H100 80GB HBM3", 9, 0, 132);
    check_model(5, "NVIDIA B200", 10, 0, 148);
    size_t total;
    CK(cuDeviceTotalMem(&total, 2));
    assert_true(total == (size_t)24 << 30);
    CK(cuDeviceTotalMem(&total, 4));
    assert_true(total == (size_t)80 << 30);
}

static void test_device_attributes(void **state)
{
    (void)state;
    static const struct { CUdevice_attribute a; int want; } fixed[] = {
        {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
        {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
        {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
        {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
        {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
        {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
        {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
        {CU_DEVICE_ATTRIBUTE_INTEGRATED, 0},
        {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
        {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1},
        {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
        {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, CU_COMPUTEMODE_DEFAULT},
        {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1},
        {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1},
        {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},
        {CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0},
    };
    for (int dev = 0; dev < 6; dev++)
        for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
            int v = -12345;
            CK(cuDeviceGetAttribute(&v, fixed[i].a, dev));
            assert_int_equal(v, fixed[i].want);
        }
    /* Every attribute the header defines has an answer. */
    for (int a = 1; a <= CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED; a++) {
        int v;
        assert_int_equal(cuDeviceGetAttribute(&v, (CUdevice_attribute)a, 0), CUDA_SUCCESS);
    }
    int v;
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0));
    assert_int_equal(v, 166912);
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 4));
    assert_int_equal(v, 232448);
    CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 3));
    assert_int_equal(v, 1024);
    assert_int_equal(cuDeviceGetAttribute(&v, (CUdevice_attribute)9999, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuDeviceGetAttribute(&v, (CUdevice_attribute)0, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 6), CUDA_ERROR_INVALID_DEVICE);
    assert_int_equal(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, -1), CUDA_ERROR_INVALID_DEVICE);
    assert_int_equal(cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_ERROR_INVALID_VALUE);
    CUdevice d;
    assert_int_equal(cuDeviceGet(&d, 6), CUDA_ERROR_INVALID_DEVICE);
    assert_int_equal(cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    char name[8];
    CK(cuDeviceGetName(name, sizeof(name), 0)); /* truncated, terminated */
    assert_int_equal(strlen(name), 7);
}

static void test_uuid_pci(void **state)
{
    (void)state;
    CUuuid u[6];
    for (int i = 0; i < 6; i++)
        CK(cuDeviceGetUuid(&u[i], i));
    for (int i = 0; i < 6; i++)
        for (int j = i + 1; j < 6; j++)
            assert_memory_not_equal(u[i].bytes, u[j].bytes, 16);
    CUuuid again;
    CK(cuDeviceGetUuid_v2(&again, 3));
    assert_memory_equal(again.bytes, u[3].bytes, 16);
    for (int i = 0; i < 6; i++) {
        char bus[32];
        CUdevice d = -1;
        CK(cuDeviceGetPCIBusId(bus, sizeof(bus), i));
        CK(cuDeviceGetByPCIBusId(&d, bus));
        assert_int_equal(d, i);
    }
    CUdevice d;
    assert_int_equal(cuDeviceGetByPCIBusId(&d, "0000:99:00.0"), CUDA_ERROR_INVALID_DEVICE);
    assert_int_equal(cuDeviceGetByPCIBusId(&d, "junk"), CUDA_ERROR_INVALID_VALUE);
    int can;
    CK(cuDeviceCanAccessPeer(&can, 0, 1));
    assert_int_equal(can, 1);
}

static void test_visible_devices(void **state)
{
    (void)state;
    char *out = run_child(DEVICES, NULL);
    /* Parent view for comparison: device 3 is the T4. */
    char full[64];
    CUuuid u3, u1, u2;
    CK(cuDeviceGetUuid(&u3, 3));
    CK(cuDeviceGetUuid(&u1, 1));
    CK(cuDeviceGetUuid(&u2, 2));
    free(out);

    /* Reordered: visible 0 is physical 3, visible 1 is physical 1, same UUIDs. */
    out = run_child(DEVICES, "3,1");
    assert_non_null(strstr(out, "count 2\n"));
    char line[128];
    snprintf(line, sizeof(line), "dev0 Tesla T4 uuid ");
    char *p = strstr(out, line);
    assert_non_null(p);
    for (int k = 0; k < 16; k++)
        snprintf(full + 2 * k, 3, "%02x", (unsigned char)u3.bytes[k]);
    assert_memory_equal(p + strlen(line), full, 32);
    p = strstr(out, "dev1 NVIDIA A100-SXM4-40GB uuid ");
    assert_non_null(p);
    for (int k = 0; k < 16; k++)
        snprintf(full + 2 * k, 3, "%02x", (unsigned char)u1.bytes[k]);
    assert_memory_equal(p + strlen("dev1 NVIDIA A100-SXM4-40GB uuid "), full, 32);
    free(out);

    /* Parsing stops at the first invalid entry. */
    out = run_child(DEVICES, "2,x,0");
    assert_non_null(strstr(out, "count 1\n"));
    assert_non_null(strstr(out, "dev0 NVIDIA L4"));
    free(out);
    out = run_child(DEVICES, "4,9,0");
    assert_non_null(strstr(out, "count 1\n"));
    assert_non_null(strstr(out, "dev0 NVIDIA H100 80GB HBM3"));
    free(out);
    /* A repeated device empties the list (torch.cuda._parse_visible_devices,
     * which mirrors the driver: "Repeated ordinal results in empty set"). */
    out = run_child(DEVICES, "1,1");
    assert_non_null(strstr(out, "init 100\n"));
    free(out);
    out = run_child(DEVICES, "3,0,3");
    assert_non_null(strstr(out, "init 100\n"));
    free(out);
    /* Indices are read like strtoul: blanks before, anything after the digits. */
    out = run_child(DEVICES, "2gpu, 3,+0");
    assert_non_null(strstr(out, "count 3\n"));
    assert_non_null(strstr(out, "dev0 NVIDIA L4"));
    assert_non_null(strstr(out, "dev1 Tesla T4"));
    assert_non_null(strstr(out, "dev2 NVIDIA A100-SXM4-40GB"));
    free(out);
    /* No device at all. */
    out = run_child(DEVICES, "-1");
    assert_non_null(strstr(out, "init 100\n")); /* CUDA_ERROR_NO_DEVICE */
    free(out);
    out = run_child_empty_visible();
    assert_non_null(strstr(out, "init 100\n"));
    free(out);
    /* UUID form, by prefix. */
    char vis[64];
    snprintf(vis, sizeof(vis), "GPU-%02x%02x%02x%02x", (unsigned char)u2.bytes[0],
             (unsigned char)u2.bytes[1], (unsigned char)u2.bytes[2], (unsigned char)u2.bytes[3]);
    out = run_child(DEVICES, vis);
    assert_non_null(strstr(out, "count 1\n"));
    assert_non_null(strstr(out, "dev0 NVIDIA L4"));
    free(out);
    /* The first entry sets the kind of the list: an index after UUIDs (or a
     * UUID after indices) ends it; a repeated UUID empties it. */
    char mixed[160];
    snprintf(mixed, sizeof(mixed), "%s,0", vis);
    out = run_child(DEVICES, mixed);
    assert_non_null(strstr(out, "count 1\n"));
    free(out);
    snprintf(mixed, sizeof(mixed), "0,%s", vis);
    out = run_child(DEVICES, mixed);
    assert_non_null(strstr(out, "count 1\n"));
    assert_non_null(strstr(out, "dev0 NVIDIA A100-SXM4-40GB"));
    free(out);
    snprintf(mixed, sizeof(mixed), "%s,%s", vis, vis);
    out = run_child(DEVICES, mixed);
    assert_non_null(strstr(out, "init 100\n"));
    free(out);
    /* "GPU-" alone matches every device: ambiguous, nothing visible. */
    out = run_child(DEVICES, "GPU-");
    assert_non_null(strstr(out, "init 100\n"));
    free(out);
}

/* CUDA_DEVICE_ORDER=FASTEST_FIRST numbers devices from the fastest model,
 * and CUDA_VISIBLE_DEVICES indices follow that numbering; PCI_BUS_ID (and
 * simcuda's default) keep the SIMCUDA_DEVICES order. */
static char *run_child_order(const char *order, const char *visible)
{
    char ord_env[64], vis_env[64];
    snprintf(ord_env, sizeof(ord_env), "CUDA_DEVICE_ORDER=%s", order);
    snprintf(vis_env, sizeof(vis_env), "CUDA_VISIBLE_DEVICES=%s", visible ? visible : "");
    char *env[] = {(char *)"SIMCUDA_DEVICES=t4:1G,l4:1G,h100:1G,a100:1G,t4:2G", ord_env, vis_env,
                   NULL};
    char *argv[] = {(char *)g_self, (char *)"--child-devices", NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 60, &r), 0);
    assert_int_equal(r.status, 0);
    return r.out;
}

static void test_device_order(void **state)
{
    (void)state;
    char *out = run_child_order("FASTEST_FIRST", NULL);
    assert_non_null(strstr(out, "count 5\n"));
    const char *want[] = {"dev0 NVIDIA H100", "dev1 NVIDIA A100", "dev2 NVIDIA L4", "dev3 Tesla T4",
                          "dev4 Tesla T4"};
    for (int i = 0; i < 5; i++)
        if (!strstr(out, want[i]))
            fail_msg("FASTEST_FIRST: no '%s' in\n%s", want[i], out);
    free(out);
    out = run_child_order("FASTEST_FIRST", "3,0");
    assert_non_null(strstr(out, "count 2\n"));
    assert_non_null(strstr(out, "dev0 Tesla T4"));
    assert_non_null(strstr(out, "dev1 NVIDIA H100"));
    free(out);
    out = run_child_order("PCI_BUS_ID", NULL);
    assert_non_null(strstr(out, "dev0 Tesla T4"));
    assert_non_null(strstr(out, "dev2 NVIDIA H100"));
    free(out);
    out = run_child_order("", NULL);
    assert_non_null(strstr(out, "dev0 Tesla T4"));
    free(out);
    out = run_child_order("SLOWEST", NULL); /* said, and bus order */
    assert_non_null(strstr(out, "CUDA_DEVICE_ORDER='SLOWEST'"));
    assert_non_null(strstr(out, "dev0 Tesla T4"));
    free(out);
}

static void test_bad_device_spec(void **state)
{
    (void)state;
    static const char *bad[] = {"a100:40X", "z900:1G", "a100", "a100:", "a100:0G", "a100:40G,",
                                ",a100:1G", "a100:-1G", "a100:1G;t4:1G"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *out = run_child(bad[i], NULL);
        if (!strstr(out, "init 1\n"))
            fail_msg("spec '%s' accepted: %s", bad[i], out);
        assert_non_null(strstr(out, "simcuda: SIMCUDA_DEVICES"));
        free(out);
    }
    char *out = run_child("t4:512M,l4:24G,a10:24G", NULL);
    assert_non_null(strstr(out, "count 3\n"));
    assert_non_null(strstr(out, "dev1 NVIDIA L4"));
    free(out);
    /* SIMCUDA_TIME_SCALE is parsed strictly too. */
    static const char *scales[] = {"abc", "-1", "1x", "nan", " 1", "0x10", "inf", "+1", "1e9"};
    for (size_t i = 0; i < sizeof(scales) / sizeof(scales[0]); i++) {
        char env_scale[64];
        snprintf(env_scale, sizeof(env_scale), "SIMCUDA_TIME_SCALE=%s", scales[i]);
        char *env2[] = {(char *)"SIMCUDA_DEVICES=a100:1G", env_scale, NULL};
        char *argv2[] = {(char *)g_self, (char *)"--child-devices", NULL};
        es_proc_result_t r2;
        assert_int_equal(es_run(argv2, env2, 60, &r2), 0);
        if (!strstr(r2.out, "init 1\n"))
            fail_msg("SIMCUDA_TIME_SCALE=%s accepted: %s", scales[i], r2.out);
        es_proc_result_free(&r2);
    }
    char *env3[] = {(char *)"SIMCUDA_DEVICES=a100:1G", (char *)"SIMCUDA_TIME_SCALE=0.5", NULL};
    char *argv3[] = {(char *)g_self, (char *)"--child-devices", NULL};
    es_proc_result_t r3;
    assert_int_equal(es_run(argv3, env3, 60, &r3), 0);
    assert_non_null(strstr(r3.out, "count 1\n"));
    es_proc_result_free(&r3);
    /* Default when unset: two A100s. */
    char *env[] = {(char *)"SIMCUDA_DEVICES=", (char *)"CUDA_VISIBLE_DEVICES=", NULL};
    char *argv[] = {(char *)g_self, (char *)"--child-devices", NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 60, &r), 0);
    assert_non_null(strstr(r.out, "count 2\n"));
    assert_non_null(strstr(r.out, "dev1 NVIDIA A100"));
    es_proc_result_free(&r);
}

/* ---- contexts -------------------------------------------------------------------------- */
static void *thread_ctx(void *arg)
{
    CUcontext c = (CUcontext)1;
    /* A new thread has no current context. */
    if (cuCtxGetCurrent(&c) != CUDA_SUCCESS || c != NULL)
        return (void *)1;
    CUdevice d;
    if (cuCtxGetDevice(&d) != CUDA_ERROR_INVALID_CONTEXT)
        return (void *)2;
    if (cuCtxSetCurrent((CUcontext)arg) != CUDA_SUCCESS || cuCtxGetDevice(&d) != CUDA_SUCCESS ||
        d != 2)
        return (void *)3;
    return NULL;
}

static void test_contexts(void **state)
{
    (void)state;
    CUcontext p0, p0b, c, cur;
    unsigned flags;
    int active;
    CUdevice d;
    CK(cuDevicePrimaryCtxGetState(5, &flags, &active));
    assert_int_equal(active, 0);
    CK(cuDevicePrimaryCtxSetFlags(5, CU_CTX_SCHED_BLOCKING_SYNC));
    CK(cuDevicePrimaryCtxRetain(&p0, 5));
    CK(cuDevicePrimaryCtxRetain(&p0b, 5));
    assert_ptr_equal(p0, p0b);
    CK(cuDevicePrimaryCtxGetState(5, &flags, &active));
    assert_int_equal(active, 1);
    assert_int_equal(flags, CU_CTX_SCHED_BLOCKING_SYNC);
    CK(cuCtxPushCurrent(p0));
    CK(cuCtxGetDevice(&d));
    assert_int_equal(d, 5);
    CK(cuDevicePrimaryCtxRelease(5));
    CK(cuDevicePrimaryCtxRelease(5));
    CK(cuDevicePrimaryCtxGetState(5, &flags, &active));
    assert_int_equal(active, 0);
    /* The released primary context is stale now. */
    assert_int_equal(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cuDevicePrimaryCtxRelease(5), CUDA_ERROR_INVALID_CONTEXT);
    CK(cuCtxPopCurrent(&cur));
    assert_ptr_equal(cur, p0);
    CK(cuDevicePrimaryCtxReset(5));
    /* cuDevicePrimaryCtxReset: "Resetting the primary context does not
     * release it ... it is safe for other modules to call
     * cuDevicePrimaryCtxRelease() even after resetting the device." */
    CK(cuDevicePrimaryCtxRetain(&p0, 5));
    CK(cuDevicePrimaryCtxRetain(&p0b, 5));
    CK(cuDevicePrimaryCtxReset(5));
    CK(cuDevicePrimaryCtxGetState(5, &flags, &active));
    assert_int_equal(active, 0);
    CK(cuDevicePrimaryCtxRelease(5));
    CK(cuDevicePrimaryCtxRetain(&p0b, 5)); /* active again, same handle */
    assert_ptr_equal(p0, p0b);
    CK(cuDevicePrimaryCtxGetState(5, &flags, &active));
    assert_int_equal(active, 1);
    CK(cuDevicePrimaryCtxRelease(5));
    CK(cuDevicePrimaryCtxGetState(5, &flags, &active));
    assert_int_equal(active, 1); /* one retain left */
    CK(cuDevicePrimaryCtxRelease(5));
    CK(cuDevicePrimaryCtxGetState(5, &flags, &active));
    assert_int_equal(active, 0);
    assert_int_equal(cuDevicePrimaryCtxRelease(5), CUDA_ERROR_INVALID_CONTEXT);

    /* Created contexts: current on creation, a stack per thread. */
    CUcontext before;
    CK(cuCtxGetCurrent(&before));
    CK(cuCtxCreate(&c, NULL, 0, 2));
    CK(cuCtxGetCurrent(&cur));
    assert_ptr_equal(cur, c);
    CK(cuCtxGetDevice(&d));
    assert_int_equal(d, 2);
    unsigned v;
    CK(cuCtxGetApiVersion(c, &v));
    unsigned long long id1, id2;
    CK(cuCtxGetId(c, &id1));
    CK(cuCtxGetFlags(&flags));
    pthread_t t;
    void *ret;
    pthread_create(&t, NULL, thread_ctx, c);
    pthread_join(t, &ret);
    assert_null(ret);
    CK(cuCtxPopCurrent(&cur));
    assert_ptr_equal(cur, c);
    CK(cuCtxGetCurrent(&cur));
    assert_ptr_equal(cur, before);
    CK(cuCtxDestroy(c));
    /* A destroyed context handle is refused, never dereferenced blindly. */
    assert_int_equal(cuCtxDestroy(c), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cuCtxPushCurrent(c), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cuCtxSetCurrent(c), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cuCtxGetId(c, &id2), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cuCtxDestroy((CUcontext)&v), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cuCtxCreate(&c, NULL, 0, 17), CUDA_ERROR_INVALID_DEVICE);
    assert_int_equal(cuCtxCreate(NULL, NULL, 0, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuCtxCreate(&c, NULL, 0xff00, 0), CUDA_ERROR_INVALID_VALUE);
    /* The scheduling field holds one mode, not a set of them. */
    assert_int_equal(cuCtxCreate(&c, NULL, CU_CTX_SCHED_SPIN | CU_CTX_SCHED_BLOCKING_SYNC, 0),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuCtxCreate(&c, NULL, CU_CTX_SCHED_MASK, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_YIELD | CU_CTX_SCHED_BLOCKING_SYNC),
                     CUDA_ERROR_INVALID_VALUE);
    CK(cuCtxCreate(&c, NULL, CU_CTX_SCHED_YIELD | CU_CTX_MAP_HOST, 0));
    CK(cuCtxGetFlags(&flags));
    assert_int_equal(flags, CU_CTX_SCHED_YIELD | CU_CTX_MAP_HOST);
    assert_int_equal(cuCtxSetFlags(CU_CTX_SCHED_SPIN | CU_CTX_SCHED_YIELD), CUDA_ERROR_INVALID_VALUE);
    CK(cuCtxDestroy(c));
    /* The older ABI name behaves the same. */
    CK(cuCtxCreate_v2(&c, 0, 1));
    CK(cuCtxGetDevice(&d));
    assert_int_equal(d, 1);
    CK(cuCtxDestroy_v2(c));
    CK(cuCtxGetCurrent(&cur));
    assert_ptr_equal(cur, before);
    int lo, hi;
    st_primary(0);
    CK(cuCtxGetStreamPriorityRange(&lo, &hi));
    assert_true(hi < lo || hi == lo);
    size_t lim;
    CK(cuCtxGetLimit(&lim, CU_LIMIT_STACK_SIZE));
    CK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 1 << 24));
    CK(cuCtxGetLimit(&lim, CU_LIMIT_MALLOC_HEAP_SIZE));
    assert_int_equal(lim, 1 << 24);
}

/* cuCtxDestroy (cuda.h): a context destroyed while current to other threads
 * "will remain current to those threads, and attempting to access ctx from
 * those threads will result in the error CUDA_ERROR_CONTEXT_IS_DESTROYED". */
typedef struct {
    CUcontext c;
    st_gate_t *made_current, *destroyed;
    CUresult get_dev, sync, alloc, stream;
    CUcontext cur;
} destroyed_arg_t;

static void *thread_destroyed_ctx(void *p)
{
    destroyed_arg_t *a = p;
    if (cuCtxSetCurrent(a->c) != CUDA_SUCCESS)
        return (void *)1;
    st_gate_open(a->made_current);
    st_gate_wait(a->destroyed);
    CUdevice d;
    CUdeviceptr dp;
    CUstream s;
    a->get_dev = cuCtxGetDevice(&d);
    a->sync = cuCtxSynchronize();
    a->alloc = cuMemAlloc(&dp, 64);
    a->stream = cuStreamCreate(&s, 0);
    cuCtxGetCurrent(&a->cur);
    return NULL;
}

/* The CUDA 13 forms take the context (NULL: the current one). */
static void test_context_v2_forms(void **state)
{
    (void)state;
    st_primary(0);
    CUcontext other, cur;
    CUdevice d = -1;
    CK(cuCtxCreate(&other, NULL, 0, 3));
    CK(cuCtxPopCurrent(&cur));
    assert_ptr_equal(cur, other);
    CK(cuCtxGetDevice_v2(&d, other));
    assert_int_equal(d, 3);
    CK(cuCtxGetDevice_v2(&d, NULL));
    assert_int_equal(d, 0);
    /* cuCtxSynchronize_v2 waits for the named context's work, not the
     * current one's. */
    CK(cuCtxPushCurrent(other));
    CUstream s;
    CK(cuStreamCreate(&s, 0));
    st_gate_t *g = st_gate_new();
    st_gate_block(g, s);
    CK(cuCtxPopCurrent(&cur));
    CK(cuCtxSynchronize_v2(NULL)); /* the current context is idle */
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    st_gate_open(g);
    CK(cuCtxSynchronize_v2(other));
    CK(cuStreamQuery(s));
    CK(cuStreamDestroy(s));
    st_gate_free(g);
    assert_int_equal(cuCtxGetDevice_v2(NULL, other), CUDA_ERROR_INVALID_VALUE);
    CK(cuCtxDestroy(other));
    assert_int_equal(cuCtxGetDevice_v2(&d, other), CUDA_ERROR_INVALID_CONTEXT);
    assert_int_equal(cuCtxSynchronize_v2(other), CUDA_ERROR_INVALID_CONTEXT);
}

/* Destroyed contexts' objects are reused, but only after many more have been
 * destroyed (a recently destroyed handle stays recognisable): a loop of
 * create/destroy runs on a bounded number of objects. */
static void test_contexts_reused(void **state)
{
    (void)state;
    enum { ROUNDS = 700, QUARANTINE = 256 };
    static CUcontext seen[ROUNDS];
    int distinct = 0;
    CUcontext prev = NULL;
    for (int i = 0; i < ROUNDS; i++) {
        CUcontext c, cur;
        CK(cuCtxCreate(&c, NULL, 0, i % 3));
        assert_ptr_not_equal(c, prev);
        CK(cuCtxGetDevice(&(CUdevice){0}));
        int known = 0;
        for (int k = 0; k < distinct && !known; k++)
            known = seen[k] == c;
        if (!known)
            seen[distinct++] = c;
        CK(cuCtxDestroy(c));
        CK(cuCtxGetCurrent(&cur));
        assert_ptr_not_equal(cur, c);
        assert_int_equal(cuCtxPushCurrent(prev = c), CUDA_ERROR_INVALID_CONTEXT);
    }
    if (distinct > QUARANTINE + 16)
        fail_msg("%d context objects for %d create/destroy rounds", distinct, ROUNDS);
}

/* Peer access keeps its state and answers with the codes cuda.h lists. */
static void test_peer_access(void **state)
{
    (void)state;
    CUcontext c0 = st_primary(0), c1;
    CUdevice d1;
    CK(cuDeviceGet(&d1, 1));
    CK(cuDevicePrimaryCtxRetain(&c1, d1));
    CK(cuCtxEnablePeerAccess(c1, 0));
    assert_int_equal(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    assert_int_equal(cuCtxEnablePeerAccess(c1, 1), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED); /* itself */
    int v = 0;
    assert_int_equal(cuCtxEnablePeerAccess((CUcontext)&v, 0), CUDA_ERROR_INVALID_CONTEXT);
    CK(cuCtxDisablePeerAccess(c1));
    assert_int_equal(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
    /* A peer context created anew is not the one that was enabled. */
    CUcontext tmp, cur;
    CK(cuCtxCreate(&tmp, NULL, 0, 2));
    CK(cuCtxPopCurrent(&cur));
    CK(cuCtxEnablePeerAccess(tmp, 0));
    CK(cuCtxDestroy(tmp));
    assert_int_equal(cuCtxDisablePeerAccess(tmp), CUDA_ERROR_INVALID_CONTEXT);
    CK(cuDevicePrimaryCtxRelease(d1));
}

static void test_destroyed_context_other_thread(void **state)
{
    (void)state;
    CUcontext outer;
    CK(cuCtxGetCurrent(&outer));
    destroyed_arg_t a = {0};
    a.made_current = st_gate_new();
    a.destroyed = st_gate_new();
    CK(cuCtxCreate(&a.c, NULL, 0, 1));
    pthread_t t;
    void *ret;
    pthread_create(&t, NULL, thread_destroyed_ctx, &a);
    st_gate_wait(a.made_current);
    CK(cuCtxDestroy(a.c));
    st_gate_open(a.destroyed);
    pthread_join(t, &ret);
    assert_null(ret);
    assert_int_equal(a.get_dev, CUDA_ERROR_CONTEXT_IS_DESTROYED);
    assert_int_equal(a.sync, CUDA_ERROR_CONTEXT_IS_DESTROYED);
    assert_int_equal(a.alloc, CUDA_ERROR_CONTEXT_IS_DESTROYED);
    assert_int_equal(a.stream, CUDA_ERROR_CONTEXT_IS_DESTROYED);
    assert_ptr_equal(a.cur, a.c); /* still current there */
    /* The destroying thread popped it. */
    CUcontext cur;
    CK(cuCtxGetCurrent(&cur));
    assert_ptr_equal(cur, outer);
    st_gate_free(a.made_current);
    st_gate_free(a.destroyed);
}

/* ---- memory ---------------------------------------------------------------------------- */
static void test_memory_basic(void **state)
{
    (void)state;
    st_primary(0);
    size_t free0, total, free1;
    CK(cuMemGetInfo(&free0, &total));
    assert_true(total == (size_t)40 << 30);
    CUdeviceptr p, base;
    size_t size;
    CK(cuMemAlloc(&p, 1000000));
    CK(cuMemGetInfo(&free1, &total));
    assert_true(free0 - free1 >= 1000000);
    CK(cuMemGetAddressRange(&base, &size, p + 500));
    assert_true(base == p);
    assert_int_equal(size, 1000000);
    /* Pointer attributes. */
    unsigned type;
    int ord;
    CUcontext ctx, cur;
    CUdeviceptr start;
    unsigned long long id1, id2;
    CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 10));
    assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
    CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    assert_int_equal(ord, 0);
    CK(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, p));
    CK(cuCtxGetCurrent(&cur));
    assert_ptr_equal(ctx, cur);
    CK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 77));
    assert_true(start == p);
    CK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 77));
    assert_int_equal(size, 1000000);
    CK(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
    unsigned char managed = 7;
    CK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
    assert_int_equal(managed, 0);
    CUdeviceptr dp;
    CK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p + 3));
    assert_true(dp == p + 3);
    int x;
    assert_int_equal(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)&x),
                     CUDA_ERROR_INVALID_VALUE);
    CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *data[2] = {&type, &ord};
    CK(cuPointerGetAttributes(2, attrs, data, (CUdeviceptr)&x));
    assert_int_equal(type, 0);
    CK(cuPointerGetAttributes(2, attrs, data, p));
    assert_int_equal(type, CU_MEMORYTYPE_DEVICE);
    /* Every attribute cuPointerGetAttributes lists has an answer. */
    unsigned char hwdec = 9;
    CK(cuPointerGetAttribute(&hwdec, CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE, p));
    assert_int_equal(hwdec, 0);
    /* DEVICE_POINTER: "If there is no current CUcontext then
     * CUDA_ERROR_INVALID_CONTEXT is returned." */
    CUcontext saved;
    CK(cuCtxPopCurrent(&saved));
    CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
    assert_int_equal(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p),
                     CUDA_ERROR_INVALID_CONTEXT);
    CK(cuCtxPushCurrent(saved));
    /* Copies and memsets. */
    unsigned char h[4096], g[4096];
    for (int i = 0; i < 4096; i++)
        h[i] = (unsigned char)(i * 7);
    CK(cuMemcpyHtoD(p + 100, h, sizeof(h)));
    CK(cuMemcpyDtoH(g, p + 100, sizeof(g)));
    assert_memory_equal(h, g, sizeof(h));
    CUdeviceptr q;
    CK(cuMemAlloc(&q, 8192));
    CK(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, q));
    assert_true(id1 != id2);
    CK(cuMemcpyDtoD(q, p + 100, 4096));
    CK(cuMemcpy((CUdeviceptr)g, q, 4096));
    assert_memory_equal(h, g, sizeof(h));
    CK(cuMemsetD8(q, 0xab, 8192));
    CK(cuMemsetD16(q + 2, 0x1234, 3));
    CK(cuMemsetD32(q + 8, 0xdeadbeef, 2));
    unsigned char qq[32];
    CK(cuMemcpyDtoH(qq, q, sizeof(qq)));
    assert_int_equal(qq[0], 0xab);
    assert_int_equal(*(const unsigned short *)(qq + 2), 0x1234);
    assert_int_equal(*(const unsigned short *)(qq + 6), 0x1234);
    assert_int_equal(*(const unsigned *)(qq + 8), 0xdeadbeef);
    assert_int_equal(*(const unsigned *)(qq + 12), 0xdeadbeef);
    assert_int_equal(qq[16], 0xab);
    assert_int_equal(cuMemsetD16(q + 1, 1, 1), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemsetD32(q + 2, 1, 1), CUDA_ERROR_INVALID_VALUE);
    /* Peer copy between devices without peer access: the driver stages it. */
    CUcontext c1 = st_primary(1);
    CUdeviceptr r1;
    CK(cuMemAlloc(&r1, 4096));
    CUcontext c0 = st_primary(0);
    CK(cuMemcpyPeer(r1, c1, p + 100, c0, 4096));
    CK(cuMemcpyDtoH(g, r1, 4096));
    assert_memory_equal(h, g, 4096);
    CK(cuCtxSetCurrent(c1));
    CK(cuMemFree(r1));
    CK(cuCtxSetCurrent(c0));
    /* 2D copy and pitched allocation. */
    CUdeviceptr pitched;
    size_t pitch;
    CK(cuMemAllocPitch(&pitched, &pitch, 100, 4, 4));
    assert_true(pitch >= 100 && pitch % 256 == 0);
    CUDA_MEMCPY2D c2;
    memset(&c2, 0, sizeof(c2));
    c2.srcMemoryType = CU_MEMORYTYPE_HOST;
    c2.srcHost = h;
    c2.srcPitch = 100;
    c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c2.dstDevice = pitched;
    c2.dstPitch = pitch;
    c2.WidthInBytes = 100;
    c2.Height = 4;
    CK(cuMemcpy2D(&c2));
    unsigned char row[100];
    CK(cuMemcpyDtoH(row, pitched + 3 * pitch, sizeof(row)));
    assert_memory_equal(row, h + 300, 100);
    assert_int_equal(cuMemAllocPitch(&pitched, &pitch, 100, 4, 3), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemFree(q));
    CK(cuMemFree(p));
    CK(cuMemGetInfo(&free1, &total));
    /* Bad input: the documented codes, never a crash. */
    assert_int_equal(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);          /* double free */
    assert_int_equal(cuMemFree((CUdeviceptr)&x), CUDA_ERROR_INVALID_VALUE); /* unknown */
    CK(cuMemFree(0));
    assert_int_equal(cuMemAlloc(&p, 0), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemAlloc(NULL, 16), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemAlloc(&p, (size_t)41 << 30), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cuMemAlloc(&p, SIZE_MAX), CUDA_ERROR_OUT_OF_MEMORY);
    assert_int_equal(cuMemcpyHtoD((CUdeviceptr)&x, h, 4), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemcpyDtoH(g, 12345, 4), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuMemGetAddressRange(&base, &size, (CUdeviceptr)&x), CUDA_ERROR_NOT_FOUND);
    assert_int_equal(cuMemGetInfo(NULL, &total), CUDA_ERROR_INVALID_VALUE);
}

static void test_memory_capacity(void **state)
{
    (void)state;
    st_primary(3); /* the 16G T4 */
    size_t f0, f1, total;
    CK(cuMemGetInfo(&f0, &total));
    CUdeviceptr p[3];
    /* Untouched allocations cost no physical memory: 3 x 5 GiB is fine. */
    for (int i = 0; i < 3; i++)
        CK(cuMemAlloc(&p[i], (size_t)5 << 30));
    CK(cuMemGetInfo(&f1, &total));
    assert_true(f0 - f1 == (size_t)15 << 30);
    CUdeviceptr q;
    assert_int_equal(cuMemAlloc(&q, (size_t)2 << 30), CUDA_ERROR_OUT_OF_MEMORY);
    CK(cuMemFree(p[1]));
    CK(cuMemAlloc(&q, (size_t)2 << 30));
    CK(cuMemFree(q));
    CK(cuMemFree(p[0]));
    CK(cuMemFree(p[2]));
    CK(cuMemGetInfo(&f1, &total));
    assert_true(f1 == f0);
}

static void test_host_memory(void **state)
{
    (void)state;
    st_primary(0);
    void *h;
    CK(cuMemAllocHost(&h, 10000));
    memset(h, 1, 10000);
    unsigned type;
    CK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)h));
    assert_int_equal(type, CU_MEMORYTYPE_HOST);
    void *hp;
    CK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, (CUdeviceptr)h + 5));
    assert_ptr_equal(hp, (char *)h + 5);
    CUdeviceptr dp;
    CK(cuMemHostGetDevicePointer(&dp, h, 0));
    assert_true(dp == (CUdeviceptr)h);
    CK(cuMemFreeHost(h));
    assert_int_equal(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemHostAlloc(&h, 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    unsigned fl;
    CK(cuMemHostGetFlags(&fl, h));
    assert_int_equal(fl, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    assert_int_equal(cuMemHostAlloc(&h, 4096, 0x80), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemFreeHost(h));
    static char buf[8192];
    CK(cuMemHostRegister(buf, sizeof(buf), 0));
    assert_int_equal(cuMemHostRegister(buf + 100, 10, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CK(cuMemHostGetDevicePointer(&dp, buf + 10, 0));
    CK(cuMemHostUnregister(buf));
    assert_int_equal(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    assert_int_equal(cuMemHostGetDevicePointer(&dp, buf, 0), CUDA_ERROR_INVALID_VALUE);
}

static CUdeviceptr g_freed;
static volatile int *g_pinned;
static int touch_freed(void *arg)
{
    (void)arg;
    signal(SIGSEGV, SIG_DFL);
    signal(SIGBUS, SIG_DFL);
    volatile int *p = (volatile int *)(uintptr_t)g_freed;
    return *p == 12345 ? 3 : 4;
}

static int touch_pinned(void *arg)
{
    (void)arg;
    return g_pinned[0] == 42 ? 0 : 4;
}

/* Device memory is not host memory (SIMCUDA_ISOLATION=1): a host access to
 * a live allocation faults, as on a GPU machine without HMM; so does one to
 * a freed allocation; pinned host memory reads fine (the control). */
static void test_freed_memory_faults(void **state)
{
    (void)state;
    st_primary(0);
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 1 << 20));
    CK(cuMemsetD32(p, 42, 1));
    int *pin;
    CK(cuMemAllocHost((void **)&pin, 4096));
    CK(cuMemcpyDtoH(pin, p, 4));
    g_pinned = pin;
    g_freed = p;
    assert_int_equal(st_wait(st_fork(touch_pinned, NULL)), 0);
    assert_int_equal(st_wait(st_fork(touch_freed, NULL)), 128 + SIGSEGV); /* live */
    CK(cuMemFree(p));
    assert_int_equal(st_wait(st_fork(touch_freed, NULL)), 128 + SIGSEGV); /* freed */
    /* A copy from freed memory is refused up front. */
    int x;
    assert_int_equal(cuMemcpyDtoH(&x, p, 4), CUDA_ERROR_INVALID_VALUE);
    CK(cuMemFreeHost(pin));
}

/* ---- streams and events --------------------------------------------------------------- */
static void test_async_is_async(void **state)
{
    (void)state;
    st_primary(0);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 4096));
    CK(cuMemsetD32(p, 0, 1024));
    st_gate_t *g = st_gate_new();
    st_gate_block(g, s);
    CK(cuMemsetD32Async(p, 7, 1024, s));
    int *h; /* pinned: a copy to pageable memory would wait for the stream */
    CK(cuMemAllocHost((void **)&h, 1024 * sizeof(int)));
    for (int i = 0; i < 1024; i++)
        h[i] = -1;
    CK(cuMemcpyDtoHAsync(h, p, 1024 * sizeof(int), s));
    /* The work is queued, not done: a caller that forgets to synchronise
     * sees stale data, as on a GPU. */
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    assert_int_equal(peek32(p), 0); /* the legacy stream does not wait for s */
    assert_int_equal(h[5], -1);
    st_gate_open(g);
    CK(cuStreamSynchronize(s));
    CK(cuStreamQuery(s));
    assert_int_equal(h[5], 7);
    assert_int_equal(peek32(p), 7);
    CK(cuMemFreeHost(h));
    unsigned flags;
    int prio;
    CUcontext ctx, cur;
    CK(cuStreamGetFlags(s, &flags));
    assert_int_equal(flags, CU_STREAM_NON_BLOCKING);
    CK(cuStreamGetPriority(s, &prio));
    CK(cuStreamGetCtx(s, &ctx));
    CK(cuCtxGetCurrent(&cur));
    assert_ptr_equal(ctx, cur);
    unsigned long long id1, id2;
    CK(cuStreamGetId(s, &id1));
    CK(cuStreamGetId(NULL, &id2));
    assert_true(id1 != id2);
    CK(cuStreamDestroy(s));
    assert_int_equal(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuStreamQuery((CUstream)&flags), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuStreamCreate(&s, 0x10), CUDA_ERROR_INVALID_VALUE);
    CK(cuStreamCreateWithPriority(&s, 0, -100));
    CK(cuStreamGetPriority(s, &prio));
    assert_int_equal(prio, -5);
    CK(cuStreamDestroy(s));
    CK(cuMemFree(p));
    st_gate_free(g);
}

static void test_pageable_copies(void **state)
{
    (void)state;
    st_primary(0);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 64));
    int src[16], dst[16];
    for (int i = 0; i < 16; i++)
        src[i] = i;
    st_gate_t *g = st_gate_new();
    st_gate_block(g, s);
    /* From pageable memory the source is staged when the call returns... */
    CK(cuMemcpyHtoDAsync(p, src, sizeof(src), s));
    for (int i = 0; i < 16; i++)
        src[i] = -1;
    st_gate_open(g);
    CK(cuStreamSynchronize(s));
    assert_int_equal(peek32(p + 9 * sizeof(int)), 9);
    /* ... and to pageable memory the call returns when the copy is done. */
    memset(dst, 0, sizeof(dst));
    CK(cuMemcpyDtoHAsync(dst, p, sizeof(dst), s));
    assert_int_equal(dst[15], 15);
    CK(cuMemFree(p));
    CK(cuStreamDestroy(s));
    st_gate_free(g);
}

static void test_events_order_streams(void **state)
{
    (void)state;
    st_primary(0);
    CUstream a, b;
    CK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    CUdeviceptr x, y;
    CK(cuMemAlloc(&x, 4));
    CK(cuMemAlloc(&y, 4));
    CUevent e;
    CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));

    /* Negative control: without the event, b copies x before a wrote it. */
    CK(cuMemsetD32(x, 0, 1));
    st_gate_t *g = st_gate_new();
    st_gate_block(g, a);
    CK(cuMemsetD32Async(x, 1, 1, a));
    CK(cuMemcpyDtoDAsync(y, x, 4, b));
    CK(cuStreamSynchronize(b));
    assert_int_equal((int)peek32(y), 0);
    st_gate_open(g);
    CK(cuStreamSynchronize(a));
    st_gate_free(g);

    /* With the event, b waits for a. */
    CK(cuMemsetD32(x, 0, 1));
    CK(cuMemsetD32(y, 0, 1));
    g = st_gate_new();
    st_gate_block(g, a);
    CK(cuMemsetD32Async(x, 2, 1, a));
    CK(cuEventRecord(e, a));
    assert_int_equal(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    CK(cuStreamWaitEvent(b, e, 0));
    CK(cuMemcpyDtoDAsync(y, x, 4, b));
    assert_int_equal(cuStreamQuery(b), CUDA_ERROR_NOT_READY);
    st_gate_open(g);
    CK(cuStreamSynchronize(b));
    assert_int_equal((int)peek32(y), 2);
    CK(cuEventQuery(e));
    CK(cuEventSynchronize(e));
    float ms;
    assert_int_equal(cuEventElapsedTime(&ms, e, e), CUDA_ERROR_INVALID_HANDLE); /* no timing */
    CK(cuEventDestroy(e));
    assert_int_equal(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuEventRecord(e, a), CUDA_ERROR_INVALID_HANDLE);
    st_gate_free(g);

    /* Timing events. */
    CUevent t0, t1;
    CK(cuEventCreate(&t0, 0));
    CK(cuEventCreate(&t1, CU_EVENT_BLOCKING_SYNC));
    assert_int_equal(cuEventElapsedTime(&ms, t0, t1), CUDA_ERROR_INVALID_HANDLE); /* never recorded */
    CK(cuEventQuery(t0)); /* never recorded: complete */
    CK(cuEventSynchronize(t0));
    g = st_gate_new();
    CK(cuEventRecord(t0, a));
    st_gate_block(g, a);
    CK(cuEventRecord(t1, a));
    assert_int_equal(cuEventElapsedTime(&ms, t0, t1), CUDA_ERROR_NOT_READY);
    st_gate_open(g);
    CK(cuEventSynchronize(t1));
    CK(cuEventElapsedTime(&ms, t0, t1));
    assert_true(ms >= 0);
    CK(cuEventElapsedTime_v2(&ms, t0, t1));
    CK(cuEventRecordWithFlags(t0, NULL, 0));
    CK(cuEventSynchronize(t0));
    assert_int_equal(cuEventCreate(&e, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuEventCreate(&e, 0x100), CUDA_ERROR_INVALID_VALUE);
    CK(cuEventDestroy(t0));
    CK(cuEventDestroy(t1));
    CK(cuStreamDestroy(a));
    CK(cuStreamDestroy(b));
    CK(cuMemFree(x));
    CK(cuMemFree(y));
    st_gate_free(g);
}

/* An event and its stream complete together: after synchronising one, the
 * other is never reported busy. */
static void test_event_stream_consistency(void **state)
{
    (void)state;
    st_primary(0);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUevent e;
    CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 1 << 16));
    for (int i = 0; i < 300; i++) {
        CK(cuMemsetD8Async(p, (unsigned char)i, 1 << 16, s));
        CK(cuEventRecord(e, s));
        if (i & 1) {
            CK(cuEventSynchronize(e));
            CK(cuStreamQuery(s));
        } else {
            CK(cuStreamSynchronize(s));
            CK(cuEventQuery(e));
        }
    }
    CK(cuEventDestroy(e));
    CK(cuStreamDestroy(s));
    CK(cuMemFree(p));
}

static void test_legacy_default_stream(void **state)
{
    (void)state;
    st_primary(0);
    CUstream blocking, nonblocking;
    CK(cuStreamCreate(&blocking, 0));
    CK(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING));
    CUdeviceptr x;
    CK(cuMemAlloc(&x, 4));
    CK(cuMemsetD32(x, 0, 1));
    /* A blocked non-blocking stream does not hold the legacy stream. */
    st_gate_t *g = st_gate_new();
    st_gate_block(g, nonblocking);
    CK(cuMemsetD32Async(x, 5, 1, NULL));
    CK(cuStreamSynchronize(NULL));
    assert_int_equal((int)peek32(x), 5);
    st_gate_open(g);
    CK(cuStreamSynchronize(nonblocking));
    st_gate_free(g);
    /* A blocked blocking stream holds it: work on NULL waits behind. */
    g = st_gate_new();
    st_gate_block(g, blocking);
    CK(cuMemsetD32Async(x, 6, 1, CU_STREAM_LEGACY));
    assert_int_equal(cuStreamQuery(NULL), CUDA_ERROR_NOT_READY);
    assert_int_equal((int)peek32_on(nonblocking, x), 5);
    /* ... and work on the blocking stream waits for the legacy stream. */
    st_gate_open(g);
    CK(cuStreamSynchronize(NULL));
    assert_int_equal((int)peek32_on(nonblocking, x), 6);
    st_gate_free(g);
    g = st_gate_new();
    st_gate_block(g, CU_STREAM_LEGACY);
    CK(cuMemsetD32Async(x, 7, 1, blocking));
    assert_int_equal(cuStreamQuery(blocking), CUDA_ERROR_NOT_READY);
    st_gate_open(g);
    CK(cuStreamSynchronize(blocking));
    assert_int_equal((int)peek32_on(nonblocking, x), 7);
    st_gate_free(g);
    CK(cuCtxSynchronize());
    CK(cuStreamDestroy(blocking));
    CK(cuStreamDestroy(nonblocking));
    CK(cuMemFree(x));
}

typedef struct { CUcontext ctx; st_gate_t *g; int result; CUdeviceptr x; } ptds_arg_t;

static void *ptds_thread(void *arg)
{
    ptds_arg_t *a = arg;
    cuCtxSetCurrent(a->ctx);
    CUdeviceptr x = a->x;
    /* This thread's per-thread stream is free although another's is blocked. */
    int v = 0;
    a->result = cuMemsetD32Async_ptsz(x, 9, 1, NULL) == CUDA_SUCCESS &&
                cuStreamSynchronize(CU_STREAM_PER_THREAD) == CUDA_SUCCESS &&
                cuMemcpyDtoH_v2_ptds(&v, x, sizeof(v)) == CUDA_SUCCESS && v == 9;
    return NULL;
}

static void test_per_thread_stream(void **state)
{
    (void)state;
    CUcontext c = st_primary(0);
    CUdeviceptr x, y;
    CK(cuMemAlloc(&x, 4));
    CK(cuMemAlloc(&y, 4));
    CK(cuMemsetD32(x, 0, 1));
    /* (Synchronous calls on the legacy stream would wait for the blocked
     * per-thread stream, as on a GPU: none below until the gate opens.) */
    st_gate_t *g = st_gate_new();
    st_gate_block(g, CU_STREAM_PER_THREAD);
    CK(cuMemsetD32Async_ptsz(x, 3, 1, NULL)); /* NULL means this thread's stream */
    assert_int_equal(cuStreamQuery_ptsz(NULL), CUDA_ERROR_NOT_READY);
    ptds_arg_t a = {c, g, 0, y};
    pthread_t t;
    pthread_create(&t, NULL, ptds_thread, &a);
    pthread_join(t, NULL);
    assert_int_equal(a.result, 1);
    CUstream nb; /* a look at x that waits for no other stream */
    CK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
    assert_int_equal(peek32_on(nb, x), 0);
    st_gate_open(g);
    CK(cuStreamSynchronize_ptsz(NULL));
    assert_int_equal(peek32_on(nb, x), 3);
    CK(cuStreamDestroy(nb));
    int h = 0;
    CK(cuMemcpyDtoH_v2_ptds(&h, x, 4));
    assert_int_equal(h, 3);
    CK(cuMemFree(x));
    CK(cuMemFree(y));
    st_gate_free(g);
}

static void host_count(void *arg) { (*(int *)arg)++; }
static CUresult g_cb_status = (CUresult)-1;
static void cb_fn(CUstream s, CUresult st, void *arg)
{
    (void)s;
    g_cb_status = st;
    (*(int *)arg) += 10;
}

static void test_host_functions(void **state)
{
    (void)state;
    st_primary(0);
    CUstream s;
    CK(cuStreamCreate(&s, 0));
    int n = 0;
    for (int i = 0; i < 1000; i++)
        CK(cuLaunchHostFunc(s, host_count, &n));
    CK(cuStreamAddCallback(s, cb_fn, &n, 0));
    CK(cuStreamSynchronize(s));
    assert_int_equal(n, 1010);
    assert_int_equal(g_cb_status, CUDA_SUCCESS);
    assert_int_equal(cuLaunchHostFunc(s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuStreamAddCallback(s, cb_fn, &n, 1), CUDA_ERROR_INVALID_VALUE);
    CK(cuStreamDestroy(s));
}

/* ---- threads ----------------------------------------------------------------------------- */
static void *worker_thread(void *arg)
{
    CUcontext c = arg;
    cuCtxSetCurrent(c);
    CUstream s;
    if (cuStreamCreate(&s, 0) != CUDA_SUCCESS)
        return (void *)1;
    unsigned char in[8192], out[8192];
    for (int it = 0; it < 50; it++) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, sizeof(in)) != CUDA_SUCCESS)
            return (void *)2;
        for (size_t i = 0; i < sizeof(in); i++)
            in[i] = (unsigned char)(i + it + (uintptr_t)&s);
        if (cuMemcpyHtoDAsync(p, in, sizeof(in), s) || cuMemcpyDtoHAsync(out, p, sizeof(out), s) ||
            cuStreamSynchronize(s) || memcmp(in, out, sizeof(in)) != 0)
            return (void *)3;
        if (cuMemFree(p) != CUDA_SUCCESS)
            return (void *)4;
    }
    cuStreamDestroy(s);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    CUcontext c = st_primary(0);
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, worker_thread, c);
    for (int i = 0; i < 8; i++) {
        void *r;
        pthread_join(t[i], &r);
        assert_null(r);
    }
}

/* ---- processes sharing one GPU ---------------------------------------------------------- */
typedef struct { int to_child[2], to_parent[2]; } pipes_t;

static char g_cap_shm[96];

static void child_env(void)
{
    setenv("SIMCUDA_SHM_NAME", g_cap_shm, 1); /* a table of their own */
    setenv("SIMCUDA_DEVICES", "a100:64M", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
}

static int proc_a(void *arg) /* holds 40 MiB until told to go */
{
    pipes_t *pp = arg;
    child_env();
    CUdeviceptr p;
    char c = 'x';
    st_primary(0);
    if (cuMemAlloc(&p, 40 << 20) != CUDA_SUCCESS)
        c = 'f';
    if (write(pp->to_parent[1], &c, 1) != 1)
        return 2;
    if (read(pp->to_child[0], &c, 1) != 1)
        return 3;
    return 0;
}

static int proc_b(void *arg) /* sees A's use, runs out beyond it */
{
    (void)arg;
    child_env();
    st_primary(0);
    size_t fr, tot;
    if (cuMemGetInfo(&fr, &tot) != CUDA_SUCCESS)
        return 10;
    if (tot != 64 << 20 || fr != 24 << 20)
        return 11;
    CUdeviceptr p;
    if (cuMemAlloc(&p, 40 << 20) != CUDA_ERROR_OUT_OF_MEMORY)
        return 12;
    if (cuMemAlloc(&p, 20 << 20) != CUDA_SUCCESS)
        return 13;
    return 0; /* exits holding 20 MiB without freeing */
}

static int proc_c(void *arg) /* after A and B died: everything is free again */
{
    (void)arg;
    child_env();
    st_primary(0);
    CUdeviceptr p;
    if (cuMemAlloc(&p, 60 << 20) != CUDA_SUCCESS)
        return 20;
    size_t fr, tot;
    cuMemGetInfo(&fr, &tot);
    if (fr != 4 << 20)
        return 21;
    return 0;
}

static void test_processes_share_capacity(void **state)
{
    (void)state;
    pipes_t pp;
    snprintf(g_cap_shm, sizeof(g_cap_shm), "%s-cap", st_shm_name());
    shm_unlink(g_cap_shm);
    assert_int_equal(pipe(pp.to_child), 0);
    assert_int_equal(pipe(pp.to_parent), 0);
    int a = st_fork(proc_a, &pp);
    char c;
    assert_int_equal(read(pp.to_parent[0], &c, 1), 1);
    assert_int_equal(c, 'x');
    assert_int_equal(st_wait(st_fork(proc_b, NULL)), 0);
    /* A dies without freeing (killed): its use is reclaimed by the next process. */
    kill(a, SIGKILL);
    assert_int_equal(st_wait(a), 128 + SIGKILL);
    assert_int_equal(st_wait(st_fork(proc_c, NULL)), 0);
    close(pp.to_child[0]);
    close(pp.to_child[1]);
    close(pp.to_parent[0]);
    close(pp.to_parent[1]);
    shm_unlink(g_cap_shm);
}

/* The shared table starts with magic, version and size: a table of another
 * layout (another simcuda version), a short one, or a bad SIMCUDA_SHM_NAME
 * is refused with a message, and the process keeps its capacity to itself. */
static char *run_child_shm(const char *name)
{
    char env_shm[160];
    snprintf(env_shm, sizeof(env_shm), "SIMCUDA_SHM_NAME=%s", name);
    char *env[] = {(char *)"SIMCUDA_DEVICES=a100:1G", (char *)"CUDA_VISIBLE_DEVICES=", env_shm, NULL};
    char *argv[] = {(char *)g_self, (char *)"--child-devices", NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 60, &r), 0);
    assert_int_equal(r.status, 0);
    return r.out;
}

static void make_table(const char *name, size_t size, uint64_t magic, uint32_t version, uint32_t tsize)
{
    shm_unlink(name);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    unsigned char head[16];
    memcpy(head, &magic, 8);
    memcpy(head + 8, &version, 4);
    memcpy(head + 12, &tsize, 4);
    assert_int_equal(pwrite(fd, head, sizeof(head), 0), (ssize_t)sizeof(head));
    close(fd);
}

static void test_capacity_table_checked(void **state)
{
    (void)state;
    const uint64_t magic = 0x31534d4355444d53ULL; /* sim/driver/capacity.c */
    const size_t size = 16 + 8 * 64 + 256 * (16 + 8 * 64);
    char name[128];
    snprintf(name, sizeof(name), "%s-layout", st_shm_name());
    /* The genuine header: accepted, no message (the positive control). */
    make_table(name, size, magic, 1, (uint32_t)size);
    char *out = run_child_shm(name);
    assert_non_null(strstr(out, "count 1\n"));
    assert_null(strstr(out, "per process"));
    free(out);
    make_table(name, size, magic, 2, (uint32_t)size); /* another version */
    out = run_child_shm(name);
    assert_non_null(strstr(out, "another layout (capacity is per process)"));
    assert_non_null(strstr(out, "count 1\n"));
    free(out);
    make_table(name, size, magic, 1, (uint32_t)size - 8); /* another size */
    out = run_child_shm(name);
    assert_non_null(strstr(out, "another layout"));
    free(out);
    make_table(name, size, magic ^ 1, 1, (uint32_t)size); /* not our magic */
    out = run_child_shm(name);
    assert_non_null(strstr(out, "another layout"));
    free(out);
    make_table(name, 64, magic, 1, (uint32_t)size); /* too short */
    out = run_child_shm(name);
    assert_non_null(strstr(out, "wrong size"));
    free(out);
    shm_unlink(name);
    out = run_child_shm("no-slash");
    assert_non_null(strstr(out, "SIMCUDA_SHM_NAME='no-slash' must look like /name"));
    free(out);
}

/* ---- cuGetProcAddress ------------------------------------------------------------------------ */
static void test_interposer_cannot_hijack(void **state)
{
    (void)state;
    /* Keep a sanitizer runtime first in LD_PRELOAD when there is one. */
    char env_pre[4096], env_shm[128];
    es_preload_env(es_build_path("tests/sim/driver/libinterposer.so"), env_pre, sizeof(env_pre));
    snprintf(env_shm, sizeof(env_shm), "SIMCUDA_SHM_NAME=%s", st_shm_name());
    char *env[] = {env_pre, env_shm, NULL};
    char *argv[] = {(char *)g_self, (char *)"--child-interposed", NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 60, &r), 0);
    if (r.status != 0)
        fail_msg("interposed child: status %d: %s", r.status, r.out);
    assert_non_null(strstr(r.out, "interposed ok"));
    es_proc_result_free(&r);
}

static void test_get_proc_address(void **state)
{
    (void)state;
    void *fn, *want;
    CUdriverProcAddressQueryResult st;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(lib);
#define SYM(n) dlsym(lib, n)
    CK(cuGetProcAddress("cuMemAlloc", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    assert_int_equal(st, CU_GET_PROC_ADDRESS_SUCCESS);
    assert_ptr_equal(fn, SYM("cuMemAlloc_v2"));
    CK(cuGetProcAddress("cuMemAlloc", &fn, 3020, 0, &st));
    assert_ptr_equal(fn, SYM("cuMemAlloc_v2"));
    /* cuda.h: "The API will return CUDA_SUCCESS and set the returned pfn to
     * NULL if ... no ABI compatible driver function exists for the specified
     * cudaVersion or if the driver symbol is invalid." */
    fn = (void *)1;
    CK(cuGetProcAddress("cuMemAlloc", &fn, 2000, 0, &st));
    assert_int_equal(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    assert_null(fn);
    CK(cuGetProcAddress("cuCtxCreate", &fn, 13000, 0, &st));
    assert_ptr_equal(fn, SYM("cuCtxCreate_v4"));
    CK(cuGetProcAddress("cuCtxCreate", &fn, 12000, 0, &st));
    assert_ptr_equal(fn, SYM("cuCtxCreate_v3"));
    CK(cuGetProcAddress("cuCtxCreate", &fn, 4000, 0, &st));
    assert_ptr_equal(fn, SYM("cuCtxCreate_v2"));
    CK(cuGetProcAddress("cuEventElapsedTime", &fn, 13000, 0, &st));
    assert_ptr_equal(fn, SYM("cuEventElapsedTime_v2"));
    CK(cuGetProcAddress("cuEventElapsedTime", &fn, 12000, 0, &st));
    assert_ptr_equal(fn, SYM("cuEventElapsedTime"));
    CK(cuGetProcAddress("cuGetProcAddress", &fn, 13000, 0, &st));
    assert_ptr_equal(fn, SYM("cuGetProcAddress_v2"));
    /* Per-thread default stream variants. */
    CK(cuGetProcAddress("cuMemcpyHtoDAsync", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    want = SYM("cuMemcpyHtoDAsync_v2_ptsz");
    assert_non_null(want);
    assert_ptr_equal(fn, want);
    CK(cuGetProcAddress("cuMemcpyHtoDAsync", &fn, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st));
    assert_ptr_equal(fn, SYM("cuMemcpyHtoDAsync_v2"));
    CK(cuGetProcAddress("cuMemcpyHtoD", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    assert_ptr_equal(fn, SYM("cuMemcpyHtoD_v2_ptds"));
    CK(cuGetProcAddress("cuLaunchKernel", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    assert_ptr_equal(fn, SYM("cuLaunchKernel_ptsz"));
    CK(cuGetProcAddress("cuStreamSynchronize", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
    assert_ptr_equal(fn, SYM("cuStreamSynchronize"));
    /* A function without a per-thread variant: the normal one. */
    CK(cuGetProcAddress("cuMemAlloc", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    assert_ptr_equal(fn, SYM("cuMemAlloc_v2"));
    /* Unknown names, bad arguments. */
    fn = (void *)1;
    CK(cuGetProcAddress("cuNoSuchFunction", &fn, 13000, 0, &st));
    assert_null(fn);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    fn = (void *)1;
    st = CU_GET_PROC_ADDRESS_SUCCESS;
    CK(cuGetProcAddress("cuMemAlloc_v2", &fn, 13000, 0, &st)); /* base names only */
    assert_null(fn);
    assert_int_equal(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    fn = (void *)1;
    CK(cuGetProcAddress("cuNoSuchFunction", &fn, 13000, 0, NULL)); /* status is optional */
    assert_null(fn);
    assert_int_equal(cuGetProcAddress(NULL, &fn, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuGetProcAddress("cuInit", NULL, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuGetProcAddress("cuInit", &fn, 13000, 0x80, &st), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuGetProcAddress("cuInit", &fn, 99000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    /* The v1 entry point (4 arguments). */
    typedef CUresult (*gp1_t)(const char *, void **, int, cuuint64_t);
    gp1_t gp1;
    void *v1 = SYM("cuGetProcAddress");
    assert_non_null(v1);
    memcpy(&gp1, &v1, sizeof(gp1));
    CK(gp1("cuStreamQuery", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
    assert_ptr_equal(fn, SYM("cuStreamQuery_ptsz"));
    fn = (void *)1; /* no status to report with: an error */
    assert_int_equal(gp1("cuNoSuchFunction", &fn, 12000, 0), CUDA_ERROR_NOT_FOUND);
    assert_null(fn);
    /* Functions simcuda does not simulate: found, and say so. */
    CK(cuGetProcAddress("cuGraphUpload", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    assert_ptr_equal(fn, SYM("cuGraphUpload_ptsz"));
    typedef CUresult (*glaunch_t)(CUgraphExec, CUstream);
    glaunch_t gl;
    memcpy(&gl, &fn, sizeof(gl));
    assert_int_equal(gl(NULL, NULL), CUDA_ERROR_NOT_SUPPORTED);
    assert_int_equal(cuArrayCreate(NULL, NULL), CUDA_ERROR_NOT_SUPPORTED);
    /* The default stream is not capturing. */
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    st_primary(0);
    CK(cuStreamIsCapturing(NULL, &cs));
    assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_NONE);
    /* Everything the libraries ask for (sim/common/simdrv.h), at the version
     * whose signature they call, resolves. */
    static const struct { const char *name; int ver; } needed[] = {
#define NEEDED(name, ver, args) {#name, ver},
        SIMDRV_FUNCS(NEEDED)
#undef NEEDED
    };
    for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++) {
        fn = NULL;
        CK(cuGetProcAddress(needed[i].name, &fn, needed[i].ver, 0, &st));
        if (!fn)
            fail_msg("%s at %d not found", needed[i].name, needed[i].ver);
    }
    /* CUDA 13 gave cuCtxSynchronize and cuCtxGetDevice a context argument:
     * asking for 13000 gets the new ABI, anything older the old one. */
    CK(cuGetProcAddress("cuCtxSynchronize", &fn, 13000, 0, &st));
    assert_ptr_equal(fn, SYM("cuCtxSynchronize_v2"));
    CK(cuGetProcAddress("cuCtxSynchronize", &fn, 12090, 0, &st));
    assert_ptr_equal(fn, SYM("cuCtxSynchronize"));
    CK(cuGetProcAddress("cuCtxGetDevice", &fn, 13000, 0, &st));
    assert_ptr_equal(fn, SYM("cuCtxGetDevice_v2"));
    CK(cuGetProcAddress("cuCtxGetDevice", &fn, 12000, 0, &st));
    assert_ptr_equal(fn, SYM("cuCtxGetDevice"));
    /* Stream memory operations came in their _v2 form with CUDA 11.7. */
    CK(cuGetProcAddress("cuStreamWaitValue32", &fn, 11070, 0, &st));
    assert_ptr_equal(fn, SYM("cuStreamWaitValue32_v2"));
    /* Exported symbols beyond the table: legacy and per-thread names. */
    static const char *exported[] = {"cuCtxDestroy", "cuCtxPushCurrent", "cuStreamDestroy",
        "cuEventDestroy", "cuDeviceGetUuid", "cuDevicePrimaryCtxRelease", "cuMemcpy_ptds",
        "cuMemcpyAsync_ptsz", "cuMemsetD8_v2_ptds", "cuStreamWaitEvent_ptsz", "cuEventRecord_ptsz",
        "cuLaunchHostFunc_ptsz", "cuLaunchKernelEx_ptsz", "cuMemAllocAsync_ptsz", "cuDeviceTotalMem_v2"};
    for (size_t i = 0; i < sizeof(exported) / sizeof(exported[0]); i++)
        if (!SYM(exported[i]))
            fail_msg("%s not exported", exported[i]);
#undef SYM
}

/* A program written against cuda.h links against simcuda whatever it calls:
 * every function cuda.h declares under its own name (not renamed by a macro
 * to a _v2/_ptsz form, which are checked above) is exported and answered by
 * cuGetProcAddress. Those simcuda does not simulate say
 * CUDA_ERROR_NOT_SUPPORTED. */
static int is_versioned(const char *n)
{
    const char *u = strrchr(n, '_');
    if (!u)
        return 0;
    if (!strcmp(u, "_ptsz") || !strcmp(u, "_ptds"))
        return 1;
    if (u[1] != 'v' || !u[2])
        return 0;
    for (const char *q = u + 2; *q; q++)
        if (*q < '0' || *q > '9')
            return 0;
    return 1;
}

static void test_every_plain_function_exported(void **state)
{
    (void)state;
    FILE *f = fopen(ST_CUDA_H, "r");
    assert_non_null(f);
    enum { MAXN = 4096 };
    static char decl[MAXN][80], ren[MAXN][80];
    int nd = 0, nr = 0;
    char line[4096];
    int split = 0; /* the previous line was "CUresult CUDAAPI" alone */
    while (fgets(line, sizeof(line), f)) {
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (split && !strncmp(p, "cu", 2) && nd < MAXN && sscanf(p, "%79[A-Za-z0-9_]", decl[nd]) == 1)
            nd++;
        split = !strncmp(p, "CUresult CUDAAPI", 16) && strspn(p + 16, " \t\r\n") == strlen(p + 16);
        if (*p == '#') {
            p++;
            while (*p == ' ' || *p == '\t')
                p++;
            if (!strncmp(p, "define", 6) && (p[6] == ' ' || p[6] == '\t')) {
                p += 6;
                while (*p == ' ' || *p == '\t')
                    p++;
                if (!strncmp(p, "cu", 2) && nr < MAXN && sscanf(p, "%79[A-Za-z0-9_]", ren[nr]) == 1)
                    nr++;
            }
            continue;
        }
        for (char *q = strstr(line, "CUresult CUDAAPI cu"); q && nd < MAXN;
             q = strstr(q + 1, "CUresult CUDAAPI cu"))
            if (sscanf(q + 17, "%79[A-Za-z0-9_]", decl[nd]) == 1)
                nd++;
    }
    fclose(f);
    assert_true(nd > 400); /* the header was read */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(lib);
    int checked = 0, missing = 0;
    char miss[512] = "";
    for (int i = 0; i < nd; i++) {
        int renamed = 0;
        for (int k = 0; k < nr && !renamed; k++)
            renamed = !strcmp(decl[i], ren[k]);
        if (renamed || is_versioned(decl[i]))
            continue;
        checked++;
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        if (dlsym(lib, decl[i]) && cuGetProcAddress(decl[i], &fn, 13000, 0, &st) == CUDA_SUCCESS &&
            fn)
            continue;
        if (missing++ < 8)
            snprintf(miss + strlen(miss), sizeof(miss) - strlen(miss), " %.48s", decl[i]);
    }
    if (missing)
        fail_msg("%d of %d functions of cuda.h missing:%s", missing, checked, miss);
    assert_true(checked > 300);
    /* A few of those, as a cuda.h program calls them. */
    int v;
    assert_int_equal(cuOccupancyMaxActiveClusters(&v, NULL, NULL), CUDA_ERROR_NOT_SUPPORTED);
    CUipcMemHandle ipc;
    assert_int_equal(cuIpcGetMemHandle(&ipc, 0), CUDA_ERROR_NOT_SUPPORTED);
    CUmemoryPool pool;
    assert_int_equal(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_ERROR_NOT_SUPPORTED);
}

/* Every (function, version) that NVIDIA's cudaTypedefs.h names as
 * PFN_<name>_v<version>[_ptsz|_ptds] is answered by cuGetProcAddress with that
 * version (and the per-thread flag for the _ptsz/_ptds forms): CUDA 13.0's
 * runtime asks for old ABIs (cuStreamBeginCapture 10000, cuLinkCreate 5050,
 * ...) by their old versions. Left out, as in legacy.c: the 32-bit-size
 * forms that CUDA 3.2 replaced (a version below 3020 of a function that has
 * a 3020 one). */
static void test_every_typedef_version_answered(void **state)
{
    (void)state;
    FILE *f = fopen(ST_CUDA_TYPEDEFS_H, "r");
    assert_non_null(f);
    enum { MAXT = 2048 };
    static char name[MAXT][128];
    static int ver[MAXT], pt[MAXT];
    int n = 0;
    char line[4096];
    while (fgets(line, sizeof(line), f) && n < MAXT) {
        char *p = strstr(line, "(CUDAAPI *PFN_cu");
        if (!p)
            continue;
        char full[128];
        if (sscanf(p + 14, "%127[A-Za-z0-9_]", full) != 1)
            continue;
        char *v = NULL;
        for (char *q = strstr(full, "_v"); q; q = strstr(q + 1, "_v"))
            if (q[2] >= '0' && q[2] <= '9')
                v = q;
        if (!v)
            continue;
        *v = '\0';
        snprintf(name[n], sizeof(name[n]), "%s", full);
        ver[n] = atoi(v + 2);
        pt[n] = strstr(v + 2, "_ptsz") != NULL || strstr(v + 2, "_ptds") != NULL;
        n++;
    }
    fclose(f);
    assert_true(n > 500); /* the header was read */
    int checked = 0, missing = 0;
    char miss[512] = "";
    for (int i = 0; i < n; i++) {
        int replaced = 0;
        for (int k = 0; k < n && ver[i] < 3020 && !replaced; k++)
            replaced = ver[k] == 3020 && !strcmp(name[k], name[i]);
        if (replaced)
            continue;
        checked++;
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        cuuint64_t flags = pt[i] ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0;
        if (cuGetProcAddress(name[i], &fn, ver[i], flags, &st) == CUDA_SUCCESS && fn &&
            st == CU_GET_PROC_ADDRESS_SUCCESS)
            continue;
        if (missing++ < 6)
            snprintf(miss + strlen(miss), sizeof(miss) - strlen(miss), " %.48s@%d%s", name[i], ver[i],
                     pt[i] ? "(pt)" : "");
    }
    if (missing)
        fail_msg("%d of %d typedef versions not answered:%s", missing, checked, miss);
    assert_true(checked > 500);
    /* An old ABI is its own function, not the current one. */
    void *old = NULL, *cur = NULL;
    CUdriverProcAddressQueryResult st;
    CK(cuGetProcAddress("cuStreamBeginCapture", &old, 10000, 0, &st));
    CK(cuGetProcAddress("cuStreamBeginCapture", &cur, 13000, 0, &st));
    assert_non_null(old);
    assert_ptr_equal(old, dlsym(RTLD_DEFAULT, "cuStreamBeginCapture"));
    assert_ptr_equal(cur, dlsym(RTLD_DEFAULT, "cuStreamBeginCapture_v2"));
}

/* cuGetExportTable: NVIDIA's private tables are not provided; any table is
 * refused with CUDA_ERROR_NOT_SUPPORTED and a NULL table. */
static void test_export_tables_refused(void **state)
{
    (void)state;
    CK(cuInit(0));
    CUuuid id;
    memset(&id, 0x5a, sizeof(id));
    const void *table = &id;
    assert_int_equal(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
    assert_null(table);
    assert_int_equal(cuGetExportTable(NULL, &id), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuGetExportTable(&table, NULL), CUDA_ERROR_INVALID_VALUE);
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    CK(cuGetProcAddress("cuGetExportTable", &fn, 3000, 0, &st));
    assert_ptr_equal(fn, (void *)cuGetExportTable);
}

static void *thread_profiler(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)cuProfilerStart();
}

/* cuProfilerStart/Stop act on the current context (CUDA_ERROR_INVALID_CONTEXT
 * without one); repeated, they have no effect. */
static void test_profiler_start_stop(void **state)
{
    (void)state;
    st_primary(0);
    CK(cuProfilerStart());
    CK(cuProfilerStart());
    CK(cuProfilerStop());
    CK(cuProfilerStop());
    pthread_t t;
    void *ret;
    assert_int_equal(pthread_create(&t, NULL, thread_profiler, NULL), 0);
    assert_int_equal(pthread_join(t, &ret), 0);
    assert_int_equal((int)(intptr_t)ret, CUDA_ERROR_INVALID_CONTEXT);
}

/* SIMCUDA_TRACE is 0 or 1; 1 logs the lookups; anything else fails cuInit. */
static void test_trace_variable(void **state)
{
    (void)state;
    static const char *bad[] = {"yes", "2", " 1", "1 ", "01", "on"};
    char *argv[] = {(char *)g_self, (char *)"--child-devices", NULL};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char env_trace[64];
        snprintf(env_trace, sizeof(env_trace), "SIMCUDA_TRACE=%s", bad[i]);
        char *env[] = {(char *)"SIMCUDA_DEVICES=a100:1G", env_trace, NULL};
        es_proc_result_t r;
        assert_int_equal(es_run(argv, env, 60, &r), 0);
        if (!strstr(r.out, "init 1\n") || !strstr(r.out, "simcuda: SIMCUDA_TRACE="))
            fail_msg("SIMCUDA_TRACE=%s accepted: %s", bad[i], r.out);
        es_proc_result_free(&r);
    }
    char *env1[] = {(char *)"SIMCUDA_DEVICES=a100:1G", (char *)"SIMCUDA_TRACE=1", NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env1, 60, &r), 0);
    assert_non_null(strstr(r.out, "count 1\n"));
    assert_non_null(strstr(r.out, "simcuda trace: cuInit(0) -> 0\n"));
    es_proc_result_free(&r);
    char *env0[] = {(char *)"SIMCUDA_DEVICES=a100:1G", (char *)"SIMCUDA_TRACE=0", NULL};
    assert_int_equal(es_run(argv, env0, 60, &r), 0);
    assert_non_null(strstr(r.out, "count 1\n"));
    assert_null(strstr(r.out, "simcuda trace:"));
    es_proc_result_free(&r);
}

/* The handful of such functions simcuda does answer. */
static void test_plain_functions_answered(void **state)
{
    (void)state;
    st_primary(0);
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 4096));
    unsigned char sync = 9;
    CK(cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p));
    assert_int_equal(sync, 0);
    unsigned one = 1;
    CK(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p + 100));
    CK(cuPointerGetAttribute(&sync, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p));
    assert_int_equal(sync, 1);
    int x;
    assert_int_equal(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, (CUdeviceptr)&x),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuPointerSetAttribute(NULL, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, p),
                     CUDA_ERROR_INVALID_VALUE);
    CK(cuMemFree(p));
    /* cuDeviceGetP2PAttribute: "CUDA_ERROR_INVALID_DEVICE if srcDevice or
     * dstDevice are not valid or if they represent the same device". */
    int v = -1;
    CK(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1));
    assert_int_equal(v, 1);
    assert_int_equal(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 1, 1),
                     CUDA_ERROR_INVALID_DEVICE);
    assert_int_equal(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 99),
                     CUDA_ERROR_INVALID_DEVICE);
    assert_int_equal(cuDeviceGetP2PAttribute(&v, (CUdevice_P2PAttribute)77, 0, 1),
                     CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuDeviceGetP2PAttribute(NULL, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1),
                     CUDA_ERROR_INVALID_VALUE);
}

static void test_stream_ordered_alloc(void **state)
{
    (void)state;
    st_primary(0);
    CUstream s;
    CK(cuStreamCreate(&s, 0));
    CUdeviceptr p;
    size_t f0, f1, tot;
    CK(cuMemGetInfo(&f0, &tot));
    CK(cuMemAllocAsync(&p, 1 << 20, s));
    CK(cuMemsetD8Async(p, 1, 1 << 20, s));
    st_gate_t *g = st_gate_new();
    st_gate_block(g, s);
    CK(cuMemFreeAsync(p, s));
    CK(cuMemGetInfo(&f1, &tot));
    assert_true(f1 < f0); /* not freed before the stream gets there */
    st_gate_open(g);
    CK(cuStreamSynchronize(s));
    CK(cuMemGetInfo(&f1, &tot));
    assert_true(f1 == f0);
    assert_int_equal(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE);
    CK(cuStreamDestroy(s));
    st_gate_free(g);
}

/* Created and destroyed streams do not pile up: a destroyed stream's object
 * is reused by a later stream, so a loop of create/use/destroy runs on a
 * bounded number of objects (without reuse every handle would be new). */
static void test_streams_reused(void **state)
{
    (void)state;
    st_primary(0);
    enum { ROUNDS = 500, MAXOBJ = 16 };
    CUstream seen[MAXOBJ];
    int nseen = 0, fresh = 0;
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 4096));
    for (int i = 0; i < ROUNDS; i++) {
        CUstream s;
        CK(cuStreamCreate(&s, i % 2 ? CU_STREAM_NON_BLOCKING : 0));
        int known = 0;
        for (int k = 0; k < nseen; k++)
            known |= seen[k] == s;
        if (!known) {
            fresh++;
            if (nseen < MAXOBJ)
                seen[nseen++] = s;
        }
        unsigned fl;
        CK(cuStreamGetFlags(s, &fl));
        assert_int_equal(fl, i % 2 ? CU_STREAM_NON_BLOCKING : 0u);
        CK(cuMemsetD32Async(p, (unsigned)i, 1024, s));
        CK(cuStreamSynchronize(s));
        unsigned v = 0;
        CK(cuMemcpyDtoH(&v, p + 4092, 4));
        assert_int_equal(v, (unsigned)i);
        CK(cuStreamDestroy(s));
    }
    if (fresh > MAXOBJ)
        fail_msg("%d stream objects for %d create/destroy rounds", fresh, ROUNDS);
    /* A stream destroyed with work pending finishes it first (its object is
     * reused only then), and the next stream behaves. */
    CUstream busy, next;
    CK(cuStreamCreate(&busy, 0));
    st_gate_t *g = st_gate_new();
    st_gate_block(g, busy);
    CK(cuMemsetD32Async(p, 77, 1024, busy));
    CK(cuStreamDestroy(busy));
    CK(cuStreamCreate(&next, 0));
    assert_ptr_not_equal(next, busy);
    assert_int_equal(cuStreamQuery(next), CUDA_SUCCESS);
    /* Its pending work is still the context's: the legacy stream (which
     * waits for blocking streams) is not idle, and cuCtxSynchronize waits. */
    assert_int_equal(cuStreamQuery(CU_STREAM_LEGACY), CUDA_ERROR_NOT_READY);
    st_gate_open(g);
    CK(cuCtxSynchronize());
    unsigned v = 0;
    CK(cuMemcpyDtoH(&v, p, 4));
    assert_int_equal(v, 77);
    CK(cuStreamDestroy(next));
    st_gate_free(g);
    CK(cuMemFree(p));
}

int main(int argc, char **argv)
{
    g_self = argv[0];
    if (argc > 1 && strcmp(argv[1], "--child-devices") == 0)
        return child_devices();
    if (argc > 1 && strcmp(argv[1], "--child-interposed") == 0)
        return child_interposed();
    st_private_shm("drv");
    setenv("SIMCUDA_DEVICES", DEVICES, 1);
    setenv("SIMCUDA_ISOLATION", "1", 1); /* device memory is not host memory */
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("CUDA_DEVICE_ORDER");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_initialized),
        cmocka_unit_test(test_version_errors),
        cmocka_unit_test(test_device_models),
        cmocka_unit_test(test_device_attributes),
        cmocka_unit_test(test_uuid_pci),
        cmocka_unit_test(test_visible_devices),
        cmocka_unit_test(test_device_order),
        cmocka_unit_test(test_bad_device_spec),
        cmocka_unit_test(test_contexts),
        cmocka_unit_test(test_destroyed_context_other_thread),
        cmocka_unit_test(test_context_v2_forms),
        cmocka_unit_test(test_peer_access),
        cmocka_unit_test(test_contexts_reused),
        cmocka_unit_test(test_memory_basic),
        cmocka_unit_test(test_memory_capacity),
        cmocka_unit_test(test_host_memory),
        cmocka_unit_test(test_freed_memory_faults),
        cmocka_unit_test(test_async_is_async),
        cmocka_unit_test(test_pageable_copies),
        cmocka_unit_test(test_events_order_streams),
        cmocka_unit_test(test_event_stream_consistency),
        cmocka_unit_test(test_legacy_default_stream),
        cmocka_unit_test(test_per_thread_stream),
        cmocka_unit_test(test_host_functions),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_processes_share_capacity),
        cmocka_unit_test(test_capacity_table_checked),
        cmocka_unit_test(test_get_proc_address),
        cmocka_unit_test(test_every_plain_function_exported),
        cmocka_unit_test(test_every_typedef_version_answered),
        cmocka_unit_test(test_export_tables_refused),
        cmocka_unit_test(test_profiler_start_stop),
        cmocka_unit_test(test_trace_variable),
        cmocka_unit_test(test_plain_functions_answered),
        cmocka_unit_test(test_interposer_cannot_hijack),
        cmocka_unit_test(test_stream_ordered_alloc),
        cmocka_unit_test(test_streams_reused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
