/* simcuda cuDNN's kernels, single source (sim/cucpu): nvcc builds the
 * fatbin embedded in libcudnn.so.9 (loaded per context with
 * cuModuleLoadData), the host compiler the twin library simcuda runs them
 * from. The library reads no device memory itself.
 *
 * Orders (kern.c is the plain-C reference the tests compare with, bit for
 * bit, for every deterministic kernel):
 *   - every output element of a deterministic convolution is one thread: it
 *     generates its products in the algorithm's order (forward and
 *     backward data: channel-major or tap-major; backward filter: n, p, q)
 *     and folds them with the algorithm's scheme for the architecture
 *     (sequential, reversed, 2 or 4 interleaved lanes, pairwise tree,
 *     blocks of 8 or 16); out = alpha * sum + beta * out (beta == 0: out not
 *     read);
 *   - the algorithms NVIDIA documents as nondeterministic (backward filter
 *     ALGO_0 and ALGO_3, backward data ALGO_0, max-pooling backward) first
 *     scale the output by beta (a kernel of its own), then add alpha *
 *     partial with float atomicAdd: the order of the additions is the
 *     thread schedule's, different from launch to launch;
 *   - the backend's fp16 / bf16 <-> fp32 conversion is elementwise
 *     (backend_kernels.h: exact widening, one rounding to nearest even).
 */
#include "sim/cucpu/cucpu.h"

#include "sim/cudnn/backend_kernels.h"
#include "sim/cudnn/kern.h"
#include "sim/cudnn/kparams.h"

/* ---- helpers ------------------------------------------------------------------------ */

static __device__ __forceinline__ long long off(const sim_t4_t &t, long long n, long long c,
                                                long long h, long long w)
{
    return n * t.sn + c * t.sc + h * t.sh + w * t.sw;
}

static __device__ __forceinline__ void blend(float *out, float alpha, float v, float beta)
{
    *out = beta == 0.0f ? __fmul_rn(alpha, v) : __fadd_rn(__fmul_rn(alpha, v), __fmul_rn(beta, *out));
}

static __device__ __forceinline__ long long gtid(void)
{
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}

static __device__ __forceinline__ long long gstride(void)
{
    return (long long)gridDim.x * blockDim.x;
}

/* The n terms term(0), ..., term(n-1) folded with `scheme` (kern.h's
 * SIM_RED_*): the additions of kern.c's reduce(), computed as the terms
 * are generated (a pairwise tree by a binary counter, which adds the same
 * pairs). */
template <typename F> static __device__ __forceinline__ float fold(int scheme, long long n, F term)
{
    float s = 0.0f;
    switch (scheme) {
    case SIM_RED_REV:
        for (long long i = n - 1; i >= 0; i--)
            s = __fadd_rn(s, term(i));
        return s;
    case SIM_RED_L2:
    case SIM_RED_L4: {
        int lanes = scheme == SIM_RED_L2 ? 2 : 4;
        float lane[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (long long i = 0; i < n; i++)
            lane[i % lanes] = __fadd_rn(lane[i % lanes], term(i));
        for (int l = 0; l < lanes; l++)
            s = __fadd_rn(s, lane[l]);
        return s;
    }
    case SIM_RED_PAIR: {
        float val[64];
        long long size[64];
        int top = 0;
        for (long long i = 0; i < n; i++) {
            val[top] = term(i);
            size[top++] = 1;
            while (top >= 2 && size[top - 1] == size[top - 2]) {
                val[top - 2] = __fadd_rn(val[top - 2], val[top - 1]);
                size[top - 2] *= 2;
                top--;
            }
        }
        if (top == 0)
            return 0.0f;
        s = val[--top];
        while (top > 0) {
            top--;
            s = __fadd_rn(val[top], s);
        }
        return s;
    }
    case SIM_RED_B8:
    case SIM_RED_B16: {
        long long bs = scheme == SIM_RED_B8 ? 8 : 16;
        for (long long i = 0; i < n; i += bs) {
            float b = 0.0f;
            for (long long j = i; j < n && j < i + bs; j++)
                b = __fadd_rn(b, term(j));
            s = __fadd_rn(s, b);
        }
        return s;
    }
    default: /* SIM_RED_SEQ */
        for (long long i = 0; i < n; i++)
            s = __fadd_rn(s, term(i));
        return s;
    }
}

/* ---- convolution forward ------------------------------------------------------------- */

/* One thread per y element (n, k, oh, ow). order 0: channel-major (c, then
 * the valid taps in (r, s) order), 1: tap-major. */
extern "C" __global__ void simcudnn_conv_fwd(sim_conv_t p, int order, int scheme, float alpha,
                                             float beta, const float *x, const float *w, float *y)
{
    int K = p.w.n, cpg = p.w.c, R = p.w.h, S = p.w.w, H = p.x.h, W = p.x.w, P = p.y.h, Q = p.y.w;
    int kpg = K / p.groups;
    long long total = (long long)p.x.n * K * P * Q;
    for (long long e = gtid(); e < total; e += gstride()) {
        int ow = (int)(e % Q), oh = (int)(e / Q % P), k = (int)(e / ((long long)P * Q) % K);
        int n = (int)(e / ((long long)P * Q * K));
        long long xo[SIMCUDNN_MAX_TAPS], wo[SIMCUDNN_MAX_TAPS];
        int h0 = oh * p.str_h - p.pad_h, w0 = ow * p.str_w - p.pad_w, m = 0;
        for (int r = 0; r < R; r++) {
            int hh = h0 + r * p.dil_h;
            if (hh < 0 || hh >= H)
                continue;
            int fr = p.flip ? R - 1 - r : r;
            for (int s = 0; s < S; s++) {
                int ww = w0 + s * p.dil_w;
                if (ww < 0 || ww >= W)
                    continue;
                int fs = p.flip ? S - 1 - s : s;
                xo[m] = hh * p.x.sh + ww * p.x.sw;
                wo[m++] = fr * p.w.sh + fs * p.w.sw;
            }
        }
        const float *xn = x + n * p.x.sn + (long long)((k / kpg) * cpg) * p.x.sc;
        const float *wk = w + k * p.w.sn;
        long long nt = (long long)cpg * m;
        auto at = [&](long long c, long long i) {
            return __fmul_rn(xn[c * p.x.sc + xo[i]], wk[c * p.w.sc + wo[i]]);
        };
        auto term = [&](long long t) {
            return order == 0 ? at(t / m, t % m) : at(t % cpg, t / cpg);
        };
        /* the same terms with 32-bit index arithmetic where it fits (a
         * 64-bit division costs the CPU twin several times a 32-bit one) */
        auto term32 = [&](long long t) {
            unsigned u = (unsigned)t, um = (unsigned)m, uc = (unsigned)cpg;
            return order == 0 ? at(u / um, u % um) : at(u % uc, u / uc);
        };
        float v = nt <= 0xffffffffLL ? fold(scheme, nt, term32) : fold(scheme, nt, term);
        blend(&y[off(p.y, n, k, oh, ow)], alpha, v, beta);
    }
}
CUCPU_EXPORT(simcudnn_conv_fwd)

/* ---- convolution backward data ----------------------------------------------------------- */

/* Deterministic algorithms: one thread per dx element (n, ca, hh, ww); the
 * valid taps (those whose output position exists) in (r, s) order; order
 * 0: each output channel k of the group in turn over the taps, 1: the taps,
 * each over the group's k. */
extern "C" __global__ void simcudnn_conv_bwd_data(sim_conv_t p, int order, int scheme, float alpha,
                                                  float beta, const float *w, const float *dy,
                                                  float *dx)
{
    int C = p.x.c, H = p.x.h, W = p.x.w, K = p.w.n, cpg = p.w.c, R = p.w.h, S = p.w.w;
    int P = p.y.h, Q = p.y.w, kpg = K / p.groups;
    long long total = (long long)p.x.n * C * H * W;
    for (long long e = gtid(); e < total; e += gstride()) {
        int ww = (int)(e % W), hh = (int)(e / W % H), ca = (int)(e / ((long long)W * H) % C);
        int n = (int)(e / ((long long)W * H * C));
        int g = ca / cpg, c = ca % cpg;
        int toh[SIMCUDNN_MAX_TAPS], tow[SIMCUDNN_MAX_TAPS], tfr[SIMCUDNN_MAX_TAPS],
            tfs[SIMCUDNN_MAX_TAPS];
        int m = 0;
        for (int r = 0; r < R; r++) {
            int nh = hh + p.pad_h - r * p.dil_h;
            if (nh < 0 || nh % p.str_h)
                continue;
            int oh = nh / p.str_h;
            if (oh >= P)
                continue;
            for (int s = 0; s < S; s++) {
                int nw = ww + p.pad_w - s * p.dil_w;
                if (nw < 0 || nw % p.str_w)
                    continue;
                int ow = nw / p.str_w;
                if (ow >= Q)
                    continue;
                toh[m] = oh;
                tow[m] = ow;
                tfr[m] = p.flip ? R - 1 - r : r;
                tfs[m++] = p.flip ? S - 1 - s : s;
            }
        }
        long long nt = (long long)kpg * m;
        float v = fold(scheme, nt, [&](long long t) {
            long long kk = order == 0 ? t / m : t % kpg;
            long long i = order == 0 ? t % m : t / kpg;
            int k = g * kpg + (int)kk;
            return __fmul_rn(dy[off(p.y, n, k, toh[i], tow[i])], w[off(p.w, k, c, tfr[i], tfs[i])]);
        });
        blend(&dx[off(p.x, n, ca, hh, ww)], alpha, v, beta);
    }
}
CUCPU_EXPORT(simcudnn_conv_bwd_data)

/* ALGO_0 (nondeterministic): one thread per dy element scatters
 * alpha * dy * w into every dx element it touches with float atomics
 * (dx was scaled by beta before). */
extern "C" __global__ void simcudnn_conv_bwd_data_atomic(sim_conv_t p, float alpha,
                                                         const float *w, const float *dy,
                                                         float *dx)
{
    int H = p.x.h, W = p.x.w, K = p.w.n, cpg = p.w.c, R = p.w.h, S = p.w.w;
    int P = p.y.h, Q = p.y.w, kpg = K / p.groups;
    long long total = (long long)p.x.n * K * P * Q;
    for (long long e = gtid(); e < total; e += gstride()) {
        int ow = (int)(e % Q), oh = (int)(e / Q % P), k = (int)(e / ((long long)P * Q) % K);
        int n = (int)(e / ((long long)P * Q * K));
        float g = dy[off(p.y, n, k, oh, ow)];
        int cbase = (k / kpg) * cpg;
        for (int c = 0; c < cpg; c++)
            for (int r = 0; r < R; r++) {
                int hh = oh * p.str_h - p.pad_h + r * p.dil_h;
                if (hh < 0 || hh >= H)
                    continue;
                int fr = p.flip ? R - 1 - r : r;
                for (int s = 0; s < S; s++) {
                    int ww = ow * p.str_w - p.pad_w + s * p.dil_w;
                    if (ww < 0 || ww >= W)
                        continue;
                    int fs = p.flip ? S - 1 - s : s;
                    atomicAdd(&dx[off(p.x, n, cbase + c, hh, ww)],
                              __fmul_rn(alpha, __fmul_rn(g, w[off(p.w, k, c, fr, fs)])));
                }
            }
    }
}
CUCPU_EXPORT(simcudnn_conv_bwd_data_atomic)

/* ---- convolution backward filter ----------------------------------------------------------- */

/* The output rows [*p0, *p1) and columns [*q0, *q1) a filter tap (r, s)
 * reaches inside x (contiguous: the input position grows with the output
 * one). */
static __device__ __forceinline__ void tap_range(const sim_conv_t &p, int r, int s, int *p0,
                                                 int *p1, int *q0, int *q1)
{
    int P = p.y.h, Q = p.y.w;
    *p0 = 0;
    *p1 = P;
    while (*p0 < P && *p0 * p.str_h - p.pad_h + r * p.dil_h < 0)
        (*p0)++;
    while (*p1 > *p0 && (*p1 - 1) * p.str_h - p.pad_h + r * p.dil_h >= p.x.h)
        (*p1)--;
    *q0 = 0;
    *q1 = Q;
    while (*q0 < Q && *q0 * p.str_w - p.pad_w + s * p.dil_w < 0)
        (*q0)++;
    while (*q1 > *q0 && (*q1 - 1) * p.str_w - p.pad_w + s * p.dil_w >= p.x.w)
        (*q1)--;
}

/* Deterministic algorithms: one thread per dw element (k, c, fr, fs): the
 * products dy * x over (n, p, q) ascending, folded with the scheme. */
extern "C" __global__ void simcudnn_conv_bwd_filter(sim_conv_t p, int scheme, float alpha,
                                                    float beta, const float *x, const float *dy,
                                                    float *dw)
{
    int K = p.w.n, cpg = p.w.c, R = p.w.h, S = p.w.w, kpg = K / p.groups;
    long long total = (long long)K * cpg * R * S;
    for (long long e = gtid(); e < total; e += gstride()) {
        int fs = (int)(e % S), fr = (int)(e / S % R), c = (int)(e / ((long long)S * R) % cpg);
        int k = (int)(e / ((long long)S * R * cpg));
        int r = p.flip ? R - 1 - fr : fr, s = p.flip ? S - 1 - fs : fs;
        int cbase = (k / kpg) * cpg, p0, p1, q0, q1;
        tap_range(p, r, s, &p0, &p1, &q0, &q1);
        long long np = p1 - p0, nq = q1 - q0, nt = (long long)p.x.n * np * nq;
        auto at = [&](long long n, long long oh, long long ow) {
            long long hh = oh * p.str_h - p.pad_h + (long long)r * p.dil_h;
            long long ww = ow * p.str_w - p.pad_w + (long long)s * p.dil_w;
            return __fmul_rn(dy[off(p.y, n, k, oh, ow)], x[off(p.x, n, cbase + c, hh, ww)]);
        };
        auto term = [&](long long t) {
            long long n = t / (np * nq), rem = t - n * np * nq;
            return at(n, p0 + rem / nq, q0 + rem % nq);
        };
        /* the same terms with 32-bit index arithmetic where it fits */
        auto term32 = [&](long long t) {
            unsigned u = (unsigned)t, pq = (unsigned)(np * nq), uq = (unsigned)nq;
            unsigned n = u / pq, rem = u - n * pq;
            return at(n, p0 + rem / uq, q0 + rem % uq);
        };
        float v = nt <= 0xffffffffLL ? fold(scheme, nt, term32) : fold(scheme, nt, term);
        blend(&dw[off(p.w, k, c, fr, fs)], alpha, v, beta);
    }
}
CUCPU_EXPORT(simcudnn_conv_bwd_filter)

/* ALGO_0 (rows = 1) and ALGO_3 (rows = 2), nondeterministic: one thread per
 * (slice of `rows` output rows of an image, dw element) sums its slice
 * (q-major) and adds alpha * partial into dw with float atomics (dw was
 * scaled by beta before). */
extern "C" __global__ void simcudnn_conv_bwd_filter_atomic(sim_conv_t p, int rows, float alpha,
                                                           const float *x, const float *dy,
                                                           float *dw)
{
    int H = p.x.h, W = p.x.w, K = p.w.n, cpg = p.w.c, R = p.w.h, S = p.w.w;
    int P = p.y.h, Q = p.y.w, kpg = K / p.groups;
    long long nel = (long long)K * cpg * R * S;
    int bpi = (P + rows - 1) / rows;
    long long total = (long long)p.x.n * bpi * nel;
    for (long long t = gtid(); t < total; t += gstride()) {
        long long e = t % nel, u = t / nel;
        int n = (int)(u / bpi), pr0 = (int)(u % bpi) * rows;
        int pr1 = pr0 + rows < P ? pr0 + rows : P;
        int fs = (int)(e % S), fr = (int)(e / S % R), c = (int)(e / ((long long)S * R) % cpg);
        int k = (int)(e / ((long long)S * R * cpg));
        int r = p.flip ? R - 1 - fr : fr, s = p.flip ? S - 1 - fs : fs;
        int cbase = (k / kpg) * cpg;
        float part = 0.0f;
        for (int ow = 0; ow < Q; ow++) {
            int ww = ow * p.str_w - p.pad_w + s * p.dil_w;
            if (ww < 0 || ww >= W)
                continue;
            for (int oh = pr0; oh < pr1; oh++) {
                int hh = oh * p.str_h - p.pad_h + r * p.dil_h;
                if (hh < 0 || hh >= H)
                    continue;
                part = __fadd_rn(part, __fmul_rn(dy[off(p.y, n, k, oh, ow)],
                                                 x[off(p.x, n, cbase + c, hh, ww)]));
            }
        }
        atomicAdd(&dw[off(p.w, k, c, fr, fs)], __fmul_rn(alpha, part));
    }
}
CUCPU_EXPORT(simcudnn_conv_bwd_filter_atomic)

/* db[k] (view dbv) = alpha * sum over n, h, w of dy (view dyv) + beta * db,
 * one thread per k, n, h, w ascending. */
extern "C" __global__ void simcudnn_bwd_bias(sim_t4_t dyv, sim_t4_t dbv, float alpha, float beta,
                                             const float *dy, float *db)
{
    for (long long k = gtid(); k < dyv.c; k += gstride()) {
        float s = 0.0f;
        for (int n = 0; n < dyv.n; n++)
            for (int h = 0; h < dyv.h; h++)
                for (int w = 0; w < dyv.w; w++)
                    s = __fadd_rn(s, dy[off(dyv, n, k, h, w)]);
        blend(&db[off(dbv, 0, k, 0, 0)], alpha, s, beta);
    }
}
CUCPU_EXPORT(simcudnn_bwd_bias)

/* ---- elementwise ---------------------------------------------------------------------------- */

/* Over every element of view v (n, c, h, w order): mode SIMCUDNN_FILL_SET
 * y = value; SIMCUDNN_FILL_SCALE y = y * value; SIMCUDNN_FILL_BETA y =
 * value == 0 ? 0 : value * y (the beta of an accumulation to come). */
extern "C" __global__ void simcudnn_fill(sim_t4_t v, int mode, float value, float *y)
{
    long long total = (long long)v.n * v.c * v.h * v.w;
    for (long long e = gtid(); e < total; e += gstride()) {
        int w = (int)(e % v.w), h = (int)(e / v.w % v.h), c = (int)(e / ((long long)v.w * v.h) % v.c);
        int n = (int)(e / ((long long)v.w * v.h * v.c));
        float *yy = &y[off(v, n, c, h, w)];
        if (mode == SIMCUDNN_FILL_SET)
            *yy = value;
        else if (mode == SIMCUDNN_FILL_SCALE)
            *yy = __fmul_rn(*yy, value);
        else
            *yy = value == 0.0f ? 0.0f : __fmul_rn(value, *yy);
    }
}
CUCPU_EXPORT(simcudnn_fill)

/* c = alpha * a + beta * c, a broadcast along its dimensions of size 1. */
extern "C" __global__ void simcudnn_add(sim_t4_t av, sim_t4_t cv, float alpha, float beta,
                                        const float *a, float *c)
{
    long long total = (long long)cv.n * cv.c * cv.h * cv.w;
    for (long long e = gtid(); e < total; e += gstride()) {
        int w = (int)(e % cv.w), h = (int)(e / cv.w % cv.h),
            ch = (int)(e / ((long long)cv.w * cv.h) % cv.c);
        int n = (int)(e / ((long long)cv.w * cv.h * cv.c));
        float v = a[off(av, av.n == 1 ? 0 : n, av.c == 1 ? 0 : ch, av.h == 1 ? 0 : h,
                        av.w == 1 ? 0 : w)];
        blend(&c[off(cv, n, ch, h, w)], alpha, v, beta);
    }
}
CUCPU_EXPORT(simcudnn_add)

static __device__ __forceinline__ int is_nan(float v)
{
    return v != v;
}

/* Activations (cudnnActivationMode_t: sigmoid, relu, tanh, clipped relu,
 * elu, identity). */
extern "C" __global__ void simcudnn_act_fwd(int mode, double coef, sim_t4_t xv, sim_t4_t yv,
                                            float alpha, float beta, const float *x, float *y)
{
    long long total = (long long)xv.n * xv.c * xv.h * xv.w;
    for (long long e = gtid(); e < total; e += gstride()) {
        int w = (int)(e % xv.w), h = (int)(e / xv.w % xv.h),
            c = (int)(e / ((long long)xv.w * xv.h) % xv.c);
        int n = (int)(e / ((long long)xv.w * xv.h * xv.c));
        float v = x[off(xv, n, c, h, w)], r;
        switch (mode) {
        case 0: r = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-v))); break;
        case 1: r = v > 0.0f ? v : (is_nan(v) ? v : 0.0f); break;
        case 2: r = tanhf(v); break;
        case 3: r = fminf(fmaxf(v, 0.0f), (float)coef); break;
        case 4: r = v > 0.0f ? v : __fmul_rn((float)coef, expm1f(v)); break;
        default: r = v; break;
        }
        blend(&y[off(yv, n, c, h, w)], alpha, r, beta);
    }
}
CUCPU_EXPORT(simcudnn_act_fwd)

extern "C" __global__ void simcudnn_act_bwd(int mode, double coef, sim_t4_t yv, sim_t4_t dyv,
                                            sim_t4_t xv, sim_t4_t dxv, float alpha, float beta,
                                            const float *y, const float *dy, const float *x,
                                            float *dx)
{
    long long total = (long long)xv.n * xv.c * xv.h * xv.w;
    for (long long e = gtid(); e < total; e += gstride()) {
        int w = (int)(e % xv.w), h = (int)(e / xv.w % xv.h),
            c = (int)(e / ((long long)xv.w * xv.h) % xv.c);
        int n = (int)(e / ((long long)xv.w * xv.h * xv.c));
        float g = dy[off(dyv, n, c, h, w)], yy = y[off(yv, n, c, h, w)];
        float xx = x[off(xv, n, c, h, w)], r;
        switch (mode) {
        case 0: r = __fmul_rn(__fmul_rn(g, yy), __fsub_rn(1.0f, yy)); break;
        case 1: r = xx > 0.0f ? g : 0.0f; break;
        case 2: r = __fmul_rn(g, __fsub_rn(1.0f, __fmul_rn(yy, yy))); break;
        case 3: r = xx > 0.0f && xx < (float)coef ? g : 0.0f; break;
        case 4: r = xx > 0.0f ? g : __fmul_rn(g, __fadd_rn(yy, (float)coef)); break;
        default: r = g; break;
        }
        blend(&dx[off(dxv, n, c, h, w)], alpha, r, beta);
    }
}
CUCPU_EXPORT(simcudnn_act_bwd)

/* ---- pooling --------------------------------------------------------------------------------- */

/* Index (h * W + w) of the window's maximum in plane (n, c) of x, first in
 * scan order; NaN wins when propagated. -1 if the window holds no element. */
static __device__ int window_argmax(const sim_pool_t &p, const float *x, int n, int c, int oh,
                                    int ow)
{
    int best = -1;
    float m = 0.0f;
    for (int i = 0; i < p.win_h; i++) {
        int hh = oh * p.str_h - p.pad_h + i;
        if (hh < 0 || hh >= p.x.h)
            continue;
        for (int j = 0; j < p.win_w; j++) {
            int ww = ow * p.str_w - p.pad_w + j;
            if (ww < 0 || ww >= p.x.w)
                continue;
            float v = x[off(p.x, n, c, hh, ww)];
            if (is_nan(v)) {
                if (p.nan_prop)
                    return hh * p.x.w + ww;
                continue;
            }
            if (best < 0 || v > m) {
                best = hh * p.x.w + ww;
                m = v;
            }
        }
    }
    return best;
}

enum { POOL_MAX = 0, POOL_AVG_INC = 1, POOL_AVG_EXC = 2, POOL_MAX_DET = 3 };

/* Elements of window (oh, ow) inside x (the divisor of excluding-padding
 * average pooling). */
static __device__ __forceinline__ int window_count(const sim_pool_t &p, int oh, int ow)
{
    int cnt = 0;
    for (int i = 0; i < p.win_h; i++) {
        int hh = oh * p.str_h - p.pad_h + i;
        for (int j = 0; j < p.win_w; j++) {
            int ww = ow * p.str_w - p.pad_w + j;
            cnt += hh >= 0 && hh < p.x.h && ww >= 0 && ww < p.x.w;
        }
    }
    return cnt;
}

extern "C" __global__ void simcudnn_pool_fwd(sim_pool_t p, float alpha, float beta,
                                             const float *x, float *y)
{
    long long total = (long long)p.y.n * p.y.c * p.y.h * p.y.w;
    for (long long e = gtid(); e < total; e += gstride()) {
        int ow = (int)(e % p.y.w), oh = (int)(e / p.y.w % p.y.h),
            c = (int)(e / ((long long)p.y.w * p.y.h) % p.y.c);
        int n = (int)(e / ((long long)p.y.w * p.y.h * p.y.c));
        float v;
        if (p.mode == POOL_MAX || p.mode == POOL_MAX_DET) {
            int a = window_argmax(p, x, n, c, oh, ow);
            v = a < 0 ? -INFINITY : x[off(p.x, n, c, a / p.x.w, a % p.x.w)];
        } else {
            float s = 0.0f;
            int cnt = 0;
            for (int i = 0; i < p.win_h; i++) {
                int hh = oh * p.str_h - p.pad_h + i;
                if (hh < 0 || hh >= p.x.h)
                    continue;
                for (int j = 0; j < p.win_w; j++) {
                    int ww = ow * p.str_w - p.pad_w + j;
                    if (ww < 0 || ww >= p.x.w)
                        continue;
                    s = __fadd_rn(s, x[off(p.x, n, c, hh, ww)]);
                    cnt++;
                }
            }
            int div = p.mode == POOL_AVG_INC ? p.win_h * p.win_w : cnt;
            v = div ? __fdiv_rn(s, (float)div) : 0.0f;
        }
        blend(&y[off(p.y, n, c, oh, ow)], alpha, v, beta);
    }
}
CUCPU_EXPORT(simcudnn_pool_fwd)

/* Backward of MAX_DETERMINISTIC and the averages: one thread per dx
 * element gathers the windows that cover it, in window order. */
extern "C" __global__ void simcudnn_pool_bwd(sim_pool_t p, sim_t4_t dyv, sim_t4_t dxv,
                                             float alpha, float beta, const float *dy,
                                             const float *x, float *dx)
{
    int H = p.x.h, W = p.x.w, P = p.y.h, Q = p.y.w;
    long long total = (long long)p.x.n * p.x.c * H * W;
    for (long long e = gtid(); e < total; e += gstride()) {
        int ww = (int)(e % W), hh = (int)(e / W % H), c = (int)(e / ((long long)W * H) % p.x.c);
        int n = (int)(e / ((long long)W * H * p.x.c));
        float acc = 0.0f;
        for (int oh = 0; oh < P; oh++) {
            int h0 = oh * p.str_h - p.pad_h;
            if (hh < h0 || hh >= h0 + p.win_h)
                continue;
            for (int ow = 0; ow < Q; ow++) {
                int w0 = ow * p.str_w - p.pad_w;
                if (ww < w0 || ww >= w0 + p.win_w)
                    continue;
                float g = dy[off(dyv, n, c, oh, ow)];
                if (p.mode == POOL_MAX || p.mode == POOL_MAX_DET) {
                    if (window_argmax(p, x, n, c, oh, ow) == hh * W + ww)
                        acc = __fadd_rn(acc, g);
                    continue;
                }
                int cnt = p.mode == POOL_AVG_INC ? p.win_h * p.win_w : window_count(p, oh, ow);
                if (cnt)
                    acc = __fadd_rn(acc, __fdiv_rn(g, (float)cnt));
            }
        }
        blend(&dx[off(dxv, n, c, hh, ww)], alpha, acc, beta);
    }
}
CUCPU_EXPORT(simcudnn_pool_bwd)

/* Backward of CUDNN_POOLING_MAX (nondeterministic): one thread per window
 * adds alpha * dy to its maximum's dx with float atomics (dx was scaled by
 * beta before). */
extern "C" __global__ void simcudnn_pool_bwd_atomic(sim_pool_t p, sim_t4_t dyv, sim_t4_t dxv,
                                                    float alpha, const float *dy, const float *x,
                                                    float *dx)
{
    long long total = (long long)p.y.n * p.y.c * p.y.h * p.y.w;
    for (long long e = gtid(); e < total; e += gstride()) {
        int ow = (int)(e % p.y.w), oh = (int)(e / p.y.w % p.y.h),
            c = (int)(e / ((long long)p.y.w * p.y.h) % p.y.c);
        int n = (int)(e / ((long long)p.y.w * p.y.h * p.y.c));
        int a = window_argmax(p, x, n, c, oh, ow);
        if (a >= 0)
            atomicAdd(&dx[off(dxv, n, c, a / p.x.w, a % p.x.w)],
                      __fmul_rn(alpha, dy[off(dyv, n, c, oh, ow)]));
    }
}
CUCPU_EXPORT(simcudnn_pool_bwd_atomic)

/* ---- the backend's 16-bit conversion ---------------------------------------------------- */

/* dst = src over a 4-d view, each side with its own strides and type
 * (backend_kernels.h), one thread per element. */
extern "C" __global__ void simcudnn_convert(simbk_convert_t a)
{
    for (long long e = gtid(); e < a.total; e += gstride())
        simbk_convert_elem(&a, e);
}
CUCPU_EXPORT(simcudnn_convert)
