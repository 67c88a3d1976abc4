// The swap engine's chunk checksum on the device (see kernels/swapsum.h):
// one block per chunk, one fold per thread, the folds summed in shared
// memory (integer addition: the order does not change the result). The same
// source runs on simcuda through the CUDA-on-CPU layer (sim/cucpu).
#include "sim/cucpu/cucpu.h"
#include "kernels/swapsum.h"

extern "C" __global__ void es_swapsum(es_swapsum_args_t a)
{
    __shared__ es_u64 part[ES_SWAPSUM_THREADS];
    es_u64 c = blockIdx.x;
    if (c >= a.nchunks || blockDim.x != ES_SWAPSUM_THREADS)
        return;
    const es_u64 *chunk = a.data + c * (ES_SWAPSUM_CHUNK / 8);
    part[threadIdx.x] = es_ss_fold(chunk, threadIdx.x);
    __syncthreads();
    for (unsigned s = ES_SWAPSUM_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        a.out[c] = es_ss_final(part[0]);
}
CUCPU_EXPORT(es_swapsum)
