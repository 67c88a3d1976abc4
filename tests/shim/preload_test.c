/* libeasyscale.so tests: configuration parsing (unit), the export list, and
 * whole processes run under the shim on simcuda (tests/harness.h): the
 * three lookup paths, processes without CUDA, bad settings, missing
 * libraries, threads, fork, and each determinism claim with its negative
 * control (EASYSCALE_DETERMINISM=off).
 *
 * Vendor facts relied on (docs/VENDOR-FACTS.md): cuBLAS is not
 * reproducible with concurrent streams on one handle sharing the default
 * workspace ("Results Reproducibility"), Ssymv with atomics allowed is not,
 * cuDNN BWD_FILTER ALGO_0/3 and BWD_DATA ALGO_0 are not ("Reproducibility"),
 * GEMM bits differ across architectures.
 */
#include <dlfcn.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "device/device.h"
#include "shim/config.h"
#include "shim/log.h"
#include "shim/real.h"
#include "tests/harness.h"
#include "vendor_handle_fns.h"

#define TMO 120

/* Not linked into this test (only config.o and device.o are): counts. */
static int g_log_writes;
void es_log_write(int level, const char *fmt, ...)
{
    (void)level;
    (void)fmt;
    g_log_writes++;
}

static char g_preload[4096];

/* LD_PRELOAD for a child: what simenv set (a sanitizer runtime) first. A
 * shim that is not built fails the test (the loader would only warn). */
static const char *preload_env(void)
{
    return es_preload_env(es_need_built("lib/libeasyscale.so"), g_preload, sizeof(g_preload));
}

/* Runs argv with the shim (shim != 0) and up to 6 extra env settings. */
static void run(int shim, char *const argv[], es_proc_result_t *r, const char *e1,
                const char *e2, const char *e3, const char *e4)
{
    char *env[8];
    int n = 0;
    if (shim)
        env[n++] = (char *)preload_env();
    const char *extra[] = { e1, e2, e3, e4 };
    for (int i = 0; i < 4; i++)
        if (extra[i])
            env[n++] = (char *)extra[i];
    env[n] = NULL;
    assert_int_equal(es_run(argv, env, TMO, r), 0);
    assert_false(r->timed_out);
}

static const char *client(void)
{
    return es_build_path("tests/shim/es_client");
}

static int has_line(const char *out, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = out; (p = strstr(p, line)) != NULL; p += n)
        if ((p == out || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
            return 1;
    return 0;
}

/* The value after "key " on its last line, as a string. */
static const char *val(const es_proc_result_t *r, const char *key, char *buf, size_t len)
{
    char k[128];
    snprintf(k, sizeof(k), "%s ", key);
    const char *v = es_find_last(r->out, k, buf, len);
    if (!v)
        print_error("no line '%s' in output:\n%s\n", key, r->out);
    assert_non_null(v);
    return v;
}

/* "stat SYM rc calls by_dlsym by_getproc" (last one). */
static void stat_of(const es_proc_result_t *r, const char *sym, unsigned long long *calls,
                    unsigned long long *dl, unsigned long long *gp)
{
    char k[128], buf[256];
    snprintf(k, sizeof(k), "stat %s", sym);
    const char *v = val(r, k, buf, sizeof(buf));
    int rc = -1;
    assert_int_equal(sscanf(v, "%d %llu %llu %llu", &rc, calls, dl, gp), 4);
    assert_int_equal(rc, 0);
}

/* ---- unit: configuration ------------------------------------------------------ */

static void set_env(const char *n, const char *v)
{
    if (v)
        setenv(n, v, 1);
    else
        unsetenv(n);
}

static int parse_with(const char *det, const char *log, const char *file, char *msg)
{
    es_config_t c;
    set_env("EASYSCALE_DETERMINISM", det);
    set_env("EASYSCALE_LOG", log);
    set_env("EASYSCALE_LOG_FILE", file);
    int rc = es_config_parse(&c, msg, 256);
    unsetenv("EASYSCALE_DETERMINISM");
    unsetenv("EASYSCALE_LOG");
    unsetenv("EASYSCALE_LOG_FILE");
    return rc;
}

static void test_config_parse(void **state)
{
    (void)state;
    char msg[256];
    es_config_t c;
    unsetenv("EASYSCALE_DETERMINISM");
    unsetenv("EASYSCALE_LOG");
    unsetenv("EASYSCALE_LOG_FILE");
    unsetenv("EASYSCALE_CANONICAL_DEVICE");
    assert_int_equal(es_config_parse(&c, msg, sizeof(msg)), 0);
    assert_int_equal(c.determinism, ES_DET_D1);
    assert_int_equal(c.log_level, ES_LOG_WARN);
    assert_int_equal(c.log_fd, 2);
    assert_int_equal(c.stats, 0);
    assert_int_equal(parse_with("off", "debug", NULL, msg), 0);
    assert_int_equal(parse_with("d2", "error", NULL, msg), 0);
    assert_int_equal(parse_with("D1", NULL, NULL, msg), -EINVAL);
    assert_non_null(strstr(msg, "EASYSCALE_DETERMINISM"));
    assert_int_equal(parse_with("", NULL, NULL, msg), -EINVAL);
    assert_int_equal(parse_with("d1 ", NULL, NULL, msg), -EINVAL);
    assert_int_equal(parse_with(NULL, "verbose", NULL, msg), -EINVAL);
    assert_non_null(strstr(msg, "EASYSCALE_LOG"));
    assert_int_equal(parse_with(NULL, NULL, "", msg), -EINVAL);
    assert_int_equal(parse_with(NULL, NULL, "/nonexistent-dir/x/log", msg), -EINVAL);
    /* EASYSCALE_TIME_SLICE: off, on (one resident), overlap (two) */
    static const struct { const char *v; int want; } ts[] = {
        { "off", 0 }, { "on", 1 }, { "overlap", 2 }, { "two", -EINVAL }, { "On", -EINVAL },
    };
    for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); i++) {
        setenv("EASYSCALE_TIME_SLICE", ts[i].v, 1);
        int rc = es_config_parse(&c, msg, sizeof(msg));
        if (ts[i].want < 0) {
            assert_int_equal(rc, ts[i].want);
            assert_non_null(strstr(msg, "EASYSCALE_TIME_SLICE"));
        } else {
            assert_int_equal(rc, 0);
            assert_int_equal(c.time_slice, ts[i].want);
        }
    }
    /* EASYSCALE_TIME_SLICE_KEEP: MiB, with time-slicing only */
    static const struct { const char *ts, *v; int want; size_t bytes; } kp[] = {
        { "on", "8", 0, 8u << 20 }, { "overlap", "0", 0, 0 }, { "off", "0", 0, 0 },
        { "off", "8", -EINVAL, 0 }, { "on", "8M", -EINVAL, 0 }, { "on", "-1", -EINVAL, 0 },
        { "on", "", -EINVAL, 0 }, { "on", "1048577", -EINVAL, 0 },
    };
    for (size_t i = 0; i < sizeof(kp) / sizeof(kp[0]); i++) {
        setenv("EASYSCALE_TIME_SLICE", kp[i].ts, 1);
        setenv("EASYSCALE_TIME_SLICE_KEEP", kp[i].v, 1);
        int rc = es_config_parse(&c, msg, sizeof(msg));
        assert_int_equal(rc, kp[i].want);
        if (rc)
            assert_non_null(strstr(msg, "EASYSCALE_TIME_SLICE_KEEP"));
        else
            assert_int_equal(c.ts_keep, kp[i].bytes);
    }
    unsetenv("EASYSCALE_TIME_SLICE_KEEP");
    /* EASYSCALE_XHOST: nccl (default), host (the default with time-slicing,
     * which nccl cannot serve) */
    static const struct { const char *ts, *v; int want; } xh[] = {
        { "off", NULL, 0 }, { "on", NULL, 1 }, { "overlap", NULL, 1 }, { "off", "host", 1 },
        { "off", "nccl", 0 }, { "on", "host", 1 }, { "on", "nccl", -EINVAL },
        { "off", "Host", -EINVAL }, { "off", "", -EINVAL }, { "off", "tcp", -EINVAL },
    };
    for (size_t i = 0; i < sizeof(xh) / sizeof(xh[0]); i++) {
        setenv("EASYSCALE_TIME_SLICE", xh[i].ts, 1);
        if (xh[i].v)
            setenv("EASYSCALE_XHOST", xh[i].v, 1);
        else
            unsetenv("EASYSCALE_XHOST");
        int rc = es_config_parse(&c, msg, sizeof(msg));
        if (xh[i].want < 0) {
            assert_int_equal(rc, xh[i].want);
            assert_non_null(strstr(msg, "EASYSCALE_XHOST"));
        } else {
            assert_int_equal(rc, 0);
            assert_int_equal(c.xhost_host, xh[i].want);
        }
    }
    unsetenv("EASYSCALE_XHOST");
    unsetenv("EASYSCALE_TIME_SLICE");
    /* EASYSCALE_D2_GEMM: int8 (the default), fma; nothing else */
    unsetenv("EASYSCALE_D2_GEMM");
    assert_int_equal(es_config_parse(&c, msg, sizeof(msg)), 0);
    assert_int_equal(c.d2_gemm, ES_D2_GEMM_INT8);
    static const struct { const char *v; int want; } dg[] = {
        { "int8", ES_D2_GEMM_INT8 }, { "fma", ES_D2_GEMM_FMA }, { "", -EINVAL },
        { "INT8", -EINVAL }, { "int8 ", -EINVAL }, { "fp32", -EINVAL },
    };
    for (size_t i = 0; i < sizeof(dg) / sizeof(dg[0]); i++) {
        setenv("EASYSCALE_D2_GEMM", dg[i].v, 1);
        int rc = es_config_parse(&c, msg, sizeof(msg));
        if (dg[i].want < 0) {
            assert_int_equal(rc, dg[i].want);
            assert_non_null(strstr(msg, "EASYSCALE_D2_GEMM"));
        } else {
            assert_int_equal(rc, 0);
            assert_int_equal(c.d2_gemm, dg[i].want);
        }
    }
    unsetenv("EASYSCALE_D2_GEMM");
}

static int side_effects;
static int touch(void)
{
    return ++side_effects;
}

/* A disabled level evaluates nothing, not even the arguments. */
static void test_log_macro(void **state)
{
    (void)state;
    int saved = es_cfg.log_level;
    es_cfg.log_level = ES_LOG_ERROR;
    ES_DEBUG("%d", touch());
    ES_INFO("%d", touch());
    ES_WARN("%d", touch());
    assert_int_equal(side_effects, 0);
    assert_int_equal(g_log_writes, 0);
    ES_ERROR("%d", touch());
    assert_int_equal(side_effects, 1);
    assert_int_equal(g_log_writes, 1);
    es_cfg.log_level = ES_LOG_DEBUG;
    ES_DEBUG("%d", touch());
    assert_int_equal(side_effects, 2);
    es_cfg.log_level = saved;
}

/* ---- exports -------------------------------------------------------------------- */

static void test_exports(void **state)
{
    (void)state;
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "nm -D --defined-only %s | awk '{print $3}' | sort",
             es_build_path("lib/libeasyscale.so"));
    es_proc_result_t r;
    assert_int_equal(es_run_sh(cmd, NULL, TMO, &r), 0);
    assert_int_equal(r.status, 0);
    int expected = 0;
#define ES_CHECK(kind, sym, gp, ver, fl, ret, params, args, err)                               \
    expected++;                                                                                 \
    if (!has_line(r.out, #sym))                                                                 \
        fail_msg("%s is not exported", #sym);
    ES_CUDA_FUNCS(ES_CHECK)
    ES_CUBLAS_FUNCS(ES_CHECK)
    ES_CUDNN_FUNCS(ES_CHECK)
    ES_NCCL_FUNCS(ES_CHECK)
    ES_CUBLASLT_FUNCS(ES_CHECK)
#undef ES_CHECK
    /* the translating wrappers of the vendor functions that take a library
     * handle (generated from NVIDIA's headers, intercept/virtual/libh_gen.c) */
#define ES_CHECK(lib, sym, ret, params, args)                                                   \
    expected++;                                                                                 \
    if (!has_line(r.out, #sym))                                                                 \
        fail_msg("%s is not exported", #sym);
    ES_VENDOR_HANDLE_FNS(ES_CHECK)
#undef ES_CHECK
    assert_true(has_line(r.out, "dlsym"));
    assert_true(has_line(r.out, "easyscale_stats"));
    assert_true(has_line(r.out, "easyscale_move"));
    assert_true(has_line(r.out, "easyscale_where"));
    assert_true(has_line(r.out, "easyscale_moves"));
    int lines = 0;
    for (const char *p = r.out; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, expected + 5); /* nothing else */
    es_proc_result_free(&r);

    /* NEEDED: the C library only (and a sanitizer's runtime). No CUDA
     * library (a process without a driver must start), and no libelf /
     * libzstd either (audit/dynlib.c dlopens them RTLD_LOCAL): a NEEDED
     * library of a preloaded shim sits ahead of the application's own
     * libraries in the global scope. */
    snprintf(cmd, sizeof(cmd), "readelf -d %s | sed -n 's/.*(NEEDED).*\\[\\(.*\\)\\]/\\1/p'",
             es_build_path("lib/libeasyscale.so"));
    assert_int_equal(es_run_sh(cmd, NULL, TMO, &r), 0);
    for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n"))
        if (strcmp(line, "libc.so.6") != 0 && strcmp(line, "ld-linux-x86-64.so.2") != 0 &&
            strncmp(line, "libasan.so", 10) != 0 && strncmp(line, "libubsan.so", 11) != 0 &&
            strcmp(line, "libm.so.6") != 0 && strncmp(line, "libstdc++.so", 12) != 0 &&
            strncmp(line, "libgcc_s.so", 11) != 0)
            fail_msg("libeasyscale.so has NEEDED %s", line);
    es_proc_result_free(&r);
    /* and no undefined reference to them (a function the audit starts to use
     * must get a forwarder in audit/dynlib.c) */
    snprintf(cmd, sizeof(cmd), "nm -D --undefined-only %s | grep -E ' (g?elf_|ZSTD_)' || true",
             es_build_path("lib/libeasyscale.so"));
    assert_int_equal(es_run_sh(cmd, NULL, TMO, &r), 0);
    if (r.out_len)
        fail_msg("libeasyscale.so refers to libelf/libzstd directly:\n%s", r.out);
    es_proc_result_free(&r);
}

/* ---- processes without CUDA, bad settings, missing libraries ------------------ */

static void test_no_cuda_processes(void **state)
{
    (void)state;
    char *t[] = { "/bin/true", NULL };
    char *py[] = { "python3", "-c", "pass", NULL };
    const char *dets[] = { NULL, "EASYSCALE_DETERMINISM=off", "EASYSCALE_DETERMINISM=d2" };
    for (int i = 0; i < 3; i++) {
        es_proc_result_t r;
        run(1, t, &r, dets[i], "EASYSCALE_LOG=", NULL, NULL);
        assert_int_equal(r.status, 0);
        assert_int_equal(r.out_len, 0);
        es_proc_result_free(&r);
        run(1, py, &r, dets[i], "EASYSCALE_LOG=", NULL, NULL);
        assert_int_equal(r.status, 0);
        if (r.out_len)
            fail_msg("python3 -c pass printed: %s", r.out);
        es_proc_result_free(&r);
    }
}

static void test_bad_settings(void **state)
{
    (void)state;
    char *t[] = { "/bin/true", NULL };
    static const char *const bad[][2] = {
        { "EASYSCALE_DETERMINISM=d3", "EASYSCALE_DETERMINISM" },
        { "EASYSCALE_DETERMINISM=D1", "EASYSCALE_DETERMINISM" },
        { "EASYSCALE_LOG=loud", "EASYSCALE_LOG" },
        { "EASYSCALE_LOG_FILE=/nonexistent-dir/x/y.log", "EASYSCALE_LOG_FILE" },
        { "EASYSCALE_CANONICAL_DEVICE=a100,,t4", "EASYSCALE_CANONICAL_DEVICE" },
        { "EASYSCALE_CANONICAL_DEVICE=a100,x9000", "x9000" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        es_proc_result_t r;
        run(1, t, &r, bad[i][0], NULL, NULL, NULL);
        if (r.status != 2 || !strstr(r.out, bad[i][1]))
            fail_msg("%s: exit %d, output '%s'", bad[i][0], r.status, r.out);
        es_proc_result_free(&r);
    }
    /* Set but empty is an error too, for every variable (the harness treats
     * "NAME=" as unset: env(1) sets them). */
    static const char *const vars[] = { "EASYSCALE_DETERMINISM", "EASYSCALE_LOG",
                                        "EASYSCALE_LOG_FILE", "EASYSCALE_AUDIT",
                                        "EASYSCALE_CANONICAL_DEVICE" };
    const char *env[] = { preload_env(), NULL };
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "env %s= /bin/true", vars[i]);
        es_proc_result_t r;
        assert_int_equal(es_run_sh(cmd, (char *const *)env, TMO, &r), 0);
        if (r.status != 2 || !strstr(r.out, vars[i]) || !strstr(r.out, "empty"))
            fail_msg("%s empty: exit %d, output '%s'", vars[i], r.status, r.out);
        es_proc_result_free(&r);
    }
    /* negative control: the same command line without the shim runs */
    es_proc_result_t r0;
    assert_int_equal(es_run_sh("env EASYSCALE_LOG= /bin/true", NULL, TMO, &r0), 0);
    assert_int_equal(r0.status, 0);
    es_proc_result_free(&r0);
}

static void test_log_file(void **state)
{
    (void)state;
    char path[] = "/tmp/es_shim_log_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char env[256];
    snprintf(env, sizeof(env), "EASYSCALE_LOG_FILE=%s", path);
    char *t[] = { "/bin/true", NULL };
    es_proc_result_t r;
    run(1, t, &r, env, "EASYSCALE_LOG=debug", NULL, NULL);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.out_len, 0); /* everything went to the file */
    es_proc_result_free(&r);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "cat %s", path);
    assert_int_equal(es_run_sh(cmd, NULL, TMO, &r), 0);
    assert_non_null(strstr(r.out, "debug: loaded: determinism d1"));
    es_proc_result_free(&r);
    unlink(path);
}

static void test_missing_libraries(void **state)
{
    (void)state;
    char *argv[] = { (char *)es_build_path("tests/shim/es_nocuda"), "missing", NULL };
    char ldp[600];
    /* fakelib holds libraries of the right sonames without any function;
     * libcuda.so.1 is nowhere. The client calls the shim's exports
     * directly (weak references). */
    snprintf(ldp, sizeof(ldp), "LD_LIBRARY_PATH=%s", es_build_path("tests/shim/fakelib"));
    es_proc_result_t r;
    run(1, argv, &r, ldp, "EASYSCALE_LOG=error", NULL, NULL);
    assert_int_equal(r.status, 0);
    assert_true(has_line(r.out, "cuInit 3"));              /* CUDA_ERROR_NOT_INITIALIZED */
    assert_true(has_line(r.out, "cuGetProcAddress_v2 3"));
    assert_true(has_line(r.out, "cuDeviceGetCount 3"));
    assert_true(has_line(r.out, "cublasCreate_v2 1"));     /* CUBLAS_STATUS_NOT_INITIALIZED */
    assert_true(has_line(r.out, "cudnnCreate 1001"));      /* CUDNN_STATUS_NOT_INITIALIZED */
    assert_true(has_line(r.out, "ncclGetVersion 2"));      /* ncclSystemError */
    /* and a global dlsym says they are not there, as without the shim */
    assert_true(has_line(r.out, "dlsym cuInit found=0 err=1"));
    assert_true(has_line(r.out, "dlsym cublasCreate_v2 found=0 err=1"));
    assert_true(has_line(r.out, "dlsym ncclGetVersion found=0 err=1"));
    assert_true(has_line(r.out, "done"));
    es_proc_result_free(&r);
}

/* ---- the three paths -------------------------------------------------------------- */

static void test_paths(void **state)
{
    (void)state;
    char *argv[] = { (char *)client(), "paths", NULL };
    es_proc_result_t r;
    run(1, argv, &r, "EASYSCALE_LOG=debug", NULL, NULL, NULL);
    if (r.status != 0)
        fail_msg("es_client paths: exit %d\n%s", r.status, r.out);
    unsigned long long c, d, g;
    /* direct call */
    stat_of(&r, "cuDriverGetVersion", &c, &d, &g);
    assert_true(c >= 1);
    assert_true(d >= 1); /* dlsym on libcuda's handle answered by the shim */
    assert_true(has_line(r.out, "dlsym cuDriverGetVersion shim=1"));
    assert_true(has_line(r.out, "dlsym-default cuDeviceGetCount shim=1"));
    assert_true(has_line(r.out, "dlsym-unwrapped cuCtxGetFlags found=1"));
    assert_true(has_line(r.out, "dlsym cuGetProcAddress_v2 shim=1"));
    /* cuGetProcAddress: versions and per-thread variants kept */
    assert_true(has_line(r.out, "getproc cuMemAlloc 13000 -> shim_v2=1"));
    assert_false(has_line(r.out, "getproc cuMemAlloc 3000 -> shim_v2=1"));
    assert_true(has_line(r.out, "getproc cuStreamSynchronize ptsz -> shim_ptsz=1 shim_legacy=0"));
    assert_true(
        has_line(r.out, "getproc cuStreamSynchronize legacy -> shim_ptsz=0 shim_legacy=1"));
    assert_true(has_line(r.out, "getproc cuCtxGetFlags (unwrapped) -> found=1"));
    assert_true(has_line(r.out, "getproc cuLaunchKernel ptsz -> shim_ptsz=1"));
    assert_true(has_line(r.out, "getproc cuLaunchKernel default -> shim=1"));
    assert_true(has_line(r.out, "rtld-next getpid ok=1"));
    assert_true(has_line(r.out, "getproc cuGetProcAddress -> shim_v2=1"));
    stat_of(&r, "cuMemAlloc_v2", &c, &d, &g);
    assert_true(c >= 1 && g >= 1);
    stat_of(&r, "cuStreamSynchronize_ptsz", &c, &d, &g);
    assert_true(c >= 1 && g >= 1);
    /* cuBLAS got its driver through dlsym + cuGetProcAddress, and uses it */
    stat_of(&r, "cublasCreate_v2", &c, &d, &g);
    assert_true(c >= 1);
    stat_of(&r, "cuGetProcAddress_v2", &c, &d, &g);
    assert_true(d >= 1 && c >= 10);
    stat_of(&r, "cuLaunchKernel", &c, &d, &g); /* its kernels */
    assert_true(g >= 1 && c >= 1);
    assert_true(has_line(r.out, "done"));
    es_proc_result_free(&r);

    /* negative control: without the shim nothing is the shim's */
    run(0, argv, &r, NULL, NULL, NULL, NULL);
    assert_int_equal(r.status, 0);
    assert_true(has_line(r.out, "dlsym cuDriverGetVersion shim=0"));
    assert_true(has_line(r.out, "getproc cuMemAlloc 13000 -> shim_v2=0"));
    assert_true(has_line(r.out, "stat cuDeviceGetCount none"));
    es_proc_result_free(&r);
}

/* Every entry of shim/funcs.h, through every path (tests/shim/
 * es_allpaths.c): with the shim, each answer that is the real library's
 * without it is the shim's wrapper of exactly that symbol (CUDA: also
 * cuGetProcAddress_v2 and v1 at the entry's version and stream flavor, and
 * the default flavor), and each "none" stays "none" (a global lookup of a
 * function the library lacks fails as without the shim); a direct reference
 * always binds to the shim's export (its stub answers not-initialized).
 * Negative control: the run without the shim. */
static const char *field(const char *line, const char *name, char *buf, size_t len)
{
    char k[32];
    snprintf(k, sizeof(k), " %s=", name);
    const char *p = strstr(line, k);
    if (!p)
        return NULL;
    p += strlen(k);
    size_t n = strcspn(p, " \n");
    snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), p);
    return buf;
}

static void test_every_wrapped_function(void **state)
{
    (void)state;
    char *argv[] = { (char *)es_build_path("tests/shim/es_allpaths"), NULL };
    es_proc_result_t on, off;
    run(1, argv, &on, "EASYSCALE_LOG=error", NULL, NULL, NULL);
    run(0, argv, &off, NULL, NULL, NULL, NULL);
    if (on.status != 0 || off.status != 0)
        fail_msg("es_allpaths: exit %d / %d\n%s\n%s", on.status, off.status, on.out, off.out);
    static const char *const fields[] = { "direct", "default", "next", "handle",
                                          "gp2",    "gp1",     "gpdef" };
    int entries = 0, checked = 0, missing = 0;
#define ES_EACH(kind, sym, gp, ver, fl, ret, params, args, err)                                 \
    do {                                                                                        \
        char k[160], l_on[512], l_off[512], a[32], b[32];                                      \
        snprintf(k, sizeof(k), "ent %s %s ", lib, #sym);                                        \
        if (!es_find_last(on.out, k, l_on, sizeof(l_on)) ||                                     \
            !es_find_last(off.out, k, l_off, sizeof(l_off)))                                    \
            fail_msg("no line for %s", #sym);                                                   \
        entries++;                                                                              \
        for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {                       \
            char l1[520], l0[520];                                                              \
            snprintf(l1, sizeof(l1), " %s", l_on);                                              \
            snprintf(l0, sizeof(l0), " %s", l_off);                                             \
            const char *x = field(l1, fields[f], a, sizeof(a));                                 \
            const char *y = field(l0, fields[f], b, sizeof(b));                                 \
            if (!x && !y)                                                                       \
                continue;                                                                       \
            if (!x || !y)                                                                       \
                fail_msg("%s: field %s in one run only", #sym, fields[f]);                      \
            const char *want = f == 0 ? "shim" : strcmp(y, "none") == 0 ? "none" : "shim";      \
            if (f > 0 && strcmp(y, "real") != 0 && strcmp(y, "none") != 0)                      \
                fail_msg("%s %s without the shim: %s", #sym, fields[f], y);                     \
            if (strcmp(x, want) != 0)                                                           \
                fail_msg("%s %s: %s with the shim (%s without; want %s)", #sym, fields[f], x,   \
                         y, want);                                                              \
            missing += f == 3 && strcmp(y, "none") == 0;                                        \
            checked++;                                                                          \
        }                                                                                       \
    } while (0);
    const char *lib = "cuda";
    ES_CUDA_FUNCS(ES_EACH)
    lib = "cublas";
    ES_CUBLAS_FUNCS(ES_EACH)
    lib = "cudnn";
    ES_CUDNN_FUNCS(ES_EACH)
    lib = "nccl";
    ES_NCCL_FUNCS(ES_EACH)
    lib = "cublaslt";
    ES_CUBLASLT_FUNCS(ES_EACH)
#undef ES_EACH
    assert_int_equal(entries, ES_CUDA_N + ES_CUBLAS_N + ES_CUDNN_N + ES_NCCL_N + ES_CUBLASLT_N);
    /* CUDA entries have 6-7 answers, the others 4 */
    assert_true(checked >= 6 * ES_CUDA_N +
                           4 * (ES_CUBLAS_N + ES_CUDNN_N + ES_NCCL_N + ES_CUBLASLT_N));
    /* simcuda lacks cublasDgemm_v2 only (the "none" rule is exercised) */
    assert_int_equal(missing, 1);
    es_proc_result_free(&on);
    es_proc_result_free(&off);
}

static void test_threads_and_fork(void **state)
{
    (void)state;
    char *a1[] = { (char *)client(), "threads", NULL };
    es_proc_result_t r;
    run(1, a1, &r, "EASYSCALE_LOG=debug", NULL, NULL, NULL);
    if (r.status != 0)
        fail_msg("threads: exit %d\n%s", r.status, r.out);
    assert_true(has_line(r.out, "threads bad 0"));
    unsigned long long c, d, g;
    stat_of(&r, "cuDeviceGetCount", &c, &d, &g);
    assert_true(c >= 8 * 2000);
    es_proc_result_free(&r);

    char *a2[] = { (char *)client(), "fork", NULL };
    run(1, a2, &r, NULL, NULL, NULL, NULL);
    if (r.status != 0)
        fail_msg("fork: exit %d\n%s", r.status, r.out);
    assert_true(has_line(r.out, "fork-before child 0"));
    assert_true(has_line(r.out, "fork-after child 0"));
    es_proc_result_free(&r);
}

/* Python loads the libraries with dlopen and finds functions with dlsym
 * (ctypes): that path is caught too. */
static void test_python_ctypes(void **state)
{
    (void)state;
    char *argv[] = {
        "python3", "-c",
        "import ctypes\n"
        "c = ctypes.CDLL('libcuda.so.1')\n"
        "n = ctypes.c_int()\n"
        "assert c.cuInit(0) == 0 and c.cuDeviceGetCount(ctypes.byref(n)) == 0\n"
        "st = (ctypes.c_uint64 * 3)()\n"
        "f = ctypes.CDLL(None).easyscale_stats\n"
        "assert f(b'cuDeviceGetCount', st) == 0\n"
        "print('py', n.value, st[0], st[1])\n",
        NULL
    };
    es_proc_result_t r;
    run(1, argv, &r, "EASYSCALE_LOG=debug", "EASYSCALE_LOG_FILE=/dev/null", NULL, NULL);
    if (r.status != 0)
        fail_msg("python: exit %d\n%s", r.status, r.out);
    assert_true(has_line(r.out, "py 2 1 1")); /* two devices, one call, one dlsym */
    es_proc_result_free(&r);
}

/* NVIDIA's CUDA runtime (the toolkit's, which the build needs) gets its
 * driver entry points by dlsym("cuGetProcAddress_v2") + cuGetProcAddress:
 * caught without the shim exporting cudaGetDriverEntryPoint. Runs on
 * simcuda's driver. */
static void test_cuda_runtime(void **state)
{
    (void)state;
    const char *cuda = getenv("CUDA_HOME");
    char rt[512];
    snprintf(rt, sizeof rt, "%s/lib64/libcudart.so.13", cuda && *cuda ? cuda : "/usr/local/cuda");
    if (access(rt, R_OK) != 0)
        fail_msg("%s is missing: the CUDA 13 toolkit the build needs has it (set CUDA_HOME)", rt);
    char *argv[] = {
        "python3", "-c",
        "import ctypes, sys\n"
        "rt = ctypes.CDLL(sys.argv[1])\n"
        "n = ctypes.c_int()\n"
        "rt.cudaGetDeviceCount(ctypes.byref(n))\n"
        "st = (ctypes.c_uint64 * 3)()\n"
        "f = ctypes.CDLL(None).easyscale_stats\n"
        "for s in (b'cuGetProcAddress_v2', b'cuInit'):\n"
        "    f(s, st)\n"
        "    print('stat', s.decode(), 0, st[0], st[1], st[2])\n",
        rt, NULL
    };
    es_proc_result_t r;
    run(1, argv, &r, "EASYSCALE_LOG=debug", "EASYSCALE_LOG_FILE=/dev/null", NULL, NULL);
    if (r.status != 0)
        fail_msg("cudart: exit %d\n%s", r.status, r.out);
    unsigned long long c, d, g;
    stat_of(&r, "cuGetProcAddress_v2", &c, &d, &g);
    assert_true(d >= 1 && c >= 10);
    stat_of(&r, "cuInit", &c, &d, &g);
    assert_true(g >= 1 && c >= 1);
    es_proc_result_free(&r);
}

/* The constructor sets the vendor libraries' deterministic settings, and
 * leaves the user's alone. */
static void test_env_defaults(void **state)
{
    (void)state;
    char *argv[] = { "sh", "-c",
                     "echo \"env $CUBLAS_WORKSPACE_CONFIG|$NCCL_ALGO|$NCCL_PROTO|"
                     "$NCCL_NVLS_ENABLE|$NCCL_MIN_CTAS|$NCCL_MAX_CTAS\"",
                     NULL };
    char v[128];
    es_proc_result_t r;
    run(1, argv, &r, "CUBLAS_WORKSPACE_CONFIG=", "NCCL_ALGO=", NULL, NULL);
    assert_string_equal(val(&r, "env", v, sizeof(v)), ":4096:8|Ring|Simple|0|2|2");
    es_proc_result_free(&r);
    run(1, argv, &r, "EASYSCALE_DETERMINISM=off", "CUBLAS_WORKSPACE_CONFIG=", NULL, NULL);
    assert_string_equal(val(&r, "env", v, sizeof(v)), "|||||");
    es_proc_result_free(&r);
    run(1, argv, &r, "NCCL_ALGO=Tree", "NCCL_MAX_CTAS=4", "CUBLAS_WORKSPACE_CONFIG=:16:8",
        "EASYSCALE_LOG=error");
    assert_string_equal(val(&r, "env", v, sizeof(v)), ":16:8|Tree|Simple|0|4|4");
    es_proc_result_free(&r);
    run(1, argv, &r, "CUBLAS_WORKSPACE_CONFIG=:0:0", "EASYSCALE_LOG=error", NULL, NULL);
    assert_string_equal(val(&r, "env", v, sizeof(v)), ":4096:8|Ring|Simple|0|2|2");
    es_proc_result_free(&r);
}

/* ---- d1 ------------------------------------------------------------------------------ */

static void test_d1_blas_streams(void **state)
{
    (void)state;
    char *argv[] = { (char *)client(), "blas-contend", NULL };
    char a[64], b[64];
    es_proc_result_t r;
    /* negative control: the GEMM's bits depend on what else runs */
    run(1, argv, &r, "EASYSCALE_DETERMINISM=off", NULL, NULL, NULL);
    if (r.status != 0)
        fail_msg("off: exit %d\n%s", r.status, r.out);
    val(&r, "alone", a, sizeof(a));
    val(&r, "contended", b, sizeof(b));
    assert_string_not_equal(a, b);
    es_proc_result_free(&r);
    /* d1: they do not */
    run(1, argv, &r, "EASYSCALE_DETERMINISM=d1", NULL, NULL, NULL);
    if (r.status != 0)
        fail_msg("d1: exit %d\n%s", r.status, r.out);
    val(&r, "alone", a, sizeof(a));
    val(&r, "contended", b, sizeof(b));
    assert_string_equal(a, b);
    es_proc_result_free(&r);
    /* cublasSetStream then a GEMM on the new stream runs on the shim's
     * per-stream workspace: with CUBLAS_WORKSPACE_CONFIG gone from cuBLAS's
     * view (the client unsets it before cublasCreate) nothing else keeps
     * the contended GEMM off the shared pool. Negative control: off. */
    char *argv_noenv[] = { (char *)client(), "blas-contend", "noenv", NULL };
    run(1, argv_noenv, &r, "EASYSCALE_DETERMINISM=off", NULL, NULL, NULL);
    assert_int_equal(r.status, 0);
    val(&r, "alone", a, sizeof(a));
    val(&r, "contended", b, sizeof(b));
    assert_string_not_equal(a, b);
    es_proc_result_free(&r);
    run(1, argv_noenv, &r, "EASYSCALE_DETERMINISM=d1", NULL, NULL, NULL);
    if (r.status != 0)
        fail_msg("d1 noenv: exit %d\n%s", r.status, r.out);
    val(&r, "alone", a, sizeof(a));
    val(&r, "contended", b, sizeof(b));
    assert_string_equal(a, b);
    es_proc_result_free(&r);
    /* and with a user's nondeterministic CUBLAS_WORKSPACE_CONFIG */
    run(1, argv, &r, "CUBLAS_WORKSPACE_CONFIG=:0:0", NULL, NULL, NULL);
    assert_int_equal(r.status, 0);
    val(&r, "alone", a, sizeof(a));
    val(&r, "contended", b, sizeof(b));
    assert_string_equal(a, b);
    es_proc_result_free(&r);
}

static void test_d1_symv_atomics(void **state)
{
    (void)state;
    char *argv[] = { (char *)client(), "symv", NULL };
    char s0[64], s1[64], s2[64], m[16];
    es_proc_result_t r;
    run(1, argv, &r, "EASYSCALE_DETERMINISM=off", NULL, NULL, NULL);
    assert_int_equal(r.status, 0);
    val(&r, "symv0", s0, sizeof(s0));
    val(&r, "symv1", s1, sizeof(s1));
    val(&r, "symv2", s2, sizeof(s2));
    assert_false(strcmp(s0, s1) == 0 && strcmp(s1, s2) == 0);
    es_proc_result_free(&r);
    run(1, argv, &r, NULL, NULL, NULL, NULL); /* default d1 */
    assert_int_equal(r.status, 0);
    assert_string_equal(val(&r, "atomics_mode", m, sizeof(m)), "1"); /* reported back */
    val(&r, "symv0", s0, sizeof(s0));
    val(&r, "symv1", s1, sizeof(s1));
    val(&r, "symv2", s2, sizeof(s2));
    assert_string_equal(s0, s1);
    assert_string_equal(s1, s2);
    es_proc_result_free(&r);
}

static int all_runs_equal(const es_proc_result_t *r, const char *prefix)
{
    char k[64], v0[64], v[64];
    snprintf(k, sizeof(k), "%s_run0 ", prefix);
    if (!es_find_last(r->out, k, v0, sizeof(v0)))
        return -1;
    for (int i = 1; i < 3; i++) {
        snprintf(k, sizeof(k), "%s_run%d ", prefix, i);
        if (!es_find_last(r->out, k, v, sizeof(v)))
            return -1;
        if (strcmp(v, v0) != 0)
            return 0;
    }
    return 1;
}

static void test_d1_cudnn(void **state)
{
    (void)state;
    char *argv[] = { (char *)client(), "cudnn", NULL };
    char buf[256];
    es_proc_result_t r;
    run(1, argv, &r, "EASYSCALE_DETERMINISM=off", NULL, NULL, NULL);
    if (r.status != 0)
        fail_msg("off: exit %d\n%s", r.status, r.out);
    /* negative control: at least one nondeterministic algorithm varies */
    int eq0 = all_runs_equal(&r, "bwd_filter_algo0"), eq3 = all_runs_equal(&r, "bwd_filter_algo3"),
        eqd = all_runs_equal(&r, "bwd_data_algo0");
    if (eq0 != 0 && eq3 != 0 && eqd != 0)
        fail_msg("off: nondeterministic algorithms gave equal bits\n%s", r.out);
    assert_string_equal(val(&r, "pooling_mode", buf, sizeof(buf)), "0");
    assert_int_equal(all_runs_equal(&r, "pool_bwd"), 0); /* max pooling backward varies */
    char off_v7[256];
    snprintf(off_v7, sizeof(off_v7), "%s", val(&r, "bwd_filter_v7", buf, sizeof(buf)));
    es_proc_result_free(&r);

    run(1, argv, &r, "EASYSCALE_DETERMINISM=d1", NULL, NULL, NULL);
    if (r.status != 0)
        fail_msg("d1: exit %d\n%s", r.status, r.out);
    assert_int_equal(all_runs_equal(&r, "bwd_filter_algo0"), 1);
    assert_int_equal(all_runs_equal(&r, "bwd_filter_algo3"), 1);
    assert_int_equal(all_runs_equal(&r, "bwd_data_algo0"), 1);
    assert_string_equal(val(&r, "pooling_mode", buf, sizeof(buf)), "3");
    assert_int_equal(all_runs_equal(&r, "pool_bwd"), 1);
    /* Get_v7: cuDNN's order kept, nondeterministic entries (ALGO_0, ALGO_3,
     * "/0") dropped */
    char want[256] = "", *save = NULL;
    size_t wl = 0;
    for (char *t = strtok_r(off_v7, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        int algo = -1, det = -1;
        assert_int_equal(sscanf(t, "%d/%d", &algo, &det), 2);
        if (det == 1 && algo != 0 && algo != 3)
            wl += (size_t)snprintf(want + wl, sizeof(want) - wl, "%s%s", wl ? " " : "", t);
    }
    assert_string_equal(val(&r, "bwd_filter_v7", buf, sizeof(buf)), want);
    /* Find: ranked by a fixed rule (successful first, then algorithm id),
     * not by measured time */
    {
        const char *v = val(&r, "bwd_filter_find_status", buf, sizeof(buf));
        int prev_key = -1, algo, st, used, n = 0;
        while (sscanf(v, "%d:%d%n", &algo, &st, &used) == 2) {
            int key = (st != 0) * 1000 + algo;
            if (key <= prev_key)
                fail_msg("bwd_filter_find not ranked (success, id): %s", buf);
            prev_key = key;
            v += used;
            n++;
        }
        assert_true(n >= 2);
    }
    /* lists: only deterministic algorithms ("algo/1") */
    const char *lists[] = { "bwd_filter_v7", "bwd_filter_find", "bwd_data_v7" };
    for (int i = 0; i < 3; i++) {
        const char *v = val(&r, lists[i], buf, sizeof(buf));
        if (strstr(v, "/0") || !strstr(v, "/1"))
            fail_msg("%s: %s", lists[i], v);
    }
    es_proc_result_free(&r);
}

/* Backend API: heuristic results without nondeterministic engines, and no
 * plan on one (negative control: off keeps both). */
static void test_d1_cudnn_backend(void **state)
{
    (void)state;
    char *argv[] = { (char *)client(), "backend", NULL };
    char v[128];
    es_proc_result_t r;
    run(1, argv, &r, "EASYSCALE_DETERMINISM=off", NULL, NULL, NULL);
    if (r.status != 0)
        fail_msg("off: exit %d\n%s", r.status, r.out);
    val(&r, "heur_engines", v, sizeof(v));
    assert_non_null(strstr(v, "3")); /* engine 3 ranked (BWD_FILTER ALGO_3) */
    assert_string_equal(val(&r, "plan_engine3", v, sizeof(v)), "0");
    es_proc_result_free(&r);
    run(1, argv, &r, "EASYSCALE_DETERMINISM=d1", NULL, NULL, NULL);
    if (r.status != 0)
        fail_msg("d1: exit %d\n%s", r.status, r.out);
    val(&r, "heur_engines", v, sizeof(v));
    assert_null(strstr(v, "3"));
    assert_null(strstr(v, " 0"));
    assert_true(strlen(v) > 0);
    assert_string_equal(val(&r, "plan_engine3", v, sizeof(v)), "3000"); /* NOT_SUPPORTED */
    es_proc_result_free(&r);
}

/* ---- d2 ------------------------------------------------------------------------------ */

/* path: EASYSCALE_D2_GEMM=... or NULL (unset: int8) */
static void gemm_on_path(int dev, const char *det, const char *path, char out[6][64], char *ref,
                         char *ref_tn)
{
    char d[8];
    snprintf(d, sizeof(d), "%d", dev);
    char *argv[] = { (char *)client(), "gemm", d, NULL };
    es_proc_result_t r;
    run(1, argv, &r, det, "SIMCUDA_DEVICES=a100:8G,t4:8G", path, NULL);
    if (r.status != 0)
        fail_msg("gemm %s dev %d: exit %d\n%s", det, dev, r.status, r.out);
    val(&r, "sgemm", out[0], 64);
    val(&r, "gemmex", out[1], 64);
    val(&r, "batched", out[2], 64);
    val(&r, "sgemm_tn", out[3], 64);
    val(&r, "sgemm_devptr", out[4], 64);
    val(&r, "batchedex", out[5], 64);
    if (ref)
        val(&r, "reference", ref, 64);
    if (ref_tn)
        val(&r, "reference_tn", ref_tn, 64);
    es_proc_result_free(&r);
}

static void gemm_on(int dev, const char *det, char out[6][64], char *ref, char *ref_tn)
{
    gemm_on_path(dev, det, "EASYSCALE_D2_GEMM=fma", out, ref, ref_tn);
}

static void test_d2_gemm_across_models(void **state)
{
    (void)state;
    char a[6][64], v[6][64], ref[64], ref_tn[64];
    /* negative controls: bits differ between an a100 and a t4 */
    gemm_on(0, "EASYSCALE_DETERMINISM=off", a, NULL, NULL);
    gemm_on(1, "EASYSCALE_DETERMINISM=off", v, NULL, NULL);
    assert_string_not_equal(a[0], v[0]);
    assert_string_not_equal(a[5], v[5]);
    gemm_on(0, "EASYSCALE_DETERMINISM=d1", a, NULL, NULL);
    gemm_on(1, "EASYSCALE_DETERMINISM=d1", v, NULL, NULL);
    assert_string_not_equal(a[0], v[0]);
    /* d2 (fma path): the same bits, equal to the fma order computed on the host */
    gemm_on(0, "EASYSCALE_DETERMINISM=d2", a, ref, ref_tn);
    gemm_on(1, "EASYSCALE_DETERMINISM=d2", v, NULL, NULL);
    for (int i = 0; i < 6; i++)
        assert_string_equal(a[i], v[i]);
    assert_string_equal(a[2], a[5]); /* GemmStridedBatchedEx fp32 = SgemmStridedBatched */
    assert_string_equal(a[0], ref);
    assert_string_equal(a[0], a[1]); /* GemmEx fp32 = Sgemm */
    assert_string_equal(a[0], a[4]); /* device pointer mode */
    assert_string_equal(a[3], ref_tn);
    /* d2's default GEMM, the int8 one (kernels/d2int8_kernels.h; its bits
     * are checked against its 128-bit reference by kernels_tile_test and
     * test_d2_gemm_edges): the same bits across models and entry points,
     * and not the fma order's (the host reference above) */
    gemm_on_path(0, "EASYSCALE_DETERMINISM=d2", NULL, a, NULL, NULL);
    gemm_on_path(1, "EASYSCALE_DETERMINISM=d2", NULL, v, NULL, NULL);
    for (int i = 0; i < 6; i++)
        assert_string_equal(a[i], v[i]);
    assert_string_equal(a[2], a[5]);
    assert_string_equal(a[0], a[1]);
    assert_string_equal(a[0], a[4]);
    assert_string_not_equal(a[0], ref);
    assert_string_not_equal(a[3], ref_tn);
}

/* d2's GEMM on both EASYSCALE_D2_GEMM paths against its reference run on
 * the host (the fma element function; the int8 definition's 128-bit
 * reference): padded leading dimensions, transposes, beta == 0 over NaN
 * in C, alpha == 0 over NaN in A, batch > 65535 (grid.z) and n > 65535 *
 * 16 (grid.y). Negative control: without d2 (simcuda's cuBLAS) the bits
 * are not the int8 reference's. */
static void test_d2_gemm_edges(void **state)
{
    (void)state;
    static const char *const names[] = { "padded_tt", "padded_nt", "beta0_nan_c",
                                         "alpha0_nan_a", "batch_70000", "n_1048600" };
    static const char *const paths[] = { "EASYSCALE_D2_GEMM=fma", "EASYSCALE_D2_GEMM=int8" };
    char *argv[] = { (char *)client(), "gemm-edges", NULL };
    char key[64], v[64];
    es_proc_result_t r;
    /* each path against its own reference (the client picks it by
     * EASYSCALE_D2_GEMM): the fma order, the int8 definition */
    for (int p = 0; p < 2; p++) {
        run(1, argv, &r, "EASYSCALE_DETERMINISM=d2", paths[p], NULL, NULL);
        if (r.status != 0)
            fail_msg("d2 %s: exit %d\n%s", paths[p], r.status, r.out);
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            snprintf(key, sizeof(key), "edge %s", names[i]);
            if (strcmp(val(&r, key, v, sizeof(v)), "match=1 nan=0") != 0)
                fail_msg("d2 %s %s: %s\n%s", paths[p], names[i], v, r.out);
        }
        es_proc_result_free(&r);
    }
    run(1, argv, &r, "EASYSCALE_DETERMINISM=d1", NULL, NULL, NULL);
    assert_int_equal(r.status, 0);
    int mismatches = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(key, sizeof(key), "edge %s", names[i]);
        mismatches += strcmp(val(&r, key, v, sizeof(v)), "match=1 nan=0") != 0;
    }
    assert_true(mismatches > 0);
    es_proc_result_free(&r);
}

static void conv_on(int dev, const char *det, char out[3][64], char ref[3][64], char *algo)
{
    char d[8];
    snprintf(d, sizeof(d), "%d", dev);
    char *argv[] = { (char *)client(), "conv", d, NULL };
    es_proc_result_t r;
    run(1, argv, &r, det, "SIMCUDA_DEVICES=a100:8G,t4:8G", NULL, NULL);
    if (r.status != 0)
        fail_msg("conv %s dev %d: exit %d\n%s", det, dev, r.status, r.out);
    const char *keys[3] = { "conv_fwd", "conv_bwd_data", "conv_bwd_filter" };
    const char *refs[3] = { "ref_fwd", "ref_bwd_data", "ref_bwd_filter" };
    for (int i = 0; i < 3; i++) {
        val(&r, keys[i], out[i], 64);
        char *sp = strchr(out[i], ' ');
        if (i == 0 && sp)
            snprintf(algo, 16, "%s", sp + 1);
        if (sp)
            *sp = '\0';
        val(&r, refs[i], ref[i], 64);
    }
    es_proc_result_free(&r);
}

static void test_d2_conv_across_models(void **state)
{
    (void)state;
    char a[3][64], v[3][64], ra[3][64], rv[3][64], alg_a[16], alg_v[16];
    /* negative control: bits differ between an a100 and a t4 */
    conv_on(0, "EASYSCALE_DETERMINISM=off", a, ra, alg_a);
    conv_on(1, "EASYSCALE_DETERMINISM=off", v, rv, alg_v);
    assert_string_not_equal(a[0], v[0]);
    conv_on(0, "EASYSCALE_DETERMINISM=d1", a, ra, alg_a);
    conv_on(1, "EASYSCALE_DETERMINISM=d1", v, rv, alg_v);
    assert_string_not_equal(a[1], v[1]);
    /* d2: equal across models and to d2's result on the host (the int8
     * definition's reference: es_client follows EASYSCALE_D2_GEMM); cuDNN
     * itself still sees the real device (its heuristic picks per model) */
    conv_on(0, "EASYSCALE_DETERMINISM=d2", a, ra, alg_a);
    conv_on(1, "EASYSCALE_DETERMINISM=d2", v, rv, alg_v);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(a[i], v[i]);
        assert_string_equal(a[i], ra[i]);
    }
    assert_string_not_equal(alg_a, alg_v);
}

/* The portable convolutions compute what cuDNN computes (strides,
 * dilations, paddings, groups, both modes) within float rounding. */
static void test_d2_conv_correct(void **state)
{
    (void)state;
    char *argv[] = { (char *)client(), "convcheck", NULL };
    es_proc_result_t r;
    run(1, argv, &r, "EASYSCALE_DETERMINISM=d2", NULL, NULL, NULL);
    if (r.status != 0)
        fail_msg("convcheck: exit %d\n%s", r.status, r.out);
    int lines = 0;
    for (const char *p = r.out; (p = strstr(p, "convcheck ")) != NULL; p++) {
        int i;
        double e1, e2, e3;
        assert_int_equal(sscanf(p, "convcheck %d fwd %lf bwd_data %lf bwd_filter %lf", &i, &e1,
                                &e2, &e3), 4);
        if (e1 > 1e-5 || e2 > 1e-5 || e3 > 1e-5)
            fail_msg("configuration %d: errors %g %g %g", i, e1, e2, e3);
        lines++;
    }
    assert_int_equal(lines, 4);
    es_proc_result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_parse),
        cmocka_unit_test(test_log_macro),
        cmocka_unit_test(test_exports),
        cmocka_unit_test(test_no_cuda_processes),
        cmocka_unit_test(test_bad_settings),
        cmocka_unit_test(test_log_file),
        cmocka_unit_test(test_missing_libraries),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_every_wrapped_function),
        cmocka_unit_test(test_threads_and_fork),
        cmocka_unit_test(test_python_ctypes),
        cmocka_unit_test(test_cuda_runtime),
        cmocka_unit_test(test_env_defaults),
        cmocka_unit_test(test_d1_blas_streams),
        cmocka_unit_test(test_d1_symv_atomics),
        cmocka_unit_test(test_d1_cudnn),
        cmocka_unit_test(test_d1_cudnn_backend),
        cmocka_unit_test(test_d2_gemm_across_models),
        cmocka_unit_test(test_d2_gemm_edges),
        cmocka_unit_test(test_d2_conv_across_models),
        cmocka_unit_test(test_d2_conv_correct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
