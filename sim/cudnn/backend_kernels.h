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

#include "sim/cucpu/hd.h"

#ifndef __CUDACC__
#include <string.h>
#endif

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

CUCPU_HD float simbk_bitsf(unsigned u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

CUCPU_HD unsigned simbk_fbits(float f)
{
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}

CUCPU_HD float simbk_load(const void *p, long long i, int t)
{
    if (t == SIMBK_F32)
        return ((const float *)p)[i];
    unsigned h = ((const unsigned short *)p)[i];
    if (t == SIMBK_BF16)
        return simbk_bitsf(h << 16);
    unsigned s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu)
        return simbk_bitsf(s | 0x7f800000u | (m << 13));
    if (e)
        return simbk_bitsf(s | ((e + 112u) << 23) | (m << 13));
    if (!m)
        return simbk_bitsf(s);
    e = 113u;
    while (!(m & 0x400u)) {
        m <<= 1;
        e--;
    }
    return simbk_bitsf(s | (e << 23) | ((m & 0x3ffu) << 13));
}

CUCPU_HD void simbk_store(void *p, long long i, int t, float v)
{
    unsigned x = simbk_fbits(v), a = x & 0x7fffffffu, s = (x >> 16) & 0x8000u, q;
    if (t == SIMBK_F32) {
        ((float *)p)[i] = v;
        return;
    }
    if (t == SIMBK_BF16) {
        q = a > 0x7f800000u ? (x >> 16) | 0x40u : (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    } else if (a > 0x7f800000u) {
        q = s | 0x7e00u | ((a >> 13) & 0x3ffu);
    } else if (a >= 0x477ff000u) {
        q = s | 0x7c00u;
    } else if (a >= 0x38800000u) {
        q = s | (((a + 0xfffu + ((a >> 13) & 1u)) >> 13) - (112u << 10));
    } else if (a <= 0x33000000u) {
        q = s;
    } else {
        unsigned sh = 126u - (a >> 23), m = (a & 0x7fffffu) | 0x800000u;
        unsigned r = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
        if (rem > half || (rem == half && (r & 1u)))
            r++;
        q = s | r;
    }
    ((unsigned short *)p)[i] = (unsigned short)q;
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
