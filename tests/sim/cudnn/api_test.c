/* Tests of simcuda's cuDNN (build/sim/libcudnn.so.9): the math cores against
 * a naive double reference, the API (descriptors, status codes, asynchronous
 * execution on the handle's stream), the heuristics, and the negative
 * controls for every determinism claim.
 *
 * Vendor fact cited by the nondeterminism tests (cuDNN docs,
 * "Reproducibility", see docs/VENDOR-FACTS.md): results are bitwise reproducible
 * on one architecture except cudnnConvolutionBackwardFilter with
 * CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 or _ALGO_3, cudnnConvolutionBackwardData
 * with CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 and cudnnPoolingBackward with
 * CUDNN_POOLING_MAX; never across architectures. The perf structs carry a
 * `determinism` field that says which.
 *
 * The program sets SIMCUDA_DEVICES itself (a100, l4, t4, h100) before the
 * driver starts, so one process sees several GPU models.
 */
#include <cuda.h>
#include <errno.h>
#include <cudnn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <setjmp.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "sim/cudnn/heur.h"
#include "tests/harness.h"
#include "tests/sim/common/abi.h"
#include "sim/cudnn/kern.h"

#define DEV_A100 0
#define DEV_L4 1
#define DEV_T4 2
#define DEV_H100 3

/* ---- helpers ------------------------------------------------------------------- */

static uint64_t g_rng = 0x1234567887654321ull;

static float frand(void)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(g_rng >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static float *rand_buf(size_t n)
{
    float *p = malloc(n * sizeof(float));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = frand();
    return p;
}

static void dense(sim_t4_t *t, int n, int c, int h, int w, int nhwc)
{
    t->n = n;
    t->c = c;
    t->h = h;
    t->w = w;
    if (nhwc) {
        t->sc = 1;
        t->sw = c;
        t->sh = (int64_t)w * c;
        t->sn = (int64_t)h * w * c;
    } else {
        t->sw = 1;
        t->sh = w;
        t->sc = (int64_t)h * w;
        t->sn = (int64_t)c * h * w;
    }
}

static size_t count4(const sim_t4_t *t)
{
    return (size_t)t->n * t->c * t->h * t->w;
}

static int64_t ix(const sim_t4_t *t, int n, int c, int h, int w)
{
    return n * t->sn + c * t->sc + h * t->sh + w * t->sw;
}

static void make_conv(sim_conv_t *p, int N, int C, int H, int W, int K, int R, int S, int ph,
                      int pw, int sh, int sw, int dh, int dw, int groups, int flip, int nhwc)
{
    memset(p, 0, sizeof(*p));
    p->pad_h = ph;
    p->pad_w = pw;
    p->str_h = sh;
    p->str_w = sw;
    p->dil_h = dh;
    p->dil_w = dw;
    p->groups = groups;
    p->flip = flip;
    dense(&p->x, N, C, H, W, nhwc);
    dense(&p->w, K, C / groups, R, S, nhwc);
    dense(&p->y, N, K, sim_conv_out_dim(H, ph, R, dh, sh), sim_conv_out_dim(W, pw, S, dw, sw),
          nhwc);
}

/* Naive double references. */
static double *ref_fwd(const sim_conv_t *p, const float *x, const float *w)
{
    double *y = calloc(count4(&p->y), sizeof(double));
    int kpg = p->w.n / p->groups;
    for (int n = 0; n < p->y.n; n++)
        for (int k = 0; k < p->y.c; k++)
            for (int oh = 0; oh < p->y.h; oh++)
                for (int ow = 0; ow < p->y.w; ow++) {
                    double s = 0;
                    for (int c = 0; c < p->w.c; c++)
                        for (int r = 0; r < p->w.h; r++)
                            for (int q = 0; q < p->w.w; q++) {
                                int hh = oh * p->str_h - p->pad_h + r * p->dil_h;
                                int ww = ow * p->str_w - p->pad_w + q * p->dil_w;
                                if (hh < 0 || hh >= p->x.h || ww < 0 || ww >= p->x.w)
                                    continue;
                                int fr = p->flip ? p->w.h - 1 - r : r;
                                int fs = p->flip ? p->w.w - 1 - q : q;
                                s += (double)x[ix(&p->x, n, (k / kpg) * p->w.c + c, hh, ww)] *
                                     w[ix(&p->w, k, c, fr, fs)];
                            }
                    y[((n * p->y.c + k) * p->y.h + oh) * p->y.w + ow] = s;
                }
    return y;
}

/* Backward data and filter by the adjoint of the forward sum. */
static void ref_bwd(const sim_conv_t *p, const float *x, const float *w, const float *dy,
                    double **dxp, double **dwp)
{
    double *dx = calloc(count4(&p->x), sizeof(double));
    double *dw = calloc(count4(&p->w), sizeof(double));
    int kpg = p->w.n / p->groups;
    for (int n = 0; n < p->y.n; n++)
        for (int k = 0; k < p->y.c; k++)
            for (int oh = 0; oh < p->y.h; oh++)
                for (int ow = 0; ow < p->y.w; ow++) {
                    double g = dy[ix(&p->y, n, k, oh, ow)];
                    for (int c = 0; c < p->w.c; c++)
                        for (int r = 0; r < p->w.h; r++)
                            for (int q = 0; q < p->w.w; q++) {
                                int hh = oh * p->str_h - p->pad_h + r * p->dil_h;
                                int ww = ow * p->str_w - p->pad_w + q * p->dil_w;
                                if (hh < 0 || hh >= p->x.h || ww < 0 || ww >= p->x.w)
                                    continue;
                                int fr = p->flip ? p->w.h - 1 - r : r;
                                int fs = p->flip ? p->w.w - 1 - q : q;
                                int ca = (k / kpg) * p->w.c + c;
                                dx[((n * p->x.c + ca) * p->x.h + hh) * p->x.w + ww] +=
                                    g * w[ix(&p->w, k, c, fr, fs)];
                                dw[((k * p->w.c + c) * p->w.h + fr) * p->w.w + fs] +=
                                    g * x[ix(&p->x, n, ca, hh, ww)];
                            }
                }
    *dxp = dx;
    *dwp = dw;
}

/* got (strided view t) vs ref (dense NCHW double): relative to the scale. */
static void expect_close(const sim_t4_t *t, const float *got, const double *ref, double tol,
                         const char *what)
{
    double scale = 1e-30;
    for (size_t i = 0; i < count4(t); i++)
        scale = fmax(scale, fabs(ref[i]));
    for (int n = 0; n < t->n; n++)
        for (int c = 0; c < t->c; c++)
            for (int h = 0; h < t->h; h++)
                for (int w = 0; w < t->w; w++) {
                    double r = ref[((n * t->c + c) * t->h + h) * t->w + w];
                    double g = got[ix(t, n, c, h, w)];
                    if (!(fabs(g - r) <= tol * scale)) {
                        print_error("%s: mismatch at %d,%d,%d,%d: got %.9g want %.9g\n", what, n,
                                    c, h, w, g, r);
                        fail();
                    }
                }
}

/* ---- math cores vs the reference ------------------------------------------------ */

static void conv_shapes(sim_conv_t *ps, int *np)
{
    int n = 0;
    make_conv(&ps[n++], 2, 3, 7, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0);  /* 3x3 same */
    make_conv(&ps[n++], 2, 4, 9, 8, 6, 3, 2, 2, 1, 2, 3, 1, 2, 2, 1, 0);  /* stride, dilation, groups, flip */
    make_conv(&ps[n++], 1, 5, 11, 10, 3, 5, 5, 2, 2, 1, 1, 1, 1, 1, 0, 0); /* 5x5 */
    make_conv(&ps[n++], 2, 4, 6, 7, 4, 3, 3, 1, 0, 1, 1, 1, 1, 1, 1, 1);  /* NHWC, flip */
    make_conv(&ps[n++], 3, 8, 5, 5, 4, 1, 1, 0, 0, 2, 2, 1, 1, 1, 0, 0);  /* 1x1 stride 2 */
    make_conv(&ps[n++], 1, 6, 13, 5, 6, 3, 3, 0, 3, 1, 2, 3, 1, 3, 0, 0); /* groups 3, odd */
    *np = n;
}

static void test_core_conv_fwd(void **state)
{
    (void)state;
    sim_conv_t ps[8];
    int np;
    conv_shapes(ps, &np);
    for (int i = 0; i < np; i++) {
        const sim_conv_t *p = &ps[i];
        float *x = rand_buf(count4(&p->x)), *w = rand_buf(count4(&p->w));
        double *ref = ref_fwd(p, x, w);
        int tested = 0;
        for (int a = 0; a < SIM_FWD_ALGOS; a++) {
            float *y = rand_buf(count4(&p->y));
            for (size_t e = 0; e < count4(&p->y); e++)
                y[e] = NAN; /* beta = 0 must ignore it */
            int rc = sim_conv_fwd(p, a, 1.0f, x, w, 0.0f, y, 1);
            if (!sim_conv_algo_supported(SIM_DIR_FWD, a, p)) {
                assert_int_equal(rc, -ENOTSUP);
            } else {
                assert_int_equal(rc, 0);
                expect_close(&p->y, y, ref, 1e-5, "fwd");
                tested++;
                /* alpha/beta blending: y = 0.5 * conv + 2 * y */
                float *y0 = rand_buf(count4(&p->y));
                float *y1 = malloc(count4(&p->y) * sizeof(float));
                memcpy(y1, y0, count4(&p->y) * sizeof(float));
                double *r2 = malloc(count4(&p->y) * sizeof(double));
                for (int n = 0; n < p->y.n; n++)
                    for (int c = 0; c < p->y.c; c++)
                        for (int h = 0; h < p->y.h; h++)
                            for (int ww = 0; ww < p->y.w; ww++) {
                                size_t d = ((size_t)(n * p->y.c + c) * p->y.h + h) * p->y.w + ww;
                                r2[d] = 0.5 * ref[d] + 2.0 * y0[ix(&p->y, n, c, h, ww)];
                            }
                assert_int_equal(sim_conv_fwd(p, a, 0.5f, x, w, 2.0f, y1, 1), 0);
                expect_close(&p->y, y1, r2, 1e-5, "fwd alpha/beta");
                free(y0);
                free(y1);
                free(r2);
            }
            free(y);
        }
        assert_true(tested >= 3);
        free(x);
        free(w);
        free(ref);
    }
}

static void test_core_conv_bwd(void **state)
{
    (void)state;
    sim_conv_t ps[8];
    int np;
    conv_shapes(ps, &np);
    for (int i = 0; i < np; i++) {
        const sim_conv_t *p = &ps[i];
        float *x = rand_buf(count4(&p->x)), *w = rand_buf(count4(&p->w));
        float *dy = rand_buf(count4(&p->y));
        double *rdx, *rdw;
        ref_bwd(p, x, w, dy, &rdx, &rdw);
        for (int a = 0; a < SIM_BWD_DATA_ALGOS; a++) {
            float *dx = rand_buf(count4(&p->x));
            for (size_t e = 0; e < count4(&p->x); e++)
                dx[e] = NAN;
            int rc = sim_conv_bwd_data(p, a, 1.0f, w, dy, 0.0f, dx, 42);
            if (sim_conv_algo_supported(SIM_DIR_BWD_DATA, a, p)) {
                assert_int_equal(rc, 0);
                expect_close(&p->x, dx, rdx, 1e-5, "bwd data");
            } else {
                assert_int_equal(rc, -ENOTSUP);
            }
            free(dx);
        }
        for (int a = 0; a < SIM_BWD_FILTER_ALGOS; a++) {
            float *dw = rand_buf(count4(&p->w));
            for (size_t e = 0; e < count4(&p->w); e++)
                dw[e] = NAN;
            int rc = sim_conv_bwd_filter(p, a, 1.0f, x, dy, 0.0f, dw, 42);
            if (sim_conv_algo_supported(SIM_DIR_BWD_FILTER, a, p)) {
                assert_int_equal(rc, 0);
                expect_close(&p->w, dw, rdw, 1e-5, "bwd filter");
            } else {
                assert_int_equal(rc, -ENOTSUP);
            }
            free(dw);
        }
        free(x);
        free(w);
        free(dy);
        free(rdx);
        free(rdw);
    }
}

static void test_core_bias_add_act(void **state)
{
    (void)state;
    sim_t4_t dyv, dbv, av, cv;
    dense(&dyv, 3, 5, 4, 7, 0);
    dense(&dbv, 1, 5, 1, 1, 0);
    float *dy = rand_buf(count4(&dyv)), db[5];
    for (int k = 0; k < 5; k++)
        db[k] = NAN;
    assert_int_equal(sim_conv_bwd_bias(&dyv, &dbv, 1.0f, dy, 0.0f, db), 0);
    for (int k = 0; k < 5; k++) {
        double s = 0;
        for (int n = 0; n < 3; n++)
            for (int h = 0; h < 4; h++)
                for (int w = 0; w < 7; w++)
                    s += dy[ix(&dyv, n, k, h, w)];
        assert_true(fabs(db[k] - s) < 1e-5);
    }
    /* add a 1xCx1x1 bias into an NHWC tensor */
    dense(&av, 1, 5, 1, 1, 0);
    dense(&cv, 3, 5, 4, 7, 1);
    float *c = rand_buf(count4(&cv)), *c0 = malloc(count4(&cv) * sizeof(float));
    memcpy(c0, c, count4(&cv) * sizeof(float));
    float bias[5] = {1, 2, 3, 4, 5};
    assert_int_equal(sim_add_tensor(&av, &cv, 2.0f, bias, 1.0f, c), 0);
    for (int n = 0; n < 3; n++)
        for (int k = 0; k < 5; k++)
            for (int h = 0; h < 4; h++)
                for (int w = 0; w < 7; w++) {
                    int64_t o = ix(&cv, n, k, h, w);
                    assert_true(fabsf(c[o] - (c0[o] + 2.0f * bias[k])) < 1e-6f);
                }
    /* relu forward / backward */
    float *x = rand_buf(count4(&dyv)), *y = malloc(count4(&dyv) * sizeof(float));
    float *dx = malloc(count4(&dyv) * sizeof(float));
    for (size_t i = 0; i < count4(&dyv); i++)
        y[i] = dx[i] = NAN;
    assert_int_equal(sim_act_fwd(CUDNN_ACTIVATION_RELU, 0, &dyv, &dyv, 1.0f, x, 0.0f, y), 0);
    assert_int_equal(sim_act_bwd(CUDNN_ACTIVATION_RELU, 0, &dyv, &dyv, &dyv, &dyv, 1.0f, y, dy,
                                 x, 0.0f, dx), 0);
    for (size_t i = 0; i < count4(&dyv); i++) {
        assert_true(y[i] == (x[i] > 0 ? x[i] : 0.0f));
        assert_true(dx[i] == (x[i] > 0 ? dy[i] : 0.0f));
    }
    free(dy);
    free(c);
    free(c0);
    free(x);
    free(y);
    free(dx);
}

static void ref_pool(const sim_pool_t *p, const float *x, const float *dy, double *y, double *dx)
{
    memset(dx, 0, count4(&p->x) * sizeof(double));
    for (int n = 0; n < p->y.n; n++)
        for (int c = 0; c < p->y.c; c++)
            for (int oh = 0; oh < p->y.h; oh++)
                for (int ow = 0; ow < p->y.w; ow++) {
                    double m = -INFINITY, s = 0;
                    int cnt = 0, am = -1;
                    for (int i = 0; i < p->win_h; i++)
                        for (int j = 0; j < p->win_w; j++) {
                            int hh = oh * p->str_h - p->pad_h + i, ww = ow * p->str_w - p->pad_w + j;
                            if (hh < 0 || hh >= p->x.h || ww < 0 || ww >= p->x.w)
                                continue;
                            double v = x[ix(&p->x, n, c, hh, ww)];
                            if (v > m) {
                                m = v;
                                am = hh * p->x.w + ww;
                            }
                            s += v;
                            cnt++;
                        }
                    size_t o = ((size_t)(n * p->y.c + c) * p->y.h + oh) * p->y.w + ow;
                    double g = dy[ix(&p->y, n, c, oh, ow)];
                    size_t base = (size_t)(n * p->x.c + c) * p->x.h * p->x.w;
                    if (p->mode == CUDNN_POOLING_MAX || p->mode == CUDNN_POOLING_MAX_DETERMINISTIC) {
                        y[o] = m;
                        dx[base + am] += g;
                    } else {
                        int div = p->mode == CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                      ? p->win_h * p->win_w : cnt;
                        y[o] = s / div;
                        for (int i = 0; i < p->win_h; i++)
                            for (int j = 0; j < p->win_w; j++) {
                                int hh = oh * p->str_h - p->pad_h + i, ww = ow * p->str_w - p->pad_w + j;
                                if (hh >= 0 && hh < p->x.h && ww >= 0 && ww < p->x.w)
                                    dx[base + hh * p->x.w + ww] += g / div;
                            }
                    }
                }
}

static void make_pool(sim_pool_t *p, int mode, int N, int C, int H, int W, int wh, int ww,
                      int ph, int pw, int sh, int sw, int nhwc)
{
    memset(p, 0, sizeof(*p));
    p->mode = mode;
    p->win_h = wh;
    p->win_w = ww;
    p->pad_h = ph;
    p->pad_w = pw;
    p->str_h = sh;
    p->str_w = sw;
    dense(&p->x, N, C, H, W, nhwc);
    dense(&p->y, N, C, sim_conv_out_dim(H, ph, wh, 1, sh), sim_conv_out_dim(W, pw, ww, 1, sw), nhwc);
}

static void test_core_pool(void **state)
{
    (void)state;
    int modes[4] = {CUDNN_POOLING_MAX, CUDNN_POOLING_MAX_DETERMINISTIC,
                    CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                    CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING};
    for (int m = 0; m < 4; m++)
        for (int shape = 0; shape < 3; shape++) {
            sim_pool_t p;
            if (shape == 0)
                make_pool(&p, modes[m], 2, 3, 7, 9, 3, 3, 1, 1, 2, 2, 0);
            else if (shape == 1)
                make_pool(&p, modes[m], 1, 2, 8, 5, 2, 3, 0, 1, 1, 2, 1);
            else
                make_pool(&p, modes[m], 2, 2, 6, 6, 3, 3, 1, 1, 1, 1, 0);
            float *x = rand_buf(count4(&p.x)), *dy = rand_buf(count4(&p.y));
            float *y = malloc(count4(&p.y) * sizeof(float)), *dx = malloc(count4(&p.x) * sizeof(float));
            double *ry = malloc(count4(&p.y) * sizeof(double)), *rdx = malloc(count4(&p.x) * sizeof(double));
            for (size_t i = 0; i < count4(&p.y); i++)
                y[i] = NAN;
            for (size_t i = 0; i < count4(&p.x); i++)
                dx[i] = NAN;
            ref_pool(&p, x, dy, ry, rdx);
            assert_int_equal(sim_pool_fwd(&p, 1.0f, x, 0.0f, y), 0);
            expect_close(&p.y, y, ry, 1e-6, "pool fwd");
            assert_int_equal(sim_pool_bwd(&p, &p.y, &p.x, 1.0f, y, dy, x, 0.0f, dx, 7), 0);
            expect_close(&p.x, dx, rdx, 1e-5, "pool bwd");
            free(x);
            free(dy);
            free(y);
            free(dx);
            free(ry);
            free(rdx);
        }
}

/* Max pooling and NaN: propagated when asked, skipped otherwise. */
static void test_core_pool_nan(void **state)
{
    (void)state;
    sim_pool_t p;
    make_pool(&p, CUDNN_POOLING_MAX, 1, 1, 4, 4, 2, 2, 0, 0, 2, 2, 0);
    float x[16], y[4];
    for (int i = 0; i < 16; i++)
        x[i] = (float)i;
    x[0] = NAN; /* in the first window only */
    for (int prop = 0; prop < 2; prop++) {
        p.nan_prop = prop;
        assert_int_equal(sim_pool_fwd(&p, 1.0f, x, 0.0f, y), 0);
        if (prop)
            assert_true(isnan(y[0]));
        else
            assert_true(y[0] == 5.0f);
        assert_true(y[1] == 7.0f && y[2] == 13.0f && y[3] == 15.0f);
    }
}

/* Runs algorithm a of dir on p for architecture arch; returns the output. */
static float *run_algo(int dir, int a, sim_conv_t *p, int arch, const float *x, const float *w,
                       const float *dy, size_t *len)
{
    p->arch = arch;
    const sim_t4_t *ov = dir == SIM_DIR_FWD ? &p->y : dir == SIM_DIR_BWD_DATA ? &p->x : &p->w;
    *len = count4(ov);
    float *out = calloc(*len, sizeof(float));
    int rc = dir == SIM_DIR_FWD        ? sim_conv_fwd(p, a, 1.0f, x, w, 0.0f, out, 1)
             : dir == SIM_DIR_BWD_DATA ? sim_conv_bwd_data(p, a, 1.0f, w, dy, 0.0f, out, 1)
                                       : sim_conv_bwd_filter(p, a, 1.0f, x, dy, 0.0f, out, 1);
    assert_int_equal(rc, 0);
    p->arch = 0;
    return out;
}

/* Different algorithms give different low bits (as real ones do), each one
 * the same bits every time on one architecture; and one algorithm gives
 * different bits on different architectures (vendor fact: reproducible on
 * the same architecture, never across architectures). */
static void test_core_algos_differ(void **state)
{
    (void)state;
    sim_conv_t p;
    make_conv(&p, 2, 16, 10, 10, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0);
    float *x = rand_buf(count4(&p.x)), *w = rand_buf(count4(&p.w)), *dy = rand_buf(count4(&p.y));
    int archs[5] = {60, 70, 75, 80, 90};
    for (int dir = 0; dir < 3; dir++) {
        int n = sim_conv_algo_count(dir);
        for (int a = 0; a < n; a++) {
            if (!sim_conv_algo_supported(dir, a, &p) || !sim_conv_algo_deterministic(dir, a))
                continue;
            size_t len;
            float *r[5];
            for (int i = 0; i < 5; i++) {
                r[i] = run_algo(dir, a, &p, archs[i], x, w, dy, &len);
                float *again = run_algo(dir, a, &p, archs[i], x, w, dy, &len);
                assert_memory_equal(r[i], again, len * sizeof(float));
                free(again);
                for (int j = 0; j < i; j++)
                    if (memcmp(r[i], r[j], len * sizeof(float)) == 0) {
                        print_error("dir %d algo %d: arch %d and %d gave identical bits\n", dir,
                                    a, archs[i], archs[j]);
                        fail();
                    }
            }
            for (int i = 0; i < 5; i++)
                free(r[i]);
            for (int b = a + 1; b < n; b++) {
                if (!sim_conv_algo_supported(dir, b, &p) || !sim_conv_algo_deterministic(dir, b))
                    continue;
                for (int i = 0; i < 5; i++) {
                    size_t l2;
                    float *ra = run_algo(dir, a, &p, archs[i], x, w, dy, &len);
                    float *rb = run_algo(dir, b, &p, archs[i], x, w, dy, &l2);
                    if (memcmp(ra, rb, len * sizeof(float)) == 0) {
                        print_error("dir %d: algorithms %d and %d identical on arch %d\n", dir,
                                    a, b, archs[i]);
                        fail();
                    }
                    free(ra);
                    free(rb);
                }
            }
        }
    }
    free(x);
    free(w);
    free(dy);
}

/* Core-level negative control: the atomics model varies with the seed, the
 * fixed-order algorithms do not. */
static void test_core_nondeterminism(void **state)
{
    (void)state;
    sim_conv_t p;
    make_conv(&p, 4, 3, 12, 12, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0);
    float *x = rand_buf(count4(&p.x)), *dy = rand_buf(count4(&p.y)), *w = rand_buf(count4(&p.w));
    size_t nw = count4(&p.w), nx = count4(&p.x);
    float *a = calloc(nw, sizeof(float)), *b = calloc(nw, sizeof(float));
    int algos[3] = {0, 3, 1};
    for (int i = 0; i < 3; i++) {
        int differ = 0;
        sim_conv_bwd_filter(&p, algos[i], 1.0f, x, dy, 0.0f, a, 100);
        for (uint64_t s = 101; s < 106; s++) {
            sim_conv_bwd_filter(&p, algos[i], 1.0f, x, dy, 0.0f, b, s);
            differ |= memcmp(a, b, nw * sizeof(float)) != 0;
        }
        assert_int_equal(differ, algos[i] != 1);
    }
    float *da = calloc(nx, sizeof(float)), *dbb = calloc(nx, sizeof(float));
    for (int algo = 0; algo < 2; algo++) {
        int differ = 0;
        sim_conv_bwd_data(&p, algo, 1.0f, w, dy, 0.0f, da, 100);
        for (uint64_t s = 101; s < 106; s++) {
            sim_conv_bwd_data(&p, algo, 1.0f, w, dy, 0.0f, dbb, s);
            differ |= memcmp(da, dbb, nx * sizeof(float)) != 0;
        }
        assert_int_equal(differ, algo == 0);
    }
    free(x);
    free(dy);
    free(w);
    free(a);
    free(b);
    free(da);
    free(dbb);
}

/* The heuristics' rules (documented in sim/cudnn/heur.c). */
static void test_core_heuristics(void **state)
{
    (void)state;
    sim_heur_dev_t t4 = {7, 5, 40, "t4"}, l4 = {8, 9, 58, "l4"};
    sim_heur_dev_t a100 = {8, 0, 108, "a100"}, h100 = {9, 0, 132, "h100"};
    sim_conv_t small, wide, first, strided;
    make_conv(&small, 8, 16, 16, 16, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0);
    make_conv(&wide, 8, 128, 8, 8, 128, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0);
    make_conv(&first, 32, 3, 32, 32, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 0);
    make_conv(&strided, 8, 16, 16, 16, 16, 3, 3, 1, 1, 2, 2, 1, 1, 1, 0, 0);
    int al[8];
    /* BWD_FILTER: ALGO_0 first on cc < 8 for small channel counts, ALGO_1 on a100/h100 */
    sim_heur_rank(SIM_DIR_BWD_FILTER, &t4, &small, al); assert_int_equal(al[0], 0);
    sim_heur_rank(SIM_DIR_BWD_FILTER, &l4, &small, al); assert_int_equal(al[0], 1);
    sim_heur_rank(SIM_DIR_BWD_FILTER, &t4, &wide, al); assert_int_equal(al[0], 1);
    sim_heur_rank(SIM_DIR_BWD_FILTER, &a100, &small, al); assert_int_equal(al[0], 1);
    sim_heur_rank(SIM_DIR_BWD_FILTER, &h100, &small, al); assert_int_equal(al[0], 1);
    sim_heur_rank(SIM_DIR_BWD_FILTER, &a100, &first, al); assert_int_equal(al[0], 3);
    /* BWD_DATA */
    sim_heur_rank(SIM_DIR_BWD_DATA, &t4, &small, al); assert_int_equal(al[0], 0);
    sim_heur_rank(SIM_DIR_BWD_DATA, &t4, &wide, al); assert_int_equal(al[0], 1);
    sim_heur_rank(SIM_DIR_BWD_DATA, &a100, &small, al); assert_int_equal(al[0], 1);
    sim_heur_rank(SIM_DIR_BWD_DATA, &a100, &strided, al); assert_int_equal(al[0], 0);
    /* FWD */
    sim_heur_rank(SIM_DIR_FWD, &a100, &small, al); assert_int_equal(al[0], 1);
    sim_heur_rank(SIM_DIR_FWD, &h100, &small, al); assert_int_equal(al[0], 7);
    sim_heur_rank(SIM_DIR_FWD, &h100, &strided, al); assert_int_equal(al[0], 1);
    sim_heur_rank(SIM_DIR_FWD, &t4, &small, al); assert_int_equal(al[0], 2);
    sim_heur_rank(SIM_DIR_FWD, &t4, &first, al); assert_int_equal(al[0], 0);
    sim_heur_rank(SIM_DIR_FWD, &l4, &small, al); assert_int_equal(al[0], 1);
    /* every algorithm exactly once, the supported ones first */
    for (int dir = 0; dir < 3; dir++) {
        int n = sim_conv_algo_count(dir), seen[8] = {0};
        int nsup = sim_heur_rank(dir, &a100, &strided, al);
        for (int i = 0; i < n; i++) {
            seen[al[i]]++;
            assert_int_equal(sim_conv_algo_supported(dir, al[i], &strided), i < nsup);
        }
        for (int i = 0; i < n; i++)
            assert_int_equal(seen[i], 1);
    }
}

/* ---- API through the driver -------------------------------------------------------- */

static CUcontext g_ctx[4];
static int g_ndev;

#define CK(x) assert_int_equal((int)(x), CUDA_SUCCESS)
#define DN(x) assert_int_equal((int)(x), CUDNN_STATUS_SUCCESS)

static int setup_driver(void **state)
{
    (void)state;
    if (g_ndev)
        return 0;
    if (cuInit(0) != CUDA_SUCCESS)
        return -1;
    if (cuDeviceGetCount(&g_ndev) != CUDA_SUCCESS || g_ndev < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        CUdevice d;
        if (cuDeviceGet(&d, i) || cuDevicePrimaryCtxRetain(&g_ctx[i], d))
            return -1;
    }
    return cuCtxSetCurrent(g_ctx[DEV_A100]) == CUDA_SUCCESS ? 0 : -1;
}

static void *dev_alloc(size_t bytes)
{
    CUdeviceptr p;
    CK(cuMemAlloc(&p, bytes ? bytes : 4));
    return (void *)(uintptr_t)p;
}

static void dev_free(void *p)
{
    CK(cuMemFree((CUdeviceptr)(uintptr_t)p));
}

static void *dev_from(const float *h, size_t n)
{
    void *d = dev_alloc(n * sizeof(float));
    CK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)d, h, n * sizeof(float)));
    return d;
}

static void to_host(float *h, const void *d, size_t n)
{
    CK(cuMemcpyDtoH(h, (CUdeviceptr)(uintptr_t)d, n * sizeof(float)));
}

static cudnnHandle_t handle_on(int dev)
{
    cudnnHandle_t h;
    CK(cuCtxSetCurrent(g_ctx[dev]));
    DN(cudnnCreate(&h));
    return h;
}

/* Vendor notes: a library loaded into a process without a driver must not
 * have libcuda.so.1 as NEEDED (it dlopens it), and it exports only names
 * NVIDIA's libcudnn.so.9 exports, versioned libcudnn.so.9. */
static void test_library_abi(void **state)
{
    (void)state;
    char why[8192];
    if (sim_abi_check("sim/libcudnn.so.9", "libcudnn.so.9", "libcudnn.so.9", why, sizeof(why)))
        fail_msg("%s", why);
}

/* Vendor fact (cuDNN 9 for CUDA 13 has code for sm_75 and later only):
 * cudnnCreate on an older GPU returns CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH
 * (cuDNN 8's CUDNN_STATUS_ARCH_MISMATCH). simcuda has no such model, so the
 * child (tests/sim/cublas/lib_child.c) runs behind a driver front
 * (tests/sim/cublas/old_gpu.c) that reports compute capability 7.0 for a
 * t4; the same child on the plain driver gets a handle (negative control). */
static void run_lib_child(int old_gpu, char *out, size_t len)
{
    char b[4096], child[4200], ldp[8500], real[4200];
    ssize_t n = readlink("/proc/self/exe", b, sizeof(b) - 1);
    assert_true(n > 0);
    b[n] = '\0';
    for (int up = 0; up < 2; up++) { /* build/tests/sim_cudnn_api_test -> build */
        char *sl = strrchr(b, '/');
        assert_non_null(sl);
        *sl = '\0';
    }
    snprintf(child, sizeof(child), "%s/tests/sim/cublas/lib_child", b);
    if (old_gpu)
        snprintf(ldp, sizeof(ldp), "LD_LIBRARY_PATH=%s/tests/sim/cublas/old_gpu:%s/sim", b, b);
    else
        snprintf(ldp, sizeof(ldp), "LD_LIBRARY_PATH=%s/sim", b);
    snprintf(real, sizeof(real), "SIMTEST_REAL_LIBCUDA=%s/sim/libcuda.so.1", b);
    char *env[] = {ldp, real, (char *)"SIMCUDA_DEVICES=t4:1G", NULL};
    char *argv[] = {child, (char *)"cudnn", NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 60, &r), 0);
    if (r.status != 0)
        fprintf(stderr, "%s\n", r.out);
    assert_int_equal(r.status, 0);
    snprintf(out, len, "%s", r.out);
    es_proc_result_free(&r);
}

static void test_api_arch_refused(void **state)
{
    (void)state;
    char out[256], want[32];
    snprintf(want, sizeof(want), "create %d\n", (int)CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH);
    run_lib_child(1, out, sizeof(out));
    assert_non_null(strstr(out, want));
    run_lib_child(0, out, sizeof(out));
    assert_non_null(strstr(out, "create 0\n"));
}

/* The library's kernels are seen by the shim's run-time audit as any
 * application kernel is (its fatbin carries real SASS with the float
 * atomics): backward filter ALGO_0 launches simcudnn_conv_bwd_filter_atomic,
 * which EASYSCALE_AUDIT=warn logs as float-atomic and strict refuses
 * (CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER). Negative controls: ALGO_1
 * (deterministic, no log line) and the audit off. */
static void run_shim_child(const char *audit, const char *algo, char **out)
{
    char b[4096], child[4200], simenv[4200], eb[4200], ea[64];
    ssize_t n = readlink("/proc/self/exe", b, sizeof(b) - 1);
    assert_true(n > 0);
    b[n] = '\0';
    for (int up = 0; up < 2; up++) {
        char *sl = strrchr(b, '/');
        assert_non_null(sl);
        *sl = '\0';
    }
    const char *root = getenv("ES_ROOT");
    snprintf(child, sizeof(child), "%s/tests/sim/cublas/lib_child", b);
    if (root)
        snprintf(simenv, sizeof(simenv), "%s/scripts/simenv", root);
    else
        snprintf(simenv, sizeof(simenv), "%s/../scripts/simenv", b);
    snprintf(eb, sizeof(eb), "ES_BUILD=%s", b);
    snprintf(ea, sizeof(ea), "EASYSCALE_AUDIT=%s", audit);
    char *env[] = {eb, ea, (char *)"EASYSCALE_DETERMINISM=off", (char *)"EASYSCALE_LOG=warn",
                   (char *)"EASYSCALE_LOG_FILE=", (char *)"SIMCUDA_DEVICES=a100:1G", NULL};
    char *argv[] = {simenv, (char *)"--shim", child, (char *)"bwdfilter", (char *)algo, NULL};
    es_proc_result_t r;
    assert_int_equal(es_run(argv, env, 60, &r), 0);
    if (r.status != 0)
        fprintf(stderr, "%s\n", r.out);
    assert_int_equal(r.status, 0);
    *out = r.out;
}

static void test_api_kernels_in_shim_audit(void **state)
{
    (void)state;
    char *out, want[64];
    run_shim_child("warn", "0", &out);
    assert_non_null(strstr(out, "kernel simcudnn_conv_bwd_filter_atomic, which uses float atomics"));
    assert_non_null(strstr(out, "bwdfilter 0 sync 0\n"));
    free(out);
    run_shim_child("strict", "0", &out);
    assert_non_null(strstr(out, "refused"));
    assert_non_null(strstr(out, "kernel simcudnn_conv_bwd_filter_atomic uses float atomics"));
    snprintf(want, sizeof(want), "bwdfilter %d sync 0\n",
             (int)CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER);
    assert_non_null(strstr(out, want));
    free(out);
    run_shim_child("strict", "1", &out); /* deterministic algorithm: not flagged */
    assert_null(strstr(out, "audit:"));
    assert_non_null(strstr(out, "bwdfilter 0 sync 0\n"));
    free(out);
    run_shim_child("off", "0", &out);
    assert_null(strstr(out, "simcudnn_conv_bwd_filter_atomic"));
    assert_non_null(strstr(out, "bwdfilter 0 sync 0\n"));
    free(out);
}

static void test_api_handle_version(void **state)
{
    (void)state;
    assert_int_equal(cudnnGetVersion(), CUDNN_VERSION);
    assert_int_equal(cudnnGetVersion(), 91900);
    assert_true(cudnnGetCudartVersion() >= 13000);
    assert_string_equal(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "CUDNN_STATUS_BAD_PARAM");
    assert_string_equal(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM_NULL_POINTER),
                        "CUDNN_STATUS_BAD_PARAM_NULL_POINTER");
    assert_string_equal(cudnnGetErrorString((cudnnStatus_t)123456), "CUDNN_UNKNOWN_STATUS_FOUND");
    cudnnHandle_t h = handle_on(DEV_A100);
    cudaStream_t s = (cudaStream_t)1;
    DN(cudnnGetStream(h, &s));
    assert_null(s);
    CUstream cs;
    CK(cuStreamCreate(&cs, 0));
    DN(cudnnSetStream(h, (cudaStream_t)cs));
    DN(cudnnGetStream(h, &s));
    assert_ptr_equal(s, cs);
    assert_int_equal(cudnnCreate(NULL), CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    assert_int_equal(cudnnSetStream(NULL, NULL), CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    assert_int_equal(cudnnGetStream(h, NULL), CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    int bogus[16] = {0};
    assert_int_equal(cudnnSetStream((cudnnHandle_t)bogus, NULL), CUDNN_STATUS_BAD_PARAM);
    DN(cudnnDestroy(h));
    /* destroyed handles are refused, never dereferenced */
    assert_int_equal(cudnnSetStream(h, NULL), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnDestroy(h), CUDNN_STATUS_BAD_PARAM);
    char msg[256];
    cudnnGetLastErrorString(msg, sizeof(msg));
    assert_non_null(strstr(msg, "not a live handle"));
    CK(cuStreamDestroy(cs));
}

static void test_api_descriptors(void **state)
{
    (void)state;
    cudnnTensorDescriptor_t t;
    DN(cudnnCreateTensorDescriptor(&t));
    DN(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 2, 3, 4, 5));
    cudnnDataType_t dt;
    int n, c, h, w, sn, sc, sh, sw;
    DN(cudnnGetTensor4dDescriptor(t, &dt, &n, &c, &h, &w, &sn, &sc, &sh, &sw));
    assert_int_equal(dt, CUDNN_DATA_FLOAT);
    assert_true(n == 2 && c == 3 && h == 4 && w == 5);
    assert_true(sn == 60 && sc == 1 && sh == 15 && sw == 3);
    int dims[4] = {2, 3, 4, 5}, strides[4] = {60, 20, 5, 1};
    DN(cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, 4, dims, strides));
    DN(cudnnGetTensor4dDescriptor(t, &dt, &n, &c, &h, &w, &sn, &sc, &sh, &sw));
    assert_true(sn == 60 && sc == 20 && sh == 5 && sw == 1);
    assert_int_equal(cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, 5, dims, strides),
                     CUDNN_STATUS_NOT_SUPPORTED);
    assert_int_equal(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 0, 3, 4, 5),
                     CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnSetTensor4dDescriptorEx(t, CUDNN_DATA_FLOAT, 1, 1, 1, 1, 1, 1, 1, -1),
                     CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnSetTensor4dDescriptor(NULL, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1, 1),
                     CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    assert_int_equal(cudnnGetTensor4dDescriptor(t, NULL, &n, &c, &h, &w, &sn, &sc, &sh, &sw),
                     CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    assert_int_equal(cudnnSetTensor4dDescriptor(t, (cudnnTensorFormat_t)9, CUDNN_DATA_FLOAT, 1, 1, 1, 1),
                     CUDNN_STATUS_BAD_PARAM);

    cudnnFilterDescriptor_t f;
    DN(cudnnCreateFilterDescriptor(&f));
    DN(cudnnSetFilter4dDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 8, 3, 5, 3));
    cudnnTensorFormat_t fmt;
    int k;
    DN(cudnnGetFilter4dDescriptor(f, &dt, &fmt, &k, &c, &h, &w));
    assert_true(k == 8 && c == 3 && h == 5 && w == 3 && fmt == CUDNN_TENSOR_NCHW);
    assert_int_equal(cudnnSetFilter4dDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 8, 3, 0, 3),
                     CUDNN_STATUS_BAD_PARAM);

    cudnnConvolutionDescriptor_t cv;
    DN(cudnnCreateConvolutionDescriptor(&cv));
    DN(cudnnSetConvolution2dDescriptor(cv, 1, 2, 3, 1, 2, 1, CUDNN_CONVOLUTION, CUDNN_DATA_FLOAT));
    int ph, pw, u, v, dh, dw, g;
    cudnnConvolutionMode_t mode;
    DN(cudnnGetConvolution2dDescriptor(cv, &ph, &pw, &u, &v, &dh, &dw, &mode, &dt));
    assert_true(ph == 1 && pw == 2 && u == 3 && v == 1 && dh == 2 && dw == 1);
    assert_int_equal(mode, CUDNN_CONVOLUTION);
    DN(cudnnSetConvolutionGroupCount(cv, 1));
    DN(cudnnGetConvolutionGroupCount(cv, &g));
    assert_int_equal(g, 1);
    assert_int_equal(cudnnSetConvolutionGroupCount(cv, 0), CUDNN_STATUS_BAD_PARAM);
    DN(cudnnSetConvolutionMathType(cv, CUDNN_TENSOR_OP_MATH));
    cudnnMathType_t mt;
    DN(cudnnGetConvolutionMathType(cv, &mt));
    assert_int_equal(mt, CUDNN_TENSOR_OP_MATH);
    assert_int_equal(cudnnSetConvolution2dDescriptor(cv, -1, 0, 1, 1, 1, 1, CUDNN_CONVOLUTION,
                                                     CUDNN_DATA_FLOAT), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnSetConvolution2dDescriptor(cv, 0, 0, 0, 1, 1, 1, CUDNN_CONVOLUTION,
                                                     CUDNN_DATA_FLOAT), CUDNN_STATUS_BAD_PARAM);
    /* output dims: x 2x3x10x7, w 8x3x5x3, pad 1,2 stride 3,1 dilation 2,1 */
    DN(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 3, 10, 7));
    DN(cudnnGetConvolution2dForwardOutputDim(cv, t, f, &n, &c, &h, &w));
    assert_true(n == 2 && c == 8);
    assert_int_equal(h, (10 + 2 - ((5 - 1) * 2 + 1)) / 3 + 1);
    assert_int_equal(w, (7 + 4 - 3) / 1 + 1);
    DN(cudnnSetConvolutionGroupCount(cv, 3)); /* 3 input channels != 3 x 3 */
    assert_int_equal(cudnnGetConvolution2dForwardOutputDim(cv, t, f, &n, &c, &h, &w),
                     CUDNN_STATUS_BAD_PARAM);

    cudnnPoolingDescriptor_t pd;
    DN(cudnnCreatePoolingDescriptor(&pd));
    DN(cudnnSetPooling2dDescriptor(pd, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
                                   CUDNN_PROPAGATE_NAN, 3, 2, 1, 0, 2, 2));
    cudnnPoolingMode_t pm;
    cudnnNanPropagation_t nanp;
    int wh, ww, vp, hp, vs, hs;
    DN(cudnnGetPooling2dDescriptor(pd, &pm, &nanp, &wh, &ww, &vp, &hp, &vs, &hs));
    assert_true(pm == CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING && nanp == CUDNN_PROPAGATE_NAN);
    assert_true(wh == 3 && ww == 2 && vp == 1 && hp == 0 && vs == 2 && hs == 2);
    assert_int_equal(cudnnSetPooling2dDescriptor(pd, (cudnnPoolingMode_t)7, CUDNN_PROPAGATE_NAN,
                                                 3, 2, 1, 0, 2, 2), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnSetPooling2dDescriptor(pd, CUDNN_POOLING_MAX, CUDNN_PROPAGATE_NAN,
                                                 0, 2, 1, 0, 2, 2), CUDNN_STATUS_BAD_PARAM);
    DN(cudnnDestroyPoolingDescriptor(pd));

    /* Descriptors are known by identity: a look-alike (a live one's bytes
     * copied) and a destroyed one are refused, never read (ASan would say). */
    static char fake[4096] __attribute__((aligned(64)));
    memcpy(fake, t, 32);
    assert_int_equal(cudnnGetTensor4dDescriptor((cudnnTensorDescriptor_t)fake, &dt, &n, &c, &h,
                                                &w, &sn, &sc, &sh, &sw),
                     CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnDestroyTensorDescriptor((cudnnTensorDescriptor_t)fake),
                     CUDNN_STATUS_BAD_PARAM);
    memcpy(fake, cv, 32);
    assert_int_equal(cudnnGetConvolutionGroupCount((cudnnConvolutionDescriptor_t)fake, &g),
                     CUDNN_STATUS_BAD_PARAM);
    DN(cudnnDestroyConvolutionDescriptor(cv));
    assert_int_equal(cudnnSetConvolutionGroupCount(cv, 1), CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnDestroyConvolutionDescriptor(cv), CUDNN_STATUS_BAD_PARAM);
    DN(cudnnDestroyFilterDescriptor(f));
    assert_int_equal(cudnnGetFilter4dDescriptor(f, &dt, &fmt, &k, &c, &h, &w),
                     CUDNN_STATUS_BAD_PARAM);
    DN(cudnnDestroyTensorDescriptor(t));
    assert_int_equal(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1, 1),
                     CUDNN_STATUS_BAD_PARAM);
    /* a descriptor of another kind is refused too */
    DN(cudnnCreateTensorDescriptor(&t));
    assert_int_equal(cudnnDestroyFilterDescriptor((cudnnFilterDescriptor_t)t), CUDNN_STATUS_BAD_PARAM);
    DN(cudnnDestroyTensorDescriptor(t));
}

/* A convolution set up through the API, with device buffers. */
typedef struct api_conv {
    sim_conv_t p;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    float *hx, *hw, *hdy;
    void *x, *w, *y, *dy, *dx, *dw;
} api_conv_t;

static void api_conv_init(api_conv_t *c, int N, int C, int H, int W, int K, int R, int S, int pad,
                          int str, int dil, int groups, int nhwc)
{
    memset(c, 0, sizeof(*c));
    make_conv(&c->p, N, C, H, W, K, R, S, pad, pad, str, str, dil, dil, groups, 0, nhwc);
    cudnnTensorFormat_t fmt = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    DN(cudnnCreateTensorDescriptor(&c->xd));
    DN(cudnnCreateTensorDescriptor(&c->yd));
    DN(cudnnCreateFilterDescriptor(&c->wd));
    DN(cudnnCreateConvolutionDescriptor(&c->cd));
    DN(cudnnSetTensor4dDescriptor(c->xd, fmt, CUDNN_DATA_FLOAT, N, C, H, W));
    DN(cudnnSetFilter4dDescriptor(c->wd, CUDNN_DATA_FLOAT, fmt, K, C / groups, R, S));
    DN(cudnnSetConvolution2dDescriptor(c->cd, pad, pad, str, str, dil, dil,
                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DN(cudnnSetConvolutionGroupCount(c->cd, groups));
    int n, k, h, w;
    DN(cudnnGetConvolution2dForwardOutputDim(c->cd, c->xd, c->wd, &n, &k, &h, &w));
    assert_true(n == c->p.y.n && k == c->p.y.c && h == c->p.y.h && w == c->p.y.w);
    DN(cudnnSetTensor4dDescriptor(c->yd, fmt, CUDNN_DATA_FLOAT, n, k, h, w));
    c->hx = rand_buf(count4(&c->p.x));
    c->hw = rand_buf(count4(&c->p.w));
    c->hdy = rand_buf(count4(&c->p.y));
    c->x = dev_from(c->hx, count4(&c->p.x));
    c->w = dev_from(c->hw, count4(&c->p.w));
    c->dy = dev_from(c->hdy, count4(&c->p.y));
    c->y = dev_alloc(count4(&c->p.y) * sizeof(float));
    c->dx = dev_alloc(count4(&c->p.x) * sizeof(float));
    c->dw = dev_alloc(count4(&c->p.w) * sizeof(float));
}

static void api_conv_free(api_conv_t *c)
{
    cudnnDestroyTensorDescriptor(c->xd);
    cudnnDestroyTensorDescriptor(c->yd);
    cudnnDestroyFilterDescriptor(c->wd);
    cudnnDestroyConvolutionDescriptor(c->cd);
    free(c->hx);
    free(c->hw);
    free(c->hdy);
    dev_free(c->x);
    dev_free(c->w);
    dev_free(c->y);
    dev_free(c->dy);
    dev_free(c->dx);
    dev_free(c->dw);
}

/* Device buffers again, in the current context (from the host copies;
 * y, dx and dw uninitialised): a kernel of one GPU reaches only its own
 * memory. */
static void api_conv_realloc(api_conv_t *c)
{
    dev_free(c->x);
    dev_free(c->w);
    dev_free(c->y);
    dev_free(c->dy);
    dev_free(c->dx);
    dev_free(c->dw);
    c->x = dev_from(c->hx, count4(&c->p.x));
    c->w = dev_from(c->hw, count4(&c->p.w));
    c->dy = dev_from(c->hdy, count4(&c->p.y));
    c->y = dev_alloc(count4(&c->p.y) * sizeof(float));
    c->dx = dev_alloc(count4(&c->p.x) * sizeof(float));
    c->dw = dev_alloc(count4(&c->p.w) * sizeof(float));
}

static void test_api_conv_correct(void **state)
{
    (void)state;
    cudnnHandle_t h = handle_on(DEV_A100);
    for (int shape = 0; shape < 3; shape++) {
        api_conv_t c;
        if (shape == 0)
            api_conv_init(&c, 2, 4, 9, 7, 6, 3, 3, 1, 1, 1, 1, 0);
        else if (shape == 1)
            api_conv_init(&c, 2, 6, 11, 9, 4, 3, 3, 2, 2, 2, 2, 0);
        else
            api_conv_init(&c, 1, 4, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1);
        double *ry = ref_fwd(&c.p, c.hx, c.hw), *rdx, *rdw;
        ref_bwd(&c.p, c.hx, c.hw, c.hdy, &rdx, &rdw);
        float one = 1.0f, zero = 0.0f;
        size_t wsmax = 0, sz;
        for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; a++)
            if (cudnnGetConvolutionForwardWorkspaceSize(h, c.xd, c.wd, c.cd, c.yd, a, &sz) == 0 && sz > wsmax)
                wsmax = sz;
        for (int a = 0; a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; a++)
            if (cudnnGetConvolutionBackwardDataWorkspaceSize(h, c.wd, c.yd, c.cd, c.xd, a, &sz) == 0 && sz > wsmax)
                wsmax = sz;
        for (int a = 0; a < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; a++)
            if (cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c.xd, c.yd, c.cd, c.wd, a, &sz) == 0 && sz > wsmax)
                wsmax = sz;
        void *ws = dev_alloc(wsmax);
        float *out = malloc(count4(&c.p.x) * sizeof(float) + count4(&c.p.y) * sizeof(float) +
                            count4(&c.p.w) * sizeof(float));
        for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; a++) {
            cudnnStatus_t st = cudnnConvolutionForward(h, &one, c.xd, c.x, c.wd, c.w, c.cd, a, ws,
                                                       wsmax, &zero, c.yd, c.y);
            if (!sim_conv_algo_supported(SIM_DIR_FWD, a, &c.p)) {
                assert_int_equal(st, CUDNN_STATUS_NOT_SUPPORTED);
                continue;
            }
            DN(st);
            CK(cuCtxSynchronize());
            to_host(out, c.y, count4(&c.p.y));
            expect_close(&c.p.y, out, ry, 1e-5, "api fwd");
        }
        for (int a = 0; a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT; a++) {
            cudnnStatus_t st = cudnnConvolutionBackwardData(h, &one, c.wd, c.w, c.yd, c.dy, c.cd, a,
                                                            ws, wsmax, &zero, c.xd, c.dx);
            if (!sim_conv_algo_supported(SIM_DIR_BWD_DATA, a, &c.p)) {
                assert_int_equal(st, CUDNN_STATUS_NOT_SUPPORTED);
                continue;
            }
            DN(st);
            CK(cuCtxSynchronize());
            to_host(out, c.dx, count4(&c.p.x));
            expect_close(&c.p.x, out, rdx, 1e-5, "api bwd data");
        }
        for (int a = 0; a < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT; a++) {
            cudnnStatus_t st = cudnnConvolutionBackwardFilter(h, &one, c.xd, c.x, c.yd, c.dy, c.cd,
                                                              a, ws, wsmax, &zero, c.wd, c.dw);
            if (!sim_conv_algo_supported(SIM_DIR_BWD_FILTER, a, &c.p)) {
                assert_int_equal(st, CUDNN_STATUS_NOT_SUPPORTED);
                continue;
            }
            DN(st);
            CK(cuCtxSynchronize());
            to_host(out, c.dw, count4(&c.p.w));
            expect_close(&c.p.w, out, rdw, 1e-5, "api bwd filter");
        }
        /* bias gradient and bias add */
        if (shape == 0) {
            cudnnTensorDescriptor_t bd;
            DN(cudnnCreateTensorDescriptor(&bd));
            DN(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 6, 1, 1));
            void *db = dev_alloc(6 * sizeof(float));
            DN(cudnnConvolutionBackwardBias(h, &one, c.yd, c.dy, &zero, bd, db));
            CK(cuCtxSynchronize());
            float hdb[6];
            to_host(hdb, db, 6);
            for (int k = 0; k < 6; k++) {
                double s = 0;
                for (int n = 0; n < c.p.y.n; n++)
                    for (int i = 0; i < c.p.y.h * c.p.y.w; i++)
                        s += c.hdy[(n * 6 + k) * c.p.y.h * c.p.y.w + i];
                assert_true(fabs(hdb[k] - s) < 1e-4);
            }
            DN(cudnnAddTensor(h, &one, bd, db, &one, c.yd, c.dy));
            CK(cuCtxSynchronize());
            to_host(out, c.dy, count4(&c.p.y));
            for (size_t i = 0; i < count4(&c.p.y); i++) {
                int k = (int)(i / (c.p.y.h * c.p.y.w)) % 6;
                assert_true(out[i] == c.hdy[i] + hdb[k]);
            }
            dev_free(db);
            cudnnDestroyTensorDescriptor(bd);
        }
        free(out);
        free(ry);
        free(rdx);
        free(rdw);
        dev_free(ws);
        api_conv_free(&c);
    }
    DN(cudnnDestroy(h));
}

static void test_api_bad_input(void **state)
{
    (void)state;
    cudnnHandle_t h = handle_on(DEV_A100);
    api_conv_t c;
    api_conv_init(&c, 2, 4, 8, 8, 4, 3, 3, 1, 1, 1, 1, 0);
    float one = 1.0f, zero = 0.0f;
    size_t need;
    DN(cudnnGetConvolutionForwardWorkspaceSize(h, c.xd, c.wd, c.cd, c.yd,
                                               CUDNN_CONVOLUTION_FWD_ALGO_GEMM, &need));
    assert_true(need > 0);
    void *ws = dev_alloc(need);
    /* too small a workspace */
    assert_int_equal(cudnnConvolutionForward(h, &one, c.xd, c.x, c.wd, c.w, c.cd,
                                             CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws, need - 1, &zero,
                                             c.yd, c.y),
                     CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT);
    assert_int_equal(CUDNN_STATUS_CATEGORY(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT),
                     CUDNN_STATUS_BAD_PARAM);
    DN(cudnnConvolutionForward(h, &one, c.xd, c.x, c.wd, c.w, c.cd,
                               CUDNN_CONVOLUTION_FWD_ALGO_GEMM, ws, need, &zero, c.yd, c.y));
    /* bad algorithm number, unsupported algorithm */
    assert_int_equal(cudnnConvolutionForward(h, &one, c.xd, c.x, c.wd, c.w, c.cd,
                                             (cudnnConvolutionFwdAlgo_t)99, ws, need, &zero, c.yd, c.y),
                     CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnConvolutionForward(h, &one, c.xd, c.x, c.wd, c.w, c.cd,
                                             CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, ws, need, &zero,
                                             c.yd, c.y),
                     CUDNN_STATUS_NOT_SUPPORTED);
    assert_int_equal(cudnnConvolutionBackwardFilter(h, &one, c.xd, c.x, c.yd, c.dy, c.cd,
                                                    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD,
                                                    ws, need, &zero, c.wd, c.dw),
                     CUDNN_STATUS_NOT_SUPPORTED);
    /* NULL pointers and handles */
    assert_int_equal(cudnnConvolutionForward(NULL, &one, c.xd, c.x, c.wd, c.w, c.cd, 0, NULL, 0,
                                             &zero, c.yd, c.y),
                     CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    assert_int_equal(cudnnConvolutionForward(h, NULL, c.xd, c.x, c.wd, c.w, c.cd, 0, NULL, 0,
                                             &zero, c.yd, c.y),
                     CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    assert_int_equal(cudnnConvolutionForward(h, &one, NULL, c.x, c.wd, c.w, c.cd, 0, NULL, 0,
                                             &zero, c.yd, c.y),
                     CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    assert_int_equal(cudnnConvolutionForward(h, &one, c.xd, NULL, c.wd, c.w, c.cd, 0, NULL, 0,
                                             &zero, c.yd, c.y),
                     CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    /* mismatched descriptors: y of the wrong size, x where a filter belongs */
    cudnnTensorDescriptor_t bad;
    DN(cudnnCreateTensorDescriptor(&bad));
    DN(cudnnSetTensor4dDescriptor(bad, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 4, 7, 8));
    assert_int_equal(cudnnConvolutionForward(h, &one, c.xd, c.x, c.wd, c.w, c.cd, 0, NULL, 0,
                                             &zero, bad, c.y),
                     CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnConvolutionForward(h, &one, c.xd, c.x, (cudnnFilterDescriptor_t)bad,
                                             c.w, c.cd, 0, NULL, 0, &zero, c.yd, c.y),
                     CUDNN_STATUS_BAD_PARAM);
    /* an unset descriptor */
    cudnnTensorDescriptor_t unset;
    DN(cudnnCreateTensorDescriptor(&unset));
    assert_int_equal(cudnnConvolutionForward(h, &one, unset, c.x, c.wd, c.w, c.cd, 0, NULL, 0,
                                             &zero, c.yd, c.y),
                     CUDNN_STATUS_BAD_PARAM);
    /* unsupported data type */
    DN(cudnnSetTensor4dDescriptor(bad, CUDNN_TENSOR_NCHW, CUDNN_DATA_DOUBLE, 2, 4, 8, 8));
    assert_int_equal(cudnnConvolutionForward(h, &one, bad, c.x, c.wd, c.w, c.cd, 0, NULL, 0,
                                             &zero, c.yd, c.y),
                     CUDNN_STATUS_NOT_SUPPORTED);
    /* algorithm queries */
    cudnnConvolutionFwdAlgoPerf_t perf[8];
    int got;
    assert_int_equal(cudnnGetConvolutionForwardAlgorithm_v7(h, c.xd, c.wd, c.cd, c.yd, 0, &got, perf),
                     CUDNN_STATUS_BAD_PARAM);
    assert_int_equal(cudnnGetConvolutionForwardAlgorithm_v7(h, c.xd, c.wd, c.cd, c.yd, 8, NULL, perf),
                     CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    int mc;
    DN(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &mc));
    assert_int_equal(mc, CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    DN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &mc));
    assert_int_equal(mc, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    DN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &mc));
    assert_int_equal(mc, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    assert_int_equal(cudnnGetConvolutionForwardAlgorithmMaxCount(h, NULL),
                     CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    /* pooling: y of the wrong size */
    cudnnPoolingDescriptor_t pd;
    DN(cudnnCreatePoolingDescriptor(&pd));
    DN(cudnnSetPooling2dDescriptor(pd, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
    assert_int_equal(cudnnPoolingForward(h, pd, &one, c.xd, c.x, &zero, c.xd, c.y),
                     CUDNN_STATUS_BAD_PARAM);
    CK(cuCtxSynchronize());
    cudnnDestroyPoolingDescriptor(pd);
    cudnnDestroyTensorDescriptor(bad);
    cudnnDestroyTensorDescriptor(unset);
    dev_free(ws);
    api_conv_free(&c);
    DN(cudnnDestroy(h));
}

/* A host function that holds a stream until the test opens the gate. */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open, entered;
} gate_t;

static void CUDA_CB gate_fn(void *arg)
{
    gate_t *g = arg;
    pthread_mutex_lock(&g->mu);
    g->entered = 1;
    pthread_cond_broadcast(&g->cv);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 20;
    while (!g->open)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &ts))
            break;
    pthread_mutex_unlock(&g->mu);
}

/* The operation is enqueued on the handle's stream and runs later, reading
 * its inputs then, not at the call. */
static void test_api_async(void **state)
{
    (void)state;
    cudnnHandle_t h = handle_on(DEV_A100);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    DN(cudnnSetStream(h, (cudaStream_t)s));
    api_conv_t c;
    api_conv_init(&c, 1, 2, 6, 6, 2, 3, 3, 1, 1, 1, 1, 0);
    size_t ny = count4(&c.p.y);
    float *sentinel = malloc(ny * sizeof(float)), *out = malloc(ny * sizeof(float));
    for (size_t i = 0; i < ny; i++)
        sentinel[i] = 12345.0f;
    CK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)c.y, sentinel, ny * sizeof(float)));
    gate_t g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    CK(cuLaunchHostFunc(s, gate_fn, &g));
    float one = 1.0f, zero = 0.0f;
    DN(cudnnConvolutionForward(h, &one, c.xd, c.x, c.wd, c.w, c.cd,
                               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, NULL, 0, &zero, c.yd, c.y));
    assert_int_equal(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    /* not run yet: y still holds the sentinel (a copy on the legacy stream,
     * which does not wait for the non-blocking s) */
    to_host(out, c.y, ny);
    assert_memory_equal(out, sentinel, ny * sizeof(float));
    /* the call captured its descriptors: changing one now changes nothing */
    DN(cudnnSetConvolution2dDescriptor(c.cd, 0, 0, 1, 1, 1, 1, CUDNN_CONVOLUTION, CUDNN_DATA_FLOAT));
    /* change x after the call: the queued convolution must see the new x */
    for (size_t i = 0; i < count4(&c.p.x); i++)
        c.hx[i] = 2.0f * c.hx[i];
    CK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)c.x, c.hx, count4(&c.p.x) * sizeof(float)));
    pthread_mutex_lock(&g.mu);
    g.open = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    CK(cuStreamSynchronize(s));
    to_host(out, c.y, ny);
    double *ref = ref_fwd(&c.p, c.hx, c.hw);
    expect_close(&c.p.y, out, ref, 1e-5, "async fwd");
    free(ref);
    free(sentinel);
    free(out);
    api_conv_free(&c);
    DN(cudnnDestroy(h));
    CK(cuStreamDestroy(s));
}

/* Two handles on two streams run at the same time (one worker per stream):
 * the cores share no state, so both results stay right. */
static void test_api_two_streams(void **state)
{
    (void)state;
    CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
    cudnnHandle_t h[2];
    CUstream s[2];
    api_conv_t c[2];
    for (int i = 0; i < 2; i++) {
        h[i] = handle_on(DEV_A100);
        CK(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
        DN(cudnnSetStream(h[i], (cudaStream_t)s[i]));
        api_conv_init(&c[i], 2, 4 + 2 * i, 10, 9, 6, 3, 3, 1, 1, 1, 1, 0);
    }
    float one = 1.0f, zero = 0.0f;
    for (int rep = 0; rep < 4; rep++)
        for (int i = 0; i < 2; i++) {
            DN(cudnnConvolutionForward(h[i], &one, c[i].xd, c[i].x, c[i].wd, c[i].w, c[i].cd,
                                       CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, NULL, 0, &zero,
                                       c[i].yd, c[i].y));
            DN(cudnnConvolutionBackwardData(h[i], &one, c[i].wd, c[i].w, c[i].yd, c[i].dy, c[i].cd,
                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, NULL, 0, &zero,
                                            c[i].xd, c[i].dx));
        }
    for (int i = 0; i < 2; i++) {
        CK(cuStreamSynchronize(s[i]));
        double *ry = ref_fwd(&c[i].p, c[i].hx, c[i].hw), *rdx, *rdw;
        ref_bwd(&c[i].p, c[i].hx, c[i].hw, c[i].hdy, &rdx, &rdw);
        float *out = malloc(count4(&c[i].p.x) * sizeof(float) + count4(&c[i].p.y) * sizeof(float));
        to_host(out, c[i].y, count4(&c[i].p.y));
        expect_close(&c[i].p.y, out, ry, 1e-5, "stream fwd");
        to_host(out, c[i].dx, count4(&c[i].p.x));
        expect_close(&c[i].p.x, out, rdx, 1e-5, "stream bwd data");
        free(out);
        free(ry);
        free(rdx);
        free(rdw);
        api_conv_free(&c[i]);
        DN(cudnnDestroy(h[i]));
        CK(cuStreamDestroy(s[i]));
    }
}

/* A handle works in the context it was made in (whatever context is
 * current at the call) and on that context's device only: once the
 * context is destroyed, a convolution on it enqueues nothing and fails
 * with CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER. */
static void test_api_handle_bound_to_context(void **state)
{
    (void)state;
    CUdevice d;
    CUcontext made, junk;
    CK(cuDeviceGet(&d, DEV_A100));
    CK(cuCtxCreate(&made, NULL, 0, d));
    api_conv_t c;
    api_conv_init(&c, 2, 4, 10, 9, 6, 3, 3, 1, 1, 1, 1, 0);
    cudnnHandle_t h;
    DN(cudnnCreate(&h));
    float one = 1.0f, zero = 0.0f;
#define FWD(h) cudnnConvolutionForward(h, &one, c.xd, c.x, c.wd, c.w, c.cd,                    \
                                       CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, NULL, 0, &zero, \
                                       c.yd, c.y)
    CK(cuCtxSetCurrent(g_ctx[DEV_T4]));
    DN(FWD(h));
    CK(cuCtxSetCurrent(made));
    CK(cuCtxSynchronize());
    /* the device memory goes with the context (the call below must not
     * reach it); the descriptors stay */
    void *const mem[] = { c.x, c.w, c.y, c.dy, c.dx, c.dw };
    for (int i = 0; i < 6; i++)
        dev_free(mem[i]);
    CK(cuCtxDestroy(made));
    cuCtxPopCurrent(&junk);
    CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
    assert_int_equal(FWD(h), CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER);
#undef FWD
    DN(cudnnDestroy(h));
    cudnnDestroyTensorDescriptor(c.xd);
    cudnnDestroyTensorDescriptor(c.yd);
    cudnnDestroyFilterDescriptor(c.wd);
    cudnnDestroyConvolutionDescriptor(c.cd);
    free(c.hx);
    free(c.hw);
    free(c.hdy);
}

/* Negative control (1): vendor fact "Reproducibility": BWD_FILTER ALGO_0 and
 * ALGO_3, BWD_DATA ALGO_0 and POOLING_MAX backward are not reproducible;
 * ALGO_1 and POOLING_MAX_DETERMINISTIC are. Overlapping windows (3x3 stride
 * 1, 3x3 pooling stride 1) make several contributions collide on one
 * output element. */
static int repeat_differs(cudnnHandle_t h, int what, int algo, api_conv_t *c, void *pool_y,
                          cudnnTensorDescriptor_t pyd, cudnnPoolingDescriptor_t pd)
{
    float one = 1.0f, zero = 0.0f;
    size_t n = what == 0 ? count4(&c->p.w) : count4(&c->p.x);
    void *out = what == 0 ? c->dw : c->dx;
    float *first = malloc(n * sizeof(float)), *again = malloc(n * sizeof(float));
    int differ = 0;
    size_t wsn = 0;
    if (what == 0)
        DN(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c->xd, c->yd, c->cd, c->wd, algo, &wsn));
    void *ws = dev_alloc(wsn);
    for (int t = 0; t < 6; t++) {
        if (what == 0)
            DN(cudnnConvolutionBackwardFilter(h, &one, c->xd, c->x, c->yd, c->dy, c->cd, algo, ws,
                                              wsn, &zero, c->wd, out));
        else if (what == 1)
            DN(cudnnConvolutionBackwardData(h, &one, c->wd, c->w, c->yd, c->dy, c->cd, algo, NULL,
                                            0, &zero, c->xd, out));
        else
            DN(cudnnPoolingBackward(h, pd, &one, pyd, pool_y, pyd, pool_y, c->xd, c->x, &zero,
                                    c->xd, out));
        CK(cuCtxSynchronize());
        to_host(t == 0 ? first : again, out, n);
        if (t > 0)
            differ |= memcmp(first, again, n * sizeof(float)) != 0;
    }
    dev_free(ws);
    free(first);
    free(again);
    return differ;
}

static void test_api_nondeterminism(void **state)
{
    (void)state;
    cudnnHandle_t h = handle_on(DEV_A100);
    api_conv_t c;
    api_conv_init(&c, 4, 4, 12, 12, 8, 3, 3, 1, 1, 1, 1, 0);
    assert_true(repeat_differs(h, 0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, &c, NULL, NULL, NULL));
    assert_true(repeat_differs(h, 0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, &c, NULL, NULL, NULL));
    assert_false(repeat_differs(h, 0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, &c, NULL, NULL, NULL));
    assert_true(repeat_differs(h, 1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, &c, NULL, NULL, NULL));
    assert_false(repeat_differs(h, 1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, &c, NULL, NULL, NULL));
    /* pooling backward: 3x3 windows, stride 1: a local maximum is the argmax
     * of up to 9 windows, whose gradients it collects */
    cudnnPoolingDescriptor_t pd;
    cudnnTensorDescriptor_t pyd;
    DN(cudnnCreatePoolingDescriptor(&pd));
    DN(cudnnCreateTensorDescriptor(&pyd));
    for (int mode = 0; mode < 2; mode++) {
        DN(cudnnSetPooling2dDescriptor(pd, mode ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_MAX,
                                       CUDNN_NOT_PROPAGATE_NAN, 3, 3, 1, 1, 1, 1));
        int n, ch, hh, ww;
        DN(cudnnGetPooling2dForwardOutputDim(pd, c.xd, &n, &ch, &hh, &ww));
        DN(cudnnSetTensor4dDescriptor(pyd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, ch, hh, ww));
        size_t ny = (size_t)n * ch * hh * ww;
        float *hy = rand_buf(ny);
        void *py = dev_from(hy, ny);
        float one = 1.0f, zero = 0.0f;
        DN(cudnnPoolingForward(h, pd, &one, c.xd, c.x, &zero, pyd, py));
        /* dy: fresh random values (py reused as dy storage after forward) */
        CK(cuCtxSynchronize());
        CK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)py, hy, ny * sizeof(float)));
        int differ = repeat_differs(h, 2, 0, &c, py, pyd, pd);
        assert_int_equal(differ, mode == 0);
        dev_free(py);
        free(hy);
    }
    cudnnDestroyPoolingDescriptor(pd);
    cudnnDestroyTensorDescriptor(pyd);
    api_conv_free(&c);
    DN(cudnnDestroy(h));
}

/* Negative control (2): the default heuristics pick a nondeterministic
 * algorithm on some models and shapes, and say so truthfully. */
static void test_api_heuristics(void **state)
{
    (void)state;
    cudnnHandle_t hv = handle_on(DEV_T4), ht = handle_on(DEV_T4), ha = handle_on(DEV_A100);
    api_conv_t c;
    /* buffers on the a100 (current), where Find*Ex runs on them */
    api_conv_init(&c, 8, 16, 16, 16, 32, 3, 3, 1, 1, 1, 1, 0);
    cudnnConvolutionBwdFilterAlgoPerf_t bf[8];
    cudnnConvolutionBwdDataAlgoPerf_t bd[8];
    cudnnConvolutionFwdAlgoPerf_t fw[8];
    int got;
    DN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(hv, c.xd, c.yd, c.cd, c.wd, 8, &got, bf));
    assert_int_equal(got, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    assert_int_equal(bf[0].algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
    assert_int_equal(bf[0].determinism, CUDNN_NON_DETERMINISTIC);
    assert_int_equal(bf[0].status, CUDNN_STATUS_SUCCESS);
    for (int i = 0; i < got; i++) {
        int nd = bf[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
                 bf[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
        assert_int_equal(bf[i].determinism, nd ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC);
        if (bf[i].algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD)
            assert_int_equal(bf[i].status, CUDNN_STATUS_NOT_SUPPORTED);
    }
    DN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(ht, c.xd, c.yd, c.cd, c.wd, 1, &got, bf));
    assert_int_equal(got, 1);
    assert_int_equal(bf[0].algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
    DN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(ha, c.xd, c.yd, c.cd, c.wd, 8, &got, bf));
    assert_int_equal(bf[0].algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
    assert_int_equal(bf[0].determinism, CUDNN_DETERMINISTIC);
    DN(cudnnGetConvolutionBackwardDataAlgorithm_v7(hv, c.wd, c.yd, c.cd, c.xd, 8, &got, bd));
    assert_int_equal(bd[0].algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0);
    assert_int_equal(bd[0].determinism, CUDNN_NON_DETERMINISTIC);
    for (int i = 0; i < got; i++)
        assert_int_equal(bd[i].determinism, bd[i].algo == 0 ? CUDNN_NON_DETERMINISTIC
                                                              : CUDNN_DETERMINISTIC);
    DN(cudnnGetConvolutionBackwardDataAlgorithm_v7(ha, c.wd, c.yd, c.cd, c.xd, 8, &got, bd));
    assert_int_equal(bd[0].algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
    DN(cudnnGetConvolutionForwardAlgorithm_v7(ha, c.xd, c.wd, c.cd, c.yd, 8, &got, fw));
    int fa = fw[0].algo;
    DN(cudnnGetConvolutionForwardAlgorithm_v7(hv, c.xd, c.wd, c.cd, c.yd, 8, &got, fw));
    assert_int_not_equal(fa, fw[0].algo);
    for (int i = 0; i < got; i++)
        assert_int_equal(fw[i].determinism, CUDNN_DETERMINISTIC);
    /* the workspace each perf entry reports is the one the size query gives */
    size_t sz;
    DN(cudnnGetConvolutionForwardWorkspaceSize(hv, c.xd, c.wd, c.cd, c.yd, fw[0].algo, &sz));
    assert_int_equal(sz, fw[0].memory);
    /* Find*: really runs the candidates; times are measured, ranking by them */
    DN(cudnnFindConvolutionBackwardFilterAlgorithm(ha, c.xd, c.yd, c.cd, c.wd, 8, &got, bf));
    assert_int_equal(got, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
    int nok = 0;
    for (int i = 0; i < got; i++) {
        if (bf[i].status == CUDNN_STATUS_SUCCESS) {
            assert_int_equal(i, nok); /* successes first */
            assert_true(bf[i].time >= 0.0f);
            if (i > 0)
                assert_true(bf[i].time >= bf[i - 1].time);
            nok++;
        }
        int nd = bf[i].algo == 0 || bf[i].algo == 3;
        assert_int_equal(bf[i].determinism, nd ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC);
    }
    assert_true(nok >= 3);
    /* Ex with no workspace: algorithms that need some are not runnable */
    float one = 1.0f;
    (void)one;
    DN(cudnnFindConvolutionForwardAlgorithmEx(ha, c.xd, c.x, c.wd, c.w, c.cd, c.yd, c.y, 8, &got,
                                              fw, NULL, 0));
    for (int i = 0; i < got; i++)
        if (fw[i].status == CUDNN_STATUS_SUCCESS)
            assert_int_equal(fw[i].memory, 0);
    assert_int_equal(fw[0].status, CUDNN_STATUS_SUCCESS);
    DN(cudnnFindConvolutionBackwardDataAlgorithmEx(ha, c.wd, c.w, c.yd, c.dy, c.cd, c.xd, c.dx, 8,
                                                   &got, bd, NULL, 0));
    assert_int_equal(bd[0].status, CUDNN_STATUS_SUCCESS);
    api_conv_free(&c);
    DN(cudnnDestroy(hv));
    DN(cudnnDestroy(ha));
    DN(cudnnDestroy(ht));
}

/* Negative control (2b): vendor fact (VENDOR-FACTS cuDNN): cudnnFind* times
 * the candidates on the device, so its ranking, and with it the algorithm a
 * framework in benchmark mode picks, varies from run to run. Where the
 * candidates run about equally fast (a tiny problem: timing noise decides)
 * repeated Finds give other first choices; the heuristic query (`_v7`,
 * what a deterministic framework uses instead of Find) gives the same first
 * choice every time. */
static void test_api_find_varies(void **state)
{
    (void)state;
    cudnnHandle_t h = handle_on(DEV_A100);
    api_conv_t c;
    api_conv_init(&c, 1, 1, 4, 4, 1, 3, 3, 1, 1, 1, 1, 0);
    enum { RUNS = 200 };
    int seen[CUDNN_CONVOLUTION_FWD_ALGO_COUNT] = {0}, distinct = 0, v7_first = -1;
    for (int t = 0; t < RUNS; t++) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int got = 0;
        DN(cudnnFindConvolutionForwardAlgorithm(h, c.xd, c.wd, c.cd, c.yd,
                                                CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
        assert_true(got >= 2 && perf[0].status == CUDNN_STATUS_SUCCESS &&
                    perf[1].status == CUDNN_STATUS_SUCCESS);
        distinct += seen[perf[0].algo]++ == 0;
        DN(cudnnGetConvolutionForwardAlgorithm_v7(h, c.xd, c.wd, c.cd, c.yd, 1, &got, perf));
        if (t == 0)
            v7_first = perf[0].algo;
        assert_int_equal(perf[0].algo, v7_first);
    }
    print_message("Find first choices over %d runs:", RUNS);
    for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; a++)
        if (seen[a])
            print_message(" algo %d x%d", a, seen[a]);
    print_message("\n");
    assert_true(distinct >= 2);
    api_conv_free(&c);
    DN(cudnnDestroy(h));
}

/* Runs the default (v7 first choice) forward, backward data and backward
 * filter on device dev; returns the three results concatenated. */
static float *default_run(int dev, api_conv_t *c, size_t *len)
{
    cudnnHandle_t h = handle_on(dev);
    api_conv_realloc(c);
    cudnnConvolutionFwdAlgoPerf_t fw;
    cudnnConvolutionBwdDataAlgoPerf_t bd;
    cudnnConvolutionBwdFilterAlgoPerf_t bf;
    int got;
    DN(cudnnGetConvolutionForwardAlgorithm_v7(h, c->xd, c->wd, c->cd, c->yd, 1, &got, &fw));
    DN(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c->wd, c->yd, c->cd, c->xd, 1, &got, &bd));
    DN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c->xd, c->yd, c->cd, c->wd, 1, &got, &bf));
    size_t ws = fw.memory > bd.memory ? fw.memory : bd.memory;
    ws = ws > bf.memory ? ws : bf.memory;
    void *w = dev_alloc(ws);
    float one = 1.0f, zero = 0.0f;
    DN(cudnnConvolutionForward(h, &one, c->xd, c->x, c->wd, c->w, c->cd, fw.algo, w, ws, &zero,
                               c->yd, c->y));
    DN(cudnnConvolutionBackwardData(h, &one, c->wd, c->w, c->yd, c->dy, c->cd, bd.algo, w, ws,
                                    &zero, c->xd, c->dx));
    DN(cudnnConvolutionBackwardFilter(h, &one, c->xd, c->x, c->yd, c->dy, c->cd, bf.algo, w, ws,
                                      &zero, c->wd, c->dw));
    CK(cuCtxSynchronize());
    size_t ny = count4(&c->p.y), nx = count4(&c->p.x), nw = count4(&c->p.w);
    float *out = malloc((ny + nx + nw) * sizeof(float));
    to_host(out, c->y, ny);
    to_host(out + ny, c->dx, nx);
    to_host(out + ny + nx, c->dw, nw);
    *len = ny + nx + nw;
    dev_free(w);
    DN(cudnnDestroy(h));
    return out;
}

/* Negative control (3): "never across architectures": the default choice
 * on an a100 and on a t4 gives different bits; on one model (a100, a
 * shape whose defaults are all deterministic there) identical bits run to
 * run. */
static void test_api_models_differ(void **state)
{
    (void)state;
    CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
    api_conv_t c;
    api_conv_init(&c, 4, 32, 10, 10, 16, 3, 3, 1, 1, 1, 1, 0);
    size_t n1, n2, n3;
    float *a1 = default_run(DEV_A100, &c, &n1);
    float *a2 = default_run(DEV_A100, &c, &n2);
    float *v1 = default_run(DEV_T4, &c, &n3);
    assert_memory_equal(a1, a2, n1 * sizeof(float));
    size_t ny = count4(&c.p.y);
    assert_true(memcmp(a1, v1, ny * sizeof(float)) != 0); /* forward alone differs */
    assert_true(memcmp(a1, v1, n1 * sizeof(float)) != 0);
    free(a1);
    free(a2);
    free(v1);
    /* one pinned algorithm: identical run to run on one model, different
     * between models (each architecture runs its own kernels) */
    float one = 1.0f, zero = 0.0f;
    size_t nw = count4(&c.p.w);
    float *r[3];
    int devs[3] = {DEV_A100, DEV_A100, DEV_L4};
    for (int i = 0; i < 3; i++) {
        cudnnHandle_t h = handle_on(devs[i]);
        api_conv_realloc(&c);
        size_t wsn;
        DN(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c.xd, c.yd, c.cd, c.wd,
                                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, &wsn));
        void *ws = dev_alloc(wsn);
        DN(cudnnConvolutionForward(h, &one, c.xd, c.x, c.wd, c.w, c.cd,
                                   CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, NULL, 0, &zero, c.yd, c.y));
        DN(cudnnConvolutionBackwardFilter(h, &one, c.xd, c.x, c.yd, c.dy, c.cd,
                                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, ws, wsn, &zero,
                                          c.wd, c.dw));
        CK(cuCtxSynchronize());
        r[i] = malloc((ny + nw) * sizeof(float));
        to_host(r[i], c.y, ny);
        to_host(r[i] + ny, c.dw, nw);
        dev_free(ws);
        DN(cudnnDestroy(h));
    }
    assert_memory_equal(r[0], r[1], (ny + nw) * sizeof(float));
    assert_true(memcmp(r[0], r[2], ny * sizeof(float)) != 0);
    assert_true(memcmp(r[0] + ny, r[2] + ny, nw * sizeof(float)) != 0);
    for (int i = 0; i < 3; i++)
        free(r[i]);
    CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
    api_conv_free(&c);
}

/* The library's kernels follow the reference (kern.c) bit for bit: every
 * deterministic algorithm of every direction, on two architectures (each
 * has its own orders), with strides, dilation, groups, padding, NHWC and
 * beta != 0; a kernel that sums in another order or reads a wrong element
 * fails here. */
static void test_api_bits_match_reference(void **state)
{
    (void)state;
    static const int shapes[][12] = {
        /* N C H W K R S pad str dil groups nhwc */
        {2, 4, 9, 7, 6, 3, 3, 1, 1, 1, 1, 0},
        {2, 6, 11, 9, 4, 3, 3, 2, 2, 2, 2, 0},
        {1, 4, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1},
        {3, 2, 8, 8, 5, 5, 5, 2, 1, 1, 1, 0},
        {2, 3, 40, 40, 2, 1, 1, 0, 1, 1, 1, 0},
    };
    const int devs[2] = {DEV_A100, DEV_T4};
    float alpha = 0.75f, beta = -0.5f;
    for (int di = 0; di < 2; di++) {
        cudnnHandle_t h = handle_on(devs[di]);
        CUdevice dv;
        int ccmaj, ccmin;
        CK(cuCtxGetDevice(&dv));
        CK(cuDeviceGetAttribute(&ccmaj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dv));
        CK(cuDeviceGetAttribute(&ccmin, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dv));
        int arch = ccmaj * 10 + ccmin;
        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
            const int *sh = shapes[si];
            api_conv_t c;
            api_conv_init(&c, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], sh[7], sh[8],
                          sh[9], sh[10], sh[11]);
            c.p.arch = arch;
            size_t nx = count4(&c.p.x), nw = count4(&c.p.w), ny = count4(&c.p.y);
            float *y0 = rand_buf(ny), *dx0 = rand_buf(nx), *dw0 = rand_buf(nw);
            float *got = malloc((nx + nw + ny) * sizeof(float));
            float *ref = malloc((nx + nw + ny) * sizeof(float));
            for (int dir = 0; dir < 3; dir++)
                for (int a = 0; a < sim_conv_algo_count(dir); a++) {
                    if (!sim_conv_algo_supported(dir, a, &c.p) ||
                        !sim_conv_algo_deterministic(dir, a))
                        continue;
                    size_t wsn = sim_conv_workspace(dir, a, &c.p);
                    void *ws = dev_alloc(wsn);
                    size_t n;
                    if (dir == SIM_DIR_FWD) {
                        n = ny;
                        CK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)c.y, y0, n * 4));
                        DN(cudnnConvolutionForward(h, &alpha, c.xd, c.x, c.wd, c.w, c.cd,
                                                   (cudnnConvolutionFwdAlgo_t)a, ws, wsn, &beta,
                                                   c.yd, c.y));
                        CK(cuCtxSynchronize());
                        to_host(got, c.y, n);
                        memcpy(ref, y0, n * 4);
                        assert_int_equal(sim_conv_fwd(&c.p, a, alpha, c.hx, c.hw, beta, ref, 1), 0);
                    } else if (dir == SIM_DIR_BWD_DATA) {
                        n = nx;
                        CK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)c.dx, dx0, n * 4));
                        DN(cudnnConvolutionBackwardData(h, &alpha, c.wd, c.w, c.yd, c.dy, c.cd,
                                                        (cudnnConvolutionBwdDataAlgo_t)a, ws, wsn,
                                                        &beta, c.xd, c.dx));
                        CK(cuCtxSynchronize());
                        to_host(got, c.dx, n);
                        memcpy(ref, dx0, n * 4);
                        assert_int_equal(
                            sim_conv_bwd_data(&c.p, a, alpha, c.hw, c.hdy, beta, ref, 1), 0);
                    } else {
                        n = nw;
                        CK(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)c.dw, dw0, n * 4));
                        DN(cudnnConvolutionBackwardFilter(h, &alpha, c.xd, c.x, c.yd, c.dy, c.cd,
                                                          (cudnnConvolutionBwdFilterAlgo_t)a, ws,
                                                          wsn, &beta, c.wd, c.dw));
                        CK(cuCtxSynchronize());
                        to_host(got, c.dw, n);
                        memcpy(ref, dw0, n * 4);
                        assert_int_equal(
                            sim_conv_bwd_filter(&c.p, a, alpha, c.hx, c.hdy, beta, ref, 1), 0);
                    }
                    if (memcmp(got, ref, n * 4) != 0)
                        fail_msg("arch %d shape %zu direction %d algorithm %d: bits differ from "
                                 "the reference",
                                 arch, si, dir, a);
                    dev_free(ws);
                }
            /* bias gradient */
            sim_t4_t dbv;
            dense(&dbv, 1, c.p.y.c, 1, 1, 0);
            cudnnTensorDescriptor_t bd;
            DN(cudnnCreateTensorDescriptor(&bd));
            DN(cudnnSetTensor4dDescriptor(bd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, c.p.y.c, 1,
                                          1));
            void *db = dev_from(dw0, (size_t)c.p.y.c);
            DN(cudnnConvolutionBackwardBias(h, &alpha, c.yd, c.dy, &beta, bd, db));
            CK(cuCtxSynchronize());
            to_host(got, db, (size_t)c.p.y.c);
            memcpy(ref, dw0, (size_t)c.p.y.c * 4);
            assert_int_equal(sim_conv_bwd_bias(&c.p.y, &dbv, alpha, c.hdy, beta, ref), 0);
            assert_memory_equal(got, ref, (size_t)c.p.y.c * 4);
            dev_free(db);
            DN(cudnnDestroyTensorDescriptor(bd));
            free(y0);
            free(dx0);
            free(dw0);
            free(got);
            free(ref);
            api_conv_free(&c);
        }
        DN(cudnnDestroy(h));
    }
    CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
}

static void test_api_pool_act(void **state)
{
    (void)state;
    cudnnHandle_t h = handle_on(DEV_A100);
    int modes[4] = {CUDNN_POOLING_MAX, CUDNN_POOLING_MAX_DETERMINISTIC,
                    CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                    CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING};
    cudnnTensorDescriptor_t xd, yd;
    cudnnPoolingDescriptor_t pd;
    DN(cudnnCreateTensorDescriptor(&xd));
    DN(cudnnCreateTensorDescriptor(&yd));
    DN(cudnnCreatePoolingDescriptor(&pd));
    DN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 3, 9, 7));
    float one = 1.0f, zero = 0.0f;
    for (int m = 0; m < 4; m++) {
        sim_pool_t p;
        make_pool(&p, modes[m], 2, 3, 9, 7, 3, 2, 1, 1, 2, 2, 0);
        DN(cudnnSetPooling2dDescriptor(pd, modes[m], CUDNN_NOT_PROPAGATE_NAN, 3, 2, 1, 1, 2, 2));
        int n, c, hh, ww;
        DN(cudnnGetPooling2dForwardOutputDim(pd, xd, &n, &c, &hh, &ww));
        assert_true(n == p.y.n && c == p.y.c && hh == p.y.h && ww == p.y.w);
        DN(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, hh, ww));
        float *hx = rand_buf(count4(&p.x)), *hdy = rand_buf(count4(&p.y));
        float *hy = malloc(count4(&p.y) * sizeof(float)), *hdx = malloc(count4(&p.x) * sizeof(float));
        double *ry = malloc(count4(&p.y) * sizeof(double)), *rdx = malloc(count4(&p.x) * sizeof(double));
        ref_pool(&p, hx, hdy, ry, rdx);
        void *x = dev_from(hx, count4(&p.x)), *dy = dev_from(hdy, count4(&p.y));
        void *y = dev_alloc(count4(&p.y) * sizeof(float)), *dx = dev_alloc(count4(&p.x) * sizeof(float));
        DN(cudnnPoolingForward(h, pd, &one, xd, x, &zero, yd, y));
        DN(cudnnPoolingBackward(h, pd, &one, yd, y, yd, dy, xd, x, &zero, xd, dx));
        CK(cuCtxSynchronize());
        to_host(hy, y, count4(&p.y));
        to_host(hdx, dx, count4(&p.x));
        expect_close(&p.y, hy, ry, 1e-6, "api pool fwd");
        expect_close(&p.x, hdx, rdx, 1e-5, "api pool bwd");
        dev_free(x);
        dev_free(dy);
        dev_free(y);
        dev_free(dx);
        free(hx);
        free(hdy);
        free(hy);
        free(hdx);
        free(ry);
        free(rdx);
    }
    /* ReLU forward / backward, beta = 0 ignoring NaN in the output */
    cudnnActivationDescriptor_t ad;
    DN(cudnnCreateActivationDescriptor(&ad));
    DN(cudnnSetActivationDescriptor(ad, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    size_t nx = 2 * 3 * 9 * 7;
    float *hx = rand_buf(nx), *hdy = rand_buf(nx), *hy = malloc(nx * sizeof(float));
    float *nan = malloc(nx * sizeof(float));
    for (size_t i = 0; i < nx; i++)
        nan[i] = NAN;
    void *x = dev_from(hx, nx), *dy = dev_from(hdy, nx), *y = dev_from(nan, nx), *dx = dev_from(nan, nx);
    DN(cudnnActivationForward(h, ad, &one, xd, x, &zero, xd, y));
    DN(cudnnActivationBackward(h, ad, &one, xd, y, xd, dy, xd, x, &zero, xd, dx));
    CK(cuCtxSynchronize());
    to_host(hy, y, nx);
    for (size_t i = 0; i < nx; i++)
        assert_true(hy[i] == (hx[i] > 0 ? hx[i] : 0.0f));
    to_host(hy, dx, nx);
    for (size_t i = 0; i < nx; i++)
        assert_true(hy[i] == (hx[i] > 0 ? hdy[i] : 0.0f));
    assert_int_equal(cudnnActivationForward(h, ad, &one, xd, x, &zero, yd, y), CUDNN_STATUS_BAD_PARAM);
    /* set and scale */
    float three = 3.0f, half = 0.5f;
    DN(cudnnSetTensor(h, xd, y, &three));
    DN(cudnnScaleTensor(h, xd, y, &half));
    CK(cuCtxSynchronize());
    to_host(hy, y, nx);
    for (size_t i = 0; i < nx; i++)
        assert_true(hy[i] == 1.5f);
    dev_free(x);
    dev_free(dy);
    dev_free(y);
    dev_free(dx);
    free(hx);
    free(hdy);
    free(hy);
    free(nan);
    cudnnDestroyActivationDescriptor(ad);
    cudnnDestroyPoolingDescriptor(pd);
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroyTensorDescriptor(yd);
    DN(cudnnDestroy(h));
}


/* ---- backend API -------------------------------------------------------------------- */

#define BK(x) DN(x)

static cudnnBackendDescriptor_t bk_tensor(int64_t uid, const sim_t4_t *t)
{
    cudnnBackendDescriptor_t d;
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &d));
    cudnnDataType_t dt = CUDNN_DATA_FLOAT;
    int64_t dims[4] = {t->n, t->c, t->h, t->w}, str[4] = {t->sn, t->sc, t->sh, t->sw}, al = 16;
    BK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt));
    BK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
    BK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str));
    BK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
    BK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al));
    BK(cudnnBackendFinalize(d));
    return d;
}

/* An operation graph of one convolution of direction dir over problem p:
 * tensors uid 1 = x (or dx), 2 = w (or dw), 3 = y (or dy). */
static cudnnBackendDescriptor_t bk_graph(cudnnHandle_t h, int dir, const sim_conv_t *p)
{
    cudnnBackendDescriptor_t x = bk_tensor(1, &p->x), w = bk_tensor(2, &p->w), y = bk_tensor(3, &p->y);
    cudnnBackendDescriptor_t cv, op, g;
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &cv));
    cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = p->flip ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION;
    int64_t sd = 2, pad[2] = {p->pad_h, p->pad_w}, str[2] = {p->str_h, p->str_w};
    int64_t dil[2] = {p->dil_h, p->dil_w};
    BK(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct));
    BK(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    BK(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd));
    BK(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    BK(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad));
    BK(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str));
    BK(cudnnBackendSetAttribute(cv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
    BK(cudnnBackendFinalize(cv));
    cudnnBackendDescriptorType_t ot = dir == SIM_DIR_FWD ? CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR
                                      : dir == SIM_DIR_BWD_DATA ? CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
                                      : CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
    cudnnBackendAttributeName_t base = dir == SIM_DIR_FWD ? CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA
                                       : dir == SIM_DIR_BWD_DATA ? CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA
                                       : CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA;
    BK(cudnnBackendCreateDescriptor(ot, &op));
    float alpha = 1.0f, beta = 0.0f;
    BK(cudnnBackendSetAttribute(op, base + 0, CUDNN_TYPE_FLOAT, 1, &alpha));
    BK(cudnnBackendSetAttribute(op, base + 1, CUDNN_TYPE_FLOAT, 1, &beta));
    BK(cudnnBackendSetAttribute(op, base + 2, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cv));
    if (dir == SIM_DIR_BWD_FILTER) { /* DW, X, DY */
        BK(cudnnBackendSetAttribute(op, base + 3, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
        BK(cudnnBackendSetAttribute(op, base + 4, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    } else { /* W, X or DX */
        BK(cudnnBackendSetAttribute(op, base + 3, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
        BK(cudnnBackendSetAttribute(op, base + 4, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    }
    BK(cudnnBackendSetAttribute(op, base + 5, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    BK(cudnnBackendFinalize(op));
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g));
    BK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    BK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
    BK(cudnnBackendFinalize(g));
    /* the graph keeps its own copies */
    cudnnBackendDestroyDescriptor(op);
    cudnnBackendDestroyDescriptor(cv);
    cudnnBackendDestroyDescriptor(x);
    cudnnBackendDestroyDescriptor(w);
    cudnnBackendDestroyDescriptor(y);
    return g;
}

/* A heuristics descriptor (mode INSTANT) on graph g, not finalized. */
static cudnnBackendDescriptor_t bk_heur_new(cudnnBackendDescriptor_t g)
{
    cudnnBackendDescriptor_t heur;
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_INSTANT;
    BK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g));
    BK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    return heur;
}

/* Engine configs from the heuristics (mode INSTANT); returns how many. */
static int bk_heur(cudnnBackendDescriptor_t g, cudnnBackendDescriptor_t *cfgs, int max)
{
    cudnnBackendDescriptor_t heur = bk_heur_new(g);
    BK(cudnnBackendFinalize(heur));
    int64_t n = 0;
    BK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                0, &n, NULL));
    assert_true(n > 0 && n <= max);
    for (int i = 0; i < n; i++)
        BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]));
    int64_t got = 0;
    BK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                n, &got, cfgs));
    assert_int_equal(got, n);
    cudnnBackendDestroyDescriptor(heur);
    return (int)n;
}

/* Global index and nondeterministic note of a config's engine. */
static int64_t bk_engine(cudnnBackendDescriptor_t cfg, int *nondet)
{
    cudnnBackendDescriptor_t e;
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e));
    int64_t n;
    BK(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                &n, &e));
    int64_t idx;
    BK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &idx));
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    BK(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes));
    *nondet = 0;
    for (int i = 0; i < n; i++)
        *nondet |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    cudnnBackendDestroyDescriptor(e);
    return idx;
}

/* Finalizes a plan for cfg and executes it n times on the buffers,
 * returning the results (n * count floats of out). */
static float *bk_run(cudnnHandle_t h, cudnnBackendDescriptor_t cfg, void *x, void *w, void *y,
                     void *out, size_t count, int n)
{
    cudnnBackendDescriptor_t plan, vp;
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan));
    BK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
    BK(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
    BK(cudnnBackendFinalize(plan));
    int64_t wsz, k;
    BK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                &k, &wsz));
    void *ws = dev_alloc((size_t)wsz);
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
    int64_t uids[3] = {1, 2, 3};
    void *ptrs[3] = {x, w, y};
    BK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
    BK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs));
    BK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    BK(cudnnBackendFinalize(vp));
    float *res = malloc((size_t)n * count * sizeof(float));
    for (int i = 0; i < n; i++) {
        BK(cudnnBackendExecute(h, plan, vp));
        CK(cuCtxSynchronize());
        to_host(res + (size_t)i * count, out, count);
    }
    cudnnBackendDestroyDescriptor(vp);
    cudnnBackendDestroyDescriptor(plan);
    dev_free(ws);
    return res;
}

/* Vendor fact (VENDOR-FACTS, Backend API): an engine's NUMERICAL_NOTE may
 * contain CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC; the first heuristic result
 * is such an engine on some model/shape (backward filter on a t4 with few
 * channels), and it really gives different bits run to run, while the
 * engines without the note do not. */
static void test_backend_bwd_filter(void **state)
{
    (void)state;
    CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
    api_conv_t c;
    api_conv_init(&c, 4, 4, 12, 12, 8, 3, 3, 1, 1, 1, 1, 0);
    double *rdx, *rdw;
    ref_bwd(&c.p, c.hx, c.hw, c.hdy, &rdx, &rdw);
    size_t nw = count4(&c.p.w);
    for (int dev = 0; dev < 2; dev++) {
        cudnnHandle_t h = handle_on(dev ? DEV_T4 : DEV_A100);
        api_conv_realloc(&c);
        cudnnBackendDescriptor_t g = bk_graph(h, SIM_DIR_BWD_FILTER, &c.p), cfgs[8];
        int64_t gc, k;
        BK(cudnnBackendGetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
                                    CUDNN_TYPE_INT64, 1, &k, &gc));
        assert_int_equal(gc, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
        int n = bk_heur(g, cfgs, 8);
        int saw_nd = 0, saw_det = 0;
        for (int i = 0; i < n; i++) {
            int nd;
            int64_t idx = bk_engine(cfgs[i], &nd);
            assert_int_equal(nd, idx == 0 || idx == 3);
            if (i == 0)
                assert_int_equal(idx, dev ? 0 : 1); /* t4: ALGO_0 first; a100: ALGO_1 */
            /* 8 runs: a nondeterministic engine's orders are drawn at
             * random, and a few could give the same bits by chance */
            float *r = bk_run(h, cfgs[i], c.x, c.dw, c.dy, c.dw, nw, 8);
            for (int t = 0; t < 8; t++)
                expect_close(&c.p.w, r + t * nw, rdw, 1e-5, "backend bwd filter");
            int differ = 0;
            for (int t = 1; t < 8; t++)
                differ |= memcmp(r, r + t * nw, nw * sizeof(float)) != 0;
            assert_int_equal(differ, nd);
            saw_nd |= nd;
            saw_det |= !nd;
            free(r);
            cudnnBackendDestroyDescriptor(cfgs[i]);
        }
        assert_true(saw_nd && saw_det);
        cudnnBackendDestroyDescriptor(g);
        DN(cudnnDestroy(h));
    }
    free(rdx);
    free(rdw);
    CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
    api_conv_free(&c);
}

static void test_backend_fwd_data(void **state)
{
    (void)state;
    CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
    cudnnHandle_t h = handle_on(DEV_A100);
    api_conv_t c;
    api_conv_init(&c, 2, 6, 9, 9, 4, 3, 3, 1, 2, 1, 1, 0);
    double *ry = ref_fwd(&c.p, c.hx, c.hw), *rdx, *rdw;
    ref_bwd(&c.p, c.hx, c.hw, c.hdy, &rdx, &rdw);
    cudnnBackendDescriptor_t g = bk_graph(h, SIM_DIR_FWD, &c.p), cfgs[8];
    int n = bk_heur(g, cfgs, 8);
    int nd;
    assert_int_equal(bk_engine(cfgs[0], &nd), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
    for (int i = 0; i < n; i++) {
        float *r = bk_run(h, cfgs[i], c.x, c.w, c.y, c.y, count4(&c.p.y), 1);
        expect_close(&c.p.y, r, ry, 1e-5, "backend fwd");
        free(r);
        cudnnBackendDestroyDescriptor(cfgs[i]);
    }
    cudnnBackendDestroyDescriptor(g);
    /* backward data, strided: ALGO_0 (nondeterministic) ranks first on a100 */
    g = bk_graph(h, SIM_DIR_BWD_DATA, &c.p);
    n = bk_heur(g, cfgs, 8);
    assert_int_equal(bk_engine(cfgs[0], &nd), CUDNN_CONVOLUTION_BWD_DATA_ALGO_0);
    assert_true(nd);
    for (int i = 0; i < n; i++) {
        float *r = bk_run(h, cfgs[i], c.dx, c.w, c.dy, c.dx, count4(&c.p.x), 1);
        expect_close(&c.p.x, r, rdx, 1e-5, "backend bwd data");
        free(r);
        cudnnBackendDestroyDescriptor(cfgs[i]);
    }
    /* an engine made directly, by index */
    cudnnBackendDescriptor_t e;
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e));
    int64_t idx = 1;
    BK(cudnnBackendSetAttribute(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g));
    BK(cudnnBackendSetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &idx));
    BK(cudnnBackendFinalize(e));
    cudnnBackendDestroyDescriptor(e);
    /* unsupported engine (FFT needs stride 1) */
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e));
    idx = CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT;
    BK(cudnnBackendSetAttribute(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g));
    BK(cudnnBackendSetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &idx));
    assert_int_equal(cudnnBackendFinalize(e), CUDNN_STATUS_NOT_SUPPORTED);
    cudnnBackendDestroyDescriptor(e);
    cudnnBackendDestroyDescriptor(g);
    free(ry);
    free(rdx);
    free(rdw);
    api_conv_free(&c);
    DN(cudnnDestroy(h));
}

/* A plan, and a graph given a handle, work where they were made (README,
 * "Status codes"): a plan finalized on one device, executed with a handle
 * of another, or after the context it was finalized in is destroyed,
 * enqueues nothing and fails with EXECUTION_FAILED_CUDA_DRIVER; so do the
 * heuristics and an engine of a graph whose handle's context is gone or
 * whose handle was destroyed. */
static void bk_plan_vp(cudnnBackendDescriptor_t cfg, cudnnHandle_t ph, void *x, void *w, void *y,
                       void *ws, cudnnBackendDescriptor_t *plan, cudnnBackendDescriptor_t *vp)
{
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan));
    if (ph)
        BK(cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                    &ph));
    BK(cudnnBackendSetAttribute(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg));
    BK(cudnnBackendFinalize(*plan));
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, vp));
    int64_t uids[3] = {1, 2, 3};
    void *ptrs[3] = {x, w, y};
    BK(cudnnBackendSetAttribute(*vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
    BK(cudnnBackendSetAttribute(*vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3,
                                ptrs));
    BK(cudnnBackendSetAttribute(*vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws));
    BK(cudnnBackendFinalize(*vp));
}

static cudnnStatus_t bk_heur_status(cudnnBackendDescriptor_t g)
{
    cudnnBackendDescriptor_t heur = bk_heur_new(g);
    cudnnStatus_t st = cudnnBackendFinalize(heur);
    cudnnBackendDestroyDescriptor(heur);
    return st;
}

static cudnnStatus_t bk_engine_status(cudnnBackendDescriptor_t g)
{
    cudnnBackendDescriptor_t e;
    int64_t idx = 0;
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &e));
    BK(cudnnBackendSetAttribute(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                1, &g));
    BK(cudnnBackendSetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &idx));
    cudnnStatus_t st = cudnnBackendFinalize(e);
    cudnnBackendDestroyDescriptor(e);
    return st;
}

static void test_backend_plan_bound_to_device(void **state)
{
    (void)state;
    CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
    cudnnHandle_t h = handle_on(DEV_A100), ht = handle_on(DEV_T4);
    CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
    api_conv_t c;
    api_conv_init(&c, 2, 4, 8, 8, 4, 3, 3, 1, 1, 1, 1, 0);
    void *ws = dev_alloc(1 << 20);
    cudnnBackendDescriptor_t g = bk_graph(h, SIM_DIR_FWD, &c.p), cfgs[8], plan, vp;
    int n = bk_heur(g, cfgs, 8);
    /* finalized in the A100's context, no plan handle */
    bk_plan_vp(cfgs[0], NULL, c.x, c.w, c.y, ws, &plan, &vp);
    DN(cudnnBackendExecute(h, plan, vp));
    CK(cuCtxSynchronize());
    /* a handle of another device: refused, nothing enqueued */
    assert_int_equal(cudnnBackendExecute(ht, plan, vp), CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER);
    cudnnBackendDestroyDescriptor(plan);
    cudnnBackendDestroyDescriptor(vp);
    /* a plan handle decides the device, whatever context is current */
    bk_plan_vp(cfgs[0], ht, c.x, c.w, c.y, ws, &plan, &vp);
    assert_int_equal(cudnnBackendExecute(h, plan, vp), CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER);
    cudnnBackendDestroyDescriptor(plan);
    cudnnBackendDestroyDescriptor(vp);
    /* finalized in a context destroyed since: refused on the same device */
    CUdevice d;
    CUcontext made, junk;
    CK(cuDeviceGet(&d, DEV_A100));
    CK(cuCtxCreate(&made, NULL, 0, d));
    cudnnHandle_t hm;
    DN(cudnnCreate(&hm));
    bk_plan_vp(cfgs[0], NULL, c.x, c.w, c.y, ws, &plan, &vp);
    cudnnBackendDescriptor_t gm = bk_graph(hm, SIM_DIR_FWD, &c.p), gd = bk_graph(hm, SIM_DIR_FWD, &c.p);
    DN(bk_heur_status(gm)); /* alive: fine */
    CK(cuCtxDestroy(made));
    cuCtxPopCurrent(&junk);
    CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
    assert_int_equal(cudnnBackendExecute(h, plan, vp), CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER);
    /* the graph's handle's context is gone: heuristics and engines fail */
    assert_int_equal(bk_heur_status(gm), CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER);
    assert_int_equal(bk_engine_status(gm), CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER);
    /* ... and so they do when the graph's handle was destroyed */
    DN(cudnnDestroy(hm));
    assert_int_equal(bk_heur_status(gd), CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER);
    cudnnBackendDestroyDescriptor(plan);
    cudnnBackendDestroyDescriptor(vp);
    cudnnBackendDestroyDescriptor(gm);
    cudnnBackendDestroyDescriptor(gd);
    /* the live graph of a live handle is unaffected */
    DN(bk_heur_status(g));
    DN(bk_engine_status(g));
    for (int i = 0; i < n; i++)
        cudnnBackendDestroyDescriptor(cfgs[i]);
    cudnnBackendDestroyDescriptor(g);
    dev_free(ws);
    DN(cudnnDestroy(ht));
    DN(cudnnDestroy(h));
    CK(cuCtxSetCurrent(g_ctx[DEV_A100]));
    api_conv_free(&c);
}

static void test_backend_bad_input(void **state)
{
    (void)state;
    cudnnBackendDescriptor_t t, cfg, vp, plan;
    assert_int_equal(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, NULL),
                     CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    assert_int_equal(cudnnBackendCreateDescriptor(CUDNN_BACKEND_RNG_DESCRIPTOR, &t),
                     CUDNN_STATUS_NOT_SUPPORTED);
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t));
    int32_t dims32[4] = {1, 2, 3, 4};
    assert_int_equal(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT32, 4, dims32),
                     CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);
    int64_t n;
    assert_int_equal(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 0, &n, NULL),
                     CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
    assert_int_equal(cudnnBackendFinalize(t), CUDNN_STATUS_BAD_PARAM); /* nothing set */
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg));
    assert_int_equal(cudnnBackendFinalize(cfg), CUDNN_STATUS_BAD_PARAM);
    /* a descriptor of the wrong type where an engine belongs */
    assert_int_equal(cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t),
                     CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE);
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
    int64_t uids[2] = {1, 2};
    BK(cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 2, uids));
    assert_int_equal(cudnnBackendFinalize(vp), CUDNN_STATUS_BAD_PARAM); /* no pointers */
    BK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan));
    cudnnHandle_t h = handle_on(DEV_A100);
    assert_int_equal(cudnnBackendExecute(h, plan, vp), CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
    assert_int_equal(cudnnBackendExecute(h, NULL, vp), CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
    assert_int_equal(cudnnBackendFinalize(plan), CUDNN_STATUS_BAD_PARAM);
    DN(cudnnDestroy(h));
    cudnnBackendDestroyDescriptor(plan);
    cudnnBackendDestroyDescriptor(vp);
    cudnnBackendDestroyDescriptor(cfg);
    cudnnBackendDestroyDescriptor(t);
}

int main(void)
{
    /* On simcuda: device memory kept out of this process, as on a GPU
     * machine (a real driver ignores the variable): the library never
     * touches device memory from the host. */
    setenv("SIMCUDA_ISOLATION", "1", 1);
    /* several GPU models in one process (before the driver starts) */
    setenv("SIMCUDA_DEVICES", "a100:1G,l4:1G,t4:1G,h100:1G", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    const struct CMUnitTest core[] = {
        cmocka_unit_test(test_core_conv_fwd),
        cmocka_unit_test(test_core_conv_bwd),
        cmocka_unit_test(test_core_bias_add_act),
        cmocka_unit_test(test_core_pool),
        cmocka_unit_test(test_core_pool_nan),
        cmocka_unit_test(test_core_algos_differ),
        cmocka_unit_test(test_core_nondeterminism),
        cmocka_unit_test(test_core_heuristics),
    };
    const struct CMUnitTest api[] = {
        cmocka_unit_test(test_library_abi),
        cmocka_unit_test(test_api_handle_version),
        cmocka_unit_test(test_api_arch_refused),
        cmocka_unit_test(test_api_kernels_in_shim_audit),
        cmocka_unit_test(test_api_descriptors),
        cmocka_unit_test(test_api_conv_correct),
        cmocka_unit_test(test_api_bits_match_reference),
        cmocka_unit_test(test_api_bad_input),
        cmocka_unit_test(test_api_async),
        cmocka_unit_test(test_api_two_streams),
        cmocka_unit_test(test_api_handle_bound_to_context),
        cmocka_unit_test(test_api_nondeterminism),
        cmocka_unit_test(test_api_heuristics),
        cmocka_unit_test(test_api_find_varies),
        cmocka_unit_test(test_api_models_differ),
        cmocka_unit_test(test_api_pool_act),
    };
    const struct CMUnitTest backend[] = {
        cmocka_unit_test(test_backend_bwd_filter),
        cmocka_unit_test(test_backend_fwd_data),
        cmocka_unit_test(test_backend_bad_input),
        cmocka_unit_test(test_backend_plan_bound_to_device),
    };
    int rc = cmocka_run_group_tests_name("sim_cudnn_core", core, NULL, NULL);
    rc |= cmocka_run_group_tests_name("sim_cudnn_api", api, setup_driver, NULL);
    rc |= cmocka_run_group_tests_name("sim_cudnn_backend", backend, setup_driver, NULL);
    return rc ? 1 : 0;
}
