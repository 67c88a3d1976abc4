/* Translating pass-through wrappers of every cuBLAS, cuBLASLt and cuDNN
 * function that takes a library handle and that shim/funcs.h does not
 * list (the list is generated from NVIDIA's headers by
 * scripts/vendor-handle-fns, never kept by hand; intercept/virtual/libh.h): the
 * door, the handle translated (es_libh_real: one load, no lock), then the
 * library's own function, looked up by name in the library the first time
 * (a function the library lacks: its not-initialized status). So a virtual
 * handle never reaches a vendor function untranslated, whichever of them
 * the application calls, directly or through dlsym. */
#include "shim/hooks.h"
#include "intercept/enter.h"
#include "shim/real.h"
#include "intercept/virtual/thunks.h"
#include "vendor_handle_fns.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define ES_GX_ERR_CUBLAS CUBLAS_STATUS_NOT_INITIALIZED
#define ES_GX_ERR_CUBLASLT CUBLAS_STATUS_NOT_INITIALIZED
#define ES_GX_ERR_CUDNN CUDNN_STATUS_NOT_INITIALIZED

#define ES_GX(lib, sym, ret, params, args)                                                    \
    static ret(*es_gx_##sym) params;                                                          \
    __attribute__((noinline, cold)) static ret es_gx_slow_##sym params                        \
    {                                                                                         \
        void *p = es_lib_sym(ES_LIB_##lib, #sym);                                             \
        if (!p)                                                                               \
            return ES_GX_ERR_##lib;                                                           \
        ret(*f_) params;                                                                      \
        memcpy(&f_, &p, sizeof(f_));                                                          \
        __atomic_store_n(&es_gx_##sym, f_, __ATOMIC_RELEASE);                                 \
        return f_ ES_VA_CALL args;                                                            \
    }                                                                                         \
    ES_EXPORT ret sym params                                                                  \
    {                                                                                         \
        __attribute__((cleanup(es_door_guard_leave))) int g_ = es_door_enter();               \
        if (__builtin_expect(g_, 0))                                                          \
            es_door_slow();                                                                   \
        ret(*f_) params = __atomic_load_n(&es_gx_##sym, __ATOMIC_ACQUIRE);                    \
        if (__builtin_expect(!f_, 0))                                                         \
            return es_gx_slow_##sym ES_VA_NAMES args;                                         \
        return f_ ES_VA_CALL args;                                                            \
    }
ES_VENDOR_HANDLE_FNS(ES_GX)

/* ---- dlsym's answers ----------------------------------------------------------------- */

typedef struct es_gx_name {
    const char *name;
    void *wrapper;
    int lib;
} es_gx_name_t;

#define ES_GX_ENT(lib, sym, ret, params, args) { #sym, (void *)sym, ES_LIB_##lib },
static es_gx_name_t es_gx_names[] = { ES_VENDOR_HANDLE_FNS(ES_GX_ENT) };
#define ES_GX_N (sizeof(es_gx_names) / sizeof(es_gx_names[0]))

static int es_gx_cmp(const void *a, const void *b)
{
    return strcmp(((const es_gx_name_t *)a)->name, ((const es_gx_name_t *)b)->name);
}

static pthread_once_t es_gx_once = PTHREAD_ONCE_INIT;

static void es_gx_sort(void)
{
    qsort(es_gx_names, ES_GX_N, sizeof(es_gx_names[0]), es_gx_cmp);
}

void *es_libh_wrapper_by_symbol(void *handle, const char *name)
{
    if (!es_libh_on || !name)
        return NULL;
    pthread_once(&es_gx_once, es_gx_sort);
    es_gx_name_t key = { name, NULL, 0 };
    const es_gx_name_t *e = bsearch(&key, es_gx_names, ES_GX_N, sizeof(key), es_gx_cmp);
    /* answered as without the shim when the library lacks the function */
    void *real = e ? es_lib_sym(e->lib, name) : NULL;
    if (!real)
        return NULL;
    /* a specific object's function of that name that is not the one the
     * wrapper calls (a library's dispatcher asking one of its parts) is
     * that object's: the wrapper would call the dispatcher, which would
     * call the wrapper */
    if (handle != RTLD_DEFAULT && handle != RTLD_NEXT && es_dlsym_real(handle, name) != real)
        return NULL;
    return e->wrapper;
}
