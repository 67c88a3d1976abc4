/* Run-time kernel audit of libeasyscale.so (EASYSCALE_AUDIT, audit/
 * modaudit.c), whole processes on simcuda (tests/harness.h):
 * - tests/audit/audit_client loads the trainer's kernels and launches the
 *   float-atomic es_table_grad_atomic from launch_scatter_add_from_here:
 *   warn logs it once with a stack naming that function and the launch
 *   succeeds; strict refuses every launch (CUDA_ERROR_NOT_SUPPORTED) with the
 *   message; off says nothing; the ordered kernel is never mentioned; the
 *   same through cuLibraryLoadData / cuLaunchKernelEx / CUkernel handles got
 *   by cuGetProcAddress (the CUDA runtime's path), and after unload/reload;
 * - examples/train.py: warn names es_table_grad_atomic, --deterministic-
 *   kernels gives no audit line, strict without it fails with a clear error;
 * - damaged images: the shim returns what simcuda returns, without crashing;
 * - a bad EASYSCALE_AUDIT stops the process at start-up (status 2).
 *
 * Negative controls: the same client without the shim (nothing logged,
 * every launch succeeds), EASYSCALE_AUDIT=off.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/harness.h"

#define TMO 120

static char g_preload[4096];

static const char *preload_env(void)
{
    return es_preload_env(es_build_path("lib/libeasyscale.so"), g_preload, sizeof(g_preload));
}

static void run(int shim, char *const argv[], es_proc_result_t *r, const char *e1,
                const char *e2, const char *e3)
{
    char *env[8];
    int n = 0;
    if (shim)
        env[n++] = (char *)preload_env();
    const char *extra[] = { e1, e2, e3 };
    for (int i = 0; i < 3; i++)
        if (extra[i])
            env[n++] = (char *)extra[i];
    env[n] = NULL;
    assert_int_equal(es_run(argv, env, TMO, r), 0);
    assert_false(r->timed_out);
}

static int has_line(const char *out, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = out; (p = strstr(p, line)) != NULL; p += n)
        if ((p == out || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
            return 1;
    return 0;
}

static int count(const char *out, const char *needle)
{
    int n = 0;
    size_t l = strlen(needle);
    for (const char *p = out; (p = strstr(p, needle)) != NULL; p += l)
        n++;
    return n;
}

static char *client_argv[4];

static char *const *client(const char *mode)
{
    client_argv[0] = (char *)es_build_path("tests/audit/audit_client");
    client_argv[1] = (char *)mode;
    client_argv[2] = (char *)es_build_path("examples/kernels.fatbin");
    client_argv[3] = NULL;
    return client_argv;
}

#define EXPECT(cond, r)                                                                       \
    do {                                                                                      \
        if (!(cond))                                                                          \
            fail_msg("%s failed; output:\n%s", #cond, (r).out);                               \
    } while (0)

/* ---- the C client ------------------------------------------------------------ */

static void test_warn(void **state)
{
    (void)state;
    es_proc_result_t r;
    run(1, client("module"), &r, "EASYSCALE_AUDIT=warn", NULL, NULL);
    EXPECT(r.status == 0, r);
    EXPECT(has_line(r.out, "done"), r);
    EXPECT(count(r.out, "launch atomic 0\n") == 3, r);   /* every launch goes ahead */
    EXPECT(count(r.out, "launch det 0\n") == 2, r);
    /* once, with the kernel and the function that launched it */
    EXPECT(count(r.out, "warn: audit:") == 1, r);
    EXPECT(strstr(r.out, "cuLaunchKernel of kernel es_table_grad_atomic") != NULL, r);
    EXPECT(strstr(r.out, "float atomics") != NULL, r);
    EXPECT(strstr(r.out, "#0 launch_scatter_add_from_here+0x") != NULL, r);
    EXPECT(strstr(r.out, " main+0x") != NULL, r);
    EXPECT(strstr(r.out, "es_table_grad_det") == NULL, r); /* the clean kernel: never */
    es_proc_result_free(&r);

    /* the default is warn */
    run(1, client("module"), &r, NULL, NULL, NULL);
    EXPECT(r.status == 0 && count(r.out, "warn: audit:") == 1, r);
    EXPECT(strstr(r.out, "launch_scatter_add_from_here") != NULL, r);
    es_proc_result_free(&r);
}

static void test_strict(void **state)
{
    (void)state;
    es_proc_result_t r;
    run(1, client("module"), &r, "EASYSCALE_AUDIT=strict", NULL, NULL);
    EXPECT(r.status == 0, r);
    EXPECT(count(r.out, "launch atomic 801\n") == 3, r); /* CUDA_ERROR_NOT_SUPPORTED (801), each */
    EXPECT(count(r.out, "launch det 0\n") == 2, r);
    EXPECT(count(r.out, "error: audit: cuLaunchKernel refused") == 1, r);
    EXPECT(strstr(r.out, "kernel es_table_grad_atomic uses float atomics") != NULL, r);
    EXPECT(strstr(r.out, "CUDA_ERROR_NOT_SUPPORTED") != NULL, r);
    EXPECT(strstr(r.out, "#0 launch_scatter_add_from_here+0x") != NULL, r);
    EXPECT(strstr(r.out, "es_table_grad_det") == NULL, r);
    EXPECT(has_line(r.out, "done"), r);
    es_proc_result_free(&r);
}

static void test_off_and_without_shim(void **state)
{
    (void)state;
    es_proc_result_t r;
    run(1, client("module"), &r, "EASYSCALE_AUDIT=off", "EASYSCALE_LOG=debug",
        "EASYSCALE_LOG_FILE=/dev/null");
    EXPECT(r.status == 0 && count(r.out, "launch atomic 0\n") == 3, r);
    EXPECT(strstr(r.out, "audit") == NULL, r);
    es_proc_result_free(&r);
    run(1, client("module"), &r, "EASYSCALE_AUDIT=off", NULL, NULL);
    EXPECT(r.status == 0 && strstr(r.out, "easyscale") == NULL, r);
    es_proc_result_free(&r);
    run(0, client("module"), &r, NULL, NULL, NULL);
    EXPECT(r.status == 0 && count(r.out, "launch atomic 0\n") == 3, r);
    EXPECT(strstr(r.out, "easyscale") == NULL, r);
    es_proc_result_free(&r);
}

static void test_library_and_getproc(void **state)
{
    (void)state;
    es_proc_result_t r;
    /* warn: the CUkernel launch is the first one; logged once for both */
    run(1, client("library"), &r, "EASYSCALE_AUDIT=warn", NULL, NULL);
    EXPECT(r.status == 0 && has_line(r.out, "done"), r);
    EXPECT(has_line(r.out, "launch kernel-atomic 0"), r);
    EXPECT(has_line(r.out, "launchex function-atomic 0"), r);
    EXPECT(count(r.out, "warn: audit:") == 1, r);
    EXPECT(strstr(r.out, "kernel es_table_grad_atomic") != NULL, r);
    EXPECT(strstr(r.out, "#0 launch_scatter_add_from_here+0x") != NULL, r);
    es_proc_result_free(&r);
    /* strict: the CUkernel, and the function derived from it, both refused */
    run(1, client("library"), &r, "EASYSCALE_AUDIT=strict", NULL, NULL);
    EXPECT(r.status == 0 && has_line(r.out, "done"), r);
    EXPECT(has_line(r.out, "launch det 0"), r);
    EXPECT(has_line(r.out, "launch kernel-atomic 801"), r);
    EXPECT(has_line(r.out, "launchex function-atomic 801"), r);
    es_proc_result_free(&r);
    /* negative control */
    run(0, client("library"), &r, NULL, NULL, NULL);
    EXPECT(r.status == 0 && has_line(r.out, "launchex function-atomic 0"), r);
    es_proc_result_free(&r);
}

static void test_other_load_apis(void **state)
{
    (void)state;
    es_proc_result_t r;
    run(1, client("apis"), &r, "EASYSCALE_AUDIT=strict", NULL, NULL);
    EXPECT(r.status == 0 && has_line(r.out, "done"), r);
    EXPECT(has_line(r.out, "api cuModuleLoad atomic 801"), r);
    EXPECT(has_line(r.out, "api cuModuleLoadDataEx atomic 801"), r);
    EXPECT(has_line(r.out, "api cuModuleLoadFatBinary atomic 801"), r);
    EXPECT(has_line(r.out, "api cuLibraryLoadFromFile atomic 801"), r);
    es_proc_result_free(&r);
    run(0, client("apis"), &r, NULL, NULL, NULL);
    EXPECT(r.status == 0 && has_line(r.out, "api cuLibraryLoadFromFile atomic 0"), r);
    EXPECT(has_line(r.out, "api cuModuleLoad atomic 0"), r);
    es_proc_result_free(&r);
}

static void test_unload_reload(void **state)
{
    (void)state;
    es_proc_result_t r;
    run(1, client("unload"), &r, "EASYSCALE_AUDIT=strict", NULL, NULL);
    EXPECT(r.status == 0 && has_line(r.out, "done"), r);
    EXPECT(has_line(r.out, "round 0 atomic 801"), r);
    EXPECT(has_line(r.out, "round 1 atomic 801"), r); /* the reloaded module: flagged again */
    es_proc_result_free(&r);
}

/* The flagged set grows (40 handles) while another thread launches through
 * it; every launch of a flagged handle is refused, and unloading empties it. */
static void test_many_modules_racing(void **state)
{
    (void)state;
    es_proc_result_t r;
    run(1, client("many"), &r, "EASYSCALE_AUDIT=strict", "EASYSCALE_LOG=debug", NULL);
    EXPECT(r.status == 0 && has_line(r.out, "done"), r);
    EXPECT(has_line(r.out, "many refused 40 of 40"), r);
    EXPECT(has_line(r.out, "racer refused-all 1"), r);
    EXPECT(has_line(r.out, "after-unload det 0"), r);
    EXPECT(count(r.out, "error: audit:") == 1, r);
    EXPECT(count(r.out, "image already audited") == 40, r); /* audited once, 41 loads */
    es_proc_result_free(&r);
}

/* Damaged images: the shim's answer is simcuda's, and nothing crashes. */
static void test_corrupt_images(void **state)
{
    (void)state;
    es_proc_result_t with, without;
    run(1, client("corrupt"), &with, "EASYSCALE_AUDIT=warn", NULL, NULL);
    run(0, client("corrupt"), &without, NULL, NULL, NULL);
    EXPECT(without.status == 0 && has_line(without.out, "done"), without);
    EXPECT(with.status == 0 && has_line(with.out, "done"), with);
    int n = 0;
    for (const char *p = without.out; (p = strstr(p, "corrupt ")) != NULL; p++) {
        const char *e = strchr(p, '\n');
        char line[256];
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l >= sizeof(line))
            l = sizeof(line) - 1;
        memcpy(line, p, l);
        line[l] = '\0';
        if (!has_line(with.out, line))
            fail_msg("'%s' without the shim; with it:\n%s", line, with.out);
        n++;
    }
    assert_int_equal(n, 9);
    /* simcuda takes the broken PTX; the audit cannot read it: a warning, the
     * load's result unchanged */
    EXPECT(has_line(without.out, "corrupt ptx-garbage 0"), without);
    EXPECT(strstr(with.out, "cuModuleLoadData: module image not readable") != NULL, with);
    /* most of them are refused by the driver */
    EXPECT(count(without.out, " 200\n") + count(without.out, " 218\n") +
                   count(without.out, " 1\n") >= 5,
           without);
    es_proc_result_free(&with);
    es_proc_result_free(&without);
}

static void test_bad_setting(void **state)
{
    (void)state;
    char *t[] = { "/bin/true", NULL };
    const char *bad[] = { "EASYSCALE_AUDIT=on", "EASYSCALE_AUDIT=Warn", "EASYSCALE_AUDIT=" };
    for (int i = 0; i < 3; i++) {
        es_proc_result_t r;
        /* "NAME=" unsets in the harness: set it empty through the shell instead */
        if (i == 2) {
            char cmd[4200];
            snprintf(cmd, sizeof(cmd), "%s EASYSCALE_AUDIT= /bin/true", preload_env());
            assert_int_equal(es_run_sh(cmd, NULL, TMO, &r), 0);
        } else {
            run(1, t, &r, bad[i], NULL, NULL);
        }
        if (r.status != 2 || !strstr(r.out, "EASYSCALE_AUDIT"))
            fail_msg("%s: exit %d, output '%s'", bad[i], r.status, r.out);
        es_proc_result_free(&r);
    }
    /* good values: silent */
    const char *good[] = { "EASYSCALE_AUDIT=off", "EASYSCALE_AUDIT=warn",
                           "EASYSCALE_AUDIT=strict" };
    for (int i = 0; i < 3; i++) {
        es_proc_result_t r;
        run(1, t, &r, good[i], NULL, NULL);
        EXPECT(r.status == 0 && r.out_len == 0, r);
        es_proc_result_free(&r);
    }
}

/* ---- the trainer ------------------------------------------------------------------ */

static void train_with(int shim, const char *audit, int det, es_proc_result_t *r)
{
    char *argv[10];
    int n = 0;
    argv[n++] = "python3";
    argv[n++] = (char *)es_root_path("examples/train.py");
    argv[n++] = "--steps";
    argv[n++] = "3";
    argv[n++] = "--test-samples";
    argv[n++] = "32";
    argv[n++] = "--log-every";
    argv[n++] = "1";
    if (det)
        argv[n++] = "--deterministic-kernels";
    argv[n] = NULL;
    run(shim, argv, r, audit, NULL, NULL);
}

static void train(const char *audit, int det, es_proc_result_t *r)
{
    train_with(1, audit, det, r);
}

static void test_trainer(void **state)
{
    (void)state;
    es_proc_result_t r;
    /* the run without the shim first: it must work (else the failure is not
     * the audit's), and says nothing of an audit */
    train_with(0, NULL, 0, &r);
    if (r.status != 0)
        fail_msg("train.py fails without the shim (exit %d): not an audit failure\n%s",
                 r.status, r.out);
    EXPECT(strstr(r.out, "audit") == NULL, r);
    es_proc_result_free(&r);

    train("EASYSCALE_AUDIT=warn", 0, &r);
    EXPECT(r.status == 0, r);
    EXPECT(count(r.out, "warn: audit:") == 1, r);
    EXPECT(strstr(r.out, "kernel es_table_grad_atomic") != NULL, r);
    EXPECT(strstr(r.out, "host stack:\n    #0 ") != NULL, r);
    es_proc_result_free(&r);

    train("EASYSCALE_AUDIT=warn", 1, &r);
    EXPECT(r.status == 0, r);
    EXPECT(strstr(r.out, "audit") == NULL, r);
    es_proc_result_free(&r);

    train("EASYSCALE_AUDIT=strict", 0, &r);
    EXPECT(r.status != 0, r);
    EXPECT(strstr(r.out, "error: audit: cuLaunchKernel refused") != NULL, r);
    EXPECT(strstr(r.out, "es_table_grad_atomic") != NULL, r);
    EXPECT(strstr(r.out, "cuLaunchKernel failed: CUDA_ERROR_NOT_SUPPORTED") != NULL, r);
    es_proc_result_free(&r);

    train("EASYSCALE_AUDIT=strict", 1, &r);
    EXPECT(r.status == 0, r);
    EXPECT(strstr(r.out, "audit") == NULL, r);
    es_proc_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_setting),
        cmocka_unit_test(test_warn),
        cmocka_unit_test(test_strict),
        cmocka_unit_test(test_off_and_without_shim),
        cmocka_unit_test(test_library_and_getproc),
        cmocka_unit_test(test_other_load_apis),
        cmocka_unit_test(test_unload_reload),
        cmocka_unit_test(test_many_modules_racing),
        cmocka_unit_test(test_corrupt_images),
        cmocka_unit_test(test_trainer),
    };
    return cmocka_run_group_tests_name("shim_audit", tests, NULL, NULL);
}
