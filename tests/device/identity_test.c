/* d2's device identity (device/device.c): the canonical device is the
 * least capable model of EASYSCALE_CANONICAL_DEVICE's list (default: the
 * device itself), attributes are only ever lowered (never above the real
 * GPU's), and the compute capability stays real for code generators and
 * loaders, told apart by the caller's address (tests/device/id_client.c with
 * tests/device/id_caller.c built as a JIT library, as Triton's utilities and
 * as a plain library). Negative controls: without the shim (and in d1)
 * every caller sees the real figures; the canonical figures themselves
 * exceed a T4's (what reporting them unlowered, the old behaviour, told
 * it). Model figures: the CUDA C++ Programming Guide's per-architecture
 * limits and NVIDIA's data sheets (docs/VENDOR-FACTS.md). */
#include <cuda.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "device/device.h"
#include "tests/harness.h"

#define TMO 120

static char g_preload[4096];

/* ---- the list and the lowering, in this process ---------------------------------------- */

static int g_real[2] = { 8, 0 }; /* what the fake query answers: major, minor */

static int fake_query(int attr, int dev, int *v)
{
    (void)dev;
    *v = attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? g_real[0] : g_real[1];
    return 0;
}

static void test_canonical_parse(void **state)
{
    (void)state;
    char msg[256];
    int v = 0, ma, mi;
    assert_int_equal(es_device_init(NULL, msg, sizeof(msg)), 0);
    assert_int_equal(es_device_canonical_set(), 0);
    assert_int_equal(es_device_canonical_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &v), 0);
    assert_int_equal(es_device_init("a100,t4", msg, sizeof(msg)), 0);
    assert_int_equal(es_device_canonical_set(), 1);
    assert_int_equal(es_device_canonical_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &v), 1);
    assert_int_equal(v, 40);
    assert_int_equal(es_device_canonical_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                              &v), 1);
    assert_int_equal(v, 65536);
    es_device_canonical_cc(&ma, &mi);
    assert_int_equal(ma * 10 + mi, 75);
    assert_int_equal(es_device_init("t4,a100", msg, sizeof(msg)), 0); /* order-free */
    es_device_canonical_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &v);
    assert_int_equal(v, 40);
    assert_int_equal(es_device_init("A100,h100,B200", msg, sizeof(msg)), 0);
    es_device_canonical_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &v);
    assert_int_equal(v, 108);
    es_device_canonical_cc(&ma, &mi);
    assert_int_equal(ma * 10 + mi, 80);
    /* cc is a pair: l4 8.9 and h100 9.0 give 8.9, not 8.0 */
    assert_int_equal(es_device_init("h100,l4", msg, sizeof(msg)), 0);
    es_device_canonical_cc(&ma, &mi);
    assert_int_equal(ma * 10 + mi, 89);
    assert_int_equal(es_device_canonical_attr(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, &v), 0);
    assert_int_equal(es_device_init("a100,,t4", msg, sizeof(msg)), -EINVAL);
    assert_int_equal(es_device_init("a100,x9000", msg, sizeof(msg)), -EINVAL);
    assert_non_null(strstr(msg, "x9000"));
    assert_int_equal(es_device_init("a100,", msg, sizeof(msg)), -EINVAL);
    /* CUDA 13 supports neither: not models of a job */
    assert_int_equal(es_device_init("v100", msg, sizeof(msg)), -EINVAL);
    assert_int_equal(es_device_init("a100,p100", msg, sizeof(msg)), -EINVAL);
    assert_int_equal(es_device_init(NULL, msg, sizeof(msg)), 0);
}

/* Lowered, never raised: min(real, canonical), the compute capability as a
 * pair; without a list nothing changes. */
static void test_lower_only(void **state)
{
    (void)state;
    char msg[256];
    int v;
    const void *me = (const void *)test_lower_only; /* an ordinary caller */
    assert_int_equal(es_device_init("a100,h100", msg, sizeof(msg)), 0);
    v = 40; /* a T4 outside the list */
    assert_int_equal(es_device_lower_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0, &v, me,
                                          fake_query), 0);
    assert_int_equal(v, 40);
    v = 65536;
    assert_int_equal(es_device_lower_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                          0, &v, me, fake_query), 0);
    assert_int_equal(v, 65536);
    /* the old behaviour's value would have been above the T4's */
    assert_int_equal(es_device_canonical_attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                              &v), 1);
    assert_true(v > 65536);
    g_real[0] = 7, g_real[1] = 5;
    v = 7;
    assert_int_equal(es_device_lower_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0, &v, me,
                                          fake_query), 0);
    assert_int_equal(v, 7);
    v = 5;
    assert_int_equal(es_device_lower_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0, &v, me,
                                          fake_query), 0);
    assert_int_equal(v, 5);
    int ma = 7, mi = 5;
    assert_int_equal(es_device_lower_cc(&ma, &mi, me), 0);
    assert_int_equal(ma * 10 + mi, 75);
    /* an h100 in an a100 + h100 job: lowered */
    g_real[0] = 9, g_real[1] = 0;
    v = 132;
    assert_int_equal(es_device_lower_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0, &v, me,
                                          fake_query), 1);
    assert_int_equal(v, 108);
    v = 9;
    assert_int_equal(es_device_lower_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0, &v, me,
                                          fake_query), 1);
    assert_int_equal(v, 8);
    v = 0;
    assert_int_equal(es_device_lower_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0, &v, me,
                                          fake_query), 0);
    assert_int_equal(v, 0);
    /* an l4 (8.9) in an l4 + a10 (8.6) job: the minor alone drops */
    assert_int_equal(es_device_init("l4,a10", msg, sizeof(msg)), 0);
    g_real[0] = 8, g_real[1] = 9;
    v = 9;
    assert_int_equal(es_device_lower_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0, &v, me,
                                          fake_query), 1);
    assert_int_equal(v, 6);
    /* no list: the truth */
    assert_int_equal(es_device_init("", msg, sizeof(msg)), 0);
    v = 132;
    assert_int_equal(es_device_lower_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0, &v, me,
                                          fake_query), 0);
    assert_int_equal(v, 132);
    ma = 9, mi = 0;
    assert_int_equal(es_device_lower_cc(&ma, &mi, me), 0);
    assert_int_equal(ma * 10 + mi, 90);
    assert_int_equal(es_device_caller_kind(me), ES_CALLER_APP);
    assert_int_equal(es_device_caller_kind(NULL), ES_CALLER_APP);
}

/* ---- through the shim --------------------------------------------------------------- */

typedef struct {
    int sm, ma, mi, optin, smsm, l2, thr, blk, cma, cmi;
} seen_t;

static void parse(const es_proc_result_t *r, const char *who, seen_t *s)
{
    char key[32], buf[256];
    snprintf(key, sizeof(key), "%s ", who);
    const char *v = es_find_last(r->out, key, buf, sizeof(buf));
    if (!v || sscanf(v, "sm %d cc %d.%d optin %d smsm %d l2 %d thr %d blk %d capi %d.%d", &s->sm,
                     &s->ma, &s->mi, &s->optin, &s->smsm, &s->l2, &s->thr, &s->blk, &s->cma,
                     &s->cmi) != 10)
        fail_msg("no line '%s' in:\n%s", who, r->out);
}

/* id_client on device dev (0 a100, 1 t4, 2 h100) with the shim at det and
 * the canonical list canon (NULL: unset); the views of the program, the
 * JIT library, Triton's utilities and the plain library. */
static void seen(int shim, int dev, const char *det, const char *canon, seen_t out[4])
{
    char d[16], detenv[64], canonenv[128];
    snprintf(d, sizeof(d), "%d", dev);
    snprintf(detenv, sizeof(detenv), "EASYSCALE_DETERMINISM=%s", det);
    snprintf(canonenv, sizeof(canonenv), "EASYSCALE_CANONICAL_DEVICE=%s", canon ? canon : "");
    char *argv[] = { (char *)es_build_path("tests/device/id_client"), d,
                     (char *)es_build_path("tests/device/idlib"), NULL };
    char *env[5];
    int n = 0;
    if (shim)
        env[n++] = (char *)es_preload_env(es_build_path("lib/libeasyscale.so"), g_preload,
                                          sizeof(g_preload));
    env[n++] = detenv;
    env[n++] = "SIMCUDA_DEVICES=a100:4G,t4:4G,h100:4G";
    if (canon)
        env[n++] = canonenv;
    env[n] = NULL;
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, TMO, &r), 0);
    assert_false(r.timed_out);
    if (r.status != 0)
        fail_msg("id_client %d %s %s: exit %d\n%s", dev, det, canon ? canon : "-", r.status,
                 r.out);
    static const char *const who[4] = { "app", "nvrtc", "triton", "plain" };
    for (int i = 0; i < 4; i++)
        parse(&r, who[i], &out[i]);
    es_proc_result_free(&r);
}

static void expect(const seen_t *s, int sm, int cc, int optin, const char *what)
{
    if (s->sm != sm || s->ma * 10 + s->mi != cc || s->cma * 10 + s->cmi != cc || s->optin != optin)
        fail_msg("%s: sm %d cc %d.%d (capi %d.%d) optin %d; expected sm %d cc %d optin %d", what,
                 s->sm, s->ma, s->mi, s->cma, s->cmi, s->optin, sm, cc, optin);
}

/* The real figures: no shim, d1, and d2 without a list (each device is
 * its own canonical device). */
static void test_real_without_list(void **state)
{
    (void)state;
    seen_t s[4];
    static const int sm[3] = { 108, 40, 132 }, cc[3] = { 80, 75, 90 };
    static const int optin[3] = { 166912, 65536, 232448 };
    for (int dev = 0; dev < 3; dev++) {
        seen(0, dev, "off", "a100,t4", s);
        for (int i = 0; i < 4; i++)
            expect(&s[i], sm[dev], cc[dev], optin[dev], "no shim");
        seen(1, dev, "d1", "a100,t4", s);
        for (int i = 0; i < 4; i++)
            expect(&s[i], sm[dev], cc[dev], optin[dev], "d1");
        seen(1, dev, "d2", NULL, s);
        for (int i = 0; i < 4; i++)
            expect(&s[i], sm[dev], cc[dev], optin[dev], "d2 without a list");
    }
}

/* d2, a job of a100s and t4s: both report the t4's figures to the program
 * and to a plain library; the JIT library and Triton's utilities get the
 * real compute capability (and the lowered sizes). */
static void test_d2_job_set(void **state)
{
    (void)state;
    seen_t a[4], t[4];
    seen(1, 0, "d2", "a100,t4", a);
    seen(1, 1, "d2", "t4,a100", t);
    expect(&a[0], 40, 75, 65536, "a100 app");
    expect(&a[3], 40, 75, 65536, "a100 plain library");
    expect(&a[1], 40, 80, 65536, "a100 JIT library");
    expect(&a[2], 40, 80, 65536, "a100 Triton utilities");
    assert_int_equal(a[0].smsm, 65536);
    assert_int_equal(a[0].l2, 4194304);
    assert_int_equal(a[0].thr, 1024);
    assert_int_equal(a[0].blk, 16);
    for (int i = 0; i < 4; i++)
        expect(&t[i], 40, 75, 65536, "t4");
    assert_memory_equal(&t[0], &a[0], sizeof(seen_t)); /* the same view on both */
}

/* d2 never raises: a t4 in a job declared as a100 + h100 (its figures are
 * below the list's) reports its own; the h100 reports the a100's. */
static void test_d2_never_raised(void **state)
{
    (void)state;
    seen_t s[4];
    seen(1, 1, "d2", "a100,h100", s);
    for (int i = 0; i < 4; i++)
        expect(&s[i], 40, 75, 65536, "t4 under a100,h100");
    seen(1, 2, "d2", "a100,h100", s);
    expect(&s[0], 108, 80, 166912, "h100 app under a100,h100");
    expect(&s[1], 108, 90, 166912, "h100 JIT library under a100,h100");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_canonical_parse),
        cmocka_unit_test(test_lower_only),
        cmocka_unit_test(test_real_without_list),
        cmocka_unit_test(test_d2_job_set),
        cmocka_unit_test(test_d2_never_raised),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
