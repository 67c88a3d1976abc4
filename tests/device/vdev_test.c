/* Tests of placement and virtual devices (device/vdev.c and the device
 * calls of intercept/cuda.c): tests/device/vdev_probe, a program written
 * against cuda.h only, run under libeasyscale.so on simcuda.
 *
 *  - LOCAL_WORLD_SIZE=4 on 2 GPUs: 4 devices; before the selection
 *    ordinal v answers for GPU v % 2; device 3 selected: slot 1; every
 *    ordinal then answers for GPU 1 (UUID and bus id, read by the probe
 *    after the selection); the context's device and a pointer's device
 *    ordinal read 3; cuMemGetInfo reports half of the GPU (two ESTs on
 *    it). Negative controls: the same probe without the shim, or with
 *    EASYSCALE_COLLECTIVES=nccl, sees 2 devices and cannot select device
 *    3; without the shim, after selecting device 1, ordinal 0 still
 *    answers for GPU 0.
 *  - EASYSCALE_SLOT by ordinal and by UUID puts the EST on that GPU (every
 *    ordinal answers for it, before and after the selection of another);
 *    a slot that names no visible device ends the process (status 2, one
 *    line).
 *  - d2 on a T4 and an A100, 4 ESTs, the A100 selected: every ordinal
 *    reports the A100's SM count, compute capability and opt-in shared
 *    memory (read without the shim); with EASYSCALE_CANONICAL_DEVICE=a100,t4
 *    the T4's (the compute capability pair included); at d1, the A100's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/harness.h"

static char g_pre[1200];

/* The shim's LD_PRELOAD entry into g_pre. A shim that is not built fails
 * the test: the loader only warns about a preload that does not exist, and
 * the run would go on without it. */
static void need_shim(void)
{
    es_preload_env(es_need_built("lib/libeasyscale.so"), g_pre, sizeof g_pre);
}

/* The probe on SIMCUDA_DEVICES=devs. */
static es_proc_result_t probe_on(const char *devs, int shim, const char *lws, const char *lr,
                                 const char *x1, const char *x2, const char *x3)
{
    char a[64], b[64], dv[128];
    snprintf(a, sizeof a, "LOCAL_WORLD_SIZE=%s", lws ? lws : "");
    snprintf(b, sizeof b, "LOCAL_RANK=%s", lr ? lr : "");
    snprintf(dv, sizeof dv, "SIMCUDA_DEVICES=%s", devs);
    char *env[] = { dv, "CUDA_VISIBLE_DEVICES=", a, b,
                    shim ? g_pre : "ES_TEST_NO_SHIM=1", (char *)x1, (char *)x2, (char *)x3,
                    NULL };
    char *argv[] = { (char *)es_build_path("tests/device/vdev_probe"), NULL };
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 60, &r), 0);
    return r;
}

static es_proc_result_t probe(int shim, const char *lws, const char *lr, const char *x1,
                              const char *x2)
{
    return probe_on("a100:8G,a100:8G", shim, lws, lr, x1, x2, NULL);
}

/* The value after "key " on the line starting with it. */
static const char *val(const es_proc_result_t *r, const char *key, char *buf, size_t len)
{
    const char *v = es_find_last(r->out, key, buf, len);
    if (!v)
        fail_msg("no \"%s\" in:\n%s", key, r->out);
    return v;
}

/* "device V handle H bus B uuid U name ..." of ordinal v: the uuid. */
static void uuid_of(const es_proc_result_t *r, int v, char *out, size_t len)
{
    char key[32];
    snprintf(key, sizeof key, "device %d ", v);
    const char *p = strstr(r->out, key);
    assert_non_null(p);
    p = strstr(p, " uuid ");
    assert_non_null(p);
    snprintf(out, len, "%.32s", p + 6);
}

/* "bus B uuid U" of ordinal v, from the line "KIND V ..." (KIND "device":
 * before the selection; "selected-device": after it). */
static void ident_of(const es_proc_result_t *r, const char *kind, int v, char *out, size_t len)
{
    char key[48];
    snprintf(key, sizeof key, "\n%s %d ", kind, v);
    const char *p = strstr(r->out, key);
    if (strncmp(r->out, key + 1, strlen(key + 1)) == 0)
        p = r->out;
    if (!p)
        fail_msg("no \"%s\" line in:\n%s", key + 1, r->out);
    if (*p == '\n')
        p++;
    const char *eol = strchr(p, '\n');
    const char *b = strstr(p, " bus ");
    if (!b || (eol && b > eol))
        fail_msg("no bus id on the \"%s\" line", key + 1);
    b++;
    size_t k = strcspn(b, "\n");
    const char *nm = strstr(b, " name ");
    if (nm && nm < b + k)
        k = (size_t)(nm - b);
    snprintf(out, len, "%.*s", (int)k, b);
}

static size_t meminfo_total(const es_proc_result_t *r)
{
    const char *p = strstr(r->out, "meminfo ");
    assert_non_null(p);
    size_t fr = 0, tot = 0;
    assert_int_equal(sscanf(p, "meminfo %zu %zu", &fr, &tot), 2);
    assert_true(fr <= tot);
    return tot;
}

static void test_plain_devices(void **state)
{
    (void)state;
    /* without the shim: 2 devices, device 3 does not exist */
    es_proc_result_t r = probe(0, "4", "3", NULL, NULL);
    char buf[64];
    assert_string_equal(val(&r, "count ", buf, sizeof buf), "2");
    assert_non_null(strstr(r.out, "error cuDeviceGet(&d, want)"));
    es_proc_result_free(&r);
    need_shim();
    /* under the shim with plain NCCL: no virtual devices either */
    r = probe(1, "4", "3", "EASYSCALE_COLLECTIVES=nccl", NULL);
    assert_string_equal(val(&r, "count ", buf, sizeof buf), "2");
    assert_non_null(strstr(r.out, "error cuDeviceGet(&d, want)"));
    es_proc_result_free(&r);
}

static void test_virtual_devices(void **state)
{
    (void)state;
    need_shim();
    es_proc_result_t plain = probe(0, NULL, "1", NULL, NULL);
    assert_int_equal(plain.status, 0);
    char u0[40], u1[40];
    uuid_of(&plain, 0, u0, sizeof u0);
    uuid_of(&plain, 1, u1, sizeof u1);
    assert_string_not_equal(u0, u1);
    size_t whole = meminfo_total(&plain);
    char id0[128], id1[128], got[128];
    ident_of(&plain, "device", 0, id0, sizeof id0);
    ident_of(&plain, "device", 1, id1, sizeof id1);
    assert_string_not_equal(id0, id1);
    /* negative control: without the shim, after selecting device 1,
     * ordinal 0 still answers for GPU 0 */
    ident_of(&plain, "selected-device", 0, got, sizeof got);
    assert_string_equal(got, id0);
    ident_of(&plain, "selected-device", 1, got, sizeof got);
    assert_string_equal(got, id1);

    es_proc_result_t r = probe(1, "4", "3", NULL, NULL);
    if (r.status != 0)
        fprintf(stderr, "%s\n", r.out);
    assert_int_equal(r.status, 0);
    char buf[64];
    assert_string_equal(val(&r, "count ", buf, sizeof buf), "4");
    /* the handles are the virtual ordinals; before the selection ordinal v
     * stood for GPU v % 2 */
    for (int v = 0; v < 4; v++) {
        char key[32], want[64], u[40];
        snprintf(key, sizeof key, "device %d handle %d ", v, v);
        assert_non_null(strstr(r.out, key));
        uuid_of(&r, v, u, sizeof u);
        snprintf(want, sizeof want, "%s", v % 2 ? u1 : u0);
        assert_string_equal(u, want);
    }
    assert_string_equal(val(&r, "get-out-of-range ", buf, sizeof buf), "101"); /* INVALID_DEVICE */
    /* after the selection of device 3 (slot 1) every ordinal answers for
     * GPU 1: UUID and bus id */
    for (int v = 0; v < 4; v++) {
        ident_of(&r, "selected-device", v, got, sizeof got);
        if (strcmp(got, id1) != 0)
            fail_msg("after the selection ordinal %d answers \"%s\", not GPU 1's \"%s\"", v,
                     got, id1);
    }
    assert_string_equal(val(&r, "ctxdev ", buf, sizeof buf), "3");
    assert_string_equal(val(&r, "ptrdev ", buf, sizeof buf), "3");
    /* two ESTs (ranks 1 and 3 of 4) on GPU 1 */
    assert_true(meminfo_total(&r) == whole / 2);
    es_proc_result_free(&r);
    es_proc_result_free(&plain);
}

static void test_slot(void **state)
{
    (void)state;
    need_shim();
    es_proc_result_t plain = probe(0, NULL, NULL, NULL, NULL);
    char u0[40], u1[40], u[40], buf[64], id0[128], id1[128], got[128];
    uuid_of(&plain, 0, u0, sizeof u0);
    uuid_of(&plain, 1, u1, sizeof u1);
    ident_of(&plain, "device", 0, id0, sizeof id0);
    ident_of(&plain, "device", 1, id1, sizeof id1);
    es_proc_result_free(&plain);

    /* EASYSCALE_SLOT=1: every ordinal is GPU 1, from the start */
    es_proc_result_t r = probe(1, "4", "0", "EASYSCALE_SLOT=1", NULL);
    assert_int_equal(r.status, 0);
    for (int v = 0; v < 4; v++) {
        uuid_of(&r, v, u, sizeof u);
        assert_string_equal(u, u1);
        /* and after device 0 was selected, still GPU 1 */
        ident_of(&r, "selected-device", v, got, sizeof got);
        assert_string_equal(got, id1);
    }
    assert_string_equal(val(&r, "ctxdev ", buf, sizeof buf), "0");
    es_proc_result_free(&r);

    /* by UUID: GPU 0's, written GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx */
    char slot[80];
    snprintf(slot, sizeof slot, "EASYSCALE_SLOT=GPU-%.8s-%.4s-%.4s-%.4s-%.12s", u0, u0 + 8,
             u0 + 12, u0 + 16, u0 + 20);
    r = probe(1, "4", "3", slot, NULL);
    assert_int_equal(r.status, 0);
    for (int v = 0; v < 4; v++) {
        uuid_of(&r, v, u, sizeof u);
        assert_string_equal(u, u0);
        /* device 3 selected (3 % 2 would be GPU 1): still GPU 0 */
        ident_of(&r, "selected-device", v, got, sizeof got);
        assert_string_equal(got, id0);
    }
    es_proc_result_free(&r);

    /* no such device: status 2 and the reason */
    r = probe(1, "4", "0", "EASYSCALE_SLOT=7", NULL);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.out, "EASYSCALE_SLOT=7 names no visible device (2 visible)"));
    es_proc_result_free(&r);
    r = probe(1, "4", "0", "EASYSCALE_SLOT=GPU-00000000-0000-0000-0000-000000000000", NULL);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.out, "names no visible device"));
    es_proc_result_free(&r);
    /* bad syntax: refused at start-up */
    r = probe(1, "4", "0", "EASYSCALE_SLOT=first", NULL);
    assert_int_equal(r.status, 2);
    assert_non_null(strstr(r.out, "EASYSCALE_SLOT=\"first\" is not valid"));
    es_proc_result_free(&r);
}

/* "attr V sm S cc M.m optin O" of ordinal v: the rest after "attr V ". */
static void attrs_of(const es_proc_result_t *r, int v, char *out, size_t len)
{
    char key[32];
    snprintf(key, sizeof key, "attr %d ", v);
    const char *p = strstr(r->out, key);
    if (!p)
        fail_msg("no \"%s\" in:\n%s", key, r->out);
    p += strlen(key);
    size_t k = strcspn(p, "\n");
    snprintf(out, len, "%.*s", (int)k, p);
}

/* d2 under virtual devices: every ordinal's attributes are the slot's, then
 * lowered to the job's canonical device. A T4 (GPU 0) and an A100 (GPU 1),
 * 4 ESTs, device 3 selected (slot 1, the A100). The expected figures are
 * each GPU's own, read without the shim. */
static void test_d2_identity(void **state)
{
    (void)state;
    need_shim();
    const char *devs = "t4:8G,a100:8G";
    es_proc_result_t plain = probe_on(devs, 0, NULL, NULL, NULL, NULL, NULL);
    assert_int_equal(plain.status, 0);
    char t4[96], a100[96], got[96];
    attrs_of(&plain, 0, t4, sizeof t4);
    attrs_of(&plain, 1, a100, sizeof a100);
    assert_string_not_equal(t4, a100);
    assert_non_null(strstr(t4, "cc 7.5"));
    es_proc_result_free(&plain);

    /* no model list: the slot's own values, for every ordinal (3 and 2 are
     * no physical device) */
    es_proc_result_t r = probe_on(devs, 1, "4", "3", "EASYSCALE_DETERMINISM=d2", NULL, NULL);
    if (r.status != 0)
        fprintf(stderr, "%s\n", r.out);
    assert_int_equal(r.status, 0);
    for (int v = 0; v < 4; v++) {
        attrs_of(&r, v, got, sizeof got);
        assert_string_equal(got, a100);
    }
    es_proc_result_free(&r);

    /* the job's models a100,t4: the A100 slot reports the T4's figures,
     * the compute capability pair included (its other half is read on the
     * slot too) */
    r = probe_on(devs, 1, "4", "3", "EASYSCALE_DETERMINISM=d2",
                 "EASYSCALE_CANONICAL_DEVICE=a100,t4", NULL);
    if (r.status != 0)
        fprintf(stderr, "%s\n", r.out);
    assert_int_equal(r.status, 0);
    for (int v = 0; v < 4; v++) {
        attrs_of(&r, v, got, sizeof got);
        assert_string_equal(got, t4);
    }
    es_proc_result_free(&r);

    /* d1: nothing lowered, the slot's values */
    r = probe_on(devs, 1, "4", "3", "EASYSCALE_DETERMINISM=d1",
                 "EASYSCALE_CANONICAL_DEVICE=a100,t4", NULL);
    assert_int_equal(r.status, 0);
    for (int v = 0; v < 4; v++) {
        attrs_of(&r, v, got, sizeof got);
        assert_string_equal(got, a100);
    }
    es_proc_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_devices),
        cmocka_unit_test(test_virtual_devices),
        cmocka_unit_test(test_slot),
        cmocka_unit_test(test_d2_identity),
    };
    return cmocka_run_group_tests_name("vdev", tests, NULL, NULL);
}
