/* cucpu: single-source CUDA kernels. A .cu file that includes this header
 * compiles with nvcc for the GPU and, unchanged, with the host C++
 * compiler into a simcuda twin library (sim/include/simcuda_twin.h) that
 * runs the same kernels on the CPU. sim/cucpu/README.md has the rules; in
 * short:
 *
 *   #include "sim/cucpu/cucpu.h"
 *   extern "C" __global__ void scale(float *x, float a, int n)
 *   {
 *       int i = blockIdx.x * blockDim.x + threadIdx.x;
 *       if (i < n)
 *           x[i] = __fmul_rn(x[i], a);
 *   }
 *   CUCPU_EXPORT(scale)
 *
 * CUCPU_EXPORT(name) expands to nothing under nvcc; on the CPU it defines
 * extern "C" int simcuda_twin_name(const simcuda_launch_t *), which unpacks
 * kernelParams by the kernel's parameter types and runs the grid
 * (sim/cucpu/runtime.h). Kernels are extern "C" so that the cubin symbol
 * and the twin name agree.
 *
 * Portable spellings (both compilers):
 *   CUCPU_DYNAMIC_SHARED(T, name)  inside a kernel: T *name points at the
 *                                  block's dynamic shared memory
 *                                  (extern __shared__ under nvcc)
 *   CUCPU_HD                       __host__ __device__ (sim/cucpu/hd.h,
 *                                  also usable from C)
 *   CUCPU_HOT                      after __global__: on the CPU, also build
 *                                  an AVX2 clone of a compute-heavy kernel
 *   cucpu_f8, cucpu_f8_load/store/set1
 *                                  eight floats lane by lane (+ - *), for
 *                                  register-blocked kernels the CPU
 *                                  vectorises
 *
 * Floating point: build device code with nvcc -fmad=false (the make
 * function cucpu_cu does) and host code with -ffp-contract=off, or write
 * the intrinsics (__fmul_rn, __fadd_rn, __fmaf_rn, ...); then every float
 * operation rounds once, in the written order, on both sides. sqrt, fma,
 * division and the conversions are correctly rounded on both;
 * transcendental functions (expf, logf, tanhf, ...) are not bit-identical
 * between CUDA and the C library.
 */
#ifndef CUCPU_H
#define CUCPU_H

#include "sim/cucpu/hd.h"

#ifdef __CUDACC__

/* ---------------------------------------------------------------- device */

#define CUCPU_EXPORT(name)
#define CUCPU_HOT
#define CUCPU_DYNAMIC_SHARED(T, name)                                                      \
    extern __shared__ __align__(16) unsigned char cucpu_dynamic_shared_[];                  \
    T *const name = reinterpret_cast<T *>(cucpu_dynamic_shared_)

/* cucpu_f8 (see below): eight floats, lane by lane. */
struct cucpu_f8 {
    float v[8];
    __device__ __forceinline__ float &operator[](int i) { return v[i]; }
    __device__ __forceinline__ float operator[](int i) const { return v[i]; }
};
#define CUCPU_F8_OP(op)                                                                      \
    static __device__ __forceinline__ cucpu_f8 operator op(cucpu_f8 a, cucpu_f8 b)             \
    {                                                                                        \
        cucpu_f8 r;                                                                          \
        for (int i = 0; i < 8; i++)                                                          \
            r.v[i] = a.v[i] op b.v[i];                                                       \
        return r;                                                                            \
    }                                                                                        \
    static __device__ __forceinline__ cucpu_f8 operator op(cucpu_f8 a, float b)                \
    {                                                                                        \
        cucpu_f8 r;                                                                          \
        for (int i = 0; i < 8; i++)                                                          \
            r.v[i] = a.v[i] op b;                                                            \
        return r;                                                                            \
    }                                                                                        \
    static __device__ __forceinline__ cucpu_f8 operator op(float a, cucpu_f8 b)                \
    {                                                                                        \
        cucpu_f8 r;                                                                          \
        for (int i = 0; i < 8; i++)                                                          \
            r.v[i] = a op b.v[i];                                                            \
        return r;                                                                            \
    }                                                                                        \
    static __device__ __forceinline__ cucpu_f8 &operator op##=(cucpu_f8 &a, cucpu_f8 b)         \
    {                                                                                        \
        a = a op b;                                                                          \
        return a;                                                                            \
    }                                                                                        \
    static __device__ __forceinline__ cucpu_f8 &operator op##=(cucpu_f8 &a, float b)            \
    {                                                                                        \
        a = a op b;                                                                          \
        return a;                                                                            \
    }
CUCPU_F8_OP(+)
CUCPU_F8_OP(-)
CUCPU_F8_OP(*)
#undef CUCPU_F8_OP
static __device__ __forceinline__ cucpu_f8 cucpu_f8_load(const float *p)
{
    cucpu_f8 r;
    for (int i = 0; i < 8; i++)
        r.v[i] = p[i];
    return r;
}
static __device__ __forceinline__ void cucpu_f8_store(float *p, cucpu_f8 v)
{
    for (int i = 0; i < 8; i++)
        p[i] = v.v[i];
}
static __device__ __forceinline__ cucpu_f8 cucpu_f8_set1(float x)
{
    cucpu_f8 r;
    for (int i = 0; i < 8; i++)
        r.v[i] = x;
    return r;
}

#else /* host compiler: the CUDA-on-CPU layer */

#include "sim/cucpu/runtime.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <math.h>
#include <tuple>
#include <type_traits>
#include <utility>

/* ---- qualifiers ---------------------------------------------------------- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
/* One instance per OS thread = per running block (runtime.h). */
#define __shared__ static thread_local
#define __constant__
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define CUCPU_HOT __attribute__((target_clones("avx2", "default")))
#else
#define CUCPU_HOT
#endif

#define CUCPU_DYNAMIC_SHARED(T, name) T *const name = static_cast<T *>(cucpu_self->blk->dyn_shared)

/* ---- built-in variables ------------------------------------------------------ */

typedef cucpu_uint3 uint3;
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1)
        : x(x_), y(y_), z(z_) {}
    constexpr dim3(cucpu_uint3 u) : x(u.x), y(u.y), z(u.z) {}
};
#define threadIdx (cucpu_self->tid)
#define blockIdx (cucpu_self->blk->idx)
#define blockDim (cucpu_self->blk->dim)
#define gridDim (cucpu_self->blk->grid)
#define warpSize 32

/* ---- synchronisation ------------------------------------------------------------ */

static inline void __syncthreads(void) { cucpu_rt_barrier(0, nullptr); }
static inline int __syncthreads_count(int pred) { return cucpu_rt_barrier(pred, nullptr); }
static inline int __syncthreads_and(int pred)
{
    unsigned int n;
    return (unsigned int)cucpu_rt_barrier(pred, &n) == n;
}
static inline int __syncthreads_or(int pred) { return cucpu_rt_barrier(pred, nullptr) != 0; }
static inline void __syncwarp(unsigned int mask = 0xffffffffu)
{
    cucpu_rt_warp(CUCPU_WOP_SYNC, mask, 0, 0, 32);
}
static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* ---- warp shuffles and votes ---------------------------------------------------------- */

namespace cucpu_detail {
template <typename T> static inline uint64_t bits(T v)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "shuffled values are at most 8 bytes");
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof(T));
    return u;
}
template <typename T> static inline T from_bits(uint64_t u)
{
    T v;
    std::memcpy(&v, &u, sizeof(T));
    return v;
}
} // namespace cucpu_detail

template <typename T> static inline T __shfl_sync(unsigned int mask, T var, int src, int width = 32)
{
    return cucpu_detail::from_bits<T>(
        cucpu_rt_warp(CUCPU_WOP_SHFL, mask, cucpu_detail::bits(var), src, width));
}
template <typename T>
static inline T __shfl_up_sync(unsigned int mask, T var, unsigned int delta, int width = 32)
{
    return cucpu_detail::from_bits<T>(
        cucpu_rt_warp(CUCPU_WOP_SHFL_UP, mask, cucpu_detail::bits(var), (int)delta, width));
}
template <typename T>
static inline T __shfl_down_sync(unsigned int mask, T var, unsigned int delta, int width = 32)
{
    return cucpu_detail::from_bits<T>(
        cucpu_rt_warp(CUCPU_WOP_SHFL_DOWN, mask, cucpu_detail::bits(var), (int)delta, width));
}
template <typename T>
static inline T __shfl_xor_sync(unsigned int mask, T var, int lane_mask, int width = 32)
{
    return cucpu_detail::from_bits<T>(
        cucpu_rt_warp(CUCPU_WOP_SHFL_XOR, mask, cucpu_detail::bits(var), lane_mask, width));
}
static inline unsigned int __ballot_sync(unsigned int mask, int pred)
{
    return (unsigned int)cucpu_rt_warp(CUCPU_WOP_BALLOT, mask, pred != 0, 0, 32);
}
static inline int __any_sync(unsigned int mask, int pred)
{
    return (int)cucpu_rt_warp(CUCPU_WOP_ANY, mask, pred != 0, 0, 32);
}
static inline int __all_sync(unsigned int mask, int pred)
{
    return (int)cucpu_rt_warp(CUCPU_WOP_ALL, mask, pred != 0, 0, 32);
}
static inline unsigned int __activemask(void) { return cucpu_rt_activemask(); }

/* ---- atomics (relaxed, as on a GPU) ------------------------------------------------------ */

#define CUCPU_RLX __ATOMIC_RELAXED

namespace cucpu_detail {
/* A CAS loop applying f to the old value. */
template <typename T, typename F> static inline T cas_loop(T *a, F f)
{
    T old;
    __atomic_load(a, &old, CUCPU_RLX);
    for (;;) {
        T nv = f(old);
        if (__atomic_compare_exchange(a, &old, &nv, false, CUCPU_RLX, CUCPU_RLX))
            return old;
    }
}
/* Float atomic add on a GPU flushes denormal inputs and results to zero
 * (RED/ATOM .ADD.F32.FTZ.RN). */
static inline float ftz(float x)
{
    return std::fabs(x) < 1.17549435e-38f ? std::copysign(0.0f, x) : x;
}
} // namespace cucpu_detail

static inline int atomicAdd(int *a, int v) { return __atomic_fetch_add(a, v, CUCPU_RLX); }
static inline unsigned int atomicAdd(unsigned int *a, unsigned int v)
{
    return __atomic_fetch_add(a, v, CUCPU_RLX);
}
static inline unsigned long long atomicAdd(unsigned long long *a, unsigned long long v)
{
    return __atomic_fetch_add(a, v, CUCPU_RLX);
}
static inline float atomicAdd(float *a, float v)
{
    return cucpu_detail::cas_loop(a, [v](float o) {
        return cucpu_detail::ftz(cucpu_detail::ftz(o) + cucpu_detail::ftz(v));
    });
}
static inline double atomicAdd(double *a, double v)
{
    return cucpu_detail::cas_loop(a, [v](double o) { return o + v; });
}
static inline int atomicSub(int *a, int v) { return __atomic_fetch_sub(a, v, CUCPU_RLX); }
static inline unsigned int atomicSub(unsigned int *a, unsigned int v)
{
    return __atomic_fetch_sub(a, v, CUCPU_RLX);
}
template <typename T> static inline T atomicExch(T *a, T v)
{
    T old;
    __atomic_exchange(a, &v, &old, CUCPU_RLX);
    return old;
}
template <typename T> static inline T atomicMin(T *a, T v)
{
    static_assert(std::is_integral<T>::value, "atomicMin on integers");
    return cucpu_detail::cas_loop(a, [v](T o) { return v < o ? v : o; });
}
template <typename T> static inline T atomicMax(T *a, T v)
{
    static_assert(std::is_integral<T>::value, "atomicMax on integers");
    return cucpu_detail::cas_loop(a, [v](T o) { return v > o ? v : o; });
}
static inline unsigned int atomicInc(unsigned int *a, unsigned int v)
{
    return cucpu_detail::cas_loop(a, [v](unsigned int o) { return o >= v ? 0u : o + 1u; });
}
static inline unsigned int atomicDec(unsigned int *a, unsigned int v)
{
    return cucpu_detail::cas_loop(a, [v](unsigned int o) { return o == 0 || o > v ? v : o - 1u; });
}
template <typename T> static inline T atomicCAS(T *a, T cmp, T v)
{
    static_assert(std::is_integral<T>::value, "atomicCAS on integers");
    __atomic_compare_exchange(a, &cmp, &v, false, CUCPU_RLX, CUCPU_RLX);
    return cmp;
}
template <typename T> static inline T atomicAnd(T *a, T v) { return __atomic_fetch_and(a, v, CUCPU_RLX); }
template <typename T> static inline T atomicOr(T *a, T v) { return __atomic_fetch_or(a, v, CUCPU_RLX); }
template <typename T> static inline T atomicXor(T *a, T v) { return __atomic_fetch_xor(a, v, CUCPU_RLX); }
template <typename T, typename U> static inline T atomicAdd_block(T *a, U v) { return atomicAdd(a, (T)v); }
template <typename T, typename U> static inline T atomicAdd_system(T *a, U v) { return atomicAdd(a, (T)v); }

/* ---- floating-point intrinsics (round to nearest even, never contracted) ---------------------- */

static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return std::sqrt(a); }
static inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __drcp_rn(double a) { return 1.0 / a; }
static inline double __dsqrt_rn(double a) { return std::sqrt(a); }
static inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
static inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }

/* ---- conversions (the GPU's saturating forms: NaN gives 0) ---------------------------------- */

namespace cucpu_detail {
template <typename I> static inline I sat(double r)
{
    if (r != r)
        return 0;
    if (r <= (double)std::numeric_limits<I>::min())
        return std::numeric_limits<I>::min();
    if (r >= (double)std::numeric_limits<I>::max())
        return std::numeric_limits<I>::max();
    return (I)r;
}
} // namespace cucpu_detail

static inline int __float2int_rn(float x) { return cucpu_detail::sat<int>(std::nearbyint((double)x)); }
static inline int __float2int_rz(float x) { return cucpu_detail::sat<int>(std::trunc((double)x)); }
static inline int __float2int_rd(float x) { return cucpu_detail::sat<int>(std::floor((double)x)); }
static inline int __float2int_ru(float x) { return cucpu_detail::sat<int>(std::ceil((double)x)); }
static inline unsigned int __float2uint_rn(float x)
{
    return cucpu_detail::sat<unsigned int>(std::nearbyint((double)x));
}
static inline unsigned int __float2uint_rz(float x)
{
    return cucpu_detail::sat<unsigned int>(std::trunc((double)x));
}
static inline float __int2float_rn(int x) { return (float)x; }
static inline float __uint2float_rn(unsigned int x) { return (float)x; }
static inline float __double2float_rn(double x) { return (float)x; }
static inline int __float_as_int(float x) { return cucpu_detail::from_bits<int>(cucpu_detail::bits(x)); }
static inline float __int_as_float(int x) { return cucpu_detail::from_bits<float>(cucpu_detail::bits(x)); }
static inline unsigned int __float_as_uint(float x)
{
    return cucpu_detail::from_bits<unsigned int>(cucpu_detail::bits(x));
}
static inline float __uint_as_float(unsigned int x)
{
    return cucpu_detail::from_bits<float>(cucpu_detail::bits(x));
}
static inline long long __double_as_longlong(double x)
{
    return cucpu_detail::from_bits<long long>(cucpu_detail::bits(x));
}
static inline double __longlong_as_double(long long x)
{
    return cucpu_detail::from_bits<double>(cucpu_detail::bits(x));
}

/* ---- integer intrinsics ----------------------------------------------------------------------- */

static inline unsigned int __umulhi(unsigned int a, unsigned int b)
{
    return (unsigned int)(((unsigned long long)a * b) >> 32);
}
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b)
{
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline long long __mul64hi(long long a, long long b)
{
    return (long long)(((__int128)a * b) >> 64);
}
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned int)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned int __brev(unsigned int x)
{
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
static inline unsigned long long __brevll(unsigned long long x)
{
    return ((unsigned long long)__brev((unsigned int)x) << 32) | __brev((unsigned int)(x >> 32));
}
static inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi, unsigned int s)
{
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned int)((v << (s & 31u)) >> 32);
}
static inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int s)
{
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned int)(v >> (s & 31u));
}

/* min / max as CUDA overloads them */
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
static inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b)
{
    return a < b ? a : b;
}
static inline unsigned long long max(unsigned long long a, unsigned long long b)
{
    return a > b ? a : b;
}
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }

/* ---- memory, time, traps ------------------------------------------------------------------------ */

template <typename T> static inline T __ldg(const T *p) { return *p; }
static inline long long clock64(void) { return (long long)cucpu_rt_clock(); }
static inline void __nanosleep(unsigned int ns) { (void)ns; }
static inline void __trap(void) { cucpu_rt_trap("__trap() called"); }

/* ---- cucpu_f8: eight floats lane by lane ---------------------------------------------------------- */

/* +, -, * of two cucpu_f8 or of one and a float, compound forms, v[i]: each
 * lane is exactly the scalar IEEE operation (the same bits as scalar code,
 * never contracted). A GCC vector on the CPU, so register-blocked kernels
 * vectorise; a struct of eight floats under nvcc. */
typedef float cucpu_f8 __attribute__((vector_size(32)));
static inline __attribute__((always_inline)) cucpu_f8 cucpu_f8_load(const float *p)
{
    cucpu_f8 r;
    std::memcpy(&r, p, sizeof(r));
    return r;
}
static inline __attribute__((always_inline)) void cucpu_f8_store(float *p, cucpu_f8 v)
{
    std::memcpy(p, &v, sizeof(v));
}
static inline __attribute__((always_inline)) cucpu_f8 cucpu_f8_set1(float x)
{
    return cucpu_f8{x, x, x, x, x, x, x, x};
}

/* ---- launching ------------------------------------------------------------------------------------ */

namespace cucpu_detail {
template <typename T> static inline T param(void *const *params, size_t i)
{
    static_assert(std::is_trivially_copyable<T>::value, "kernel parameters are copied bytes");
    T v;
    std::memcpy(&v, params[i], sizeof(T));
    return v;
}

/* A launch of kernel F with its parameters unpacked once: body runs one
 * thread, range the plain-loop phase of a block with F inlined into the
 * loop (runtime.h). */
template <auto F, typename... A> struct call {
    std::tuple<typename std::decay<A>::type...> args;
    static void body(void *p)
    {
        call *c = static_cast<call *>(p);
        std::apply(F, c->args);
    }
    static void range(void *p, cucpu_range *r)
    {
        call *c = static_cast<call *>(p);
        const cucpu_block_info *b = r->cur.blk;
        if (b->dim.x != b->nthreads) {
            while (r->next < r->n) {
                cucpu_range_start(r);
                std::apply(F, c->args);
                if (r->tracked)
                    return;
            }
            return;
        }
        /* a 1-D block: threadIdx.x is the linear id */
        const unsigned int *order = r->order;
        const unsigned int n = r->n;
        r->cur.tid.y = 0;
        r->cur.tid.z = 0;
        for (unsigned int k = r->next; k < n;) {
            unsigned int i = order[k++];
            r->next = k;
            r->cur.tid.x = i;
            r->cur.lane = i % CUCPU_WARP;
            r->cur.lin = i;
            cucpu_self = &r->cur;
            std::apply(F, c->args);
            if (r->tracked)
                return;
        }
    }
};

template <auto F, typename... A, size_t... I>
static inline int launch_(void (*)(A...), const char *name, const simcuda_launch_t *L,
                          std::index_sequence<I...>)
{
    if (!L || L->abi != SIMCUDA_TWIN_ABI || (sizeof...(A) > 0 && !L->params))
        return cucpu_rt_bad_abi(name);
    call<F, A...> c{std::tuple<typename std::decay<A>::type...>(
        param<typename std::decay<A>::type>(L->params, I)...)};
    return cucpu_rt_launch_range(L, name, &call<F, A...>::body, &call<F, A...>::range, &c);
}

template <auto F, typename... A>
static inline int launch_f(void (*f)(A...), const char *name, const simcuda_launch_t *L)
{
    return launch_<F>(f, name, L, std::index_sequence_for<A...>{});
}

template <auto F> static inline int launch(const char *name, const simcuda_launch_t *L)
{
    return launch_f<F>(F, name, L);
}
} // namespace cucpu_detail

#define CUCPU_EXPORT(name)                                                                       \
    extern "C" __attribute__((visibility("default"))) int simcuda_twin_##name(                   \
        const simcuda_launch_t *launch);                                                         \
    extern "C" __attribute__((visibility("default"))) int simcuda_twin_##name(                   \
        const simcuda_launch_t *launch)                                                          \
    {                                                                                            \
        return cucpu_detail::launch<&name>(#name, launch);                                       \
    }

#endif /* __CUDACC__ */

#endif
