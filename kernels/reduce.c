/* Loading and launching the collectives' reduction kernel (see reduce.h).
 * The table of contexts is append-only and read without a lock. */
#include "kernels/reduce.h"
#include "shim/log.h"
#include "shim/real.h"

#include <errno.h>

extern const unsigned char es_reduce_fatbin[];

#define ES_RED_MAX_CTX 64
#define ES_RED_MAX_GRID 1024

typedef struct es_red_mod {
    CUcontext ctx;
    CUfunction fn;   /* NULL: the module did not load in this context */
} es_red_mod_t;

static es_red_mod_t es_red_mods[ES_RED_MAX_CTX];
static int es_red_nmods;

static CUfunction es_reduce_function(void)
{
    CUcontext ctx = NULL;
    CUfunction fn = NULL;
    if (!es_lib_ready(ES_LIB_CUDA) || ES_REAL(cuda, cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS ||
        !ctx)
        return NULL;
    int n = __atomic_load_n(&es_red_nmods, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (es_red_mods[i].ctx == ctx)
            return es_red_mods[i].fn;
    pthread_mutex_lock(&es_state_lock);
    n = es_red_nmods;
    int found = 0;
    for (int i = 0; i < n; i++)
        if (es_red_mods[i].ctx == ctx) {
            fn = es_red_mods[i].fn;
            found = 1;
        }
    if (!found && n < ES_RED_MAX_CTX) {
        CUmodule mod = NULL;
        CUresult r = ES_REAL(cuda, cuModuleLoadData)(&mod, es_reduce_fatbin);
        if (r == CUDA_SUCCESS)
            r = ES_REAL(cuda, cuModuleGetFunction)(&fn, mod, "es_coll_reduce");
        if (r != CUDA_SUCCESS) {
            if (mod)
                ES_REAL(cuda, cuModuleUnload)(mod);
            fn = NULL;
            ES_WARN("collectives: reduction kernel not loadable in context %p (CUresult %d)",
                    (void *)ctx, (int)r);
        }
        es_red_mods[n] = (es_red_mod_t){ ctx, fn };
        __atomic_store_n(&es_red_nmods, n + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&es_state_lock);
    return fn;
}

int es_reduce_ready(void)
{
    return es_reduce_function() ? 0 : -ENXIO;
}

CUresult es_reduce_launch(const es_red_args_t *a, CUstream s)
{
    CUfunction fn = es_reduce_function();
    if (!fn)
        return CUDA_ERROR_NOT_FOUND;
    if (a->count == 0)
        return CUDA_SUCCESS;
    unsigned long long tile = (unsigned long long)ES_RED_BLOCK * ES_RED_PER_THREAD * ES_RED_VEC;
    unsigned long long blocks = (a->count + tile - 1) / tile;
    unsigned grid = blocks > ES_RED_MAX_GRID ? ES_RED_MAX_GRID : (unsigned)blocks;
    es_red_args_t copy = *a;
    void *params[] = { &copy };
    /* The driver copies the arguments at the launch. */
    return ES_REAL(cuda, cuLaunchKernel)(fn, grid, 1, 1, ES_RED_BLOCK, 1, 1, 0, s, params, NULL);
}
