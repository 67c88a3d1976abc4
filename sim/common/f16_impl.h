/* The half / bfloat16 conversions of sim/common/f16.h as CUCPU_HD functions
 * (sim/cucpu/hd.h): one implementation for the libraries' C code (f16.c
 * wraps these) and for their kernels (nvcc, or the host compiler through the
 * CUDA-on-CPU layer), so host references and kernels round alike. Written
 * in the common subset of C and C++; bit casts through memcpy. See f16.h
 * for the rounding and NaN rules. */
#ifndef SIM_F16_IMPL_H
#define SIM_F16_IMPL_H

#include "sim/cucpu/hd.h"

#include <stdint.h>
#include <string.h>

#define SIM_F16_D_FRAC ((UINT64_C(1) << 52) - 1)

CUCPU_HD uint32_t sim_f16_fbits(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    return x;
}

CUCPU_HD float sim_f16_bitsf(uint32_t x)
{
    float f;
    memcpy(&f, &x, 4);
    return f;
}

CUCPU_HD uint64_t sim_f16_dbits(double d)
{
    uint64_t x;
    memcpy(&x, &d, 8);
    return x;
}

CUCPU_HD double sim_f16_bitsd(uint64_t x)
{
    double d;
    memcpy(&d, &x, 8);
    return d;
}

/* Rounds the magnitude whose double bits are ax (sign clear, not NaN) to a
 * binary format with mbits fraction bits, exponent bias `bias` and all-ones
 * exponent field emax; returns its magnitude bits: round to nearest even,
 * subnormals where the format has them, emax << mbits (infinity) on overflow
 * or for infinity. */
CUCPU_HD uint32_t sim_f16_round_mag(uint64_t ax, int mbits, int bias, int emax)
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
        uint64_t m = (ax & SIM_F16_D_FRAC) | (UINT64_C(1) << 52);
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

CUCPU_HD int sim_f16_isnan_d(double d)
{
    return (sim_f16_dbits(d) & ~(UINT64_C(1) << 63)) > (UINT64_C(0x7ff) << 52);
}

CUCPU_HD int sim_f16_isnan_f(float f)
{
    return (sim_f16_fbits(f) & 0x7fffffffu) > 0x7f800000u;
}

#define SIM_F16_HALF_MAG(ax) ((uint16_t)sim_f16_round_mag(ax, 10, 15, 31))
#define SIM_F16_BF16_MAG(ax) ((uint16_t)sim_f16_round_mag(ax, 7, 127, 255))

/* d's sign moved to bit 15 (returned), |d|'s bits in *ax. */
CUCPU_HD uint16_t sim_f16_split(double d, uint64_t *ax)
{
    uint64_t x = sim_f16_dbits(d);
    *ax = x & ~(UINT64_C(1) << 63);
    return (uint16_t)((x >> 48) & 0x8000u);
}

CUCPU_HD float sim_f16_half_to_float_(uint16_t h)
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
    return sim_f16_bitsf(bits);
}

CUCPU_HD double sim_f16_half_to_double_(uint16_t h)
{
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) /* NaN: the default one, signed */
        return sim_f16_bitsd(((uint64_t)(h & 0x8000u) << 48) | UINT64_C(0x7ff8000000000000));
    return (double)sim_f16_half_to_float_(h);
}

CUCPU_HD uint16_t sim_f16_float_to_half_(float f)
{
    if (sim_f16_isnan_f(f)) { /* quiet, sign and top payload bits kept */
        uint32_t x = sim_f16_fbits(f);
        return (uint16_t)(((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x3ffu));
    }
    uint64_t ax;
    uint16_t sign = sim_f16_split((double)f, &ax);
    return (uint16_t)(sign | SIM_F16_HALF_MAG(ax));
}

CUCPU_HD uint16_t sim_f16_double_to_half_(double d)
{
    if (sim_f16_isnan_d(d))
        return 0x7e00;
    uint64_t ax;
    uint16_t sign = sim_f16_split(d, &ax);
    return (uint16_t)(sign | SIM_F16_HALF_MAG(ax));
}

CUCPU_HD float sim_f16_bf16_to_float_(uint16_t h)
{
    return sim_f16_bitsf((uint32_t)h << 16);
}

CUCPU_HD double sim_f16_bf16_to_double_(uint16_t h)
{
    return (double)sim_f16_bf16_to_float_(h);
}

CUCPU_HD uint16_t sim_f16_float_to_bf16_(float f)
{
    if (sim_f16_isnan_f(f)) { /* quiet, sign and top payload bits kept */
        uint32_t x = sim_f16_fbits(f);
        return (uint16_t)((x >> 16) | 0x40u);
    }
    uint64_t ax;
    uint16_t sign = sim_f16_split((double)f, &ax);
    return (uint16_t)(sign | SIM_F16_BF16_MAG(ax));
}

CUCPU_HD uint16_t sim_f16_double_to_bf16_(double d)
{
    if (sim_f16_isnan_d(d))
        return 0x7fc0;
    uint64_t ax;
    uint16_t sign = sim_f16_split(d, &ax);
    return (uint16_t)(sign | SIM_F16_BF16_MAG(ax));
}

#endif
