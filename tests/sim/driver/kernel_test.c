/* simcuda kernel tests (SIMCUDA_ISOLATION=1): modules from a real nvcc
 * fatbin / cubin / PTX, twins found by name, argument copying at launch,
 * launch configuration handed to the twin, invalid launches, architectures
 * (an image without code the device runs is refused), sticky errors from
 * failing or faulting kernels (in child processes: the process cannot use
 * CUDA afterwards), libraries and kernels, a kernel without a twin. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"
#include "sim/include/simcuda_twin.h"
#include "tests/sim/driver/common.h"

static void *g_fatbin;
static size_t g_fatbin_len;

static void *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(b);
        return NULL;
    }
    b[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return b;
}

static int setup(void **state)
{
    (void)state;
    g_fatbin = slurp(es_build_path("tests/sim/driver/kernels.fatbin"), &g_fatbin_len);
    return g_fatbin ? 0 : -1;
}

static CUmodule load(void)
{
    CUmodule m;
    CK(cuModuleLoadData(&m, g_fatbin));
    return m;
}

static void test_module_and_launch(void **state)
{
    (void)state;
    st_primary(0);
    CUmodule m = load();
    CUfunction f;
    CK(cuModuleGetFunction(&f, m, "sim_add"));
    assert_int_equal(cuModuleGetFunction(&f, m, "nope"), CUDA_ERROR_NOT_FOUND);
    CK(cuModuleGetFunction(&f, m, "sim_add"));
    enum { N = 1000 };
    float a[N], b[N], c[N];
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = 0.5f * (float)i;
    }
    CUdeviceptr da, db, dc;
    CK(cuMemAlloc(&da, sizeof(a)));
    CK(cuMemAlloc(&db, sizeof(b)));
    CK(cuMemAlloc(&dc, sizeof(c)));
    CK(cuMemcpyHtoD(da, a, sizeof(a)));
    CK(cuMemcpyHtoD(db, b, sizeof(b)));
    int n = N;
    void *args[] = {&da, &db, &dc, &n};
    CK(cuLaunchKernel(f, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuMemcpyDtoH(c, dc, sizeof(c)));
    for (int i = 0; i < N; i++)
        assert_true(c[i] == 1.5f * (float)i);
    /* Per-thread stream entry point. */
    CK(cuMemsetD32(dc, 0, N));
    CK(cuLaunchKernel_ptsz(f, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CK(cuStreamSynchronize_ptsz(NULL));
    CK(cuMemcpyDtoH(c, dc, sizeof(c)));
    assert_true(c[999] == 1.5f * 999.0f);
    /* cuLaunchKernelEx */
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = 4;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 256;
    cfg.blockDimY = cfg.blockDimZ = 1;
    CK(cuMemsetD32(dc, 0, N));
    CK(cuLaunchKernelEx(&cfg, f, args, NULL));
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH(c, dc, sizeof(c)));
    assert_true(c[10] == 15.0f);
    /* Invalid configurations, as the real driver refuses them. */
    assert_int_equal(cuLaunchKernel(f, 0, 1, 1, 256, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 0, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 1025, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 32, 32, 2, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 1, 1, 65, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuLaunchKernel(f, 1, 70000, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 60000, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    void *extra[] = {CU_LAUNCH_PARAM_END};
    assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    assert_int_equal(cuLaunchKernel((CUfunction)&n, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL),
                     CUDA_ERROR_INVALID_HANDLE);
    CK(cuCtxSynchronize()); /* refusals left no sticky error */
    CK(cuMemFree(da));
    CK(cuMemFree(db));
    CK(cuMemFree(dc));
    CK(cuModuleUnload(m));
    assert_int_equal(cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuModuleGetFunction(&f, m, "sim_add"), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_HANDLE);
}

struct sim_pair { double x; char tag; };

static void test_arguments_copied_at_launch(void **state)
{
    (void)state;
    st_primary(0);
    CUmodule m = load();
    CUfunction f;
    CK(cuModuleGetFunction(&f, m, "sim_scale"));
    size_t off, size;
    CK(cuFuncGetParamInfo(f, 3, &off, &size));
    assert_int_equal(size, 1);
    CK(cuFuncGetParamInfo(f, 4, &off, &size));
    assert_int_equal(size, 16);
    assert_int_equal(off, 24);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr v;
    CK(cuMemAlloc(&v, 4 * sizeof(float)));
    float ones[4] = {1, 1, 1, 1}, out[4];
    CK(cuMemcpyHtoD(v, ones, sizeof(ones)));
    float scale = 2.0f;
    int n = 4;
    char flag = 3;
    struct sim_pair p = {10.0, 1};
    long long big = 100;
    void *args[] = {&v, &scale, &n, &flag, &p, &big};
    st_gate_t *g = st_gate_new();
    st_gate_block(g, s);
    CK(cuLaunchKernel(f, 1, 1, 1, 4, 1, 1, 0, s, args, NULL));
    /* The launch holds the values of the moment, not the variables. */
    scale = 100.0f;
    n = 0;
    flag = 0;
    p.x = 0;
    p.tag = 0;
    big = 0;
    st_gate_open(g);
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(out, v, sizeof(out)));
    for (int i = 0; i < 4; i++)
        assert_true(out[i] == 1.0f * 2.0f + 10.0f + 3.0f + 1.0f + 100.0f);
    CK(cuStreamDestroy(s));
    CK(cuMemFree(v));
    CK(cuModuleUnload(m));
    st_gate_free(g);
}

static void test_launch_info_and_attributes(void **state)
{
    (void)state;
    for (int dev = 0; dev < 2; dev++) {
        st_primary(dev);
        CUmodule m = load();
        CUfunction f;
        CK(cuModuleGetFunction(&f, m, "sim_info"));
        CUdeviceptr out;
        CK(cuMemAlloc(&out, 8 * sizeof(long long)));
        void *args[] = {&out};
        long long a[8], b[8];
        CK(cuLaunchKernel(f, 7, 1, 1, 96, 1, 1, 1024, NULL, args, NULL));
        CK(cuMemcpyDtoH(a, out, sizeof(a)));
        CK(cuLaunchKernel(f, 7, 1, 1, 96, 1, 1, 1024, NULL, args, NULL));
        CK(cuMemcpyDtoH(b, out, sizeof(b)));
        assert_int_equal(a[0], SIMCUDA_TWIN_ABI);
        assert_int_equal(a[1], dev == 0 ? 108 : 40);
        assert_int_equal(a[2], dev == 0 ? 80 : 75);
        assert_int_equal(a[3], 7);
        assert_int_equal(a[4], 96);
        assert_int_equal(a[5], 1024);
        assert_int_equal(a[6], dev);
        assert_true(a[7] != b[7]); /* nondet_seed changes per launch */
        int v;
        CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
        assert_int_equal(v, 1024);
        CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
        assert_true(v > 0);
        CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
        assert_int_equal(v, 49152);
        assert_int_equal(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 65536, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
        /* The occupancy calculator: the A100's limits (2048 threads, 32
         * blocks, 64 Ki registers, 164 KiB shared memory per SM, 1 KiB
         * reserved per block). */
        int regs, nb = -1, grid = -1, bs = -1;
        size_t avail = 0;
        CK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f));
        CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&nb, f, 256, 0));
        if (dev == 0) {
            int want = 65536 / (regs * 256) < 8 ? 65536 / (regs * 256) : 8;
            assert_int_equal(nb, want);
            CK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&nb, f, 32, 40000,
                                                                    CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE));
            assert_int_equal(nb, 167936 / (40000 + 1024)); /* shared memory bound: 4 */
            if (regs * 256 * 4 <= 65536) {
                CK(cuOccupancyAvailableDynamicSMemPerBlock(&avail, f, 4, 256));
                assert_int_equal(avail, 167936 / 4 - 1024);
            }
            CK(cuOccupancyMaxPotentialBlockSize(&grid, &bs, f, NULL, 0, 0));
            assert_true(bs > 0 && bs <= 1024 && bs % 32 == 0);
            CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&nb, f, bs, 0));
            assert_int_equal(grid, nb * 108);
            CK(cuOccupancyMaxPotentialBlockSize(&grid, &bs, f, NULL, 0, 100));
            assert_true(bs > 0 && bs <= 100);
        }
        CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&nb, f, 2048, 0));
        assert_int_equal(nb, 0); /* more threads than a block may have */
        CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&nb, f, 64, 60000));
        assert_int_equal(nb, 0); /* more dynamic shared memory than the attribute allows */
        assert_int_equal(cuOccupancyMaxActiveBlocksPerMultiprocessor(NULL, f, 64, 0),
                         CUDA_ERROR_INVALID_VALUE);
        assert_int_equal(cuOccupancyMaxActiveBlocksPerMultiprocessor(&nb, f, 0, 0),
                         CUDA_ERROR_INVALID_VALUE);
        assert_int_equal(cuOccupancyMaxActiveBlocksPerMultiprocessor(&nb, NULL, 64, 0),
                         CUDA_ERROR_INVALID_HANDLE);
        assert_int_equal(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&nb, f, 64, 0, 7),
                         CUDA_ERROR_INVALID_VALUE);
        assert_int_equal(cuOccupancyAvailableDynamicSMemPerBlock(&avail, f, 0, 64),
                         CUDA_ERROR_INVALID_VALUE);
        if (dev == 0) {
            CK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000));
            CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 65536, NULL, args, NULL));
            assert_int_equal(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 500000),
                             CUDA_ERROR_INVALID_VALUE);
        }
        assert_int_equal(cuFuncGetAttribute(&v, (CUfunction_attribute)999, f), CUDA_ERROR_INVALID_VALUE);
        const char *name;
        CK(cuFuncGetName(&name, f));
        assert_string_equal(name, "sim_info");
        CK(cuCtxSynchronize());
        CK(cuMemFree(out));
        CK(cuModuleUnload(m));
    }
}

static void test_other_image_forms(void **state)
{
    (void)state;
    st_primary(0);
    CUmodule m;
    CUfunction f;
    /* A cubin file, a PTX text, the fatbin through cuModuleLoad. */
    CK(cuModuleLoad(&m, es_build_path("tests/sim/driver/kernels_sm80.cubin")));
    CK(cuModuleGetFunction(&f, m, "sim_scale"));
    size_t off, size;
    CK(cuFuncGetParamInfo(f, 5, &off, &size));
    assert_int_equal(size, 8);
    assert_int_equal(off, 40);
    CK(cuModuleUnload(m));
    char *ptx = slurp(es_build_path("tests/sim/driver/kernels.ptx"), NULL);
    assert_non_null(ptx);
    CK(cuModuleLoadDataEx(&m, ptx, 0, NULL, NULL));
    CK(cuModuleGetFunction(&f, m, "sim_scale"));
    CK(cuFuncGetParamInfo(f, 4, &off, &size));
    assert_int_equal(size, 16);
    assert_int_equal(off, 24);
    CK(cuFuncGetParamInfo(f, 3, &off, &size));
    assert_int_equal(size, 1);
    assert_int_equal(off, 16);
    CK(cuModuleUnload(m));
    free(ptx);
    CK(cuModuleLoad(&m, es_build_path("tests/sim/driver/kernels.fatbin")));
    CK(cuModuleGetFunction(&f, m, "sim_add"));
    CK(cuModuleUnload(m));
    CK(cuModuleLoadFatBinary(&m, g_fatbin));
    CK(cuModuleUnload(m));
    CUdeviceptr dp;
    size_t bytes;
    CK(cuModuleLoadData(&m, g_fatbin));
    assert_int_equal(cuModuleGetGlobal(&dp, &bytes, m, "anything"), CUDA_ERROR_NOT_FOUND);
    CK(cuModuleUnload(m));
    static const char junk[] = "this is not a module image";
    assert_int_equal(cuModuleLoadData(&m, junk), CUDA_ERROR_INVALID_IMAGE);
    assert_int_equal(cuModuleLoad(&m, "/nonexistent/k.cubin"), CUDA_ERROR_FILE_NOT_FOUND);
    assert_int_equal(cuModuleLoadData(NULL, g_fatbin), CUDA_ERROR_INVALID_VALUE);
}

/* A module's functions, enumerated; loaded with the module (never lazily). */
static void test_module_functions_enumerated(void **state)
{
    (void)state;
    st_primary(0);
    CUmodule m = load();
    unsigned n = 0;
    CK(cuModuleGetFunctionCount(&n, m));
    assert_int_equal(n, 5);
    CUfunction fs[8] = {0};
    CK(cuModuleEnumerateFunctions(fs, 8, m));
    int saw_add = 0;
    for (unsigned i = 0; i < n; i++) {
        const char *name = NULL;
        CK(cuFuncGetName(&name, fs[i]));
        saw_add |= strcmp(name, "sim_add") == 0;
        CUfunctionLoadingState st = CU_FUNCTION_LOADING_STATE_UNLOADED;
        CK(cuFuncIsLoaded(&st, fs[i]));
        assert_int_equal(st, CU_FUNCTION_LOADING_STATE_LOADED);
        CK(cuFuncLoad(fs[i]));
    }
    assert_true(saw_add);
    assert_null(fs[5]);
    CUfunction one[1] = {0};
    CK(cuModuleEnumerateFunctions(one, 1, m)); /* at most numFunctions */
    assert_non_null(one[0]);
    assert_int_equal(cuModuleGetFunctionCount(NULL, m), CUDA_ERROR_INVALID_VALUE);
    CK(cuModuleUnload(m));
    assert_int_equal(cuModuleGetFunctionCount(&n, m), CUDA_ERROR_INVALID_HANDLE);
    CUfunctionLoadingState st;
    assert_int_equal(cuFuncIsLoaded(&st, fs[0]), CUDA_ERROR_INVALID_HANDLE);
}

static void test_library_and_kernel(void **state)
{
    (void)state;
    st_primary(0);
    CUlibrary lib;
    CK(cuLibraryLoadData(&lib, g_fatbin, NULL, NULL, 0, NULL, NULL, 0));
    unsigned count;
    CK(cuLibraryGetKernelCount(&count, lib));
    assert_int_equal(count, 5);
    CUkernel k;
    CK(cuLibraryGetKernel(&k, lib, "sim_add"));
    assert_int_equal(cuLibraryGetKernel(&k, lib, "nope"), CUDA_ERROR_NOT_FOUND);
    CK(cuLibraryGetKernel(&k, lib, "sim_add"));
    CUfunction f;
    CK(cuKernelGetFunction(&f, k));
    CUlibrary back = NULL;
    CK(cuKernelGetLibrary(&back, k));
    assert_ptr_equal(back, lib);
    assert_int_equal(cuKernelGetLibrary(NULL, k), CUDA_ERROR_INVALID_VALUE);
    float a = 1, b = 2, c = 0;
    CUdeviceptr d;
    CK(cuMemAlloc(&d, 3 * sizeof(float)));
    CK(cuMemcpyHtoD(d, &a, 4));
    CK(cuMemcpyHtoD(d + 4, &b, 4));
    CUdeviceptr da = d, db = d + 4, dc = d + 8;
    int n = 1;
    void *args[] = {&da, &db, &dc, &n};
    CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    /* A CUkernel stands in for a CUfunction in launches. */
    CK(cuLaunchKernel((CUfunction)k, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    CK(cuMemcpyDtoH(&c, dc, 4));
    assert_true(c == 3.0f);
    CK(cuMemFree(d));
    CK(cuLibraryUnload(lib));
    assert_int_equal(cuKernelGetFunction(&f, k), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuLibraryUnload(lib), CUDA_ERROR_INVALID_HANDLE);
}

/* A library is not bound to a context: its kernels may be queued in another
 * context when it is unloaded. They still run (the handles are refused at
 * once); under SAN=address a freed kernel would be a use after free. */
static void test_library_unload_while_queued(void **state)
{
    (void)state;
    CUcontext c0 = st_primary(0), c1, cur;
    CUlibrary lib;
    CK(cuLibraryLoadData(&lib, g_fatbin, NULL, NULL, 0, NULL, NULL, 0));
    CUkernel k;
    CK(cuLibraryGetKernel(&k, lib, "sim_add"));
    CK(cuCtxCreate(&c1, NULL, 0, 1)); /* current now */
    float h[3] = {1, 2, 0};
    CUdeviceptr d;
    CK(cuMemAlloc(&d, sizeof(h)));
    CK(cuMemcpyHtoD(d, h, sizeof(h)));
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    st_gate_t *g = st_gate_new();
    st_gate_block(g, s);
    CUdeviceptr da = d, db = d + 4, dc = d + 8;
    int n = 1;
    void *args[] = {&da, &db, &dc, &n};
    CK(cuLaunchKernel((CUfunction)k, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
    CK(cuCtxPushCurrent(c0));
    CK(cuLibraryUnload(lib)); /* waits for c0's work only */
    assert_int_equal(cuLibraryGetKernel(&k, lib, "sim_add"), CUDA_ERROR_INVALID_HANDLE);
    assert_int_equal(cuLaunchKernel((CUfunction)k, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL),
                     CUDA_ERROR_INVALID_HANDLE);
    CK(cuCtxPopCurrent(&cur));
    st_gate_open(g);
    CK(cuStreamSynchronize(s));
    CK(cuMemcpyDtoH(h, d, sizeof(h)));
    assert_true(h[2] == 3.0f);
    CK(cuStreamDestroy(s));
    st_gate_free(g);
    CK(cuMemFree(d));
    CK(cuCtxDestroy(c1));
    CK(cuCtxSetCurrent(c0));
}

/* ---- sticky errors: cuda.h, CUDA_ERROR_ILLEGAL_ADDRESS / LAUNCH_FAILED:
 * "This leaves the process in an inconsistent state and any further CUDA
 * work will return the same error. To continue using CUDA, the process must
 * be terminated and relaunched." Each case runs in a child. */
enum { STICKY_FAIL, STICKY_CRASH, STICKY_GOOD };

/* Every call below needs a context: each must return want. Returns 0 or
 * the number of the first call that did not. */
static int all_refused(CUresult want, CUfunction f, CUdeviceptr p)
{
    CUdeviceptr q;
    CUstream s;
    CUevent e;
    CUcontext c;
    CUmodule m;
    CUlibrary lib;
    int h = 0;
    void *args[] = {&p};
    void *pin;
    if (cuCtxSynchronize() != want) return 1;
    if (cuStreamSynchronize(NULL) != want) return 2;
    if (cuMemcpyDtoH(&h, p, 4) != want) return 3;
    if (cuMemAlloc(&q, 4096) != want) return 4;
    if (cuStreamCreate(&s, 0) != want) return 5;
    if (cuEventCreate(&e, 0) != want) return 6;
    if (cuModuleLoadData(&m, g_fatbin) != want) return 7;
    if (cuLibraryLoadData(&lib, g_fatbin, NULL, NULL, 0, NULL, NULL, 0) != want) return 8;
    if (cuCtxCreate(&c, NULL, 0, 1) != want) return 9; /* a new context, another device */
    if (cuDevicePrimaryCtxRetain(&c, 1) != want) return 10;
    if (cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL) != want) return 11;
    if (cuMemsetD8(p, 0, 4) != want) return 12;
    if (cuMemAllocHost(&pin, 4096) != want) return 13;
    if (cuStreamQuery(NULL) != want) return 14;
    /* What needs no context still answers. */
    int n = 0;
    const char *name = NULL;
    if (cuDeviceGetCount(&n) != CUDA_SUCCESS || n != 5) return 15;
    if (cuGetErrorName(want, &name) != CUDA_SUCCESS || !name) return 16;
    return 0;
}

static int sticky_child(void *arg)
{
    int mode = *(int *)arg;
    st_primary(0);
    CUmodule m = load();
    CUfunction f;
    const char *kname = mode == STICKY_FAIL ? "sim_fail" : "sim_crash";
    if (cuModuleGetFunction(&f, m, kname) != CUDA_SUCCESS)
        return 100;
    CUdeviceptr good;
    if (cuMemAlloc(&good, 4096) != CUDA_SUCCESS)
        return 101;
    CUdeviceptr target = mode == STICKY_CRASH ? (CUdeviceptr)16 : good;
    void *args[] = {&target};
    if (cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL) != CUDA_SUCCESS)
        return 102; /* asynchronous: the launch itself is fine */
    CUresult want = mode == STICKY_FAIL ? CUDA_ERROR_LAUNCH_FAILED
                  : mode == STICKY_CRASH ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
    if (mode == STICKY_GOOD) {
        /* Negative control: the same calls all work after a good launch. */
        if (cuCtxSynchronize() != CUDA_SUCCESS)
            return 103;
        CUdeviceptr q;
        CUcontext c;
        if (cuMemAlloc(&q, 4096) || cuCtxCreate(&c, NULL, 0, 1) || cuCtxDestroy(c))
            return 104;
        st_primary(0);
        return 0;
    }
    return all_refused(want, f, good);
}

static void test_sticky_errors(void **state)
{
    (void)state;
    int modes[] = {STICKY_FAIL, STICKY_CRASH, STICKY_GOOD};
    for (int i = 0; i < 3; i++)
        assert_int_equal(st_wait(st_fork(sticky_child, &modes[i])), 0);
}

/* ---- architectures ------------------------------------------------------------- */
/* Loads path (a build output) with device dev's primary context current. */
static CUresult load_on(int dev, const char *rel)
{
    st_primary(dev);
    size_t len;
    void *img = slurp(es_build_path(rel), &len);
    assert_non_null(img);
    CUmodule m;
    CUresult r = cuModuleLoadData(&m, img);
    if (r == CUDA_SUCCESS)
        CK(cuModuleUnload(m));
    free(img);
    return r;
}

/* Devices of this program: 0 a100 (8.0), 1 t4 (7.5), 2 h100 (9.0),
 * 3 b200 (10.0), 4 a10 (8.6). */
static void test_architectures(void **state)
{
    (void)state;
    static const struct { const char *img; CUresult want[5]; } cases[] = {
#define OK CUDA_SUCCESS
#define NO CUDA_ERROR_NO_BINARY_FOR_GPU
        /* sm_75, sm_80, sm_90 SASS and compute_90 PTX: every model. */
        {"tests/sim/driver/kernels.fatbin", {OK, OK, OK, OK, OK}},
        /* SASS: same major version, minor not above the device's. */
        {"tests/sim/driver/kernels_sm80.cubin", {OK, NO, NO, NO, OK}},
        {"tests/sim/driver/kernels_sm90.cubin", {NO, NO, OK, NO, NO}},
        /* PTX: JIT-compiled for that compute capability and above. */
        {"tests/sim/driver/kernels.ptx", {OK, NO, OK, OK, OK}},
        {"tests/sim/driver/kernels_c86.ptx", {NO, NO, OK, OK, OK}},
        /* Arch-specific sm_90a (SASS and PTX): exactly 9.0. */
        {"tests/sim/driver/kernels_sm90a.fatbin", {NO, NO, OK, NO, NO}},
        /* Family-specific sm_100f: 10.x only. */
        {"tests/sim/driver/kernels_sm100f.fatbin", {NO, NO, NO, OK, NO}},
#undef OK
#undef NO
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        for (int d = 0; d < 5; d++) {
            CUresult r = load_on(d, cases[i].img);
            if (r != cases[i].want[d])
                fail_msg("%s on device %d: %d, want %d", cases[i].img, d, (int)r,
                         (int)cases[i].want[d]);
        }
    /* Newer PTX than this driver's JIT reads (CUDA 13.0: ISA 9.0). */
    st_primary(0);
    char *ptx = slurp(es_build_path("tests/sim/driver/kernels.ptx"), NULL);
    assert_non_null(ptx);
    char *v = strstr(ptx, ".version ");
    assert_non_null(v);
    memcpy(v, ".version 9.9", 12);
    CUmodule m;
    assert_int_equal(cuModuleLoadData(&m, ptx), CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
    free(ptx);
    /* A library is not bound to a device: loaded while no context is
     * current it keeps what it has; a device without code for it refuses
     * its kernels. */
    size_t len;
    void *sm90 = slurp(es_build_path("tests/sim/driver/kernels_sm90.cubin"), &len);
    CUlibrary lib;
    assert_int_equal(cuLibraryLoadData(&lib, sm90, NULL, NULL, 0, NULL, NULL, 0),
                     CUDA_ERROR_NO_BINARY_FOR_GPU); /* an a100 context is current */
    CUcontext cur;
    CK(cuCtxPopCurrent(&cur));
    CK(cuLibraryLoadData(&lib, sm90, NULL, NULL, 0, NULL, NULL, 0));
    CK(cuCtxPushCurrent(cur));
    CUkernel k;
    CUfunction f;
    CK(cuLibraryGetKernel(&k, lib, "sim_add"));
    assert_int_equal(cuKernelGetFunction(&f, k), CUDA_ERROR_NO_BINARY_FOR_GPU);
    float one = 1;
    CUdeviceptr d;
    CK(cuMemAlloc(&d, 16));
    CK(cuMemcpyHtoD(d, &one, 4));
    CUdeviceptr da = d, dc = d + 8;
    int n = 1;
    void *args[] = {&da, &da, &dc, &n};
    assert_int_equal(cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL),
                     CUDA_ERROR_NO_BINARY_FOR_GPU);
    CK(cuMemFree(d));
    st_primary(2); /* the h100 runs it */
    CK(cuKernelGetFunction(&f, k));
    CK(cuMemAlloc(&d, 16));
    CK(cuMemcpyHtoD(d, &one, 4));
    da = d;
    dc = d + 8;
    CK(cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    float two = 0;
    CK(cuMemcpyDtoH(&two, dc, 4));
    assert_true(two == 2.0f);
    CK(cuMemFree(d));
    CK(cuLibraryUnload(lib));
    free(sm90);
    st_primary(0);
}

/* The child's load (cuModuleLoadData of kernels.fatbin) with the shell
 * assignment ENV in front ("" for the test's own environment). */
static char *child_load_with(const char *env)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s exec '%s' --child-load", env, es_build_path("tests/sim_driver_kernel_test"));
    es_proc_result_t r;
    assert_int_equal(es_run_sh(cmd, NULL, 60, &r), 0);
    assert_int_equal(r.status, 0);
    return r.out;
}

static void test_kernel_without_twin(void **state)
{
    (void)state;
    /* Twin libraries that lack the kernel's twin (here: one that does not
     * exist): loading fails with NOT_FOUND and says why. */
    char *out = child_load_with("SIMCUDA_KERNELS=/nonexistent/libsimtwin_none.so");
    assert_non_null(strstr(out, "load 500\n"));
    assert_non_null(strstr(out, "has no twin: no simcuda_twin_sim_add in SIMCUDA_KERNELS"));
    free(out);
    /* SIMCUDA_KERNELS unset or empty: the twins beside libcuda.so.1
     * (build/sim/twins/libsimtwin_simtest.so among them) are found. */
    out = child_load_with("unset SIMCUDA_KERNELS;");
    assert_non_null(strstr(out, "load 0\n"));
    assert_null(strstr(out, "has no twin"));
    free(out);
    out = child_load_with("SIMCUDA_KERNELS=");
    assert_non_null(strstr(out, "load 0\n"));
    free(out);
}

static int child_load(void)
{
    setup(NULL);
    if (!g_fatbin)
        return 2;
    st_private_shm("kchild");
    st_primary(0);
    CUmodule m;
    printf("load %d\n", (int)cuModuleLoadData(&m, g_fatbin));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child-load") == 0)
        return child_load();
    st_private_shm("kern");
    setenv("SIMCUDA_DEVICES", "a100:4G,t4:4G,h100:4G,b200:4G,a10:4G", 1);
    setenv("SIMCUDA_ISOLATION", "1", 1); /* device memory is not host memory */
    unsetenv("CUDA_VISIBLE_DEVICES");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_module_and_launch),
        cmocka_unit_test(test_arguments_copied_at_launch),
        cmocka_unit_test(test_launch_info_and_attributes),
        cmocka_unit_test(test_other_image_forms),
        cmocka_unit_test(test_module_functions_enumerated),
        cmocka_unit_test(test_library_and_kernel),
        cmocka_unit_test(test_library_unload_while_queued),
        cmocka_unit_test(test_architectures),
        cmocka_unit_test(test_sticky_errors),
        cmocka_unit_test(test_kernel_without_twin),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
