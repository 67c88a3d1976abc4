/* simcuda twins of d2's portable kernels (kernels/portable.cu): the same
 * element functions (kernels/portable_kernels.h) over the whole launch.
 * Built with -ffp-contract=off. */
#include "kernels/portable_kernels.h"
#include "sim/include/simcuda_twin.h"

#define ES_TWIN __attribute__((visibility("default")))

ES_TWIN int simcuda_twin_es_gemm_portable(const simcuda_launch_t *l)
{
    if (l->abi != SIMCUDA_TWIN_ABI || l->block[0] != ES_GEMM_TILE ||
        l->block[1] != ES_GEMM_TILE)
        return 1;
    const es_gemm_args_t *a = l->params[0];
    long long im = (long long)l->grid[0] * ES_GEMM_TILE, jm = (long long)l->grid[1] * ES_GEMM_TILE;
    for (long long b = 0; b < l->grid[2]; b++)
        for (long long j = 0; j < jm && j < a->n; j++)
            for (long long i = 0; i < im && i < a->m; i++)
                es_gemm_elem(a, i, j, b);
    return 0;
}

#define ES_CONV_TWIN(name, elem)                                                       \
    ES_TWIN int simcuda_twin_##name(const simcuda_launch_t *l)                         \
    {                                                                                  \
        if (l->abi != SIMCUDA_TWIN_ABI)                                                \
            return 1;                                                                  \
        const es_conv_args_t *a = l->params[0];                                        \
        long long end = (long long)l->grid[0] * l->block[0];                           \
        for (long long i = 0; i < end && i < a->total; i++)                            \
            elem(a, i);                                                                \
        return 0;                                                                      \
    }
ES_CONV_TWIN(es_conv_fwd_portable, es_conv_fwd_elem)
ES_CONV_TWIN(es_conv_bwd_data_portable, es_conv_bwd_data_elem)
ES_CONV_TWIN(es_conv_bwd_filter_portable, es_conv_bwd_filter_elem)

ES_TWIN int simcuda_twin_es_bgrad_portable(const simcuda_launch_t *l)
{
    if (l->abi != SIMCUDA_TWIN_ABI)
        return 1;
    const es_bgrad_args_t *a = l->params[0];
    long long end = (long long)l->grid[0] * l->block[0];
    for (long long b = 0; b < l->grid[1]; b++)
        for (long long x = 0; x < end && x < a->len; x++)
            es_bgrad_elem(a, x, b);
    return 0;
}
