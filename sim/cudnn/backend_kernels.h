/* simcuda cuDNN backend: the conversion between fp16 / bf16 tensors and
 * the fp32 the convolution engines compute in (16-bit graphs run as: inputs
 * widened into the workspace, the fp32 engine, the result rounded into the
 * output). The per-element body of the library module's simcudnn_convert
 * kernel (sim/cudnn/kernels.cu, built for the GPU by nvcc and for simcuda
 * through the CUDA-on-CPU layer) and its argument structure, which cudnn.c
 * fills at the launch. Widening is exact; narrowing rounds to nearest even
 * (NaN stays a quiet NaN). */
#ifndef SIM_CUDNN_BACKEND_KERNELS_H
#define SIM_CUDNN_BACKEND_KERNELS_H

#include "sim/common/f16_impl.h"
#include "sim/cucpu/hd.h"

enum { SIMBK_F32 = 0, SIMBK_F16 = 1, SIMBK_BF16 = 2 };

/* dst[n,c,h,w] = src[n,c,h,w] over a 4-d view, each with its own element
 * strides and type. */
typedef struct simbk_convert {
    const void *src;
    void *dst;
    int st, dt;
    int n, c, h, w;
    long long ss[4], ds[4];
    long long total;
} simbk_convert_t;

/* Widening and narrowing: sim/common/f16_impl.h's float conversions. */
CUCPU_HD float simbk_load(const void *p, long long i, int t)
{
    if (t == SIMBK_F32)
        return ((const float *)p)[i];
    unsigned short h = ((const unsigned short *)p)[i];
    return t == SIMBK_BF16 ? sim_f16_bf16_to_float_(h) : sim_f16_half_to_float_(h);
}

CUCPU_HD void simbk_store(void *p, long long i, int t, float v)
{
    if (t == SIMBK_F32)
        ((float *)p)[i] = v;
    else
        ((unsigned short *)p)[i] =
            t == SIMBK_BF16 ? sim_f16_float_to_bf16_(v) : sim_f16_float_to_half_(v);
}

CUCPU_HD void simbk_convert_elem(const simbk_convert_t *a, long long idx)
{
    long long w = idx % a->w, t = idx / a->w;
    long long h = t % a->h;
    t /= a->h;
    long long c = t % a->c, n = t / a->c;
    float v = simbk_load(a->src, n * a->ss[0] + c * a->ss[1] + h * a->ss[2] + w * a->ss[3], a->st);
    simbk_store(a->dst, n * a->ds[0] + c * a->ds[1] + h * a->ds[2] + w * a->ds[3], a->dt, v);
}

#endif
