/* simcuda twins of cuBLASLt's kernels (sim/cublaslt/kernels.cu): every
 * thread of the launch runs the same body (lt_kernels.h) on the CPU.
 * Built with -ffp-contract=off (the bodies' order is the one written). */
#include "sim/cublaslt/lt_kernels.h"
#include "sim/include/simcuda_twin.h"

#define TWIN __attribute__((visibility("default")))

typedef void (*body2_fn)(const lt_args_t *, long long, long long, long long);

static int grid2(const simcuda_launch_t *l, body2_fn body)
{
    if (l->abi != SIMCUDA_TWIN_ABI || l->block[0] != LT_TILE || l->block[1] != LT_TILE)
        return 1;
    const lt_args_t *a = l->params[0];
    long long im = (long long)l->grid[0] * LT_TILE, jm = (long long)l->grid[1] * LT_TILE;
    for (long long z = 0; z < l->grid[2]; z++)
        for (long long j = 0; j < jm && j < a->n; j++)
            for (long long i = 0; i < im && i < a->m; i++)
                body(a, i, j, z);
    return 0;
}

TWIN int simcuda_twin_simlt_gemm(const simcuda_launch_t *l)
{
    return grid2(l, lt_gemm_thread);
}

TWIN int simcuda_twin_simlt_reduce(const simcuda_launch_t *l)
{
    return grid2(l, lt_reduce_thread);
}

TWIN int simcuda_twin_simlt_bgrad(const simcuda_launch_t *l)
{
    if (l->abi != SIMCUDA_TWIN_ABI)
        return 1;
    const lt_args_t *a = l->params[0];
    long long len = (a->epi & LT_EPI_BGRADA) ? a->m : a->n;
    long long end = (long long)l->grid[0] * l->block[0];
    for (long long b = 0; b < l->grid[1]; b++)
        for (long long x = 0; x < end && x < len; x++)
            lt_bgrad_thread(a, x, b);
    return 0;
}
