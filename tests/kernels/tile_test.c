/* d2's tiled portable kernels (kernels/portable.cu: register-blocked
 * shared-memory GEMM and implicit-GEMM convolutions, one source for the
 * GPU and simcuda's twin) give, on every shape tests/kernels/tile_client.c
 * tries (odd sizes, partial and exact tiles of each kernel, transposes,
 * padded leading dimensions, batches, strides, padding, dilation, groups,
 * NHWC, convolution mode, 16-bit types, beta, NaN/Inf), the bits of the
 * reference element functions on the host, on a100 and t4. Negative
 * control: without the shim simcuda's cuBLAS and cuDNN give other bits on
 * most of these cases (their own orders). */
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

/* tile_client MODE DEV; counts of ok / BAD / refused cases. */
static void tiles(const char *mode, int dev, int shim, int *ok, int *bad, int *refused)
{
    char d[8];
    snprintf(d, sizeof(d), "%d", dev);
    char *argv[] = { (char *)es_build_path("tests/kernels/tile_client"), (char *)mode, d, NULL };
    char *env[4];
    int n = 0;
    if (shim)
        env[n++] = (char *)es_preload_env(es_build_path("lib/libeasyscale.so"), g_preload,
                                          sizeof(g_preload));
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
    if (shim && (*bad || *refused))
        fail_msg("d2 %s on device %d:\n%s", mode, dev, r.out);
    es_proc_result_free(&r);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_shapes),
        cmocka_unit_test(test_conv_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
