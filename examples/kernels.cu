/* Device kernels of examples/train.py: the elementwise and reduction work a
 * framework does around its cuBLAS/cuDNN calls. Single source: nvcc builds
 * the fatbin train.py loads with cuModuleLoadData (SASS for every modelled
 * GPU, sim/cucpu/module.mk), and the host compiler builds the same kernels,
 * through the CUDA-on-CPU layer (sim/cucpu/cucpu.h), into the twin library
 * simcuda runs them from. Every kernel is extern "C" so its cubin symbol is
 * its name.
 *
 * Launch conventions (train.py): elementwise kernels one thread per element
 * with 256-thread blocks (grid-stride loops, so any 1-D grid is correct); the
 * reduction kernels one-thread blocks that sum in the order of a tree of vt
 * virtual threads (a parameter, a power of two: 128 in train.py);
 * es_reduce_partial's grid.x is sized from the device's SM count, as
 * framework reductions are. es_table_grad_atomic accumulates with
 * float atomics, so its bits vary from launch to launch on a GPU and on
 * simcuda alike; every other kernel is deterministic for a given launch
 * configuration.
 */
#include "sim/cucpu/cucpu.h"

#include "examples/es_kmath.h"

#define ES_MAX_BLOCK 1024

/* Grid-stride loops: every elementwise kernel covers all n elements for any
 * 1-D grid (train.py launches ceil(n / 256) blocks of 256, one element per
 * thread; a smaller grid, e.g. one capped at a multiple of the SM count,
 * stays correct). Element order does not matter to these kernels. */
#define ES_TID ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#define ES_NTHREADS ((long long)gridDim.x * blockDim.x)

/* The reduction kernels' tree needs a power of two of at most ES_MAX_BLOCK
 * virtual threads (their shared arrays are that big) and one-thread
 * blocks: anything else is a launch bug, so stop the kernel loudly (the
 * launch fails with an illegal-instruction error) rather than sum garbage. */
static __device__ __forceinline__ void es_check_tree(int vt)
{
    if (vt <= 0 || vt > ES_MAX_BLOCK || (vt & (vt - 1)) != 0 || blockDim.x != 1 ||
        blockDim.y != 1 || blockDim.z != 1)
        __trap();
}

/* h[r, c] = dropout(relu(h[r, c] + bias[c])); mask[r, c] receives the
 * multiplier (0 or 1/(1-p)) for the backward pass. train == 0: no dropout.
 * Each rank draws its own mask on its device from the counter-based
 * generator; its counter is the element's position in the GLOBAL batch
 * (first_row = rank x local batch is the rank's first global row), so the
 * masks of a global batch are the same however many ranks share it. */
extern "C" __global__ void es_bias_relu_dropout(float *h, const float *bias, float *mask, int rows,
                                                int cols, float p, float keep_scale,
                                                unsigned int seed, unsigned int first_row,
                                                unsigned int step, int train)
{
    long long n = (long long)rows * cols;
    for (long long i = ES_TID; i < n; i += ES_NTHREADS) {
        float t = ES_FADD(h[i], bias[i % cols]);
        t = t > 0.0f ? t : 0.0f;
        if (train) {
            es_u32 gi = (es_u32)((long long)first_row * cols + i);
            float m = es_dropout_mask(seed, step, gi, p, keep_scale);
            mask[i] = m;
            t = ES_FMUL(t, m);
        }
        h[i] = t;
    }
}
CUCPU_EXPORT(es_bias_relu_dropout)

/* logits[r, c] = (logits[r, c] + bias[c]) + table[ids[r], c]: the output
 * bias plus a learned per-bucket bias row picked by a hashed input feature.
 * An id outside [0, buckets) contributes no table row (never read out of
 * bounds). */
extern "C" __global__ void es_logits_bias(float *logits, const float *bias, const float *table,
                                          const int *ids, int rows, int cols, int buckets)
{
    long long n = (long long)rows * cols;
    for (long long i = ES_TID; i < n; i += ES_NTHREADS) {
        long long r = i / cols, c = i - r * cols;
        int id = ids[r];
        float t = id >= 0 && id < buckets ? table[(long long)id * cols + c] : 0.0f;
        logits[i] = ES_FADD(ES_FADD(logits[i], bias[c]), t);
    }
}
CUCPU_EXPORT(es_logits_bias)

/* Softmax cross-entropy, one thread per row: per-row loss, 1/0 correct, and
 * dlogits = (softmax - onehot) * scale (scale = 1 / local batch). A label
 * outside [0, cols) is never used as an index: its row gets zero loss and
 * zero gradient. */
extern "C" __global__ void es_softmax_xent(const float *logits, const int *labels, float *dlogits,
                                           float *loss, float *correct, int rows, int cols,
                                           float scale)
{
    for (long long r = ES_TID; r < rows; r += ES_NTHREADS) {
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
        /* logf: the loss is only reported, never fed back, so the device's
         * and the CPU's last-bit differences in it do not matter. */
        loss[r] = ES_FSUB(logf(s), ES_FSUB(z[y], m));
        correct[r] = arg == y ? 1.0f : 0.0f;
    }
}
CUCPU_EXPORT(es_softmax_xent)

/* stats[0] += sum(loss), stats[1] += sum(correct), stats[2] += rows; one
 * thread, rows in order (only for reporting). */
extern "C" __global__ void es_stats_accum(const float *loss, const float *correct, int rows,
                                          float *stats)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    float l = stats[0], c = stats[1];
    for (int r = 0; r < rows; r++) {
        l = ES_FADD(l, loss[r]);
        c = ES_FADD(c, correct[r]);
    }
    stats[0] = l;
    stats[1] = c;
    stats[2] = ES_FADD(stats[2], (float)rows);
}
CUCPU_EXPORT(es_stats_accum)

/* Gradient of the bucket table: scatter-add of dlogits rows into the rows
 * ids[r] of dtable with float atomics (the framework default: fast, order
 * decided by thread scheduling, so not reproducible). Ids outside
 * [0, buckets) are skipped. */
extern "C" __global__ void es_table_grad_atomic(const float *dlogits, const int *ids,
                                                float *dtable, int rows, int cols, int buckets)
{
    long long n = (long long)rows * cols;
    for (long long i = ES_TID; i < n; i += ES_NTHREADS) {
        long long r = i / cols, c = i - r * cols;
        int id = ids[r];
        if (id >= 0 && id < buckets)
            atomicAdd(&dtable[(long long)id * cols + c], dlogits[i]);
    }
}
CUCPU_EXPORT(es_table_grad_atomic)

/* Deterministic alternative: one thread per (bucket, class) sums the rows
 * that hit its bucket in row order. */
extern "C" __global__ void es_table_grad_det(const float *dlogits, const int *ids, float *dtable,
                                             int rows, int cols, int buckets)
{
    long long n = (long long)buckets * cols;
    for (long long i = ES_TID; i < n; i += ES_NTHREADS) {
        long long b = i / cols, c = i - b * cols;
        float acc = dtable[i];
        for (int r = 0; r < rows; r++)
            if (ids[r] == b)
                acc = ES_FADD(acc, dlogits[(long long)r * cols + c]);
        dtable[i] = acc;
    }
}
CUCPU_EXPORT(es_table_grad_det)

/* Backward of relu + dropout: dh *= mask where the forward output was
 * positive, else 0 (h is the forward output after dropout). */
extern "C" __global__ void es_relu_dropout_bwd(float *dh, const float *h, const float *mask, int n)
{
    for (long long i = ES_TID; i < n; i += ES_NTHREADS)
        dh[i] = h[i] > 0.0f ? ES_FMUL(dh[i], mask[i]) : 0.0f;
}
CUCPU_EXPORT(es_relu_dropout_bwd)

/* The reductions below sum in the order of a bd-thread block (bd = vt, a
 * power of two): virtual thread t takes its positions t, t+bd, ... in
 * order, then a shared-memory tree pairs t with t+s for s = bd/2, ..., 1.
 * Each block is one thread that computes the virtual threads one after
 * another: the same additions in the same order as bd threads with a
 * __syncthreads per tree level, and no barrier and no idle threads, which
 * is what makes these launches of thousands of small blocks cheap on the
 * CPU (every thread of a block with barriers is a fiber there, and every
 * thread a call). */

/* The tree over sh[0..bd), result in sh[0]. */
static __device__ __forceinline__ float es_block_tree(float *sh, unsigned int bd)
{
    for (unsigned int s = bd / 2; s > 0; s >>= 1)
        for (unsigned int t = 0; t < s; t++)
            sh[t] = ES_FADD(sh[t], sh[t + s]);
    return sh[0];
}

/* First pass of a per-channel sum over a tensor viewed as
 * [outer, channels, inner]: the flattened (outer, inner) positions are cut
 * into gridDim.x contiguous chunks of ceil(n / gridDim.x) (gridDim.x, the
 * number of partial sums per channel, is SM count x k, so the cut depends on
 * the GPU); block (p, k) sums chunk p of channel k, virtual thread t taking
 * chunk positions t, t+bd, ... in order, then the tree, into
 * partial[k*gridDim.x + p]. */
extern "C" __global__ void es_reduce_partial(const float *x, float *partial, int outer,
                                             int channels, int inner, int vt)
{
    __shared__ float sh[ES_MAX_BLOCK];
    es_check_tree(vt);
    unsigned int bd = (unsigned int)vt, p = blockIdx.x, k = blockIdx.y;
    long long n = (long long)outer * inner;
    long long chunk = (n + gridDim.x - 1) / gridDim.x;
    long long lo = (long long)p * chunk, hi = lo + chunk < n ? lo + chunk : n;
    if (lo >= hi) { /* an empty chunk: every leaf and every sum is +0 */
        partial[(long long)k * gridDim.x + p] = 0.0f;
        return;
    }
    /* position i = o inner + s, stepped by bd = dq inner + dr without a
     * division per element */
    const long long dq = bd / inner, dr = bd % inner;
    for (unsigned int t = 0; t < bd; t++) {
        float acc = 0.0f;
        long long o = (lo + t) / inner, s = (lo + t) % inner;
        for (long long i = lo + t; i < hi; i += bd) {
            acc = ES_FADD(acc, x[(o * channels + k) * inner + s]);
            o += dq, s += dr;
            if (s >= inner)
                o++, s -= inner;
        }
        sh[t] = acc;
    }
    partial[(long long)k * gridDim.x + p] = es_block_tree(sh, bd);
}
CUCPU_EXPORT(es_reduce_partial)

/* Second pass: block k sums partial[k*nparts .. +nparts) (virtual thread t
 * takes t, t+bd, ... in order, then the tree) into out[k]. */
extern "C" __global__ void es_reduce_final(const float *partial, float *out, int nparts, int vt)
{
    __shared__ float sh[ES_MAX_BLOCK];
    es_check_tree(vt);
    unsigned int bd = (unsigned int)vt, k = blockIdx.x;
    for (unsigned int t = 0; t < bd; t++) {
        float acc = 0.0f;
        for (int j = (int)t; j < nparts; j += (int)bd)
            acc = ES_FADD(acc, partial[(long long)k * nparts + j]);
        sh[t] = acc;
    }
    out[k] = es_block_tree(sh, bd);
}
CUCPU_EXPORT(es_reduce_final)

/* SGD with momentum and weight decay (PyTorch's formulation, dampening 0):
 * g' = g*gscale + wd*p; buf = momentum*buf + g'; p -= lr*buf. gscale = 1 /
 * world size averages the all-reduced gradient sum. */
extern "C" __global__ void es_sgd_momentum(float *param, const float *grad, float *buf, int n,
                                           float lr, float momentum, float wd, float gscale)
{
    for (long long i = ES_TID; i < n; i += ES_NTHREADS) {
        float p = param[i];
        float g = ES_FADD(ES_FMUL(grad[i], gscale), ES_FMUL(wd, p));
        float b = ES_FADD(ES_FMUL(momentum, buf[i]), g);
        buf[i] = b;
        param[i] = ES_FSUB(p, ES_FMUL(lr, b));
    }
}
CUCPU_EXPORT(es_sgd_momentum)
