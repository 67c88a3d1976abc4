/* Loading and launching the digest hash kernel (see digest.h). The table
 * of contexts is append-only and read without a lock. */
#include "kernels/digest.h"
#include "kernels/digest_kernel.h"
#include "shim/log.h"
#include "shim/real.h"

#include <errno.h>

extern const unsigned char es_digest_fatbin[];

#define ES_DG_MAX_CTX 64

typedef struct es_dg_mod {
    CUcontext ctx;
    CUfunction fn; /* NULL: the module did not load in this context */
} es_dg_mod_t;

static es_dg_mod_t es_dg_mods[ES_DG_MAX_CTX];
static int es_dg_nmods;

static CUfunction es_dg_function(void)
{
    CUcontext ctx = NULL;
    CUfunction fn = NULL;
    if (!es_lib_ready(ES_LIB_CUDA) || ES_REAL(cuda, cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS ||
        !ctx)
        return NULL;
    int n = __atomic_load_n(&es_dg_nmods, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (es_dg_mods[i].ctx == ctx)
            return es_dg_mods[i].fn;
    pthread_mutex_lock(&es_state_lock);
    n = es_dg_nmods;
    int found = 0;
    for (int i = 0; i < n; i++)
        if (es_dg_mods[i].ctx == ctx) {
            fn = es_dg_mods[i].fn;
            found = 1;
        }
    if (!found && n < ES_DG_MAX_CTX) {
        CUmodule mod = NULL;
        CUresult r = ES_REAL(cuda, cuModuleLoadData)(&mod, es_digest_fatbin);
        if (r == CUDA_SUCCESS)
            r = ES_REAL(cuda, cuModuleGetFunction)(&fn, mod, "es_digest_hash");
        if (r != CUDA_SUCCESS) {
            if (mod)
                ES_REAL(cuda, cuModuleUnload)(mod);
            fn = NULL;
            ES_WARN("digest: hash kernel not loadable in context %p (CUresult %d)", (void *)ctx,
                    (int)r);
        }
        es_dg_mods[n] = (es_dg_mod_t){ ctx, fn };
        __atomic_store_n(&es_dg_nmods, n + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&es_state_lock);
    return fn;
}

int es_digest_kernel_ready(void)
{
    return es_dg_function() ? 0 : -ENXIO;
}

CUresult es_digest_kernel_launch(CUdeviceptr p, size_t nbytes, CUdeviceptr out, CUstream s)
{
    CUfunction fn = es_dg_function();
    if (!fn)
        return CUDA_ERROR_NOT_FOUND;
    unsigned long long words = ((unsigned long long)nbytes + 7) / 8;
    unsigned long long blocks = (words + ES_DG_BLOCK - 1) / ES_DG_BLOCK;
    unsigned grid = blocks == 0 ? 1 : blocks > ES_DG_MAX_GRID ? ES_DG_MAX_GRID : (unsigned)blocks;
    /* the kernel's pointer parameters are device addresses: passed as
     * such (8 bytes each), never as host pointers */
    unsigned long long nb = nbytes;
    void *params[] = { &p, &nb, &out };
    return ES_REAL(cuda, cuLaunchKernel)(fn, grid, 1, 1, ES_DG_BLOCK, 1, 1, 0, s, params, NULL);
}
