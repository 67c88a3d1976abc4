/* The NCCL test clients' values (nccl_vclient.c, nccl_xclient.c): a float
 * of rank r, element i, salt, spanning 2^-10..2^10 with either sign, so
 * that their float sum depends on the order of the additions. Needs
 * <math.h>. */
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
    return ldexpf((x >> 30) & 1 ? -m : m, (int)((x >> 40) % 21) - 10);
}

#endif
