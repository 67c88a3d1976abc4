/* Loading of d2's portable kernels, once per context (see portable.h). */
#include "kernels/portable.h"
#include "shim/shim.h"

extern const unsigned char es_portable_fatbin[];

#define ES_MAX_CTX 64

static const char *const es_kernel_names[ES_K_COUNT] = {
    "es_gemm_portable", "es_conv_fwd_portable", "es_conv_bwd_data_portable",
    "es_conv_bwd_filter_portable", "es_bgrad_portable",
};

typedef struct es_portable_mod {
    CUcontext ctx;
    CUfunction fn[ES_K_COUNT];
} es_portable_mod_t;

static es_portable_mod_t es_mods[ES_MAX_CTX];
static int es_nmods;

CUfunction es_portable_function(int which)
{
    CUcontext ctx = NULL;
    CUfunction fn = NULL;
    if (which < 0 || which >= ES_K_COUNT || !es_lib_ready(ES_LIB_CUDA) ||
        ES_REAL(cuda, cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS || !ctx)
        return NULL;
    int n = __atomic_load_n(&es_nmods, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (es_mods[i].ctx == ctx)
            return es_mods[i].fn[which];
    pthread_mutex_lock(&es_state_lock);
    n = es_nmods;
    for (int i = 0; i < n; i++)
        if (es_mods[i].ctx == ctx)
            fn = es_mods[i].fn[which];
    if (!fn && n < ES_MAX_CTX) {
        CUmodule mod = NULL;
        es_portable_mod_t m = { ctx, { NULL } };
        CUresult r = ES_REAL(cuda, cuModuleLoadData)(&mod, es_portable_fatbin);
        for (int k = 0; r == CUDA_SUCCESS && k < ES_K_COUNT; k++)
            r = ES_REAL(cuda, cuModuleGetFunction)(&m.fn[k], mod, es_kernel_names[k]);
        if (r == CUDA_SUCCESS) {
            es_mods[n] = m;
            __atomic_store_n(&es_nmods, n + 1, __ATOMIC_RELEASE);
            fn = m.fn[which];
            ES_DEBUG("d2: portable kernels loaded in context %p", (void *)ctx);
        } else {
            if (mod)
                ES_REAL(cuda, cuModuleUnload)(mod);
            ES_WARN("d2: portable kernels not loadable (CUresult %d): vendor library used",
                    (int)r);
        }
    }
    pthread_mutex_unlock(&es_state_lock);
    return fn;
}
