/* simcuda cuDNN: the algorithm tables (which algorithms exist, run a
 * problem, are deterministic, need how much workspace) and the summation
 * order of each fixed-order algorithm per architecture. Used by the
 * library and by the plain-C reference (kern.c). */
#include "sim/cudnn/kern.h"

#include <stddef.h>

int sim_conv_out_dim(int in, int pad, int filt, int dil, int str)
{
    if (str <= 0)
        return 0;
    int64_t eff = (int64_t)(filt - 1) * dil + 1;
    int64_t num = (int64_t)in + 2 * (int64_t)pad - eff;
    if (num < 0)
        return 0;
    return (int)(num / str + 1);
}


/* ---- algorithm tables ------------------------------------------------------ */

int sim_conv_algo_count(int dir)
{
    switch (dir) {
    case SIM_DIR_FWD: return SIM_FWD_ALGOS;
    case SIM_DIR_BWD_DATA: return SIM_BWD_DATA_ALGOS;
    case SIM_DIR_BWD_FILTER: return SIM_BWD_FILTER_ALGOS;
    }
    return 0;
}

int sim_conv_algo_deterministic(int dir, int algo)
{
    /* cuDNN docs, "Reproducibility": BWD_FILTER ALGO_0 and ALGO_3, BWD_DATA
     * ALGO_0 are not deterministic. */
    if (dir == SIM_DIR_BWD_FILTER)
        return !(algo == 0 || algo == 3);
    if (dir == SIM_DIR_BWD_DATA)
        return algo != 0;
    return 1;
}

static int unit_geom(const sim_conv_t *p)
{
    return p->str_h == 1 && p->str_w == 1 && p->dil_h == 1 && p->dil_w == 1 && p->groups == 1;
}

int sim_conv_algo_supported(int dir, int algo, const sim_conv_t *p)
{
    int R = p->w.h, S = p->w.w;
    int is3 = R == 3 && S == 3, is5 = R == 5 && S == 5;
    if (algo < 0 || algo >= sim_conv_algo_count(dir))
        return 0;
    switch (dir) {
    case SIM_DIR_FWD:
        switch (algo) {
        case 0: case 1: case 2: return 1;
        case 3: return 0; /* DIRECT: not implemented, as in cuDNN */
        case 4: case 5: return unit_geom(p) && R <= p->x.h + 2 * p->pad_h;
        case 6: return unit_geom(p) && is3;
        case 7: return unit_geom(p) && (is3 || is5);
        }
        break;
    case SIM_DIR_BWD_DATA:
        switch (algo) {
        case 0: case 1: return 1;
        case 2: case 3: return unit_geom(p);
        case 4: return unit_geom(p) && is3;
        case 5: return unit_geom(p) && (is3 || is5);
        }
        break;
    case SIM_DIR_BWD_FILTER:
        switch (algo) {
        case 0: case 1: case 3: return 1;
        case 2: case 6: return unit_geom(p);
        case 4: return 0; /* WINOGRAD: "not implemented" in cudnn_ops.h */
        case 5: return unit_geom(p) && is3;
        }
        break;
    }
    return 0;
}

size_t sim_conv_workspace(int dir, int algo, const sim_conv_t *p)
{
    size_t N = (size_t)p->x.n, C = (size_t)p->x.c, H = (size_t)p->x.h, W = (size_t)p->x.w;
    size_t K = (size_t)p->w.n, cpg = (size_t)p->w.c, R = (size_t)p->w.h, S = (size_t)p->w.w;
    size_t P = (size_t)p->y.h, Q = (size_t)p->y.w;
    size_t fft = (H + 2 * (size_t)p->pad_h + R) * (W + 2 * (size_t)p->pad_w + S);
    size_t tiles = ((P + 3) / 4) * ((Q + 3) / 4);
    switch (dir) {
    case SIM_DIR_FWD:
        switch (algo) {
        case 0: return 0;
        case 1: return sizeof(int) * cpg * R * S;
        case 2: return sizeof(float) * cpg * R * S * P * Q;
        case 4: return 8 * (N * C + K * cpg + N * K) * fft;
        case 5: return 8 * (C + K * cpg + K) * 32 * 32 * 4;
        case 6: return 0;
        case 7: return sizeof(float) * 36 * (N * C + K * C + N * K) * tiles;
        }
        break;
    case SIM_DIR_BWD_DATA:
        switch (algo) {
        case 0: case 1: return 0;
        case 2: return 8 * (N * C + K * cpg + N * K) * fft;
        case 3: return 8 * (K + K * cpg + C) * 32 * 32 * 4;
        case 4: return 0;
        case 5: return sizeof(float) * 36 * (N * C + K * C + N * K) * tiles;
        }
        break;
    case SIM_DIR_BWD_FILTER:
        switch (algo) {
        case 0: return 0;
        case 1: return sizeof(float) * K * cpg * R * S;
        case 2: return 8 * (N * C + K * cpg + N * K) * fft;
        case 3: return sizeof(float) * K * cpg * R * S * 4;
        case 5: return sizeof(float) * 36 * (N * C + K * C + N * K) * tiles;
        case 6: return 8 * (C + K * cpg + K) * 32 * 32 * 4;
        }
        break;
    }
    return 0;
}

/* Activations: cudnnActivationMode_t SIGMOID .. IDENTITY (0..5). */
int sim_act_supported(int mode)
{
    return mode >= 0 && mode <= 5;
}

/* ---- per-architecture orders -------------------------------------------------- */

/* The 7 accumulation schemes, in the order the rotation walks them. */
static const int schemes[7] = {SIM_RED_SEQ, SIM_RED_L4, SIM_RED_B8, SIM_RED_PAIR, SIM_RED_B16,
                               SIM_RED_REV, SIM_RED_L2};

/* 0..6 per architecture: t4 7.5, a100 8.0, a10 8.6, l4 8.9, h100/h200 9.0,
 * b200 10.0 (and 12.0) all distinct. */
static int arch_index(int arch)
{
    switch (arch) {
    case 100: return 0;
    case 120: return 1;
    case 75: return 2;
    case 80: return 3;
    case 86: return 4;
    case 89: return 5;
    case 90: return 6;
    }
    return arch < 0 ? 0 : arch % 7;
}

/* Per algorithm: product order (0: channel-major, 1: tap-major) and the
 * base index of its accumulation scheme (distinct per algorithm of a
 * direction, < 7). */
static const int fwd_order[SIM_FWD_ALGOS] = {0, 1, 0, 0, 0, 0, 1, 1};
static const int fwd_base[SIM_FWD_ALGOS] = {0, 1, 2, 0, 3, 4, 5, 6};
static const int bd_order[SIM_BWD_DATA_ALGOS] = {0, 0, 0, 0, 1, 1};
static const int bd_base[SIM_BWD_DATA_ALGOS] = {0, 0, 1, 2, 3, 4};
static const int bf_base[SIM_BWD_FILTER_ALGOS] = {0, 0, 1, 0, 0, 2, 3};

void sim_conv_fold_params(int dir, int algo, int arch, int *order, int *scheme)
{
    int base = 0;
    *order = 0;
    if (dir == SIM_DIR_FWD && algo >= 0 && algo < SIM_FWD_ALGOS) {
        *order = fwd_order[algo];
        base = fwd_base[algo];
    } else if (dir == SIM_DIR_BWD_DATA && algo >= 0 && algo < SIM_BWD_DATA_ALGOS) {
        *order = bd_order[algo];
        base = bd_base[algo];
    } else if (dir == SIM_DIR_BWD_FILTER && algo >= 0 && algo < SIM_BWD_FILTER_ALGOS) {
        base = bf_base[algo];
    }
    /* distinct algorithms stay distinct on one architecture, one algorithm
     * differs between architectures */
    *scheme = schemes[(base + arch_index(arch)) % 7];
}
