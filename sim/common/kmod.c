/* Per-context modules of a simcuda library's kernels (see kmod.h). */
#include "sim/common/kmod.h"
#include "sim/common/simdrv.h"

#include <stddef.h>

CUresult sim_kmod_get(sim_kmods_t *t, CUcontext ctx, const sim_kmod_t **out)
{
    const simdrv_t *d = simdrv_get();
    CUresult r = CUDA_SUCCESS;
    sim_kmod_t *k = NULL, *spare = NULL;
    *out = NULL;
    if (!d)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (t->count < 1 || t->count > SIM_KMOD_MAX_FN)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < SIM_KMOD_MAX_CTX && !k; i++) {
        sim_kmod_t *s = &t->slot[i];
        CUfunction f;
        if (s->mod && s->ctx == ctx) {
            if (d->cuModuleGetFunction(&f, s->mod, t->names[0]) == CUDA_SUCCESS)
                k = s;
            else
                s->mod = NULL;
        }
        if (!spare && !s->mod)
            spare = s;
    }
    for (int i = 0; i < SIM_KMOD_MAX_CTX && !k && !spare; i++) {
        /* every slot taken: reuse one whose context is gone */
        CUfunction f;
        if (d->cuModuleGetFunction(&f, t->slot[i].mod, t->names[0]) != CUDA_SUCCESS)
            spare = &t->slot[i];
    }
    if (!k && !spare)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!k && spare) {
        CUmodule mod = NULL;
        r = d->cuModuleLoadData(&mod, t->image);
        for (int i = 0; i < t->count && r == CUDA_SUCCESS; i++)
            r = d->cuModuleGetFunction(&spare->fn[i], mod, t->names[i]);
        if (r == CUDA_SUCCESS) {
            spare->ctx = ctx;
            spare->mod = mod;
            k = spare;
        }
    }
    pthread_mutex_unlock(&t->mu);
    *out = k;
    return r;
}
