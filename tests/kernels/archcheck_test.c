/* kernels/archcheck.c: whether a device-code image runs on a compute
 * capability, by the driver's rules (a cubin within its architecture
 * family at the same or a later minor version, PTX on its version and
 * later), on nvcc's own output: the shim's portable fatbin (every
 * architecture CUDA 13 builds, PTX of the newest) and the fatbin reader's
 * fixtures (sm_80 + sm_90 SASS and compute_90 PTX; an sm_90 cubin; sm_90
 * PTX). The negative cases are the ones d2's start-up check refuses. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "kernels/archcheck.h"
#include "tests/harness.h"

static void *slurp(const char *rel, size_t *size)
{
    const char *path = es_build_path(rel);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    p[n] = '\0';
    fclose(f);
    *size = (size_t)n + 1;
    return p;
}

static int runs(const void *img, size_t size, int cc)
{
    return es_image_runs_on(img, size, cc / 10, cc % 10);
}

static void test_portable_fatbin(void **state)
{
    (void)state;
    size_t n;
    void *img = slurp("gen/es_portable.fatbin", &n);
    static const int yes[] = { 75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121, 130 };
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        if (runs(img, n, yes[i]) != 1)
            fail_msg("the portable fatbin does not run on %d", yes[i]);
    assert_int_equal(runs(img, n, 70), 0);
    assert_int_equal(runs(img, n, 60), 0);
    free(img);
}

static void test_fixtures(void **state)
{
    (void)state;
    size_t n;
    void *img = slurp("tests/audit/fb_default.fatbin", &n);
    assert_int_equal(runs(img, n, 75), 0);
    assert_int_equal(runs(img, n, 80), 1);
    assert_int_equal(runs(img, n, 86), 1);  /* sm_80 SASS */
    assert_int_equal(runs(img, n, 90), 1);
    assert_int_equal(runs(img, n, 100), 1); /* compute_90 PTX */
    free(img);
    img = slurp("tests/audit/fb_sm90.cubin", &n);
    assert_int_equal(runs(img, n, 80), 0);
    assert_int_equal(runs(img, n, 90), 1);
    assert_int_equal(runs(img, n, 100), 0); /* SASS never crosses a major version */
    free(img);
    img = slurp("tests/audit/fb.ptx", &n);
    assert_int_equal(runs(img, n, 89), 0);
    assert_int_equal(runs(img, n, 90), 1);
    assert_int_equal(runs(img, n, 120), 1);
    free(img);
    static const char junk[64] = "not a device image at all";
    assert_true(es_image_runs_on(junk, sizeof(junk), 9, 0) <= 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_portable_fatbin),
        cmocka_unit_test(test_fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
