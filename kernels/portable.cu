// d2's portable kernels (see kernels/portable_kernels.h for the order every
// output element follows). One source through the CUDA-on-CPU layer
// (sim/cucpu): nvcc builds it into the fatbin embedded in libeasyscale.so,
// the host compiler into simcuda's twin library, so simcuda runs the code
// the GPU runs.
//
// Two families: the int8 kernels (EASYSCALE_D2_GEMM=int8, the default;
// their engine is at the end of this file) and the fma ones, below.
//
// The fma kernels d2 launches are tiled: an implicit GEMM (rows x columns,
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

// Row i (of TM) of thread ty's outputs: groups of V consecutive rows (V = 4
// when TM allows: 128-bit shared loads on the GPU), the groups BM / (TM /
// V) apart, so a warp's reads are broadcasts or consecutive addresses.
template <int BM, int TM>
__device__ __forceinline__ int es_tile_index(int ty, int i)
{
    constexpr int V = TM % 4 == 0 ? 4 : 1, TY = BM / TM;
    return (i / V) * (TY * V) + ty * V + i % V;
}

// TM values of a shared row at the thread's indices.
template <int BM, int TM>
__device__ __forceinline__ void es_tile_read(const float *row, int ty, float *out)
{
#ifdef __CUDACC__
    constexpr int V = TM % 4 == 0 ? 4 : 1;
    for (int i = 0; i < TM; i += V) {
        if (V == 4) {
            float4 v = *reinterpret_cast<const float4 *>(row + es_tile_index<BM, TM>(ty, i));
            out[i] = v.x, out[i + V / 4] = v.y, out[i + 2 * (V / 4)] = v.z,
            out[i + 3 * (V / 4)] = v.w;
        } else {
            out[i] = row[es_tile_index<BM, TM>(ty, i)];
        }
    }
#else
    for (int i = 0; i < TM; i++)
        out[i] = row[es_tile_index<BM, TM>(ty, i)];
#endif
}

// P, a problem: rows(), cols(), depth() (the reduction's length);
// a(row, t, &v) and b(t, col, &v): the operands (return 0 for a term the
// reference skips; only when MASK_A / MASK_B); a_coords / b_coords: which
// tile element a thread loads (consecutive threads along the operand's
// contiguous direction); finish(row, col, acc); reduce(): 0 when no term is
// summed (GEMM with alpha == 0). Global loads of the next tile are issued
// before the current tile's arithmetic (registers, then shared memory).
template <int BM, int BN, int BK, int TM, int TN, class P>
__device__ __forceinline__ void es_tiled(const P &pb)
{
    constexpr int TX = BN / TN, TY = BM / TM, NT = TX * TY;
    constexpr int LA = BM * BK / NT, LB = BK * BN / NT;
    static_assert(BM * BK % NT == 0 && BK * BN % NT == 0, "tile loads");
    __shared__ __align__(16) float sa[BK][BM];
    __shared__ __align__(16) float sb[BK][BN];
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
    // the thread's share of the tile at depth t0 into registers
    auto load = [&](long long t0) {
        for (int e = 0; e < LA; e++) {
            int r, t;
            pb.a_coords(e * NT + tid, &r, &t);
            va[e] = row0 + r < rows && t0 + t < depth && pb.a(row0 + r, t0 + t, &ra[e]);
        }
        for (int e = 0; e < LB; e++) {
            int c, t;
            pb.b_coords(e * NT + tid, &t, &c);
            vb[e] = col0 + c < cols && t0 + t < depth && pb.b(t0 + t, col0 + c, &rb[e]);
        }
    };
    // registers into shared memory (0 and a cleared mask where nothing is)
    auto store = [&]() {
        for (int e = 0; e < LA; e++) {
            int r, t;
            pb.a_coords(e * NT + tid, &r, &t);
            sa[t][r] = va[e] ? ra[e] : 0.0f;
            if (P::MASK_A)
                ma[P::MASK_A ? t : 0][P::MASK_A ? r : 0] = va[e];
        }
        for (int e = 0; e < LB; e++) {
            int c, t;
            pb.b_coords(e * NT + tid, &t, &c);
            sb[t][c] = vb[e] ? rb[e] : 0.0f;
            if (P::MASK_B)
                mb[P::MASK_B ? t : 0][P::MASK_B ? c : 0] = vb[e];
        }
    };
    if (depth > 0) {
        load(0);
        store();
        __syncthreads();
    }
    for (long long t0 = 0; t0 < depth; t0 += BK) {
        const int more = t0 + BK < depth;
        if (more)
            load(t0 + BK);
        // only the tile's real depth: no term past the end
        const int kt = depth - t0 < BK ? (int)(depth - t0) : BK;
        for (int t = 0; t < kt; t++) {
            float av[TM], bv[TN];
            es_tile_read<BM, TM>(sa[t], ty, av);
            es_tile_read<BN, TN>(sb[t], tx, bv);
            if (!P::MASK_A && !P::MASK_B) {
                for (int i = 0; i < TM; i++)
                    for (int j = 0; j < TN; j++)
                        acc[i][j] = ES_FMA(av[i], bv[j], acc[i][j]);
            } else {
                unsigned char on_a[TM], on_b[TN];
                for (int i = 0; i < TM; i++)
                    on_a[i] = !P::MASK_A ||
                              ma[P::MASK_A ? t : 0][P::MASK_A ? es_tile_index<BM, TM>(ty, i) : 0];
                for (int j = 0; j < TN; j++)
                    on_b[j] = !P::MASK_B ||
                              mb[P::MASK_B ? t : 0][P::MASK_B ? es_tile_index<BN, TN>(tx, j) : 0];
                for (int i = 0; i < TM; i++)
                    for (int j = 0; j < TN; j++)
                        if (on_a[i] && on_b[j])
                            acc[i][j] = ES_FMA(av[i], bv[j], acc[i][j]);
            }
        }
        if (more) {
            __syncthreads();
            store();
            __syncthreads();
        }
    }
    for (int i = 0; i < TM; i++)
        for (int j = 0; j < TN; j++) {
            long long r = row0 + es_tile_index<BM, TM>(ty, i);
            long long c = col0 + es_tile_index<BN, TN>(tx, j);
            if (r < rows && c < cols)
                pb.finish(r, c, acc[i][j]);
        }
}

// ---- GEMM ------------------------------------------------------------------------------

// DT: the operands' type when the kernel is specialised for it (ES_DT_F32:
// the loads are plain float loads), -1 for the types in the arguments.
template <int BM, int BN, int BK, int DT>
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
        *v = es_ld(g->A, batch * g->sA + (g->ta ? p + i * g->lda : i + p * g->lda),
                   DT >= 0 ? DT : g->at);
        return 1;
    }
    __device__ int b(long long p, long long j, float *v) const
    {
        *v = es_ld(g->B, batch * g->sB + (g->tb ? j + p * g->ldb : p + j * g->ldb),
                   DT >= 0 ? DT : g->bt);
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
        if (a.at == ES_DT_F32 && a.bt == ES_DT_F32) {                                     \
            es_gemm_problem<BM, BN, BK, ES_DT_F32> pb;                                    \
            pb.g = &a;                                                                    \
            pb.batch = blockIdx.z;                                                        \
            es_tiled<BM, BN, BK, TM, TN>(pb);                                             \
        } else {                                                                          \
            es_gemm_problem<BM, BN, BK, -1> pb;                                           \
            pb.g = &a;                                                                    \
            pb.batch = blockIdx.z;                                                        \
            es_tiled<BM, BN, BK, TM, TN>(pb);                                             \
        }                                                                                 \
    }                                                                                     \
    CUCPU_EXPORT(name)

ES_GEMM_TILED(es_gemm_tiled_l, ES_GEMM_L_BM, ES_GEMM_L_BN, ES_GEMM_L_BK, ES_GEMM_L_TM,
              ES_GEMM_L_TN)
ES_GEMM_TILED(es_gemm_tiled_s, ES_GEMM_S_BM, ES_GEMM_S_BN, ES_GEMM_S_BK, ES_GEMM_S_TM,
              ES_GEMM_S_TN)

// ---- convolutions -----------------------------------------------------------------------

// The three directions as implicit GEMMs (kernels/portable_kernels.h,
// es_conv_ia / es_conv_ib / es_conv_ifinish), group blockIdx.z:
//   forward:         rows (n, p, q), columns k, t = (c, r, s)   (A masked)
//   backward data:   rows (n, h, w), columns c, t = (k, r, s)   (A masked)
//   backward filter: rows k, columns (c, r, s), t = (n, p, q)   (B masked)
template <int BM, int BN, int BK, int DT, int DIR>
struct es_conv_problem {
    static constexpr bool MASK_A = DIR != 2, MASK_B = DIR == 2;
    const es_conv_args_t *c;
    int g;
    __device__ long long rows() const { return es_conv_rows(c, DIR); }
    __device__ long long cols() const { return es_conv_cols(c, DIR); }
    __device__ long long depth() const { return es_conv_depth(c, DIR); }
    __device__ int reduce() const { return 1; }
    __device__ void a_coords(int idx, int *r, int *t) const
    {
        if (DIR == 2) {
            *t = idx % BK, *r = idx / BK;
        } else {
            *r = idx % BM, *t = idx / BM;
        }
    }
    __device__ void b_coords(int idx, int *t, int *col) const { *t = idx % BK, *col = idx / BK; }
    __device__ int a(long long row, long long t, float *v) const
    {
        return es_conv_ia(c, DIR, g, row, t, DT >= 0 ? DT : c->t_in0, DT >= 0 ? DT : c->t_in1,
                          v);
    }
    __device__ int b(long long t, long long col, float *v) const
    {
        return es_conv_ib(c, DIR, g, t, col, DT >= 0 ? DT : c->t_in0, DT >= 0 ? DT : c->t_in1,
                          v);
    }
    __device__ void finish(long long row, long long col, float acc) const
    {
        es_conv_ifinish(c, DIR, g, row, col, acc);
    }
};

#define ES_CONV_TILED(name, DIR)                                                          \
    extern "C" __global__ void __launch_bounds__((ES_CONV_BM / ES_CONV_TM) *               \
                                                 (ES_CONV_BN / ES_CONV_TN)) CUCPU_HOT      \
    name(es_conv_args_t a)                                                                \
    {                                                                                     \
        if (a.t_in0 == ES_DT_F32 && a.t_in1 == ES_DT_F32) {                               \
            es_conv_problem<ES_CONV_BM, ES_CONV_BN, ES_CONV_BK, ES_DT_F32, DIR> pb;       \
            pb.c = &a;                                                                    \
            pb.g = (int)blockIdx.z;                                                       \
            es_tiled<ES_CONV_BM, ES_CONV_BN, ES_CONV_BK, ES_CONV_TM, ES_CONV_TN>(pb);     \
        } else {                                                                          \
            es_conv_problem<ES_CONV_BM, ES_CONV_BN, ES_CONV_BK, -1, DIR> pb;              \
            pb.c = &a;                                                                    \
            pb.g = (int)blockIdx.z;                                                       \
            es_tiled<ES_CONV_BM, ES_CONV_BN, ES_CONV_BK, ES_CONV_TM, ES_CONV_TN>(pb);     \
        }                                                                                 \
    }                                                                                     \
    CUCPU_EXPORT(name)

ES_CONV_TILED(es_conv_fwd_tiled, 0)
ES_CONV_TILED(es_conv_bwd_data_tiled, 1)
ES_CONV_TILED(es_conv_bwd_filter_tiled, 2)

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

// ---- the int8 GEMM (EASYSCALE_D2_GEMM=int8) -----------------------------------------------
//
// The definition is kernels/d2int8_kernels.h's: per-row / per-column
// power-of-two scales, operands rounded to 7 SA / 7 SB-bit integers and
// cut into int8 slices, the slice products summed exactly on the integer
// tensor cores (WMMA int8 fragments: sim/cucpu/wmma.h, CUDA's own
// interface under nvcc), the exact 128-bit total rounded once to fp32,
// then the fma path's finishing step. A block computes ES_I8_BM x ES_I8_BN
// outputs with 4 warps; first each row's and column's exponent (its
// largest finite magnitude, whole depth), then tile by tile the operands
// quantised into shared memory as int8 slices ([slice][16-deep step][row
// or column][16]: 256-bit aligned fragments, ldm 16) and multiplied, one
// int32 accumulator per weight group g = s + t and warp (16 x 16 outputs);
// every ES_I8_CHUNK terms the groups are stored to shared memory and
// folded into each output's 128-bit total. Only integer sums: the result
// does not depend on the tiling. (On simcuda a block's cost is mostly its
// barriers: two for the exponents, two a tile, two a chunk.)

#include "kernels/d2int8_kernels.h"
#include "sim/cucpu/wmma.h"

// The block's shared memory (one for every slice count: declared by the
// kernel, not per instantiation).
struct es_i8_smem {
    signed char sa[ES_I8_SLICES_MAX][ES_I8_BK / 16][ES_I8_BM][16];
    signed char sb[ES_I8_SLICES_MAX][ES_I8_BK / 16][ES_I8_BN][16];
    int sacc[ES_I8_GROUPS][ES_I8_BM][ES_I8_BN];
    unsigned smx[2][ES_I8_THREADS / ES_I8_BM][ES_I8_BM]; // largest finite magnitude | nonfinite
    int sexp[2][ES_I8_BM], snf[2][ES_I8_BM];
};

namespace wm = nvcuda::wmma;
typedef wm::fragment<wm::accumulator, 16, 16, 16, int> es_i8_acc_t;

// The block's place: its first row and column, the problem's sizes, the
// thread, and its warp's 16 x 16 outputs.
struct es_i8_blk {
    long long row0, col0, rows, cols, depth;
    int tid, wr, wc;
};

// Step 1 for the block's rows and columns: each of PART threads a row
// scans every PART-th term; their largest finite magnitudes and
// non-finite flags (top bit) meet in shared memory.
template <class P>
__device__ __forceinline__ void es_i8_exponents(const P &pb, es_i8_smem &sm, const es_i8_blk &k)
{
    constexpr int BM = ES_I8_BM, PART = ES_I8_THREADS / ES_I8_BM;
    const int v = k.tid % BM, part = k.tid / BM;
    unsigned mx[2] = { 0, 0 }, nf[2] = { 0, 0 };
    for (long long t = part; t < k.depth; t += PART) {
        float x;
        int ok[2] = { k.row0 + v < k.rows && pb.a(k.row0 + v, t, &x), 0 };
        unsigned m = ok[0] ? es_i8_mag(x) : 0;
        nf[0] |= m >= 0x7f800000u;
        mx[0] = m < 0x7f800000u && m > mx[0] ? m : mx[0];
        ok[1] = k.col0 + v < k.cols && pb.b(t, k.col0 + v, &x);
        m = ok[1] ? es_i8_mag(x) : 0;
        nf[1] |= m >= 0x7f800000u;
        mx[1] = m < 0x7f800000u && m > mx[1] ? m : mx[1];
    }
    sm.smx[0][part][v] = mx[0] | nf[0] << 31;
    sm.smx[1][part][v] = mx[1] | nf[1] << 31;
    __syncthreads();
    if (k.tid < 2 * BM) {
        int side = k.tid / BM, w = k.tid % BM;
        unsigned m = 0, f = 0;
        for (int q = 0; q < PART; q++) {
            unsigned u = sm.smx[side][q][w];
            f |= u >> 31;
            u &= 0x7fffffffu;
            m = u > m ? u : m;
        }
        sm.sexp[side][w] = es_i8_exp(m);
        sm.snf[side][w] = (int)f;
    }
    __syncthreads();
}

// Step 2 for the tile of terms [t0, t0 + BK) (none past cend): the
// thread's share of A and B quantised and cut into slices in shared
// memory (0 where there is no term).
template <int SA, int SB, class P>
__device__ __forceinline__ void es_i8_quantise(const P &pb, es_i8_smem &sm, const es_i8_blk &k,
                                               long long t0, long long cend)
{
    constexpr int NT = ES_I8_THREADS;
    for (int e = 0; e < ES_I8_BM * ES_I8_BK / NT; e++) {
        int r, t, q = 0;
        float x;
        pb.a_coords(e * NT + k.tid, &r, &t);
        if (k.row0 + r < k.rows && t0 + t < cend && pb.a(k.row0 + r, t0 + t, &x))
            q = es_i8_quant(x, sm.sexp[0][r], SA);
        for (int s = 0; s < SA; s++)
            sm.sa[s][t / 16][r][t % 16] = es_i8_digit(q, s, SA);
    }
    for (int e = 0; e < ES_I8_BK * ES_I8_BN / NT; e++) {
        int c, t, q = 0;
        float x;
        pb.b_coords(e * NT + k.tid, &t, &c);
        if (k.col0 + c < k.cols && t0 + t < cend && pb.b(t0 + t, k.col0 + c, &x))
            q = es_i8_quant(x, sm.sexp[1][c], SB);
        for (int s = 0; s < SB; s++)
            sm.sb[s][t / 16][c][t % 16] = es_i8_digit(q, s, SB);
    }
}

// Step 3 for the tile: every slice pair's exact int8 MMA into the
// accumulator of its weight group s + t.
template <int SA, int SB>
__device__ __forceinline__ void es_i8_mma(es_i8_smem &sm, const es_i8_blk &k, es_i8_acc_t *acc)
{
    for (int kb = 0; kb < ES_I8_BK / 16; kb++) {
        wm::fragment<wm::matrix_a, 16, 16, 16, signed char, wm::row_major> fa[SA];
        wm::fragment<wm::matrix_b, 16, 16, 16, signed char, wm::col_major> fb[SB];
        for (int s = 0; s < SA; s++)
            wm::load_matrix_sync(fa[s], &sm.sa[s][kb][k.wr][0], 16);
        for (int s = 0; s < SB; s++)
            wm::load_matrix_sync(fb[s], &sm.sb[s][kb][k.wc][0], 16);
        for (int s = 0; s < SA; s++)
            for (int u = 0; u < SB; u++)
                wm::mma_sync(acc[s + u], fa[s], fb[u], acc[s + u]);
    }
}

// The chunk's G groups folded into the thread's 128-bit totals (its
// outputs: idx = o NT + tid, row idx % BM, column idx / BM), weight
// 2^(7 (G - 1 - g)).
template <int G>
__device__ __forceinline__ void es_i8_fold(es_i8_smem &sm, const es_i8_blk &k,
                                           const es_i8_acc_t *acc, es_i128_t *tot)
{
    constexpr int NT = ES_I8_THREADS, OUT = ES_I8_BM * ES_I8_BN / NT;
    for (int g = 0; g < G; g++)
        wm::store_matrix_sync(&sm.sacc[g][k.wr][k.wc], acc[g], ES_I8_BN, wm::mem_row_major);
    __syncthreads();
    for (int o = 0; o < OUT; o++) {
        const int idx = o * NT + k.tid, r = idx % ES_I8_BM, c = idx / ES_I8_BM;
        es_i128_t t = 0; // Horner: each group's weight is 2^7 times the next one's
        for (int g = 0; g < G; g++)
            t = t * ((es_i128_t)1 << ES_I8_DIGIT) + sm.sacc[g][r][c];
        tot[o] += t;
    }
    __syncthreads();
}

// Steps 4 to 6 and the finishing step of the thread's outputs.
template <int SA, int SB, class P>
__device__ __forceinline__ void es_i8_finish(const P &pb, const es_i8_smem &sm,
                                             const es_i8_blk &k, const es_i128_t *tot)
{
    constexpr int NT = ES_I8_THREADS, OUT = ES_I8_BM * ES_I8_BN / NT;
    for (int o = 0; o < OUT; o++) {
        int idx = o * NT + k.tid, r = idx % ES_I8_BM, c = idx / ES_I8_BM;
        long long i = k.row0 + r, j = k.col0 + c;
        if (i >= k.rows || j >= k.cols)
            continue;
        float v = es_i8_to_f32(tot[o], sm.sexp[0][r] + sm.sexp[1][c] - ES_I8_DIGIT * (SA + SB));
        if (k.depth && (sm.snf[0][r] || sm.snf[1][c])) {
            int st = 0;
            for (long long t = 0; t < k.depth; t++) {
                float x, y;
                if (pb.a(i, t, &x) && pb.b(t, j, &y))
                    st = es_i8_sp_add(st, x, y);
            }
            es_i8_sp_value(st, &v);
        }
        pb.finish(i, j, v);
    }
}

// The engine: a block's ES_I8_BM x ES_I8_BN outputs of problem pb (the
// interface of es_tiled's problems), SA and SB slices a side.
template <int SA, int SB, class P>
__device__ __forceinline__ void es_int8_tiled(const P &pb, es_i8_smem &sm)
{
    constexpr int BM = ES_I8_BM, BN = ES_I8_BN, BK = ES_I8_BK, NT = ES_I8_THREADS;
    constexpr int G = SA + SB - 1, OUT = BM * BN / NT;
    static_assert(BM == BN && NT % BM == 0 && BM * BK % NT == 0 && NT == 32 * (BM / 16) *
                  (BN / 16) && G <= ES_I8_GROUPS, "int8 tile shape");
    es_i8_blk k;
    k.tid = (int)(threadIdx.y * blockDim.x + threadIdx.x);
    k.wr = (k.tid / 32 % 2) * 16, k.wc = (k.tid / 32 / 2) * 16;
    k.row0 = (long long)blockIdx.x * BM, k.col0 = (long long)blockIdx.y * BN;
    k.rows = pb.rows(), k.cols = pb.cols(), k.depth = pb.reduce() ? pb.depth() : 0;
    es_i128_t tot[OUT];
    for (int o = 0; o < OUT; o++)
        tot[o] = 0;
    es_i8_exponents(pb, sm, k);
    es_i8_acc_t acc[G];
    for (long long c0 = 0; c0 < k.depth; c0 += ES_I8_CHUNK) {
        const long long cend = k.depth - c0 < ES_I8_CHUNK ? k.depth : c0 + ES_I8_CHUNK;
        for (int g = 0; g < G; g++)
            wm::fill_fragment(acc[g], 0);
        for (long long t0 = c0; t0 < cend; t0 += BK) {
            es_i8_quantise<SA, SB>(pb, sm, k, t0, cend);
            __syncthreads();
            es_i8_mma<SA, SB>(sm, k, acc);
            __syncthreads();
        }
        es_i8_fold<G>(sm, k, acc, tot);
    }
    es_i8_finish<SA, SB>(pb, sm, k, tot);
}

template <int SA, int SB>
__device__ __forceinline__ void es_gemm_int8_run(const es_gemm_args_t *a, es_i8_smem &sm)
{
    if (a->at == ES_DT_F32 && a->bt == ES_DT_F32) {
        es_gemm_problem<ES_I8_BM, ES_I8_BN, ES_I8_BK, ES_DT_F32> pb;
        pb.g = a;
        pb.batch = blockIdx.z;
        es_int8_tiled<SA, SB>(pb, sm);
    } else {
        es_gemm_problem<ES_I8_BM, ES_I8_BN, ES_I8_BK, -1> pb;
        pb.g = a;
        pb.batch = blockIdx.z;
        es_int8_tiled<SA, SB>(pb, sm);
    }
}

// Blocks of ES_I8_THREADS threads (any shape), grid (m tiles, n tiles, batch).
extern "C" __global__ void __launch_bounds__(ES_I8_THREADS) CUCPU_HOT
es_gemm_int8(es_gemm_args_t a)
{
    __shared__ __align__(32) es_i8_smem sm;
    // every type has ES_I8_SLICES_MAX slices (es_i8_slices)
    es_gemm_int8_run<ES_I8_SLICES_MAX, ES_I8_SLICES_MAX>(&a, sm);
}
CUCPU_EXPORT(es_gemm_int8)

// The convolutions on the int8 path: the same implicit GEMMs (es_conv_problem),
// rows and columns scaled as the GEMM's (a row's exponent over its taps
// inside the image), grid (row tiles, column tiles, groups).
#define ES_CONV_INT8(name, DIR)                                                           \
    extern "C" __global__ void __launch_bounds__(ES_I8_THREADS) CUCPU_HOT                 \
    name(es_conv_args_t a)                                                                \
    {                                                                                     \
        __shared__ __align__(32) es_i8_smem sm;                                           \
        if (a.t_in0 == ES_DT_F32 && a.t_in1 == ES_DT_F32) {                               \
            es_conv_problem<ES_I8_BM, ES_I8_BN, ES_I8_BK, ES_DT_F32, DIR> pb;             \
            pb.c = &a;                                                                    \
            pb.g = (int)blockIdx.z;                                                       \
            es_int8_tiled<ES_I8_SLICES_MAX, ES_I8_SLICES_MAX>(pb, sm);                    \
        } else {                                                                          \
            es_conv_problem<ES_I8_BM, ES_I8_BN, ES_I8_BK, -1, DIR> pb;                    \
            pb.c = &a;                                                                    \
            pb.g = (int)blockIdx.z;                                                       \
            es_int8_tiled<ES_I8_SLICES_MAX, ES_I8_SLICES_MAX>(pb, sm);                    \
        }                                                                                 \
    }                                                                                     \
    CUCPU_EXPORT(name)

ES_CONV_INT8(es_conv_fwd_int8, 0)
ES_CONV_INT8(es_conv_bwd_data_int8, 1)
ES_CONV_INT8(es_conv_bwd_filter_int8, 2)
