// simcuda cuDNN backend's kernel: fp16 / bf16 <-> fp32 tensor conversion
// (sim/cudnn/backend_kernels.h). One source for the fatbin embedded in
// libcudnn.so.9 and for simcuda's twin (the CUDA-on-CPU layer).
#include "sim/cucpu/cucpu.h"
#include "sim/cudnn/backend_kernels.h"

extern "C" __global__ void simbk_convert(simbk_convert_t a)
{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.total)
        simbk_convert_elem(&a, i);
}
CUCPU_EXPORT(simbk_convert)
