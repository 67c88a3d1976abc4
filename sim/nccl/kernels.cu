/* simcuda NCCL's kernels, single source (sim/cucpu): nvcc builds the fatbin
 * embedded in libnccl.so.2 (loaded per context with cuModuleLoadData), the
 * host compiler the twin library simcuda runs them from. They are the whole
 * data path of a collective: copies between the ranks' buffers and the
 * staging buffers every rank maps (VMM allocations exported as file
 * descriptors), and the reduction, which folds each element over the ranks
 * in the order the plan gives (nkern.h's simnccl_segment) with the
 * arithmetic of reduce.c's reference engine, bit for bit:
 *   integers   wrapping (unsigned) sum and product, max, min; avg = sum / n;
 *   float, double  in the type; avg multiplies each input by (T)(1/n) first;
 *              max/min as fmaxf/fminf (fmax/fmin);
 *   half, bfloat16  every operation exact in double, rounded once to the
 *              16-bit type (as the device's __hadd/__hmul);
 * each element's inputs are read before its outputs are written, so
 * outputs may alias inputs at the same positions. */
#include "sim/cucpu/cucpu.h"

#include "sim/common/f16_impl.h"
#include "sim/nccl/nkern.h"

/* ncclDataType_t and SIM_OP_* values (nccl.h, simnccl.h). */
enum { T_I8 = 0, T_U8, T_I32, T_U32, T_I64, T_U64, T_F16, T_F32, T_F64, T_BF16 };
enum { OP_SUM = 0, OP_PROD, OP_MAX, OP_MIN, OP_AVG };

/* grid-stride: SIMNCCL_COPY_CHUNK bytes per thread over all segments */
extern "C" __global__ void simnccl_copy(simnccl_copy_kp_t p)
{
    unsigned long long nchunks = 0;
    for (unsigned long long s = 0; s < p.n; s++)
        nchunks += (p.seg[s].bytes + SIMNCCL_COPY_CHUNK - 1) / SIMNCCL_COPY_CHUNK;
    for (unsigned long long c = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         c < nchunks; c += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long k = c, s = 0;
        for (; s < p.n; s++) {
            unsigned long long m = (p.seg[s].bytes + SIMNCCL_COPY_CHUNK - 1) / SIMNCCL_COPY_CHUNK;
            if (k < m)
                break;
            k -= m;
        }
        unsigned long long off = k * SIMNCCL_COPY_CHUNK, len = p.seg[s].bytes - off;
        if (len > SIMNCCL_COPY_CHUNK)
            len = SIMNCCL_COPY_CHUNK;
        memcpy((char *)p.seg[s].dst + off, (const char *)p.seg[s].src + off, (size_t)len);
    }
}
CUCPU_EXPORT(simnccl_copy)

/* ---- folds of a run of elements ------------------------------------------------------ */

/* A run of m <= SIMNCCL_RED_VEC elements that share one fold order: in[k]
 * is the k-th input of the order (already offset to the run), results to
 * out (and out2). The accumulator is local, so outputs may alias inputs. */
#define SIMNCCL_RED_VEC 64

template <typename T, typename U, int OP>
static __device__ __forceinline__ void run_int(const void *const *in, int n, unsigned int m,
                                               void *out, void *out2)
{
    T acc[SIMNCCL_RED_VEC];
    const T *x0 = (const T *)in[0];
    for (unsigned int i = 0; i < m; i++)
        acc[i] = x0[i];
    for (int k = 1; k < n; k++) {
        const T *x = (const T *)in[k];
        for (unsigned int i = 0; i < m; i++) {
            if (OP == OP_SUM || OP == OP_AVG)
                acc[i] = (T)((U)acc[i] + (U)x[i]);
            else if (OP == OP_PROD)
                acc[i] = (T)((U)acc[i] * (U)x[i]);
            else if (OP == OP_MAX)
                acc[i] = x[i] > acc[i] ? x[i] : acc[i];
            else
                acc[i] = x[i] < acc[i] ? x[i] : acc[i];
        }
    }
    if (OP == OP_AVG)
        for (unsigned int i = 0; i < m; i++)
            acc[i] = (T)(acc[i] / (T)n);
    for (unsigned int i = 0; i < m; i++)
        ((T *)out)[i] = acc[i];
    if (out2)
        for (unsigned int i = 0; i < m; i++)
            ((T *)out2)[i] = acc[i];
}

static __device__ __forceinline__ float fmx(float a, float b) { return fmaxf(a, b); }
static __device__ __forceinline__ float fmn(float a, float b) { return fminf(a, b); }
static __device__ __forceinline__ double fmx(double a, double b) { return fmax(a, b); }
static __device__ __forceinline__ double fmn(double a, double b) { return fmin(a, b); }

template <typename T, int OP>
static __device__ __forceinline__ void run_flt(const void *const *in, int n, unsigned int m,
                                               void *out, void *out2)
{
    T acc[SIMNCCL_RED_VEC];
    const T *x0 = (const T *)in[0];
    T sc = (T)(1.0 / n);
    if (OP == OP_AVG)
        for (unsigned int i = 0; i < m; i++)
            acc[i] = x0[i] * sc;
    else
        for (unsigned int i = 0; i < m; i++)
            acc[i] = x0[i];
    for (int k = 1; k < n; k++) {
        const T *x = (const T *)in[k];
        for (unsigned int i = 0; i < m; i++) {
            if (OP == OP_AVG) {
                T t = x[i] * sc;
                acc[i] = acc[i] + t;
            } else if (OP == OP_SUM) {
                acc[i] = acc[i] + x[i];
            } else if (OP == OP_PROD) {
                acc[i] = acc[i] * x[i];
            } else if (OP == OP_MAX) {
                acc[i] = fmx(acc[i], x[i]);
            } else {
                acc[i] = fmn(acc[i], x[i]);
            }
        }
    }
    for (unsigned int i = 0; i < m; i++)
        ((T *)out)[i] = acc[i];
    if (out2)
        for (unsigned int i = 0; i < m; i++)
            ((T *)out2)[i] = acc[i];
}

static __device__ __forceinline__ double to16(uint16_t v, int bf)
{
    return bf ? sim_f16_bf16_to_double_(v) : sim_f16_half_to_double_(v);
}

static __device__ __forceinline__ uint16_t from16(double v, int bf)
{
    return bf ? sim_f16_double_to_bf16_(v) : sim_f16_double_to_half_(v);
}

static __device__ __forceinline__ void run_16(const void *const *in, int n, int op,
                                              unsigned int m, void *out, void *out2, int bf)
{
    double sc = to16(from16(1.0 / n, bf), bf);
    for (unsigned int i = 0; i < m; i++) {
        double acc = to16(((const uint16_t *)in[0])[i], bf);
        if (op == OP_AVG)
            acc = to16(from16(acc * sc, bf), bf);
        for (int k = 1; k < n; k++) {
            double x = to16(((const uint16_t *)in[k])[i], bf);
            switch (op) {
            case OP_SUM: acc = to16(from16(acc + x, bf), bf); break;
            case OP_AVG: acc = to16(from16(acc + to16(from16(x * sc, bf), bf), bf), bf); break;
            case OP_PROD: acc = to16(from16(acc * x, bf), bf); break;
            case OP_MAX: acc = fmax(acc, x); break;
            default: acc = fmin(acc, x); break;
            }
        }
        uint16_t v = from16(acc, bf);
        ((uint16_t *)out)[i] = v;
        if (out2)
            ((uint16_t *)out2)[i] = v;
    }
}

template <typename T, typename U>
static __device__ __forceinline__ void run_int_op(int op, const void *const *in, int n,
                                                  unsigned int m, void *out, void *out2)
{
    switch (op) {
    case OP_SUM: run_int<T, U, OP_SUM>(in, n, m, out, out2); break;
    case OP_PROD: run_int<T, U, OP_PROD>(in, n, m, out, out2); break;
    case OP_MAX: run_int<T, U, OP_MAX>(in, n, m, out, out2); break;
    case OP_MIN: run_int<T, U, OP_MIN>(in, n, m, out, out2); break;
    default: run_int<T, U, OP_AVG>(in, n, m, out, out2); break;
    }
}

template <typename T>
static __device__ __forceinline__ void run_flt_op(int op, const void *const *in, int n,
                                                  unsigned int m, void *out, void *out2)
{
    switch (op) {
    case OP_SUM: run_flt<T, OP_SUM>(in, n, m, out, out2); break;
    case OP_PROD: run_flt<T, OP_PROD>(in, n, m, out, out2); break;
    case OP_MAX: run_flt<T, OP_MAX>(in, n, m, out, out2); break;
    case OP_MIN: run_flt<T, OP_MIN>(in, n, m, out, out2); break;
    default: run_flt<T, OP_AVG>(in, n, m, out, out2); break;
    }
}

static __device__ __forceinline__ int elem_size(int t)
{
    switch (t) {
    case T_I8:
    case T_U8: return 1;
    case T_F16:
    case T_BF16: return 2;
    case T_I32:
    case T_U32:
    case T_F32: return 4;
    default: return 8;
    }
}

/* SIMNCCL_RED_TILE elements of [e0, e1) per thread (grid-stride over
 * tiles), walked in runs of one fold order and at most SIMNCCL_RED_VEC
 * elements. */
extern "C" __global__ void simnccl_reduce(simnccl_red_kp_t p)
{
    int es = elem_size(p.dtype), n = p.nranks;
    uint64_t ntiles = (p.e1 - p.e0 + SIMNCCL_RED_TILE - 1) / SIMNCCL_RED_TILE;
    for (uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; t < ntiles;
         t += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t e = p.e0 + t * SIMNCCL_RED_TILE;
        uint64_t hi = e + SIMNCCL_RED_TILE < p.e1 ? e + SIMNCCL_RED_TILE : p.e1;
        while (e < hi) {
            int start, dir;
            uint64_t end;
            simnccl_segment(p.kind, n, p.algo, p.root_pos, p.count, p.chunk, p.align,
                            p.chan_elems, p.block, p.pos, e, &start, &dir, &end);
            if (end > hi)
                end = hi;
            if (end > e + SIMNCCL_RED_VEC)
                end = e + SIMNCCL_RED_VEC;
            unsigned int m = (unsigned int)(end - e);
            uint64_t i = e - p.base_e;
            const void *in[SIMNCCL_MAX_RANKS];
            for (int k = 0; k < n; k++) {
                int pos = ((start + dir * k) % n + n) % n;
                in[k] = (const char *)p.in[p.ring[pos]] + i * es;
            }
            char *out = (char *)p.out + (e - p.e0) * es;
            char *out2 = p.out2 ? (char *)p.out2 + (e - p.e0) * es : NULL;
            switch (p.dtype) {
            case T_I8: run_int_op<int8_t, uint8_t>(p.op, in, n, m, out, out2); break;
            case T_U8: run_int_op<uint8_t, uint8_t>(p.op, in, n, m, out, out2); break;
            case T_I32: run_int_op<int32_t, uint32_t>(p.op, in, n, m, out, out2); break;
            case T_U32: run_int_op<uint32_t, uint32_t>(p.op, in, n, m, out, out2); break;
            case T_I64: run_int_op<int64_t, uint64_t>(p.op, in, n, m, out, out2); break;
            case T_U64: run_int_op<uint64_t, uint64_t>(p.op, in, n, m, out, out2); break;
            case T_F16: run_16(in, n, p.op, m, out, out2, 0); break;
            case T_F32: run_flt_op<float>(p.op, in, n, m, out, out2); break;
            case T_F64: run_flt_op<double>(p.op, in, n, m, out, out2); break;
            case T_BF16: run_16(in, n, p.op, m, out, out2, 1); break;
            default: __trap();
            }
            e = end;
        }
    }
}
CUCPU_EXPORT(simnccl_reduce)
