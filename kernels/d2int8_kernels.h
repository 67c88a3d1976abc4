/* d2's int8 GEMM (EASYSCALE_D2_GEMM=int8, the default; docs/D2-GEMM.md):
 * the element functions of its definition, one source for the GPU kernels
 * and simcuda's twin (kernels/portable.cu, es_gemm_int8 and the
 * convolutions es_conv_*_int8, which apply it to their implicit GEMMs:
 * es_conv_ia / es_conv_ib), the plain C reference (kernels/d2int8.c) and
 * the tests.
 *
 * The definition of D = epilogue(alpha * op(A) op(B) + beta * C), per
 * batch, for fp32, fp16 and bf16 operands (widened exactly to fp32):
 *   1. Each row i of op(A) gets ea(i), the least integer with |a| < 2^ea
 *      for every finite a of the row (es_i8_exp of the largest magnitude;
 *      0 for a row of zeros); each column j of op(B) likewise eb(j).
 *   2. Each finite element becomes the integer
 *        qa(i,p) = RNE(a(i,p) * 2^(7 SA - ea(i)))   (|qa| < 2^(7 SA))
 *      rounded to nearest, ties to even, on the dropped bits
 *      (es_i8_quant); SA = es_i8_slices(A's type) = 4 for fp32, fp16 and
 *      bf16 (28 bits: every value within 4 binades of its row's largest
 *      kept exactly for fp32, within 17 for fp16, 20 for bf16; 3 slices
 *      for the 16-bit types measured 6x fp32 fma's error on wide-range
 *      data, docs/D2-GEMM.md). Likewise
 *      qb(p,j) with SB. Non-finite elements count as 0 here (step 5).
 *   3. T(i,j) = sum over p of qa(i,p) qb(p,j), an exact integer (at most
 *      2^(7 (SA + SB)) k: 128-bit).
 *   4. acc(i,j) = T(i,j) * 2^(ea(i) + eb(j) - 7 (SA + SB)), rounded ONCE to
 *      fp32 (to nearest even; subnormals exact as IEEE rounds them; past
 *      the range: +-Inf; T = 0: +0) (es_i8_to_f32).
 *   5. Where row i or column j holds a NaN or an Inf, acc(i,j) is instead
 *      what IEEE arithmetic gives for the sum of the products a(i,p)
 *      b(p,j): NaN (the quiet NaN 0x7fc00000) when a product is NaN (a NaN
 *      operand, 0 * Inf) or both +Inf and -Inf products occur, else the
 *      infinite products' sign of Inf (es_i8_sp_*); when no product is
 *      non-finite (a convolution's skipped tap), step 4's value.
 *   6. alpha == 0: acc = 0 and A, B are not read (BLAS); then the fma
 *      path's finishing step (kernels/portable_kernels.h: alpha, beta,
 *      epilogue, rounding to D's type).
 * How the kernel computes step 3 on integer tensor cores: qa is cut into
 * SA signed 7-bit digits (int8 in [-127, 127], slice 0 the most
 * significant: qa = sum_s da_s 2^(7 (SA - 1 - s)), every digit with qa's
 * sign), qb into SB; the slice products are exact int8 MMAs summed in
 * int32 per weight group g = s + t (at most 4 pairs of 127 * 127 over
 * ES_I8_CHUNK terms: < 2^31), the groups folded with their weights
 * 2^(7 (SA + SB - 2 - g)) into a 128-bit total per output. Integer sums
 * are exact, so any tiling, split or order gives T: the bits are a
 * function of the inputs alone.
 */
#ifndef ES_D2INT8_KERNELS_H
#define ES_D2INT8_KERNELS_H

#include "kernels/portable_kernels.h"

#define ES_I8_DIGIT 7          /* bits of a slice (int8 digits in [-127, 127]) */
#define ES_I8_SLICES_MAX 4
#define ES_I8_CHUNK 32768      /* k terms summed in int32 per weight group */
#define ES_I8_QNAN 0x7fc00000u /* the NaN of step 5 */

/* The kernel's tile: BM x BN outputs per block of 4 warps (2 x 2, each a
 * 16 x 16 accumulator per weight group), BK terms per shared-memory tile
 * (two 16-deep int8 MMA steps). */
#define ES_I8_BM 32
#define ES_I8_BN 32
#define ES_I8_BK 32
#define ES_I8_THREADS 128
#define ES_I8_GROUPS (2 * ES_I8_SLICES_MAX - 1)

typedef __int128 es_i128_t;
typedef unsigned __int128 es_u128_t;

/* Slices per operand type (step 2): 4 for every type (the kernel is
 * built for ES_I8_SLICES_MAX slices a side). */
ES_HD int es_i8_slices(int dt)
{
    (void)dt;
    return 4;
}

ES_HD int es_i8_bitlen64(unsigned long long x)
{
#ifdef __CUDACC__
    return x ? 64 - __clzll((long long)x) : 0;
#else
    return x ? 64 - __builtin_clzll(x) : 0;
#endif
}

ES_HD int es_i8_bitlen128(es_u128_t x)
{
    unsigned long long hi = (unsigned long long)(x >> 64);
    return hi ? 64 + es_i8_bitlen64(hi) : es_i8_bitlen64((unsigned long long)x);
}

/* |x|'s bits (ordered as the magnitudes); >= 0x7f800000 for Inf and NaN. */
ES_HD unsigned es_i8_mag(float x)
{
    return es_half_fbits(x) & 0x7fffffffu;
}

/* Step 1: the least e with |x| < 2^e for the largest finite magnitude mag
 * of a row or column (0 when it is 0). */
ES_HD int es_i8_exp(unsigned mag)
{
    if (mag == 0)
        return 0;
    if (mag >> 23)
        return (int)(mag >> 23) - 126;
    return -149 + es_i8_bitlen64(mag);
}

/* Step 2: RNE(x * 2^(7 s - e)) for a finite x with |x| < 2^e (0 for a
 * non-finite x), in integer arithmetic. */
ES_HD int es_i8_quant(float x, int e, int s)
{
    unsigned u = es_half_fbits(x), mag = u & 0x7fffffffu, eb = mag >> 23;
    if (mag == 0 || mag >= 0x7f800000u)
        return 0;
    unsigned m = eb ? (mag & 0x7fffffu) | 0x800000u : mag;
    int sh = (eb ? (int)eb : 1) - 150 + ES_I8_DIGIT * s - e; /* x = m 2^(E), E = eb - 150 */
    unsigned q;
    if (sh >= 0) {
        q = m << sh;
    } else if (-sh > 25) {
        q = 0; /* below half of the last kept bit */
    } else {
        int d = -sh;
        unsigned rem = m & ((1u << d) - 1u), half = 1u << (d - 1);
        q = m >> d;
        if (rem > half || (rem == half && (q & 1u)))
            q++;
    }
    return (u >> 31) ? -(int)q : (int)q;
}

/* Digit sl (0: the most significant) of q cut into s slices. */
ES_HD signed char es_i8_digit(int q, int sl, int s)
{
    int m = q < 0 ? -q : q;
    int d = (m >> (ES_I8_DIGIT * (s - 1 - sl))) & 127;
    return (signed char)(q < 0 ? -d : d);
}

/* Step 4: v * 2^e rounded once to fp32 (nearest even). */
ES_HD float es_i8_to_f32(es_i128_t v, int e)
{
    if (v == 0)
        return 0.0f;
    unsigned sign = v < 0 ? 0x80000000u : 0u;
    es_u128_t mag = v < 0 ? (es_u128_t)0 - (es_u128_t)v : (es_u128_t)v;
    int nb = es_i8_bitlen128(mag);
    /* bits dropped: to 24 significant bits, and none below 2^-149 */
    int sh = nb - 24 > -149 - e ? nb - 24 : -149 - e;
    unsigned long long q;
    if (sh <= 0) {
        q = (unsigned long long)(mag << -sh);
    } else if (sh > nb) {
        q = 0;
    } else {
        es_u128_t rem = mag & (((es_u128_t)1 << sh) - 1), half = (es_u128_t)1 << (sh - 1);
        q = (unsigned long long)(mag >> sh);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
    }
    int e2 = e + sh; /* q 2^e2 */
    if (q == 0)
        return es_half_bitsf(sign);
    if (q >> 24) { /* the rounding carried: 2^24, even */
        q >>= 1;
        e2++;
    }
    if (q >> 23) {
        int biased = e2 + 23 + 127;
        if (biased >= 255)
            return es_half_bitsf(sign | 0x7f800000u);
        return es_half_bitsf(sign | ((unsigned)biased << 23) | ((unsigned)q & 0x7fffffu));
    }
    return es_half_bitsf(sign | (unsigned)q); /* subnormal: e2 == -149 */
}

/* Step 5: the IEEE status of a sum of products, term by term. */
enum { ES_I8_SP_NAN = 1, ES_I8_SP_PINF = 2, ES_I8_SP_NINF = 4 };

ES_HD int es_i8_sp_add(int st, float x, float y)
{
    unsigned mx = es_i8_mag(x), my = es_i8_mag(y);
    if (mx < 0x7f800000u && my < 0x7f800000u)
        return st;
    if (mx > 0x7f800000u || my > 0x7f800000u || mx == 0 || my == 0)
        return st | ES_I8_SP_NAN;
    return st | (((es_half_fbits(x) ^ es_half_fbits(y)) >> 31) ? ES_I8_SP_NINF : ES_I8_SP_PINF);
}

/* 1 with *out the special value when the status has one, else 0. */
ES_HD int es_i8_sp_value(int st, float *out)
{
    if ((st & ES_I8_SP_NAN) || (st & (ES_I8_SP_PINF | ES_I8_SP_NINF)) ==
                                   (ES_I8_SP_PINF | ES_I8_SP_NINF))
        *out = es_half_bitsf(ES_I8_QNAN);
    else if (st & ES_I8_SP_PINF)
        *out = es_half_bitsf(0x7f800000u);
    else if (st & ES_I8_SP_NINF)
        *out = es_half_bitsf(0xff800000u);
    else
        return 0;
    return 1;
}

#endif
