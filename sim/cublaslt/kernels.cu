// simcuda cuBLASLt's device kernels: the GEMM (one thread per element of
// D, or per split partial), the split-K reduction and the bias gradient.
// One source for the fatbin embedded in libcublasLt.so.13 (nvcc) and for
// the twin library simcuda runs (the CUDA-on-CPU layer, sim/cucpu); the
// per-thread bodies are in lt_kernels.h.
#include "sim/cucpu/cucpu.h"
#include "sim/cublaslt/lt_kernels.h"

extern "C" __global__ void simlt_gemm(lt_args_t a)
{
    long long i = (long long)blockIdx.x * LT_TILE + threadIdx.x;
    long long j = (long long)blockIdx.y * LT_TILE + threadIdx.y;
    if (i < a.m && j < a.n)
        lt_gemm_thread(&a, i, j, blockIdx.z);
}
CUCPU_EXPORT(simlt_gemm)

extern "C" __global__ void simlt_reduce(lt_args_t a)
{
    long long i = (long long)blockIdx.x * LT_TILE + threadIdx.x;
    long long j = (long long)blockIdx.y * LT_TILE + threadIdx.y;
    if (i < a.m && j < a.n)
        lt_reduce_thread(&a, i, j, blockIdx.z);
}
CUCPU_EXPORT(simlt_reduce)

extern "C" __global__ void simlt_bgrad(lt_args_t a)
{
    long long x = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long len = (a.epi & LT_EPI_BGRADA) ? a.m : a.n;
    if (x < len)
        lt_bgrad_thread(&a, x, blockIdx.y);
}
CUCPU_EXPORT(simlt_bgrad)
