/* The swap engine's chunk checksum (move/swap.c), one source for the GPU
 * (kernels/swapsum.cu, nvcc), simcuda's twin (kernels/swapsum_twin.c) and
 * the host (tests): a 64-bit hash of every ES_SWAPSUM_CHUNK bytes of device
 * memory, computed on the device so that the host never reads device
 * memory; only the array of hashes is copied back.
 *
 * Definition (integers only, so every compiler and GPU gives the same
 * bits): a chunk is W = CHUNK / 8 little-endian 64-bit words; thread t of
 * ES_SWAPSUM_THREADS folds words t, t + T, t + 2T, ... in ascending order,
 * h = rotl((h ^ w) * P, 29) from h = seed(t); the chunk's hash is
 * mix(sum over t of mix(h_t + t * G) mod 2^64, xor W). Each step of a fold
 * is a bijection of h, so changing any one word always changes the hash;
 * the sum is order-free, so how threads are scheduled does not matter.
 *
 * Kernel: es_swapsum(es_swapsum_args_t a), grid.x = a.nchunks, block.x =
 * ES_SWAPSUM_THREADS; out[i] = hash of chunk i of data.
 */
#ifndef ES_KERNELS_SWAPSUM_H
#define ES_KERNELS_SWAPSUM_H

#ifdef __CUDACC__
#define ES_SS_HD __host__ __device__ __forceinline__
typedef unsigned long long es_u64;
#else
#include <stdint.h>
#define ES_SS_HD static inline
typedef uint64_t es_u64;
#endif

#define ES_SWAPSUM_CHUNK (1u << 20)
#define ES_SWAPSUM_THREADS 256u

typedef struct es_swapsum_args {
    const es_u64 *data;     /* nchunks * ES_SWAPSUM_CHUNK bytes, 8-byte aligned */
    es_u64 *out;            /* nchunks hashes */
    es_u64 nchunks;
} es_swapsum_args_t;

ES_SS_HD es_u64 es_ss_mix(es_u64 x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Thread t's fold over its words of one chunk. */
ES_SS_HD es_u64 es_ss_fold(const es_u64 *chunk, unsigned t)
{
    es_u64 h = es_ss_mix(0x9e3779b97f4a7c15ULL * (t + 1));
    const unsigned words = ES_SWAPSUM_CHUNK / 8;
    for (unsigned i = t; i < words; i += ES_SWAPSUM_THREADS) {
        h = (h ^ chunk[i]) * 0x100000001b3ULL;
        h = (h << 29) | (h >> 35);
    }
    return es_ss_mix(h + (es_u64)t * 0x9e3779b97f4a7c15ULL);
}

ES_SS_HD es_u64 es_ss_final(es_u64 sum)
{
    return es_ss_mix(sum ^ (ES_SWAPSUM_CHUNK / 8));
}

/* The hash of one chunk, sequentially (on the host). */
ES_SS_HD es_u64 es_ss_chunk(const es_u64 *chunk)
{
    es_u64 sum = 0;
    for (unsigned t = 0; t < ES_SWAPSUM_THREADS; t++)
        sum += es_ss_fold(chunk, t);
    return es_ss_final(sum);
}

#endif
