/* NVIDIA's CUDA runtime on simcuda's driver: runs tests/sim/driver/cudart_app.cu
 * (built by nvcc, linked with libcudart.so.13 and with libcudart_static.a)
 * under SIMCUDA_TRACE=1 on a simulated T4.
 *
 * Either the whole program passes (device properties of the simulated model,
 * cudaMalloc/cudaMemcpy, <<<>>> launches on the default and a created stream,
 * events, results checked), or the runtime stops exactly where simcuda's
 * documented limit lies (sim/driver/procs.c, cuGetExportTable): CUDA 13.0's
 * runtime needs NVIDIA's private export table
 * 6bd5fb6c-5bf4-e74a-8987-d93912fd9df9 at its initialisation, simcuda
 * refuses it, and the runtime's first call returns cudaErrorNotSupported.
 * That case is reported as skipped with the reason; a failure anywhere else
 * (a missing entry point, a wrong result, a crash) fails the test.
 * test_app_kernel_on_driver runs the app's kernel (the same .cu built as a
 * fatbin) through the driver API, so its twin and parameter layout are
 * checked whatever the runtime does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <cuda.h>

#include "tests/harness.h"

#define CK(x) assert_int_equal((x), CUDA_SUCCESS)

#define CUDART_TABLE "6bd5fb6c-5bf4-e74a-8987-d93912fd9df9"
#define PROBE_TABLE "f8cff951-2146-8b4e-b9e2-fb469e7c0dd9"
/* sim/driver/device.c: a 16 GB T4 */
#define T4_NAME "Tesla T4"
#define T4_SMS "40"

/* The last line of text starting with prefix (copied to buf), or NULL. */
static const char *last_line(const char *text, const char *prefix, char *buf, size_t len)
{
    const char *found = NULL;
    size_t pl = strlen(prefix);
    for (const char *p = text; p && *p;) {
        if (strncmp(p, prefix, pl) == 0)
            found = p;
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    if (!found)
        return NULL;
    size_t n = strcspn(found, "\n");
    if (n >= len)
        n = len - 1;
    memcpy(buf, found, n);
    buf[n] = '\0';
    return buf;
}

/* Returns 1 when r is the documented stop, with the reason printed. */
static int is_documented_stop(const es_proc_result_t *r)
{
    char last[256];
    if (r->status != 3 || !strstr(r->out, "cudart: init failed: error 801 (cudaErrorNotSupported)"))
        return 0;
    if (!last_line(r->out, "simcuda trace: ", last, sizeof(last)))
        return 0;
    /* The runtime did nothing with the driver after the table was refused. */
    return strcmp(last, "simcuda trace: cuGetExportTable(" CUDART_TABLE ") -> not supported") == 0;
}

static void run_app(const char *rel)
{
    const char *app = es_build_path(rel);
    char *argv[] = {(char *)app, (char *)T4_NAME, (char *)T4_SMS, NULL};
    char *env[] = {(char *)"SIMCUDA_DEVICES=t4:16G", (char *)"CUDA_VISIBLE_DEVICES=",
                   (char *)"SIMCUDA_TRACE=1", NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 120, &r), 0);
    if (r.status == 0 && strstr(r.out, "cudart: all checks passed\n")) {
        es_proc_result_free(&r);
        return;
    }
    if (is_documented_stop(&r)) {
        /* The probe table before it is optional: the runtime went on. */
        assert_non_null(strstr(r.out, "cuGetExportTable(" PROBE_TABLE ") -> not supported"));
        /* Every entry point was resolved before: no context was made. */
        assert_non_null(strstr(r.out, "cuGetProcAddress(\"cuLaunchKernel\", version 7000, flags 0x2) -> found (per-thread)"));
        es_proc_result_free(&r);
        es_test_skip("%s: a known limit of simcuda: NVIDIA's CUDA runtime stops at its "
                     "initialisation, needing the private driver export table " CUDART_TABLE
                     " (cuGetExportTable), which simcuda does not provide (sim/driver/procs.c)",
                     rel);
    }
    fail_msg("%s: exit %d, neither passed nor stopped at the documented point:\n%s", rel, r.status,
             r.out);
}

/* The app's kernel through the driver API (its fatbin built from the same
 * .cu): simcuda finds the twin and the parameter layout the runtime would
 * launch it with, and the twin computes y = a * x + y. */
static void test_app_kernel_on_driver(void **state)
{
    (void)state;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuModuleLoad(&mod, es_build_path("tests/sim/driver/cudart_app.fatbin")));
    CK(cuModuleGetFunction(&fn, mod, "sim_rt_axpy"));
    size_t off = 1, size = 0;
    CK(cuFuncGetParamInfo(fn, 3, &off, &size));
    assert_int_equal(off, 24); /* float at 0, pointers at 8 and 16, int at 24 */
    assert_int_equal(size, 4);
    enum { N = 1000 };
    float hx[N], hy[N];
    for (int i = 0; i < N; i++) {
        hx[i] = (float)i;
        hy[i] = 0.5f * (float)i;
    }
    CUdeviceptr dx, dy;
    CK(cuMemAlloc(&dx, sizeof(hx)));
    CK(cuMemAlloc(&dy, sizeof(hy)));
    CK(cuMemcpyHtoD(dx, hx, sizeof(hx)));
    CK(cuMemcpyHtoD(dy, hy, sizeof(hy)));
    float a = 2.0f;
    int n = N;
    void *args[] = {&a, &dx, &dy, &n};
    CK(cuLaunchKernel(fn, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuMemcpyDtoH(hy, dy, sizeof(hy)));
    for (int i = 0; i < N; i++)
        assert_true(hy[i] == 2.5f * (float)i);
    CK(cuMemFree(dx));
    CK(cuMemFree(dy));
    CK(cuModuleUnload(mod));
    CK(cuDevicePrimaryCtxRelease(dev));
}

static void test_cudart_shared(void **state)
{
    (void)state;
    run_app("tests/sim/driver/cudart_app_shared");
}

static void test_cudart_static(void **state)
{
    (void)state;
    run_app("tests/sim/driver/cudart_app_static");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_app_kernel_on_driver),
        cmocka_unit_test(test_cudart_shared),
        cmocka_unit_test(test_cudart_static),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
