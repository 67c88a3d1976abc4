// d2's portable kernels (see kernels/portable_kernels.h for the order every
// output element follows). One source through the CUDA-on-CPU layer
// (sim/cucpu): nvcc builds it into the fatbin embedded in libeasyscale.so,
// the host compiler into simcuda's twin library, so simcuda runs the code
// the GPU runs.
//
// The kernels that d2 launches are tiled: an implicit GEMM (rows x columns,
// reduced over an index t) in shared-memory tiles of BM x BK and BK x BN,
// each thread keeping TM x TN outputs in registers. Every output's sum is
// one chain acc = fma(a, b, acc) over t ascending, tile after tile, a term
// skipped (not added as zero) where the reference skips it, then the
// reference's own finishing step (es_gemm_finish / es_conv_*_finish): the
// bits are those of the element functions, whatever the tile sizes.
//   GEMM:              rows i, columns j, t = p (the inner dimension)
//   conv forward:      rows (n, p, q), columns k of the group,
//                      t = (c of the group, r, s)
//   conv backward data: rows (n, h, w), columns c of the group,
//                      t = (k of the group, r, s)
//   conv backward filter: rows k of the group, columns (c of the group,
//                      r, s), t = (n, p, q)
// The per-element kernels (es_*_portable) are the reference on the device
// (the GPU check compares the two bit for bit).
#include "sim/cucpu/cucpu.h"
#include "kernels/portable_kernels.h"

// ---- the tiled engine ------------------------------------------------------------------

// P, a problem: rows(), cols(), depth() (the reduction's length);
// a(row, t, &v) and b(t, col, &v): the operands (return 0 for a term the
// reference skips; only when MASK_A / MASK_B); finish(row, col, acc);
// reduce(): 0 when no term is summed (GEMM with alpha == 0).
template <int BM, int BN, int BK, int TM, int TN, class P>
__device__ __forceinline__ void es_tiled(const P &pb)
{
    constexpr int TX = BN / TN, TY = BM / TM, NT = TX * TY;
    constexpr int LA = BM * BK / NT, LB = BK * BN / NT;
    static_assert(BM * BK % NT == 0 && BK * BN % NT == 0, "tile loads");
    __shared__ float sa[BK][BM];
    __shared__ float sb[BK][BN];
    __shared__ unsigned char ma[P::MASK_A ? BK : 1][P::MASK_A ? BM : 1];
    __shared__ unsigned char mb[P::MASK_B ? BK : 1][P::MASK_B ? BN : 1];
    const int tid = (int)(threadIdx.y * blockDim.x + threadIdx.x);
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    const long long row0 = (long long)blockIdx.x * BM, col0 = (long long)blockIdx.y * BN;
    const long long rows = pb.rows(), cols = pb.cols(), depth = pb.reduce() ? pb.depth() : 0;
    float acc[TM][TN];
    for (int i = 0; i < TM; i++)
        for (int j = 0; j < TN; j++)
            acc[i][j] = 0.0f;
    float ra[LA], rb[LB];
    unsigned char va[LA], vb[LB];
    // element e of a thread's share of a tile: A's (row, t) and B's (t, col)
    // walk the operand's contiguous direction with consecutive threads
    for (long long t0 = 0; t0 < depth; t0 += BK) {
        for (int e = 0; e < LA; e++) {
            int idx = e * NT + tid, r, t;
            pb.a_coords(idx, &r, &t);
            va[e] = row0 + r < rows && t0 + t < depth &&
                    pb.a(row0 + r, t0 + t, &ra[e]);
        }
        for (int e = 0; e < LB; e++) {
            int idx = e * NT + tid, c, t;
            pb.b_coords(idx, &t, &c);
            vb[e] = col0 + c < cols && t0 + t < depth && pb.b(t0 + t, col0 + c, &rb[e]);
        }
        for (int e = 0; e < LA; e++) {
            int idx = e * NT + tid, r, t;
            pb.a_coords(idx, &r, &t);
            sa[t][r] = va[e] ? ra[e] : 0.0f;
            if (P::MASK_A)
                ma[P::MASK_A ? t : 0][P::MASK_A ? r : 0] = va[e];
        }
        for (int e = 0; e < LB; e++) {
            int idx = e * NT + tid, c, t;
            pb.b_coords(idx, &t, &c);
            sb[t][c] = vb[e] ? rb[e] : 0.0f;
            if (P::MASK_B)
                mb[P::MASK_B ? t : 0][P::MASK_B ? c : 0] = vb[e];
        }
        __syncthreads();
        // only the tile's real depth: no term past the end
        const int kt = depth - t0 < BK ? (int)(depth - t0) : BK;
        for (int t = 0; t < kt; t++) {
            float av[TM], bv[TN];
            for (int i = 0; i < TM; i++)
                av[i] = sa[t][ty + i * TY];
            for (int j = 0; j < TN; j++)
                bv[j] = sb[t][tx + j * TX];
            if (!P::MASK_A && !P::MASK_B) {
                for (int i = 0; i < TM; i++)
                    for (int j = 0; j < TN; j++)
                        acc[i][j] = ES_FMA(av[i], bv[j], acc[i][j]);
            } else {
                for (int i = 0; i < TM; i++)
                    for (int j = 0; j < TN; j++) {
                        int on = (!P::MASK_A || ma[P::MASK_A ? t : 0][P::MASK_A ? ty + i * TY : 0]) &&
                                 (!P::MASK_B || mb[P::MASK_B ? t : 0][P::MASK_B ? tx + j * TX : 0]);
                        if (on)
                            acc[i][j] = ES_FMA(av[i], bv[j], acc[i][j]);
                    }
            }
        }
        __syncthreads();
    }
    for (int i = 0; i < TM; i++)
        for (int j = 0; j < TN; j++) {
            long long r = row0 + ty + i * TY, c = col0 + tx + j * TX;
            if (r < rows && c < cols)
                pb.finish(r, c, acc[i][j]);
        }
}

// ---- GEMM ------------------------------------------------------------------------------

template <int BM, int BN, int BK>
struct es_gemm_problem {
    static constexpr bool MASK_A = false, MASK_B = false;
    const es_gemm_args_t *g;
    long long batch;
    __device__ long long rows() const { return g->m; }
    __device__ long long cols() const { return g->n; }
    __device__ long long depth() const { return g->k; }
    __device__ int reduce() const { return (g->palpha ? *g->palpha : g->alpha) != 0.0f; }
    // A(i, p) is A[i + p lda] (N: i contiguous) or A[p + i lda] (T)
    __device__ void a_coords(int idx, int *r, int *t) const
    {
        if (g->ta) {
            *t = idx % BK, *r = idx / BK;
        } else {
            *r = idx % BM, *t = idx / BM;
        }
    }
    // B(p, j) is B[p + j ldb] (N: p contiguous) or B[j + p ldb] (T)
    __device__ void b_coords(int idx, int *t, int *c) const
    {
        if (g->tb) {
            *c = idx % BN, *t = idx / BN;
        } else {
            *t = idx % BK, *c = idx / BK;
        }
    }
    __device__ int a(long long i, long long p, float *v) const
    {
        *v = es_ld(g->A, batch * g->sA + (g->ta ? p + i * g->lda : i + p * g->lda), g->at);
        return 1;
    }
    __device__ int b(long long p, long long j, float *v) const
    {
        *v = es_ld(g->B, batch * g->sB + (g->tb ? j + p * g->ldb : p + j * g->ldb), g->bt);
        return 1;
    }
    __device__ void finish(long long i, long long j, float acc) const
    {
        es_gemm_finish(g, i, j, batch, acc);
    }
};

#define ES_GEMM_TILED(name, BM, BN, BK, TM, TN)                                          \
    extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN)) CUCPU_HOT         \
    name(es_gemm_args_t a)                                                                \
    {                                                                                     \
        es_gemm_problem<BM, BN, BK> pb;                                                   \
        pb.g = &a;                                                                        \
        pb.batch = blockIdx.z;                                                            \
        es_tiled<BM, BN, BK, TM, TN>(pb);                                                 \
    }                                                                                     \
    CUCPU_EXPORT(name)

ES_GEMM_TILED(es_gemm_tiled_l, ES_GEMM_L_BM, ES_GEMM_L_BN, ES_GEMM_L_BK, ES_GEMM_L_TM,
              ES_GEMM_L_TN)
ES_GEMM_TILED(es_gemm_tiled_s, ES_GEMM_S_BM, ES_GEMM_S_BN, ES_GEMM_S_BK, ES_GEMM_S_TM,
              ES_GEMM_S_TN)

// ---- convolutions -----------------------------------------------------------------------

// Forward: rows (n, p, q), columns k of group blockIdx.z, t = (c, r, s).
template <int BM, int BN, int BK>
struct es_conv_fwd_problem {
    static constexpr bool MASK_A = true, MASK_B = false;
    const es_conv_args_t *c;
    int g;
    __device__ long long rows() const { return (long long)c->n * c->p * c->q; }
    __device__ long long cols() const { return c->k / c->groups; }
    __device__ long long depth() const { return (long long)(c->c / c->groups) * c->r * c->s; }
    __device__ int reduce() const { return 1; }
    __device__ void a_coords(int idx, int *r, int *t) const { *r = idx % BM, *t = idx / BM; }
    __device__ void b_coords(int idx, int *t, int *col) const { *t = idx % BK, *col = idx / BK; }
    __device__ int a(long long row, long long t, float *v) const
    {
        int q = (int)(row % c->q), p = (int)(row / c->q % c->p), n = (int)(row / c->q / c->p);
        int ss = (int)(t % c->s), rr = (int)(t / c->s % c->r), cc = (int)(t / c->s / c->r);
        int hh = p * c->u - c->pad_h + rr * c->dil_h, ww = q * c->v - c->pad_w + ss * c->dil_w;
        if (hh < 0 || hh >= c->h || ww < 0 || ww >= c->w)
            return 0;
        long long ch = (long long)g * (c->c / c->groups) + cc;
        *v = es_ld(c->in0, n * c->xs_n + ch * c->xs_c + hh * c->xs_h + ww * c->xs_w, c->t_in0);
        return 1;
    }
    __device__ int b(long long t, long long col, float *v) const
    {
        int ss = (int)(t % c->s), rr = (int)(t / c->s % c->r), cc = (int)(t / c->s / c->r);
        int fr = c->flip ? c->r - 1 - rr : rr, fs = c->flip ? c->s - 1 - ss : ss;
        long long k = (long long)g * (c->k / c->groups) + col;
        *v = es_ld(c->in1, k * c->ws_k + cc * c->ws_c + fr * c->ws_r + fs * c->ws_s, c->t_in1);
        return 1;
    }
    __device__ void finish(long long row, long long col, float acc) const
    {
        long long q = row % c->q, p = row / c->q % c->p, n = row / c->q / c->p;
        es_conv_fwd_finish(c, n, (long long)g * (c->k / c->groups) + col, p, q, acc);
    }
};

// Backward data: rows (n, h, w), columns c of group blockIdx.z, t = (k, r, s).
template <int BM, int BN, int BK>
struct es_conv_bwd_data_problem {
    static constexpr bool MASK_A = true, MASK_B = false;
    const es_conv_args_t *c;
    int g;
    __device__ long long rows() const { return (long long)c->n * c->h * c->w; }
    __device__ long long cols() const { return c->c / c->groups; }
    __device__ long long depth() const { return (long long)(c->k / c->groups) * c->r * c->s; }
    __device__ int reduce() const { return 1; }
    __device__ void a_coords(int idx, int *r, int *t) const { *r = idx % BM, *t = idx / BM; }
    __device__ void b_coords(int idx, int *t, int *col) const { *t = idx % BK, *col = idx / BK; }
    __device__ int a(long long row, long long t, float *v) const
    {
        int w = (int)(row % c->w), h = (int)(row / c->w % c->h), n = (int)(row / c->w / c->h);
        int ss = (int)(t % c->s), rr = (int)(t / c->s % c->r), kk = (int)(t / c->s / c->r);
        int th = h + c->pad_h - rr * c->dil_h, tw = w + c->pad_w - ss * c->dil_w;
        if (th < 0 || th % c->u || th / c->u >= c->p || tw < 0 || tw % c->v || tw / c->v >= c->q)
            return 0;
        long long k = (long long)g * (c->k / c->groups) + kk;
        *v = es_ld(c->in0, n * c->ys_n + k * c->ys_k + (th / c->u) * c->ys_p + (tw / c->v) * c->ys_q,
                   c->t_in0);
        return 1;
    }
    __device__ int b(long long t, long long col, float *v) const
    {
        int ss = (int)(t % c->s), rr = (int)(t / c->s % c->r), kk = (int)(t / c->s / c->r);
        int fr = c->flip ? c->r - 1 - rr : rr, fs = c->flip ? c->s - 1 - ss : ss;
        long long k = (long long)g * (c->k / c->groups) + kk;
        *v = es_ld(c->in1, k * c->ws_k + col * c->ws_c + fr * c->ws_r + fs * c->ws_s, c->t_in1);
        return 1;
    }
    __device__ void finish(long long row, long long col, float acc) const
    {
        long long w = row % c->w, h = row / c->w % c->h, n = row / c->w / c->h;
        es_conv_bwd_data_finish(c, n, (long long)g * (c->c / c->groups) + col, h, w, acc);
    }
};

// Backward filter: rows k of group blockIdx.z, columns (c, r, s) of the
// filter, t = (n, p, q).
template <int BM, int BN, int BK>
struct es_conv_bwd_filter_problem {
    static constexpr bool MASK_A = false, MASK_B = true;
    const es_conv_args_t *c;
    int g;
    __device__ long long rows() const { return c->k / c->groups; }
    __device__ long long cols() const { return (long long)(c->c / c->groups) * c->r * c->s; }
    __device__ long long depth() const { return (long long)c->n * c->p * c->q; }
    __device__ int reduce() const { return 1; }
    __device__ void a_coords(int idx, int *r, int *t) const { *t = idx % BK, *r = idx / BK; }
    __device__ void b_coords(int idx, int *t, int *col) const { *t = idx % BK, *col = idx / BK; }
    __device__ int a(long long row, long long t, float *v) const
    {
        long long q = t % c->q, p = t / c->q % c->p, n = t / c->q / c->p;
        long long k = (long long)g * (c->k / c->groups) + row;
        *v = es_ld(c->in1, n * c->ys_n + k * c->ys_k + p * c->ys_p + q * c->ys_q, c->t_in1);
        return 1;
    }
    __device__ int b(long long t, long long col, float *v) const
    {
        int q = (int)(t % c->q), p = (int)(t / c->q % c->p), n = (int)(t / c->q / c->p);
        int fs = (int)(col % c->s), fr = (int)(col / c->s % c->r), cc = (int)(col / c->s / c->r);
        int rr = c->flip ? c->r - 1 - fr : fr, ss = c->flip ? c->s - 1 - fs : fs;
        int hh = p * c->u - c->pad_h + rr * c->dil_h, ww = q * c->v - c->pad_w + ss * c->dil_w;
        if (hh < 0 || hh >= c->h || ww < 0 || ww >= c->w)
            return 0;
        long long ch = (long long)g * (c->c / c->groups) + cc;
        *v = es_ld(c->in0, n * c->xs_n + ch * c->xs_c + hh * c->xs_h + ww * c->xs_w, c->t_in0);
        return 1;
    }
    __device__ void finish(long long row, long long col, float acc) const
    {
        long long fs = col % c->s, fr = col / c->s % c->r, cc = col / c->s / c->r;
        es_conv_bwd_filter_finish(c, (long long)g * (c->k / c->groups) + row, cc, fr, fs, acc);
    }
};

#define ES_CONV_TILED(name, problem)                                                      \
    extern "C" __global__ void __launch_bounds__((ES_CONV_BM / ES_CONV_TM) *               \
                                                 (ES_CONV_BN / ES_CONV_TN)) CUCPU_HOT      \
    name(es_conv_args_t a)                                                                \
    {                                                                                     \
        problem<ES_CONV_BM, ES_CONV_BN, ES_CONV_BK> pb;                                   \
        pb.c = &a;                                                                        \
        pb.g = (int)blockIdx.z;                                                           \
        es_tiled<ES_CONV_BM, ES_CONV_BN, ES_CONV_BK, ES_CONV_TM, ES_CONV_TN>(pb);         \
    }                                                                                     \
    CUCPU_EXPORT(name)

ES_CONV_TILED(es_conv_fwd_tiled, es_conv_fwd_problem)
ES_CONV_TILED(es_conv_bwd_data_tiled, es_conv_bwd_data_problem)
ES_CONV_TILED(es_conv_bwd_filter_tiled, es_conv_bwd_filter_problem)

// ---- per-element reference kernels and the bias gradient --------------------------------

extern "C" __global__ void es_gemm_portable(es_gemm_args_t a)
{
    long long i = (long long)blockIdx.x * ES_GEMM_TILE + threadIdx.x;
    long long j = (long long)blockIdx.y * ES_GEMM_TILE + threadIdx.y;
    if (i < a.m && j < a.n)
        es_gemm_elem(&a, i, j, blockIdx.z);
}
CUCPU_EXPORT(es_gemm_portable)

#define ES_CONV_KERNEL(name, elem)                                                        \
    extern "C" __global__ void name(es_conv_args_t a)                                      \
    {                                                                                      \
        long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;                   \
        if (idx < a.total)                                                                 \
            elem(&a, idx);                                                                 \
    }                                                                                      \
    CUCPU_EXPORT(name)
ES_CONV_KERNEL(es_conv_fwd_portable, es_conv_fwd_elem)
ES_CONV_KERNEL(es_conv_bwd_data_portable, es_conv_bwd_data_elem)
ES_CONV_KERNEL(es_conv_bwd_filter_portable, es_conv_bwd_filter_elem)

extern "C" __global__ void es_bgrad_portable(es_bgrad_args_t a)
{
    long long x = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (x < a.len)
        es_bgrad_elem(&a, x, blockIdx.y);
}
CUCPU_EXPORT(es_bgrad_portable)
