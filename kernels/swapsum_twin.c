/* simcuda twin of the swap engine's checksum kernel (kernels/swapsum.cu):
 * the same element functions (kernels/swapsum.h) over the whole launch. */
#include "kernels/swapsum.h"
#include "sim/include/simcuda_twin.h"

__attribute__((visibility("default"))) int simcuda_twin_es_swapsum(const simcuda_launch_t *l)
{
    if (l->abi != SIMCUDA_TWIN_ABI || l->block[0] != ES_SWAPSUM_THREADS || l->block[1] != 1 ||
        l->block[2] != 1)
        return 1;
    const es_swapsum_args_t *a = l->params[0];
    for (es_u64 c = 0; c < l->grid[0] && c < a->nchunks; c++)
        a->out[c] = es_ss_chunk(a->data + c * (ES_SWAPSUM_CHUNK / 8));
    return 0;
}
