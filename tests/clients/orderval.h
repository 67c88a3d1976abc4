/* The NCCL test clients' values (nccl_vclient.c, nccl_xclient.c): a float
 * of rank r, element i, salt, spanning 2^-10..2^10 with either sign, so
 * that their float sum depends on the order of the additions. */
#ifndef ES_TESTS_CLIENTS_ORDERVAL_H
#define ES_TESTS_CLIENTS_ORDERVAL_H

#include <stddef.h>

static inline float val(int r, size_t i, int salt)
{
    unsigned long long x = (unsigned long long)r * 0x9e3779b97f4a7c15ULL ^
                           (i + 1) * 0xbf58476d1ce4e5b9ULL ^ (unsigned long long)salt << 56;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 29;
    float m = 1.0f + (float)(x & 0xfffff) / 1048576.0f;
    /* m 2^e, e in -10..10: a product by a power of two in the normal range,
     * exact (ldexpf's bits, without its call: the clients make millions) */
    union {
        unsigned u;
        float f;
    } p = { (127u + (unsigned)(x >> 40) % 21u - 10u) << 23 };
    return ((x >> 30) & 1 ? -m : m) * p.f;
}

#endif
