/* Loading of d2's portable kernels, once per context (see portable.h). */
#include "kernels/portable.h"
#include "kernels/archcheck.h"
#include "shim/log.h"
#include "shim/real.h"

#include <stdint.h>

#define ES_MAX_CTX 64

static const char *const es_kernel_names[ES_K_COUNT] = {
    "es_gemm_tiled_l",           "es_gemm_tiled_s",
    "es_conv_fwd_tiled",         "es_conv_bwd_data_tiled",
    "es_conv_bwd_filter_tiled",  "es_bgrad_portable",
    "es_gemm_portable",          "es_conv_fwd_portable",
    "es_conv_bwd_data_portable", "es_conv_bwd_filter_portable",
    "es_gemm_int8",              "es_conv_fwd_int8",
    "es_conv_bwd_data_int8",     "es_conv_bwd_filter_int8",
};

typedef struct es_portable_mod {
    CUcontext ctx;
    CUfunction fn[ES_K_COUNT];
} es_portable_mod_t;

static es_portable_mod_t es_mods[ES_MAX_CTX];
static int es_nmods;
static CUcontext es_failed_ctx; /* the last context whose load failed (logged once) */

const char *es_portable_name(int which)
{
    return which >= 0 && which < ES_K_COUNT ? es_kernel_names[which] : NULL;
}

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
            if (es_failed_ctx != ctx)
                ES_ERROR("d2: the portable kernels do not load in context %p (CUresult %d): "
                         "the calls that need them fail (d2 never hands them to the vendor "
                         "libraries)", (void *)ctx, (int)r);
            es_failed_ctx = ctx;
        }
    }
    pthread_mutex_unlock(&es_state_lock);
    return fn;
}

/* The architectures of the fatbin, for the message. */
static void es_archs(char *buf, size_t len)
{
    static const int cand[] = { 75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121, 130 };
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(cand) / sizeof(cand[0]) && o < len; i++)
        if (es_image_runs_on(es_portable_fatbin, SIZE_MAX, cand[i] / 10, cand[i] % 10) == 1) {
            int w = snprintf(buf + o, len - o, "%s%d.%d", o ? " " : "", cand[i] / 10,
                             cand[i] % 10);
            o += w > 0 ? (size_t)w : 0;
        }
}

CUresult es_portable_startup_check(void)
{
    int count = 0;
    if (ES_REAL(cuda, cuDeviceGetCount)(&count) != CUDA_SUCCESS)
        return CUDA_SUCCESS; /* the application hears it from the driver */
    for (int d = 0; d < count; d++) {
        int ma = 0, mi = 0;
        if (ES_REAL(cuda, cuDeviceGetAttribute)(&ma, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                                 d) != CUDA_SUCCESS ||
            ES_REAL(cuda, cuDeviceGetAttribute)(&mi, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                                 d) != CUDA_SUCCESS)
            continue;
        if (es_image_runs_on(es_portable_fatbin, SIZE_MAX, ma, mi) != 1) {
            char archs[128];
            es_archs(archs, sizeof(archs));
            ES_ERROR("d2: device %d (compute capability %d.%d) cannot run the portable "
                     "kernels (built for %s): d2 cannot run on it; cuInit fails",
                     d, ma, mi, archs);
            return CUDA_ERROR_NO_BINARY_FOR_GPU;
        }
    }
    return CUDA_SUCCESS;
}
