/* IEEE half and bfloat16 conversions (see f16.h): one rounding routine on a
 * double's bits serves both formats and both the float and the double entry
 * points; only NaN is handled per entry point. */
#include "sim/common/f16.h"

#include <math.h>
#include <string.h>

#define D_FRAC ((UINT64_C(1) << 52) - 1)

/* Rounds the magnitude whose double bits are ax (sign clear, not NaN) to a
 * binary format with mbits fraction bits, exponent bias `bias` and all-ones
 * exponent field emax; returns its magnitude bits: round to nearest even,
 * subnormals where the format has them, emax << mbits (infinity) on overflow
 * or for infinity. */
static uint32_t round_mag(uint64_t ax, int mbits, int bias, int emax)
{
    const int drop = 52 - mbits; /* fraction bits a normal result loses */
    const int emin = 1 - bias;   /* smallest normal exponent */
    const uint64_t inf = (uint64_t)emax << mbits;
    int de = (int)(ax >> 52); /* double's exponent field */
    if (de == 0)              /* zero or double subnormal: far below half an ulp */
        return 0;
    int e = de - 1023;
    if (e >= emax - bias) /* 2^e is already past the largest finite (or inf) */
        return (uint32_t)inf;
    if (e < emin) { /* subnormal result: quantum 2^(emin - mbits) */
        uint64_t m = (ax & D_FRAC) | (UINT64_C(1) << 52);
        int s = drop + (emin - e);
        if (s > 53) /* m < 2^53 <= half the quantum: rounds to zero */
            return 0;
        uint64_t q = m >> s;
        uint64_t rem = m & ((UINT64_C(1) << s) - 1);
        uint64_t half = UINT64_C(1) << (s - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return (uint32_t)q; /* 1 << mbits is the smallest normal */
    }
    /* Normal: round at bit `drop`; a carry moves into the exponent. */
    uint64_t r = ax + ((UINT64_C(1) << (drop - 1)) - 1) + ((ax >> drop) & 1);
    uint64_t v = (r >> drop) - ((uint64_t)(1023 - bias) << mbits);
    return (uint32_t)(v >= inf ? inf : v);
}

/* d's sign moved to bit 15, and the bits of |d|. */
static uint16_t split(double d, uint64_t *ax)
{
    uint64_t x;
    memcpy(&x, &d, sizeof(x));
    *ax = x & ~(UINT64_C(1) << 63);
    return (uint16_t)((x >> 48) & 0x8000u);
}

#define HALF_MAG(ax) ((uint16_t)round_mag(ax, 10, 15, 31))
#define BF16_MAG(ax) ((uint16_t)round_mag(ax, 7, 127, 255))

/* ---- half ----------------------------------------------------------------- */

float sim_f16_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* subnormal half: normalise */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while (!(man & 0x400u));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

double sim_f16_half_to_double(uint16_t h)
{
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) /* NaN: the default one, signed */
        return (h & 0x8000u) ? -NAN : NAN;
    return sim_f16_half_to_float(h);
}

uint16_t sim_f16_float_to_half(float f)
{
    if (isnan(f)) { /* quiet, sign and top payload bits kept */
        uint32_t x;
        memcpy(&x, &f, 4);
        return (uint16_t)(((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x3ffu));
    }
    uint64_t ax;
    uint16_t sign = split(f, &ax);
    return sign | HALF_MAG(ax);
}

uint16_t sim_f16_double_to_half(double d)
{
    if (isnan(d))
        return 0x7e00;
    uint64_t ax;
    uint16_t sign = split(d, &ax);
    return sign | HALF_MAG(ax);
}

/* ---- bfloat16 --------------------------------------------------------------- */

float sim_f16_bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

double sim_f16_bf16_to_double(uint16_t h)
{
    return sim_f16_bf16_to_float(h);
}

uint16_t sim_f16_float_to_bf16(float f)
{
    if (isnan(f)) { /* quiet, sign and top payload bits kept */
        uint32_t x;
        memcpy(&x, &f, 4);
        return (uint16_t)((x >> 16) | 0x40u);
    }
    uint64_t ax;
    uint16_t sign = split(f, &ax);
    return sign | BF16_MAG(ax);
}

uint16_t sim_f16_double_to_bf16(double d)
{
    if (isnan(d))
        return 0x7fc0;
    uint64_t ax;
    uint16_t sign = split(d, &ax);
    return sign | BF16_MAG(ax);
}
