/* The reference arithmetic of the virtual collectives' tests: the
 * documented reduction rule (shim/README.md, "NCCL"; kernels/
 * reduce_kernels.h) written a second time, independently of the shim's
 * code: float and double with the C operators (built with
 * -ffp-contract=off), half through the compiler's _Float16, bfloat16 and
 * the fp8 formats by rounding with libm (ilogb, ldexp, nearbyint) and
 * decoding by formula; codes are found by searching the decoded values.
 * Datatypes are ncclDataType_t values; operations OP_*.
 */
#ifndef ES_TESTS_COLL_REFARITH_H
#define ES_TESTS_COLL_REFARITH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PREMUL };

static const size_t tsize[12] = { 1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1 };

static inline float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline double bits_d(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
static inline uint64_t d_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

/* Round v to p significant bits (normal exponents from emin), RNE. */
static inline double ref_round(double v, int p, int emin, double maxf, int sat)
{
    if (v == 0 || isnan(v))
        return v;
    if (isinf(v))
        return sat ? copysign(maxf, v) : v;
    int e = ilogb(v);
    if (e < emin)
        e = emin;
    double q = ldexp(1.0, e - (p - 1));
    double r = nearbyint(v / q) * q;
    if (fabs(r) > maxf)
        r = sat ? copysign(maxf, v) : copysign(INFINITY, v);
    return r;
}

static inline double fp8_value(int e4m3, unsigned code) /* code < 128 */
{
    unsigned E = e4m3 ? 4 : 5, M = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    unsigned e = code >> M, m = code & ((1u << M) - 1);
    if (e4m3 && e == 15 && m == 7)
        return NAN;
    if (!e4m3 && e == 31)
        return m ? NAN : INFINITY;
    (void)E;
    if (e == 0)
        return ldexp((double)m, 1 - (int)bias - (int)M);
    return ldexp(1.0 + (double)m / (double)(1u << M), (int)e - (int)bias);
}

static inline float ref_dec(int dt, uint64_t v)
{
    switch (dt) {
    case 6: { _Float16 h; uint16_t b = (uint16_t)v; memcpy(&h, &b, 2); return (float)h; }
    case 9: return bits_f((uint32_t)v << 16);
    case 10: case 11: {
        double x = fp8_value(dt == 10, (unsigned)(v & 0x7f));
        return (float)((v & 0x80) ? -x : x);
    }
    default: return 0;
    }
}

static inline uint64_t ref_enc(int dt, float f)
{
    static const uint64_t nan_code[12] = { 0, 0, 0, 0, 0, 0, 0x7e00, 0, 0, 0x7fc0, 0x7f, 0x7e };
    if (isnan(f))
        return nan_code[dt];
    switch (dt) {
    case 6: { _Float16 h = (_Float16)f; uint16_t b; memcpy(&b, &h, 2); return b; }
    case 9: {
        double r = ref_round(f, 8, -126, ldexp(255.0 / 128.0, 127), 0);
        return f_bits((float)r) >> 16;
    }
    default: {
        int e4 = dt == 10;
        double r = e4 ? ref_round(f, 4, -6, 448, 1) : ref_round(f, 3, -14, 57344, 1);
        unsigned sign = signbit(r) ? 0x80 : 0;
        double a = fabs(r);
        for (unsigned c = 0; c < 128; c++)
            if (fp8_value(e4, c) == a)
                return sign | c;
        return 0xff; /* not reached */
    }
    }
}

static inline int is_small(int dt) { return dt == 6 || dt == 9 || dt == 10 || dt == 11; }

static inline uint64_t int_mask(int dt)
{
    return tsize[dt] == 1 ? 0xff : tsize[dt] == 4 ? 0xffffffffULL : ~0ULL;
}

static inline int int_less(int dt, uint64_t a, uint64_t b)
{
    switch (dt) {
    case 0: return (int8_t)a < (int8_t)b;
    case 2: return (int32_t)a < (int32_t)b;
    case 4: return (int64_t)a < (int64_t)b;
    default: return a < b;
    }
}

/* acc OP b (op: SUM for sum/avg/premul) */
static inline uint64_t ref_step(int dt, int op, uint64_t a, uint64_t b)
{
    if (is_small(dt)) {
        float fa = ref_dec(dt, a), fb = ref_dec(dt, b);
        if (op == OP_MAX || op == OP_MIN) {
            if (isnan(fa)) return a;
            if (isnan(fb)) return b;
            return (op == OP_MAX ? fb > fa : fb < fa) ? b : a;
        }
        return ref_enc(dt, op == OP_PROD ? fa * fb : fa + fb);
    }
    if (dt == 7) {
        float fa = bits_f((uint32_t)a), fb = bits_f((uint32_t)b), r;
        if (op == OP_MAX || op == OP_MIN)
            r = isnan(fa) ? fa : isnan(fb) ? fb : (op == OP_MAX ? fb > fa : fb < fa) ? fb : fa;
        else
            r = op == OP_PROD ? fa * fb : fa + fb;
        return f_bits(r);
    }
    if (dt == 8) {
        double fa = bits_d(a), fb = bits_d(b), r;
        if (op == OP_MAX || op == OP_MIN)
            r = isnan(fa) ? fa : isnan(fb) ? fb : (op == OP_MAX ? fb > fa : fb < fa) ? fb : fa;
        else
            r = op == OP_PROD ? fa * fb : fa + fb;
        return d_bits(r);
    }
    uint64_t m = int_mask(dt);
    if (op == OP_MAX)
        return int_less(dt, a, b) ? b : a;
    if (op == OP_MIN)
        return int_less(dt, b, a) ? b : a;
    return (op == OP_PROD ? a * b : a + b) & m;
}

static inline uint64_t ref_finish(int dt, int op, int n, uint64_t acc)
{
    if (is_small(dt)) {
        float f = ref_dec(dt, acc);
        if (op == OP_AVG)
            return ref_enc(dt, f / (float)n);
        return isnan(f) ? ref_enc(dt, f) : acc;
    }
    if (dt == 7) {
        float f = bits_f((uint32_t)acc);
        if (op == OP_AVG)
            f = f / (float)n;
        return isnan(f) ? 0x7fc00000u : f_bits(f);
    }
    if (dt == 8) {
        double d = bits_d(acc);
        if (op == OP_AVG)
            d = d / (double)n;
        return isnan(d) ? 0x7ff8000000000000ULL : d_bits(d);
    }
    if (op != OP_AVG)
        return acc;
    switch (dt) {
    case 0: return (uint8_t)(int8_t)((int8_t)acc / n);
    case 2: return (uint32_t)((int32_t)acc / n);
    case 4: return (uint64_t)((int64_t)acc / n);
    default: return acc / (uint64_t)n;
    }
}

#endif
