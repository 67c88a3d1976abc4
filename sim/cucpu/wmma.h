/* cucpu: integer warp matrix multiply-accumulate, single source. Under nvcc
 * this is CUDA's own WMMA interface (<mma.h>, namespace nvcuda::wmma, int8
 * fragments from sm_72: the integer tensor cores); on the host compiler it
 * is the same interface for the one shape the shim's kernels use, exact C:
 *
 *   fragment<matrix_a, 16, 16, 16, signed char, row_major | col_major>
 *   fragment<matrix_b, 16, 16, 16, signed char, row_major | col_major>
 *   fragment<accumulator, 16, 16, 16, int>
 *   load_matrix_sync, store_matrix_sync (mem_row_major / mem_col_major),
 *   fill_fragment, mma_sync (d = a b + c, every product and sum exact in
 *   int32 as the tensor cores compute it; no saturation: satf must be
 *   false)
 *
 * An integer MMA's result is fully defined (exact int32 sums, wrapping
 * never reached when the caller bounds its sums), so the CPU twin is
 * faithful by construction. As on the GPU, every lane of the warp calls
 * each function with the same arguments; on the CPU each lane loads and
 * computes only its own share (lane l: accumulator row l / 2, columns
 * (l % 2) * 8 .. + 7, and the A row and B columns that feed them), so the
 * warp does the work once. Pointers: 256-bit aligned, ldm a multiple of 16
 * bytes (CUDA's rules; not checked here). Include after cucpu.h. */
#ifndef CUCPU_WMMA_H
#define CUCPU_WMMA_H

#ifdef __CUDACC__

#include <mma.h>

#else

#include "sim/cucpu/mma.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> class fragment;

/* lane l: A row l / 2 (16 values) */
template <typename L> class fragment<matrix_a, 16, 16, 16, signed char, L> {
public:
    enum { num_elements = 16 };
    signed char x[16];
};
/* lane l: B columns (l % 2) * 8 .. + 7 (8 x 16 values, column by column) */
template <typename L> class fragment<matrix_b, 16, 16, 16, signed char, L> {
public:
    enum { num_elements = 128 };
    signed char x[128];
};
/* lane l: row l / 2, columns (l % 2) * 8 .. + 7 */
template <> class fragment<accumulator, 16, 16, 16, int, void> {
public:
    enum { num_elements = 8 };
    int x[8];
};

namespace cucpu_wmma_detail {
static inline int row() { return (int)(cucpu_self->lane / 2); }
static inline int col0() { return (int)(cucpu_self->lane % 2) * 8; }
static inline int is_row(row_major *) { return 1; }
static inline int is_row(col_major *) { return 0; }
} // namespace cucpu_wmma_detail

template <typename L>
static inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, signed char, L> &f,
                                    const signed char *p, unsigned ldm)
{
    int r = cucpu_wmma_detail::row(), rm = cucpu_wmma_detail::is_row((L *)nullptr);
    if (rm) {
        __builtin_memcpy(f.x, p + (size_t)r * ldm, 16); /* the row is contiguous */
        return;
    }
    for (int k = 0; k < 16; k++)
        f.x[k] = p[r + (size_t)k * ldm];
}

template <typename L>
static inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, signed char, L> &f,
                                    const signed char *p, unsigned ldm)
{
    int c0 = cucpu_wmma_detail::col0(), rm = cucpu_wmma_detail::is_row((L *)nullptr);
    for (int c = 0; c < 8; c++) {
        if (!rm) { /* the column is contiguous */
            __builtin_memcpy(f.x + c * 16, p + (size_t)(c0 + c) * ldm, 16);
            continue;
        }
        for (int k = 0; k < 16; k++)
            f.x[c * 16 + k] = p[(size_t)k * ldm + c0 + c];
    }
}

static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, int> &f, const int *p,
                                    unsigned ldm, layout_t layout)
{
    int r = cucpu_wmma_detail::row(), c0 = cucpu_wmma_detail::col0();
    for (int c = 0; c < 8; c++)
        f.x[c] = layout == mem_row_major ? p[(size_t)r * ldm + c0 + c]
                                         : p[r + (size_t)(c0 + c) * ldm];
}

static inline void store_matrix_sync(int *p, const fragment<accumulator, 16, 16, 16, int> &f,
                                     unsigned ldm, layout_t layout)
{
    int r = cucpu_wmma_detail::row(), c0 = cucpu_wmma_detail::col0();
    for (int c = 0; c < 8; c++) {
        if (layout == mem_row_major)
            p[(size_t)r * ldm + c0 + c] = f.x[c];
        else
            p[r + (size_t)(c0 + c) * ldm] = f.x[c];
    }
}

template <typename U, int M, int N, int K, typename T, typename L>
static inline void fill_fragment(fragment<U, M, N, K, T, L> &f, const T &v)
{
    for (int i = 0; i < (int)fragment<U, M, N, K, T, L>::num_elements; i++)
        f.x[i] = v;
}

/* d = a b + c in exact int32 (the products of two int8 fit in 15 bits;
 * the caller keeps the sums in range, as on the tensor cores): the lane's
 * 8 x 16 products in libcucpu (sim/cucpu/mma.h, vector instructions where
 * the CPU has them). */
template <typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, int> &d,
                            const fragment<matrix_a, 16, 16, 16, signed char, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, signed char, LB> &b,
                            const fragment<accumulator, 16, 16, 16, int> &c, bool satf = false)
{
    (void)satf;
    cucpu_mma_s8(d.x, a.x, b.x, c.x);
}

} // namespace wmma
} // namespace nvcuda

#endif /* __CUDACC__ */

#endif
