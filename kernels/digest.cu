// The collective digests' hash (controller/digest.h), one source for the
// GPU (nvcc) and simcuda (the host compiler through sim/cucpu).
//
// hash(buffer of n bytes) = mix(~0, n) + sum over the 8-byte words w_i of
// the buffer (the last one zero-padded, little-endian) of mix(i, w_i),
// modulo 2^64, with mix a 64-bit finaliser (splitmix64's) of w_i xor
// i * golden ratio. Integer addition is associative and commutative, so
// the value is the same whatever the grid, the block order or the
// scheduling: each thread sums its words, each block its threads in shared
// memory, and the blocks add theirs to *out with an integer atomic (exact).
// *out must be zero before the launch.
#include "sim/cucpu/cucpu.h"
#include "kernels/digest_kernel.h"

typedef unsigned long long es_dg_u64;

__device__ __forceinline__ es_dg_u64 es_dg_mix(es_dg_u64 i, es_dg_u64 w)
{
    es_dg_u64 x = w ^ (i * 0x9E3779B97F4A7C15ull);
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

extern "C" __global__ void es_digest_hash(const unsigned char *p, es_dg_u64 nbytes,
                                          es_dg_u64 *out)
{
    __shared__ es_dg_u64 part[ES_DG_BLOCK];
    es_dg_u64 nw = (nbytes + 7) / 8, acc = 0;
    int aligned = ((es_dg_u64)p & 7) == 0;
    es_dg_u64 stride = (es_dg_u64)gridDim.x * blockDim.x;
    for (es_dg_u64 i = (es_dg_u64)blockIdx.x * blockDim.x + threadIdx.x; i < nw; i += stride) {
        es_dg_u64 w = 0;
        if (aligned && (i + 1) * 8 <= nbytes) {
            w = ((const es_dg_u64 *)p)[i];
        } else {
            for (int b = 0; b < 8; b++)
                if (i * 8 + b < nbytes)
                    w |= (es_dg_u64)p[i * 8 + b] << (8 * b);
        }
        acc += es_dg_mix(i, w);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0)
        acc += es_dg_mix(~0ull, nbytes);
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(out, part[0]);
}
CUCPU_EXPORT(es_digest_hash)
