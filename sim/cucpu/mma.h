/* cucpu: the arithmetic of one lane's share of an int8 warp MMA
 * (sim/cucpu/wmma.h's mma_sync on the CPU), in libcucpu so that it can use
 * the CPU's vector instructions whatever the kernel library was built for.
 *
 * Contract: cucpu_mma_s8(d, a, b, c) sets, for j = 0 .. 7,
 *
 *     d[j] = c[j] + sum over k = 0 .. 15 of a[k] * b[16 j + k]
 *
 * in int32 arithmetic modulo 2^32 (the products of two int8 are exact; the
 * sum wraps as the tensor cores' would, a caller that bounds its sums never
 * reaches that). d may be c. The result is the same bits on every path:
 * AVX2 where the CPU has it (chosen once), plain C otherwise. */
#ifndef CUCPU_MMA_H
#define CUCPU_MMA_H

#ifdef __cplusplus
extern "C" {
#endif

void cucpu_mma_s8(int d[8], const signed char a[16], const signed char b[128], const int c[8]);

/* The two paths by name, for the layer's test: path 0 plain C, 1 AVX2.
 * Returns -ENOTSUP (and leaves d) when the CPU lacks path 1. */
int cucpu_mma_s8_path(int path, int d[8], const signed char a[16], const signed char b[128],
                      const int c[8]);

#ifdef __cplusplus
}
#endif

#endif
