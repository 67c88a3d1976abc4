/* C twins of examples/kernels.cu for simcuda: simcuda_twin_<kernel> runs one
 * whole launch on the CPU with the kernel's arithmetic order for the launch
 * configuration given (elementwise kernels: grid-stride loops, so every
 * element whenever the launch has a thread, each element independent of
 * the others; reductions: the same per-thread strides and shared-memory tree;
 * the float-atomic kernel: an accumulation order drawn from the launch's
 * nondet_seed, different from launch to launch as on a GPU).
 * Built with -ffp-contract=off into $(B)/sim/twins/libsimtwin_examples.so.
 */
#include "sim/include/simcuda_twin.h"
#include "examples/twins/es_kmath.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ES_MAX_BLOCK 1024

#define PARAM(L, i, type) (*(type *)(L)->params[(i)])

int simcuda_twin_es_bias_relu_dropout(const simcuda_launch_t *L);
int simcuda_twin_es_logits_bias(const simcuda_launch_t *L);
int simcuda_twin_es_softmax_xent(const simcuda_launch_t *L);
int simcuda_twin_es_stats_accum(const simcuda_launch_t *L);
int simcuda_twin_es_table_grad_atomic(const simcuda_launch_t *L);
int simcuda_twin_es_table_grad_det(const simcuda_launch_t *L);
int simcuda_twin_es_relu_dropout_bwd(const simcuda_launch_t *L);
int simcuda_twin_es_reduce_partial(const simcuda_launch_t *L);
int simcuda_twin_es_reduce_final(const simcuda_launch_t *L);
int simcuda_twin_es_sgd_momentum(const simcuda_launch_t *L);

/* Number of threads a 1-D launch runs (elementwise kernels guard i < n). */
static long long threads_1d(const simcuda_launch_t *L)
{
    return (long long)L->grid[0] * L->grid[1] * L->grid[2] * L->block[0] * L->block[1] *
           L->block[2];
}

/* Elements a grid-stride kernel processes: all n, if any thread runs. */
static long long covered(const simcuda_launch_t *L, long long n)
{
    return threads_1d(L) > 0 && n > 0 ? n : 0;
}

static int check_abi(const simcuda_launch_t *L)
{
    return L && L->abi == SIMCUDA_TWIN_ABI && L->params ? 0 : 1;
}

int simcuda_twin_es_bias_relu_dropout(const simcuda_launch_t *L)
{
    if (check_abi(L))
        return 1;
    float *h = PARAM(L, 0, float *);
    const float *bias = PARAM(L, 1, const float *);
    float *mask = PARAM(L, 2, float *);
    int rows = PARAM(L, 3, int), cols = PARAM(L, 4, int);
    float p = PARAM(L, 5, float), keep = PARAM(L, 6, float);
    uint32_t seed = PARAM(L, 7, uint32_t), first_row = PARAM(L, 8, uint32_t);
    uint32_t step = PARAM(L, 9, uint32_t);
    int train = PARAM(L, 10, int);
    if (cols <= 0 || rows < 0)
        return 1;
    long long n = covered(L, (long long)rows * cols);
    for (long long i = 0; i < n; i++) {
        float t = ES_FADD(h[i], bias[i % cols]);
        t = t > 0.0f ? t : 0.0f;
        if (train) {
            uint32_t gi = (uint32_t)((long long)first_row * cols + i);
            float m = es_dropout_mask(seed, step, gi, p, keep);
            mask[i] = m;
            t = ES_FMUL(t, m);
        }
        h[i] = t;
    }
    return 0;
}

int simcuda_twin_es_logits_bias(const simcuda_launch_t *L)
{
    if (check_abi(L))
        return 1;
    float *logits = PARAM(L, 0, float *);
    const float *bias = PARAM(L, 1, const float *);
    const float *table = PARAM(L, 2, const float *);
    const int *ids = PARAM(L, 3, const int *);
    int rows = PARAM(L, 4, int), cols = PARAM(L, 5, int), buckets = PARAM(L, 6, int);
    if (cols <= 0 || rows < 0)
        return 1;
    long long n = covered(L, (long long)rows * cols);
    for (long long i = 0; i < n; i++) {
        long long r = i / cols, c = i - r * cols;
        int id = ids[r];
        float t = id >= 0 && id < buckets ? table[(long long)id * cols + c] : 0.0f;
        logits[i] = ES_FADD(ES_FADD(logits[i], bias[c]), t);
    }
    return 0;
}

int simcuda_twin_es_softmax_xent(const simcuda_launch_t *L)
{
    if (check_abi(L))
        return 1;
    const float *logits = PARAM(L, 0, const float *);
    const int *labels = PARAM(L, 1, const int *);
    float *dlogits = PARAM(L, 2, float *);
    float *loss = PARAM(L, 3, float *);
    float *correct = PARAM(L, 4, float *);
    int rows = PARAM(L, 5, int), cols = PARAM(L, 6, int);
    float scale = PARAM(L, 7, float);
    if (cols <= 0 || rows < 0)
        return 1;
    long long nr = covered(L, rows);
    for (long long r = 0; r < nr; r++) {
        const float *z = logits + r * cols;
        int y = labels[r];
        if (y < 0 || y >= cols) {
            for (int c = 0; c < cols; c++)
                dlogits[r * cols + c] = 0.0f;
            loss[r] = 0.0f;
            correct[r] = 0.0f;
            continue;
        }
        float m = z[0];
        int arg = 0;
        for (int c = 1; c < cols; c++)
            if (z[c] > m) {
                m = z[c];
                arg = c;
            }
        float s = 0.0f;
        for (int c = 0; c < cols; c++)
            s = ES_FADD(s, es_exp(ES_FSUB(z[c], m)));
        for (int c = 0; c < cols; c++) {
            float sm = ES_FDIV(es_exp(ES_FSUB(z[c], m)), s);
            float d = c == y ? ES_FSUB(sm, 1.0f) : sm;
            dlogits[r * cols + c] = ES_FMUL(d, scale);
        }
        loss[r] = ES_FSUB(logf(s), ES_FSUB(z[y], m));
        correct[r] = arg == y ? 1.0f : 0.0f;
    }
    return 0;
}

int simcuda_twin_es_stats_accum(const simcuda_launch_t *L)
{
    if (check_abi(L))
        return 1;
    const float *loss = PARAM(L, 0, const float *);
    const float *correct = PARAM(L, 1, const float *);
    int rows = PARAM(L, 2, int);
    float *stats = PARAM(L, 3, float *);
    if (threads_1d(L) == 0)
        return 0;
    float l = stats[0], c = stats[1];
    for (int r = 0; r < rows; r++) {
        l = ES_FADD(l, loss[r]);
        c = ES_FADD(c, correct[r]);
    }
    stats[0] = l;
    stats[1] = c;
    stats[2] = ES_FADD(stats[2], (float)rows);
    return 0;
}

/* splitmix64: the per-launch order of the atomics. */
static uint64_t mix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int simcuda_twin_es_table_grad_atomic(const simcuda_launch_t *L)
{
    if (check_abi(L))
        return 1;
    const float *dlogits = PARAM(L, 0, const float *);
    const int *ids = PARAM(L, 1, const int *);
    float *dtable = PARAM(L, 2, float *);
    int rows = PARAM(L, 3, int), cols = PARAM(L, 4, int), buckets = PARAM(L, 5, int);
    if (cols <= 0 || rows < 0)
        return 1;
    long long n = covered(L, (long long)rows * cols);
    if (n == 0)
        return 0;
    /* The threads' atomic adds land in an order the scheduler decides: a
     * shuffle of the covered elements seeded by this launch. */
    long long *order = malloc((size_t)n * sizeof *order);
    if (!order)
        return 1;
    for (long long i = 0; i < n; i++)
        order[i] = i;
    uint64_t s = L->nondet_seed;
    for (long long i = n - 1; i > 0; i--) {
        long long j = (long long)(mix64(&s) % (uint64_t)(i + 1));
        long long t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (long long k = 0; k < n; k++) {
        long long i = order[k];
        long long r = i / cols, c = i - r * cols;
        int id = ids[r];
        if (id < 0 || id >= buckets)
            continue;
        float *dst = &dtable[(long long)id * cols + c];
        *dst = ES_FADD(*dst, dlogits[i]);
    }
    free(order);
    return 0;
}

int simcuda_twin_es_table_grad_det(const simcuda_launch_t *L)
{
    if (check_abi(L))
        return 1;
    const float *dlogits = PARAM(L, 0, const float *);
    const int *ids = PARAM(L, 1, const int *);
    float *dtable = PARAM(L, 2, float *);
    int rows = PARAM(L, 3, int), cols = PARAM(L, 4, int), buckets = PARAM(L, 5, int);
    if (cols <= 0 || rows < 0 || buckets < 0)
        return 1;
    long long n = covered(L, (long long)buckets * cols);
    for (long long i = 0; i < n; i++) {
        long long b = i / cols, c = i - b * cols;
        float acc = dtable[i];
        for (int r = 0; r < rows; r++)
            if (ids[r] == b)
                acc = ES_FADD(acc, dlogits[(long long)r * cols + c]);
        dtable[i] = acc;
    }
    return 0;
}

int simcuda_twin_es_relu_dropout_bwd(const simcuda_launch_t *L)
{
    if (check_abi(L))
        return 1;
    float *dh = PARAM(L, 0, float *);
    const float *h = PARAM(L, 1, const float *);
    const float *mask = PARAM(L, 2, const float *);
    int n = PARAM(L, 3, int);
    long long m = covered(L, n < 0 ? 0 : n);
    for (long long i = 0; i < m; i++)
        dh[i] = h[i] > 0.0f ? ES_FMUL(dh[i], mask[i]) : 0.0f;
    return 0;
}

/* The device's shared-memory tree over sh[0..bd), bd a power of two. */
static float block_tree(float *sh, unsigned bd)
{
    for (unsigned s = bd / 2; s > 0; s >>= 1)
        for (unsigned t = 0; t < s; t++)
            sh[t] = ES_FADD(sh[t], sh[t + s]);
    return sh[0];
}

static int block_ok(const simcuda_launch_t *L)
{
    unsigned bd = L->block[0];
    return bd > 0 && bd <= ES_MAX_BLOCK && (bd & (bd - 1)) == 0 && L->block[1] == 1 &&
           L->block[2] == 1;
}

int simcuda_twin_es_reduce_partial(const simcuda_launch_t *L)
{
    if (check_abi(L) || !block_ok(L))
        return 1;
    const float *x = PARAM(L, 0, const float *);
    float *partial = PARAM(L, 1, float *);
    int outer = PARAM(L, 2, int), channels = PARAM(L, 3, int), inner = PARAM(L, 4, int);
    if (outer < 0 || inner <= 0 || channels < 0)
        return 1;
    unsigned bd = L->block[0], nparts = L->grid[0];
    if (nparts == 0)
        return 0;
    long long n = (long long)outer * inner;
    long long chunk = (n + nparts - 1) / nparts;
    float sh[ES_MAX_BLOCK];
    for (unsigned k = 0; k < L->grid[1]; k++)
        for (unsigned p = 0; p < nparts; p++) {
            long long lo = (long long)p * chunk, hi = lo + chunk < n ? lo + chunk : n;
            for (unsigned t = 0; t < bd; t++) {
                float acc = 0.0f;
                for (long long i = lo + t; i < hi; i += bd) {
                    long long o = i / inner, s = i - o * inner;
                    acc = ES_FADD(acc, x[(o * channels + k) * inner + s]);
                }
                sh[t] = acc;
            }
            partial[(long long)k * nparts + p] = block_tree(sh, bd);
        }
    return 0;
}

int simcuda_twin_es_reduce_final(const simcuda_launch_t *L)
{
    if (check_abi(L) || !block_ok(L))
        return 1;
    const float *partial = PARAM(L, 0, const float *);
    float *out = PARAM(L, 1, float *);
    int nparts = PARAM(L, 2, int);
    unsigned bd = L->block[0];
    float sh[ES_MAX_BLOCK];
    for (unsigned k = 0; k < L->grid[0]; k++) {
        for (unsigned t = 0; t < bd; t++) {
            float acc = 0.0f;
            for (int j = (int)t; j < nparts; j += (int)bd)
                acc = ES_FADD(acc, partial[(long long)k * nparts + j]);
            sh[t] = acc;
        }
        out[k] = block_tree(sh, bd);
    }
    return 0;
}

int simcuda_twin_es_sgd_momentum(const simcuda_launch_t *L)
{
    if (check_abi(L))
        return 1;
    float *param = PARAM(L, 0, float *);
    const float *grad = PARAM(L, 1, const float *);
    float *buf = PARAM(L, 2, float *);
    int n = PARAM(L, 3, int);
    float lr = PARAM(L, 4, float), momentum = PARAM(L, 5, float);
    float wd = PARAM(L, 6, float), gscale = PARAM(L, 7, float);
    long long m = covered(L, n < 0 ? 0 : n);
    for (long long i = 0; i < m; i++) {
        float p = param[i];
        float g = ES_FADD(ES_FMUL(grad[i], gscale), ES_FMUL(wd, p));
        float b = ES_FADD(ES_FMUL(momentum, buf[i]), g);
        buf[i] = b;
        param[i] = ES_FSUB(p, ES_FMUL(lr, b));
    }
    return 0;
}
