/* The virtual collectives' element arithmetic, one source for the kernel
 * (kernels/reduce.cu: nvcc for the GPU, the host compiler through sim/cucpu
 * for simcuda) and the host transport's CPU loop (coll/transport/host.c), all
 * without contraction into FMA: every function below spells out its operations
 * (correctly rounded add/multiply/divide, integer conversions written out
 * bit by bit), so both compilers give the same bits.
 *
 * The rule (documented in shim/README.md, "NCCL"):
 *  - element i of a reduction over n inputs is folded in input (rank)
 *    order 0, 1, ..., n-1: acc = x0; acc = acc OP x1; ...;
 *  - each step is done in the datatype's own arithmetic: integers wrap
 *    (two's complement, computed unsigned); float32 and float64 are IEEE
 *    round-to-nearest-even operations; half, bfloat16, fp8 e4m3 and e5m2
 *    convert both operands to float32 (exact; half and bfloat16 with
 *    lib/half.h), do the float32 operation, and round the result back to
 *    the type once per step (round-to-nearest-even; half overflows to
 *    infinity; the fp8 types saturate to their largest finite value, as
 *    NVIDIA's satfinite conversion does, an infinity included);
 *  - max/min: a NaN operand wins (the accumulator's first), otherwise the
 *    larger/smaller, the accumulator on ties (so -0/+0 keep the earlier);
 *  - avg: the sum as above, then divided once by n (float types: one
 *    float32 or float64 division, then one rounding to the type; integers:
 *    C division, truncating toward zero);
 *  - PreMulSum: each input is first multiplied by its rank's scalar in the
 *    type's arithmetic (one rounding), then summed as above;
 *  - a NaN result is stored as the type's canonical quiet NaN (positive:
 *    f32 0x7fc00000, f64 0x7ff8000000000000, f16 0x7e00, bf16 0x7fc0,
 *    e4m3 0x7f, e5m2 0x7e): GPUs and CPUs make different NaN bits.
 *
 * Datatypes are ncclDataType_t values (ES_RT_*), operations ES_RO_*.
 */
#ifndef ES_REDUCE_KERNELS_H
#define ES_REDUCE_KERNELS_H

#ifdef __CUDACC__
#define ES_RD __device__ __forceinline__
#define ES_FADD(a, b) __fadd_rn((a), (b))
#define ES_FMUL(a, b) __fmul_rn((a), (b))
#define ES_FDIV(a, b) __fdiv_rn((a), (b))
#define ES_DADD(a, b) __dadd_rn((a), (b))
#define ES_DMUL(a, b) __dmul_rn((a), (b))
#define ES_DDIV(a, b) __ddiv_rn((a), (b))
typedef unsigned char es_u8;
typedef unsigned short es_u16;
typedef unsigned int es_u32;
typedef unsigned long long es_u64;
typedef signed char es_i8;
typedef int es_i32;
typedef long long es_i64;
#else
#include <stdint.h>
#include <string.h>
#define ES_RD static inline
#define ES_FADD(a, b) ((a) + (b))
#define ES_FMUL(a, b) ((a) * (b))
#define ES_FDIV(a, b) ((a) / (b))
#define ES_DADD(a, b) ((a) + (b))
#define ES_DMUL(a, b) ((a) * (b))
#define ES_DDIV(a, b) ((a) / (b))
typedef uint8_t es_u8;
typedef uint16_t es_u16;
typedef uint32_t es_u32;
typedef uint64_t es_u64;
typedef int8_t es_i8;
typedef int32_t es_i32;
typedef int64_t es_i64;
#endif

#include "lib/half.h"

/* ncclDataType_t values */
enum { ES_RT_I8 = 0, ES_RT_U8 = 1, ES_RT_I32 = 2, ES_RT_U32 = 3, ES_RT_I64 = 4, ES_RT_U64 = 5,
       ES_RT_F16 = 6, ES_RT_F32 = 7, ES_RT_F64 = 8, ES_RT_BF16 = 9, ES_RT_E4M3 = 10,
       ES_RT_E5M2 = 11, ES_RT_COUNT = 12 };
/* operations (ncclSum..ncclAvg, then PreMulSum) */
enum { ES_RO_SUM = 0, ES_RO_PROD = 1, ES_RO_MAX = 2, ES_RO_MIN = 3, ES_RO_AVG = 4,
       ES_RO_PREMUL = 5, ES_RO_COUNT = 6 };

#define ES_RED_MAX_IN 64
#define ES_RED_BLOCK 256        /* threads per block */
#define ES_RED_VEC 4            /* consecutive elements a thread takes at a time */
#define ES_RED_PER_THREAD 4     /* such groups per thread per tile (kernels/reduce.cu) */

/* The kernel's one argument (same layout for the host, the device and
 * simcuda). */
typedef struct es_red_args {
    const void *in[ES_RED_MAX_IN];
    void *out;
    es_u64 count;              /* elements */
    es_u64 scalar;             /* PreMulSum scalar of input 0, in the type's storage */
    const void *scalar_dev;    /* or read here on the device when not NULL */
    int nin;                   /* inputs, 1..ES_RED_MAX_IN */
    int dtype;                 /* ES_RT_* */
    int op;                    /* ES_RO_* (PREMUL: only input 0 is scaled, nin must be 1) */
    int divisor;               /* AVG: n */
} es_red_args_t;

/* ---- bit casts (float: lib/half.h's es_half_fbits, es_half_bitsf) --------- */

ES_RD double es_bits_d(es_u64 u)
{
#ifdef __CUDACC__
    return __longlong_as_double((long long)u);
#else
    double d;
    memcpy(&d, &u, 8);
    return d;
#endif
}

ES_RD es_u64 es_d_bits(double d)
{
#ifdef __CUDACC__
    return (es_u64)__double_as_longlong(d);
#else
    es_u64 u;
    memcpy(&u, &d, 8);
    return u;
#endif
}

ES_RD int es_f_isnan(float f)
{
    es_u32 u = es_half_fbits(f);
    return (u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu);
}

ES_RD int es_d_isnan(double d)
{
    es_u64 u = es_d_bits(d);
    return (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (u & 0x000fffffffffffffull);
}

/* ---- small floats: decode (exact) and encode (round to nearest even) -------
 * A format: E exponent bits, M mantissa bits, bias. */

/* Code (without sign) -> float, for formats whose every finite value is a
 * float. inf_nan: 1 IEEE-like (max exponent = inf/NaN), 2 e4m3 (only
 * S.1111.111 is NaN, no infinity). */
ES_RD float es_small_to_f(es_u32 code, int E, int M, int bias, int inf_nan)
{
    es_u32 sign = (code >> (E + M)) & 1u;
    es_u32 e = (code >> M) & ((1u << E) - 1u);
    es_u32 m = code & ((1u << M) - 1u);
    es_u32 out;
    if (inf_nan == 1 && e == (1u << E) - 1u) {
        out = m ? 0x7fc00000u : 0x7f800000u;
    } else if (inf_nan == 2 && e == (1u << E) - 1u && m == (1u << M) - 1u) {
        out = 0x7fc00000u;
    } else if (e == 0) {
        if (m == 0) {
            out = 0;
        } else {
            /* subnormal: m * 2^(1 - bias - M); normalise */
            int ex = 1 - bias;
            while (!(m & (1u << M))) {
                m <<= 1;
                ex--;
            }
            m &= (1u << M) - 1u;
            out = ((es_u32)(ex + 127) << 23) | (m << (23 - M));
        }
    } else {
        out = ((e - (es_u32)bias + 127u) << 23) | (m << (23 - M));
    }
    return es_half_bitsf(out | (sign << 31));
}

/* float -> code, round to nearest even. maxcode: the largest finite code
 * (without sign); sat: overflow (an infinity included) gives maxcode,
 * else the infinity code (maxcode + 1); nan: the NaN code. */
ES_RD es_u32 es_f_to_small(float f, int E, int M, int bias, es_u32 maxcode, int sat, es_u32 nan)
{
    es_u32 u = es_half_fbits(f);
    es_u32 sign = (u >> 31) << (E + M);
    es_u32 fe = (u >> 23) & 0xffu;
    es_u32 fm = u & 0x7fffffu;
    if (fe == 0xffu)
        return fm ? nan : (sat ? (sign | maxcode) : (sign | (maxcode + 1u)));
    if (fe == 0 && fm == 0)
        return sign;
    int ex = (fe ? (int)fe - 127 : -126) + bias; /* target biased exponent */
    es_u32 mant = fe ? (fm | 0x800000u) : fm;   /* 24-bit significand */
    int shift;
    es_u32 r;
    if (ex >= 1) {
        shift = 23 - M;
        r = ((es_u32)ex << M) | ((mant >> shift) & ((1u << M) - 1u));
    } else {
        shift = 23 - M + 1 - ex;
        r = shift >= 32 ? 0u : mant >> shift;
    }
    if (shift < 32) { /* else below a quarter of the smallest subnormal: 0 */
        es_u32 rem = mant & ((1u << shift) - 1u);
        es_u32 half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
    }
    if (r > maxcode)
        r = sat ? maxcode : maxcode + 1u;
    return sign | r;
}

ES_RD float es_e4m3_to_f(es_u8 c) { return es_small_to_f(c, 4, 3, 7, 2); }
ES_RD es_u8 es_f_to_e4m3(float f) { return (es_u8)es_f_to_small(f, 4, 3, 7, 0x7eu, 1, 0x7fu); }
ES_RD float es_e5m2_to_f(es_u8 c) { return es_small_to_f(c, 5, 2, 15, 1); }
ES_RD es_u8 es_f_to_e5m2(float f) { return (es_u8)es_f_to_small(f, 5, 2, 15, 0x7bu, 1, 0x7eu); }

/* ---- one step of each operation on float32 / float64 values -------------- */

ES_RD float es_f_op(int op, float a, float b)
{
    switch (op) {
    case ES_RO_PROD:
        return ES_FMUL(a, b);
    case ES_RO_MAX:
        return es_f_isnan(a) ? a : es_f_isnan(b) ? b : (b > a ? b : a);
    case ES_RO_MIN:
        return es_f_isnan(a) ? a : es_f_isnan(b) ? b : (b < a ? b : a);
    default: /* SUM, AVG, PREMUL (after scaling) */
        return ES_FADD(a, b);
    }
}

ES_RD double es_d_op(int op, double a, double b)
{
    switch (op) {
    case ES_RO_PROD:
        return ES_DMUL(a, b);
    case ES_RO_MAX:
        return es_d_isnan(a) ? a : es_d_isnan(b) ? b : (b > a ? b : a);
    case ES_RO_MIN:
        return es_d_isnan(a) ? a : es_d_isnan(b) ? b : (b < a ? b : a);
    default:
        return ES_DADD(a, b);
    }
}

ES_RD float es_f_canon(float f) { return es_f_isnan(f) ? es_half_bitsf(0x7fc00000u) : f; }
ES_RD double es_d_canon(double d) { return es_d_isnan(d) ? es_bits_d(0x7ff8000000000000ull) : d; }

/* ---- elements as 64-bit storage words -------------------------------------
 * An element travels as its storage bits in an es_u64 (zero-extended). */

ES_RD es_u64 es_red_load(int dt, const void *p, es_u64 i)
{
    switch (dt) {
    case ES_RT_I8: case ES_RT_U8: case ES_RT_E4M3: case ES_RT_E5M2:
        return ((const es_u8 *)p)[i];
    case ES_RT_F16: case ES_RT_BF16:
        return ((const es_u16 *)p)[i];
    case ES_RT_I32: case ES_RT_U32: case ES_RT_F32:
        return ((const es_u32 *)p)[i];
    default:
        return ((const es_u64 *)p)[i];
    }
}

ES_RD void es_red_store(int dt, void *p, es_u64 i, es_u64 v)
{
    switch (dt) {
    case ES_RT_I8: case ES_RT_U8: case ES_RT_E4M3: case ES_RT_E5M2:
        ((es_u8 *)p)[i] = (es_u8)v;
        break;
    case ES_RT_F16: case ES_RT_BF16:
        ((es_u16 *)p)[i] = (es_u16)v;
        break;
    case ES_RT_I32: case ES_RT_U32: case ES_RT_F32:
        ((es_u32 *)p)[i] = (es_u32)v;
        break;
    default:
        ((es_u64 *)p)[i] = v;
        break;
    }
}

/* A small float type's storage <-> float32 (half and bfloat16: lib/half.h;
 * a NaN may decode with its payload, which no result keeps). */
ES_RD float es_small_dec(int dt, es_u64 v)
{
    switch (dt) {
    case ES_RT_F16: return es_half_f16_to_f((es_u16)v);
    case ES_RT_BF16: return es_half_bf16_to_f((es_u16)v);
    case ES_RT_E4M3: return es_e4m3_to_f((es_u8)v);
    default: return es_e5m2_to_f((es_u8)v);
    }
}

/* Rounds f to the type; a NaN gives the type's canonical NaN (the rule
 * above: lib/half.h's conversions would keep a NaN's sign and payload, the
 * fp8 ones give the canonical code). */
ES_RD es_u64 es_small_enc(int dt, float f)
{
    switch (dt) {
    case ES_RT_F16: return es_f_isnan(f) ? 0x7e00u : es_half_f_to_f16(f);
    case ES_RT_BF16: return es_f_isnan(f) ? 0x7fc0u : es_half_f_to_bf16(f);
    case ES_RT_E4M3: return es_f_to_e4m3(f);
    default: return es_f_to_e5m2(f);
    }
}

/* Integer compare of two storage words as the (signed or unsigned) type. */
ES_RD int es_int_less(int dt, es_u64 a, es_u64 b)
{
    switch (dt) {
    case ES_RT_I8: return (es_i8)(es_u8)a < (es_i8)(es_u8)b;
    case ES_RT_I32: return (es_i32)(es_u32)a < (es_i32)(es_u32)b;
    case ES_RT_I64: return (es_i64)a < (es_i64)b;
    default: return a < b;
    }
}

ES_RD es_u64 es_int_mask(int dt)
{
    switch (dt) {
    case ES_RT_I8: case ES_RT_U8: return 0xffull;
    case ES_RT_I32: case ES_RT_U32: return 0xffffffffull;
    default: return ~0ull;
    }
}

/* acc OP x, both storage words of type dt (op: SUM/PREMUL add, PROD, MAX,
 * MIN; AVG adds). */
ES_RD es_u64 es_red_step(int dt, int op, es_u64 a, es_u64 b)
{
    switch (dt) {
    case ES_RT_F32:
        return es_half_fbits(es_f_op(op, es_half_bitsf((es_u32)a), es_half_bitsf((es_u32)b)));
    case ES_RT_F64:
        return es_d_bits(es_d_op(op, es_bits_d(a), es_bits_d(b)));
    case ES_RT_F16: case ES_RT_BF16: case ES_RT_E4M3: case ES_RT_E5M2: {
        float fa = es_small_dec(dt, a), fb = es_small_dec(dt, b);
        if (op == ES_RO_MAX || op == ES_RO_MIN) /* a pick: no rounding, original bits */
            return es_f_isnan(fa) ? a : es_f_isnan(fb) ? b
                 : (op == ES_RO_MAX ? (fb > fa) : (fb < fa)) ? b : a;
        return es_small_enc(dt, es_f_op(op, fa, fb));
    }
    default: {
        es_u64 m = es_int_mask(dt);
        switch (op) {
        case ES_RO_PROD: return (a * b) & m;
        case ES_RO_MAX: return es_int_less(dt, a, b) ? b : a;
        case ES_RO_MIN: return es_int_less(dt, b, a) ? b : a;
        default: return (a + b) & m;
        }
    }
    }
}

/* x times scalar s (PreMulSum), both storage words of type dt. */
ES_RD es_u64 es_red_scale(int dt, es_u64 x, es_u64 s)
{
    return es_red_step(dt, ES_RO_PROD, x, s);
}

/* The final value: avg's one division, NaN canonicalised. */
ES_RD es_u64 es_red_finish(int dt, int op, int divisor, es_u64 acc)
{
    switch (dt) {
    case ES_RT_F32: {
        float f = es_half_bitsf((es_u32)acc);
        if (op == ES_RO_AVG)
            f = ES_FDIV(f, (float)divisor);
        return es_half_fbits(es_f_canon(f));
    }
    case ES_RT_F64: {
        double d = es_bits_d(acc);
        if (op == ES_RO_AVG)
            d = ES_DDIV(d, (double)divisor);
        return es_d_bits(es_d_canon(d));
    }
    case ES_RT_F16: case ES_RT_BF16: case ES_RT_E4M3: case ES_RT_E5M2: {
        float f = es_small_dec(dt, acc);
        if (op == ES_RO_AVG)
            f = ES_FDIV(f, (float)divisor);
        else if (!es_f_isnan(f))
            return acc;
        return es_small_enc(dt, f); /* encoding canonicalises NaN */
    }
    case ES_RT_I8: return op == ES_RO_AVG ? (es_u64)(es_u8)(es_i8)((es_i8)(es_u8)acc / divisor) : acc;
    case ES_RT_I32: return op == ES_RO_AVG ? (es_u64)(es_u32)((es_i32)(es_u32)acc / divisor) : acc;
    case ES_RT_I64: return op == ES_RO_AVG ? (es_u64)((es_i64)acc / (es_i64)divisor) : acc;
    default: return op == ES_RO_AVG ? acc / (es_u64)divisor : acc;
    }
}

/* Element i of a reduction: the fold in input order (the kernel's body). */
ES_RD void es_red_elem(const es_red_args_t *a, es_u64 s, es_u64 i)
{
    es_u64 acc = es_red_load(a->dtype, a->in[0], i);
    if (a->op == ES_RO_PREMUL)
        acc = es_red_scale(a->dtype, acc, s);
    for (int r = 1; r < a->nin; r++)
        acc = es_red_step(a->dtype, a->op, acc, es_red_load(a->dtype, a->in[r], i));
    es_red_store(a->dtype, a->out, i, es_red_finish(a->dtype, a->op, a->divisor, acc));
}

/* The PreMulSum scalar of a launch (on the device, from scalar_dev when set). */
ES_RD es_u64 es_red_scalar(const es_red_args_t *a)
{
    return a->scalar_dev ? es_red_load(a->dtype, a->scalar_dev, 0) : a->scalar;
}

#ifndef __CUDACC__
/* The CPU's way through elements [lo, hi) of a launch: the same element
 * arithmetic, input-major in blocks so that the compiler can keep the
 * datatype and operation out of the inner loops (float32 sum and average,
 * the common case, vectorise: IEEE additions element by element, the same
 * bits). The output must not overlap the inputs. */
#define ES_RED_CPU_BLOCK 1024
static inline void es_red_cpu_range(const es_red_args_t *a, es_u64 s, es_u64 lo, es_u64 hi)
{
    int dt = a->dtype, op = a->op;
    if (dt == ES_RT_F32 && (op == ES_RO_SUM || op == ES_RO_AVG)) {
        /* a block of the output stays in L1 while every input is added */
        float *__restrict out = (float *)a->out;
        const float d = (float)a->divisor;
        for (es_u64 b = lo; b < hi; b += ES_RED_CPU_BLOCK) {
            es_u64 m = hi - b < ES_RED_CPU_BLOCK ? hi - b : ES_RED_CPU_BLOCK;
            float acc[ES_RED_CPU_BLOCK];
            const float *__restrict in0 = (const float *)a->in[0] + b;
            for (es_u64 j = 0; j < m; j++)
                acc[j] = in0[j];
            for (int r = 1; r < a->nin; r++) {
                const float *__restrict in = (const float *)a->in[r] + b;
                for (es_u64 j = 0; j < m; j++)
                    acc[j] = ES_FADD(acc[j], in[j]);
            }
            if (op == ES_RO_AVG)
                for (es_u64 j = 0; j < m; j++)
                    acc[j] = ES_FDIV(acc[j], d);
            for (es_u64 j = 0; j < m; j++)
                out[b + j] = es_f_canon(acc[j]);
        }
        return;
    }
    es_u64 acc[ES_RED_CPU_BLOCK];
    for (es_u64 b = lo; b < hi; b += ES_RED_CPU_BLOCK) {
        es_u64 m = hi - b < ES_RED_CPU_BLOCK ? hi - b : ES_RED_CPU_BLOCK;
        for (es_u64 j = 0; j < m; j++) {
            es_u64 v = es_red_load(dt, a->in[0], b + j);
            acc[j] = op == ES_RO_PREMUL ? es_red_scale(dt, v, s) : v;
        }
        for (int r = 1; r < a->nin; r++)
            for (es_u64 j = 0; j < m; j++)
                acc[j] = es_red_step(dt, op, acc[j], es_red_load(dt, a->in[r], b + j));
        for (es_u64 j = 0; j < m; j++)
            es_red_store(dt, a->out, b + j, es_red_finish(dt, op, a->divisor, acc[j]));
    }
}
#endif

#endif
