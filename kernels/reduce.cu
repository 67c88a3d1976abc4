// The virtual collectives' fixed-order reduction kernel, one source for
// the GPU (nvcc) and simcuda (the host compiler through sim/cucpu): element
// i of the output is the fold of the inputs in order 0..nin-1, with the
// arithmetic of kernels/reduce_kernels.h (shared with the host transport).
//
// Work layout: a block takes tiles of blockDim.x * ES_RED_PER_THREAD *
// ES_RED_VEC consecutive elements; inside a tile its threads take groups of
// ES_RED_VEC consecutive elements, interleaved on a GPU (coalesced), and on
// a CPU (sim/cucpu, which runs a block's threads one after another) each
// thread its ES_RED_PER_THREAD groups in a row (whole cache lines: a fold
// of 64 MiB 30.5 -> 24.5 ms); the grid strides over tiles. Who computes an
// element never changes its value.
//
// One instantiation per (datatype, operation): the datatype and operation
// are constants inside the loops, so the element functions' switches fold
// away on both compilers.
#include "sim/cucpu/cucpu.h"
#include "kernels/reduce_kernels.h"

// Elements [i0, i0 + M) of the output, each the fold of the inputs in
// order 0..nin-1 (M a constant: ES_RED_VEC, or 1 at the end of the data).
template <int DT, int OP, int M>
__device__ __forceinline__ void es_red_vec(const es_red_args_t &a, es_u64 s, es_u64 i0)
{
    const int step = (OP == ES_RO_AVG || OP == ES_RO_PREMUL) ? ES_RO_SUM : OP;
    es_u64 acc[M];
    for (int v = 0; v < M; v++) {
        acc[v] = es_red_load(DT, a.in[0], i0 + v);
        if (OP == ES_RO_PREMUL)
            acc[v] = es_red_scale(DT, acc[v], s);
    }
    for (int r = 1; r < a.nin; r++)
        for (int v = 0; v < M; v++)
            acc[v] = es_red_step(DT, step, acc[v], es_red_load(DT, a.in[r], i0 + v));
    for (int v = 0; v < M; v++)
        es_red_store(DT, a.out, i0 + v, es_red_finish(DT, OP, a.divisor, acc[v]));
}

template <int DT, int OP> __device__ __forceinline__ void es_red_tiles(const es_red_args_t &a)
{
    es_u64 s = OP == ES_RO_PREMUL ? es_red_scalar(&a) : 0;
    es_u64 tile = (es_u64)blockDim.x * ES_RED_PER_THREAD * ES_RED_VEC;
    for (es_u64 base = (es_u64)blockIdx.x * tile; base < a.count; base += (es_u64)gridDim.x * tile)
        for (int k = 0; k < ES_RED_PER_THREAD; k++) {
#ifdef __CUDACC__
            es_u64 i0 = base + ((es_u64)k * blockDim.x + threadIdx.x) * ES_RED_VEC;
#else
            es_u64 i0 = base + ((es_u64)threadIdx.x * ES_RED_PER_THREAD + k) * ES_RED_VEC;
#endif
            if (i0 + ES_RED_VEC <= a.count)
                es_red_vec<DT, OP, ES_RED_VEC>(a, s, i0);
            else
                for (es_u64 i = i0; i < a.count; i++)
                    es_red_vec<DT, OP, 1>(a, s, i);
        }
}

template <int DT> __device__ __forceinline__ void es_red_dt(const es_red_args_t &a)
{
    switch (a.op) {
    case ES_RO_SUM: es_red_tiles<DT, ES_RO_SUM>(a); break;
    case ES_RO_PROD: es_red_tiles<DT, ES_RO_PROD>(a); break;
    case ES_RO_MAX: es_red_tiles<DT, ES_RO_MAX>(a); break;
    case ES_RO_MIN: es_red_tiles<DT, ES_RO_MIN>(a); break;
    case ES_RO_AVG: es_red_tiles<DT, ES_RO_AVG>(a); break;
    default: es_red_tiles<DT, ES_RO_PREMUL>(a); break;
    }
}

extern "C" __global__ CUCPU_HOT void es_coll_reduce(es_red_args_t a)
{
    switch (a.dtype) {
    case ES_RT_I8: es_red_dt<ES_RT_I8>(a); break;
    case ES_RT_U8: es_red_dt<ES_RT_U8>(a); break;
    case ES_RT_I32: es_red_dt<ES_RT_I32>(a); break;
    case ES_RT_U32: es_red_dt<ES_RT_U32>(a); break;
    case ES_RT_I64: es_red_dt<ES_RT_I64>(a); break;
    case ES_RT_U64: es_red_dt<ES_RT_U64>(a); break;
    case ES_RT_F16: es_red_dt<ES_RT_F16>(a); break;
    case ES_RT_F32: es_red_dt<ES_RT_F32>(a); break;
    case ES_RT_F64: es_red_dt<ES_RT_F64>(a); break;
    case ES_RT_BF16: es_red_dt<ES_RT_BF16>(a); break;
    case ES_RT_E4M3: es_red_dt<ES_RT_E4M3>(a); break;
    default: es_red_dt<ES_RT_E5M2>(a); break;
    }
}
CUCPU_EXPORT(es_coll_reduce)
