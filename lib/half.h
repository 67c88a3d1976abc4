/* IEEE binary16 ("half", fp16) and bfloat16 conversions of the shim: the
 * one implementation for host C and for the single-source kernels
 * (kernels/portable_kernels.h: d2's GEMM and convolutions;
 * kernels/reduce_kernels.h: the virtual collectives), compiled by nvcc for
 * the device (host and device functions) and by the host C or C++
 * compiler (plain C, and the kernels' CPU twins through sim/cucpu). Header
 * only, in the common subset of C and C++; everything is integer
 * arithmetic on the bits, so every compiler and GPU gives the same bits.
 *
 * Rules:
 *  - widening (fp16 or bf16 to float) is exact; a NaN keeps its sign and
 *    its whole payload (fp16: the 10 payload bits become the float's top
 *    ones);
 *  - narrowing (float to fp16 or bf16) rounds to nearest, ties to even,
 *    with gradual underflow (fp16: |x| <= 2^-25 gives a signed zero) and
 *    overflow to infinity (fp16: |x| >= 65520; bf16: past the largest
 *    finite value); an infinity stays one;
 *  - the NaN rule: narrowing a NaN gives a quiet NaN with the float's sign
 *    and its top payload bits (fp16: sign | 0x7e00 | the float's bits
 *    22..13; bf16: the float's top 16 bits with the quiet bit 0x0040 set).
 *    This is the rule d2's GEMM and convolution outputs always had, and
 *    simcuda's cuBLAS / cuDNN / cuBLASLt (the float conversions of
 *    sim/common/f16.h) follow it too, so tests that compare the shim's
 *    outputs with theirs see the same NaN bits. (NVIDIA's
 *    __float2half_rn / __float2bfloat16_rn keep a NaN a NaN, but not its
 *    bits: their host code in cuda_fp16.hpp / cuda_bf16.hpp returns 0x7fff
 *    for every NaN, on the device they are the cvt instruction. The shim's
 *    kernels never call them, so their bits do not depend on either.)
 *    The virtual collectives store a NaN result as the type's canonical
 *    NaN (0x7e00, 0x7fc0), a rule of the reduction, not of this header:
 *    kernels/reduce_kernels.h canonicalises before it narrows.
 *    Until this header, reduce_kernels.h had its own conversions, which
 *    narrowed every NaN to the canonical one and widened an fp16 NaN to
 *    the float 0x7fc00000 (signed); its only NaN outputs are those
 *    canonical codes, unchanged, so no output of any kernel changes bits
 *    (tests/coll/engine_test.c, test_half_nan_rule, asserts both).
 *
 * Names: es_half_* (bit casts, fp16, bf16). */
#ifndef ES_LIB_HALF_H
#define ES_LIB_HALF_H

#include <string.h>

/* Callable from host code and from kernels (nvcc); static inline in C. */
#ifdef __CUDACC__
#define ES_HALF_FN static __host__ __device__ __forceinline__
#else
#define ES_HALF_FN static inline
#endif

/* ---- float bit casts ------------------------------------------------------------- */

ES_HALF_FN unsigned es_half_fbits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    unsigned u;
    memcpy(&u, &f, sizeof(u));
    return u;
#endif
}

ES_HALF_FN float es_half_bitsf(unsigned u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
#endif
}

/* ---- fp16 ---------------------------------------------------------------------------- */

/* fp16 bits to float: exact (a NaN keeps sign and payload). */
ES_HALF_FN float es_half_f16_to_f(unsigned short h)
{
    unsigned sign = (unsigned)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1fu) /* infinity or NaN */
        return es_half_bitsf(sign | 0x7f800000u | (man << 13));
    if (exp != 0)
        return es_half_bitsf(sign | ((exp + 112u) << 23) | (man << 13));
    if (man == 0)
        return es_half_bitsf(sign);
    unsigned e = 113u; /* subnormal: normalise */
    while (!(man & 0x400u)) {
        man <<= 1;
        e--;
    }
    return es_half_bitsf(sign | (e << 23) | ((man & 0x3ffu) << 13));
}

/* Float to fp16 bits: round to nearest even; NaN as the rule above. */
ES_HALF_FN unsigned short es_half_f_to_f16(float f)
{
    unsigned x = es_half_fbits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet, sign and top payload bits kept */
        return (unsigned short)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* 65520 and above (and infinity): infinity */
        return (unsigned short)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* normal half: round at bit 13, ties to even */
        unsigned r = ax + 0xfffu + ((ax >> 13) & 1u);
        return (unsigned short)(sign | ((r >> 13) - (112u << 10)));
    }
    if (ax <= 0x33000000u) /* at most 2^-25: zero */
        return (unsigned short)sign;
    unsigned e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, s = 126u - e; /* quantum 2^-24 */
    unsigned q = m >> s, rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (unsigned short)(sign | q);
}

/* ---- bfloat16 ------------------------------------------------------------------------ */

/* bf16 bits to float: exact (the float's top 16 bits). */
ES_HALF_FN float es_half_bf16_to_f(unsigned short h)
{
    return es_half_bitsf((unsigned)h << 16);
}

/* Float to bf16 bits: round to nearest even (a carry moves into the
 * exponent, up to infinity); NaN as the rule above. */
ES_HALF_FN unsigned short es_half_f_to_bf16(float f)
{
    unsigned x = es_half_fbits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, sign and top payload bits kept */
        return (unsigned short)((x >> 16) | 0x40u);
    return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

#endif
