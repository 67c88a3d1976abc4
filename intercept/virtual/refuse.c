/* Driver functions that take a handle the shim makes virtual but that
 * shim/funcs.h does not wrap (docs/MOVING.md, section 4): the list is
 * generated from cuda.h (scripts/cuda-handle-fns); while handles are
 * virtual, cuGetProcAddress and dlsym answer such a name with a stub that
 * refuses the call (CUDA_ERROR_NOT_SUPPORTED, logged once per name)
 * instead of the driver's function, which would misread the handles. */
#include "intercept/virtual/refuse.h"
#include "shim/hooks.h"
#include "shim/log.h"
#include "move/vhandle.h"
#include "cuda_handle_fns.h"

#include <string.h>

/* One stub per function: it knows its name for the log. The stubs take no
 * parameters: the caller's arguments are ignored (every one of these
 * functions returns a CUresult in the same register). */
#define ES_STUB(sym, base)                                                     \
    static CUresult es_refuse_##sym(void)                                      \
    {                                                                          \
        static int said;                                                       \
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))                  \
            ES_WARN("%s takes a handle the shim makes virtual and is not wrapped: " \
                    "refused with CUDA_ERROR_NOT_SUPPORTED (EASYSCALE_MOVE=off "  \
                    "passes it through)", #sym);                               \
        return CUDA_ERROR_NOT_SUPPORTED;                                       \
    }
ES_CUDA_HANDLE_FNS(ES_STUB)
#undef ES_STUB

typedef struct es_refusal {
    const char *sym, *base;
    void *stub;
} es_refusal_t;

#define ES_ROW(sym, base) { #sym, base, (void *)es_refuse_##sym },
static const es_refusal_t es_refusals[] = { ES_CUDA_HANDLE_FNS(ES_ROW) };
#undef ES_ROW

#define ES_NREFUSALS (sizeof(es_refusals) / sizeof(es_refusals[0]))

/* Own comparison: reached from dlsym, possibly before a sanitizer's
 * interceptors are ready. */
__attribute__((no_sanitize("address", "undefined"))) static int es_eq(const char *a,
                                                                    const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

__attribute__((no_sanitize("address", "undefined"))) void *es_refusal_by_symbol(const char *name)
{
    if (!es_vh_on || !name || name[0] != 'c' || name[1] != 'u')
        return NULL;
    for (size_t i = 0; i < ES_NREFUSALS; i++)
        if (es_eq(es_refusals[i].sym, name))
            return es_refusals[i].stub;
    return NULL;
}

void *es_refusal_by_base(const char *base)
{
    if (!es_vh_on || !base)
        return NULL;
    for (size_t i = 0; i < ES_NREFUSALS; i++)
        if (strcmp(es_refusals[i].base, base) == 0)
            return es_refusals[i].stub;
    return NULL;
}
