/* simcuda twin of the collectives' reduction kernel (kernels/reduce.cu):
 * the same element arithmetic over the whole launch (es_red_cpu_range). Built
 * with -ffp-contract=off. */
#include "kernels/reduce_kernels.h"
#include "sim/include/simcuda_twin.h"

#define ES_TWIN __attribute__((visibility("default")))

ES_TWIN int simcuda_twin_es_coll_reduce(const simcuda_launch_t *l)
{
    if (l->abi != SIMCUDA_TWIN_ABI || l->block[0] != ES_RED_BLOCK)
        return 1;
    const es_red_args_t *a = l->params[0];
    if (a->nin < 1 || a->nin > ES_RED_MAX_IN || a->dtype < 0 || a->dtype >= ES_RT_COUNT)
        return 1;
    es_u64 s = a->op == ES_RO_PREMUL ? es_red_scalar(a) : 0;
    es_red_cpu_range(a, s, 0, a->count);
    return 0;
}
