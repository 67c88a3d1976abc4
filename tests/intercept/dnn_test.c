/* libeasyscale.so and the cuDNN backend API as cudnn-frontend and PyTorch
 * drive it (tests/intercept/fe_client.c reproduces their call sequences): what
 * the frontend's own list of engine configs holds, plans built and run the
 * frontend's way (no plan handle, knob choices read back, note counts
 * queried with a NULL array), benchmark mode, and d2's portable execution
 * of backend graphs (fp32, fp16 and bf16 tensors), each with its negative control (EASYSCALE_DETERMINISM=off,
 * or d1 across GPU models).
 *
 * Vendor facts relied on (docs/VENDOR-FACTS.md, "cuDNN"): an engine's
 * CUDNN_ATTR_ENGINE_NUMERICAL_NOTE may contain CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
 * bits are never reproducible across architectures. cudnn-frontend's
 * EngineHeuristics_v8::getEngineConfig resizes its list to the returned
 * count; time_sorted_plan keeps the fastest plan.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/harness.h"

#define TMO 180
#define DEVS "SIMCUDA_DEVICES=a100:8G,t4:8G,h100:8G"

static const char *const models[3] = { "a100", "t4", "h100" };
static const char *const dirs[4] = { "fwd", "bwd_data", "bwd_filter", "fused" };
static const char *const modes[4] = { "instant", "a", "b", "fallback" };

static char g_preload[4096];

/* Runs fe_client MODE DEV [det] [dtype] with the shim at determinism det. */
static void fe_dt(const char *mode, int dev, const char *det, int pt_det, const char *dtype,
                  es_proc_result_t *r)
{
    char d[16], detenv[64];
    snprintf(d, sizeof(d), "%d", dev);
    snprintf(detenv, sizeof(detenv), "EASYSCALE_DETERMINISM=%s", det);
    char *argv[] = { (char *)es_build_path("tests/intercept/fe_client"), (char *)mode, d,
                     pt_det ? "det" : (char *)dtype, pt_det ? (char *)dtype : NULL, NULL };
    char *env[] = {
        (char *)es_preload_env(es_build_path("lib/libeasyscale.so"), g_preload, sizeof(g_preload)),
        detenv, DEVS, NULL,
    };
    assert_int_equal(es_run(argv, env, TMO, r), 0);
    assert_false(r->timed_out);
    if (r->status != 0)
        fail_msg("fe_client %s %d (%s): exit %d\n%s", mode, dev, det, r->status, r->out);
}

static void fe(const char *mode, int dev, const char *det, int pt_det, es_proc_result_t *r)
{
    fe_dt(mode, dev, det, pt_det, NULL, r);
}

/* The value after "key " on its last line. */
static const char *val(const es_proc_result_t *r, const char *key, char *buf, size_t len)
{
    char k[128];
    snprintf(k, sizeof(k), "%s ", key);
    const char *v = es_find_last(r->out, k, buf, len);
    if (!v)
        fail_msg("no line '%s' in output:\n%s", key, r->out);
    return v;
}

static int ival(const es_proc_result_t *r, const char *key)
{
    char buf[64];
    return atoi(val(r, key, buf, sizeof(buf)));
}

/* Without the shim the frontend's list holds nondeterministic engines for
 * the backward passes on every model (the heuristics rank one first);
 * with it (d1), every mode's list is one deterministic config, the same
 * engine for every mode (FALLBACK included: its own first deterministic
 * engine may differ), and the frontend's list and the temporary array
 * agree. */
static void test_frontend_view(void **state)
{
    (void)state;
    char k[64], v[128], raw[128];
    es_proc_result_t r;
    for (int dev = 0; dev < 3; dev++) {
        fe("view", dev, "off", 0, &r);
        snprintf(k, sizeof(k), "nondet bwd_filter instant");
        if (ival(&r, k) < 1)
            fail_msg("%s off: no nondeterministic engine in the frontend's list\n%s",
                     models[dev], r.out);
        assert_true(ival(&r, "nondet bwd_data fallback") >= 1);
        es_proc_result_free(&r);
        fe("view", dev, "d1", 0, &r);
        for (int d = 0; d < 3; d++) {
            char first[128] = "";
            for (int m = 0; m < 4; m++) {
                snprintf(k, sizeof(k), "nondet %s %s", dirs[d], modes[m]);
                assert_int_equal(ival(&r, k), 0);
                snprintf(k, sizeof(k), "view %s %s", dirs[d], modes[m]);
                val(&r, k, v, sizeof(v));
                if (strchr(v, ' ') || !*v)
                    fail_msg("%s d1 %s: %s (one config expected)", models[dev], k, v);
                snprintf(k, sizeof(k), "raw %s %s", dirs[d], modes[m]);
                assert_string_equal(val(&r, k, raw, sizeof(raw)), v);
                if (m == 0)
                    snprintf(first, sizeof(first), "%s", v);
                else if (strcmp(first, v) != 0)
                    fail_msg("%s d1 %s: mode %s gives engine %s, instant %s", models[dev],
                             dirs[d], modes[m], v, first);
            }
        }
        es_proc_result_free(&r);
    }
}

/* Plans built the frontend's way finalize and run on simcuda with and
 * without the shim, for the three directions and PyTorch's fused
 * conv + add + bias + ReLU graph, and compute the convolution (the fused
 * graph against an fp64 host reference). */
static void test_frontend_plans(void **state)
{
    (void)state;
    static const char *const dets[3] = { "off", "d1", "d2" };
    es_proc_result_t r;
    char k[64], v[128];
    for (int i = 0; i < 3; i++)
        for (int dev = 0; dev < 3; dev += 2) {
            fe("run", dev, dets[i], i == 0, &r);
            for (int d = 0; d < 4; d++) {
                snprintf(k, sizeof(k), "exec %s", dirs[d]);
                val(&r, k, v, sizeof(v));
            }
            double err = atof(val(&r, "fused_err", v, sizeof(v)));
            if (!(err < 1e-5))
                fail_msg("%s %s: fused graph error %g\n%s", models[dev], dets[i], err, r.out);
            es_proc_result_free(&r);
        }
}

/* Benchmark mode: PyTorch times every plan it built (heuristics and
 * fallback lists) and keeps the fastest. Without the shim the candidates
 * are several engines with different bits (the choice would depend on
 * timing); with it, one engine, one result. */
static void test_benchmark_mode(void **state)
{
    (void)state;
    es_proc_result_t r;
    char k[64], v[128];
    int plans, engines, results;
    fe("bench", 0, "off", 0, &r);
    snprintf(k, sizeof(k), "bench fwd");
    assert_int_equal(sscanf(val(&r, k, v, sizeof(v)), "plans %d engines %d results %d", &plans,
                            &engines, &results), 3);
    assert_true(engines > 1 && results > 1);
    es_proc_result_free(&r);
    for (int det = 1; det <= 2; det++)
        for (int dev = 0; dev < 3; dev++) {
            fe("bench", dev, det == 1 ? "d1" : "d2", 0, &r);
            for (int d = 0; d < 4; d++) {
                snprintf(k, sizeof(k), "bench %s", dirs[d]);
                assert_int_equal(sscanf(val(&r, k, v, sizeof(v)),
                                        "plans %d engines %d results %d", &plans, &engines,
                                        &results), 3);
                if (plans < 1 || engines != 1 || results != 1)
                    fail_msg("%s d%d %s: %s", models[dev], det, dirs[d], v);
            }
            es_proc_result_free(&r);
        }
}

/* d1, PyTorch's default (nondeterministic engines not filtered by
 * PyTorch): the same bits run to run; off: the backward-filter plan the
 * frontend picks first is nondeterministic. */
static void test_d1_run_to_run(void **state)
{
    (void)state;
    es_proc_result_t r;
    char a[4][64], b[64], k[64];
    int differ = 0;
    for (int t = 0; t < 4 && !differ; t++) {
        fe("run", 0, "off", 0, &r);
        val(&r, "exec bwd_filter", t ? b : a[0], 64);
        if (t)
            differ = strcmp(strtok(a[0], " "), strtok(b, " ")) != 0;
        es_proc_result_free(&r);
    }
    assert_true(differ);
    for (int t = 0; t < 2; t++) {
        fe("run", 1, "d1", 0, &r);
        for (int d = 0; d < 4; d++) {
            snprintf(k, sizeof(k), "exec %s", dirs[d]);
            val(&r, k, t ? b : a[d], 64);
            if (t)
                assert_string_equal(a[d], b);
        }
        es_proc_result_free(&r);
    }
}

/* d2: every backend graph (the fused one included) gives the same bits on
 * a100, t4 and h100, equal to d2's result computed on the host (the int8
 * definition's reference, d2's default path: kernels/d2int8.c);
 * d1 (and off) differ across models. */
static void test_d2_backend_across_models(void **state)
{
    (void)state;
    es_proc_result_t r;
    char got[3][4][64], ref[4][64], k[64];
    for (int dev = 0; dev < 2; dev++) {
        fe("run", dev, "d1", 0, &r);
        val(&r, "exec fwd", got[dev][0], 64);
        strtok(got[dev][0], " ");
        es_proc_result_free(&r);
    }
    assert_string_not_equal(got[0][0], got[1][0]);
    for (int dev = 0; dev < 3; dev++) {
        fe("run", dev, "d2", 0, &r);
        for (int d = 0; d < 4; d++) {
            snprintf(k, sizeof(k), "exec %s", dirs[d]);
            val(&r, k, got[dev][d], 64);
            strtok(got[dev][d], " ");
            if (dev == 0) {
                snprintf(k, sizeof(k), "ref %s", dirs[d]);
                val(&r, k, ref[d], 64);
                assert_string_equal(got[0][d], ref[d]);
            } else {
                assert_string_equal(got[dev][d], got[0][d]);
            }
        }
        es_proc_result_free(&r);
    }
}

/* Half precision: fp16 and bf16 graphs (fp32 compute, PyTorch's
 * autocast convolutions) run on the portable kernels in d2, the same bits
 * on a100, t4 and h100 and equal to d2's result on the host; the
 * fused graph within the 16-bit output's rounding of an fp64 reference.
 * Negative control: without the shim simcuda's engines (16-bit data widened,
 * fp32 engines, rounded) give different bits on a100 and t4 (for some
 * graphs: the rounding to 16 bits hides the difference in others). */
static void test_d2_half(void **state)
{
    (void)state;
    static const char *const types[2] = { "half", "bf16" };
    static const double tol[2] = { 1e-3, 8e-3 }; /* 2^-11, 2^-8 relative rounding of y */
    es_proc_result_t r;
    char got[3][4][64], ref[4][64], k[64], v[64];
    for (int t = 0; t < 2; t++) {
        for (int dev = 0; dev < 2; dev++) {
            fe_dt("run", dev, "off", 0, types[t], &r);
            for (int d = 0; d < 4; d++) {
                snprintf(k, sizeof(k), "exec %s", dirs[d]);
                val(&r, k, got[dev][d], 64);
                strtok(got[dev][d], " ");
            }
            double err = atof(val(&r, "fused_err", v, sizeof(v)));
            if (!(err < tol[t]))
                fail_msg("off %s %s: fused error %g\n%s", types[t], models[dev], err, r.out);
            es_proc_result_free(&r);
        }
        /* rounded to 16 bits, some outputs agree; the long sums do not */
        int differ = 0;
        for (int d = 0; d < 4; d++)
            differ += strcmp(got[0][d], got[1][d]) != 0;
        if (!differ)
            fail_msg("off %s: a100 and t4 agree on every graph", types[t]);
        for (int dev = 0; dev < 3; dev++) {
            fe_dt("run", dev, "d2", 0, types[t], &r);
            for (int d = 0; d < 4; d++) {
                snprintf(k, sizeof(k), "exec %s", dirs[d]);
                val(&r, k, got[dev][d], 64);
                strtok(got[dev][d], " ");
                snprintf(k, sizeof(k), "ref %s", dirs[d]);
                val(&r, k, ref[d], 64);
                if (strcmp(got[dev][d], ref[d]))
                    fail_msg("d2 %s %s %s: %s, host order %s", types[t], models[dev], dirs[d],
                             got[dev][d], ref[d]);
            }
            double err = atof(val(&r, "fused_err", v, sizeof(v)));
            if (!(err < tol[t]))
                fail_msg("d2 %s %s: fused error %g\n%s", types[t], models[dev], err, r.out);
            es_proc_result_free(&r);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frontend_view),
        cmocka_unit_test(test_frontend_plans),
        cmocka_unit_test(test_benchmark_mode),
        cmocka_unit_test(test_d1_run_to_run),
        cmocka_unit_test(test_d2_backend_across_models),
        cmocka_unit_test(test_d2_half),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
