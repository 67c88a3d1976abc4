/* simcuda cuBLAS: the GEMM heuristic (device + shape -> tile, k-chunk,
 * split-K; gemm.h) and the down-conversion of "fast" compute types. The
 * kernels that follow the chosen summation order are sim/cublas/kernels.cu;
 * ref.c is the same order in plain C for the tests and the bench. */
#include "sim/cublas/gemm.h"

#include <string.h>

static float round_tf32(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7f800000u) == 0x7f800000u)
        return f;
    x += 0xfffu + ((x >> 13) & 1);
    x &= ~0x1fffu;
    memcpy(&f, &x, 4);
    return f;
}

float sim_round_input(float f, sim_round_t r)
{
    switch (r) {
    case SIM_ROUND_TF32: return round_tf32(f);
    case SIM_ROUND_BF16: return sim_f16_bf16_to_float(sim_f16_float_to_bf16(f));
    case SIM_ROUND_F16: return sim_f16_half_to_float(sim_f16_float_to_half(f));
    default: return f;
    }
}

/* ------------------------------------------------------------ heuristic */

typedef struct arch_kernels {
    int big_m, big_n, small_m, small_n, kc, cap;
} arch_kernels_t;

static arch_kernels_t arch_for(const sim_gemm_dev_t *dev)
{
    int cc = dev->cc_major * 10 + dev->cc_minor;
    if (cc >= 90)
        return (arch_kernels_t){256, 128, 128, 64, 64, 16};
    if (cc >= 80)
        return (arch_kernels_t){128, 128, 64, 64, 32, 8};
    if (cc >= 75)
        return (arch_kernels_t){128, 64, 64, 32, 16, 4};
    if (cc >= 70)
        return (arch_kernels_t){128, 64, 64, 64, 16, 8};
    return (arch_kernels_t){64, 64, 32, 32, 8, 4};
}

size_t sim_gemm_default_workspace(const sim_gemm_dev_t *dev)
{
    return dev->cc_major >= 9 ? (size_t)32 << 20 : (size_t)4 << 20;
}

static int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

void sim_gemm_choose(const sim_gemm_dev_t *dev, int64_t m, int64_t n, int64_t k, int64_t batch,
                     size_t ws_bytes, int contended, sim_gemm_plan_t *plan)
{
    arch_kernels_t ak = arch_for(dev);
    int sms = dev->sm_count > 0 ? dev->sm_count : 1;
    if (batch < 1)
        batch = 1;
    if (m < 1)
        m = 1;
    if (n < 1)
        n = 1;
    int64_t tiles = cdiv(m, ak.big_m) * cdiv(n, ak.big_n) * batch;
    plan->tile_m = ak.big_m;
    plan->tile_n = ak.big_n;
    if (tiles < sms / 2) { /* small problem: smaller tiles, more blocks */
        plan->tile_m = ak.small_m;
        plan->tile_n = ak.small_n;
        tiles = cdiv(m, ak.small_m) * cdiv(n, ak.small_n) * batch;
    }
    plan->kc = ak.kc;
    plan->fallback = 0;
    int64_t split = 1;
    int64_t kblocks = k > 0 ? cdiv(k, ak.kc) : 1;
    if (contended) {
        /* No workspace to be had: the kernel without split-K partials,
         * with its own (shorter) k-chunk. */
        plan->fallback = 1;
        plan->kc = ak.kc / 2 >= 8 ? ak.kc / 2 : 8;
        kblocks = k > 0 ? cdiv(k, plan->kc) : 1;
    } else if (tiles < sms && kblocks >= 8) {
        /* Fill the SMs: tiles x split ~ sm_count, each split >= 4 chunks. */
        split = sms / tiles;
        if (split > ak.cap)
            split = ak.cap;
        if (split > kblocks / 4)
            split = kblocks / 4;
        /* The partials of every split live in the workspace (the
         * epilogue kernel adds them in split order). */
        while (split > 1 &&
               (uint64_t)split * (uint64_t)m * (uint64_t)n * (uint64_t)batch * 4u > ws_bytes)
            split--;
        if (split < 1)
            split = 1;
    }
    int64_t kper = cdiv(kblocks, split) * plan->kc;
    plan->kper = kper;
    plan->splitk = k > 0 ? (int)cdiv(k, kper) : 1;
}

