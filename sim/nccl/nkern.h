/* simcuda NCCL: what the library (C) and its kernels (sim/nccl/kernels.cu,
 * nvcc or the host compiler) share: kernel names, parameter blocks, and
 * the element fold order of a collective (simnccl_segment, also the
 * reference engine's, reduce.c). Common subset of C and C++; no atomics. */
#ifndef SIM_NCCL_NKERN_H
#define SIM_NCCL_NKERN_H

#include "sim/cucpu/hd.h"

#include <stdint.h>

#define SIMNCCL_KERNELS(X)                                                     \
    X(SIMNCCL_K_COPY, "simnccl_copy")                                          \
    X(SIMNCCL_K_REDUCE, "simnccl_reduce")

#define SIMNCCL_K_ENUM(id, name) id,
enum { SIMNCCL_KERNELS(SIMNCCL_K_ENUM) SIMNCCL_K_COUNT };
#undef SIMNCCL_K_ENUM

#define SIMNCCL_MAX_RANKS 64
#define SIMNCCL_THREADS 256
/* Bytes one thread of simnccl_copy moves; elements one thread of
 * simnccl_reduce folds. */
#define SIMNCCL_COPY_CHUNK 4096
#define SIMNCCL_RED_TILE 1024
/* Copies of one launch: one per rank and two more. */
#define SIMNCCL_MAX_SEGS (SIMNCCL_MAX_RANKS + 2)

#ifdef __cplusplus
#define SIMNCCL_LAYOUT(cond, msg) static_assert(cond, msg)
#else
#define SIMNCCL_LAYOUT(cond, msg) _Static_assert(cond, msg)
#endif

typedef struct simnccl_seg {
    const void *src;
    void *dst;
    uint64_t bytes;
} simnccl_seg_t;

/* simnccl_copy: n byte copies (non-overlapping). */
typedef struct simnccl_copy_kp {
    uint64_t n;
    simnccl_seg_t seg[SIMNCCL_MAX_SEGS];
} simnccl_copy_kp_t;
SIMNCCL_LAYOUT(sizeof(simnccl_copy_kp_t) == 8 + 24 * SIMNCCL_MAX_SEGS, "simnccl_copy_kp_t layout");

/* simnccl_reduce: elements [e0, e1) of a collective's index space. Rank r's
 * element e is at in[r] + (e - base_e) elements; each element folds the
 * ranks in the plan's order (simnccl_segment over the plan fields, ring
 * position -> rank by ring[]), results to out (element e0 first) and, unless
 * NULL, out2. dtype: ncclDataType_t; op: SIM_OP_* of simnccl.h. */
typedef struct simnccl_red_kp {
    const void *in[SIMNCCL_MAX_RANKS];
    void *out, *out2;
    uint64_t e0, e1, base_e;
    uint64_t count, chunk, align, chan_elems, block;
    int32_t kind, nranks, algo, root_pos, dtype, op, pad[2];
    int32_t ring[SIMNCCL_MAX_RANKS], pos[SIMNCCL_MAX_RANKS];
} simnccl_red_kp_t;
SIMNCCL_LAYOUT(sizeof(simnccl_red_kp_t) == 8 * SIMNCCL_MAX_RANKS + 16 + 64 + 32 + 8 * SIMNCCL_MAX_RANKS,
               "simnccl_red_kp_t layout");

/* Collective kinds and algorithms (simnccl.h's SIM_COLL_* / SIM_ALGO_*). */
enum { SIMNCCL_ALLREDUCE = 0, SIMNCCL_BROADCAST, SIMNCCL_REDUCE, SIMNCCL_ALLGATHER,
       SIMNCCL_REDUCESCATTER };
enum { SIMNCCL_RING = 0, SIMNCCL_TREE = 1 };

/* For element e (e < count) of the reduced index space: the first ring
 * position of its fold, the direction (+1/-1), and the end (exclusive) of
 * the run of elements from e that share that order (simnccl.h explains
 * the rules). pos_of: rank -> ring position (reduce-scatter only). */
CUCPU_HD void simnccl_segment(int kind, int n, int algo, int root_pos, uint64_t count,
                              uint64_t chunk, uint64_t align, uint64_t chan_elems, uint64_t block,
                              const int32_t *pos_of, uint64_t e, int *start, int *dir,
                              uint64_t *end)
{
    *dir = 1;
    *end = count;
    if (n <= 1) {
        *start = 0;
        return;
    }
    if (kind == SIMNCCL_REDUCE) {
        *start = (root_pos + 1) % n;
        return;
    }
    if (kind == SIMNCCL_REDUCESCATTER) {
        uint64_t d = e / block; /* rank d's output block */
        *start = (pos_of[d] + 1) % n;
        *end = (d + 1) * block;
        return;
    }
    if (algo == SIMNCCL_TREE) {
        *start = n - 1;
        *dir = -1;
        return;
    }
    /* Ring allreduce. */
    uint64_t ch = e / chan_elems;
    uint64_t lo = ch * chan_elems;
    uint64_t hi = lo + chan_elems < count ? lo + chan_elems : count;
    uint64_t off = e - lo, len = hi - lo;
    uint64_t loop = (uint64_t)n * chunk;
    uint64_t nfull = len / loop;
    uint64_t loop_lo, rc;
    if (off < nfull * loop) {
        loop_lo = lo + (off / loop) * loop;
        rc = chunk;
    } else {
        loop_lo = lo + nfull * loop;
        uint64_t rest = len - nfull * loop;
        rc = (rest + (uint64_t)n - 1) / (uint64_t)n;
        rc = (rc + align - 1) / align * align;
    }
    uint64_t j = (e - loop_lo) / rc;
    uint64_t seg_end = loop_lo + (j + 1) * rc;
    *end = seg_end < hi ? seg_end : hi;
    *start = (int)((j + 1) % (uint64_t)n);
}

#endif
