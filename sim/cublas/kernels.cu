/* simcuda cuBLAS's kernels, single source (sim/cucpu): nvcc builds the
 * fatbin embedded in libcublas.so.13 (loaded per context with
 * cuModuleLoadData), the host compiler the twin library simcuda runs them
 * from. The library reads no device memory itself: every GEMM, level 1/2
 * routine and scalar result is one of these kernels.
 *
 * Summation orders (gemm.h, level12.c are the plain-C references the tests
 * compare with, bit for bit):
 *   GEMM      per element of C: chunk partials of kc products from 0, k
 *             ascending; chunk partials added in order into the split sum;
 *             split sums added in split order (simcublas_gemm_epilogue);
 *             C = alpha*t + beta*C (beta == 0: C not read; alpha == 0 or
 *             k == 0: C = beta*C, A and B not read).
 *   gemv      over columns (N) or rows (T) ascending; dot ascending; nrm2 in
 *             double; symv over columns ascending.
 *   symv with atomics: y = beta*y, then one thread per column adds its
 *             alpha*a_ij*x_j into every y_i with float atomicAdd, so the
 *             order of the columns' contributions is the GPU's (the layer's)
 *             thread order, different from launch to launch.
 */
#include "sim/cucpu/cucpu.h"

#include "sim/common/f16_impl.h"
#include "sim/cublas/kparams.h"

enum { T_F32 = 0, T_F16 = 1, T_BF16 = 2 };
enum { R_NONE = 0, R_TF32 = 1, R_BF16 = 2, R_F16 = 3 };

/* ---- elements ------------------------------------------------------------------- */

template <int T> static __device__ __forceinline__ float ld(const void *p, long long i)
{
    if (T == T_F16)
        return sim_f16_half_to_float_(((const uint16_t *)p)[i]);
    if (T == T_BF16)
        return sim_f16_bf16_to_float_(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

static __device__ __forceinline__ float ld_any(const void *p, long long i, int t)
{
    return t == T_F16 ? ld<T_F16>(p, i) : t == T_BF16 ? ld<T_BF16>(p, i) : ld<T_F32>(p, i);
}

static __device__ __forceinline__ void st_any(void *p, long long i, int t, float v)
{
    if (t == T_F16)
        ((uint16_t *)p)[i] = sim_f16_float_to_half_(v);
    else if (t == T_BF16)
        ((uint16_t *)p)[i] = sim_f16_float_to_bf16_(v);
    else
        ((float *)p)[i] = v;
}

static __device__ __forceinline__ float round_tf32(float f)
{
    uint32_t x = sim_f16_fbits(f);
    if ((x & 0x7f800000u) == 0x7f800000u)
        return f;
    x += 0xfffu + ((x >> 13) & 1u);
    x &= ~0x1fffu;
    return sim_f16_bitsf(x);
}

/* The down-conversion of a "fast" compute type (sim_round_input). */
template <int R> static __device__ __forceinline__ float rnd(float f)
{
    if (R == R_TF32)
        return round_tf32(f);
    if (R == R_BF16)
        return sim_f16_bf16_to_float_(sim_f16_float_to_bf16_(f));
    if (R == R_F16)
        return sim_f16_half_to_float_(sim_f16_float_to_half_(f));
    return f;
}

static __device__ __forceinline__ size_t esize(int t)
{
    return t == T_F32 ? 4 : 2;
}

/* Element i of an n-vector with increment inc (BLAS: a negative increment
 * walks from the far end). */
static __device__ __forceinline__ long long vi(long long i, long long n, long long inc)
{
    return inc > 0 ? i * inc : (n - 1 - i) * (-inc);
}

static __device__ __forceinline__ float scalar(const float *p, float v)
{
    return p ? *p : v;
}

/* ---- GEMM -------------------------------------------------------------------------- */

/* The 8x8 tile of C at (i0, j0) (mr x nr of it inside C): the split sum s
 * over k in [k0, k1) in chunks of kc. A's rows are packed per 64 k into a
 * local array (converted, rounded, zero beyond mr), so the product loop
 * reads one cucpu_f8 per k whatever A's layout. ta, tb, full: constants
 * where the caller specialises (float without rounding), else read at run
 * time. */
template <int AT, int R>
static __device__ __forceinline__ void gemm_tile(const simcublas_gemm_kp_t &p, const void *A,
                                                 const void *B, long long i0, long long j0,
                                                 long long k0, long long k1, int mr, int nr,
                                                 bool ta, bool tb, bool full, cucpu_f8 *s)
{
    float at[64][8];
    const int MR = full ? 8 : mr, NR = full ? 8 : nr;
    for (long long c0 = k0; c0 < k1; c0 += p.kc) {
        long long c1 = c0 + p.kc < k1 ? c0 + p.kc : k1;
        cucpu_f8 pp[8];
        for (int c = 0; c < 8; c++)
            pp[c] = cucpu_f8_set1(0.0f);
        /* Float rows of a full tile in column order: read in place. */
        const bool direct = !ta && full && AT == T_F32 && R == R_NONE;
        for (long long w0 = c0; w0 < c1; w0 += 64) {
            int kw = c1 - w0 < 64 ? (int)(c1 - w0) : 64;
            if (direct) {
            } else if (ta) {
                for (int r = 0; r < 8; r++) {
                    long long base = (i0 + r) * p.lda + w0;
                    for (int q = 0; q < kw; q++)
                        at[q][r] = r < MR ? rnd<R>(ld<AT>(A, base + q)) : 0.0f;
                }
            } else {
                for (int q = 0; q < kw; q++) {
                    long long base = i0 + (w0 + q) * p.lda;
                    for (int r = 0; r < 8; r++)
                        at[q][r] = r < MR ? rnd<R>(ld<AT>(A, base + r)) : 0.0f;
                }
            }
            for (int q = 0; q < kw; q++) {
                long long k = w0 + q;
                cucpu_f8 av = direct ? cucpu_f8_load((const float *)A + i0 + k * p.lda)
                                     : cucpu_f8_load(at[q]);
                for (int c = 0; c < 8; c++) {
                    float bc = 0.0f;
                    if (c < NR)
                        bc = rnd<R>(ld<AT>(B, tb ? (j0 + c) + k * p.ldb : k + (j0 + c) * p.ldb));
                    pp[c] += av * bc;
                }
            }
        }
        if (c0 == k0) {
            for (int c = 0; c < 8; c++)
                s[c] = pp[c];
        } else {
            for (int c = 0; c < 8; c++)
                s[c] += pp[c];
        }
    }
}

/* Float without rounding, the common case: specialised per transposition
 * and full tile. */
static __device__ __noinline__ CUCPU_HOT void gemm_tile_f32(const simcublas_gemm_kp_t &p, const void *A,
                                                  const void *B, long long i0, long long j0,
                                                  long long k0, long long k1, int mr, int nr,
                                                  cucpu_f8 *s)
{
    bool full = mr == 8 && nr == 8;
    int sel = (p.transa ? 2 : 0) + (p.transb ? 1 : 0);
    if (full) {
        switch (sel) {
        case 0: gemm_tile<T_F32, R_NONE>(p, A, B, i0, j0, k0, k1, 8, 8, false, false, true, s); break;
        case 1: gemm_tile<T_F32, R_NONE>(p, A, B, i0, j0, k0, k1, 8, 8, false, true, true, s); break;
        case 2: gemm_tile<T_F32, R_NONE>(p, A, B, i0, j0, k0, k1, 8, 8, true, false, true, s); break;
        default: gemm_tile<T_F32, R_NONE>(p, A, B, i0, j0, k0, k1, 8, 8, true, true, true, s); break;
        }
    } else {
        gemm_tile<T_F32, R_NONE>(p, A, B, i0, j0, k0, k1, mr, nr, p.transa != 0, p.transb != 0,
                                 false, s);
    }
}

/* Other element types and roundings: one generic version each. */
template <int AT, int R>
static __device__ __noinline__ CUCPU_HOT void gemm_tile_gen(const simcublas_gemm_kp_t &p, const void *A,
                                                  const void *B, long long i0, long long j0,
                                                  long long k0, long long k1, int mr, int nr,
                                                  cucpu_f8 *s)
{
    gemm_tile<AT, R>(p, A, B, i0, j0, k0, k1, mr, nr, p.transa != 0, p.transb != 0, false, s);
}

/* C = alpha*t + beta*C for one element (beta == 0: C not read). */
static __device__ __forceinline__ void blend_c(void *C, long long idx, int ct, float alpha,
                                               float t, float beta)
{
    float v = __fmul_rn(alpha, t);
    if (beta != 0.0f)
        v = __fadd_rn(v, __fmul_rn(beta, ld_any(C, idx, ct)));
    st_any(C, idx, ct, v);
}

/* C = beta*C (alpha == 0 or k == 0). */
static __device__ __forceinline__ void scale_c(void *C, long long idx, int ct, float beta)
{
    st_any(C, idx, ct, beta == 0.0f ? 0.0f : __fmul_rn(beta, ld_any(C, idx, ct)));
}

static __device__ __forceinline__ const void *mat(const void *base, int ptr_array, long long b,
                                                  long long stride, int t)
{
    if (ptr_array)
        return ((const void *const *)base)[b];
    return (const char *)base + b * stride * (long long)esize(t);
}

/* grid (ceil(m/64), min(ceil(n/64), 65535), min(batch*splitk, 65535)),
 * 64 threads: the split sums of the thread's 8x8 tiles of C (column tiles
 * and batch x split beyond the grid in strides); with one split the result
 * (alpha, beta applied), else into the workspace for the epilogue. */
extern "C" __global__ CUCPU_HOT void simcublas_gemm(simcublas_gemm_kp_t p)
{
    unsigned int t = threadIdx.x;
    long long ntn = (p.n + SIMCUBLAS_GEMM_TILE - 1) / SIMCUBLAS_GEMM_TILE;
    float alpha = scalar(p.palpha, p.alpha), beta = scalar(p.pbeta, p.beta);
    long long zn = (long long)p.batch * p.splitk;
    long long i0 = (long long)blockIdx.x * SIMCUBLAS_GEMM_TILE + (t % 8u) * 8;
    if (i0 >= p.m)
        return;
    int mr = p.m - i0 < 8 ? (int)(p.m - i0) : 8;
    for (long long ty = blockIdx.y; ty < ntn; ty += gridDim.y)
    for (long long z = blockIdx.z; z < zn; z += gridDim.z) {
        long long j0 = ty * SIMCUBLAS_GEMM_TILE + (t / 8u) * 8;
        if (j0 >= p.n)
            break;
        int nr = p.n - j0 < 8 ? (int)(p.n - j0) : 8;
        long long b = z / p.splitk, sp = z % p.splitk;
        void *C = (void *)mat(p.C, p.ptr_array, b, p.sc, p.ctype);
        if (alpha == 0.0f) {
            if (p.splitk == 1)
                for (int c = 0; c < nr; c++)
                    for (int r = 0; r < mr; r++)
                        scale_c(C, (i0 + r) + (j0 + c) * p.ldc, p.ctype, beta);
            continue; /* several splits: the epilogue scales C */
        }
        const void *A = mat(p.A, p.ptr_array, b, p.sa, p.atype);
        const void *B = mat(p.B, p.ptr_array, b, p.sb, p.atype);
        long long k0 = sp * p.kper, k1 = k0 + p.kper < p.k ? k0 + p.kper : p.k;
        cucpu_f8 s[8];
        switch (p.atype * 4 + p.round) {
        case T_F32 * 4 + R_NONE: gemm_tile_f32(p, A, B, i0, j0, k0, k1, mr, nr, s); break;
        case T_F32 * 4 + R_TF32: gemm_tile_gen<T_F32, R_TF32>(p, A, B, i0, j0, k0, k1, mr, nr, s); break;
        case T_F32 * 4 + R_BF16: gemm_tile_gen<T_F32, R_BF16>(p, A, B, i0, j0, k0, k1, mr, nr, s); break;
        case T_F32 * 4 + R_F16: gemm_tile_gen<T_F32, R_F16>(p, A, B, i0, j0, k0, k1, mr, nr, s); break;
        case T_F16 * 4 + R_NONE: gemm_tile_gen<T_F16, R_NONE>(p, A, B, i0, j0, k0, k1, mr, nr, s); break;
        case T_BF16 * 4 + R_NONE: gemm_tile_gen<T_BF16, R_NONE>(p, A, B, i0, j0, k0, k1, mr, nr, s); break;
        default: __trap();
        }
        if (p.splitk == 1) {
            for (int c = 0; c < nr; c++)
                for (int r = 0; r < mr; r++)
                    blend_c(C, (i0 + r) + (j0 + c) * p.ldc, p.ctype, alpha, s[c][r], beta);
        } else {
            float *w = p.ws + z * p.m * p.n;
            for (int c = 0; c < nr; c++)
                for (int r = 0; r < mr; r++)
                    w[(i0 + r) + (j0 + c) * p.m] = s[c][r];
        }
    }
}
CUCPU_EXPORT(simcublas_gemm)

/* Grid-stride over batch x m x n: the split sums added in split order, then
 * C = alpha*t + beta*C; or, for alpha == 0, k == 0 or splitk == 0 (no
 * partials), C = beta*C. */
extern "C" __global__ void simcublas_gemm_epilogue(simcublas_gemm_kp_t p)
{
    long long mn = p.m * p.n, total = mn * p.batch;
    float alpha = scalar(p.palpha, p.alpha), beta = scalar(p.pbeta, p.beta);
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        long long b = e / mn, r = e - b * mn, j = r / p.m, i = r - j * p.m;
        void *C = (void *)mat(p.C, p.ptr_array, b, p.sc, p.ctype);
        long long idx = i + j * p.ldc;
        if (alpha == 0.0f || p.k == 0 || p.splitk == 0) {
            scale_c(C, idx, p.ctype, beta);
            continue;
        }
        const float *w = p.ws + b * p.splitk * mn + r;
        float t = w[0];
        for (int s = 1; s < p.splitk; s++)
            t = __fadd_rn(t, w[s * mn]);
        blend_c(C, idx, p.ctype, alpha, t, beta);
    }
}
CUCPU_EXPORT(simcublas_gemm_epilogue)

/* ---- level 1 and 2 ----------------------------------------------------------------- */

/* y = alpha*op(A)*x + beta*y, one thread per element of y: the sum over
 * columns (N) or rows (T) ascending, from 0. */
extern "C" __global__ void simcublas_gemv(int trans, long long m, long long n, float alpha,
                                          const float *palpha, const float *A, long long lda,
                                          const float *x, long long incx, float beta,
                                          const float *pbeta, float *y, long long incy)
{
    long long leny = trans ? n : m, lenx = trans ? m : n;
    float al = scalar(palpha, alpha), be = scalar(pbeta, beta);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < leny;
         i += (long long)gridDim.x * blockDim.x) {
        float *yi = &y[vi(i, leny, incy)];
        if (lenx <= 0 || al == 0.0f) {
            *yi = be == 0.0f ? 0.0f : __fmul_rn(be, *yi);
            continue;
        }
        float t = 0.0f;
        if (!trans)
            for (long long j = 0; j < n; j++)
                t = __fadd_rn(t, __fmul_rn(A[i + j * lda], x[vi(j, n, incx)]));
        else
            for (long long r = 0; r < m; r++)
                t = __fadd_rn(t, __fmul_rn(A[r + i * lda], x[vi(r, m, incx)]));
        float v = __fmul_rn(al, t);
        *yi = be == 0.0f ? v : __fadd_rn(v, __fmul_rn(be, *yi));
    }
}
CUCPU_EXPORT(simcublas_gemv)

/* y += alpha*x (alpha == 0: nothing). */
extern "C" __global__ void simcublas_axpy(long long n, float alpha, const float *palpha,
                                          const float *x, long long incx, float *y,
                                          long long incy)
{
    float al = scalar(palpha, alpha);
    if (al == 0.0f)
        return;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float *yi = &y[vi(i, n, incy)];
        *yi = __fadd_rn(*yi, __fmul_rn(al, x[vi(i, n, incx)]));
    }
}
CUCPU_EXPORT(simcublas_axpy)

/* x *= alpha. */
extern "C" __global__ void simcublas_scal(long long n, float alpha, const float *palpha, float *x,
                                          long long incx)
{
    float al = scalar(palpha, alpha);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float *xi = &x[vi(i, n, incx)];
        *xi = __fmul_rn(*xi, al);
    }
}
CUCPU_EXPORT(simcublas_scal)

/* *result = x . y, ascending, one thread. */
extern "C" __global__ void simcublas_dot(long long n, const float *x, long long incx,
                                         const float *y, long long incy, float *result)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    float s = 0.0f;
    for (long long i = 0; i < n; i++)
        s = __fadd_rn(s, __fmul_rn(x[vi(i, n, incx)], y[vi(i, n, incy)]));
    *result = s;
}
CUCPU_EXPORT(simcublas_dot)

/* *result = ||x||, squares summed in double ascending, one thread (an
 * increment <= 0 gives 0, as BLAS). */
extern "C" __global__ void simcublas_nrm2(long long n, const float *x, long long incx,
                                          float *result)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    double s = 0.0;
    if (incx > 0)
        for (long long i = 0; i < n; i++) {
            double v = (double)x[i * incx];
            s = __dadd_rn(s, __dmul_rn(v, v));
        }
    *result = (float)__dsqrt_rn(s);
}
CUCPU_EXPORT(simcublas_nrm2)

/* A(i, j) of a symmetric matrix stored in one triangle. */
static __device__ __forceinline__ float sym_at(const float *A, long long lda, int upper,
                                               long long i, long long j)
{
    int stored = upper ? i <= j : i >= j;
    return stored ? A[i + j * lda] : A[j + i * lda];
}

/* y = alpha*A*x + beta*y without atomics: one thread per row, columns
 * ascending. */
extern "C" __global__ void simcublas_symv(int upper, long long n, float alpha, const float *palpha,
                                          const float *A, long long lda, const float *x,
                                          long long incx, float beta, const float *pbeta, float *y,
                                          long long incy)
{
    float al = scalar(palpha, alpha), be = scalar(pbeta, beta);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float t = 0.0f;
        if (al != 0.0f)
            for (long long j = 0; j < n; j++)
                t = __fadd_rn(t, __fmul_rn(sym_at(A, lda, upper, i, j), x[vi(j, n, incx)]));
        float *yi = &y[vi(i, n, incy)];
        float v = __fmul_rn(al, t);
        *yi = be == 0.0f ? v : __fadd_rn(v, __fmul_rn(be, *yi));
    }
}
CUCPU_EXPORT(simcublas_symv)

/* Atomics mode, first kernel: y = beta*y (beta == 0: y not read). */
extern "C" __global__ void simcublas_symv_scale(long long n, float beta, const float *pbeta,
                                                float *y, long long incy)
{
    float be = scalar(pbeta, beta);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float *yi = &y[vi(i, n, incy)];
        *yi = be == 0.0f ? 0.0f : __fmul_rn(be, *yi);
    }
}
CUCPU_EXPORT(simcublas_symv_scale)

/* Atomics mode, second kernel: thread j adds alpha*A(i,j)*x_j into every
 * y_i with float atomics (CUBLAS_ATOMICS_ALLOWED: faster, not
 * reproducible). */
extern "C" __global__ void simcublas_symv_atomic(int upper, long long n, float alpha,
                                                 const float *palpha, const float *A,
                                                 long long lda, const float *x, long long incx,
                                                 float *y, long long incy)
{
    float al = scalar(palpha, alpha);
    if (al == 0.0f)
        return;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (long long)gridDim.x * blockDim.x) {
        float xj = x[vi(j, n, incx)];
        for (long long i = 0; i < n; i++)
            atomicAdd(&y[vi(i, n, incy)], __fmul_rn(al, __fmul_rn(sym_at(A, lda, upper, i, j), xj)));
    }
}
CUCPU_EXPORT(simcublas_symv_atomic)
