/* The real driver functions of move/ (see drv.h): one table filled by
 * exact symbol from a handle of the driver, with a failing stub for every
 * symbol the driver lacks. */
#include "move/drv.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#pragma GCC diagnostic ignored "-Wunused-parameter"

/* One stub per function, so the table keeps its types: it returns
 * CUDA_ERROR_NOT_FOUND whatever the arguments. */
#define ES_DRV_STUB(sym)                                                       \
    static CUresult es_drv_missing_##sym() { return CUDA_ERROR_NOT_FOUND; }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#pragma GCC diagnostic ignored "-Wold-style-definition"
ES_DRV_FUNCS(ES_DRV_STUB)
#pragma GCC diagnostic pop
#undef ES_DRV_STUB

#define ES_DRV_INIT(sym) .sym = (__typeof__(sym) *)(void *)es_drv_missing_##sym,
es_drv_t es_drv = { ES_DRV_FUNCS(ES_DRV_INIT) };
#undef ES_DRV_INIT

static int es_drv_loaded;

int es_drv_load(void *handle, void *(*lookup)(void *, const char *))
{
    int missing = 0;
    if (!handle || !lookup)
        return -EINVAL;
#define ES_DRV_LOOK(sym)                                                       \
    do {                                                                       \
        void *p = lookup(handle, #sym);                                        \
        if (p)                                                                 \
            memcpy(&es_drv.sym, &p, sizeof(p));                                \
        else                                                                   \
            missing++;                                                         \
    } while (0);
    ES_DRV_FUNCS(ES_DRV_LOOK)
#undef ES_DRV_LOOK
    __atomic_store_n(&es_drv_loaded, 1, __ATOMIC_RELEASE);
    return missing ? -ENOENT : 0;
}

int es_drv_ready(void)
{
    return __atomic_load_n(&es_drv_loaded, __ATOMIC_ACQUIRE);
}

const char *es_drv_errname(CUresult r)
{
    const char *s = NULL;
    if (es_drv.cuGetErrorName(r, &s) != CUDA_SUCCESS || !s) {
        static __thread char buf[32];
        snprintf(buf, sizeof(buf), "CUresult %d", (int)r);
        return buf;
    }
    return s;
}
