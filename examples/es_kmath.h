/* Arithmetic of examples/kernels.cu: every float operation that matters is
 * written through ES_FADD/ES_FMUL/ES_FSUB/ES_FDIV (round-to-nearest, never
 * contracted into an FMA), the exponential is a fixed polynomial rather than
 * the platform's expf, and dropout draws come from a Philox4x32-10 counter
 * generator keyed by the seed with counter (global element index, step).
 *
 * In the kernels (nvcc, or the host compiler through sim/cucpu/cucpu.h) the
 * macros are CUDA's rounding intrinsics; in plain C (the trainer's unit
 * test, built with -ffp-contract=off) they are the C operators, which round
 * the same way: both give the same bits.
 */
#ifndef ES_KMATH_H
#define ES_KMATH_H

#if defined(__CUDACC__) || defined(CUCPU_H)
#define ES_FN static __device__ __forceinline__
#define ES_FADD(a, b) __fadd_rn((a), (b))
#define ES_FSUB(a, b) __fsub_rn((a), (b))
#define ES_FMUL(a, b) __fmul_rn((a), (b))
#define ES_FDIV(a, b) __fdiv_rn((a), (b))
#define ES_RINT(x) rintf(x)
#define ES_MULHI(a, b) __umulhi((a), (b))
#define ES_AS_FLOAT(u) __uint_as_float(u)
typedef unsigned int es_u32;
#else
#include <math.h>
#include <stdint.h>
#include <string.h>
#define ES_FN static inline
#define ES_FADD(a, b) ((float)(a) + (float)(b))
#define ES_FSUB(a, b) ((float)(a) - (float)(b))
#define ES_FMUL(a, b) ((float)(a) * (float)(b))
#define ES_FDIV(a, b) ((float)(a) / (float)(b))
#define ES_RINT(x) rintf(x)
#define ES_MULHI(a, b) ((uint32_t)(((uint64_t)(a) * (uint64_t)(b)) >> 32))
typedef uint32_t es_u32;
static inline float es_as_float_(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
#define ES_AS_FLOAT(u) es_as_float_(u)
#endif

/* exp(x) for x <= 0 (softmax after subtracting the row maximum): Cody-Waite
 * range reduction x = k ln2 + r, a degree-6 Taylor polynomial for e^r on
 * [-ln2/2, ln2/2], then a multiply by 2^k built from its bits. Relative error
 * about 2e-7, identical bits on the device and on the CPU (expf is not). */
ES_FN float es_exp(float x)
{
    if (!(x > -87.0f))
        return 0.0f;
    if (x > 0.0f)
        x = 0.0f;
    float k = ES_RINT(ES_FMUL(x, 1.44269504f));
    float r = ES_FSUB(x, ES_FMUL(k, 0.693359375f));
    r = ES_FSUB(r, ES_FMUL(k, -2.12194440e-4f));
    float p = 1.38888889e-3f;
    p = ES_FADD(ES_FMUL(p, r), 8.33333333e-3f);
    p = ES_FADD(ES_FMUL(p, r), 4.16666667e-2f);
    p = ES_FADD(ES_FMUL(p, r), 1.66666667e-1f);
    p = ES_FADD(ES_FMUL(p, r), 0.5f);
    p = ES_FADD(ES_FMUL(p, r), 1.0f);
    p = ES_FADD(ES_FMUL(p, r), 1.0f);
    int ki = (int)k; /* in [-126, 0] */
    float scale = ES_AS_FLOAT((es_u32)(ki + 127) << 23);
    return ES_FMUL(p, scale);
}

/* Philox4x32-10, first output word, for counter (c0, c1, 0, 0) and key
 * (k0, k1). */
ES_FN es_u32 es_philox(es_u32 c0, es_u32 c1, es_u32 k0, es_u32 k1)
{
    es_u32 c2 = 0, c3 = 0;
    for (int i = 0; i < 10; i++) {
        es_u32 hi0 = ES_MULHI(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        es_u32 hi1 = ES_MULHI(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        es_u32 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c0;
}

/* Uniform in [0, 1) with 24 bits, exact on both sides. */
ES_FN float es_uniform(es_u32 bits)
{
    return (float)(bits >> 8) * (1.0f / 16777216.0f);
}

/* Dropout: key (seed, a constant), counter (global element index, step).
 * The index is the element's position in the global batch, so each rank's
 * generator draws its own part of one mask per step, and the mask of a
 * global batch does not depend on how many ranks share it. */
ES_FN float es_dropout_mask(es_u32 seed, es_u32 step, es_u32 index, float p, float keep_scale)
{
    float u = es_uniform(es_philox(index, step, seed, 0x7F4A7C15u));
    return u >= p ? keep_scale : 0.0f;
}

#endif
