/* Tests of the collective digests' hash kernel (kernels/digest.cu) on
 * simcuda, through the driver API as the shim launches it (the fatbin nvcc
 * built; simcuda runs the same source through sim/cucpu):
 *  - the hash equals this test's own host computation of the documented
 *    formula (controller/digest.h, kernels/digest.cu), for sizes around the
 *    word and block edges, aligned and unaligned addresses;
 *  - it is the same for every grid and block count the launch may use
 *    (and under SIMCUDA_CHAOS, whatever the block order);
 *  - one flipped bit anywhere, or one byte more, changes it;
 *  - the host never reads the device memory: the buffers are filled and the
 *    hash read back with copies only (also run with SIMCUDA_ISOLATION=1).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/harness.h"

static CUcontext g_ctx;
static CUmodule g_mod;
static CUfunction g_fn;
static CUstream g_s;

#define CK(x)                                                                                    \
    do {                                                                                         \
        CUresult r_ = (x);                                                                       \
        if (r_ != CUDA_SUCCESS)                                                                  \
            fail_msg("%s: CUresult %d", #x, (int)r_);                                            \
    } while (0)

static int setup(void **state)
{
    (void)state;
    CUdevice d;
    size_t len;
    void *img = es_read_file(es_build_path("gen/es_digest.fatbin"), &len);
    if (!img || cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&g_ctx, d) ||
        cuCtxSetCurrent(g_ctx) || cuModuleLoadData(&g_mod, img) ||
        cuModuleGetFunction(&g_fn, g_mod, "es_digest_hash") ||
        cuStreamCreate(&g_s, CU_STREAM_NON_BLOCKING)) {
        free(img);
        return -1;
    }
    free(img);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cuStreamDestroy(g_s);
    cuModuleUnload(g_mod);
    return 0;
}

/* The formula, written here independently of the kernel. */
static uint64_t mix(uint64_t i, uint64_t w)
{
    uint64_t x = w ^ (i * 0x9E3779B97F4A7C15ull);
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

static uint64_t host_hash(const unsigned char *p, size_t n)
{
    uint64_t h = mix(~0ull, n);
    for (size_t i = 0; i * 8 < n; i++) {
        uint64_t w = 0;
        for (size_t b = 0; b < 8 && i * 8 + b < n; b++)
            w |= (uint64_t)p[i * 8 + b] << (8 * b);
        h += mix(i, w);
    }
    return h;
}

/* The kernel's hash of n bytes at device offset off of a buffer holding
 * data, launched with grid x block. */
static uint64_t dev_hash(const unsigned char *data, size_t n, size_t off, unsigned grid,
                         unsigned block)
{
    CUdeviceptr buf, out;
    uint64_t zero = 0, h = 0;
    CK(cuMemAlloc(&buf, n + off + 8));
    CK(cuMemAlloc(&out, 8));
    if (n)
        CK(cuMemcpyHtoD(buf + off, data, n));
    CK(cuMemcpyHtoD(out, &zero, 8));
    CUdeviceptr p = buf + off;
    unsigned long long nb = n;
    void *args[] = { &p, &nb, &out };
    CK(cuLaunchKernel(g_fn, grid, 1, 1, block, 1, 1, 0, g_s, args, NULL));
    CK(cuStreamSynchronize(g_s));
    CK(cuMemcpyDtoH(&h, out, 8));
    CK(cuMemFree(buf));
    CK(cuMemFree(out));
    return h;
}

static unsigned char *pattern(size_t n, unsigned seed)
{
    unsigned char *p = malloc(n ? n : 1);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (unsigned char)(seed >> 16);
    }
    return p;
}

static void test_formula(void **state)
{
    (void)state;
    static const size_t sizes[] = { 0, 1, 7, 8, 9, 255, 2048, 2049, 16384, 38200, 262151 };
    static const size_t offs[] = { 0, 4, 3 };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (size_t o = 0; o < sizeof(offs) / sizeof(offs[0]); o++) {
            unsigned char *d = pattern(sizes[i], (unsigned)(i * 7 + o));
            uint64_t want = host_hash(d, sizes[i]);
            unsigned blocks = (unsigned)((sizes[i] / 8 + 255) / 256);
            uint64_t got = dev_hash(d, sizes[i], offs[o], blocks ? blocks : 1, 256);
            if (got != want)
                fail_msg("%zu bytes at offset %zu: kernel %016llx, formula %016llx", sizes[i],
                         offs[o], (unsigned long long)got, (unsigned long long)want);
            free(d);
        }
}

static void test_grid_independent(void **state)
{
    (void)state;
    size_t n = 100003;
    unsigned char *d = pattern(n, 42);
    uint64_t want = host_hash(d, n);
    static const unsigned shapes[][2] = { { 1, 256 }, { 3, 256 }, { 49, 256 }, { 256, 256 },
                                          { 7, 64 },  { 2, 128 } };
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        uint64_t got = dev_hash(d, n, 0, shapes[s][0], shapes[s][1]);
        if (got != want)
            fail_msg("grid %u x %u: %016llx, not %016llx", shapes[s][0], shapes[s][1],
                     (unsigned long long)got, (unsigned long long)want);
    }
    free(d);
}

static void test_sensitive(void **state)
{
    (void)state;
    size_t n = 4096 + 5;
    unsigned char *d = pattern(n + 1, 9);
    uint64_t base = dev_hash(d, n, 0, 3, 256);
    static const size_t at[] = { 0, 1, 7, 8, 2047, 4096, 4100 };
    for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++)
        for (int bit = 0; bit < 8; bit += 7) {
            d[at[k]] ^= (unsigned char)(1u << bit);
            uint64_t h = dev_hash(d, n, 0, 3, 256);
            d[at[k]] ^= (unsigned char)(1u << bit);
            if (h == base)
                fail_msg("flipping bit %d of byte %zu left the hash unchanged", bit, at[k]);
        }
    /* one byte more (a zero byte): the length is part of the hash */
    d[n] = 0;
    assert_true(dev_hash(d, n + 1, 0, 3, 256) != base);
    /* two words swapped: the position is part of the hash */
    unsigned char w[8];
    memcpy(w, d, 8);
    memcpy(d, d + 8, 8);
    memcpy(d + 8, w, 8);
    assert_true(dev_hash(d, n, 0, 3, 256) != base);
    free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formula),
        cmocka_unit_test(test_grid_independent),
        cmocka_unit_test(test_sensitive),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
