/* simcuda cuDNN: the plain-C reference of the kernels (sim/cudnn/kernels.cu):
 * convolutions per algorithm with each algorithm's own fixed accumulation
 * order, float-atomic models (a permutation from a seed) for the algorithms
 * NVIDIA documents as nondeterministic, pooling, activations, tensor add.
 * Tests compare the library's kernels with it; not part of the library.
 * See kern.h for the contract. */
#include "sim/cudnn/kern.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ---- accumulation schemes ------------------------------------------------ */

/* Sums t[0..n) in the order of `scheme`; may overwrite t. */
static float reduce(float *t, int n, int scheme)
{
    float s = 0.0f;
    switch (scheme) {
    case SIM_RED_SEQ:
        for (int i = 0; i < n; i++)
            s += t[i];
        return s;
    case SIM_RED_REV:
        for (int i = n - 1; i >= 0; i--)
            s += t[i];
        return s;
    case SIM_RED_L2:
    case SIM_RED_L4: {
        int lanes = scheme == SIM_RED_L2 ? 2 : 4;
        float lane[4] = {0, 0, 0, 0};
        for (int i = 0, l = 0; i < n; i++, l = l + 1 == lanes ? 0 : l + 1)
            lane[l] += t[i];
        for (int l = 0; l < lanes; l++)
            s += lane[l];
        return s;
    }
    case SIM_RED_PAIR:
        while (n > 1) {
            int m = n / 2;
            for (int i = 0; i < m; i++)
                t[i] = t[2 * i] + t[2 * i + 1];
            if (n & 1)
                t[m++] = t[n - 1];
            n = m;
        }
        return n ? t[0] : 0.0f;
    case SIM_RED_B8:
    case SIM_RED_B16: {
        int bs = scheme == SIM_RED_B8 ? 8 : 16;
        for (int i = 0; i < n; i += bs) {
            float b = 0.0f;
            for (int j = i; j < n && j < i + bs; j++)
                b += t[j];
            s += b;
        }
        return s;
    }
    }
    return s;
}

/* ---- randomness for the atomics model ------------------------------------ */

static uint64_t splitmix(uint64_t *st)
{
    uint64_t z = (*st += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* perm[0..n) = a permutation of 0..n-1 drawn from *st. */
static void permute(int *perm, int n, uint64_t *st)
{
    for (int i = 0; i < n; i++)
        perm[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(splitmix(st) % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

uint64_t sim_cudnn_entropy(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        v = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec;
    }
    return v;
}

/* ---- helpers --------------------------------------------------------------- */

static inline int64_t off(const sim_t4_t *t, int n, int c, int h, int w)
{
    return (int64_t)n * t->sn + (int64_t)c * t->sc + (int64_t)h * t->sh + (int64_t)w * t->sw;
}

static inline void blend(float *out, float alpha, float v, float beta)
{
    *out = beta == 0.0f ? alpha * v : alpha * v + beta * *out;
}


/* ---- convolution forward --------------------------------------------------- */

/* Per algorithm: reduction order (0: channel-major c,r,s; 1: spatial-major
 * r,s,c) and the base index of its accumulation scheme. */

int sim_conv_fwd(const sim_conv_t *p, int algo, float alpha, const float *x, const float *w,
                 float beta, float *y, uint64_t seed)
{
    (void)seed; /* every forward algorithm is deterministic */
    if (algo < 0 || algo >= SIM_FWD_ALGOS)
        return -EINVAL;
    if (!sim_conv_algo_supported(SIM_DIR_FWD, algo, p))
        return -ENOTSUP;
    int N = p->x.n, K = p->w.n, cpg = p->w.c, R = p->w.h, S = p->w.w;
    int H = p->x.h, W = p->x.w, P = p->y.h, Q = p->y.w;
    int kpg = K / p->groups;
    float *t = malloc(sizeof(float) * ((size_t)cpg * R * S + 1));
    if (!t)
        return -ENOMEM;
    int order, scheme;
    sim_conv_fold_params(SIM_DIR_FWD, algo, p->arch, &order, &scheme);
    /* Per output position, the valid filter taps in (r, s) order: offsets
     * into an x channel plane and into a w (k, c) slice. The order of the
     * terms, and so the result, is exactly that of the nested loops. */
    int64_t *xo = malloc(sizeof(int64_t) * ((size_t)R * S + 1));
    int64_t *wo = malloc(sizeof(int64_t) * ((size_t)R * S + 1));
    if (!xo || !wo) {
        free(t);
        free(xo);
        free(wo);
        return -ENOMEM;
    }
    for (int oh = 0; oh < P; oh++)
        for (int ow = 0; ow < Q; ow++) {
            int h0 = oh * p->str_h - p->pad_h, w0 = ow * p->str_w - p->pad_w, m = 0;
            for (int r = 0; r < R; r++) {
                int hh = h0 + r * p->dil_h;
                if (hh < 0 || hh >= H)
                    continue;
                int fr = p->flip ? R - 1 - r : r;
                for (int s = 0; s < S; s++) {
                    int ww = w0 + s * p->dil_w;
                    if (ww < 0 || ww >= W)
                        continue;
                    int fs = p->flip ? S - 1 - s : s;
                    xo[m] = hh * p->x.sh + ww * p->x.sw;
                    wo[m++] = fr * p->w.sh + fs * p->w.sw;
                }
            }
            for (int n = 0; n < N; n++)
                for (int k = 0; k < K; k++) {
                    const float *xn = x + n * p->x.sn + (int64_t)((k / kpg) * cpg) * p->x.sc;
                    const float *wk = w + k * p->w.sn;
                    int nt = 0;
                    if (order == 0) { /* c, then (r, s) */
                        for (int c = 0; c < cpg; c++) {
                            const float *xc = xn + c * p->x.sc, *wc = wk + c * p->w.sc;
                            for (int i = 0; i < m; i++)
                                t[nt++] = xc[xo[i]] * wc[wo[i]];
                        }
                    } else { /* (r, s), then c */
                        for (int i = 0; i < m; i++)
                            for (int c = 0; c < cpg; c++)
                                t[nt++] = xn[c * p->x.sc + xo[i]] * wk[c * p->w.sc + wo[i]];
                    }
                    blend(&y[off(&p->y, n, k, oh, ow)], alpha, reduce(t, nt, scheme), beta);
                }
        }
    free(xo);
    free(wo);
    free(t);
    return 0;
}

/* ---- convolution backward data ---------------------------------------------- */


/* ALGO_0: one "thread" per dy element scatters its contributions into dx
 * with float atomics; the order the threads' additions land in is permuted
 * per call. */
static int bwd_data_atomic(const sim_conv_t *p, float alpha, const float *w, const float *dy,
                           float beta, float *dx, uint64_t seed)
{
    int N = p->x.n, C = p->x.c, H = p->x.h, W = p->x.w;
    int K = p->w.n, cpg = p->w.c, R = p->w.h, S = p->w.w, P = p->y.h, Q = p->y.w;
    int kpg = K / p->groups;
    size_t plane = (size_t)C * H * W, units = (size_t)K * P * Q;
    float *acc = calloc(plane, sizeof(float));
    int *perm = malloc(sizeof(int) * units);
    uint64_t st = seed;
    if (!acc || !perm) {
        free(acc);
        free(perm);
        return -ENOMEM;
    }
    for (int n = 0; n < N; n++) {
        memset(acc, 0, plane * sizeof(float));
        permute(perm, (int)units, &st);
        for (size_t u = 0; u < units; u++) {
            int id = perm[u];
            int k = id / (P * Q), oh = (id / Q) % P, ow = id % Q;
            float g = dy[off(&p->y, n, k, oh, ow)];
            int cbase = (k / kpg) * cpg;
            for (int c = 0; c < cpg; c++)
                for (int r = 0; r < R; r++) {
                    int hh = oh * p->str_h - p->pad_h + r * p->dil_h;
                    if (hh < 0 || hh >= H)
                        continue;
                    int fr = p->flip ? R - 1 - r : r;
                    for (int s = 0; s < S; s++) {
                        int ww = ow * p->str_w - p->pad_w + s * p->dil_w;
                        if (ww < 0 || ww >= W)
                            continue;
                        int fs = p->flip ? S - 1 - s : s;
                        acc[((size_t)(cbase + c) * H + hh) * W + ww] +=
                            g * w[off(&p->w, k, c, fr, fs)];
                    }
                }
        }
        for (int c = 0; c < C; c++)
            for (int hh = 0; hh < H; hh++)
                for (int ww = 0; ww < W; ww++)
                    blend(&dx[off(&p->x, n, c, hh, ww)], alpha,
                          acc[((size_t)c * H + hh) * W + ww], beta);
    }
    free(acc);
    free(perm);
    return 0;
}

int sim_conv_bwd_data(const sim_conv_t *p, int algo, float alpha, const float *w,
                      const float *dy, float beta, float *dx, uint64_t seed)
{
    if (algo < 0 || algo >= SIM_BWD_DATA_ALGOS)
        return -EINVAL;
    if (!sim_conv_algo_supported(SIM_DIR_BWD_DATA, algo, p))
        return -ENOTSUP;
    if (algo == 0)
        return bwd_data_atomic(p, alpha, w, dy, beta, dx, seed);
    int N = p->x.n, C = p->x.c, H = p->x.h, W = p->x.w;
    int K = p->w.n, cpg = p->w.c, R = p->w.h, S = p->w.w, P = p->y.h, Q = p->y.w;
    int kpg = K / p->groups;
    float *t = malloc(sizeof(float) * ((size_t)kpg * R * S + 1));
    if (!t)
        return -ENOMEM;
    int order, scheme;
    sim_conv_fold_params(SIM_DIR_BWD_DATA, algo, p->arch, &order, &scheme);
    for (int n = 0; n < N; n++)
        for (int ca = 0; ca < C; ca++) {
            int g = ca / cpg, c = ca % cpg;
            for (int hh = 0; hh < H; hh++)
                for (int ww = 0; ww < W; ww++) {
                    int nt = 0;
                    /* (r, s) valid for this dx position, and its dy index */
                    for (int pass = 0; pass < (order == 0 ? kpg : 1); pass++) {
                        int klo = order == 0 ? g * kpg + pass : g * kpg;
                        int khi = order == 0 ? klo + 1 : (g + 1) * kpg;
                        for (int r = 0; r < R; r++) {
                            int nh = hh + p->pad_h - r * p->dil_h;
                            if (nh < 0 || nh % p->str_h)
                                continue;
                            int oh = nh / p->str_h;
                            if (oh >= P)
                                continue;
                            int fr = p->flip ? R - 1 - r : r;
                            for (int s = 0; s < S; s++) {
                                int nw = ww + p->pad_w - s * p->dil_w;
                                if (nw < 0 || nw % p->str_w)
                                    continue;
                                int ow = nw / p->str_w;
                                if (ow >= Q)
                                    continue;
                                int fs = p->flip ? S - 1 - s : s;
                                for (int k = klo; k < khi; k++)
                                    t[nt++] = dy[off(&p->y, n, k, oh, ow)] *
                                              w[off(&p->w, k, c, fr, fs)];
                            }
                        }
                    }
                    blend(&dx[off(&p->x, n, ca, hh, ww)], alpha, reduce(t, nt, scheme), beta);
                }
        }
    free(t);
    return 0;
}

/* ---- convolution backward filter -------------------------------------------- */


/* ALGO_0 and ALGO_3: thread blocks each reduce a slice of the (n, p, q)
 * space to a partial dw and add it to dw with float atomics; the order of
 * the blocks' additions is permuted per call. ALGO_0 slices by output row
 * (n, p) summing along q; ALGO_3 by pairs of rows, summing q-major. */
static int bwd_filter_atomic(const sim_conv_t *p, int algo, float alpha, const float *x,
                             const float *dy, float beta, float *dw, uint64_t seed)
{
    int N = p->x.n, H = p->x.h, W = p->x.w;
    int K = p->w.n, cpg = p->w.c, R = p->w.h, S = p->w.w, P = p->y.h, Q = p->y.w;
    int kpg = K / p->groups;
    int rows = algo == 0 ? 1 : 2;
    int bpi = (P + rows - 1) / rows; /* blocks per image */
    size_t units = (size_t)N * bpi, nel = (size_t)K * cpg * R * S;
    float *acc = calloc(nel ? nel : 1, sizeof(float));
    int *perm = malloc(sizeof(int) * (units ? units : 1));
    uint64_t st = seed;
    if (!acc || !perm) {
        free(acc);
        free(perm);
        return -ENOMEM;
    }
    permute(perm, (int)units, &st);
    for (size_t u = 0; u < units; u++) {
        int n = perm[u] / bpi, p0 = (perm[u] % bpi) * rows;
        int p1 = p0 + rows < P ? p0 + rows : P;
        size_t e = 0;
        for (int k = 0; k < K; k++) {
            int cbase = (k / kpg) * cpg;
            for (int c = 0; c < cpg; c++)
                for (int fr = 0; fr < R; fr++)
                    for (int fs = 0; fs < S; fs++, e++) {
                        int r = p->flip ? R - 1 - fr : fr, s = p->flip ? S - 1 - fs : fs;
                        float part = 0.0f;
                        for (int ow = 0; ow < Q; ow++) {
                            int ww = ow * p->str_w - p->pad_w + s * p->dil_w;
                            if (ww < 0 || ww >= W)
                                continue;
                            for (int oh = p0; oh < p1; oh++) {
                                int hh = oh * p->str_h - p->pad_h + r * p->dil_h;
                                if (hh < 0 || hh >= H)
                                    continue;
                                part += dy[off(&p->y, n, k, oh, ow)] *
                                        x[off(&p->x, n, cbase + c, hh, ww)];
                            }
                        }
                        acc[e] += part;
                    }
        }
    }
    size_t e = 0;
    for (int k = 0; k < K; k++)
        for (int c = 0; c < cpg; c++)
            for (int fr = 0; fr < R; fr++)
                for (int fs = 0; fs < S; fs++, e++)
                    blend(&dw[off(&p->w, k, c, fr, fs)], alpha, acc[e], beta);
    free(acc);
    free(perm);
    return 0;
}

int sim_conv_bwd_filter(const sim_conv_t *p, int algo, float alpha, const float *x,
                        const float *dy, float beta, float *dw, uint64_t seed)
{
    if (algo < 0 || algo >= SIM_BWD_FILTER_ALGOS)
        return -EINVAL;
    if (!sim_conv_algo_supported(SIM_DIR_BWD_FILTER, algo, p))
        return -ENOTSUP;
    if (algo == 0 || algo == 3)
        return bwd_filter_atomic(p, algo, alpha, x, dy, beta, dw, seed);
    int N = p->x.n, H = p->x.h, W = p->x.w;
    int K = p->w.n, cpg = p->w.c, R = p->w.h, S = p->w.w, P = p->y.h, Q = p->y.w;
    int kpg = K / p->groups;
    float *t = malloc(sizeof(float) * ((size_t)N * P * Q + 1));
    if (!t)
        return -ENOMEM;
    int order, scheme;
    sim_conv_fold_params(SIM_DIR_BWD_FILTER, algo, p->arch, &order, &scheme);
    (void)order;
    for (int k = 0; k < K; k++) {
        int cbase = (k / kpg) * cpg;
        for (int c = 0; c < cpg; c++)
            for (int fr = 0; fr < R; fr++)
                for (int fs = 0; fs < S; fs++) {
                    int r = p->flip ? R - 1 - fr : fr, s = p->flip ? S - 1 - fs : fs;
                    /* the valid output columns for this tap, once */
                    int q0 = 0, q1 = Q;
                    while (q0 < Q && q0 * p->str_w - p->pad_w + s * p->dil_w < 0)
                        q0++;
                    while (q1 > q0 && (q1 - 1) * p->str_w - p->pad_w + s * p->dil_w >= W)
                        q1--;
                    int64_t xw0 = (int64_t)(q0 * p->str_w - p->pad_w + s * p->dil_w) * p->x.sw;
                    int64_t xws = (int64_t)p->str_w * p->x.sw;
                    int nt = 0;
                    for (int n = 0; n < N; n++)
                        for (int oh = 0; oh < P; oh++) {
                            int hh = oh * p->str_h - p->pad_h + r * p->dil_h;
                            if (hh < 0 || hh >= H)
                                continue;
                            const float *dyr = dy + off(&p->y, n, k, oh, 0);
                            const float *xr = x + off(&p->x, n, cbase + c, hh, 0) + xw0;
                            for (int ow = q0; ow < q1; ow++)
                                t[nt++] = dyr[ow * p->y.sw] * xr[(ow - q0) * xws];
                        }
                    blend(&dw[off(&p->w, k, c, fr, fs)], alpha, reduce(t, nt, scheme), beta);
                }
    }
    free(t);
    return 0;
}

int sim_conv_bwd_bias(const sim_t4_t *dyv, const sim_t4_t *dbv, float alpha, const float *dy,
                      float beta, float *db)
{
    for (int k = 0; k < dyv->c; k++) {
        float s = 0.0f;
        for (int n = 0; n < dyv->n; n++)
            for (int h = 0; h < dyv->h; h++)
                for (int w = 0; w < dyv->w; w++)
                    s += dy[off(dyv, n, k, h, w)];
        blend(&db[off(dbv, 0, k, 0, 0)], alpha, s, beta);
    }
    return 0;
}

/* ---- pooling --------------------------------------------------------------- */

enum { POOL_MAX = 0, POOL_AVG_INC = 1, POOL_AVG_EXC = 2, POOL_MAX_DET = 3 };

/* Index (h * W + w) of the window's maximum in plane (n, c) of x, first in
 * scan order; NaN wins when propagated. -1 if the window holds no element. */
static int window_argmax(const sim_pool_t *p, const float *x, int n, int c, int oh, int ow)
{
    int best = -1;
    float m = 0.0f;
    for (int i = 0; i < p->win_h; i++) {
        int hh = oh * p->str_h - p->pad_h + i;
        if (hh < 0 || hh >= p->x.h)
            continue;
        for (int j = 0; j < p->win_w; j++) {
            int ww = ow * p->str_w - p->pad_w + j;
            if (ww < 0 || ww >= p->x.w)
                continue;
            float v = x[off(&p->x, n, c, hh, ww)];
            if (isnan(v)) {
                if (p->nan_prop)
                    return hh * p->x.w + ww;
                continue;
            }
            if (best < 0 || v > m) {
                best = hh * p->x.w + ww;
                m = v;
            }
        }
    }
    return best;
}

int sim_pool_fwd(const sim_pool_t *p, float alpha, const float *x, float beta, float *y)
{
    for (int n = 0; n < p->y.n; n++)
        for (int c = 0; c < p->y.c; c++)
            for (int oh = 0; oh < p->y.h; oh++)
                for (int ow = 0; ow < p->y.w; ow++) {
                    float v;
                    if (p->mode == POOL_MAX || p->mode == POOL_MAX_DET) {
                        int a = window_argmax(p, x, n, c, oh, ow);
                        v = a < 0 ? -INFINITY : x[off(&p->x, n, c, a / p->x.w, a % p->x.w)];
                    } else {
                        float s = 0.0f;
                        int cnt = 0;
                        for (int i = 0; i < p->win_h; i++) {
                            int hh = oh * p->str_h - p->pad_h + i;
                            if (hh < 0 || hh >= p->x.h)
                                continue;
                            for (int j = 0; j < p->win_w; j++) {
                                int ww = ow * p->str_w - p->pad_w + j;
                                if (ww < 0 || ww >= p->x.w)
                                    continue;
                                s += x[off(&p->x, n, c, hh, ww)];
                                cnt++;
                            }
                        }
                        int div = p->mode == POOL_AVG_INC ? p->win_h * p->win_w : cnt;
                        v = div ? s / (float)div : 0.0f;
                    }
                    blend(&y[off(&p->y, n, c, oh, ow)], alpha, v, beta);
                }
    return 0;
}

int sim_pool_bwd(const sim_pool_t *p, const sim_t4_t *dyv, const sim_t4_t *dxv, float alpha,
                 const float *y, const float *dy, const float *x, float beta, float *dx,
                 uint64_t seed)
{
    (void)y; /* the argmax is found in x, as y holds the same values */
    int H = p->x.h, W = p->x.w, P = p->y.h, Q = p->y.w;
    size_t plane = (size_t)H * W, wins = (size_t)P * Q;
    float *acc = malloc(sizeof(float) * (plane ? plane : 1));
    int *order = malloc(sizeof(int) * (wins ? wins : 1));
    uint64_t st = seed;
    if (!acc || !order) {
        free(acc);
        free(order);
        return -ENOMEM;
    }
    for (int n = 0; n < p->x.n; n++)
        for (int c = 0; c < p->x.c; c++) {
            memset(acc, 0, plane * sizeof(float));
            if (p->mode == POOL_MAX) /* float atomics: window order varies per call */
                permute(order, (int)wins, &st);
            else
                for (size_t i = 0; i < wins; i++)
                    order[i] = (int)i;
            for (size_t i = 0; i < wins; i++) {
                int oh = order[i] / Q, ow = order[i] % Q;
                float g = dy[off(dyv, n, c, oh, ow)];
                if (p->mode == POOL_MAX || p->mode == POOL_MAX_DET) {
                    int a = window_argmax(p, x, n, c, oh, ow);
                    if (a >= 0)
                        acc[a] += g;
                    continue;
                }
                int cnt = 0;
                if (p->mode == POOL_AVG_INC) {
                    cnt = p->win_h * p->win_w;
                } else {
                    for (int ii = 0; ii < p->win_h; ii++) {
                        int hh = oh * p->str_h - p->pad_h + ii;
                        for (int j = 0; j < p->win_w; j++) {
                            int ww = ow * p->str_w - p->pad_w + j;
                            cnt += hh >= 0 && hh < H && ww >= 0 && ww < W;
                        }
                    }
                }
                if (!cnt)
                    continue;
                float share = g / (float)cnt;
                for (int ii = 0; ii < p->win_h; ii++) {
                    int hh = oh * p->str_h - p->pad_h + ii;
                    if (hh < 0 || hh >= H)
                        continue;
                    for (int j = 0; j < p->win_w; j++) {
                        int ww = ow * p->str_w - p->pad_w + j;
                        if (ww >= 0 && ww < W)
                            acc[hh * W + ww] += share;
                    }
                }
            }
            for (int hh = 0; hh < H; hh++)
                for (int ww = 0; ww < W; ww++)
                    blend(&dx[off(dxv, n, c, hh, ww)], alpha, acc[hh * W + ww], beta);
        }
    free(acc);
    free(order);
    return 0;
}

/* ---- activations ------------------------------------------------------------ */

enum { ACT_SIGMOID = 0, ACT_RELU = 1, ACT_TANH = 2, ACT_CLIPPED = 3, ACT_ELU = 4,
       ACT_IDENTITY = 5 };


int sim_act_fwd(int mode, double coef, const sim_t4_t *xv, const sim_t4_t *yv, float alpha,
                const float *x, float beta, float *y)
{
    for (int n = 0; n < xv->n; n++)
        for (int c = 0; c < xv->c; c++)
            for (int h = 0; h < xv->h; h++)
                for (int w = 0; w < xv->w; w++) {
                    float v = x[off(xv, n, c, h, w)], r;
                    switch (mode) {
                    case ACT_SIGMOID: r = 1.0f / (1.0f + expf(-v)); break;
                    case ACT_RELU: r = v > 0.0f ? v : (isnan(v) ? v : 0.0f); break;
                    case ACT_TANH: r = tanhf(v); break;
                    case ACT_CLIPPED: r = fminf(fmaxf(v, 0.0f), (float)coef); break;
                    case ACT_ELU: r = v > 0.0f ? v : (float)coef * expm1f(v); break;
                    default: r = v; break;
                    }
                    blend(&y[off(yv, n, c, h, w)], alpha, r, beta);
                }
    return 0;
}

int sim_act_bwd(int mode, double coef, const sim_t4_t *yv, const sim_t4_t *dyv,
                const sim_t4_t *xv, const sim_t4_t *dxv, float alpha, const float *y,
                const float *dy, const float *x, float beta, float *dx)
{
    for (int n = 0; n < xv->n; n++)
        for (int c = 0; c < xv->c; c++)
            for (int h = 0; h < xv->h; h++)
                for (int w = 0; w < xv->w; w++) {
                    float g = dy[off(dyv, n, c, h, w)], yy = y[off(yv, n, c, h, w)];
                    float xx = x[off(xv, n, c, h, w)], r;
                    switch (mode) {
                    case ACT_SIGMOID: r = g * yy * (1.0f - yy); break;
                    case ACT_RELU: r = xx > 0.0f ? g : 0.0f; break;
                    case ACT_TANH: r = g * (1.0f - yy * yy); break;
                    case ACT_CLIPPED: r = xx > 0.0f && xx < (float)coef ? g : 0.0f; break;
                    case ACT_ELU: r = xx > 0.0f ? g : g * (yy + (float)coef); break;
                    default: r = g; break;
                    }
                    blend(&dx[off(dxv, n, c, h, w)], alpha, r, beta);
                }
    return 0;
}

int sim_add_tensor(const sim_t4_t *av, const sim_t4_t *cv, float alpha, const float *a,
                   float beta, float *c)
{
    for (int n = 0; n < cv->n; n++)
        for (int ch = 0; ch < cv->c; ch++)
            for (int h = 0; h < cv->h; h++)
                for (int w = 0; w < cv->w; w++) {
                    float v = a[off(av, av->n == 1 ? 0 : n, av->c == 1 ? 0 : ch,
                                    av->h == 1 ? 0 : h, av->w == 1 ? 0 : w)];
                    blend(&c[off(cv, n, ch, h, w)], alpha, v, beta);
                }
    return 0;
}

int sim_set_tensor(const sim_t4_t *yv, float value, float *y)
{
    for (int n = 0; n < yv->n; n++)
        for (int c = 0; c < yv->c; c++)
            for (int h = 0; h < yv->h; h++)
                for (int w = 0; w < yv->w; w++)
                    y[off(yv, n, c, h, w)] = value;
    return 0;
}

int sim_scale_tensor(const sim_t4_t *yv, float alpha, float *y)
{
    for (int n = 0; n < yv->n; n++)
        for (int c = 0; c < yv->c; c++)
            for (int h = 0; h < yv->h; h++)
                for (int w = 0; w < yv->w; w++)
                    y[off(yv, n, c, h, w)] *= alpha;
    return 0;
}
