/* d2's tiled portable kernels (kernels/portable.cu: register-blocked
 * shared-memory GEMM and implicit-GEMM convolutions, one source for the
 * GPU and simcuda's twin) give, on every shape tests/kernels/tile_client.c
 * tries (odd sizes, partial and exact tiles of each kernel, transposes,
 * padded leading dimensions, batches, strides, padding, dilation, groups,
 * NHWC, convolution mode, 16-bit types, beta, NaN/Inf), the bits of the
 * reference element functions on the host, on a100 and t4. Negative
 * control: without the shim simcuda's cuBLAS and cuDNN give other bits on
 * most of these cases (their own orders).
 *
 * d2's GEMMs and convolutions on both of EASYSCALE_D2_GEMM's paths: int8
 * (the default; the int8 kernels es_gemm_int8 / es_conv_*_int8 against
 * the 128-bit C reference of the definition, kernels/d2int8.c) and fma
 * (against the element functions),
 * on the GEMM shapes and on the int8 GEMM's own cases (an inner dimension
 * past 2^17, wide-range and adversarial data, NaN/Inf, overflow,
 * subnormal results, cublasSgemm / SgemmStridedBatched / GemmEx /
 * device-pointer scalars). Negative control: each path's results differ
 * from the other path's reference on most cases (the two definitions
 * round differently), so the comparison sees which kernel ran. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/harness.h"

#define TMO 300

static char g_preload[4096];

/* tile_client MODE DEV REF under EASYSCALE_D2_GEMM=path (NULL: unset, the
 * default int8); counts of ok / BAD / refused cases. A shim run fails on
 * any BAD or refused case unless `control` (a negative control: counted). */
static void tiles_ref(const char *mode, int dev, int shim, const char *path, const char *ref,
                      int control, int *ok, int *bad, int *refused)
{
    char d[16], pv[64];
    snprintf(d, sizeof(d), "%d", dev);
    char *argv[] = { (char *)es_build_path("tests/kernels/tile_client"), (char *)mode, d,
                     (char *)ref, NULL };
    char *env[5];
    int n = 0;
    if (shim)
        env[n++] = (char *)es_preload_env(es_build_path("lib/libeasyscale.so"), g_preload,
                                          sizeof(g_preload));
    if (path) {
        snprintf(pv, sizeof(pv), "EASYSCALE_D2_GEMM=%s", path);
        env[n++] = pv;
    }
    env[n++] = "EASYSCALE_DETERMINISM=d2";
    env[n++] = "SIMCUDA_DEVICES=a100:8G,t4:8G";
    env[n] = NULL;
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, TMO, &r), 0);
    assert_false(r.timed_out);
    if (r.status != 0 || !strstr(r.out, "\ndone\n"))
        fail_msg("tile_client %s %d: exit %d\n%s", mode, dev, r.status, r.out);
    *ok = *bad = *refused = 0;
    for (const char *p = r.out; (p = strstr(p, "case ")) != NULL; p += 5) {
        const char *sp = strchr(p + 5, ' ');
        if (!sp)
            break;
        if (!strncmp(sp + 1, "ok", 2))
            (*ok)++;
        else if (!strncmp(sp + 1, "BAD", 3))
            (*bad)++;
        else
            (*refused)++;
    }
    if (shim && !control && (*bad || *refused))
        fail_msg("d2 %s on device %d (EASYSCALE_D2_GEMM=%s, reference %s):\n%s", mode, dev,
                 path ? path : "unset", ref, r.out);
    es_proc_result_free(&r);
}

/* The fma path (the convolutions' only one) against the element functions. */
static void tiles(const char *mode, int dev, int shim, int *ok, int *bad, int *refused)
{
    tiles_ref(mode, dev, shim, "fma", "fma", 0, ok, bad, refused);
}

static void test_gemm_shapes(void **state)
{
    (void)state;
    int ok, bad, refused;
    for (int dev = 0; dev < 2; dev++) {
        tiles("gemm", dev, 1, &ok, &bad, &refused);
        assert_int_equal(ok, 19);
    }
    tiles("gemm", 0, 0, &ok, &bad, &refused);
    if (bad < 10)
        fail_msg("without the shim only %d of %d GEMM cases differ from the portable order", bad,
                 ok + bad);
}

/* The int8 path (the default: EASYSCALE_D2_GEMM unset) on the GEMM shapes
 * and the int8 cases, against the 128-bit reference, on a100 and t4;
 * int8 set explicitly gives the same. */
static void test_int8_shapes(void **state)
{
    (void)state;
    int ok, bad, refused;
    for (int dev = 0; dev < 2; dev++) {
        tiles_ref("gemm", dev, 1, NULL, "int8", 0, &ok, &bad, &refused);
        assert_int_equal(ok, 19);
        tiles_ref("int8", dev, 1, NULL, "int8", 0, &ok, &bad, &refused);
        assert_int_equal(ok, 20);
    }
    tiles_ref("int8", 1, 1, "int8", "int8", 0, &ok, &bad, &refused);
    assert_int_equal(ok, 20);
}

/* The fma path on the int8 cases against the element functions; negative
 * controls: each path against the other's reference differs on most cases
 * (all but alpha 0 and the all-special outputs). */
static void test_int8_controls(void **state)
{
    (void)state;
    int ok, bad, refused;
    tiles_ref("int8", 0, 1, "fma", "fma", 0, &ok, &bad, &refused);
    assert_int_equal(ok, 20);
    tiles_ref("int8", 0, 1, "fma", "int8", 1, &ok, &bad, &refused);
    if (bad < 15)
        fail_msg("the fma path matches the int8 reference on %d of %d cases", ok, ok + bad);
    tiles_ref("int8", 1, 1, "int8", "fma", 1, &ok, &bad, &refused);
    if (bad < 15)
        fail_msg("the int8 path matches the fma reference on %d of %d cases", ok, ok + bad);
}

static void test_conv_shapes(void **state)
{
    (void)state;
    int ok, bad, refused;
    for (int dev = 0; dev < 2; dev++) {
        tiles("conv", dev, 1, &ok, &bad, &refused);
        assert_int_equal(ok, 33);
    }
    tiles("conv", 0, 0, &ok, &bad, &refused);
    if (bad < 10)
        fail_msg("without the shim only %d of %d convolution cases differ from the portable "
                 "order (%d refused)", bad, ok + bad, refused);
}

/* The convolutions on the int8 path (the default) against the 128-bit
 * reference of the definition on their implicit GEMMs, on a100 and t4;
 * negative controls: the int8 path against the fma order's reference and
 * the fma path against the int8 one differ on most cases. */
static void test_int8_conv_shapes(void **state)
{
    (void)state;
    int ok, bad, refused;
    for (int dev = 0; dev < 2; dev++) {
        tiles_ref("conv", dev, 1, NULL, "int8", 0, &ok, &bad, &refused);
        assert_int_equal(ok, 33);
    }
    tiles_ref("conv", 1, 1, "int8", "fma", 1, &ok, &bad, &refused);
    if (bad < 20)
        fail_msg("the int8 path matches the fma order on %d of %d convolution cases", ok,
                 ok + bad);
    tiles_ref("conv", 0, 1, "fma", "int8", 1, &ok, &bad, &refused);
    if (bad < 20)
        fail_msg("the fma path matches the int8 reference on %d of %d convolution cases", ok,
                 ok + bad);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_shapes),
        cmocka_unit_test(test_int8_shapes),
        cmocka_unit_test(test_int8_controls),
        cmocka_unit_test(test_conv_shapes),
        cmocka_unit_test(test_int8_conv_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
