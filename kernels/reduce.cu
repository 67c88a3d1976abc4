// The virtual collectives' fixed-order reduction kernel: element i of the
// output is the fold of the inputs in order 0..nin-1 (kernels/
// reduce_kernels.h spells out the arithmetic). A grid-stride loop: the grid
// size changes who computes an element, never its value.
#include "kernels/reduce_kernels.h"

extern "C" __global__ void es_coll_reduce(es_red_args_t a)
{
    es_u64 s = a.op == ES_RO_PREMUL ? es_red_scalar(&a) : 0;
    es_u64 stride = (es_u64)gridDim.x * blockDim.x;
    for (es_u64 i = (es_u64)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += stride)
        es_red_elem(&a, s, i);
}
