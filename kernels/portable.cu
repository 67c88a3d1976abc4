// d2's portable kernels (see kernels/portable_kernels.h): thin launchers
// around the element functions shared with the simcuda twins.
#include "kernels/portable_kernels.h"

extern "C" __global__ void es_gemm_portable(es_gemm_args_t a)
{
    long long i = (long long)blockIdx.x * ES_GEMM_TILE + threadIdx.x;
    long long j = (long long)blockIdx.y * ES_GEMM_TILE + threadIdx.y;
    if (i < a.m && j < a.n)
        es_gemm_elem(&a, i, j, blockIdx.z);
}

#define ES_CONV_KERNEL(name, elem)                                                    \
    extern "C" __global__ void name(es_conv_args_t a)                                  \
    {                                                                                  \
        long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;               \
        if (idx < a.total)                                                             \
            elem(&a, idx);                                                             \
    }
ES_CONV_KERNEL(es_conv_fwd_portable, es_conv_fwd_elem)
ES_CONV_KERNEL(es_conv_bwd_data_portable, es_conv_bwd_data_elem)
ES_CONV_KERNEL(es_conv_bwd_filter_portable, es_conv_bwd_filter_elem)

extern "C" __global__ void es_bgrad_portable(es_bgrad_args_t a)
{
    long long x = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (x < a.len)
        es_bgrad_elem(&a, x, blockIdx.y);
}
